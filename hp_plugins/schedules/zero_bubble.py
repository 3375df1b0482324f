"""Zero-bubble schedules: the backward split into an input-gradient pass B and a weight-gradient pass W.

Qi, Wan, Huang and Lin 2023, "Zero Bubble Pipeline Parallelism" (arXiv:2401.10241, ICLR 2024;
code: github.com/sail-sg/zero-bubble-pipeline-parallelism). B of a stage needs only the next
stage's B, so W, which needs nothing downstream, fills what 1F1B leaves idle; the activations
W reads (each matmul's input and its output gradient) stay alive until it runs. Like the paper
(Section 2, Table 1: peak memory in micro-batches' worth ``M_B``), hp counts a micro-batch kept
on a stage from its forward until its W, whole: an upper bound, since after B only W's inputs
are left.

* ZB-H1 (Section 2.1, Figure 3 top): 1F1B's warm-up, and stage ``i`` delays its W passes by
  ``i`` micro-batches, so every stage keeps ``p`` micro-batches, as 1F1B's first stage does;
  bubble ``(p - 1)(T_F + T_B - T_W)`` with ``T_B`` the input-gradient pass, that is
  ``(p - 1)(t - 2 T_W)`` of a stage's time ``t = T_F + T_B + T_W`` (deepseek-ai/DualPipe README:
  ZB1P ``(PP-1)(F+B-2W)`` with ``B`` the whole backward).
"""

from __future__ import annotations

from hp_core.markers import hookimpl
from hp_core.schedules import Pass, Schedule, ScheduleLayout, StagePasses
from hp_plugins.schedules._common import fill_drain_seconds, need_micro_batches, need_pp, need_vpp

__all__ = ["ZB_H1", "hp_schedules"]

_QI = "Qi et al. 2023, 'Zero Bubble Pipeline Parallelism' (arXiv:2401.10241)"

SPLIT_PASSES = (
    Pass("forward", "the activations its backward reads"),
    Pass("input_gradient", "the inputs of each matmul and its output gradient, for the weight-gradient pass"),
    Pass("weight_gradient", "nothing: frees the micro-batch"),
)


def pp_micro_batches(pp: int, vpp: int) -> int:
    """``p``: every stage reaches its ``p`` in flight."""
    return pp


def zb_h1_in_flight(layout: ScheduleLayout, stage: int) -> tuple[int, ...]:
    """``p`` on every stage (``m >= p``): 1F1B's ``p - i`` plus the ``i`` whose W waits."""
    return (layout.pp,)


def zb_h1_seconds(layout: ScheduleLayout, stages: tuple[StagePasses, ...]) -> float:
    """``m t_max + sum over the other stages of (t - 2 W)``: ``m t + (p - 1)(t - 2 W)`` for equal stages."""
    units = [max(0.0, s.seconds - 2 * s.weight_gradient_seconds) for s in stages]
    return fill_drain_seconds(stages, layout.micro_batches, units, 1.0)


def check_zb_h1(layout: ScheduleLayout) -> None:
    need_vpp(layout, "zb_h1", (1,))
    need_pp(layout, "zb_h1", 2)
    need_micro_batches(layout, "zb_h1", layout.pp, source="every stage delays its W passes behind p micro-batches")


ZB_H1 = Schedule(
    name="zb_h1", in_flight=zb_h1_in_flight, pipeline_seconds=zb_h1_seconds,
    default_micro_batches=pp_micro_batches, check=check_zb_h1, passes=SPLIT_PASSES,
    trainer_names={},
    source=_QI + ", Section 2.1 (ZB-H1)",
    description="zero bubble, 1F1B's memory: every stage keeps p micro-batches, bubble (p-1)(F+B-2W)",
)


@hookimpl
def hp_schedules():
    yield ZB_H1
