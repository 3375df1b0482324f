"""The Gated DeltaNet token mixer (Qwen3-Next's linear attention): its config fields, its block and its layout check.

A Gated DeltaNet layer replaces softmax attention with the gated delta rule
(Yang, Kautz and Hatamizadeh 2024, "Gated Delta Networks: Improving Mamba2 with
Delta Rule", arXiv:2412.06464, Eq. 10): per value head a ``d_k x d_v`` state
``S_t = S_{t-1} (a_t (I - b_t k_t k_t^T)) + b_t v_t k_t^T`` read by the query,
``o_t = S_t q_t``. Training runs it chunk by chunk (ibid. Section 3.3, the WY
representation), as flash-linear-attention's ``chunk_gated_delta_rule`` does.

The built-in kinds ``gdn`` (the mixer and a dense SwiGLU MLP) and ``gdn_moe``
(the mixer and a mixture of experts with a gated shared expert, every
Qwen3-Next linear-attention layer) are this block followed by the kit's ``mlp``
or ``moe`` (:mod:`hp_plugins.kinds.gdn`). The block began as the worked
third-party example ``examples/hp-gated-deltanet``, which keeps its own copy and
its own kind names (``gated_deltanet``, ``gated_deltanet_moe``), so that both
can be installed together.

**Parameters** equal Hugging Face transformers' ``Qwen3NextGatedDeltaNet``
(``src/transformers/models/qwen3_next/modeling_qwen3_next.py``, ``__init__``),
with ``K = n_k d_k`` (``key_dim``), ``V = n_v d_v`` (``value_dim``) and ``w`` the
conv kernel:

==============  ======================  =========================================
tensor          elements                transformers
==============  ======================  =========================================
in_proj_qkvz    h (2K + 2V)             ``nn.Linear(h, key_dim*2 + value_dim*2)``
in_proj_ba      h 2 n_v                 ``nn.Linear(h, num_v_heads*2)``
conv1d          (2K + V) w              depthwise ``nn.Conv1d``, no bias
dt_bias         n_v                     ``nn.Parameter(torch.ones(num_v_heads))``
A_log           n_v                     ``nn.Parameter(torch.log(A))``
norm            d_v                     ``Qwen3NextRMSNormGated(head_v_dim)``
out_proj        V h                     ``nn.Linear(value_dim, h)``
==============  ======================  =========================================

plus the layer's two RMSNorms (``h`` each, ``Qwen3NextDecoderLayer``). Tensor
parallelism splits them as Megatron-Core's ``GatedDeltaNet``
(``megatron/core/ssm/gated_delta_net.py``) does: ``in_proj`` column-parallel,
``conv1d`` over ``conv_dim / tp`` channels, ``dt_bias`` and ``A_log`` over the
value heads, ``out_proj`` row-parallel; ``out_norm`` (``d_v`` wide) replicated.

**Kept activations** under ``flash`` (every setting but ``eager``) follow the training path of Megatron-Core's ``GatedDeltaNet.forward``
with its kernels: causal-conv1d's ``CausalConv1dFn`` (saves its input ``x``;
the SiLU is fused and recomputed in backward), flash-linear-attention's
``l2norm`` (``L2NormFunction`` saves its output and an fp32 ``rstd`` per row) and
``chunk_gated_delta_rule`` (``ChunkGatedDeltaRuleFunction`` saves q, k, v, the
fp32 chunk-local cumulative decay ``g``, ``beta`` and the inverted WY matrix
``A`` of shape ``[B, T, H, 64]`` in the compute dtype). Per op, for ``T`` tokens
of a micro-batch, ``t`` tensor parallel, ``a`` the activation width in bytes
(2 for bf16), fp32 statistics 4 bytes:

=================  =======================  ========  =============================================
op                 bytes                    switch    kept by
=================  =======================  ========  =============================================
attn_norm_in/out   a T h / sp each          --/normOp the pre-norm and in_proj (as the built-ins)
attn_gathered      a T h (1 - 1/t)          gather    in_proj's SP all-gathered input (as the built-ins)
conv_in            a T (2K + V) / t         --        ``CausalConv1dFn`` (x, made contiguous)
qk_l2norm_out      a T 2K / t               attUp     ``L2NormFunction`` (y of q and of k)
qk_l2norm_rstd     4 T 2 n_k / t            attUp     ``L2NormFunction`` (rstd)
qk_heads           a T 2 n_v d_k / t        attUp     the kernel's q, k after ``repeat_interleave``
                                                      to the value heads (only when ``n_v > n_k``)
v_heads            a T V / t                attUp     the kernel's v (``value.contiguous()``)
decay_in           4 T n_v / t              --        ``F.softplus`` (its fp32 input ``a + dt_bias``)
decay_softplus     4 T n_v / t              --        the product with ``-exp(A_log)`` (softplus out)
decay_cumsum       4 T n_v / t              --        the kernel's ``g`` (``chunk_local_cumsum``)
beta               a T n_v / t              --        the kernel's ``beta`` (``b.sigmoid()``)
wy_inverse         a T n_v 64 / t           --        the kernel's ``A`` (``solve_tril``)
core_out           a T V / t                --        the gated norm (the kernel's output)
out_gate           a T V / t                --        the gated norm (the gate ``z``)
out_norm_rstd      4 T n_v / t              --        the gated norm (fp32 ``rstd``)
gated_out          a T V / t                --        ``out_proj`` (its input)
=================  =======================  ========  =============================================

``attUp`` drops the per-head tensors rebuilt from the kept conv input by running
the conv, its SiLU, the L2 norms and the repeat again -- as it drops MLA's
up-projected heads rebuilt from the kept latents. The gated norm is one fused
function (Megatron-Core ``_apply_gated_norm`` under ``jit_fuser``), taken to save
its two inputs, its statistics and its output. No trainer ships a selective
policy for these layers (Megatron-Core's ``core_attn`` does not cover them), so
the kinds' ``selective`` set is empty.

**Backward working set** of the mixer: ``chunk_gated_delta_rule_bwd`` recomputes
the chunk states ``h`` and builds their gradients ``dh``, both
``[b, ceil(s / 64), n_v / t, d_k, d_v]`` in the compute dtype
(``fla/ops/common/chunk_delta_h.py``: ``k.new_empty(B, NT, HV, K, V)``), and
holds, when its last step (``prepare_wy_repr_bwd``) runs, the recomputed ``w``,
``u`` and ``v_new``, the output gradient ``do`` and the gradients ``dv``, ``dq``,
``dk``, ``dw``, ``dk2`` and the new ``dv`` (five key-wide and five value-wide
per-head tensors), ``dg`` and ``dg2`` in fp32 and ``db``.

**Forward FLOPs** of the chunked delta rule with chunk ``C = 64``, per value head
and chunk (2 per multiply-add, full ``C x C`` tiles as the kernels compute them):
``K K^T`` (``2 C^2 d_k``), ``W = A (b K exp g)`` (``2 C^2 d_k``), ``U = A (b V)``
(``2 C^2 d_v``), the state's ``W S^T`` and ``K^T V_new`` (``2 C d_k d_v`` each), the
output's ``Q S`` (``2 C d_k d_v``), ``Q K^T`` (``2 C^2 d_k``) and its product with
``V_new`` (``2 C^2 d_v``), and the inverse of the unit lower-triangular ``I + A``
by forward substitution (``C (C-1) (C-2) / 6`` multiply-adds). The projections
are matmul FLOPs; the depthwise conv, SiLU, L2 norms, gates and gated norm are
elementwise.

**The reference path** (``eager``): transformers' ``Qwen3NextGatedDeltaNet``
without flash-linear-attention and causal-conv1d runs ``causal_conv1d_fn``'s
torch fallback, ``torch_chunk_gated_delta_rule`` and ``Qwen3NextRMSNormGated``
unfused (transformers 5.24 ``modeling_qwen3_next.py``; every term a tensor
autograd saves there, measured by the torch census). It repeats q and k to the
value heads, upcasts q, k, v, ``beta`` and the decay to fp32, pads the sequence
to whole chunks (``c = ceil(s / 64)``, ``T_p = c 64`` tokens) and keeps, per rank
(``n_v``, ``C`` conv channels divided by ``t``; ``T`` tokens):

=================  ======================================  =============================================
op                 bytes                                   kept by
=================  ======================================  =============================================
conv_in            a T C                                   the conv (its input)
conv_out           a (s + w - 1) C per sequence            SiLU (the conv's padded output)
qk_fp32            4 T 2 n_v d_k                           ``l2norm`` (the repeated fp32 q and k)
qk_l2norm_rstd     4 T 2 n_v                               ``l2norm`` (its inverse norms)
qkv_padded         4 T_p n_v (2 d_k + d_v)                 the padded fp32 q, k and v
beta               a T n_v + 4 T_p n_v                     sigmoid output, the padded fp32 beta
decay              4 (2 T + 3 T_p + c) n_v                 softplus in and out, the decays' exps
k_beta             4 T_p n_v d_k                           ``k_beta @ key^T``
chunk_tiles        5 * 4 T_p n_v 64                        ``k_beta key^T``, ``q key^T``, the pairwise
                                                           decay, the UT system, the intra-chunk attention
ut_solutions       4 T_p n_v (d_k + d_v)                   ``solve_triangular``'s two outputs
decayed_qk         4 T_p n_v 2 d_k                         q and k times their decays
v_new              4 T_p n_v d_v                           each chunk's corrected values
chunk_states       4 c n_v d_k d_v per sequence            the recurrent state entering each chunk
gated_norm         T n_v (18 d_v + 4)                      fp32 input, gate and SiLU; bf16 normalised,
                                                           weighted and ``out_proj`` input; fp32 root
=================  ======================================  =============================================

Left out: the chunk mask (``64 x 64`` bool) and ``-exp(A_log)``, a few bytes per
layer. None of these terms has a switch; the backward working set is taken as the
``flash`` path's (not measured). Real training runs the kernels (``flash``);
``eager`` is the path a transformers run without flash-linear-attention takes,
which the torch census measures.

Known limitations: context parallelism is refused (Megatron-Core's
``GatedDeltaNet`` had none when this was written: "TODO: support CP");
the decay's ``-exp(A_log)`` and parameter-sized temporaries are left out.
"""

from __future__ import annotations

import math

import attrs

from hp_core.errors import ConfigError
from hp_core.costs import LayerContext
from hp_core.validators import one_of, positive_int
from hp_plugins.kit.builder import LayerBuilder
from hp_plugins.kit.feedforward import ACT_OPS
from hp_plugins.kit.norms import NORM_OPS_PER_ELEMENT, NORMS
from hp_plugins.kit.shapes import check_divides

__all__ = [
    "GDN_CHUNK",
    "GDN_SWITCHES",
    "GatedDeltaNetFields",
    "gated_deltanet_mixer",
    "gdn_chunk_flops",
    "validate_gated_deltanet_mixer",
]

# The chunk size of flash-linear-attention's chunked kernels (fla/ops/gated_delta_rule/chunk.py:
# chunk_local_cumsum(g, chunk_size=64); the WY matrix A is [B, T, H, 64]).
GDN_CHUNK = 64
# Statistics and the decay are computed in fp32 (Megatron-Core: ``alpha.float()``; fla: fp32 rstd and cumsum).
_FP32_BYTES = 4
# The recompute switches these layers have: the pre-norms' outputs, the SP gather,
# the MLP activation, and the mixer's per-head tensors rebuilt from the kept conv input.
GDN_SWITCHES = ("normOp", "gather", "ffAct", "attUp")
# Elementwise operations per element, counted from the definitions: an L2 norm squares,
# sums and scales (3; RMSNorm also scales by its weight); the decay and beta gates per
# value head: softplus (exp, add, log), the dt_bias add, the product with -exp(A_log) and
# the sigmoid of beta (negate, exp, add, divide): 3 + 1 + 1 + 4 = 9; the gated norm's
# product with the activated gate: 1.
_L2NORM_OPS = 3
_GATE_OPS_PER_HEAD = 9
_PRODUCT_OPS = 1


@attrs.frozen(kw_only=True, slots=False)
class GatedDeltaNetFields:
    """The Gated DeltaNet token mixer (Hugging Face ``Qwen3NextConfig`` names).

    Attributes:
        hidden_size: Model width ``h``.
        linear_num_key_heads: Query/key heads ``n_k``.
        linear_num_value_heads: Value heads ``n_v``, a multiple of ``n_k`` (each
            key head serves ``n_v / n_k`` value heads).
        linear_key_head_dim: Query/key head width ``d_k``.
        linear_value_head_dim: Value head width ``d_v``.
        linear_conv_kernel_dim: The depthwise causal convolution's width ``w``.
        norm: The layer's two norms' type (:data:`~hp_plugins.kit.NORMS`;
            Qwen3-Next's zero-centred ``Qwen3NextRMSNorm`` scales by
            ``1 + weight.float()``: ``rmsnorm_fp32_weight``).
    """

    hidden_size: int = attrs.field(validator=positive_int)
    linear_num_key_heads: int = attrs.field(validator=positive_int)
    linear_num_value_heads: int = attrs.field(validator=positive_int)
    linear_key_head_dim: int = attrs.field(validator=positive_int)
    linear_value_head_dim: int = attrs.field(validator=positive_int)
    linear_conv_kernel_dim: int = attrs.field(default=4, validator=positive_int)
    norm: str = attrs.field(default="rmsnorm", validator=one_of(NORMS))

    def __attrs_post_init__(self) -> None:
        self.check_gated_deltanet()

    def check_gated_deltanet(self) -> None:
        """Refuse value heads that are not a multiple of the key heads; a config combining these fields with
        others calls it from its own ``__attrs_post_init__``."""
        # transformers' fix_query_key_value_ordering groups n_v / n_k value heads per key head.
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError(
                f"linear_num_value_heads={self.linear_num_value_heads} must be a multiple of "
                f"linear_num_key_heads={self.linear_num_key_heads}"
            )

    @property
    def key_dim(self) -> int:
        """``K = n_k d_k``: the width of q and of k."""
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def value_dim(self) -> int:
        """``V = n_v d_v``: the width of v, of the gate z and of the output."""
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        """``2K + V``: the channels of the causal convolution (q, k and v)."""
        return 2 * self.key_dim + self.value_dim


def gdn_chunk_flops(c: GatedDeltaNetFields) -> int:
    """Forward FLOPs of one chunk of one value head of the chunked gated delta rule (module docstring)."""
    C, dk, dv = GDN_CHUNK, c.linear_key_head_dim, c.linear_value_head_dim
    # kkt, W and Q K^T (key-wide); U and the intra-chunk output (value-wide);
    # the state's W S^T, K^T V_new and the output's Q S; the triangular inverse.
    return 3 * 2 * C * C * dk + 2 * 2 * C * C * dv + 3 * 2 * C * dk * dv + 2 * (C * (C - 1) * (C - 2) // 6)


def _reference_terms(b: LayerBuilder, c: GatedDeltaNetFields) -> None:
    """transformers' reference PyTorch path's kept tensors on one rank (module docstring's second table)."""
    x, act, t = b.x, b.act, b.x.tp
    mb, s, C = x.micro_batch_size, x.seq_len // x.cp, GDN_CHUNK
    chunks = math.ceil(s / C)
    T, Tp = mb * s, mb * chunks * C
    nv, dk, dv = c.linear_num_value_heads // t, c.linear_key_head_dim, c.linear_value_head_dim
    conv = c.conv_dim // t
    f = _FP32_BYTES
    b.keep("conv_in", T * conv * act, None, True)
    b.keep("conv_out", mb * (s + c.linear_conv_kernel_dim - 1) * conv * act, None, True)
    b.keep("qk_fp32", T * 2 * nv * dk * f, None, True)
    b.keep("qk_l2norm_rstd", T * 2 * nv * f, None, True)
    b.keep("qkv_padded", Tp * nv * (2 * dk + dv) * f, None, True)
    b.keep("beta", T * nv * act + Tp * nv * f, None, True)
    b.keep("decay", 2 * T * nv * f + 3 * Tp * nv * f + mb * chunks * nv * f, None, True)
    b.keep("k_beta", Tp * nv * dk * f, None, True)
    b.keep("chunk_tiles", 5 * Tp * nv * C * f, None, True)
    b.keep("ut_solutions", Tp * nv * (dk + dv) * f, None, True)
    b.keep("decayed_qk", Tp * nv * 2 * dk * f, None, True)
    b.keep("v_new", Tp * nv * dv * f, None, True)
    b.keep("chunk_states", mb * chunks * nv * dk * dv * f, None, True)
    b.keep("gated_norm", T * nv * (18 * dv + f), None, True)


def gated_deltanet_mixer(b: LayerBuilder, c: GatedDeltaNetFields, act_name: str) -> None:
    """The pre-norm and the Gated DeltaNet token mixer (module docstring: every term and its source).

    Args:
        b: The layer being built.
        c: The mixer's shape.
        act_name: The activation of the conv and of the output gate
            (``hidden_act``: SiLU in Qwen3-Next).
    """
    x, act, t = b.x, b.act, b.x.tp
    T, h = x.tokens, c.hidden_size
    nk, nv, dk, dv = c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim
    K, V, C = c.key_dim, c.value_dim, c.conv_dim
    b.pre_norm("attn", c.norm, 0.0)
    b.param("in_proj_qkvz", h * (2 * K + 2 * V), True, matrices=((1, (2 * K + 2 * V) // t, h),))
    b.param("in_proj_ba", h * 2 * nv, True, matrices=((1, 2 * nv // t, h),))
    b.param("conv1d", C * c.linear_conv_kernel_dim, True)
    b.param("dt_bias", nv, True)
    b.param("A_log", nv, True)
    b.param("norm", dv, False)
    b.param("out_proj", V * h, True, matrices=((1, h, V // t),))

    if x.attention == "eager":
        _reference_terms(b, c)
    else:
        b.keep("conv_in", T * C * act // t, None, True)
        b.keep("qk_l2norm_out", T * 2 * K * act // t, "attUp", True)
        b.keep("qk_l2norm_rstd", T * 2 * nk * _FP32_BYTES // t, "attUp", True)
        if nv > nk:
            b.keep("qk_heads", T * 2 * nv * dk * act // t, "attUp", True)
        b.keep("v_heads", T * V * act // t, "attUp", True)
        b.keep("decay_in", T * nv * _FP32_BYTES // t, None, True)
        b.keep("decay_softplus", T * nv * _FP32_BYTES // t, None, True)
        b.keep("decay_cumsum", T * nv * _FP32_BYTES // t, None, True)
        b.keep("beta", T * nv * act // t, None, True)
        b.keep("wy_inverse", T * nv * GDN_CHUNK * act // t, None, True)
        b.keep("core_out", T * V * act // t, None, True)
        b.keep("out_gate", T * V * act // t, None, True)
        b.keep("out_norm_rstd", T * nv * _FP32_BYTES // t, None, True)
        b.keep("gated_out", T * V * act // t, None, True)

    # Backward: the chunk states and their gradients, and the per-token tensors alive
    # at the kernel's last backward step (module docstring).
    chunks = x.micro_batch_size * math.ceil(x.seq_len // x.cp / GDN_CHUNK)
    states = 2 * chunks * (nv // t) * dk * dv * act
    per_head = 5 * (dk + dv) * act + 2 * _FP32_BYTES + act
    b.block_grads.append(states + T * (nv // t) * per_head)

    # Megatron-Core's one in_proj (qkvzba) and out_proj, tp_comm_buffer_name 'fc1' and 'fc2'
    # (ssm/gated_delta_net/common.py lines 221 and 284 at NVIDIA/Megatron-LM@d98e8a6): the fc1 and fc2 userbuffers
    # under TP communication overlap.
    b.linear(T, h, (2 * K + 2 * V + 2 * nv) // t, ub="fc1")
    b.linear(T, V // t, h, ub="fc2")
    # A TP block as attention is: column-parallel in_proj, row-parallel out_proj, so its input is
    # gathered and its output reduced over TP (the kit prices the collectives: hp_plugins.kit.work).
    b.tp_blocks += 1
    b.attention += chunks * (nv // t) * gdn_chunk_flops(c)
    b.elementwise += (
        (2 * c.linear_conv_kernel_dim + ACT_OPS[act_name]) * T * C // t  # depthwise conv and its SiLU
        + _L2NORM_OPS * T * 2 * K // t
        + _GATE_OPS_PER_HEAD * T * nv // t
        + (NORM_OPS_PER_ELEMENT["rmsnorm"] + ACT_OPS[act_name] + _PRODUCT_OPS) * T * V // t
    )


def validate_gated_deltanet_mixer(c: GatedDeltaNetFields, x: LayerContext) -> None:
    """Refuse a layout the mixer cannot run: TP must split the key and value heads evenly; no CP."""
    check_divides(x.tp, c.linear_num_key_heads, "$.parallel.tp", "tp", "linear_num_key_heads")
    check_divides(x.tp, c.linear_num_value_heads, "$.parallel.tp", "tp", "linear_num_value_heads")
    if x.cp > 1:
        raise ConfigError(
            "$.parallel.cp",
            f"cp={x.cp}: Gated DeltaNet layers do not run under context parallelism (the recurrent state would "
            "pass between ranks; Megatron-Core's GatedDeltaNet has no context parallelism); use cp=1",
        )
