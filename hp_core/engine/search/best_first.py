"""The layout search's second phase, best first, and :func:`search`, which runs both phases.

The candidates the first phase (:mod:`hp_core.engine.search.first_phase`) bounded
are taken in the order of their bound, in waves of a fixed size: one taken
with its cheap bound is refined (:func:`_refine`), one taken with its refined
bound is planned (:func:`_plan`), while its bound can still enter the top K.
The first phase answers a lower bound on each cheap bound; the cheap bound
itself is priced here, in this process, only for the candidates whose lower
bound comes up (:class:`_Cheap`), so the waves are those of the cheap bounds
themselves. See :mod:`hp_core.engine.search` for the whole method.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import OrderedDict
from concurrent.futures import Executor
from typing import Any, Callable, Iterable, Mapping

import attrs

from hp_core.engine.estimate import estimate_run, precision_provenance
from hp_core.engine.precision import on_device
from hp_core.engine.prepare import EvaluatedLayers, prepare
from hp_core.engine.recompute.layout import describe_ranges
from hp_core.engine.recompute.plan import plan_run
from hp_core.engine.search.bounds import _Bounder, _time_bound
from hp_core.engine.search.first_phase import (
    _KEY_FIELDS,
    _allowed,
    count_candidates,
    _families,
    _first_phase,
    _first_work,
    _FirstTask,
    _key_bits,
    _pack,
    _routed_experts,
    _shares,
    _unpack,
)
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
    balanced_layers,
    zero_levels,
)
from hp_core.engine.timing import time_run
from hp_core.engine.timing.rates import compute_dtype
from hp_core.bounds import MAX_BATCH, MAX_DEVICES, MAX_INT, MAX_SEARCH_LAYOUTS, MAX_SEQ_LEN, check_int
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


def _work(task: _Task, layers: EvaluatedLayers | None = None) -> _Refined | Candidate | None:
    """Refine or plan one candidate (:func:`search`'s second phase).

    Args:
        layers: The groups evaluated in the candidate's layer context where
            this process has them (:func:`~hp_core.engine.prepare.prepare`'s
            ``layers``); evaluated again when ``None``.
    """
    return _plan(task.job, task.layout, layers) if task.plan else _refine(task.job, task.layout, layers)


def _refine(job: _Job, layout: Layout, layers: EvaluatedLayers | None = None) -> _Refined:
    """The exact memory bounds and the exact step-time bound of one candidate (:mod:`hp_core.engine.search`)."""
    parallel = layout.parallel(job.seq_len, job.global_batch_size)
    limit = job.hardware.memory_bytes - job.reserve_bytes
    try:
        run = prepare(job.model, parallel, registry=job.registry, runtime=job.runtime, precision=job.precision,
                      census=job.census, layers=layers)
        bound = estimate_run(on_device(run, job.hardware), _FULL)
    except ConfigError as exc:
        return _Refined(_reason_of(exc))
    if max(stage.memory.static_bytes for stage in bound.stages) > limit:
        return _Refined(R_STATIC)
    if bound.peak_bytes > limit:
        return _Refined(R_FULL)
    return _Refined(None, time_run(run, job.hardware).step_seconds)


def _plan(job: _Job, layout: Layout, layers: EvaluatedLayers | None = None) -> Candidate | None:
    """The planner's fastest plan of one candidate, ``None`` when it does not fit."""
    run = prepare(job.model, layout.parallel(job.seq_len, job.global_batch_size), registry=job.registry,
                  runtime=job.runtime, precision=job.precision, census=job.census, layers=layers)
    plan = plan_run(run, job.hardware, reserve_bytes=job.reserve_bytes)
    if not plan.fits:
        return None
    result = plan.plan
    return Candidate(
        layout=layout, step_seconds=result.step_seconds, mfu=result.time.mfu, peak_bytes=result.peak_bytes,
        stage_peaks_bytes=tuple(stage.peak_bytes for stage in result.stages), recompute=result.recompute,
        plan_summary=describe_ranges(result.recompute.layers, result.recompute.default), unproven=result.unproven,
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
    runtime: "str | Runtime" = "generic",
    fixed: Mapping[str, int] = {},
    top: int = 10,
    executor: Executor | None = None,
    precision: PrecisionSpec | None = None,
    census: str = "formulas",
    reserve_bytes: int = 0,
    zero: Iterable[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
    schedules: Iterable[str] | None = None,
) -> SearchResult:
    """Every layout of *devices* for the model, planned and ranked by step time (:mod:`hp_core.engine.search`).

    Args:
        model: The layer stack.
        registry: Layer kinds, runtimes and census sources.
        devices: The device count every layout multiplies to.
        hardware: The device: its memory bounds the plans, its rates price them.
        global_batch_size: Sequences per step.
        seq_len: Tokens per sequence.
        runtime: The runtime profile's name (its timing and the recompute it executes),
            or the profile with per-run options applied.
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
        schedules: The pipeline schedules to search, a dimension of the
            search: each is searched in turn and the candidates ranked
            together (counts added up); ``None``: ``1f1b``, or
            ``interleaved_1f1b`` when ``vpp > 1``.

    A precision keeping layers in the compute dtype under its recipe
    (``high_precision_layers_at_start`` / ``_at_end``) holds them fixed, not
    searched: every candidate is priced with them (as ``prepare`` splits the
    model), and a pipeline whose stages hold fewer body layers than either
    count is rejected by that reason (:data:`~hp_core.engine.search.layouts.R_KEPT`).

    Raises:
        ConfigError: An unknown fixed name, a non-positive count, a runtime
            without a timing profile, or layers kept in the compute dtype that
            no layout can run (a delayed-scaling recipe, more than the body's
            layers: :func:`~hp_core.engine.precision.check_high_precision_layers`).
    """
    if schedules is not None:
        names = list(dict.fromkeys(schedules))
        if not names:
            raise ConfigError("--schedules", "name at least one pipeline schedule (see 'hp plugins')")
        for name in names:
            registry.schedule(name, "--schedules")
        results = [_search(model, registry, devices, hardware, global_batch_size, seq_len, runtime, fixed, top, executor,
                           precision, census, reserve_bytes, zero, progress, name) for name in names]
        return _merged(results, top)
    return _search(model, registry, devices, hardware, global_batch_size, seq_len, runtime, fixed, top, executor,
                   precision, census, reserve_bytes, zero, progress, None)


def _merged(results: list[SearchResult], top: int) -> SearchResult:
    """Searches of one job under several schedules as one: candidates ranked together, counts added up."""
    first = results[0]
    ranked = sorted((c for r in results for c in r.top), key=lambda c: (c.step_seconds, c.layout.key, c.layout.schedule))
    rejected: dict[str, int] = {}
    for r in results:
        for reason, count in r.rejected.items():
            rejected[reason] = rejected.get(reason, 0) + count
    return attrs.evolve(first, considered=sum(r.considered for r in results), planned=sum(r.planned for r in results),
                        fitting=sum(r.fitting for r in results), top=tuple(ranked[:top]),
                        rejected={reason: rejected[reason] for reason in REASONS if rejected.get(reason)})


def _search(model: ModelSpec, registry: Registry, devices: int, hardware: HardwareSpec, global_batch_size: int,
            seq_len: int, runtime: Any, fixed: Mapping[str, int], top: int, executor: Executor | None,
            precision: PrecisionSpec | None, census: str, reserve_bytes: int, zero: Iterable[int] | None,
            progress: Callable[[int, int], None] | None, schedule: str | None) -> SearchResult:
    """:func:`search` under one schedule (``None``: by vpp)."""
    rt = registry.runtime(runtime)
    if rt.timing is None:
        raise ConfigError("$.runtime", f"runtime {rt.name!r} states no timing profile, so layouts cannot be ranked by step time")
    for name, value, high, bound in (("devices", devices, MAX_DEVICES, "MAX_DEVICES"),
                                     ("global_batch_size", global_batch_size, MAX_BATCH, "MAX_BATCH"),
                                     ("seq_len", seq_len, MAX_SEQ_LEN, "MAX_SEQ_LEN"), ("top", top, MAX_INT, "MAX_INT")):
        check_int(value, f"$.{name}", high=high, what=bound)
    unknown = sorted(set(fixed) - set(FIXABLE))
    if unknown:
        raise ConfigError("--fix", f"cannot fix {unknown}; fixable: {', '.join(FIXABLE)}")
    if not 0 <= reserve_bytes < hardware.memory_bytes:
        raise ConfigError("$.reserve_bytes", "the reserve must be at least 0 and below the device memory")
    zeros = tuple(sorted(set(zero))) if zero is not None else zero_levels(rt)
    if rt.timing is not None and rt.timing.schedule.fsdp_replicate > 1:
        # HSDP shards with FSDP (check_fsdp_replicate): only ZeRO 3 is searched.
        if 3 not in zeros:
            raise ConfigError("$.runtime.options.hsdp_replicate",
                              f"HSDP shards with FSDP: the search's ZeRO levels {list(zeros)} exclude 3 (fix zero 3 or drop the option)")
        zeros = (3,)
    job = _Job(model, registry, hardware, runtime, precision, census, reserve_bytes, seq_len, global_batch_size, schedule)
    bounder = _Bounder(job)
    if bounder.body_count == 0:
        raise ConfigError("$.model.layers", "the model has no body layers (no kind placed 'body')")
    counts: dict[str, int] = {}
    # Phase 1: every candidate, rejected on sight or bounded: a lower bound on its cheap bound and its key,
    # packed (bounds._pack).
    experts = _routed_experts(model, registry, bounder.rt, bounder.precision, seq_len)
    size = count_candidates(devices, fixed, bounder.body_count, global_batch_size, experts is not None,
                            len(_allowed(fixed, "zero", zeros)))
    if size > MAX_SEARCH_LAYOUTS:
        raise ConfigError("$.devices", f"the search would enumerate {size:,} candidate layouts, more than "
                                       f"{MAX_SEARCH_LAYOUTS:,} (MAX_SEARCH_LAYOUTS); fix some degrees (--fix tp=8) "
                                       "or search fewer devices")
    if executor is None:
        bounded, considered = _first_phase(bounder, devices, experts, zeros, dict(fixed), counts, progress)
    else:
        # One task per (cp, tp): the layer evaluations are keyed by (tp, cp, ep, etp, mbs), so no two
        # tasks evaluate the same context. Answers are merged in submission order (and the candidates
        # sorted), as serially.
        shares = _shares(_families(devices, fixed))
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
    cheap = _Cheap(bounder, bounded, _key_bits(devices, global_batch_size, bounder.body_count, zeros),
                   keep=executor is None)

    # Phase 2: best first, in waves: refine a candidate's bounds, then plan it, while its bound can
    # still enter the top K. ``refined`` is a heap of (exact step-time bound, key, layout).
    refined: list[tuple[float, tuple[int, ...], Layout]] = []
    fitting: list[Candidate] = []
    planned = done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            kth = fitting[top - 1].step_seconds if len(fitting) >= top else math.inf
            progress(done, done + cheap.pending(kth) + len(refined))

    def work(task: _Task) -> _Refined | Candidate | None:
        return _work(task, cheap.evaluated(task.layout))

    while True:
        kth = fitting[top - 1].step_seconds if len(fitting) >= top else math.inf
        wave: list[_Task] = []
        while len(wave) < _WAVE:
            second = refined[0][:2] if refined else (math.inf, _LAST)
            first = cheap.head(second, kth)
            if min(first, second)[0] > kth or min(first, second)[0] == math.inf:
                break
            if first <= second:
                wave.append(_Task(job, cheap.pop(), plan=False))
            else:
                wave.append(_Task(job, heapq.heappop(refined)[2], plan=True))
        if not wave:
            break
        for task, answer in zip(wave, _map(work if executor is None else _work, wave, executor, tick)):
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
    slower = cheap.left() + len(refined)
    if slower:
        counts[R_SLOWER] = counts.get(R_SLOWER, 0) + slower
    if progress is not None:
        progress(done, done)
    return SearchResult(
        model=model.name, runtime=rt.name, hardware=hardware.name, devices=devices, global_batch_size=global_batch_size,
        seq_len=seq_len, considered=considered, planned=planned, fitting=len(fitting), top=tuple(fitting[:top]),
        rejected={reason: counts[reason] for reason in REASONS if counts.get(reason)},
        high_precision_layers=bounder.kept_layers, compute_dtype_kinds=bounder.prepared.compute_dtype_kinds,
        precision=precision_provenance(bounder.precision, bounder.recipe), mfu_dtype=compute_dtype(bounder.precision, hardware),
    )


class _Cheap:
    """The bounded candidates in the order of their cheap bound, each bound priced only when it may come up.

    The first phase answers each candidate with a lower bound on its cheap
    bound (:func:`~hp_core.engine.search.bounds._first_phase`), sorted. A
    candidate's cheap bound (:func:`~hp_core.engine.search.bounds._time_bound`
    of every group's seconds in its context, the bound the first phase used to
    answer in full) is priced here when its lower bound comes before what the
    caller would take otherwise: :meth:`head` answers the least
    ``(cheap bound, key)`` left whenever it is at most the caller's
    alternative and at most the K-th plan's time, so the candidates are taken
    in exactly the order of their cheap bounds.

    In this process (``keep``) the groups evaluated to price a context are
    kept for the refinements and plans of its candidates (the last
    :data:`_KEEP` contexts).
    """

    def __init__(self, bounder: _Bounder, lower: list[int], bits: int, keep: bool) -> None:
        self.bounder = bounder
        self.lower = lower
        self.bits = bits
        self.next = 0  # index into ``lower`` of the next candidate to price
        self.heap: list[tuple[float, tuple[int, ...], Layout]] = []  # priced: (cheap bound, key, layout)
        self.seconds: dict[tuple[int, ...], list[float]] = {}
        self.keep = keep
        self.layers: OrderedDict[tuple[int, ...], EvaluatedLayers] = OrderedDict()

    def head(self, other: tuple[float, tuple[int, ...]], kth: float) -> tuple[float, tuple[int, ...]]:
        """The least ``(cheap bound, key)`` of the candidates left, where it is at most *other* and its bound at
        most *kth*; otherwise a pair above *other* or with a bound above *kth* (``(inf, _LAST)`` when none).

        Prices, in order of their lower bounds, the candidates whose lower
        bound comes before both: every candidate not priced has a cheap bound
        at least its lower bound, so none comes before the answer.
        """
        lower, heap = self.lower, self.heap
        while self.next < len(lower):
            bound, key = _unpack(lower[self.next], self.bits)
            if bound > kth or (bound, key) > (min(heap[0][:2], other) if heap else other):
                break
            self.next += 1
            layout = self._layout(key)
            heapq.heappush(heap, (self._bound(layout), key, layout))
        return heap[0][:2] if heap else (math.inf, _LAST)

    def pop(self) -> Layout:
        """The layout of the least cheap bound (after :meth:`head`)."""
        return heapq.heappop(self.heap)[2]

    def left(self) -> int:
        """Candidates not taken."""
        return len(self.lower) - self.next + len(self.heap)

    def pending(self, kth: float) -> int:
        """Candidates not taken whose lower bound is at most *kth* (for progress)."""
        above = (_pack(kth, (0,) * _KEY_FIELDS, self.bits) >> (self.bits * _KEY_FIELDS)) + 1
        return bisect.bisect_left(self.lower, above << (self.bits * _KEY_FIELDS), lo=self.next) - self.next + len(self.heap)

    def evaluated(self, layout: Layout) -> EvaluatedLayers | None:
        """The groups evaluated in the layout's context, where kept."""
        return self.layers.get((layout.tp, layout.cp, layout.ep, layout.etp, layout.micro_batch_size))

    def _layout(self, key: tuple[int, ...]) -> Layout:
        pp, vpp = key[3], key[4]
        return _layout(key, balanced_layers(self.bounder.body_count, pp * vpp), self.bounder.job.schedule)

    def _bound(self, layout: Layout) -> float:
        bounder = self.bounder
        context = (layout.tp, layout.cp, layout.ep, layout.etp, layout.micro_batch_size)
        seconds = self.seconds.get(context)
        if seconds is None:
            # The first phase evaluated this context without a refusal; evaluation is deterministic.
            layers = bounder.evaluated(layout)
            seconds = self.seconds[context] = bounder.seconds(layout, layers.costs, layers.context)
            if self.keep:
                self.layers[context] = layers
                if len(self.layers) > _KEEP:
                    self.layers.popitem(last=False)
        job = bounder.job
        micro_batches = job.global_batch_size // (layout.micro_batch_size * layout.dp)
        return _time_bound(seconds, bounder.compositions(layout.pp, layout.vpp, layout.layers_per_stage),
                           micro_batches, bounder.fill(layout.pp, layout.vpp))


# Contexts whose evaluated groups the second phase keeps for refinements and plans in this process.
_KEEP = 256


# Sorts after every layout key: (bound, _LAST) bounds every candidate of that bound from above.
_LAST = (math.inf,)


def _layout(key: tuple[int, ...], split: tuple[int, ...] | None, schedule: str | None = None) -> Layout:
    dp, cp, tp, pp, vpp, ep, etp, mbs, zero = key
    return Layout(dp=dp, cp=cp, tp=tp, pp=pp, vpp=vpp, ep=ep, etp=etp, zero=zero, micro_batch_size=mbs,
                  layers_per_stage=split, schedule_name=schedule)
