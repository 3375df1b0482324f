"""Issue 17's sourced time mechanisms, by hand: DeepEP's all-to-all, eager against fused elementwise kernels,
and torchtitan's op-level SAC re-running every second matmul (docs/time.md, "Eager kernels, op-level SAC and DeepEP")."""

from __future__ import annotations

import math

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hp_core.api import model_from_preset, step_time
from hp_core.collectives import CollectiveCall, Fabric, GroupPlacement, Routing, nccl_seconds
from hp_core.costs import Collective
from hp_core.runtime_options import apply_options
from hp_core.specs import ParallelSpec, RecomputeSpec, Setting
from hp_plugins.collectives.deepep import NVLINK_EFFICIENCY, RDMA_EFFICIENCY, deepep_seconds
from hp_plugins.runtimes.timing_profiles import WHOLE_RUN_MATMUL_FACTORS

NVLINK, NIC = 450e9, 50e9
FABRIC = Fabric(intra_bandwidth=0.6 * NVLINK, intra_a2a_bandwidth=0.5 * NVLINK, intra_latency=8e-6, nic_bandwidth=0.7 * NIC,
                inter_latency=30e-6, intra_link_bandwidth=NVLINK, nic_link_bandwidth=NIC)


def _call(op, nbytes, ranks, per_node, nodes, fabric=FABRIC, routing=None):
    return CollectiveCall(op, nbytes, GroupPlacement(ranks, per_node, nodes), fabric, routing=routing)


def test_routing_reaches_the_expected_distinct_expert_groups():
    # 4 experts in 2 groups of 2, top-2: a token misses a group only by drawing both experts of the other,
    # 1 of C(4, 2) = 6 pairs, so 2 * (1 - 1/6) = 5/3 groups on average.
    assert Routing(4, 2).distinct(2) == pytest.approx(5 / 3)
    # 16 experts in 8 groups of 2, top-2: C(14, 2) / C(16, 2) = 91/120 missed, 8 * 29/120 reached.
    assert Routing(16, 2).distinct(8) == pytest.approx(8 * 29 / 120)
    assert Routing(8, 1).distinct(8) == pytest.approx(1.0)  # one expert, one rank
    assert Routing(8, 8).distinct(4) == pytest.approx(4.0)  # every expert, every group
    assert Routing(16, 2).distinct(16) == pytest.approx(2.0)  # one expert a rank: never a repeat
    assert Routing(128, 8).distinct(1) == 1.0
    with pytest.raises(ValueError, match="top_k"):
        Routing(4, 8)


@given(experts_per_group=st.integers(1, 16), groups=st.integers(1, 16), top_k=st.integers(1, 16))
def test_routing_distinct_groups_lie_between_one_and_top_k_and_grow_with_top_k(experts_per_group, groups, top_k):
    experts = experts_per_group * groups
    top_k = min(top_k, experts)
    reached = Routing(experts, top_k).distinct(groups)
    assert 1.0 - 1e-9 <= reached <= min(top_k, groups) + 1e-9
    if top_k < experts:
        assert Routing(experts, top_k + 1).distinct(groups) >= reached - 1e-9


def test_deepep_prices_all_to_all_at_its_published_link_efficiencies():
    assert NVLINK_EFFICIENCY.value == pytest.approx(153 / 200) and RDMA_EFFICIENCY.value == pytest.approx(43 / 50)
    # Within a node, no routing stated (a plain exchange): every byte lands on a rank, the efficiency is of the
    # bytes a rank receives (DeepEP's recv_x, its own share included), no per-step latency published.
    assert deepep_seconds(_call("all_to_all", 8e9, 8, 8, 1)) == pytest.approx(8e9 / (NVLINK * 153 / 200))
    # 16 ranks on 2 nodes: the buffer over the member's adapter at 43/50, and over NVLink at 153/200.
    rdma, nvlink = 16e9 / (NIC * 43 / 50), 16e9 / (NVLINK * 153 / 200)
    assert deepep_seconds(_call("all_to_all", 16e9, 16, 8, 2)) == pytest.approx(max(rdma, nvlink))
    # Faster than NCCL's all-to-all at the Hopper entry's 0.711 bus efficiency within a node.
    assert deepep_seconds(_call("all_to_all", 8e9, 8, 8, 1)) < nccl_seconds(_call("all_to_all", 8e9, 8, 8, 1))


def test_deepep_sends_a_token_once_per_rank_and_node_it_reaches():
    # 16 experts, top-2, 8e9 bytes of routed copies: 4e9 bytes of tokens, each reaching 8 * 29/120 of 8 ranks.
    routing = Routing(16, 2)
    within = deepep_seconds(_call("all_to_all", 8e9, 8, 8, 1, routing=routing))
    assert within == pytest.approx(4e9 * 8 * 29 / 120 / (NVLINK * 153 / 200))
    # 16 ranks on 2 nodes of 8 experts each: a node missed with C(8, 2) / C(16, 2) = 28/120, so 2 * 92/120 nodes
    # over RDMA; 16 groups of one expert, so 2 distinct ranks over NVLink.
    rdma = 4e9 * 2 * 92 / 120 / (NIC * 43 / 50)
    nvlink = 4e9 * 2 / (NVLINK * 153 / 200)
    assert deepep_seconds(_call("all_to_all", 8e9, 16, 8, 2, routing=routing)) == pytest.approx(max(rdma, nvlink))
    # NCCL's all-to-all moves the copies it is given: the routing does not change its price.
    assert nccl_seconds(_call("all_to_all", 8e9, 8, 8, 1, routing=routing)) == nccl_seconds(_call("all_to_all", 8e9, 8, 8, 1))


def test_deepep_sends_no_capacity_padding():
    # A layer padding each expert's input to capacity 1.25 states 1.25x the routed copies' bytes; DeepEP sends the
    # tokens unpadded, so the price is the unpadded buffer's.
    padded = _call("all_to_all", 1.25 * 8e9, 8, 8, 1, routing=Routing(16, 2, padding=1.25))
    assert deepep_seconds(padded) == pytest.approx(deepep_seconds(_call("all_to_all", 8e9, 8, 8, 1, routing=Routing(16, 2))))
    assert Routing(16, 2, padding=1.25).token_bytes(1.25 * 8e9) == pytest.approx(4e9)
    with pytest.raises(ValueError, match="padding"):
        Routing(16, 2, padding=0)


def test_routing_is_stated_only_on_an_expert_all_to_all():
    Collective("ep", "all_to_all", 1.0, 1, 1, routing=Routing(8, 2))
    with pytest.raises(ValueError, match="routing"):
        Collective("tp", "all_gather", 1.0, 1, 1, routing=Routing(8, 2))


def test_deepep_leaves_other_collectives_and_unknown_links_to_nccl():
    for op in ("all_gather", "reduce_scatter", "all_reduce"):
        assert deepep_seconds(_call(op, 8e9, 16, 8, 2)) == nccl_seconds(_call(op, 8e9, 16, 8, 2))
    bare = attrs.evolve(FABRIC, intra_link_bandwidth=None, nic_link_bandwidth=None)
    assert deepep_seconds(_call("all_to_all", 8e9, 8, 8, 1, bare)) == nccl_seconds(_call("all_to_all", 8e9, 8, 8, 1, bare))


def _moe_step(registry, value):
    runtime = apply_options(registry.runtime("fsdp2"), {"ep_all_to_all": value})
    model = model_from_preset("qwen3-30b-a3b", registry)
    layout = ParallelSpec(dp=8, ep=8, seq_len=4096, micro_batch_size=1, global_batch_size=8)
    return step_time(model, layout, registry=registry, hardware=registry.hardware_preset("h100-sxm").spec, runtime=runtime)


def test_ep_all_to_all_option_prices_the_expert_exchange_with_deepep(registry):
    nccl, deepep = _moe_step(registry, "nccl"), _moe_step(registry, "deepep")
    ep = {v: dict((g, t) for g, t, _ in s.stages[0].communication_by_group)["ep"] for v, s in (("nccl", nccl), ("deepep", deepep))}
    # Per micro-batch 48 MoE layers each dispatch and combine, forward and backward: 192 all-to-alls of 4096 tokens
    # x top-8 x 2048 x 2 bytes within one node; NCCL at the Hopper entry's 0.711 of 450 GB/s plus 7 steps of latency,
    # DeepEP at 153/200 of it on the de-duplicated bytes.
    h100 = registry.hardware_preset("h100-sxm").spec
    nbytes = 4096 * 8 * 2048 * 2
    # DeepEP sends a token once per rank it reaches: 128 experts, 16 a rank, top-8 -> 8 * (1 - C(112, 8) / C(128, 8)).
    reached = 8 * (1 - math.comb(112, 8) / math.comb(128, 8))
    assert reached == pytest.approx(5.34, abs=0.01)
    assert ep["deepep"] == pytest.approx(192 * nbytes / 8 * reached / (450e9 * 153 / 200), rel=1e-9)
    assert ep["nccl"] == pytest.approx(192 * (7 / 8 * nbytes / (450e9 * 0.711) + 7 * h100.intra_node_latency_seconds), rel=1e-9)
    # The permutation's gather and scatter read and write the tokens DeepEP delivers, 5.34 copies of the rank's own:
    # 2 passes x (5.34 - 1) x 4096 x 2048 x 2 bytes more each way, per layer (fsdp2's memory figure, its slowdown).
    from hp_core.engine.timing.rates import _rates
    runtime = apply_options(registry.runtime("fsdp2"), {"ep_all_to_all": "deepep"})
    rates = _rates(ParallelSpec(dp=8, ep=8, seq_len=4096, micro_batch_size=1, global_batch_size=8), h100,
                   runtime.timing, runtime.precision, "flash")
    extra = 48 * 2 * 2 * (reached - 1) * 4096 * 2048 * 2 / rates.permute_memory * rates.slowdown
    assert deepep.compute_seconds - nccl.compute_seconds == pytest.approx(extra, rel=1e-6)


def test_ep_all_to_all_nccl_keeps_the_collective_model_a_profile_states(registry):
    """The default choice leaves a third-party profile's collective model alone; deepep replaces it; nccl drops
    only a profile-named deepep."""
    fsdp2 = registry.runtime("fsdp2")
    stated = attrs.evolve(fsdp2, timing=attrs.evolve(fsdp2.timing, collective_model="vendor-ccl"))
    assert apply_options(stated, {"ep_all_to_all": "nccl"}).timing.collective_model == "vendor-ccl"
    assert apply_options(stated, {}).timing.collective_model == "vendor-ccl"
    assert apply_options(stated, {"ep_all_to_all": "deepep"}).timing.collective_model == "deepep"
    deepep = attrs.evolve(fsdp2, timing=attrs.evolve(fsdp2.timing, collective_model="deepep"))
    assert apply_options(deepep, {"ep_all_to_all": "nccl"}).timing.collective_model is None


def test_eager_elementwise_kernels_move_their_counted_bytes_over_the_fused(registry):
    model = model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(dp=8, seq_len=8192, micro_batch_size=2, global_batch_size=16)
    h100 = registry.hardware_preset("h100-sxm").spec
    times = {v: step_time(model, layout, registry=registry, hardware=h100,
                          runtime=apply_options(registry.runtime("fsdp2"), {"elementwise_kernels": v})) for v in ("eager", "fused")}
    # Llama 3 8B per token: each of 32 layers 2 RMSNorms and residual adds (5 ops each over h = 4096) and the
    # SiLU-gated product (6 ops over I = 14336), counted eager at (84 h + 10 I) bytes, (84 + 35) / (10 + 21) / 2
    # = 119/62 bf16 accesses per op at I = 3.5 h, forward and twice that backward, against the fused 0.5; and RoPE on
    # (32 + 8) x 128 = 5,120 elements of q and k, torchtitan's complex multiply moving 20 bytes an element eager
    # against the fused kernel's 4 (4 ops at 0.5 accesses), forward and once more backward (the inverse rotation).
    # The head's final RMSNorm (4 over h) and its loss (6 per logit of 128,256), which count none, at the profile's
    # 1.92, forward and twice backward. HBM at 3.35 TB/s x 0.85, 2 x 8,192 tokens.
    layers = 32 * (3 * (2 * 5 * 4096 + 6 * 14336) * (119 / 62 - 0.5) * 2 + 2 * (20 - 4) * 5120)
    head = 3 * (4 * 4096 + 6 * 128256) * (1.92 - 0.5) * 2
    extra = (layers + head) * 2 * 8192 / (3.35e12 * 0.85)
    assert times["eager"].compute_seconds - times["fused"].compute_seconds == pytest.approx(extra, rel=1e-9)


def test_op_sac_re_runs_every_second_matmul_of_a_block(registry):
    model = model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(dp=8, seq_len=8192, micro_batch_size=2, global_batch_size=16)
    h100 = registry.hardware_preset("h100-sxm").spec
    runtime = registry.runtime("fsdp2")
    op_sac = RecomputeSpec(default=Setting.parse(sorted(runtime.recompute_modules["op_sac"])))
    with_alt = step_time(model, layout, registry=registry, hardware=h100, runtime=runtime, recompute=op_sac)
    without = step_time(model, layout, registry=registry, hardware=h100, recompute=op_sac,
                        runtime=attrs.evolve(runtime, timing=attrs.evolve(runtime.timing, alternate_matmul_recompute=frozenset())))
    # torchtitan's Llama block runs wq, wk, wv, wo, w1, w3, w2; every second one (wk 1024, wo 4096, w3 14336 outputs
    # over h = 4096 inputs) is re-run: 2 * 16,384 tokens * 4096 * 19,456 FLOPs a layer, at fsdp2's Hopper matmul rate
    # (the kernel figure 0.70 over the fitted whole-run GEMM factor). Its save list holds no rotary op, so the rotated
    # q and k are rebuilt too: (32 + 8) x 128 elements a token at torchtitan's eager 20 bytes, HBM at 3.35 TB/s x 0.85.
    flops = 2 * 16384 * 4096 * (1024 + 4096 + 14336) * 32
    peak = h100.peak_flops["bf16"]
    rate = 0.7 / WHOLE_RUN_MATMUL_FACTORS["hopper"]
    rope = 32 * 16384 * 40 * 128 * 20 / (3.35e12 * 0.85)
    assert with_alt.recompute_seconds - without.recompute_seconds == pytest.approx(flops / (peak * rate) + rope, rel=1e-9)
    assert with_alt.mfu == pytest.approx(without.mfu * without.step_seconds / with_alt.step_seconds, rel=1e-9)


def test_async_tp_leaves_the_backward_input_gradient_reduce_scatters_exposed(registry):
    # torch's micro-pipeline TP pass fuses a reduce-scatter only when its input is one matmul's output; a
    # Llama block's input gradient sums the matmuls of wq, wk, wv (w1, w3), so those reduce-scatters stay exposed.
    model = model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(dp=1, tp=8, sp=True, seq_len=8192, micro_batch_size=1, global_batch_size=1)
    h100 = registry.hardware_preset("h100-sxm").spec
    fsdp2 = apply_options(registry.runtime("fsdp2"), {"async_tp": True})
    assert fsdp2.timing.schedule.tp_overlap_input_grad_reduce_scatter is False
    fused_all = attrs.evolve(fsdp2, timing=attrs.evolve(fsdp2.timing, schedule=attrs.evolve(
        fsdp2.timing.schedule, tp_overlap_input_grad_reduce_scatter=True)))

    def tp(runtime):
        t = step_time(model, layout, registry=registry, hardware=h100, runtime=runtime)
        return dict((g, (total, exposed)) for g, total, exposed in t.stages[0].communication_by_group)["tp"]

    (total, exposed), (total_all, exposed_all) = tp(fsdp2), tp(fused_all)
    assert total == pytest.approx(total_all)
    # Each of 32 layers reduce-scatters two input gradients of 8192 x 4096 bf16 in backward, within one node:
    # 7/8 of the buffer at the Hopper entry's 0.805 of 450 GB/s plus 7 steps of latency (the head's one, a single
    # matmul's, stays fused).
    rs = 7 / 8 * 8192 * 4096 * 2 / (450e9 * 0.805) + 7 * h100.intra_node_latency_seconds
    assert exposed >= 2 * 32 * rs * (1 - 1e-9)
    assert exposed - exposed_all == pytest.approx(2 * 32 * rs * (1 - 1 / 8), rel=1e-9)
    # Megatron's TE userbuffers hide them (tp_comm_bulk_wgrad): its schedule keeps the default.
    assert registry.runtime("megatron").timing.schedule.tp_overlap_input_grad_reduce_scatter is True


def test_each_kind_states_the_matmuls_an_every_second_mm_policy_re_runs(registry):
    from hp_core.api import layer_context
    from hp_core.specs import PrecisionSpec

    context = layer_context(ParallelSpec(seq_len=4096, tp=2, sp=True), PrecisionSpec(), "flash")
    T = 4096

    def alternate(preset, kind, at=context):
        group = next(g for g in model_from_preset(preset, registry).layers if g.kind == kind)
        return registry.layer_kind(kind).evaluate(group.config, at).work.alternate_matmul_flops

    # Llama 3 8B at TP 2: wk (1024 outputs), wo (4096) and w3 (14336) over h = 4096, each split over 2 ranks.
    assert alternate("llama3-8b", "dense") == 2 * T * 4096 * (1024 + 4096 + 14336) / 2
    # MoE layers without TP, in torchtitan's order (models/moe.py): the attention's matmuls, the router's gate, the
    # routed experts' grouped GEMMs (aten._grouped_mm, in no save list: all re-run), the shared experts' w1, w3, w2.
    one = layer_context(ParallelSpec(seq_len=4096), PrecisionSpec(), "flash")
    # Qwen3-30B-A3B (h 2048; 32 query and 4 key/value heads of 128; 128 experts, 8 routed of 768): wq, wk, wv, wo,
    # the gate: wk and wo re-run; and 8 experts' gate, up and down projections of every token.
    assert alternate("qwen3-30b-a3b", "moe", one) == 2 * T * 2048 * (512 + 4096) + 2 * T * 8 * 3 * 2048 * 768
    # DeepSeek-V3's MoE layer (h 7168; 128 heads; q_lora 1536, qk 128 + 64, kv_lora 512, v 128; 256 experts, 8 routed
    # and 1 shared of 2048): wq_a, wq_b, wkv_a, wkv_b, wo, the gate, w1, w3, w2 -- wq_b, wkv_b, the gate and w3 re-run.
    assert alternate("deepseek-v3", "mla_moe", one) == (
        2 * T * (1536 * 128 * 192 + 512 * 128 * 256 + 7168 * 256 + 7168 * 2048) + 2 * T * 8 * 3 * 7168 * 2048)
    # A kind that does not record its order states none (None, not 0): Mamba-2.
    assert alternate("mamba-codestral-7b", "mamba2", one) is None


def test_op_sac_prices_a_layer_without_its_matmul_order_at_half_its_matmuls_and_says_so(registry):
    # Absent is not zero: Nemotron 3 Nano's MoE-only layer (no attention before its router, an order torchtitan's
    # MoE.forward does not run) does not state its matmuls' order, so torchtitan's every-second-mm policy re-runs
    # the documented default, half its forward matmul FLOPs.
    from hp_core.engine.timing.layer import alternate_matmul_flops
    from hp_core.costs import LayerWork

    assert alternate_matmul_flops(LayerWork(), 6e12) == 3e12
    assert alternate_matmul_flops(LayerWork(alternate_matmul_flops=0.0), 6e12) == 0.0  # a stated zero stays zero
    from hp_core.specs import LayerGroup, ModelSpec

    nano = model_from_preset("nemotron-3-nano-30b-a3b", registry)
    config = next(g.config for g in nano.layers if g.kind == "moe_only")
    model = ModelSpec(name="moe-only", layers=(LayerGroup(kind="moe_only", config=config, count=4),), source="test")
    layout = ParallelSpec(dp=8, seq_len=4096, micro_batch_size=1, global_batch_size=8)
    h100 = registry.hardware_preset("h100-sxm").spec
    runtime = registry.runtime("fsdp2")
    op_sac = RecomputeSpec(default=Setting.parse(sorted(runtime.recompute_modules["op_sac"])))
    with_alt = step_time(model, layout, registry=registry, hardware=h100, runtime=runtime, recompute=op_sac)
    without = step_time(model, layout, registry=registry, hardware=h100, recompute=op_sac,
                        runtime=attrs.evolve(runtime, timing=attrs.evolve(runtime.timing, alternate_matmul_recompute=frozenset())))
    # Per token of a layer (h = 2688): the router's gate over 128 experts, 6 routed experts' up and down
    # projections of 1856 (relu2, ungated) and the shared expert's of 3712: forward FLOPs
    # 2 * 2688 * (128 + 6 * 2 * 1856 + 2 * 3712); half of them re-run, 4 layers, 4096 tokens.
    per_token = 2 * 2688 * (128 + 6 * 2 * 1856 + 2 * 3712)
    flops = 0.5 * per_token * 4096 * 4
    rate = 0.7 / WHOLE_RUN_MATMUL_FACTORS["hopper"]  # fsdp2's Hopper matmul rate
    # The policy also re-runs the token permutation's forward (no op of it in its save list): the profile's two
    # passes, 2 (routed + own) token bytes, 6 x 4096 routed rows and 4096 tokens of 2688 in bf16, at 3.35 TB/s x 0.85.
    permutation = 4 * 2 * (6 * 4096 + 4096) * 2688 * 2 / (3.35e12 * 0.85)
    assert with_alt.recompute_seconds - without.recompute_seconds == pytest.approx(
        flops / (h100.peak_flops["bf16"] * rate) + permutation, rel=1e-9)
    assert with_alt.provenance["alternate_matmul_default"].startswith("moe_only: the order of the matmuls")
    assert "alternate_matmul_default" not in without.provenance
    # A kind that states its order (Llama's dense layer) gets no note.
    llama = step_time(model_from_preset("llama3-8b", registry), layout, registry=registry, hardware=h100,
                      runtime=runtime, recompute=op_sac)
    assert "alternate_matmul_default" not in llama.provenance


def test_eager_elementwise_accesses_are_counted_per_layer_from_its_widths(registry):
    from hp_core.api import layer_context
    from hp_core.specs import PrecisionSpec

    context = layer_context(ParallelSpec(seq_len=4096), PrecisionSpec(), "flash")

    def accesses(preset, kind):
        group = next(g for g in model_from_preset(preset, registry).layers if g.kind == kind)
        return registry.layer_kind(kind).evaluate(group.config, context).work.eager_accesses_per_flop

    # (84 h + 10 I + 20 r) bytes over (10 h + 6 I + 4 r) ops, halved, r = (a + g) x head_dim the rotated elements of q
    # and k (torchtitan's complex multiply, 20 bytes, against RoPE's 4 ops). Llama 3 8B (I = 3.5 h, r = 40 x 128):
    # 589,824 / 147,456 / 2 = 2 exactly (119/62 = 1.919, the old constant 1.92 rounded, without RoPE).
    assert accesses("llama3-8b", "dense") == pytest.approx(2.0, rel=1e-12)
    # Qwen2.5-7B: h = 3584, I = 18944, 28 + 4 heads of 128.
    assert accesses("qwen2.5-7b", "dense") == pytest.approx(
        (84 * 3584 + 10 * 18944 + 20 * 4096) / (10 * 3584 + 6 * 18944 + 4 * 4096) / 2, rel=1e-12)
    # Mixtral 8x7B: the SiLU-gated product over the top-2 experts' I = 14336 each per token, h = 4096, 32 + 8 heads of 128.
    assert accesses("mixtral-8x7b", "moe") == pytest.approx(
        (84 * 4096 + 10 * 2 * 14336 + 20 * 5120) / (10 * 4096 + 6 * 2 * 14336 + 4 * 5120) / 2, rel=1e-12)
    # Qwen3-30B-A3B: 8 experts of 768, h = 2048, 32 + 4 heads of 128.
    assert accesses("qwen3-30b-a3b", "moe") == pytest.approx(
        (84 * 2048 + 10 * 8 * 768 + 20 * 4608) / (10 * 2048 + 6 * 8 * 768 + 4 * 4608) / 2, rel=1e-12)
    # Nemotron-H's MLP layer: its squared ReLU is counted, its fp32-weight RMSNorm is not: none stated, 1.92 prices it.
    assert accesses("nemotron-h-8b", "mlp") is None


def test_unpaired_passes_are_megatron_cores_warm_up_under_the_expert_all_to_all_overlap():
    from hp_core.engine.timing.overlap import unpaired_passes

    # No pipeline: the first forward and the last backward alone (combined_1f1b_schedule_for_no_pipelining).
    assert unpaired_passes("1f1b", 1, 1, 0, 64) == 1
    # Interleaved, PP 8, VP 4, 512 micro-batches: (8 - stage - 1) * 2 + (4 - 1) * 8 + 1 chunk passes.
    assert [unpaired_passes("interleaved_1f1b", 8, 4, s, 512) for s in (0, 1, 7)] == [39, 37, 25]
    # PP 2, VP 12 (26.02's Qwen3-30B-A3B H100 row): 2 + 22 + 1 on the first stage, 23 on the last.
    assert [unpaired_passes("interleaved_1f1b", 2, 12, s, 128) for s in (0, 1)] == [25, 23]
    # At most every pass: PP 2, VP 2, one micro-batch runs 2 chunk passes each way.
    assert unpaired_passes("interleaved_1f1b", 2, 2, 0, 1) == 2
    # Megatron-Core refuses the overlap under a pipeline without virtual stages: nothing added there.
    assert unpaired_passes("1f1b", 4, 1, 0, 64) == 0


def _overlap_step(registry, layout, **options):
    runtime = apply_options(registry.runtime("megatron"), {"overlap_moe_expert_parallel_comm": True, **options})
    return step_time(model_from_preset("qwen3-30b-a3b", registry), layout, registry=registry,
                     hardware=registry.hardware_preset("h100-sxm").spec, runtime=runtime)


def _ep(stage):
    return next((total, exposed) for g, total, exposed in stage.communication_by_group if g == "ep")


def test_the_overlaps_lone_passes_expose_the_all_to_all_it_hides(registry):
    # No pipeline, 4 micro-batches: one lone forward and one lone backward of the whole model, which expose what the
    # overlap hides of each layer's all-to-alls (the ep group's time less its exposed time, per micro-batch).
    flat = _overlap_step(registry, ParallelSpec(dp=8, ep=8, seq_len=4096, micro_batch_size=1, global_batch_size=32))
    total, exposed = _ep(flat.stages[0])
    assert total > exposed >= 0
    assert flat.provenance["ep_overlap_unpaired_seconds"] == pytest.approx(total - exposed, rel=1e-9)
    assert flat.bubble_seconds == pytest.approx(total - exposed, rel=1e-9)
    # Interleaved, PP 2, VP 2, 4 micro-batches (8 chunk passes a stage): the first stage runs 2 + 2 + 1 = 5 lone
    # chunk passes each way, the second 3; each chunk half its stage's layers; the larger figure once.
    piped = _overlap_step(registry, ParallelSpec(dp=8, ep=8, pp=2, vpp=2, seq_len=4096, micro_batch_size=1,
                                                 global_batch_size=32, schedule="interleaved_1f1b"))
    hidden = [t - e for t, e in map(_ep, piped.stages)]
    assert piped.provenance["ep_overlap_unpaired_seconds"] == pytest.approx(max(5 * hidden[0] / 2, 3 * hidden[1] / 2), rel=1e-9)
    # Without the overlap nothing is lone.
    plain = step_time(model_from_preset("qwen3-30b-a3b", registry), ParallelSpec(dp=8, ep=8, seq_len=4096, micro_batch_size=1,
                      global_batch_size=32), registry=registry, hardware=registry.hardware_preset("h100-sxm").spec,
                      runtime=registry.runtime("megatron"))
    assert "ep_overlap_unpaired_seconds" not in plain.provenance and plain.bubble_seconds == 0


def test_delay_wgrad_compute_hides_part_of_a_lone_backwards_dispatch(registry):
    layout = ParallelSpec(dp=8, ep=8, seq_len=4096, micro_batch_size=1, global_batch_size=32)
    lone = _overlap_step(registry, layout).provenance["ep_overlap_unpaired_seconds"]
    delayed = _overlap_step(registry, layout, delay_wgrad_compute=True)
    total, _ = _ep(delayed.stages[0])
    # The dispatch's backward is a quarter of a layer's four equal all-to-alls (no recompute); at most that hides.
    assert 0 < lone - delayed.provenance["ep_overlap_unpaired_seconds"] <= total / 4 * (1 + 1e-9)
    assert delayed.compute_seconds == _overlap_step(registry, layout).compute_seconds


def test_delay_wgrad_compute_hides_bf16_expert_gradients_under_a_linears_only_recipe(registry):
    # torchao-mxfp8 quantizes the linear layers and keeps the grouped (expert) GEMMs in bf16 (gemms "linears"): what
    # delay_wgrad hides of a lone backward, min(the dispatch's backward all-to-all, the experts' weight gradients) / 2,
    # takes the experts at their bf16 time, as a bf16 run does (0.01550 s here); mxfp8 quantizes them too and hides less
    # (0.008739 s: their time over its 1.83 backward speedup binds).
    layout = ParallelSpec(dp=8, ep=8, seq_len=4096, micro_batch_size=1, global_batch_size=32)

    def hidden(recipe):
        def unpaired(**options):
            runtime = apply_options(registry.runtime("megatron"), {"overlap_moe_expert_parallel_comm": True, **options})
            return step_time(model_from_preset("qwen3-30b-a3b", registry), layout, registry=registry,
                             hardware=registry.hardware_preset("b200").spec, runtime=runtime,
                             precision=attrs.evolve(runtime.precision, recipe=recipe)).provenance["ep_overlap_unpaired_seconds"]
        return unpaired() - unpaired(delay_wgrad_compute=True)

    bf16, mxfp8 = hidden("bf16"), hidden("mxfp8")
    assert hidden("torchao-mxfp8") == pytest.approx(bf16, rel=1e-12)
    assert bf16 == pytest.approx(0.015498, abs=5e-7) and mxfp8 == pytest.approx(0.008739, abs=5e-7)
    assert mxfp8 < 0.6 * bf16


def test_delay_wgrad_compute_without_the_overlap_is_refused(registry):
    from hp_core.errors import ConfigError

    runtime = apply_options(registry.runtime("megatron"), {"delay_wgrad_compute": True})
    with pytest.raises(ConfigError, match="overlap_moe_expert_parallel_comm") as raised:
        step_time(model_from_preset("qwen3-30b-a3b", registry), ParallelSpec(dp=8, ep=8, seq_len=4096, micro_batch_size=1),
                  registry=registry, hardware=registry.hardware_preset("h100-sxm").spec, runtime=runtime)
    assert raised.value.path == "$.runtime.options.delay_wgrad_compute"
