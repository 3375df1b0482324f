"""The run's pipeline schedule, asked once: its checks, each stage's chunks and in-flight counts, its pipeline time.

The schedules themselves are plugins (:class:`hp_core.schedules.Schedule`,
the ``hp_schedules`` hook; the built-ins in ``hp_plugins/schedules``,
docs/schedules.md). This module calls them for the engine and turns a
plugin's mistake into a :class:`~hp_core.errors.PluginError` naming it.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from hp_core.errors import HPError, PluginError, describe
from hp_core.schedules import Schedule, ScheduleLayout, StagePasses
from hp_core.specs.parallel import ParallelSpec

__all__ = ["awaiting_weight_gradient", "check_layout", "default_global_batch_size", "pipeline_seconds", "rank_order",
           "run_check", "stage_plan", "weight_gradient_moments"]


def _call(schedule: Schedule, what: str, function: Callable[..., Any], *args: Any) -> Any:
    try:
        return function(*args)
    except HPError:
        raise
    except Exception as exc:
        raise PluginError(schedule.name, f"schedule {what} raised {type(exc).__name__}: {describe(exc)}") from exc


def stage_plan(schedule: Schedule, layout: ScheduleLayout, stage: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(chunks, in_flight)`` of one stage: the chunks it runs and the micro-batches each keeps at its peak.

    Raises:
        PluginError: The schedule raised, named a chunk outside ``0 .. pp*vpp - 1``,
            or gave a count per chunk that is not a non-negative integer.
    """
    chunks = tuple(_call(schedule, "stage_chunks", schedule.stage_chunks, layout, stage))
    counts = tuple(_call(schedule, "in_flight", schedule.in_flight, layout, stage))
    total = layout.pp * layout.vpp
    if not chunks or any(not isinstance(c, int) or not 0 <= c < total for c in chunks):
        raise PluginError(schedule.name, f"stage_chunks of stage {stage} must name chunks 0..{total - 1}, got {list(chunks)}")
    if len(counts) != len(chunks) or any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in counts):
        raise PluginError(schedule.name, f"in_flight of stage {stage} must give one non-negative integer per chunk "
                                         f"({len(chunks)}), got {list(counts)}")
    return chunks, counts


def awaiting_weight_gradient(schedule: Schedule, layout: ScheduleLayout, stage: int, in_flight: tuple[int, ...]) -> tuple[int, ...]:
    """Per chunk, those of *in_flight* past their input-gradient pass and awaiting their W at the peak.

    Raises:
        PluginError: The schedule raised, or gave a count per chunk that is not an integer
            from 0 to the chunk's in-flight count.
    """
    if schedule.awaiting_weight_gradient is None:
        return (0,) * len(in_flight)
    counts = tuple(_call(schedule, "awaiting_weight_gradient", schedule.awaiting_weight_gradient, layout, stage))
    if len(counts) != len(in_flight) or any(not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= k
                                            for n, k in zip(counts, in_flight)):
        raise PluginError(schedule.name, f"awaiting_weight_gradient of stage {stage} must give per chunk an integer from 0 "
                                         f"to its in-flight count {list(in_flight)}, got {list(counts)}")
    return counts


def weight_gradient_moments(schedule: Schedule, layout: ScheduleLayout, stage: int,
                            chunks: int) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """The schedule's other moments of *stage* with micro-batches awaiting W: per moment, ``(kept, awaiting)`` per chunk.

    Raises:
        PluginError: The schedule raised, or gave a moment that is not, per chunk (*chunks*), a kept count
            and an awaiting count from 0 to it.
    """
    if schedule.weight_gradient_moments is None:
        return ()
    found = []
    for moment in _call(schedule, "weight_gradient_moments", schedule.weight_gradient_moments, layout, stage):
        kept, waiting = (tuple(counts) for counts in moment)
        if len(kept) != chunks or len(waiting) != chunks or any(
                not isinstance(n, int) or isinstance(n, bool) or not isinstance(w, int) or isinstance(w, bool)
                or not 0 <= w <= n for n, w in zip(kept, waiting)):
            raise PluginError(schedule.name, f"weight_gradient_moments of stage {stage} must give per chunk ({chunks}) "
                                             f"a kept count and an awaiting count from 0 to it, got {moment!r}")
        found.append((kept, waiting))
    return tuple(found)


def rank_order(schedule: Schedule, layout: ScheduleLayout, stage: int, chunks: int) -> tuple[tuple[str, int, int], ...] | None:
    """The compute actions *stage*'s rank issues in a step (:attr:`Schedule.order`), or ``None`` where not stated.

    Raises:
        PluginError: The schedule raised, or gave an order that does not run, on each of the stage's *chunks*, one
            forward and one backward (``"F"``, ``"B"``) of every micro-batch.
    """
    if schedule.order is None:
        return None
    found = tuple(tuple(a) for a in _call(schedule, "order", schedule.order, layout, stage))
    expected = {(kind, c, j) for kind in "FB" for c in range(chunks) for j in range(layout.micro_batches)}
    if len(found) != len(expected) or set(found) != expected:
        raise PluginError(schedule.name, f"order of stage {stage} must run a forward and a backward (\"F\", \"B\") of "
                                         f"each of {layout.micro_batches} micro-batches on each of its {chunks} chunks once")
    return found


def run_check(schedule: Schedule, layout: ScheduleLayout) -> None:
    """The schedule's own check of the layout (cheap: asks no stage).

    Raises:
        ConfigError: The schedule cannot run the layout (its own message).
        PluginError: The check raised anything else.
    """
    if schedule.check is not None:
        _call(schedule, "check", schedule.check, layout)


def check_layout(schedule: Schedule, layout: ScheduleLayout) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """Run the schedule's check and ask it about every stage once; every chunk must run somewhere.

    Ask only once the layout's chunks are known to split the layers (``pp * vpp`` chunks at most
    the body layers), so that a schedule's per-stage counts stay small.

    Returns:
        Per stage, :func:`stage_plan`.

    Raises:
        ConfigError: The schedule cannot run the layout (its own message).
        PluginError: As :func:`stage_plan`, or some chunk runs on no stage.
    """
    run_check(schedule, layout)
    plans = tuple(stage_plan(schedule, layout, stage) for stage in range(layout.pp))
    missing = set(range(layout.pp * layout.vpp)) - {c for chunks, _ in plans for c in chunks}
    if missing:
        raise PluginError(schedule.name, f"chunks {sorted(missing)} run on no stage")
    return plans


def pipeline_seconds(schedule: Schedule, layout: ScheduleLayout, stages: tuple[StagePasses, ...]) -> float:
    """The schedule's time from the first forward to the last backward pass of a step.

    Raises:
        PluginError: The schedule raised or gave less than the slowest stage's
            own work (``micro_batches`` times its seconds), or not a finite number.
    """
    seconds = _call(schedule, "pipeline_seconds", schedule.pipeline_seconds, layout, stages)
    least = layout.micro_batches * max(s.seconds for s in stages)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
            or seconds < least * (1 - 1e-12):
        raise PluginError(schedule.name, f"pipeline_seconds must be a finite number of at least the slowest stage's "
                                         f"work ({least!r} s), got {seconds!r}")
    return float(seconds)


def default_global_batch_size(parallel: ParallelSpec, schedule: Schedule | None) -> int:
    """The layout's global batch size; where it states none, the schedule's default micro-batches times ``micro_batch_size * dp``.

    Raises:
        PluginError: The schedule's ``default_micro_batches`` raised or is not a positive integer.
    """
    if parallel.global_batch_size is not None or schedule is None:
        return parallel.resolved_global_batch_size
    m = _call(schedule, "default_micro_batches", schedule.default_micro_batches, parallel.pp, parallel.vpp)
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise PluginError(schedule.name, f"default_micro_batches must be a positive integer, got {m!r}")
    return m * parallel.micro_batch_size * parallel.dp
