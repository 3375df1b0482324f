"""Precision recipes (docs/precision.md): the record, what a recipe moves in memory and in time, and only that.

A toy layer states every number a recipe reads -- a 1000 -> 2000 linear over 1000 tokens (its input
kept, ``owned``), an output projection's input a flash kernel also keeps (``shared``), a router's
gate in the compute dtype, an embedding-like matrix, a TP all-gather of GEMM inputs -- on a toy
device (peak 1e15 bf16, 2e15 fp8, 1e12 B/s) whose FP8 kernel runs 2x the bf16 one, so each expected
value below is worked out by hand in its comment.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import attrs
import pytest

from hp_core.api import build_registry, estimate, model_from_preset, step_time
from hp_core.costs import ActivationTerm, Collective, Flops, LayerContext, LayerCost, LayerWork, ParamCount
from hp_core.engine.precision import apply_recipe, quantized_weight_elements, weight_copy_bytes
from hp_core.engine.prepare import layer_context, prepare
from hp_core.engine.timing import collective_seconds
from hp_core.errors import ConfigError
from hp_core.runtime_options import apply_options
from hp_core.markers import hookimpl
from hp_core.precision_recipes import GemmOperand, PrecisionRecipe
from hp_core.specs import HardwareSpec, LayerGroup, ModelSpec, ParallelSpec, PrecisionSpec
from hp_core.specs.timing import CommOverlap, DeviceEfficiency, Sourced, TimingProfile
from hp_core.types import LayerKind, Runtime
from hp_plugins.kinds.dense import DenseConfig

PEAK, MEMORY_BW, LINK = 1e15, 1e12, 100e9
ROWS, FAN_IN, FAN_OUT, EXPERTS = 1000, 1000, 2000, 10


def _figure(value: float) -> Sourced:
    return Sourced(value, "a round number for a hand-worked test")


TOY_DEVICE = DeviceEfficiency(
    architecture="toy",
    matmul=_figure(0.5), attention_forward=_figure(0.25), attention_backward=_figure(0.125),
    attention_forward_overhead_seconds=_figure(0.0), attention_backward_overhead_seconds=_figure(0.0),
    grouped_matmul=_figure(0.5), grouped_half_rows=_figure(100), memory_bandwidth=_figure(0.5),
    intra_node_bus=_figure(0.5), inter_node_bus=_figure(0.25), all_to_all_bus=_figure(0.5),
    collective_overhead_seconds=_figure(0.0),
    gemm_speedups=(("fp8_tensorwise", _figure(2.0)),),
)
_NONE = _figure(0.0)
TOY_PROFILE = TimingProfile(
    name="toy", description="round numbers", devices=(TOY_DEVICE,),
    overlap=CommOverlap(tensor_parallel=_NONE, context_parallel=_NONE, expert_parallel=_NONE, data_parallel=_NONE, pipeline=_NONE),
    matmul_backward_factor=_figure(2.0), attention_backward_factor=_figure(2.5), flash_causal_fraction=_figure(0.5),
    elementwise_accesses_per_flop=_figure(0.5), elementwise_backward_factor=_figure(2.0), moe_permute_passes=_figure(0),
    optimizer_grad_passes=_figure(0), grad_buffer_passes=_figure(0), grad_scale_passes=_figure(0),
    algorithm_source="a hand-worked test",
)
TOY_SPEC = HardwareSpec(
    name="Toy device", memory_bytes=2**36, peak_flops={"bf16": PEAK, "fp8": 2 * PEAK}, devices_per_node=8,
    architecture="toy", memory_bandwidth_bytes_per_second=MEMORY_BW, intra_node_bandwidth_bytes_per_second=LINK,
    inter_node_bandwidth_bytes_per_second=LINK / 4, intra_node_latency_seconds=1e-5, inter_node_latency_seconds=1e-5,
)

LINEAR = (ROWS, FAN_OUT, FAN_IN)  # 4e9 FLOPs forward
ROUTER = (ROWS, EXPERTS, FAN_IN)  # 2e7 FLOPs forward, kept in bf16
GATHER_BYTES = 2e6  # a TP all-gather of a GEMM input, forward and backward


@attrs.frozen
class ToyConfig:
    """A layer of one linear layer, a router gate and an output-projection input, every number stated."""


def _toy(c: ToyConfig, x: LayerContext) -> LayerCost:
    gemms = (LINEAR, ROUTER)
    matmul = sum(2.0 * r * o * i for r, o, i in gemms)
    return LayerCost(
        params=(
            ParamCount("linear", "dense", FAN_OUT * FAN_IN, False, matrices=((1, FAN_OUT, FAN_IN),)),
            ParamCount("router", "dense", EXPERTS * FAN_IN, False, matrices=((1, EXPERTS, FAN_IN),), high_precision=True),
            ParamCount("table", "dense", 50 * FAN_IN, False, matrices=((1, 50, FAN_IN),), embedding_or_output=True),
            ParamCount("norm", "dense", FAN_IN, False),
        ),
        activations=(
            ActivationTerm("residual", 1000),
            ActivationTerm("linear_in", ROWS * FAN_IN * 2, "normOp", gemm_input="owned"),
            ActivationTerm("proj_in", 2000, gemm_input="shared"),
        ),
        input_bytes=100, working_bytes=0,
        forward=Flops(matmul_flops=matmul),
        work=LayerWork(gemms=gemms, high_precision_gemms=(ROUTER,),
                       collectives=(Collective("tp", "all_gather", GATHER_BYTES, 1, 1, gemm_input=True),
                                    Collective("tp", "reduce_scatter", GATHER_BYTES, 1, 1))),
    )


FP8 = GemmOperand("e4m3", "tensor_current")
TOY_FP8 = PrecisionRecipe(name="toy-fp8", description="toy", source="a hand-worked test", weights=FP8, activations=FP8,
                          gradients=GemmOperand("e5m2", "tensor_current"), weight_copies=2, cache_weights=True,
                          tp_gather=True, quantize_passes=2)


class _ToyPlugin:
    @hookimpl
    def hp_layer_kinds(self):
        yield LayerKind(name="toy", config_type=ToyConfig, evaluate=_toy, switches=("normOp",))

    @hookimpl
    def hp_runtimes(self):
        yield Runtime(name="toy-runtime", precision=PrecisionSpec(), attention="flash", zero=0, timing=TOY_PROFILE)

    @hookimpl
    def hp_precision_recipes(self):
        yield TOY_FP8


@pytest.fixture(scope="module")
def toy_registry():
    return build_registry([_ToyPlugin()], use_env=False)


@pytest.fixture(scope="module")
def registry():
    return build_registry(use_env=False)


MODEL = ModelSpec(name="toy", layers=(LayerGroup(kind="toy", config=ToyConfig(), count=2),), source="test")
LAYOUT = ParallelSpec(tp=2, dp=1, micro_batch_size=1, seq_len=ROWS, global_batch_size=1)


def _precision(recipe: str) -> PrecisionSpec:
    return PrecisionSpec(recipe=recipe)


# ----------------------------------------------------------------------------- the record


def test_operand_bytes_per_element_with_block_scales():
    assert GemmOperand("e4m3", "tensor_delayed").bytes_per_element == 1
    assert GemmOperand("mxfp8", "mx_32").bytes_per_element == 1 + 1 / 32  # an E8M0 byte per 32 elements
    assert GemmOperand("e4m3", "block_1x128").bytes_per_element == 1 + 4 / 128  # an fp32 scale per 128
    assert GemmOperand("e4m3", "block_128x128").bytes_per_element == 1 + 4 / 16384
    assert GemmOperand("nvfp4", "nvfp4_16").bytes_per_element == 0.5 + 1 / 16  # an E4M3 byte per 16
    assert GemmOperand("bf16").bytes_per_element == 2


@pytest.mark.parametrize("make, words", [
    (lambda: GemmOperand("bf16", "tensor_current"), "bf16 takes scaling 'none'"),
    (lambda: GemmOperand("e4m3"), "a low-precision format a scaling"),
    (lambda: GemmOperand("fp6", "mx_32"), "format must be one of 'bf16', .*, got 'fp6'"),
    (lambda: PrecisionRecipe(name="x", description="d", source="s", weight_copies=2), "quantizes no GEMM operand"),
    (lambda: PrecisionRecipe(name="x", description="d", source="s", weights=FP8, activations=GemmOperand("nvfp4", "nvfp4_16")),
     "different peaks"),
    (lambda: PrecisionRecipe(name="x", description="d", source="s", weights=FP8, saved_input="fp8"), "saved_input must be one of 'quantized', 'compute', got 'fp8'"),
])
def test_inconsistent_records_are_refused(make, words):
    with pytest.raises(ValueError, match=words):
        make()


def test_recipe_kernels_and_dtypes(registry):
    kernels = {r.name: (r.kernel, r.gemm_dtype) for r in registry.precision_recipes}
    assert kernels["bf16"] == ("bf16", "bf16")
    assert kernels["fp8-delayed"] == kernels["fp8-current"] == kernels["torchao-float8-tensorwise"] == ("fp8_tensorwise", "fp8")
    assert kernels["fp8-blockwise"] == ("fp8_blockwise", "fp8")
    assert kernels["mxfp8"] == ("mxfp8", "fp8")
    assert kernels["nvfp4"] == ("nvfp4", "fp4")
    assert kernels["torchao-float8-rowwise"] == ("fp8_rowwise", "fp8")


# ----------------------------------------------------------------------------- memory: only the named terms


def test_bf16_is_the_cost_itself(registry):
    context = layer_context(LAYOUT, PrecisionSpec(), "flash")
    cost = _toy(ToyConfig(), context)
    assert apply_recipe(cost, registry.precision_recipe("bf16"), 2) is cost
    # torchao keeps its compute-dtype inputs: nothing moves either.
    assert apply_recipe(cost, registry.precision_recipe("torchao-float8-tensorwise"), 2) is cost


@pytest.mark.parametrize("recipe, linear_in, proj_in", [
    # owned: 1e6 elements at 1 byte; shared: 2000 bf16 bytes plus 1000 elements at 1 byte.
    ("fp8-current", 1_000_000, 3000),
    # MXFP8: 1e6 * (1 + 1/32) = 1,031,250; 2000 + ceil(1000 * 1.03125) = 2000 + 1032.
    ("mxfp8", 1_031_250, 3032),
    # NVFP4: 1e6 * (0.5 + 1/16) = 562,500; 2000 + 563.
    ("nvfp4", 562_500, 2563),
])
def test_a_recipe_rewrites_only_the_gemm_inputs(registry, recipe, linear_in, proj_in):
    cost = _toy(ToyConfig(), layer_context(LAYOUT, PrecisionSpec(), "flash"))
    changed = apply_recipe(cost, registry.precision_recipe(recipe), 2)
    assert [(t.op, t.bytes, t.switch) for t in changed.activations] == [
        ("residual", 1000, None), ("linear_in", linear_in, "normOp"), ("proj_in", proj_in, None)]
    assert attrs.evolve(changed, activations=cost.activations) == cost  # nothing else of the cost moved


def test_quantized_weights_skip_the_embedding_head_and_router():
    cost = _toy(ToyConfig(), layer_context(LAYOUT, PrecisionSpec(), "flash"))
    assert quantized_weight_elements([(cost, 3)]) == 3 * FAN_OUT * FAN_IN
    assert quantized_weight_elements([(cost, 1)], by_group=True) == {"dense": FAN_OUT * FAN_IN}


def test_fp8_moves_only_the_named_memory_terms(toy_registry):
    """Parameters gain the cached copies, activations change by the rewritten terms; the rest is identical."""
    bf16 = estimate(MODEL, LAYOUT, registry=toy_registry, runtime="toy-runtime").stages[0].memory
    fp8 = estimate(MODEL, LAYOUT, registry=toy_registry, runtime="toy-runtime", precision=_precision("toy-fp8")).stages[0].memory
    # Two layers: each holds 2 cached FP8 copies of its 2e6 linear weight elements (1 byte each).
    assert fp8.parameters_bytes - bf16.parameters_bytes == 2 * 2 * FAN_OUT * FAN_IN
    # One micro-batch in flight, two layers: linear_in 2e6 -> 1e6 bytes, proj_in 2000 -> 3000.
    assert fp8.activations_bytes - bf16.activations_bytes == 2 * ((1_000_000 - 2_000_000) + (3000 - 2000))
    for field in ("gradients_bytes", "master_parameters_bytes", "optimizer_states_bytes", "communication_buffers_bytes",
                  "working_set_bytes", "runtime_overhead_bytes"):
        assert getattr(fp8, field) == getattr(bf16, field), field


def test_delayed_scaling_keeps_its_amax_histories_as_runtime_overhead(toy_registry):
    scaled = GemmOperand("e4m3", "tensor_delayed")
    delayed = attrs.evolve(TOY_FP8, name="toy-delayed", amax_history=1024, weights=scaled, activations=scaled,
                           gradients=GemmOperand("e5m2", "tensor_delayed"))

    class Delayed:
        @hookimpl
        def hp_precision_recipes(self):
            yield delayed

    registry = build_registry([_ToyPlugin(), Delayed()], use_env=False)
    current = estimate(MODEL, LAYOUT, registry=registry, runtime="toy-runtime", precision=_precision("toy-fp8")).stages[0].memory
    with_history = estimate(MODEL, LAYOUT, registry=registry, runtime="toy-runtime",
                            precision=_precision("toy-delayed")).stages[0].memory
    # Two layers of one quantized GEMM (the router and the table are not): 5 quantizers of a scale and
    # 1024 amax values, fp32.
    assert with_history.runtime_overhead_bytes - current.runtime_overhead_bytes == 2 * 5 * (1024 + 1) * 4
    assert attrs.evolve(with_history, runtime_overhead_bytes=0) == attrs.evolve(current, runtime_overhead_bytes=0)


def test_weight_copies_by_storage_and_zero():
    fp8 = PrecisionRecipe(name="x", description="d", source="s", weights=FP8, activations=FP8, gradients=FP8,
                          weight_copies=2, cache_weights=True)
    assert weight_copy_bytes(1000, fp8, zero=1) == 2000
    assert weight_copy_bytes(1000, attrs.evolve(fp8, param_gather="stored"), zero=1) == 1000  # the parameter is one copy
    assert weight_copy_bytes(1000, fp8, zero=3) == 0  # TE keeps no workspace under FSDP
    assert weight_copy_bytes(1000, attrs.evolve(fp8, cache_weights=False), zero=1) == 0  # per micro-batch instead


def _llama_stage_memory(registry, *recipes):
    """Stage 0's memory of Llama-3-8B on TP 2 (SP) x DP 4 under the megatron runtime, per recipe, and the number of
    weight elements a recipe quantizes."""
    model = model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(tp=2, sp=True, dp=4, seq_len=4096)
    runtime = registry.runtime("megatron").precision
    found = [estimate(model, layout, registry=registry, runtime="megatron",
                      precision=attrs.evolve(runtime, recipe=recipe)).stages[0].memory for recipe in recipes]
    run = prepare(model, layout, registry=registry, runtime="megatron")
    return (*found, quantized_weight_elements([(cost, group.count) for cost, group in zip(run.costs, model.layers)]))


def test_fp8_param_gather_stores_the_weights_in_fp8(registry):
    bf16, current, stored, quantized = _llama_stage_memory(registry, "bf16", "fp8-current", "fp8-megatron-param-gather")
    assert current.parameters_bytes - bf16.parameters_bytes == 2 * quantized  # weight and transpose, 1 byte each
    # Stored in FP8 (1 byte instead of 2), and the parameter is the row-wise copy: one cached copy left.
    assert stored.parameters_bytes - bf16.parameters_bytes == -quantized + quantized
    assert stored.activations_bytes == current.activations_bytes
    assert stored.optimizer_states_bytes == bf16.optimizer_states_bytes
    assert stored.master_parameters_bytes == bf16.master_parameters_bytes


def test_mxfp8_param_gather_stores_the_weights_in_mxfp8(registry):
    # Megatron-Bridge's bf16_with_mxfp8_mixed: the weights kept as MXFP8 tensors (1 byte an element and an E8M0 scale
    # per 32: 1.03125 bytes), the row-wise usage the parameter itself, one cached column-wise copy beside it; nothing
    # else moves.
    bf16, mx, stored, quantized = _llama_stage_memory(registry, "bf16", "mxfp8", "mxfp8-param-gather")
    assert mx.parameters_bytes - bf16.parameters_bytes == math.ceil(2 * 1.03125 * quantized)
    assert stored.parameters_bytes - bf16.parameters_bytes == (
        math.ceil(1.03125 * quantized) - math.floor(quantized * (2 - 1.03125)))
    assert (stored.activations_bytes, stored.optimizer_states_bytes, stored.master_parameters_bytes) == (
        mx.activations_bytes, mx.optimizer_states_bytes, mx.master_parameters_bytes)
    base, recipe = registry.precision_recipe("mxfp8"), registry.precision_recipe("mxfp8-param-gather")
    assert attrs.evolve(recipe, name=base.name, description=base.description, source=base.source, flags=base.flags,
                        param_gather="none") == base
    assert recipe.flags["megatron"] == base.flags["megatron"] + ("--fp8-param-gather", "--reuse-grad-buf-for-mxfp8-param-ag")
    attention = registry.precision_recipe("mxfp8-param-gather-fp8-attention")
    assert attention.param_gather == "gradient_buffer" and attention.attention_format == "mxfp8"
    # The distributed optimizer gathers every parameter through the gradient buffer, in its dtype (Megatron-Core
    # reuse_grad_buf_for_mxfp8_param_ag): 1,000 parameters, 800 of them quantized, move 2,000 bytes with a bf16 buffer
    # and 4,000 with an fp32 one (grad_reduce_in_fp32), where fp8-megatron-param-gather moves 200 x 2 + 800 x 1 = 1,200
    # and mxfp8 2,000.
    from hp_core.engine.precision import optimizer_gather_bytes

    assert optimizer_gather_bytes(1000, 800, recipe, 2, 2) == 2000
    assert optimizer_gather_bytes(1000, 800, recipe, 2, 4) == 4000
    assert optimizer_gather_bytes(1000, 800, registry.precision_recipe("fp8-megatron-param-gather"), 2, 4) == 1200
    assert optimizer_gather_bytes(1000, 800, base, 2, 4) == 2000
    assert recipe.stores_weights and not base.stores_weights
    # ZeRO 3 (Megatron-FSDP turns the buffer's reuse off, arguments.py): refused one line at $.parallel.zero.
    with pytest.raises(ConfigError, match=r"^\$\.parallel\.zero: precision recipe mxfp8-param-gather gathers its "
                                          r"parameters through the gradient buffer"):
        estimate(model_from_preset("llama3-8b", registry), ParallelSpec(dp=8, seq_len=4096, zero=3), registry=registry,
                 runtime="megatron", precision=attrs.evolve(registry.runtime("megatron").precision, recipe=recipe.name))
    # The search counts such a layout under the option reason, not under the model's heads and widths.
    from hp_core.engine.search.layouts import R_OPTION, _reason_of

    with pytest.raises(ConfigError) as refused:
        recipe.check_zero(3)
    assert _reason_of(refused.value) == R_OPTION
    recipe.check_zero(1)
    base.check_zero(3)


def test_delayed_param_gather_is_fp8_delayed_with_the_weights_stored_in_fp8(registry):
    # fp8-delayed-param-gather (NeMo's fp8_params under delayed scaling) differs from fp8-delayed only where
    # --fp8-param-gather acts: parameters stored in FP8, one cached copy left; activations, optimizer states and
    # master weights as fp8-delayed; the trainer flags are fp8-delayed's and --fp8-param-gather.
    bf16, delayed, stored, quantized = _llama_stage_memory(registry, "bf16", "fp8-delayed", "fp8-delayed-param-gather")
    assert delayed.parameters_bytes - bf16.parameters_bytes == 2 * quantized
    assert stored.parameters_bytes == bf16.parameters_bytes  # 1-byte parameter plus one 1-byte copy = 2 bytes
    assert (stored.activations_bytes, stored.optimizer_states_bytes, stored.master_parameters_bytes) == (
        delayed.activations_bytes, delayed.optimizer_states_bytes, delayed.master_parameters_bytes)
    base, recipe = registry.precision_recipe("fp8-delayed"), registry.precision_recipe("fp8-delayed-param-gather")
    assert recipe.flags["megatron"] == base.flags["megatron"] + ("--fp8-param-gather",)
    assert attrs.evolve(recipe, name=base.name, description=base.description, source=base.source,
                        flags=base.flags, param_gather=base.param_gather) == base


def test_fp8_changes_exactly_the_marked_terms_of_llama(registry):
    model = model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(tp=2, sp=True, dp=4, seq_len=4096)
    runtime = registry.runtime("megatron").precision
    plain = prepare(model, layout, registry=registry, runtime="megatron")
    fp8 = prepare(model, layout, registry=registry, runtime="megatron", precision=attrs.evolve(runtime, recipe="fp8-delayed"))
    dense = next(i for i, group in enumerate(model.layers) if isinstance(group.config, DenseConfig))
    before = {t.op: t.bytes for t in plain.costs[dense].activations}
    after = {t.op: t.bytes for t in fp8.costs[dense].activations}
    changed = {op for op in before if before[op] != after[op]}
    assert changed == {"attn_norm_out", "attn_gathered", "attn_out", "mlp_norm_out", "mlp_gathered", "mul_out"}
    for op in changed - {"attn_out"}:
        assert after[op] == before[op] // 2  # owned: 1 FP8 byte per bf16 element
    assert after["attn_out"] == before["attn_out"] * 3 // 2  # shared: the flash kernel's bf16 output plus FP8
    # Under current scaling Megatron-Core's output projection keeps its bf16 input (set_save_original_input): attn_out
    # as in bf16, the other marked terms as under delayed scaling.
    current = prepare(model, layout, registry=registry, runtime="megatron",
                      precision=attrs.evolve(runtime, recipe="fp8-current"))
    kept = {t.op: t.bytes for t in current.costs[dense].activations}
    assert kept == {**after, "attn_out": before["attn_out"]}
    # The embedding and the head (their GEMMs stay in bf16) keep every term.
    for i in range(len(model.layers)):
        if i != dense:
            assert plain.costs[i].activations == fp8.costs[i].activations, model.layers[i].kind


@pytest.mark.parametrize("recipe, option, attn_out", [
    # Llama 3 8B, TP 2, 4,096 tokens: the output projection's input is 4096 x 32 heads x 128 / 2 bf16 elements,
    # 8,388,608 elements, 16,777,216 bytes, which the flash kernel keeps as its output.
    ("fp8-current", True, 16_777_216),  # set_save_original_input: the bf16 tensor alone
    ("mxfp8", True, 16_777_216),
    ("nvfp4", True, 16_777_216),
    ("fp8-blockwise", True, 16_777_216),
    ("fp8-delayed", True, 16_777_216 + 8_388_608),  # delayed scaling: Megatron-Core does not ask; + 1 byte an element
    ("fp8-current", False, 16_777_216 + 8_388_608),  # before core_v0.14.0: the quantized copy too
    ("mxfp8", False, 16_777_216 + 8_650_752),  # 8,388,608 x (1 + 1/32)
    ("nvfp4", False, 16_777_216 + 4_718_592),  # 8,388,608 x (1/2 + 1/16)
])
def test_megatron_output_projection_keeps_its_bf16_input(registry, recipe, option, attn_out):
    """Megatron-Core's attention.py (core_v0.16.0 lines 363-379) sets linear_proj to save its original input under fp8
    with a recipe other than delayed, or fp4: the runtime option linear_proj_save_original_input (default on)."""
    model = model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(tp=2, sp=True, dp=4, seq_len=4096)
    runtime = apply_options(registry.runtime("megatron"), {"linear_proj_save_original_input": option})
    run = prepare(model, layout, registry=registry, runtime=runtime,
                  precision=attrs.evolve(runtime.precision, recipe=recipe))
    dense = next(i for i, group in enumerate(model.layers) if isinstance(group.config, DenseConfig))
    terms = {t.op: t for t in run.costs[dense].activations}
    assert terms["attn_out"].bytes == attn_out
    assert terms["attn_out"].original_input is option
    assert run.costs[dense].work.original_input_gemms == (((4096, 4096, 2048),) if option else ())
    # The other runtimes run no such setting: fsdp2 (torchtitan, TE used directly) keeps the quantized copy.
    fsdp = prepare(model, ParallelSpec(dp=8, seq_len=4096), registry=registry, runtime="fsdp2",
                   precision=attrs.evolve(registry.runtime("fsdp2").precision, recipe="fp8-current"))
    assert not any(t.original_input for c in fsdp.costs for t in c.activations)


def _toy_original(c: ToyConfig, x: LayerContext) -> LayerCost:
    """The toy layer with its linear set to keep its bf16 input (ActivationTerm.original_input)."""
    cost = _toy(c, x)
    terms = tuple(attrs.evolve(t, original_input=True) if t.op == "linear_in" else t for t in cost.activations)
    return attrs.evolve(cost, activations=terms, work=attrs.evolve(cost.work, original_input_gemms=(LINEAR,)))


def test_a_linear_keeping_its_original_input_by_hand(toy_registry):
    """Memory: the linear's 1e6-element input stays 2e6 bf16 bytes (no FP8 copy) under current scaling, 1e6 FP8 bytes
    under delayed. Time (Transformer Engine linear.py save_original_input): forward quantizes the input row-wise only
    (2 amax+cast reads of 2 bytes, one 1-byte write: 5 bytes an element, against 6 writing both usages), backward quantizes
    it again, row-wise and column-wise for per-tensor current scaling on a device without one-copy FP8 (4 + 2 = 6 bytes)."""
    toy = attrs.evolve(toy_registry, layer_kinds=toy_registry.layer_kinds + (
        LayerKind(name="toy-original", config_type=ToyConfig, evaluate=_toy_original, switches=("normOp",)),),
        precision_recipes=toy_registry.precision_recipes + (attrs.evolve(TOY_FP8, name="toy-fp8-delayed", weights=GemmOperand(
            "e4m3", "tensor_delayed"), activations=GemmOperand("e4m3", "tensor_delayed"), gradients=GemmOperand(
            "e5m2", "tensor_delayed"), quantize_passes=1, amax_history=16),))
    original = ModelSpec(name="toy", layers=(LayerGroup(kind="toy-original", config=ToyConfig(), count=2),), source="test")
    layout = ParallelSpec(dp=1, micro_batch_size=1, seq_len=ROWS, global_batch_size=1)
    context = layer_context(layout, PrecisionSpec(), "flash")
    cost = _toy_original(ToyConfig(), context)
    kept = {t.op: t.bytes for t in apply_recipe(cost, TOY_FP8, 2).activations}
    assert kept == {"residual": 1000, "linear_in": 2_000_000, "proj_in": 2000 + 1000}
    delayed = toy.precision_recipe("toy-fp8-delayed")
    assert {t.op: t.bytes for t in apply_recipe(cost, delayed, 2).activations}["linear_in"] == 1_000_000
    plain, kept_whole = (step_time(m, layout, registry=toy, hardware=TOY_SPEC, runtime="toy-runtime",
                                   precision=_precision("toy-fp8")) for m in (MODEL, original))
    memory = MEMORY_BW * 0.5
    # Two layers: forward 1 byte an element less, backward 6 bytes an element more, over the 1e6-element input.
    assert plain.stages[0].forward_seconds - kept_whole.stages[0].forward_seconds == pytest.approx(2 * 1e6 * 1 / memory)
    assert kept_whole.stages[0].backward_seconds - plain.stages[0].backward_seconds == pytest.approx(2 * 1e6 * 6 / memory)
    # Delayed scaling cannot: the step as the plain layer's.
    a, b = (step_time(m, layout, registry=toy, hardware=TOY_SPEC, runtime="toy-runtime",
                      precision=_precision("toy-fp8-delayed")) for m in (MODEL, original))
    assert (a.stages[0].forward_seconds, a.stages[0].backward_seconds) == (b.stages[0].forward_seconds,
                                                                           b.stages[0].backward_seconds)


# ----------------------------------------------------------------------------- time


def _quantize_bytes(elements: float, passes: int = 2) -> float:
    """HBM bytes quantizing *elements* bf16 elements moves: passes reads of 2 bytes, two 1-byte copies written."""
    return elements * (passes * 2 + 2 * 1)


def test_fp8_gemms_and_quantization_by_hand(toy_registry):
    layout = ParallelSpec(dp=1, micro_batch_size=1, seq_len=ROWS, global_batch_size=1)
    bf16 = step_time(MODEL, layout, registry=toy_registry, hardware=TOY_SPEC, runtime="toy-runtime")
    fp8 = step_time(MODEL, layout, registry=toy_registry, hardware=TOY_SPEC, runtime="toy-runtime",
                    precision=_precision("toy-fp8"))
    eff = PEAK * 0.5
    linear, router = 2.0 * ROWS * FAN_OUT * FAN_IN, 2.0 * ROWS * EXPERTS * FAN_IN
    assert bf16.stages[0].forward_seconds == pytest.approx(2 * (linear + router) / eff)
    memory = MEMORY_BW * 0.5
    # Forward: the router's 2e7 FLOPs at bf16, the linear's 4e9 at half its bf16 time, and the input's
    # 1e6 elements quantized (2 reads + 2 writes: 6 bytes each).
    forward = router / eff + linear / eff / 2 + _quantize_bytes(ROWS * FAN_IN) / memory
    assert fp8.stages[0].forward_seconds == pytest.approx(2 * forward)
    # Backward: twice the GEMM FLOPs; the output gradient's 2e6 elements quantized.
    backward = 2 * router / eff + 2 * linear / eff / 2 + _quantize_bytes(ROWS * FAN_OUT) / memory
    assert fp8.stages[0].backward_seconds == pytest.approx(2 * backward)
    # MFU both ways: the same model FLOPs over the bf16 and over the fp8 peak.
    assert fp8.mfu_recipe_peak == pytest.approx(fp8.mfu / 2)
    assert bf16.mfu_recipe_peak == bf16.mfu and fp8.peak_flops_per_second == PEAK
    assert fp8.recipe_peak_flops_per_second == 2 * PEAK and fp8.provenance["precision_recipe"] == "toy-fp8"


def test_fp8_gathers_gemm_inputs_in_half_the_bytes(toy_registry):
    bf16 = step_time(MODEL, LAYOUT, registry=toy_registry, hardware=TOY_SPEC, runtime="toy-runtime")
    fp8 = step_time(MODEL, LAYOUT, registry=toy_registry, hardware=TOY_SPEC, runtime="toy-runtime",
                    precision=_precision("toy-fp8"))
    bus = LINK * 0.5
    gather = collective_seconds("all_gather", GATHER_BYTES, 2, bus, 1e-5)
    half = collective_seconds("all_gather", GATHER_BYTES / 2, 2, bus, 1e-5)
    # Two layers, the all-gather forward and backward; the reduce-scatter (an output) unchanged.
    assert bf16.stages[0].communication_seconds - fp8.stages[0].communication_seconds == pytest.approx(2 * 2 * (gather - half))


def test_torchao_tensorwise_gathers_sequence_parallel_inputs_in_float8(toy_registry, registry):
    """torchtitan's float8 TP plan (torchao float8_tensor_parallel.py; docs/precision.md): the recipe's
    sequence-parallel all-gathers move e4m3 inputs forward and e5m2 output gradients backward, 1 byte per
    element instead of 2; without TP there is no such gather and nothing moves."""
    torchao = registry.precision_recipe("torchao-float8-tensorwise")
    assert torchao.tp_gather and not registry.precision_recipe("torchao-float8-rowwise").tp_gather
    bf16_gathers = attrs.evolve(torchao, name="torchao-bf16-gathers", tp_gather=False)  # the recipe as it stood before
    toy = attrs.evolve(toy_registry, precision_recipes=toy_registry.precision_recipes + (torchao, bf16_gathers))
    sp2 = ParallelSpec(tp=2, sp=True, dp=1, micro_batch_size=1, seq_len=ROWS, global_batch_size=1)
    times = {name: step_time(MODEL, sp2, registry=toy, hardware=TOY_SPEC, runtime="toy-runtime",
                             precision=None if name is None else _precision(name))
             for name in (None, "torchao-float8-tensorwise", "torchao-bf16-gathers")}
    bus = LINK * 0.5
    # The toy layer's all-gather: 1e6 elements, 2e6 bytes in bf16 and 1e6 bytes in float8, over 2 ranks.
    bf16 = collective_seconds("all_gather", 1e6 * 2, 2, bus, 1e-5)
    float8 = collective_seconds("all_gather", 1e6 * 1, 2, bus, 1e-5)
    assert float8 < bf16
    comm = {name: t.stages[0].communication_seconds for name, t in times.items()}
    # Two layers, the all-gather forward and backward; the reduce-scatter (an output) stays bf16.
    assert comm[None] - comm["torchao-float8-tensorwise"] == pytest.approx(2 * 2 * (bf16 - float8))
    assert comm["torchao-bf16-gathers"] == comm[None]
    # FSDP only (tp 1): the recipe's step time and memory exactly as with bf16 gathers, on a real model.
    model = model_from_preset("llama3-8b", registry)
    fsdp = ParallelSpec(dp=8, seq_len=8192, micro_batch_size=2, global_batch_size=16)
    real = attrs.evolve(registry, precision_recipes=registry.precision_recipes + (bf16_gathers,))
    h100 = registry.hardware_preset("h100-sxm").spec
    base = real.runtime("fsdp2").precision
    a, b = (step_time(model, fsdp, registry=real, hardware=h100, runtime="fsdp2", precision=attrs.evolve(base, recipe=n))
            for n in ("torchao-float8-tensorwise", "torchao-bf16-gathers"))
    assert attrs.evolve(a, provenance={}) == attrs.evolve(b, provenance={})
    a, b = (estimate(model, fsdp, registry=real, runtime="fsdp2", precision=attrs.evolve(base, recipe=n))
            for n in ("torchao-float8-tensorwise", "torchao-bf16-gathers"))
    assert a.stages == b.stages


def test_torchao_under_tp_keeps_its_gathered_inputs_in_float8(registry):
    """saved_input_under_tp: torchao under torchtitan's float8 TP plan keeps the SP-gathered linear inputs in float8
    (1 byte), bf16 without TP; Llama 3 8B at FSDP 8 x TP 8, micro-batch 2, 8,192 tokens, no recompute."""
    torchao = registry.precision_recipe("torchao-float8-tensorwise")
    assert (torchao.saved_input, torchao.saved_input_under_tp) == ("compute", "quantized")
    model = model_from_preset("llama3-8b", registry)
    base = registry.runtime("fsdp2").precision
    act = {}
    for tp in (1, 8):
        layout = ParallelSpec(dp=8, tp=tp, sp=tp > 1, seq_len=8192, micro_batch_size=2, global_batch_size=16)
        act[tp] = {n: estimate(model, layout, registry=registry, runtime="fsdp2", precision=attrs.evolve(base, recipe=n))
                   .stages[0].memory.activations_bytes for n in ("bf16", "torchao-float8-tensorwise")}
    assert act[1]["torchao-float8-tensorwise"] == act[1]["bf16"]  # TP 1: the bf16 input, unchanged
    # Per block (attention, MLP) the gathered input is tokens x hidden = 2 * 8192 * 4096 elements (its shard, the
    # norm output, and the gathered rest): 2 bytes each in bf16, 1 in float8; 2 blocks in each of 32 layers.
    saved = 32 * 2 * (2 * 8192 * 4096) * (2 - 1)
    assert saved == 4 * 2**30
    assert act[8]["bf16"] - act[8]["torchao-float8-tensorwise"] == saved
    page = " ".join((Path(__file__).resolve().parents[2] / "docs" / "precision.md").read_text(encoding="utf-8").split())
    assert (f"{act[8]['bf16'] / 2**30:.1f} GiB of activations in bf16, {act[8]['torchao-float8-tensorwise'] / 2**30:.1f} GiB "
            "with `torchao-float8-tensorwise`") in page


def test_bf16_named_is_bit_identical_to_no_recipe(registry):
    model = model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(tp=2, sp=True, pp=2, dp=2, seq_len=4096, global_batch_size=8)
    h100 = registry.hardware_preset("h100-sxm").spec
    named = attrs.evolve(registry.runtime("megatron").precision, recipe="bf16")
    for runtime in ("megatron", "generic", "fsdp2"):
        a = step_time(model, layout, registry=registry, hardware=h100, runtime=runtime)
        b = step_time(model, layout, registry=registry, hardware=h100, runtime=runtime,
                      precision=attrs.evolve(registry.runtime(runtime).precision, recipe="bf16"))
        assert attrs.evolve(a, provenance={}) == attrs.evolve(b, provenance={})
        assert a.mfu_recipe_peak == a.mfu
    e1 = estimate(model, layout, registry=registry, runtime="megatron")
    e2 = estimate(model, layout, registry=registry, runtime="megatron", precision=named)
    assert e1.stages == e2.stages


# ----------------------------------------------------------------------------- refusals


def test_refusals_name_the_field(registry):
    model = model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(dp=8, seq_len=4096)
    base = registry.runtime("megatron").precision
    with pytest.raises(ConfigError, match=r"^\$\.precision\.recipe: unknown precision recipe 'fp9'"):
        estimate(model, layout, registry=registry, precision=attrs.evolve(base, recipe="fp9"))
    with pytest.raises(ConfigError, match=r"^\$\.precision\.activation_bytes: 1-byte activations"):
        estimate(model, layout, registry=registry, precision=attrs.evolve(base, activation_bytes=1))
    cases = (
        ("a100-80gb", "fp8-current", "states no peak FLOP/s"),
        ("h100-sxm", "nvfp4", "runs on blackwell devices only"),  # TE: compute capability 10.0 for NVFP4
        ("b200", "fp8-blockwise", "no measured fp8_blockwise GEMM speedup for blackwell"),  # Hopper: the autocast figure
        ("b200", "torchao-float8-rowwise", "no measured fp8_rowwise GEMM speedup for blackwell"),
    )
    for hardware, recipe, words in cases:
        with pytest.raises(ConfigError, match=rf"^\$\.precision\.recipe: .*{words}"):
            step_time(model, layout, registry=registry, runtime="megatron", hardware=registry.hardware_preset(hardware).spec,
                      precision=attrs.evolve(base, recipe=recipe))
    # Memory needs no hardware: every recipe estimates.
    for recipe in registry.precision_recipes:
        estimate(model, layout, registry=registry, runtime="megatron", precision=attrs.evolve(base, recipe=recipe.name))


def _docs_row(r: PrecisionRecipe) -> str:
    """A recipe's row of docs/precision.md's table, from the record."""
    def operand(o):
        return o.format + (f" / {o.scaling}" if o.scaling != "none" else "")

    flags = "; ".join(f"{k}: `{' '.join(v)}`" for k, v in r.flags.items()) or "(none)"
    saved = r.saved_input if r.low_precision else "(unchanged)"
    if r.low_precision and r.saved_input_under_tp not in (None, r.saved_input):
        saved += f" ({r.saved_input_under_tp} gathered under TP)"
    return (f"| `{r.name}` | {operand(r.weights)} | {operand(r.activations)} | {operand(r.gradients)} | {saved} "
            f"| {r.weight_copies}{' cached' if r.cache_weights else ''}"
            f"{''.join(f' ({r.on(a).weight_copies} on {a})' for a in r.one_copy_architectures)} | {r.param_gather} | {'yes' if r.tp_gather else 'no'} "
            f"| {r.quantize_passes} | `{r.kernel}` | {r.gemms if r.low_precision else '(none)'} "
            f"| {', '.join(r.split_accumulator) or '(none)'} | {', '.join(r.rescaled_outputs) or '(none)'} "
            f"| {', '.join(r.compute_dtype_passes) or '(none)'} | {flags} |")


def test_docs_list_every_built_in_recipe_as_the_record_states_it(registry):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "precision.md").read_text(encoding="utf-8")
    for recipe in registry.precision_recipes:
        assert _docs_row(recipe) in text, recipe.name
    assert math.isclose(registry.precision_recipe("fp8-delayed").activations.bytes_per_element, 1.0)


def test_the_config_and_hooks_pages_name_every_built_in_recipe(registry):
    # docs/config.md's `recipe` field and docs/hooks.md's hp_precision_recipes entry list the built-in names.
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    config = docs.joinpath("config.md").read_text(encoding="utf-8")
    config = config[config.index("`recipe` (`bf16`;"):config.index("`--precision NAME` sets it")]
    hooks = docs.joinpath("hooks.md").read_text(encoding="utf-8")
    hooks = hooks[hooks.index("Built in: `bf16`"):hooks.index("Full page:\n[hp_precision_recipes]")]
    names = {r.name for r in registry.precision_recipes}
    assert set(re.findall(r"`([a-z0-9-]+)`", config)) >= names - {"bf16"}
    assert set(re.findall(r"`([a-z0-9-]+)`", hooks)) == names


# ----------------------------------------------------------------------------- the command line


def test_the_command_line_names_a_recipe_and_prints_both_mfus_and_the_flags(capsys):
    from cli_run import run

    status, out, err = run(capsys, "estimate", "--model", "llama3-8b", "--tp", 2, "--sp", "--dp", 4, "--seq-len", 4096,
                           "--runtime", "megatron", "--hardware", "h100-sxm", "--precision", "fp8-current",
                           "--export", "megatron", "--json")
    assert status == 0, err
    import json

    doc = json.loads(out)
    assert doc["provenance"]["precision_recipe"] == "fp8-current"
    assert doc["time"]["provenance"]["gemm_dtype"] == "fp8"
    assert doc["time"]["mfu_recipe_peak"] == pytest.approx(doc["time"]["mfu"] * 989.4 / 1978.9)
    assert doc["export"]["precision_flags"] == "--fp8-format hybrid --fp8-recipe tensorwise"
    status, out, err = run(capsys, "estimate", "--model", "llama3-8b", "--seq-len", 4096, "--precision", "fp9")
    assert status == 2 and err.count("\n") == 1 and "--precision: unknown precision recipe 'fp9'" in err


def test_every_answer_records_the_recipe_it_was_priced_under(capsys, tmp_path):
    # An FP8 answer saved to a file tells itself from a bf16 one: search (JSON, CSV, table), recompute, potentials.
    from cli_run import run
    import csv
    import json

    job = ("--model", "llama3-8b", "--num-layers", 4, "--hardware", "h100-sxm", "--seq-len", 2048)
    path = tmp_path / "top.csv"
    status, out, err = run(capsys, "search", *job, "--devices", 8, "--global-batch-size", 16, "--top", 2,
                           "--precision", "fp8-current", "--high-precision-layers-at-end", 1, "--csv", path, "--json")
    assert status == 0, err
    doc = json.loads(out)
    assert doc["precision_recipe"] == "fp8-current" and doc["mfu_dtype"] == "bf16"
    assert doc["high_precision_layers"] == {"at_start": 0, "at_end": 1}
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    assert rows and {(r["precision_recipe"], r["mfu_dtype"]) for r in rows} == {("fp8-current", "bf16")}
    status, out, err = run(capsys, "search", *job, "--devices", 8, "--global-batch-size", 16, "--top", 2,
                           "--precision", "fp8-current")
    assert status == 0 and "precision fp8-current" in " ".join(out.split()) and "MFU (bf16 peak)" in out
    status, out, err = run(capsys, "recompute", *job, "--dp", 4, "--tp", 2, "--sp", "--precision", "fp8-current", "--json")
    assert status == 0 and json.loads(out)["provenance"]["precision_recipe"] == "fp8-current"
    status, out, err = run(capsys, "potentials", *job, "--dp", 4, "--tp", 2, "--sp", "--steps", 1,
                           "--precision", "fp8-current", "--json")
    assert status == 0 and json.loads(out)["precision_recipe"] == "fp8-current"
    status, out, err = run(capsys, "recompute", *job, "--dp", 4, "--tp", 2, "--sp", "--json")
    assert status == 0 and json.loads(out)["provenance"]["precision_recipe"] == "bf16"


def test_the_search_ranks_several_recipes_together(capsys):
    from cli_run import run
    import json

    status, out, err = run(capsys, "search", "--model", "llama3-8b", "--num-layers", 2, "--devices", 8, "--hardware", "h100-sxm",
                           "--runtime", "megatron", "--seq-len", 2048, "--global-batch-size", 16,
                           "--precision", "bf16,fp8-current", "--top", 4, "--json")
    assert status == 0, err
    doc = json.loads(out)
    assert doc["precision_dimension"] == ["bf16", "fp8-current"]
    steps = [entry["step_seconds"] for entry in doc["ranked"]]
    assert steps == sorted(steps) and {entry["recipe"] for entry in doc["ranked"]} == {"bf16", "fp8-current"}
    # Each recipe's own search is the one a single --precision runs.
    assert doc["results"]["fp8-current"]["top"][0]["step_seconds"] == min(
        e["step_seconds"] for e in doc["ranked"] if e["recipe"] == "fp8-current")
    status, out, err = run(capsys, "search", "--model", "llama3-8b", "--devices", 8, "--hardware", "h100-sxm",
                           "--seq-len", 2048, "--precision", "bf16,bf16")
    assert status == 2 and "--precision: name each recipe once" in err
    # A recipe the device does not run is said, the others ranked; none running is one line.
    argv = ("search", "--model", "llama3-8b", "--num-layers", 2, "--devices", 8, "--hardware", "h100-sxm",
            "--runtime", "megatron", "--seq-len", 2048, "--global-batch-size", 16, "--top", 2)
    status, out, err = run(capsys, *argv, "--precision", "bf16,nvfp4", "--json")
    doc = json.loads(out)
    assert status == 0 and {e["recipe"] for e in doc["ranked"]} == {"bf16"}
    assert "runs on blackwell devices only" in doc["refused"]["nvfp4"]
    status, out, err = run(capsys, *argv, "--precision", "mxfp8,nvfp4")
    assert status == 2 and err.count("\n") == 1 and "--precision: no recipe of mxfp8, nvfp4 runs here" in err


@pytest.mark.parametrize("name", ["fp8-megatron-param-gather", "fp8-delayed-param-gather", "mxfp8-param-gather"])
def test_a_recipe_keeping_its_parameters_in_its_format_needs_the_distributed_optimizer(registry, name, capsys):
    # Megatron-LM asserts --fp8-param-gather only with the distributed optimizer or FSDP (megatron/training/arguments.py
    # at NVIDIA/Megatron-LM@d98e8a6): zero 0 refused one line at $.parallel.zero; zero 1 runs; a recipe without the
    # parameter gather runs at zero 0.
    from cli_run import run

    recipe = registry.precision_recipe(name)
    with pytest.raises(ConfigError, match=rf"^\$\.parallel\.zero: precision recipe {name} keeps its parameters in"):
        recipe.check_zero(0)
    recipe.check_zero(1)
    registry.precision_recipe("fp8-current").check_zero(0)
    args = ("estimate", "--model", "llama3-8b", "--dp", "8", "--seq-len", "4096", "--runtime", "megatron",
            "--precision", name)
    status, out, err = run(capsys, *args, "--zero", "0")
    assert status == 2 and out == "" and err.count("\n") == 1 and "$.parallel.zero: precision recipe" in err, err
    assert run(capsys, *args, "--zero", "1")[0] == 0


# ----------------------------------------------------------------------------- a plugin's recipe, checked when registered


def _plugin_recipe(**fields):
    base = dict(name="plug-fp8", description="d", source="s", weights=FP8, activations=FP8,
                gradients=GemmOperand("e5m2", "tensor_current"))
    return PrecisionRecipe(**{**base, **fields})


def test_a_block_format_runs_with_its_own_block_scaling_only():
    # MXFP8 without its E8M0 blocks would price 1 byte an element, not 1.03125; E4M3 with them an MXFP8 kernel as FP8's.
    assert GemmOperand("mxfp8", "mx_32").bytes_per_element == 1.03125
    for fmt, scaling in (("mxfp8", "tensor_current"), ("e4m3", "mx_32"), ("nvfp4", "tensor_current"), ("e5m2", "nvfp4_16")):
        with pytest.raises(ValueError, match="mxfp8 runs with mx_32 and nvfp4 with nvfp4_16 only"):
            GemmOperand(fmt, scaling)


@pytest.mark.parametrize(("fields", "words"), [
    (dict(quantize_passes=0), "quantize_passes 0; a quantization reads the compute-dtype tensor at least once"),
    (dict(amax_history=16), "amax_history 16 is delayed scaling's; no operand scales tensor_delayed"),
    (dict(flags={"megatron": "--fp8-format e4m3"}), "state each trainer's flags as a tuple of words"),
])
def test_a_recipe_record_contradicting_itself_is_refused(fields, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        _plugin_recipe(**fields)


@pytest.mark.parametrize(("fields", "words"), [
    (dict(architectures=("blackwel",)), "architectures names 'blackwel', which no hardware preset or timing profile "
                                        "names; did you mean 'blackwell'?"),
    (dict(one_copy_architectures=("blackwel",)), "one_copy_architectures names 'blackwel'"),
    (dict(flags={"megatorn": ("--x",)}), "flags for 'megatorn', no registered exporter"),
    # The built-in fp8-current's flags in another order: the importer could not tell the two apart.
    (dict(name="aaa-dup", flags={"megatron": ("--fp8-recipe", "tensorwise", "--fp8-format", "hybrid")}),
     "its megatron flags (--fp8-recipe tensorwise --fp8-format hybrid) are precision recipe fp8-current's"),
])
def test_a_plugin_recipe_the_registry_contradicts_is_its_plugin_s_fault(fields, words):
    from hp_core.errors import PluginError

    record = _plugin_recipe(**fields)

    class Plug:
        @hookimpl
        def hp_precision_recipes(self):
            yield record

    with pytest.raises(PluginError, match=r"^plugin \S+: precision recipe " + re.escape(f"{record.name}: {words}")):
        build_registry([Plug()], use_env=False)
    # hp plugins lists it broken and leaves its records out; the built-in recipes stay.
    registry = build_registry([Plug()], use_env=False, broken_ok=True)
    assert len(registry.broken) == 1 and words in registry.broken[0].error
    assert record.name not in {r.name for r in registry.precision_recipes}
    assert "fp8-current" in {r.name for r in registry.precision_recipes}


def test_blocking_an_exporter_leaves_the_built_in_recipes_and_a_new_family_is_a_plugin_s_own():
    # The built-in recipes' torchtitan flags name an exporter a user may block: they stay (and bf16 with them).
    registry = build_registry(blocked=("torchtitan",), use_env=False)
    assert {"bf16", "torchao-float8-rowwise"} <= {r.name for r in registry.precision_recipes} and not registry.broken
    # A plugin's recipe for a family nothing names yet (its own hardware plugin's, or none) is taken as stated.
    record = _plugin_recipe(architectures=("ada",))

    class Plug:
        @hookimpl
        def hp_precision_recipes(self):
            yield record

    assert "plug-fp8" in {r.name for r in build_registry([Plug()], use_env=False).precision_recipes}


def test_blocking_a_recipe_takes_its_fp8_attention_twin_along():
    # fp8-current-fp8-attention names fp8-current as its bf16-attention twin: blocking the one leaves the other out
    # too, instead of refusing every command.
    registry = build_registry(blocked=("fp8-current",), use_env=False)
    names = {r.name for r in registry.precision_recipes}
    assert "fp8-current" not in names and "fp8-current-fp8-attention" not in names and "fp8-delayed" in names


def test_a_twin_naming_no_registered_recipe_leaves_its_plugin_broken_not_the_listing():
    # hp plugins (broken_ok) lists the plugin whose FP8-attention recipe names a recipe nobody registers; the others stay.
    record = attrs.evolve(_plugin_recipe(name="plug-fp8-attention", attention_format="e4m3"),
                          bf16_attention_recipe="plug-missing")

    class Plug:
        @hookimpl
        def hp_precision_recipes(self):
            yield record

    registry = build_registry([Plug()], use_env=False, broken_ok=True)
    assert len(registry.broken) == 1 and "bf16_attention_recipe 'plug-missing'" in registry.broken[0].error
    assert "fp8-current" in {r.name for r in registry.precision_recipes}
