"""DeepSeek-V3's own pre-training (the DeepSeek-V3 Technical Report, arXiv:2412.19437): FP8 blockwise on 2,048 H800s,
held out; its step time is an upper bound from the report's GPU hours per trillion tokens (benchmarks/fp8_deepseek.py;
docs/precision.md pins the figures, which this test pins to the benchmark)."""

from __future__ import annotations

import pytest

from hp_core import api

from mbridge_rows import fp8_data, precision_prose
from repo_script import load_script  # tests/repo_script.py


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/fp8_deepseek.py")


@pytest.fixture(scope="module")
def found(bench):
    return bench.results(api.build_registry())


def test_the_row_is_the_reports_run():
    data = fp8_data()
    (row,) = data["deepseek_v3_report_rows"]
    source = data["sources"][row["source"]]
    assert "arXiv:2412.19437" in source and "180K H800 GPU hours" in source and "2,664K" in source
    assert (row["hardware"], row["gpus"], row["recipe"], row["split"]) == ("h800", 2048, "fp8-blockwise", "held_out")
    # Section 3.2: PP 16, EP 64 over 8 nodes, ZeRO-1 DP (128 ranks), no TP; DualPipe; Section 4.2: 15,360 x 4,096.
    assert (row["tp"], row["pp"], row["cp"], row["vpp"], row["ep"], row["schedule"]) == (1, 16, 1, 1, 64, "dualpipe")
    assert (row["global_batch_size"], row["seq_len"]) == (15360, 4096)
    # Every micro-batch size DualPipe admits: at least 2 x 16 micro-batches of the 120 sequences a DP rank takes.
    per_rank = row["global_batch_size"] // (row["gpus"] // row["pp"])
    assert per_rank == 120 and row["micro_batch_sizes"] == [m for m in range(1, per_rank + 1) if per_rank // m >= 2 * row["pp"] and per_rank % m == 0]
    # 61 decoder layers over 16 chunks; Section 3.2.3's and 3.3.2's recomputes; BF16 AdamW moments (Section 3.3.3).
    assert sum(row["layers_per_stage"]) == 61 and len(row["layers_per_stage"]) == 16
    assert row["recompute_modules"] == ["layernorm", "mla_up_proj", "moe_act"] and row["precision"] == {"moment_bytes": 2}


def test_the_bound_is_the_reports_gpu_hours(bench):
    (row,) = bench.rows()
    # 180,000 h x 3,600 s / 1e12 tokens = 6.48e-4 GPU-seconds a token; x 15,360 x 4,096 tokens / 2,048 GPUs.
    assert bench.measured_seconds(row) == pytest.approx(6.48e-4 * 15360 * 4096 / 2048, rel=1e-12)
    assert bench.measured_seconds(row) == pytest.approx(19.9066, abs=1e-4)
    # The report's own arithmetic: 2,664K GPU hours over 14.8T tokens is the 180K a trillion it states.
    assert 2664e3 / 14.8 == pytest.approx(180e3)


def test_hp_is_below_the_bound_and_the_peak_above_the_device(found):
    assert [r["micro_batch_size"] for r in found] == [1, 2, 3]
    seconds = [r["estimated_seconds"] for r in found]
    assert seconds == sorted(seconds)  # more tokens a micro-batch, fewer micro-batches: a longer DualPipe bubble
    for r in found:
        assert -0.25 < r["error"] < 0  # hp under the upper bound
        assert r["peak_bytes"] > r["memory_bytes"]  # hp's busiest rank does not fit the 80 GB H800 (docs/precision.md)


def test_the_page_states_the_benchmarks_figures(found):
    prose = precision_prose()
    errors = ", ".join(f"{r['error']:+.1%}" for r in found)
    peaks = ", ".join(f"{r['peak_bytes'] / 2**30:.1f}" for r in found)
    assert f"hp {errors} at micro-batches 1, 2 and 3" in prose
    assert f"busiest rank's peak {peaks} GiB" in prose
    assert f"hp counts {found[0]['flops_per_token'] / 1e9:.1f} GFLOP a token" in prose
