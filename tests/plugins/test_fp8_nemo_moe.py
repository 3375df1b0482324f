"""The MoE rows of NeMo's performance summary pages (tests/plugins/data/nemo_moe_measured.json): their figures,
provenance and option mapping, the FLOPs cross-check, and docs/precision.md's table as ``benchmarks/fp8_nemo_moe.py``
prints it today."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hp_core import api

from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "plugins" / "data" / "nemo_moe_measured.json"


@pytest.fixture(scope="module")
def moe():
    return load_script("benchmarks/fp8_nemo_moe.py")


@pytest.fixture(scope="module")
def found(moe):
    return moe.results()


def _rows() -> dict:
    return {r["id"]: r for r in json.loads(DATA.read_text(encoding="utf-8"))["rows"]}


def test_every_row_states_its_page_config_and_held_out_split():
    data = json.loads(DATA.read_text(encoding="utf-8"))
    for row in data["rows"]:
        source = data["sources"][row["source"]]
        assert source["url"].startswith("https://docs.nvidia.com/nemo-framework/user-guide/"), row["id"]
        assert source["read"] == "2026-12-03" and source["container"] == row["container"], row["id"]
        assert row["split"] == "held_out", row["id"]  # nothing is fitted to these rows
        assert row["gpus"] % (row["tp"] * row["pp"] * row["cp"]) == 0, row["id"]
        assert (row["gpus"] // row["pp"]) % (row.get("etp", 1) * row["ep"]) == 0, row["id"]  # the experts fold over a stage
        assert str(row["tokens_per_second_per_gpu"]) in row["row"], row["id"]
        assert row["moe"] == {"expert_capacity_factor": 1.0, "pad_expert_input_to_capacity": True}, row["id"]
        assert row["not_priced"] and row["flops_check"], row["id"]
    skipped = " ".join(s["what"] for s in data["skipped"])
    assert "(10717)" in skipped and "LLAMA4-Maverick-LLM" in skipped


def test_measured_step_seconds_by_hand(moe):
    rows = _rows()
    # 256 x 4,096 tokens over 15,457 tokens/s on each of 64 B200s.
    assert moe.measured_seconds(rows["nemo25.02-b200-mixtral-8x7b-fp8"]) == pytest.approx(1_048_576 / 989_248)
    assert moe.measured_seconds(rows["nemo25.02-b200-mixtral-8x7b-fp8"]) == pytest.approx(1.0600, abs=1e-4)
    # Mixtral-8x22B read as GBS 64, MBS 1 (printed '1 | 64'): 64 x 65,536 over 2,731 x 256 on GB200.
    row = rows["nemo25.04-gb200-mixtral-8x22b-fp8"]
    assert row["row"].startswith("Mixtral-8x22B | 256 | 1 | 64 | 65536")
    assert (row["global_batch_size"], row["micro_batch_size"]) == (64, 1)
    assert 64 // (256 // (2 * 4 * 8) * 1) == 16  # the printed GA, DP 4
    assert moe.measured_seconds(row) == pytest.approx(4_194_304 / 699_136)
    # Scout: 1,024 x 8,192 over 13,783 x 64 = 9.510 s.
    assert moe.measured_seconds(rows["nemo25.07-gb200-llama4-scout-fp8"]) == pytest.approx(9.5097, abs=1e-4)


def test_nemo_flops_cross_check(moe):
    rows = _rows()
    # Mixtral-8x7B: 32 x 4096^2 x (12 + 3 + 18 x 2 x 3.5 + 12 + 6 x 32000 / 131072) FLOPs a token.
    per_token = 32 * 4096**2 * (12 + 3 + 126 + 12 + 6 * 32000 / 131072)
    assert moe.nemo_flops_per_token(rows["nemo25.02-b200-mixtral-8x7b-fp8"]) == pytest.approx(per_token)
    assert moe.nemo_tflops_per_gpu(rows["nemo25.02-b200-mixtral-8x7b-fp8"]) == pytest.approx(1282, abs=0.5)
    assert moe.nemo_tflops_per_gpu(rows["nemo25.04-gb200-mixtral-8x7b-fp8"]) == pytest.approx(1598, abs=0.5)
    # Mixtral-8x22B at 65,536: full attention 1,125.6 against the printed 824, the causal count 823.6.
    big = rows["nemo25.02-b200-mixtral-8x22b-fp8"]
    assert moe.nemo_tflops_per_gpu(big) == pytest.approx(1125.6, abs=0.05)
    assert moe.nemo_tflops_per_gpu(big, causal=True) == pytest.approx(823.6, abs=0.05)
    # Scout: the llama3 formula NeMo v2.4.0 maps llama4 to gives 1,636.0; the causal count with the run's vocabulary
    # (200,064) or Llama 4's (202,048) gives the printed 1501.
    scout = rows["nemo25.07-gb200-llama4-scout-fp8"]
    assert moe.nemo_tflops_per_gpu(scout) == pytest.approx(1636.0, abs=0.05)
    assert moe.nemo_tflops_per_gpu(scout, causal=True, vocab=200_064) == pytest.approx(1499.9, abs=0.05)
    assert moe.nemo_tflops_per_gpu(scout, causal=True, vocab=202_048) == pytest.approx(1500.7, abs=0.05)


def test_option_mapping():
    rows = _rows()
    # 25.02: bf16_with_fp8_mixed (delayed, FP8 parameters); 25.04 and 25.07: the pages' current scaling, 'cs'.
    assert {r["recipe"] for r in rows.values() if r["container"] == "NeMo 25.02"} == {"fp8-delayed-param-gather"}
    assert {r["recipe"] for r in rows.values() if r["container"] != "NeMo 25.02"} == {"fp8-megatron-param-gather"}
    for key, row in rows.items():
        options = row["runtime_options"]
        assert options["overlap_grad_reduce"] and options["overlap_param_gather"] and not options["grad_reduce_in_fp32"], key
        assert "tp_comm_overlap" not in options, key
        # CUDA graphs: the 25.02 script on B200, the 25.04 and 25.07 csv rows with cuda_graphs 1; not the 8x22B runs.
        assert (options.get("cuda_graphs") == "layers") == ("8x22b" not in key), key
        assert options.get("overlap_p2p_communication", False) == (row["pp"] > 1 and row["vpp"] > 1), key
        assert options["moe_permute_fusion"] == (row["model"] == "llama4-scout"), key
        # MixtralConfig sets no moe_grouped_gemm (Megatron-Core's default false: SequentialMLP); Scout's recipe sets it.
        assert options.get("moe_grouped_gemm", True) == (row["model"] == "llama4-scout"), key


def test_priced_rows(moe, found):
    by_id = {r["id"]: r for r in found}
    assert len(found) == 5
    r = by_id["nemo25.04-gb200-mixtral-8x7b-fp8"]
    assert r["measured_seconds"] == pytest.approx(0.8500, abs=1e-4)
    # Its one local expert a rank priced as the SequentialMLP it ran (moe_grouped_gemm false; 0.853 s as a grouped GEMM).
    assert r["estimated_seconds"] == pytest.approx(0.845, abs=0.002)
    assert by_id["nemo25.02-b200-mixtral-8x7b-fp8"]["error"] == pytest.approx(-0.201, abs=0.002)
    assert by_id["nemo25.07-gb200-llama4-scout-fp8"]["error"] == pytest.approx(0.074, abs=0.002)
    # Token dropping at capacity 1.0 with padding: hp's balanced routing gives each expert its capacity, so the padding
    # prices nothing extra (as on the Grok-1 DGX Cloud rows).
    registry = api.build_registry()
    row = _rows()["nemo25.02-b200-mixtral-8x7b-fp8"]
    assert moe.price(row, registry).step_seconds == pytest.approx(moe.price(dict(row, moe=None), registry).step_seconds)
    # hp's FP8 time under its bf16 time on every row.
    assert all(1.2 < r["bf16_seconds"] / r["estimated_seconds"] < 1.6 for r in found)


def test_docs_table_is_current(moe, found):
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    assert moe.section(found) in page, "regenerate with: python benchmarks/fp8_nemo_moe.py"
    heading = "### NeMo's performance pages: the MoE rows of 25.02, 25.04 and 25.07"
    assert page.index("### NeMo's performance pages: the 24.07 summary") < page.index(heading) < page.index(
        "### MLPerf Training v5.0 and v5.1")
