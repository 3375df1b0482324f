"""Qwen3-Next's layers: Gated DeltaNet linear attention and gated full attention, each with an MLP or experts.

* ``gdn`` / ``gdn_moe``: the Gated DeltaNet mixer (:mod:`hp_plugins.kit.deltanet`:
  parameters as transformers' ``Qwen3NextGatedDeltaNet``, kept tensors of
  Megatron-Core's ``GatedDeltaNet`` with the flash-linear-attention kernels, or under
  ``eager`` of transformers' reference PyTorch path)
  followed by the kit's SwiGLU ``mlp`` or ``moe`` (routed experts and a shared
  expert with a sigmoid gate, ``Qwen3NextSparseMoeBlock``).
* ``gated_attention`` / ``gated_attention_moe``: ``Qwen3NextAttention``, the kit's
  grouped-query attention with per-head q/k RMSNorm and an output gate
  (:mod:`hp_plugins.kit.gated_attention`), followed by the same feed-forward blocks.

The worked third-party example ``examples/hp-gated-deltanet`` registers its own
Gated DeltaNet kinds under the names ``gated_deltanet`` and ``gated_deltanet_moe``;
the built-in ones are named ``gdn`` and ``gdn_moe`` so that both can be
installed in one registry (two plugins may not yield one name).
"""

from __future__ import annotations

import attrs

from hp_core.costs import LayerContext, LayerCost
from hp_core.markers import hookimpl
from hp_core.types import LayerKind
from hp_plugins.kit import (
    DECODER_MOE_SWITCHES, DENSE_MLP_SWITCHES, FC1_SWITCH, MOE_LAYER_SWITCH, SELECTIVE_SWITCHES as SELECTIVE,
    GDN_SWITCHES, GatedDeltaNetFields, GQAFields, LayerBuilder, MLPFields, MoEFields, gated_deltanet_mixer,
    gated_gqa_attention, mlp, moe, validate_gated_deltanet_mixer, validate_gqa, validate_mlp, validate_moe,
)

__all__ = ["GDNConfig", "GDNMoEConfig", "GatedAttentionConfig", "GatedAttentionMoEConfig", "hp_layer_kinds"]


@attrs.frozen(kw_only=True, slots=False)
class GDNConfig(GatedDeltaNetFields, MLPFields):
    """A Gated DeltaNet layer with a dense MLP (a Qwen3-Next ``mlp_only_layers`` layer)."""


@attrs.frozen(kw_only=True, slots=False)
class GDNMoEConfig(GatedDeltaNetFields, MoEFields):
    """A Gated DeltaNet layer with a mixture of experts."""

    def __attrs_post_init__(self) -> None:
        self.check_gated_deltanet()
        self.check_moe()


@attrs.frozen(kw_only=True, slots=False)
class GatedAttentionConfig(GQAFields, MLPFields):
    """A gated full-attention layer with a dense MLP."""


@attrs.frozen(kw_only=True, slots=False)
class GatedAttentionMoEConfig(GQAFields, MoEFields):
    """A gated full-attention layer with a mixture of experts."""

    def __attrs_post_init__(self) -> None:
        self.check_gqa()
        self.check_moe()


def _gdn(c: GatedDeltaNetFields, x: LayerContext, ffn) -> LayerCost:
    b = LayerBuilder(x, c.hidden_size)
    gated_deltanet_mixer(b, c, c.hidden_act)
    ffn(b, c, c.norm, 0.0)
    return b.build()


def _gated(c: GQAFields, x: LayerContext, ffn) -> LayerCost:
    b = LayerBuilder(x, c.hidden_size)
    gated_gqa_attention(b, c)
    ffn(b, c, c.norm, c.hidden_dropout)
    return b.build()


def _mlp(b: LayerBuilder, c: MLPFields, norm: str, hidden_dropout: float) -> None:
    """The kit's dense MLP with its FC1 outputs under ``ffFc1`` (:data:`hp_plugins.kit.FC1_SWITCH`)."""
    mlp(b, c, norm, hidden_dropout, FC1_SWITCH)


def evaluate_gdn(c: GDNConfig, x: LayerContext) -> LayerCost:
    return _gdn(c, x, _mlp)


def _moe(b: LayerBuilder, c: MoEFields, norm: str, hidden_dropout: float) -> None:
    """The kit's mixture of experts with what it keeps inside itself under ``moeLayer`` (:data:`hp_plugins.kit.MOE_LAYER_SWITCH`)."""
    moe(b, c, norm, hidden_dropout, MOE_LAYER_SWITCH)


def evaluate_gdn_moe(c: GDNMoEConfig, x: LayerContext) -> LayerCost:
    return _gdn(c, x, _moe)


def evaluate_gated_attention(c: GatedAttentionConfig, x: LayerContext) -> LayerCost:
    return _gated(c, x, _mlp)


def evaluate_gated_attention_moe(c: GatedAttentionMoEConfig, x: LayerContext) -> LayerCost:
    return _gated(c, x, _moe)


def _validate_gdn(c: GDNConfig, x: LayerContext) -> None:
    validate_gated_deltanet_mixer(c, x)
    validate_mlp(c, x)


def _validate_gdn_moe(c: GDNMoEConfig, x: LayerContext) -> None:
    validate_gated_deltanet_mixer(c, x)
    validate_moe(c, x)


def _validate_gated(c: GatedAttentionConfig, x: LayerContext) -> None:
    validate_gqa(c, x)
    validate_mlp(c, x)


def _validate_gated_moe(c: GatedAttentionMoEConfig, x: LayerContext) -> None:
    validate_gqa(c, x)
    validate_moe(c, x)


@hookimpl
def hp_layer_kinds():
    yield LayerKind(name="gdn", config_type=GDNConfig, evaluate=evaluate_gdn, placement="body", switches=(*GDN_SWITCHES, FC1_SWITCH),
                    validate=_validate_gdn, description="Gated DeltaNet linear attention (Qwen3-Next) with a SwiGLU MLP")
    yield LayerKind(name="gdn_moe", config_type=GDNMoEConfig, evaluate=evaluate_gdn_moe, placement="body",
                    switches=(*GDN_SWITCHES, MOE_LAYER_SWITCH), validate=_validate_gdn_moe,
                    description="Gated DeltaNet linear attention (Qwen3-Next) with routed and shared experts")
    yield LayerKind(name="gated_attention", config_type=GatedAttentionConfig, evaluate=evaluate_gated_attention,
                    placement="body", switches=DENSE_MLP_SWITCHES, selective=SELECTIVE, validate=_validate_gated,
                    description="GQA attention with a sigmoid output gate (Qwen3-Next full attention) and a SwiGLU MLP")
    yield LayerKind(name="gated_attention_moe", config_type=GatedAttentionMoEConfig,
                    evaluate=evaluate_gated_attention_moe, placement="body", switches=DECODER_MOE_SWITCHES,
                    selective=SELECTIVE, validate=_validate_gated_moe,
                    description="GQA attention with a sigmoid output gate (Qwen3-Next full attention) and experts")
