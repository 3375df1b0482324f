"""Linear modules in a format of their own inside a low-precision run (``precision.module_formats``; docs/precision.md).

A module kept in ``bf16`` runs outside the quantization autocast (Megatron-Core's per-module ``quant_recipe``:
:mod:`hp_core.linear_modules`), so :func:`with_module_formats` prices it as a layer kept in the compute dtype prices
all its GEMMs (:func:`~hp_core.engine.precision.in_compute_dtype`), for that module only:

* time: its GEMMs join :attr:`LayerWork.high_precision_gemms <hp_core.costs.LayerWork.high_precision_gemms>` (the
  bf16 rate, no speedup, nothing quantized: :mod:`hp_core.engine.timing.gemm_seconds`) and leave
  :attr:`~hp_core.costs.LayerWork.original_input_gemms`; the calls of the layer's sequence-parallel all-gather that
  move its input or output gradient move them in the compute dtype (Transformer Engine gathers with the module's
  quantizer, none outside the autocast: ``module/layernorm_linear.py`` and ``module/linear.py``
  ``gather_along_first_dim(..., quantizer=...)`` at NVIDIA/TransformerEngine d0067d0);
* memory: its parameter families are ``high_precision`` (no quantized weight copy, no quantized parameter gather,
  no scaling state: Transformer Engine makes weight workspaces only under ``FP8GlobalStateManager.is_fp8_enabled()``,
  ``module/base.py`` ``get_weight_workspace``), and the kept tensors that are its input lose their ``gemm_input``
  mark: the linear saves its compute-dtype input (``module/linear.py`` ``_Linear.forward`` saves ``inputmat``
  unquantized where ``fp8`` is false).

A module in a quantized format other than the run recipe's (``mxfp8`` in an ``nvfp4`` run: Megatron-Bridge's
``te_quant.cfg`` runs every Mamba ``out_proj`` so) runs inside its own autocast with that recipe
(``_get_fp8_autocast_for_quant_params`` opens one per module with its ``TEQuantizationRecipe``): the registered recipe
of that name (:func:`with_module_recipes`, :attr:`PrecisionRecipe.module_recipes
<hp_core.precision_recipes.PrecisionRecipe.module_recipes>`) prices its GEMMs (that recipe's speedup and quantization
bytes: :mod:`hp_core.engine.timing.gemm_seconds`), its kept input (:func:`hp_core.engine.precision.apply_recipe`), its
cached weight copies (:func:`module_weight_copy_bytes`; its families leave the run recipe's count as ``high_precision``)
and its sequence-parallel gathers (that recipe's bytes an element where it gathers quantized).

A run without a low-precision recipe, and a layer already kept in the compute dtype, are left as they are (the module
config overrides no disabled autocast: ``TEQuantizationRecipe.override_nonquantized_autocast`` is false by default,
``megatron/core/extensions/transformer_engine.py`` at NVIDIA/Megatron-LM@d98e8a6).
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import attrs

from hp_core.costs import Collective, LayerCost, Rerun
from hp_core.linear_modules import LinearModule, joining_kept
from hp_core.errors import ConfigError
from hp_core.precision_recipes import PrecisionRecipe

__all__ = ["check_hardware_dtype", "check_module_formats", "check_recipes_on_device", "module_format_refusal",
           "module_recipes_by_term", "module_weight_copy_bytes", "modules_present", "with_module_formats",
           "with_module_recipes"]


def with_module_recipes(recipe: PrecisionRecipe, registry: Any, formats: tuple[tuple[str, str], ...]) -> PrecisionRecipe:
    """*recipe* with the registered recipes of the quantized module formats *formats* names besides its own
    (:attr:`PrecisionRecipe.module_recipes <hp_core.precision_recipes.PrecisionRecipe.module_recipes>`); *recipe*
    itself where there are none or it quantizes nothing (a module config overrides no disabled autocast).

    Raises:
        ConfigError: One line at ``$.precision.module_formats.<name>``: a run or module recipe this pricing does not
            cover: each must keep its inputs quantized, cache its weight copies, gather parameters in the compute
            dtype and run attention in bf16 (Transformer Engine's recipes as Megatron-Core runs them), and the
            module's scale no delayed amax history (``TEQuantizationRecipe.parse_from_config``: "Delayed scaling not
            in scope of te per-module quantization config", NVIDIA/Megatron-LM@d98e8a6).
    """
    wanted = [(name, fmt) for name, fmt in formats if fmt not in ("bf16", recipe.name)]
    if not wanted or not recipe.low_precision:
        return recipe
    found: dict[str, PrecisionRecipe] = {}
    for name, fmt in wanted:
        module = found.get(fmt) or registry.precision_recipe(fmt, f"$.precision.module_formats.{name}")
        for which in (recipe, module):
            if (which.saved_input != "quantized" or not which.cache_weights or which.param_gather != "none"
                    or which.attention_format != "bf16" or which.gemms != "all" or which.amax_history):
                raise ConfigError(f"$.precision.module_formats.{name}",
                                  f"module {name} in {fmt} inside a {recipe.name} run: recipe {which.name} is not one a "
                                  "module format is priced with (quantized saved inputs, cached weight copies, no "
                                  "quantized parameter gather, bf16 attention, every GEMM, no amax history)")
        found[fmt] = module
    return attrs.evolve(recipe, module_recipes=tuple(sorted(found.items())))


def _split_gathers(collectives: tuple[Collective, ...], forward: int, backward: int,
                   share: float = 1.0) -> tuple[Collective, ...]:
    """*collectives* with *forward* and *backward* calls of the GEMM-input all-gather moved to a copy the run's recipe
    leaves alone (``gemm_input`` false), its bytes times *share* (a module format's quantized bytes over the compute
    dtype's, 1: the compute dtype); none where the layer issues no such gather (no TP or no SP)."""
    found: list[Collective] = []
    for c in collectives:
        if (forward or backward) and c.gemm_input and c.group == "tp" and c.op == "all_gather":
            f, b = min(forward, c.forward_calls), min(backward, c.backward_calls)
            forward, backward = forward - f, backward - b
            rest = attrs.evolve(c, forward_calls=c.forward_calls - f, backward_calls=c.backward_calls - b)
            if rest.forward_calls or rest.backward_calls:
                found.append(rest)
            found.append(attrs.evolve(c, forward_calls=f, backward_calls=b, gemm_input=False, bytes=c.bytes * share))
        else:
            found.append(c)
    return tuple(found)


def with_module_formats(cost: LayerCost, formats: tuple[tuple[str, str], ...], recipe: PrecisionRecipe,
                        activation_bytes: int = 2) -> LayerCost:
    """*cost* with the modules *formats* gives a format other than *recipe*'s priced so (module docstring); the same
    object where it names none of the layer's modules or the layer is already kept in the compute dtype
    (``work.quantized`` false). *recipe* is the run's, as :func:`with_module_recipes` resolves it."""
    wanted = {name: fmt for name, fmt in formats if fmt != recipe.name}
    work = cost.work
    if not wanted or work is None or not work.quantized:
        return cost
    chosen = [m for m in work.modules if m.name in wanted]
    if not chosen:
        return cost
    others = dict(recipe.module_recipes)
    kept = [m for m in chosen if wanted[m.name] == "bf16"]
    params = {p for m in chosen for p in m.params}
    terms = {t for m in kept for t in m.terms}
    high, original = list(work.high_precision_gemms), list(work.original_input_gemms)
    # A module's GEMMs are its own linears' entries (LinearModule.gemms, recorded by linear, not matched by shape: two
    # linears may share one, an MTP head as wide as a qkv projection); each joins the high-precision list while the
    # layer lists an instance of it not already kept there (linear_modules.joining_kept, below).
    collectives, modules = work.collectives, []
    for module in work.modules:
        fmt = wanted.get(module.name)
        if fmt is None:
            modules.append(module)
            continue
        if fmt == "bf16":
            high += joining_kept(module.gemms, work.gemms, high)
            for gemm in module.original_input_gemms:  # its own compute-dtype inputs, no other linear's of their shape
                if gemm in original:
                    original.remove(gemm)
            collectives = _split_gathers(collectives, *module.gathers)
            modules.append(module)
            continue
        other = others.get(fmt)
        if other is None:
            raise ConfigError(f"$.precision.module_formats.{module.name}", f"module {module.name} in {fmt}: the run's "
                              f"recipe {recipe.name} was not resolved with it (hp_core.engine.precision.resolve_recipe)")
        share = other.activations.bytes_per_element / activation_bytes if other.tp_gather else 1.0
        collectives = _split_gathers(collectives, *module.gathers, share=share)
        modules.append(attrs.evolve(module, format=fmt))
    return attrs.evolve(
        cost,
        params=tuple(attrs.evolve(p, high_precision=True) if p.name in params and not p.high_precision else p
                     for p in cost.params),
        activations=tuple(attrs.evolve(t, gemm_input=None, original_input=False) if t.op in terms and t.gemm_input
                          else t for t in cost.activations),
        work=attrs.evolve(work, high_precision_gemms=tuple(high), original_input_gemms=tuple(original),
                          collectives=collectives, modules=tuple(modules), reruns=_kept_reruns(work.reruns, kept)),
    )


def _kept_reruns(reruns: tuple[tuple[str, Rerun], ...], kept: list[LinearModule]) -> tuple[tuple[str, Rerun], ...]:
    """*reruns* with the GEMMs of the *kept* modules (those a run keeps in bf16) kept in the compute dtype where they
    re-run them, their inputs no longer kept apart: by position (:attr:`Rerun.positions
    <hp_core.costs.Rerun.positions>`, :attr:`LinearModule.positions`), as the layer's lists take them above."""
    bf16 = {p for m in kept for p in m.positions}
    return tuple((switch, attrs.evolve(
        rerun, high_precision_positions=rerun.high_precision_positions + tuple(
            p for p in rerun.positions if p in bf16 and p not in rerun.high_precision_positions),
        original_input_positions=tuple(p for p in rerun.original_input_positions if p not in bf16)))
        for switch, rerun in reruns)


def module_recipes_by_term(cost: LayerCost, recipe: PrecisionRecipe) -> dict[str, PrecisionRecipe]:
    """The kept terms of *cost*'s modules in a quantized format of their own, each with that format's recipe."""
    if not recipe.module_recipes or cost.work is None:
        return {}
    others = dict(recipe.module_recipes)
    return {op: others[m.format] for m in cost.work.modules if m.format in others for op in m.terms}


def module_weight_copy_bytes(costs: Iterable[tuple[LayerCost, int]], recipe: PrecisionRecipe, zero: int) -> int:
    """Bytes of the cached weight copies one rank holds for the modules in a quantized format of their own, each
    family's matrices (``(layer cost, layers of it)`` pairs of a stage) in its format's copies and bytes an element,
    as :func:`hp_core.engine.precision.weight_copy_bytes` counts the run recipe's (none under ZeRO-3/FSDP)."""
    if not recipe.module_recipes or zero >= 3:
        return 0
    others, total = dict(recipe.module_recipes), 0.0
    for cost, n in costs:
        counted: set[str] = set()  # a family once, however many modules name it (a repeated MTP module's applications)
        for module in (cost.work.modules if cost.work is not None else ()):
            other = others.get(module.format)
            if other is not None:
                elements = sum(p.matrix_elements for p in cost.params if p.name in module.params and p.name not in counted)
                counted.update(module.params)
                total += n * elements * other.weight_copies * other.weights.bytes_per_element
    return math.ceil(total)


def modules_present(costs: Iterable[LayerCost]) -> frozenset[str]:
    """The module names the layers of *costs* mark (:attr:`LayerWork.modules <hp_core.costs.LayerWork.modules>`)."""
    return frozenset(m.name for cost in costs if cost.work is not None for m in cost.work.modules)


def check_module_formats(formats: tuple[tuple[str, str], ...], costs: Iterable[LayerCost]) -> None:
    """Refuse a module format naming a module no layer of the model marks: it would change nothing, silently.

    Raises:
        ConfigError: One line at ``$.precision.module_formats.<name>``, naming the modules the model has.
    """
    if not formats:
        return
    present = modules_present(costs)
    for name, _ in formats:
        if name not in present:
            raise ConfigError(f"$.precision.module_formats.{name}",
                              f"module {name} is in no layer of this model (its layers mark "
                              f"{sorted(present) or 'no named module'}); remove it or name a module the model has")


def module_format_refusal(fmt: str, exc: ConfigError) -> ConfigError:
    """A module format's own recipe refused on the device (its family, its peaks, its measured speedups), said at
    ``$.precision.module_formats`` with the format named: the run's recipe itself runs there."""
    return ConfigError("$.precision.module_formats", f"module format {fmt}: {exc.message}")


def check_hardware_dtype(recipe: PrecisionRecipe, peaks: dict, name: str) -> None:
    """Refuse a recipe whose GEMM dtype the device states no peak for (one line, ``$.precision.recipe``)."""
    if recipe.gemm_dtype not in peaks:
        raise ConfigError("$.precision.recipe",
                          f"precision recipe {recipe.name} runs its GEMMs in {recipe.gemm_dtype}, for which {name} states no peak "
                          f"FLOP/s (it has {sorted(peaks) or 'none'}); choose another recipe or a device that runs {recipe.gemm_dtype}")


def check_recipes_on_device(recipe: PrecisionRecipe, hardware: Any) -> None:
    """Refuse a device the run's recipe, or a module format's own recipe, does not run on: its family
    (:meth:`PrecisionRecipe.check_architecture`) or, where the device states peaks, none for its GEMMs (FP8 on an
    A100); a module format's refusal said at ``$.precision.module_formats`` (:func:`module_format_refusal`)."""
    for fmt, own in ((None, recipe), *recipe.module_recipes):
        try:
            own.check_architecture(hardware.architecture, hardware.name)
            if own.low_precision and hardware.peak_flops:
                check_hardware_dtype(own, hardware.peak_flops, hardware.name)
        except ConfigError as exc:
            raise exc if fmt is None else module_format_refusal(fmt, exc) from None
