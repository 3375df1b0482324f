"""What a low-precision recipe changes in a layer's memory (docs/precision.md).

:func:`apply_recipe` rewrites the activation terms a layer marks as linear
layers' inputs (:attr:`ActivationTerm.gemm_input
<hp_core.costs.ActivationTerm.gemm_input>`) and nothing else: an ``owned``
term becomes the recipe's quantized copy of it, a ``shared`` term keeps its
compute-dtype bytes and gains the quantized copy (Transformer Engine
``module/linear.py``: the linear layer saves its quantized input for the
weight gradient, one usage). A recipe that saves the compute-dtype input
(torchao) or quantizes nothing returns the cost unchanged, the same object,
except under TP > 1 with SP for the sequence-parallel-gathered inputs
(:attr:`ActivationTerm.sp_gathered <hp_core.costs.ActivationTerm.sp_gathered>`)
where the recipe's ``saved_input_under_tp`` says ``quantized`` (torchao under
torchtitan's float8 TP plan).

:func:`quantized_weight_elements` counts the GEMM weights of a layer the recipe quantizes on one rank (its
matrices less the embedding, the head and families marked ``high_precision``): the elements of the low-precision
weight copies a stage holds (:func:`weight_copy_bytes`) and of the parameters gathered in the recipe's format.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Iterable

import attrs

from hp_core.costs import ActivationTerm, LayerCost, ParamCount
from hp_core.engine.module_formats import (check_hardware_dtype, check_recipes_on_device, module_recipes_by_term,
                                          with_module_formats, with_module_recipes)
from hp_core.engine.fp8_attention_checks import check_fp8_attention, check_fp8_attention_device, recipe_prices_on
from hp_core.errors import ConfigError, RunRefusal
from hp_core.precision_recipes import PrecisionRecipe
from hp_core.registry import Registry
from hp_core.specs.model import ModelSpec
from hp_core.specs.precision import PrecisionSpec

__all__ = [
    "apply_recipe", "check_fp8_attention", "compute_dtype_groups", "compute_dtype_kinds", "check_fp8_attention_device", "recipe_prices_on", "check_high_precision_layers", "in_compute_dtype", "kept_layer_counts", "recipe_changes_costs", "recipe_cost", "split_high_precision_layers", "apply_recipe_measured", "check_hardware_dtype", "scaling_state_bytes", "with_recipe", "gathered_param_bytes", "optimizer_gather_bytes", "check_recipe_zero", "quantized_weight_elements", "resolve_recipe",
    "on_device", "weight_copy_bytes",
]


def resolve_recipe(registry: Registry, precision: PrecisionSpec) -> PrecisionRecipe:
    """The recipe *precision* names, from *registry*.

    Raises:
        ConfigError: The registry has no recipe of that name (``$.precision.recipe``, known names listed),
            or the precision states 1-byte activations, which would keep every tensor (attention,
            norms, softmax) and run every op in FP8: a recipe says what runs in low precision; or a module
            format it cannot run (:func:`~hp_core.engine.module_formats.with_module_recipes`).

    The recipe carries the recipes of the modules the precision gives a quantized format of their own
    (:attr:`PrecisionRecipe.module_recipes <hp_core.precision_recipes.PrecisionRecipe.module_recipes>`).
    """
    if precision.activation_bytes == 1:
        raise ConfigError("$.precision.activation_bytes", "1-byte activations would run every op and keep every tensor in FP8; "
                          "name a low-precision recipe instead (precision.recipe, --precision; docs/precision.md)")
    recipe = registry.precision_recipe(precision.recipe, "$.precision.recipe")
    return with_module_recipes(recipe, registry, precision.module_formats)


def _term(term: ActivationTerm, recipe: PrecisionRecipe, activation_bytes: int, gathered_under_tp: bool) -> ActivationTerm:
    if recipe.saved_input_as(gathered_under_tp) != "quantized":
        return term
    if term.original_input and recipe.requantizes_original_input:
        # The linear layer keeps the compute-dtype tensor itself and no quantized copy (ActivationTerm.original_input).
        return term
    quantized = math.ceil(recipe.saved_input_bytes(term.bytes / activation_bytes, gathered_under_tp))
    kept = quantized if term.gemm_input == "owned" else term.bytes + quantized
    return attrs.evolve(term, bytes=kept)


def _kept(term: ActivationTerm, recipe: PrecisionRecipe, activation_bytes: int, tp_sp: bool) -> ActivationTerm:
    """*term* as *recipe* keeps it: a linear layer's input (:func:`_term`), else as it is."""
    return _term(term, recipe, activation_bytes, tp_sp and term.sp_gathered) if term.gemm_input else term


def _attention_term(term: ActivationTerm, recipe: PrecisionRecipe, activation_bytes: int, tp_sp: bool,
                    work: Any = None) -> ActivationTerm:
    """A tensor a fused attention kernel keeps, as an FP8-attention recipe keeps it (:func:`apply_recipe`).

    q, k and v (``qkv``): the kernel's quantized copies, new tensors (Transformer Engine ``combine_and_quantize``),
    so a recompute switch that drops the compute-dtype tensor drops nothing of them: kept unless the layer is
    recomputed fully (MLA's ``attUp``: Megatron-Core's ``CheckpointWithoutOutput`` frees the storage of the up
    projections' outputs after the core, not the kernel's copies; ``multi_latent_attention.py`` at
    NVIDIA/Megatron-LM ``core_v0.16.0`` lines 344-347 and 838-843, ``tensor_parallel/random.py``
    ``discard_output_and_register_recompute``), yet that switch's recompute still re-runs the GEMMs that made the
    compute-dtype tensor: the moved term names the switch and the bytes it regenerates (``rerun_switch``,
    ``rerun_bytes``), a cost without a saving, only where the layer (*work*, its :class:`~hp_core.costs.LayerWork`)
    states what that switch's recompute re-runs (:meth:`LayerWork.rerun <hp_core.costs.LayerWork.rerun>`: MLA's
    ``attUp``); a switch stating none (the qk-norm's ``normOp`` over ``q_k``) rebuilds nothing the kernel reads and
    is charged nothing for the moved term. A ``qkv_view`` tensor, kept whole in bf16 only as the base of the kernel's input view,
    is freed, and the kernel's quantized copy of the view (``attention_view_bytes``) kept as a ``qkv`` one.
    """
    if term.attention_saved in ("qkv", "qkv_view"):
        kernel = term.bytes if term.attention_saved == "qkv" else term.attention_view_bytes
        quantized = math.ceil(kernel / activation_bytes * recipe.attention_qkv_bytes_per_element(activation_bytes))
        # The switch's recompute still re-runs what made the compute-dtype tensor (it saves none of the kernel's
        # copies): the term keeps the bytes it regenerates, for the recompute's time (ActivationTerm.rerun_bytes).
        stated = term.switch is not None and work is not None and work.rerun(term.switch) is not None
        rerun = (term.switch, term.bytes) if stated else (term.rerun_switch, term.rerun_bytes)
        return attrs.evolve(term, bytes=quantized, switch=None, attention_saved="qkv", attention_view_bytes=0,
                            rerun_switch=rerun[0], rerun_bytes=rerun[1])
    elements = term.bytes / activation_bytes
    if not recipe.attention_out_fp8:  # the kernel keeps its compute-dtype output: as any recipe keeps it
        return _kept(term, recipe, activation_bytes, tp_sp)
    # The kernel keeps its FP8 output (1 byte an element), the output projection its own quantized input.
    linear = recipe.saved_input_bytes(elements, tp_sp and term.sp_gathered) if term.gemm_input else 0.0
    return attrs.evolve(term, bytes=math.ceil(elements) + math.ceil(linear))


def _fp8_attention(cost: LayerCost, recipe: PrecisionRecipe, activation_bytes: int, tp_sp: bool) -> tuple[ActivationTerm, ...]:
    """*cost*'s kept tensors with its attention kernel's and its linear layers' inputs as an FP8-attention recipe keeps them.

    Raises:
        ConfigError: The layer runs an attention core but marks no tensor a fused kernel keeps
            (eager attention, or a layer kind that does not state them): FP8 attention is not priced there.
    """
    if cost.forward.attention_flops and not any(t.attention_saved == "qkv" for t in cost.activations):
        raise RunRefusal("$.precision.recipe", f"precision recipe {recipe.name} runs attention in {recipe.attention_format}: "
                          "needs the fused (flash) attention kernel and a layer kind that marks the q, k, v its kernel keeps "
                          "(ActivationTerm.attention_saved; docs/precision.md 'FP8 attention')")
    return tuple(_attention_term(t, recipe, activation_bytes, tp_sp, cost.work) if t.attention_saved
                 else _kept(t, recipe, activation_bytes, tp_sp) for t in cost.activations)


def apply_recipe(cost: LayerCost, recipe: PrecisionRecipe, activation_bytes: int, tp_sp: bool = False) -> LayerCost:
    """*cost* with its linear layers' kept inputs as *recipe* keeps them (module docstring).

    *tp_sp*: the layer runs under TP > 1 with sequence parallelism, so its
    ``sp_gathered`` terms are kept as the recipe's ``saved_input_under_tp`` says.

    A recipe that quantizes its weights per micro-batch instead of caching them (TE called
    without ``is_first_microbatch``) also keeps each layer's quantized weights for its
    input-gradient GEMM, one copy per micro-batch in flight: a term ``quantized_weights``.

    A recipe running FP8 attention (:attr:`PrecisionRecipe.attention_format`) also keeps the
    tensors a fused attention kernel keeps (``ActivationTerm.attention_saved``) as
    Transformer Engine's ``FusedAttnFunc`` saves them: q, k and v quantized
    (:meth:`PrecisionRecipe.attention_qkv_bytes_per_element`), under no recompute switch, a tensor
    kept only as the base of the kernel's input view (``qkv_view``) as that view's quantized copy;
    the output in FP8 under delayed scaling (:attr:`PrecisionRecipe.attention_out_fp8`) and in the
    compute dtype otherwise; the softmax statistics (fp32) as in bf16 (:func:`_attention_term`).
    """
    if recipe.attention_format != "bf16":  # a layer kept in the compute dtype (in_compute_dtype) holds no attention state
        terms = _fp8_attention(cost, recipe, activation_bytes, tp_sp)
    elif not recipe.low_precision or "quantized" not in (recipe.saved_input, recipe.saved_input_as(tp_sp)):
        return cost
    else:  # a module in a quantized format of its own keeps its input in that format (module_recipes_by_term)
        own = module_recipes_by_term(cost, recipe)
        terms = tuple(_kept(t, own.get(t.op, recipe), activation_bytes, tp_sp) for t in cost.activations)
    if not recipe.cache_weights and recipe.weight_copies:
        weights = quantized_weight_elements([(cost, 1)])
        if weights:
            terms += (ActivationTerm("quantized_weights", math.ceil(weights * recipe.weights.bytes_per_element)),)
    gradient = _weight_gradient(cost, recipe, activation_bytes)
    if terms == cost.activations and gradient == cost.weight_gradient_bytes:
        return cost
    inputs = cost.weight_gradient_quantized if gradient == cost.weight_gradient_bytes else None  # restated once
    return attrs.evolve(cost, activations=terms, weight_gradient_bytes=gradient, weight_gradient_quantized=inputs)


def _weight_gradient(cost: LayerCost, recipe: PrecisionRecipe, activation_bytes: int) -> int | None:
    """W's bytes under *recipe* (:attr:`LayerCost.weight_gradient_quantized <hp_core.costs.LayerCost.weight_gradient_quantized>`)
    where it keeps linear inputs quantized, as Transformer Engine's deferred weight gradient holds them
    (``pytorch/module/linear.py`` backward: ``wgrad_store.put([inputmat_total, grad_output], ...)``): each quantized
    linear's input at its input format's width (the column-wise copy), its output gradient at its gradient format's
    width in both usages (the row-wise copy its input-gradient GEMM read and the column-wise one W reads:
    ``update_usage(columnwise_usage=True)`` keeps the first; docs/schedules.md)."""
    if cost.weight_gradient_quantized is None or cost.weight_gradient_bytes is None or not recipe.low_precision or recipe.saved_input != "quantized":
        return cost.weight_gradient_bytes
    compute_bytes, elements, gradients = cost.weight_gradient_quantized
    restated = cost.weight_gradient_bytes - compute_bytes + math.ceil(recipe.saved_input_bytes(elements))
    if recipe.gradients.low_precision:
        restated += math.ceil(2 * gradients * recipe.gradients.bytes_per_element) - gradients * activation_bytes
    return restated


def with_recipe(costs: tuple[LayerCost, ...], registry: Registry, precision: PrecisionSpec,
                formula: tuple[LayerCost, ...] | None = None, tp_sp: bool = False) -> tuple[LayerCost, ...]:
    """*costs* as the recipe *precision* names keeps them: :func:`apply_recipe` of each, or, where a
    census measured a cost (it is not its *formula* cost), :func:`apply_recipe_measured`; *tp_sp*: the
    layers run under TP > 1 with sequence parallelism."""
    recipe = resolve_recipe(registry, precision)
    formula = formula if formula is not None else costs
    return tuple(recipe_cost(cost, by_formula, recipe, precision.activation_bytes, tp_sp, precision.module_formats)
                 for cost, by_formula in zip(costs, formula))


def recipe_cost(cost: LayerCost, formula: LayerCost, recipe: PrecisionRecipe, activation_bytes: int,
                tp_sp: bool = False, module_formats: tuple[tuple[str, str], ...] = ()) -> LayerCost:
    """One cost of :func:`with_recipe`: :func:`apply_recipe` of *cost* where it is its *formula* cost (the same
    object), else (a census measured it) :func:`apply_recipe_measured`. *cost* itself where the recipe changes
    nothing in it. Under a low-precision recipe the modules *module_formats* gives a format of their own are priced
    so first, in both costs (:func:`~hp_core.engine.module_formats.with_module_formats`)."""
    if module_formats and recipe.low_precision:
        same = cost is formula
        formula = with_module_formats(formula, module_formats, recipe, activation_bytes)
        cost = formula if same else with_module_formats(cost, module_formats, recipe, activation_bytes)
    if cost is formula:
        return apply_recipe(cost, recipe, activation_bytes, tp_sp)
    return apply_recipe_measured(cost, formula, recipe, activation_bytes, tp_sp)


def recipe_changes_costs(recipe: PrecisionRecipe) -> bool:
    """Whether :func:`apply_recipe` can change a cost under *recipe*: it quantizes something or runs FP8
    attention (it returns every cost unchanged otherwise)."""
    return recipe.low_precision or recipe.attention_format != "bf16"


def apply_recipe_measured(measured: LayerCost, formula: LayerCost, recipe: PrecisionRecipe, activation_bytes: int,
                          tp_sp: bool = False) -> LayerCost:
    """A census-measured cost as *recipe* keeps it: the bytes the recipe changes in the *formula* cost's terms.

    A census measures what a layer keeps in the compute dtype; which of those
    tensors are linear layers' inputs only the formula knows. Each formula
    term the recipe changes (:func:`apply_recipe`) moves the census term of
    its recompute switch by the same bytes (``census.saved`` where the census
    splits off no term for the switch; a term the recipe moves to another
    switch, FP8 attention's q, k and v to none, takes its bytes from the old
    switch's and adds them to the new one's), never below zero, and each measured
    policy by the changes of the terms it keeps (those its switches do not
    gate); a ``quantized_weights`` term the recipe adds is added as is, and a byte-free term for each
    formula term moved off its switch, naming the switch and the bytes its recompute still regenerates
    (``rerun_switch``, ``rerun_bytes``).
    """
    changed = apply_recipe(formula, recipe, activation_bytes, tp_sp)
    if changed is formula:
        return measured
    delta: dict[str | None, int] = {}
    for before, after in zip(formula.activations, changed.activations):
        if after.bytes != before.bytes or after.switch != before.switch:
            # A term FP8 attention moves off its switch (_attention_term) leaves that switch's bytes for the kept ones.
            delta[before.switch] = delta.get(before.switch, 0) - before.bytes
            delta[after.switch] = delta.get(after.switch, 0) + after.bytes
    present = {t.switch for t in measured.activations}
    moved: dict[str | None, int] = {}
    for switch, change in delta.items():
        key = switch if switch in present else None
        moved[key] = moved.get(key, 0) + change
    # A term moved off its switch still costs that switch's recompute its re-run (ActivationTerm.rerun_bytes): a
    # byte-free term carries it, the census's switch term having given up the formula's bytes.
    reruns = tuple(ActivationTerm(after.op, 0, rerun_switch=after.rerun_switch, rerun_bytes=after.rerun_bytes)
                   for before, after in zip(formula.activations, changed.activations)
                   if after.rerun_switch is not None and before.rerun_switch is None)
    terms = tuple(attrs.evolve(t, bytes=max(0, t.bytes + moved[t.switch])) if t.switch in moved else t
                  for t in measured.activations) + changed.activations[len(formula.activations):] + reruns
    policies = tuple((switches, max(0, kept + sum(c for s, c in delta.items() if s is None or s not in switches)))
                     for switches, kept in measured.measured)
    gradient = measured.weight_gradient_bytes  # moved as the formula's (a census measures no deferred W)
    if None not in (gradient, changed.weight_gradient_bytes, formula.weight_gradient_bytes):
        gradient = max(0, gradient + changed.weight_gradient_bytes - formula.weight_gradient_bytes)
    inputs = measured.weight_gradient_quantized if gradient == measured.weight_gradient_bytes else None
    return attrs.evolve(measured, activations=terms, measured=policies, weight_gradient_bytes=gradient,
                        weight_gradient_quantized=inputs)


def quantized_weight_elements(costs: Iterable[tuple[LayerCost, int]], by_group: bool = False) -> Any:
    """Elements of the GEMM weights a low-precision recipe quantizes, on one rank.

    Args:
        costs: ``(layer cost, layers of it)`` pairs of a stage.

    Counted from the matrices each parameter family states as one rank holds
    them (:attr:`ParamCount.matrices <hp_core.costs.ParamCount.matrices>`),
    less the embedding and the output head (``embedding_or_output``) and the
    families that stay in the compute dtype (``high_precision``: a router's gate).
    The total, or with *by_group* a mapping by parameter group.
    """
    found: dict[str, int] = {}
    for cost, n in costs:
        for p in cost.params:
            if not p.embedding_or_output and not p.high_precision and p.matrices:
                found[p.group] = found.get(p.group, 0) + n * p.matrix_elements
    return found if by_group else sum(found.values())


# Transformer Engine's quantizer state per GEMM under delayed scaling (pytorch/module/base.py
# set_meta_tensor: 3 quantizers forward -- input, weight, output -- and 2 backward -- output
# gradient, input gradient; pytorch/quantization.py DelayedScalingRecipeState: an fp32 scale each
# and an fp32 amax history of amax_history_len rows).
_QUANTIZERS_PER_GEMM = 5
_ATTENTION_GEMMS = 3


def scaling_state_bytes(costs: Iterable[tuple[LayerCost, int]], recipe: PrecisionRecipe) -> int:
    """Bytes of delayed scaling's scales and amax histories on one rank (0 without an amax history).

    Per quantized GEMM weight matrix (a family's matrices, counted by their
    ``count``, less the embedding, the head and ``high_precision`` families):
    ``5 * (amax_history + 1)`` fp32 values. Current and block scalings keep a
    few bytes per quantizer, not counted. FP8 attention under delayed scaling adds
    the state of 3 GEMMs per attention layer (Transformer Engine's ``DotProductAttention``).
    """
    if not recipe.low_precision or not recipe.amax_history:
        return 0
    costs = list(costs)
    gemms = sum(n * sum(count for count, _, _ in p.matrices) for cost, n in costs for p in cost.params
                if not p.embedding_or_output and not p.high_precision)
    if recipe.attention_format != "bf16":  # a layer kept in the compute dtype (in_compute_dtype) holds no attention state
        # FP8 attention: TE's DotProductAttention holds the state of 3 GEMMs (dot_product_attention.py at
        # d0067d0: init_fp8_metadata(num_gemms=3); module/base.py: 3 quantizers forward, 2 backward a GEMM),
        # one per layer whose fused kernel keeps q, k, v.
        gemms += sum(n * _ATTENTION_GEMMS for cost, n in costs if any(t.attention_saved == "qkv" for t in cost.activations)
                     and (cost.work is None or cost.work.quantized))
    return gemms * _QUANTIZERS_PER_GEMM * (recipe.amax_history + 1) * 4


def weight_copy_bytes(elements: int, recipe: PrecisionRecipe, zero: int) -> int:
    """Bytes of the low-precision weight copies one rank holds for *elements* quantized weight elements.

    ``weight_copies`` copies in the weights' format (with their block scales),
    held across micro-batches where the recipe caches them (Transformer Engine
    ``_fp8_workspaces``); where parameters are kept in the recipe's format
    (``param_gather`` ``stored``), the row-wise copy is the parameter itself,
    so one copy fewer. Not cached: each is made in a layer's forward and freed after its
    backward, held by the layers in flight, not counted here. Under ZeRO-3/FSDP
    Transformer Engine keeps no cache (``module/linear.py``: no workspace under
    FSDP2), so nothing is held between layers.
    """
    if not recipe.low_precision or not recipe.cache_weights or zero >= 3:
        return 0
    copies = recipe.weight_copies - (1 if recipe.stores_weights else 0)
    return math.ceil(elements * max(copies, 0) * recipe.weights.bytes_per_element)


def gathered_param_bytes(elements: int, quantized: int, recipe: PrecisionRecipe, param_bytes: int | float) -> float:
    """Bytes of *elements* parameters gathered, *quantized* of them in the recipe's weights format where it gathers so
    (``stored``, ``cast``; ``gradient_buffer`` gathers in the buffer's dtype: :func:`optimizer_gather_bytes`)."""
    if not recipe.low_precision or recipe.param_gather in ("none", "gradient_buffer"):
        return elements * param_bytes
    quantized = min(quantized, elements)
    return (elements - quantized) * param_bytes + quantized * recipe.weights.bytes_per_element


def optimizer_gather_bytes(elements: int, quantized: int, recipe: PrecisionRecipe, param_bytes: int | float,
                           buffer_bytes: int | float) -> float:
    """Bytes the distributed optimizer (ZeRO 1 and 2) all-gathers of *elements* parameters: the quantized ones in the
    weights' format under ``stored`` (Megatron-LM ``--fp8-param-gather``), every one in the gradient buffer's dtype
    (*buffer_bytes*) under ``gradient_buffer`` (Megatron-Core ``reuse_grad_buf_for_mxfp8_param_ag``: the buffer is
    the gradient buffer, ``param_and_grad_buffer.py`` at NVIDIA/Megatron-LM@d98e8a6), else in ``param_bytes``."""
    if recipe.low_precision and recipe.param_gather == "gradient_buffer":
        return elements * buffer_bytes
    if recipe.low_precision and recipe.param_gather == "stored":
        return gathered_param_bytes(elements, quantized, recipe, param_bytes)
    return elements * param_bytes


def check_recipe_zero(recipe: PrecisionRecipe | None, zero: int) -> None:
    """A recipe's refusal of the run's ZeRO level (``PrecisionRecipe.check_zero``); nothing without a recipe."""
    if recipe is not None:
        recipe.check_zero(zero)


def on_device(run: Any, hardware: Any) -> Any:
    """The prepared run *run* as *hardware* runs it: its recipe as the device runs it (:meth:`PrecisionRecipe.on
    <hp_core.precision_recipes.PrecisionRecipe.on>`: one cached weight copy where one tensor serves
    both GEMM usages, Transformer Engine's per-tensor FP8 on Blackwell), and the runtime's workspaces as a
    device of its architecture holds them (:meth:`Runtime.overheads_on <hp_core.types.Runtime.overheads_on>`:
    ``megatron``'s Transformer Engine cuBLAS workspace, 4 MiB before compute capability 9.0; PyTorch's own,
    :meth:`BlasWorkspaces.on <hp_core.blas_workspaces.BlasWorkspaces.on>`). The same run where nothing changes
    (no device, or the same copies and workspaces); the changed run is made once per device family, kept on *run*.

    Raises:
        ConfigError: The recipe does not run on *hardware*'s family (:meth:`PrecisionRecipe.check_architecture
            <hp_core.precision_recipes.PrecisionRecipe.check_architecture>`), or runs FP8 attention where the
            family's kernel runs none for a core of the model (:func:`check_fp8_attention_device`: on Hopper, a head dim other than
            128).
    """
    if hardware is None:
        return run
    inputs, changes = run.stage_inputs, {}
    recipe = inputs.recipe
    if recipe is not None:
        check_recipes_on_device(recipe, hardware)
        check_fp8_attention_device(recipe, (cost.work for cost in run.costs), hardware.architecture, hardware.name,
                                   recipe_prices_on(run.registry, hardware, getattr(run.runtime, "timing", None)))
        changed = recipe.on(hardware.architecture)
        if changed is not recipe:
            changes["recipe"] = changed
    overhead, expert_overhead = run.runtime.overheads_on(hardware.architecture)
    if (overhead, expert_overhead) != (inputs.overhead_bytes, inputs.expert_overhead_bytes):
        changes.update(overhead_bytes=overhead, expert_overhead_bytes=expert_overhead)
    if (blas := run.runtime.blas_workspaces and run.runtime.blas_workspaces.on(hardware.architecture)) != inputs.blas:
        changes["blas"] = blas
    if not changes:
        return run
    key = ("device", hardware.architecture)
    found = run._resolved.get(key)
    if found is None:
        found = run._resolved[key] = attrs.evolve(run, stage_inputs=attrs.evolve(inputs, **changes))
    return found


def in_compute_dtype(cost: LayerCost) -> LayerCost:
    """*cost* as a layer that keeps every GEMM in the compute dtype under a recipe keeps it (Megatron-LM
    ``--first-last-layers-bf16``: such a layer runs outside the FP8/FP4 context, NVIDIA/Megatron-LM@d98e8a6
    ``megatron/core/fp8_utils.py`` ``is_first_last_bf16_layer`` and ``fp4_utils.py``): its
    parameter families ``high_precision`` (no quantized weight copy, gather or scaling state), its work
    ``quantized`` false (no GEMM speedup, quantization or quantized gather). Its activations are the cost's as the
    recipe leaves them untouched (the caller passes the cost before :func:`with_recipe`)."""
    try:
        params = _high_precision_params(cost.params)
    except TypeError:  # a family that does not hash (a plugin's element_bytes): made anew
        params = _high_precision_params.__wrapped__(cost.params)
    work = None if cost.work is None else attrs.evolve(cost.work, quantized=False)
    return attrs.evolve(cost, params=params, work=work)


@functools.lru_cache(maxsize=1024)
def _high_precision_params(params: tuple[ParamCount, ...]) -> tuple[ParamCount, ...]:
    """*params* with every family ``high_precision`` (:func:`in_compute_dtype`); kept by value, as a search asks
    for the same families in many layer contexts (each made anew by attrs.evolve, its validators run)."""
    return tuple(p if p.high_precision else attrs.evolve(p, high_precision=True) for p in params)


def compute_dtype_groups(model: ModelSpec, recipe: PrecisionRecipe, runtime: Any) -> frozenset[int]:
    """The indices of *model*'s groups whose kind *runtime* runs wholly in the compute dtype under *recipe*
    (:attr:`Runtime.compute_dtype_kinds <hp_core.types.Runtime.compute_dtype_kinds>` of the recipe's GEMM
    dtype): priced as :func:`in_compute_dtype` prices them. None where the recipe quantizes nothing."""
    kinds = getattr(runtime, "compute_dtype_kinds", {}).get(recipe.gemm_dtype, ()) if recipe.low_precision else ()
    return frozenset(i for i, group in enumerate(model.layers) if group.kind in kinds)


def compute_dtype_kinds(model: ModelSpec, recipe: PrecisionRecipe, runtime: Any) -> list[str]:
    """The kinds of :func:`compute_dtype_groups`, sorted (``["mtp"]``: Megatron-Core's MTP module under FP4), which
    the provenance states (``compute_dtype_kinds``) and the text says: empty where the model has none."""
    return sorted({model.layers[i].kind for i in compute_dtype_groups(model, recipe, runtime)})


def kept_layer_counts(precision: PrecisionSpec, recipe: PrecisionRecipe) -> tuple[int, int]:
    """``(at start, at end)``: the body layers *precision* keeps in the compute dtype under *recipe*; ``(0, 0)``
    where the recipe quantizes nothing (the counts then change nothing)."""
    if not recipe.low_precision:
        return 0, 0
    return precision.high_precision_layers_at_start, precision.high_precision_layers_at_end


def check_high_precision_layers(precision: PrecisionSpec, recipe: PrecisionRecipe, body_layers: int, pp: int = 1) -> None:
    """Refuse layers kept in the compute dtype where Megatron-Core refuses them (nothing where none are kept).

    Raises:
        ConfigError: A recipe with delayed scaling (an amax history), which Megatron-Core refuses with these
            layers ("Delayed scaling does not support first / last layer in BF16": the per-layer exit of the FP8
            context breaks its amax reduction), or a count above the body layers of a pipeline stage
            (``body_layers // pp``; ``TransformerConfig.__post_init__`` at NVIDIA/Megatron-LM@d98e8a6).
    """
    start, end = kept_layer_counts(precision, recipe)
    if not (start or end):
        return
    field = "high_precision_layers_at_start" if start else "high_precision_layers_at_end"
    if recipe.amax_history:
        raise ConfigError(f"$.precision.{field}", f"precision recipe {recipe.name} scales with an amax history (delayed "
                          "scaling), which Megatron-Core cannot run with layers kept in bf16; use a current-scaling "
                          "recipe or set the high-precision layer counts to 0")
    for name, count in (("high_precision_layers_at_start", start), ("high_precision_layers_at_end", end)):
        if count > body_layers // pp:
            raise ConfigError(f"$.precision.{name}", f"{name} is {count}, more than the {body_layers // pp} body layers "
                              f"of a pipeline stage ({body_layers} over pp {pp}); name at most {body_layers // pp}")


def split_high_precision_layers(model: ModelSpec, body: list[bool], precision: PrecisionSpec,
                                recipe: PrecisionRecipe, pp: int = 1) -> tuple[ModelSpec, frozenset[int]]:
    """*model* with its layer groups split so that the first ``high_precision_layers_at_start`` and the last
    ``high_precision_layers_at_end`` body layers (``body[i]``: group ``i`` is placed in the body) form groups of
    their own, and the indices of those groups: the layers :func:`in_compute_dtype` prices. The model unchanged
    and no index where the recipe quantizes nothing or no layer is named. The split does not depend on *pp*,
    which only the refusal reads.

    Raises:
        ConfigError: What :func:`check_high_precision_layers` refuses.
    """
    start, end = kept_layer_counts(precision, recipe)
    if not (start or end):
        return model, frozenset()
    total = sum(group.count for group, placed in zip(model.layers, body) if placed)
    check_high_precision_layers(precision, recipe, total, pp)
    groups, exempt, first = [], set(), 0
    for group, placed in zip(model.layers, body):
        if not placed:
            groups.append(group)
            continue
        cuts = sorted({first, first + group.count, *(c for c in (start, total - end) if first < c < first + group.count)})
        for lo, hi in zip(cuts, cuts[1:]):
            if lo < start or lo >= total - end:
                exempt.add(len(groups))
            groups.append(attrs.evolve(group, count=hi - lo))
        first += group.count
    return attrs.evolve(model, layers=tuple(groups)), frozenset(exempt)
