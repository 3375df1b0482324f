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

Two phases, both exact (they never drop a layout the planner would rank in
the top K):

1. **Bounds**, one task per layout (all its micro-batch sizes, ascending):
   divisibility (heads, experts, layers, sequence, batch) from the layout
   alone or from the layers' own validation; the static memory (parameters,
   gradients, master copies, optimizer states) of the heaviest stage, which
   no recompute changes, against the device; the peak with every body layer
   fully recomputed (the least any setting keeps: ``k`` is smallest and
   ``k + w`` the same for every setting of a layer, docs/recompute.md),
   which bounds every plan's peak from below. The first micro-batch size
   whose bound exceeds the device ends the walk: every larger size holds at
   least as many sequences in flight (``mbs * min(in-flight, micro-batches)``
   does not fall as ``mbs`` grows), so those are counted under the same
   reason. A survivor's step time with nothing recomputed is a lower bound
   on its planned step time (recompute only adds time; the step is monotone
   in every stage's time).
2. **Plans**, fastest lower bound first, in waves of a fixed size: a wave
   takes the next candidates whose bound is at most the K-th fastest plan
   found so far; once a bound exceeds it, no later candidate can enter the
   top K and the rest are counted as such (:data:`R_SLOWER`). ``planned``
   and ``fitting`` therefore count what was planned, not every candidate.

The candidates go through any :class:`concurrent.futures.Executor` (one task
per layout in phase 1, one per candidate in phase 2); answers are merged in
submission order and the waves have a fixed size, so nothing depends on the
executor or its number of workers.

Layer evaluations are not shared across layouts: :func:`plan_recompute`
evaluates the model's layers itself, and caching them per
``(tp, sp, cp, ep, etp, mbs, seq)`` would need a new entry point into the
planner. Profiling Llama-3-70B on 256 devices puts layer evaluation at
about 7 % of the search; the planner's stage search and ``plan_stage``
dominate (docs/search.md).
"""

from __future__ import annotations

import math
from concurrent.futures import Executor
from typing import Any, Callable, Iterable, Mapping

import attrs

from hp_core.api import estimate, plan_recompute
from hp_core.errors import ConfigError
from hp_core.registry import Registry
from hp_core.specs import HardwareSpec, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_core.timing import step_time

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

# The sharding levels each built-in trainer runs: Megatron-LM without and with
# its distributed optimizer; FSDP2 fully sharded; HyperParallel's ZeRO 1-3.
_ZERO_LEVELS: Mapping[str, tuple[int, ...]] = {
    "megatron": (0, 1),
    "fsdp2": (3,),
    "hyperparallel": (1, 2, 3),
}

_FULL = RecomputeSpec(default=Setting(mode="full"))


def zero_levels(runtime: str, default: int) -> tuple[int, ...]:
    """The ZeRO levels searched for *runtime*: its trainer's (above), 0-3 for any other; always its *default*."""
    return tuple(sorted(set(_ZERO_LEVELS.get(runtime, (0, 1, 2, 3))) | {default}))


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
class _Task:
    """One layout (every micro-batch size of it) for a worker."""

    model: ModelSpec
    registry: Registry
    hardware: HardwareSpec
    runtime: str
    precision: PrecisionSpec | None
    census: str
    reserve_bytes: int
    seq_len: int
    global_batch_size: int
    layouts: tuple[Layout, ...]  # ascending micro-batch size


@attrs.frozen
class _Bounds:
    """A worker's answer for one layout: the rejections, and each surviving candidate with its step-time lower bound."""

    rejected: Mapping[str, int]
    survivors: tuple[tuple[float, Layout], ...]


def _reason_of(error: ConfigError) -> str:
    path = error.path
    if path in ("$.parallel.cp", "$.parallel.sp"):
        return R_SEQUENCE
    if path == "$.parallel.global_batch_size":
        return R_BATCH
    if path in ("$.parallel.pp", "$.parallel.layers_per_stage"):
        return R_LAYERS
    return R_MODEL


def _bound_task(task: _Task) -> _Bounds:
    """Reject what the cheap bounds reject along one layout's micro-batch sizes; bound the rest's step time (module docstring)."""
    rejected: dict[str, int] = {}
    survivors: list[tuple[float, Layout]] = []
    limit = task.hardware.memory_bytes - task.reserve_bytes

    def reject(reason: str, count: int = 1) -> None:
        rejected[reason] = rejected.get(reason, 0) + count

    for n, layout in enumerate(task.layouts):
        parallel = layout.parallel(task.seq_len, task.global_batch_size)
        try:
            bound = estimate(task.model, parallel, registry=task.registry, runtime=task.runtime, precision=task.precision,
                             recompute=_FULL, census=task.census)
        except ConfigError as exc:
            reason = _reason_of(exc)
            if reason == R_BATCH:
                reject(reason)
                continue
            # Heads, widths, layers and sequence do not depend on the micro-batch size.
            reject(reason, len(task.layouts) - n)
            break
        if max(stage.memory.static_bytes for stage in bound.stages) > limit:
            # No micro-batch size changes the static memory.
            reject(R_STATIC, len(task.layouts) - n)
            break
        if bound.peak_bytes > limit:
            reject(R_FULL, len(task.layouts) - n)
            break
        fastest = step_time(task.model, parallel, registry=task.registry, hardware=task.hardware, runtime=task.runtime,
                            precision=task.precision)
        survivors.append((fastest.step_seconds, layout))
    return _Bounds(rejected=rejected, survivors=tuple(survivors))


def _plan_task(task: _Task) -> Candidate | None:
    """The planner's fastest plan of one candidate (``task.layouts`` holds one), ``None`` when it does not fit."""
    from hp_core.recompute.plan import describe_ranges

    (layout,) = task.layouts
    plan = plan_recompute(task.model, layout.parallel(task.seq_len, task.global_batch_size), registry=task.registry,
                          hardware=task.hardware, runtime=task.runtime, reserve_bytes=task.reserve_bytes,
                          precision=task.precision, census=task.census)
    if not plan.fits:
        return None
    result = plan.plan
    return Candidate(
        layout=layout, step_seconds=result.step_seconds, mfu=result.time.mfu, peak_bytes=result.peak_bytes,
        stage_peaks_bytes=tuple(stage.peak_bytes for stage in result.stages), recompute=result.recompute,
        plan_summary=describe_ranges(result.recompute.layers, result.recompute.default),
    )


def _map(function: Callable[[_Task], Any], tasks: list[_Task], executor: Executor | None,
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


def _body_layers(model: ModelSpec, registry: Registry) -> int:
    kinds = [registry.layer_kind(group.kind, f"$.model.layers[{i}].kind") for i, group in enumerate(model.layers)]
    return sum(group.count for kind, group in zip(kinds, model.layers) if kind.placement == "body")


def _routed_experts(model: ModelSpec) -> int | None:
    """The routed experts every expert layer splits over ``ep`` (their gcd), ``None`` without experts."""
    counts = [group.config.num_experts for group in model.layers if isinstance(getattr(group.config, "num_experts", None), int)]
    return math.gcd(*counts) if counts else None


def _enumerate(
    devices: int, body_layers: int, experts: int | None, zeros: tuple[int, ...], global_batch_size: int,
    seq_len: int, fixed: Mapping[str, int],
) -> tuple[list[tuple[Layout, ...]], dict[str, int], int]:
    """Every layout's micro-batch sizes (one group per layout), the counts rejected on sight, and all enumerated."""
    groups: list[tuple[Layout, ...]] = []
    rejected: dict[str, int] = {}
    considered = 0

    def allowed(name: str, values: Iterable[int]) -> list[int]:
        return [v for v in values if name not in fixed or fixed[name] == v]

    def reject(reason: str, count: int) -> None:
        rejected[reason] = rejected.get(reason, 0) + count
        nonlocal considered
        considered += count

    for dp in allowed("dp", _divisors(devices)):
        for cp in allowed("cp", _divisors(devices // dp)):
            for tp in allowed("tp", _divisors(devices // (dp * cp))):
                rest = devices // (dp * cp * tp)
                pps = allowed("pp", [rest])
                for pp in pps:
                    vpps = allowed("vpp", _divisors(max(1, body_layers // pp)) if pp > 1 else [1])
                    expert_pairs = []
                    for ep in allowed("ep", _divisors(dp * cp * tp) if experts else [1]):
                        for etp in allowed("etp", _divisors(dp * cp * tp // ep) if experts else [1]):
                            expert_pairs.append((ep, etp))
                    per_dp = global_batch_size // dp if global_batch_size % dp == 0 else None
                    mbss = allowed("micro_batch_size", _divisors(per_dp)) if per_dp is not None else []
                    zs = allowed("zero", zeros)
                    for vpp in vpps:
                        for ep, etp in expert_pairs:
                            for zero in zs:
                                if per_dp is None:
                                    reject(R_BATCH, 1)
                                    continue
                                if not mbss:
                                    continue
                                if pp > body_layers:
                                    reject(R_LAYERS, len(mbss))
                                    continue
                                if experts is not None and experts % ep:
                                    reject(R_EXPERTS, len(mbss))
                                    continue
                                if seq_len % cp or (tp > 1 and (seq_len // cp) % tp):
                                    reject(R_SEQUENCE, len(mbss))
                                    continue
                                split = balanced_layers(body_layers, pp * vpp)
                                layouts = []
                                for mbs in mbss:
                                    m = global_batch_size // (mbs * dp)
                                    if vpp > 1 and m % pp:
                                        reject(R_BATCH, 1)
                                        continue
                                    layouts.append(Layout(dp=dp, cp=cp, tp=tp, pp=pp, vpp=vpp, ep=ep, etp=etp, zero=zero,
                                                          micro_batch_size=mbs, layers_per_stage=split))
                                if layouts:
                                    considered += len(layouts)
                                    groups.append(tuple(layouts))
    return groups, rejected, considered


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
        executor: Runs one task per layout; ``None``: serially in this process.
            A process pool (or a Dask or Ray executor) needs the model and the
            registry to pickle, as the built-in ones do.
        precision: Byte widths; the runtime's when ``None``.
        census: The census source's name.
        reserve_bytes: Memory to keep free on every device.
        zero: The ZeRO levels to search; :func:`zero_levels` of the runtime when ``None``.
        progress: Called with ``(layouts done, layouts in all)`` as tasks finish.

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
    zeros = tuple(sorted(set(zero))) if zero is not None else zero_levels(rt.name, rt.zero)
    body = _body_layers(model, registry)
    groups, rejected, considered = _enumerate(devices, body, _routed_experts(model), zeros, global_batch_size, seq_len,
                                              dict(fixed))
    def task(layouts: tuple[Layout, ...]) -> _Task:
        return _Task(model, registry, hardware, runtime, precision, census, reserve_bytes, seq_len, global_batch_size,
                     layouts)

    done = 0
    total = len(groups)

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    # Phase 1: the cheap bounds, one task per layout.
    counts = dict(rejected)
    ranked: list[tuple[float, tuple[int, ...], Layout]] = []
    for bounds in _map(_bound_task, [task(g) for g in groups], executor, tick):
        for reason, count in bounds.rejected.items():
            counts[reason] = counts.get(reason, 0) + count
        ranked.extend((seconds, layout.key, layout) for seconds, layout in bounds.survivors)
    ranked.sort(key=lambda item: item[:2])

    # Phase 2: plan in waves, fastest lower bound first, until no candidate left can enter the top K.
    total = len(groups) + len(ranked)
    fitting: list[Candidate] = []
    planned = 0
    while planned < len(ranked):
        kth = fitting[top - 1].step_seconds if len(fitting) >= top else math.inf
        chunk = ranked[planned:planned + _WAVE]
        # Sorted by the bound, so the wave is a prefix; whatever is past it is past the K-th plan for good.
        wave = [layout for seconds, _, layout in chunk if seconds <= kth]
        planned += len(wave)
        for layout, candidate in zip(wave, _map(_plan_task, [task((layout,)) for layout in wave], executor, tick)):
            if candidate is None:
                counts[R_PLAN] = counts.get(R_PLAN, 0) + 1
            else:
                fitting.append(candidate)
        fitting.sort(key=lambda c: (c.step_seconds, c.layout.key))
        if len(wave) < len(chunk):
            break
    if planned < len(ranked):
        counts[R_SLOWER] = len(ranked) - planned
    if progress is not None and done < total:
        progress(total, total)
    return SearchResult(
        model=model.name, runtime=rt.name, hardware=hardware.name, devices=devices, global_batch_size=global_batch_size,
        seq_len=seq_len, considered=considered, planned=planned, fitting=len(fitting), top=tuple(fitting[:top]),
        rejected={reason: counts[reason] for reason in REASONS if counts.get(reason)},
    )


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
