"""docs/schedules.md's DeepSeek-V3 comparison is what the planner says: regenerate and compare."""

from __future__ import annotations

from pathlib import Path
from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "schedules.md"


def _generator():
    return load_script("docs/_tools/gen_schedules.py")


def test_the_deepseek_comparison_is_what_the_planner_generates():
    assert PAGE.read_text(encoding="utf-8") == _generator().render(), \
        "docs/schedules.md is stale: run python docs/_tools/gen_schedules.py"


def test_dualpipev_keeps_pp_plus_one_chunks_and_leaves_less_bubble_than_1f1b():
    text = PAGE.read_text(encoding="utf-8").split("<!-- deepseek:begin -->", 1)[1]
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    # DualPipeV on 8 ranks: rank r keeps 16 - r micro-batches on its first chunk and r + 1 on its second
    # (2 * 8 + 1 = PP + 1 stages' worth, the DualPipe README's activation figure); 1F1B's rank r keeps 16 - r.
    for rank, cells in enumerate(rows[:8]):
        assert cells[3].strip().endswith(f"({16 - rank}+{rank + 1})")
        assert cells[1].strip().endswith(f"({16 - rank})")
    # ZB-H2 on 16 ranks: rank r keeps 31 - r, r of them awaiting W at its peak; under the megatron runtime
    # DeepSeek-V3's W keeps more than a whole micro-batch (moe_probs_in_activation: the experts' FC2 output
    # gradients), so on ranks 1-14 the moment after the next B binds, r + 1 awaiting (docs/schedules.md).
    for rank, cells in enumerate(rows[:16]):
        awaiting = rank + 1 if 0 < rank < 15 else rank
        assert cells[4].strip().endswith(f"({31 - rank}[{awaiting}W])" if rank else "(31)")
    # ZB-V on 8: (15 - r) + (r + 1) at its peak, 1F1B's first stage; a moment of its order with more
    # awaiting W binds on ranks 1-7 (fewer kept, more of them awaiting W), never more than those 16.
    for rank, cells in enumerate(rows[:8]):
        counts = [int(part.split("[")[0]) for part in cells[5].strip().rsplit("(", 1)[1].rstrip(")").split("+")]
        assert sum(counts) <= 16 and (rank == 0) == ("W" not in cells[5])
    bubbles = [line for line in text.splitlines() if line.startswith("| bubble, s |")][0].split("|")[2:-1]
    one_f_one_b, dualpipe, dualpipev, zb_h2, zb_v = (float(cell) for cell in bubbles)
    assert dualpipev < one_f_one_b and zb_h2 < one_f_one_b and zb_v < dualpipev
    # Only DualPipe sums gradients between mirrored ranks.
    sync = [line for line in text.splitlines() if line.startswith("| mirrored gradient sync, s |")][0].split("|")[2:-1]
    assert [cell.strip() == "-" for cell in sync] == [True, False, True, True, True]
