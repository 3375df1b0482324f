"""benchmarks/mlperf_logs.py reads an MLPerf Training result log's step times and run facts."""

from __future__ import annotations


import pytest

from mlperf_rows import mllog_line as _line
from repo_script import load_script  # tests/repo_script.py


def test_run_facts_median_after_the_skipped_steps():
    logs = load_script("benchmarks/mlperf_logs.py")
    # Seven logged steps: the first five (one-off capture and warm-up) are skipped, the median of 13.0 and 14.0 is 13.5.
    times = [20.0, 13.4, 13.2, 13.3, 13.1, 13.0, 14.0]
    text = "\n".join([
        "noise before the records",
        _line("submission_platform", "128xNVIDIA GB200"),
        _line("global_batch_size", 1152),
        _line("max_sequence_length", 8192),
        _line("tracked_stats", {"warmup_time": 272.9}, step=0),
        *(_line("tracked_stats", {"train_step_time": t, "reduced_train_loss": 7.7}, step=float(i)) for i, t in enumerate(times)),
        _line("run_stop", None, status="success"),
    ])
    facts = logs.run_facts(text)
    assert logs.SKIPPED_STEPS == 5
    assert facts["logged_steps"] == 7
    assert facts["median_step_seconds"] == pytest.approx(13.5)
    assert (facts["min_step_seconds"], facts["max_step_seconds"]) == (13.0, 14.0)
    assert (facts["submission_platform"], facts["global_batch_size"], facts["max_sequence_length"]) == ("128xNVIDIA GB200", 1152, 8192)
    assert facts["status"] == "success"


def test_run_facts_refuses_a_log_without_step_times():
    logs = load_script("benchmarks/mlperf_logs.py")
    text = "\n".join(_line("tracked_stats", {"train_step_time": 1.0}, step=float(i)) for i in range(5))
    with pytest.raises(ValueError, match="none past the first 5"):
        logs.run_facts(text)


def test_run_facts_reads_the_v4_gpt3_step_key():
    # NeMo 1's GPT-3 logs (v4.0, v4.1) name the step time "train_step_timing in s": six steps, the sixth kept.
    logs = load_script("benchmarks/mlperf_logs.py")
    text = "\n".join(_line("tracked_stats", {"train_step_timing in s": 9.0 + i}, step=float(i)) for i in range(6))
    facts = logs.run_facts(text)
    assert (facts["logged_steps"], facts["median_step_seconds"]) == (6, 14.0)


def test_a_record_without_its_time_stamp_leaves_the_spacing_unstated():
    logs = load_script("benchmarks/mlperf_logs.py")
    stamped = [_line("tracked_stats", {"train_step_time": 1.0}, 1000 * i)
               for i in range(8)]
    assert logs.run_facts("\n".join(stamped))["median_record_spacing_seconds"] == 1.0
    unstamped = stamped[:7] + [_line("tracked_stats", {"train_step_time": 1.0}, None)]
    assert "median_record_spacing_seconds" not in logs.run_facts("\n".join(unstamped))


def _v60_log() -> str:
    """A v6.0 log's shape (training_results_v6.0 NVIDIA/results/theia_ngpu72_ngc26.04_nemo/llama31_8b/result_0.txt):
    a sampled step's record with the loss beside it every 32 steps (DeltaTimingCallback) and, at each evaluation, the
    block's mean step without it (MLPerfLoggingCallback, samples_count the block's steps times the global batch)."""
    steps = [0.0142, 0.1950, 0.1963, 0.1974, 0.1990, 0.1985, 0.1986, 0.1993, 0.1994]
    return "\n".join([
        _line("global_batch_size", 72),
        *(_line("tracked_stats", {"train_step_time": t, "reduced_train_loss": 8.0}, samples_count=2304 * i)
          for i, t in enumerate(steps[:6])),
        _line("tracked_stats", {"train_step_time": 0.1916}, samples_count=12312),  # 171 steps: the first block
        *(_line("tracked_stats", {"train_step_time": t, "reduced_train_loss": 6.5}, samples_count=2304 * (6 + i))
          for i, t in enumerate(steps[6:])),
        _line("tracked_stats", {"train_step_time": 0.1933}, samples_count=12312),  # 171 steps
        _line("tracked_stats", {"train_step_time": 0.1950}, samples_count=6840),  # 95 steps
    ])


def test_a_v60_log_is_read_per_step_through_the_records_with_the_loss():
    logs = load_script("benchmarks/mlperf_logs.py")
    facts = logs.run_facts(_v60_log())
    # By hand: nine sampled steps, the first five skipped; the median of 0.1985, 0.1986, 0.1993, 0.1994 is 0.19895.
    assert facts["logged_steps"] == 9 and facts["block_records_left_out"] is True
    assert facts["median_step_seconds"] == pytest.approx(0.19895)
    assert (facts["min_step_seconds"], facts["max_step_seconds"]) == (0.1985, 0.1994)


def test_a_v60_log_is_read_per_block_through_the_records_without_the_loss():
    logs = load_script("benchmarks/mlperf_logs.py")
    facts = logs.block_facts(_v60_log())
    # By hand: blocks of 171, 171 and 95 steps; after the first (0.1933 x 171 + 0.1950 x 95) / 266 = 0.193907...
    assert facts["block_steps"] == [171, 171, 95]
    assert facts["block_mean_step_seconds"] == pytest.approx((0.1933 * 171 + 0.1950 * 95) / 266)
