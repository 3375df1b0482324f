"""Row ids of the measured-data files in ``tests/plugins/data`` are unique within each file.

A row's id is how docs tables, tests and reports name it; two rows under one id would make
every lookup by id pick one of them silently.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"
# The key each file's rows are named by: "id" (scale and FP8 rows), "name" (tracker cases),
# "case_id" (Megatron measured cases), "case" (SimuMax rows).
ID_KEYS = ("id", "case_id", "case", "name")


def _row_lists(node, path="$"):
    """Every list of mappings that all carry one of :data:`ID_KEYS`, with its path and key."""
    if isinstance(node, list):
        key = next((k for k in ID_KEYS if node and all(isinstance(x, dict) and k in x for x in node)), None)
        if key is not None:
            yield path, key, node
        for i, item in enumerate(node):
            yield from _row_lists(item, f"{path}[{i}]")
    elif isinstance(node, dict):
        for name, value in node.items():
            yield from _row_lists(value, f"{path}.{name}")


FILES = sorted(DATA.glob("*.json"))


def test_the_files_with_row_ids_are_found():
    with_ids = {f.name for f in FILES if any(True for _ in _row_lists(json.loads(f.read_text(encoding="utf-8"))))}
    assert {"scale_measured_mpt.json", "scale_measured.json", "scale_measured_mbridge.json", "fp8_measured_runs.json",
            "fsdp2_tracker_cases.json", "megatron_measured.json", "simumax_b200_runs.json"} <= with_ids


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_row_ids_are_unique_within_each_file(path):
    seen: collections.Counter = collections.Counter()
    for _where, key, rows in _row_lists(json.loads(path.read_text(encoding="utf-8"))):
        seen.update((key, row[key]) for row in rows)
    assert [name for name, n in seen.items() if n > 1] == []


def test_the_duplicate_check_catches_a_duplicate():
    rows = {"rows": [{"id": "a"}, {"id": "b"}, {"id": "a"}]}
    found = collections.Counter(r["id"] for _w, _k, rs in _row_lists(rows) for r in rs)
    assert found["a"] == 2
