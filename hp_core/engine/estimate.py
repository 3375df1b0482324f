"""Per-stage peak memory of a prepared run (:func:`estimate_run`) and the model's parameter counts.

Each body layer is placed with its recompute setting (one
:class:`~hp_core.engine.stage.PlacedLayer` per group and setting), the
first- and last-placed kinds join the first and last chunk, and every
pipeline stage is composed by :func:`~hp_core.engine.stage.plan_stage`.
"""

from __future__ import annotations

from hp_core.distributions import planner_version
from hp_core.engine import census as census_lib
from hp_core.engine.inner_layers import placed_layer
from hp_core.engine.prepare import PreparedRun, evaluate_groups, layer_context, model_kinds, with_sublayers
from hp_core.engine.precision import compute_dtype_kinds, kept_layer_counts, on_device
from hp_core.engine.stage import PlacedLayer, plan_stage
from hp_core.registry import Registry
from hp_core.results import Estimate, ParameterSummary
from hp_core.specs import HardwareSpec, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_core.costs import LayerCost
from hp_core.types import LayerKind

__all__ = ["count_parameters", "estimate_run", "placed_body", "precision_provenance", "recompute_assumptions", "summarise"]


def summarise(kinds: tuple[LayerKind, ...] | list[LayerKind], costs: tuple[LayerCost, ...] | list[LayerCost],
              model: ModelSpec) -> ParameterSummary:
    """Whole-model parameter counts by kind and by group; a tied or shared weight once, with its owner."""
    by_kind: dict[str, int] = {}
    by_group: dict[str, int] = {}
    for kind, cost, group in zip(kinds, costs, model.layers):
        for p in cost.params:
            if p.shared_with is not None:
                continue
            by_kind[kind.name] = by_kind.get(kind.name, 0) + p.elements * group.count
            by_group[p.group] = by_group.get(p.group, 0) + p.elements * group.count
    return ParameterSummary(total=sum(by_kind.values()), by_kind=by_kind, by_group=by_group)


def count_parameters(model: ModelSpec, registry: Registry) -> ParameterSummary:
    """The model's parameter counts (Hugging Face's, tied weights once), without a layout."""
    context = with_sublayers(layer_context(ParallelSpec(seq_len=1), PrecisionSpec(), "flash"), registry)
    kinds = model_kinds(model, registry)
    return summarise(kinds, evaluate_groups(kinds, model.layers, context), model)


def placed_body(run: PreparedRun, settings: tuple[Setting, ...]) -> list[PlacedLayer]:
    """Each body layer placed under its setting; one :class:`PlacedLayer` per (group, setting)."""
    kinds, costs = run.kinds, run.costs

    def place(group: int, setting: Setting, full: bool, switches: frozenset[str]) -> PlacedLayer:
        return PlacedLayer.make(kinds[group].name, costs[group], full, switches, setting.describe(), setting.offload)

    return run.per_body_layer(settings, place)


def recompute_assumptions(body: list[PlacedLayer]) -> str:
    """What the body layers' settings price by an assumption their kinds state (:attr:`LayerCost.assumed
    <hp_core.costs.LayerCost.assumed>`) and no measured setting overrides: ``kind: why``, once each, joined by
    ``; ``; ``""`` for none."""
    found: dict[tuple[str, str], None] = {}
    for layer in {id(layer): layer for layer in body}.values():
        measured = {switches for switches, _ in layer.cost.measured}
        for switches, why in layer.cost.assumed:
            if not layer.full and layer.recomputed == switches and switches not in measured:
                found[(layer.kind, why)] = None
    return "; ".join(f"{kind}: {why}" for kind, why in sorted(found))



def precision_provenance(precision: PrecisionSpec, recipe) -> dict:
    """What an answer records of its precision: the recipe priced (``precision_recipe``), and where the recipe
    quantizes anything the body layers kept in the compute dtype (``high_precision_layers``) and the modules given a
    format of their own (``module_formats``), where any; so an FP8 answer saved to a file tells itself from a bf16 one."""
    found: dict = {"precision_recipe": recipe.name}
    start, end = kept_layer_counts(precision, recipe)
    if start or end:
        found["high_precision_layers"] = {"at_start": start, "at_end": end}
    if recipe.low_precision and precision.module_formats:
        found["module_formats"] = dict(precision.module_formats)
    return found


def estimate_run(run: PreparedRun, recompute: RecomputeSpec | None = None, hardware: HardwareSpec | None = None,
                 reserve_bytes: int | None = None) -> Estimate:
    """Per-stage peak memory of one rank of every pipeline stage of *run* under *recompute*.

    Args:
        run: The prepared run.
        recompute: Per-layer recompute settings; nothing recomputed when ``None``.
        hardware: The device, for ``fits``; ``None`` leaves ``fits`` unknown.
        reserve_bytes: Memory kept free beside the peak; the runtime's ``reserve_bytes`` when ``None``.

    Raises:
        ConfigError: A setting its kind cannot run, or a range beyond the model's layers.
    """
    run = on_device(run, hardware)
    settings = run.settings(recompute)
    body = placed_body(run, settings)
    kinds, costs, parallel = run.kinds, run.costs, run.parallel

    def placed(where: str) -> list[PlacedLayer]:
        # A placed layer recomputes nothing, unless the runtime's recompute reaches its inner layers (the MTP's).
        made = {i: placed_layer(run, i, settings, where) for i in set(run.placed_groups(where))}
        return [made[i] for i in run.placed_groups(where)]

    chunk_layers = [body[lo:hi] for lo, hi in run.chunk_bounds]
    chunk_layers[0] = placed("first") + chunk_layers[0]
    chunk_layers[-1] = chunk_layers[-1] + placed("last")
    chunk_body = [range(lo, hi) for lo, hi in run.chunk_bounds]

    stages = []
    compositions: dict = {}
    for stage in range(parallel.pp):
        mine = run.stage_chunks(stage)
        stage_settings = tuple(body[i].setting for c in mine for i in chunk_body[c])
        stages.append(plan_stage(stage, [chunk_layers[c] for c in mine], [chunk_body[c] for c in mine], stage_settings,
                                 run.stage_inputs, compositions))

    layout = {
        "dp": parallel.dp, "tp": parallel.tp, "pp": parallel.pp, "vpp": parallel.vpp, "cp": parallel.cp,
        "ep": parallel.ep, "etp": parallel.etp, "sp": parallel.sp, "zero": run.zero,
        "reshard_after_forward": parallel.reshard_after_forward,  # resolved by prepare (the runtime's default)
        "micro_batch_size": parallel.micro_batch_size,
        "global_batch_size": parallel.resolved_global_batch_size,
        "seq_len": parallel.seq_len, "schedule": parallel.resolved_schedule,
    }
    provenance = {
        "hp_planner": planner_version(),
        "runtime": run.runtime.name,
        "runtime_options": {name: value for name, value in run.runtime.option_values.items()},
        "census": run.layers.census.name,
        "attention": run.attention,
        **precision_provenance(run.precision, run.stage_inputs.recipe),
        "kinds": census_lib.kind_provenance(run.layers.census, kinds, run.layers.records),
        "model_source": run.model.source,
    }
    # Kinds the runtime runs wholly in the compute dtype under the recipe (Megatron-Core's MTP module under FP4).
    kept_kinds = compute_dtype_kinds(run.model, run.stage_inputs.recipe, run.runtime)
    if kept_kinds:
        provenance["compute_dtype_kinds"] = kept_kinds
    assumed = recompute_assumptions(body)
    if assumed:
        provenance["recompute_assumptions"] = assumed
    return Estimate(
        model=run.model.name,
        world_size=parallel.world_size,
        layout=layout,
        micro_batches=run.micro_batches,
        stages=tuple(stages),
        parameters=summarise(kinds, costs, run.model),
        device_memory_bytes=hardware.memory_bytes if hardware is not None else None,
        provenance=provenance,
        reserve_bytes=run.runtime.reserve_bytes if reserve_bytes is None else reserve_bytes,
    )
