"""The N-D layout search: every layout of a device count, planned and ranked by step time (DESIGN section 8).

:func:`search` enumerates every ``dp cp tp pp vpp ep etp`` whose product
``dp * cp * tp * pp`` is the device count (``ep * etp`` dividing
``dp * cp * tp``; experts only for a model with routed experts), every
micro-batch size dividing the per-data-parallel batch, every ZeRO level the
runtime runs (:func:`zero_levels`), the schedule ``vpp`` implies
(``1f1b`` or ``interleaved_1f1b``), with sequence parallelism whenever
``tp > 1``. Each candidate is rejected with a counted reason
(:data:`REASONS`) or planned with the exact recompute planner
(:func:`hp_core.api.plan_recompute`, restricted to what the runtime's
trainer executes), and the fitting ones are ranked by the plan's step time,
ties broken by the layout's key.

Two phases, both exact (they never drop a candidate the planner would fit and
rank in the top K):

1. **Bounds**, for every candidate (serially in this process, or through the
   executor one task per ``(cp, tp)``, whose layer evaluations no other task
   shares): divisibility (heads,
   experts, layers, sequence, batch) from the layout alone or from the layers'
   own validation; then, from layer evaluations shared by every layout with
   the same ``(tp, cp, ep, etp, mbs)`` (a group's cost and its time per
   micro-batch depend on nothing else), the heaviest stage's static memory
   (parameters, gradients, master copies, optimizer states: what no recompute
   changes), the first stage's static memory plus what it keeps and works
   with fully recomputed (the least any plan holds there), and a step-time
   bound: the pipeline of each stage's layer times with nothing recomputed,
   its sends, data-parallel reduction and optimizer step left out. Micro-batch
   sizes are walked smallest first; a ZeRO level whose static bound fails is
   rejected at every size, and one whose first stage's static memory and
   kept activations alone exceed the device at every larger size too (the
   sequences in flight, ``mbs * min(in-flight, micro-batches)``, do not fall
   as ``mbs`` grows), so those sizes are never evaluated. The first
   backward's working set can fall as ``mbs`` grows (the layers above a large
   one free more), so with it the bound rejects one size at a time.
2. **Best first**, in waves of a fixed size through the executor: the
   candidates are taken in the order of their bound; one taken with its cheap
   bound is *refined* (the exact memory bounds from :func:`estimate` with every
   body layer fully recomputed, and its exact step time with nothing
   recomputed, :func:`step_time`, a lower bound on any plan's since recompute
   only adds time), one taken with its refined bound is *planned* with the
   exact recompute planner. A wave takes only what is at most the K-th fastest
   plan found so far; once the next bound exceeds it, nothing left can enter
   the top K and the rest are counted as such (:data:`R_SLOWER`, which so
   also holds candidates whose full-recompute bound was never checked).
   ``planned`` and ``fitting`` count what was planned.

Answers are merged in submission order and the waves have a fixed size, so
nothing depends on the executor or its number of workers.
"""

from __future__ import annotations

import bisect
import heapq
import math
from concurrent.futures import Executor
from typing import Any, Callable, Iterable, Mapping

import attrs

from hp_core.engine import census as census_lib
from hp_core.engine.estimate import estimate_run
from hp_core.engine.prepare import evaluate_layers, model_kinds, prepare, resolve_runtime
from hp_core.engine.schedule import in_flight_per_chunk
from hp_core.engine.stage import PlacedLayer, layer_elements, static_bytes
from hp_core.errors import ConfigError
from hp_core.recompute.plan import describe_ranges, plan_run
from hp_core.registry import Registry
from hp_core.specs import HardwareSpec, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_core.timing import layer_pricer, time_run
from hp_core.types import LayerCost, Runtime

__all__ = [
    "FIXABLE",
    "REASONS",
    "Candidate",
    "Layout",
    "SearchResult",
    "balanced_layers",
    "search",
    "search_to_json",
    "zero_levels",
]

# Why a candidate was not ranked; ``search`` counts every candidate under one.
R_LAYERS = "pp*vpp does not divide over the body layers"
R_EXPERTS = "ep does not divide the routed experts"
R_MODEL = "tp/cp/ep do not divide the model's heads, experts or widths"
R_SEQUENCE = "cp or tp (sequence parallel) does not divide the sequence"
R_BATCH = "global batch does not divide into micro-batches of the layout"
R_STATIC = "static memory alone exceeds the device"
R_FULL = "does not fit even fully recomputed"
R_PLAN = "does not fit with the runtime's least-memory plan"
R_SLOWER = "cannot enter the top K: slower with nothing recomputed than the K-th plan"
REASONS = (R_LAYERS, R_EXPERTS, R_MODEL, R_SEQUENCE, R_BATCH, R_STATIC, R_FULL, R_PLAN, R_SLOWER)

# Candidates planned per wave of the second phase; fixed, so what is planned does not depend on the executor.
_WAVE = 32

# The names ``fixed`` accepts.
FIXABLE = ("dp", "cp", "tp", "pp", "vpp", "ep", "etp", "zero", "micro_batch_size")

_FULL = RecomputeSpec(default=Setting(mode="full"))


def zero_levels(runtime: Runtime) -> tuple[int, ...]:
    """The ZeRO levels searched for *runtime*: those its trainer runs (``Runtime.zero_levels``) and its default."""
    return tuple(sorted(set(runtime.zero_levels) | {runtime.zero}))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def balanced_layers(body_layers: int, chunks: int) -> tuple[int, ...] | None:
    """Body layers per chunk when *chunks* does not divide them: one more on the middle chunks; ``None`` when it does.

    The first and last chunks, which also hold the embedding and the output
    head, take an extra layer only when the middle ones cannot absorb them all.
    """
    base, extra = divmod(body_layers, chunks)
    if extra == 0:
        return None
    counts = [base] * chunks
    middle = sorted(range(1, chunks - 1), key=lambda c: (abs(2 * c - (chunks - 1)), c))
    for c in (middle + [0, chunks - 1])[:extra]:
        counts[c] += 1
    return tuple(counts)


@attrs.frozen(order=False)
class Layout:
    """One searched layout: degrees, micro-batch size, ZeRO level and schedule.

    Attributes:
        dp: Data-parallel degree.
        cp: Context-parallel degree.
        tp: Tensor-parallel degree (sequence parallel when above 1).
        pp: Pipeline stages.
        vpp: Chunks per stage (interleaved 1F1B when above 1).
        ep: Expert-parallel degree.
        etp: Expert tensor-parallel degree.
        zero: Sharding level over DP*CP.
        micro_batch_size: Sequences per micro-batch.
        layers_per_stage: Body layers per chunk when ``pp * vpp`` does not
            divide them (:func:`balanced_layers`); ``None``: an even split.
    """

    dp: int
    cp: int
    tp: int
    pp: int
    vpp: int
    ep: int
    etp: int
    zero: int
    micro_batch_size: int
    layers_per_stage: tuple[int, ...] | None = None

    @property
    def key(self) -> tuple[int, ...]:
        """The deterministic tie-break: ``(dp, cp, tp, pp, vpp, ep, etp, mbs, zero)``."""
        return (self.dp, self.cp, self.tp, self.pp, self.vpp, self.ep, self.etp, self.micro_batch_size, self.zero)

    @property
    def schedule(self) -> str:
        return "1f1b" if self.vpp == 1 else "interleaved_1f1b"

    def describe(self) -> str:
        """``dp8 tp8 pp4 mbs1 zero1`` (degrees of 1 left out, sp implied by tp)."""
        parts = [f"{name}{value}" for name, value in (("dp", self.dp), ("cp", self.cp), ("tp", self.tp), ("pp", self.pp),
                                                        ("vpp", self.vpp), ("ep", self.ep), ("etp", self.etp))
                 if value > 1 or name == "dp"]
        return " ".join(parts + [f"mbs{self.micro_batch_size}", f"zero{self.zero}"])

    def parallel(self, seq_len: int, global_batch_size: int) -> ParallelSpec:
        """The layout as a :class:`~hp_core.specs.ParallelSpec`."""
        return ParallelSpec(
            dp=self.dp, cp=self.cp, tp=self.tp, pp=self.pp, vpp=self.vpp, ep=self.ep, etp=self.etp, sp=self.tp > 1,
            zero=self.zero, micro_batch_size=self.micro_batch_size, global_batch_size=global_batch_size,
            seq_len=seq_len, schedule=self.schedule, layers_per_stage=self.layers_per_stage,
        )


@attrs.frozen
class Candidate:
    """A layout that fits, with its plan.

    Attributes:
        layout: The layout.
        step_seconds: The step time under the plan.
        mfu: Model FLOPs utilisation under the plan.
        peak_bytes: The highest stage peak under the plan.
        stage_peaks_bytes: Every stage's peak under the plan.
        recompute: The plan (a default setting and ranges of exceptions).
        plan_summary: The plan in one line (``default none; 0-3 full``).
    """

    layout: Layout
    step_seconds: float
    mfu: float
    peak_bytes: int
    stage_peaks_bytes: tuple[int, ...]
    recompute: RecomputeSpec
    plan_summary: str


@attrs.frozen
class SearchResult:
    """What :func:`search` answers.

    Attributes:
        model: The model's name.
        runtime: The runtime profile's name.
        hardware: The device's name.
        devices: The device count.
        global_batch_size: Sequences per step.
        seq_len: Tokens per sequence.
        considered: Candidates enumerated (layout, micro-batch size, ZeRO level).
        planned: Candidates the recompute planner ran on.
        fitting: Candidates planned whose plan fits.
        top: The fastest fitting candidates, fastest first (ties by layout key).
        rejected: Candidates not ranked, by reason (:data:`REASONS`; only those with a count).
    """

    model: str
    runtime: str
    hardware: str
    devices: int
    global_batch_size: int
    seq_len: int
    considered: int
    planned: int
    fitting: int
    top: tuple[Candidate, ...]
    rejected: Mapping[str, int]

    @property
    def best(self) -> Candidate | None:
        """The fastest fitting candidate, ``None`` when nothing fits."""
        return self.top[0] if self.top else None


@attrs.frozen
class _Job:
    """What a worker needs to bound or plan one candidate."""

    model: ModelSpec
    registry: Registry
    hardware: HardwareSpec
    runtime: str
    precision: PrecisionSpec | None
    census: str
    reserve_bytes: int
    seq_len: int
    global_batch_size: int


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


def _reason_of(error: ConfigError) -> str:
    path = error.path
    if path in ("$.parallel.cp", "$.parallel.sp"):
        return R_SEQUENCE
    if path == "$.parallel.global_batch_size":
        return R_BATCH
    if path in ("$.parallel.pp", "$.parallel.layers_per_stage"):
        return R_LAYERS
    return R_MODEL


def _work(task: _Task) -> _Refined | Candidate | None:
    """Refine or plan one candidate (:func:`search`'s second phase)."""
    return _plan(task.job, task.layout) if task.plan else _refine(task.job, task.layout)


def _refine(job: _Job, layout: Layout) -> _Refined:
    """The exact memory bounds and the exact step-time bound of one candidate (module docstring)."""
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


def _routed_experts(model: ModelSpec) -> int | None:
    """The routed experts every expert layer splits over ``ep`` (their gcd), ``None`` without experts."""
    counts = [group.config.num_experts for group in model.layers if isinstance(getattr(group.config, "num_experts", None), int)]
    return math.gcd(*counts) if counts else None


# One pipeline stage's layers as the first phase sees them: (group index, layers of it) pairs and the
# kinds on the stage (a tied weight whose owner is on the stage is counted once, as plan_stage does).
_Composition = tuple[tuple[tuple[int, int], ...], frozenset[str]]


class _Bounder:
    """The first phase's cheap bounds, from layer evaluations shared by every layout that shares them.

    A group's cost and its per-micro-batch time depend on the layout only
    through ``(tp, cp, ep, etp, mbs)`` (the layer context and the links its
    collectives cross), so each is evaluated once per such tuple, through the
    same evaluators and :class:`~hp_core.timing.LayerPricer` that
    :func:`~hp_core.api.estimate` and :func:`~hp_core.timing.step_time` use.
    A stage is a composition of groups; stages of the same composition
    (the middle stages of a pipeline) are priced once.
    """

    def __init__(self, job: _Job) -> None:
        model, registry = job.model, job.registry
        self.job = job
        self.rt, self.precision, self.attention = resolve_runtime(registry, job.runtime, job.precision, None)
        self.kinds = model_kinds(model, registry)
        self.body = [(i, g.count) for i, (k, g) in enumerate(zip(self.kinds, model.layers)) if k.placement == "body"]
        self.first = [(i, g.count) for i, (k, g) in enumerate(zip(self.kinds, model.layers)) if k.placement == "first"]
        self.last = [(i, g.count) for i, (k, g) in enumerate(zip(self.kinds, model.layers)) if k.placement == "last"]
        self.body_count = sum(n for _, n in self.body)
        self.limit = job.hardware.memory_bytes - job.reserve_bytes
        self.census = census_lib.resolve_source(registry, job.census)
        self._contexts: dict[tuple[int, ...], _Layers | str] = {}
        self._elements: dict[tuple[Any, ...], dict[str, int]] = {}
        self._compositions: dict[tuple[Any, ...], tuple[tuple[_Composition, int], ...]] = {}
        self._chunks: dict[tuple[Any, ...], list[list[tuple[int, int]]]] = {}  # the first stage's chunks
        self._in_flight: dict[tuple[int, int, int], tuple[int, ...]] = {}

    def layers(self, layout: Layout, micro_batch_size: int | None = None) -> "_Layers | str":
        """Each group's cost and per-micro-batch seconds (nothing recomputed) in the layout's context, or why it is refused.

        Args:
            micro_batch_size: The size to evaluate at instead of the layout's.
        """
        mbs = layout.micro_batch_size if micro_batch_size is None else micro_batch_size
        key = (layout.tp, layout.cp, layout.ep, layout.etp, mbs)
        found = self._contexts.get(key)
        if found is None:
            if mbs != layout.micro_batch_size:
                layout = attrs.evolve(layout, micro_batch_size=mbs)
            found = self._contexts[key] = self._evaluate(layout)
        return found

    def _evaluate(self, layout: Layout) -> "_Layers | str":
        job, rt = self.job, self.rt
        parallel = layout.parallel(job.seq_len, job.global_batch_size)
        try:
            layers = evaluate_layers(job.model, parallel, precision=self.precision, attention=self.attention, runtime=rt,
                                     registry=job.registry, census=self.census, kinds=self.kinds)
        except ConfigError as exc:
            return _reason_of(exc)
        pricer = layer_pricer(parallel, hardware=job.hardware, timing=rt.timing, precision=self.precision,
                              attention=self.attention)
        seconds = []
        # As step time prices them: body layers with what the trainer always recomputes.
        for kind, group, cost in zip(self.kinds, job.model.layers, layers.costs):
            implicit = rt.implicit_recompute & frozenset(kind.switches) if kind.placement == "body" else frozenset()
            seconds.append(pricer.price(cost, group.config, kind, layers.context, full=False, recomputed=implicit).micro_batch_seconds)
        # As the estimate places them: body layers fully recomputed, the others as they are (PlacedLayer.make).
        placed = [PlacedLayer.make(kind.name, cost, kind.placement == "body", frozenset(), "full")
                  for kind, cost in zip(self.kinds, layers.costs)]
        return _Layers(list(layers.costs), seconds, [p.kept_bytes for p in placed], [p.backward_working_bytes for p in placed])

    def compositions(self, pp: int, vpp: int, split: tuple[int, ...] | None) -> tuple[tuple[_Composition, int], ...]:
        """The pipeline's distinct stage compositions with how many stages have each."""
        found = self._compositions.get((pp, vpp, split))
        if found is not None:
            return found
        chunks = pp * vpp
        counts = list(split) if split is not None else [self.body_count // chunks] * chunks
        # Body layer index ranges of the groups, in order.
        segments, start = [], 0
        for i, n in self.body:
            segments.append((i, start, start + n))
            start += n
        stages: dict[_Composition, int] = {}
        lo = 0
        per_chunk = []
        for count in counts:
            hi = lo + count
            per_chunk.append([(i, min(hi, b) - max(lo, a)) for i, a, b in segments if min(hi, b) > max(lo, a)])
            lo = hi
        per_chunk[0] = self.first + per_chunk[0]
        per_chunk[-1] = per_chunk[-1] + self.last
        for stage in range(pp):
            held: dict[int, int] = {}
            for c in range(stage, chunks, pp):
                for i, n in per_chunk[c]:
                    held[i] = held.get(i, 0) + n
            owners = frozenset(self.kinds[i].name for i in held)
            composition = (tuple(sorted(held.items())), owners)
            stages[composition] = stages.get(composition, 0) + 1
        found = self._compositions[(pp, vpp, split)] = tuple(stages.items())
        self._chunks[(pp, vpp, split)] = [per_chunk[c] for c in range(0, chunks, pp)]
        return found

    def static_bytes(self, layout: Layout, costs: list[LayerCost], compositions: tuple[tuple[_Composition, int], ...],
                     zero: int, last_backward: bool = True) -> int:
        """The heaviest stage's parameters, gradients, master copies and optimizer states, as plan_stage counts them.

        Args:
            last_backward: Also count plan_stage's ``last_backward`` point: a
                runtime that defers its gradient reduction holds whole gradients
                there from ZeRO 2, and the larger of the two is the stage's static
                memory. ``False``: the end of warm-up's alone.
        """
        whole = last_backward and self.rt.deferred_grad_reduction and zero >= 2
        heaviest = 0
        dense_degree = layout.dp * layout.cp
        expert_degree = (layout.dp * layout.cp * layout.tp) // (layout.ep * layout.etp)
        for (held, owners), _ in compositions:
            key = (layout.tp, layout.cp, layout.ep, layout.etp, held, owners)
            elements = self._elements.get(key)
            if elements is None:
                elements = {}
                for i, n in held:
                    for group, count in layer_elements(costs[i], layout.tp, layout.ep, layout.etp, owners).items():
                        elements[group] = elements.get(group, 0) + n * count
                self._elements[key] = elements
            heaviest = max(heaviest, sum(static_bytes(elements, self.precision, zero, dense_degree, expert_degree)))
            if whole:
                heaviest = max(heaviest, sum(static_bytes(elements, self.precision, zero, dense_degree, expert_degree, True)))
        return heaviest

    def first_stage_static(self, layout: Layout, costs: list[LayerCost], zero: int) -> int:
        """The first stage's parameters, gradients, master copies and optimizer states at the end of warm-up."""
        chunks = self._chunks[(layout.pp, layout.vpp, layout.layers_per_stage)]
        held: dict[int, int] = {}
        for chunk in chunks:
            for i, n in chunk:
                held[i] = held.get(i, 0) + n
        composition = ((tuple(sorted(held.items())), frozenset(self.kinds[i].name for i in held)), 1)
        return self.static_bytes(layout, costs, (composition,), zero, last_backward=False)

    def first_stage_activations(self, layout: Layout, layers: "_Layers", micro_batches: int) -> tuple[int, int]:
        """What the first stage keeps, and works with, when every body layer is fully recomputed: ``(kept, working)``.

        plan_stage's activations (micro-batches in flight per chunk times what
        each layer keeps) and the working set of its first backward, which
        walks the stage's last chunk from the top (of equal layers in a row the
        top one holds the most). Added to :meth:`first_stage_static`, a lower
        bound on the first stage's peak under any plan: every body layer fully
        recomputed keeps the least any setting keeps, and what a layer keeps
        plus its backward working set is the same for every setting
        (docs/recompute.md); the stage's buffers and the runtime's overhead are
        left out.
        """
        chunks = self._chunks[(layout.pp, layout.vpp, layout.layers_per_stage)]
        key = (layout.pp, layout.vpp, micro_batches)
        in_flight = self._in_flight.get(key)
        if in_flight is None:
            schedule = "1f1b" if layout.vpp == 1 else "interleaved_1f1b"
            in_flight = self._in_flight[key] = in_flight_per_chunk(0, layout.pp, layout.vpp, micro_batches, schedule)
        kept, backward = layers.kept_full, layers.working_full
        total = 0
        for count, chunk in zip(in_flight, chunks):
            if count:
                total += count * sum(n * kept[i] for i, n in chunk)
        working = freed = 0
        for i, n in reversed(chunks[-1]):
            working = max(working, backward[i] - freed)
            freed += n * kept[i]
        return total, working


@attrs.frozen
class _Layers:
    """The model's groups in one context: costs (the census's where it has records), seconds per
    micro-batch with nothing recomputed, and, fully recomputed, bytes kept and backward working set."""

    costs: list[LayerCost]
    seconds: list[float]
    kept_full: list[int]
    working_full: list[int]


def _time_bound(seconds: list[float], compositions: tuple[tuple[_Composition, int], ...], micro_batches: int,
                vpp: int) -> float:
    """A lower bound on the step time with nothing recomputed: the pipeline of the stages' layer times alone.

    :func:`~hp_core.timing.pipeline_seconds` of each stage's layers (its
    pipeline sends, the data-parallel reduction and the optimizer step left
    out, all non-negative; the pipeline time does not fall as a stage's time
    grows).
    """
    slowest = total = 0.0
    for (held, _), stages in compositions:
        t = 0.0
        for i, n in held:
            t += n * seconds[i]
        slowest = max(slowest, t)
        total += stages * t
    return micro_batches * slowest + (total - slowest) / vpp


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
    """Every layout of *devices* for the model, planned and ranked by step time (module docstring).

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


def _allowed(fixed: Mapping[str, int], name: str, values: Iterable[int]) -> list[int]:
    """The *values* of degree *name* that *fixed* allows: all, or the one it holds."""
    return [v for v in values if name not in fixed or fixed[name] == v]


def _families(devices: int, fixed: Mapping[str, int]) -> list[tuple[int, int, int]]:
    """Every ``(dp, cp, tp)`` of *devices* that *fixed* allows, in enumeration order."""
    return [(dp, cp, tp) for dp in _allowed(fixed, "dp", _divisors(devices))
            for cp in _allowed(fixed, "cp", _divisors(devices // dp))
            for tp in _allowed(fixed, "tp", _divisors(devices // (dp * cp)))]


@attrs.frozen
class _FirstTask:
    """Some ``(dp, cp, tp)`` families of the first phase, for a worker."""

    job: _Job
    devices: int
    experts: int | None
    zeros: tuple[int, ...]
    fixed: tuple[tuple[str, int], ...]
    families: tuple[tuple[int, int, int], ...]


def _first_work(task: _FirstTask) -> tuple[list[tuple[float, tuple[int, ...], tuple[int, ...] | None]], dict[str, int], int]:
    """:func:`_first_phase` over the task's families, with a bounder of its own."""
    counts: dict[str, int] = {}
    bounded, considered = _first_phase(_Bounder(task.job), task.devices, task.experts, task.zeros, dict(task.fixed),
                                       counts, None, list(task.families))
    return bounded, counts, considered


def _first_phase(
    bounder: _Bounder, devices: int, experts: int | None, zeros: tuple[int, ...], fixed: Mapping[str, int],
    counts: dict[str, int], progress: Callable[[int, int], None] | None,
    families: list[tuple[int, int, int]] | None = None,
) -> tuple[list[tuple[float, tuple[int, ...], tuple[int, ...] | None]], int]:
    """Enumerate every candidate; count those rejected on sight or by the static-memory bound; bound the rest's time.

    Args:
        families: The ``(dp, cp, tp)`` to enumerate; every one :func:`_families` gives when ``None``.

    Returns the bounded candidates ``(time bound, layout key, layers per chunk)``
    and the count of all candidates enumerated.
    """
    job = bounder.job
    body_layers, global_batch_size, seq_len = bounder.body_count, job.global_batch_size, job.seq_len
    bounded: list[tuple[float, tuple[int, ...], tuple[int, ...] | None]] = []
    considered = 0

    def allowed(name: str, values: Iterable[int]) -> list[int]:
        return _allowed(fixed, name, values)

    def reject(reason: str, count: int) -> None:
        counts[reason] = counts.get(reason, 0) + count

    if families is None:
        families = _families(devices, fixed)
    for done, (dp, cp, tp) in enumerate(families, 1):
        if progress is not None:
            progress(done, len(families))
        for pp in allowed("pp", [devices // (dp * cp * tp)]):
            vpps = allowed("vpp", _divisors(max(1, body_layers // pp)) if pp > 1 else [1])
            expert_pairs = [(ep, etp) for ep in allowed("ep", _divisors(dp * cp * tp) if experts else [1])
                            for etp in allowed("etp", _divisors(dp * cp * tp // ep) if experts else [1])]
            per_dp = global_batch_size // dp if global_batch_size % dp == 0 else None
            mbss = allowed("micro_batch_size", _divisors(per_dp)) if per_dp is not None else []
            zs = allowed("zero", zeros)
            for vpp in vpps:
                # Interleaved 1F1B needs the micro-batches to be a multiple of pp (Megatron-LM schedules.py).
                sizes = [mbs for mbs in mbss if vpp == 1 or (global_batch_size // (mbs * dp)) % pp == 0]
                split = balanced_layers(body_layers, pp * vpp) if pp <= body_layers else None
                for ep, etp in expert_pairs:
                    if per_dp is None:
                        considered += len(zs)
                        reject(R_BATCH, len(zs))
                        continue
                    n = len(mbss) * len(zs)
                    considered += n
                    if not n:
                        continue
                    if pp > body_layers:
                        reject(R_LAYERS, n)
                        continue
                    if experts is not None and experts % ep:
                        reject(R_EXPERTS, n)
                        continue
                    if seq_len % cp or (tp > 1 and (seq_len // cp) % tp):
                        reject(R_SEQUENCE, n)
                        continue
                    if len(sizes) < len(mbss):
                        reject(R_BATCH, (len(mbss) - len(sizes)) * len(zs))
                    compositions = bounder.compositions(pp, vpp, split)
                    # The static bound from the first micro-batch size the layers accept (parameters do not
                    # depend on it): a ZeRO level it rejects is rejected at every size, unevaluated.
                    levels: tuple[int, ...] | None = None
                    # The family's layout at its smallest size stands for all (only the evaluation reads the size).
                    probe = None
                    for n_mbs, mbs in enumerate(sizes):
                        if probe is None:
                            probe = Layout(dp=dp, cp=cp, tp=tp, pp=pp, vpp=vpp, ep=ep, etp=etp, zero=zs[0],
                                           micro_batch_size=mbs, layers_per_stage=split)
                        found = bounder.layers(probe, mbs)
                        if isinstance(found, str):
                            reject(found, len(levels) if levels is not None else len(zs))
                            continue
                        if levels is None:
                            static = {z: bounder.static_bytes(probe, found.costs, compositions, z) for z in zs}
                            levels = tuple(z for z in zs if static[z] <= bounder.limit)
                            if len(levels) < len(zs):
                                reject(R_STATIC, (len(zs) - len(levels)) * (len(sizes) - n_mbs))
                            if not levels:
                                break
                            first_static = {z: bounder.first_stage_static(probe, found.costs, z) for z in levels}
                        micro_batches = global_batch_size // (mbs * dp)
                        kept, working = bounder.first_stage_activations(probe, found, micro_batches)
                        # What the first stage keeps does not fall as mbs grows (the sequences in flight,
                        # mbs * min(in-flight, micro-batches), do not): a level it rejects is rejected at every
                        # larger size too. The working set can fall (the layers above a large one free more),
                        # so it rejects one size at a time.
                        ended = tuple(z for z in levels if first_static[z] + kept > bounder.limit)
                        if ended:
                            reject(R_FULL, len(ended) * (len(sizes) - n_mbs))
                            levels = tuple(z for z in levels if z not in ended)
                            if not levels:
                                break
                        fits = tuple(z for z in levels if first_static[z] + kept + working <= bounder.limit)
                        reject(R_FULL, len(levels) - len(fits))
                        bound = _time_bound(found.seconds, compositions, micro_batches, vpp)
                        for z in fits:
                            bounded.append((bound, (dp, cp, tp, pp, vpp, ep, etp, mbs, z), split))
    return bounded, considered


def search_to_json(result: SearchResult) -> dict[str, Any]:
    """The stable JSON document of a search: bytes in ``_bytes``, times in ``_seconds``."""
    from hp_core.recompute.layout import range_key, setting_value

    return {
        "model": result.model,
        "runtime": result.runtime,
        "hardware": result.hardware,
        "devices": result.devices,
        "global_batch_size": result.global_batch_size,
        "seq_len": result.seq_len,
        "considered": result.considered,
        "planned": result.planned,
        "fitting": result.fitting,
        "rejected": dict(result.rejected),
        "top": [
            {
                "rank": rank,
                "layout": {
                    "dp": c.layout.dp, "cp": c.layout.cp, "tp": c.layout.tp, "pp": c.layout.pp, "vpp": c.layout.vpp,
                    "ep": c.layout.ep, "etp": c.layout.etp, "sp": c.layout.tp > 1, "zero": c.layout.zero,
                    "micro_batch_size": c.layout.micro_batch_size, "schedule": c.layout.schedule,
                    "layers_per_stage": list(c.layout.layers_per_stage) if c.layout.layers_per_stage else None,
                },
                "step_seconds": c.step_seconds,
                "mfu": c.mfu,
                "peak_bytes": c.peak_bytes,
                "stage_peaks_bytes": list(c.stage_peaks_bytes),
                "recompute": {
                    "default": setting_value(c.recompute.default),
                    "layers": {range_key(first, last): setting_value(s) for first, last, s in c.recompute.layers},
                },
                "plan": c.plan_summary,
            }
            for rank, c in enumerate(result.top, 1)
        ],
    }
