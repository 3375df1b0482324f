"""A layer's elementwise traffic per op, and its rotary embedding's share of it (docs/time.md, "Elementwise ops").

Elementwise ops are memory-bound: ``flops * bytes_per_flop / (HBM bandwidth * memory efficiency)``, their
backward ``elementwise_backward_factor`` times that, except a rotary position embedding's
(:attr:`LayerWork.rotary_flops <hp_core.costs.LayerWork.rotary_flops>`), whose backward is the inverse
rotation: Transformer Engine's fused kernel reads the output gradient and writes the input gradient as its
forward reads the input and writes the output (``transformer_engine/common/fused_rope/fused_rope.cu``
``fused_rope_block_forward`` and ``fused_rope_block_backward`` at v2.11), and eager kernels move what
:mod:`hp_plugins.kit.eager` counts each way.
"""

from __future__ import annotations

from hp_core.costs import LayerWork
from hp_core.engine.timing.rates import _Rates

__all__ = ["el_bytes_per_flop", "rotary_seconds"]


def _counted_eager(work: LayerWork, r: _Rates) -> bool:
    """Eager kernels, priced at the layer's own count (it states one: LayerWork.eager_accesses_per_flop)."""
    return r.eager_elementwise and work.eager_accesses_per_flop is not None


def el_bytes_per_flop(work: LayerWork, r: _Rates) -> float:
    """Bytes per elementwise op: eager kernels at the layer's own count where it states one (LayerWork.eager_accesses_per_flop)."""
    if _counted_eager(work, r):
        return work.eager_accesses_per_flop * r.act_bytes
    return r.el_bytes_per_flop


def rotary_seconds(work: LayerWork, r: _Rates, bytes_per_flop: float) -> tuple[float, float]:
    """Forward and backward seconds of the layer's rotary embedding, part of its elementwise time.

    Eager kernels counted by the layer move its ``rotary_eager_bytes``; otherwise (fused kernels, or an eager
    layer that counts none) its ops move *bytes_per_flop* each, the same forward and backward.
    """
    if not work.rotary_flops:
        return 0.0, 0.0
    if _counted_eager(work, r):
        forward, backward = work.rotary_eager_bytes
    else:
        forward = backward = work.rotary_flops * bytes_per_flop
    return forward / r.memory, backward / r.memory
