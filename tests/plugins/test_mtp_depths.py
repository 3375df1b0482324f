"""MTP depths of several layers: the ``mtp`` kind's ``layers`` (Megatron-Core's hybrid MTP depth, a ``HybridStack``
of the ``/``-part's layers between ``enorm`` / ``hnorm`` / ``eh_proj`` and the final norm:
megatron/core/transformer/multi_token_prediction.py at NVIDIA/Megatron-LM@d98e8a6) and the merge of their costs
(hp_plugins/kit/merge.py), each figure derived by hand from the layers' own costs."""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import build_registry, count_parameters, model_from_preset
from hp_core.engine.prepare import layer_context, with_sublayers
from hp_core.errors import ConfigError
from hp_core.specs import LayerGroup, ParallelSpec, PrecisionSpec
from hp_plugins.kinds.hybrid import AttentionLayerConfig, MoELayerConfig
from hp_plugins.kinds.mamba import Mamba2LayerConfig
from hp_plugins.kinds.mtp import MTPConfig, evaluate_mtp
from hp_plugins.kit.merge import merge_costs
from hp_plugins.models.ssm import model_from_nemotron_h_config

_REGISTRY = build_registry(use_env=False)
H, VOCAB = 256, 1024
ATTENTION = LayerGroup("attention", AttentionLayerConfig(hidden_size=H, num_attention_heads=8, num_key_value_heads=4,
                                                         head_dim=64))
MOE = LayerGroup("moe_only", MoELayerConfig(hidden_size=H, num_experts=8, num_experts_per_tok=2,
                                            moe_intermediate_size=128, shared_expert_intermediate_size=256,
                                            hidden_act="relu2", expert_activation="mlp", router_fp32=True))
MAMBA = LayerGroup("mamba2", Mamba2LayerConfig(hidden_size=H, mamba_num_heads=8, mamba_head_dim=64, ssm_state_size=16,
                                               n_groups=4, chunk_size=64))
CONTEXTS = [ParallelSpec(seq_len=512), ParallelSpec(tp=2, sp=True, ep=2, dp=2, seq_len=512, micro_batch_size=2,
                                                    global_batch_size=4)]


def _context(parallel):
    return with_sublayers(layer_context(parallel, PrecisionSpec(), "flash"), _REGISTRY)


def _own(group, x):
    return _REGISTRY.layer_kind(group.kind).evaluate(group.config, x)


@pytest.mark.parametrize("parallel", CONTEXTS)
@pytest.mark.parametrize("group", [ATTENTION, MOE, MAMBA])
def test_a_depth_of_one_layer_is_the_one_layer_form(parallel, group):
    """``layers=[X]`` prices exactly as ``layer=X``, and the merge of one cost renames it and changes nothing else."""
    x = _context(parallel)
    one = evaluate_mtp(MTPConfig(vocab_size=VOCAB, hidden_size=H, layer=group), x)
    listed = evaluate_mtp(MTPConfig(vocab_size=VOCAB, hidden_size=H, layers=(group,)), x)
    assert listed == one
    cost = _own(group, x)
    merged = merge_costs([cost], ["layer."], "$")
    assert [(p.name, p.elements) for p in merged.params] == [(f"layer.{p.name}", p.elements) for p in cost.params]
    assert [(t.op, t.bytes, t.switch) for t in merged.activations] == [(f"layer.{t.op}", t.bytes, t.switch)
                                                                       for t in cost.activations]
    # The work as it was, its named linear modules renamed as the families and terms are.
    assert merged.forward == cost.forward and merged.work == attrs.evolve(
        cost.work, modules=tuple(m.renamed("layer.") for m in cost.work.modules))
    assert (merged.working_bytes, merged.weight_shapes, merged.weight_gradient_bytes) == (
        cost.working_bytes, cost.weight_shapes, cost.weight_gradient_bytes)
    # The module's own terms around the layer, as the one-layer form states them.
    own = {p.name for p in one.params} - {p.name for p in merged.params}
    assert own == {"mtp_norms", "eh_proj", "embed_tokens", "lm_head"}


@pytest.mark.parametrize("parallel", CONTEXTS)
def test_a_depth_of_two_layers_adds_its_layers(parallel):
    """Nemotron 3 Super's depth shape '*E': the module's own parameters and terms, then the attention layer's
    (``layers.0.``) and the MoE layer's (``layers.1.``); FLOPs, kept bytes and work add, the backward's transient
    peak is the larger of the layers' and the head's."""
    x = _context(parallel)
    depth = evaluate_mtp(MTPConfig(vocab_size=VOCAB, hidden_size=H, layers=(ATTENTION, MOE)), x)
    attention, moe = _own(ATTENTION, x), _own(MOE, x)
    module = evaluate_mtp(MTPConfig(vocab_size=VOCAB, hidden_size=H, layer=ATTENTION), x)  # own terms + attention
    params = {p.name: p.elements for p in depth.params}
    assert {k: v for k, v in params.items() if k.startswith("layers.0.")} == {f"layers.0.{p.name}": p.elements
                                                                           for p in attention.params}
    assert {k: v for k, v in params.items() if k.startswith("layers.1.")} == {f"layers.1.{p.name}": p.elements
                                                                           for p in moe.params}
    assert sum(params.values()) == sum(p.elements for p in module.params) + sum(p.elements for p in moe.params)
    kept = {t.op: t.bytes for t in depth.activations}
    assert len(kept) == len(depth.activations)  # unique names
    assert sum(kept.values()) == module.kept_bytes + moe.kept_bytes
    # The layers' switches kept with their terms (the module's own terms under none), and their kinds named: a
    # runtime whose recompute reaches the module's layers recomputes them as its body layers of those kinds.
    assert {t.op: t.switch for t in depth.activations if t.switch} == {
        **{f"layers.0.{t.op}": t.switch for t in attention.activations if t.switch},
        **{f"layers.1.{t.op}": t.switch for t in moe.activations if t.switch}}
    assert depth.inner_kinds == {"attention", "moe_only"}
    assert depth.forward.matmul_flops == module.forward.matmul_flops + moe.forward.matmul_flops
    assert depth.forward.attention_flops == attention.forward.attention_flops
    assert depth.forward.elementwise_flops == attention.forward.elementwise_flops + moe.forward.elementwise_flops
    assert depth.working_bytes == max(module.working_bytes, moe.working_bytes)
    assert depth.weight_gradient_bytes == module.weight_gradient_bytes + moe.weight_gradient_bytes
    assert depth.buffers_per_micro_batch_bytes == attention.buffers_per_micro_batch_bytes + moe.buffers_per_micro_batch_bytes
    work = depth.work
    assert work.attention_calls == 1 and work.attention_head_dims == (64, 64)
    assert (work.routed_experts, work.expert_rows) == (8, moe.work.expert_rows)
    assert work.expert_gemms == moe.work.expert_gemms and work.grouped_flops == moe.work.grouped_flops
    assert len(work.collectives) == len(module.work.collectives) + len(moe.work.collectives)


def test_the_merge_refuses_layers_that_disagree():
    x = _context(CONTEXTS[0])
    narrow = attrs.evolve(ATTENTION, config=attrs.evolve(ATTENTION.config, head_dim=32))
    with pytest.raises(ConfigError, match=r"\$\.model\.layers\[\]\.config\.layers: its layers disagree on "
                                          r"LayerWork\.attention_head_dims \(\(32, 32\), \(64, 64\)\)"):
        evaluate_mtp(MTPConfig(vocab_size=VOCAB, hidden_size=H, layers=(ATTENTION, narrow)), x)
    more = attrs.evolve(MOE, config=attrs.evolve(MOE.config, num_experts=16))
    with pytest.raises(ConfigError, match=r"disagree on LayerWork\.expert_rows"):
        evaluate_mtp(MTPConfig(vocab_size=VOCAB, hidden_size=H, layers=(MOE, more)), x)
    # An SSD scan and a softmax attention core: one record cannot price both.
    with pytest.raises(ConfigError, match=r"disagree on LayerWork\.ssd_scan"):
        evaluate_mtp(MTPConfig(vocab_size=VOCAB, hidden_size=H, layers=(MAMBA, ATTENTION)), x)
    # Names that collide under the prefixes given.
    with pytest.raises(ConfigError, match="parameter family names collide"):
        merge_costs([_own(MOE, x)] * 2, ["a.", "a."], "$.here")


def test_the_config_states_one_form():
    with pytest.raises(ValueError, match="state the module's layer .* or its layers"):
        MTPConfig(vocab_size=VOCAB, hidden_size=H)
    with pytest.raises(ValueError, match="state the module's layer .* or its layers"):
        MTPConfig(vocab_size=VOCAB, hidden_size=H, layer=ATTENTION, layers=(MOE,))
    with pytest.raises(ValueError, match="layers must list layer groups of count 1"):
        MTPConfig(vocab_size=VOCAB, hidden_size=H, layers=(attrs.evolve(MOE, count=2),))


def _small_nemotron(**changes):
    cfg = {"model_type": "nemotron_h", "vocab_size": VOCAB, "hidden_size": H, "num_hidden_layers": 3,
           "hybrid_override_pattern": "M*E", "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64,
           "mamba_num_heads": 8, "mamba_head_dim": 64, "ssm_state_size": 16, "n_groups": 4, "n_routed_experts": 8,
           "num_experts_per_tok": 2, "moe_intermediate_size": 128, "moe_shared_expert_intermediate_size": 256,
           "intermediate_size": 512}
    return model_from_nemotron_h_config({**cfg, **changes}, name="small")


def test_nemotron_h_mtp_depths_by_hand():
    """Two '*E' depths: each enorm, hnorm, final norm (h each), eh_proj (2h x h), an attention layer (its norm, q, k, v,
    o) and a MoE layer (its norm, an fp32 router E x h, 8 ungated experts of up and down 128 x h, a shared expert of
    256); the embedding and head are the main model's, counted once."""
    plain = count_parameters(_small_nemotron(), _REGISTRY).total
    attention = H + H * (8 + 2 * 4) * 64 + 8 * 64 * H
    moe = H + 8 * H + 8 * 2 * H * 128 + 2 * H * 256
    assert (attention, moe) == (393_472, 657_664)
    model = _small_nemotron(num_nextn_predict_layers=2, mtp_hybrid_override_pattern="*E")
    summary = count_parameters(model, _REGISTRY)
    assert summary.by_kind["mtp"] == 2 * (3 * H + 2 * H * H + attention + moe) == 2 * 1_182_976
    assert summary.total == plain + 2 * 1_182_976
    (mtp,) = [g for g in model.layers if g.kind == "mtp"]
    assert mtp.count == 2 and [g.kind for g in mtp.config.layers] == ["attention", "moe_only"]
    # transformers' list spelling, and a one-layer depth (the one-layer form).
    listed = _small_nemotron(num_nextn_predict_layers=2, mtp_layers_block_type=["full_attention", "moe"])
    assert listed.layers == model.layers
    one = _small_nemotron(num_nextn_predict_layers=1, mtp_hybrid_override_pattern="E")
    assert one.layers[-1].config.layer.kind == "moe_only"
    with pytest.raises(ConfigError, match=r"mtp_hybrid_override_pattern: is missing \(or mtp_layers_block_type\)"):
        _small_nemotron(num_nextn_predict_layers=1)
    with pytest.raises(ConfigError, match=r"mtp_hybrid_override_pattern: must be a string of M, E"):
        _small_nemotron(num_nextn_predict_layers=1, mtp_hybrid_override_pattern="*X")


def test_nemotron_3_super_main_model_and_mtp_depth():
    """The preset: the main model 120,668,687,360 (tests/plugins/test_ssm.py) and one '*E' depth, 2,942,324,736:
    3 h of norms, eh_proj 2 h^2, the attention layer 35,655,680 and the latent MoE layer 2,873,102,336."""
    summary = count_parameters(model_from_preset("nemotron-3-super-120b-a12b", _REGISTRY), _REGISTRY)
    h = 4096
    assert summary.by_kind["mtp"] == 3 * h + 2 * h * h + 35_655_680 + 2_873_102_336 == 2_942_324_736
    assert summary.total - summary.by_kind["mtp"] == 120_668_687_360
    assert summary.total == 123_611_012_096  # the BF16 checkpoint's 123,611,033,088 less 41 x 512 router biases


@pytest.mark.parametrize("parallel", CONTEXTS)
def test_a_module_applied_at_two_depths_keeps_its_parameters_once(parallel):
    """``applications`` 2 (Megatron-Core's mtp_use_repeated_layer: one MTP layer built and applied at both depths,
    multi_token_prediction.py MultiTokenPredictionBlock at NVIDIA/Megatron-LM@d98e8a6): the parameters and weight
    shapes of one application; what each application keeps, computes, holds per micro-batch and defers to the weight
    gradient twice; the transient peaks one application's."""
    x = _context(parallel)
    once = evaluate_mtp(MTPConfig(vocab_size=VOCAB, hidden_size=H, layers=(ATTENTION, MOE)), x)
    twice = evaluate_mtp(MTPConfig(vocab_size=VOCAB, hidden_size=H, layers=(ATTENTION, MOE), applications=2), x)
    assert twice.params == once.params and twice.weight_shapes == once.weight_shapes
    assert [t.op for t in twice.activations] == [f"application{i}.{t.op}" for i in (0, 1) for t in once.activations]
    assert twice.kept_bytes == 2 * once.kept_bytes
    assert twice.forward == attrs.evolve(once.forward, matmul_flops=2 * once.forward.matmul_flops,
                                         attention_flops=2 * once.forward.attention_flops,
                                         elementwise_flops=2 * once.forward.elementwise_flops)
    assert twice.buffers_per_micro_batch_bytes == 2 * once.buffers_per_micro_batch_bytes
    assert twice.weight_gradient_bytes == 2 * once.weight_gradient_bytes
    assert (twice.working_bytes, twice.buffers_once_bytes) == (once.working_bytes, once.buffers_once_bytes)
    assert twice.work.gemms == 2 * once.work.gemms and twice.work.collectives == 2 * once.work.collectives
    assert (twice.work.attention_calls, twice.work.grouped_flops) == (2, 2 * once.work.grouped_flops)
    # One application is the module as it was.
    assert evaluate_mtp(MTPConfig(vocab_size=VOCAB, hidden_size=H, layers=(ATTENTION, MOE), applications=1), x) == once
    with pytest.raises(ValueError, match="applications"):
        MTPConfig(vocab_size=VOCAB, hidden_size=H, layer=MOE, applications=0)


def test_a_repeated_module_counts_its_parameters_once_and_prices_every_application():
    """Nemotron 3 Super as Megatron-Bridge trains it (mtp_num_layers 2 with mtp_use_repeated_layer, the preset's one
    '*E' depth applied twice): the preset's 123,611,012,096 parameters, one step's compute above the one-depth model's
    by one depth's."""
    preset = model_from_preset("nemotron-3-super-120b-a12b", _REGISTRY)
    repeated = attrs.evolve(preset, layers=tuple(
        attrs.evolve(g, config=attrs.evolve(g.config, applications=2)) if g.kind == "mtp" else g for g in preset.layers))
    assert count_parameters(repeated, _REGISTRY).total == count_parameters(preset, _REGISTRY).total == 123_611_012_096
    x = _context(ParallelSpec(seq_len=1024))
    (mtp,) = [g.config for g in preset.layers if g.kind == "mtp"]
    one = evaluate_mtp(mtp, x).forward.matmul_flops
    assert evaluate_mtp(attrs.evolve(mtp, applications=2), x).forward.matmul_flops == 2 * one


def test_a_switch_two_layers_state_reruns_both_blocks():
    """Two MoE layers merged (a depth 'EE'): the ``moeLayer`` switch's re-run (Megatron-Core's ``moe`` module: the
    whole block's forward, hp_core/reruns.py) re-runs both layers' GEMMs and grouped FLOPs, and their permutation;
    a rate per dropped byte must agree between layers stating the same switch."""
    from hp_core.costs import Rerun
    from hp_plugins.kit.merge import merge_work

    x = _context(CONTEXTS[0])
    moe = _own(MOE, x)
    (block,) = [r for s, r in moe.work.reruns if s == "moeLayer"]
    assert block.gemms and block.grouped_flops > 0 and block.permutation
    merged = dict(merge_work([moe, moe], "$").reruns)
    n = len(moe.work.gemms)  # the second layer's GEMMs follow the first's: its block's positions move on by n
    assert merged["moeLayer"] == Rerun(block.matmul_flops_per_byte, 2 * block.copy_bytes, 2 * block.gemms,
                                       2 * block.grouped_flops, True,
                                       block.positions + tuple(n + p for p in block.positions),
                                       block.high_precision_positions + tuple(n + p for p in block.high_precision_positions),
                                       block.original_input_positions + tuple(n + p for p in block.original_input_positions),
                                       # the shared experts' userbuffers GEMMs, by place too (the gate at 0, fc1, fc2)
                                       block.userbuffers_linears + tuple((name, n + p) for name, p in block.userbuffers_linears))
    assert block.userbuffers_linears == (("fc1", 1), ("fc2", 2))
    faster = attrs.evolve(moe, work=attrs.evolve(moe.work, reruns=(("moeLayer", attrs.evolve(block, matmul_flops_per_byte=1.0)),)))
    with pytest.raises(ConfigError, match=r"\$\.here: its layers state different re-run rates for switch 'moeLayer'"):
        merge_work([moe, faster], "$.here")


def test_a_repeated_module_s_linear_modules_name_its_one_set_of_weights():
    """A module format on a repeated MTP module (applications 2): the attention's linear_qkv runs once an application,
    its weights are one family. The attention layer (h 256, 8 query and 4 key/value heads of 64, TP 1, 512 tokens)
    has one qkv GEMM (512, (8 + 2 x 4) x 64, 256) = (512, 1024, 256), listed twice in the module's work; its weight
    1024 x 256 = 262,144 elements. The shared head's GEMM (512, 1024 / TP 1, 256) has the same shape, also listed
    once an application and kept in bf16 under every recipe: four GEMMs of that shape, two high-precision. Kept in
    bf16 inside an MXFP8 run, both qkv GEMMs join them (four high-precision) and the one family is
    high-precision; in NVFP4 inside an MXFP8 run, its cached copies are those of one weight: Transformer Engine's
    row-wise and column-wise NVFP4 copies, 2 x (0.5 + 1/16) bytes an element: 262,144 x 1.125 = 294,912 bytes."""
    from hp_core.engine.module_formats import module_weight_copy_bytes, with_module_formats, with_module_recipes

    x = _context(ParallelSpec(seq_len=512))
    twice = evaluate_mtp(MTPConfig(vocab_size=VOCAB, hidden_size=H, layers=(ATTENTION, MOE), applications=2), x)
    families = {p.name for p in twice.params}
    assert [(m.name, m.params) for m in twice.work.modules] == [
        ("attention_qkv", ("layers.0.qkv_proj",)), ("attention_proj", ("layers.0.o_proj",))] * 2
    assert all(set(m.params) <= families for m in twice.work.modules)
    assert [m.terms for m in twice.work.modules if m.name == "attention_qkv"] == [
        (f"application{i}.layers.0.attn_norm_out",) for i in (0, 1)]
    qkv = (512, 1024, 256)
    assert twice.work.gemms.count(qkv) == 4
    assert twice.work.high_precision_gemms.count(qkv) == 2
    mxfp8 = _REGISTRY.precision_recipe("mxfp8", "$")
    kept = with_module_formats(twice, (("attention_qkv", "bf16"),), mxfp8)
    assert kept.work.high_precision_gemms.count(qkv) == 4
    assert [p.high_precision for p in kept.params if p.name == "layers.0.qkv_proj"] == [True]
    run = with_module_recipes(mxfp8, _REGISTRY, (("attention_qkv", "nvfp4"),))
    nvfp4 = with_module_formats(twice, (("attention_qkv", "nvfp4"),), run)
    assert module_weight_copy_bytes([(nvfp4, 1)], run, 0) == 294_912
