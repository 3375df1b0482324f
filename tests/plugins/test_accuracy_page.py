"""docs/accuracy.md's measured-runs tables are what ``benchmarks/accuracy.py`` prints for the public cases today."""

from __future__ import annotations

from pathlib import Path

from hp_core.io.validate import load_cases, validate_case
from measured_cases import MEGATRON_FILE
from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[2]


def _accuracy_module():
    return load_script("benchmarks/accuracy.py")


def test_accuracy_page_tables_are_current(megatron_registry):
    accuracy = _accuracy_module()
    results = [validate_case(case, megatron_registry) for case in load_cases(MEGATRON_FILE, megatron_registry)]
    page = (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8")
    assert accuracy.section(results) in page, "regenerate with: python benchmarks/accuracy.py"
    assert accuracy.steps_section(results) in page, "regenerate with: python benchmarks/accuracy.py"
