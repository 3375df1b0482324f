"""The layout search's first phase: every candidate enumerated, rejected on sight or bounded cheaply.

Divisibility from the layout alone or from the layers' own validation; then,
from layer evaluations shared by every layout with the same
``(tp, cp, ep, etp, mbs)`` (:class:`_Bounder`), the heaviest stage's static
memory, the first stage's static memory plus what it keeps and works with
fully recomputed, and a step-time bound (:func:`_time_bound`). See
:mod:`hp_core.engine.search` for the whole method and why it is exact.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping

import attrs

from hp_core.engine import census as census_lib
from hp_core.engine.optimizer import group_states, layer_load, master_bytes, resolve_optimizer
from hp_core.engine.prepare import evaluate_layers, model_kinds, resolve_runtime
from hp_core.engine.schedule import in_flight_per_chunk
from hp_core.engine.search.layouts import (
    R_BATCH,
    R_EXPERTS,
    R_FULL,
    R_LAYERS,
    R_SEQUENCE,
    R_STATIC,
    Layout,
    _Job,
    _reason_of,
    balanced_layers,
)
from hp_core.engine.stage import PlacedLayer, static_bytes
from hp_core.engine.timing import layer_pricer
from hp_core.errors import ConfigError
from hp_core.specs import ModelSpec
from hp_core.costs import LayerCost


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


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
    same evaluators and :class:`~hp_core.engine.timing.LayerPricer` that
    :func:`~hp_core.api.estimate` and :func:`~hp_core.api.step_time` use.
    A stage is a composition of groups; stages of the same composition
    (the middle stages of a pipeline) are priced once.
    """

    def __init__(self, job: _Job) -> None:
        model, registry = job.model, job.registry
        self.job = job
        self.rt, self.precision, self.attention = resolve_runtime(registry, job.runtime, job.precision, None)
        self.optimizer = resolve_optimizer(registry, self.precision)
        self.master_bytes = master_bytes(self.optimizer, self.precision)
        self.kinds = model_kinds(model, registry)
        self.body = [(i, g.count) for i, (k, g) in enumerate(zip(self.kinds, model.layers)) if k.placement == "body"]
        self.first = [(i, g.count) for i, (k, g) in enumerate(zip(self.kinds, model.layers)) if k.placement == "first"]
        self.last = [(i, g.count) for i, (k, g) in enumerate(zip(self.kinds, model.layers)) if k.placement == "last"]
        self.body_count = sum(n for _, n in self.body)
        self.limit = job.hardware.memory_bytes - job.reserve_bytes
        self.census = census_lib.resolve_source(registry, job.census)
        self._contexts: dict[tuple[int, ...], _Layers | str] = {}
        self._elements: dict[tuple[Any, ...], tuple[dict[str, int], dict[str, Any]]] = {}
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
            found = self._elements.get(key)
            if found is None:
                elements: dict[str, int] = {}
                parts: dict[str, list[tuple[float, int]]] = {}
                for i, n in held:
                    # The group's elements (as layer_elements counts them) and what the optimizer keeps of them.
                    loads = layer_load(costs[i], self.kinds[i].name, layout.tp, layout.ep, layout.etp, owners,
                                       self.optimizer, self.precision)
                    for group, load in loads.items():
                        elements[group] = elements.get(group, 0) + n * load.elements
                        parts.setdefault(group, []).append((load.state_bytes, n))
                found = self._elements[key] = (elements, group_states(parts))
            elements, states = found
            heaviest = max(heaviest, sum(static_bytes(elements, states, self.precision, self.master_bytes, zero,
                                                      dense_degree, expert_degree)))
            if whole:
                heaviest = max(heaviest, sum(static_bytes(elements, states, self.precision, self.master_bytes, zero,
                                                          dense_degree, expert_degree, True)))
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

    :func:`~hp_core.engine.timing.pipeline_seconds` of each stage's layers (its
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
