"""A block's re-run (``Rerun``) knows its GEMMs by their positions in the layer's ``LayerWork.gemms``, never by shape:
an attention linear of a shared expert's shape is none of the MoE block's, so a format of its own (bf16 here) leaves
the block's re-run time alone, and its compute-dtype input is not taken as the expert's. Positions move on as layers
merge. Layer shapes by hand: h 256, 4 query / 2 KV heads of 32, 8 experts (top 2, width 64), a gated shared expert of
width 128, TP 2 with SP, micro-batch 2 x sequence 1024 = T 2,048 tokens, bf16 activations."""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import build_registry, layer_context
from hp_core.engine.module_formats import with_module_formats
from hp_core.engine.timing.layer import _block_forward
from hp_core.engine.timing.rates import _rates
from hp_core.errors import ConfigError
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.kinds.moe import MoEConfig
from hp_plugins.kit.merge import merge_costs

REGISTRY = build_registry(use_env=False)
MEGATRON = REGISTRY.runtime("megatron")
T, H = 2 * 1024, 256
TP2 = ParallelSpec(tp=2, sp=True, ep=2, dp=2, seq_len=1024, micro_batch_size=2, global_batch_size=8)
RECIPE = REGISTRY.precision_recipe("mxfp8")
RATES = attrs.evolve(_rates(TP2, REGISTRY.hardware_preset("b200").spec, MEGATRON.timing,
                            attrs.evolve(MEGATRON.precision, recipe="mxfp8"), "flash", recipe=RECIPE),
                     host=None, slowdown=1.0)


def _moe(heads: int):
    config = MoEConfig(hidden_size=H, num_attention_heads=heads, num_key_value_heads=2, head_dim=32, num_experts=8,
                       num_experts_per_tok=2, moe_intermediate_size=64, shared_expert_intermediate_size=128)
    return REGISTRY.layer_kind("moe", "$").evaluate(config, layer_context(TP2, PrecisionSpec(), "flash", 1, MEGATRON.traits))


def _block(cost) -> tuple[float, float]:
    return _block_forward("moeLayer", dict(cost.work.reruns)["moeLayer"], cost.work, RATES, 0.0, 0.0, False)


def test_an_attention_linear_of_a_shared_expert_s_shape_is_not_the_block_s():
    cost = _moe(4)
    # The router's gate over the rank's shard (T / 2, 8 experts, h); linear_qkv (4 + 2 * 2) * 32 / 2 = 128 by h;
    # linear_proj h by 4 * 32 / 2 = 64; the gated shared expert's FC1 2 * 128 / 2 = 128 by h and FC2 h by 64: the
    # shared expert's two GEMMs have the attention's two shapes.
    assert cost.work.gemms == ((1024, 8, H), (T, 128, H), (T, H, 64), (T, 128, H), (T, H, 64))
    modules = {m.name: m for m in cost.work.modules}
    assert modules["attention_qkv"].positions == (1,) and modules["attention_proj"].positions == (2,)
    assert cost.work.original_input_gemms == ((T, H, 64),)  # linear_proj's, not the shared expert's FC2
    rerun = dict(cost.work.reruns)["moeLayer"]
    assert rerun.positions == (0, 3, 4)  # the gate and the shared expert
    assert rerun.high_precision_positions == (0,) and rerun.original_input_positions == ()
    plain = _block(cost)
    # The same block beside attention linears of shapes it has none of (8 query heads: qkv 192 by h, proj h by 128)
    # re-runs in the same time: the attention's shapes do not enter it. Before, linear_proj's compute-dtype input was
    # taken as the FC2's, and a bf16 linear_qkv kept the FC1 in bf16 (1.227 and 0.883 us where this is 1.253 us).
    other = _moe(8)
    assert other.work.gemms[1:3] == ((T, 192, H), (T, H, 128)) and dict(other.work.reruns)["moeLayer"].gemms == rerun.gemms
    assert _block(other) == plain
    assert plain[1] == 2 * (1024 * 8 * H + T * 128 * H + T * H * 64) + dict(other.work.reruns)["moeLayer"].grouped_flops
    assert plain[0] == pytest.approx(1.2527e-6, rel=1e-4)
    for formats in ((("attention_qkv", "bf16"),), (("attention_proj", "bf16"),),
                    (("attention_qkv", "bf16"), ("attention_proj", "bf16"))):
        kept = with_module_formats(cost, formats, RECIPE)
        assert (T, 128, H) in kept.work.high_precision_gemms or (T, H, 64) in kept.work.high_precision_gemms
        assert dict(kept.work.reruns)["moeLayer"] == rerun  # no block GEMM is the module's
        assert _block(kept) == plain


def test_a_merged_depth_s_reruns_and_modules_take_their_layer_s_positions():
    cost = _moe(4)
    merged = merge_costs([cost, cost], ["layers.0.", "layers.1."], "$")
    rerun = dict(merged.work.reruns)["moeLayer"]
    # The second layer's five GEMMs follow the first's: its gate at 5, its shared expert at 8 and 9.
    assert rerun.positions == (0, 3, 4, 5, 8, 9) and rerun.high_precision_positions == (0, 5)
    assert [m.positions for m in merged.work.modules] == [(1,), (2,), (6,), (7,)]
    assert _block(merged) == pytest.approx((2 * _block(cost)[0], 2 * _block(cost)[1]))
    kept = with_module_formats(merged, (("attention_qkv", "bf16"), ("attention_proj", "bf16")), RECIPE)
    assert len(kept.work.high_precision_gemms) == 6  # two gates and both layers' attention linears
    assert dict(kept.work.reruns)["moeLayer"] == rerun and _block(kept) == _block(merged)


def test_a_rerun_whose_positions_are_not_the_layer_s_gemms_is_refused():
    cost = _moe(4)
    rerun = dict(cost.work.reruns)["moeLayer"]
    for positions in ((1, 3, 4), (0, 3, 5)):  # linear_qkv's place for the gate's; past the layer's five GEMMs
        with pytest.raises(ConfigError, match="are not the layer's at their positions"):
            _block_forward("moeLayer", attrs.evolve(rerun, positions=positions, high_precision_positions=()),
                           cost.work, RATES, 0.0, 0.0, False)
    with pytest.raises(ValueError, match="3 GEMMs but 2 positions"):
        attrs.evolve(rerun, positions=(0, 3))
