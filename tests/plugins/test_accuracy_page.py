"""docs/accuracy.md's measured-runs tables are what ``benchmarks/accuracy.py`` prints for the public cases today."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hp_core.io.validate import load_cases, validate_case
from measured_cases import MEGATRON_FILE

ROOT = Path(__file__).resolve().parents[2]


def _accuracy_module():
    spec = importlib.util.spec_from_file_location("accuracy_page", ROOT / "benchmarks" / "accuracy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_accuracy_page_tables_are_current(megatron_registry):
    accuracy = _accuracy_module()
    results = [validate_case(case, megatron_registry) for case in load_cases(MEGATRON_FILE, megatron_registry)]
    page = (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8")
    assert accuracy.section(results) in page, "regenerate with: python benchmarks/accuracy.py"
    assert accuracy.steps_section(results) in page, "regenerate with: python benchmarks/accuracy.py"
