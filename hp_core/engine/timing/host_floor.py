"""The host floor: a layer's forward and backward no shorter than the host time issuing their kernels
(:class:`~hp_core.specs.overlap.HostOverhead`; docs/time.md, "Overlap and host time"), and the GEMMs it counts for a
layer's routed experts."""

from __future__ import annotations

from hp_core.costs import LayerWork
from hp_core.engine.timing.rates import _Rates

__all__ = ["_expert_gemm_count", "_host_floor", "host_kernels"]


def _expert_gemm_count(work: LayerWork) -> float:
    """The GEMMs the host floor counts for a layer's routed experts: their grouped GEMMs as one, or under
    ``sequential_experts`` (Megatron-Core's SequentialMLP) one for each local expert's MLP, its FC1 and FC2 entries of
    :attr:`~hp_core.costs.LayerWork.expert_gemms` together (half the experts those entries hold): the kernels
    ``benchmarks/count_eager_kernels.py`` counts a SequentialMLP adding per local expert, 6 forward and 13 backward
    (docs/time.md, "Overlap and host time"), are about one GEMM's ``kernels_per_gemm`` each way (5.5 and 11)."""
    if not work.grouped_flops:
        return 0
    return sum(experts for experts, *_ in work.expert_gemms) / 2 if work.sequential_experts and work.expert_gemms else 1


def _host_floor(work: LayerWork, forward: float, backward: float, r: _Rates, frozen: int = 0) -> tuple[float, float]:
    """Forward and backward no shorter than the host time issuing their kernels (:class:`~hp_core.specs.overlap.HostOverhead`).

    Kernels per direction, counted from the work the layer states: each GEMM
    (its weights', the experts' grouped GEMMs as one, each local expert's MLP as one under
    ``sequential_experts``: :func:`_expert_gemm_count`) with the elementwise
    kernels around it (``kernels_per_gemm``), twice in backward (input and
    weight gradients; once for the *frozen* ones, which run no weight-gradient
    GEMM: :func:`~hp_core.engine.timing.gemm_seconds.frozen_seconds`), one attention kernel per call each way, each
    collective call, and a router's and a token permutation's own kernels
    where the layer states a router (``router_elements``) and a permutation (``permute_bytes``).
    """
    kernels_fwd, kernels_bwd = host_kernels(work, r, frozen)
    return max(forward, kernels_fwd * r.host.seconds_per_kernel), max(backward, kernels_bwd * r.host.seconds_per_kernel)


def host_kernels(work: LayerWork, r: _Rates, frozen: int = 0) -> tuple[float, float]:
    """The ``(forward, backward)`` kernels :func:`_host_floor` counts for a layer (its docstring says which)."""
    host = r.host
    gemms = len(work.gemms) + _expert_gemm_count(work)
    calls_fwd = sum(c.forward_calls for c in work.collectives)
    calls_bwd = sum(c.backward_calls for c in work.collectives)
    router_fwd, router_bwd = host.router_kernels if work.router_elements else (0, 0)
    permute = host.permute_kernels if work.permute_bytes else 0
    return (gemms * host.kernels_per_gemm + work.attention_calls + calls_fwd + router_fwd + permute,
            (2 * gemms - frozen) * host.kernels_per_gemm + work.attention_calls + calls_bwd + router_bwd + permute)
