"""Multi-head latent attention layers (DeepSeek-V2/V3) with a dense or an MoE feed-forward block.

Two kinds: ``mla`` (MLA + dense SwiGLU MLP: DeepSeek's ``first_k_dense_replace``
layers) and ``mla_moe`` (MLA + routed and shared experts). Parameters equal
Hugging Face transformers' ``DeepseekV3DecoderLayer`` / ``DeepseekV2DecoderLayer``.
Attention terms: :func:`hp_plugins.kit.mla_attention`, whose up-projected
heads are gated by the ``attUp`` switch; ``mla`` adds ``ffFc1`` (its dense MLP's FC1 outputs) and ``mla_moe``
``moeLayer`` (what its MoE block keeps inside itself): nine switches, 512 settings each.
"""

from __future__ import annotations

import attrs

from hp_core.markers import hookimpl
from hp_core.costs import LayerContext, LayerCost
from hp_core.types import LayerKind
from hp_plugins.kit import (
    FC1_SWITCH,
    LayerBuilder,
    MLAFields,
    MLPFields,
    MoEFields,
    mla_attention,
    mlp,
    MOE_LAYER_SWITCH,
    moe,
    validate_mla,
    validate_mlp,
    validate_moe,
)
from hp_plugins.kinds.dense import SELECTIVE
from hp_plugins.kit.experts import moe_tokens
from hp_plugins.kit.op_sac import (OP_SAC_SWITCHES, TORCHTITAN_MLA_OP_SAC_UNSTATED, torchtitan_mla_moe_op_sac_kept_bytes,
                                   torchtitan_mla_moe_op_sac_unstated)

__all__ = ["MLAConfig", "MLAMoEConfig", "MLA_DENSE_SWITCHES", "MLA_MOE_SWITCHES", "MLA_SWITCHES", "evaluate_mla", "evaluate_mla_moe", "hp_layer_kinds"]

MLA_SWITCHES = ("attBMM", "headCast", "dropout", "softmax", "normOp", "gather", "ffAct", "attUp")
# The mla kind's: its dense MLP's FC1 outputs under ffFc1 (hp_plugins.kit.builder.FC1_SWITCH) too; the mla_moe
# kind's: what its MoE block keeps inside itself under moeLayer (hp_plugins.kit.builder.MOE_LAYER_SWITCH).
MLA_DENSE_SWITCHES = (*MLA_SWITCHES, FC1_SWITCH)
MLA_MOE_SWITCHES = (*MLA_SWITCHES, MOE_LAYER_SWITCH)


@attrs.frozen(kw_only=True, slots=False)
class MLAConfig(MLAFields, MLPFields):
    """MLA attention and a dense MLP: the fields of :class:`~hp_plugins.kit.MLAFields`
    and :class:`~hp_plugins.kit.MLPFields`."""


@attrs.frozen(kw_only=True, slots=False)
class MLAMoEConfig(MLAFields, MoEFields):
    """MLA attention and a mixture of experts: the fields of
    :class:`~hp_plugins.kit.MLAFields` and :class:`~hp_plugins.kit.MoEFields`."""

    def __attrs_post_init__(self) -> None:
        self.check_moe()


def _validate_mla(config: MLAConfig, context: LayerContext) -> None:
    validate_mla(config, context)
    validate_mlp(config, context)


def _validate_mla_moe(config: MLAMoEConfig, context: LayerContext) -> None:
    validate_mla(config, context)
    validate_moe(config, context)


def evaluate_mla(c: MLAConfig, x: LayerContext) -> LayerCost:
    """An MLA layer with a dense MLP, on one rank."""
    b = LayerBuilder(x, c.hidden_size)
    mla_attention(b, c)
    mlp(b, c, c.norm, c.hidden_dropout, FC1_SWITCH)
    cost = b.build()
    if "torchtitan_op_sac" not in x.traits:
        return cost
    # torchtitan's per-op policy on a dense MLA layer is not stated: the switches' terms, named (LayerCost.assumed).
    return attrs.evolve(cost, assumed=cost.assumed + ((OP_SAC_SWITCHES, TORCHTITAN_MLA_OP_SAC_UNSTATED),))


def evaluate_mla_moe(c: MLAMoEConfig, x: LayerContext) -> LayerCost:
    """An MLA layer with a mixture of experts, on one rank."""
    b = LayerBuilder(x, c.hidden_size)
    mla_attention(b, c)
    moe(b, c, c.norm, c.hidden_dropout, MOE_LAYER_SWITCH)
    cost = b.build()
    if "torchtitan_op_sac" not in x.traits:
        return cost
    kept = None
    if "torchtitan_moe_expert_parallel" in x.traits:
        # The op_sac switches run torchtitan's per-op policy with its 2025-10 MoE (kit.op_sac).
        kept = torchtitan_mla_moe_op_sac_kept_bytes(c, x, x.tokens // x.sp_degree * c.num_experts_per_tok, moe_tokens(c, x))
    if kept is not None:
        return attrs.evolve(cost, measured=cost.measured + ((OP_SAC_SWITCHES, kept),))
    # The save list is not stated here: priced from the switches' terms, which an estimate names (LayerCost.assumed).
    return attrs.evolve(cost, assumed=cost.assumed + ((OP_SAC_SWITCHES, torchtitan_mla_moe_op_sac_unstated(x)),))


@hookimpl
def hp_layer_kinds():
    yield LayerKind(
        name="mla",
        config_type=MLAConfig,
        evaluate=evaluate_mla,
        switches=MLA_DENSE_SWITCHES,
        selective=SELECTIVE,
        validate=_validate_mla,
        description="multi-head latent attention (DeepSeek) with a dense SwiGLU MLP",
    )
    yield LayerKind(
        name="mla_moe",
        config_type=MLAMoEConfig,
        evaluate=evaluate_mla_moe,
        switches=MLA_MOE_SWITCHES,
        selective=SELECTIVE,
        validate=_validate_mla_moe,
        description="multi-head latent attention (DeepSeek) with routed and shared experts",
    )
