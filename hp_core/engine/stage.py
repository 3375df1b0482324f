"""The stage planner: compose layer costs into per-stage peaks (docs/concepts.md).

Static memory per rank (Rajbhandari et al. 2020, "ZeRO", Section 5; Megatron-LM
``theoretical_memory_usage.py``): with ``N`` parameter elements on a rank and
``d`` the data-parallel times context-parallel degree (the group Megatron-Core's
distributed optimizer shards over; the expert data-parallel degree for routed
experts),

* parameters ``N * param_bytes``, divided by ``d`` at ZeRO-3/FSDP;
* gradients ``N * grad_bytes``, divided by ``d`` from ZeRO-2;
* master parameters ``N * master_param_bytes`` (where the optimizer keeps a
  master copy) and optimizer states, what the run's optimizer states per
  element of each tensor family (:mod:`hp_core.engine.optimizer`; AdamW
  ``2 * moment_bytes``), divided by ``d`` from ZeRO-1.

Activations: per chunk, micro-batches in flight (the run's schedule, :mod:`hp_core.engine.schedule`)
times what its layers keep under their recompute settings; those awaiting their weight-gradient pass
(zero-bubble schedules) keep what W reads instead (:attr:`PlacedLayer.awaiting_bytes`), and the
schedule's moments with more of them awaiting W are a further peak point, ``awaiting_w``. Working set: the
first backward the stage runs at the end of warm-up walks its last chunk's
layers from the top; the working set is the largest of each layer's backward
working set less what the layers after it already freed for that micro-batch.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import attrs

from hp_core.results import ChunkEstimate, MemoryBreakdown, StageEstimate
from hp_core.blas_workspaces import stage_blas_bytes
from hp_core.engine.optimizer import group_states, layer_load, master_bytes
from hp_core.engine.module_formats import module_weight_copy_bytes
from hp_core.engine.precision import gathered_param_bytes, quantized_weight_elements, scaling_state_bytes, weight_copy_bytes
from hp_core.engine.schedule import awaiting_weight_gradient, stage_plan, weight_gradient_moments
from hp_core.engine.stage_view import stage_view
from hp_core.engine.static import layer_elements, static_bytes
from hp_core.schedules import Schedule, ScheduleLayout
from hp_core.specs.parallel import ParallelSpec
from hp_core.specs.precision import PrecisionSpec
from hp_core.costs import LayerCost
from hp_core.peak_points import reserved_over_peak
from hp_core.precision_recipes import PrecisionRecipe
from hp_core.types import Optimizer

__all__ = ["PlacedLayer", "StageInputs", "layer_elements", "offloaded_bytes", "plan_stage", "static_bytes"]


@attrs.frozen
class PlacedLayer:
    """One layer as the stage planner sees it: its kind, its cost and how it recomputes.

    Build with :meth:`make`; the derived byte counts are computed once there.

    Attributes:
        kind: Layer kind name.
        cost: Its cost on one rank.
        full: Recomputed fully (keeps only its input).
        recomputed: The switches it recomputes (when not full).
        setting: The setting's display name.
        kept_bytes: Bytes kept per micro-batch under its setting.
        backward_working_bytes: What its backward holds beyond what it keeps,
            the tensors it recomputes included: under full recompute, the
            plain layer's activations (less the input it kept) and working set.
        placement: Its kind's placement (``first``, ``body``, ``last``).
    """

    kind: str
    cost: LayerCost
    full: bool
    recomputed: frozenset[str]
    setting: str
    kept_bytes: int
    backward_working_bytes: int
    placement: str = "body"

    @classmethod
    def make(
        cls, kind: str, cost: LayerCost, full: bool, recomputed: frozenset[str], setting: str, offload: float = 0.0,
        placement: str = "body",
    ) -> "PlacedLayer":
        """The layer under a setting.

        Args:
            offload: The share of what the setting keeps that is moved to the
                host in forward (:func:`offloaded_bytes`); it comes back for the
                layer's backward, so it counts in the backward working set as a
                recomputed tensor does.
        """
        plain = cost.kept_bytes
        if full:
            kept = cost.input_bytes
            working = plain - cost.input_bytes + cost.working_bytes
        else:
            kept = cost.kept_under(recomputed)
            working = cost.working_bytes + plain - kept
        moved = offloaded_bytes(kept, offload)
        return cls(kind, cost, full, recomputed, setting, kept - moved, working + moved, placement)

    @property
    def awaiting_bytes(self) -> int:
        """What one micro-batch past its input-gradient pass keeps for its deferred weight-gradient pass.

        The kind's :attr:`LayerCost.weight_gradient_bytes <hp_core.costs.LayerCost.weight_gradient_bytes>`
        whatever the setting (the input-gradient pass rebuilt what recompute dropped, and W reads
        it); a kind that states none: :attr:`kept_bytes`, a whole micro-batch (docs/schedules.md).
        """
        stated = self.cost.weight_gradient_bytes
        return self.kept_bytes if stated is None else stated


def offloaded_bytes(kept_bytes: int, share: float) -> int:
    """Bytes of *kept_bytes* a layer offloading *share* of them moves to the host: ``floor(share * kept)``."""
    return math.floor(share * kept_bytes)


@attrs.frozen
class StageInputs:
    """Everything a stage's estimate needs beyond its layers.

    Attributes:
        schedule: The run's pipeline schedule: each stage's chunks and what they keep.
        optimizer: The run's optimizer: what it keeps per parameter element.
        recipe: The low-precision GEMM recipe (``None``: nothing quantized):
            the weight copies it holds count with the parameters, and the
            parameters it keeps in its format (``param_gather``) are stored
            and gathered so (:mod:`hp_core.engine.precision`).
        layout: The pipeline's shape the schedule is asked about (``pp``, ``vpp``,
            micro-batches), made from the fields above, once.
    """

    parallel: ParallelSpec
    zero: int
    precision: PrecisionSpec
    micro_batches: int
    schedule: Schedule
    overhead_bytes: int
    deferred_grad_reduction: bool = False
    expert_overhead_bytes: int = 0
    dummy_wgrad_per_shape: bool = False  # Runtime.dummy_weight_gradients
    optimizer: Optimizer = attrs.field(kw_only=True)
    peak_points: Any = attrs.field(default=None, kw_only=True)  # Runtime.peak_points (hp_core.peak_points)
    recipe: PrecisionRecipe | None = attrs.field(default=None, kw_only=True)
    blas: tuple[str, int] | None = attrs.field(default=None, kw_only=True)  # BlasWorkspaces.on: (gemms, bytes)
    # Made from the fields above when the inputs are made (again on attrs.evolve), so it always matches them.
    layout: ScheduleLayout = attrs.field(init=False, eq=False, repr=False)
    _plans: dict = attrs.field(factory=dict, eq=False, repr=False, init=False)
    # What plan_stage reads of the layers and these inputs alone, kept by the layers' identities with the layers (no id
    # reused while kept): stages composed where the caller shares no cache (the recompute planner asks for the same
    # stages under every state it searches), and layers as the peak points see them (hp_core.engine.stage_view).
    _composed: dict = attrs.field(factory=dict, eq=False, repr=False, init=False)
    views: dict = attrs.field(factory=dict, eq=False, repr=False, init=False)

    @layout.default
    def _layout(self) -> ScheduleLayout:
        return ScheduleLayout(self.parallel.pp, self.parallel.vpp, self.micro_batches)

    def stage_plan(self, index: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(chunks, in_flight)`` of stage *index* under the schedule (asked once per stage)."""
        found = self._plans.get(index)
        if found is None:
            found = self._plans[index] = stage_plan(self.schedule, self.layout, index)
        return found

    def keep_plans(self, layout: ScheduleLayout, plans: Sequence[tuple[tuple[int, ...], tuple[int, ...]]]) -> None:
        """Keep *plans*, every stage's ``(chunks, in_flight)`` in stage order, as :meth:`stage_plan` answers them:
        those :func:`hp_core.engine.schedule.check_layout` asked of :attr:`schedule` on *layout*
        (kept only where *layout* is :attr:`layout`; the stages are asked again otherwise)."""
        if layout == self.layout:
            self._plans.update(enumerate(plans))


def _static(elements: dict[str, int], states: Mapping[str, Any], inputs: StageInputs,
            whole_grads: bool = False, frozen: Mapping[str, Any] | None = None) -> tuple[int, int, int, int]:
    """:func:`static_bytes` of a stage's inputs (DP*CP for dense groups, expert DP for routed experts)."""
    p = inputs.parallel
    return static_bytes(elements, states, inputs.precision, master_bytes(inputs.optimizer, inputs.precision), inputs.zero,
                        p.dp * p.cp, p.expert_dp, whole_grads, frozen)


def _zero3_buffers(per_layer_elements: Sequence[tuple[int, int]], inputs: StageInputs, stage_elements: int, layers: int = 2,
                   quantized: int = 0) -> int:
    """Gathered parameters and the gradient reduce-scatter buffer under ZeRO-3/FSDP.

    Resharding after forward, a rank holds the running layer's and the
    prefetched layer's gathered parameters (PyTorch FSDP ``forward_prefetch`` /
    ``backward_prefetch``; DeepSpeed ZeRO-3 prefetch) and one layer's unsharded
    gradient before its reduce-scatter; *layers* = 1 where nothing is left to
    prefetch (the stage's last backward). Without resharding, every gathered
    parameter of the stage stays from forward to backward. *quantized* of the
    stage's elements are GEMM weights a recipe may gather in its format.
    """
    if inputs.zero < 3 or not per_layer_elements:
        return 0
    p = inputs.precision
    # Gathered parameters are in the compute dtype (FSDP's MixedPrecisionPolicy param_dtype).
    # ``per_layer_elements``: (elements of a layer, how many such layers the stage has).
    largest: list[int] = []
    for elements, n in sorted(per_layer_elements, reverse=True):
        largest += [elements] * min(n, layers)
        if len(largest) >= layers:
            break
    held = sum(largest[:layers]) if inputs.parallel.reshard_after_forward else stage_elements
    gathered = held * p.activation_bytes
    if inputs.recipe is not None and quantized:
        # Parameters gathered in the recipe's format (torchao's float8 all-gather): their quantized share.
        gathered = math.ceil(gathered_param_bytes(held, round(held * quantized / stage_elements), inputs.recipe,
                                                  p.activation_bytes))
    return gathered + largest[0] * p.reduction_bytes  # the reduce-scatter input, in the reduce dtype


def _with_recipe(static: tuple[int, int, int, int], quantized: int, inputs: StageInputs, module_copies: int = 0) -> tuple[int, int, int, int]:
    """Parameters with what a low-precision recipe adds or stores otherwise (docs/precision.md).

    The cached weight copies (:func:`~hp_core.engine.precision.weight_copy_bytes`, and *module_copies*, those of the
    modules in a format of their own: :func:`~hp_core.engine.module_formats.module_weight_copy_bytes`) count with the
    parameters; parameters kept in the recipe's format (``param_gather`` ``stored``: Megatron-LM
    ``--fp8-param-gather``) take its bytes instead of ``param_bytes``. The other three are unchanged.
    """
    recipe = inputs.recipe
    assert recipe is not None
    params, grads, master, states = static
    params += weight_copy_bytes(quantized, recipe, inputs.zero) + module_copies
    if recipe.stores_weights:
        params -= math.floor(quantized * (inputs.precision.param_bytes - recipe.weights.bytes_per_element))
    return params, grads, master, states


@attrs.frozen
class _Composition:
    """What a stage's layers hold whatever the stage's position in the pipeline (:func:`plan_stage`).

    Attributes:
        static: Parameters, gradients, master parameters and optimizer states.
        last_static: The same with whole gradients (the ``last_backward`` point).
        kept_by_chunk: Per chunk, per kind, the bytes one micro-batch of it keeps.
        awaiting_by_chunk: The same for a micro-batch awaiting its weight-gradient pass.
        buffers_by_chunk: Per chunk, the per-micro-batch communication buffers.
        buffers_once: Communication buffers held once (the largest of the layers').
        gathered: ZeRO-3 gathered parameters and gradient buffer at the end of
            warm-up (two layers prefetched) and at the last backward (one).
        overhead: The runtime's bytes beyond the model math on this stage.
        received: The largest input a layer of the stage receives (a pipeline send's size).
        working: The first backward's working set over the last chunk.
        first_kept, first_working: What the stage's first layer keeps and works with.
        kinds: Layer counts by kind, in stage order.
        elements_by_kind: Parameter elements by kind.
    """

    static: tuple[int, int, int, int]
    last_static: tuple[int, int, int, int] | None
    kept_by_chunk: tuple[dict[str, int], ...]
    awaiting_by_chunk: tuple[dict[str, int], ...]
    buffers_by_chunk: tuple[int, ...]
    buffers_once: int
    gathered: tuple[int, int]
    overhead: int
    received: int
    working: int
    first_kept: int
    first_working: int
    kinds: dict[str, int]
    elements_by_kind: dict[str, int]


def _compose(chunk_layers: Sequence[Sequence[PlacedLayer]], inputs: StageInputs) -> _Composition:
    parallel = inputs.parallel
    # A stage repeats a few distinct layers (one PlacedLayer per group and setting): each is
    # counted once, with its multiplicity, per chunk.
    per_chunk: list[dict[int, list]] = []
    distinct: dict[int, list] = {}
    for layers in chunk_layers:
        counted: dict[int, list] = {}
        for layer in layers:
            entry = counted.get(id(layer))
            if entry is None:
                counted[id(layer)] = [layer, 1]
            else:
                entry[1] += 1
        per_chunk.append(counted)
        for key, (layer, n) in counted.items():
            entry = distinct.get(key)
            if entry is None:
                distinct[key] = [layer, n]
            else:
                entry[1] += n
    owners = frozenset(layer.kind for layer, _ in distinct.values())

    elements: dict[str, int] = {}
    state_parts: dict[str, list[tuple[float, int]]] = {}
    elements_by_kind: dict[str, int] = {}
    kinds: dict[str, int] = {}
    per_layer: list[tuple[int, int]] = []  # (elements of one such layer, layers of it) under ZeRO-3
    frozen: dict[str, Any] = {}  # frozen parameters' bytes by group
    frozen_elements = 0
    for layer, n in distinct.values():
        # Its elements by group (as layer_elements counts them) and what the optimizer keeps of them.
        loads = layer_load(layer.cost, layer.kind, parallel.tp, parallel.ep, parallel.etp, owners, inputs.optimizer,
                           inputs.precision)
        for group, load in loads.items():
            elements[group] = elements.get(group, 0) + n * load.elements
            state_parts.setdefault(group, []).append((load.state_bytes, n))
            if load.frozen_elements:
                frozen[group] = frozen.get(group, 0) + n * load.frozen_bytes
                frozen_elements += n * load.frozen_elements
        held = sum(load.elements + load.frozen_elements for load in loads.values())
        elements_by_kind[layer.kind] = elements_by_kind.get(layer.kind, 0) + n * held
        kinds[layer.kind] = kinds.get(layer.kind, 0) + n
        if inputs.zero >= 3:
            per_layer.append((held, n))
    stage_elements = sum(elements.values()) + frozen_elements
    recipe = inputs.recipe
    quantized = module_copies = 0
    if recipe is not None and recipe.low_precision:
        quantized = quantized_weight_elements((layer.cost, n) for layer, n in distinct.values())
        module_copies = module_weight_copy_bytes(((layer.cost, n) for layer, n in distinct.values()), recipe, inputs.zero)

    kept_by_chunk, awaiting_by_chunk = [], []
    buffers_by_chunk = []
    for counted in per_chunk:
        kept: dict[str, int] = dict.fromkeys(kinds, 0)
        awaiting = dict(kept)
        buffers = 0
        for layer, n in counted.values():
            kept[layer.kind] += n * layer.kept_bytes
            awaiting[layer.kind] += n * layer.awaiting_bytes
            buffers += n * layer.cost.buffers_per_micro_batch_bytes
        kept_by_chunk.append(kept)
        awaiting_by_chunk.append(awaiting)
        buffers_by_chunk.append(buffers)

    # What the runtime holds beyond the model math: fixed workspaces, those of a
    # rank with routed experts, PyTorch's cuBLAS workspaces where the rank runs a GEMM
    # through torch, and one dummy weight gradient per distinct weight shape where
    # fused weight-gradient accumulation keeps them.
    overhead = inputs.overhead_bytes + stage_blas_bytes(inputs.blas, (layer.cost.work for layer, _ in distinct.values()))
    if elements.get("routed_expert"):
        overhead += inputs.expert_overhead_bytes
    if inputs.dummy_wgrad_per_shape:
        shapes = dict.fromkeys(shape for layer, _ in distinct.values() for shape in layer.cost.weight_shapes)
        overhead += sum(rows * cols for rows, cols in shapes) * inputs.precision.activation_bytes
    if quantized:
        overhead += scaling_state_bytes([(layer.cost, n) for layer, n in distinct.values()], recipe)

    # The first backward: the stage's last chunk, top layer first.
    working = freed = 0
    for layer in reversed(chunk_layers[-1]):
        working = max(working, layer.backward_working_bytes - freed)
        freed += layer.kept_bytes

    last = inputs.deferred_grad_reduction and inputs.zero >= 2
    first = chunk_layers[0][0]
    states = group_states(state_parts)
    static = _static(elements, states, inputs, frozen=frozen)
    last_static = _static(elements, states, inputs, whole_grads=True, frozen=frozen) if last else None
    if quantized or module_copies:
        static, last_static = (_with_recipe(found, quantized, inputs, module_copies) if found is not None else None
                               for found in (static, last_static))
    return _Composition(
        static=static,
        last_static=last_static,
        kept_by_chunk=tuple(kept_by_chunk),
        awaiting_by_chunk=tuple(awaiting_by_chunk),
        buffers_by_chunk=tuple(buffers_by_chunk),
        buffers_once=max((layer.cost.buffers_once_bytes for layer, _ in distinct.values()), default=0),
        gathered=(_zero3_buffers(per_layer, inputs, stage_elements, quantized=quantized),
                  _zero3_buffers(per_layer, inputs, stage_elements, 1, quantized=quantized)),
        overhead=overhead,
        received=max((layer.cost.input_bytes for layer, _ in distinct.values()), default=0),
        working=working,
        first_kept=first.kept_bytes,
        first_working=first.backward_working_bytes,
        kinds=kinds,
        elements_by_kind=elements_by_kind,
    )


def plan_stage(
    index: int,
    chunk_layers: Sequence[Sequence[PlacedLayer]],
    chunk_body: Sequence[Sequence[int]],
    settings: tuple[str, ...],
    inputs: StageInputs,
    compositions: dict | None = None,
) -> StageEstimate:
    """The peak of one stage at the end of warm-up (its first backward).

    Args:
        index: Stage index.
        chunk_layers: Per chunk of the stage (in chunk order), its layers in
            forward order, first- and last-placed kinds included.
        chunk_body: Per chunk, the body layer indices it runs.
        settings: The recompute setting of each of the stage's body layers, in order.
        inputs: Layout, precision, micro-batches, schedule and runtime overhead.
        compositions: A cache shared by the stages of one estimate: stages
            running the same layer objects in the same chunks (the middle
            stages of a pipeline) compose their layers once; only what their
            position in the schedule changes (micro-batches in flight,
            pipeline neighbours) is priced per stage.
    """
    parallel = inputs.parallel
    if compositions is None:
        key = tuple(tuple(map(id, layers)) for layers in chunk_layers)
        kept = inputs._composed.get(key)
        if kept is None:
            kept = inputs._composed[key] = (tuple(map(tuple, chunk_layers)), _compose(chunk_layers, inputs))
        found = kept[1]
    else:
        key = tuple(tuple(map(id, layers)) for layers in chunk_layers)
        found = compositions.get(key)
        if found is None:
            found = compositions[key] = _compose(chunk_layers, inputs)
    chunk_ids, in_flight = inputs.stage_plan(index)
    shape = inputs.layout
    awaiting = awaiting_weight_gradient(inputs.schedule, shape, index, in_flight)
    # Pipeline sends and receives: a stage holds the output gradient it received
    # through its backward (not the last stage) and the input gradient it sent
    # until the next one (not the first stage): Megatron-LM schedules.py
    # forward_backward_pipelining_without_interleaving.
    sends = ((index < parallel.pp - 1) + (index > 0)) * found.received if parallel.pp > 1 else 0
    params, grads, master, states = found.static

    def moment(counts: Sequence[int], waits: Sequence[int], working: int) -> tuple[MemoryBreakdown, dict[str, int]]:
        """The stage when each chunk keeps *counts* micro-batches, *waits* of them awaiting W: the whole
        ones keep what the layers keep for their backward, those awaiting W what their W reads
        (docs/schedules.md, "what a micro-batch keeps"); buffers per micro-batch for each kept."""
        by_kind = dict.fromkeys(found.kinds, 0)
        per_mb = 0
        for count, w, kept, waiting, buffers in zip(counts, waits, found.kept_by_chunk, found.awaiting_by_chunk,
                                                    found.buffers_by_chunk):
            for kind, n in kept.items():
                by_kind[kind] += (count - w) * n + w * waiting[kind]
            per_mb += count * buffers
        return MemoryBreakdown(
            parameters_bytes=params, gradients_bytes=grads, master_parameters_bytes=master, optimizer_states_bytes=states,
            activations_bytes=sum(by_kind.values()), communication_buffers_bytes=found.buffers_once + per_mb
            + found.gathered[0] + sends, working_set_bytes=working, runtime_overhead_bytes=found.overhead), by_kind

    warmup, activations_by_kind = moment(in_flight, awaiting, found.working)
    points = {"warmup_end": warmup}
    # Moments with more micro-batches past their B than the peak (between a B and its W, no backward
    # running): the one holding most binds where W's tensors outweigh a whole micro-batch's. Held, not kept:
    # each moment's micro-batches also hold their communication buffers, so the moment with the most
    # activations is not always the one with the highest peak.
    waits = [moment(counts, waits, 0) + (counts, waits)
             for counts, waits in weight_gradient_moments(inputs.schedule, shape, index, len(in_flight))]
    if waits:
        most = max(waits, key=lambda found_moment: found_moment[0].peak_bytes)
        points["awaiting_w"] = most[0]
    if found.last_static is not None:
        # The end of the stage's last backward: every micro-batch's activations are
        # freed, the gradient is whole until its one reduce-scatter, and the first
        # layer's backward runs with one layer's gathered parameters (nothing left
        # to prefetch): the second peak point of docs/concepts.md ("stage peaks").
        last_params, last_grads, last_master, last_states = found.last_static
        points["last_backward"] = MemoryBreakdown(
            parameters_bytes=last_params,
            gradients_bytes=last_grads,
            master_parameters_bytes=last_master,
            optimizer_states_bytes=last_states,
            activations_bytes=found.first_kept,
            communication_buffers_bytes=found.buffers_once + found.gathered[1],
            working_set_bytes=found.first_working,
            runtime_overhead_bytes=found.overhead,
        )
    view = pools = None
    if inputs.peak_points is not None:
        view = stage_view(index, chunk_layers, in_flight, found, points, inputs)
        points, pools = dict(inputs.peak_points(view)), getattr(inputs.peak_points, "cached_bytes", None)
    peaks = {name: point.peak_bytes for name, point in points.items()}
    binding = max(peaks, key=peaks.__getitem__)
    if binding == "awaiting_w" and waits:
        _, activations_by_kind, in_flight, awaiting = most
    chunks = tuple(ChunkEstimate(index=chunk, layers=tuple(body), micro_batches_in_flight=count, awaiting_weight_gradient=w)
                   for chunk, count, body, w in zip(chunk_ids, in_flight, chunk_body, awaiting))
    return StageEstimate(
        index=index,
        layers=tuple(i for body in chunk_body for i in body),
        kinds=dict(found.kinds),
        chunks=chunks,
        micro_batches_in_flight=sum(in_flight),
        memory=points[binding],
        binding_point=binding,
        settings=settings,
        activations_by_kind=activations_by_kind,
        parameters_by_kind=dict(found.elements_by_kind),
        peak_points=peaks,
        cached_bytes=reserved_over_peak(pools, view, points, peaks[binding]) if pools is not None else 0,
    )
