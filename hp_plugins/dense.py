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
q, k, v             2 T (a + 2g) d / t    --         Q, K 4sbh; V 2sbh
softmax_out         B a s_l s / t         softmax    softmax output 2as^2b
softmax_cast        2 a s_l s b / t       headCast   (fp32 softmax cast to bf16)
attn_dropout_mask   1 a s_l s b / t       dropout    dropout mask as^2b
attn_dropout_out    2 a s_l s b / t       attBMM     dropout output 2as^2b
attn_out            2 T a d / t           --         output projection input 2sbh
attn_lse            4 T a / t             --         (flash only)
hidden masks        1 T h / sp each       --         dropout masks sbh
mlp_norm_in/out     as attention's        --/normOp  LayerNorm input, FC1 input
fc1 / gate, up      2 T I / t each        --         GeLU input 8sbh
act_out (, mul)     2 T I / t each        ffAct      FC2 input 8sbh
==================  ====================  =========  ========================

(``B`` is the softmax output's byte width; the ``eager`` rows vanish under flash.)
"""

from __future__ import annotations

import attrs

from hp_core.errors import ConfigError
from hp_core.markers import hookimpl
from hp_core.types import ActivationTerm, Flops, LayerContext, LayerCost, LayerKind, ParamCount
from hp_plugins._shapes import NORM_OPS_PER_ELEMENT, NORMS, check_divides, norm_params

__all__ = ["DenseConfig", "evaluate_dense", "hp_layer_kinds", "validate_dense"]

SWITCHES = ("attBMM", "headCast", "dropout", "softmax", "normOp", "gather", "ffAct")
# The selective setting: the attention core (score, softmax, dropout and the
# casts between them), as Megatron-LM's ``--recompute-granularity selective``
# (core_attn) and Korthikanti et al. 2022 Section 4.2 recompute it.
SELECTIVE = ("attBMM", "headCast", "dropout", "softmax")

# Elementwise operations per element (forward), counted from the definitions:
# SiLU x*sigmoid(x) = negate, exp, add, divide, multiply (5); the gated product 1;
# GeLU (tanh form) 8; softmax max, subtract, exp, sum, divide (5); residual add 1.
_ACT_OPS = {"silu": 5, "swish": 5, "gelu": 8, "gelu_new": 8, "gelu_pytorch_tanh": 8, "relu": 1}
_SOFTMAX_OPS = 5
_RESIDUAL_OPS = 1


def _positive(instance, attribute, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


def _probability(instance, attribute, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"{attribute.name} must be a probability in [0, 1), got {value!r}")


@attrs.frozen(kw_only=True)
class DenseConfig:
    """One dense decoder layer (Hugging Face ``config.json`` names where they exist).

    Attributes:
        hidden_size: Model width ``h``.
        num_attention_heads: Query heads ``a``.
        num_key_value_heads: KV heads ``g`` (``a``: MHA; 1: MQA; between: GQA).
        head_dim: Width of a head; ``None`` means ``hidden_size / num_attention_heads``.
        intermediate_size: MLP width ``I``.
        gated_mlp: SwiGLU-style gate and up projections (else one FC1).
        hidden_act: The MLP activation (``silu``, ``gelu``, ...).
        attention_bias: Biases on q, k and v.
        attention_out_bias: A bias on the output projection.
        mlp_bias: Biases on the MLP projections.
        qk_norm: Per-head RMSNorm of q and k (Qwen3, OLMo-2 style).
        norm: ``rmsnorm`` or ``layernorm``.
        attention_dropout: Dropout on the attention probabilities.
        hidden_dropout: Dropout after the attention and MLP output projections.
    """

    hidden_size: int = attrs.field(validator=_positive)
    num_attention_heads: int = attrs.field(validator=_positive)
    num_key_value_heads: int = attrs.field(validator=_positive)
    intermediate_size: int = attrs.field(validator=_positive)
    head_dim: int | None = attrs.field(default=None, validator=attrs.validators.optional(_positive))
    gated_mlp: bool = True
    hidden_act: str = attrs.field(default="silu", validator=attrs.validators.in_(tuple(_ACT_OPS)))
    attention_bias: bool = False
    attention_out_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    norm: str = attrs.field(default="rmsnorm", validator=attrs.validators.in_(NORMS))
    attention_dropout: float = attrs.field(default=0.0, validator=_probability)
    hidden_dropout: float = attrs.field(default=0.0, validator=_probability)

    def __attrs_post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_key_value_heads={self.num_key_value_heads} must divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads when head_dim is not stated")

    @property
    def head_width(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads


def validate_dense(config: DenseConfig, context: LayerContext) -> None:
    """Refuse a layout the layer cannot run: TP must split heads, KV heads and the MLP evenly."""
    check_divides(context.tp, config.num_attention_heads, "$.parallel.tp", "tp", "num_attention_heads")
    check_divides(context.tp, config.num_key_value_heads, "$.parallel.tp", "tp", "num_key_value_heads")
    check_divides(context.tp, config.intermediate_size, "$.parallel.tp", "tp", "intermediate_size")
    if context.attention not in ("eager", "flash"):
        raise ConfigError("$.attention", f"unknown attention implementation {context.attention!r}; use eager or flash")


def _params(c: DenseConfig) -> tuple[ParamCount, ...]:
    h, d = c.hidden_size, c.head_width
    q_width, kv_width = c.num_attention_heads * d, c.num_key_value_heads * d
    mlp_in = (2 if c.gated_mlp else 1) * c.intermediate_size
    params = [
        ParamCount("qkv_proj", "dense", h * (q_width + 2 * kv_width) + (q_width + 2 * kv_width) * c.attention_bias, True),
        ParamCount("o_proj", "dense", q_width * h, True),
        ParamCount("mlp_in_proj", "dense", h * mlp_in + mlp_in * c.mlp_bias, True),
        ParamCount("mlp_out_proj", "dense", c.intermediate_size * h, True),
        # Replicated over TP: norms, row-parallel biases, QK-norm scales.
        ParamCount(
            "replicated",
            "dense",
            2 * norm_params(c.norm, h) + h * c.attention_out_bias + h * c.mlp_bias + 2 * d * c.qk_norm,
            False,
        ),
    ]
    return tuple(p for p in params if p.elements)


def evaluate_dense(c: DenseConfig, x: LayerContext) -> LayerCost:
    """One dense decoder layer's cost on one rank (see the module docstring for each term)."""
    p = x.precision
    act, t, sp = p.activation_bytes, x.tp, x.sp_degree
    T = x.tokens
    h, d, a, g, I = c.hidden_size, c.head_width, c.num_attention_heads, c.num_key_value_heads, c.intermediate_size
    hidden = T * h * act // sp  # a hidden-state tensor outside the TP region
    gathered = T * h * act - hidden if x.sp and t > 1 else 0
    terms: list[ActivationTerm] = []

    def keep(op: str, nbytes: int, switch: str | None = None, tp_split: bool = False) -> None:
        if nbytes:
            terms.append(ActivationTerm(op, nbytes, switch, tp_split))

    # Attention block.
    keep("attn_norm_in", hidden)
    keep("attn_norm_out", hidden, "normOp")
    keep("attn_gathered", gathered, "gather")
    if c.qk_norm:
        keep("qk_norm_in", T * (a + g) * d * act // t, None, True)
        keep("q_k", T * (a + g) * d * act // t, "normOp", True)
    else:
        keep("q_k", T * (a + g) * d * act // t, None, True)
    keep("v", T * g * d * act // t, None, True)
    score_elements = x.micro_batch_size * (a // t) * (x.seq_len // x.cp) * x.seq_len
    if x.attention == "eager":
        keep("softmax_out", score_elements * p.softmax_bytes, "softmax", True)
        if p.softmax_bytes != act:
            keep("softmax_cast", score_elements * act, "headCast", True)
        if c.attention_dropout > 0:
            keep("attn_dropout_mask", score_elements * p.dropout_mask_bytes, "dropout", True)
            keep("attn_dropout_out", score_elements * act, "attBMM", True)
    else:
        keep("attn_lse", T * (a // t) * p.lse_bytes, None, True)
    keep("attn_out", T * a * d * act // t, None, True)
    if c.hidden_dropout > 0:
        keep("attn_hidden_dropout_mask", T * h * p.dropout_mask_bytes // sp)
    # MLP block.
    keep("mlp_norm_in", hidden)
    keep("mlp_norm_out", hidden, "normOp")
    keep("mlp_gathered", gathered, "gather")
    mlp_wide = T * I * act // t
    if c.gated_mlp:
        keep("gate_out", mlp_wide, None, True)
        keep("up_out", mlp_wide, None, True)
        keep("act_out", mlp_wide, "ffAct", True)
        keep("mul_out", mlp_wide, "ffAct", True)
    else:
        keep("fc1_out", mlp_wide, None, True)
        keep("act_out", mlp_wide, "ffAct", True)
    if c.hidden_dropout > 0:
        keep("mlp_hidden_dropout_mask", T * h * p.dropout_mask_bytes // sp)

    # Backward working set beyond what is kept: the gradient arriving at the
    # layer output, the all-gather SP redoes for the weight gradients, and the
    # larger of the two blocks' transient gradients (MLP: the gradients of the
    # FC2 input and of the FC1 outputs alive together; eager attention: the
    # gradients of the probabilities and of the scores; flash: dq, dk, dv and
    # its fp32 row statistics) -- from the autograd graph of the ops above.
    mlp_grads = (3 if c.gated_mlp else 2) * mlp_wide
    if x.attention == "eager":
        attn_grads = 2 * score_elements * act
    else:
        attn_grads = T * (a + 2 * g) * d * act // t + T * (a // t) * p.lse_bytes
    working = hidden + gathered + max(mlp_grads, attn_grads)

    q_width, kv_width = a * d, g * d
    matmul = 2 * T * h * (q_width + 2 * kv_width) // t + 2 * T * q_width * h // t
    matmul += 2 * T * h * I * (3 if c.gated_mlp else 2) // t
    # Scores q k^T and the weighted sum p v: 2 * 2 * s_local * s * d per head.
    attention = 4 * x.micro_batch_size * (a // t) * (x.seq_len // x.cp) * x.seq_len * d
    elementwise = 2 * NORM_OPS_PER_ELEMENT[c.norm] * T * h // sp + 2 * _RESIDUAL_OPS * T * h // sp
    elementwise += (_ACT_OPS[c.hidden_act] + (1 if c.gated_mlp else 0)) * T * I // t
    elementwise += _SOFTMAX_OPS * score_elements
    return LayerCost(
        params=_params(c),
        activations=tuple(terms),
        input_bytes=hidden,
        working_bytes=working,
        # Sequence parallelism all-gathers into one buffer Megatron-LM reuses for
        # every layer (tensor_parallel/layers.py, get_global_memory_buffer).
        buffers_once_bytes=T * h * act if x.sp and t > 1 else 0,
        forward=Flops(matmul_flops=matmul, attention_flops=attention, elementwise_flops=elementwise),
    )


@hookimpl
def hp_layer_kinds():
    yield LayerKind(
        name="dense",
        config_type=DenseConfig,
        evaluate=evaluate_dense,
        placement="body",
        switches=SWITCHES,
        selective=SELECTIVE,
        validate=validate_dense,
        description="dense decoder layer: MHA/GQA/MQA attention, SwiGLU or plain MLP",
    )
