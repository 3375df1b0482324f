"""benchmarks/record_fsdp2_cases.py: docs/runtimes.md's tracker table is the recorded cases' rows, and a
recording run that stops part-way keeps the cases it had not reached yet."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[2]


def _module():
    return load_script("benchmarks/record_fsdp2_cases.py")


def test_the_runtimes_page_table_is_the_recorded_cases():
    """Each row ``--table`` prints is on docs/runtimes.md (the page adds a "before" column: compared without it)."""
    page = {}
    for line in (ROOT / "docs" / "runtimes.md").read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| `([^`]+)` \|", line)
        if match:
            page[match.group(1)] = [cell.strip() for cell in line.strip().strip("|").split("|")]
    rows = _module().table_rows()
    assert len(rows) == len(json.loads(_module().CASES.read_text(encoding="utf-8"))["cases"])
    for row in rows:
        name, *cells = (cell.strip() for cell in row.strip().strip("|").split("|"))
        shown = page[name.strip("`")]
        assert [shown[1], *shown[3:]] == cells, "regenerate with: python benchmarks/record_fsdp2_cases.py --table"


def test_an_interrupted_run_keeps_the_cases_it_had_not_reached(tmp_path, monkeypatch):
    import hp_plugins.cases.fsdp2_measured as measured

    record = _module()
    cases = tmp_path / "cases.json"
    old = [{"name": n, "config": {}, "measured": {"peak_bytes": i, "peak_phase": "backward", "seconds": 0}}
           for i, n in enumerate(("a", "b", "c"))]
    cases.write_text(json.dumps({"format": "hp-measure/1", "cases": old}), encoding="utf-8")
    monkeypatch.setattr(record, "CASES", cases)
    monkeypatch.setattr(record, "grid", lambda: [(n, {}, {}) for n in ("a", "b", "c")])
    monkeypatch.setattr(measured, "request_of", lambda config, registry, measure=None: {})
    calls = []

    def measure(request, cache=False):
        calls.append(request)
        if len(calls) == 2:
            raise KeyboardInterrupt  # stopped while measuring "b"
        return {"peak_bytes": 100, "peak_phase": "backward", "seconds": 1}

    monkeypatch.setattr(measured, "measure_request", measure)
    with pytest.raises(KeyboardInterrupt):
        record.main([])
    kept = json.loads(cases.read_text(encoding="utf-8"))["cases"]
    assert [c["name"] for c in kept] == ["a", "b", "c"]
    assert kept[0]["measured"]["peak_bytes"] == 100  # re-measured
    assert kept[1:] == old[1:]  # not reached: as recorded
    assert not [p for p in tmp_path.iterdir() if p.name != "cases.json"]  # no temporary left
