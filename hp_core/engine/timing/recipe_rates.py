"""What a low-precision recipe changes in the per-call rates (docs/precision.md): its GEMM speedups and the bytes its
quantization moves (:func:`_recipe_rates`), and those of the modules a run gives a quantized format of their own."""

from __future__ import annotations

from typing import Any

from hp_core.engine.module_formats import module_format_refusal
from hp_core.errors import ConfigError
from hp_core.precision_recipes import GEMM_PASS_NAMES, PrecisionRecipe
from hp_core.specs import HardwareSpec
from hp_core.specs.timing import DeviceEfficiency, TimingProfile

__all__: list[str] = []


def _recipe_rates(recipe: PrecisionRecipe | None, dev: DeviceEfficiency, timing: TimingProfile, hardware: HardwareSpec,
                  act_bytes: int, tp_sp: bool = False, zero: int | None = None) -> dict[str, Any]:
    """What a low-precision recipe changes in the rates (docs/precision.md), ``{}`` for none.

    GEMMs: the bf16 time divided by the device's measured speedup of the
    recipe's kernel (:attr:`DeviceEfficiency.gemm_speedups`), per pass: the
    backward's input- and weight-gradient GEMMs (each half its FLOPs) at the
    split-accumulator figure where the recipe runs them so and the device
    states one (:meth:`DeviceEfficiency.pass_speedups`); where only a figure
    with the quantization in its timed region is stated (``<kernel>:autocast``),
    that one, and no quantization is priced apart. Otherwise quantizing an
    element reads it ``quantize_passes`` times in the compute dtype and
    writes its row-wise and column-wise copies (TE quantizes both usages at
    once; one tensor where it serves both, :meth:`PrecisionRecipe.usages`; a read per usage where each is its
    own cast kernel, :attr:`PrecisionRecipe.cast_per_usage`); a recipe that saves the compute-dtype input (torchao) writes one
    copy in forward and reads and casts the saved input again in backward, unless under TP > 1 with SP
    (*tp_sp*) it keeps the float8 input (``saved_input_under_tp`` ``quantized``: torchao's float8 TP plan casts
    each TP linear layer's input in its ``_prepare_input_fn`` and ``matmul_with_hp_or_float8_args`` uses the
    saved float8 input in backward as is): one copy in forward, none in backward.

    Raises:
        ConfigError: The recipe does not run on the device's family
            (:meth:`PrecisionRecipe.check_architecture`), the device has no
            peak for the recipe's dtype, the profile no measured speedup for
            its kernel, or the device's peak ratio (the recipe's dtype over
            bf16) lies outside the one the speedup was measured at
            (:attr:`DeviceEfficiency.banded_gemm_speedups`).
    """
    if recipe is None or not recipe.low_precision:
        return {}
    recipe.check_architecture(hardware.architecture, hardware.name)
    if recipe.gemm_dtype not in hardware.peak_flops:
        raise ConfigError("$.precision.recipe",
                          f"precision recipe {recipe.name} runs its GEMMs in {recipe.gemm_dtype}, for which {hardware.name} states "
                          f"no peak FLOP/s (it has {sorted(hardware.peak_flops)}); choose a recipe the device runs")
    # A speedup over bf16 is a ratio of two rates: a banded figure carries only to a device whose peaks stand in the
    # ratio it was measured at (DeviceEfficiency.banded_gemm_speedups).
    ratio = hardware.peak_flops[recipe.gemm_dtype] / hardware.peak_flops["bf16"] if "bf16" in hardware.peak_flops else None
    passes, quantized_in_figure = dev.pass_speedups(recipe.kernel, recipe.split_accumulator, ratio), False
    if passes is None:  # only measured with the quantization in its timed region: none priced apart
        autocast, quantized_in_figure = dev.autocast_speedup(recipe.kernel), True
        passes = None if autocast is None else (autocast,) * 3
    bands = dev.speedup_bands(recipe.kernel)
    if passes is None and bands:
        # Four significant figures, and the device's two peaks: a ratio just outside a band reads apart from it.
        measured = ", ".join(f"{low:#.4g}-{high:#.4g}" if high > low else f"{low:#.4g}" for low, high in bands)
        peaks = hardware.peak_flops
        shown = "no bf16 peak" if ratio is None else (
            f"{peaks[recipe.gemm_dtype] / 1e12:.12g} / {peaks['bf16'] / 1e12:.12g} TFLOP/s, {ratio:#.4g} times")
        raise ConfigError("$.precision.recipe",
                          f"precision recipe {recipe.name}'s {recipe.kernel} GEMM speedup was measured where the "
                          f"{recipe.gemm_dtype} dense peak is {measured} times the bf16 one; {hardware.name} states "
                          f"{shown}, so none carries there (docs/precision.md)")
    if passes is None:
        raise ConfigError("$.precision.recipe",
                          f"timing profile {timing.name} states no measured {recipe.kernel} GEMM speedup for {dev.architecture} "
                          f"devices, so recipe {recipe.name} cannot be priced there (docs/precision.md lists the measured ones)")
    # FP8 attention (recipe.attention_format): the attention core at the device's measured FP8 attention speedups
    # (_attention_speedups), its quantization of q, k, v, the output and its gradient not priced (docs/precision.md
    # 'FP8 attention').
    read = recipe.quantize_passes * act_bytes
    act, grad, weight = (o.bytes_per_element for o in (recipe.activations, recipe.gradients, recipe.weights))
    usages = recipe.usages(hardware.architecture)  # tensors one quantization writes (PrecisionRecipe.usages)
    # Reads of the compute-dtype tensor by a quantization writing both usages: once, or once per usage where each usage
    # is its own cast kernel (PrecisionRecipe.cast_per_usage: torchao MX's dim0 and dim1 casts).
    reads = usages * read if recipe.cast_per_usage else read
    if recipe.saved_input == "quantized":
        fwd, bwd, weights = reads + usages * act, 0.0, reads + usages * weight
    elif recipe.saved_input_as(tp_sp) == "quantized":  # torchao under its float8 TP plan (docstring)
        fwd, bwd, weights = read + act, 0.0, 2 * (read + weight)
    else:
        fwd, bwd, weights = read + act, read + act, 2 * (read + weight)
    grads = reads + usages * grad
    if "wgrad" in recipe.compute_dtype_passes:
        # The weight gradient in the compute dtype (torchao rowwise_with_gw_hp: PrecisionRecipe.compute_dtype_passes):
        # the saved input is not cast again in backward, and the output gradient is cast for the input gradient alone.
        bwd, grads = 0.0, read + grad
    # A linear layer set to keep its compute-dtype input (LayerWork.original_input_gemms) under a recipe that lets it
    # (PrecisionRecipe.requantizes_original_input): Transformer Engine pytorch/module/linear.py at d0067d0 quantizes the
    # input row-wise only in forward (lines 425-436: no column-wise usage under save_original_input) and quantizes the
    # saved input again in backward (lines 962-973): column-wise only, or row-wise and column-wise for per-tensor
    # scaling (Float8CurrentScalingQuantizer.supports_only_rowwise_all_gather, tensor/float8_tensor.py line 396: its
    # usages, PrecisionRecipe.usages). Elsewhere as the recipe's other inputs.
    if recipe.saved_input == "quantized" and recipe.requantizes_original_input:
        per_tensor = recipe.activations.scaling == "tensor_current"
        original_fwd, original_bwd = read + act, read + (usages if per_tensor else 1) * act
    else:
        original_fwd, original_bwd = fwd, bwd
    # Cached copies are quantized once a step (stage_weights): as per micro-batch where the parameters are kept in the
    # compute dtype or gathered through the gradient buffer (Megatron-Core casts each gathered weight into its MXFP8
    # tensor, both usages: param_and_grad_buffer.py _post_param_sync); parameters stored in the weights' format have
    # their row-wise copy already and write the others from it, reading it (a per-tensor FP8 transpose on Hopper,
    # Float8Tensor's cached _transpose; none where one copy serves both usages, PrecisionRecipe.usages).
    # Under ZeRO-3/FSDP Transformer Engine keeps no cache (module/linear.py: no cache name under FSDP2; memory as
    # hp_core.engine.precision.weight_copy_bytes): the same bytes every micro-batch, half forward and half backward.
    stored = recipe.param_gather == "stored"
    uncached = not recipe.cache_weights or (zero is not None and zero >= 3)
    step_weights = (usages - 1) * 2 * weight if stored else weights  # one quantization of a cached weight
    per_micro_batch = (weights if not recipe.cache_weights else step_weights) if uncached else 0.0
    step_weights = 0.0 if uncached else step_weights
    if quantized_in_figure:
        fwd = bwd = weights = grads = original_fwd = original_bwd = step_weights = per_micro_batch = 0.0
    # A pass the trainer runs in the compute dtype (PrecisionRecipe.compute_dtype_passes) at its bf16 time.
    passes = tuple(1.0 if name in recipe.compute_dtype_passes else x for name, x in zip(GEMM_PASS_NAMES, passes))
    figures: dict[str, Any] = dict(
        low_precision=True, gemm_speedup=passes[0], gemm_speedup_backward=2 / (1 / passes[1] + 1 / passes[2]),
        gemm_pass_speedups=passes,
        quant_input_fwd=fwd, quant_input_bwd=bwd, quant_grad=grads,
        quant_original_fwd=original_fwd, quant_original_bwd=original_bwd,
        # A rescaled output (PrecisionRecipe.rescaled_outputs) is read and written once in the compute dtype (none
        # apart where the figure timed the whole linear).
        rescale=tuple(2.0 * act_bytes * (name in recipe.rescaled_outputs and not quantized_in_figure)
                      for name in GEMM_PASS_NAMES),
        quant_weight=per_micro_batch, quant_weight_step=step_weights,
        weights_stored_quantized=recipe.stores_weights,
        gather_share=act / act_bytes if recipe.tp_gather else 1.0, gemm_scope=recipe.gemms,
    )
    curves = () if quantized_in_figure else tuple(
        None if name in recipe.compute_dtype_passes else curve
        for name, curve in zip(GEMM_PASS_NAMES, dev.pass_curves(recipe.kernel, recipe.split_accumulator)))
    if any(curves):  # the passes' speedups by GEMM size (hp_core.engine.timing.speedup_shapes)
        figures["gemm_speedup_curves"] = curves
    if recipe.module_recipes:
        # The modules a run gives a quantized format of their own: each format's figures as its own recipe states
        # them on this device (hp_core.engine.timing.gemm_seconds prices those modules' GEMMs with them).
        rates = []
        for fmt, alt in recipe.module_recipes:
            try:
                rates.append((fmt, _recipe_rates(alt, dev, timing, hardware, act_bytes, tp_sp, zero)))
            except ConfigError as exc:  # said at the module format, not at the run's recipe, which runs there
                raise module_format_refusal(fmt, exc) from None
        figures["module_rates"] = tuple(rates)
    return figures
