"""A layer's elementwise traffic per op, and its rotary embedding's share of it (docs/time.md, "Elementwise ops").

Elementwise ops are memory-bound: ``flops * bytes_per_flop / (HBM bandwidth * memory efficiency)``, their
backward ``elementwise_backward_factor`` times that, except a rotary position embedding's
(:attr:`LayerWork.rotary_flops <hp_core.costs.LayerWork.rotary_flops>`), whose backward is the inverse
rotation: Transformer Engine's fused kernel reads the output gradient and writes the input gradient as its
forward reads the input and writes the output (``transformer_engine/common/fused_rope/fused_rope.cu``
``fused_rope_block_forward`` and ``fused_rope_block_backward`` at v2.11), and eager kernels move what
:mod:`hp_plugins.kit.eager` counts each way: with the layer's other elementwise ops (eager kernels counted by
the layer) or on their own (``TimingProfile.eager_rotary``: RoPE run eager where the rest is fused).
An MoE layer's token permutation is memory-bound too (:func:`permute_seconds`).
"""

from __future__ import annotations

from hp_core.collectives import Routing
from hp_core.costs import LayerWork
from hp_core.engine.timing.rates import _Rates
from hp_core.errors import ConfigError

__all__ = ["el_bytes_per_flop", "elementwise_seconds", "permute_seconds", "received_bytes", "received_copies"]


def _counted_eager(work: LayerWork, r: _Rates) -> bool:
    """Eager kernels, priced at the layer's own count (it states one: LayerWork.eager_accesses_per_flop)."""
    return r.eager_elementwise and work.eager_accesses_per_flop is not None


def el_bytes_per_flop(work: LayerWork, r: _Rates) -> float:
    """Bytes per elementwise op: eager kernels at the layer's own count where it states one (LayerWork.eager_accesses_per_flop)."""
    if _counted_eager(work, r):
        return work.eager_accesses_per_flop * r.act_bytes
    return r.el_bytes_per_flop


def elementwise_seconds(work: LayerWork, r: _Rates, flops: float) -> tuple[float, float, float]:
    """Forward seconds of the layer's *flops* elementwise ops, then of its rotary embedding's share of them, forward
    and backward.

    Eager kernels counted by the layer move its ``rotary_eager_bytes``, whose forward is part of the layer's
    counted figure; the rotation alone run eager (``TimingProfile.eager_rotary``) moves them in place of the
    profile's figure for its ops; otherwise (fused kernels, or an eager layer that counts none) its ops move the
    layer's bytes per op, the same forward and backward.

    Raises:
        ConfigError: The rotation alone is to run eager and the layer states its ops but not its eager bytes.
    """
    bytes_per_flop = el_bytes_per_flop(work, r)
    forward = flops * bytes_per_flop / r.memory
    if not work.rotary_flops:
        return forward, 0.0, 0.0
    if _counted_eager(work, r):
        rot_fwd, rot_bwd = work.rotary_eager_bytes
    elif r.eager_rotary:
        rot_fwd, rot_bwd = work.rotary_eager_bytes
        if not rot_fwd or not rot_bwd:
            raise ConfigError(
                "$.runtime.options.rope_kernels",
                "a layer states a rotary embedding (LayerWork.rotary_flops) but not the bytes its eager kernels move "
                "(LayerWork.rotary_eager_bytes), so its eager rotation cannot be priced; its plugin must state them",
            )
        forward += (rot_fwd - work.rotary_flops * bytes_per_flop) / r.memory
    else:
        rot_fwd = rot_bwd = work.rotary_flops * bytes_per_flop
    return forward, rot_fwd / r.memory, rot_bwd / r.memory


def permute_seconds(work: LayerWork, r: _Rates) -> tuple[float, float]:
    """Forward and backward seconds of an MoE layer's token permutation (docs/time.md, "The model").

    Counted op by op where the profile states it (``TimingProfile.moe_permutation``): accesses per element per
    routed row (``permute_bytes``) and per token (``permute_input_bytes``), each way, at the memory bandwidth.
    Else ``moe_permute_passes`` passes each way, each reading and writing the dispatched tokens except that the first
    (permute) reads and the last (unpermute) writes the layer's own tokens (``moe_permute_tokens: own``) or the
    tokens the rank receives from a de-duplicating dispatch (``received``: :func:`received_copies` copies of them),
    at the device's permute bandwidth plus its fixed time; ``moe_local_sort_passes`` of the passes run only where a
    rank holds more than one of the layer's ``routed_experts`` (``experts // ep``).

    Raises:
        ConfigError: The counted statement cannot be priced under the profile (``_Rates.permute_refusal``: counted
            for eager kernels, the profile fusing its elementwise ops), at ``$.runtime.options.moe_permutation``; a
            layer without a permutation (a dense model's) prices nothing and is not refused.
    """
    if not work.permute_bytes:
        return 0.0, 0.0
    if r.permute_refusal is not None:  # counted for eager kernels the profile fuses: refused for an MoE layer only
        raise ConfigError("$.runtime.options.moe_permutation", r.permute_refusal)
    if r.permute_counted is not None:
        if r.permute_tokens == "received":  # counted for a dispatcher that permutes the layer's own tokens
            raise ConfigError("$.runtime.options.moe_permutation", "a counted token permutation prices the trainer's "
                              "own dispatcher, which permutes the layer's own tokens; under ep_all_to_all deepep or "
                              "hybridep the dispatch permutes the tokens each rank receives: use moe_permutation "
                              "gather_scatter")
        row_fwd, token_fwd, row_bwd, token_bwd = r.permute_counted
        return ((row_fwd * work.permute_bytes + token_fwd * work.permute_input_bytes) / r.memory,
                (row_bwd * work.permute_bytes + token_bwd * work.permute_input_bytes) / r.memory)
    passes = r.permute_passes
    if r.permute_sort_passes:
        if not work.routed_experts:  # absent is not zero: the local experts decide the sort
            raise ConfigError("$.model.layers", "the layer states a token permutation but not its routed experts "
                              "(LayerWork.routed_experts), which decide whether the trainer's sort passes run; its "
                              "layer kind must state them")
        if work.routed_experts // max(r.ep, 1) <= 1:
            passes -= r.permute_sort_passes  # one local expert: its tokens arrive in expert order, nothing to sort
    if not passes:
        return 0.0, 0.0
    tokens = received_bytes(work, r)
    traffic = passes * 2 * work.permute_bytes + min(passes, 2) * (tokens - work.permute_bytes)
    seconds = traffic / r.permute_memory + r.permute_overhead
    return seconds, seconds


def received_bytes(work: LayerWork, r: _Rates) -> float:
    """The token side of the permutation passes: the layer's own tokens (``permute_input_bytes``) under
    ``moe_permute_tokens: own``; under ``received``, one unpadded copy of the rows the rank's experts process
    (``Routing.token_bytes`` of ``permute_bytes``: the expert-TP group's tokens where ``etp > 1``, each rank of it
    receiving the dispatch of all of them) times the distinct EP ranks a token reaches (:func:`received_copies`)."""
    if r.permute_tokens == "own" or r.ep <= 1:
        return work.permute_input_bytes
    routing = _ep_routing(work)
    return routing.token_bytes(work.permute_bytes) * routing.distinct(r.ep)


def received_copies(work: LayerWork, r: _Rates) -> float:
    """The tokens a rank's permutation reads (and its unpermutation writes) over the layer's own: 1 where the
    permutation takes the layer's own tokens (``moe_permute_tokens: own``); under ``received`` the expected
    distinct ranks of the EP group a token reaches (:meth:`hp_core.collectives.Routing.distinct` of the routing the
    layer's EP all-to-all states), since with balanced routing a rank receives each token of every member once per
    member it reaches (Megatron-Core's flex dispatcher: DeepEP's ``is_token_in_rank``, HybridEP's
    ``routing_map[:, local experts].any(dim=1)``; hp_plugins/collectives/deepep.py, hybridep.py). With ``ep`` 1 a
    rank receives its own tokens: 1. A layer under EP stating no EP all-to-all, or one stating no routing, is
    refused (its copies are unknown; absent is not zero)."""
    if r.permute_tokens == "own" or r.ep <= 1:
        return 1.0
    return _ep_routing(work).distinct(r.ep)


def _ep_routing(work: LayerWork) -> Routing:
    """The routing the layer's expert all-to-all states (:func:`received_copies` says why each refusal)."""
    for c in work.collectives:
        if c.group == "ep" and c.op == "all_to_all":
            if c.routing is None:
                raise ConfigError("$.runtime.options.ep_all_to_all", "the layer's expert all-to-all states no token "
                                  "routing, so the tokens a de-duplicating dispatch delivers to its permutation are "
                                  "unknown; its layer kind must state Collective.routing")
            return c.routing
    raise ConfigError("$.model.layers", "the layer permutes tokens under expert parallelism but states no expert "
                      "all-to-all (LayerWork.collectives), so the tokens its dispatch delivers are unknown; its layer "
                      "kind must state it")
