"""The consistency checks of a :class:`~hp_core.precision_recipes.PrecisionRecipe` record, run when it is made: what
one field means for another (a recipe quantizing nothing keeps no copies; FP8 attention follows the activations'
scaling; a pass named once), refused in one line naming the recipe and the field."""

from __future__ import annotations

from typing import Any

__all__ = ["GEMM_PASS_NAMES", "check_recipe"]

# A linear layer's three GEMMs: the forward (fprop), the input gradient (dgrad) and the weight gradient (wgrad).
GEMM_PASS_NAMES = ("fprop", "dgrad", "wgrad")
# FP8 attention (PrecisionRecipe.attention_format): the activations' scaling each format runs with. Transformer
# Engine's DotProductAttention quantizes q, k, v, its output and their gradients with quantizers of the recipe's
# kind (pytorch/attention/dot_product_attention/utils.py get_attention_quantizers at d0067d0): e4m3 per tensor
# under delayed or current scaling, MXFP8 under MXFP8BlockScaling.
_ATTENTION_FORMATS = {"tensor_delayed": "e4m3", "tensor_current": "e4m3", "mx_32": "mxfp8"}
_ATTENTION_SCALINGS = {"e4m3": "per-tensor FP8 scaling (tensor_delayed or tensor_current)", "mxfp8": "mxfp8/mx_32"}


def check_recipe(recipe: Any) -> None:
    """Refuse a record whose fields contradict each other (``ValueError``, one line naming the recipe)."""
    if recipe.bf16_attention_recipe is not None and recipe.attention_format == "bf16":
        raise ValueError(f"precision recipe {recipe.name}: runs attention in bf16 already, so it names no "
                         f"bf16_attention_recipe (got {recipe.bf16_attention_recipe!r})")
    if recipe.low_precision and recipe.quantize_passes < 1:  # a quantization reads its input at least once
        raise ValueError(f"precision recipe {recipe.name}: quantize_passes {recipe.quantize_passes}; a quantization reads "
                         "the compute-dtype tensor at least once (1, or 2 where an amax pass comes first)")
    operands = (recipe.weights, recipe.activations, recipe.gradients)
    if recipe.amax_history and not any(o.scaling == "tensor_delayed" for o in operands):
        raise ValueError(f"precision recipe {recipe.name}: amax_history {recipe.amax_history} is delayed scaling's; no "
                         "operand scales tensor_delayed, so state 0")
    if not recipe.low_precision and (recipe.weight_copies or recipe.param_gather != "none" or recipe.tp_gather
                                     or recipe.amax_history):
        raise ValueError(f"precision recipe {recipe.name}: quantizes no GEMM operand, so it keeps no weight copies, "
                         "gathers nothing in low precision and has no amax history")
    if recipe.attention_scaling is not None and (recipe.attention_format == "bf16" or recipe.activations.format != "nvfp4"):
        raise ValueError(f"precision recipe {recipe.name}: attention_scaling {recipe.attention_scaling!r} states the FP8 "
                         "attention's own scaling beside NVFP4 linears (Transformer Engine's NVTE_DPA_FP8_RECIPE); "
                         f"this recipe runs attention in {recipe.attention_format} beside "
                         f"{recipe.activations.format} activations: leave it unset")
    if recipe.attention_format != "bf16" and recipe.attention_format != _ATTENTION_FORMATS.get(recipe.attention_scaling_used):
        needs = _ATTENTION_SCALINGS.get(recipe.attention_format, "none: FP8 attention runs in e4m3 or mxfp8")
        raise ValueError(f"precision recipe {recipe.name}: attention_format {recipe.attention_format!r} needs activations of "
                         f"{needs} (Transformer Engine's attention quantizers follow the recipe's, or "
                         f"attention_scaling beside NVFP4 linears), not {recipe.activations.format}/{recipe.attention_scaling_used}")
    if recipe.split_accumulator and not recipe.low_precision:
        raise ValueError(f"precision recipe {recipe.name}: quantizes no GEMM operand, so no GEMM accumulates FP8 "
                         "partial sums (leave split_accumulator empty)")
    for field in ("split_accumulator", "rescaled_outputs", "compute_dtype_passes"):
        passes = getattr(recipe, field)
        if any(p not in GEMM_PASS_NAMES for p in passes) or len(set(passes)) != len(passes):
            raise ValueError(f"precision recipe {recipe.name}: {field} names GEMM passes of {GEMM_PASS_NAMES}, "
                             f"each once; got {passes!r}")
    if recipe.rescaled_outputs and not recipe.low_precision:
        raise ValueError(f"precision recipe {recipe.name}: quantizes no GEMM operand, so no GEMM output is rescaled "
                         "(leave rescaled_outputs empty)")
    if recipe.compute_dtype_passes and not recipe.low_precision:
        raise ValueError(f"precision recipe {recipe.name}: quantizes no GEMM operand, so every pass runs in the compute "
                         "dtype already (leave compute_dtype_passes empty)")
    if recipe.compute_dtype_passes and (recipe.compute_dtype_passes != ("wgrad",) or recipe.saved_input != "compute"
                                      or recipe.saved_input_under_tp not in (None, "compute")):
        raise ValueError(f"precision recipe {recipe.name}: compute_dtype_passes {recipe.compute_dtype_passes!r}: hp prices "
                         "a weight-gradient GEMM in the compute dtype beside a saved compute-dtype input only "
                         "(('wgrad',) with saved_input 'compute', also under TP, as torchao's rowwise_with_gw_hp)")
    if set(recipe.compute_dtype_passes) & (set(recipe.split_accumulator) | set(recipe.rescaled_outputs)):
        raise ValueError(f"precision recipe {recipe.name}: a pass in compute_dtype_passes runs no FP8 GEMM, so it is "
                         "neither split-accumulated nor rescaled")
    if recipe.gemms != "all" and (recipe.saved_input != "compute" or recipe.saved_input_under_tp not in (None, "compute")
                                or recipe.weight_copies or recipe.param_gather != "none" or recipe.tp_gather
                                or recipe.attention_format != "bf16"):
        raise ValueError(f"precision recipe {recipe.name}: gemms {recipe.gemms!r} is priced in time only, so it needs a "
                         "recipe that moves no memory (saved_input 'compute', no weight copies, param_gather 'none', "
                         "no tp_gather, bf16 attention)")
    dtypes = {o.peak_dtype for o in (recipe.weights, recipe.activations, recipe.gradients) if o.low_precision}
    if len(dtypes) > 1:
        raise ValueError(f"precision recipe {recipe.name}: its operands run at different peaks {sorted(dtypes)}")
