"""Where FP8 attention cannot run, refused before anything is priced: the runtime's attention kernel runs none
(:attr:`Runtime.fp8_attention_refusal <hp_core.types.Runtime.fp8_attention_refusal>`), or the device family's kernel
runs none at a layer's head dims (cuDNN on Hopper: 128 and 128 only). docs/precision.md 'FP8 attention'."""

from __future__ import annotations

from typing import Any, Callable, Iterable

from hp_core.errors import ConfigError, RunRefusal
from hp_core.precision_recipes import PrecisionRecipe

__all__ = ["check_fp8_attention", "check_fp8_attention_device", "recipe_prices_on"]


def check_fp8_attention(recipe: PrecisionRecipe, runtime: Any) -> None:
    """Refuse a recipe running FP8 attention under a runtime whose attention kernel runs none
    (:attr:`Runtime.fp8_attention_refusal <hp_core.types.Runtime.fp8_attention_refusal>`: fsdp2's SDPA,
    FlexAttention and Triton kernels), one line at the path the runtime names; its memory and time would
    price a kernel the trainer does not run."""
    refusal = getattr(runtime, "fp8_attention_refusal", None)
    if recipe.attention_format != "bf16" and refusal is not None:
        path, why = refusal
        raise RunRefusal(path, f"precision recipe {recipe.name} runs attention in {recipe.attention_format}, but {why}")


# The only (query/key, value) head dims at which a device family's FP8 attention kernel runs, where it is bounded so
# (LayerWork.attention_head_dims). cuDNN on Hopper: 128 and 128. Sources: NVIDIA/cudnn-frontend
# benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn, dsv3_20260227_034744.csv (@3929da2: MLA, q/k 192,
# v 128) and gpt_oss_20260227_034819.csv (@afa9f7c: GQA, head dim 64): every FP8 row failed with
# cudnnGraphNotSupportedError "hidden_dim shoud be equal to 128"; its llama3.1 CSV's FP8 rows (head dim 128) ran
# (hp_plugins/hardware/data/cudnn_sdpa.json, docs/precision.md 'FP8 attention').
_FP8_ATTENTION_HEAD_DIMS = {"hopper": (128, 128)}
_FP8_ATTENTION_EVIDENCE = ("cudnn-frontend's H200 benchmarks: every FP8 row at DeepSeek-V3's MLA dims (q/k 192, v 128) "
                           "and GPT-OSS's head dim 64 failed, cudnnGraphNotSupportedError, head dim must be 128; "
                           "docs/precision.md 'FP8 attention'")


def recipe_prices_on(registry: Any, hardware: Any, timing: Any = None) -> Callable[[str], bool]:
    """Whether the recipe of a name prices on *hardware*: registered, run on its family
    (:meth:`PrecisionRecipe.check_architecture`) and, with a timing profile, priced by it there (a measured GEMM
    speedup its ``_recipe_rates`` takes, as the step time prices it)."""
    def prices(name: str) -> bool:
        # The step's own check, imported here: the timing package imports precision, which imports this module.
        from hp_core.engine.timing.rates import _recipe_rates

        try:
            recipe = registry.precision_recipe(name)
            recipe.check_architecture(hardware.architecture, hardware.name)
            if timing is not None:
                _recipe_rates(recipe, timing.device(hardware.architecture), timing, hardware, 2)
        except ConfigError:
            return False
        return True
    return prices


def check_fp8_attention_device(recipe: PrecisionRecipe | None, works: Iterable[Any], architecture: str | None,
                               device: str, prices: Callable[[str], bool] | None = None) -> None:
    """Refuse a recipe running FP8 attention on a device whose family runs no FP8 kernel for a core the model runs
    in FP8 (*works*: the layers' :class:`~hp_core.costs.LayerWork`; a layer kept in the compute dtype, ``quantized``
    false, runs its core in bf16): on Hopper, a core whose query/key or value head dim is not 128
    (:data:`_FP8_ATTENTION_HEAD_DIMS`: MLA, GQA at head dim 64), or whose layer states no head dims
    (``LayerWork.attention_head_dims`` ``None``: absent is not zero). One line at ``$.precision.recipe``; nothing
    without a device family. The line suggests the recipe without FP8 attention only where *prices* says it prices
    on the device (:func:`recipe_prices_on`: ``mxfp8`` has no measured Hopper GEMM speedup), else a Blackwell device
    alone."""
    if recipe is None or recipe.attention_format == "bf16" or architecture is None:
        return
    runs = _FP8_ATTENTION_HEAD_DIMS.get(architecture)
    if runs is None:
        return
    for work in works:
        if work is None or not work.attention_calls or not work.quantized:
            continue
        dims = work.attention_head_dims
        why = None
        if dims is None:
            why = (f"a layer states no attention head dims (LayerWork.attention_head_dims) and cuDNN runs FP8 attention "
                   f"on {architecture.capitalize()} only at q/k and v head dims {runs[0]} and {runs[1]} "
                   f"({_FP8_ATTENTION_EVIDENCE})")
        elif tuple(dims) != runs:
            why = (f"cuDNN runs FP8 attention on {architecture.capitalize()} only at q/k and v head dims {runs[0]} and "
                   f"{runs[1]}, and a layer's are {dims[0]} and {dims[1]} ({_FP8_ATTENTION_EVIDENCE})")
        if why is not None:
            plain = recipe.bf16_attention_recipe
            choose = (f"choose a recipe without FP8 attention ({plain}) or a Blackwell device"
                      if plain is not None and prices is not None and prices(plain) else "choose a Blackwell device")
            raise RunRefusal("$.precision.recipe", f"precision recipe {recipe.name} runs attention in {recipe.attention_format} "
                              f"on {device}, but {why}; {choose}")
