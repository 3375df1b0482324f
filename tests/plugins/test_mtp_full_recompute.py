"""Megatron-Core's full recompute of the MTP layer, and the planner pricing the module as its plan makes it recompute.

Megatron-Core (``megatron/core/transformer/multi_token_prediction.py`` at NVIDIA/Megatron-LM@d98e8a6): where
``recompute_granularity`` is ``full``, ``MultiTokenPredictionLayer.forward`` (lines 1705-1720) runs
``_checkpointed_forward`` (lines 1492-1653), which under ``recompute_method uniform`` checkpoints
``_proj_and_transformer_layer`` (``eh_proj``, the inner layer, the final norm) whole and under ``block`` warns and
runs it plainly. hp reads every body layer ``full`` as ``uniform`` (hp_core/engine/inner_layers.py).

The small model of tests/plugins/test_mtp_recompute.py: h 64, a vocabulary of 1,024, 128 tokens, bf16, EP 2, one
MoE-only layer in the MTP module (router 8 x 64, 8 experts of width 32 top-2, a shared expert of width 48).
"""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import estimate, plan_recompute, step_time
from hp_core.engine.inner_layers import checkpointed_whole
from hp_core.engine.prepare import prepare
from hp_core.specs import LayerGroup, RecomputeSpec, Setting
from test_mtp_recompute import MODEL, PARALLEL, REGISTRY, RUNTIME, SMALL, _model, _mtp_cost

FULL = RecomputeSpec.uniform("full")
# The module's terms outside its checkpoint, bytes: the next tokens' int64 ids 128 x 8 = 1,024; the embedding output
# (the checkpoint's input) T h 2 = 16,384; the final norm's output (the shared head's input) 16,384; the loss softmax
# T V 2 = 262,144. The rest of its 541,184 (test_mtp_recompute.py) is inside.
OUTSIDE = 1_024 + 16_384 + 16_384 + 262_144
# Forward FLOPs re-run by the checkpoint: eh_proj 2 T (2h) h = 2 x 128 x 128 x 64 = 2,097,152 and the MoE layer's
# 5,636,096 (router 131,072, shared expert 1,572,864 + 786,432, routed experts 3,145,728); not the shared head's
# 2 T h V = 16,777,216, which runs after the checkpoint.
INSIDE_FLOPS = 2_097_152 + 5_636_096


def test_the_mtp_cost_states_its_checkpoint():
    cost = _mtp_cost()
    assert cost.checkpoint.kept == {"mtp_token_ids", "enorm_in", "head_norm_out", "mtp_loss_softmax"}
    assert cost.checkpoint.gemms == ((128, 1_024, 64),)  # the shared head's (T, V/tp, h)
    assert cost.checkpoint.collectives == ()  # TP 1: no embedding or head collective
    assert sum(t.bytes for t in cost.activations if t.op in cost.checkpoint.kept) == OUTSIDE == 295_936


def test_every_body_layer_full_checkpoints_the_module_whole():
    found = estimate(MODEL, PARALLEL, registry=REGISTRY, runtime=RUNTIME, recompute=FULL)
    assert found.stages[0].activations_by_kind["mtp"] == OUTSIDE
    # The body layers keep their inputs: 2 x T h 2 = 32,768.
    assert found.stages[0].activations_by_kind["moe_only"] == 32_768
    # Without the runtime's reach the module keeps everything, as before.
    apart = estimate(MODEL, PARALLEL, registry=REGISTRY, runtime=attrs.evolve(RUNTIME, inner_recompute=False),
                     recompute=FULL)
    assert apart.stages[0].activations_by_kind["mtp"] == 541_184


def test_a_block_plan_leaves_the_module_as_it_is():
    # Full on the first body layer only: Megatron's block method, which skips the MTP's checkpoint; a fully
    # recomputed body layer adds no switch to the module's layer either.
    block = RecomputeSpec(layers=((0, 0, Setting("full")),))
    found = estimate(MODEL, PARALLEL, registry=REGISTRY, runtime=RUNTIME, recompute=block)
    assert found.stages[0].activations_by_kind["mtp"] == 541_184
    run = prepare(MODEL, PARALLEL, registry=REGISTRY, runtime=RUNTIME)
    mtp = len(MODEL.layers) - 1
    assert checkpointed_whole(run, mtp, (Setting("full"),) * 2)
    assert not checkpointed_whole(run, mtp, (Setting("full"), Setting()))
    assert not checkpointed_whole(run, mtp - 1, (Setting("full"),) * 2)  # the output head states no checkpoint


def test_the_checkpoint_reruns_the_module_s_forward_but_the_head():
    timed = {reach: step_time(MODEL, PARALLEL, registry=REGISTRY, runtime=attrs.evolve(RUNTIME, inner_recompute=reach),
                              hardware="h100-sxm", recompute=FULL) for reach in (True, False)}

    def recomputed_flops(t):  # the step's hardware FLOPs less its model FLOPs, over the world's 2 ranks
        return (t.hfu - t.mfu) * t.step_seconds * 2 * t.peak_flops_per_second

    assert timed[True].micro_batches == 1 and timed[True].model_flops == timed[False].model_flops
    # Each of the 2 ranks re-runs its 2 body layers' forward (5,636,096 each), and with the reach the module's.
    assert recomputed_flops(timed[False]) == pytest.approx(2 * 2 * 5_636_096, rel=1e-9)
    assert recomputed_flops(timed[True]) == pytest.approx(2 * (2 * 5_636_096 + INSIDE_FLOPS), rel=1e-9)
    assert timed[True].recompute_seconds > timed[False].recompute_seconds


def _plan(model, limit_bytes):
    hardware = REGISTRY.hardware_preset("h100-sxm").spec
    return plan_recompute(model, PARALLEL, registry=REGISTRY, hardware=hardware, runtime="megatron",
                          reserve_bytes=hardware.memory_bytes - limit_bytes)


def test_the_planner_prices_the_module_as_its_plan_makes_it_recompute():
    model = _model(LayerGroup("moe_only", SMALL, count=4))
    full = estimate(model, PARALLEL, registry=REGISTRY, runtime=RUNTIME, recompute=FULL)
    none = estimate(model, PARALLEL, registry=REGISTRY, runtime=RUNTIME)
    # The planner prices the module as each plan makes it recompute (its checkpoint under every layer full; the
    # body's union otherwise: coupled.py); what it reports agrees with the estimate and step time of its plan.
    assert full.stages[0].activations_by_kind["mtp"] == OUTSIDE
    # At the all-full peak, layer 0 ffAct+moeLayer+normOp and the others full (the module recomputing that union, no
    # checkpoint) peaks the same and runs fastest (brute force over the 13^4 plans, once): faster than every layer
    # ffAct+moeLayer+normOp, the plan kept before the covering search's requirement on layer 0 stopped holding the
    # whole group to it (test_mtp_cover_classes.py), and than every layer full (whose module re-runs its
    # checkpointed part), kept before the union search (coupled.py).
    plan = _plan(model, full.peak_bytes).plan
    selective = Setting(mode="switches", switches=frozenset({"ffAct", "moeLayer", "normOp"}))
    assert plan.fits and plan.peak_bytes == full.peak_bytes
    assert plan.recompute == RecomputeSpec(default=Setting(mode="full"), layers=((0, 0, selective),))

    def timed(spec):
        return step_time(model, PARALLEL, registry=REGISTRY, runtime=RUNTIME, hardware="h100-sxm", recompute=spec)

    assert plan.step_seconds == timed(plan.recompute).step_seconds
    assert plan.step_seconds < timed(RecomputeSpec.uniform(selective)).step_seconds < timed(FULL).step_seconds
    # One byte less: nothing fits, and the shortfall the solver states is the estimate's.
    short = _plan(model, full.peak_bytes - 1).plan
    assert not short.fits and short.stages[0].shortfall_bytes == 1
    # Between the two: the planner's plan, and hp estimate / step time of it, agree (printed peak and step time).
    for limit in (none.peak_bytes - 100_000, none.peak_bytes - 300_000, full.peak_bytes + 20_000):
        result = _plan(model, limit).plan
        assert result.fits
        again = estimate(model, PARALLEL, registry=REGISTRY, runtime=RUNTIME, recompute=result.recompute)
        timed = step_time(model, PARALLEL, registry=REGISTRY, runtime=RUNTIME, hardware="h100-sxm",
                          recompute=result.recompute)
        assert result.peak_bytes == again.peak_bytes <= limit
        assert result.stages[0].peak_bytes == again.stages[0].peak_bytes
        assert result.step_seconds == timed.step_seconds



def test_under_tp_the_checkpoint_leaves_the_embedding_call_and_the_head_outside():
    # TP 2 with SP, T 128, h 64, bf16: the embedding call's reduce-scatter of T h 2 = 16,384 bytes forward (all-gather
    # backward) and the shared head's all-gather forward (reduce-scatter backward) lie outside; eh_proj's collectives
    # and the layer's inside, issued again by the checkpoint's forward.
    from hp_core.costs import Collective
    from hp_core.engine.prepare import _evaluate, layer_context, with_sublayers
    from hp_core.engine.timing.placed import checkpoint_inside
    from hp_core.specs import ParallelSpec, PrecisionSpec
    from test_mtp_recompute import MTP

    parallel = ParallelSpec(seq_len=128, tp=2, sp=True, ep=2, global_batch_size=1)
    context = with_sublayers(layer_context(parallel, PrecisionSpec(), "flash", 1, RUNTIME.traits), REGISTRY)
    cost = _evaluate(REGISTRY.layer_kind("mtp", "$"), MTP.config, context, "$")
    assert cost.checkpoint.collectives == (
        Collective("tp", "reduce_scatter", 16_384, 1, 0), Collective("tp", "all_gather", 16_384, 0, 1),  # embedding
        Collective("tp", "all_gather", 16_384, 1, 0), Collective("tp", "reduce_scatter", 16_384, 0, 1))  # head
    assert cost.checkpoint.gemms == ((128, 512, 64),)  # the head's (T, V/tp, h)
    inside_cost, inside = checkpoint_inside(cost, cost.work)
    assert len(inside.collectives) == len(cost.work.collectives) - 4
    assert (128, 512, 64) not in inside.gemms and (128, 512, 64) not in inside.high_precision_gemms
    # Less the head's 2 T h V/tp = 2 x 128 x 64 x 512 = 8,388,608 forward FLOPs.
    assert cost.forward.matmul_flops - inside_cost.forward.matmul_flops == 8_388_608


def test_the_search_finds_a_plan_at_the_all_full_peak():
    # At the all-full peak of the 4-layer model, the search's memory bound prices the module under its checkpoint (the
    # least it keeps), so the layout is planned; the planner plans layer 0 ffAct+moeLayer+normOp and the rest full
    # (above), and the candidate's peak is the estimate's.
    from hp_core.api import search

    model = _model(LayerGroup("moe_only", SMALL, count=4))
    hardware = REGISTRY.hardware_preset("h100-sxm").spec
    full = estimate(model, PARALLEL, registry=REGISTRY, runtime=RUNTIME, recompute=FULL)
    found = search(model, registry=REGISTRY, devices=2, hardware=hardware, global_batch_size=2, seq_len=128,
                   runtime="megatron", fixed={"ep": 2, "tp": 1, "pp": 1, "cp": 1, "micro_batch_size": 1},
                   reserve_bytes=hardware.memory_bytes - full.peak_bytes)
    assert [(c.plan_summary, c.peak_bytes) for c in found.top] == [("default full; 0 ffAct+moeLayer+normOp", full.peak_bytes)]


def test_the_checkpoint_leaves_the_head_out_by_place_and_renumbers_what_is_inside():
    # A repeated module (applications 2) whose depth is an attention and an MoE-only layer (test_mtp_depths.py: h 256,
    # 8 query and 4 key/value heads of 64, 512 tokens, TP 1, a shared expert of width 256 with relu2, V 1,024). Each
    # application lists 7 GEMMs: qkv (512, 1024, 256), o_proj (512, 256, 512), the router (512, 8, 256), the shared
    # expert's fc1 and fc2 (512, 256, 256), eh_proj (512, 256, 512), the shared head (512, 1024, 256), as wide as qkv.
    # Outside the checkpoint: the heads, positions 6 and 13, not the first listings of their shape (qkv at 0 and 7).
    # Inside, application 1's GEMMs move back by one (the head at 6 gone): its moeLayer re-run's router and shared
    # expert at 8-10 (were 9-11), its attention modules at 6 and 7 (were 7 and 8), each naming a GEMM of its shape.
    from hp_core.engine.timing.placed import checkpoint_inside
    from hp_core.specs import ParallelSpec
    from hp_plugins.kinds.mtp import MTPConfig, evaluate_mtp
    from test_mtp_depths import ATTENTION, H, MOE, VOCAB, _context

    cost = evaluate_mtp(MTPConfig(vocab_size=VOCAB, hidden_size=H, layers=(ATTENTION, MOE), applications=2),
                        _context(ParallelSpec(seq_len=512)))
    once = ((512, 1024, 256), (512, 256, 512), (512, 8, 256), (512, 256, 256), (512, 256, 256), (512, 256, 512),
            (512, 1024, 256))
    assert cost.work.gemms == once * 2
    assert cost.checkpoint.gemms == ((512, 1024, 256),) * 2 and cost.checkpoint.positions == (6, 13)
    inside_cost, inside = checkpoint_inside(cost, cost.work)
    assert inside.gemms == once[:6] * 2
    assert dict(inside.reruns)["moeLayer"].positions == (2, 3, 4, 8, 9, 10)
    assert dict(inside.reruns)["moeLayer"].high_precision_positions == (2, 8)  # the routers, fp32 (router_fp32)
    assert [(m.name, m.positions) for m in inside.modules] == [("attention_qkv", (0,)), ("attention_proj", (1,)),
                                                               ("attention_qkv", (6,)), ("attention_proj", (7,))]
    for positions, gemms in ([(r.positions, r.gemms) for _, r in inside.reruns]
                             + [(m.positions, m.gemms) for m in inside.modules]):
        assert tuple(inside.gemms[p] for p in positions) == gemms
    # Less the two heads' 2 x 2 T h V = 2 x 2 x 512 x 256 x 1,024 = 536,870,912 forward FLOPs.
    assert cost.forward.matmul_flops - inside_cost.forward.matmul_flops == 536_870_912


def test_the_search_bound_under_the_checkpoint_with_several_micro_batches_in_flight(monkeypatch):
    # The layout search's memory bound (search/bounds.py: the first stage's static memory, what it keeps and its first
    # backward's working set, every body layer fully recomputed and the MTP under its checkpoint) against the
    # estimate's peak, where the checkpoint counts: the module's chunk holds 8 micro-batches at the end of warm-up
    # (GPipe, pp 1, 8 micro-batches), so what it keeps outside the checkpoint counts 8 times and what the checkpoint
    # drops, rebuilt in backward, once. The model of test_mtp_union_plan.py (h 64, V 1,024, T 4,096, twelve small moe
    # layers, an MTP module whose moe layer has experts of width 512), dp 1, ZeRO 1. By hand, bytes:
    # * kept per micro-batch fully recomputed: the embedding's ids T 8 = 32,768; each body layer its input T h 2 =
    #   524,288 (x 12 = 6,291,456); the output head 9,437,184; the MTP outside its checkpoint: ids 32,768, the embedding
    #   output 524,288, the final norm's output 524,288, the loss softmax T V 2 = 8,388,608, 9,469,952 (of its 55,001,088);
    #   25,231,360, x 8 = 201,850,880;
    # * the first backward's working set: the MTP's (it tops the walk), 26,738,688 plus what its checkpoint drops,
    #   55,001,088 - 9,469,952 = 45,531,136: 72,269,824;
    # * static: parameters 3,785,472, gradients and master copies 7,570,944 each, Adam's states 15,141,888: 34,069,248.
    # The bound, 308,189,952, is the estimate's all-full peak, 545,433,344 (warmup_end), less what it leaves out: the
    # buffers 2,097,152 and the runtime's overhead 235,146,240 (TE's five cuBLAS workspaces, 168,037,376, and PyTorch's
    # two, 67,108,864, for the heads' and routers' GEMMs: hp_core/blas_workspaces.py). Were the checkpoint ignored (the module keeping all
    # 55,001,088 a micro-batch, its working set 26,738,688 then topping the walk), the bound would read
    # 34,069,248 + 201,850,880 + 8 x 45,531,136 + 26,738,688 = 626,907,904, above the peak: the search would reject a
    # layout the planner fits at that peak (every layer full).
    import hp_core.engine.search.bounds as bounds
    from hp_core.api import search
    from hp_core.engine.stage import PlacedLayer
    from hp_core.specs import ParallelSpec
    from test_mtp_union_plan import MODEL as WIDE

    parallel = ParallelSpec(seq_len=4096, dp=1, pp=1, global_batch_size=8, schedule="gpipe", zero=1)
    full = estimate(WIDE, parallel, registry=REGISTRY, runtime=RUNTIME, recompute=FULL)
    stage = full.stages[0]
    assert (stage.binding_point, stage.micro_batches_in_flight, stage.activations_by_kind["mtp"]) == ("warmup_end", 8, 8 * 9_469_952)
    assert (stage.memory.static_bytes, stage.memory.activations_bytes, stage.memory.working_set_bytes) == (
        34_069_248, 201_850_880, 72_269_824)
    assert full.peak_bytes == 545_433_344 == 308_189_952 + 2_097_152 + 168_037_376 + 67_108_864

    seen: list[int] = []
    static, activations = bounds._Bounder.first_stage_static, bounds._Bounder.first_stage_activations

    def first_static(self, layout, costs, zero):
        seen.append(static(self, layout, costs, zero))
        return seen[-1]

    def first_activations(self, layout, layers, micro_batches):
        kept, working = activations(self, layout, layers, micro_batches)
        seen.append(kept + working)
        return kept, working

    monkeypatch.setattr(bounds._Bounder, "first_stage_static", first_static)
    monkeypatch.setattr(bounds._Bounder, "first_stage_activations", first_activations)
    hardware = REGISTRY.hardware_preset("h100-sxm").spec

    def searched():
        seen.clear()
        return search(WIDE, registry=REGISTRY, devices=1, hardware=hardware, global_batch_size=8, seq_len=4096,
                      runtime="megatron", schedules=["gpipe"], reserve_bytes=hardware.memory_bytes - full.peak_bytes,
                      fixed={"ep": 1, "tp": 1, "pp": 1, "cp": 1, "micro_batch_size": 1, "zero": 1})

    found = searched()
    assert seen == [34_069_248, 201_850_880 + 72_269_824] and sum(seen) == 308_189_952 <= full.peak_bytes
    assert [(c.plan_summary, c.peak_bytes) for c in found.top] == [("default full", full.peak_bytes)]

    def ignoring(self, i, cost):  # the bound as it was before 43468a7: the module keeping everything
        kind = self.kinds[i]
        placed = PlacedLayer.make(kind.name, cost, kind.placement == "body", frozenset(), "full")
        return placed.kept_bytes, placed.backward_working_bytes

    monkeypatch.setattr(bounds._Bounder, "_placed_full", ignoring)
    wrong = searched()
    assert sum(seen) == 626_907_904 > full.peak_bytes
    assert wrong.top == () and dict(wrong.rejected) == {"does not fit even fully recomputed": 1}
