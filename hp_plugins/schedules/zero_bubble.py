"""Zero-bubble schedules: the backward split into an input-gradient pass B and a weight-gradient pass W.

Qi, Wan, Huang and Lin 2023, "Zero Bubble Pipeline Parallelism" (arXiv:2401.10241, ICLR 2024;
code: github.com/sail-sg/zero-bubble-pipeline-parallelism). B of a stage needs only the next
stage's B, so W, which needs nothing downstream, fills what 1F1B leaves idle. A micro-batch is
kept on a chunk from its forward until its W; between its B and its W it keeps only what W
reads, each matmul's input (kept since the forward) and the gradient of its output (made by B)
(the paper's Section 2, Table 1: ``M_W`` against ``M_B``). ``in_flight`` counts every micro-batch
kept at the stage's peak and ``awaiting_weight_gradient`` those of them past their B; the
simulation in the tests checks both, and that no other moment of the stage keeps more
micro-batches or more that are whole (docs/schedules.md).

Notation per stage: ``F``, ``B`` (input gradient), ``W`` one chunk's passes, ``t = F + B + W``.

* ZB-H1 (Section 2.1, Figure 3 top): 1F1B's warm-up, stage ``i`` delays its W passes by ``i``
  micro-batches: ``p`` kept on every stage, ``i`` of them awaiting W; bubble ``(p - 1)(F + B - W)``
  (the paper's Table 1; deepseek-ai/DualPipe README: ZB1P ``(PP-1)(F+B-2W)``, ``B`` there the
  whole backward) where ``W <= min(F, B)``; beyond, the W passes no longer fill the wait and
  the simulation of the order gives ``(p - 1) max(F, B, F + B - W)``, which hp prices.
* ZB-H2 (Section 2.2, Figure 3 bottom; ``m >= 2p - 1``): ``2(p - i) - 1`` warm-up forwards, then
  B, the W of the micro-batch ``i`` steps back, F; ``2p - 1 - i`` kept, ``i`` awaiting W (the
  paper's ``(2p - 1) M_B`` on the first stage). One step, first forward to last W, takes
  ``m t + (p - 1) max(F, F + B - W, B - F)``: ``(p - 1) F`` when ``F = B = W``, the stagger of a
  parallelogram whose every stage is busy from its first forward to its last W (the paper's
  zero bubble, which it reaches across steps by replacing the optimizer's synchronisation with a
  post-update validation, Section 4: hp prices one step, synchronised). The other two terms:
  simulation of the order (``F + B - W`` where B outweighs W, ``B - F`` where B outweighs 2F
  and the warm-up no longer covers the B passes' way back).
* ZB-V (Section 6; PyTorch ``ScheduleZBVZeroBubble``; ``vpp = 2``, ``m >= 2p - 1``): chunks
  ``r`` and ``2p - 1 - r`` in a V; rank ``r`` keeps ``2p - 1 - r`` and ``r + 1``, none awaiting W
  at the peak: ``2p`` chunk-micro-batches, 1F1B's first stage (the paper's "1x" memory). For
  ``F = B = W`` a step takes ``m t + (p - 1) F`` (per rank ``t`` of two chunks, ``F`` of one);
  with unequal passes the order stalls by amounts that depend on ``m``, so hp prices it by
  running the order (:mod:`hp_plugins.schedules._timeline`).
"""

from __future__ import annotations

from hp_core.markers import hookimpl
from hp_core.schedules import Pass, Schedule, ScheduleLayout, StagePasses
from hp_plugins.schedules._common import fill_drain_seconds, need_micro_batches, need_pp, need_vpp
from hp_plugins.schedules._timeline import order_moments, order_seconds

__all__ = ["ZB_H1", "ZB_H2", "ZB_V", "hp_schedules"]

_QI = "Qi et al. 2023, 'Zero Bubble Pipeline Parallelism' (arXiv:2401.10241)"

SPLIT_PASSES = (
    Pass("forward", "the activations its backward reads"),
    Pass("input_gradient", "the inputs of each matmul and its output gradient, for the weight-gradient pass"),
    Pass("weight_gradient", "nothing: frees the micro-batch"),
)


def pp_micro_batches(pp: int, vpp: int) -> int:
    """``p``: every stage reaches its ``p`` in flight."""
    return pp


def twice_pp_less_one_micro_batches(pp: int, vpp: int) -> int:
    """``2p - 1``: the first stage's whole warm-up (ZB-H2, ZB-V)."""
    return 2 * pp - 1


def _passes(s: StagePasses) -> tuple[float, float, float]:
    """``(F, B, W)`` of a stage, ``B`` the input gradient (the stage time less its forward and W)."""
    f, w = s.forward_seconds, s.weight_gradient_seconds
    return f, max(0.0, s.seconds - f - w), w


def zb_h1_in_flight(layout: ScheduleLayout, stage: int) -> tuple[int, ...]:
    """``p`` on every stage (``m >= p``): 1F1B's ``p - i`` plus the ``i`` whose W waits."""
    return (layout.pp,)


def zb_h1_awaiting(layout: ScheduleLayout, stage: int) -> tuple[int, ...]:
    """``i``: the W passes stage ``i`` delays."""
    return (stage,)


def zb_h1_moments(layout: ScheduleLayout, stage: int) -> tuple:
    """The moment after the peak's next B, before its W: one more of the ``p`` kept awaits W (the
    simulation finds no moment keeping more whole micro-batches or more awaiting W than these two)."""
    return (((layout.pp,), (stage + 1,)),)


def zb_h2_moments(layout: ScheduleLayout, stage: int) -> tuple:
    """As :func:`zb_h1_moments`: one more of the ``2p - 1 - i`` kept awaits W."""
    return (((2 * layout.pp - 1 - stage,), (stage + 1,)),)


def zb_v_moments(layout: ScheduleLayout, stage: int) -> tuple:
    """Moments of its order with more micro-batches awaiting W than its peak (:func:`._timeline.order_moments`)."""
    return order_moments("zb_v", layout.pp, layout.micro_batches, stage, zb_v_chunks(layout, stage),
                         (zb_v_in_flight(layout, stage), (0, 0)))


def zb_h1_seconds(layout: ScheduleLayout, stages: tuple[StagePasses, ...]) -> float:
    """``m t_max + sum over the other stages of max(F, B, F + B - W)``: the paper's ``(p - 1)(F + B - W)``
    for equal stages with ``W <= min(F, B)``."""
    units = [max(f, b, f + b - w) for f, b, w in map(_passes, stages)]
    return fill_drain_seconds(stages, layout.micro_batches, units, 1.0)


def check_zb_h1(layout: ScheduleLayout) -> None:
    need_vpp(layout, "zb_h1", (1,))
    need_pp(layout, "zb_h1", 2)
    need_micro_batches(layout, "zb_h1", layout.pp, source="every stage delays its W passes behind p micro-batches")


def zb_h2_in_flight(layout: ScheduleLayout, stage: int) -> tuple[int, ...]:
    """``2p - 1 - i``: ``2(p - i) - 1`` warm-up forwards, then one more per W delayed (``i``)."""
    return (2 * layout.pp - 1 - stage,)


def zb_h2_seconds(layout: ScheduleLayout, stages: tuple[StagePasses, ...]) -> float:
    """``m t_max + sum over the other stages of max(F, F + B - W, B - F)``."""
    units = [max(f, f + b - w, b - f) for f, b, w in map(_passes, stages)]
    return fill_drain_seconds(stages, layout.micro_batches, units, 1.0)


def check_zb_h2(layout: ScheduleLayout) -> None:
    need_vpp(layout, "zb_h2", (1,))
    need_pp(layout, "zb_h2", 2)
    need_micro_batches(layout, "zb_h2", 2 * layout.pp - 1, source="the first stage's 2p-1 warm-up forwards")


def zb_v_chunks(layout: ScheduleLayout, stage: int) -> tuple[int, ...]:
    return (stage, 2 * layout.pp - 1 - stage)


def zb_v_in_flight(layout: ScheduleLayout, stage: int) -> tuple[int, ...]:
    """``2p - 1 - r`` on the way down (its warm-up), ``r + 1`` on the way back."""
    return (2 * layout.pp - 1 - stage, stage + 1)


def zb_v_seconds(layout: ScheduleLayout, stages: tuple[StagePasses, ...]) -> float:
    """The order run with each rank's two chunks at half its time (:mod:`._timeline`)."""
    return order_seconds("zb_v", layout, stages, 2)


def check_zb_v(layout: ScheduleLayout) -> None:
    need_vpp(layout, "zb_v", (2,))
    need_pp(layout, "zb_v", 2)
    need_micro_batches(layout, "zb_v", 2 * layout.pp - 1, source="the first rank's 2p-1 warm-up forwards (PyTorch ScheduleZBVZeroBubble)")


ZB_H1 = Schedule(
    name="zb_h1", in_flight=zb_h1_in_flight, pipeline_seconds=zb_h1_seconds,
    default_micro_batches=pp_micro_batches, check=check_zb_h1, passes=SPLIT_PASSES,
    awaiting_weight_gradient=zb_h1_awaiting, trainer_names={}, weight_gradient_moments=zb_h1_moments,
    source=_QI + ", Section 2.1 (ZB-H1)",
    description="zero bubble, 1F1B's memory: every stage keeps p micro-batches (i awaiting W), bubble (p-1)max(F, B, F+B-W)",
)
ZB_H2 = Schedule(
    name="zb_h2", in_flight=zb_h2_in_flight, pipeline_seconds=zb_h2_seconds,
    default_micro_batches=twice_pp_less_one_micro_batches, check=check_zb_h2, passes=SPLIT_PASSES,
    awaiting_weight_gradient=zb_h1_awaiting, trainer_names={}, weight_gradient_moments=zb_h2_moments,
    source=_QI + ", Section 2.2 (ZB-H2); one-step time by simulation of its order (docs/schedules.md)",
    description="zero bubble with 2x memory: stage i keeps 2p-1-i (i awaiting W), bubble (p-1)max(F, F+B-W, B-F)",
)
ZB_V = Schedule(
    name="zb_v", in_flight=zb_v_in_flight, pipeline_seconds=zb_v_seconds,
    default_micro_batches=twice_pp_less_one_micro_batches, stage_chunks=zb_v_chunks, check=check_zb_v,
    passes=SPLIT_PASSES, trainer_names={"torchtitan": "ZBVZeroBubble"}, weight_gradient_moments=zb_v_moments,
    source=_QI + ", Section 6 (ZB-V); PyTorch ScheduleZBVZeroBubble's order, run as a timeline",
    description="V-shape (vpp=2), 1F1B's memory: rank r keeps 2p-1-r and r+1, bubble (p-1)F for F=B=W",
)


@hookimpl
def hp_schedules():
    yield ZB_H1
    yield ZB_H2
    yield ZB_V
