"""A layer a recipe keeps in the compute dtype (``LayerWork.quantized`` false) is priced at the compute dtype's rates.

``compute_dtype_rates`` resets every figure a recipe sets (``RECIPE_FIELDS``) to ``_Rates``' default: those must be the
rates made with no recipe at all, for every registered recipe on every device family that runs it, so a recipe field
added later and not listed fails here rather than leaking into a layer kept in bf16.
"""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import build_registry
from hp_core.engine.timing.rates import RECIPE_FIELDS, _Rates, _rates, compute_dtype_rates
from hp_core.errors import ConfigError
from hp_core.specs import ParallelSpec

REGISTRY = build_registry()
RUNTIME = REGISTRY.runtime("megatron")
# TP with sequence parallelism (the gather share), experts (the epilogue flags): every recipe figure can show.
LAYOUT = ParallelSpec(seq_len=128, tp=2, sp=True, ep=2, dp=2)


def _rates_under(recipe: str, hardware: str) -> _Rates:
    return _rates(LAYOUT, REGISTRY.hardware_preset(hardware).spec, RUNTIME.timing,
                  attrs.evolve(RUNTIME.precision, recipe=recipe), "flash", recipe=REGISTRY.precision_recipe(recipe))


@pytest.mark.parametrize("hardware", ["h100-sxm", "b200", "gb300", "b300"])
def test_the_compute_dtype_view_of_every_recipe_is_the_rates_without_one(hardware):
    plain = _rates_under("bf16", hardware)
    priced = 0
    for recipe in REGISTRY.precision_recipes:
        try:
            rates = _rates_under(recipe.name, hardware)
        except ConfigError:  # a recipe the device does not run (no measured speedup there)
            continue
        priced += 1
        assert compute_dtype_rates(rates) == plain, (hardware, recipe.name)
    assert priced >= 5  # bf16 and the device's FP8 recipes at least


def test_the_view_moves_the_recipe_fields_alone():
    rates = _rates_under("mxfp8", "b200")
    assert rates.low_precision and rates.gemm_speedup > 1 and rates.epilogue_activation
    view = compute_dtype_rates(rates)
    moved = {f.name for f in attrs.fields(_Rates) if getattr(view, f.name) != getattr(rates, f.name)}
    assert moved and moved <= set(RECIPE_FIELDS)
    assert set(RECIPE_FIELDS) <= {f.name for f in attrs.fields(_Rates)}
