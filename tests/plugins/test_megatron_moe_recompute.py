"""Megatron-Core's ``moe`` recompute module: the MoE block's ``moeLayer`` switch and the block's re-run.

Megatron-Core (megatron/core/transformer/moe/moe_layer.py at NVIDIA/Megatron-LM@d98e8a6) checkpoints the whole
``MoELayer.forward`` under ``--recompute-modules moe`` (``tensor_parallel.checkpoint``; ``te_checkpoint`` under
fp8/fp4): the checkpoint keeps its input, the pre-MLP norm's output, and re-runs the router, the dispatch, the
experts and the combine in backward. The figures below are by hand for a small MoE-only layer (hybrid ``moe_only``
kind): h 64, 8 routed experts of width 32, top-2, one shared expert of width 48, SwiGLU, 128 tokens (sequence 128,
micro-batch 1), bf16 activations, EP 2, TP 1, the megatron runtime's traits (fused SwiGLU, the probabilities in the
activation, Transformer Engine's fused permutation).
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hp_core.api import build_registry, model_from_preset
from hp_core.engine.prepare import _evaluate, layer_context, with_sublayers
from hp_core.engine.timing.elementwise import permute_seconds
from hp_core.engine.timing.gemm_seconds import _matmul_seconds
from hp_core.engine.timing.layer import _layer_time
from hp_core.engine.timing.rates import _rates
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.kinds.hybrid import MoELayerConfig
from hp_plugins.kinds.moe import MoEConfig

REGISTRY = build_registry()
RUNTIME = REGISTRY.runtime("megatron")
MOE = RUNTIME.recompute_modules["moe"]
SMALL = MoELayerConfig(hidden_size=64, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                       shared_expert_intermediate_size=48)


def _cost(config=SMALL, kind="moe_only", parallel=ParallelSpec(seq_len=128, ep=2, dp=2), runtime=RUNTIME):
    context = with_sublayers(layer_context(parallel, PrecisionSpec(), "flash", 1, runtime.traits), REGISTRY)
    return _evaluate(REGISTRY.layer_kind(kind, "$"), config, context, "$")


def _rates_for(recipe: str = "bf16", hardware: str = "h100-sxm", host: bool = False):
    rates = _rates(ParallelSpec(seq_len=128, ep=2, dp=2), REGISTRY.hardware_preset(hardware).spec, RUNTIME.timing,
                   attrs.evolve(RUNTIME.precision, recipe=recipe), "flash", recipe=REGISTRY.precision_recipe(recipe))
    return attrs.evolve(rates, slowdown=1.0) if host else attrs.evolve(rates, host=None, slowdown=1.0)


def test_the_megatron_runtime_states_the_moe_module_on_every_kind_with_routed_experts():
    assert MOE == frozenset({"moeLayer", "ffAct"})
    for kind in ("moe", "mla_moe", "gdn_moe", "gated_attention_moe", "moe_only"):
        assert "moeLayer" in REGISTRY.layer_kind(kind, "$").switches, kind
        assert RUNTIME.module_acts_on("moe", kind) and RUNTIME.executes(MOE, kind), kind
        assert RUNTIME.executes(MOE | {"normOp"}, kind), kind  # moe with layernorm
    for kind in ("dense", "mla", "mlp", "gdn", "gated_attention", "attention", "mamba2"):
        assert "moeLayer" not in REGISTRY.layer_kind(kind, "$").switches, kind
        assert not RUNTIME.module_acts_on("moe", kind), kind
    # moeLayer alone is no module's (moe re-runs the activation too).
    assert not RUNTIME.executes(frozenset({"moeLayer"}), "moe_only")


def test_moe_keeps_only_the_checkpoint_s_input():
    # Kept with nothing recomputed, bytes: the pre-norm's input and output, T h 2 = 128 x 64 x 2 = 16,384 each; the
    # router's probabilities T E 2 = 2,048; the dispatched tokens k T h 2 = 256 x 64 x 2 = 32,768; the routed
    # experts' FC1 output 2 x 256 x 32 x 2 = 32,768 and SwiGLU product 16,384 (ffAct); their fp32 probabilities
    # 256 x 4 = 1,024; the permutation's int32 row map T (2E + 1) 4 = 8,704; the shared expert's FC1 output
    # 2 x 128 x 48 x 2 = 24,576 and product 12,288 (ffAct). In all 163,328.
    cost = _cost()
    terms = {t.op: (t.bytes, t.switch) for t in cost.activations}
    assert terms == {
        "moe_norm_in": (16_384, None), "moe_norm_out": (16_384, "normOp"),
        "router_probs": (2_048, "moeLayer"), "dispatched_tokens": (32_768, "moeLayer"),
        "expert_fc1_out": (32_768, "moeLayer"), "expert_mul_out": (16_384, "ffAct"),
        "expert_probs": (1_024, "moeLayer"), "permute_row_map": (8_704, "moeLayer"),
        "shared_fc1_out": (24_576, "moeLayer"), "shared_mul_out": (12_288, "ffAct"),
    }
    assert cost.kept_bytes == 163_328
    # moe: the checkpoint keeps its input (the norm's output) and nothing inside the block: 32,768 bytes.
    assert cost.kept_under(MOE) == 2 * 16_384 == 32_768
    # With layernorm (the norm's output dropped and rebuilt too) only the layer's input stays; moe_act alone keeps
    # all but the two products.
    assert cost.kept_under(MOE | RUNTIME.recompute_modules["layernorm"]) == 16_384
    assert cost.kept_under(RUNTIME.recompute_modules["moe_act"]) == 163_328 - 16_384 - 12_288


def test_moe_re_runs_the_block_s_gemms_and_its_all_to_alls():
    cost = _cost()
    work = cost.work
    rerun = work.rerun("moeLayer")
    # The router's gating GEMM (128 x 8 x 64), the shared expert's FC1 (128 x 96 x 64) and FC2 (128 x 64 x 48):
    # 131,072 + 1,572,864 + 786,432 FLOPs; the routed experts' grouped GEMMs 2 x 256 x 64 x (2 + 1) x 32 = 3,145,728.
    assert rerun.gemms == ((128, 8, 64), (128, 96, 64), (128, 64, 48)) and rerun.grouped_flops == 3_145_728
    assert rerun.permutation and rerun.matmul_flops_per_byte == 0 and rerun.copy_bytes == 0
    # The dispatch and combine all-to-all, 128 x 2 x 64 x 2 = 32,768 bytes each, are issued again under moeLayer.
    (a2a,) = [c for c in work.collectives if c.group == "ep"]
    assert (a2a.op, a2a.bytes, a2a.forward_calls, a2a.backward_calls, a2a.rerun_switch) == ("all_to_all", 32_768, 2, 2, "moeLayer")

    r = _rates_for()
    plain = _layer_time(cost, work, False, frozenset(), r)
    moe = _layer_time(cost, work, False, MOE, r)
    act = _layer_time(cost, work, False, frozenset({"ffAct"}), r)
    # Every GEMM of the layer is the block's: the re-run's FLOPs are the layer's forward matmul FLOPs, 5,636,096.
    assert moe.recomputed_flops == cost.forward.matmul_flops == 131_072 + 1_572_864 + 786_432 + 3_145_728 == 5_636_096
    assert plain.recomputed_flops == act.recomputed_flops == 0
    # The re-run's time: the forward's GEMMs, permutation and router kernels, plus ffAct's rewrite of the two products.
    gemms = _matmul_seconds(cost.forward.matmul_flops - 3_145_728, 3_145_728, work, r)[0]
    forward = gemms + permute_seconds(work, r)[0] + work.router_elements * r.router_fwd
    assert moe.recompute_seconds == pytest.approx(forward + act.recompute_seconds, rel=1e-12)
    assert act.recompute_seconds == pytest.approx(2 * (16_384 + 12_288) / r.memory, rel=1e-12)
    # The all-to-alls: 2 forward and 2 backward calls, and under moe 2 more in backward: 6 / 4 of the time.
    ep = {g: total for g, total, _ in plain.communication_by_group}["ep"]
    assert {g: total for g, total, _ in moe.communication_by_group}["ep"] == pytest.approx(1.5 * ep, rel=1e-12)
    # Full recompute re-runs all of that and the norm besides.
    assert _layer_time(cost, work, True, frozenset(), r).recompute_seconds > moe.recompute_seconds


def test_the_re_run_runs_in_the_recipe_and_waits_on_the_host():
    cost = _cost()
    # te_checkpoint re-runs the block in FP8: the same FLOPs, the GEMMs at the recipe's speedup plus its quantization.
    bf16 = _layer_time(cost, cost.work, False, MOE, _rates_for("bf16"))
    fp8 = _layer_time(cost, cost.work, False, MOE, _rates_for("fp8-megatron-param-gather"))
    assert fp8.recomputed_flops == bf16.recomputed_flops == 5_636_096
    assert fp8.recompute_seconds != bf16.recompute_seconds
    # A layer this small is host-bound: the re-run takes the host time issuing its kernels, the four GEMMs' (the
    # grouped ones as one) with their kernels around them, the two all-to-all calls, the router's forward kernels
    # and the permutation's; plus ffAct's rewrite.
    r = _rates_for(host=True)
    host = r.host
    kernels = 4 * host.kernels_per_gemm + 2 + host.router_kernels[0] + host.permute_kernels
    act = _layer_time(cost, cost.work, False, frozenset({"ffAct"}), r).recompute_seconds
    t = _layer_time(cost, cost.work, False, MOE, r)
    assert t.recompute_seconds == pytest.approx(kernels * host.seconds_per_kernel + act, rel=1e-12)


_modules = st.sets(st.sampled_from(("core_attn", "layernorm", "moe_act")))


@settings(max_examples=40, deadline=None)
@given(h=st.sampled_from((32, 64, 96)), experts=st.sampled_from((4, 8, 16)), k=st.integers(1, 4),
       width=st.sampled_from((16, 32, 48)), shared=st.sampled_from((0, 32, 64)), ep=st.sampled_from((1, 2, 4)),
       tp=st.sampled_from((1, 2)), gated=st.booleans(), latent=st.sampled_from((None, 16)),
       attention=st.booleans(), others=_modules)
def test_adding_moe_never_keeps_more(h, experts, k, width, shared, ep, tp, gated, latent, attention, others):
    """Property: on an MoE layer, adding ``moe`` to any set of the runtime's other modules keeps no more bytes and
    leaves kept plus working the same (what the backward rebuilds it holds again), and keeps exactly the norm's
    input and output (and what an attention block keeps) with layernorm off."""
    from hp_core.engine.stage import PlacedLayer

    fields = dict(hidden_size=h, num_experts=experts, num_experts_per_tok=min(k, experts), moe_intermediate_size=width,
                  shared_expert_intermediate_size=shared, moe_latent_size=latent,
                  expert_activation="swiglu" if gated else "mlp", hidden_act="silu" if gated else "relu2")
    if attention:
        kind, config = "moe", MoEConfig(num_attention_heads=4, num_key_value_heads=2,
                                        **{k_: v for k_, v in fields.items() if k_ != "moe_latent_size"})
    else:
        kind, config = "moe_only", MoELayerConfig(**fields)
    parallel = ParallelSpec(tp=tp, sp=tp > 1, seq_len=64, ep=ep, dp=max(ep, 2))
    cost = _cost(config, kind, parallel)
    switches = REGISTRY.layer_kind(kind, "$").switches

    def placed(modules):
        wanted = frozenset().union(*(RUNTIME.recompute_modules[m] for m in modules)) & frozenset(switches)
        return PlacedLayer.make(kind, cost, False, wanted | (RUNTIME.implicit_recompute & frozenset(switches)), "", 0.0)

    before, after = placed(others), placed(others | {"moe"})
    assert after.kept_bytes <= before.kept_bytes
    assert after.kept_bytes + after.backward_working_bytes == before.kept_bytes + before.backward_working_bytes
    if "layernorm" not in others and not attention:
        hidden = 64 * h * 2 // (tp if tp > 1 else 1)
        assert after.kept_bytes == 2 * hidden  # the norm's input and output (its SP-gathered copy is re-gathered)


def test_the_importer_and_exporter_read_and_write_moe():
    """Megatron-Bridge's Nemotron 3 Nano H100 FP8 config recomputes ``moe layernorm core_attn moe_act``: on the
    hybrid model's MoE layers normOp, ffAct and moeLayer; on its attention layers the attention core's switches and
    normOp; on its Mamba layers normOp. The exporter writes the fewest modules giving exactly those sets (moe_act is
    within moe there)."""
    from hp_core.api import model_from_preset
    from hp_core.specs import RecomputeSpec, Setting
    from hp_plugins.exporters.megatron import export_megatron
    from hp_plugins.importers.megatron import import_megatron_args

    argv = ("--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
            "--ffn-hidden-size 1024 --vocab-size 1000 --swiglu --normalization RMSNorm --disable-bias-linear "
            "--untie-embeddings-and-output-weights --micro-batch-size 1 --global-batch-size 8 --bf16 "
            "--attention-dropout 0.0 --hidden-dropout 0.0 --num-experts 8 --moe-router-topk 2 "
            "--moe-ffn-hidden-size 256 --moe-layer-freq ([0]*1+[1]*3)*1 --moe-grouped-gemm "
            "--recompute-granularity selective --recompute-modules moe layernorm core_attn moe_act")
    job = import_megatron_args(argv.split(), REGISTRY)
    attention = ["attBMM", "dropout", "headCast", "normOp", "softmax"]
    assert job.document["recompute"] == {"default": "none", "layers": {
        "0-0": attention, "1-3": sorted([*attention, "ffAct", "moeLayer"])}}
    assert not any("recompute" in line for line in job.unmapped)

    model = model_from_preset("nemotron-3-nano-30b-a3b", REGISTRY)
    layers = sum(g.count for g in model.layers if REGISTRY.layer_kind(g.kind).placement == "body")
    kinds = [g.kind for g in model.layers for _ in range(g.count) if REGISTRY.layer_kind(g.kind).placement == "body"]
    settings_ = []
    for kind in kinds:
        switches = {"moe_only": {"normOp", "ffAct", "moeLayer"}, "attention": {"normOp", "attBMM", "headCast", "dropout",
                    "softmax"}, "mamba2": {"normOp"}}[kind]
        settings_.append(Setting("switches", frozenset(switches)))
    plan = RecomputeSpec(layers=tuple((i, i, s) for i, s in enumerate(settings_)))
    assert len(settings_) == layers == 52
    flags = export_megatron(plan, model, ParallelSpec(seq_len=8192, ep=8, dp=8), registry=REGISTRY)
    assert flags == "--recompute-granularity selective --recompute-modules core_attn layernorm moe"


def test_an_attention_module_s_own_format_leaves_the_moe_block_s_rerun_alone():
    # An attention + MoE layer (moe kind) in an NVFP4 run on B200, attention's linear_qkv and linear_proj in MXFP8
    # (precision.module_formats): Megatron-Core's moe module re-runs MoELayer.forward only (router, dispatch,
    # experts, shared expert, combine), none of attention's GEMMs, so the re-run is priced exactly as with no module
    # format; the layer's own forward, which runs those GEMMs, does change.
    from hp_core.engine.precision import recipe_cost, resolve_recipe

    config = MoEConfig(num_attention_heads=4, num_key_value_heads=2, hidden_size=64, num_experts=8,
                       num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48)
    parallel = ParallelSpec(seq_len=128, ep=2, dp=2)
    cost = _cost(config, "moe", parallel)
    times = []
    for formats in ({}, {"attention_qkv": "mxfp8", "attention_proj": "mxfp8"}):
        precision = attrs.evolve(RUNTIME.precision, recipe="nvfp4", module_formats=formats)
        recipe = resolve_recipe(REGISTRY, precision)
        priced = recipe_cost(cost, cost, recipe, 2, False, precision.module_formats)
        assert [m.format for m in priced.work.modules] == ([None, None] if not formats else ["mxfp8", "mxfp8"])
        rates = attrs.evolve(_rates(parallel, REGISTRY.hardware_preset("b200").spec, RUNTIME.timing, precision,
                                    "flash", recipe=recipe), host=None, slowdown=1.0)
        times.append(_layer_time(priced, priced.work, False, MOE, rates))
    plain, formatted = times
    assert formatted.recompute_seconds == plain.recompute_seconds > 0
    assert formatted.recomputed_flops == plain.recomputed_flops
    assert formatted.forward_seconds != plain.forward_seconds


def test_a_shared_expert_as_wide_as_a_routed_one_is_re_run_too():
    # A shared expert of the routed experts' width (32; DeepSeek-V3's and Kimi K2's 2,048 alike) at TP 1 = ETP 1 has
    # their per-rank shapes, SwiGLU FC1 (64, 64) and FC2 (64, 32): the moe module's re-run still runs it, beside the
    # router's gate (128 tokens, 8 experts, h 64). Its dense FLOPs 2 x 128 x (8 x 64 + 64 x 64 + 64 x 32) = 1,703,936,
    # the layer's forward dense FLOPs: all of them but the grouped GEMMs' 2 x 256 x 64 x 3 x 32 = 3,145,728.
    cost = _cost(attrs.evolve(SMALL, shared_expert_intermediate_size=32))
    rerun = cost.work.rerun("moeLayer")
    assert rerun.gemms == ((128, 8, 64), (128, 64, 64), (128, 64, 32))
    assert sum(2 * rows * out * inp for rows, out, inp in rerun.gemms) == 1_703_936
    assert rerun.grouped_flops == 3_145_728 and cost.forward.matmul_flops == 1_703_936 + 3_145_728


def test_a_shared_expert_as_wide_as_a_routed_one_is_listed_among_the_layer_s_gemms():
    # LayerWork.gemms, priced shape by shape: the router's gate (128 x 8 x 64) and the shared expert's SwiGLU FC1
    # (128 x 64 x 64) and FC2 (128 x 64 x 32), once each, though the routed experts (width 32, TP 1 = ETP 1) have
    # the same per-rank shapes; the routed experts' are not listed (their grouped GEMMs, 2 x 256 x 64 x 3 x 32 =
    # 3,145,728 FLOPs). The listed FLOPs, 2 x 128 x (8 x 64 + 64 x 64 + 64 x 32) = 1,703,936, are the layer's
    # forward matmul FLOPs but the grouped ones; the weight shapes stay the distinct ones, routed first.
    cost = _cost(attrs.evolve(SMALL, shared_expert_intermediate_size=32))
    assert cost.work.gemms == ((128, 8, 64), (128, 64, 64), (128, 64, 32))
    assert sum(2 * rows * out * inp for rows, out, inp in cost.work.gemms) == 1_703_936
    assert cost.work.grouped_flops == 3_145_728 and cost.forward.matmul_flops == 1_703_936 + 3_145_728
    assert cost.weight_shapes == ((64, 64), (64, 32))
    assert cost.work.high_precision_gemms == ((128, 8, 64),)


def test_deepseek_v3_s_shared_expert_is_listed_at_tp_equal_to_etp():
    # DeepSeek-V3's MoE layer (h 7,168, 256 routed experts of width 2,048 top-8, one shared expert of width 2,048,
    # SwiGLU) at TP 2 = ETP 2 with SP, 4,096 tokens, EP 8: the shared expert's FC1 (2 x 2,048 / 2 = 2,048 x 7,168)
    # and FC2 (7,168 x 1,024) per rank are the routed experts' shapes at ETP 2; each is listed once, over the
    # SP-gathered 4,096 tokens; the router's gate over the rank's 2,048 tokens (256 x 7,168) too.
    group = next(g for g in model_from_preset("deepseek-v3", REGISTRY).layers if g.kind == "mla_moe")
    parallel = ParallelSpec(tp=2, etp=2, sp=True, ep=8, dp=8, seq_len=4096)
    context = with_sublayers(layer_context(parallel, PrecisionSpec(), "flash", 1, RUNTIME.traits), REGISTRY)
    cost = REGISTRY.layer_kind("mla_moe", "$").evaluate(group.config, context)
    gemms = cost.work.gemms
    assert gemms.count((4096, 2048, 7168)) == 1 and gemms.count((4096, 7168, 1024)) == 1
    assert (2048, 256, 7168) in gemms
    assert {(out, inp) for _, _, out, inp in cost.work.expert_gemms} == {(2048, 7168), (7168, 1024)}
    listed = sum(2 * rows * out * inp for rows, out, inp in gemms)
    assert listed == pytest.approx(cost.forward.matmul_flops - cost.work.grouped_flops, rel=1e-12)


def test_two_linears_of_one_shape_are_both_listed():
    # A dense layer of h 64, 4 heads of 16 (no GQA), a plain (non-gated) MLP of width 64, TP 1, 128 tokens: the
    # attention's output projection (64 x 64), the MLP's FC1 (64 x 64) and FC2 (64 x 64) are three GEMMs of one
    # shape, each listed, beside the fused QKV (192 x 64): 2 x 128 x (192 + 3 x 64) x 64 = 6,291,456 FLOPs, the
    # layer's matmul FLOPs. One weight shape each.
    from hp_plugins.kinds.dense import DenseConfig
    config = DenseConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, intermediate_size=64,
                         gated_mlp=False, hidden_act="gelu")
    cost = _cost(config, kind="dense", parallel=ParallelSpec(seq_len=128))
    assert sorted(cost.work.gemms) == [(128, 64, 64)] * 3 + [(128, 192, 64)]
    assert sum(2 * rows * out * inp for rows, out, inp in cost.work.gemms) == 6_291_456 == cost.forward.matmul_flops
    assert sorted(cost.weight_shapes) == [(64, 64), (192, 64)]
