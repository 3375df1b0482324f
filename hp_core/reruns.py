"""What recomputing one switch re-runs (:class:`Rerun`), which a layer states in :attr:`LayerWork.reruns
<hp_core.costs.LayerWork.reruns>` and :mod:`hp_core.engine.timing` prices (docs/recompute.md). Re-exported by
:mod:`hp_core.costs`, the cost vocabulary it belongs to."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["USERBUFFERS_PASSES", "Rerun", "WholeCheckpoint", "userbuffers_entries"]

# A userbuffers GEMM's passes (LayerWork.userbuffers_gemms): Transformer Engine's <name>_fprop, _dgrad, _wgrad.
USERBUFFERS_PASSES = ("fprop", "dgrad", "wgrad")


def _non_negative_number(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{type(instance).__name__}.{attribute.name} must be a non-negative number, got {value!r}")


def userbuffers_entries(entries: Any) -> tuple[tuple[str, tuple[int, int, int], tuple[str, ...]], ...]:
    """:attr:`LayerWork.userbuffers_gemms <hp_core.costs.LayerWork.userbuffers_gemms>` as stated: ``(name, gemm,
    passes)``, *passes* the GEMM's of :data:`USERBUFFERS_PASSES` Transformer Engine runs through the userbuffers
    (``Linear`` ands each with its parallel mode and sequence parallelism, ``module/linear.py`` lines 1629-1656 at
    NVIDIA/TransformerEngine@d0067d0; Megatron-Core passes a ``TEColumnParallelLinear`` no bulk overlap: its forward
    alone, a layernorm-fused or row-parallel linear all three, whose ``proj_wgrad`` / ``fc2_wgrad`` no config names); a
    pair ``(name, gemm)`` is all three."""
    return tuple((e[0], tuple(e[1]), tuple(e[2]) if len(e) > 2 else USERBUFFERS_PASSES) for e in entries)


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
        positions: The positions of :attr:`gemms` in :attr:`LayerWork.gemms <hp_core.costs.LayerWork.gemms>`, one
            per entry in order: the block's GEMMs by place, so a linear outside it of the same shape (an attention
            projection as wide as a shared expert's FC1) is none of its own.
        high_precision_positions: Those of :attr:`positions` whose GEMMs stay in the compute dtype under a
            low-precision recipe (the router's gate; a module a run keeps in bf16 joins them:
            :func:`hp_core.engine.module_formats.with_module_formats`).
        original_input_positions: Those of :attr:`positions` whose GEMMs' input the trainer keeps in the compute dtype
            (their entries of :attr:`LayerWork.original_input_gemms <hp_core.costs.LayerWork.original_input_gemms>`).
        userbuffers_linears: ``(tp_comm_buffer_name, position)`` of the layer's userbuffers GEMMs
            (:attr:`LayerWork.userbuffers_gemms <hp_core.costs.LayerWork.userbuffers_gemms>`) whose forward the re-run
            runs again, each by its position in :attr:`LayerWork.gemms <hp_core.costs.LayerWork.gemms>` (by place, not
            by name: a layer may run two ``fc1`` GEMMs, a Gated DeltaNet's or Mamba's ``in_proj`` and its MLP's
            ``linear_fc1``, of which a checkpointed MLP re-runs one): Transformer Engine re-runs them through their
            userbuffers, so a forward SM margin slows the re-run as it does the forward
            (a re-run of a block's forward, :attr:`gemms`, prices them with it; else the per-byte re-run,
            :attr:`matmul_flops_per_byte`, does: :func:`hp_core.engine.timing.gemm_seconds.userbuffers_rerun_seconds`,
            at the rate it prices its FLOPs). Megatron-Core's ``mlp``
            module re-runs ``fc1`` and ``fc2``, its ``moe`` module a shared expert's. A kit's
            :class:`~hp_plugins.kit.builder.LayerBuilder` states them by the linear's index, which ``build`` turns
            into its position.
    """

    matmul_flops_per_byte: float = attrs.field(default=0.0, validator=_non_negative_number)
    copy_bytes: float = attrs.field(default=0.0, validator=_non_negative_number)
    gemms: tuple[tuple[int, int, int], ...] = attrs.field(default=(), converter=tuple)
    grouped_flops: float = attrs.field(default=0.0, validator=_non_negative_number)
    permutation: bool = False
    positions: tuple[int, ...] = attrs.field(default=(), converter=tuple)
    high_precision_positions: tuple[int, ...] = attrs.field(default=(), converter=tuple)
    original_input_positions: tuple[int, ...] = attrs.field(default=(), converter=tuple)
    userbuffers_linears: tuple[tuple[str, int], ...] = attrs.field(default=(), converter=lambda v: tuple((n, int(p)) for n, p in v))

    def __attrs_post_init__(self) -> None:
        if len(self.positions) != len(self.gemms):
            raise ValueError(f"Rerun: {len(self.gemms)} GEMMs but {len(self.positions)} positions")
        if not set(self.high_precision_positions + self.original_input_positions) <= set(self.positions):
            raise ValueError("Rerun: high_precision_positions and original_input_positions must be of its positions")

    def shifted(self, offset: int) -> "Rerun":
        """The re-run with its positions moved on by *offset* (a merged layer's GEMMs listed before its layer's)."""
        return attrs.evolve(self, positions=tuple(offset + p for p in self.positions),
                            high_precision_positions=tuple(offset + p for p in self.high_precision_positions),
                            original_input_positions=tuple(offset + p for p in self.original_input_positions),
                            userbuffers_linears=tuple((n, offset + p) for n, p in self.userbuffers_linears))

    @property
    def forward(self) -> bool:
        """Whether it re-runs a block's forward (GEMMs, grouped GEMMs or permutation)."""
        return bool(self.gemms or self.grouped_flops or self.permutation)


@attrs.frozen
class WholeCheckpoint:
    """The part of a layer placed first or last that its trainer checkpoints whole, dropping what it keeps inside and
    re-running its forward in backward, where the body layers are recomputed fully
    (:func:`~hp_core.engine.inner_layers.checkpointed_whole`). Megatron-Core's MTP layer under
    ``recompute_granularity full`` with ``recompute_method uniform``: ``MultiTokenPredictionLayer.forward`` runs
    ``_checkpointed_forward``, which checkpoints ``_proj_and_transformer_layer`` (``eh_proj``, the inner layers, the
    final norm) and keeps its inputs (``megatron/core/transformer/multi_token_prediction.py`` at
    NVIDIA/Megatron-LM@d98e8a6 lines 1492-1653, 1705-1720). Stated by what lies outside it, the rest of the layer's
    cost inside (its attention and elementwise FLOPs all inside).

    Attributes:
        kept: The ops (``ActivationTerm.op``) of the terms kept outside it: its inputs, and what runs after it keeps.
        gemms: The layer's GEMMs (of ``LayerWork.gemms``, each listing there once) run outside it.
        positions: The positions of :attr:`gemms` in ``LayerWork.gemms``, one per entry in order: the GEMMs outside
            by place, not by shape (a linear inside as wide as the shared head is none of them), so that what is
            inside keeps the positions its re-runs and modules name, renumbered
            (:func:`~hp_core.engine.timing.placed.checkpoint_inside`).
        collectives: The layer's collectives (of ``LayerWork.collectives``, each listing there once) issued outside it.
    """

    kept: frozenset[str] = attrs.field(converter=frozenset)
    gemms: tuple[tuple[int, int, int], ...] = attrs.field(default=(), converter=tuple)
    collectives: tuple[Any, ...] = attrs.field(default=(), converter=tuple)
    positions: tuple[int, ...] = attrs.field(default=(), converter=tuple)

    def __attrs_post_init__(self) -> None:
        if len(self.positions) != len(self.gemms):
            raise ValueError(f"WholeCheckpoint: {len(self.gemms)} GEMMs but {len(self.positions)} positions")
        if len(set(self.positions)) != len(self.positions) or any(p < 0 for p in self.positions):
            raise ValueError(f"WholeCheckpoint: positions {self.positions} must be distinct and non-negative")
