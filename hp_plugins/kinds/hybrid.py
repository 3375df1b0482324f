"""Single-block layers of hybrid stacks: an attention-only, an MLP-only and a mixture-of-experts-only layer.

A Nemotron-H layer (transformers ``NemotronHBlock``) is one block behind its own
pre-norm and residual: a Mamba-2 mixer (``M``, the ``mamba2`` kind), grouped-query
attention (``*``), an MLP (``-``) or a mixture of experts (``E``). These three kinds
are the ``*``, ``-`` and ``E`` layers, each the public kit's block alone
(:func:`hp_plugins.kit.gqa_attention`, :func:`hp_plugins.kit.mlp`,
:func:`hp_plugins.kit.moe`), so they are priced exactly as the built-in
``dense`` and ``moe`` kinds price their halves:

* ``attention``: ``NemotronHAttention``: q, k, v and o projections without
  biases, no rotary embedding (Nemotron-H's attention layers have none), no
  QK-norm; parameters ``h (a + 2g) d + a d h`` and the pre-norm ``h``.
* ``mlp``: ``NemotronHMLP``: ``up_proj`` and ``down_proj`` (no gate) around
  ``mlp_hidden_act`` (squared ReLU, ``relu2``); parameters ``2 h I`` (biases
  where ``mlp_bias``) and the pre-norm ``h``. ReLU keeps its output, which the
  square also keeps, and ``down_proj`` keeps the square: two ``I``-wide tensors,
  as the kit's plain MLP counts them.
* ``moe_only``: ``NemotronHMoE`` (transformers 5.24 ``modeling_nemotron_h.py``):
  ``NemotronHTopkRouter`` (an fp32 ``E x h`` weight, sigmoid scores with a
  correction bias that is a buffer, not a parameter, grouped top-k),
  ``NemotronHExperts`` (``E`` ungated experts: ``up_proj`` ``I x L`` and
  ``down_proj`` ``L x I`` around ``mlp_hidden_act``), a shared
  ``NemotronHMLP`` of ``moe_shared_expert_intermediate_size``, and with
  ``moe_latent_size`` the latent projections ``fc1_latent_proj`` (``h -> L``)
  and ``fc2_latent_proj`` (``L -> h``); ``L = h`` without them. Parameters
  ``E h + 2 E I L + 2 h I_s (+ 2 h L)`` and the pre-norm ``h``.
"""

from __future__ import annotations

import attrs

from hp_core.costs import LayerContext, LayerCost
from hp_core.markers import hookimpl
from hp_core.types import LayerKind
from hp_core.validators import positive_int, probability
from hp_plugins.kit.attention import rotary_fraction
from hp_plugins.kit import (
    SELECTIVE_SWITCHES as SELECTIVE,
    FC1_SWITCH, MOE_LAYER_SWITCH, GQAFields, LayerBuilder, MLPFields, MoEFields, NORMS, gqa_attention, mlp, moe, validate_gqa, validate_mlp, validate_moe,
)

__all__ = ["AttentionLayerConfig", "MLPLayerConfig", "MoELayerConfig", "evaluate_attention_layer", "evaluate_mlp_layer",
           "evaluate_moe_layer", "hp_layer_kinds"]

ATTENTION_SWITCHES = ("attBMM", "headCast", "dropout", "softmax", "normOp", "gather")
# The MLP-only layer's (its MLP's FC1 outputs under ffFc1, hp_plugins.kit.builder.FC1_SWITCH) and the MoE-only layer's
# (what its MoE block keeps inside itself under moeLayer, hp_plugins.kit.builder.MOE_LAYER_SWITCH).
MLP_SWITCHES = ("normOp", "gather", "ffAct", FC1_SWITCH)
MOE_ONLY_SWITCHES = ("normOp", "gather", "ffAct", MOE_LAYER_SWITCH)


@attrs.frozen(kw_only=True, slots=False)
class AttentionLayerConfig(GQAFields):
    """An attention-only layer: the fields of :class:`~hp_plugins.kit.GQAFields`, with no rotary embedding unless
    ``partial_rotary_factor`` says so (``NemotronHAttention`` applies none)."""

    partial_rotary_factor: float = attrs.field(default=0.0, validator=rotary_fraction)


@attrs.frozen(kw_only=True, slots=False)
class MLPLayerConfig(MLPFields):
    """An MLP-only layer.

    Attributes:
        hidden_size: Model width ``h``.
        norm: The pre-norm (:data:`~hp_plugins.kit.NORMS`).
        hidden_dropout: Dropout after ``down_proj``.
    """

    hidden_size: int = attrs.field(validator=positive_int)
    norm: str = attrs.field(default="rmsnorm", validator=attrs.validators.in_(NORMS))
    hidden_dropout: float = attrs.field(default=0.0, validator=probability)


@attrs.frozen(kw_only=True, slots=False)
class MoELayerConfig(MoEFields):
    """A mixture-of-experts-only layer: the fields of :class:`~hp_plugins.kit.MoEFields` and

    Attributes:
        hidden_size: Model width ``h``.
        norm: The pre-norm (:data:`~hp_plugins.kit.NORMS`).
    """

    hidden_size: int = attrs.field(validator=positive_int)
    norm: str = attrs.field(default="rmsnorm", validator=attrs.validators.in_(NORMS))


def evaluate_moe_layer(c: MoELayerConfig, x: LayerContext) -> LayerCost:
    """One mixture-of-experts-only layer's cost on one rank."""
    b = LayerBuilder(x, c.hidden_size)
    moe(b, c, c.norm, 0.0, MOE_LAYER_SWITCH)
    return b.build()


def evaluate_attention_layer(c: AttentionLayerConfig, x: LayerContext) -> LayerCost:
    """One attention-only layer's cost on one rank."""
    b = LayerBuilder(x, c.hidden_size)
    gqa_attention(b, c)
    return b.build()


def evaluate_mlp_layer(c: MLPLayerConfig, x: LayerContext) -> LayerCost:
    """One MLP-only layer's cost on one rank."""
    b = LayerBuilder(x, c.hidden_size)
    mlp(b, c, c.norm, c.hidden_dropout, FC1_SWITCH)
    return b.build()


@hookimpl
def hp_layer_kinds():
    yield LayerKind(
        name="attention",
        config_type=AttentionLayerConfig,
        evaluate=evaluate_attention_layer,
        placement="body",
        switches=ATTENTION_SWITCHES,
        selective=SELECTIVE,
        validate=validate_gqa,
        description="attention-only layer: pre-norm, MHA/GQA/MQA attention (Nemotron-H *)",
    )
    yield LayerKind(
        name="mlp",
        config_type=MLPLayerConfig,
        evaluate=evaluate_mlp_layer,
        placement="body",
        switches=MLP_SWITCHES,
        validate=validate_mlp,
        description="MLP-only layer: pre-norm, gated or plain MLP (Nemotron-H -, squared ReLU)",
    )
    yield LayerKind(
        name="moe_only",
        config_type=MoELayerConfig,
        evaluate=evaluate_moe_layer,
        placement="body",
        switches=MOE_ONLY_SWITCHES,
        validate=validate_moe,
        description="mixture-of-experts-only layer: pre-norm, router, routed and shared experts (Nemotron-H E)",
    )
