"""``load_script(path)``: one of the repository's scripts (``benchmarks/``, ``docs/_tools/``) as a module, for the
tests that check what it computes or writes (tests/ is on the path: conftest.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """The script at *relative* (to the repository root), executed afresh as a module named after its file."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
