"""Collective and pipeline math: :func:`collective_seconds` and :func:`pipeline_seconds`.

The sources (Thakur, Rabenseifner and Gropp 2005; NCCL's ``busbw``
convention, nccl-tests ``doc/PERFORMANCE.md``; Narayanan et al. 2021) are
cited in :mod:`hp_core.engine.timing`.
"""

from __future__ import annotations

import math

__all__ = ["collective_seconds", "pipeline_seconds"]


def collective_seconds(
    op: str, nbytes: float, ranks: int, bandwidth: float, latency: float, algorithm: str = "ring", overhead: float = 0.0
) -> float:
    """Time of one collective (:mod:`hp_core.engine.timing`: Thakur et al. 2005, NCCL ``busbw``).

    Args:
        op: ``"all_reduce"``, ``"all_gather"``, ``"reduce_scatter"``,
            ``"all_to_all"`` or ``"p2p"``.
        nbytes: The buffer: all-reduce's buffer, all-gather's gathered output,
            reduce-scatter's input, all-to-all's send buffer, the message of a send.
        ranks: Ranks in the group.
        bandwidth: Bus bandwidth in bytes per second.
        latency: Latency of one step in seconds.
        algorithm: ``"ring"`` or ``"tree"`` (all-reduce only).
        overhead: A fixed time per collective call (launch and synchronisation);
            not charged to point-to-point sends.
    """
    if nbytes <= 0:
        return 0.0
    if op == "p2p":
        return nbytes / bandwidth + latency
    if ranks <= 1:
        return 0.0
    share = (ranks - 1) / ranks * nbytes / bandwidth
    if op == "all_reduce":
        steps = 2 * math.log2(ranks) if algorithm == "tree" else 2 * (ranks - 1)
        return overhead + 2 * share + steps * latency
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return overhead + share + (ranks - 1) * latency
    raise ValueError(f"unknown collective {op!r}")


def pipeline_seconds(stage_seconds: list[float] | tuple[float, ...], micro_batches: int, chunks_per_stage: int = 1) -> float:
    """``m * max(t) + (sum(t) - max(t)) / v`` (Narayanan et al. 2021, Section 2.2).

    For ``p`` equal stages of time ``t`` that is ``(m + (p - 1) / v) * t``:
    1F1B's bubble ``(p - 1) t`` and interleaved 1F1B's ``(p - 1) t / v``.
    """
    slowest = max(stage_seconds)
    return micro_batches * slowest + (sum(stage_seconds) - slowest) / chunks_per_stage
