"""docs/time.md's paragraph on the DGX Cloud recipes' multi-node dense Llama 3.1 and GPT-3 rows, pinned to the rows as
priced (the table itself is checked exactly by test_scale_cases.py)."""

from __future__ import annotations

import scale_cases as sc
from scale_cases import measured_seconds

ROOT = sc.SCALE_FILE.parents[3]
DENSE = "multi-node Megatron-Core dense, H100"
ROWS = [r for r in sc.validated(sc.MBRIDGE_ROWS)
        if r["source"].startswith("dgxc-") and r["class"] == DENSE and "-nemotron4-" not in r["id"]]


def _prose() -> str:
    text = (ROOT / "docs" / "time.md").read_text(encoding="utf-8")
    return " ".join(" ".join(line for line in text.splitlines() if not line.startswith("|")).split())


def test_time_md_states_the_llama_and_gpt3_rows_figures(registry):
    prose = _prose()
    priced = {r["id"]: sc.estimated(r, registry) for r in ROWS}
    errors = {r["id"]: priced[r["id"]].step_seconds / measured_seconds(r) - 1 for r in ROWS}
    assert len(ROWS) == 58 and all(abs(e) <= 0.10 for e in errors.values())
    parts = []
    for split in ("calibration", "held-out"):
        chosen = [errors[r["id"]] for r in ROWS if r["split"] == split]
        parts.append((len(chosen), sum(map(abs, chosen)) / len(chosen), max(chosen, key=abs)))
    assert (f"all 58 are within 10%: the {parts[0][0]} calibration rows with a mean absolute error of {parts[0][1]:.1%} "
            f"(largest {parts[0][2]:+.1%}), the {parts[1][0]} held-out rows {parts[1][1]:.1%} (largest {parts[1][2]:+.1%}); "
            f"{sum(abs(e) <= 0.05 for e in errors.values())} within 5%, {sum(e > 0 for e in errors.values())} priced slow") in prose
    # The exposed data-parallel reduction on 70B, smallest and largest scale.
    seventy = sorted((r["gpus"], priced[r["id"]].data_parallel_seconds) for r in ROWS if "-llama3.1-70b-" in r["id"])
    assert (f"{seventy[0][1] * 1e3:.1f} ms to {max(s for _, s in seventy) * 1e3:.1f} ms on 70B from {seventy[0][0]} to "
            f"{seventy[-1][0]:,} GPUs") in prose


def test_the_search_paragraph_states_the_class_largest_error(registry):
    rows = [r for r in sc.validated(sc.MBRIDGE_ROWS) if r["class"] == DENSE]
    largest = max(sc.estimated(r, registry).step_seconds / measured_seconds(r) - 1 for r in rows)
    assert f"less than the dense class's largest error as run ({largest:+.1%})" in _prose()
