"""The mixture-of-experts decoder layer: grouped-query attention and a routed-expert FFN.

Mixtral, Qwen2-MoE and Qwen3-MoE layers. Parameters equal Hugging Face
transformers' ``MixtralDecoderLayer``, ``Qwen2MoeDecoderLayer`` and
``Qwen3MoeDecoderLayer`` (router ``E * h``; experts ``E * 3 * h * I_e``; shared
experts ``3 * h * I_s`` and Qwen2-MoE's shared-expert gate ``h``). A router's
score-correction bias (DeepSeek-V3 ``e_score_correction_bias``) is a buffer, not
a parameter. Routed experts are split over ``ep * etp`` and their optimizer
states over the expert data-parallel group; everything else over the usual groups.

Attention terms: :func:`hp_plugins.kit.gqa_attention`; expert terms:
:func:`hp_plugins.kit.moe` (tokens per rank: :func:`hp_plugins.kit.moe_tokens`).
"""

from __future__ import annotations

import attrs

from hp_core.markers import hookimpl
from hp_core.costs import LayerContext, LayerCost
from hp_core.types import LayerKind
from hp_plugins.kit import MOE_LAYER_SWITCH, GQAFields, LayerBuilder, MoEFields, gqa_attention, moe, validate_gqa, validate_moe
from hp_plugins.kinds.dense import MOE_SWITCHES, SELECTIVE

__all__ = ["MoEConfig", "evaluate_moe", "hp_layer_kinds", "validate_moe_layer"]


@attrs.frozen(kw_only=True, slots=False)
class MoEConfig(GQAFields, MoEFields):
    """One MoE decoder layer: the fields of :class:`~hp_plugins.kit.GQAFields` and
    :class:`~hp_plugins.kit.MoEFields`."""

    def __attrs_post_init__(self) -> None:
        self.check_gqa()
        self.check_moe()


def validate_moe_layer(config: MoEConfig, context: LayerContext) -> None:
    validate_gqa(config, context)
    validate_moe(config, context)


def evaluate_moe(c: MoEConfig, x: LayerContext) -> LayerCost:
    """One MoE decoder layer's cost on one rank."""
    b = LayerBuilder(x, c.hidden_size)
    gqa_attention(b, c)
    moe(b, c, c.norm, c.hidden_dropout, MOE_LAYER_SWITCH)
    return b.build()


@hookimpl
def hp_layer_kinds():
    yield LayerKind(
        name="moe",
        config_type=MoEConfig,
        evaluate=evaluate_moe,
        placement="body",
        switches=MOE_SWITCHES,
        selective=SELECTIVE,
        validate=validate_moe_layer,
        description="MoE decoder layer: GQA attention, top-k routed SwiGLU experts, optional shared experts",
    )
