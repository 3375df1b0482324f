"""Cached quantized weights are quantized once a step (hp_core/engine/timing/stage_weights.py; docs/precision.md, "Time").

Transformer Engine quantizes a cached weight on each step's first micro-batch only (``is_first_microbatch``): per
element the recipe's reads of the compute-dtype weight and writes of its copies, a transpose of the stored copy
where the parameters are kept in FP8 on Hopper, nothing where one copy serves both usages (per-tensor FP8 on
Blackwell), nothing for a weight kept in the compute dtype, nor for a frozen one where the recipe stores its weights
quantized (a frozen bf16 weight is quantized each step like a trained one). Hand-derived here at the rates' memory
bandwidth, then end to end: the figure does not grow with the micro-batches, and a pipeline pays its stages' sum,
the whole model's weights once.
"""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import build_registry, step_time
from hp_core.costs import Flops, LayerCost, LayerWork
from hp_core.engine.timing.rates import _rates
from hp_core.engine.timing.stage_weights import cached_weight_seconds
from hp_core.runtime_options import apply_options
from hp_core.specs import ParallelSpec, PrecisionSpec

REGISTRY = build_registry(use_env=False)
TIMING = REGISTRY.runtime("megatron").timing
H100 = REGISTRY.hardware_preset("h100-sxm").spec
B200 = REGISTRY.hardware_preset("b200").spec

BIG = (4096, 16384, 8192)  # rows, fan_out, fan_in: 16384 x 8192 weight elements
HEAD = (4096, 32128, 4096)  # kept in the compute dtype (high_precision_gemms)
EXPERTS = (8, 512, 1024, 2048)  # 8 local experts of 1024 x 2048
ELEMENTS = 16384 * 8192


def _rates_of(hardware, recipe: str):
    found = REGISTRY.precision_recipe(recipe)
    return _rates(ParallelSpec(seq_len=4096), hardware, TIMING, PrecisionSpec(recipe=recipe), "flash", found)


def _cost(work: LayerWork) -> LayerCost:
    flops = sum(2.0 * r * o * i for r, o, i in work.gemms) + sum(2.0 * n * r * o * i for n, r, o, i in work.expert_gemms)
    return LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0, forward=Flops(matmul_flops=flops))


WORK = LayerWork(gemms=(BIG, HEAD), high_precision_gemms=(HEAD,))


@pytest.mark.parametrize(("hardware", "recipe", "bytes_per_element"), [
    (H100, "fp8-current", 2 * 2 + 2 * 1.0),  # an amax pass and a cast pass over bf16, row-wise and column-wise copies
    (H100, "fp8-delayed", 2 + 2 * 1.0),  # one read, two copies (Hopper's transpose)
    (B200, "fp8-delayed", 2 + 1.0),  # one copy serves both usages on Blackwell
    (H100, "fp8-delayed-param-gather", 2 * 1.0),  # stored FP8: the transpose, a read and a write of one byte
    (B200, "fp8-megatron-param-gather", 0.0),  # stored FP8, one copy: nothing to write
    (B200, "mxfp8", 2 + 2 * 1.03125),  # E8M0 scale per 32 elements on each copy
    (B200, "mxfp8-param-gather", 2 + 2 * 1.03125),  # each gathered bf16 weight cast into its MXFP8 tensor
    (B200, "nvfp4", 2 * 2 + 2 * 0.5625),
])
def test_a_layer_s_weights_once_a_step_at_the_recipe_s_bytes(hardware, recipe, bytes_per_element):
    r = _rates_of(hardware, recipe)
    assert r.quant_weight_step == pytest.approx(bytes_per_element)
    assert cached_weight_seconds(_cost(WORK), WORK, r) == pytest.approx(ELEMENTS * bytes_per_element / r.memory, rel=1e-12)


def test_routed_experts_count_their_local_weights():
    r = _rates_of(B200, "mxfp8")
    work = LayerWork(gemms=(BIG,), grouped_flops=2.0 * 8 * 512 * 1024 * 2048, expert_gemms=(EXPERTS,))
    expected = (ELEMENTS + 8 * 1024 * 2048) * r.quant_weight_step / r.memory
    assert cached_weight_seconds(_cost(work), work, r) == pytest.approx(expected, rel=1e-12)


def test_a_frozen_weight_is_quantized_each_step_unless_stored_quantized():
    frozen = attrs.evolve(WORK, frozen_gemms=(BIG,), frozen_matmul_flops=2.0 * 4096 * 16384 * 8192)
    # Kept in bf16 (fp8-delayed): TE's update path checks no requires_grad, so the frozen weight is quantized on each
    # step's first micro-batch as a trained one is: on the H100 one read of 2 bytes and two 1-byte copies an element.
    bf16_params = _rates_of(H100, "fp8-delayed")
    assert not bf16_params.weights_stored_quantized
    assert cached_weight_seconds(_cost(frozen), frozen, bf16_params) == pytest.approx(
        ELEMENTS * (2 + 2 * 1.0) / bf16_params.memory, rel=1e-12)
    # Stored in FP8 (TE's FP8 parameters, fp8_model_init) or MXFP8 (gathered through the gradient buffer): built
    # quantized and never updated, so no step quantizes it; a trained weight still pays its Hopper transpose.
    for hardware, recipe in ((H100, "fp8-delayed-param-gather"), (B200, "mxfp8-param-gather")):
        stored = _rates_of(hardware, recipe)
        assert stored.weights_stored_quantized, recipe
        assert cached_weight_seconds(_cost(frozen), frozen, stored) == 0.0, recipe
    stored = _rates_of(H100, "fp8-delayed-param-gather")
    assert cached_weight_seconds(_cost(WORK), WORK, stored) == pytest.approx(ELEMENTS * 2.0 / stored.memory, rel=1e-12)


def test_nothing_for_kept_uncached_or_bf16_weights():
    r = _rates_of(H100, "fp8-current")
    kept = attrs.evolve(WORK, quantized=False)  # a first or last layer the run keeps in bf16
    assert cached_weight_seconds(_cost(kept), kept, r) == 0.0
    # torchao quantizes its weights every micro-batch (cache_weights false): priced per micro-batch, not here.
    assert _rates_of(H100, "torchao-float8-tensorwise").quant_weight_step == 0.0
    bf16 = _rates(ParallelSpec(seq_len=4096), H100, TIMING, PrecisionSpec(), "flash", None)
    assert cached_weight_seconds(_cost(WORK), WORK, bf16) == 0.0


def _step(recipe: str, **layout):
    parallel = ParallelSpec(**{"seq_len": 4096, "micro_batch_size": 1, **layout})
    precision = attrs.evolve(REGISTRY.runtime("megatron").precision, recipe=recipe)
    return step_time("llama3-8b", parallel, registry=REGISTRY, runtime="megatron", hardware="h100-sxm", precision=precision)


def test_once_a_step_whatever_the_micro_batches_and_the_pipeline():
    one = _step("fp8-current", global_batch_size=1)
    four = _step("fp8-current", global_batch_size=4)
    cast = one.provenance["cached_weight_quantize_seconds"]
    # Llama 3 8B's 32 layers: 4096 x (4096 + 2 x 1024 + 4096 + 3 x 14336) weight elements each at 6 bytes, at the
    # H100 rates' memory bandwidth, times the sustained slowdown (1 on Hopper).
    r = _rates_of(H100, "fp8-current")
    assert cast == pytest.approx(32 * 4096 * (4096 + 2048 + 4096 + 3 * 14336) * 6 / r.memory * r.slowdown, rel=1e-9)
    assert four.provenance["cached_weight_quantize_seconds"] == pytest.approx(cast, rel=1e-12)
    assert one.compute_seconds == pytest.approx(one.micro_batches * (one.stages[0].forward_seconds
                                                                     + one.stages[0].backward_seconds) + cast)
    # Two stages pay their sum along the first micro-batch's forward: the model's weights once, as one stage does.
    piped = _step("fp8-current", global_batch_size=4, pp=2)
    assert piped.provenance["cached_weight_quantize_seconds"] == pytest.approx(cast, rel=1e-9)
    assert "cached_weight_quantize_seconds" not in _step("bf16", global_batch_size=1).provenance


A = (4096, 4096, 4096)  # 4096 x 4096 weight elements
B = (4096, 16384, 4096)  # 16384 x 4096


def test_each_list_takes_a_gemm_off_once():
    # Two instances of A, one kept in bf16 and (the same one) frozen, and B: one A and B are quantized (stored FP8
    # parameters, so the frozen A is left out; on the H100 a trained stored weight pays its transpose).
    r = _rates_of(H100, "fp8-delayed-param-gather")
    work = LayerWork(gemms=(A, A, B), high_precision_gemms=(A,), frozen_gemms=(A,),
                     frozen_matmul_flops=2.0 * 4096 * 4096 * 4096)
    expected = (4096 * 4096 + 16384 * 4096) * r.quant_weight_step / r.memory
    assert cached_weight_seconds(_cost(work), work, r) == pytest.approx(expected, rel=1e-12)


def test_a_module_s_own_format_prices_its_trained_weights_only():
    from hp_core.linear_modules import LinearModule

    r = _rates_of(B200, "nvfp4")
    mx = _rates_of(B200, "mxfp8")
    r = attrs.evolve(r, module_rates=(("mxfp8", {"quant_weight_step": mx.quant_weight_step,
                                                  "weights_stored_quantized": True}),))
    module = LinearModule("attention_proj", gemms=(A,), format="mxfp8", positions=(0,))
    work = LayerWork(gemms=(A, B), modules=(module,))
    expected = (16384 * 4096 * r.quant_weight_step + 4096 * 4096 * mx.quant_weight_step) / r.memory
    assert cached_weight_seconds(_cost(work), work, r) == pytest.approx(expected, rel=1e-12)
    # The module's format stores its weights quantized: its frozen A is left out.
    frozen = attrs.evolve(work, frozen_gemms=(A,), frozen_matmul_flops=2.0 * 4096 ** 3)
    assert cached_weight_seconds(_cost(frozen), frozen, r) == pytest.approx(16384 * 4096 * r.quant_weight_step / r.memory,
                                                                            rel=1e-12)
    # A format keeping its weights in bf16 quantizes the frozen A each step too.
    bf16_format = attrs.evolve(r, module_rates=(("mxfp8", {"quant_weight_step": mx.quant_weight_step}),))
    assert cached_weight_seconds(_cost(frozen), frozen, bf16_format) == pytest.approx(expected, rel=1e-12)


def test_the_recipe_s_gemm_scope_picks_linears_or_experts():
    r = _rates_of(B200, "mxfp8")
    work = LayerWork(gemms=(BIG,), grouped_flops=2.0 * 8 * 512 * 1024 * 2048, expert_gemms=(EXPERTS,))
    linears = cached_weight_seconds(_cost(work), work, attrs.evolve(r, gemm_scope="linears"))
    experts = cached_weight_seconds(_cost(work), work, attrs.evolve(r, gemm_scope="experts"))
    assert linears == pytest.approx(ELEMENTS * r.quant_weight_step / r.memory, rel=1e-12)
    assert experts == pytest.approx(8 * 1024 * 2048 * r.quant_weight_step / r.memory, rel=1e-12)


def test_under_zero_3_nothing_is_cached_every_micro_batch_quantizes():
    # Transformer Engine keeps no weight cache under FSDP (as the memory estimate holds no copies there).
    found = REGISTRY.precision_recipe("fp8-current")
    parallel = ParallelSpec(seq_len=4096, zero=3)
    r = _rates(parallel, H100, TIMING, PrecisionSpec(recipe="fp8-current"), "flash", found)
    cached = _rates_of(H100, "fp8-current")
    assert r.quant_weight_step == 0.0 and r.quant_weight == pytest.approx(cached.quant_weight_step)
    assert cached.quant_weight == 0.0
    stored = _rates(parallel, H100, TIMING, PrecisionSpec(recipe="fp8-delayed-param-gather"), "flash",
                    REGISTRY.precision_recipe("fp8-delayed-param-gather"))
    assert (stored.quant_weight, stored.quant_weight_step) == (2.0, 0.0)  # Hopper's transpose, every micro-batch


def test_model_copies_pay_one_model_and_an_unoverlapped_gradient_buffer_gather_casts_in_the_optimizer_step():
    one = _step("fp8-current", global_batch_size=8, pp=2)
    dual = _step("fp8-current", global_batch_size=8, pp=2, schedule="dualpipe")
    assert dual.provenance["cached_weight_quantize_seconds"] == pytest.approx(
        one.provenance["cached_weight_quantize_seconds"], rel=1e-9)

    def b200(overlap: bool):
        runtime = apply_options(REGISTRY.runtime("megatron"), {"overlap_param_gather": overlap})
        precision = attrs.evolve(runtime.precision, recipe="mxfp8-param-gather")
        parallel = ParallelSpec(seq_len=4096, micro_batch_size=1, global_batch_size=8, dp=8, zero=1)
        return step_time("llama3-8b", parallel, registry=REGISTRY, runtime=runtime, hardware="b200", precision=precision)

    overlapped, synchronous = b200(True), b200(False)
    cast = overlapped.provenance["cached_weight_quantize_seconds"]
    assert cast > 0 and "cached_weight_quantize_seconds" not in synchronous.provenance
    # Without the overlap the cast runs at the step's end, in the optimizer step (every stage at once).
    assert synchronous.optimizer_seconds == pytest.approx(overlapped.optimizer_seconds + cast, rel=1e-9)
