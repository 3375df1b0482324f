"""MLPerf Training v5.0's Llama 2 70B LoRA directories (tests/plugins/data/mlperf_measured.json
``llama2_70b_lora_skipped``, round "v5.0"): every one is skipped with its reason, none is priced, and the ones running
NVIDIA's NeMo implementation keep their logs' block figures, read from the v5.0 records as mlperf-common logged them."""

from __future__ import annotations

import statistics

import pytest

from mlperf_rows import mllog_line as _line, mlperf_data as _data
from repo_script import load_script  # tests/repo_script.py

FP8_BASE = "the frozen base weights are held in FP8"
NO_STEP_TIME = "the logs state no train_step_time record"


def _v50() -> list[dict]:
    return [s for s in _data()["llama2_70b_lora_skipped"] if s["round"] == "v5.0"]


def test_every_v50_lora_directory_is_skipped_with_its_reason():
    skipped = _v50()
    # git ls-tree of mlcommons/training_results_v5.0@0fdc28f: 51 <submitter>/results/<system>/llama2_70b_lora
    # directories.
    assert len(skipped) == len({(s["submitter"], s["system"]) for s in skipped}) == 51
    assert not [r for r in _data()["llama2_70b_lora_rows"] if r["round"] == "v5.0"]
    fp8_base = [s for s in skipped if FP8_BASE in s["reason"]]
    no_step_time = [s for s in skipped if NO_STEP_TIME in s["reason"]]
    amd = [s for s in skipped if "AMD Instinct" in s["reason"]]
    assert (len(fp8_base), len(no_step_time), len(amd)) == (25, 16, 10)
    # NVIDIA's five: each README's config, every one of the implementation that sets fp8_params from FP8=True.
    nvidia = {s["system"]: s["reason"] for s in skipped if s["submitter"] == "NVIDIA"}
    assert set(nvidia) == {"nyx_n1_ngc25.04_nemo", "tyche_ngpu8_ngc25.04_nemo", "tyche_ngpu72_ngc25.04_nemo",
                           "tyche_ngpu144_ngc25.04_nemo", "tyche_ngpu512_ngc25.04_nemo"}
    assert all(FP8_BASE in reason and "25.04-alpha.rc1" in reason for reason in nvidia.values())
    named = "config_GB200_36x4x1xtp1pp1cp8.sh (README-tyche_ngpu144_ngc25.04_nemo.md names it"
    assert named in nvidia["tyche_ngpu144_ngc25.04_nemo"]
    # The H200 NVL systems have no preset besides (hp's h200 is the SXM part); four H100/H200 configs run TP=4.
    nvl = [s["system"] for s in skipped if "H200 NVL system" in s["reason"]]
    assert sorted(nvl) == ["1xXE7745x4H200-NVL-141GB", "XE7740x8H200-NVL-141GB"]
    assert sorted(s["system"] for s in no_step_time if "runs TP=4" in s["reason"]) == [
        "1xBM.GPU.H200.8", "4xSR680Ax8H200-SXM-141GB", "64xBM.GPU.H200.8", "scitix_n8_ngc24.09_nemo"]
    assert all(("log_block_mean_step_seconds" in s) == (s in fp8_base) for s in skipped)


def test_the_lora_kind_states_no_fp8_base():
    """The fp8_params skips stand while the lora kind has no FP8-held base; add one and these become rows."""
    from hp_plugins.kinds.lora import BASES

    assert BASES == ("bf16", "nf4", "mxfp4")


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
    entry = next(s for s in _v50() if s["system"] == "tyche_ngpu72_ngc25.04_nemo")
    # Copied from NVIDIA/results/tyche_ngpu72_ngc25.04_nemo/llama2_70b_lora/result_0.txt: five train_step_time records,
    # the four after the first over 40, 42, 42 and 42 steps (metadata step 1530, 1890, 2268, 2646; eval_start 1890,
    # 2268, 2646, 3024; global batch 9).
    later = [(0.23781193925024127, 40), (0.23694278647599276, 42), (0.23753777476182827, 42), (0.23736997914273247, 42)]
    assert entry["logs"][0].endswith("tyche_ngpu72_ngc25.04_nemo/llama2_70b_lora/result_0.txt")
    assert entry["log_blocks"][0] == 5 and len(entry["log_block_mean_step_seconds"]) == len(entry["logs"]) == 10
    # By hand: 39.4102003 / 166 = 0.2374108.
    assert entry["log_block_mean_step_seconds"][0] == pytest.approx(sum(t * n for t, n in later) / 166, abs=1e-6)
    assert entry["log_block_mean_step_seconds"][0] == pytest.approx(0.2374108, abs=1e-6)
    assert entry["log_facts"] == {"submission_platform": "18xNVIDIA GB200", "global_batch_size": 9,
                                  "gradient_accumulation_steps": 1}
    # By hand: the ten sorted, the 5th and 6th are 0.237577 and 0.239663: median 0.23862, 19.6% above v5.1's 0.199564
    # on the same config file name (config_GB200_18x4x1xtp1pp1cp8.sh) and rack.
    assert sorted(entry["log_block_mean_step_seconds"])[4:6] == [0.237577, 0.239663]
    assert statistics.median(entry["log_block_mean_step_seconds"]) == pytest.approx(0.23862, abs=1e-9)
    v51 = next(r for r in _data()["llama2_70b_lora_rows"] if r["system"] == "tyche_ngpu72_ngc25.09_nemo")
    assert statistics.median(v51["log_block_mean_step_seconds"]) == pytest.approx(0.199564, abs=1e-9)
