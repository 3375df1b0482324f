"""A recipe's weight copies and quantized writes follow the device as Transformer Engine does (docs/precision.md):
per-tensor FP8 on Blackwell keeps one copy (TE ``nvte_is_non_tn_fp8_gemm_supported``: no transpose), everything else
two; and the fsdp2 runtime gathers GEMM weights in a recipe's format (torchao's float8 all-gather)."""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import estimate, model_from_preset, plan_recompute, step_time
from hp_core.engine.precision import on_device, quantized_weight_elements
from hp_core.engine.prepare import prepare
from hp_core.engine.timing.rates import _recipe_rates
from hp_core.specs import ParallelSpec

LAYOUT = ParallelSpec(tp=2, sp=True, dp=4, seq_len=4096)


def _precision(registry, runtime, recipe):
    return attrs.evolve(registry.runtime(runtime).precision, recipe=recipe)


def _quantized(registry, model, layout):
    run = prepare(model, layout, registry=registry, runtime="megatron")
    return quantized_weight_elements([(cost, group.count) for cost, group in zip(run.costs, model.layers)])


@pytest.mark.parametrize(("recipe", "hopper", "blackwell"), [
    ("fp8-current", 2, 1), ("fp8-delayed", 2, 1), ("fp8-megatron-param-gather", 2, 1),
    ("fp8-blockwise", 2, 2), ("mxfp8", 2, 2), ("nvfp4", 2, 2), ("torchao-float8-tensorwise", 0, 0), ("bf16", 0, 0),
])
def test_weight_copies_by_architecture(registry, recipe, hopper, blackwell):
    found = registry.precision_recipe(recipe)
    assert found.on("hopper").weight_copies == hopper
    assert found.on("blackwell").weight_copies == blackwell
    assert found.on(None) is found  # no device named: the recipe as stated
    assert found.on("hopper") is found


def test_blackwell_holds_one_fp8_copy_of_each_weight(registry):
    model = model_from_preset("llama3-8b", registry)
    quantized = _quantized(registry, model, LAYOUT)

    def memory(recipe, hardware):
        return estimate(model, LAYOUT, registry=registry, runtime="megatron", hardware=hardware,
                        precision=_precision(registry, "megatron", recipe)).stages[0].memory

    bf16 = memory("bf16", "b200")
    assert bf16 == memory("bf16", "h100-sxm") == memory("bf16", None)
    # Hopper: the FP8 weight and its transpose, 1 byte each; Blackwell: the weight only.
    assert memory("fp8-current", "h100-sxm").parameters_bytes - bf16.parameters_bytes == 2 * quantized
    assert memory("fp8-current", "b200").parameters_bytes - bf16.parameters_bytes == quantized
    assert memory("fp8-current", None) == memory("fp8-current", "h100-sxm")  # no device: TE's general case, two
    # MXFP8 keeps row-wise and column-wise data with their own E8M0 scales on every device: 2 * (1 + 1/32) bytes.
    assert memory("mxfp8", "b200").parameters_bytes - bf16.parameters_bytes == -(-quantized * 2 * 33 // 32)
    # --fp8-param-gather on Blackwell: the FP8 parameter serves both usages, so no copy is cached at all.
    stored = memory("fp8-megatron-param-gather", "b200")
    assert stored.parameters_bytes - bf16.parameters_bytes == -quantized
    # Only the parameters move; activations are the same on both devices.
    assert memory("fp8-current", "b200").activations_bytes == memory("fp8-current", "h100-sxm").activations_bytes


def test_on_device_keeps_one_run_per_family(registry):
    model = model_from_preset("llama3-8b", registry)
    run = prepare(model, LAYOUT, registry=registry, runtime="megatron",
                  precision=_precision(registry, "megatron", "fp8-current"))
    b200 = registry.hardware_preset("b200").spec
    h100 = registry.hardware_preset("h100-sxm").spec
    assert on_device(run, h100) is run and on_device(run, None) is run
    once = on_device(run, b200)
    assert once is not run and once.stage_inputs.recipe.weight_copies == 1
    assert on_device(run, b200) is once and on_device(once, b200) is once


def test_the_planner_prices_the_device_copies(registry):
    model = model_from_preset("llama3-8b", registry)
    precision = _precision(registry, "megatron", "fp8-current")
    plan = plan_recompute(model, LAYOUT, registry=registry, runtime="megatron", hardware="b200", precision=precision)
    direct = estimate(model, LAYOUT, registry=registry, runtime="megatron", hardware="b200", precision=precision,
                      recompute=plan.plan.recompute)
    assert plan.plan.peak_bytes == direct.peak_bytes


def test_quantized_writes_follow_the_usages(registry):
    """Per element of a GEMM input, fp8-current writes its row-wise and column-wise FP8 (2 bytes) after two bf16
    reads (4 bytes) on Hopper: 6; on Blackwell one FP8 tensor: 5. Output gradients alike; MXFP8 (1 + 1/32 per
    copy, one read of 2 bytes) writes two copies on both."""
    timing = registry.runtime("megatron").timing
    for name, arch, fwd in (("fp8-current", "hopper", 6.0), ("fp8-current", "blackwell", 5.0),
                            ("mxfp8", "blackwell", 2 + 2 * 33 / 32)):
        hardware = registry.hardware_preset("b200" if arch == "blackwell" else "h100-sxm").spec
        rates = _recipe_rates(registry.precision_recipe(name), timing.device(arch), timing, hardware, 2)
        assert rates["quant_input_fwd"] == pytest.approx(fwd)
        assert rates["quant_grad"] == pytest.approx(fwd)


def test_torchao_casts_no_input_in_backward_under_tp_with_sp(registry):
    """torchao-float8-tensorwise per GEMM input element on Hopper: two bf16 reads (4 bytes) and one float8 write (1)
    in forward; without TP the saved bf16 input is cast again in backward (5), under TP > 1 with SP the float8
    input its TP plan handed the layer is kept (0). Weights (not cached): cast forward and backward, 2 x 5."""
    timing = registry.runtime("fsdp2").timing
    hardware = registry.hardware_preset("h100-sxm").spec
    recipe = registry.precision_recipe("torchao-float8-tensorwise")
    for tp_sp, bwd in ((False, 5.0), (True, 0.0)):
        rates = _recipe_rates(recipe, timing.device("hopper"), timing, hardware, 2, tp_sp)
        assert (rates["quant_input_fwd"], rates["quant_input_bwd"], rates["quant_weight"]) == (5.0, bwd, 10.0)
    # A recipe that states no saved_input_under_tp is priced alike with and without TP.
    fp8 = registry.precision_recipe("fp8-current")
    assert (_recipe_rates(fp8, timing.device("hopper"), timing, hardware, 2, True)
            == _recipe_rates(fp8, timing.device("hopper"), timing, hardware, 2, False))


def test_blackwell_fp8_current_step_is_faster_by_its_quantized_writes_only(registry, monkeypatch):
    """On B200 fp8-current writes one FP8 tensor per quantization (PrecisionRecipe.usages 1): the step is priced as
    with usages forced to 1, faster than with Hopper's 2 by what one more write costs (the step is linear in the
    tensors written: 2 -> 3 adds as much as 1 -> 2), and nothing but compute moves."""
    from hp_core.precision_recipes import PrecisionRecipe

    model = model_from_preset("llama3-8b", registry)
    precision = _precision(registry, "megatron", "fp8-current")

    # The kernels' time: at LAYOUT's micro-batch of one 4,096-token sequence over TP 2 the 8B layers' forward is
    # within the runtime's host floor (docs/time.md, "Overlap and host time"), which no write moves.
    profile = attrs.evolve(registry.runtime("megatron").timing, host=None)

    def step():
        return step_time(model, LAYOUT, registry=registry, runtime="megatron", hardware="b200", precision=precision,
                         profile=profile)

    real = step()
    found = {}
    for usages in (1, 2, 3):
        monkeypatch.setattr(PrecisionRecipe, "usages", lambda self, architecture, n=usages: n)
        found[usages] = step()
    monkeypatch.undo()
    assert real.step_seconds == found[1].step_seconds
    assert found[1].compute_seconds < found[2].compute_seconds
    one_write = found[2].compute_seconds - found[1].compute_seconds
    assert found[3].compute_seconds - found[2].compute_seconds == pytest.approx(one_write, rel=1e-9)
    for usages in (2, 3):
        assert found[usages].stages[0].communication_by_group == found[1].stages[0].communication_by_group


def test_fsdp2_gathers_float8_weights(registry):
    """torchao's float8 all-gather (recipe torchao-float8-tensorwise, param_gather cast): the gathered GEMM weights
    take 1 byte instead of 2; rowwise gathers bf16. Llama-3-8B at dp 8 binds in backward at the head's backward: the
    root's gathered parameters (the embedding and the head, not quantized) and one all-gather output, the prefetched
    last decoder layer, whose GEMM weights (4096 * (4096 + 2 * 1024 + 4096 + 3 * 14336) = 218,103,808 elements; its
    two norms' 8,192 stay bf16) save one byte each."""
    model = model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(dp=8, zero=3, micro_batch_size=1, seq_len=8192, global_batch_size=8)

    def memory(recipe):
        stage = estimate(model, layout, registry=registry, runtime="fsdp2",
                         precision=_precision(registry, "fsdp2", recipe)).stages[0]
        return stage.binding_point, stage.memory

    point, bf16 = memory("bf16")
    assert memory("torchao-float8-rowwise") == (point, bf16)
    point8, tensorwise = memory("torchao-float8-tensorwise")
    assert point8 == point == "backward"
    assert bf16.communication_buffers_bytes - tensorwise.communication_buffers_bytes == 218_103_808
    assert attrs.evolve(tensorwise, communication_buffers_bytes=0) == attrs.evolve(bf16, communication_buffers_bytes=0)


def test_blockwise_on_hopper_takes_the_autocast_figure_and_prices_no_quantization_apart(registry):
    """TE measured FP8 block scaling on H200 only with the quantization timed (gemm_profiling.rst, autocast:
    32.014 / 22.882 ms per layer = 1.399): the GEMMs take bf16 time / 1.399 and no quantization traffic is added."""
    from hp_core.errors import ConfigError

    timing = registry.runtime("megatron").timing
    hopper = timing.device("hopper")
    assert hopper.gemm_speedup("fp8_blockwise") is None
    assert hopper.autocast_speedup("fp8_blockwise") == pytest.approx(32.014 / 22.882, abs=5e-4)
    h100 = registry.hardware_preset("h100-sxm").spec
    rates = _recipe_rates(registry.precision_recipe("fp8-blockwise"), hopper, timing, h100, 2)
    assert rates["gemm_speedup"] == 1.399
    assert rates["quant_input_fwd"] == rates["quant_input_bwd"] == rates["quant_grad"] == rates["quant_weight"] == 0.0
    model = model_from_preset("llama3-8b", registry)
    times = {r: step_time(model, LAYOUT, registry=registry, runtime="megatron", hardware=h100,
                          precision=_precision(registry, "megatron", r)) for r in ("bf16", "fp8-current", "fp8-blockwise")}
    assert times["bf16"].step_seconds > times["fp8-blockwise"].step_seconds > times["fp8-current"].step_seconds
    # Blackwell has no blockwise figure (TE emulates it through MXFP8 there): still refused, one line.
    with pytest.raises(ConfigError, match="no measured fp8_blockwise GEMM speedup"):
        step_time(model, LAYOUT, registry=registry, runtime="megatron", hardware="b200",
                  precision=_precision(registry, "megatron", "fp8-blockwise"))


def test_an_autocast_speedup_names_a_known_kernel():
    from hp_core.specs.timing import DeviceEfficiency, Sourced

    fields = {f.name: Sourced(0.5, "test") for f in attrs.fields(DeviceEfficiency)
              if f.name not in ("architecture",) and f.default is attrs.NOTHING}
    fields["grouped_half_rows"] = Sourced(100, "test")
    ok = DeviceEfficiency(architecture="x", gemm_speedups=(("mxfp8:autocast", Sourced(1.5, "test")),), **fields)
    assert ok.autocast_speedup("mxfp8") == 1.5 and ok.gemm_speedup("mxfp8") is None
    with pytest.raises(ValueError, match="or one with ':autocast'"):
        DeviceEfficiency(architecture="x", gemm_speedups=(("int8:autocast", Sourced(1.5, "test")),), **fields)


# ----------------------------------------------------------------------------- split accumulation

def test_the_backward_gemms_take_hoppers_split_accumulator_rate(registry):
    """TE runs dgrad and wgrad with FP8 split accumulation and the forward fast (module/base.py _2X_ACC_*); Hopper's
    entry states the fast rate (TE's benchmark, 1.905) and the split one (1.8547, measured on one H200 at Llama-3 shapes):
    the forward GEMMs take the first, the backward ones the second. Blackwell states no split figure: one rate."""
    timing = registry.runtime("megatron").timing
    hopper, blackwell = timing.device("hopper"), timing.device("blackwell")
    h100, b200 = registry.hardware_preset("h100-sxm").spec, registry.hardware_preset("b200").spec
    current = registry.precision_recipe("fp8-current")
    assert current.split_accumulator == ("dgrad", "wgrad")
    assert hopper.pass_speedups("fp8_tensorwise", current.split_accumulator) == (1.905, 1.8547, 1.8547)
    rates = _recipe_rates(current, hopper, timing, h100, 2)
    assert (rates["gemm_speedup"], rates["gemm_speedup_backward"]) == (1.905, pytest.approx(1.8547))
    rates = _recipe_rates(current, blackwell, timing, b200, 2)
    assert (rates["gemm_speedup"], rates["gemm_speedup_backward"]) == (1.923, pytest.approx(1.923))
    # One backward pass split, the other fast: the backward's two halves at their own rates.
    wgrad_only = attrs.evolve(current, name="wgrad-only", split_accumulator=("wgrad",))
    rates = _recipe_rates(wgrad_only, hopper, timing, h100, 2)
    assert rates["gemm_speedup_backward"] == pytest.approx(2 / (1 / 1.905 + 1 / 1.8547))
    # torchao: the output GEMM fast, the two gradient GEMMs not (Float8LinearConfig's gemm configs).
    assert registry.precision_recipe("torchao-float8-tensorwise").split_accumulator == ("dgrad", "wgrad")
    assert registry.precision_recipe("fp8-blockwise").split_accumulator == ("fprop", "dgrad", "wgrad")


def test_a_layer_s_fp8_gemms_by_pass_by_hand():
    """A layer with no compute-dtype GEMM: forward matmul seconds over the forward speedup, backward over the backward's."""
    import types

    from hp_core.costs import LayerWork
    from hp_core.engine.timing.layer import _low_precision_seconds

    rates = types.SimpleNamespace(gemm_speedup=1.905, gemm_speedup_backward=1.7654, quant_input_fwd=0.0,
                                  quant_input_bwd=0.0, quant_grad=0.0, quant_weight=0.0, memory=1.0, gemm_scope="all",
                                  rescale=(0.0, 0.0, 0.0))
    work = LayerWork(gemms=((4096, 4096, 4096),))
    dense = 2.0 * 4096 ** 3
    fwd, bwd, q_fwd, q_bwd = _low_precision_seconds(dense, 0.0, work, rates, 0.3, 0.6)
    assert fwd == pytest.approx(0.3 / 1.905) and bwd == pytest.approx(0.6 / 1.7654)
    assert q_fwd == q_bwd == 0.0


def test_a_rescaled_gemm_output_is_one_read_and_one_write_by_hand(registry):
    """torchao's rowwise recipe runs its backward GEMMs on the per-tensor kernel at unit scales and rescales each
    output (float8_ops.py addmm_float8_unwrapped): a bf16 read and write, 4 bytes per element of the dgrad output
    (rows x fan_in) and of the wgrad output (fan_out x fan_in), none in forward. A layer of one (8192, 1024, 4096)
    GEMM at 1e12 B/s: (8192 x 4096 + 1024 x 4096) x 4 / 1e12 s backward."""
    import types

    from hp_core.costs import LayerWork
    from hp_core.engine.timing.layer import _low_precision_seconds

    timing = registry.runtime("fsdp2").timing
    rowwise = _recipe_rates(registry.precision_recipe("torchao-float8-rowwise"), timing.device("hopper"), timing,
                            registry.hardware_preset("h100-sxm").spec, 2)
    assert rowwise["rescale"] == (0.0, 4.0, 4.0)
    assert (rowwise["gemm_speedup"], rowwise["gemm_speedup_backward"]) == (1.9622, pytest.approx(1.8547))
    tensorwise = _recipe_rates(registry.precision_recipe("torchao-float8-tensorwise"), timing.device("hopper"), timing,
                               registry.hardware_preset("h100-sxm").spec, 2)
    assert tensorwise["rescale"] == (0.0, 0.0, 0.0)
    rates = types.SimpleNamespace(gemm_speedup=1.0, gemm_speedup_backward=1.0, quant_input_fwd=0.0, quant_input_bwd=0.0,
                                  quant_grad=0.0, quant_weight=0.0, memory=1e12, gemm_scope="all",
                                  rescale=rowwise["rescale"])
    work = LayerWork(gemms=((8192, 1024, 4096),))
    _, _, q_fwd, q_bwd = _low_precision_seconds(2.0 * 8192 * 1024 * 4096, 0.0, work, rates, 0.3, 0.6)
    assert q_fwd == 0.0
    assert q_bwd == pytest.approx((8192 * 4096 + 1024 * 4096) * 4 / 1e12, rel=1e-12)
    # A recipe rescaling the forward's output too: rows x fan_out elements there.
    rates.rescale = (4.0, 0.0, 0.0)
    _, _, q_fwd, q_bwd = _low_precision_seconds(2.0 * 8192 * 1024 * 4096, 0.0, work, rates, 0.3, 0.6)
    assert (q_fwd, q_bwd) == (pytest.approx(8192 * 1024 * 4 / 1e12, rel=1e-12), 0.0)


def test_rowwise_with_the_weight_gradient_in_bf16_by_hand(registry):
    """torchao's rowwise_with_gw_hp on Hopper (Float8LinearConfig.from_recipe_name): the forward on the row-wise kernel
    (1.9622), the input gradient on the per-tensor kernel with split accumulation (1.8547) and rescaled (4 bytes an
    element), the weight gradient in bf16 (1.0, no curve). Casts per element at bf16: the input once (2 reads + 1 byte
    = 5), not again in backward; the output gradient once (5); the weight twice (10)."""
    timing = registry.runtime("fsdp2").timing
    recipe = registry.precision_recipe("torchao-float8-rowwise-gw-hp")
    rates = _recipe_rates(recipe, timing.device("hopper"), timing, registry.hardware_preset("h100-sxm").spec, 2)
    assert rates["gemm_pass_speedups"] == (1.9622, 1.8547, 1.0)
    assert rates["gemm_speedup_backward"] == pytest.approx(2 / (1 / 1.8547 + 1))
    assert rates["gemm_speedup_curves"][2] is None and rates["gemm_speedup_curves"][1] is not None
    assert rates["rescale"] == (0.0, 4.0, 0.0)
    assert (rates["quant_input_fwd"], rates["quant_input_bwd"], rates["quant_grad"], rates["quant_weight"]) == (
        5.0, 0.0, 5.0, 10.0)
    # Its memory is the rowwise recipe's (the bf16 input is saved for the weight gradient either way).
    model = model_from_preset("llama3-8b", registry)
    peaks = [max(s.peak_bytes for s in estimate(model, LAYOUT, registry=registry, runtime="fsdp2",
                                                precision=_precision(registry, "fsdp2", name)).stages)
             for name in ("torchao-float8-rowwise", "torchao-float8-rowwise-gw-hp")]
    assert peaks[0] == peaks[1]
    # A layer's weight-gradient GEMMs at their bf16 time: the step is slower than rowwise's, faster than bf16's.
    steps = [step_time(model, LAYOUT, registry=registry, runtime="fsdp2", hardware="h100-sxm",
                       precision=_precision(registry, "fsdp2", name)).step_seconds
             for name in ("torchao-float8-rowwise", "torchao-float8-rowwise-gw-hp", "bf16")]
    assert steps[0] < steps[1] < steps[2]


def test_a_bf16_weight_gradient_splits_the_backward_by_pass_by_hand():
    """Where a recipe runs its two backward passes at different speedups (rowwise_with_gw_hp: input gradient 1.8547,
    weight gradient 1.0), the weight gradient's share of the backward GEMM seconds is s_dgrad / (s_dgrad + s_wgrad)
    (equal FLOPs, each at its own speedup): 1.8547 / 2.8547; a frozen weight's and a zero-bubble W pass's share follow
    it. A layer whose curves moved its backward speedup (1.2 here) keeps the weight gradient's figure and gives the
    input gradient what keeps the harmonic mean: 1 / (2 / 1.2 - 1) = 1.5. Equal passes: half, as before."""
    import types

    from hp_core.engine.timing.gemm_seconds import backward_pass_speedups, weight_gradient_share

    gw_hp = types.SimpleNamespace(low_precision=True, gemm_pass_speedups=(1.9622, 1.8547, 1.0),
                                  gemm_speedup_backward=2 / (1 / 1.8547 + 1 / 1.0))
    assert backward_pass_speedups(gw_hp) == (pytest.approx(1.8547), 1.0)
    assert weight_gradient_share(gw_hp) == pytest.approx(1.8547 / 2.8547)
    gw_hp.gemm_speedup_backward = 1.2
    assert backward_pass_speedups(gw_hp) == (pytest.approx(1.5), 1.0)
    te = types.SimpleNamespace(low_precision=True, gemm_pass_speedups=(1.905, 1.8547, 1.8547), gemm_speedup_backward=1.7)
    assert backward_pass_speedups(te) == (1.7, 1.7) and weight_gradient_share(te) == 0.5
    assert weight_gradient_share(types.SimpleNamespace(low_precision=False)) == 0.5


def test_split_accumulator_statements_are_checked():
    from hp_core.precision_recipes import GemmOperand, PrecisionRecipe
    from hp_core.specs.timing import DeviceEfficiency, Sourced

    e4m3 = GemmOperand("e4m3", "tensor_current")
    with pytest.raises(ValueError, match="split_accumulator names GEMM passes"):
        PrecisionRecipe(name="x", description="x", source="x", weights=e4m3, activations=e4m3, gradients=e4m3,
                        split_accumulator=("backward",))
    with pytest.raises(ValueError, match="quantizes no GEMM operand"):
        PrecisionRecipe(name="x", description="x", source="x", split_accumulator=("dgrad",))
    with pytest.raises(ValueError, match="rescaled_outputs names GEMM passes"):
        PrecisionRecipe(name="x", description="x", source="x", weights=e4m3, activations=e4m3, gradients=e4m3,
                        rescaled_outputs=("dgrad", "dgrad"))
    with pytest.raises(ValueError, match="no GEMM output is rescaled"):
        PrecisionRecipe(name="x", description="x", source="x", rescaled_outputs=("wgrad",))
    with pytest.raises(ValueError, match="compute_dtype_passes.*beside a saved compute-dtype input only"):
        PrecisionRecipe(name="x", description="x", source="x", weights=e4m3, activations=e4m3, gradients=e4m3,
                        compute_dtype_passes=("wgrad",))  # saved_input "quantized"
    with pytest.raises(ValueError, match="compute_dtype_passes.*beside a saved compute-dtype input only"):
        PrecisionRecipe(name="x", description="x", source="x", weights=e4m3, activations=e4m3, gradients=e4m3,
                        saved_input="compute", compute_dtype_passes=("dgrad",))
    with pytest.raises(ValueError, match="every pass runs in the compute dtype already"):
        PrecisionRecipe(name="x", description="x", source="x", saved_input="compute", compute_dtype_passes=("wgrad",))
    with pytest.raises(ValueError, match="compute_dtype_passes.*also under TP"):
        PrecisionRecipe(name="x", description="x", source="x", weights=e4m3, activations=e4m3, gradients=e4m3,
                        saved_input="compute", saved_input_under_tp="quantized", compute_dtype_passes=("wgrad",))
    with pytest.raises(ValueError, match="neither split-accumulated nor rescaled"):
        PrecisionRecipe(name="x", description="x", source="x", weights=e4m3, activations=e4m3, gradients=e4m3,
                        saved_input="compute", compute_dtype_passes=("wgrad",), split_accumulator=("dgrad", "wgrad"))
    fields = {f.name: Sourced(0.5, "test") for f in attrs.fields(DeviceEfficiency)
              if f.name not in ("architecture",) and f.default is attrs.NOTHING}
    fields["grouped_half_rows"] = Sourced(100, "test")
    with pytest.raises(ValueError, match="needs the kernel's own"):
        DeviceEfficiency(architecture="x", gemm_speedups=(("mxfp8:split_accumulator", Sourced(1.5, "test")),), **fields)
    both = DeviceEfficiency(architecture="x", gemm_speedups=(("mxfp8", Sourced(1.8, "test")),
                                                             ("mxfp8:split_accumulator", Sourced(1.5, "test"))), **fields)
    assert both.pass_speedups("mxfp8", ("fprop",)) == (1.5, 1.8, 1.8)
    assert both.pass_speedups("nvfp4") is None


def test_the_step_names_the_gemm_speedups_it_priced(registry):
    """The provenance and the report line state the forward and backward GEMM speedups (1.905 fast, 1.8547 split on
    Hopper for fp8-current); a bf16 run states 1 and prints nothing of them."""
    from hp_core.io.report import time_summary

    model = model_from_preset("llama3-8b", registry)
    fp8 = step_time(model, LAYOUT, registry=registry, runtime="megatron", hardware="h100-sxm",
                    precision=_precision(registry, "megatron", "fp8-current"))
    assert (fp8.provenance["gemm_speedup_forward"], fp8.provenance["gemm_speedup_backward"]) == (1.905, pytest.approx(1.8547))
    assert "fp8 GEMMs 1.905x the bf16 speed forward, 1.855x backward" in time_summary(fp8)
    bf16 = step_time(model, LAYOUT, registry=registry, runtime="megatron", hardware="h100-sxm")
    assert (bf16.provenance["gemm_speedup_forward"], bf16.provenance["gemm_speedup_backward"]) == (1.0, 1.0)
    assert "GEMMs 1" not in time_summary(bf16)


def test_torchao_mxfp8_casts_each_usage_with_its_own_read(registry):
    """torchao-mxfp8 on B200 per GEMM input element (torchao mx_formats/mx_linear.py mx_mm; docs/precision.md): every
    cast reads the bf16 tensor once (2 bytes) and writes E4M3 with an E8M0 byte per 32 elements (1 + 1/32). Forward:
    the input along dim0 (3.03125); backward: the saved bf16 input along dim1 (3.03125); the output gradient along
    dim0 and, by a separate kernel, dim1 (2 x 3.03125 = 6.0625, where TE's one kernel reads once: 2 + 2 x 1.03125 =
    4.0625); the weight dim0 in forward and dim1 in backward, every micro-batch (6.0625)."""
    timing = registry.runtime("fsdp2").timing
    hardware = registry.hardware_preset("b200").spec
    recipe = registry.precision_recipe("torchao-mxfp8")
    assert recipe.cast_per_usage and recipe.saved_input == "compute" and not recipe.cache_weights
    rates = _recipe_rates(recipe, timing.device("blackwell"), timing, hardware, 2)
    assert (rates["quant_input_fwd"], rates["quant_input_bwd"], rates["quant_grad"], rates["quant_weight"]) == (
        3.03125, 3.03125, 6.0625, 6.0625)
    te = _recipe_rates(registry.precision_recipe("mxfp8"), timing.device("blackwell"), timing, hardware, 2)
    assert te["quant_grad"] == 4.0625
    # The same cuBLAS MXFP8 GEMM as Transformer Engine's: the device's mxfp8 figure, in every pass.
    assert rates["gemm_speedup"] == te["gemm_speedup"] == 1.830
    assert rates["gemm_speedup_backward"] == pytest.approx(1.830, rel=1e-12)


def test_torchao_mxfp8_is_refused_off_blackwell(registry):
    """torchtitan's MX converter asserts compute capability 10.0 (components/quantization/mx.py at 6fc499f): memory and
    step time on a Hopper device are refused in one line naming the field; without a device the memory estimates."""
    from hp_core.errors import ConfigError

    model = model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(dp=8, seq_len=8192)
    precision = _precision(registry, "fsdp2", "torchao-mxfp8")
    words = r"^\$\.precision\.recipe: precision recipe torchao-mxfp8 runs on blackwell devices only .* is a hopper device"
    with pytest.raises(ConfigError, match=words):
        step_time(model, layout, registry=registry, runtime="fsdp2", hardware="h100-sxm", precision=precision)
    with pytest.raises(ConfigError, match=words):
        estimate(model, layout, registry=registry, runtime="fsdp2", hardware="h100-sxm", precision=precision)
    assert estimate(model, layout, registry=registry, runtime="fsdp2", precision=precision).stages
    assert step_time(model, layout, registry=registry, runtime="fsdp2", hardware="b200", precision=precision).step_seconds > 0


@pytest.mark.parametrize(("recipe", "hardware", "words"), [
    # Transformer Engine runs MXFP8 and NVFP4 from compute capability 10.0 only (check_mxfp8_support,
    # _compute_nvfp4_support): refused on Hopper, the FP8-attention and parameter-gather variants too.
    ("mxfp8", "h100-sxm", r"precision recipe mxfp8 runs on blackwell devices only .* is a hopper device"),
    ("mxfp8-param-gather", "h200", r"precision recipe mxfp8-param-gather runs on blackwell devices only"),
    ("nvfp4-fp8-attention", "h200", r"precision recipe nvfp4-fp8-attention runs on blackwell devices only"),
    # A device stating peaks, none for the recipe's GEMM dtype, runs none of it: refused for memory too.
    ("fp8-current", "a100-80gb", r"precision recipe fp8-current runs its GEMMs in fp8, for which NVIDIA A100 SXM 80GB states no peak"),
])
def test_a_recipe_the_device_cannot_run_is_refused_for_memory_and_time(registry, recipe, hardware, words):
    from hp_core.errors import ConfigError

    model = model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(dp=4, tp=2, sp=True, seq_len=4096)
    precision = _precision(registry, "megatron", recipe)
    for answer in (estimate, step_time):
        with pytest.raises(ConfigError, match=r"^\$\.precision\.recipe: " + words):
            answer(model, layout, registry=registry, runtime="megatron", hardware=hardware, precision=precision)
    assert estimate(model, layout, registry=registry, runtime="megatron", hardware="b200", precision=precision).stages


def test_a_module_format_the_device_cannot_run_is_said_at_module_formats(registry):
    # The run's recipe runs on Hopper; the MXFP8 format one module is given does not: said there, not at the recipe.
    from hp_core.errors import ConfigError

    model = model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(dp=4, tp=2, sp=True, seq_len=4096)
    precision = attrs.evolve(_precision(registry, "megatron", "fp8-current"), module_formats={"attention_qkv": "mxfp8"})
    for answer in (estimate, step_time):
        with pytest.raises(ConfigError, match=r"^\$\.precision\.module_formats: module format mxfp8: precision recipe "
                                              "mxfp8 runs on blackwell devices only"):
            answer(model, layout, registry=registry, runtime="megatron", hardware="h100-sxm", precision=precision)


def test_torchao_mx_recipes_quantize_the_gemms_their_converter_swaps(registry):
    """PrecisionRecipe.gemms: torchtitan's quantize.linear.mx swaps nn.Linear modules (torchao-mxfp8, 'linears': a routed
    expert's grouped GEMM stays bf16), quantize.grouped_mm.mx the experts' grouped GEMMs (torchao-mxfp8-experts), both
    together torchao-mxfp8-linears-experts ('all'). On a dense model the linears' recipe is the whole one and the experts'
    is bf16 to the last bit; on an MoE model the two savings add up to the whole recipe's (each GEMM and its casts
    priced once, in one scope or the other)."""
    runtime = registry.runtime("fsdp2")

    def compute(model, layout, recipe):
        return step_time(model, layout, registry=registry, runtime="fsdp2", hardware="b200",
                         precision=attrs.evolve(runtime.precision, recipe=recipe)).compute_seconds

    names = ("bf16", "torchao-mxfp8", "torchao-mxfp8-experts", "torchao-mxfp8-linears-experts")
    dense = {n: compute(model_from_preset("llama3-8b", registry), ParallelSpec(dp=8, seq_len=8192), n) for n in names}
    assert dense["torchao-mxfp8-experts"] == dense["bf16"]
    assert dense["torchao-mxfp8"] == dense["torchao-mxfp8-linears-experts"] < dense["bf16"]
    moe = {n: compute(model_from_preset("qwen3-30b-a3b", registry), ParallelSpec(dp=8, ep=8, seq_len=4096), n) for n in names}
    linears, experts = (moe[n] - moe["bf16"] for n in ("torchao-mxfp8", "torchao-mxfp8-experts"))
    assert linears < 0 and experts < 0
    assert linears + experts == pytest.approx(moe["torchao-mxfp8-linears-experts"] - moe["bf16"], rel=1e-12)


def test_a_partial_gemm_scope_needs_a_recipe_that_moves_no_memory():
    """gemms other than 'all' is priced in time only, so a recipe keeping a quantized input (or weight copies, gathers)
    with it is refused where it is made."""
    from hp_core.precision_recipes import GemmOperand, PrecisionRecipe

    mx = GemmOperand("mxfp8", "mx_32")
    with pytest.raises(ValueError, match="gemms 'linears' is priced in time only"):
        PrecisionRecipe(name="x", description="d", source="s", weights=mx, activations=mx, gradients=mx, gemms="linears")
    assert PrecisionRecipe(name="x", description="d", source="s", weights=mx, activations=mx, gradients=mx,
                           gemms="experts", saved_input="compute").gemms == "experts"
