"""The dense MLP's ``ffFc1`` switch and Megatron-Core's ``mlp`` recompute module (docs/recompute.md, docs/runtimes.md).

Figures by hand, for Llama 3 8B (h 4,096, SwiGLU width I 14,336) and DeepSeek-V3's dense MLA layers (h 7,168,
I 18,432), bf16 activations, one micro-batch of 4,096 tokens.
"""

from __future__ import annotations

import pytest

from hp_core.api import build_registry, model_from_preset
from hp_core.engine.prepare import layer_context, with_sublayers
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.importers.megatron import import_megatron_args

REGISTRY = build_registry()


def _cost(preset: str, kind_name: str, runtime: str, tp: int = 1):
    group = next(g for g in model_from_preset(preset, REGISTRY).layers if g.kind == kind_name)
    rt = REGISTRY.runtime(runtime)
    parallel = ParallelSpec(tp=tp, sp=tp > 1, seq_len=4096)
    context = with_sublayers(layer_context(parallel, PrecisionSpec(), "flash", 1, rt.traits), REGISTRY)
    return REGISTRY.layer_kind(kind_name, "$").evaluate(group.config, context)


def _dropped(cost, switches) -> int:
    return cost.kept_bytes - cost.kept_under(frozenset(switches))


@pytest.mark.parametrize("runtime", ["megatron", "generic"])
def test_ffFc1_drops_the_mlp_s_fc1_outputs(runtime):
    # The gate and up outputs, 2 x 4096 x 14336 x 2 bytes = 234,881,024 (fused SwiGLU: one fc1_out of that size;
    # unfused: gate_out and up_out, half each); under TP 2 each rank keeps half.
    assert _dropped(_cost("llama3-8b", "dense", runtime), {"ffFc1"}) == 2 * 4096 * 14336 * 2 == 234_881_024
    assert _dropped(_cost("llama3-8b", "dense", runtime, tp=2), {"ffFc1"}) == 117_440_512
    names = sorted(t.op for t in _cost("llama3-8b", "dense", runtime).activations if t.switch == "ffFc1")
    assert names == (["fc1_out"] if runtime == "megatron" else ["gate_out", "up_out"])


def test_megatron_mlp_module_drops_every_tensor_inside_the_mlp():
    # Fused SwiGLU: fc1_out (2 T I) and the product (T I), 3 x 4096 x 14336 x 2 = 352,321,536 bytes; the MLP's input,
    # the pre-norm's output, stays (Megatron's checkpoint keeps it), as does the norm's input.
    cost = _cost("llama3-8b", "dense", "megatron")
    modules = REGISTRY.runtime("megatron").recompute_modules
    assert modules["mlp"] == frozenset({"ffFc1", "ffAct"})
    assert _dropped(cost, modules["mlp"]) == 3 * 4096 * 14336 * 2 == 352_321_536
    kept = {t.op for t in cost.activations if t.switch not in modules["mlp"]}
    assert {"mlp_norm_in", "mlp_norm_out"} <= kept


def test_ffFc1_re_runs_fc1_and_under_megatron_fc2_too():
    # generic: FC1 alone, 2 T h (2 I) = 2 x 4096 x 4096 x 28672 = 962,072,674,304 FLOPs for the 234,881,024 bytes;
    # megatron (dense_mlp_checkpoint: the whole MLP re-run) adds FC2, 2 T I h = 481,036,337,152.
    for runtime, flops in (("generic", 962_072_674_304), ("megatron", 962_072_674_304 + 481_036_337_152)):
        cost = _cost("llama3-8b", "dense", runtime)
        rerun = cost.work.rerun("ffFc1")
        assert rerun is not None and rerun.copy_bytes == 0
        assert rerun.matmul_flops_per_byte * _dropped(cost, {"ffFc1"}) == pytest.approx(flops, rel=1e-12)
    # DeepSeek-V3's dense MLA layer: 2 T h (2 I) + 2 T I h = 6 x 4096 x 7168 x 18432 = 3,246,995,275,776 FLOPs.
    cost = _cost("deepseek-v3", "mla", "megatron")
    assert _dropped(cost, {"ffFc1"}) == 2 * 4096 * 18432 * 2
    assert cost.work.rerun("ffFc1").matmul_flops_per_byte * _dropped(cost, {"ffFc1"}) == pytest.approx(3_246_995_275_776)


def test_ffFc1_is_a_dense_mlp_switch_only():
    # Routed and shared experts keep their FC1 outputs under no such switch: an MoE layer declares no ffFc1; they are
    # its MoE block's, under moeLayer (Megatron-Core's moe module: tests/plugins/test_megatron_moe_recompute.py).
    for kind in ("moe", "mla_moe", "gdn_moe", "gated_attention_moe", "moe_only"):
        assert "ffFc1" not in REGISTRY.layer_kind(kind, "$").switches, kind
    for kind in ("dense", "mla", "mlp", "gdn", "gated_attention"):
        assert "ffFc1" in REGISTRY.layer_kind(kind, "$").switches, kind
    moe = _cost("deepseek-v3", "mla_moe", "megatron")
    assert not any(t.switch == "ffFc1" for t in moe.activations) and moe.work.rerun("ffFc1") is None
    assert {t.op for t in moe.activations if t.switch == "moeLayer"} >= {"shared_fc1_out", "expert_fc1_out"}


def test_megatron_mlp_acts_only_on_dense_mlp_layers():
    rt = REGISTRY.runtime("megatron")
    assert rt.executes(frozenset({"ffFc1", "ffAct"}), "mla") and rt.executes(frozenset({"ffFc1", "ffAct"}), "dense")
    assert not rt.executes(frozenset({"ffAct"}), "mla")  # moe_act acts on MoE layers only; mlp takes ffFc1 with it
    assert not rt.executes(frozenset({"ffFc1"}), "dense")  # mlp drops both or neither
    assert rt.executes(frozenset({"ffAct"}), "mla_moe")  # moe_act
    assert not rt.executes(frozenset({"ffFc1", "ffAct"}), "mla_moe")


def test_the_importer_maps_recompute_modules_mlp_to_the_dense_layers():
    """``--recompute-modules mla_up_proj mlp`` on a DeepSeek-style model (1 dense layer, 3 MoE): attUp on every
    layer, ffFc1 and ffAct on the dense one only (transformer_layer.py: recompute_mlp where not an MoE layer)."""
    argv = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
            "--ffn-hidden-size 2048 --vocab-size 1000 --swiglu --normalization RMSNorm --disable-bias-linear "
            "--untie-embeddings-and-output-weights --micro-batch-size 1 --global-batch-size 8 --bf16 "
            "--attention-dropout 0.0 --hidden-dropout 0.0 --multi-latent-attention --q-lora-rank 256 --kv-lora-rank 128 "
            "--qk-head-dim 64 --qk-pos-emb-head-dim 32 --v-head-dim 64 --num-experts 8 --moe-router-topk 2 "
            "--moe-ffn-hidden-size 256 --moe-layer-freq ([0]*1+[1]*3)*1 --moe-grouped-gemm "
            "--recompute-granularity selective --recompute-modules mla_up_proj mlp")
    job = import_megatron_args(argv.split(), REGISTRY)
    assert job.document["recompute"] == {"default": "none", "layers": {"0-0": ["attUp", "ffAct", "ffFc1"], "1-3": ["attUp"]}}
    assert not any("recompute" in line for line in job.unmapped)
