"""Megatron-Core's selective recompute modules inside the MTP module's layers.

Megatron-Core builds the MTP block, and each MTP layer's inner ``TransformerLayer`` (or ``HybridStack``), with the
model's one ``TransformerConfig`` (``megatron/core/transformer/multi_token_prediction.py`` at
NVIDIA/Megatron-LM@d98e8a6 lines 1203-1214, 1220-1228, 1929-1936, 1946-1955; ``models/gpt/gpt_model.py`` lines
245-246), and every recompute module reads ``recompute_granularity`` / ``recompute_modules`` from that config in its
own ``__init__`` (``transformer_layer.py`` lines 473-539, ``attention.py`` 392-395, ``multi_latent_attention.py``
171-174, ``moe/moe_layer.py`` 247-255, ``moe/experts.py`` 269-272): ``--recompute-modules`` acts inside the MTP layer
as in the decoder's. The ``megatron`` runtime states it (``Runtime.inner_recompute``) and the ``mtp`` kind keeps its
layers' switches (``LayerCost.inner_kinds``), so a run recomputes them as its body layers of those kinds.

Figures by hand for a small MoE-only layer (hybrid ``moe_only`` kind, the layer of
tests/plugins/test_megatron_moe_recompute.py): h 64, 8 routed experts of width 32, top-2, one shared expert of width
48, SwiGLU, 128 tokens, bf16, EP 2, the megatron runtime's traits; the MTP module around it over a vocabulary of 1,024.
"""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import build_registry, estimate, step_time
from hp_core.engine.inner_layers import placed_recompute
from hp_core.engine.prepare import _evaluate, layer_context, prepare, with_sublayers
from hp_core.specs import LayerGroup, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_plugins.kinds.embedding import EmbeddingConfig
from hp_plugins.kinds.hybrid import MLPLayerConfig, MoELayerConfig
from hp_plugins.kinds.mtp import MTPConfig, with_repeated_module
from hp_plugins.kinds.output import OutputConfig

REGISTRY = build_registry()
RUNTIME = REGISTRY.runtime("megatron")
MOE_ACT_LAYERNORM = RUNTIME.recompute_modules["moe_act"] | RUNTIME.recompute_modules["layernorm"]
MOE = RUNTIME.recompute_modules["moe"]
H, VOCAB = 64, 1024
SMALL = MoELayerConfig(hidden_size=H, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                       shared_expert_intermediate_size=48)
MTP = LayerGroup("mtp", MTPConfig(vocab_size=VOCAB, hidden_size=H, layer=LayerGroup("moe_only", SMALL)))
PARALLEL = ParallelSpec(seq_len=128, ep=2, dp=2, global_batch_size=2)


def _model(*body: LayerGroup, mtp: LayerGroup = MTP) -> ModelSpec:
    return ModelSpec(name="tiny-mtp", layers=(LayerGroup("embedding", EmbeddingConfig(vocab_size=VOCAB, hidden_size=H)),
                                              *body, LayerGroup("output", OutputConfig(vocab_size=VOCAB, hidden_size=H)),
                                              mtp))


MODEL = _model(LayerGroup("moe_only", SMALL, count=2))


def _mtp_cost():
    context = with_sublayers(layer_context(PARALLEL, PrecisionSpec(), "flash", 1, RUNTIME.traits), REGISTRY)
    return _evaluate(REGISTRY.layer_kind("mtp", "$"), MTP.config, context, "$")


def test_only_the_megatron_runtime_reaches_the_mtp_layers():
    assert RUNTIME.inner_recompute
    assert not REGISTRY.runtime("generic").inner_recompute and not REGISTRY.runtime("fsdp2").inner_recompute


def test_the_mtp_module_keeps_its_layer_s_terms_under_their_switches():
    # The module's own terms, bytes: the next tokens' int64 ids 128 x 8 = 1,024; enorm's input and output and hnorm's
    # output, T h 2 = 16,384 each; eh_proj's input 2 T h 2 = 32,768; the head's norm input and output 16,384 each and
    # the loss softmax T V 2 = 128 x 1,024 x 2 = 262,144 (the compute dtype under the runtime's fused cross-entropy):
    # 377,856, kept whatever the setting. The layer's, as the moe_only kind states them (test_megatron_moe_recompute.py):
    # 163,328, of which ffAct gates the two products 16,384 + 12,288 = 28,672, normOp the pre-MLP norm's output 16,384,
    # and moeLayer 2,048 + 32,768 + 32,768 + 1,024 + 8,704 + 24,576 = 101,888.
    cost = _mtp_cost()
    terms = {t.op: (t.bytes, t.switch) for t in cost.activations}
    assert {op: v for op, v in terms.items() if not op.startswith("layer.")} == {
        "mtp_token_ids": (1_024, None), "enorm_in": (16_384, None), "enorm_out": (16_384, None),
        "hnorm_out": (16_384, None), "eh_proj_in": (32_768, None), "head_norm_in": (16_384, None),
        "head_norm_out": (16_384, None), "mtp_loss_softmax": (262_144, None)}
    assert {op: v for op, v in terms.items() if op.startswith("layer.")} == {
        "layer.moe_norm_in": (16_384, None), "layer.moe_norm_out": (16_384, "normOp"),
        "layer.router_probs": (2_048, "moeLayer"), "layer.dispatched_tokens": (32_768, "moeLayer"),
        "layer.expert_fc1_out": (32_768, "moeLayer"), "layer.expert_mul_out": (16_384, "ffAct"),
        "layer.expert_probs": (1_024, "moeLayer"), "layer.permute_row_map": (8_704, "moeLayer"),
        "layer.shared_fc1_out": (24_576, "moeLayer"), "layer.shared_mul_out": (12_288, "ffAct")}
    assert cost.inner_kinds == {"moe_only"}
    assert cost.kept_bytes == 377_856 + 163_328 == 541_184
    # moe_act + layernorm: 541,184 - 28,672 - 16,384; moe: 541,184 - 101,888 - 28,672.
    assert cost.kept_under(MOE_ACT_LAYERNORM) == 496_128
    assert cost.kept_under(MOE) == 410_624


@pytest.mark.parametrize(("modules", "mtp_kept"), [((), 541_184), (("moe_act", "layernorm"), 496_128),
                                                    (("moe",), 410_624)])
def test_the_estimate_keeps_what_the_modules_leave_in_the_mtp_layer(modules, mtp_kept):
    switches = frozenset().union(*(RUNTIME.recompute_modules[m] for m in modules))
    recompute = RecomputeSpec.uniform(sorted(switches)) if switches else None
    found = estimate(MODEL, PARALLEL, registry=REGISTRY, runtime=RUNTIME, recompute=recompute)
    assert found.stages[0].activations_by_kind["mtp"] == mtp_kept
    # Without the runtime's reach (a trainer whose recompute stops at the body) the module keeps everything.
    apart = estimate(MODEL, PARALLEL, registry=REGISTRY, runtime=attrs.evolve(RUNTIME, inner_recompute=False),
                     recompute=recompute)
    assert apart.stages[0].activations_by_kind["mtp"] == 541_184
    assert apart.stages[0].activations_by_kind["moe_only"] == found.stages[0].activations_by_kind["moe_only"]


def test_the_moe_module_reruns_the_mtp_layer_s_block():
    # Re-run per micro-batch by moe, FLOPs: the router 2 x 128 x 8 x 64 = 131,072, the shared expert's FC1
    # 2 x 128 x 96 x 64 = 1,572,864 and FC2 2 x 128 x 64 x 48 = 786,432, the routed experts' grouped GEMMs over
    # k T = 256 rows 2 x 256 x (64 x 64 + 64 x 32) = 3,145,728: 5,636,096 a layer, the two body layers' and the MTP
    # layer's: 3 x 5,636,096 a micro-batch and rank, where the body alone re-runs 2 x.
    recompute = RecomputeSpec.uniform(sorted(MOE))
    timed = {reach: step_time(MODEL, PARALLEL, registry=REGISTRY, runtime=attrs.evolve(RUNTIME, inner_recompute=reach),
                              hardware="h100-sxm", recompute=recompute) for reach in (True, False)}

    def recomputed_flops(t):  # the step's hardware FLOPs less its model FLOPs, over the world's 2 ranks
        return (t.hfu - t.mfu) * t.step_seconds * 2 * t.peak_flops_per_second

    # Each of the 2 data-parallel ranks runs 1 micro-batch (global batch 2).
    assert timed[True].micro_batches == timed[False].micro_batches == 1
    assert timed[True].model_flops == timed[False].model_flops
    assert recomputed_flops(timed[False]) == pytest.approx(2 * 2 * 5_636_096, rel=1e-9)
    assert recomputed_flops(timed[True]) == pytest.approx(2 * 3 * 5_636_096, rel=1e-9)


def test_moe_act_rewrites_the_mtp_layer_s_products():
    # moe_act + layernorm re-run no GEMM: each layer rewrites what it drops (28,672 + 16,384 bytes), priced per byte
    # alike, so the MTP layer adds one body layer's recompute time to the two body layers'.
    recompute = RecomputeSpec.uniform(sorted(MOE_ACT_LAYERNORM))
    timed = {reach: step_time(MODEL, PARALLEL, registry=REGISTRY, runtime=attrs.evolve(RUNTIME, inner_recompute=reach),
                              hardware="h100-sxm", recompute=recompute) for reach in (True, False)}
    assert timed[True].hfu == timed[True].mfu  # no FLOPs re-run
    assert timed[True].recompute_seconds == pytest.approx(1.5 * timed[False].recompute_seconds, rel=1e-12)
    assert timed[False].recompute_seconds > 0


def test_the_mtp_layer_follows_the_body_layers_of_its_own_kind():
    """What the body layers of the MTP's inner kinds recompute, together (with the SP re-gather the runtime always
    runs); a body layer of another kind, or one recomputed fully, adds nothing."""
    dense = LayerGroup("mlp", MLPLayerConfig(hidden_size=H, intermediate_size=96))
    model = _model(dense, LayerGroup("moe_only", SMALL, count=2))
    run = prepare(model, PARALLEL, registry=REGISTRY, runtime=RUNTIME)
    mtp = len(model.layers) - 1
    ff_act, norm, fc1 = Setting.parse(["ffAct"]), Setting.parse(["normOp"]), Setting.parse(["ffFc1", "ffAct"])
    gather = RUNTIME.implicit_recompute
    assert placed_recompute(run, mtp, (Setting(),) * 3) == gather
    assert placed_recompute(run, mtp, (fc1, Setting(), Setting())) == gather  # the mlp layer's: not the MTP's kind
    assert placed_recompute(run, mtp, (fc1, ff_act, norm)) == {"ffAct", "normOp"} | gather
    assert placed_recompute(run, mtp, (Setting(), Setting("full"), norm)) == {"normOp"} | gather
    # The output head and the embedding run no layer inside themselves: nothing, whatever the body recomputes.
    assert placed_recompute(run, mtp - 1, (fc1, ff_act, norm)) == frozenset()
    assert placed_recompute(run, 0, (fc1, ff_act, norm)) == frozenset()
    # Under a runtime whose recompute stops at the body, nothing.
    apart = prepare(model, PARALLEL, registry=REGISTRY, runtime=attrs.evolve(RUNTIME, inner_recompute=False))
    assert placed_recompute(apart, mtp, (fc1, ff_act, norm)) == frozenset()


def test_a_module_applied_twice_recomputes_each_application():
    # Nemotron 3 Super's form (mtp_use_repeated_layer): each application keeps, and drops, its own layer's terms.
    model = with_repeated_module(_model(LayerGroup("moe_only", SMALL, count=2), mtp=attrs.evolve(MTP, count=2)))
    found = estimate(model, PARALLEL, registry=REGISTRY, runtime=RUNTIME,
                     recompute=RecomputeSpec.uniform(sorted(MOE_ACT_LAYERNORM)))
    assert found.stages[0].activations_by_kind["mtp"] == 2 * 496_128


def test_the_module_re_gathers_under_sp_whatever_its_layers_kinds_run():
    # Megatron always re-gathers a sequence-parallel linear's input in backward (the runtime's implicit `gather`),
    # inside the MTP module too. A plan whose MoE-only body layer (the module's one inner kind) is fully recomputed while
    # another kind's layer is not (Megatron's `block` method: the module is not checkpointed) leaves the module's own
    # `gather` in place: before, a fully recomputed inner-kind layer added nothing and the module re-gathered nothing.
    sp = ParallelSpec(seq_len=128, tp=2, sp=True, ep=2, dp=2, global_batch_size=2)
    model = _model(LayerGroup("moe_only", SMALL), LayerGroup("mlp", MLPLayerConfig(hidden_size=H, intermediate_size=96)))
    run = prepare(model, sp, registry=REGISTRY, runtime=RUNTIME)
    mtp = next(i for i, kind in enumerate(run.kinds) if kind.name == "mtp")
    assert RUNTIME.implicit_recompute == frozenset({"gather"})
    assert any(t.switch == "gather" for t in run.costs[mtp].activations)
    by_kind = {run.kinds[g].name: Setting.parse(s) for g, s in zip(run.body_group, ("full", "none"))}
    settings = tuple(by_kind[run.kinds[g].name] for g in run.body_group)
    assert [run.kinds[g].name for g in run.body_group] == ["moe_only", "mlp"]
    assert placed_recompute(run, mtp, settings) == frozenset({"gather"})
    # Nothing recomputed anywhere: the same, the re-gather alone.
    assert placed_recompute(run, mtp, (Setting.parse("none"),) * 2) == frozenset({"gather"})
