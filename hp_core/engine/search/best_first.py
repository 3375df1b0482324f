"""The layout search's second phase, best first, and :func:`search`, which runs both phases.

The candidates the first phase (:mod:`hp_core.engine.search.bounds`) bounded
are taken in the order of their bound, in waves of a fixed size: one taken
with its cheap bound is refined (:func:`_refine`), one taken with its refined
bound is planned (:func:`_plan`), while its bound can still enter the top K.
See :mod:`hp_core.engine.search` for the whole method.
"""

from __future__ import annotations

import bisect
import heapq
import math
from concurrent.futures import Executor
from typing import Any, Callable, Iterable, Mapping

import attrs

from hp_core.engine.estimate import estimate_run
from hp_core.engine.prepare import prepare
from hp_core.engine.recompute.layout import describe_ranges
from hp_core.engine.recompute.plan import plan_run
from hp_core.engine.search.bounds import _Bounder, _families, _first_phase, _first_work, _FirstTask, _routed_experts
from hp_core.engine.search.layouts import (
    FIXABLE,
    R_FULL,
    R_PLAN,
    R_SLOWER,
    R_STATIC,
    REASONS,
    Candidate,
    Layout,
    SearchResult,
    _Job,
    _reason_of,
    zero_levels,
)
from hp_core.engine.timing import time_run
from hp_core.errors import ConfigError
from hp_core.registry import Registry
from hp_core.specs import HardwareSpec, ModelSpec, PrecisionSpec, RecomputeSpec, Setting

# Candidates planned per wave of the second phase; fixed, so what is planned does not depend on the executor.
_WAVE = 32

_FULL = RecomputeSpec(default=Setting(mode="full"))


@attrs.frozen
class _Task:
    """One candidate for a worker: refine its bounds (``plan`` false) or plan it."""

    job: _Job
    layout: Layout
    plan: bool


@attrs.frozen
class _Refined:
    """A refined candidate: the reason it cannot fit, or its step time with nothing recomputed."""

    reason: str | None
    bound_seconds: float = math.inf


def _work(task: _Task) -> _Refined | Candidate | None:
    """Refine or plan one candidate (:func:`search`'s second phase)."""
    return _plan(task.job, task.layout) if task.plan else _refine(task.job, task.layout)


def _refine(job: _Job, layout: Layout) -> _Refined:
    """The exact memory bounds and the exact step-time bound of one candidate (:mod:`hp_core.engine.search`)."""
    parallel = layout.parallel(job.seq_len, job.global_batch_size)
    limit = job.hardware.memory_bytes - job.reserve_bytes
    try:
        run = prepare(job.model, parallel, registry=job.registry, runtime=job.runtime, precision=job.precision,
                      census=job.census)
        bound = estimate_run(run, _FULL)
    except ConfigError as exc:
        return _Refined(_reason_of(exc))
    if max(stage.memory.static_bytes for stage in bound.stages) > limit:
        return _Refined(R_STATIC)
    if bound.peak_bytes > limit:
        return _Refined(R_FULL)
    return _Refined(None, time_run(run, job.hardware).step_seconds)


def _plan(job: _Job, layout: Layout) -> Candidate | None:
    """The planner's fastest plan of one candidate, ``None`` when it does not fit."""
    run = prepare(job.model, layout.parallel(job.seq_len, job.global_batch_size), registry=job.registry,
                  runtime=job.runtime, precision=job.precision, census=job.census)
    plan = plan_run(run, job.hardware, reserve_bytes=job.reserve_bytes)
    if not plan.fits:
        return None
    result = plan.plan
    return Candidate(
        layout=layout, step_seconds=result.step_seconds, mfu=result.time.mfu, peak_bytes=result.peak_bytes,
        stage_peaks_bytes=tuple(stage.peak_bytes for stage in result.stages), recompute=result.recompute,
        plan_summary=describe_ranges(result.recompute.layers, result.recompute.default),
    )


def _map(function: Callable[[Any], Any], tasks: list[Any], executor: Executor | None,
         tick: Callable[[], None]) -> list[Any]:
    """``function`` over *tasks*, in their order, serially or through *executor*."""
    if executor is None:
        answers = []
        for task in tasks:
            answers.append(function(task))
            tick()
        return answers
    from concurrent.futures import as_completed

    futures = [executor.submit(function, task) for task in tasks]
    for _ in as_completed(futures):
        tick()
    return [future.result() for future in futures]


def search(
    model: ModelSpec,
    *,
    registry: Registry,
    devices: int,
    hardware: HardwareSpec,
    global_batch_size: int,
    seq_len: int,
    runtime: str = "generic",
    fixed: Mapping[str, int] = {},
    top: int = 10,
    executor: Executor | None = None,
    precision: PrecisionSpec | None = None,
    census: str = "formulas",
    reserve_bytes: int = 0,
    zero: Iterable[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SearchResult:
    """Every layout of *devices* for the model, planned and ranked by step time (:mod:`hp_core.engine.search`).

    Args:
        model: The layer stack.
        registry: Layer kinds, runtimes and census sources.
        devices: The device count every layout multiplies to.
        hardware: The device: its memory bounds the plans, its rates price them.
        global_batch_size: Sequences per step.
        seq_len: Tokens per sequence.
        runtime: The runtime profile's name (its timing and the recompute it executes).
        fixed: Degrees held fixed, by name (:data:`FIXABLE`): ``{"tp": 8}``.
        top: How many of the fastest fitting candidates to return.
        executor: Runs the first phase one task per ``(cp, tp)`` and the
            second one task per candidate (refine or plan); ``None``: serially
            in this process, the first phase sharing one set of layer
            evaluations. A process pool (or a Dask or Ray executor) needs the
            model and the registry to pickle, as the built-in ones do.
        precision: Byte widths; the runtime's when ``None``.
        census: The census source's name.
        reserve_bytes: Memory to keep free on every device.
        zero: The ZeRO levels to search; :func:`zero_levels` of the runtime when ``None``.
        progress: Called with ``(done, in all)``: during the first phase per
            ``(dp, cp, tp)`` enumerated (per task through an executor), then
            per task finished, ``in all`` counting the candidates whose bound
            may still enter the top K.

    Raises:
        ConfigError: An unknown fixed name, a non-positive count, or a runtime
            without a timing profile.
    """
    rt = registry.runtime(runtime)
    if rt.timing is None:
        raise ConfigError("$.runtime", f"runtime {rt.name!r} states no timing profile, so layouts cannot be ranked by step time")
    for name, value in (("devices", devices), ("global_batch_size", global_batch_size), ("seq_len", seq_len), ("top", top)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"$.{name}", f"must be a positive integer, got {value!r}")
    unknown = sorted(set(fixed) - set(FIXABLE))
    if unknown:
        raise ConfigError("--fix", f"cannot fix {unknown}; fixable: {', '.join(FIXABLE)}")
    if not 0 <= reserve_bytes < hardware.memory_bytes:
        raise ConfigError("$.reserve_bytes", "the reserve must be at least 0 and below the device memory")
    zeros = tuple(sorted(set(zero))) if zero is not None else zero_levels(rt)
    job = _Job(model, registry, hardware, runtime, precision, census, reserve_bytes, seq_len, global_batch_size)
    bounder = _Bounder(job)
    if bounder.body_count == 0:
        raise ConfigError("$.model.layers", "the model has no body layers (no kind placed 'body')")
    counts: dict[str, int] = {}
    # Phase 1: every candidate, rejected on sight or bounded: (time bound, layout key, layers per chunk).
    experts = _routed_experts(model)
    if executor is None:
        bounded, considered = _first_phase(bounder, devices, experts, zeros, dict(fixed), counts, progress)
    else:
        # One task per (cp, tp): the layer evaluations are keyed by (tp, cp, ep, etp, mbs), so no two
        # tasks evaluate the same context. Answers are merged in submission order (and the candidates
        # sorted), as serially.
        shared: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
        for dp, cp, tp in _families(devices, fixed):
            shared.setdefault((cp, tp), []).append((dp, cp, tp))
        shares = [tuple(group) for group in shared.values()]
        tasks = [_FirstTask(job, devices, experts, zeros, tuple(sorted(fixed.items())), share) for share in shares]
        finished = 0

        def first_tick() -> None:
            nonlocal finished
            finished += 1
            if progress is not None:
                progress(finished, len(tasks))

        bounded, considered = [], 0
        for share_bounded, share_counts, share_considered in _map(_first_work, tasks, executor, first_tick):
            bounded.extend(share_bounded)
            considered += share_considered
            for reason, count in share_counts.items():
                counts[reason] = counts.get(reason, 0) + count
    bounded.sort()

    # Phase 2: best first, in waves: refine a candidate's bounds, then plan it, while its bound can
    # still enter the top K. ``refined`` is a heap of (exact step-time bound, key, layout).
    refined: list[tuple[float, tuple[int, ...], Layout]] = []
    fitting: list[Candidate] = []
    planned = done = 0
    next_bound = 0  # index into ``bounded`` of the next candidate to refine

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            kth = fitting[top - 1].step_seconds if len(fitting) >= top else math.inf
            pending = bisect.bisect_right(bounded, (kth, _LAST), lo=next_bound) - next_bound
            progress(done, done + pending + len(refined))

    while True:
        kth = fitting[top - 1].step_seconds if len(fitting) >= top else math.inf
        wave: list[_Task] = []
        while len(wave) < _WAVE:
            first = bounded[next_bound][:2] if next_bound < len(bounded) else (math.inf, _LAST)
            second = refined[0][:2] if refined else (math.inf, _LAST)
            if min(first, second)[0] > kth or min(first, second)[0] == math.inf:
                break
            if first <= second:
                _, key, split = bounded[next_bound]
                next_bound += 1
                wave.append(_Task(job, _layout(key, split), plan=False))
            else:
                wave.append(_Task(job, heapq.heappop(refined)[2], plan=True))
        if not wave:
            break
        for task, answer in zip(wave, _map(_work, wave, executor, tick)):
            if not task.plan:
                if answer.reason is not None:
                    counts[answer.reason] = counts.get(answer.reason, 0) + 1
                else:
                    heapq.heappush(refined, (answer.bound_seconds, task.layout.key, task.layout))
                continue
            planned += 1
            if answer is None:
                counts[R_PLAN] = counts.get(R_PLAN, 0) + 1
            else:
                fitting.append(answer)
        fitting.sort(key=lambda c: (c.step_seconds, c.layout.key))
    slower = len(bounded) - next_bound + len(refined)
    if slower:
        counts[R_SLOWER] = counts.get(R_SLOWER, 0) + slower
    if progress is not None:
        progress(done, done)
    return SearchResult(
        model=model.name, runtime=rt.name, hardware=hardware.name, devices=devices, global_batch_size=global_batch_size,
        seq_len=seq_len, considered=considered, planned=planned, fitting=len(fitting), top=tuple(fitting[:top]),
        rejected={reason: counts[reason] for reason in REASONS if counts.get(reason)},
    )


# Sorts after every layout key: (bound, _LAST) bounds every candidate of that bound from above.
_LAST = (math.inf,)


def _layout(key: tuple[int, ...], split: tuple[int, ...] | None) -> Layout:
    dp, cp, tp, pp, vpp, ep, etp, mbs, zero = key
    return Layout(dp=dp, cp=cp, tp=tp, pp=pp, vpp=vpp, ep=ep, etp=etp, zero=zero, micro_batch_size=mbs,
                  layers_per_stage=split)
