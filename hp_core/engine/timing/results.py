"""What a step time returns: :class:`StepTime` and its per-stage :class:`StageTime`.

The model behind the numbers is described in :mod:`hp_core.engine.timing`.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

__all__ = ["StageTime", "StepTime"]


@attrs.frozen
class StageTime:
    """One pipeline stage's time (one rank of it).

    Attributes:
        index: Stage index.
        forward_seconds: Forward compute per micro-batch (all its chunks).
        backward_seconds: Backward compute per micro-batch, recompute excluded.
        recompute_seconds: Recomputed forward compute per micro-batch.
        communication_seconds: Exposed TP/CP/EP/PP communication per micro-batch
            (the recomputed forward's included).
        micro_batch_seconds: The sum of the four above: the stage's time per micro-batch.
        data_parallel_seconds: Exposed gradient and parameter communication per step.
        optimizer_seconds: The optimizer step.
        flops: Model FLOPs per micro-batch on one rank (forward and backward,
            matmuls and attention as the layers count them; no recompute).
        communication_by_group: ``(group, seconds, exposed seconds)`` per
            group: ``tp``, ``cp``, ``ep``, ``pp``, (ZeRO-3) ``fsdp`` and (HSDP's
            replicate all-reduce) ``hsdp`` per micro-batch, ``dp``, ``mirror`` (a schedule's gradient sync), ``embedding``
            (a weight tied across stages: its gradients summed between them, :mod:`~hp_core.engine.timing.tied_weights`),
            ``fsdp_step`` and ``hsdp_step`` (FSDP under PP's once-per-step collectives) per step; the rest of the time is hidden
            behind compute by the runtime's overlap schedule.
    """

    index: int
    forward_seconds: float
    backward_seconds: float
    recompute_seconds: float
    communication_seconds: float
    micro_batch_seconds: float
    data_parallel_seconds: float
    optimizer_seconds: float
    flops: float
    communication_by_group: tuple[tuple[str, float, float], ...] = ()


@attrs.frozen
class StepTime:
    """The time of one training step and its breakdown.

    ``step_seconds`` is the sum of the six ``*_seconds`` parts: the slowest
    stage's compute, recompute and exposed communication over all
    micro-batches, the pipeline bubble, and the slowest stage's exposed
    data-parallel communication and optimizer step.

    Attributes:
        step_seconds: One optimizer step.
        compute_seconds: Forward and backward compute of the slowest stage, all micro-batches, and the cached
            quantized weights' once-a-step quantization, every stage's in turn (``provenance["cached_weight_quantize_seconds"]``).
        recompute_seconds: Its recomputation.
        communication_seconds: Its exposed TP/CP/EP/PP communication.
        bubble_seconds: Pipeline fill and drain.
        data_parallel_seconds: Exposed DP/ZeRO communication after the last backward.
        optimizer_seconds: The optimizer step.
        micro_batches: Micro-batches per step per data-parallel rank.
        tokens_per_second: Global batch tokens over the step time.
        model_flops: Model FLOPs of the step over all devices (forward and
            backward of every matmul and attention core as the layers count
            them, three times the forward, a frozen weight's twice, the full score matrix included; no recompute).
        mfu: Model FLOPs utilisation: ``model_flops / (step * devices * peak)``,
            against the compute dtype's dense peak (as the field reports it,
            whatever the precision recipe).
        hfu: Hardware FLOPs utilisation: recomputed FLOPs and a fused attention core's re-run scores included.
        peak_flops_per_second: The device's dense peak in the compute dtype.
        stages: Per-stage times.
        provenance: The timing profile, device entry, dtype and algorithms used.
        mfu_recipe_peak: Model FLOPs utilisation against the precision recipe's
            GEMM peak (the FP8 or FP4 dense peak; ``mfu`` for ``bf16``).
        recipe_peak_flops_per_second: That peak.
    """

    step_seconds: float
    compute_seconds: float
    recompute_seconds: float
    communication_seconds: float
    bubble_seconds: float
    data_parallel_seconds: float
    optimizer_seconds: float
    micro_batches: int
    tokens_per_second: float
    model_flops: float
    mfu: float
    hfu: float
    peak_flops_per_second: float
    stages: tuple[StageTime, ...]
    provenance: Mapping[str, Any]
    mfu_recipe_peak: float = 0.0
    recipe_peak_flops_per_second: float = 0.0

    @property
    def breakdown_seconds(self) -> dict[str, float]:
        """The six parts of the step, by name (they add up to ``step_seconds``)."""
        return {
            "compute": self.compute_seconds,
            "recompute": self.recompute_seconds,
            "communication": self.communication_seconds,
            "bubble": self.bubble_seconds,
            "data_parallel": self.data_parallel_seconds,
            "optimizer": self.optimizer_seconds,
        }
