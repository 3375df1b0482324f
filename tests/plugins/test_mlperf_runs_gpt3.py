"""MLPerf Training's GPT-3 175B rows (tests/plugins/data/mlperf_measured.json ``gpt3_175b_rows``): docs/precision.md's
table is what ``benchmarks/mlperf_runs.py`` prints today, every GPT-3 result directory of NVIDIA, Oracle and
Azure+NVIDIA in the rounds covered is a row or a skipped entry, and the rows' measured step times, batch arithmetic
and model are what their logs and configs state; the v3.1 step key is read."""

from __future__ import annotations

import statistics

import pytest

from mlperf_rows import mllog_line, mlperf_data as _data, mlperf_runs as _module, precision_page
from repo_script import load_script  # tests/repo_script.py

# Every gpt3 result directory of NVIDIA, Oracle and Azure+NVIDIA in mlcommons/training_results_v4.1@b87b9e3,
# training_results_v4.0@6fe9543 and training_results_v3.1@d06288b (git ls-tree of <submitter>/results/).
EXPECTED_DIRS = {
    ("v4.1", "NVIDIA", "b200_n8_preview_nemo"), ("v4.1", "NVIDIA", "eos-dfw_n1452_ngc24.04_nemo"),
    ("v4.1", "NVIDIA", "eos_n32_ngc24.09_nemo"), ("v4.1", "NVIDIA", "eos_n64_ngc24.09_nemo"),
    ("v4.1", "Oracle", "1536xBM.GPU.H100.8"), ("v4.1", "Oracle", "3072xBM.GPU.H100.8"),
    ("v4.0", "NVIDIA", "eos-dfw_n1344_ngc24.04_nemo"), ("v4.0", "NVIDIA", "eos-dfw_n1452_ngc24.04_nemo"),
    ("v4.0", "NVIDIA", "eos_n64_ngc24.04_nemo"),
    ("v3.1", "Azure+NVIDIA", "ND_H100_v5_n1344_pytorch"), ("v3.1", "NVIDIA", "eos-dfw_n1024_ngc23.09_nemo"),
    ("v3.1", "NVIDIA", "eos-dfw_n1280_ngc23.09_nemo"), ("v3.1", "NVIDIA", "eos-dfw_n1344_ngc23.09_nemo"),
    ("v3.1", "NVIDIA", "eos-dfw_n512_ngc23.09_nemo"), ("v3.1", "NVIDIA", "eos-dfw_n768_ngc23.09_nemo"),
    ("v3.1", "NVIDIA", "eos_n64_ngc23.09_nemo"), ("v3.1", "NVIDIA", "eos_n96_ngc23.09_nemo"),
}

# Read by hand from each config (DGXNNODES x 8 GPUs, MINIBS, MICRO_BATCH_SIZE, INTERLEAVED_PIPELINE) and its logs
# (global_batch_size, gradient_accumulation_steps): (GPUs, MINIBS, DP, global batch, micro-batch, VP, accumulation);
# DP = GPUs / (TP 4 x PP 8), GBS = MINIBS x DP, accumulation = MINIBS / micro-batch.
HAND_LAYOUTS = {
    "v4.1-eos_n32_ngc24.09_nemo": (32 * 8, 256, 8, 2048, 2, 6, 128),
    "v4.1-eos_n64_ngc24.09_nemo": (64 * 8, 128, 16, 2048, 2, 6, 64),
    "v4.1-1536xBM.GPU.H100.8": (192 * 8, 64, 48, 3072, 2, 4, 32),
    "v4.1-3072xBM.GPU.H100.8": (384 * 8, 32, 96, 3072, 2, 4, 16),
    "v4.1-b200_n8_preview_nemo": (8 * 8, 1024, 2, 2048, 2, 6, 512),
    "v3.1-eos_n64_ngc23.09_nemo": (64 * 8, 128, 16, 2048, 1, 12, 128),
    "v3.1-eos_n96_ngc23.09_nemo": (96 * 8, 128, 24, 3072, 1, 12, 128),
    "v3.1-eos-dfw_n512_ngc23.09_nemo": (512 * 8, 16, 128, 2048, 1, 12, 16),
    "v3.1-eos-dfw_n768_ngc23.09_nemo": (768 * 8, 16, 192, 3072, 1, 12, 16),
    "v3.1-eos-dfw_n1024_ngc23.09_nemo": (1024 * 8, 16, 256, 4096, 1, 12, 16),
    "v3.1-eos-dfw_n1280_ngc23.09_nemo": (1280 * 8, 8, 320, 2560, 1, 12, 8),
    "v3.1-eos-dfw_n1344_ngc23.09_nemo": (1344 * 8, 8, 336, 2688, 1, 12, 8),
    "v3.1-ND_H100_v5_n1344_pytorch": (1344 * 8, 8, 336, 2688, 1, 12, 8),
}


def test_precision_page_gpt3_table_is_current():
    assert _module().gpt3_section() in precision_page(), \
        "regenerate with: python benchmarks/mlperf_runs.py"


def test_every_gpt3_result_directory_is_a_row_or_skipped():
    data = _data()
    rows, skipped = data["gpt3_175b_rows"], data["gpt3_175b_skipped"]
    assert len(rows) == 13 and len(skipped) == 4
    stated = [(r["round"], r["submitter"], r["system"]) for r in rows] + [(s["round"], s["submitter"], s["system"]) for s in skipped]
    assert sorted(stated) == sorted(EXPECTED_DIRS)
    assert len({r["id"] for r in rows}) == len(rows)
    # Every skipped directory is one whose logs state no step time, and says so.
    assert all("no per-step time" in s["reason"] for s in skipped)
    assert {s["round"] for s in skipped} == {"v4.0", "v4.1"}


def test_gpt3_measured_seconds_are_the_median_of_the_logs_medians():
    rows = {r["id"]: r for r in _data()["gpt3_175b_rows"]}
    # By hand: result_0, _1, _2's medians (benchmarks/mlperf_extract.py); the middle one is the row's.
    eos = rows["v4.1-eos_n64_ngc24.09_nemo"]
    assert eos["log_median_step_seconds"] == [9.493104, 9.554033, 9.496243]
    assert eos["measured_step_seconds"] == 9.496243
    v31 = rows["v3.1-eos_n64_ngc23.09_nemo"]
    assert v31["log_median_step_seconds"] == [11.045303, 11.055071, 11.05388]
    assert v31["measured_step_seconds"] == 11.05388
    assert v31["step_key"] == "train_step_timing" and eos["step_key"] == "train_step_timing in s"
    runs = _module()
    for row in rows.values():
        assert len(row["logs"]) == len(row["log_median_step_seconds"]) == 3, row["id"]
        assert runs.measured_seconds(row) == row["measured_step_seconds"] == statistics.median(row["log_median_step_seconds"])
        # The records' time stamps: the step records lie at least the logged step time apart.
        assert all(s >= m for s, m in zip(row["log_median_record_spacing_seconds"], row["log_median_step_seconds"])), row["id"]


@pytest.mark.parametrize("row_id", sorted(HAND_LAYOUTS))
def test_gpt3_batch_arithmetic_matches_the_config(row_id):
    row = next(r for r in _data()["gpt3_175b_rows"] if r["id"] == row_id)
    gpus, minibs, dp, gbs, mbs, vpp, accumulation = HAND_LAYOUTS[row_id]
    assert (row["gpus"], row["minibs"], row["dp"], row["global_batch_size"], row["micro_batch_size"], row["vpp"]) == (
        gpus, minibs, dp, gbs, mbs, vpp)
    assert (row["tp"], row["pp"], row["cp"], row["seq_len"]) == (4, 8, 1, 2048)
    assert gpus // 32 == dp and minibs * dp == gbs and minibs // mbs == accumulation
    assert row["log_facts"]["global_batch_size"] == gbs
    assert row["log_facts"]["gradient_accumulation_steps"] == accumulation
    assert row["log_facts"]["submission_platform"].startswith(f"{row['nodes']}x")


def test_gpt3_rows_state_provenance_recipe_and_options():
    data = _data()
    assert {"mlperf-training-v4.1", "mlperf-training-v4.0", "mlperf-training-v3.1"} <= set(data["sources"])
    for row in data["gpt3_175b_rows"]:
        assert row["source"] == f"mlperf-training-{row['round']}", row["id"]
        assert all(log.startswith(f"{row['submitter']}/results/{row['system']}/gpt3/result_") for log in row["logs"])
        assert row["config"].startswith(f"{row['submitter']}/benchmarks/gpt3/"), row["id"]
        assert row["split"] == "held_out" and row["not_priced"], row["id"]
        # v4.1 set FP8_PARAMS=True (config_common.sh); v3.1's conf/custom.yaml has no fp8_params.
        assert row["recipe"] == {"v4.1": "fp8-delayed-param-gather", "v3.1": "fp8-delayed"}[row["round"]], row["id"]
        options = row["runtime_options"]
        assert options["tp_comm_overlap"] and options["overlap_grad_reduce"] and not options["grad_reduce_in_fp32"], row["id"]
        assert options.get("cuda_graphs", "none") == ("layers" if row["hardware"] == "b200" else "none"), row["id"]


def test_gpt3_model_is_175b():
    """Every row's model_config is GPT-3 175B: by hand, 96 layers of 12 h^2 + 13 h (QKV, projection, fc1, fc2 with
    biases, two LayerNorms) at h = 12,288, the 50,257 x h embedding tied to the output, 2,048 x h positions and the
    final LayerNorm's 2 h: 173,961,510,912 + 617,558,016 + 25,165,824 + 24,576 = 174,604,259,328."""
    from hp_core import api

    import fp8_runs  # benchmarks/ is on sys.path once mlperf_runs is loaded

    _module()
    rows = _data()["gpt3_175b_rows"]
    assert all(r["model_config"] == rows[0]["model_config"] for r in rows)
    h = 12288
    assert 96 * (12 * h * h + 13 * h) == 173_961_510_912
    registry = api.build_registry()
    assert api.count_parameters(fp8_runs.row_model(rows[0], registry), registry).total == 174_604_259_328


def test_run_facts_reads_the_v31_step_key_and_the_record_spacing():
    """NeMo 23.09's key (v3.1) is read; a record stating two step keys counts once; the spacing of the kept step
    records' time stamps is their median gap in seconds."""
    logs = load_script("benchmarks/mlperf_logs.py")

    # Seven steps 11 s apart (the 6th and 7th kept: 11.0 and 11.2 s); the stamps 11,066 ms then 11,070 ms apart.
    stamps = [0, 11066, 22132, 33198, 44264, 55330, 66400]
    text = "\n".join(mllog_line("tracked_stats", {"train_step_timing": 11.0 + (0.2 if i == 6 else 0.0)}, t)
                     for i, t in enumerate(stamps))
    facts = logs.run_facts(text)
    assert (facts["logged_steps"], facts["median_step_seconds"]) == (7, pytest.approx(11.1))
    assert facts["median_record_spacing_seconds"] == pytest.approx(11.070)
    both = "\n".join(mllog_line("tracked_stats", {"train_step_time": 2.0, "train_step_timing in s": 2.0}, i) for i in range(6))
    assert logs.run_facts(both)["logged_steps"] == 6


def test_extract_says_when_its_median_leaves_logs_out():
    # By hand: three logs, one without a step time (its error kept); the median of 2.0 and 4.0 is 3.0, over 2 of 3.
    extract = load_script("benchmarks/mlperf_extract.py")
    facts = [{"log": "result_0.txt", "median_step_seconds": 2.0}, {"log": "result_1.txt", "error": "no step time"},
             {"log": "result_2.txt", "median_step_seconds": 4.0}]
    assert extract.median_of_logs(facts) == {
        "median_of_log_medians_seconds": 3.0, "logs_in_median": 2, "log_count": 3,
        "logs_left_out": [{"log": "result_1.txt", "error": "no step time"}]}
    assert extract.median_of_logs(facts[1:2])["median_of_log_medians_seconds"] is None
