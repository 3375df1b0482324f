"""The Mamba-2 (SSD) token mixer: its config fields, its block and its layout check.

Mamba-2 (Dao and Gu 2024, "Transformers are SSMs: Generalized Models and
Efficient Algorithms Through Structured State Space Duality",
arXiv:2405.21060) replaces attention by a selective state-space model whose
scalar-times-identity ``A`` lets training run the *state space dual* (SSD)
chunk by chunk: quadratic, attention-like products inside a chunk of ``L``
tokens and a linear recurrence over chunk states between chunks (ibid.
Section 6, Listing 1).

**Parameters** equal Hugging Face transformers' ``Mamba2Mixer`` and
``NemotronHMamba2Mixer`` (``modeling_mamba2.py`` / ``modeling_nemotron_h.py``,
``__init__``), with ``H`` heads of width ``P``, ``I = H P``, ``G`` groups, state
``N``, conv kernel ``w`` and ``C = I + 2 G N`` conv channels:

==========  =======================  ==============================================
tensor      elements                 transformers
==========  =======================  ==============================================
in_proj     h (2I + 2GN + H) (+bias) ``nn.Linear(h, I + C + H)``: z, x, B, C, dt
conv1d      C w (+ C bias)           depthwise ``nn.Conv1d`` over x, B, C
dt_bias     H                        ``nn.Parameter(num_heads)``
A_log       H                        ``nn.Parameter(num_heads)``
D           H                        ``nn.Parameter(num_heads)``
norm        I                        ``MambaRMSNormGated(I, group_size=I / G)``
out_proj    I h (+ h bias)           ``nn.Linear(I, h)``
==========  =======================  ==============================================

plus the block's pre-norm (``h``). Tensor parallelism splits them as
Megatron-Core's ``MambaMixer`` does (``megatron/core/ssm/mamba_mixer.py``):
heads and groups over ``tp`` (``nheads_local_tp``, ``ngroups_local_tp``), so
``in_proj`` is column-parallel, ``conv1d``, ``dt_bias``, ``A_log``, ``D`` and the
gated norm's weight are split over the rank's channels and heads, and
``out_proj`` is row-parallel. The block is one TP block: under sequence
parallelism ``in_proj`` all-gathers its input and ``out_proj`` reduce-scatters its
output (:func:`hp_plugins.kit.tp_collectives`).

**Kept activations** depend on the path, chosen by the run's attention
implementation (``x.attention``):

* ``flash``: Megatron-Core's training path with the mamba_ssm kernels
  (``MambaMixer._ssm_training``: ``mamba_split_conv1d_scan_combined`` without
  the norm, then ``RMSNormGated`` and ``out_proj``). The fused function
  (``mamba_ssm/ops/triton/ssd_combined.py``, ``MambaSplitConv1dScanCombinedFn``)
  saves its input ``zxbcdt`` (the in_proj output, made contiguous) and the scan
  output ``out_x`` before the gate, and recomputes the convolution, the chunk
  states and the gate in backward; the gated norm (``layernorm_gated.py``
  ``LayerNormFn``) saves its input and an fp32 ``rstd`` per group and token;
  ``out_proj`` its input.
* ``eager``: transformers' reference PyTorch path, which it runs where
  mamba_ssm and causal-conv1d are not installed (``causal_conv1d_fn``,
  ``mamba2_chunk_scan``, ``MambaRMSNormGated``: every term below is a tensor
  autograd saves there, measured by the torch census). It upcasts to fp32,
  pads the sequence to whole chunks (``c = ceil(s / L)`` chunks, ``s_p = c L``
  tokens) and keeps per head three ``L x L`` fp32 tiles per chunk (the
  segment-sum decay ``exp(segsum(A))``, ``C B^T`` and their product), copies of
  ``B``, ``C`` and ``x`` for each ``einsum``'s batched matmul, and the chunk
  states. Per rank (``H``, ``G``, ``I``, ``C`` divided by ``t``):

  ==================  ===========================================  ===========================
  op                  bytes per sequence                           what keeps it
  ==================  ===========================================  ===========================
  zxbcdt              a s (2I + 2GN + H)                           the conv (a view of in_proj's output)
  conv_out            a (s + w - 1) C                              SiLU (the conv's padded output)
  dt                  (2a + 8) s H                                 softplus, clamp, the two fp32 dt copies
  x_fp32              4 s I + 4 s_p I                              dt product (``x.float()``), D residual (padded)
  b_chunks            4 s_p H N                                    ``B * decay_states`` (B repeated to H heads)
  einsum_copies       4 s_p (4 H N + 2 I)                          the four einsums' bmm operands
  segsum_tiles        3 * 4 s_p H L                                exp(segsum), C B^T, their product
  decays              8 s_p H                                      exp of the decays in and out of a chunk
  chunk_states        4 (2c + 1) H P N                             the states (with the initial zeros) and their copy
  states_out          4 s_p I                                      ``C states`` (Y_off's factor)
  chunk_decay         4 H (c + 1)^2                                exp(segsum) over chunks
  scan_out            4 s_p I                                      the gated norm (fp32 scan output)
  gate_norm           4 s (4 I + G)                                gate copy, SiLU out, product, normalised, rstd
  out_proj_in         a s I                                        out_proj (its input; quantized under a recipe)
  ==================  ===========================================  ===========================

  Left out: the two bool ``L x L`` causal masks (``2 L^2`` bytes per layer,
  128 KiB at ``L = 256``, whatever the micro-batch) and ``-exp(A_log)``
  (``8 H`` bytes).

**Forward FLOPs** of the chunked SSD (Dao and Gu 2024, Section 6; 2 per
multiply-add, whole ``L x L`` tiles as the kernels compute them), per chunk:
``C B^T`` (``2 L^2 N`` per group under mamba_ssm's ``_bmm_chunk_fwd``, per head
in the reference path, which repeats B and C to the heads), its masked product
with ``x`` (``2 L^2 P`` per head), the chunk state ``B^T x`` (``2 L N P`` per
head), the output from the states ``C h`` (``2 L N P`` per head) and the
inter-chunk recurrence (``2 N P`` per head). The projections are matmul FLOPs;
the depthwise conv, SiLU, dt softplus, D skip and gated norm are elementwise.
The scan's FLOPs are the layer's attention FLOPs; on the ``flash`` path the
layer marks them as an SSD scan (``LayerWork.ssd_scan``), which a device that
states measured SSD rates prices at those (``DeviceEfficiency.ssd_scan_forward``,
docs/time.md) and any other as fused attention.

**Backward working set** (``flash``): the gradient of ``zxbcdt``, the
recomputed convolution output, the fp32 chunk states and their gradients and
the fp32 ``C B^T`` tiles per group, as ``MambaSplitConv1dScanCombinedFn.backward``
and ``_mamba_chunk_scan_combined_bwd`` allocate them (counted from the code, not
measured). ``eager``: the gradients of the three ``L x L`` tiles and of the fp32
``x`` copies (the torch census measures it).

Known limitation: context parallelism is refused (Megatron-Core's
``MambaContextParallel`` exchanges heads with all-to-alls this block does not
state).
"""

from __future__ import annotations

import math

import attrs

from hp_core.costs import LayerContext
from hp_core.errors import ConfigError
from hp_core.validators import positive_int
from hp_plugins.kit.builder import LayerBuilder
from hp_plugins.kit.feedforward import ACT_OPS
from hp_plugins.kit.norms import NORM_OPS_PER_ELEMENT
from hp_plugins.kit.shapes import check_divides

__all__ = ["MAMBA_SWITCHES", "Mamba2Fields", "mamba2_mixer", "ssd_chunk_flops", "validate_mamba2"]

# The switches a Mamba-2 block has: its pre-norm's output and the SP gather (the scan's
# tensors are rebuilt only by recomputing the whole layer).
MAMBA_SWITCHES = ("normOp", "gather")
_FP32 = 4
# Elementwise operations per element, counted from the definitions: the dt gate per head
# (bias add; softplus: exp, add, log; clamp) 5; the D skip (multiply, add) 2 per element of x.
_DT_OPS_PER_HEAD = 5
_D_SKIP_OPS = 2


@attrs.frozen(kw_only=True, slots=False)
class Mamba2Fields:
    """The Mamba-2 mixer (Hugging Face ``NemotronHConfig`` names; the ``mamba2`` format maps ``Mamba2Config``'s).

    Attributes:
        hidden_size: Model width ``h``.
        mamba_num_heads: SSM heads ``H``.
        mamba_head_dim: Head width ``P`` (the inner width is ``I = H P``).
        ssm_state_size: State width ``N``.
        n_groups: Groups ``G`` sharing ``B`` and ``C`` (``H / G`` heads each).
        conv_kernel: The depthwise causal convolution's width ``w``.
        chunk_size: The SSD chunk ``L``.
        use_bias: Biases on ``in_proj`` and ``out_proj``.
        use_conv_bias: A bias on the convolution.
    """

    hidden_size: int = attrs.field(validator=positive_int)
    mamba_num_heads: int = attrs.field(validator=positive_int)
    mamba_head_dim: int = attrs.field(validator=positive_int)
    ssm_state_size: int = attrs.field(validator=positive_int)
    n_groups: int = attrs.field(default=1, validator=positive_int)
    conv_kernel: int = attrs.field(default=4, validator=positive_int)
    chunk_size: int = attrs.field(default=256, validator=positive_int)
    use_bias: bool = False
    use_conv_bias: bool = True

    def __attrs_post_init__(self) -> None:
        self.check_mamba2()

    def check_mamba2(self) -> None:
        """Refuse groups that do not divide the heads (each group serves ``H / G`` heads)."""
        if self.mamba_num_heads % self.n_groups:
            raise ValueError(f"n_groups={self.n_groups} must divide mamba_num_heads={self.mamba_num_heads}")

    @property
    def inner_size(self) -> int:
        """``I = H P``."""
        return self.mamba_num_heads * self.mamba_head_dim

    @property
    def conv_dim(self) -> int:
        """``C = I + 2 G N``: the channels of the convolution (x, B and C)."""
        return self.inner_size + 2 * self.n_groups * self.ssm_state_size


def ssd_chunk_flops(c: Mamba2Fields, heads: int, groups: int, per_head_cb: bool) -> int:
    """Forward FLOPs of one chunk of the SSD scan over *heads* heads and *groups* groups (module docstring)."""
    L, N, P = c.chunk_size, c.ssm_state_size, c.mamba_head_dim
    cb = 2 * L * L * N * (heads if per_head_cb else groups)
    return cb + heads * (2 * L * L * P + 2 * 2 * L * N * P + 2 * N * P)


def _eager_terms(b: LayerBuilder, c: Mamba2Fields, heads: int, groups: int, inner: int, conv: int) -> None:
    """The reference PyTorch path's kept tensors on one rank (module docstring's table)."""
    x, act = b.x, b.act
    mb, s, L = x.micro_batch_size, x.seq_len // x.cp, c.chunk_size
    chunks = math.ceil(s / L)
    T, Tp = mb * s, mb * chunks * L
    N, P = c.ssm_state_size, c.mamba_head_dim
    b.keep("ssm_conv_out", mb * (s + c.conv_kernel - 1) * conv * act, None, True)
    b.keep("ssm_dt", T * heads * (2 * act + 2 * _FP32), None, True)
    b.keep("ssm_x_fp32", (T + Tp) * inner * _FP32, None, True)
    b.keep("ssm_b_chunks", Tp * heads * N * _FP32, None, True)
    b.keep("ssm_einsum_copies", Tp * (4 * heads * N + 2 * inner) * _FP32, None, True)
    b.keep("ssm_segsum_tiles", 3 * Tp * heads * L * _FP32, None, True)
    b.keep("ssm_decays", 2 * Tp * heads * _FP32, None, True)
    b.keep("ssm_chunk_states", mb * (2 * chunks + 1) * heads * P * N * _FP32, None, True)
    b.keep("ssm_states_out", Tp * inner * _FP32, None, True)
    b.keep("ssm_chunk_decay", mb * heads * (chunks + 1) ** 2 * _FP32, None, True)
    b.keep("ssm_scan_out", Tp * inner * _FP32, None, True)
    b.keep("ssm_gate_norm", T * (4 * inner + groups) * _FP32, None, True)
    b.keep("ssm_out_proj_in", T * inner * act, None, True, gemm_input="owned")  # out_proj's input, as the flash path's
    # Backward: the gradients of the three tiles and of the two fp32 copies of x.
    b.block_grads.append(3 * Tp * heads * L * _FP32 + 2 * Tp * inner * _FP32)


def mamba2_mixer(b: LayerBuilder, c: Mamba2Fields, norm: str = "rmsnorm") -> None:
    """The pre-norm and the Mamba-2 mixer (module docstring: every term and its source).

    Args:
        b: The layer being built.
        c: The mixer's shape.
        norm: The block's pre-norm.
    """
    x, act, t = b.x, b.act, b.x.tp
    T, h = x.tokens, c.hidden_size
    H, G, I, C = c.mamba_num_heads, c.n_groups, c.inner_size, c.conv_dim
    proj = 2 * I + 2 * G * c.ssm_state_size + H
    heads, groups, inner, conv = H // t, G // t, I // t, C // t
    b.pre_norm("mamba", norm, 0.0)
    b.param("in_proj", h * proj + proj * c.use_bias, True, matrices=((1, proj // t, h),))
    b.param("conv1d", C * c.conv_kernel + C * c.use_conv_bias, True)
    b.param("ssm_heads", 3 * H, True)  # dt_bias, A_log, D
    b.param("gated_norm", I, True)
    b.param("out_proj", I * h, True, matrices=((1, h, inner),))
    b.param("out_proj_bias", h * c.use_bias, False)
    b.keep("zxbcdt", T * proj * act // t, None, True)
    chunks = x.micro_batch_size * math.ceil(x.seq_len // x.cp / c.chunk_size)
    if x.attention == "eager":
        _eager_terms(b, c, heads, groups, inner, conv)
    else:
        b.keep("ssm_out_x", T * inner * act, None, True)
        b.keep("gated_norm_in", T * inner * act, None, True)
        b.keep("gated_norm_rstd", T * groups * _FP32, None, True)
        # out_proj (Transformer Engine's row-parallel linear) keeps its input for its weight gradient, the only
        # keeper of the norm's output (RMSNormGated saves its own input and rstd): under a recipe its quantized copy
        # (mamba_mixer.py MambaMixer.forward / _ssm_training at NVIDIA/Megatron-LM@d98e8a6).
        b.keep("out_proj_in", T * inner * act, None, True, gemm_input="owned")
        states = chunks * heads * c.mamba_head_dim * c.ssm_state_size * _FP32
        tiles = chunks * groups * c.chunk_size * c.chunk_size * _FP32
        b.block_grads.append(T * proj * act // t + T * conv * act + 2 * states + tiles)
        b.ssd_scan = True  # mamba_ssm's Triton scan kernels, priced at the device's SSD figures where stated
    # Megatron-Core's mixer.in_proj (layernorm-fused, column-parallel: its input the pre-norm's output, gathered under
    # SP) and mixer.out_proj (row-parallel), mamba_mixer.py at NVIDIA/Megatron-LM@d98e8a6, built with
    # tp_comm_buffer_name 'fc1' (line 291) and 'fc2' (line 447): under TP communication overlap Transformer Engine
    # runs them through the fc1 and fc2 userbuffers (and their SM margins).
    b.linear(T, h, proj // t, module="mamba_in_proj", ub="fc1")
    b.linear(T, inner, h, module="mamba_out_proj", ub="fc2")
    b.linear_module("mamba_in_proj", ("in_proj",), ("mamba_norm_out", "mamba_gathered"), (1, 0))
    b.linear_module("mamba_out_proj", ("out_proj",), ("out_proj_in", "ssm_out_proj_in"), (0, 1))
    b.tp_blocks += 1
    b.attention += chunks * ssd_chunk_flops(c, heads, groups, per_head_cb=x.attention == "eager")
    b.elementwise += (
        (2 * c.conv_kernel + ACT_OPS["silu"]) * T * conv  # depthwise conv and its SiLU
        + _DT_OPS_PER_HEAD * T * heads
        + (_D_SKIP_OPS + ACT_OPS["silu"] + 1 + NORM_OPS_PER_ELEMENT["rmsnorm"]) * T * inner  # D skip, gate, norm
    )


def validate_mamba2(c: Mamba2Fields, x: LayerContext) -> None:
    """Refuse a layout the mixer cannot run: TP must split the heads and the groups evenly; no CP."""
    check_divides(x.tp, c.mamba_num_heads, "$.parallel.tp", "tp", "mamba_num_heads")
    check_divides(x.tp, c.n_groups, "$.parallel.tp", "tp", "n_groups")
    if x.cp > 1:
        raise ConfigError(
            "$.parallel.cp",
            f"cp={x.cp}: Mamba-2 layers are not priced under context parallelism (Megatron-Core's "
            "MambaContextParallel exchanges heads with all-to-alls this kind does not state); use cp=1",
        )
