"""What the tests of the MLPerf Training rows share (tests/plugins/test_mlperf_runs.py, test_mlperf_runs_gpt3.py,
test_mlperf_lora.py, test_mlperf_logs.py): the benchmark that prices them, their data file, the page that shows
their tables, and a result log's ``:::MLLOG`` line as the logs write it."""

from __future__ import annotations

import json
from pathlib import Path

from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[2]


def mlperf_runs():
    """benchmarks/mlperf_runs.py, loaded as a module (it puts benchmarks/ on sys.path, so fp8_runs imports after)."""
    return load_script("benchmarks/mlperf_runs.py")


def mlperf_data() -> dict:
    """tests/plugins/data/mlperf_measured.json."""
    return json.loads((ROOT / "tests" / "plugins" / "data" / "mlperf_measured.json").read_text(encoding="utf-8"))


def precision_page() -> str:
    """docs/precision.md, whose MLPerf tables the tests pin."""
    return (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")


def mllog_line(key: str, value, time_ms: int | None = 0, **metadata) -> str:
    """One ``:::MLLOG`` record as an MLPerf result log writes it (mlcommons/logging's format); ``time_ms=None`` leaves
    the stamp out."""
    record = {"namespace": "", "event_type": "POINT_IN_TIME", "key": key, "value": value, "metadata": metadata}
    if time_ms is not None:
        record["time_ms"] = time_ms
    return ":::MLLOG " + json.dumps(record)
