"""DeepSeek-V3 671B on GB300 in tests/plugins/data/fp8_measured_runs.json (torchtitan_gb300_rows): the layout of torchtitan's
NVFP4 page's BF16 control by hand, its step time from torchtitan's per-device tps, its memory checked absolute, the arms
left out (pytorch/ao#4798's, which state no layout; the page's quantized arms, which no hp recipe states), and
docs/precision.md's table and prose as benchmarks/fp8_runs.py prints them today."""

from __future__ import annotations


import pytest

from hp_core.errors import ConfigError
from mbridge_rows import ROOT  # tests/plugins/mbridge_rows.py
from mbridge_rows import fp8_data as _data
from mbridge_rows import fp8_runs as _module
from mbridge_rows import precision_prose as _prose

ROW_ID = "tt-dsv3-671b-gb300-bf16-mlperf"


def test_the_row_states_the_page_s_layout_and_its_provenance():
    data = _data()
    (row,) = data["torchtitan_gb300_rows"]
    assert row["id"] == ROW_ID and row["split"] == "held_out" and row["recipe"] == "bf16"
    assert row["source"] == "torchtitan-nvfp4-md-dsv3-mlperf" and row["source"] in data["sources"]
    assert (row["hardware"], row["runtime"], row["gpus"]) == ("gb300", "fsdp2", 16 * 4)
    lay = row["layout"]
    # data_parallel_shard_degree -1 = 64 / (tp 1 x pp 1 x cp 1); the expert mesh 64 / ep 32 = 2 ranks of expert FSDP.
    assert (lay["dp"], lay["tp"], lay["pp"], lay["cp"], lay["ep"], lay["etp"]) == (64 // (1 * 1 * 1), 1, 1, 1, 32, 1)
    assert lay["dp"] // lay["ep"] == 2
    # Local batch 8 of 4,096, gradient accumulation 30: 15,360 sequences = 8 x 64 x 30, 62.9M tokens a step.
    assert (lay["micro_batch_size"], lay["seq_len"], lay["global_batch_size"]) == (8, 4096, 8 * 64 * 30)
    assert lay["global_batch_size"] * lay["seq_len"] == 62_914_560
    assert "reshard_after_forward" not in lay  # pp 1: torchtitan's default reshards after forward, as fsdp2 does
    assert row["recompute"] == "full" and row["options"]["ep_all_to_all"] == "hybridep"
    assert row["options"]["moe_gate"] == "learned"  # real routing (force_load_balance false)
    assert row["model"]["overrides"] == {"num_nextn_predict_layers": 0}
    assert row["substitutions"] == {"attention_kernel": {"ran": "flex", "priced": "sdpa",
                                                         "why": row["substitutions"]["attention_kernel"]["why"]}}
    assert row["measured"] == {"tps_per_gpu": 2198, "tflops_per_gpu_median": 618.06, "memory_gib": 227.26}
    assert "2,198" in row["row"] and "227.26 GiB" in row["row"] and "618.06" in row["row"]
    assert any("real routing" in n and "0.0375" in n for n in row["not_priced"])
    assert any("document" in n and "FlexAttention" in n for n in row["not_priced"])
    assert "pytorch-ao-pr-4798" in data["sources"] and "https://github.com/pytorch/ao/pull/4798" in data["sources"]["pytorch-ao-pr-4798"]


def test_every_arm_left_out_says_why():
    skipped = _data()["torchtitan_gb300_rows_skipped"]
    assert len(skipped) == 6 and all(s["row"] and s["why"] for s in skipped)
    comment = [s for s in skipped if s["row"].startswith("pytorch/ao#4798 comment")]
    assert [s["row"].split(", ")[1].split(":")[0] for s in comment] == ["Experiment 2", "Experiment 3", "Experiment 1"]
    assert "131,072" in comment[0]["row"] and "nothing to price" in comment[0]["why"] and "no hp recipe" in comment[0]["why"]
    assert all("no hp recipe states it" in s["why"] and "not approximated" in s["why"] for s in skipped[-2:])


def test_step_time_is_torchtitan_s_per_device_tps_and_memory_is_absolute(registry):
    """torchtitan's tps: a data-parallel rank's tokens (local batch 8 x 30 micro-batches x 4,096) over the step and
    tp x pp x cp = 1; the memory row is the page's peak reserved against hp's reserved bytes, not scaled by a baseline."""
    runs = _module()
    (found,) = runs.torchtitan_gb300_results(registry)
    assert found["measured_seconds"] == pytest.approx(8 * 30 * 4096 / 2198, rel=1e-12)
    assert found["measured_seconds"] == pytest.approx(447.2429, abs=1e-4)
    assert found["error"] == pytest.approx(found["estimated_seconds"] / found["measured_seconds"] - 1, rel=1e-12)
    row = _data()["torchtitan_gb300_rows"][0]
    sc = runs._scale_cases()
    stage = sc.memory_estimated(runs._substituted(row), registry)
    assert found["estimated_gib"] == pytest.approx(stage.reserved_bytes / 2**30, rel=1e-12)
    assert found["memory_error"] == pytest.approx(found["estimated_gib"] / 227.26 - 1, rel=1e-12)
    # FlexAttention is refused on the gb300 preset: the reason the row carries a substitution.
    with pytest.raises(ConfigError, match="attention_kernel=flex"):
        runs._torchtitan_dsv3_priced(dict(row, substitutions={}), registry, "bf16")


def test_the_page_table_is_current_and_its_prose_states_its_figures():
    runs = _module()
    (found,) = runs.torchtitan_gb300_results()
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    assert runs.torchtitan_gb300_section([found]) in page, "regenerate with: python benchmarks/fp8_runs.py"
    prose = _prose()
    assert "983,040 / 2,198 = 447.24 s a step" in prose and 240 * 4096 == 983_040
    assert "(global 15,360 = 8 x 64 x 30)" in prose
    assert f"hp prices the step {abs(found['error']):.1%} fast and the memory within {abs(found['memory_error']):.1%}" in prose
    assert f"the {found['measured_seconds'] - found['estimated_seconds']:.2f} s a step hp misses" in prose
    assert "At M = 131,072 NVFP4 delivers +13.8% throughput over MXFP8 and 10.79 GiB less memory per GPU" in prose
    assert "131,072 tokens is 32 x 4,096 or 16 x 8,192" in prose and 32 * 4096 == 16 * 8192 == 131_072
