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
