"""What a layer runs per micro-batch: its GEMM shapes, kernels and collectives (:class:`~hp_core.costs.LayerWork`).

A kind states its work with :attr:`LayerCost.work <hp_core.costs.LayerCost.work>`
and the step time prices exactly that (docs/time.md). These helpers state the
work of the built-in blocks from explicit shapes, so a third-party kind made
of other blocks states its own the same way:

* :func:`tp_collectives`: Megatron-style tensor parallelism. With sequence
  parallelism each block (attention, MLP) all-gathers its input and
  reduce-scatters its output, forward and backward, and re-gathers in backward
  when ``gather`` is recomputed; without it, one all-reduce per block each way
  (Shoeybi et al. 2019, Section 3; Korthikanti et al. 2022, Section 4.2.2).
  A vocabulary-parallel embedding reduce-scatters (all-reduces) its output
  forward and all-gathers its gradient backward; a vocabulary-parallel head
  the reverse.
* :func:`attention_collectives`: context parallelism. Ring attention passes
  K and V around the ring ``cp - 1`` times forward and K, V and their
  gradients backward (Liu et al. 2023); all-to-all CP exchanges q, k, v and
  the output each way, on attention's critical path (Jacobs et al. 2023).
* :func:`expert_collectives`: expert parallelism dispatches and combines the
  routed tokens with an all-to-all each, each way; expert tensor parallelism
  (``etp > 1``) all-gathers the dispatched tokens over its ``etp`` ranks and
  reduce-scatters the experts' output back, each way.
* :func:`decoder_work`: the whole work of a decoder layer built from the
  kit's attention (GQA or MLA) and feed-forward (MLP or routed experts)
  blocks, with the layer's recorded weight shapes as its GEMMs.
"""

from __future__ import annotations

import attrs

from hp_core.collectives import Routing
from hp_core.costs import Collective, LayerContext, LayerWork, Rerun
from hp_core.score_masks import LocalMask

__all__ = [
    "ATTENTION_CORE_SWITCHES",
    "AttentionShape",
    "EXPERT_BIAS_BACKWARD_ACCESSES",
    "EXPERT_BIAS_FORWARD_ACCESSES",
    "ExpertShape",
    "SOFTMAX_OPS_PER_SCORE",
    "attention_collectives",
    "decoder_work",
    "expert_collectives",
    "tp_collectives",
]

# The switches of the attention core (LayerBuilder.attention_core's tensors): recomputing any
# re-runs the core (Megatron-LM checkpoints CoreAttention as a unit; Korthikanti et al. 2022, Section 4.2).
ATTENTION_CORE_SWITCHES = frozenset({"attBMM", "headCast", "dropout", "softmax"})

# Elementwise ops per attention score for the softmax (max, subtract, exp, sum,
# divide: LayerBuilder.attention_core counts them). A fused (flash) kernel runs
# them on chip, so they move no HBM traffic there (Dao 2023, Section 3.1).
SOFTMAX_OPS_PER_SCORE = 5


@attrs.frozen
class AttentionShape:
    """An attention block's shape. GQA: ``heads``, ``kv_heads``, ``head_dim``.
    MLA: ``heads`` and the ``qk_nope``, ``qk_rope``, ``v_head`` dims with the KV ``kv_lora_rank``.

    ``score_share``: the share of the score square a fused kernel's on-chip
    elementwise work covers (a sliding window or chunks under flash:
    :func:`hp_plugins.kit.local_attention.score_share`); ``score_ops``: its
    elementwise operations per score (the softmax's, plus a soft-cap's);
    ``local_mask``: that window or those chunks (``None``: full causal), which
    a block-sparse kernel runs block by block (:class:`hp_core.score_masks.LocalMask`).
    """

    heads: int
    kv_heads: int | None = None
    head_dim: int | None = None
    qk_nope: int | None = None
    qk_rope: int | None = None
    v_head: int | None = None
    kv_lora_rank: int | None = None
    score_share: float = 1.0
    score_ops: int = SOFTMAX_OPS_PER_SCORE
    local_mask: LocalMask | None = None

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None


@attrs.frozen
class ExpertShape:
    """Routed SwiGLU experts: ``experts`` of ``width`` (``moe_intermediate_size``), ``top_k`` per token,
    padded to ``capacity_factor`` when ``pad_to_capacity``; ``gated`` false: ungated MLP experts (an up
    and a down projection); ``model_width``: the width the experts read and write (a latent width),
    ``None``: the layer's; ``routing_groups`` and ``routing_groups_per_token``: a group-limited
    router's groups and those a token selects (:class:`hp_core.collectives.Routing`), 1 and 1: none;
    ``fc2_bias``: each expert's down projection carries a bias (GPT-OSS); ``learned_gate`` false: no
    router runs (NeMo AutoModel's ``FakeBalancedGate``, the ``moe_fake_balanced_gate`` trait): no
    gating GEMM and no router kernels, and the tokens go round-robin to consecutive experts
    (:class:`hp_core.collectives.Routing` ``assignment``); ``rerun_switch``: the switch whose recompute re-runs
    the whole block (``moeLayer``: :func:`decoder_work` states its :class:`~hp_core.costs.Rerun` and re-issues
    the block's dispatch and combine under it), ``None``: none; ``block_linears``: the block's own linears but the
    routed experts' (latent projections, shared experts), each by its index in :func:`decoder_work`'s ``gemm_shapes``
    (what :meth:`LayerBuilder.linear <hp_plugins.kit.builder.LayerBuilder.linear>` returns), which that re-run runs
    again with the rows the layer lists them with; by index, not shape, so a linear of the block's shape outside it
    (an attention projection as wide as a latent one) is not re-run; ``epilogue_activation_ops``: the experts'
    activation ops a fused grouped MLP runs in GEMM epilogues (the ``moe_fused_grouped_mlp`` trait), 0: none."""

    experts: int
    top_k: int
    width: int
    pad_to_capacity: bool = False
    capacity_factor: float | None = None
    gated: bool = True
    model_width: int | None = None
    routing_groups: int = 1
    routing_groups_per_token: int = 1
    fc2_bias: bool = False
    learned_gate: bool = True
    rerun_switch: str | None = None
    block_linears: tuple[int, ...] = ()
    epilogue_activation_ops: float = 0.0


# The routed experts' FC2 bias under the ``moe_eager_expert_bias`` trait (Megatron-Core
# ``TEGroupedMLP._apply_bias``, megatron/core/transformer/moe/experts.py, the same at core_r0.16.0
# b0cc2706 and 55ac7082 and at d7288711 and 2edffadb, the Megatron-LM commits Megatron-Bridge v0.3.0,
# v0.3.1, v0.4.0 and v0.4.2 pin): FC2 is built with skip_bias_add, and its output is split by tokens
# per expert, each slice t becomes t + b * p (b the expert's bias, p the tokens' routing
# probabilities, in the router's dtype, the compute dtype unless moe_router_dtype says otherwise)
# and the slices are concatenated. Accesses per element of the experts' output, counted from those
# ops in the compute dtype: forward b * p writes 1, the add reads 2 and writes 1, torch.cat reads 1
# and writes 1 (6); backward the split's gradient concatenates the slices' (reads 1, writes 1), b's
# gradient is (grad * p) summed over rows (reads 1, writes 1, reads 1) and p's (grad * b) summed over
# the width (the same 3): 8. The bias and probability reads (a width and a row each) are left out.
EXPERT_BIAS_FORWARD_ACCESSES = 6
EXPERT_BIAS_BACKWARD_ACCESSES = 8


def tp_collectives(x: LayerContext, blocks: int, tp_bytes: float, vocab: str = "") -> tuple[Collective, ...]:
    """The tensor-parallel collectives of *blocks* blocks (and a vocabulary-parallel ``embedding`` or ``head``).

    Args:
        blocks: Blocks that split their GEMMs over TP (2 for a decoder layer: attention and MLP).
        tp_bytes: The full activation one collective moves (tokens x hidden x activation bytes).
        vocab: ``"embedding"``, ``"head"`` or ``""``.
    """
    if x.tp <= 1 or not (blocks or vocab):
        return ()
    embedding, head = int(vocab == "embedding"), int(vocab == "head")
    if x.sp:
        found = [
            # Each block gathers its first linear layer's input forward, and the output gradient of its
            # last backward (and, recomputed, the input again): linear layers' GEMM inputs.
            Collective("tp", "all_gather", tp_bytes, blocks, blocks, rerun_switch="gather", gemm_input=True),
            Collective("tp", "reduce_scatter", tp_bytes, blocks, blocks),
        ]
        if embedding:  # reduce-scatter forward, all-gather backward
            found += [Collective("tp", "reduce_scatter", tp_bytes, 1, 0), Collective("tp", "all_gather", tp_bytes, 0, 1)]
        if head:  # all-gather forward, reduce-scatter backward
            found += [Collective("tp", "all_gather", tp_bytes, 1, 0), Collective("tp", "reduce_scatter", tp_bytes, 0, 1)]
        return tuple(c for c in found if c.forward_calls or c.backward_calls)
    return (Collective("tp", "all_reduce", tp_bytes, blocks + embedding, blocks + head),)


def attention_collectives(x: LayerContext, kv_bytes: float, qkvo_bytes: float) -> tuple[Collective, ...]:
    """Context parallelism's collectives for one attention core (``cp_kind`` ``p2p`` ring or ``a2a``)."""
    if x.cp <= 1:
        return ()
    if x.cp_kind == "p2p":
        return (Collective("cp", "p2p", kv_bytes, x.cp - 1, 0), Collective("cp", "p2p", 2 * kv_bytes, 0, x.cp - 1))
    return (Collective("cp", "all_to_all", qkvo_bytes, 1, 1, overlappable=False),)


def expert_collectives(x: LayerContext, routed_bytes: float, routing: Routing | None = None,
                       rerun_switch: str | None = None) -> tuple[Collective, ...]:
    """Expert parallelism's dispatch and combine all-to-alls of *routed_bytes* (a copy per routed expert), each
    way, with the token *routing* a de-duplicating library prices from (:class:`hp_core.collectives.Routing`),
    and expert tensor parallelism's gather and reduce-scatter of the tokens its ``etp`` ranks process.

    Megatron-Core ``MoEAlltoAllTokenDispatcher`` (megatron/core/transformer/moe/token_dispatcher.py) with
    ``tp_size = |expt_tp| > 1``: after the all-to-all, ``dispatch_postprocess`` gathers the dispatched tokens
    over the expert-TP group (``gather_from_sequence_parallel_region``: an all-gather forward, a reduce-scatter
    backward) and ``combine_preprocess`` reduce-scatters the experts' output back (``reduce_scatter_to_sequence_
    parallel_region``: a reduce-scatter forward, an all-gather backward). Both move the ``etp`` ranks' routed
    tokens, ``etp * routed_bytes`` (NCCL's convention: the all-gather's gathered output, the reduce-scatter's
    input), priced in the activation dtype; the probabilities gathered beside them (one value per routed copy)
    are left out (``1 / width`` of the tokens' bytes). Stated under the runtime trait ``moe_expert_tp_dispatch``;
    a trainer without it gathers the MoE block's input over TP like a dense MLP's (the layer's TP block).
    *rerun_switch*: the switch whose recompute re-runs the block, issuing them all forward again in backward
    (Megatron-Core's ``moe`` module: the checkpointed ``MoELayer.forward`` dispatches and combines again).
    """
    if not routed_bytes:
        return ()
    found: list[Collective] = []
    if x.ep > 1:
        found.append(Collective("ep", "all_to_all", routed_bytes, 2, 2, rerun_switch=rerun_switch, routing=routing))
    if x.etp > 1 and "moe_expert_tp_dispatch" in x.traits:
        gathered = routed_bytes * x.etp
        found += [Collective("etp", "all_gather", gathered, 1, 1, rerun_switch=rerun_switch),
                  Collective("etp", "reduce_scatter", gathered, 1, 1, rerun_switch=rerun_switch)]
    return tuple(found)


def decoder_work(x: LayerContext, gemm_shapes: tuple[tuple[int, int], ...], hidden_size: int, blocks: int,
                 attention: AttentionShape | None = None, experts: ExpertShape | None = None,
                 alternate_matmul_flops: float | None = None, eager_accesses_per_flop: float | None = None,
                 reruns: tuple[tuple[str, Rerun], ...] = (), rotary_flops: float = 0.0,
                 rotary_eager_bytes: tuple[float, float] = (0.0, 0.0), copy_bytes: float = 0.0,
                 original_input_linears: tuple[int, ...] = (), shard_linears: tuple[int, ...] = (),
                 ssd_scan: bool = False) -> LayerWork:
    """The work of a layer made of the kit's blocks (module docstring), per micro-batch on one rank.

    Args:
        x: The layer's context.
        gemm_shapes: The per-rank ``(fan_out, fan_in)`` of its linears but the routed experts' (priced from
            *experts*), one entry per linear: two linears of one shape (a shared expert as wide as a routed one at
            tp = etp has the routed experts' shapes) are two GEMMs, each listed
            (:meth:`LayerBuilder.linear <hp_plugins.kit.builder.LayerBuilder.linear>` ``routed``). They are the
            last ``len(gemm_shapes)`` entries of the returned :attr:`LayerWork.gemms
            <hp_core.costs.LayerWork.gemms>`, in this order (after the router's gating GEMM where there is one); the
            other arguments name a linear by its index here, never by its shape.
        hidden_size: The model width.
        blocks: Its blocks whose GEMMs TP splits (attention, MLP, experts, a mixer).
        attention: Its attention block, ``None`` without one.
        experts: Its routed experts, ``None`` without them.
        alternate_matmul_flops: Forward FLOPs of every second matmul in forward order, ``None`` not stated
            (:attr:`LayerWork.alternate_matmul_flops <hp_core.costs.LayerWork.alternate_matmul_flops>`).
        eager_accesses_per_flop: bf16 accesses per elementwise op run eager, ``None`` not counted
            (:attr:`LayerWork.eager_accesses_per_flop <hp_core.costs.LayerWork.eager_accesses_per_flop>`).
        reruns: What recomputing the blocks' switches re-runs, as the blocks state it (the dense MLP's
            ``ffFc1``: :func:`hp_plugins.kit.feedforward.mlp`); MLA's ``attUp`` is added here.
        rotary_flops, rotary_eager_bytes: A rotary embedding's elementwise FLOPs and eager bytes
            (:meth:`LayerBuilder.rotary_embedding <hp_plugins.kit.builder.LayerBuilder.rotary_embedding>`).
        copy_bytes: Bytes the blocks copy each way besides MLA's (a partially rotated head's other channels).
        original_input_linears: The indices in *gemm_shapes* of the linears whose trainer keeps their compute-dtype
            input (:attr:`LayerWork.original_input_gemms <hp_core.costs.LayerWork.original_input_gemms>`: their
            entries of the listed GEMMs).
        shard_linears: The indices in *gemm_shapes* of the linears that run over the rank's own sequence shard, not
            gathered under TP with SP (a latent MoE's latent projections, duplicated on every TP rank: Megatron-Core
            ``MoELayer.__init__`` builds them ``parallel_mode="duplicated"``, moe_layer.py at NVIDIA/Megatron-LM
            00119989): listed with ``T / sp`` rows.
        ssd_scan: The layer's attention FLOPs are a Mamba-2 SSD scan
            (:attr:`LayerWork.ssd_scan <hp_core.costs.LayerWork.ssd_scan>`).
    """
    act = x.precision.activation_bytes
    T, tp, h = x.tokens, x.tp, hidden_size
    collectives: list[Collective] = []
    kv_bytes = qkvo_bytes = scores = 0.0
    copy = copy_bytes
    reruns = tuple(reruns)
    wide, head_dims = False, None
    if attention is not None:
        heads = attention.heads
        scores = attention.score_ops * x.micro_batch_size * (heads // tp) * (x.seq_len // x.cp) * x.seq_len
        if attention.score_share != 1.0:
            scores *= attention.score_share
        if attention.mla:
            # MLA: the up-projected per-head keys (nope + rope) and values are exchanged.
            qk = attention.qk_nope + attention.qk_rope
            kv_bytes = T * heads / tp * (qk + attention.v_head) * act
            qkvo_bytes = T * heads / tp * (2 * qk + 2 * attention.v_head) * act
            wide = qk > attention.v_head
            head_dims = (qk, attention.v_head)
            # Megatron-Core MLASelfAttention.get_query_key_value_tensors (and HF
            # DeepseekV2Attention likewise): q_pos_emb rotated (read + write), query =
            # cat(q_no_pe, q_pos_emb) (read + write), key = cat(k_no_pe, expanded
            # k_pos_emb) (read the no-rope part, write the key), value.contiguous()
            # where the runtime copies it (read + write). Backward moves the same: the
            # split backwards concatenate q's and kv's gradients, the rotary backward,
            # the expand backward's sum over heads.
            per_head = 2 * attention.qk_rope + 2 * qk + attention.qk_nope + qk
            if "mla_contiguous_qkv" in x.traits:
                per_head += 2 * attention.v_head
            assembly = T * heads / tp * per_head * act
            copy += assembly
            # Recomputing the up-projections (attUp) rebuilds each element with a
            # 2 * kv_lora_rank FLOP dot product and re-assembles q and k.
            reruns += (("attUp", Rerun(2 * attention.kv_lora_rank / act, assembly)),)
        else:
            groups = attention.kv_heads or heads
            d = attention.head_dim or h // heads
            head_dims = (d, d)
            kv_heads = max(groups / tp, 1)  # KV heads are replicated when tp > groups
            kv_bytes = T * kv_heads * 2 * d * act
            qkvo_bytes = T * (2 * heads / tp + 2 * kv_heads) * d * act
    collectives += tp_collectives(x, blocks, T * h * act)
    if attention is not None:
        collectives += attention_collectives(x, kv_bytes, qkvo_bytes)
    # Every listed linear runs over the micro-batch's tokens (SP-gathered under TP), but those over the rank's shard.
    shard = frozenset(shard_linears)
    listed = [(T // x.sp_degree if i in shard else T, fan_out, fan_in) for i, (fan_out, fan_in) in enumerate(gemm_shapes)]
    grouped = rows = permute = permute_input = router = 0.0
    copy_backward = copy
    gemms: list[tuple[int, int, int]] = []
    expert_gemms: tuple[tuple[int, float, int, int], ...] = ()
    if experts is not None:
        # Tokens a rank's experts process (moe_tokens): k * T / sp, gathered over etp, padded to capacity when stated.
        routed = T / x.sp_degree * experts.top_k
        if experts.pad_to_capacity and experts.capacity_factor:
            routed *= experts.capacity_factor
        processed = routed * x.etp
        width = experts.width // x.etp
        fc1 = 2 if experts.gated else 1
        d = experts.model_width or h
        grouped = 2 * processed * d * (fc1 + 1) * width  # gate (when gated), up and down projections
        local = max(experts.experts // x.ep, 1)
        rows = processed / local
        permute = processed * d * act
        if experts.fc2_bias and "moe_eager_expert_bias" in x.traits:
            copy += EXPERT_BIAS_FORWARD_ACCESSES * processed * d * act
            copy_backward += EXPERT_BIAS_BACKWARD_ACCESSES * processed * d * act
        permute_input = T / x.sp_degree * d * act
        expert_gemms = ((local, rows, fc1 * width, d), (local, rows, d, width))
        padded = experts.capacity_factor if experts.pad_to_capacity and experts.capacity_factor else 1.0
        if experts.learned_gate:
            router = T / x.sp_degree * experts.experts
            gemms.append((T // x.sp_degree, experts.experts, h))  # the router's gating GEMM (not a recorded weight)
            routing = Routing(experts.experts, experts.top_k, padded, experts.routing_groups, experts.routing_groups_per_token)
        else:  # no router: no gating GEMM, no router kernels, round-robin routing (ExpertShape.learned_gate)
            routing = Routing(experts.experts, experts.top_k, padded, assignment="round_robin")
        collectives += expert_collectives(x, routed * d * act, routing, experts.rerun_switch)
        if experts.rerun_switch is not None:
            # The whole block's forward again (ExpertShape.rerun_switch): the router's gating GEMM, the block's own
            # linears over the micro-batch's tokens as listed below, the grouped GEMMs, the router's kernels and
            # the permutation; its TP collectives (shared experts under TP) are not re-issued here, as the dense
            # MLP's under Megatron-Core's mlp module are not (docs/runtimes.md).
            # block_linears names no routed expert's linear (a shared expert as wide as a routed one, at tp = etp,
            # has the same shapes and is listed).
            # Each by its position in the returned gemms (the gate first, the listed linears after it), not its shape.
            gate, at = len(gemms[:1]), len(gemms)
            block = gemms[:1] + [listed[i] for i in experts.block_linears]
            reruns += ((experts.rerun_switch, Rerun(
                gemms=tuple(block), grouped_flops=grouped, permutation=True,
                positions=tuple(range(gate)) + tuple(at + i for i in experts.block_linears),
                high_precision_positions=tuple(range(gate)) if experts.learned_gate else (),
                original_input_positions=tuple(at + i for i in experts.block_linears if i in original_input_linears))),)
    gemms += listed
    return LayerWork(
        collectives=tuple(collectives), gemms=tuple(gemms), grouped_flops=grouped, expert_rows=rows,
        expert_gemms=expert_gemms, sequential_experts=experts is not None and "moe_sequential_experts" in x.traits,
        epilogue_activation_flops=experts.epilogue_activation_ops if experts is not None else 0.0,
        attention_calls=1 if attention is not None else 0, wide_qk_attention=wide, ssd_scan=ssd_scan,
        attention_head_dims=head_dims,
        fused_softmax_flops=scores, copy_bytes=copy,
        backward_copy_bytes=copy_backward if copy_backward != copy else None, permute_bytes=permute, permute_input_bytes=permute_input,
        router_elements=router, boundary_bytes=T * h * act, reruns=reruns,
        high_precision_gemms=gemms[:1] if experts is not None and experts.learned_gate else (),
        original_input_gemms=tuple(listed[i] for i in original_input_linears),
        attention_core_switches=ATTENTION_CORE_SWITCHES if attention is not None else frozenset(),
        routed_experts=experts.experts if experts is not None else 0, alternate_matmul_flops=alternate_matmul_flops,
        eager_accesses_per_flop=eager_accesses_per_flop, rotary_flops=rotary_flops, rotary_eager_bytes=rotary_eager_bytes,
        local_mask=attention.local_mask if attention is not None else None,
    )
