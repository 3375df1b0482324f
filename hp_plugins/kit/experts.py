"""The mixture-of-experts feed-forward block: router, dispatch, routed and shared SwiGLU experts, combine."""

from __future__ import annotations

import math

import attrs

from hp_core.errors import ConfigError
from hp_core.costs import LayerContext
from hp_core.validators import non_negative_int, one_of, positive_int
from hp_plugins.kit.builder import LayerBuilder
from hp_plugins.kit.clamped_glu import clamped_swiglu
from hp_plugins.kit.feedforward import ACT_OPS, swiglu
from hp_plugins.kit.shapes import check_divides
from hp_plugins.kit.work import ExpertShape

__all__ = ["EXPERT_ACTIVATIONS", "MoEFields", "TORCHTITAN_KEPT", "fused_mlp_activation", "moe", "moe_tokens", "torchtitan_kept_bytes", "validate_moe"]

# The routed experts' activations: SwiGLU (hp_plugins.kit.feedforward.swiglu), GPT-OSS's clamped
# one (hp_plugins.kit.clamped_glu), and a plain MLP of ``hidden_act`` (up, activation, down: Nemotron-H's
# NemotronHExperts and its shared NemotronHMLP, squared ReLU).
EXPERT_ACTIVATIONS = ("swiglu", "clamped_swiglu", "mlp")


def _capacity(instance, attribute, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        raise ValueError(f"{attribute.name} must be a positive number or absent (dropless), got {value!r}")


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
        router_bias: A bias on the router's logits (GPT-OSS, ``E`` parameters).
        router_topk_softmax: The routing weights are a softmax over the top-k
            logits only (GPT-OSS ``GptOssTopKRouter``): the router keeps ``k``
            probabilities per token, not ``E``.
        expert_bias: Biases on each routed expert's projections (GPT-OSS:
            ``2 I + h`` per expert).
        expert_activation: ``swiglu``, GPT-OSS's ``clamped_swiglu``
            (:mod:`hp_plugins.kit.clamped_glu`), or ``mlp``: routed and shared
            experts are ungated MLPs of ``hidden_act`` (Nemotron-H).
        moe_latent_size: The routed experts work in a latent width ``L``:
            ``fc1_latent_proj`` (``h -> L``) before the dispatch and
            ``fc2_latent_proj`` (``L -> h``) after the combine (Nemotron-H
            ``NemotronHMoE``); ``None``: the experts read ``h``.
        router_fp32: The router's module casts its input and weight to fp32
            (transformers' ``NemotronHTopkRouter``: ``F.linear(hidden.float(),
            weight.float())``): where the run uses transformers' modules (the
            ``fp32_norm_copy`` trait, the fsdp2 runtime's ``norm_implementation:
            transformers``) it keeps that fp32 copy of its input (``4 h`` per
            routed token) and fp32 scores. A fused trainer's fp32 router
            (Megatron-Core ``router_gating_linear``) keeps its bf16 input, the
            norm's output, already counted.
        router_num_groups: Routing groups ``R`` of a group-limited router: the experts split into
            ``R`` equal, consecutive groups (Megatron-Core ``--moe-router-num-groups``; DeepSeek-V2/V3
            ``n_group``); 1: no groups.
        router_group_topk: Groups ``g`` each token selects before choosing its top-k experts within
            them (``--moe-router-group-topk``; ``topk_group``); ``None``: no limit, every group (as
            Megatron-Core ``moe_utils.topk_routing_with_score_function`` limits only when it is set).
            Memory and FLOPs do not change with it (balanced routing, ``k`` experts a token either way);
            a library sending a token once per rank or node it reaches (DeepEP) sends fewer
            (:meth:`hp_core.collectives.Routing.distinct`).
    """

    num_experts: int = attrs.field(validator=positive_int)
    num_experts_per_tok: int = attrs.field(validator=positive_int)
    moe_intermediate_size: int = attrs.field(validator=positive_int)
    shared_expert_intermediate_size: int = attrs.field(default=0, validator=non_negative_int)
    shared_expert_gate: bool = False
    hidden_act: str = attrs.field(default="silu", validator=one_of(tuple(ACT_OPS)))
    capacity_factor: float | None = attrs.field(default=None, validator=_capacity)
    pad_to_capacity: bool = False
    router_bias: bool = False
    router_topk_softmax: bool = False
    expert_bias: bool = False
    expert_activation: str = attrs.field(default="swiglu", validator=one_of(EXPERT_ACTIVATIONS))
    moe_latent_size: int | None = attrs.field(default=None, validator=attrs.validators.optional(positive_int))
    router_fp32: bool = False
    router_num_groups: int = attrs.field(default=1, validator=positive_int)
    router_group_topk: int | None = attrs.field(default=None, validator=attrs.validators.optional(positive_int))

    def __attrs_post_init__(self) -> None:
        self.check_moe()

    def check_moe(self) -> None:
        """Refuse inconsistent routing; a config combining these fields with others calls it from its
        own ``__attrs_post_init__`` (attrs calls only the one the MRO finds first)."""
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(
                f"num_experts_per_tok={self.num_experts_per_tok} must not exceed num_experts={self.num_experts}"
            )
        if self.pad_to_capacity and self.capacity_factor is None:
            raise ValueError("pad_to_capacity needs a capacity_factor")
        groups, chosen = self.router_num_groups, self.router_group_topk
        if self.num_experts % groups:
            raise ValueError(f"router_num_groups={groups} must divide num_experts={self.num_experts}")
        if chosen is not None and chosen > groups:
            raise ValueError(f"router_group_topk={chosen} must not exceed router_num_groups={groups}")
        if chosen is not None and self.num_experts_per_tok > chosen * self.num_experts // groups:
            raise ValueError(f"num_experts_per_tok={self.num_experts_per_tok} must not exceed the "
                             f"{chosen * self.num_experts // groups} experts of router_group_topk={chosen} groups")

    @property
    def router_groups_per_token(self) -> int:
        """The routing groups a token selects: :attr:`router_group_topk`, every group when it is ``None``."""
        return self.router_num_groups if self.router_group_topk is None else self.router_group_topk


# What torchtitan's eager MoE keeps beyond the kit's default, by the trait the fsdp2 option moe_permutation sets
# (hp_plugins/runtimes/torchtitan_moe.py KEPT_TRAITS): (the router keeps an fp32 copy of its input, bytes of routing
# indices and scores a routed row). Per routed row, besides the permuted input of the grouped GEMMs (2 h) and the four
# SwiGLU intermediates (2 I each), both keep the fp32 routed output of the combine's score multiply (4 h, where the
# kit's default keeps 2 h); torch.gather's or x[indices]'s output (the gathered rows), the all-to-alls' outputs and the
# grouped GEMMs' output are not kept (all_to_all_single's, cat's and index_put's backward need no input).
# pytorch/torchtitan@82a9530f6, torchtitan/models/moe.py TokenChoiceTopKRouter, TokenReorderer and MoE.forward,
# torchtitan/experiments/kernels/moe/indices.py generate_permute_indices: the gate's bf16 mm, softmax of its output
# .to(float32) (fp32 scores kept, 4 E a token, the kit's router_probs); per routed row topk's (or the biased gather's)
# int64 indices 8, argsort's int64 output kept by the scores' index 8, its // top_k kept by gather and scatter_add 8,
# the sorted fp32 scores kept by the multiply 4, the int32 permuted_indices kept by x[permuted_indices] and the index
# put 4: 32 bytes. pytorch/torchtitan@6b9602339, torchtitan/models/common/moe.py TokenChoiceTopKRouter.forward (the
# gate under torch.autocast(dtype=float32): the mm keeps its fp32 input, 4 h a token) and token_dispatcher.py
# _local_reorder, _permute, combine, torchtitan/ops/scatter_add.py (keeps the index): the gather's int64 index 8,
# argsort's 8, // top_k's 8, the scores 4, _permute's int64 permuted_indices 8: 36 bytes. Padding rows (8 per local
# expert at 82a9530f6) are left out.
TORCHTITAN_KEPT = {"torchtitan_moe_expert_parallel": (False, 32), "torchtitan_moe_all_to_all": (True, 36)}


def torchtitan_kept_bytes(traits) -> tuple[bool, int] | None:
    """``(fp32 router input kept, index and score bytes a routed row)`` of the torchtitan MoE trait in *traits*."""
    found = [TORCHTITAN_KEPT[t] for t in TORCHTITAN_KEPT if t in traits]
    return found[0] if found else None


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


def moe(b: LayerBuilder, c: MoEFields, norm: str, hidden_dropout: float, layer_switch: str | None = None) -> None:
    """A mixture of experts: router, dispatch, routed SwiGLU experts, shared experts, combine.

    Kept per rank: the router's probabilities over all experts (its softmax or
    sigmoid output), the dispatched tokens (the experts' FC1 input), each
    expert's FC1 outputs and activation outputs over the tokens it processes
    (:func:`moe_tokens`), and the experts' outputs on the source rank, which
    the probability-weighted combine keeps for the gradient of the
    probabilities (Megatron-Core ``moe_utils.unpermute``; Hugging Face Mixtral
    multiplies the expert output by the routing weight). Shared experts run
    like a dense MLP over the (SP-gathered) tokens.

    *layer_switch* gates every tensor the block keeps inside itself but its
    activations (``ffAct``) and the SP-gathered copies (``gather``): the
    router's probabilities (and fp32 input), the dispatched tokens, the routed
    and shared experts' FC1 outputs, the combine's kept inputs, the
    permutation's row map, the latent projection's input, the shared-expert
    gate's output. Its input, the pre-norm's output, stays (``normOp``): a
    checkpoint of the block keeps it. Recomputing the switch re-runs the
    block's forward from it, its dispatch and combine included
    (:func:`~hp_plugins.kit.work.decoder_work` states the re-run from the
    block's shapes: Megatron-Core's ``moe`` recompute module, ``MoELayer.forward``
    under ``tensor_parallel.checkpoint``, ``te_checkpoint`` under fp8/fp4,
    megatron/core/transformer/moe/moe_layer.py at NVIDIA/Megatron-LM@d98e8a6).
    ``None``, the default, keeps them unless the layer is recomputed fully.
    """
    sw = layer_switch
    x, t, act = b.x, b.x.tp, b.act
    T, h, E = x.tokens, b.h, c.num_experts
    routed = T // x.sp_degree
    processed = moe_tokens(c, x)
    # No learned router under the moe_fake_balanced_gate trait (NeMo AutoModel's FakeBalancedGate,
    # nemo_automodel/components/moe/layers.py at 89e3a9f, bb0c0bf and e458120: no parameter; its forward
    # builds the weights 1/k with torch.ones and the indices (t k + j) mod E with torch.arange).
    learned = "moe_fake_balanced_gate" not in x.traits
    # The norm's output is also the router's input, which keeps it in the compute dtype.
    # Megatron-Core builds it as a module of its own (pre_mlp_layernorm a TENorm where the layer has experts,
    # gpt_layer_specs.py and hybrid_layer_specs.py at NVIDIA/Megatron-LM@d98e8a6): its layernorm module recomputes it.
    b.pre_norm("moe", norm, hidden_dropout, gemm_input=None, own_module=True)
    if learned:
        b.param("router", E * h + E * c.router_bias, False, matrices=((1, E, h),), high_precision=True)
    # Each of a rank's E / ep experts: the fused gate and up projection (the up projection of an ungated
    # ``mlp`` expert) and the down projection, split over etp; they read the latent width where there is one.
    width = c.moe_intermediate_size // x.etp
    gated = c.expert_activation != "mlp"
    fc1 = 2 if gated else 1
    d = c.moe_latent_size or h
    first_linear = len(b.gemm_shapes)  # the block's own listed linears from here (ExpertShape.block_linears)
    b.param("experts", E * (fc1 + 1) * d * c.moe_intermediate_size, True, "routed_expert",
            matrices=((E // x.ep, fc1 * width, d), (E // x.ep, d, width)))
    if c.moe_latent_size:
        # Nemotron-H's latent projections, whole on every TP rank over the rank's own (SP-sharded) tokens:
        # Megatron-Core MoELayer.__init__ builds fc1_latent_proj and fc2_latent_proj as TELinear with
        # parallel_mode="duplicated" (megatron/core/transformer/moe/moe_layer.py, read at commit 00119989);
        # fc1's input is the norm's output, fc2 keeps the combined latent output.
        b.param("moe_latent_proj", 2 * h * d, False, matrices=((1, d, h), (1, h, d)))
        b.keep("latent_combined", routed * d * act, sw, gemm_input="owned")
        # fc1_latent reads the norm output the shared experts' FC1 reads too (counted there for W).
        # Both run over the rank's own tokens (shard: no SP gather) and are one module to a format of its own
        # (moe_latent_proj); fc1's input, the norm's output, stays in the compute dtype for the router whatever its
        # format, so only fc2's kept input follows it.
        b.linear(routed, h, d, shares_input=bool(c.shared_expert_intermediate_size), module="moe_latent_proj", shard=True)
        b.linear(routed, d, h, module="moe_latent_proj", shard=True)
        b.linear_module("moe_latent_proj", ("moe_latent_proj",), ("latent_combined",))
    if c.expert_bias:
        # FC1's bias is split with its output over etp; FC2's (h per expert) is whole on each etp rank.
        b.param("expert_fc1_bias", E * 2 * c.moe_intermediate_size, True, "routed_expert")
        b.param("expert_fc2_bias", E * h, False, "routed_expert")
    kept_tt = torchtitan_kept_bytes(x.traits)
    # torchtitan's router (the traits of the fsdp2 option moe_permutation): 2025-10's gate runs in bf16 and upcasts its
    # output (no fp32 input kept), 2026-06's runs under fp32 autocast (its fp32 input kept); both keep fp32 scores.
    if kept_tt is not None:
        upcast = learned and kept_tt[0]
        scores = 4
    else:
        upcast = learned and c.router_fp32 and "fp32_norm_copy" in x.traits
        scores = 4 if upcast else act
    # The router's probabilities; the fake gate's k weights per token (type_as: the compute dtype).
    b.keep("router_probs", routed * (c.num_experts_per_tok if c.router_topk_softmax or not learned else E) * scores, sw)
    if upcast:
        b.keep("router_fp32_input", routed * h * 4, sw)
    b.keep("dispatched_tokens", processed * d * act, sw, gemm_input="owned")  # the experts' FC1 input
    before = b.elementwise  # the experts' activation ops, which a fused grouped MLP runs in GEMM epilogues
    # Transformer Engine's fused grouped MLP runs the activation in its own op, which the FP8 input store (a
    # Megatron-Core fused-activation argument) does not reach.
    fp8_store = "moe_fused_grouped_mlp" not in x.traits
    if c.expert_activation == "clamped_swiglu":
        expert_wide = clamped_swiglu(b, "expert_", processed, width, fc1_switch=sw, fp8_store=fp8_store)
    else:
        expert_wide = swiglu(b, "expert_", processed, width, gated, c.hidden_act, False, fc1_switch=sw, fp8_store=fp8_store)
    epilogue = b.elementwise - before if "moe_fused_grouped_mlp" in x.traits else 0.0
    if "moe_probs_in_activation" in x.traits:
        # The weighted SwiGLU keeps the fp32 probability of each dispatched token.
        b.keep("expert_probs", processed * 4, sw)
    elif kept_tt is not None:
        # torchtitan's combine multiplies the routed output by its score in fp32 (routed_output.to(float32) * scores):
        # the product keeps that fp32 copy for the scores' gradient, and the scores; then the routing indices.
        b.keep("expert_out_fp32", processed // x.etp * d * 4, sw)
        b.keep("routing_indices", processed // x.etp * kept_tt[1], sw)
    else:
        b.keep("expert_out", processed // x.etp * d * act, sw)
    if "moe_fused_permute" in x.traits:
        # int32 row map of [tokens, 2E + 1] (Transformer Engine moe_permute).
        b.keep("permute_row_map", routed * (2 * E + 1) * 4, sw)
    # The dispatch and combine all-to-all buffers of the running layer.
    b.buffers_once = max(b.buffers_once, 2 * processed * d * act)
    grads = (fc1 + 1) * expert_wide + processed * d * act
    if learned:
        b.linear(routed, h, E, weight=False)
    b.linear(processed, d, fc1 * c.moe_intermediate_size // x.etp, routed=True)
    b.linear(processed, c.moe_intermediate_size // x.etp, d, routed=True)
    # For torchtitan's op-level SAC (LayerWork.alternate_matmul_flops), in the order torchtitan's MoE.forward
    # calls them (torchtitan/models/moe.py at 0cfbd0b3): the router's gate (an aten.mm), the routed experts'
    # grouped GEMMs (aten._grouped_mm, in no save list: all re-run), then the shared experts' w1, w3, w2. A
    # latent MoE (no torchtitan model) leaves its order unstated.
    placed = bool(b.matmuls_in_order) and not c.moe_latent_size
    if placed:
        if learned:
            b.matmuls_in_order.append(2 * routed * h * E)
        b.rerun_always += 2 * processed * d * fc1 * c.moe_intermediate_size // x.etp + 2 * processed * c.moe_intermediate_size // x.etp * d
    if c.shared_expert_intermediate_size:
        I = c.shared_expert_intermediate_size
        b.param("shared_experts", (fc1 + 1) * h * I, True, "shared_expert",
                matrices=((1, fc1 * I // t, h), (1, h, I // t)))
        if c.shared_expert_gate:
            b.param("shared_expert_gate", h, False, "shared_expert", matrices=((1, 1, h),))
            b.keep("shared_out", b.hidden, sw)
        b.keep("shared_gathered", b.gathered, "gather")
        shared_wide = swiglu(b, "shared_", T, I // t, gated, c.hidden_act, fc1_switch=sw)
        grads = max(grads, (fc1 + 1) * shared_wide)
        # Megatron-Core's SharedExpertMLP is an MLP (moe/shared_experts.py at NVIDIA/Megatron-LM@d98e8a6): its
        # linear_fc1 and linear_fc2, tp_comm_buffer_name 'fc1' and 'fc2' (transformer/mlp.py lines 228 and 251),
        # run the fc1 and fc2 userbuffers under TP communication overlap. Its fc1 is a TEColumnParallelLinear
        # (models/gpt/moe_module_specs.py get_moe_module_spec_for_backend: backend.column_parallel_linear(), its
        # norm the MoE layer's own), to which Megatron-Core passes no bulk overlap: its forward alone (ub_passes).
        b.linear(T, h, fc1 * I // t, ub="fc1", ub_passes=("fprop",))
        b.linear(T, I // t, h, ub="fc2")
        if placed:
            b.matmuls_in_order += [2 * T * h * I // t] * fc1 + [2 * T * I // t * h]
    b.block_grads.append(grads)
    if c.shared_expert_intermediate_size or "moe_expert_tp_dispatch" not in x.traits:
        # A block gathering its input and reducing its output over TP like a dense MLP. Megatron-Core's MoE layer
        # routes its sequence-parallel shard instead (moe_layer.py; MoE under TP requires sequence parallelism) and
        # its dispatcher moves the tokens over the expert-TP group (kit.work.expert_collectives): only shared
        # experts (shared_experts.py, an MLP with sequence-parallel linears) gather over TP there.
        b.tp_blocks += 1
    b.expert_shape = ExpertShape(experts=E, top_k=c.num_experts_per_tok, width=c.moe_intermediate_size,
                                 pad_to_capacity=c.pad_to_capacity, capacity_factor=c.capacity_factor, gated=gated,
                                 model_width=c.moe_latent_size, routing_groups=c.router_num_groups,
                                 routing_groups_per_token=c.router_groups_per_token, fc2_bias=c.expert_bias,
                                 learned_gate=learned, rerun_switch=sw,
                                 block_linears=tuple(range(first_linear, len(b.gemm_shapes))), epilogue_activation_ops=epilogue)


def fused_mlp_activation(c: MoEFields) -> bool:
    """Whether the routed experts' activation is one Megatron-Core's fused grouped MLP runs: a gated SiLU (SwiGLU), a
    gated quick-GELU (GPT-OSS's clamped GeGLU, ``clamped_swiglu``) or an ungated squared ReLU
    (``TEGroupedMLP._is_fused_impl_supported``, megatron/core/transformer/moe/experts.py at NVIDIA/Megatron-LM@d98e8a6,
    which Megatron-Core asserts under ``use_transformer_engine_op_fuser``)."""
    if c.expert_activation == "clamped_swiglu":
        return True
    if c.expert_activation == "swiglu":
        return c.hidden_act in ("silu", "swish")
    return c.hidden_act == "relu2"


def validate_moe(c: MoEFields, x: LayerContext) -> None:
    check_divides(x.ep, c.num_experts, "$.parallel.ep", "ep", "num_experts")
    check_divides(x.etp, c.moe_intermediate_size, "$.parallel.etp", "etp", "moe_intermediate_size")
    if c.shared_expert_intermediate_size:
        check_divides(x.tp, c.shared_expert_intermediate_size, "$.parallel.tp", "tp", "shared_expert_intermediate_size")
    if x.tp > 1 and not x.sp and "moe_tp_without_sp" not in x.traits:
        raise ConfigError(
            "$.parallel.sp",
            "a mixture-of-experts layer with tp > 1 needs sequence parallelism (Megatron-LM arguments.py); add --sp",
        )
    if x.etp > 1 and "moe_fused_grouped_mlp" in x.traits:
        # Megatron-Core asserts TEGroupedMLP._is_fused_impl_supported under use_transformer_engine_op_fuser, false where
        # the experts' tensor-parallel group (pg_collection.expt_tp) has more than one rank (transformer/moe/experts.py
        # at NVIDIA/Megatron-LM@d98e8a6, __init__ and _is_fused_impl_supported; since 6815c0f, 2026-05-15).
        raise ConfigError(
            "$.parallel.etp",
            f"etp {x.etp}: Megatron-Core's fused grouped MLP (moe_fused_grouped_mlp) does not support expert tensor "
            "parallelism (experts.py _is_fused_impl_supported); use etp 1 or drop moe_fused_grouped_mlp",
        )
    if "moe_fused_grouped_mlp" in x.traits and not fused_mlp_activation(c):
        # The same check accepts a gated SiLU (SwiGLU) or quick-GELU (GPT-OSS's clamped GeGLU) and an ungated squared
        # ReLU (under use_fused_weighted_squared_relu, which hp does not state) and nothing else.
        form = f"gated {c.hidden_act}" if c.expert_activation == "swiglu" else f"ungated {c.hidden_act}"
        raise ConfigError(
            "$.runtime.options.moe_fused_grouped_mlp",
            f"the routed experts' {form} has no fused grouped MLP: Megatron-Core's op fuser supports a gated SiLU or "
            "quick-GELU and an ungated squared ReLU (experts.py _is_fused_impl_supported); drop moe_fused_grouped_mlp",
        )
