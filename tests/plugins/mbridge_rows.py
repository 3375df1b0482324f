"""What the tests of the measured FP8 rows share (tests/plugins/test_fp8_runs_gb300.py, test_fp8_runs_gb200_nvfp4.py,
test_fp8_runs_tt_dsv3.py, test_fp8_runs_tt_gb300.py): the data file, the benchmark that prices it, a summary row's
cells and the prose of docs/precision.md, whose figures they pin."""

from __future__ import annotations

import json
from pathlib import Path

from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[2]
# NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md is read at this commit.
ARCHIVE = "067f987df03b8355b03192d88d70f1709fedf51a"


def fp8_runs():
    """benchmarks/fp8_runs.py, loaded as a module."""
    return load_script("benchmarks/fp8_runs.py")


def fp8_data() -> dict:
    """tests/plugins/data/fp8_measured_runs.json."""
    return json.loads((ROOT / "tests" / "plugins" / "data" / "fp8_measured_runs.json").read_text(encoding="utf-8"))


def cells(text: str) -> list[str]:
    """A markdown table row's cells, stripped."""
    return [c.strip() for c in text.strip().strip("|").split("|")]


def precision_prose() -> str:
    """docs/precision.md's prose (its table rows taken out) as one line, so a figure is found across a line break."""
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    return " ".join(" ".join(line for line in page.splitlines() if not line.startswith("|")).split())
