"""Each linear of a layer is known by its index among the layer's listed GEMMs (``LayerBuilder.linear``), never by its
shape: two linears may share one. A latent MoE's latent projections run over the rank's own sequence shard and a
shared expert as wide as them over the gathered micro-batch; a module in a format of its own moves exactly its own
GEMMs and its own compute-dtype inputs, not another linear's of the same shape. Figures by hand for small layers,
bf16 activations, T = micro-batch 2 x sequence 1024 = 2,048 tokens."""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import build_registry, layer_context
from hp_core.engine.module_formats import with_module_formats, with_module_recipes
from hp_core.engine.timing.gemm_seconds import _low_precision_seconds, _matmul_seconds
from hp_core.engine.timing.rates import _rates
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.kinds.hybrid import MoELayerConfig
from hp_plugins.kinds.moe import MoEConfig
from hp_plugins.kinds.qwen3_next import GatedAttentionConfig
from hp_plugins.kit import LayerBuilder

REGISTRY = build_registry(use_env=False)
MEGATRON = REGISTRY.runtime("megatron")
T, H = 2 * 1024, 256
TP2 = ParallelSpec(tp=2, sp=True, ep=2, dp=2, seq_len=1024, micro_batch_size=2, global_batch_size=8)
TP1 = ParallelSpec(dp=8, seq_len=1024, micro_batch_size=2, global_batch_size=16)


def _modules(cost):
    return {m.name: m for m in cost.work.modules}


def test_a_shared_expert_as_wide_as_the_latent_projections_runs_over_the_gathered_micro_batch():
    # Latent width 64; an ungated shared expert of width 128, at TP 2 FC1 (64, 256) and FC2 (256, 64): the shapes of
    # fc1_latent_proj and fc2_latent_proj. Only the latent projections (duplicated) run over the rank's T / 2 = 1,024
    # tokens; the shared expert's sequence-parallel linears over the gathered 2,048, and the router over the shard.
    config = MoELayerConfig(hidden_size=H, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
                            shared_expert_intermediate_size=128, hidden_act="relu2", expert_activation="mlp",
                            moe_latent_size=64)
    cost = REGISTRY.layer_kind("moe_only", "$").evaluate(config, layer_context(TP2, PrecisionSpec(), "flash"))
    listed = ((1024, 8, H), (1024, 64, H), (1024, H, 64), (T, 64, H), (T, H, 64))
    assert cost.work.gemms == listed
    # The moe module's re-run runs the block's own linears again with the same rows.
    assert dict(cost.work.reruns)["moeLayer"].gemms == listed
    assert _modules(cost)["moe_latent_proj"].gemms == ((1024, 64, H), (1024, H, 64))
    # The listed FLOPs are the FLOPs the layer counts for them: router 2 x 1,024 x 8 x 256 = 4,194,304; the latent
    # projections 2 x (2 x 1,024 x 64 x 256) = 67,108,864; the shared expert 2 x (2 x 2,048 x 64 x 256) = 134,217,728.
    dense = sum(2 * rows * out * inp for rows, out, inp in cost.work.gemms)
    assert dense == 4_194_304 + 67_108_864 + 134_217_728 == 205_520_896
    assert dense + cost.work.grouped_flops == cost.forward.matmul_flops


def test_a_module_in_bf16_moves_its_own_gemm_not_one_of_its_shape():
    # GQA (4 heads, 2 KV heads, head dim 32) and a latent MoE of latent width 128 at TP 2: linear_qkv's per-rank
    # (4 + 2 x 2) x 32 / 2 = 128 outputs from 256 inputs is fc1_latent_proj's shape, over the gathered 2,048 tokens
    # where fc1_latent_proj runs over the rank's 1,024.
    config = MoEConfig(hidden_size=H, num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=8,
                       num_experts_per_tok=2, moe_intermediate_size=128, moe_latent_size=128)
    cost = REGISTRY.layer_kind("moe", "$").evaluate(config, layer_context(TP2, PrecisionSpec(), "flash"))
    router, qkv, proj = (1024, 8, H), (T, 128, H), (T, H, 64)
    latent = ((1024, 128, H), (1024, H, 128))
    assert cost.work.gemms == (router, qkv, proj, *latent)
    assert dict(cost.work.reruns)["moeLayer"].gemms == (router, *latent)
    modules = _modules(cost)
    assert (modules["attention_qkv"].gemms, modules["attention_proj"].gemms) == ((qkv,), (proj,))
    assert modules["moe_latent_proj"].gemms == latent
    # Under MXFP8 only the router's gate stays in bf16; each module in bf16 adds exactly its own GEMMs.
    mxfp8 = REGISTRY.precision_recipe("mxfp8")
    assert cost.work.high_precision_gemms == (router,)
    kept = with_module_formats(cost, (("attention_qkv", "bf16"),), mxfp8).work.high_precision_gemms
    assert kept == (router, qkv)
    kept = with_module_formats(cost, (("moe_latent_proj", "bf16"),), mxfp8).work.high_precision_gemms
    assert kept == (router, *latent)


@pytest.fixture
def gated():
    # Gated attention at TP 1, 4 heads of 64 (2 KV heads) on h 256: the output gate's projection (256 x 256, part of
    # linear_qkv) has linear_proj's shape, and under the megatron runtime linear_proj keeps its compute-dtype input
    # (linear_proj_original_input); linear_qkv's (q, k, v) is (4 + 2 x 2) x 64 = 512 wide; the MLP 512 wide, SwiGLU.
    config = GatedAttentionConfig(hidden_size=H, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                  intermediate_size=512)
    x = layer_context(TP1, PrecisionSpec(), "flash", 1, MEGATRON.traits)
    return REGISTRY.layer_kind("gated_attention", "$").evaluate(config, x)


def _nvfp4_run(formats):
    """An NVFP4 run's recipe resolved with *formats*' module recipes, and its rates on a B200 (no host floor)."""
    recipe = with_module_recipes(REGISTRY.precision_recipe("nvfp4"), REGISTRY, formats)
    precision = attrs.evolve(MEGATRON.precision, recipe="nvfp4", module_formats=dict(formats))
    rates = _rates(TP1, REGISTRY.hardware_preset("b200").spec, MEGATRON.timing, precision, "flash", recipe=recipe)
    return recipe, attrs.evolve(rates, host=None, slowdown=1.0)


def _gemm_seconds(work, r):
    """(matmul forward, matmul backward, quantize forward, quantize backward) seconds of *work*'s listed GEMMs."""
    dense = sum(2.0 * rows * out * inp for rows, out, inp in work.gemms)
    fwd, bwd, _ = _matmul_seconds(dense, 0.0, work, r)
    return _low_precision_seconds(dense, 0.0, work, r, fwd, bwd)


def test_a_module_in_bf16_takes_out_only_its_own_original_inputs(gated):
    qkv, square = (T, 512, H), (T, H, H)  # square: linear_proj, and the gate's projection
    assert gated.work.gemms == (qkv, square, square, (T, 1024, H), (T, H, 512))
    assert gated.work.original_input_gemms == (square,)  # linear_proj's alone
    mxfp8 = REGISTRY.precision_recipe("mxfp8")
    # linear_qkv (with the gate) in bf16: its two GEMMs kept; linear_proj, still MXFP8, still keeps its original input.
    work = with_module_formats(gated, (("attention_qkv", "bf16"),), mxfp8).work
    assert (work.high_precision_gemms, work.original_input_gemms) == ((qkv, square), (square,))
    work = with_module_formats(gated, (("attention_proj", "bf16"),), mxfp8).work
    assert (work.high_precision_gemms, work.original_input_gemms) == ((square,), ())
    modules = _modules(gated)
    assert modules["attention_qkv"].gemms == (qkv, square) and modules["attention_qkv"].original_input_gemms == ()
    assert modules["attention_proj"].gemms == (square,) and modules["attention_proj"].original_input_gemms == (square,)


def test_a_module_in_its_own_format_quantizes_only_its_own_original_inputs(gated):
    # linear_qkv in MXFP8 inside an NVFP4 run: the gate's input (the norm's output) is quantized at MXFP8's
    # quant_input_* bytes whatever linear_proj, an NVFP4 linear of the gate's shape, keeps. Dropping linear_proj's
    # original input (T h = 2,048 x 256 = 524,288 elements) moves only the run recipe's figures for those elements
    # (quant_original_* to quant_input_*), forward and backward; linear_qkv's quantization stays as it was.
    formats = (("attention_qkv", "mxfp8"),)
    recipe, r = _nvfp4_run(formats)
    work = with_module_formats(gated, formats, recipe).work
    assert [m.format for m in work.modules] == ["mxfp8", None]
    (kept_fwd, kept_bwd), (dropped_fwd, dropped_bwd) = (_gemm_seconds(w, r)[2:] for w in (
        work, attrs.evolve(work, original_input_gemms=())))
    elements = T * H
    assert dropped_fwd - kept_fwd == pytest.approx(elements * (r.quant_input_fwd - r.quant_original_fwd) / r.memory,
                                                   rel=1e-9)
    assert dropped_bwd - kept_bwd == pytest.approx(elements * (r.quant_input_bwd - r.quant_original_bwd) / r.memory,
                                                   rel=1e-9)
    figures = dict(r.module_rates)["mxfp8"]  # MXFP8's figures differ, so pricing the gate by them would show
    assert figures["quant_original_fwd"] != figures["quant_input_fwd"]
    assert figures["quant_original_bwd"] != figures["quant_input_bwd"]


def test_a_linear_names_only_a_module_the_layer_names():
    b = LayerBuilder(layer_context(TP1, PrecisionSpec(), "flash"), H)
    assert b.linear(T, H, H, module="attention_qkv") == 0
    assert b.linear(T, H, 8, weight=False) is None
    with pytest.raises(ValueError, match="only a listed linear"):
        b.linear(T, H, 64, routed=True, shard=True)
    with pytest.raises(ValueError, match=r"modules \['attention_qkv'\] that linear_module never named"):
        b.build()


def test_a_module_in_its_own_format_next_to_a_kept_linear_of_its_shape_takes_its_format(gated):
    # linear_proj in bf16 and linear_qkv (q, k, v and the gate, whose projection has linear_proj's shape) in MXFP8
    # inside an NVFP4 run: against linear_proj alone in bf16, only linear_qkv's two GEMMs change, from NVFP4's speedup
    # on their bf16 time to MXFP8's, forward and backward; the kept linear_proj of the gate's shape does not keep the
    # gate out of MXFP8.
    formats = (("attention_proj", "bf16"), ("attention_qkv", "mxfp8"))
    recipe, r = _nvfp4_run(formats)
    both = with_module_formats(gated, formats, recipe).work
    alone = with_module_formats(gated, formats[:1], recipe).work
    qkv = _modules(gated)["attention_qkv"].gemms  # (T, 512, 256) and the gate's (T, 256, 256)
    dense = sum(2.0 * rows * out * inp for rows, out, inp in qkv)
    assert dense == 2.0 * T * (512 + 256) * H == 805_306_368
    bf16_fwd, bf16_bwd, _ = _matmul_seconds(dense, 0.0, attrs.evolve(gated.work, gemms=qkv, expert_gemms=()), r)
    mxfp8 = dict(r.module_rates)["mxfp8"]
    (both_fwd, both_bwd), (alone_fwd, alone_bwd) = _gemm_seconds(both, r)[:2], _gemm_seconds(alone, r)[:2]
    assert both_fwd - alone_fwd == pytest.approx(bf16_fwd / mxfp8["gemm_speedup"] - bf16_fwd / r.gemm_speedup, rel=1e-9)
    assert both_bwd - alone_bwd == pytest.approx(
        bf16_bwd / mxfp8["gemm_speedup_backward"] - bf16_bwd / r.gemm_speedup_backward, rel=1e-9)
    assert mxfp8["gemm_speedup"] != r.gemm_speedup
