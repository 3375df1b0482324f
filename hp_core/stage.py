"""The stage planner: compose layer costs into per-stage peaks (DESIGN sections 3 and 7).

Static memory per rank (Rajbhandari et al. 2020, "ZeRO", Section 5; Megatron-LM
``theoretical_memory_usage.py``): with ``N`` parameter elements on a rank and
``d`` the data-parallel times context-parallel degree (the group Megatron-Core's
distributed optimizer shards over; the expert data-parallel degree for routed
experts),

* parameters ``N * param_bytes``, divided by ``d`` at ZeRO-3/FSDP;
* gradients ``N * grad_bytes``, divided by ``d`` from ZeRO-2;
* master parameters ``N * master_param_bytes`` and optimizer states
  ``N * moments * moment_bytes``, divided by ``d`` from ZeRO-1.

Activations: per chunk, micro-batches in flight (:mod:`hp_core.schedule`)
times what its layers keep under their recompute settings. Working set: the
first backward the stage runs at the end of warm-up walks its last chunk's
layers from the top; the working set is the largest of each layer's backward
working set less what the layers after it already freed for that micro-batch.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

import attrs

from hp_core.results import ChunkEstimate, MemoryBreakdown, StageEstimate
from hp_core.schedule import chunks_of_stage, in_flight_per_chunk
from hp_core.specs.parallel import ParallelSpec
from hp_core.specs.precision import PrecisionSpec
from hp_core.types import LayerCost

__all__ = ["PlacedLayer", "StageInputs", "plan_stage"]


@attrs.frozen
class PlacedLayer:
    """One layer as the stage planner sees it: its kind, its cost and how it recomputes.

    Attributes:
        kind: Layer kind name.
        cost: Its cost on one rank.
        full: Recomputed fully (keeps only its input).
        recomputed: The switches it recomputes (when not full).
        body_index: Its index among the body layers (``None`` for first/last-placed kinds).
        setting: The setting's display name.
    """

    kind: str
    cost: LayerCost
    full: bool
    recomputed: frozenset[str]
    body_index: int | None
    setting: str

    @property
    def kept_bytes(self) -> int:
        """Bytes kept per micro-batch under its setting."""
        if self.full:
            return self.cost.input_bytes
        return self.cost.kept_under(self.recomputed)

    @property
    def backward_working_bytes(self) -> int:
        """What its backward holds beyond what it keeps: recomputed tensors included."""
        if self.full:
            return self.cost.kept_bytes - self.cost.input_bytes + self.cost.working_bytes
        return self.cost.working_bytes + self.cost.kept_bytes - self.cost.kept_under(self.recomputed)


@attrs.frozen
class StageInputs:
    """Everything a stage's estimate needs beyond its layers."""

    parallel: ParallelSpec
    zero: int
    precision: PrecisionSpec
    micro_batches: int
    schedule: str
    overhead_bytes: int


def _shard_degrees(parallel: ParallelSpec) -> dict[str, tuple[int, int]]:
    """Per parameter group: (model-parallel split of a split tensor, data-parallel sharding degree)."""
    dense_dp = parallel.dp * parallel.cp
    return {
        "dense": (parallel.tp, dense_dp),
        "shared_expert": (parallel.tp, dense_dp),
        # Routed experts: experts over ep, each expert's matrices over etp;
        # states over the expert data-parallel group (Megatron-Core parallel_state).
        "routed_expert": (parallel.ep * parallel.etp, parallel.expert_dp),
    }


def _per_rank_elements(layers: Sequence[PlacedLayer], parallel: ParallelSpec, owners_here: set[str]) -> dict[str, int]:
    """Parameter elements one rank of the stage holds, by group (before ZeRO sharding)."""
    degrees = _shard_degrees(parallel)
    found: Counter[str] = Counter()
    for layer in layers:
        for p in layer.cost.params:
            if p.shared_with is not None and p.shared_with in owners_here:
                continue  # a tied weight whose owner sits on this stage: one tensor
            split, _ = degrees[p.group]
            if p.group == "routed_expert":
                found[p.group] += math.ceil(p.stored_elements / (parallel.ep * (parallel.etp if p.tp_split else 1)))
            else:
                found[p.group] += math.ceil(p.stored_elements / split) if p.tp_split else p.stored_elements
    return dict(found)


def _static(elements: dict[str, int], inputs: StageInputs) -> tuple[int, int, int, int]:
    p, zero = inputs.precision, inputs.zero
    degrees = _shard_degrees(inputs.parallel)
    params = grads = master = states = 0
    for group, n in elements.items():
        shard = degrees[group][1]
        params += math.ceil(n * p.param_bytes / (shard if zero >= 3 else 1))
        grads += math.ceil(n * p.grad_bytes / (shard if zero >= 2 else 1))
        master += math.ceil(n * p.master_param_bytes / (shard if zero >= 1 else 1))
        states += math.ceil(n * p.optimizer_state_bytes / (shard if zero >= 1 else 1))
    return params, grads, master, states


def _zero3_buffers(layers: Sequence[PlacedLayer], inputs: StageInputs, stage_elements: dict[str, int]) -> int:
    """Gathered parameters and the gradient reduce-scatter buffer under ZeRO-3/FSDP.

    Resharding after forward, a rank holds the running layer's and the
    prefetched layer's gathered parameters (PyTorch FSDP ``forward_prefetch`` /
    ``backward_prefetch``; DeepSpeed ZeRO-3 prefetch) and one layer's unsharded
    gradient before its reduce-scatter. Without resharding, every gathered
    parameter of the stage stays from forward to backward.
    """
    if inputs.zero < 3:
        return 0
    p = inputs.precision
    per_layer = sorted(
        (sum(_per_rank_elements([layer], inputs.parallel, set()).values()) for layer in layers), reverse=True
    )
    if not per_layer:
        return 0
    if inputs.parallel.reshard_after_forward:
        gathered = sum(per_layer[:2]) * p.param_bytes
    else:
        gathered = sum(stage_elements.values()) * p.param_bytes
    return gathered + per_layer[0] * p.grad_bytes


def plan_stage(
    index: int,
    chunk_layers: Sequence[Sequence[PlacedLayer]],
    inputs: StageInputs,
) -> StageEstimate:
    """The peak of one stage at the end of warm-up (its first backward).

    Args:
        index: Stage index.
        chunk_layers: Per chunk of the stage (in chunk order), its layers in
            forward order, first- and last-placed kinds included.
        inputs: Layout, precision, micro-batches, schedule and runtime overhead.
    """
    parallel = inputs.parallel
    in_flight = in_flight_per_chunk(index, parallel.pp, parallel.vpp, inputs.micro_batches, inputs.schedule)
    all_layers = [layer for layers in chunk_layers for layer in layers]
    owners = {layer.kind for layer in all_layers}
    elements = _per_rank_elements(all_layers, parallel, owners)
    params, grads, master, states = _static(elements, inputs)

    activations = sum(count * sum(layer.kept_bytes for layer in layers) for count, layers in zip(in_flight, chunk_layers))
    buffers_once = max((layer.cost.buffers_once_bytes for layer in all_layers), default=0)
    buffers_per_mb = sum(
        count * sum(layer.cost.buffers_per_micro_batch_bytes for layer in layers)
        for count, layers in zip(in_flight, chunk_layers)
    )
    buffers = buffers_once + buffers_per_mb + _zero3_buffers(all_layers, inputs, elements)

    # The first backward: the stage's last chunk, top layer first.
    working = freed = 0
    for layer in reversed(chunk_layers[-1]):
        working = max(working, layer.backward_working_bytes - freed)
        freed += layer.kept_bytes

    memory = MemoryBreakdown(
        parameters_bytes=params,
        gradients_bytes=grads,
        master_parameters_bytes=master,
        optimizer_states_bytes=states,
        activations_bytes=activations,
        communication_buffers_bytes=buffers,
        working_set_bytes=working,
        runtime_overhead_bytes=inputs.overhead_bytes,
    )
    chunks = tuple(
        ChunkEstimate(
            index=chunk,
            layers=tuple(layer.body_index for layer in layers if layer.body_index is not None),
            micro_batches_in_flight=count,
        )
        for chunk, count, layers in zip(chunks_of_stage(index, parallel.pp, parallel.vpp), in_flight, chunk_layers)
    )
    body = [layer for layer in all_layers if layer.body_index is not None]
    return StageEstimate(
        index=index,
        layers=tuple(layer.body_index for layer in body),
        kinds=dict(Counter(layer.kind for layer in all_layers)),
        chunks=chunks,
        micro_batches_in_flight=sum(in_flight),
        memory=memory,
        binding_point="warmup_end",
        settings=tuple(layer.setting for layer in body),
    )
