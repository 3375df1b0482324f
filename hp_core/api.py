"""The Python API: pure functions over frozen inputs returning frozen results.

Example::

    from hp_core.api import build_registry, estimate, model_from_preset
    from hp_core.specs import ParallelSpec

    registry = build_registry()
    model = model_from_preset("llama3-8b", registry)
    result = estimate(model, ParallelSpec(dp=4, tp=2, seq_len=8192), registry=registry)
    print(result.peak_bytes, [s.peak_bytes for s in result.stages])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping

import attrs

from hp_core import __version__
from hp_core import census as census_lib
from hp_core.errors import ConfigError, HPError, PluginError, describe
from hp_core.manager import get_plugin_manager
from hp_core.registry import Registry
from hp_core.results import Estimate, ParameterSummary
from hp_core.specs import HardwareSpec, LayerGroup, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_core.stage import PlacedLayer, StageInputs, plan_stage
from hp_core.types import CensusRecord, CensusSource, LayerContext, LayerCost, LayerKind

if TYPE_CHECKING:
    from hp_core.recompute.plan import RecomputePlan
    from hp_core.search import SearchResult

__all__ = [
    "build_registry", "count_parameters", "estimate", "layer_context", "model_from_preset", "plan_recompute", "resolve_setting",
    "search", "with_sublayers",
]


def build_registry(
    plugins: Iterable[object] = (), *, entry_points: bool = False, blocked: Iterable[str] = (), use_env: bool = True
) -> Registry:
    """A frozen registry of the built-in plugins plus *plugins* (and entry points on request)."""
    manager = get_plugin_manager(plugins, entry_points=entry_points, blocked=blocked, use_env=use_env)
    return Registry.from_manager(manager)


def model_from_preset(name: str, registry: Registry, path: str = "$.model") -> ModelSpec:
    """The model of the preset *name*, built through the Hugging Face importer."""
    from hp_plugins.importers.hf import model_from_hf_config

    preset = registry.model(name, path)
    return model_from_hf_config(preset.hf_config, name=preset.name, source=f"preset {preset.name}: {preset.provenance}")


def layer_context(
    parallel: ParallelSpec,
    precision: PrecisionSpec,
    attention: str,
    vocab_pad_multiple: int = 1,
    traits: frozenset[str] = frozenset(),
) -> LayerContext:
    """The context every layer of a run is evaluated in."""
    return LayerContext(
        tp=parallel.tp,
        cp=parallel.cp,
        sp=parallel.sp,
        ep=parallel.ep,
        etp=parallel.etp,
        micro_batch_size=parallel.micro_batch_size,
        seq_len=parallel.seq_len,
        precision=precision,
        attention=attention,
        vocab_pad_multiple=vocab_pad_multiple,
        cp_kind=parallel.cp_kind,
        traits=traits,
    )


def resolve_setting(setting: Setting, kind: LayerKind, path: str) -> tuple[bool, frozenset[str]]:
    """``(full, recomputed switches)`` of a setting for one kind."""
    if setting.mode == "full":
        return True, frozenset()
    if setting.mode == "selective":
        return False, kind.selective
    unknown = sorted(setting.switches - set(kind.switches))
    if unknown:
        raise ConfigError(path, f"layer kind {kind.name} has no recompute switch {unknown}; it has {list(kind.switches)}")
    return False, setting.switches


def _validate_layout(parallel: ParallelSpec, body_layers: int) -> int:
    """Cross-field checks of the layout; returns micro-batches per step."""
    p = parallel
    if p.seq_len % p.cp:
        raise ConfigError("$.parallel.cp", f"cp={p.cp} must divide seq_len={p.seq_len}")
    if p.sp and (p.seq_len // p.cp) % p.tp:
        raise ConfigError("$.parallel.sp", f"sequence parallelism needs tp={p.tp} to divide seq_len/cp={p.seq_len // p.cp}")
    if (p.dp * p.cp * p.tp) % (p.ep * p.etp):
        raise ConfigError("$.parallel.ep", f"ep*etp={p.ep * p.etp} must divide dp*cp*tp={p.dp * p.cp * p.tp}")
    if p.pp > body_layers:
        raise ConfigError("$.parallel.pp", f"pp={p.pp} is larger than the model's {body_layers} layers; use pp <= {body_layers}")
    schedule = p.resolved_schedule
    if schedule == "1f1b" and p.vpp > 1:
        raise ConfigError("$.parallel.schedule", f"vpp={p.vpp} needs the interleaved_1f1b schedule")
    if schedule == "interleaved_1f1b" and p.pp == 1:
        raise ConfigError("$.parallel.schedule", "interleaved_1f1b needs pp > 1")
    per_step = p.micro_batch_size * p.dp
    gbs = p.resolved_global_batch_size
    if gbs % per_step:
        raise ConfigError(
            "$.parallel.global_batch_size",
            f"global_batch_size={gbs} must be a multiple of micro_batch_size*dp={per_step}",
        )
    m = gbs // per_step
    if schedule == "interleaved_1f1b" and m % p.pp:
        raise ConfigError(
            "$.parallel.global_batch_size",
            f"interleaved 1F1B needs micro-batches per step ({m}) to be a multiple of pp={p.pp} "
            "(Megatron-LM schedules.py)",
        )
    return m


def _split(body_layers: int, parallel: ParallelSpec) -> list[int]:
    chunks = parallel.chunks
    if parallel.layers_per_stage is not None:
        counts = list(parallel.layers_per_stage)
        if len(counts) != chunks:
            raise ConfigError(
                "$.parallel.layers_per_stage", f"needs one count per pipeline chunk (pp*vpp={chunks}), got {len(counts)}"
            )
        if sum(counts) != body_layers:
            raise ConfigError(
                "$.parallel.layers_per_stage", f"counts add up to {sum(counts)}, the model has {body_layers} layers"
            )
        return counts
    if body_layers % chunks:
        raise ConfigError(
            "$.parallel.pp",
            f"{body_layers} layers do not split evenly over pp*vpp={chunks} chunks; "
            "choose pp*vpp dividing the layer count or set parallel.layers_per_stage",
        )
    return [body_layers // chunks] * chunks


def _evaluate(kind: LayerKind, config: object, context: LayerContext, path: str) -> LayerCost:
    if not isinstance(config, kind.config_type):
        raise ConfigError(path, f"layer kind {kind.name} needs a {kind.config_type.__name__} config, got {type(config).__name__}")
    try:
        if kind.validate is not None:
            kind.validate(config, context)
        cost = kind.evaluate(config, context)
    except HPError:
        raise
    except Exception as exc:
        raise PluginError(kind.name, f"evaluator raised {type(exc).__name__}: {describe(exc)}") from exc
    if not isinstance(cost, LayerCost):
        raise PluginError(kind.name, f"evaluator must return LayerCost, got {type(cost).__name__}")
    stray = {t.switch for t in cost.activations if t.switch is not None} - set(kind.switches)
    if stray:
        raise PluginError(kind.name, f"activation terms name switches {sorted(stray)} the kind does not declare")
    return cost


def _census_records(
    source: CensusSource, model: ModelSpec, kinds: list[LayerKind], parallel: ParallelSpec, attention: str, registry: Registry | None = None
) -> Mapping[str, CensusRecord]:
    """The records *source* has for the model's kinds (:func:`hp_core.census.request_records`)."""
    return census_lib.request_records(source, model, kinds, parallel.seq_len, attention, registry=registry, tp=parallel.tp)


def _apply_census(cost: LayerCost, record: CensusRecord, context: LayerContext, kind: LayerKind) -> LayerCost:
    """A layer's cost with its activations as a census measured them (:func:`hp_core.census.apply_record`)."""
    return census_lib.apply_record(cost, record, kind, context)


def with_sublayers(context: LayerContext, registry: Registry) -> LayerContext:
    """The context, able to evaluate nested layer groups (an MTP module's layer) through the registry.

    Within the returned context a kind and config are evaluated once:
    :func:`evaluate_groups` and nested evaluations share the answers, so an
    MTP module's layer costs nothing when the body already has that layer.
    """
    evaluated: dict[tuple[str, object], LayerCost] = {}

    def sublayer(group: LayerGroup) -> LayerCost:
        path = "$.model.layers[].config.layer"
        kind = registry.layer_kind(group.kind, f"{path}.kind")
        if kind.placement != "body":
            raise ConfigError(f"{path}.kind", f"a nested layer must be of a body kind, not {kind.name!r}")
        return _evaluate_once(evaluated, kind, group.config, full, f"{path}.config")

    sublayer.evaluated = evaluated  # type: ignore[attr-defined]
    full = attrs.evolve(context, sublayer=sublayer)
    return full


def _evaluate_once(
    evaluated: dict[tuple[str, object], LayerCost], kind: LayerKind, config: object, context: LayerContext, path: str
) -> LayerCost:
    """:func:`_evaluate`, answered from *evaluated* when the kind and config were evaluated in this context."""
    key = (kind.name, config)
    try:
        return evaluated[key]
    except KeyError:
        pass
    except TypeError:  # a config that does not hash: evaluated each time
        return _evaluate(kind, config, context, path)
    cost = evaluated[key] = _evaluate(kind, config, context, path)
    return cost


def evaluate_groups(kinds: list[LayerKind], groups: Iterable[LayerGroup], context: LayerContext) -> list[LayerCost]:
    """Each group's cost in *context* (one made by :func:`with_sublayers`, whose answers it shares)."""
    evaluated = getattr(context.sublayer, "evaluated", None)
    if evaluated is None:
        evaluated = {}
    return [
        _evaluate_once(evaluated, kind, group.config, context, f"$.model.layers[{i}].config")
        for i, (kind, group) in enumerate(zip(kinds, groups))
    ]


@attrs.frozen
class EvaluatedLayers:
    """A model's layer groups evaluated in one layout's context (:func:`evaluate_layers`).

    Attributes:
        kinds: Each group's kind, in model order.
        body_groups: Indices of the groups whose kind is placed ``"body"``.
        body_count: Body layers in all.
        context: The context they were evaluated in (with sublayers).
        costs: Each group's cost, in model order.
    """

    kinds: list[LayerKind]
    body_groups: list[int]
    body_count: int
    context: LayerContext
    costs: list[LayerCost]


def evaluate_layers(
    model: ModelSpec, parallel: ParallelSpec, precision: PrecisionSpec, attention: str, runtime, registry: Registry
) -> EvaluatedLayers:
    """Resolve each group's kind and evaluate every group once, as :func:`estimate`,
    :func:`hp_core.timing.step_time` and the recompute planner all do.

    Raises:
        ConfigError: An unknown kind, or no body layers.
        PluginError: A kind's evaluator failed.
    """
    kinds = [registry.layer_kind(group.kind, f"$.model.layers[{i}].kind") for i, group in enumerate(model.layers)]
    body_groups = [i for i, kind in enumerate(kinds) if kind.placement == "body"]
    body_count = sum(model.layers[i].count for i in body_groups)
    if body_count == 0:
        raise ConfigError("$.model.layers", "the model has no body layers (no kind placed 'body')")
    context = with_sublayers(layer_context(parallel, precision, attention, runtime.vocab_pad_multiple, runtime.traits), registry)
    return EvaluatedLayers(kinds, body_groups, body_count, context, evaluate_groups(kinds, model.layers, context))


def _summarise(kinds: list[LayerKind], costs: list[LayerCost], model: ModelSpec) -> ParameterSummary:
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
    kinds = [registry.layer_kind(group.kind, f"$.model.layers[{i}].kind") for i, group in enumerate(model.layers)]
    return _summarise(kinds, evaluate_groups(kinds, model.layers, context), model)


def estimate(
    model: ModelSpec,
    parallel: ParallelSpec,
    *,
    registry: Registry,
    runtime: str = "generic",
    precision: PrecisionSpec | None = None,
    hardware: HardwareSpec | None = None,
    recompute: RecomputeSpec | None = None,
    census: str = "formulas",
    attention: str | None = None,
) -> Estimate:
    """Per-stage peak memory of one rank of every pipeline stage.

    Args:
        model: The layer stack.
        parallel: The layout.
        registry: Layer kinds, runtimes and census sources to use.
        runtime: The runtime profile's name; it supplies the defaults below.
        precision: Byte widths; the runtime's when ``None``.
        hardware: The device, for ``fits``; ``None`` leaves ``fits`` unknown.
        recompute: Per-layer recompute settings; nothing recomputed when ``None``.
        census: The census source's name.
        attention: ``"flash"`` or ``"eager"``; the runtime's when ``None``.

    Raises:
        ConfigError: An invalid layout or name (one line, with the field path).
        PluginError: A plugin's evaluator failed.
    """
    profile = registry.runtime(runtime)
    precision = precision if precision is not None else profile.precision
    attention = attention if attention is not None else profile.attention
    zero = parallel.zero if parallel.zero is not None else profile.zero
    recompute = recompute if recompute is not None else RecomputeSpec()
    source = census_lib.resolve_source(registry, census)

    layers = evaluate_layers(model, parallel, precision, attention, profile, registry)
    kinds, body_groups, body_count, context, costs = layers.kinds, layers.body_groups, layers.body_count, layers.context, layers.costs
    micro_batches = _validate_layout(parallel, body_count)
    counts = _split(body_count, parallel)
    records = _census_records(source, model, kinds, parallel, attention, registry)
    costs = [_apply_census(cost, records[kind.name], context, kind) if kind.name in records else cost for kind, cost in zip(kinds, costs)]

    # Body layers in order, each with its setting; one PlacedLayer per (group, setting).
    body: list[PlacedLayer] = []
    cache: dict[tuple[int, Setting], PlacedLayer] = {}
    for i in body_groups:
        for _ in range(model.layers[i].count):
            setting = recompute.setting_of(len(body))
            key = (i, setting)
            if key not in cache:
                full, switches = resolve_setting(setting, kinds[i], "$.recompute")
                # What the trainer recomputes whatever the plan says (Megatron re-gathers SP inputs).
                switches |= profile.implicit_recompute & frozenset(kinds[i].switches)
                cache[key] = PlacedLayer.make(kinds[i].name, costs[i], full, switches, setting.describe(), setting.offload)
            body.append(cache[key])
    if recompute.layers and max(last for _, last, _ in recompute.layers) >= body_count:
        raise ConfigError("$.recompute.layers", f"a range names a layer beyond the model's {body_count} layers (0-{body_count - 1})")

    def placed(where: str) -> list[PlacedLayer]:
        return [
            PlacedLayer.make(k.name, c, False, frozenset(), "none")
            for k, c, g in zip(kinds, costs, model.layers)
            if k.placement == where
            for _ in range(g.count)
        ]

    chunk_layers: list[list[PlacedLayer]] = []
    chunk_body: list[range] = []
    start = 0
    for count in counts:
        chunk_layers.append(body[start:start + count])
        chunk_body.append(range(start, start + count))
        start += count
    chunk_layers[0] = placed("first") + chunk_layers[0]
    chunk_layers[-1] = chunk_layers[-1] + placed("last")

    inputs = StageInputs(
        parallel, zero, precision, micro_batches, parallel.resolved_schedule, profile.overhead_bytes,
        profile.deferred_grad_reduction, profile.expert_overhead_bytes, "dummy_wgrad_per_shape" in profile.traits,
    )
    stages = []
    for stage in range(parallel.pp):
        mine = range(stage, parallel.chunks, parallel.pp)
        settings = tuple(body[i].setting for c in mine for i in chunk_body[c])
        stages.append(plan_stage(stage, [chunk_layers[c] for c in mine], [chunk_body[c] for c in mine], settings, inputs))

    parameters = _summarise(kinds, costs, model)

    layout = {
        "dp": parallel.dp, "tp": parallel.tp, "pp": parallel.pp, "vpp": parallel.vpp, "cp": parallel.cp,
        "ep": parallel.ep, "etp": parallel.etp, "sp": parallel.sp, "zero": zero,
        "micro_batch_size": parallel.micro_batch_size,
        "global_batch_size": parallel.resolved_global_batch_size,
        "seq_len": parallel.seq_len, "schedule": parallel.resolved_schedule,
    }
    provenance = {
        "hp_planner": __version__,
        "runtime": profile.name,
        "census": source.name,
        "attention": attention,
        "kinds": census_lib.kind_provenance(source, kinds, records),
        "model_source": model.source,
    }
    return Estimate(
        model=model.name,
        world_size=parallel.world_size,
        layout=layout,
        micro_batches=micro_batches,
        stages=tuple(stages),
        parameters=parameters,
        device_memory_bytes=hardware.memory_bytes if hardware is not None else None,
        provenance=provenance,
    )


def plan_recompute(
    model: ModelSpec,
    parallel: ParallelSpec,
    *,
    registry: Registry,
    hardware: HardwareSpec,
    runtime: str = "generic",
    reserve_bytes: int = 0,
    precision: PrecisionSpec | None = None,
    census: str = "formulas",
    attention: str | None = None,
    unrestricted: bool = False,
    offload: Iterable[float] = (),
) -> "RecomputePlan":
    """Per stage, the fastest recompute settings whose every peak point fits ``hardware.memory_bytes - reserve_bytes``.

    Exact (equal to brute force) and fast: see :mod:`hp_core.recompute.plan`
    and docs/recompute.md. Only settings the runtime's trainer executes are
    planned, unless *unrestricted* (then both plans are reported); *offload*
    lists the offload shares a setting may add.

    Raises:
        ConfigError: An invalid layout or name, a runtime without a timing
            profile, a reserve not below the device memory, or offload on a
            device that states no host link bandwidth.
    """
    from hp_core.recompute.plan import plan_recompute as plan

    return plan(
        model, parallel, registry=registry, hardware=hardware, runtime=runtime, reserve_bytes=reserve_bytes,
        precision=precision, census=census, attention=attention, unrestricted=unrestricted, offload=offload,
    )


def search(model: ModelSpec, **kwargs: object) -> "SearchResult":
    """Every parallel layout of a device count, recompute planned and ranked by step time.

    The same as :func:`hp_core.search.search` (its keyword arguments:
    ``registry``, ``devices``, ``hardware``, ``global_batch_size``,
    ``seq_len``, ``runtime``, ``fixed``, ``top``, ``executor``, ...); see
    docs/search.md.

    Raises:
        ConfigError: An unknown fixed name, a non-positive count, or a runtime
            without a timing profile.
    """
    from hp_core.search import search as run

    return run(model, **kwargs)  # type: ignore[arg-type]
