"""What the ``fsdp2`` runtime's peak points count of a layer beyond its shard and gathered bytes
(:mod:`hp_plugins.runtimes.fsdp2_pools`), at pp 1 (:mod:`hp_plugins.runtimes.fsdp2_points`) and under PP
(:mod:`hp_plugins.runtimes.fsdp2_pipeline`): the moments of its backward that hold its whole gradients, HSDP's held
all-reduce output; and the largest of several points."""

from __future__ import annotations

from hp_core.peak_points import StageLayer, StageView
from hp_core.results import MemoryBreakdown
from hp_plugins.runtimes.fsdp2_pools import sharded_bytes

__all__ = ["all_reduce_output_bytes", "largest_point", "weight_grad_moments"]


def weight_grad_moments(view: StageView, layer: StageLayer) -> list[tuple[int, int]]:
    """``(what the running layer's activations hold, working set)`` at the moments of a body layer's backward that
    hold its whole weight gradients, unsharded in the compute dtype (FSDP2 computes them on the bf16 unsharded
    parameters and reduce-scatters them once, at the unit's post-backward).

    * At the unit's ``post_backward`` (``_fsdp_param_group.py`` ``FSDPParamGroup.post_backward``, before
      ``foreach_reduce`` copies them into the fp32 reduce-scatter input): all its gradients and the gradient of its
      input; what it kept is freed, its parameters still gathered, and the reduce-scatter input of the unit above
      still held (post_backward pops ``comm_ctx.reduce_scatter_states`` only after resharding).
    * A MoE layer (a ``dispatched_tokens`` term: the routed experts' FC1 input, :mod:`hp_plugins.kit.experts`), at
      its routed experts' FC1 weight-gradient GEMM, the last expert GEMM of its backward: every routed expert's
      gradient, beside what the layer's ops up to the dispatch keep (kept or recomputed, their backward still to
      run), the gradient the layer received, and that GEMM's output and input gradients (the FC1 output's and the
      dispatched tokens' sizes). Measured: FSDPMemTracker's temporaries at Qwen3-30B-A3B's peak (docs/runtimes.md).
    """
    act = view.precision.activation_bytes
    moments = [(0, sum(layer.elements.values()) * act + layer.input_bytes)]
    ops = [term.op for term in layer.terms]
    if "dispatched_tokens" in ops:
        upto = ops.index("dispatched_tokens") + 1
        alive = sum(term.bytes for term in layer.terms[:upto])
        flowing = layer.input_bytes + layer.terms[upto - 1].bytes + sum(
            term.bytes for term in layer.terms[upto:] if term.op in ("expert_gate_out", "expert_up_out"))
        moments.append((alive, layer.elements.get("routed_expert", 0) * act + flowing))
    return moments


def all_reduce_output_bytes(view: StageView, layer: StageLayer, replicate: int) -> int:
    """HSDP with a reduce dtype other than the gradients': a unit's reduce-scatter output, all-reduced across the
    replicate group in the reduce dtype, stays allocated until the end of backward (torch 2.13
    ``_fsdp_collectives.py`` ``foreach_reduce`` hands it to ``FSDPParamGroup._all_reduce_state``, which only the
    same group's next ``post_backward`` or ``finalize_backward`` clears, so the caching allocator cannot hand the
    block to the next unit's reduce-scatter while its all-reduce runs); in the gradients' own dtype it is the
    sharded gradient itself (``foreach_reduce`` views it out)."""
    return sharded_bytes(view, layer, view.precision.reduction_bytes, replicate)


def largest_point(points: list[MemoryBreakdown]) -> MemoryBreakdown:
    """The first of *points* with the largest peak."""
    return max(points, key=lambda found: found.peak_bytes)
