"""benchmarks/torchao_linear_level.py: hp's pricing of one torchao float8 linear against pytorch/ao#2185, as
docs/precision.md states it (the rowwise rows of the torchtitan Float8 section)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from repo_script import load_script  # tests/repo_script.py

PAGE = Path(__file__).resolve().parents[2] / "docs" / "precision.md"


@pytest.fixture
def rows(registry):
    return load_script("benchmarks/torchao_linear_level.py").table(registry)


def test_the_measured_rows_are_the_pull_requests_by_hand():
    """The four rows of pytorch/ao#2185's "tensorwise w/ rescale" table (compiled, use_fast_accum True), and their
    speedups ref_time_sec / pt_fp8_time_sec as the pull request prints them (1.111733, 1.426141, 1.729502, 1.711090)."""
    level = load_script("benchmarks/torchao_linear_level.py")
    printed = (1.111733, 1.426141, 1.729502, 1.711090)
    assert [name for name, *_ in level.ROWS] == ["attn.wqkv", "attn.w0", "ffn.w13", "ffn.w2"]
    for (_, _, ref, fp8), speedup in zip(level.ROWS, printed):
        assert ref / fp8 == pytest.approx(speedup, abs=2e-3)


def test_one_linear_by_hand(rows):
    """ffn.w13 (M 16,384, K 8,192, N 7,168) under the rowwise recipe: the casts and rescales move, per element, 5 + 5
    bytes of the input (two casts, each two reads and a 1-byte write), 10 of the output gradient (cast along each
    axis), 10 of the weight (cast twice) and 4 of each backward output (input and weight gradients); over the
    h100-sxm preset's 3.35 TB/s at the Hopper efficiency 0.85."""
    w13 = next(r for r in rows if r["linear"] == "ffn.w13" and r["recipe"] == "torchao-float8-rowwise")
    m, k, n = 16384, 8192, 7168
    moved = m * k * (5 + 5) + m * n * 10 + n * k * 10 + m * k * 4 + n * k * 4
    assert w13["cast_seconds"] == pytest.approx(moved / (3.35e12 * 0.85), rel=1e-12)
    tensorwise = next(r for r in rows if r["linear"] == "ffn.w13" and r["recipe"] == "torchao-float8-tensorwise")
    # Per-tensor: the output gradient cast once for both usages (6 bytes), no rescale.
    assert tensorwise["cast_seconds"] == pytest.approx((m * k * 10 + m * n * 6 + n * k * 10) / (3.35e12 * 0.85), rel=1e-12)
    assert w13["bf16_seconds"] == tensorwise["bf16_seconds"]


def test_the_page_states_the_linear_level_figures(rows):
    """hp's rowwise speedups per linear, its FP8 time against the measured one and its bf16 time against the measured
    bf16, as docs/precision.md words them."""
    rowwise = [r for r in rows if r["recipe"] == "torchao-float8-rowwise"]
    text = re.sub(r"\s+", " ", PAGE.read_text(encoding="utf-8"))
    assert "measures the recipe at Llama-3-70B's TP-8 shapes (qkv, output, w13, w2) " + ", ".join(
        f"{r['measured_speedup']:.2f}" for r in rowwise[:3]) + f" and {rowwise[3]['measured_speedup']:.2f} times bf16" in text
    assert "(`python benchmarks/torchao_linear_level.py`) reads " + ", ".join(
        f"{r['speedup']:.2f}" for r in rowwise[:3]) + f" and {rowwise[3]['speedup']:.2f}" in text
    fp8 = [r["fp8_seconds"] / r["measured_fp8_seconds"] - 1 for r in rowwise]
    bf16 = [1 - r["bf16_seconds"] / r["measured_bf16_seconds"] for r in rowwise]
    assert f"its FP8 times are within {min(fp8):+.0%} to {max(fp8):+.0%} of the measured ones" in text
    assert f"its bf16 times {min(bf16) * 100:.0f}-{max(bf16) * 100:.0f}% below the measured bf16" in text
