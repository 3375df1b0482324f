"""The dense decoder layer: MHA/GQA/MQA attention and a gated (SwiGLU) or plain MLP.

Activation terms follow Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models" (arXiv:2205.05198), Section 4.1,
generalised to grouped-query attention (k and v are ``num_key_value_heads *
head_dim`` wide), gated MLPs (SwiGLU keeps the gate and up projections' outputs
and the activation and product outputs), QK-norm, RMSNorm and flash attention
(which keeps q, k, v, the output and the fp32 log-sum-exp statistics, never the
score matrix: Dao 2023, "FlashAttention-2", Algorithm 2). Parameter counts equal
Hugging Face transformers' ``LlamaDecoderLayer`` / ``Qwen3DecoderLayer``.

Per op, for ``T`` tokens of a micro-batch on a context-parallel rank, ``a``
attention heads of width ``d``, ``g`` KV heads, width ``h``, MLP width ``I``,
``t`` tensor parallel and ``sp = t`` under sequence parallelism (else 1):

==================  ====================  =========  ========================
op                  bytes                 switch     Korthikanti term
==================  ====================  =========  ========================
attn_norm_in        2 T h / sp            --         LayerNorm input 2sbh
attn_norm_out       2 T h / sp            normOp     QKV input 2sbh
attn_gathered       2 T h (1 - 1/t)       gather     (kept SP all-gather output)
q, k, v             2 T (a + 2k) d / t    --         Q, K 4sbh; V 2sbh
softmax_out         B a s_l s / t         softmax    softmax output 2as^2b
softmax_cast        2 a s_l s b / t       headCast   (fp32 softmax cast to bf16)
attn_dropout_mask   1 a s_l s b / t       dropout    dropout mask as^2b
attn_dropout_out    2 a s_l s b / t       attBMM     dropout output 2as^2b
attn_out            2 T a d / t           --         output projection input 2sbh
attn_lse            4 T a / t             --         (flash only)
hidden masks        1 T h / sp each       --         dropout masks sbh
mlp_norm_in/out     as attention's        --/normOp  LayerNorm input, FC1 input
fc1 / gate, up      2 T I / t each        ffFc1      GeLU input 8sbh
act_out (, mul)     2 T I / t each        ffAct      FC2 input 8sbh
==================  ====================  =========  ========================

Local attention (a sliding window, chunks, soft-capping, sinks; per-layer
patterns are layers of different configs) is the kit's
:mod:`hp_plugins.kit.local_attention`; ``post_block_norms`` adds Gemma's norms on
the blocks' outputs (each keeps its input, ``2 T h / sp``).

Under the runtime trait ``megatron_layernorm_recompute`` (the ``megatron`` runtime) the two norm
outputs are kept under no switch: Megatron-Core fuses both norms into the next linear
(``linear_qkv``, ``linear_fc1``: ``TELayerNormColumnParallelLinear``), which keeps the output,
and its ``layernorm`` module recomputes neither (an MoE block's pre-norm, a module of its own,
stays under ``normOp``: :meth:`LayerBuilder.norm_switch <hp_plugins.kit.builder.LayerBuilder.norm_switch>`).

(``B`` is the softmax output's byte width; the ``eager`` rows vanish under flash;
``k = g`` key/value heads under flash, ``k = a`` under eager, which repeats them to
every query head before its matmuls: Hugging Face ``repeat_kv``, measured by the
torch census.)
"""

from __future__ import annotations

import attrs

from hp_core.markers import hookimpl
from hp_core.costs import LayerContext, LayerCost
from hp_core.types import LayerKind
from hp_plugins.kit import (
    DECODER_MOE_SWITCHES, DENSE_MLP_SWITCHES, FC1_SWITCH, SELECTIVE_SWITCHES, GQAFields, LayerBuilder, MLPFields, gqa_attention, mlp,
    post_norm, validate_gqa, validate_mlp,
)
from hp_plugins.kit.op_sac import OP_SAC_SWITCHES, op_sac_kept_bytes

__all__ = ["DENSE_SWITCHES", "MOE_SWITCHES", "DenseConfig", "SELECTIVE", "evaluate_dense", "hp_layer_kinds", "validate_dense"]

# The kit's switch sets of an attention-and-MLP layer (hp_plugins.kit.builder), under this module's names:
# the dense layer's (its MLP's FC1 outputs under ffFc1) and those of a layer with experts instead (kinds.moe: what
# the MoE block keeps inside itself under moeLayer).
DENSE_SWITCHES = DENSE_MLP_SWITCHES
MOE_SWITCHES = DECODER_MOE_SWITCHES
SELECTIVE = SELECTIVE_SWITCHES


@attrs.frozen(kw_only=True, slots=False)
class DenseConfig(GQAFields, MLPFields):
    """One dense decoder layer (Hugging Face ``config.json`` names where they exist).

    The fields of :class:`~hp_plugins.kit.GQAFields` (attention, local attention
    included) and :class:`~hp_plugins.kit.MLPFields` (the MLP), and:

    Attributes:
        post_block_norms: A norm on each block's output before its residual add
            (Gemma 2/3's ``post_attention_layernorm`` and ``post_feedforward_layernorm``:
            :func:`hp_plugins.kit.post_norm`).
    """

    post_block_norms: bool = False


def validate_dense(config: DenseConfig, context: LayerContext) -> None:
    """Refuse a layout the layer cannot run: TP must split heads, KV heads and the MLP evenly."""
    validate_gqa(config, context)
    validate_mlp(config, context)


def evaluate_dense(c: DenseConfig, x: LayerContext) -> LayerCost:
    """One dense decoder layer's cost on one rank (see the module docstring for each term)."""
    b = LayerBuilder(x, c.hidden_size)
    gqa_attention(b, c)
    if c.post_block_norms:
        post_norm(b, "attn", c.norm)
    mlp(b, c, c.norm, c.hidden_dropout, FC1_SWITCH)
    if c.post_block_norms:
        post_norm(b, "mlp", c.norm)
    cost = b.build()
    if "torchtitan_op_sac" in x.traits:  # the op_sac switches run torchtitan's per-op policy (kit.op_sac)
        cost = attrs.evolve(cost, measured=cost.measured + ((OP_SAC_SWITCHES, op_sac_kept_bytes(c, x)),))
    return cost


@hookimpl
def hp_layer_kinds():
    yield LayerKind(
        name="dense",
        config_type=DenseConfig,
        evaluate=evaluate_dense,
        placement="body",
        switches=DENSE_SWITCHES,
        selective=SELECTIVE,
        validate=validate_dense,
        description="dense decoder layer: MHA/GQA/MQA attention, SwiGLU or plain MLP",
    )
