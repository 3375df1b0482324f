"""A stage's quantized GEMM weights: their elements (what a recipe gathering its weights' format moves) and the time
quantizing them takes once a step where the recipe keeps the quantized copies across micro-batches.

Transformer Engine caches a linear layer's quantized weight in the module's workspace and quantizes it again only
where ``is_first_microbatch`` is true (``pytorch/module/linear.py``: ``update_ws = is_first_microbatch is None or
is_first_microbatch`` passed to ``quantize_weight``, ``pytorch/module/base.py``, at NVIDIA/TransformerEngine@d0067d0),
which Megatron-Core sets for the first micro-batch of each step
(``megatron/core/pipeline_parallel/schedules.py`` ``forward_step``: ``set_is_first_microbatch``): each cached weight
is quantized once a step, in the first micro-batch's forward. That is not 1/m of a micro-batch's quantization but a
whole one at ``m = 1``, so it is priced (docs/precision.md, "Time"): per element the bytes
:func:`~hp_core.engine.timing.recipe_rates._recipe_rates` states as ``quant_weight_step``.

Along a pipeline the first micro-batch's forward runs through the stages one after another, so each stage's
quantization delays every stage after it: the step takes the stages' sum (:func:`stage_weight_seconds`), as the
whole model's weights (one rank's shard of them) quantized in sequence.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from hp_core.costs import LayerCost, LayerWork
from hp_core.engine.precision import quantized_weight_elements
from hp_core.engine.timing.gemm_seconds import frozen_share
from hp_core.engine.timing.rates import _Rates
from hp_core.precision_recipes import PrecisionRecipe
from hp_core.linear_modules import joining_kept

__all__ = ["cached_weight_seconds", "cast_in_optimizer_step", "stage_quantized_elements", "stage_weight_seconds"]


def stage_quantized_elements(held: dict[int, int], costs: tuple[LayerCost, ...], cache: dict) -> tuple[int, int]:
    """Quantized GEMM weight elements one rank of a stage holds: dense (shared experts included) and routed experts.

    As :func:`hp_core.engine.precision.quantized_weight_elements` counts them, by group.
    """
    dense = experts = 0
    for group, count in held.items():
        found = cache.get(group)
        if found is None:
            found = cache[group] = quantized_weight_elements([(costs[group], 1)], by_group=True)
        experts += count * found.get("routed_expert", 0)
        dense += count * sum(n for g, n in found.items() if g != "routed_expert")
    return dense, experts


def cached_weight_seconds(cost: LayerCost, work: LayerWork, r: _Rates) -> float:
    """Seconds quantizing one layer's GEMM weights takes once a step, where its recipe caches the quantized copies.

    The weights of the GEMMs the recipe quantizes (:func:`~hp_core.engine.timing.gemm_seconds._recipe_seconds`
    counts the same ones): the layer's listed GEMMs less those it keeps in the compute dtype (``high_precision_gemms``)
    and those of a module in a format of its own, which that format's figure prices (``module_rates``), and the routed
    experts' where the recipe quantizes them (``gemm_scope``); none for a layer kept in the compute dtype
    (``LayerWork.quantized`` false). Each list is a multiset: a GEMM both frozen and kept, or frozen and in a module
    of its own format, is taken off once.

    Frozen weights (``frozen_gemms``, a frozen share of the experts:
    :func:`~hp_core.engine.timing.gemm_seconds.frozen_share`) are left out where the recipe holds its weights in
    their GEMM format (``_Rates.weights_stored_quantized``): Transformer Engine builds such a weight quantized
    (``fp8_model_init``: ``module/base.py`` quantizes the parameter at init where ``primary_weights_in_fp8``, TE
    release_v2.8) and uses it as it stands (``get_weight_workspace`` returns a quantized tensor unchanged), and no
    optimizer step updates a frozen one, so its copy is made once, when it is built or loaded. Where the weights are
    kept in the compute dtype a frozen weight is quantized each step like a trained one: TE's update path checks no
    ``requires_grad`` (``pytorch/module/base.py`` ``quantize_weight``). MLPerf v5.1's Llama 2 70B LoRA runs build their
    model under ``te.fp8_model_init(recipe=DelayedScaling())`` (training_results_v5.1 ``NVIDIA/benchmarks/llama2_70b_lora/
    implementations/nemo/custom_llama.py`` lines 89-101), so their frozen base is an FP8 parameter (docs/precision.md,
    "Cached weights, once a step"). At the device's memory rate, before the sustained slowdown.
    """
    if not work.quantized or not r.low_precision:  # a layer kept in the compute dtype quantizes nothing
        return 0.0
    figures = dict(r.module_rates)
    own = [(m, figures[m.format]) for m in work.modules if m.format]
    moved = joining_kept((g for m, _ in own for g in m.gemms), work.gemms, work.high_precision_gemms)
    kept = Counter(work.high_precision_gemms) + Counter(moved)
    # Frozen weights are left out where they are stored quantized (above), else quantized each step like the rest.
    frozen = Counter(work.frozen_gemms) if r.weights_stored_quantized else Counter()
    # Frozen GEMMs not already taken off as kept or moved: the listed GEMMs' multiset less both (Counter subtraction
    # floors at zero, so a GEMM in two lists is taken off once).
    left = Counter(work.gemms) - kept
    left -= frozen - kept
    listed = sum(n * out * inp for (_, out, inp), n in left.items()) if r.gemm_scope != "experts" else 0.0
    grouped = min(work.grouped_flops, cost.forward.matmul_flops)
    if r.gemm_scope != "linears" and grouped:
        trained = 1.0
        if work.frozen_matmul_flops and r.weights_stored_quantized:
            trained -= frozen_share(cost.forward.matmul_flops, grouped, work)[1] / grouped
        listed += trained * sum(n * out * inp for n, _, out, inp in work.expert_gemms)
    seconds = listed * r.quant_weight_step
    for module, figure in own:  # its GEMMs at its format's bytes, frozen ones left out where its format stores them
        skip = Counter(work.frozen_gemms) if figure.get("weights_stored_quantized") else Counter()
        counted = Counter(module.gemms) - skip
        seconds += sum(n * out * inp for (_, out, inp), n in counted.items()) * figure.get("quant_weight_step", 0.0)
    return seconds / r.memory


def cast_in_optimizer_step(recipe: PrecisionRecipe, overlap_param_gather: bool) -> bool:
    """Whether the once-a-step cast runs in the optimizer step, on every stage at once, rather than in the first
    micro-batch's forward: a recipe gathering its weights through the gradient buffer without the gather's overlap
    (Megatron-Core's distributed data parallel runs ``_post_param_sync``, the cast into the MXFP8 weights, right after
    the synchronous all-gather at the step's end, ``distributed_data_parallel.py`` ``_start_bucket_group_param_sync``
    at NVIDIA/Megatron-LM@d98e8a6; with the overlap it runs as each bucket's gather is waited on, in the forward)."""
    return recipe.low_precision and recipe.param_gather == "gradient_buffer" and not overlap_param_gather


def stage_weight_seconds(held: dict[int, int], costs: Sequence[LayerCost], works: Sequence[LayerWork], r: _Rates,
                         cache: dict) -> float:
    """A stage's once-a-step weight quantization (:func:`cached_weight_seconds` of each layer it holds), times the
    sustained slowdown."""
    total = 0.0
    for group, count in held.items():
        found = cache.get(group)
        if found is None:
            found = cache[group] = cached_weight_seconds(costs[group], works[group], r)
        total += count * found
    return total * r.slowdown
