"""Frozen results of an estimate: per-stage memory breakdowns, parameter counts, provenance."""

from __future__ import annotations

from typing import Any, Mapping

import attrs

__all__ = ["CATEGORIES", "ChunkEstimate", "Estimate", "MemoryBreakdown", "ParameterSummary", "StageEstimate"]

# The memory categories of a stage, in display order; each is a ``*_bytes`` field.
CATEGORIES = (
    "parameters",
    "gradients",
    "master_parameters",
    "optimizer_states",
    "activations",
    "communication_buffers",
    "working_set",
    "runtime_overhead",
)


@attrs.frozen
class MemoryBreakdown:
    """One stage's memory at one peak point, by category (bytes on one rank)."""

    parameters_bytes: int
    gradients_bytes: int
    master_parameters_bytes: int
    optimizer_states_bytes: int
    activations_bytes: int
    communication_buffers_bytes: int
    working_set_bytes: int
    runtime_overhead_bytes: int

    @property
    def static_bytes(self) -> int:
        """Parameters, gradients, master parameters and optimizer states."""
        return self.parameters_bytes + self.gradients_bytes + self.master_parameters_bytes + self.optimizer_states_bytes

    @property
    def peak_bytes(self) -> int:
        """The sum of every category (:data:`CATEGORIES`)."""
        return (self.parameters_bytes + self.gradients_bytes + self.master_parameters_bytes + self.optimizer_states_bytes
                + self.activations_bytes + self.communication_buffers_bytes + self.working_set_bytes
                + self.runtime_overhead_bytes)


@attrs.frozen
class ChunkEstimate:
    """One pipeline chunk of a stage: its body layers and micro-batches in flight.

    ``awaiting_weight_gradient``: of those in flight, the ones past their input-gradient pass
    whose weight-gradient pass has not run (a zero-bubble schedule's, docs/schedules.md); each
    keeps every matmul's input and output gradient, which hp prices as the whole micro-batch.
    """

    index: int
    layers: tuple[int, ...]
    micro_batches_in_flight: int
    awaiting_weight_gradient: int = 0


@attrs.frozen
class StageEstimate:
    """One pipeline stage (one rank class) at its binding peak point.

    Attributes:
        index: Stage index.
        layers: Body layer indices the stage runs (all chunks).
        kinds: Layer counts by kind on the stage, first- and last-placed kinds included.
        chunks: The stage's chunks.
        micro_batches_in_flight: Chunk-micro-batches kept at the end of warm-up
            (micro-batches for 1F1B).
        memory: The breakdown at the binding point.
        binding_point: Which peak point binds (``"warmup_end"``: the end of
            warm-up, as the stage runs its first backward while holding every
            in-flight micro-batch's activations).
        settings: The recompute setting of each body layer, by layer index.
        activations_by_kind: ``activations_bytes`` split by layer kind (the MTP
            module, the output head's logits and loss, ... each on its own line).
        parameters_by_kind: Parameter elements the rank holds, by layer kind
            (after TP/EP splitting, before ZeRO sharding).
        peak_points: The peak of every point priced, by name (``warmup_end``;
            ``last_backward`` where the runtime defers gradient reduction).
        cached_bytes: How far reserved memory's high-water exceeds the peak:
            over the points, the most of a point's peak plus what the caching
            allocator keeps reserved beside it in pools that point's
            allocations cannot use (idle blocks of another CUDA stream's pool),
            as the runtime states it (0 where it states none). In ``torch.cuda.max_memory_reserved``, not in
            ``max_memory_allocated``, which ``peak_bytes`` is; an allocation that
            fails frees it and retries, so ``fits`` leaves it out.
    """

    index: int
    layers: tuple[int, ...]
    kinds: Mapping[str, int]
    chunks: tuple[ChunkEstimate, ...]
    micro_batches_in_flight: int
    memory: MemoryBreakdown
    binding_point: str
    settings: tuple[str, ...]
    activations_by_kind: Mapping[str, int] = attrs.field(factory=dict)
    parameters_by_kind: Mapping[str, int] = attrs.field(factory=dict)
    peak_points: Mapping[str, int] = attrs.field(factory=dict)
    cached_bytes: int = 0

    @property
    def peak_bytes(self) -> int:
        return self.memory.peak_bytes

    @property
    def reserved_bytes(self) -> int:
        """The peak plus :attr:`cached_bytes`: what ``max_memory_reserved`` reads, as far as hp states it."""
        return self.memory.peak_bytes + self.cached_bytes


@attrs.frozen
class ParameterSummary:
    """Parameter counts of the whole model (tied weights once), by kind and by group."""

    total: int
    by_kind: Mapping[str, int]
    by_group: Mapping[str, int]


@attrs.frozen
class Estimate:
    """The answer to "will it fit": every stage's peak with its breakdown.

    Attributes:
        model: Model name.
        world_size: Devices.
        layout: The resolved parallel layout (degrees, batch, schedule, zero level).
        micro_batches: Micro-batches per step per data-parallel rank.
        stages: Per-stage estimates.
        parameters: Parameter counts.
        device_memory_bytes: The device's memory (``None`` when no hardware is stated).
        reserve_bytes: Memory kept free beside the peak (the runtime's
            ``reserve_bytes`` unless the run states one): ``fits`` needs
            ``peak_bytes + reserve_bytes <= device_memory_bytes``.
        provenance: Which runtime, census source, formulas and versions produced it.
    """

    model: str
    world_size: int
    layout: Mapping[str, Any]
    micro_batches: int
    stages: tuple[StageEstimate, ...]
    parameters: ParameterSummary
    device_memory_bytes: int | None
    provenance: Mapping[str, Any]
    reserve_bytes: int = 0

    @property
    def peak_bytes(self) -> int:
        """The largest stage peak."""
        return max(stage.peak_bytes for stage in self.stages)

    @property
    def fits(self) -> bool | None:
        """Whether every stage's peak plus the reserve fits the device (``None`` without hardware)."""
        if self.device_memory_bytes is None:
            return None
        return self.peak_bytes + self.reserve_bytes <= self.device_memory_bytes
