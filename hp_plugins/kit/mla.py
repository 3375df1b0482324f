"""Multi-head latent attention (DeepSeek-V2/V3): its config fields, its block and its layout check."""

from __future__ import annotations

import attrs

from hp_core.costs import LayerContext
from hp_core.validators import one_of, positive_int, probability
from hp_plugins.kit.builder import LayerBuilder
from hp_plugins.kit.work import AttentionShape
from hp_plugins.kit.norms import NORMS, fp32_norm_bytes, head_norm
from hp_plugins.kit.shapes import check_divides

__all__ = ["MLAFields", "mla_attention", "validate_mla"]


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
    norm: str = attrs.field(default="rmsnorm", validator=one_of(NORMS))
    attention_dropout: float = attrs.field(default=0.0, validator=probability)
    hidden_dropout: float = attrs.field(default=0.0, validator=probability)


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

    Under flash attention the fused kernel's q, k, v and output are marked
    (:attr:`ActivationTerm.attention_saved <hp_core.costs.ActivationTerm.attention_saved>`),
    so an FP8-attention recipe prices them (docs/precision.md, "FP8 attention"):
    without the ``mla_contiguous_qkv`` trait v is a view of ``kv_b_proj``'s output,
    kept whole in bf16 and freed under FP8 attention for the kernel's quantized v.
    """
    x, act, t = b.x, b.act, b.x.tp
    T, h, a = x.tokens, c.hidden_size, c.num_attention_heads
    qk = c.qk_nope_head_dim + c.qk_rope_head_dim
    # Megatron-Core's MLA spec builds the input norm as a module of its own (input_layernorm a TENorm, read by the
    # q and kv down projections; gpt_layer_specs.py at NVIDIA/Megatron-LM@d98e8a6, unless mla_down_proj_fusion),
    # which its layernorm module recomputes; the latent norms are fused into the up projections
    # (TELayerNormColumnParallelLinear under qk_layernorm, q_layernorm and kv_layernorm IdentityOp), recomputed by no
    # norm module: their outputs stay under megatron_layernorm_recompute (LayerBuilder.norm_switch).
    b.pre_norm("attn", c.norm, c.hidden_dropout, own_module=True)
    latent = b.norm_switch()
    if c.q_lora_rank is not None:
        r = c.q_lora_rank
        b.param("q_a_proj", h * r + r * c.attention_bias, False, matrices=((1, r, h),))
        b.param("q_a_layernorm", r, False)
        b.param("q_b_proj", r * a * qk, True, matrices=((1, a * qk // t, r),))
        b.keep("q_latent", T * r * act)
        b.keep("q_latent_norm_out", T * r * act, latent, gemm_input="owned")
        b.keep("q_latent_norm_fp32", fp32_norm_bytes(T, r, head_norm(c.norm), x.traits), latent)
        # linear_q_down_proj, tp_comm_buffer_name 'q_down_proj' (a TELinear: no userbuffers, LayerBuilder.linear ub).
        b.linear(T, h, r, ub="q_down_proj")
        b.linear(T, r, a * qk // t)
    else:
        b.param("q_proj", h * a * qk, True, matrices=((1, a * qk // t, h),))
        b.linear(T, h, a * qk // t, ub="q_proj")  # linear_q_proj, a TEColumnParallelLinear named 'q_proj'
    kv_a = c.kv_lora_rank + c.qk_rope_head_dim
    b.param("kv_a_proj_with_mqa", h * kv_a + kv_a * c.attention_bias, False, matrices=((1, kv_a, h),))
    b.param("kv_a_layernorm", c.kv_lora_rank, False)
    b.param("kv_b_proj", c.kv_lora_rank * a * (c.qk_nope_head_dim + c.v_head_dim), True,
            matrices=((1, a * (c.qk_nope_head_dim + c.v_head_dim) // t, c.kv_lora_rank),))
    b.param("o_proj", a * c.v_head_dim * h, True, matrices=((1, h, a * c.v_head_dim // t),))
    b.keep("kv_latent", T * kv_a * act)
    b.keep("kv_latent_norm_out", T * c.kv_lora_rank * act, latent, gemm_input="owned")
    b.keep("kv_latent_norm_fp32", fp32_norm_bytes(T, c.kv_lora_rank, head_norm(c.norm), x.traits), latent)
    # What a fused kernel keeps of q, k, v and its output, which an FP8-attention recipe keeps in FP8
    # (ActivationTerm.attention_saved), marked as the GQA kit marks them (hp_plugins/kit/attention.py; under
    # all-to-all CP the kernel's output is attn_out_a2a and the output projection's input stays unmarked).
    # q and k are new tensors, the no-rope and rotary parts concatenated (Megatron-Core multi_latent_attention.py
    # at NVIDIA/Megatron-LM core_v0.16.0 lines 822-834, or fused_apply_mla_rope_for_kv's own outputs; torchtitan
    # deepseek_v3/model/model.py at 0cfbd0b3 lines 211 and 226-228).
    fused = "qkv" if x.attention != "eager" else None
    kernel_out = "out" if fused and not (x.cp > 1 and x.cp_kind == "a2a") else None
    # Megatron-Core's output projection keeps its bf16 input under a non-delayed recipe (the trait's source).
    proj_original = "linear_proj_original_input" in x.traits
    b.keep("q_heads", T * a * qk * act // t, "attUp", True, attention_saved=fused)
    b.keep("k_heads", T * a * qk * act // t, "attUp", True, attention_saved=fused)
    v_bytes = T * a * c.v_head_dim * act // t
    if "mla_contiguous_qkv" in x.traits:  # Megatron-Core: value.contiguous() (line 834), a tensor of its own
        b.keep("v_heads", v_bytes, "attUp", True, attention_saved=fused)
    else:
        # v is a view of kv_b_proj's output (torchtitan line 225, transformers DeepseekV3Attention), whose storage
        # (k_nope and v) it keeps alive. Under FP8 attention Transformer Engine's FusedAttnFunc saves its quantized
        # copies of q, k and v instead (pytorch/attention/dot_product_attention/backends.py at NVIDIA/TransformerEngine
        # d0067d0 lines 1579-1591; utils.py combine_and_quantize makes new tensors), and nothing else keeps this one
        # (kv_b_proj keeps its input for its weight gradient, the split and the concatenation no tensor): it is freed
        # and v kept quantized ("qkv_view", the view's bytes v_bytes).
        b.keep("kv_up_out", T * a * (c.qk_nope_head_dim + c.v_head_dim) * act // t, "attUp", True,
               attention_saved="qkv_view" if fused else None, attention_view_bytes=v_bytes if fused else 0)
    b.attention_core(a, qk, c.v_head_dim, c.attention_dropout)
    # The output projection's input; a flash kernel keeps it too, as its output.
    b.keep("attn_out", T * a * c.v_head_dim * act // t, None, True, "shared" if x.attention != "eager" else "owned",
           attention_saved=kernel_out, original_input=proj_original)
    if x.attention != "eager":
        b.block_grads.append(T * a * (2 * qk + c.v_head_dim) * act // t + T * (a // t) * x.precision.lse_bytes)
    # Megatron-Core's MLA linears (multi_latent_attention.py at NVIDIA/Megatron-LM@d98e8a6): linear_proj, built
    # first, 'proj' (line 230); linear_q_proj 'q_proj' (520) or linear_q_down_proj 'q_down_proj' (546) and
    # linear_kv_down_proj 'kv_down_proj' (593), TELinear or TEColumnParallelLinear in the TE spec
    # (gpt_layer_specs.py backend.linear(), column_parallel_linear()), whose constructor turns tp_comm_overlap off
    # for a name it runs no userbuffers for (LayerWork.refused_userbuffers). The up projections (q_up_proj,
    # kv_up_proj), built after kv_down_proj, are not marked.
    b.linear(T, h, kv_a, shares_input=True, ub="kv_down_proj")  # the attention norm's output, as q's projection
    b.linear(T, c.kv_lora_rank, a * (c.qk_nope_head_dim + c.v_head_dim) // t)
    b.linear(T, a * c.v_head_dim // t, h, original_input=proj_original, ub="proj")
    # Forward order as torchtitan's DeepSeek-V3 Attention calls them (torchtitan/models/deepseek_v3/model/model.py
    # at 0cfbd0b3: wq or wq_a, wq_b; wkv_a; wkv_b; wo), for its op-level SAC (LayerWork.alternate_matmul_flops).
    q_path = [2 * T * h * c.q_lora_rank, 2 * T * c.q_lora_rank * a * qk // t] if c.q_lora_rank is not None else [2 * T * h * a * qk // t]
    b.matmuls_in_order += q_path + [2 * T * h * kv_a, 2 * T * c.kv_lora_rank * a * (c.qk_nope_head_dim + c.v_head_dim) // t,
                                    2 * T * a * c.v_head_dim // t * h]
    b.tp_blocks += 1
    b.attention_shape = AttentionShape(heads=a, qk_nope=c.qk_nope_head_dim, qk_rope=c.qk_rope_head_dim,
                                       v_head=c.v_head_dim, kv_lora_rank=c.kv_lora_rank)


def validate_mla(c: MLAFields, x: LayerContext) -> None:
    check_divides(x.tp, c.num_attention_heads, "$.parallel.tp", "tp", "num_attention_heads")
