"""Building blocks the built-in decoder kinds are made of.

A decoder layer is an attention block (grouped-query or multi-head latent)
followed by a feed-forward block (a dense MLP or a mixture of experts), each
with its pre-norm and residual. Each block function appends its parameters,
its kept activations per op, its backward's transient gradients and its
forward FLOPs to a :class:`LayerBuilder`, which turns them into a
:class:`~hp_core.types.LayerCost`.

Notation in the docstrings: ``T`` tokens of a micro-batch on a context-parallel
rank, ``h`` the width, ``t`` tensor parallel, ``sp = t`` under sequence
parallelism (else 1), 2-byte activations (``activation_bytes``).
"""

from __future__ import annotations

import functools
import math

import attrs

from hp_core.errors import ConfigError
from hp_core.types import ActivationTerm, Flops, LayerContext, LayerCost, ParamCount
from hp_core.validators import non_negative_int, positive_int, probability
from hp_plugins._shapes import NORM_OPS_PER_ELEMENT, NORMS, check_divides, norm_params


# Evaluators build the same terms and parameter counts again for every layout a search tries; the
# records are frozen, so equal ones are shared instead of built (and validated) again.
@functools.lru_cache(maxsize=1 << 16)
def term(op: str, nbytes: int, switch: str | None = None, tp_split: bool = False) -> ActivationTerm:
    """An :class:`~hp_core.types.ActivationTerm`, shared with every equal one asked for before."""
    return ActivationTerm(op, nbytes, switch, tp_split)


@functools.lru_cache(maxsize=1 << 16)
def param_count(name: str, group: str, elements: int, tp_split: bool, stored_elements: int | None = None,
                shared_with: str | None = None) -> ParamCount:
    """A :class:`~hp_core.types.ParamCount`, shared with every equal one asked for before."""
    return ParamCount(name, group, elements, tp_split, stored_elements, shared_with)

__all__ = [
    "ACT_OPS",
    "GQAFields",
    "LayerBuilder",
    "MLAFields",
    "MLPFields",
    "MoEFields",
    "gqa_attention",
    "mla_attention",
    "mlp",
    "moe",
]

# Elementwise operations per element (forward), counted from the definitions:
# SiLU x*sigmoid(x) = negate, exp, add, divide, multiply (5); the gated product 1;
# GeLU (tanh form) 8; softmax max, subtract, exp, sum, divide (5); residual add 1.
ACT_OPS = {"silu": 5, "swish": 5, "gelu": 8, "gelu_new": 8, "gelu_pytorch_tanh": 8, "relu": 1}
_SOFTMAX_OPS = 5
_RESIDUAL_OPS = 1


def _capacity(instance, attribute, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        raise ValueError(f"{attribute.name} must be a positive number or absent (dropless), got {value!r}")


# ----------------------------------------------------------------------------- config fields


@attrs.frozen(kw_only=True, slots=False)
class GQAFields:
    """Grouped-query attention (MHA: ``num_key_value_heads == num_attention_heads``; MQA: 1).

    Attributes:
        hidden_size: Model width ``h``.
        num_attention_heads: Query heads ``a``.
        num_key_value_heads: KV heads ``g``.
        head_dim: Width of a head; ``None`` means ``hidden_size / num_attention_heads``.
        attention_bias: Biases on q, k and v.
        attention_out_bias: A bias on the output projection.
        qk_norm: Per-head RMSNorm of q and k (Qwen3, OLMo-2).
        norm: ``rmsnorm`` or ``layernorm`` (both of the layer's norms).
        attention_dropout: Dropout on the attention probabilities.
        hidden_dropout: Dropout after the attention and feed-forward output projections.
    """

    hidden_size: int = attrs.field(validator=positive_int)
    num_attention_heads: int = attrs.field(validator=positive_int)
    num_key_value_heads: int = attrs.field(validator=positive_int)
    head_dim: int | None = attrs.field(default=None, validator=attrs.validators.optional(positive_int))
    attention_bias: bool = False
    attention_out_bias: bool = False
    qk_norm: bool = False
    norm: str = attrs.field(default="rmsnorm", validator=attrs.validators.in_(NORMS))
    attention_dropout: float = attrs.field(default=0.0, validator=probability)
    hidden_dropout: float = attrs.field(default=0.0, validator=probability)

    def __attrs_post_init__(self) -> None:
        self._check_gqa()

    def _check_gqa(self) -> None:
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


@attrs.frozen(kw_only=True, slots=False)
class MLAFields:
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, Section 2.1).

    Attributes:
        hidden_size: Model width ``h``.
        num_attention_heads: Heads ``a``.
        q_lora_rank: Rank of the query's low-rank compression; ``None``: a full query projection.
        kv_lora_rank: Rank of the joint key/value compression.
        qk_nope_head_dim: Per-head query/key width without rotary embedding.
        qk_rope_head_dim: The decoupled rotary width (shared by all heads for the key).
        v_head_dim: Per-head value width.
        attention_bias: Biases on the down projections (``q_a_proj``, ``kv_a_proj_with_mqa``).
        norm: ``rmsnorm`` or ``layernorm`` (the layer's norms; the latent norms are RMSNorm).
        attention_dropout: Dropout on the attention probabilities.
        hidden_dropout: Dropout after the attention and feed-forward output projections.
    """

    hidden_size: int = attrs.field(validator=positive_int)
    num_attention_heads: int = attrs.field(validator=positive_int)
    kv_lora_rank: int = attrs.field(validator=positive_int)
    qk_nope_head_dim: int = attrs.field(validator=positive_int)
    qk_rope_head_dim: int = attrs.field(validator=positive_int)
    v_head_dim: int = attrs.field(validator=positive_int)
    q_lora_rank: int | None = attrs.field(default=None, validator=attrs.validators.optional(positive_int))
    attention_bias: bool = False
    norm: str = attrs.field(default="rmsnorm", validator=attrs.validators.in_(NORMS))
    attention_dropout: float = attrs.field(default=0.0, validator=probability)
    hidden_dropout: float = attrs.field(default=0.0, validator=probability)


@attrs.frozen(kw_only=True, slots=False)
class MLPFields:
    """A dense feed-forward block.

    Attributes:
        intermediate_size: MLP width ``I``.
        gated_mlp: SwiGLU-style gate and up projections (else one FC1).
        hidden_act: The activation (``silu``, ``gelu``, ...).
        mlp_bias: Biases on the MLP projections.
    """

    intermediate_size: int = attrs.field(validator=positive_int)
    gated_mlp: bool = True
    hidden_act: str = attrs.field(default="silu", validator=attrs.validators.in_(tuple(ACT_OPS)))
    mlp_bias: bool = False


@attrs.frozen(kw_only=True, slots=False)
class MoEFields:
    """A mixture-of-experts feed-forward block with SwiGLU experts.

    Attributes:
        num_experts: Routed experts ``E``.
        num_experts_per_tok: Experts each token is routed to ``k``.
        moe_intermediate_size: Each routed expert's width.
        shared_expert_intermediate_size: The shared experts' combined width
            (0: none; DeepSeek's ``n_shared_experts * moe_intermediate_size``).
        shared_expert_gate: A sigmoid gate ``Linear(h, 1)`` on the shared
            experts' output (Qwen2-MoE).
        hidden_act: The experts' activation.
        capacity_factor: Tokens an expert takes, relative to an even share;
            ``None``: dropless routing.
        pad_to_capacity: Every expert processes ``capacity`` tokens, padded (Megatron-Core
            ``--moe-pad-expert-input-to-capacity``); only with a capacity factor.
    """

    num_experts: int = attrs.field(validator=positive_int)
    num_experts_per_tok: int = attrs.field(validator=positive_int)
    moe_intermediate_size: int = attrs.field(validator=positive_int)
    shared_expert_intermediate_size: int = attrs.field(default=0, validator=non_negative_int)
    shared_expert_gate: bool = False
    hidden_act: str = attrs.field(default="silu", validator=attrs.validators.in_(tuple(ACT_OPS)))
    capacity_factor: float | None = attrs.field(default=None, validator=_capacity)
    pad_to_capacity: bool = False

    def __attrs_post_init__(self) -> None:
        self._check_moe()

    def _check_moe(self) -> None:
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(
                f"num_experts_per_tok={self.num_experts_per_tok} must not exceed num_experts={self.num_experts}"
            )
        if self.pad_to_capacity and self.capacity_factor is None:
            raise ValueError("pad_to_capacity needs a capacity_factor")


# ----------------------------------------------------------------------------- the builder


class LayerBuilder:
    """Collects one layer's parameters, kept tensors, transient gradients and FLOPs."""

    def __init__(self, x: LayerContext, hidden_size: int) -> None:
        self.x = x
        self.act = x.precision.activation_bytes
        self.h = hidden_size
        # A hidden-state tensor outside the TP region, and the part an SP all-gather adds.
        self.hidden = x.tokens * hidden_size * self.act // x.sp_degree
        self.gathered = x.tokens * hidden_size * self.act - self.hidden if x.sp and x.tp > 1 else 0
        self.params: list[ParamCount] = []
        self.terms: list[ActivationTerm] = []
        self.block_grads: list[int] = []
        self.matmul = 0
        self.attention = 0
        self.elementwise = 0
        self.buffers_once = 0
        self.shapes: list[tuple[int, int]] = []

    def keep(self, op: str, nbytes: int, switch: str | None = None, tp_split: bool = False) -> None:
        """Record *nbytes* kept for backward by *op*, dropped by *switch*."""
        if nbytes:
            self.terms.append(term(op, nbytes, switch, tp_split))

    def param(self, name: str, elements: int, tp_split: bool, group: str = "dense") -> None:
        if elements:
            self.params.append(param_count(name, group, elements, tp_split))

    def pre_norm(self, prefix: str, norm: str, hidden_dropout: float) -> None:
        """A block's pre-norm: its input (the residual stream) and output, the SP gathered copy, the dropout mask.

        Korthikanti et al. 2022 Section 4.1: each LayerNorm keeps its input
        (2sbh) and the following linear layer its input (2sbh), the norm's output.
        """
        self.keep(f"{prefix}_norm_in", self.hidden)
        self.keep(f"{prefix}_norm_out", self.hidden, "normOp")
        self.keep(f"{prefix}_gathered", self.gathered, "gather")
        if hidden_dropout > 0:
            self.keep(f"{prefix}_hidden_dropout_mask", self.x.tokens * self.h * self.x.precision.dropout_mask_bytes // self.x.sp_degree)
        self.param(f"{prefix}_norm", norm_params(norm, self.h), False)
        self.elementwise += (NORM_OPS_PER_ELEMENT[norm] + _RESIDUAL_OPS) * self.x.tokens * self.h // self.x.sp_degree

    def attention_core(self, heads: int, qk_dim: int, v_dim: int, attention_dropout: float) -> None:
        """The score/softmax/dropout/value core (eager) or the flash kernel's statistics.

        Under all-to-all context parallelism the kernel runs on ``heads / cp``
        heads of the whole sequence and keeps its output in that layout, while
        the output projection keeps the output exchanged back to the local
        sequence: two copies of the attention output (DeepSpeed-Ulysses;
        Transformer Engine's CP A2A keeps the kernel's output so its backward
        exchanges only the output gradient).
        """
        x, p, t = self.x, self.x.precision, self.x.tp
        if x.cp > 1 and x.cp_kind == "a2a":
            self.keep("attn_out_a2a", x.tokens * heads * v_dim * self.act // t, None, True)
        score_elements = x.micro_batch_size * (heads // t) * (x.seq_len // x.cp) * x.seq_len
        if x.attention == "eager":
            self.keep("softmax_out", score_elements * p.softmax_bytes, "softmax", True)
            if p.softmax_bytes != self.act:
                self.keep("softmax_cast", score_elements * self.act, "headCast", True)
            if attention_dropout > 0:
                self.keep("attn_dropout_mask", score_elements * p.dropout_mask_bytes, "dropout", True)
                self.keep("attn_dropout_out", score_elements * self.act, "attBMM", True)
            # Backward: the gradients of the probabilities and of the scores, in the
            # softmax's dtype (fp32 where it runs in fp32: Hugging Face eager, measured
            # by the torch census, docs/accuracy.md).
            self.block_grads.append(2 * score_elements * p.softmax_bytes)
        else:
            # FlashAttention-2 (Dao 2023, Algorithm 2) keeps the fp32 log-sum-exp per row.
            self.keep("attn_lse", x.tokens * (heads // t) * p.lse_bytes, None, True)
        # Scores q k^T and the weighted sum p v, 2 FLOPs per multiply-add.
        self.attention += 2 * x.micro_batch_size * (heads // t) * (x.seq_len // x.cp) * x.seq_len * (qk_dim + v_dim)
        self.elementwise += _SOFTMAX_OPS * score_elements

    def linear(self, tokens: int, fan_in: int, fan_out: int, weight: bool = True) -> None:
        """A matmul's forward FLOPs on this rank (fan_out already per rank).

        Args:
            weight: It is a linear layer's weight (recorded as a per-rank
                ``(fan_out, fan_in)`` shape); a router's gate is not a TE linear.
        """
        self.matmul += 2 * tokens * fan_in * fan_out
        if weight:
            self.shapes.append((fan_out, fan_in))

    def build(self) -> LayerCost:
        """The layer: working set = the output gradient + the SP re-gather + the larger block's transients."""
        return LayerCost(
            params=tuple(self.params),
            activations=tuple(self.terms),
            input_bytes=self.hidden,
            working_bytes=self.hidden + self.gathered + max(self.block_grads, default=0),
            buffers_once_bytes=self.buffers_once,
            forward=Flops(matmul_flops=self.matmul, attention_flops=self.attention, elementwise_flops=self.elementwise),
            weight_shapes=tuple(dict.fromkeys(self.shapes)),
        )


# ----------------------------------------------------------------------------- attention


def gqa_attention(b: LayerBuilder, c: GQAFields) -> None:
    """Grouped-query attention (Korthikanti et al. 2022 Section 4.1, with ``g`` KV heads).

    Kept: the norm's input and output, q and k (4sbh for MHA), v (2sbh), the
    attention output (the output projection's input, 2sbh), and the core
    (eager: softmax output, dropout mask and output; flash: the statistics).

    With ``g < a`` eager attention repeats the key and value heads to every
    query head before its matmuls, which save them so: ``a`` heads of k and
    of v are kept (Hugging Face ``repeat_kv`` in ``eager_attention_forward``;
    Megatron-Core ``DotProductAttention`` ``repeat_interleave``; measured by
    the torch census, docs/accuracy.md). A flash kernel reads the ``g`` heads.
    """
    x, act, t = b.x, b.act, b.x.tp
    T, h, d, a, g = x.tokens, c.hidden_size, c.head_width, c.num_attention_heads, c.num_key_value_heads
    qkv = (a + 2 * g) * d
    # The key/value heads the attention's matmuls save: repeated to all a under eager.
    kv = a if x.attention == "eager" else g
    b.pre_norm("attn", c.norm, c.hidden_dropout)
    b.param("qkv_proj", h * qkv + qkv * c.attention_bias, True)
    b.param("o_proj", a * d * h, True)
    b.param("attn_replicated", h * c.attention_out_bias + 2 * d * c.qk_norm, False)
    if c.qk_norm:
        b.keep("qk_norm_in", T * (a + g) * d * act // t, None, True)
        b.keep("q_k", T * (a + kv) * d * act // t, "normOp", True)
    else:
        b.keep("q_k", T * (a + kv) * d * act // t, None, True)
    b.keep("v", T * kv * d * act // t, None, True)
    b.attention_core(a, d, d, c.attention_dropout)
    b.keep("attn_out", T * a * d * act // t, None, True)
    if x.attention != "eager":
        # Flash backward: dq, dk, dv and its fp32 row statistics.
        b.block_grads.append(T * qkv * act // t + T * (a // t) * x.precision.lse_bytes)
    b.linear(T, h, qkv // t)
    b.linear(T, a * d // t, h)


def mla_attention(b: LayerBuilder, c: MLAFields) -> None:
    """Multi-head latent attention as Hugging Face ``DeepseekV3Attention`` and Megatron-Core
    ``MLASelfAttention`` run it (DeepSeek-V2 report, arXiv:2405.04434, Section 2.1).

    Down projections (``q_a_proj``, ``kv_a_proj_with_mqa``) and the latent
    norms are replicated over TP; the up projections (``q_b_proj``,
    ``kv_b_proj``) and the output projection are split over heads. Kept: the
    latents before and after their norms (the norm outputs gated by ``normOp``),
    the decoupled rotary key, and the up-projected per-head query, key and value
    (``attUp``: rebuilt from the kept latents by running the up projections
    again), the attention core and its output.
    """
    x, act, t = b.x, b.act, b.x.tp
    T, h, a = x.tokens, c.hidden_size, c.num_attention_heads
    qk = c.qk_nope_head_dim + c.qk_rope_head_dim
    b.pre_norm("attn", c.norm, c.hidden_dropout)
    if c.q_lora_rank is not None:
        r = c.q_lora_rank
        b.param("q_a_proj", h * r + r * c.attention_bias, False)
        b.param("q_a_layernorm", r, False)
        b.param("q_b_proj", r * a * qk, True)
        b.keep("q_latent", T * r * act)
        b.keep("q_latent_norm_out", T * r * act, "normOp")
        b.linear(T, h, r)
        b.linear(T, r, a * qk // t)
    else:
        b.param("q_proj", h * a * qk, True)
        b.linear(T, h, a * qk // t)
    kv_a = c.kv_lora_rank + c.qk_rope_head_dim
    b.param("kv_a_proj_with_mqa", h * kv_a + kv_a * c.attention_bias, False)
    b.param("kv_a_layernorm", c.kv_lora_rank, False)
    b.param("kv_b_proj", c.kv_lora_rank * a * (c.qk_nope_head_dim + c.v_head_dim), True)
    b.param("o_proj", a * c.v_head_dim * h, True)
    b.keep("kv_latent", T * kv_a * act)
    b.keep("kv_latent_norm_out", T * c.kv_lora_rank * act, "normOp")
    b.keep("q_heads", T * a * qk * act // t, "attUp", True)
    b.keep("k_heads", T * a * qk * act // t, "attUp", True)
    if "mla_contiguous_qkv" in x.traits:
        b.keep("v_heads", T * a * c.v_head_dim * act // t, "attUp", True)
    else:
        # v is a view of kv_b_proj's output, whose storage (k_nope and v) it keeps alive.
        b.keep("kv_up_out", T * a * (c.qk_nope_head_dim + c.v_head_dim) * act // t, "attUp", True)
    b.attention_core(a, qk, c.v_head_dim, c.attention_dropout)
    b.keep("attn_out", T * a * c.v_head_dim * act // t, None, True)
    if x.attention != "eager":
        b.block_grads.append(T * a * (2 * qk + c.v_head_dim) * act // t + T * (a // t) * x.precision.lse_bytes)
    b.linear(T, h, kv_a)
    b.linear(T, c.kv_lora_rank, a * (c.qk_nope_head_dim + c.v_head_dim) // t)
    b.linear(T, a * c.v_head_dim // t, h)


# ----------------------------------------------------------------------------- feed-forward


def _swiglu(b: LayerBuilder, prefix: str, tokens: int, width: int, gated: bool, act_name: str, tp_split: bool = True) -> int:
    """Keep a (gated) MLP's FC1 outputs and activation outputs; return the bytes of one width-wide tensor.

    Unfused SwiGLU (Hugging Face ``act_fn(gate_proj(x)) * up_proj(x)``) keeps
    the gate and up outputs, the activation's output (the product's input) and
    the product (the FC2 input). A fused SwiGLU (the ``fused_swiglu`` trait:
    Megatron-LM ``bias_swiglu_impl``) keeps only its input, the FC1 output, and
    its product, which FC2 keeps.
    """
    wide = tokens * width * b.act
    if gated and "fused_swiglu" in b.x.traits:
        b.keep(f"{prefix}fc1_out", 2 * wide, None, tp_split)
        b.keep(f"{prefix}mul_out", wide, "ffAct", tp_split)
    elif gated:
        b.keep(f"{prefix}gate_out", wide, None, tp_split)
        b.keep(f"{prefix}up_out", wide, None, tp_split)
        b.keep(f"{prefix}act_out", wide, "ffAct", tp_split)
        b.keep(f"{prefix}mul_out", wide, "ffAct", tp_split)
    else:
        b.keep(f"{prefix}fc1_out", wide, None, tp_split)
        b.keep(f"{prefix}act_out", wide, "ffAct", tp_split)
    b.elementwise += (ACT_OPS[act_name] + (1 if gated else 0)) * tokens * width
    return wide


def mlp(b: LayerBuilder, c: MLPFields, norm: str, hidden_dropout: float) -> None:
    """A dense MLP (Korthikanti et al. 2022 Section 4.1: FC1 input 2sbh, GeLU input 8sbh, FC2 input 8sbh).

    SwiGLU keeps the gate and up outputs (the activation's and product's
    inputs) and the activation and product outputs (``ffAct``).
    """
    x, t = b.x, b.x.tp
    T, h, I = x.tokens, b.h, c.intermediate_size
    fc1 = (2 if c.gated_mlp else 1) * I
    b.pre_norm("mlp", norm, hidden_dropout)
    b.param("mlp_in_proj", h * fc1 + fc1 * c.mlp_bias, True)
    b.param("mlp_out_proj", I * h, True)
    b.param("mlp_out_bias", h * c.mlp_bias, False)
    wide = _swiglu(b, "", T, I // t, c.gated_mlp, c.hidden_act)
    # Backward: the gradients of the FC2 input and of the FC1 outputs, alive together.
    b.block_grads.append((3 if c.gated_mlp else 2) * wide)
    b.linear(T, h, fc1 // t)
    b.linear(T, I // t, h)


def moe_tokens(c: MoEFields, x: LayerContext) -> int:
    """Tokens one rank's experts process per micro-batch after dispatch.

    Each of the ``T / sp`` tokens a rank routes goes to ``k`` experts; with
    routing balanced over the ``E`` experts, the ``E / ep`` experts of a rank
    receive ``k`` tokens per routed token of the expert-parallel group member,
    i.e. ``k * T / sp`` in all; expert tensor parallelism all-gathers the
    tokens of its ``etp`` ranks. Padding to capacity gives every expert
    ``ceil(k * cf * T / sp / E)`` tokens from every source rank, so ``E`` times
    that in all (Megatron-Core ``moe_utils.get_capacity`` and the drop-and-pad
    all-to-all; Fedus et al. 2021 for the capacity factor). Routing is assumed
    balanced: a skewed router loads some ranks more.
    """
    routed = x.tokens // x.sp_degree
    if c.pad_to_capacity and c.capacity_factor is not None:
        per_expert = math.ceil(routed * c.num_experts_per_tok * c.capacity_factor / c.num_experts)
        return c.num_experts * per_expert * x.etp
    return routed * c.num_experts_per_tok * x.etp


def moe(b: LayerBuilder, c: MoEFields, norm: str, hidden_dropout: float) -> None:
    """A mixture of experts: router, dispatch, routed SwiGLU experts, shared experts, combine.

    Kept per rank: the router's probabilities over all experts (its softmax or
    sigmoid output), the dispatched tokens (the experts' FC1 input), each
    expert's FC1 outputs and activation outputs over the tokens it processes
    (:func:`moe_tokens`), and the experts' outputs on the source rank, which
    the probability-weighted combine keeps for the gradient of the
    probabilities (Megatron-Core ``moe_utils.unpermute``; Hugging Face Mixtral
    multiplies the expert output by the routing weight). Shared experts run
    like a dense MLP over the (SP-gathered) tokens.
    """
    x, t, act = b.x, b.x.tp, b.act
    T, h, E = x.tokens, b.h, c.num_experts
    routed = T // x.sp_degree
    processed = moe_tokens(c, x)
    b.pre_norm("moe", norm, hidden_dropout)
    b.param("router", E * h, False)
    b.param("experts", E * 3 * h * c.moe_intermediate_size, True, "routed_expert")
    b.keep("router_probs", routed * E * act)
    b.keep("dispatched_tokens", processed * h * act)
    expert_wide = _swiglu(b, "expert_", processed, c.moe_intermediate_size // x.etp, True, c.hidden_act, False)
    if "moe_probs_in_activation" in x.traits:
        # The weighted SwiGLU keeps the fp32 probability of each dispatched token.
        b.keep("expert_probs", processed * 4)
    else:
        b.keep("expert_out", processed // x.etp * h * act)
    if "moe_fused_permute" in x.traits:
        # int32 row map of [tokens, 2E + 1] (Transformer Engine moe_permute).
        b.keep("permute_row_map", routed * (2 * E + 1) * 4)
    # The dispatch and combine all-to-all buffers of the running layer.
    b.buffers_once = max(b.buffers_once, 2 * processed * h * act)
    grads = 3 * expert_wide + processed * h * act
    b.linear(routed, h, E, weight=False)
    b.linear(processed, h, 2 * c.moe_intermediate_size // x.etp)
    b.linear(processed, c.moe_intermediate_size // x.etp, h)
    if c.shared_expert_intermediate_size:
        I = c.shared_expert_intermediate_size
        b.param("shared_experts", 3 * h * I, True, "shared_expert")
        if c.shared_expert_gate:
            b.param("shared_expert_gate", h, False, "shared_expert")
            b.keep("shared_out", b.hidden)
        b.keep("shared_gathered", b.gathered, "gather")
        shared_wide = _swiglu(b, "shared_", T, I // t, True, c.hidden_act)
        grads = max(grads, 3 * shared_wide)
        b.linear(T, h, 2 * I // t)
        b.linear(T, I // t, h)
    b.block_grads.append(grads)


def validate_gqa(c: GQAFields, x: LayerContext) -> None:
    check_divides(x.tp, c.num_attention_heads, "$.parallel.tp", "tp", "num_attention_heads")
    check_divides(x.tp, c.num_key_value_heads, "$.parallel.tp", "tp", "num_key_value_heads")


def validate_mla(c: MLAFields, x: LayerContext) -> None:
    check_divides(x.tp, c.num_attention_heads, "$.parallel.tp", "tp", "num_attention_heads")


def validate_mlp(c: MLPFields, x: LayerContext) -> None:
    check_divides(x.tp, c.intermediate_size, "$.parallel.tp", "tp", "intermediate_size")


def validate_moe(c: MoEFields, x: LayerContext) -> None:
    check_divides(x.ep, c.num_experts, "$.parallel.ep", "ep", "num_experts")
    check_divides(x.etp, c.moe_intermediate_size, "$.parallel.etp", "etp", "moe_intermediate_size")
    if c.shared_expert_intermediate_size:
        check_divides(x.tp, c.shared_expert_intermediate_size, "$.parallel.tp", "tp", "shared_expert_intermediate_size")
    if x.tp > 1 and not x.sp:
        raise ConfigError(
            "$.parallel.sp",
            "a mixture-of-experts layer with tp > 1 needs sequence parallelism (Megatron-LM arguments.py); add --sp",
        )
