"""An FP8-attention recipe names its bf16-attention twin (PrecisionRecipe.bf16_attention_recipe): the registry checks
the name, and the refusal of FP8 attention on a device suggests that recipe."""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import build_registry
from hp_core.markers import hookimpl
from hp_core.precision_recipes import GemmOperand, PrecisionRecipe

# A toy FP8 recipe in the compute dtype's attention, and its registry plugin (tests/core/test_precision_recipes.py's
# shape, restated so that this file stands alone).
FP8 = GemmOperand("e4m3", "tensor_current")
TOY_FP8 = PrecisionRecipe(name="toy-fp8", description="toy", source="a hand-worked test", weights=FP8, activations=FP8,
                          gradients=GemmOperand("e5m2", "tensor_current"))


class _ToyPlugin:
    @hookimpl
    def hp_precision_recipes(self):
        yield TOY_FP8


@pytest.fixture(scope="module")
def registry():
    return build_registry(use_env=False)


def test_the_refusal_suggests_the_recipe_the_fp8_attention_one_names(registry):
    # The suggestion comes from PrecisionRecipe.bf16_attention_recipe, not from the recipe's name: a recipe named
    # anything names its plain twin; one naming none is told to change device only. The built-in FP8-attention
    # recipes name their bases.
    from hp_core.costs import LayerWork
    from hp_core.engine.fp8_attention_checks import check_fp8_attention_device
    from hp_core.errors import RunRefusal

    assert {r.name: r.bf16_attention_recipe for r in registry.precision_recipes if r.attention_format != "bf16"} == {
        "fp8-delayed-fp8-attention": "fp8-delayed", "fp8-current-fp8-attention": "fp8-current",
        "mxfp8-fp8-attention": "mxfp8", "fp8-delayed-param-gather-fp8-attention": "fp8-delayed-param-gather",
            "mxfp8-param-gather-fp8-attention": "mxfp8-param-gather", "nvfp4-fp8-attention": "nvfp4",
        "fp8-megatron-param-gather-fp8-attention": "fp8-megatron-param-gather"}
    base = registry.precision_recipe("fp8-current-fp8-attention")
    works = [LayerWork(attention_calls=1, attention_head_dims=(64, 64))]
    named = attrs.evolve(base, name="site-fp8-dpa", bf16_attention_recipe="fp8-current")
    for recipe, choose in ((named, "choose a recipe without FP8 attention (fp8-current) or a Blackwell device"),
                           (attrs.evolve(base, bf16_attention_recipe=None), "choose a Blackwell device")):
        with pytest.raises(RunRefusal) as refused:
            check_fp8_attention_device(recipe, works, "hopper", "NVIDIA H100 SXM 80GB", prices=lambda name: True)
        assert str(refused.value).endswith(choose), str(refused.value)
    with pytest.raises(ValueError, match="runs attention in bf16 already"):
        attrs.evolve(registry.precision_recipe("fp8-current"), bf16_attention_recipe="fp8-delayed")


@pytest.mark.parametrize("plain, registered", [("toy-fp8", True), ("no-such-recipe", False), ("toy-fp8-dpa", False)])
def test_an_fp8_attention_recipe_names_a_registered_bf16_attention_twin(plain, registered):
    # The registry checks the name an FP8-attention recipe gives for its bf16-attention twin (what a refusal
    # suggests): it must be registered and run attention in bf16 (itself does not).
    from hp_core.errors import PluginError

    twin = attrs.evolve(TOY_FP8, name="toy-fp8-dpa",
                        attention_format="e4m3", bf16_attention_recipe=plain)

    class Twin:
        @hookimpl
        def hp_precision_recipes(self):
            yield twin

    if registered:
        assert build_registry([_ToyPlugin(), Twin()], use_env=False).precision_recipe("toy-fp8-dpa").bf16_attention_recipe == "toy-fp8"
    else:
        with pytest.raises(PluginError, match=f"bf16_attention_recipe {plain!r} is not a registered precision recipe"):
            build_registry([_ToyPlugin(), Twin()], use_env=False)
