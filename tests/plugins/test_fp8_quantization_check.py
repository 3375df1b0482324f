"""hp's quantization cost against Transformer Engine's own measurement of it (docs/precision.md, "Nor in the
quantization"): the autocast and pre-quantized per-layer GEMM times of TE's GEMM tutorial on an H200 NVL
(docs/examples/gemm_profiling/gemm_profiling.rst, TransformerEngine@d0067d0, "Worked Example: 5B Model on H200")."""

from __future__ import annotations

import pytest

from hp_core.engine.timing.rates import _recipe_rates
from hp_plugins.runtimes.timing_profiles import HOPPER

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
