"""hp's quantization cost against Transformer Engine's own measurement of it (docs/precision.md, "Nor in the
quantization" and "Time"): the autocast and pre-quantized per-layer GEMM times of TE's GEMM tutorial on an H200 NVL and
on a B300 (docs/examples/gemm_profiling/gemm_profiling.rst, TransformerEngine@d0067d0, "Worked Example: 5B Model on
H200" and the B300 printouts of its "Quick Start" and "Autocast vs Pre-quantized" sections)."""

from __future__ import annotations

import pytest

from hp_core.engine.timing.rates import _recipe_rates
from hp_plugins.runtimes.timing_profiles import BLACKWELL_MEGATRON, HOPPER

# Per-layer totals printed by the tutorial (ms): autocast delayed and current scaling, pre-quantized current scaling.
AUTOCAST_DELAYED_MS, AUTOCAST_CURRENT_MS, PREQUANTIZED_CURRENT_MS = 18.978, 20.285, 16.785

# benchmark_gemm.py's model-config shapes for hidden 4096, intermediate 16384, 15,872 tokens: each timed call a
# te.Linear forward of (M, K, N), Dgrad as (M, N, K) and Wgrad as (K, M, N) of the Fprop shapes.
_M, _H, _I = 15872, 4096, 16384
FPROP = [(_M, _H, 3 * _H), (_M, _H, _H), (_M, _H, _I), (_M, _I, _H)]
CALLS = FPROP + [(m, n, k) for m, k, n in FPROP] + [(k, m, n) for m, k, n in FPROP]


def test_the_benchmarks_calls_quantize_inputs_and_weights():
    elements = sum(m * k + k * n for m, k, n in CALLS)  # each call's input (M x K) and its uncached weight (K x N)
    # By hand: Fprop and Wgrad inputs M(3H + I) each, Dgrad inputs and Wgrad weights M(5H + I) each, Fprop and Dgrad
    # weights 4H^2 + 2HI each: M(16H + 4I) + 8H^2 + 4HI.
    assert elements == _M * (16 * _H + 4 * _I) + 8 * _H * _H + 4 * _H * _I == 2_483_027_968


@pytest.mark.parametrize(("recipe", "measured_ms", "priced_ms"), [
    ("fp8-delayed", AUTOCAST_DELAYED_MS - PREQUANTIZED_CURRENT_MS, 2.434),
    ("fp8-current", AUTOCAST_CURRENT_MS - PREQUANTIZED_CURRENT_MS, 3.652),
])
def test_quantization_is_priced_near_what_te_measured(registry, recipe, measured_ms, priced_ms):
    h200 = registry.hardware_preset("h200").spec  # the H200 NVL's HBM3e is the SXM part's 4.8 TB/s
    rates = _recipe_rates(registry.precision_recipe(recipe), HOPPER, registry.runtime("megatron").timing, h200,
                          act_bytes=2)
    # TE writes both usages of input and weight (Hopper's FP8 GEMMs take only the TN layout): the bytes per element
    # of an input, which a weight quantized uncached moves too.
    assert rates["quant_input_fwd"] == {"fp8-delayed": 4, "fp8-current": 6}[recipe]
    elements = sum(m * k + k * n for m, k, n in CALLS)
    assert h200.memory_bandwidth_bytes_per_second == 4.8e12
    seconds = elements * rates["quant_input_fwd"] / (h200.memory_bandwidth_bytes_per_second * HOPPER.memory_bandwidth.value)
    assert seconds * 1e3 == pytest.approx(priced_ms, abs=5e-4)
    assert 0 < seconds * 1e3 / measured_ms - 1 < 0.12  # hp a little slower than TE measured, never faster


# The tutorial's B300 per-layer totals (ms), autocast and pre-quantized ("NVIDIA B300 SXM6 AC"): FP8 current scaling,
# MXFP8 and NVFP4 (TE's default NVFP4BlockScaling: random Hadamard transforms, stochastic rounding, 16x16 weight blocks).
B300_AUTOCAST_MS = {"fp8-current": 9.147, "mxfp8": 8.984, "nvfp4": 6.453}
B300_PREQUANTIZED_MS = {"fp8-current": 6.812, "mxfp8": 7.161, "nvfp4": 3.764}


@pytest.mark.parametrize(("recipe", "bytes_per_element", "priced_ms"), [
    ("fp8-current", 2 * 2 + 1, 2.405),  # two bf16 reads (amax, cast), one FP8 copy serving both usages on Blackwell
    ("mxfp8", 2 + 2 * (1 + 1 / 32), 1.954),  # one read, row-wise and column-wise copies, an E8M0 byte per 32
    ("nvfp4", 2 * 2 + 2 * (0.5 + 1 / 16), 2.465),  # two reads (tensor amax, cast), two copies, an E4M3 byte per 16
])
def test_blackwell_quantization_is_priced_near_what_te_measured_on_a_b300(registry, recipe, bytes_per_element, priced_ms):
    b300 = registry.hardware_preset("b300").spec
    rates = _recipe_rates(registry.precision_recipe(recipe), BLACKWELL_MEGATRON, registry.runtime("megatron").timing,
                          b300, act_bytes=2)
    assert rates["quant_input_fwd"] == bytes_per_element
    elements = sum(m * k + k * n for m, k, n in CALLS)
    assert b300.memory_bandwidth_bytes_per_second == 7.75e12 and BLACKWELL_MEGATRON.memory_bandwidth.value == 0.666
    seconds = elements * bytes_per_element / (7.75e12 * 0.666)
    assert seconds * 1e3 == pytest.approx(priced_ms, abs=5e-4)
    measured_ms = B300_AUTOCAST_MS[recipe] - B300_PREQUANTIZED_MS[recipe]  # 2.335, 1.823 and 2.689 ms
    # By hand: +3.0%, +7.2%, -8.3% (NVFP4 the one priced below TE's measurement: no recipe's cast is priced high).
    assert seconds * 1e3 / measured_ms - 1 == pytest.approx({"fp8-current": 0.030, "mxfp8": 0.072, "nvfp4": -0.083}[recipe],
                                                          abs=5e-4)
