"""Pipeline schedules as records: what the ``hp_schedules`` hook yields.

A :class:`Schedule` states, for a layout (:class:`ScheduleLayout`: ``pp``,
``vpp``, micro-batches per step) and a stage index:

* which pipeline chunks the stage runs (:attr:`Schedule.stage_chunks`): the
  body is split into ``pp * vpp`` chunks; a chunk may run on two ranks
  (DualPipe's two model copies, :attr:`Schedule.model_copies`);
* how many micro-batches each of its chunks keeps at the stage's peak point
  (:attr:`Schedule.in_flight`): a micro-batch is kept from its forward until
  its last backward pass on that chunk (the weight-gradient pass where the
  backward is split, Qi et al. 2023, Section 2: its inputs stay alive until W);
* of those, how many have run their input-gradient pass and wait for their
  weight-gradient pass at that peak (:attr:`Schedule.awaiting_weight_gradient`);
* which passes it runs (:attr:`Schedule.passes`) and what each keeps;
* a collective it adds once per step over a rank's gradients
  (:attr:`Schedule.gradient_sync`: DualPipe's sum of the two model copies);
* how long the pipeline takes for given per-stage times
  (:attr:`Schedule.pipeline_seconds`), which prices its bubble;
* where stated, the compute order each rank issues (:attr:`Schedule.order`),
  from which FSDP under a multi-stage schedule is priced.

The built-ins are in ``hp_plugins/schedules`` (docs/schedules.md); a third
party yields its own through the same hook.
"""

from __future__ import annotations

from typing import Callable, Mapping

import attrs

from hp_core.validators import name_matching, non_negative_number, one_of, positive_int

__all__ = ["PASS_NAMES", "GradientSync", "Pass", "RankAction", "Schedule", "ScheduleLayout", "StagePasses", "interleaved_chunks"]

# One compute action of a rank's order (Schedule.order): the pass ("F" a forward, "B" a whole backward), the chunk's
# position in the rank's stage_chunks, and the micro-batch.
RankAction = tuple[str, int, int]

# The passes a schedule may run per micro-batch and chunk: a forward, a whole
# backward, or the backward split into its input-gradient (B) and weight-gradient (W) passes.
PASS_NAMES = ("forward", "backward", "input_gradient", "weight_gradient")
# A plugin name that may start with a digit: "1f1b".
_schedule_name = name_matching(r"^[a-z0-9][a-z0-9_.-]*$", "a lower-case name (letters, digits, '_', '-', '.')")


@attrs.frozen
class ScheduleLayout:
    """What a schedule is asked about: the pipeline's shape.

    Attributes:
        pp: Pipeline ranks (stages) ``p``.
        vpp: Chunks per stage ``v`` as the layout states it (``pp * vpp``
            chunks in all).
        micro_batches: Micro-batches per step ``m`` (per data-parallel rank).
    """

    pp: int = attrs.field(validator=positive_int)
    vpp: int = attrs.field(validator=positive_int)
    micro_batches: int = attrs.field(validator=positive_int)


@attrs.frozen
class Pass:
    """One pass a schedule runs per micro-batch and chunk.

    Attributes:
        name: One of :data:`PASS_NAMES`.
        keeps: What it leaves alive, in words (shown by ``hp plugins``).
    """

    name: str = attrs.field(validator=one_of(PASS_NAMES))
    keeps: str = ""


@attrs.frozen
class StagePasses:
    """One stage's (rank's) time per micro-batch, as a schedule prices its pipeline.

    Attributes:
        seconds: Everything the stage runs per micro-batch: forward, backward
            (weight gradients included), recompute and exposed communication.
            Under :attr:`Schedule.model_copies` ``> 1`` a micro-batch runs one
            of the rank's copies, so it is the mean over them.
        weight_gradient_seconds: The part of *seconds* that is weight-gradient
            GEMMs (the W pass a zero-bubble schedule defers).
        forward_seconds: The part of *seconds* that is the forward pass (its
            compute, with the exposed communication shared out in proportion
            to compute); the rest is the backward, recompute included.
    """

    seconds: float = attrs.field(validator=non_negative_number)
    weight_gradient_seconds: float = attrs.field(default=0.0, validator=non_negative_number)
    forward_seconds: float = attrs.field(default=0.0, validator=non_negative_number)


@attrs.frozen
class GradientSync:
    """A collective a schedule adds once per step over the gradients each rank holds.

    Attributes:
        op: ``all_reduce`` (the only one the step time prices so far).
        ranks: Ranks in each group, pipeline ranks apart (2: a rank and its mirror).
        description: What it reduces, in words.
        source: Where it comes from.
    """

    op: str = attrs.field(validator=one_of(("all_reduce",)))
    ranks: int = attrs.field(validator=positive_int)
    description: str = ""
    source: str = ""


def interleaved_chunks(layout: ScheduleLayout, stage: int) -> tuple[int, ...]:
    """Megatron-Core's assignment: stage ``i`` runs chunks ``i, i + p, ..., i + (v - 1) p``."""
    return tuple(stage + k * layout.pp for k in range(layout.vpp))


def _forward_backward() -> tuple[Pass, ...]:
    return (Pass("forward", "the activations its backward reads"), Pass("backward", "nothing: frees the micro-batch"))


@attrs.frozen
class Schedule:
    """A pipeline schedule (the ``hp_schedules`` hook; docs/hooks/hp_schedules.md).

    Attributes:
        name: Unique name (``--schedule NAME``).
        in_flight: ``in_flight(layout, stage) -> tuple[int, ...]``: per chunk
            of :attr:`stage_chunks` (same order), the micro-batches it keeps
            at the stage's activation peak (forward done, last backward pass
            not yet).
        pipeline_seconds: ``pipeline_seconds(layout, stages) -> float``: the
            time from the first forward to the last backward pass of a step,
            given one :class:`StagePasses` per stage; the bubble is this less
            ``micro_batches`` times the slowest stage's ``seconds``.
        default_micro_batches: ``default_micro_batches(pp, vpp) -> int``:
            micro-batches per step when the run states no global batch size
            (the fewest with which every stage reaches its full in-flight count).
        stage_chunks: ``stage_chunks(layout, stage) -> tuple[int, ...]``: the
            chunks the stage runs, the one whose backward it runs first last.
        check: ``check(layout) -> None``, raising
            :class:`hp_core.errors.ConfigError` (path ``$.parallel.schedule``,
            ``$.parallel.vpp`` or ``$.parallel.global_batch_size``) for a
            layout the schedule cannot run; ``None`` accepts every layout.
        awaiting_weight_gradient: ``awaiting_weight_gradient(layout, stage) ->
            tuple[int, ...]``: per chunk, those of :attr:`in_flight` whose
            input-gradient pass has run and whose weight-gradient pass has not,
            at the same peak (each keeps what its W reads: every matmul's input
            and output gradient); ``None``: none (no split backward, or every W
            runs before the peak).
        weight_gradient_moments: ``weight_gradient_moments(layout, stage) ->
            tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]``: other moments
            of the stage, each per chunk ``(kept, awaiting W)``, holding more
            micro-batches past their input-gradient pass than the peak (between
            a B and its W); priced as the ``awaiting_w`` peak point,
            which binds where W's tensors outweigh a whole micro-batch's
            (sequence parallelism, recompute); ``None``: none.
        gradient_sync: A collective over each rank's gradients once per step
            (:class:`GradientSync`), priced after the pipeline; ``None``: none.
        passes: The passes it runs per micro-batch and chunk.
        model_copies: How many copies of the model the pipeline holds: 2 for
            DualPipe (every chunk runs on two ranks, each for half the
            micro-batches, so its parameters, gradients and optimizer states
            are held twice).
        trainer_names: Per exporter name, the trainer's own name for this
            schedule (torchtitan ``pipeline_parallel_schedule``); an exporter
            whose trainer is not listed refuses a plan with this schedule.
        fill_share: ``fill_share(layout) -> s`` with ``pipeline_seconds >= m
            t_max + s (sum t - t_max)`` for every per-stage time, which the
            layout search's lower bounds use; ``None``: 0 (the slowest stage's
            micro-batches alone, always a lower bound).
        order: ``order(layout, stage) -> tuple[RankAction, ...]``: the compute
            actions the stage's rank issues in one step, in the trainer's
            order (idle slots left out), each ``(pass, chunk position in
            stage_chunks, micro-batch)``; FSDP (zero 3) under ``vpp > 1`` is
            priced from it (docs/time.md, "FSDP under pipeline parallelism");
            ``None``: not stated.
        source: Where its memory and bubble formulas come from.
        description: One line for ``hp plugins``.
    """

    name: str = attrs.field(validator=_schedule_name)
    in_flight: Callable[[ScheduleLayout, int], tuple[int, ...]]
    pipeline_seconds: Callable[[ScheduleLayout, tuple[StagePasses, ...]], float]
    default_micro_batches: Callable[[int, int], int]
    stage_chunks: Callable[[ScheduleLayout, int], tuple[int, ...]] = interleaved_chunks
    check: Callable[[ScheduleLayout], None] | None = None
    passes: tuple[Pass, ...] = attrs.field(factory=_forward_backward, converter=tuple)
    model_copies: int = attrs.field(default=1, validator=positive_int)
    trainer_names: Mapping[str, str] = attrs.field(factory=dict, converter=dict)
    fill_share: Callable[[ScheduleLayout], float] | None = None
    awaiting_weight_gradient: Callable[[ScheduleLayout, int], tuple[int, ...]] | None = None
    gradient_sync: GradientSync | None = None
    weight_gradient_moments: Callable[[ScheduleLayout, int], tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]] | None = None
    order: Callable[[ScheduleLayout, int], tuple[RankAction, ...]] | None = None
    source: str = ""
    description: str = ""

    @property
    def splits_backward(self) -> bool:
        """Whether the backward runs as separate input-gradient and weight-gradient passes."""
        return any(p.name == "weight_gradient" for p in self.passes)
