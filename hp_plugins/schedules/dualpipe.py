"""DualPipe and DualPipeV (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", arXiv:2412.19437,
Section 3.2.1; code and table: github.com/deepseek-ai/DualPipe, ``dualpipe/dualpipe.py``,
``dualpipe/dualpipev.py`` and its README's "Pipeline Bubbles and Memory Usage Comparison").

* DualPipe on ``p`` ranks (even): micro-batches enter from both ends, half each way. Rank ``r``
  runs stage ``r`` of the forward direction and stage ``p - 1 - r`` of the reverse one: two of
  the ``p`` chunks, so the pipeline holds the model twice (parameters, gradients and optimizer
  states of two stages per rank: the README's "2x"). A micro-batch runs one of the two.
* DualPipeV on ``p`` ranks: the ``2p`` chunks in a V (the "cut-in-half" DualPipe, Sea AI Lab),
  rank ``r`` runs chunks ``r`` and ``2p - 1 - r``; one model copy.

In flight (the peak of ``DualPipe.step``'s order, counted by the simulation in the tests): rank
``r`` with ``h = min(r, p - 1 - r)`` keeps ``p - h`` micro-batches on chunk ``h`` and ``h + 1``
on chunk ``p - 1 - h`` (DualPipe), ``2p - r`` on chunk ``r`` and ``r + 1`` on chunk
``2p - 1 - r`` (DualPipeV): the README's ``PP + 1`` chunk-micro-batches, ``PP`` its stages.

Bubble, the README's ``(PP/2 - 1)(F&B + B - 3W)`` with ``F``, ``B`` (whole backward), ``W`` and
``F&B`` (an overlapped forward and backward) of one stage's chunk: hp prices ``F&B`` as ``F + B``
(the runtime's overlap of the all-to-all is in the stage time already), so per rank with ``t =
F + B``: ``(p/2 - 1)(2t - F - 3W)`` for DualPipe and, a rank running two chunks of ``t/2``,
``(p - 1)(2t - F - 3W)/2`` for DualPipeV. The simulation in the tests agrees for equal passes
(``F = B - W = W``, the README's setting); docs/schedules.md shows where unequal passes depart.
"""

from __future__ import annotations

from hp_core.markers import hookimpl
from hp_core.schedules import Schedule, ScheduleLayout, StagePasses
from hp_plugins.schedules._common import fill_drain_seconds, need_even_pp, need_micro_batches, need_pp, need_vpp
from hp_plugins.schedules.zero_bubble import SPLIT_PASSES

__all__ = ["DUALPIPE", "DUALPIPEV", "hp_schedules"]

_SOURCE = ("DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report' (arXiv:2412.19437), Section 3.2.1; "
           "deepseek-ai/DualPipe README, bubble and memory table")


def twice_pp_micro_batches(pp: int, vpp: int) -> int:
    """``2p``: the fewest ``DualPipe.step`` runs (``num_chunks >= num_ranks * 2``)."""
    return 2 * pp


def dualpipe_chunks(layout: ScheduleLayout, stage: int) -> tuple[int, ...]:
    h = min(stage, layout.pp - 1 - stage)
    return (h, layout.pp - 1 - h)


def dualpipe_in_flight(layout: ScheduleLayout, stage: int) -> tuple[int, ...]:
    h = min(stage, layout.pp - 1 - stage)
    return (layout.pp - h, h + 1)


def dualpipev_chunks(layout: ScheduleLayout, stage: int) -> tuple[int, ...]:
    return (stage, 2 * layout.pp - 1 - stage)


def dualpipev_in_flight(layout: ScheduleLayout, stage: int) -> tuple[int, ...]:
    return (2 * layout.pp - stage, stage + 1)


def _units(stages: tuple[StagePasses, ...]) -> list[float]:
    """Per stage ``2t - F - 3W``: ``F&B + B - 3W`` with ``F&B = F + B`` and ``t = F + B``."""
    return [max(0.0, 2 * s.seconds - s.forward_seconds - 3 * s.weight_gradient_seconds) for s in stages]


def dualpipe_seconds(layout: ScheduleLayout, stages: tuple[StagePasses, ...]) -> float:
    """``m t + (p/2 - 1)(2t - F - 3W)`` for equal stages; unequal ones share the fill over the others."""
    p = layout.pp
    share = (p / 2 - 1) / (p - 1)
    return fill_drain_seconds(stages, layout.micro_batches, _units(stages), share)


def dualpipev_seconds(layout: ScheduleLayout, stages: tuple[StagePasses, ...]) -> float:
    """``m t + (p - 1)(2t - F - 3W) / 2`` for equal stages."""
    return fill_drain_seconds(stages, layout.micro_batches, _units(stages), 0.5)


def check_dualpipe(layout: ScheduleLayout) -> None:
    need_vpp(layout, "dualpipe", (1,))
    need_pp(layout, "dualpipe", 2)
    need_even_pp(layout, "dualpipe")
    need_micro_batches(layout, "dualpipe", 2 * layout.pp, 2, "DualPipe.step: num_chunks >= 2 * num_ranks, even")


def check_dualpipev(layout: ScheduleLayout) -> None:
    need_vpp(layout, "dualpipev", (2,))
    need_pp(layout, "dualpipev", 2)
    need_micro_batches(layout, "dualpipev", 2 * layout.pp, 1, "DualPipeV.step: num_chunks >= 2 * num_ranks")


DUALPIPE = Schedule(
    name="dualpipe", in_flight=dualpipe_in_flight, pipeline_seconds=dualpipe_seconds,
    default_micro_batches=twice_pp_micro_batches, stage_chunks=dualpipe_chunks, check=check_dualpipe,
    passes=SPLIT_PASSES, model_copies=2, trainer_names={},
    source=_SOURCE,
    description="bidirectional (vpp=1): two model copies, PP+1 chunk-micro-batches, bubble (p/2-1)(F&B+B-3W)",
)
DUALPIPEV = Schedule(
    name="dualpipev", in_flight=dualpipev_in_flight, pipeline_seconds=dualpipev_seconds,
    default_micro_batches=twice_pp_micro_batches, stage_chunks=dualpipev_chunks, check=check_dualpipev,
    passes=SPLIT_PASSES, trainer_names={"torchtitan": "DualPipeV"},
    source=_SOURCE + "; DualPipeV: the cut-in-half DualPipe (Sea AI Lab)",
    description="V-shape (vpp=2): chunks r and 2p-1-r, 2p+1 chunk-micro-batches, bubble (p-1)(F&B+B-3W)/2",
)


@hookimpl
def hp_schedules():
    yield DUALPIPE
    yield DUALPIPEV
