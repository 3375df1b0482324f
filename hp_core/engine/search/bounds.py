"""The layout search's first phase's bounds: layer evaluations shared between layouts, and what they bound.

:class:`_Bounder` evaluates the model's groups once per ``(tp, cp, ep, etp,
mbs)`` context (through a :class:`~hp_core.engine.search.memo.Memo`), and
from them bounds a candidate: the heaviest stage's static memory, the first
stage's static memory plus what it keeps and works with fully recomputed,
and a lower bound on the step-time bound (:func:`_time_bound`): the pipeline
of the time of the body group with the most layers alone
(:meth:`_Bounder.lower_bound`). The enumeration that asks for them is
:mod:`~hp_core.engine.search.first_phase`; the second phase prices the
step-time bound itself only for the candidates it reaches. See
:mod:`hp_core.engine.search` for the whole method and why it is exact.
"""


from __future__ import annotations

from typing import Any, Iterable

import attrs

from hp_core.costs import LayerContext, LayerCost
from hp_core.engine import census as census_lib
from hp_core.engine.optimizer import OptimizerLoad, group_states, layer_load, master_bytes, resolve_optimizer
from hp_core.engine.precision import check_fp8_attention, check_fp8_attention_device, recipe_prices_on, resolve_recipe
from hp_core.engine.module_formats import check_recipes_on_device
from hp_core.engine.prepare import EvaluatedLayers, evaluate_layers, layer_context, model_kinds, resolve_runtime
from hp_core.engine.schedule import _call, awaiting_weight_gradient, stage_plan
from hp_core.engine.search.layouts import Layout, _Job, _reason_of
from hp_core.engine.search.memo import Memo, memo_formula_costs
from hp_core.engine.search.prepared_costs import PreparedCosts
from hp_core.engine.inner_layers import checkpointed_layer
from hp_core.engine.stage import PlacedLayer, static_bytes
from hp_core.engine.timing import LayerPricer, layer_pricer
from hp_core.errors import ConfigError
from hp_core.schedules import Schedule, ScheduleLayout


# One pipeline stage's layers as the first phase sees them: (group index, layers of it) pairs and the
# kinds on the stage (a tied weight whose owner is on the stage is counted once, as plan_stage does).
_Composition = tuple[tuple[tuple[int, int], ...], frozenset[str]]

# A lower bound on a time bound is lowered by this share (a billionth), so that rounding never puts it
# above the bound: both are computed in floating point, the bound with up to a few units in the last
# place of its stages' total.
_LOWER_MARGIN = 1 - 1e-9


@attrs.frozen(slots=True)
class _Context:
    """The model's groups in one ``(tp, cp, ep, etp, mbs)`` context, as the first phase keeps them.

    Attributes:
        costs: Each group's cost (the census's where it has records).
        kept_full: Bytes each group's layer keeps fully recomputed (body layers; others as they are).
        working_full: Each group's backward working set, likewise.
        priced_seconds: Seconds per micro-batch with nothing recomputed of the group
            :attr:`_Bounder.priced` names.
    """

    costs: tuple[LayerCost, ...]
    kept_full: tuple[int, ...]
    working_full: tuple[int, ...]
    priced_seconds: float


@attrs.frozen
class _Layers:
    """The model's groups in one context: costs (the census's where it has records), seconds per
    micro-batch with nothing recomputed, and, fully recomputed, bytes kept and backward working set."""

    costs: list[LayerCost]
    seconds: list[float]
    kept_full: list[int]
    working_full: list[int]


class _Bounder:
    """The first phase's cheap bounds, from layer evaluations shared by every layout that shares them.

    A group's cost and its per-micro-batch time depend on the layout only
    through ``(tp, cp, ep, etp, mbs)`` (the layer context and the links its
    collectives cross), so each is evaluated once per such tuple
    (:meth:`context`, through a :class:`~hp_core.engine.search.memo.Memo`
    that shares a kind's answer between contexts agreeing on what its
    evaluator read), and priced with the same
    :class:`~hp_core.engine.timing.LayerPricer` that
    :func:`~hp_core.api.step_time` uses. A stage is a composition of groups;
    stages of the same composition (the middle stages of a pipeline) are
    bounded once.

    The first phase keeps a context only while it bounds the layouts of one
    ``(cp, tp)`` (:meth:`forget`): no other shares it.
    """

    def __init__(self, job: _Job) -> None:
        registry = job.registry
        self.job = job
        self.rt, self.precision, self.attention = resolve_runtime(registry, job.runtime, job.precision, None)
        self.optimizer = resolve_optimizer(registry, self.precision)
        self.recipe = resolve_recipe(registry, self.precision)
        check_fp8_attention(self.recipe, self.rt)  # FP8 attention the runtime's kernel runs none of: no layout runs it
        check_recipes_on_device(self.recipe, job.hardware)  # a recipe (or a module format) the device does not run
        # The model as prepare splits it at the layers kept in the compute dtype, and the memo's costs as prepare
        # evaluates them (the recipe applied, the split-off groups in the compute dtype): every bound below is of the
        # layers as the estimate has them. What no layout runs is refused here (PreparedCosts).
        self.prepared = PreparedCosts(job.model, model_kinds(job.model, registry), self.precision, self.recipe, self.rt)
        self._device_checked = False  # check_fp8_attention_device, asked of the first layout's costs (_context)
        model = self.model = self.prepared.model
        self.exempt, self.kept_layers = self.prepared.exempt, self.prepared.kept_layers
        # A recipe storing the parameters in its format holds under param_bytes of them: bound them at 1 byte
        # (the weight copies it adds are not counted here, so the static bound stays below plan_stage's). A layer
        # kept in the compute dtype (exempt) holds no weight copy and its weights at param_bytes (plan_stage's
        # quantized elements leave it out): at least what this bound counts of it, so the bound holds with them.
        self.static_precision = (attrs.evolve(self.precision, param_bytes=1) if self.recipe.stores_weights
                                 else self.precision)
        self.master_bytes = master_bytes(self.optimizer, self.precision)
        self.kinds = model_kinds(model, registry)
        self.body = [(i, g.count) for i, (k, g) in enumerate(zip(self.kinds, model.layers)) if k.placement == "body"]
        self.first = [(i, g.count) for i, (k, g) in enumerate(zip(self.kinds, model.layers)) if k.placement == "first"]
        self.last = [(i, g.count) for i, (k, g) in enumerate(zip(self.kinds, model.layers)) if k.placement == "last"]
        self.body_count = sum(n for _, n in self.body)
        self.limit = job.hardware.memory_bytes - job.reserve_bytes
        self.census = census_lib.resolve_source(registry, job.census)
        # What step time recomputes of each group with nothing recomputed: body layers what the trainer
        # always recomputes.
        self.implicit = [self.rt.implicit_recompute & frozenset(k.switches) if k.placement == "body" else frozenset()
                         for k in self.kinds]
        # The group the first phase prices for its lower bound on the time bound: the body group with the
        # most layers (the first such); -1 without body layers.
        self.priced = max(self.body, key=lambda item: item[1])[0] if self.body else -1
        self.memo = Memo(registry)
        # Kept while one (cp, tp) is bounded (forget):
        self._contexts: dict[tuple[int, ...], _Context | str] = {}
        self._templates: dict[tuple[int, int], LayerContext] = {}
        self._placed: dict[tuple[int, int], tuple[int, int]] = {}  # (group, id(cost)): fully recomputed (kept, working)
        self._pricers: dict[tuple[int, ...], LayerPricer] = {}
        self._elements: dict[tuple[Any, ...], dict[str, OptimizerLoad]] = {}
        self._stage: dict[tuple[Any, ...], tuple[dict[str, int], dict[str, Any]]] = {}
        self._stages: dict[tuple[Any, ...], tuple[Any, tuple[tuple[dict[str, int], dict[str, Any], dict[str, Any]], ...]]] = {}
        # Kept for the whole search (a few per pipeline):
        self._compositions: dict[tuple[Any, ...], tuple[tuple[_Composition, int], ...]] = {}
        self._first_stage: dict[tuple[Any, ...], tuple[tuple[_Composition, int], ...]] = {}
        self._last_chunk: dict[tuple[Any, ...], tuple[tuple[int, int], ...]] = {}
        self._chunks: dict[tuple[Any, ...], list[list[tuple[int, int]]]] = {}  # the first stage's chunks
        self._priced_layers: dict[tuple[Any, ...], tuple[int, int]] = {}
        self._weights: dict[tuple[Any, ...], tuple[tuple[int, int], ...]] = {}
        self._fills: dict[tuple[int, int], tuple[float, int]] = {}
        self._refusals: dict[tuple[int, int, int], str | None] = {}

    # ------------------------------------------------------------------ the schedule

    def schedule(self, vpp: int) -> Schedule:
        """The schedule searched (the job's), or by *vpp*: ``1f1b``, ``interleaved_1f1b`` above 1."""
        name = self.job.schedule or ("1f1b" if vpp == 1 else "interleaved_1f1b")
        return self.job.registry.schedule(name, "--schedules")

    def fill(self, pp: int, vpp: int) -> tuple[float, int]:
        """``(share, copies)``: the schedule's ``fill_share`` (0 where it states none: the slowest stage's
        micro-batches alone bound any pipeline) and its model copies."""
        found = self._fills.get((pp, vpp))
        if found is None:
            schedule = self.schedule(vpp)
            share = 0.0 if schedule.fill_share is None else _call(schedule, "fill_share", schedule.fill_share,
                                                                    ScheduleLayout(pp, vpp, 1))
            found = self._fills[(pp, vpp)] = (share, schedule.model_copies)
        return found

    def refusal(self, pp: int, vpp: int, micro_batches: int) -> str | None:
        """Why the schedule cannot run ``(pp, vpp, micro_batches)`` (a rejection reason), or ``None``."""
        key = (pp, vpp, micro_batches)
        if key not in self._refusals:
            schedule, reason = self.schedule(vpp), None
            if schedule.check is not None:
                try:
                    _call(schedule, "check", schedule.check, ScheduleLayout(pp, vpp, micro_batches))
                except ConfigError as error:
                    reason = _reason_of(error)
            self._refusals[key] = reason
        return self._refusals[key]

    # ------------------------------------------------------------------ evaluations

    def evaluated(self, layout: Layout, micro_batch_size: int | None = None) -> EvaluatedLayers:
        """The groups evaluated in the layout's context (at *micro_batch_size* where given), census applied
        (:func:`~hp_core.engine.prepare.evaluate_layers`, no memo).

        Raises:
            ConfigError: The layers refuse the layout.
        """
        if micro_batch_size is not None and micro_batch_size != layout.micro_batch_size:
            layout = attrs.evolve(layout, micro_batch_size=micro_batch_size)
        job = self.job
        return evaluate_layers(self.model, layout.parallel(job.seq_len, job.global_batch_size), precision=self.precision,
                               attention=self.attention, runtime=self.rt, registry=job.registry, census=self.census,
                               kinds=self.kinds, exempt=self.exempt)

    def pricer(self, layout: Layout) -> LayerPricer:
        """The layer pricer of the layout's ``(tp, cp, ep, etp)``: a layer's time reads no other degree."""
        key = (layout.tp, layout.cp, layout.ep, layout.etp)
        found = self._pricers.get(key)
        if found is None:
            job = self.job
            name = self.rt.timing.collective_model
            found = self._pricers[key] = layer_pricer(layout.parallel(job.seq_len, job.global_batch_size),
                                                      hardware=job.hardware, timing=self.rt.timing,
                                                      precision=self.precision, attention=self.attention,
                                                      recipe=self.recipe,
                                                      collectives=job.registry.collective_model(name) if name else None)
        return found

    def seconds(self, layout: Layout, costs: Iterable[LayerCost], context: LayerContext,
                groups: Iterable[int] | None = None) -> list[float]:
        """Each group's seconds per micro-batch with nothing recomputed, as step time prices them; ``0.0`` for
        a group not in *groups* (every group when ``None``)."""
        pricer = self.pricer(layout)
        costs = tuple(costs)
        seconds = [0.0] * len(self.kinds)
        for i in range(len(self.kinds)) if groups is None else groups:
            seconds[i] = pricer.price(costs[i], self.model.layers[i].config, self.kinds[i], context,
                                      full=False, recomputed=self.implicit[i]).micro_batch_seconds
        return seconds

    def _placed_full(self, i: int, cost: LayerCost) -> tuple[int, int]:
        """What group *i*'s layer keeps and works with, as the estimate places it fully recomputed
        (:meth:`~hp_core.engine.stage.PlacedLayer.make`: body layers fully recomputed, the others as they are, or
        under their own whole checkpoint where the runtime's recompute reaches them: inner_layers.checkpointed_whole)."""
        kind = self.kinds[i]
        placed = (checkpointed_layer(kind.name, cost, kind.placement) if kind.placement != "body"
                  and cost.checkpoint is not None and self.rt.inner_recompute
                  else PlacedLayer.make(kind.name, cost, kind.placement == "body", frozenset(), "full"))
        return placed.kept_bytes, placed.backward_working_bytes

    def layers(self, layout: Layout, micro_batch_size: int | None = None) -> _Layers | str:
        """Each group's cost and per-micro-batch seconds (nothing recomputed) in the layout's context, or why it is refused.

        Evaluated anew (:func:`~hp_core.engine.prepare.evaluate_layers`), every group priced; not kept.

        Args:
            micro_batch_size: The size to evaluate at instead of the layout's.
        """
        try:
            layers = self.evaluated(layout, micro_batch_size)
        except ConfigError as exc:
            return _reason_of(exc)
        full = [self._placed_full(i, cost) for i, cost in enumerate(layers.costs)]
        return _Layers(list(layers.costs), self.seconds(layout, layers.costs, layers.context),
                       [kept for kept, _ in full], [working for _, working in full])

    def context(self, layout: Layout, micro_batch_size: int) -> _Context | str:
        """The first phase's view of the groups in the layout's context at *micro_batch_size*, or why it is refused.

        Evaluated through the memo (the costs
        :func:`~hp_core.engine.prepare.evaluate_layers` answers), the group
        :attr:`priced` names priced; kept until :meth:`forget`.
        """
        key = (layout.tp, layout.cp, layout.ep, layout.etp, micro_batch_size)
        found = self._contexts.get(key)
        if found is None:
            job = self.job
            template = self._templates.get((layout.tp, layout.cp))
            if template is None:
                template = self._templates[(layout.tp, layout.cp)] = layer_context(
                    layout.parallel(job.seq_len, job.global_batch_size), self.precision, self.attention,
                    self.rt.vocab_pad_multiple, self.rt.traits)
            try:
                # layer_context of the layout at this size: the layout's ep, etp and size in the (tp, cp) template.
                formula, costs, context = memo_formula_costs(self.memo, self.model, self.kinds, template, self.census,
                                                             self.attention, ep=layout.ep, etp=layout.etp,
                                                             micro_batch_size=micro_batch_size)
            except ConfigError as exc:
                found = _reason_of(exc)
            else:
                # As prepare evaluates them: a quantized kept input keeps less than the compute dtype (so does the
                # working set fully recomputed with it), and a layer kept in bf16 keeps the compute dtype and runs
                # its GEMMs at the bf16 rate; bounds taken from the memo's costs alone could exceed the estimate's.
                costs = self.prepared.costs(formula, costs, context.tp > 1 and context.sp)
                # An FP8 attention core the device runs no kernel for (on Hopper a head dim other than 128) is the
                # recipe's, no layout's: the layers' head dims are the same in every layout, so asked once.
                if not self._device_checked:
                    check_fp8_attention_device(self.recipe, (c.work for c in costs), job.hardware.architecture,
                                               job.hardware.name, recipe_prices_on(job.registry, job.hardware, self.rt.timing))
                    self._device_checked = True
                full = []
                for i, cost in enumerate(costs):
                    # The costs are held by the memo and the contexts as long as this entry (both go in
                    # forget): their ids are not reused.
                    placed = self._placed.get((i, id(cost)))
                    if placed is None:
                        placed = self._placed[(i, id(cost))] = self._placed_full(i, cost)
                    full.append(placed)
                priced = self.priced
                seconds = self.pricer(layout).price(costs[priced], self.model.layers[priced].config, self.kinds[priced],
                                                    context, full=False, recomputed=self.implicit[priced])
                found = _Context(costs, tuple(kept for kept, _ in full), tuple(working for _, working in full),
                                 seconds.micro_batch_seconds)
            self._contexts[key] = found
        return found

    def forget(self) -> None:
        """Drop the contexts, evaluations and pricers kept (the first phase, between two ``(cp, tp)``)."""
        self._contexts.clear()
        self.prepared.forget()
        self._templates.clear()
        self._placed.clear()
        self._pricers.clear()
        self._elements.clear()
        self._stages.clear()
        self._stage.clear()
        self.memo.clear()

    # ------------------------------------------------------------------ pipelines

    def compositions(self, pp: int, vpp: int, split: tuple[int, ...] | None) -> tuple[tuple[_Composition, int], ...]:
        """The pipeline's distinct stage compositions with how many stages have each."""
        found = self._compositions.get((pp, vpp, split))
        if found is not None:
            return found
        chunks = pp * vpp
        counts = list(split) if split is not None else [self.body_count // chunks] * chunks
        # Body layer index ranges of the groups, in order.
        segments, start = [], 0
        for i, n in self.body:
            segments.append((i, start, start + n))
            start += n
        stages: dict[_Composition, int] = {}
        lo = 0
        per_chunk = []
        for count in counts:
            hi = lo + count
            per_chunk.append([(i, min(hi, b) - max(lo, a)) for i, a, b in segments if min(hi, b) > max(lo, a)])
            lo = hi
        per_chunk[0] = self.first + per_chunk[0]
        per_chunk[-1] = per_chunk[-1] + self.last
        schedule = self.schedule(vpp)
        shape = ScheduleLayout(pp, vpp, 1)  # which chunks a stage runs does not depend on the micro-batches
        assignment = [tuple(_call(schedule, "stage_chunks", schedule.stage_chunks, shape, stage)) for stage in range(pp)]
        for stage in range(pp):
            held: dict[int, int] = {}
            for c in assignment[stage]:
                for i, n in per_chunk[c]:
                    held[i] = held.get(i, 0) + n
            owners = frozenset(self.kinds[i].name for i in held)
            composition = (tuple(sorted(held.items())), owners)
            stages[composition] = stages.get(composition, 0) + 1
        found = self._compositions[(pp, vpp, split)] = tuple(stages.items())
        first = self._chunks[(pp, vpp, split)] = [per_chunk[c] for c in assignment[0]]
        held = {}
        for chunk in first:
            for i, n in chunk:
                held[i] = held.get(i, 0) + n
        self._first_stage[(pp, vpp, split)] = (((tuple(sorted(held.items())), frozenset(self.kinds[i].name for i in held)), 1),)
        # The first backward walks the stage's last chunk from the top.
        self._last_chunk[(pp, vpp, split)] = tuple(reversed(first[-1]))
        # Layers of the priced group: on the stage with the most, and on all stages.
        layers = [(dict(held_).get(self.priced, 0), count) for (held_, _), count in found]
        self._priced_layers[(pp, vpp, split)] = (max(n for n, _ in layers), sum(n * count for n, count in layers))
        return found

    def _stage_elements(self, layout: Layout, costs: list[LayerCost] | tuple[LayerCost, ...],
                        held: tuple[tuple[int, int], ...], owners: frozenset[str]) -> tuple[dict[str, int], dict[str, Any], dict[str, Any]]:
        """Parameter elements one rank of a stage holds, the optimizer's state bytes of them and frozen bytes, by group.

        A layer's (:func:`~hp_core.engine.optimizer.layer_load`: its elements as
        layer_elements counts them, and what the optimizer keeps of them) is
        kept per ``(tp, cp, ep, etp)``, group and kinds on the stage, from the
        first costs asked with them: parameters do not depend on the
        micro-batch size. The stage's states are added exactly
        (:func:`~hp_core.engine.optimizer.group_states`), as plan_stage adds them.
        """
        stage = (layout.tp, layout.cp, layout.ep, layout.etp, held, owners)
        found = self._stage.get(stage)
        if found is not None:
            return found
        elements: dict[str, int] = {}
        parts: dict[str, list[tuple[float, int]]] = {}
        frozen: dict[str, Any] = {}
        for i, n in held:
            key = (layout.tp, layout.cp, layout.ep, layout.etp, i, owners)
            loads = self._elements.get(key)
            if loads is None:
                loads = self._elements[key] = layer_load(costs[i], self.kinds[i].name, layout.tp, layout.ep, layout.etp,
                                                         owners, self.optimizer, self.precision)
            for group, load in loads.items():
                elements[group] = elements.get(group, 0) + n * load.elements
                parts.setdefault(group, []).append((load.state_bytes, n))
                if load.frozen_elements:
                    frozen[group] = frozen.get(group, 0) + n * load.frozen_bytes
        found = self._stage[stage] = (elements, group_states(parts), frozen)
        return found

    def static_bytes(self, layout: Layout, costs: list[LayerCost] | tuple[LayerCost, ...],
                     compositions: tuple[tuple[_Composition, int], ...], zero: int, last_backward: bool = True) -> int:
        """The heaviest stage's parameters, gradients, master copies and optimizer states, as plan_stage counts them.

        Args:
            last_backward: Also count plan_stage's ``last_backward`` point: a
                runtime that defers its gradient reduction holds whole gradients
                there from ZeRO 2, and the larger of the two is the stage's static
                memory. ``False``: the end of warm-up's alone.
        """
        # The stages' elements and states, kept for the layout's other ZeRO levels.
        key = (layout.tp, layout.cp, layout.ep, layout.etp, id(compositions))
        cached = self._stages.get(key)
        if cached is not None and cached[0] is compositions:
            stages = cached[1]
        else:
            stages = tuple(self._stage_elements(layout, costs, held, owners) for (held, owners), _ in compositions)
            self._stages[key] = (compositions, stages)
        whole = last_backward and self.rt.deferred_grad_reduction and zero >= 2
        heaviest = 0
        dense_degree = layout.dp * layout.cp
        expert_degree = (layout.dp * layout.cp * layout.tp) // (layout.ep * layout.etp)
        for elements, states, frozen in stages:
            heaviest = max(heaviest, sum(static_bytes(elements, states, self.static_precision, self.master_bytes, zero,
                                                      dense_degree, expert_degree, frozen_bytes=frozen)))
            if whole:
                heaviest = max(heaviest, sum(static_bytes(elements, states, self.static_precision, self.master_bytes, zero,
                                                          dense_degree, expert_degree, True, frozen)))
        return heaviest

    def first_stage_static(self, layout: Layout, costs: list[LayerCost] | tuple[LayerCost, ...], zero: int) -> int:
        """The first stage's parameters, gradients, master copies and optimizer states at the end of warm-up."""
        key = (layout.pp, layout.vpp, layout.layers_per_stage)
        if key not in self._first_stage:
            self.compositions(*key)
        return self.static_bytes(layout, costs, self._first_stage[key], zero, last_backward=False)

    def first_stage_activations(self, layout: Layout, layers: _Layers | _Context, micro_batches: int) -> tuple[int, int]:
        """What the first stage keeps, and works with, when every body layer is fully recomputed: ``(kept, working)``.

        plan_stage's activations (micro-batches in flight per chunk times what
        each layer keeps) and the working set of its first backward, which
        walks the stage's last chunk from the top (of equal layers in a row the
        top one holds the most). Added to :meth:`first_stage_static`, a lower
        bound on the first stage's peak under any plan: every body layer fully
        recomputed keeps the least any setting keeps, and what a layer keeps
        plus its backward working set is the same for every setting
        (docs/recompute.md); the stage's buffers and the runtime's overhead are
        left out.
        """
        split = (layout.pp, layout.vpp, layout.layers_per_stage)
        weights = self._weights.get((*split, micro_batches))
        if weights is None:
            if split not in self._chunks:
                self.compositions(*split)
            schedule, shape = self.schedule(layout.vpp), ScheduleLayout(layout.pp, layout.vpp, micro_batches)
            in_flight = stage_plan(schedule, shape, 0)[1]
            # Layers of each group kept: micro-batches in flight per chunk times its layers there, less those
            # awaiting W (they keep W's tensors, maybe fewer bytes: left out of the bound).
            whole = [n - w for n, w in zip(in_flight, awaiting_weight_gradient(schedule, shape, 0, in_flight))]
            held: dict[int, int] = {}
            for count, chunk in zip(whole, self._chunks[split]):
                for i, n in chunk:
                    held[i] = held.get(i, 0) + count * n
            weights = self._weights[(*split, micro_batches)] = tuple((i, w) for i, w in held.items() if w)
        kept, backward = layers.kept_full, layers.working_full
        total = 0
        for i, w in weights:
            total += w * kept[i]
        working = freed = 0
        for i, n in self._last_chunk[split]:
            working = max(working, backward[i] - freed)
            freed += n * kept[i]
        return total, working

    def lower_bound(self, layout: Layout, priced_seconds: float, micro_batches: int) -> float:
        """A lower bound on :func:`_time_bound`: the pipeline of the priced group's layers alone, less :data:`_LOWER_MARGIN`.

        The pipeline time ``m * slowest + (total - slowest) / vpp`` does not
        fall as a stage's time grows (``m >= 1 >= 1 / vpp``), and every layer
        time is non-negative, so leaving out every group but one bounds it from
        below.
        """
        split = (layout.pp, layout.vpp, layout.layers_per_stage)
        if split not in self._priced_layers:
            self.compositions(*split)
        slowest, total = self._priced_layers[split]
        share, copies = self.fill(layout.pp, layout.vpp)
        return priced_seconds * (micro_batches * slowest + (total - slowest) * share) / copies * _LOWER_MARGIN


def _time_bound(seconds: list[float] | tuple[float, ...], compositions: tuple[tuple[_Composition, int], ...],
                micro_batches: int, fill: tuple[float, int]) -> float:
    """A lower bound on the step time with nothing recomputed: the pipeline of the stages' layer times alone.

    :func:`~hp_core.engine.timing.pipeline_seconds` of each stage's layers (its
    pipeline sends, the data-parallel reduction and the optimizer step left
    out, all non-negative; the pipeline time does not fall as a stage's time
    grows). *fill*: the schedule's ``(share, copies)`` (:meth:`_Bounder.fill`).
    """
    slowest = total = 0.0
    for (held, _), stages in compositions:
        t = 0.0
        for i, n in held:
            t += n * seconds[i]
        slowest = max(slowest, t)
        total += stages * t
    share, copies = fill
    return (micro_batches * slowest + (total - slowest) * share) / copies
