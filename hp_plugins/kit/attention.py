"""Grouped-query attention (MHA, GQA, MQA): its config fields, its block and its layout check."""

from __future__ import annotations

import attrs

from hp_core.bounds import short_repr
from hp_core.costs import LayerContext
from hp_core.errors import SpecError
from hp_core.score_masks import local_mask
from hp_core.validators import one_of, positive_int, positive_number, probability
from hp_plugins.kit.work import AttentionShape
from hp_plugins.kit.builder import SOFTMAX_OPS, LayerBuilder
from hp_plugins.kit.local_attention import SOFTCAP_OPS, local_attention_core
from hp_plugins.kit.norms import NORMS, fp32_norm_bytes, head_norm
from hp_plugins.kit.shapes import check_divides

__all__ = ["GQAFields", "gqa_attention", "rotary_fraction", "validate_gqa"]


def rotary_fraction(instance: object, attribute: attrs.Attribute, value: object) -> None:
    """A number in ``[0, 1]``: the share of a head's channels a rotary embedding rotates."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise SpecError(attribute.name, f"{attribute.name} must be a number in [0, 1] (0: no rotary embedding), "
                                        f"got {short_repr(value)}")


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
        qk_norm: Per-head RMSNorm of q and k (Qwen3, OLMo-2, Gemma 3).
        qk_norm_weight: The QK-norm has a learned scale per channel (``False``:
            Llama 4's weightless ``L2Norm``).
        norm: ``rmsnorm``, ``layernorm`` or ``rmsnorm_fp32_weight`` (the layer's norms;
            :data:`~hp_plugins.kit.norms.NORMS`).
        attention_dropout: Dropout on the attention probabilities.
        hidden_dropout: Dropout after the attention and feed-forward output projections.
        sliding_window: Each query attends its last ``sliding_window`` keys, itself
            included (Mistral, Gemma 2/3, GPT-OSS; :mod:`hp_plugins.kit.local_attention`);
            ``None``: full causal attention.
        attention_chunk_size: Each query attends the keys of its own chunk up to
            itself (Llama 4's chunked layers); ``None``: no chunks.
        attn_logit_softcapping: The scores are capped as ``c * tanh(s / c)`` (Gemma 2).
        attention_sinks: A learned sink logit per head joins each softmax row (GPT-OSS).
        fused_qkv: q, k and v are slices of one projection's output (Phi-3's
            ``qkv_proj``): where the attention keeps v as that slice, the whole
            output stays alive (:func:`gqa_attention`), which an FP8-attention
            kernel frees (``qkv_view``). Either way one GEMM of width
            ``(a + 2 g) d``, so torchtitan's per-op SAC counts one matmul where
            separate projections are three (:mod:`hp_plugins.kit.op_sac`).
        fused_qkv_contiguous: With ``fused_qkv``, q, k and v are made contiguous
            copies of the fused output's slices, so no slice keeps that output
            alive and the layer keeps what separate projections keep
            (torchtitan's ``FusedQKVLinear``, ``torchtitan/models/common/attention.py``
            ``_split`` at pytorch/torchtitan@bcc09297a: ``torch.split`` then
            ``.reshape(...).contiguous()`` of each of q, k, v). Absent (``False``):
            Phi-3's slices, whose v keeps the whole output.
        softmax_in_compute_dtype: The eager path's softmax runs in the compute
            dtype whatever the precision's ``softmax_bytes`` (Llama 4's
            ``eager_attention_forward`` does not upcast), keeping no fp32 copy
            and no cast.
        partial_rotary_factor: The share of each query and key head's channels a
            rotary position embedding rotates (transformers' ``partial_rotary_factor``,
            ``int(head_dim * factor)`` channels; Megatron-LM's ``--rotary-percent``);
            1.0, the default: every channel (Llama, Qwen, Mistral, Gemma, GPT-OSS's
            YaRN); 0: no rotary embedding (learned absolute positions, ALiBi, a
            NoPE layer). Time only (:meth:`LayerBuilder.rotary_embedding
            <hp_plugins.kit.builder.LayerBuilder.rotary_embedding>`).
    """

    hidden_size: int = attrs.field(validator=positive_int)
    num_attention_heads: int = attrs.field(validator=positive_int)
    num_key_value_heads: int = attrs.field(validator=positive_int)
    head_dim: int | None = attrs.field(default=None, validator=attrs.validators.optional(positive_int))
    attention_bias: bool = False
    attention_out_bias: bool = False
    qk_norm: bool = False
    qk_norm_weight: bool = True
    norm: str = attrs.field(default="rmsnorm", validator=one_of(NORMS))
    attention_dropout: float = attrs.field(default=0.0, validator=probability)
    hidden_dropout: float = attrs.field(default=0.0, validator=probability)
    sliding_window: int | None = attrs.field(default=None, validator=attrs.validators.optional(positive_int))
    attention_chunk_size: int | None = attrs.field(default=None, validator=attrs.validators.optional(positive_int))
    attn_logit_softcapping: float | None = attrs.field(default=None, validator=attrs.validators.optional(positive_number))
    attention_sinks: bool = False
    fused_qkv: bool = False
    fused_qkv_contiguous: bool = False
    softmax_in_compute_dtype: bool = False
    partial_rotary_factor: float = attrs.field(default=1.0, validator=rotary_fraction)

    def __attrs_post_init__(self) -> None:
        self.check_gqa()

    def check_gqa(self) -> None:
        """Refuse inconsistent heads; a config combining these fields with others calls it from its
        own ``__attrs_post_init__`` (attrs calls only the one the MRO finds first)."""
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_key_value_heads={self.num_key_value_heads} must divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads when head_dim is not stated")
        if self.sliding_window is not None and self.attention_chunk_size is not None:
            raise ValueError("a layer has a sliding_window or an attention_chunk_size, not both")
        if self.fused_qkv_contiguous and not self.fused_qkv:
            raise ValueError("fused_qkv_contiguous describes a fused projection's slices: it needs fused_qkv")

    @property
    def local(self) -> bool:
        """Whether any of the local-attention fields is set (:mod:`hp_plugins.kit.local_attention`)."""
        return (self.sliding_window is not None or self.attention_chunk_size is not None
                or self.attn_logit_softcapping is not None or self.attention_sinks)

    @property
    def head_width(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    @property
    def rotary_width(self) -> int:
        """The channels of each query and key head the rotary embedding rotates (transformers: ``int(head_dim * factor)``)."""
        return int(self.head_width * self.partial_rotary_factor)


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

    A sliding window, chunks, soft-capping or sinks price the core with
    :func:`~hp_plugins.kit.local_attention.local_attention_core`; sinks add
    ``a`` parameters (one logit per head, split over TP with the heads).

    q and k are rotated before the core where the layer has a rotary position
    embedding (:attr:`GQAFields.partial_rotary_factor`): ``a + g`` heads per
    token over TP, before eager attention repeats k (torchtitan
    ``apply_rotary_emb``; transformers ``apply_rotary_pos_emb``; Megatron-Core
    ``SelfAttention.forward``), priced as elementwise work
    (:meth:`LayerBuilder.rotary_embedding
    <hp_plugins.kit.builder.LayerBuilder.rotary_embedding>`).
    """
    x, act, t = b.x, b.act, b.x.tp
    T, h, d, a, g = x.tokens, c.hidden_size, c.head_width, c.num_attention_heads, c.num_key_value_heads
    qkv = (a + 2 * g) * d
    # The key/value heads the attention's matmuls save: repeated to all a under eager.
    kv = a if x.attention == "eager" else g
    # What a fused kernel keeps of q, k, v and its output, which an FP8-attention recipe keeps in FP8
    # (ActivationTerm.attention_saved); under all-to-all CP the kernel's output is attn_out_a2a, so the
    # output projection's input is not the kernel's and stays unmarked.
    fused = "qkv" if x.attention != "eager" else None
    kernel_out = "out" if fused and not (x.cp > 1 and x.cp_kind == "a2a") else None
    # Megatron-Core's output projection keeps its bf16 input under a non-delayed recipe (the trait's source).
    proj_original = "linear_proj_original_input" in x.traits
    b.pre_norm("attn", c.norm, c.hidden_dropout)
    b.param("qkv_proj", h * qkv + qkv * c.attention_bias, True, matrices=((1, qkv // t, h),))
    b.param("o_proj", a * d * h, True, matrices=((1, h, a * d // t),))
    b.param("attn_replicated", h * c.attention_out_bias + 2 * d * (c.qk_norm and c.qk_norm_weight), False)
    if c.attention_sinks:
        b.param("attn_sinks", a, True)
    if c.qk_norm:
        # Megatron-Core's layernorm module recomputes no QK-norm (q_layernorm, k_layernorm: transformer_layer.py at
        # NVIDIA/Megatron-LM@d98e8a6 checkpoints input_layernorm and pre_mlp_layernorm only): kept there.
        qk_switch = b.norm_switch()
        b.keep("qk_norm_in", T * (a + g) * d * act // t, None, True)
        # Per-head RMSNorms over d: (a + g) / t rows per token (fp32_norm_copy trait).
        b.keep("qk_norm_fp32", fp32_norm_bytes(T * (a + g) // t, d, head_norm(c.norm), x.traits,
                                                     c.qk_norm_weight), qk_switch, True)
        b.keep("q_k", T * (a + kv) * d * act // t, qk_switch, True, attention_saved=fused)
    else:
        b.keep("q_k", T * (a + kv) * d * act // t, None, True, attention_saved=fused)
    # Phi-3's slices keep the fused output alive through v; torchtitan's contiguous copies keep what separate
    # projections keep (GQAFields.fused_qkv_contiguous).
    sliced = c.fused_qkv and not c.fused_qkv_contiguous
    if sliced and fused:
        # v is a view of the fused projection's output, which a flash kernel keeps whole (it reads v in place:
        # measured with the CPU sdpa flash kernel; flash-attn's save_for_backward keeps its v argument): q's and
        # k's slices besides v (the roped q and k are new tensors). transformers Phi3Attention.forward slices
        # qkv_proj's output. Under FP8 attention Transformer Engine's FusedAttnFunc keeps its quantized q, k and v
        # instead (backends.py at NVIDIA/TransformerEngine d0067d0 lines 1579-1591; utils.py combine_and_quantize,
        # line 3014, makes new tensors) and nothing else keeps this output (qkv_proj keeps its input, the rotary
        # embedding its cos and sin, the slices and views nothing), so it is freed and v kept quantized: as MLA's
        # kv_up_out, "qkv_view" with v's bytes (hp_plugins/kit/mla.py).
        b.keep("qkv_fused_out", T * (a + g + kv) * d * act // t, None, True, attention_saved="qkv_view",
               attention_view_bytes=T * kv * d * act // t)
    else:
        b.keep("v", T * kv * d * act // t, None, True, attention_saved=fused)
    if sliced and x.attention == "eager" and g == a:
        # Eager attention keeps v itself when no head is repeated (repeat_kv returns v; with g < a it copies), so
        # q's and k's slices of the fused output stay alive with it; measured by the torch census
        # (tests/plugins/test_census_local.py, test_phi3_fused_projections).
        b.keep("qkv_fused_slices", T * (a + g) * d * act // t, None, True)
    share, ops = 1.0, SOFTMAX_OPS
    softmax = act if c.softmax_in_compute_dtype else None
    if c.local:
        share = local_attention_core(b, a, d, d, c.attention_dropout, window=c.sliding_window,
                                     chunk=c.attention_chunk_size, softcap=c.attn_logit_softcapping,
                                     sinks=c.attention_sinks, softmax_bytes=softmax)
        ops += SOFTCAP_OPS if c.attn_logit_softcapping is not None else 0
    else:
        b.attention_core(a, d, d, c.attention_dropout, softmax)
    # The output projection's input; a flash kernel keeps it too, as its output.
    b.keep("attn_out", T * a * d * act // t, None, True, "shared" if x.attention != "eager" else "owned",
           attention_saved=kernel_out, original_input=proj_original)
    if x.attention != "eager":
        # Flash backward: dq, dk, dv and its fp32 row statistics.
        b.block_grads.append(T * qkv * act // t + T * (a // t) * x.precision.lse_bytes)
    if c.rotary_width:  # q and k rotated before the core: torchtitan apply_rotary_emb, transformers apply_rotary_pos_emb
        b.rotary_embedding((a + g) // t, c.rotary_width, d)
    # Megatron-Core's self_attention.linear_qkv (a layernorm-fused column-parallel linear: its input is the norm's
    # output, gathered under SP) and linear_proj (row-parallel: under SP its output gradient is gathered in backward).
    # Megatron-Core's linear_qkv and linear_proj, tp_comm_buffer_name 'qkv' and 'proj' (transformer/attention.py lines
    # 1701 and 422 at NVIDIA/Megatron-LM@d98e8a6): userbuffers GEMMs under TP communication overlap.
    b.linear(T, h, qkv // t, module="attention_qkv", ub="qkv")
    b.linear(T, a * d // t, h, original_input=proj_original, module="attention_proj", ub="proj")
    b.linear_module("attention_qkv", ("qkv_proj",), ("attn_norm_out", "attn_gathered"), (1, 0))
    b.linear_module("attention_proj", ("o_proj",), ("attn_out",), (0, 1))
    # torchtitan's Attention.forward: wq, wk, wv, then wo (torchtitan/models/llama3/model.py); a fused projection is
    # one matmul, wqkv then wo (FusedQKVLinear.forward: self.wqkv(x), torchtitan/models/common/attention.py at
    # pytorch/torchtitan@bcc09297a).
    if c.fused_qkv:
        b.matmuls_in_order += [2 * T * h * qkv // t, 2 * T * a * d * h // t]
    else:
        b.matmuls_in_order += [2 * T * h * a * d // t, 2 * T * h * g * d // t, 2 * T * h * g * d // t, 2 * T * a * d * h // t]
    b.tp_blocks += 1
    mask = local_mask(x.seq_len, c.sliding_window, c.attention_chunk_size) if x.attention != "eager" else None
    b.attention_shape = AttentionShape(heads=a, kv_heads=g, head_dim=d, score_share=share, score_ops=ops, local_mask=mask)


def validate_gqa(c: GQAFields, x: LayerContext) -> None:
    check_divides(x.tp, c.num_attention_heads, "$.parallel.tp", "tp", "num_attention_heads")
    check_divides(x.tp, c.num_key_value_heads, "$.parallel.tp", "tp", "num_key_value_heads")
