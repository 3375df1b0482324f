"""Megatron-Bridge's GPT-OSS 120B bf16 rows on 64 DGX-GB300 and 64 DGX-B300 GPUs (scale_measured_mbridge.json):
held out, priced on the gb300 and b300 presets; docs/time.md's paragraph pinned to today's figures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale_cases as sc  # noqa: E402
from hp_core.api import build_registry  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def registry():
    return build_registry()


def test_the_gb300_and_b300_rows_are_held_out_and_time_md_states_their_figures(registry):
    gb300 = [r for r in sc.MBRIDGE_ROWS if r["class"] == "multi-node Megatron-Core MoE, GB300"]
    b300 = [r for r in sc.MBRIDGE_ROWS if r["class"] == "multi-node Megatron-Core MoE, B300"]
    assert [r["id"] for r in gb300] == [f"mb{c}-gb300-gpt-oss-120b" for c in ("26.02", "26.02.01", "26.04", "26.04.01")]
    assert [r["id"] for r in b300] == [f"mb{c}-b300-gpt-oss-120b" for c in ("26.02", "26.04", "26.04.01")]
    assert all(r["split"] == "held-out" and r["recompute"] is None and r["not_priced"] for r in gb300 + b300)
    assert [r["layout"]["ep"] for r in gb300 + b300] == [64] * 5 + [8, 8]
    # 1,280 x 4,096 / (19,412 x 64) = 4.220 s; / (8,359 x 64) = 9.800 s.
    assert sc.measured_seconds(gb300[0]) == pytest.approx(4.220, abs=5e-4)
    assert sc.measured_seconds(b300[0]) == pytest.approx(9.800, abs=5e-4)
    page = " ".join((ROOT / "docs" / "time.md").read_text(encoding="utf-8").split())
    measured = [sc.measured_seconds(r) for r in gb300]
    default = [sc.estimated(r, registry, as_run=False).step_seconds for r in gb300]
    as_run = [sc.estimated(r, registry) for r in gb300]
    assert len({round(d, 3) for d in default}) == 1 and len({round(t.step_seconds, 3) for t in as_run}) == 1
    errors = [d / m - 1 for d, m in zip(default, measured)]
    ran = [t.step_seconds / m - 1 for t, m in zip(as_run, measured)]
    exposed = sum(e for _, _, e in as_run[0].stages[0].communication_by_group)
    assert (f"with the runtime's defaults {default[0]:.3f} s against {measured[0]:.3f}, {measured[1]:.3f}, {measured[2]:.3f} and "
            f"{measured[3]:.3f} s measured ({min(errors):+.1%} to {max(errors):+.1%}), as run {as_run[0].step_seconds:.3f} s "
            f"({min(ran):+.1%} to {max(ran):+.1%}), {exposed:.3f} s of communication exposed") in page
    gb200 = next(r for r in sc.MBRIDGE_ROWS if r["id"] == "mb26.02-gb200-gpt-oss-120b")
    faster = sc.measured_seconds(gb200) / measured[0]
    priced = sc.estimated(gb200, registry).step_seconds / as_run[0].step_seconds
    assert (f"they ran {faster:.2f} times faster than the GB200 rows of 26.02 ({sc.measured_seconds(gb200):.3f} s), where hp "
            f"prices them {priced:.2f} times faster as run") in page
    b_measured = [sc.measured_seconds(r) for r in b300]
    b_default = [sc.estimated(r, registry, as_run=False).step_seconds for r in b300]
    b_run = [sc.estimated(r, registry) for r in b300]
    wide = sum(e for _, _, e in b_run[0].stages[0].communication_by_group)
    assert (f"{b_measured[0]:.3f} s measured, {b_run[0].step_seconds:.3f} s as run ({b_run[0].step_seconds / b_measured[0] - 1:+.1%}), "
            f"{wide:.3f} s of communication exposed") in page
    hidden = sum(t - e for _, t, e in b_run[1].stages[0].communication_by_group)
    assert b_default[1] == pytest.approx(b_default[2]) and b_run[1].step_seconds == pytest.approx(b_run[2].step_seconds)
    assert (f"{b_measured[1]:.3f} and {b_measured[2]:.3f} s measured, {b_default[1]:.3f} s with the defaults "
            f"({b_default[1] / b_measured[1] - 1:+.1%}, {b_default[2] / b_measured[2] - 1:+.1%}) and {b_run[1].step_seconds:.3f} s as run "
            f"({b_run[1].step_seconds / b_measured[1] - 1:+.1%}, {b_run[2].step_seconds / b_measured[2] - 1:+.1%}: the overlapped and bf16 "
            f"gradient reduction over DP 64 hides {hidden:.3f} s") in page
