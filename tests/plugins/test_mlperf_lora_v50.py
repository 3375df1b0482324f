"""MLPerf Training v5.0's Llama 2 70B LoRA directories (tests/plugins/data/mlperf_measured.json): the 18 on B200 and GB200
whose config is matched are rows (``llama2_70b_lora_rows``, round "v5.0") priced under
fp8-delayed-param-gather-fp8-attention (NVIDIA's v5.0 implementation holds the frozen base in FP8); every other directory
is skipped with its reason (``llama2_70b_lora_skipped``), and the block figures are read from the v5.0 records as
mlperf-common logged them."""

from __future__ import annotations

import statistics

import pytest

from mlperf_rows import mllog_line as _line, mlperf_data as _data
from repo_script import load_script  # tests/repo_script.py

NO_STEP_TIME = "the logs state no train_step_time record"
# (hardware, GPUs, CP, DP, global batch, cuda_graphs) by hand from each config: GPUs = DGXNNODES x DGXNGPU,
# DP = GPUs / (TP 1 x PP 1 x CP), GBS = MINIBS x DP; MCORE_CUDA_GRAPH=1 -> layers.
HAND = {"nyx_n1_ngc25.04_nemo": ("b200", 8, 1, 8, 8, "none"),
        "tyche_ngpu8_ngc25.04_nemo": ("gb200", 8, 1, 8, 8, "none"),
        "tyche_ngpu72_ngc25.04_nemo": ("gb200", 72, 8, 9, 9, "layers"),
        "tyche_ngpu144_ngc25.04_nemo": ("gb200", 144, 8, 18, 18, "layers"),
        "tyche_ngpu512_ngc25.04_nemo": ("gb200", 512, 8, 64, 64, "layers"),
        "1xBM.GPU.GB200.4": ("gb200", 4, 2, 2, 8, "layers"),  # MINIBS 4: 4 micro-batches of 1 a step
        "8xBM.GPU.B200.8": ("b200", 64, 8, 8, 8, "layers")}


def _v50_rows() -> dict[str, dict]:
    return {r["system"]: r for r in _data()["llama2_70b_lora_rows"] if r["round"] == "v5.0"}


def _v50_skipped() -> list[dict]:
    return [s for s in _data()["llama2_70b_lora_skipped"] if s["round"] == "v5.0"]


def test_every_v50_lora_directory_is_a_row_or_skipped_with_its_reason():
    rows, skipped = _v50_rows(), _v50_skipped()
    # git ls-tree of mlcommons/training_results_v5.0@0fdc28f: 51 <submitter>/results/<system>/llama2_70b_lora
    # directories: 18 rows, 33 skipped.
    assert (len(rows), len(skipped)) == (18, 33)
    assert len({(s["submitter"], s["system"]) for s in skipped} | {(r["submitter"], s) for s, r in rows.items()}) == 51
    assert sorted((r["submitter"], r["hardware"]) for r in rows.values()).count(("Supermicro", "b200")) == 3
    assert {r["hardware"] for r in rows.values()} == {"b200", "gb200"}
    assert sum(r["hardware"] == "b200" for r in rows.values()) == 10
    # Unmatched configs keep their logs' facts: Dell's four GB200 directories, three of Supermicro's.
    unmatched = sorted(s["system"] for s in skipped if "log_block_mean_step_seconds" in s)
    assert unmatched == ["16xXE9712x4GB200", "4xXE9712x4GB200", "8xXE9712x4GB200", "9xXE9712x4GB200",
                         "AS-4126GS-NBR-LCC_N1", "AS-4126GS-NBR-LCC_N2", "AS-A126GS-TNBR_N1"]
    assert all("no GB200 config" in s["reason"] or "no config is named" in s["reason"]
               for s in skipped if s["system"] in unmatched)
    no_step_time = [s for s in skipped if NO_STEP_TIME in s["reason"]]
    amd = [s for s in skipped if "AMD Instinct" in s["reason"]]
    assert (len(unmatched), len(no_step_time), len(amd)) == (7, 16, 10)
    nvl = [s["system"] for s in skipped if "H200 NVL system" in s["reason"]]
    assert sorted(nvl) == ["1xXE7745x4H200-NVL-141GB", "XE7740x8H200-NVL-141GB"]


@pytest.mark.parametrize("system", sorted(HAND))
def test_v50_rows_layout_recipe_and_graphs(system):
    row = _v50_rows()[system]
    hardware, gpus, cp, dp, gbs, graphs = HAND[system]
    assert (row["hardware"], row["gpus"], row["cp"], row["dp"], row["global_batch_size"]) == (hardware, gpus, cp, dp, gbs)
    assert (row["tp"], row["pp"], row["micro_batch_size"], row["seq_len"], row["cp_kind"]) == (1, 1, 1, 8192, "a2a")
    assert row["recipe"] == "fp8-delayed-param-gather-fp8-attention" and row["split"] == "held_out"
    assert row["runtime_options"]["cuda_graphs"] == graphs
    # The logs agree: global batch, and micro-batches a step = GBS / (DP x MBS).
    assert row["log_facts"]["global_batch_size"] == gbs
    assert row["log_facts"]["gradient_accumulation_steps"] == gbs // dp
    assert ("assumptions" in row) == (row["submitter"] in ("Lambda", "Oracle"))


def test_the_recipe_holds_the_frozen_base_in_fp8():
    """fp8-delayed-param-gather-fp8-attention keeps the quantized GEMM weights at 1 byte with one cached copy fewer than
    fp8-delayed's bf16 weight and two copies: 2 bytes less per quantized element, the frozen base's included."""
    import attrs

    from hp_core import api

    fp8_runs = load_script("benchmarks/fp8_runs.py")
    registry = api.build_registry()
    row = _v50_rows()["tyche_ngpu72_ngc25.04_nemo"]
    model = fp8_runs.row_model(row, registry)
    layout = fp8_runs.layout(row, 80)
    runtime = registry.runtime("megatron")
    params = {r: api.estimate(model, layout, registry=registry, runtime=runtime,
                              precision=attrs.evolve(runtime.precision, recipe=r)).stages[0].memory.parameters_bytes
              for r in ("fp8-delayed", "fp8-delayed-param-gather-fp8-attention")}
    # By hand, per layer: q, o 8192 x 8192; k, v 8192 x 1024; gate, up 8192 x 28672 and down 28672 x 8192 (the frozen
    # base: 855,638,016) and the adapters' 819,200: 856,457,216; 80 layers 68,516,577,280 elements, 2 bytes each.
    per_layer = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 819_200
    assert per_layer == 856_457_216
    assert params["fp8-delayed"] - params["fp8-delayed-param-gather-fp8-attention"] == 2 * 80 * per_layer


def test_block_facts_reads_the_v50_block_bounds():
    """A v5.0 record states the block's first sample (metadata step), the eval_start after it the block's last: the
    block's steps are their difference over the global batch; the first block is left out as in v5.1's logs."""
    logs = load_script("benchmarks/mlperf_logs.py")
    text = "\n".join([
        _line("global_batch_size", 9),
        _line("tracked_stats", {"throughput": 38.0, "train_step_time": 1.0}, step=0),  # 170 steps, left out
        _line("block_stop", None, samples_count=0),
        _line("eval_start", None, samples_count=1530),
        _line("tracked_stats", {"validation_throughput": 75.6}, step=1530),
        _line("tracked_stats", {"train_step_time": 0.5}, step=1530),  # 40 steps
        _line("eval_start", None, samples_count=1890),
        _line("tracked_stats", {"train_step_time": 0.8}, step=1890),  # 42 steps
        _line("eval_start", None, samples_count=2268),
        _line("run_stop", None, status="success"),
    ])
    facts = logs.block_facts(text)
    assert facts["block_steps"] == [170, 40, 42]
    # By hand: (0.5 x 40 + 0.8 x 42) / 82 = 53.6 / 82 = 0.6536585.
    assert facts["block_mean_step_seconds"] == pytest.approx(0.6536585, abs=1e-7)
    with pytest.raises(ValueError, match="no eval_start after it"):
        logs.block_facts(text.rsplit("\n", 2)[0])
    with pytest.raises(ValueError, match="whole number"):
        logs.block_facts(text.replace('"samples_count": 2268', '"samples_count": 2267'))


def test_nvidia_v50_72_gb200_log_figure_and_median():
    row = _v50_rows()["tyche_ngpu72_ngc25.04_nemo"]
    # Copied from NVIDIA/results/tyche_ngpu72_ngc25.04_nemo/llama2_70b_lora/result_0.txt: five train_step_time records,
    # the four after the first over 40, 42, 42 and 42 steps (metadata step 1530, 1890, 2268, 2646; eval_start 1890,
    # 2268, 2646, 3024; global batch 9).
    later = [(0.23781193925024127, 40), (0.23694278647599276, 42), (0.23753777476182827, 42), (0.23736997914273247, 42)]
    assert row["logs"][0].endswith("tyche_ngpu72_ngc25.04_nemo/llama2_70b_lora/result_0.txt")
    assert row["log_blocks"][0] == 5 and len(row["log_block_mean_step_seconds"]) == len(row["logs"]) == 10
    # By hand: 39.4102003 / 166 = 0.2374108.
    assert row["log_block_mean_step_seconds"][0] == pytest.approx(sum(t * n for t, n in later) / 166, abs=1e-6)
    assert row["log_facts"] == {"submission_platform": "18xNVIDIA GB200", "global_batch_size": 9,
                                "gradient_accumulation_steps": 1}
    # By hand: the ten sorted, the 5th and 6th are 0.237577 and 0.239663: median 0.23862, 19.6% above v5.1's 0.199564
    # on the same config file name (config_GB200_18x4x1xtp1pp1cp8.sh) and rack.
    assert sorted(row["log_block_mean_step_seconds"])[4:6] == [0.237577, 0.239663]
    runs = load_script("benchmarks/mlperf_runs.py")
    assert runs.measured_seconds(row) == pytest.approx(0.23862, abs=1e-9)
    v51 = next(r for r in _data()["llama2_70b_lora_rows"] if r["system"] == "tyche_ngpu72_ngc25.09_nemo")
    assert statistics.median(v51["log_block_mean_step_seconds"]) == pytest.approx(0.199564, abs=1e-9)


@pytest.mark.parametrize("system, fifth_sixth, median", [
    # By hand from each row's ten log figures, sorted: the 5th and 6th and their mean.
    ("nyx_n1_ngc25.04_nemo", [1.511717, 1.513628], 1.5126725),
    ("1xBM.GPU.GB200.4", [2.974334, 2.975798], 2.975066),
    ("SYS-A21GE-NBRT", [1.516807, 1.517229], 1.517018),
])
def test_v50_row_medians(system, fifth_sixth, median):
    row = _v50_rows()[system]
    assert sorted(row["log_block_mean_step_seconds"])[4:6] == fifth_sixth
    assert load_script("benchmarks/mlperf_runs.py").measured_seconds(row) == pytest.approx(median, abs=1e-9)


def test_wiwynn_v51_rows_run_the_v50_implementation():
    """Wiwynn's two v5.1 directories: NVIDIA's v5.0 files (fp8_params, MCORE_CUDA_GRAPH=1), priced as the v5.0 rows."""
    rows = {r["system"]: r for r in _data()["llama2_70b_lora_rows"] if r["submitter"] == "Wiwynn"}
    # By hand: 18 and 144 nodes of 4 GB200s, CP 8: DP 9 and 72, GBS = MINIBS 1 x DP.
    assert {s: (r["gpus"], r["dp"], r["global_batch_size"]) for s, r in rows.items()} == {
        "1xKinabalux18x4GB200": (72, 9, 9), "8xKinabalux18x4GB200": (576, 72, 72)}
    for row in rows.values():
        assert row["round"] == "v5.1" and row["recipe"] == "fp8-delayed-param-gather-fp8-attention"
        assert row["runtime_options"]["cuda_graphs"] == "layers" and "25.09" in row["assumptions"][0]
    # By hand: the ten log figures sorted, the 5th and 6th: 0.19651 and 0.196676, median 0.196593.
    ten = sorted(rows["1xKinabalux18x4GB200"]["log_block_mean_step_seconds"])
    assert ten[4:6] == [0.19651, 0.196676]
    runs = load_script("benchmarks/mlperf_runs.py")
    assert runs.measured_seconds(rows["1xKinabalux18x4GB200"]) == pytest.approx(0.196593, abs=1e-9)
