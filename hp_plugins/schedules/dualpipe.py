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

Nothing awaits its W at the peak: the zero-bubble backwards (steps 3, 6 and 7 of ``step``) run
after it (the simulation in the tests checks it).

Bubble: the README's ``(PP/2 - 1)(F&B + B - 3W)`` (``F``, ``B`` the whole backward, ``W`` and
``F&B``, an overlapped forward and backward, of one chunk) holds for equal passes (``F = B - W =
W``, its setting); with unequal ones the order stalls by amounts that depend on the ratios (a
forward or a W outweighing the rest: the simulation gives up to twice the README's bubble,
docs/schedules.md). So hp runs the order itself (:mod:`hp_plugins.schedules._timeline`), an
overlapped F&B priced ``F + B`` (the runtime's overlap of the all-to-all is in the stage time
already), each rank with its own passes: for equal passes it is the README's form.

Gradients: a chunk runs on two ranks (``r`` and ``p - 1 - r`` hold the same two chunks), each for
half the micro-batches, so before the optimizer step each rank adds its mirror's gradients of
both chunks to its own (the DualPipe repository's ``examples/example_dualpipe.py`` sums them
after ``step``): hp prices it as an all-reduce of the rank's gradients over the pair, once per
step after the pipeline (:attr:`~hp_core.schedules.Schedule.gradient_sync`). DualPipeV has one
copy and no such sum.
"""

from __future__ import annotations

from hp_core.markers import hookimpl
from hp_core.schedules import GradientSync, Schedule, ScheduleLayout, StagePasses
from hp_plugins.schedules._common import need_even_pp, need_micro_batches, need_pp, need_vpp
from hp_plugins.schedules._timeline import order_moments, order_seconds
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


def dualpipe_moments(layout: ScheduleLayout, stage: int) -> tuple:
    """Moments of its order with more micro-batches awaiting W than its peak (:func:`._timeline.order_moments`)."""
    return order_moments("dualpipe", layout.pp, layout.micro_batches, stage, dualpipe_chunks(layout, stage),
                         (dualpipe_in_flight(layout, stage), (0, 0)))


def dualpipev_moments(layout: ScheduleLayout, stage: int) -> tuple:
    """As :func:`dualpipe_moments`, of DualPipeV's order."""
    return order_moments("dualpipev", layout.pp, layout.micro_batches, stage, dualpipev_chunks(layout, stage),
                         (dualpipev_in_flight(layout, stage), (0, 0)))


def dualpipe_seconds(layout: ScheduleLayout, stages: tuple[StagePasses, ...]) -> float:
    """The order run (:mod:`._timeline`): ``m t + (p/2 - 1)(2t - F - 3W)`` for equal stages and passes."""
    return order_seconds("dualpipe", layout, stages, 1)


def dualpipev_seconds(layout: ScheduleLayout, stages: tuple[StagePasses, ...]) -> float:
    """The order run, each rank's two chunks at half its time: ``m t + (p - 1)(2t - F - 3W) / 2`` for equal ones."""
    return order_seconds("dualpipev", layout, stages, 2)


MIRROR_SYNC = GradientSync(
    op="all_reduce", ranks=2,
    description="each rank's gradients of its two chunks summed with its mirror's (rank p-1-r holds the same chunks)",
    source="deepseek-ai/DualPipe examples/example_dualpipe.py: the two copies' gradients added after DualPipe.step",
)


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
    passes=SPLIT_PASSES, model_copies=2, trainer_names={}, gradient_sync=MIRROR_SYNC,
    weight_gradient_moments=dualpipe_moments,
    source=_SOURCE,
    description="bidirectional (vpp=1): two model copies, PP+1 chunk-micro-batches, bubble (p/2-1)(F&B+B-3W) at equal passes, else its order run",
)
DUALPIPEV = Schedule(
    name="dualpipev", in_flight=dualpipev_in_flight, pipeline_seconds=dualpipev_seconds,
    default_micro_batches=twice_pp_micro_batches, stage_chunks=dualpipev_chunks, check=check_dualpipev,
    passes=SPLIT_PASSES, trainer_names={"torchtitan": "DualPipeV"}, weight_gradient_moments=dualpipev_moments,
    source=_SOURCE + "; DualPipeV: the cut-in-half DualPipe (Sea AI Lab)",
    description="V-shape (vpp=2): chunks r and 2p-1-r, 2p+1 chunk-micro-batches, bubble (p-1)(F&B+B-3W)/2 at equal passes, else its order run",
)


@hookimpl
def hp_schedules():
    yield DUALPIPE
    yield DUALPIPEV
