"""MLPerf Training's Llama 3.1 405B rows (tests/plugins/data/mlperf_measured.json): docs/precision.md's table is what
``benchmarks/mlperf_runs.py`` prints today, every result directory of the two rounds is a row or a skipped entry, and
the rows' measured step times and batch arithmetic are what their logs and configs state."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[2]

# Every llama31_405b result directory of NVIDIA (v5.0, v5.1) and IBM+CoreWeave+NVIDIA (v5.0) in
# mlcommons/training_results_v5.1@441d65f and training_results_v5.0@0fdc28f (git ls-tree of <submitter>/results/).
EXPECTED_DIRS = {
    ("v5.1", "NVIDIA", "hsg_ngpu2560_ngc25.09_nemo"), ("v5.1", "NVIDIA", "hsg_ngpu5120_ngc25.09_nemo"),
    ("v5.1", "NVIDIA", "theia_ngpu512_ngc25.09_nemo"), ("v5.1", "NVIDIA", "tyche_ngpu512_ngc25.09_nemo"),
    ("v5.0", "NVIDIA", "eos-dfw_n64_ngc25.01_nemo"), ("v5.0", "NVIDIA", "eos-dfw_n256_ngc25.01_nemo"),
    ("v5.0", "NVIDIA", "eos-dfw_n304_ngc25.01_nemo"), ("v5.0", "NVIDIA", "eos-dfw_n320_ngc25.01_nemo"),
    ("v5.0", "NVIDIA", "eos-dfw_n1024_ngc25.01_nemo"), ("v5.0", "NVIDIA", "tyche_ngpu256_ngc25.04_nemo"),
    ("v5.0", "NVIDIA", "tyche_ngpu512_ngc25.04_nemo"),
    ("v5.0", "IBM+CoreWeave+NVIDIA", "carina_ngpu512_ngc25.04_nemo"),
    ("v5.0", "IBM+CoreWeave+NVIDIA", "carina_ngpu1024_ngc25.04_nemo"),
    ("v5.0", "IBM+CoreWeave+NVIDIA", "carina_ngpu1536_ngc25.04_nemo"),
    ("v5.0", "IBM+CoreWeave+NVIDIA", "carina_ngpu2048_ngc25.04_nemo"),
    ("v5.0", "IBM+CoreWeave+NVIDIA", "carina_ngpu2496_ngc25.04_nemo"),
}

# Read by hand from each config (DGXNNODES x DGXNGPU, TENSOR/PIPELINE_MODEL_PARALLEL, CONTEXT_PARALLEL, MINIBS) and
# its logs (global_batch_size): (GPUs, TP, PP, CP, MINIBS, DP, global batch); GBS = MINIBS x DP, DP = GPUs / (TP PP CP).
HAND_LAYOUTS = {
    "v5.1-tyche_ngpu512_ngc25.09_nemo": (128 * 4, 4, 8, 2, 144, 8, 1152),
    "v5.1-theia_ngpu512_ngc25.09_nemo": (128 * 4, 2, 8, 2, 72, 16, 1152),
    "v5.1-hsg_ngpu2560_ngc25.09_nemo": (640 * 4, 4, 8, 2, 24, 40, 960),
    "v5.1-hsg_ngpu5120_ngc25.09_nemo": (1280 * 4, 4, 8, 2, 16, 80, 1280),
    "v5.0-eos-dfw_n64_ngc25.01_nemo": (64 * 8, 8, 8, 2, 288, 4, 1152),
    "v5.0-eos-dfw_n256_ngc25.01_nemo": (256 * 8, 8, 8, 2, 72, 16, 1152),
    "v5.0-eos-dfw_n304_ngc25.01_nemo": (304 * 8, 8, 8, 2, 64, 19, 1216),
    "v5.0-eos-dfw_n320_ngc25.01_nemo": (320 * 8, 8, 8, 2, 56, 20, 1120),
    "v5.0-eos-dfw_n1024_ngc25.01_nemo": (1024 * 8, 8, 8, 2, 24, 64, 1536),
    "v5.0-tyche_ngpu256_ngc25.04_nemo": (64 * 4, 4, 8, 2, 112, 4, 448),
    "v5.0-tyche_ngpu512_ngc25.04_nemo": (128 * 4, 4, 8, 2, 112, 8, 896),
    "v5.0-carina_ngpu512_ngc25.04_nemo": (128 * 4, 4, 8, 2, 112, 8, 896),
    "v5.0-carina_ngpu1024_ngc25.04_nemo": (256 * 4, 4, 8, 2, 48, 16, 768),
    "v5.0-carina_ngpu1536_ngc25.04_nemo": (384 * 4, 4, 8, 2, 48, 24, 1152),
    "v5.0-carina_ngpu2048_ngc25.04_nemo": (512 * 4, 4, 8, 2, 40, 32, 1280),
    "v5.0-carina_ngpu2496_ngc25.04_nemo": (624 * 4, 4, 8, 2, 32, 39, 1248),
}


def _module():
    return load_script("benchmarks/mlperf_runs.py")


def _data() -> dict:
    return json.loads((ROOT / "tests" / "plugins" / "data" / "mlperf_measured.json").read_text(encoding="utf-8"))


def test_precision_page_table_is_current():
    runs = _module()
    table = runs.section(runs.results())
    assert table in (ROOT / "docs" / "precision.md").read_text(encoding="utf-8"), \
        "regenerate with: python benchmarks/mlperf_runs.py"


def test_every_result_directory_is_a_row_or_skipped():
    data = _data()
    rows = data["llama31_405b_rows"]
    assert len(rows) == 16
    stated = [(r["round"], r["submitter"], r["system"]) for r in rows]
    stated += [(s["round"], s["submitter"], s["system"]) for s in data["skipped"]]
    assert sorted(stated) == sorted(EXPECTED_DIRS)
    assert len({r["id"] for r in rows}) == len(rows)


def test_measured_seconds_are_the_median_of_the_logs_medians():
    rows = {r["id"]: r for r in _data()["llama31_405b_rows"]}
    # By hand: result_0, _1, _2's medians as benchmarks/mlperf_extract.py printed them; the middle one is the row's.
    tyche = rows["v5.1-tyche_ngpu512_ngc25.09_nemo"]
    assert tyche["log_median_step_seconds"] == [17.237068, 17.372219, 17.259683]
    assert tyche["measured_step_seconds"] == 17.259683
    eos = rows["v5.0-eos-dfw_n64_ngc25.01_nemo"]
    assert eos["log_median_step_seconds"] == [55.102684, 55.164993, 55.143326]
    assert eos["measured_step_seconds"] == 55.143326
    runs = _module()
    for row in rows.values():
        assert len(row["logs"]) == len(row["log_median_step_seconds"]) == 3, row["id"]
        assert runs.measured_seconds(row) == row["measured_step_seconds"] == statistics.median(row["log_median_step_seconds"])


@pytest.mark.parametrize("row_id", sorted(HAND_LAYOUTS))
def test_batch_arithmetic_matches_the_config(row_id):
    row = next(r for r in _data()["llama31_405b_rows"] if r["id"] == row_id)
    gpus, tp, pp, cp, minibs, dp, gbs = HAND_LAYOUTS[row_id]
    assert (row["gpus"], row["tp"], row["pp"], row["cp"], row["minibs"], row["dp"], row["global_batch_size"]) == (
        gpus, tp, pp, cp, minibs, dp, gbs)
    assert gpus // (tp * pp * cp) == dp and minibs * dp == gbs
    assert row["micro_batch_size"] == 1 and row["vpp"] == 8 and row["seq_len"] == 8192
    # The log states the same batch, and MINIBS / micro-batch accumulation steps (pretrain.py).
    assert row["log_facts"]["global_batch_size"] == gbs
    assert row["log_facts"]["gradient_accumulation_steps"] == minibs
    assert row["log_facts"]["submission_platform"].startswith(f"{row['nodes']}xNVIDIA")


def test_rows_state_their_provenance_and_what_is_not_priced():
    data = _data()
    assert {"mlperf-training-v5.1", "mlperf-training-v5.0"} <= set(data["sources"])
    for row in data["llama31_405b_rows"]:
        impl = f"{row['submitter']}/benchmarks/llama31_405b/implementations/{row['system']}/config_"
        assert row["config"].startswith(impl), row["id"]
        assert all(log.startswith(f"{row['submitter']}/results/{row['system']}/llama31_405b/result_") for log in row["logs"])
        assert row["split"] == "held_out" and row["not_priced"], row["id"]
        assert row["recipe"] == ("nvfp4" if row["round"] == "v5.1" else "fp8-delayed-param-gather"), row["id"]
    theia = next(r for r in data["llama31_405b_rows"] if r["system"] == "theia_ngpu512_ngc25.09_nemo")
    assert theia["hardware"] == "gb300" and theia["config"].endswith("config_GB300_128x4x72xtp2pp8cp2_cg_fp4.sh")


def test_the_pipeline_split_counts_the_embedding_and_the_loss():
    """ASYM_PP_EMBED and ASYM_PP_LOSS: 126 layers + 2 over PP 8 x VP 8 = 64 chunks of 2, the first and last 1."""
    import fp8_runs  # benchmarks/ is on sys.path once mlperf_runs is loaded

    _module()
    row = _data()["llama31_405b_rows"][0]
    spec = fp8_runs.layout(row, 126)
    assert spec.layers_per_stage == (1,) + (2,) * 62 + (1,)


def test_the_tp_pp_dp_mapping_rows_are_priced_in_that_rank_order():
    # Every config but NVIDIA's v5.0 H100 ones and its 256-GPU GB200 one sets TP_PP_DP_MAPPING=True (read by hand from
    # config_common.sh / config_common_cg.sh of each folder), for which NeMo orders ranks tp-cp-ep-pp-dp
    # (nemo/lightning/_strategy_lib.py at NVIDIA/NeMo@8cfedd7); fp8_runs.layout hands the row's order to the layout.
    import fp8_runs  # benchmarks/ is on sys.path once mlperf_runs is loaded

    _module()
    default = {"v5.0-tyche_ngpu256_ngc25.04_nemo"} | {f"v5.0-eos-dfw_n{n}_ngc25.01_nemo" for n in (64, 256, 304, 320, 1024)}
    rows = _data()["llama31_405b_rows"]
    for row in rows:
        spec = fp8_runs.layout(row, 126)
        expected = "tp-cp-ep-dp-pp" if row["id"] in default else "tp-cp-ep-pp-dp"
        assert spec.rank_order == expected, row["id"]
        assert not any("TP_PP_DP" in s for s in row["not_priced"]), row["id"]
    # At TP 4, PP 8, CP 2 the data-parallel peers are then TP x CP x PP = 64 ranks apart: a DP group of 8 spans
    # 512 ranks, more than one NVL72 domain of 72 GPUs, where the default order (TP x CP = 8 apart) keeps it in 64.
    row = next(r for r in rows if r["id"] == "v5.1-tyche_ngpu512_ngc25.09_nemo")
    assert (row["tp"] * row["cp"] * row["pp"], row["tp"] * row["cp"]) == (64, 8)
