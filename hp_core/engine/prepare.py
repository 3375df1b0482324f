"""One run, prepared once: defaults resolved, layers evaluated and censused, placed on chunks.

:func:`prepare` is the one road into the engine. It resolves the runtime's
defaults (precision, attention, ZeRO level, resharding after forward) and the optimizer the precision
names (against the registry), validates the layout, evaluates
every layer group once in the layout's context (a kind and config once, an
MTP module's nested layer included), applies the census once, and splits the
body layers over the pipeline chunks. The memory estimate, the step time, the
recompute planner, the potentials and the search all consume the
:class:`PreparedRun` it returns, so they price the same layers the same way:
with a census, the step time prices what recompute re-runs from the census's
activations, exactly as the planner ranks settings.

The search shares evaluations between layouts: a group's cost depends on the
layout only through the layer context (:func:`evaluate_layers`).
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Iterable, Mapping

import attrs

from hp_core.engine import census as census_lib
from hp_core.engine import schedule as schedule_lib
from hp_core.engine.optimizer import resolve_optimizer
from hp_core.engine.module_formats import check_module_formats
from hp_core.engine.precision import check_fp8_attention, check_recipe_zero, compute_dtype_groups, in_compute_dtype, resolve_recipe, split_high_precision_layers, with_recipe
from hp_core.errors import ConfigError, HPError, PluginError, describe
from hp_core.registry import Registry
from hp_core.runtime_options import check_reduce_width
from hp_core.engine.inner_layers import check_switches
from hp_core.specs import HardwareSpec, LayerGroup, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_core.engine.layout_checks import check_pipeline_traits, check_userbuffers_layout, split_layers, validate_layout
from hp_core.engine.stage import StageInputs
from hp_core.costs import LayerContext, LayerCost
from hp_core.schedules import Schedule, ScheduleLayout
from hp_core.types import CensusRecord, CensusSource, LayerKind, Optimizer, Runtime

__all__ = [
    "EvaluatedLayers",
    "PreparedRun",
    "evaluate_groups",
    "evaluate_layers",
    "layer_context",
    "model_kinds",
    "prepare",
    "resolve_runtime",
    "resolve_setting",
    "split_layers",
    "validate_layout",
    "with_sublayers",
]


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


# ----------------------------------------------------------------------------- evaluation


def _evaluate(kind: LayerKind, config: object, context: LayerContext, path: str) -> LayerCost:
    if not isinstance(config, kind.config_type):
        raise ConfigError(path, f"layer kind {kind.name} needs a {kind.config_type.__name__} config, got {type(config).__name__}")
    try:
        if kind.validate is not None:
            kind.validate(config, context)
        cost = kind.evaluate(config, context)
    except HPError:
        raise
    except (Exception, SystemExit) as exc:  # a plugin must not end the command
        raise PluginError(kind.name, f"evaluator raised {type(exc).__name__}: {describe(exc)}") from exc
    if not isinstance(cost, LayerCost):
        raise PluginError(kind.name, f"evaluator must return LayerCost, got {type(cost).__name__}")
    check_switches(kind, cost, getattr(context.sublayer, "registry", None))  # an MTP module's: its layers' too
    return cost


# Costs already evaluated, per registry: a kind's evaluator is a pure function of its config and
# the layer context (hp_core.testing.check_layer_kind checks determinism), so a run prepared again
# (a layout search's phases, potentials, a service answering the same question) reuses them.
# Bounded: the oldest answers go first.
# Keyed by the registry's identity (a registry does not hash) and dropped with the registry.
_SHARED: dict[int, dict] = {}
_SHARED_KEPT = 4096


def _shared(registry: Registry) -> dict:
    found = _SHARED.get(id(registry))
    if found is None:
        found = _SHARED[id(registry)] = {}
        weakref.finalize(registry, _SHARED.pop, id(registry), None)
    return found


class _Evaluations:
    """The answers of one context: each ``(kind, config)`` evaluated once.

    It is also the context's ``sublayer`` callable, so a kind made of other
    kinds' layers (the MTP module) evaluates its nested layer through it and
    shares the body's answer. Answers are shared with every context equal to
    this one under the same registry (:data:`_SHARED`).
    """

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.answers: dict[tuple[str, object], LayerCost] = {}
        self.context: LayerContext | None = None
        self.plain: LayerContext | None = None  # the context without this sublayer: what the shared answers key on

    def cost(self, kind: LayerKind, config: object, path: str) -> LayerCost:
        assert self.context is not None
        key = (kind.name, config)
        try:
            return self.answers[key]
        except KeyError:
            pass
        except TypeError:  # a config that does not hash: evaluated each time
            return _evaluate(kind, config, self.context, path)
        shared = _shared(self.registry)
        wide = (kind.name, config, self.plain)  # not the context itself: its sublayer holds the registry
        cost = shared.get(wide)
        if cost is None:
            cost = _evaluate(kind, config, self.context, path)
            if len(shared) >= _SHARED_KEPT:
                try:
                    del shared[next(iter(shared))]
                except (KeyError, RuntimeError, StopIteration):  # another thread evicted or added first
                    pass
            shared[wide] = cost
        self.answers[key] = cost
        return cost

    def __call__(self, group: LayerGroup) -> LayerCost:
        path = "$.model.layers[].config.layer"
        kind = self.registry.layer_kind(group.kind, f"{path}.kind")
        if kind.placement != "body":
            raise ConfigError(f"{path}.kind", f"a nested layer must be of a body kind, not {kind.name!r}")
        return self.cost(kind, group.config, f"{path}.config")


def with_sublayers(context: LayerContext, registry: Registry) -> LayerContext:
    """The context, able to evaluate nested layer groups (an MTP module's layer) through the registry.

    Within the returned context a kind and config are evaluated once:
    :func:`evaluate_groups` and nested evaluations share the answers.
    """
    evaluations = _Evaluations(registry)
    evaluations.plain = attrs.evolve(context, sublayer=None)
    evaluations.context = attrs.evolve(context, sublayer=evaluations)
    return evaluations.context


def evaluate_groups(kinds: list[LayerKind], groups: Iterable[LayerGroup], context: LayerContext) -> list[LayerCost]:
    """Each group's cost in *context* (one made by :func:`with_sublayers`, whose answers it shares)."""
    evaluations = context.sublayer if isinstance(context.sublayer, _Evaluations) else None
    if evaluations is None:
        return [_evaluate(kind, group.config, context, f"$.model.layers[{i}].config")
                for i, (kind, group) in enumerate(zip(kinds, groups))]
    return [evaluations.cost(kind, group.config, f"$.model.layers[{i}].config")
            for i, (kind, group) in enumerate(zip(kinds, groups))]


def model_kinds(model: ModelSpec, registry: Registry) -> list[LayerKind]:
    """Each group's kind, in model order."""
    return [registry.layer_kind(group.kind, f"$.model.layers[{i}].kind") for i, group in enumerate(model.layers)]


@attrs.frozen
class EvaluatedLayers:
    """A model's layer groups evaluated in one layer context (:func:`evaluate_layers`).

    Attributes:
        kinds: Each group's kind, in model order.
        body_groups: Indices of the groups whose kind is placed ``"body"``.
        body_count: Body layers in all.
        context: The context they were evaluated in (with sublayers).
        formula_costs: Each group's cost as its kind's evaluator states it.
        costs: Each group's cost with its activations as the census measured them where it has a record
            (else the evaluator's), as the precision recipe keeps them (:mod:`hp_core.engine.precision`).
        census: The census source.
        records: The census's records, by kind name.
        exempt: The groups that keep every GEMM in the compute dtype under the recipe
            (:func:`~hp_core.engine.precision.split_high_precision_layers`); none unless the precision keeps layers so.
    """

    kinds: tuple[LayerKind, ...]
    body_groups: tuple[int, ...]
    body_count: int
    context: LayerContext
    formula_costs: tuple[LayerCost, ...]
    costs: tuple[LayerCost, ...]
    census: CensusSource
    records: Mapping[str, CensusRecord]
    exempt: frozenset[int] = frozenset()


def evaluate_layers(
    model: ModelSpec,
    parallel: ParallelSpec,
    *,
    precision: PrecisionSpec,
    attention: str,
    runtime: Runtime,
    registry: Registry,
    census: CensusSource,
    kinds: list[LayerKind] | None = None,
    exempt: frozenset[int] = frozenset(),
) -> EvaluatedLayers:
    """Resolve each group's kind, evaluate every group once and apply the census once.

    Only the layer context of *parallel* matters (``tp cp sp ep etp``, the
    micro-batch size, the sequence length and ``cp_kind``), so a search
    shares one evaluation between every layout with the same context.
    The groups in *exempt* keep every GEMM in the compute dtype
    (:func:`~hp_core.engine.precision.in_compute_dtype`): the recipe leaves them as the census has them.

    Raises:
        ConfigError: An unknown kind, no body layers, or a census record naming a switch its kind lacks.
        PluginError: A kind's evaluator or the census source failed.
    """
    kinds = kinds if kinds is not None else model_kinds(model, registry)
    body_groups = tuple(i for i, kind in enumerate(kinds) if kind.placement == "body")
    body_count = sum(model.layers[i].count for i in body_groups)
    if body_count == 0:
        raise ConfigError("$.model.layers", "the model has no body layers (no kind placed 'body')")
    context = with_sublayers(layer_context(parallel, precision, attention, runtime.vocab_pad_multiple, runtime.traits), registry)
    formula = tuple(evaluate_groups(kinds, model.layers, context))
    records = census_lib.request_records(census, model, kinds, parallel.seq_len, attention, registry=registry, tp=parallel.tp)
    measured = tuple(census_lib.apply_record(cost, records[kind.name], kind, context) if kind.name in records else cost
                     for kind, cost in zip(kinds, formula))
    check_module_formats(precision.module_formats, formula)  # a module named that no layer has (module_formats)
    costs = with_recipe(measured, registry, precision, formula, context.tp > 1 and context.sp)
    if exempt:
        costs = tuple(in_compute_dtype(measured[i]) if i in exempt else cost for i, cost in enumerate(costs))
    return EvaluatedLayers(tuple(kinds), body_groups, body_count, context, formula, costs, census, records,
                           frozenset(exempt))


# ----------------------------------------------------------------------------- the prepared run


@attrs.frozen
class PreparedRun:
    """One model on one layout under one runtime, ready to estimate, time and plan.

    Attributes:
        model: The layer stack (its body groups split where the precision keeps layers in the compute dtype:
            :func:`~hp_core.engine.precision.split_high_precision_layers`).
        parallel: The layout, resolved: its schedule, global batch size and
            ``reshard_after_forward`` (the runtime's default where none was stated) stated.
        registry: Where its kinds and runtime come from.
        runtime: The runtime profile.
        precision: Byte widths (the runtime's unless stated).
        attention: ``"flash"`` or ``"eager"`` (the runtime's unless stated).
        zero: The ZeRO level (the layout's, else the runtime's).
        layers: The groups evaluated, census applied.
        micro_batches: Micro-batches per step.
        chunk_bounds: Per pipeline chunk, its body layers ``(first, end)``, end excluded.
        body_group: The group index of each body layer, in order.
        stage_inputs: What a stage's memory needs beyond its layers.
        optimizer: The optimizer the precision names (from the registry).
    """

    model: ModelSpec
    parallel: ParallelSpec
    registry: Registry = attrs.field(eq=False, repr=False)
    runtime: Runtime = attrs.field(eq=False, repr=False)
    precision: PrecisionSpec
    attention: str
    zero: int
    layers: EvaluatedLayers = attrs.field(eq=False, repr=False)
    micro_batches: int
    chunk_bounds: tuple[tuple[int, int], ...]
    body_group: tuple[int, ...]
    stage_inputs: StageInputs
    optimizer: Optimizer = attrs.field(eq=False, repr=False)
    _resolved: dict = attrs.field(factory=dict, eq=False, repr=False, init=False)
    _timed: dict = attrs.field(factory=dict, eq=False, repr=False, init=False)

    def timed_layer(self, hardware: Any, timing: Any, key: tuple, price: Callable[[], Any]) -> Any:
        """A body layer's time per micro-batch on *hardware* under *timing* (``time_run``'s; *key*: its group and what it
        recomputes), *price* called the first time only: a layer's time reads only the run, the device and the profile,
        so the planner's many plans price a setting once. Kept per device and profile object, with them."""
        found = self._timed.get(ids := (id(hardware), id(timing)))
        if found is None:
            found = self._timed[ids] = (hardware, timing, {})
        if key not in found[2]:
            found[2][key] = price()
        return found[2][key]

    @property
    def kinds(self) -> tuple[LayerKind, ...]:
        return self.layers.kinds

    @property
    def costs(self) -> tuple[LayerCost, ...]:
        return self.layers.costs

    @property
    def body_count(self) -> int:
        return self.layers.body_count

    @property
    def context(self) -> LayerContext:
        return self.layers.context

    @property
    def schedule(self) -> Schedule:
        """The pipeline schedule (the layout's, resolved against the registry)."""
        return self.stage_inputs.schedule

    def stage_chunks(self, stage: int) -> tuple[int, ...]:
        """The chunks pipeline stage *stage* runs, as its schedule says (Megatron-Core's interleaved assignment for 1F1B)."""
        return self.stage_inputs.stage_plan(stage)[0]

    def placed_groups(self, where: str) -> list[int]:
        """The group index of each layer placed *where* (``"first"`` or ``"last"``), one per layer."""
        return [i for i, (kind, group) in enumerate(zip(self.kinds, self.model.layers))
                if kind.placement == where for _ in range(group.count)]

    def settings(self, recompute: RecomputeSpec | tuple[Setting, ...] | None) -> tuple[Setting, ...]:
        """The setting of each body layer under *recompute* (a plan, or one setting per body layer); a ConfigError
        where a range names a layer beyond the model's."""
        count = self.body_count
        if recompute is None or (isinstance(recompute, tuple) and len(recompute) == count):
            return (Setting(),) * count if recompute is None else recompute
        if recompute.layers and max(last for _, last, _ in recompute.layers) >= count:
            raise ConfigError("$.recompute.layers", f"a range names a layer beyond the model's {count} layers (0-{count - 1})")
        return tuple(recompute.setting_of(i) for i in range(count))

    def per_body_layer(self, settings: tuple[Setting, ...], make: Callable[[int, Setting, bool, frozenset[str]], Any]) -> list:
        """One ``make(group, setting, full, switches)`` per distinct (group, setting), repeated for each body layer.

        A run of layers of one group under the same setting object reuses the
        layer before it without a lookup; any other repeat is found by key.
        """
        trial = getattr(settings, "body", None)  # settings that build their list from a base's (potentials' trials)
        return trial(self, make) if trial is not None else self._per_body_layer(settings, make, {})

    def _per_body_layer(self, settings: tuple[Setting, ...], make: Callable, cache: dict) -> list:  # fills cache
        body: list = []
        previous: tuple[int, Setting, Any] | None = None
        for group, setting in zip(self.body_group, settings):
            if previous is not None and previous[0] == group and previous[1] is setting:
                body.append(previous[2])
                continue
            key = (group, setting)
            made = cache.get(key)
            if made is None:
                made = cache[key] = make(group, setting, *self.resolve(group, setting))
            body.append(made)
            previous = (group, setting, made)
        return body

    def resolve(self, group: int, setting: Setting) -> tuple[bool, frozenset[str]]:
        """``(full, recomputed switches)`` of *setting* on a body group, with what the trainer always recomputes.

        Megatron-LM re-gathers sequence-parallel inputs whatever the plan says
        (the runtime's ``implicit_recompute``).
        """
        key = (group, setting)
        found = self._resolved.get(key)
        if found is None:
            kind = self.kinds[group]
            full, switches = resolve_setting(setting, kind, "$.recompute")
            found = self._resolved[key] = (full, switches | (self.runtime.implicit_recompute & frozenset(kind.switches)))
        return found


def resolve_runtime(
    registry: Registry, runtime: str | Runtime, precision: PrecisionSpec | None, attention: str | None
) -> tuple[Runtime, PrecisionSpec, str]:
    """The runtime profile and the precision and attention it gives where the run states none.

    *runtime*: a profile's name, or a :class:`Runtime` with per-run options applied (:func:`~hp_core.runtime_options.apply_options`).
    """
    profile = registry.runtime(runtime)  # a reduce width it cannot run is refused (check_reduce_width)
    return (profile, check_reduce_width(profile, precision if precision is not None else profile.precision),
            attention if attention is not None else profile.attention)


def prepare(
    model: ModelSpec,
    parallel: ParallelSpec,
    *,
    registry: Registry,
    runtime: str | Runtime = "generic",
    precision: PrecisionSpec | None = None,
    census: str | CensusSource = "formulas",
    attention: str | None = None,
    layers: EvaluatedLayers | None = None,
) -> PreparedRun:
    """The run of *model* on *parallel*, prepared once (module docstring).

    Args:
        model: The layer stack.
        parallel: The layout.
        registry: Layer kinds, runtimes and census sources.
        runtime: The runtime profile's name, or the profile with per-run options
            applied (:func:`hp_core.runtime_options.apply_options`); it supplies the defaults below.
        precision: Byte widths; the runtime's when ``None``.
        census: The census source's name (or a census file's path), or the source itself.
        attention: ``"flash"`` or ``"eager"``; the runtime's when ``None``.
        layers: The groups already evaluated in this layout's layer context
            (:func:`evaluate_layers`, as a search shares them); evaluated here when ``None``. Where the precision
            keeps layers in the compute dtype, of the model as
            :func:`~hp_core.engine.precision.split_high_precision_layers` splits it, with its ``exempt`` groups.

    Raises:
        ConfigError: An invalid layout or name, an optimizer the registry does not have included, a runtime trait not
            priced under its ``pp``, a recipe running FP8 attention under a runtime whose attention kernel runs none
            (``Runtime.fp8_attention_refusal``) or at a ZeRO level it refuses (one line, with the field path).
        PluginError: A plugin's evaluator or census source failed.
    """
    profile, precision, attention = resolve_runtime(registry, runtime, precision, attention)
    check_pipeline_traits(parallel, profile.traits)  # a trait not priced under pp > 1 (layout_checks)
    check_userbuffers_layout(parallel, None if profile.timing is None else profile.timing.schedule)  # TE userbuffers need SP
    recipe = resolve_recipe(registry, precision)
    check_fp8_attention(recipe, profile)  # FP8 attention the runtime's kernel does not run
    optimizer = resolve_optimizer(registry, precision)
    zero = parallel.zero if parallel.zero is not None else profile.zero
    check_recipe_zero(recipe, zero)  # a recipe keeping its parameters: ZeRO 1 up; through the gradient buffer: 1 and 2
    if precision.high_precision_layers_at_start or precision.high_precision_layers_at_end:
        kinds = model_kinds(model, registry)
        model, exempt = split_high_precision_layers(model, [k.placement == "body" for k in kinds], precision,
                                                    recipe, parallel.pp)
        if layers is not None and (layers.exempt != exempt or len(layers.costs) != len(model.layers)):
            # A shared evaluation (a search's) must be of the split model: evaluate_layers(split model, exempt=...).
            raise ConfigError("$.precision.high_precision_layers_at_start", "layers kept in the compute dtype need the "
                              "model's groups split before they are evaluated; this shared evaluation is not of the "
                              "split model")
    else:
        exempt = frozenset()
    # Kinds the runtime runs wholly in the compute dtype under the recipe (Megatron-Core's MTP module under FP4).
    kept = compute_dtype_groups(model, recipe, profile)
    if kept - exempt:
        if layers is not None and layers.exempt != exempt | kept:
            raise ConfigError("$.precision.recipe", "a shared evaluation must keep the runtime's compute-dtype kinds "
                              "(Runtime.compute_dtype_kinds) as prepare does; this one does not")
        exempt = exempt | kept
    if layers is None:
        source = census if isinstance(census, CensusSource) else census_lib.resolve_source(registry, census)
        layers = evaluate_layers(model, parallel, precision=precision, attention=attention, runtime=profile,
                                 registry=registry, census=source, exempt=exempt)
    schedule = registry.schedule(parallel.resolved_schedule)
    micro_batches = validate_layout(parallel, layers.body_count, schedule)
    # The layout as the run resolves it: its schedule, global batch size and resharding after forward stated (the
    # last the runtime's default where the layout states none: Runtime.reshards_after_forward).
    parallel = attrs.evolve(parallel, schedule=schedule.name,
                            global_batch_size=micro_batches * parallel.micro_batch_size * parallel.dp,
                            reshard_after_forward=profile.reshards_after_forward(parallel.reshard_after_forward, parallel.pp))
    bounds, start = [], 0
    for count in split_layers(layers.body_count, parallel):
        bounds.append((start, start + count))
        start += count
    plans = schedule_lib.check_layout(schedule, shape := ScheduleLayout(parallel.pp, parallel.vpp, micro_batches))  # every stage, once
    body_group = tuple(i for i in layers.body_groups for _ in range(model.layers[i].count))
    inputs = StageInputs(
        parallel, zero, precision, micro_batches, schedule, profile.overhead_bytes,
        profile.deferred_grad_reduction, profile.expert_overhead_bytes, profile.dummy_weight_gradients,
        optimizer=optimizer, recipe=recipe, peak_points=profile.peak_points,
        blas=profile.blas_workspaces.on(None) if profile.blas_workspaces else None)
    inputs.keep_plans(shape, plans)  # the stages are not asked again
    return PreparedRun(model, parallel, registry, profile, precision, attention, zero, layers, micro_batches,
                       tuple(bounds), body_group, inputs, optimizer)
