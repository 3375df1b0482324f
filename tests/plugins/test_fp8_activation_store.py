"""Megatron-LM's ``--activation-func-fp8-input-store`` (the megatron runtime's ``activation_func_fp8_input_store``).

The fused SwiGLU saves ``input.to(torch.float8_e4m3fn)`` for its backward and casts it back there
(megatron/core/fusions/fused_bias_swiglu.py): its input, the FC1 output (``2 I / t`` elements a token), is kept at
one byte an element instead of the compute dtype's two, and the two casts move ``2 + 1`` bytes an element each way.
The figures are derived by hand from the layer shapes.
"""

from __future__ import annotations

from hp_core.api import apply_options, build_registry, estimate, model_from_preset, with_sublayers
from hp_core.costs import LayerContext
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.kinds.dense import DenseConfig, evaluate_dense

REGISTRY = build_registry(use_env=False)
LLAMA3_8B = DenseConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336)
STORE = "fp8_activation_input_store"


def _dense(traits: frozenset[str], tp: int = 2, seq_len: int = 8192):
    context = LayerContext(tp=tp, cp=1, sp=True, ep=1, etp=1, micro_batch_size=1, seq_len=seq_len,
                           precision=PrecisionSpec(), attention="flash", traits=traits)
    return evaluate_dense(LLAMA3_8B, with_sublayers(context, REGISTRY))


def _term(cost, op: str) -> int:
    (term,) = [t for t in cost.activations if t.op == op]
    return term.bytes


def test_the_fused_swiglu_input_is_kept_in_one_byte_and_its_casts_are_copies():
    fused, stored = _dense(frozenset({"fused_swiglu"})), _dense(frozenset({"fused_swiglu", STORE}))
    elements = 8192 * 2 * 14336 // 2  # T x 2I / t: the gate and up outputs of one TP rank
    assert (_term(fused, "fc1_out"), _term(stored, "fc1_out")) == (2 * elements, elements) == (234_881_024, 117_440_512)
    assert fused.kept_bytes - stored.kept_bytes == elements
    # Forward casts bf16 -> fp8 (read 2, write 1), backward fp8 -> bf16 (read 1, write 2): 3 bytes an element each way.
    assert stored.work.copy_bytes - fused.work.copy_bytes == 3 * elements == 352_321_536
    assert stored.work.backward_copy_bytes == fused.work.backward_copy_bytes is None
    # What W reads (the FC1 output's gradient, the FC2 input) and every other term stay as they were.
    assert stored.weight_gradient_bytes == fused.weight_gradient_bytes
    assert {t.op: t.bytes for t in stored.activations if t.op != "fc1_out"} == \
        {t.op: t.bytes for t in fused.activations if t.op != "fc1_out"}


def test_no_fused_kernel_no_effect():
    # Megatron passes the flag only to bias_swiglu_impl: the unfused glu keeps its tensors as ever.
    assert _dense(frozenset({STORE})) == _dense(frozenset())


def test_the_megatron_option_reaches_dense_and_routed_experts_but_not_the_fused_grouped_mlp():
    megatron = REGISTRY.runtime("megatron")
    llama = model_from_preset("llama3-8b", REGISTRY)
    parallel = ParallelSpec(dp=1, tp=2, sp=True, seq_len=8192)
    (base,) = estimate(llama, parallel, registry=REGISTRY, runtime=megatron).stages
    (stored,) = estimate(llama, parallel, registry=REGISTRY,
                         runtime=apply_options(megatron, {"activation_func_fp8_input_store": True})).stages
    assert base.activations_by_kind["dense"] - stored.activations_by_kind["dense"] == 32 * 8192 * 14336
    assert base.activations_by_kind["output"] == stored.activations_by_kind["output"]

    mixtral = model_from_preset("mixtral-8x7b", REGISTRY).with_body_layers(2, REGISTRY.kinds_placed("body"))
    parallel = ParallelSpec(dp=1, ep=1, tp=1, seq_len=1024)

    def moe(options):
        (stage,) = estimate(mixtral, parallel, registry=REGISTRY, runtime=apply_options(megatron, options)).stages
        return stage.activations_by_kind["moe"]

    # Two layers, 1024 tokens routed to 2 experts each, a 2 x 14336 FC1 output per routed token: one byte saved each.
    assert moe({}) - moe({"activation_func_fp8_input_store": True}) == 2 * 1024 * 2 * 2 * 14336 == 117_440_512
    grouped = {"moe_grouped_gemm": True, "moe_fused_grouped_mlp": True}
    assert moe({**grouped, "activation_func_fp8_input_store": True}) == moe(grouped)


def test_recomputing_the_fc1_output_re_runs_the_same_gemm_whatever_width_it_is_kept_at():
    # The ffFc1 switch re-runs FC1 (2 h FLOPs an output element: 2 x 4096 x 8192 tokens x 2 x 14336 / 2 at TP 2);
    # the kept bytes it drops halve under the FP8 store, the FLOPs re-run do not.
    fused, stored = _dense(frozenset({"fused_swiglu"})), _dense(frozenset({"fused_swiglu", STORE}))
    for cost in (fused, stored):
        rerun = cost.work.rerun("ffFc1")
        assert rerun.matmul_flops_per_byte * _term(cost, "fc1_out") == 2 * 4096 * 8192 * 2 * 14336 // 2
