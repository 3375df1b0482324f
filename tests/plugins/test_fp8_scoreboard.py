"""benchmarks/fp8_scoreboard.py: its counting rules on hand-made rows, and docs/precision.md's table as it prints it."""

from __future__ import annotations

from pathlib import Path

import pytest

from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def board():
    return load_script("benchmarks/fp8_scoreboard.py")


def _table(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")][1:]


def test_the_counting_rules_on_hand_made_rows(board):
    found = [
        ("A", [
            {"id": "a1", "split": "held_out", "error": 0.20, "as_run_error": 0.05},  # as run where priced: +5%
            {"id": "a2", "split": "held_out", "error": -0.12, "as_run_error": None},  # else the defaults: -12%
            {"id": "a3", "split": "calibration", "error": 0.02},
        ], None),
        ("B", [
            {"id": "a1", "error": 0.50},  # counted under A already
            {"row": {"id": "b1"}, "time_error": 0.10, "peak_error": -0.03},  # no split stated: held out
        ], "peak_error"),
        ("M", [{"id": "m1", "split": "held_out", "error": 0.04}], "error"),  # memory rows: their error is memory's
    ]
    rows = _table(board.section(found))
    assert rows[0] == ["A", "held-out", "2", "1", "8.5%", "-12.0% to +5.0%", "0", "", "", ""]
    assert rows[1] == ["A", "calibration", "1", "1", "2.0%", "+2.0% to +2.0%", "0", "", "", ""]
    # 10% and 3% are within their bands (inclusive).
    assert rows[2] == ["B", "held-out", "1", "1", "10.0%", "+10.0% to +10.0%", "1", "1", "3.0%", "-3.0% to -3.0%"]
    assert rows[3] == ["M", "held-out", "0", "", "", "", "1", "0", "4.0%", "+4.0% to +4.0%"]
    assert rows[4] == ["**all**", "held-out", "3", "2", "9.0%", "-12.0% to +10.0%", "2", "1", "3.5%", "-3.0% to +4.0%"]
    assert rows[5] == ["**all**", "calibration", "1", "1", "2.0%", "+2.0% to +2.0%", "0", "", "", ""]


def test_a_row_with_no_step_time_error_is_refused(board):
    with pytest.raises(ValueError, match="x1: no step-time error"):
        board.section([("X", [{"id": "x1", "split": "held_out"}], None)])


def test_the_page_table_is_current(board):
    from hp_core import api

    text = board.section(board.collections(api.build_registry()))
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    assert text in page, "regenerate with: python benchmarks/fp8_scoreboard.py --write"
    rows = _table(text)
    held_out = next(r for r in rows if r[:2] == ["**all**", "held-out"])
    # Every collection counted: the held-out total is the sum of its held-out rows.
    assert int(held_out[2]) == sum(int(r[2]) for r in rows if r[1] == "held-out" and r[0] != "**all**")
    assert int(held_out[2]) > 400
