"""What a stream hides behind which compute: the exposed part of FSDP's per-layer gathers and reduce-scatters,
of bucketed data-parallel reductions and of pipeline sends (docs/time.md, "Overlap and host time").

Each function takes the communication and the compute it may run beside, both
in seconds, and returns ``(total, exposed)``; which overlap a trainer runs is
its timing profile's :class:`~hp_core.specs.overlap.OverlapSchedule`
(runtime options set it per run).
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["bucketed", "fsdp_layers", "hidden_send"]


def fsdp_layers(layers: Sequence[tuple[float, float, float, float]], *, reshard: bool, prefetch: bool,
                reduce_overlap: bool) -> tuple[float, float]:
    """One micro-batch of FSDP's per-layer collectives on a stage: ``(total, exposed)`` seconds.

    *layers* in forward order, each ``(gather, reduce_scatter, forward, backward)``
    seconds (backward with its recompute). Forward: layer ``i``'s all-gather is
    issued while layer ``i-1`` computes (FSDP2's implicit prefetch: the CPU
    runs ahead and the gather runs on its own stream), so ``max(0, gather_i -
    forward_{i-1})`` is exposed and the first gather whole. Backward (reverse
    order): while layer ``j`` computes its gradients, the next layer's
    re-gather (``reshard_after_forward``) and layer ``j+1``'s reduce-scatter
    share the network, ``max(0, gather_{j-1} + reduce_scatter_{j+1} - backward_j)``
    exposed; the first re-gather and the last reduce-scatter whole. Without
    prefetch (respectively reduce-scatter overlap) that traffic is exposed
    whole (PyTorch FSDP2 ``fully_shard``; Zhao et al. 2023, "PyTorch FSDP",
    Section 3.4).
    """
    n = len(layers)
    gathers = [g for g, _, _, _ in layers]
    back_gathers = gathers if reshard else [0.0] * n
    reduces = [r for _, r, _, _ in layers]
    total = sum(gathers) + sum(back_gathers) + sum(reduces)
    if not n:
        return 0.0, 0.0
    if prefetch:
        forward = gathers[0] + sum(max(0.0, gathers[i] - layers[i - 1][2]) for i in range(1, n))
    else:
        forward = sum(gathers)
    # Backward from the last layer to the first: index i runs layer i's gradients.
    exposed_back = back_gathers[n - 1] if prefetch else sum(back_gathers)
    for i in range(n - 1, -1, -1):
        behind = 0.0
        if prefetch and i > 0:
            behind += back_gathers[i - 1]
        if reduce_overlap and i < n - 1:
            behind += reduces[i + 1]
        exposed_back += max(0.0, behind - layers[i][3])
    exposed_back += reduces[0] if reduce_overlap else sum(reduces)
    return total, forward + exposed_back


def bucketed(total: float, bucket: float, window: float, overlapped: bool) -> float:
    """Exposed seconds of a bucketed reduction or gather of *total* seconds beside *window* seconds of compute.

    Megatron-Core issues each bucket as soon as its gradients are ready
    (``--overlap-grad-reduce``) or gathers them ahead of the first forward
    (``--overlap-param-gather``): what does not fit in the window is exposed,
    and at least the one bucket that has nothing left to run beside.
    """
    if not overlapped:
        return total
    return min(total, max(bucket, total - window))


def hidden_send(send: float, window: float, overlapped: bool) -> float:
    """A pipeline send's exposed seconds: ``max(0, send - window)`` when it runs beside a chunk's compute."""
    return max(0.0, send - window) if overlapped else send
