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
    C = board.Collection
    found = [
        C("A", [
            {"id": "a1", "split": "held_out", "recipe": "nvfp4", "error": 0.20, "as_run_error": 0.05},  # as run: +5%
            {"id": "a2", "split": "held_out", "recipe": "mxfp8", "error": -0.12, "as_run_error": None},  # defaults: -12%
            {"id": "a3", "split": "calibration", "recipe": "fp8-delayed", "error": 0.02},
            {"id": "a4", "split": "held_out", "recipe": "bf16", "error": 0.90},  # a bf16 baseline: left out
        ]),
        C("B", [
            {"id": "a1", "recipe": "nvfp4", "error": 0.50},  # counted under A already
            # No split stated: held out; the recipe stated by the row's data.
            {"row": {"id": "b1", "recipe": "fp8-current"}, "time_error": 0.10, "peak_error": -0.03},
            # Megatron-LM's CI: the recipe the launch imports as (a bf16 one left out).
            {"row": {"id": "b2"}, "recipe": "fp8-megatron-param-gather", "time_error": -0.5, "peak_error": 0.0},
            {"row": {"id": "b3"}, "recipe": "bf16", "time_error": 0.9, "peak_error": 0.9},
        ], "peak_error"),
        C("M", [{"id": "m1", "split": "held_out", "recipe": "mxfp8", "error": 0.04}], "error"),  # memory rows
        C("U", [{"id": "u1", "recipe": "fp8-blockwise", "error": -0.2},
                {"id": "u1", "recipe": "fp8-blockwise", "error": -0.1}], counted=False),  # listed, not in the totals
    ]
    rows = _table(board.section(found))
    assert rows[0] == ["A", "held-out", "2", "1", "8.5%", "-12.0% to +5.0%", "0", "", "", ""]
    assert rows[1] == ["A", "calibration", "1", "1", "2.0%", "+2.0% to +2.0%", "0", "", "", ""]
    # 10% and 3% are within their bands (inclusive).
    assert rows[2] == ["B", "held-out", "2", "1", "30.0%", "-50.0% to +10.0%", "2", "2", "1.5%", "-3.0% to +0.0%"]
    assert rows[3] == ["M", "held-out", "0", "", "", "", "1", "0", "4.0%", "+4.0% to +4.0%"]
    assert rows[4] == ["U", "not counted", "2", "1", "15.0%", "-20.0% to -10.0%", "0", "", "", ""]
    assert rows[5] == ["**all**", "held-out", "4", "2", "19.2%", "-50.0% to +10.0%", "3", "2", "2.3%", "-3.0% to +4.0%"]
    assert rows[6] == ["**all**", "calibration", "1", "1", "2.0%", "+2.0% to +2.0%", "0", "", "", ""]
    assert len(rows) == 7


def test_a_row_with_no_step_time_error_or_no_recipe_is_refused(board):
    with pytest.raises(ValueError, match="x1: no step-time error"):
        board.section([board.Collection("X", [{"id": "x1", "split": "held_out", "recipe": "nvfp4"}])])
    with pytest.raises(ValueError, match="x2: its results state no recipe"):
        board.section([board.Collection("X", [{"id": "x2", "split": "held_out", "error": 0.0}])])


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
