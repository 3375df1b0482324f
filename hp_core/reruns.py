"""What recomputing one switch re-runs (:class:`Rerun`), which a layer states in :attr:`LayerWork.reruns
<hp_core.costs.LayerWork.reruns>` and :mod:`hp_core.engine.timing` prices (docs/recompute.md). Re-exported by
:mod:`hp_core.costs`, the cost vocabulary it belongs to."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["Rerun"]


def _non_negative_number(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{type(instance).__name__}.{attribute.name} must be a non-negative number, got {value!r}")


@attrs.frozen
class Rerun:
    """What recomputing one switch re-runs beyond rewriting the bytes it drops.

    A whole block's checkpoint (Megatron-Core's ``moe`` module: ``MoELayer.forward`` under
    ``tensor_parallel.checkpoint``, ``te_checkpoint`` under fp8/fp4; moe/moe_layer.py at NVIDIA/Megatron-LM@d98e8a6)
    re-runs the block's forward: :attr:`gemms`, :attr:`grouped_flops` and :attr:`permutation`, priced as the
    layer's forward prices them (:mod:`hp_core.engine.timing.layer`), and the collectives naming the switch
    (:attr:`Collective.rerun_switch <hp_core.costs.Collective.rerun_switch>`), issued again.

    Attributes:
        matmul_flops_per_byte: GEMM FLOPs per byte the switch drops or regenerates
            without dropping (:attr:`ActivationTerm.rerun_bytes
            <hp_core.costs.ActivationTerm.rerun_bytes>`) (MLA's up-projections rebuild
            their output: ``2 * kv_lora_rank`` FLOPs per element rebuilt).
        copy_bytes: Bytes moved through HBM each way besides.
        gemms: Dense GEMMs ``(rows, fan_out, fan_in)``, as :attr:`LayerWork.gemms
            <hp_core.costs.LayerWork.gemms>` states them, run forward again (a router's gate among
            them stays in the compute dtype, as among the layer's ``high_precision_gemms``).
        grouped_flops: Forward FLOPs of the layer's grouped (expert) GEMMs run again.
        permutation: The layer's router kernels and token permutation run forward again.
    """

    matmul_flops_per_byte: float = attrs.field(default=0.0, validator=_non_negative_number)
    copy_bytes: float = attrs.field(default=0.0, validator=_non_negative_number)
    gemms: tuple[tuple[int, int, int], ...] = attrs.field(default=(), converter=tuple)
    grouped_flops: float = attrs.field(default=0.0, validator=_non_negative_number)
    permutation: bool = False

    @property
    def forward(self) -> bool:
        """Whether it re-runs a block's forward (GEMMs, grouped GEMMs or permutation)."""
        return bool(self.gemms or self.grouped_flops or self.permutation)
