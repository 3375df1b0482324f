"""The recompute planner: per stage, the fastest settings whose peak fits the device (docs/recompute.md).

:func:`plan_run` prices every candidate setting of each body layer group
(:mod:`hp_core.engine.recompute.profile`), hands each stage to the exact
per-stage solver (:func:`hp_core.engine.recompute.solver.solve_stage`, whose
docstring states the problem and why the search equals brute force), and
records the whole-model plan with its estimate and step time
(:class:`RecomputePlan`). The stage's time per micro-batch is the sum of its
layers' times (:mod:`hp_core.engine.timing`) and the step is monotone in every
stage's time, so the fastest plan of each stage gives the fastest step.

Placed layers. A layer placed first or last is fixed in its stage, but what it recomputes may follow the body's
settings (the MTP module under the ``megatron`` runtime: the union of its inner layers' switches as the body layers of
their kinds recompute them, its own whole checkpoint where every body layer is recomputed fully;
:mod:`hp_core.engine.inner_layers`), which no stage's search decides alone. The planner enumerates the states such a
layer can be in (:mod:`hp_core.engine.recompute.coupled`), searches every stage under each with the body restricted
to the settings that keep it, prices each plan with :func:`estimate_run` and :func:`time_run`, and keeps the fastest
that fits; where a state's plan reaches less than the state, the plans reaching it exactly are searched by branch and
bound (``covered``). States go in order of a lower bound, until one is no faster than the best plan. A stage whose
options and placed layers are as under an earlier search is not searched again; a stage holding no such placed layer
whose plan over every setting runs each layer at its fastest and fits has that plan under every state whose settings
keep those fastest ones first (the same layers at the same settings fit, and none is faster), so it is taken without
solving, and the plan kept is searched again with every stage solved for its stages' records (``search_nodes``). The printed
peak and step time are always :func:`estimate_run` and :func:`time_run` of the plan.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import attrs

from hp_core.engine.estimate import estimate_run, precision_provenance
from hp_core.engine.inner_layers import PlacedState, placed_layer, placed_recompute
from hp_core.engine.precision import on_device
from hp_core.engine.prepare import PreparedRun
from hp_core.engine.recompute.coupled import (WHOLE, base, coupled_states, coupling, interchangeable, keeps, keeps_named,
                                              named, placed_under)
from hp_core.engine.recompute.layout import compact
from hp_core.engine.recompute.profile import SettingCost, SwitchProfile, candidate_settings, switch_profile
from hp_core.engine.recompute.solver import LayerOption, StageSolution, VariableLayer, pareto_front, solve_stage
from hp_core.engine.stage import PlacedLayer
from hp_core.errors import ConfigError
from hp_core.results import Estimate, StageEstimate
from hp_core.specs import HardwareSpec, RecomputeSpec, Setting
from hp_core.engine.timing import StepTime, layer_pricer, time_run

__all__ = ["PlanResult", "RecomputePlan", "StagePlan", "plan_run"]

_COVER_SEARCHES = 2000  # searches of the plans reaching one state exactly before it is reported unproven (plan_run)


# ----------------------------------------------------------------------------- the model's plan


@attrs.frozen
class StagePlan:
    """One stage's recompute plan.

    Attributes:
        index: The stage.
        layers: Its body layer indices, chunk by chunk.
        settings: The setting of each of them.
        ranges: The same as ``(first, last, setting)`` runs of consecutive layers, inclusive.
        fits: Whether its peak fits the limit.
        peak_bytes: Its peak under the plan (:func:`hp_core.api.estimate`'s).
        limit_bytes: Device memory less the reserve.
        shortfall_bytes: When it does not fit, how far the least peak any plan reaches exceeds the limit.
        binding_point: The peak point that is highest (``warmup_end`` or ``last_backward``).
        reason: Why the plan is what it is, in one sentence.
        micro_batch_seconds: The stage's time per micro-batch under the plan (:func:`hp_core.engine.timing.time_run`'s).
        search_nodes: Branch-and-bound nodes visited.
        estimate: The stage's estimate under the plan.
    """

    index: int
    layers: tuple[int, ...]
    settings: tuple[Setting, ...]
    ranges: tuple[tuple[int, int, Setting], ...]
    fits: bool
    peak_bytes: int
    limit_bytes: int
    shortfall_bytes: int
    binding_point: str
    reason: str
    micro_batch_seconds: float
    search_nodes: int
    estimate: StageEstimate = attrs.field(repr=False)


@attrs.frozen
class PlanResult:
    """A whole-model plan: every stage's, the plan as a :class:`~hp_core.specs.RecomputeSpec`, its step.

    Attributes:
        restricted: Whether only settings the runtime's trainer executes were considered.
        fits: Whether every stage fits.
        recompute: The plan, compact: a default setting and ranges of exceptions.
        stages: Per stage.
        step_seconds: The step time under the plan.
        peak_bytes: The highest stage peak.
        estimate: :func:`hp_core.api.estimate` under the plan.
        time: :func:`hp_core.engine.timing.time_run` under the plan.
        unproven: States of the placed layers that follow the body (:mod:`hp_core.engine.recompute.coupled`) under
            which a plan reaching the state might be faster than this one: the search of the plans reaching it ran
            past ``_COVER_SEARCHES``. Empty where the plan is proven the fastest.
    """

    restricted: bool
    fits: bool
    recompute: RecomputeSpec
    stages: tuple[StagePlan, ...]
    step_seconds: float
    peak_bytes: int
    estimate: Estimate = attrs.field(repr=False)
    time: StepTime = attrs.field(repr=False)
    unproven: tuple = ()


@attrs.frozen
class RecomputePlan:
    """What :func:`plan_recompute` answers.

    Attributes:
        model: The model's name.
        runtime: The runtime profile's name.
        memory_bytes: Device memory.
        reserve_bytes: Memory kept free.
        limit_bytes: ``memory_bytes - reserve_bytes``, what every stage may use.
        plan: The plan of settings the runtime executes (every priced
            setting with ``unrestricted``, then the same as ``unrestricted``'s
            search restricted to the runtime).
        unrestricted: With ``unrestricted=True``, the plan over every priced
            setting, whether or not the trainer runs it; else ``None``.
        provenance: Runtime, census, attention, hardware and the candidates searched.
    """

    model: str
    runtime: str
    memory_bytes: int
    reserve_bytes: int
    limit_bytes: int
    plan: PlanResult
    unrestricted: PlanResult | None
    provenance: Mapping[str, Any]

    @property
    def fits(self) -> bool:
        """Whether the runtime's plan fits every stage."""
        return self.plan.fits

    @property
    def recompute(self) -> RecomputeSpec:
        """The runtime's plan as a :class:`~hp_core.specs.RecomputeSpec`."""
        return self.plan.recompute

    @property
    def stages(self) -> tuple[StagePlan, ...]:
        """The runtime's plan, per stage."""
        return self.plan.stages


def _runs(indices: Sequence[int], settings: Sequence[Setting]) -> tuple[tuple[int, int, Setting], ...]:
    """Maximal runs of consecutive body layers with one setting, ``(first, last, setting)`` inclusive."""
    runs: list[tuple[int, int, Setting]] = []
    for index, setting in zip(indices, settings):
        if runs and runs[-1][1] == index - 1 and runs[-1][2] == setting:
            runs[-1] = (runs[-1][0], index, setting)
        else:
            runs.append((index, index, setting))
    return tuple(runs)


def _gib(value: int) -> str:
    return f"{value / 2**30:.2f} GiB"


def _reason(solution: StageSolution, fastest: bool, in_flight: int) -> str:
    """One sentence on why the stage's plan is what it is."""
    estimate = solution.estimate
    point = estimate.binding_point
    peak, limit = estimate.peak_bytes, solution.limit_bytes
    if not solution.fits:
        if point == "last_backward":
            return (f"the last backward alone needs {_gib(peak)} (whole gradients held until their one reduction), "
                    f"{_gib(peak - limit)} over the limit; no recompute changes it")
        return (f"even recomputing the most, {point} peaks at {_gib(peak)} with {in_flight} micro-batches in flight, "
                f"{_gib(peak - limit)} over the limit")
    if fastest:
        return f"nothing needs recomputing: {point} peaks at {_gib(peak)}, {_gib(limit - peak)} under the limit"
    return (f"{point} binds: {in_flight} micro-batches in flight keep {_gib(estimate.memory.activations_bytes)} of "
            f"activations; every faster plan peaks above the limit ({_gib(limit - peak)} left)")


def plan_run(
    run: PreparedRun,
    hardware: HardwareSpec,
    *,
    reserve_bytes: int = 0,
    unrestricted: bool = False,
    offload: Iterable[float] = (),
) -> RecomputePlan:
    """Per stage, the fastest recompute settings of a prepared run whose every peak point fits the device.

    Settings are priced and placed from the run's layers (the census's
    activations included), and the plan's estimate and step time are
    computed on the same run, so the time a plan reports is the time the
    planner ranked it by (module docstring).

    Args:
        run: The prepared run (:func:`hp_core.engine.prepare.prepare`).
        hardware: The device: its memory bounds the plan, its rates price it.
        reserve_bytes: Memory to keep free on every device.
        unrestricted: Also plan over every priced setting, whether or not the
            trainer executes it (both plans are reported).
        offload: Offload shares (0 to 1) a setting may add (none by default);
            they need the device's host link bandwidth.

    Raises:
        ConfigError: A runtime without a timing profile, a reserve not below
            the device memory, or offload asked of a device that states no
            host link bandwidth.
    """
    rt = run.runtime
    if rt.timing is None:
        raise ConfigError("$.runtime", f"runtime {rt.name!r} states no timing profile, so plans cannot be ranked by step time; "
                          "use a runtime that states one (see 'hp plugins')")
    if not 0 <= reserve_bytes < hardware.memory_bytes:
        raise ConfigError("$.reserve_bytes", f"the reserve ({reserve_bytes} bytes) must be at least 0 and below the device memory ({hardware.memory_bytes} bytes)")
    offload = tuple(offload)
    if any(not 0 < share <= 1 for share in offload):
        raise ConfigError("$.offload", f"offload shares must lie in (0, 1], got {list(offload)}")
    if offload and hardware.host_link_bandwidth_bytes_per_second is None:
        raise ConfigError("$.hardware.host_link_bandwidth_bytes_per_second",
                          f"{hardware.name} does not state host_link_bandwidth_bytes_per_second, which offload needs")
    run = on_device(run, hardware)  # its recipe's weight copies as the device keeps them
    model, parallel = run.model, run.parallel
    kinds, costs, context, body_groups = run.kinds, run.costs, run.context, run.layers.body_groups
    collectives = run.registry.collective_model(rt.timing.collective_model) if rt.timing.collective_model else None
    pricer = layer_pricer(parallel, hardware=hardware, timing=rt.timing, precision=run.precision, attention=run.attention,
                          recipe=run.stage_inputs.recipe, collectives=collectives, zero=run.zero)
    profiles: dict[int, SwitchProfile] = {
        i: switch_profile(kinds[i], costs[i], model.layers[i].config, context, pricer, implicit=rt.implicit_recompute)
        for i in body_groups
    }

    candidates = {(i, restricted): candidate_settings(kinds[i], rt, unrestricted=not restricted, offload=offload)
                  for i in body_groups for restricted in ((True, False) if unrestricted else (True,))}

    def options(i: int, restricted: bool) -> list[LayerOption]:
        found = []
        for setting in candidates[i, restricted]:
            priced: SettingCost = profiles[i].price(setting)
            # What PlacedLayer.make gives for the setting (tests/core/test_recompute_profile.py), from the profile.
            placed = PlacedLayer(kinds[i].name, costs[i], priced.full, priced.recomputed, setting.describe(),
                                 priced.kept_bytes, priced.warmup_working_bytes)
            found.append(LayerOption(setting, placed, priced.micro_batch_seconds))
        return found

    def fixed(where: str, state) -> list[PlacedLayer]:
        # A placed layer as the coupling state makes it recompute (coupled.placed_under; nothing without a coupling).
        made = {i: (placed_under(run, i, state, where) if couple is not None and i in couple.groups
                    else placed_layer(run, i, (Setting(),) * run.body_count, where)) for i in set(run.placed_groups(where))}
        return [made[i] for i in run.placed_groups(where)]

    def true_fixed(settings: tuple[Setting, ...]) -> tuple:
        return tuple((p.kept_bytes, p.backward_working_bytes) for where in ("first", "last")
                     for p in (placed_layer(run, i, settings, where) for i in run.placed_groups(where)))

    limit = hardware.memory_bytes - reserve_bytes
    body_group, bounds = run.body_group, run.chunk_bounds
    couple = coupling(run)
    classes: list = []  # the covering search's classes of body layers (coupled.interchangeable), once asked
    # The stages holding a placed layer whose recompute follows the body's (the MTP's: the last).
    coupled_stages = set() if couple is None else {
        stage for stage in range(parallel.pp) for where, chunk in (("first", 0), ("last", parallel.chunks - 1))
        if chunk in run.stage_chunks(stage) and any(i in couple.groups for i in run.placed_groups(where))}

    def covered(state, raw: Mapping[int, list[LayerOption]], table: Mapping[int, tuple[LayerOption, ...]], rank: int,
                consider, best, memo: dict) -> bool:
        """Search the plans that reach union *state* exactly (coupled.py): branch on the first switch of the state no
        layer reaches, each branch requiring one body layer of an inner kind to recompute it; a branch is cut where
        its stages cannot fit (requiring more fits no better) or its plan priced in the state (a lower bound on the
        branch's plans: PlacedState) is no faster than the best plan. False where _COVER_SEARCHES ran out first.

        Of interchangeable layers (coupled.interchangeable) required the same, one branch: the first. Swapping two
        such layers' settings maps the plans meeting one branch's requirements onto those meeting the other's (the
        rest required as before), keeping each plan's fit, step time and the union it reaches, so both branches hold
        plans as fast; and a node whose requirements are a permutation within classes of a node seen is seen."""
        def of(j: int) -> tuple:  # layer j's class (coupled.interchangeable, asked once; each its own where None)
            if not classes:
                classes.append(interchangeable(run))
            return (j,) if classes[0] is None else classes[0][j]

        inner = [j for j, g in enumerate(body_group) if g in couple.inner]
        seen: set = set()
        stack: list[dict[int, frozenset[str]]] = [{}]
        while stack:
            required = stack.pop()
            key = tuple(sorted((of(j), tuple(sorted(need))) for j, need in required.items()))
            if key in seen:
                continue
            seen.add(key)
            if len(seen) > _COVER_SEARCHES:
                return False
            forced = {j: pareto_front([o for o in raw[body_group[j]] if keeps(run, couple, body_group[j], o, state)
                                       and not run.resolve(body_group[j], o.setting)[0]
                                       and need <= run.resolve(body_group[j], o.setting)[1]])
                      for j, need in required.items()}
            if any(not options for options in forced.values()):
                continue
            found = search(table, state, memo, forced)
            if not all(s.fits for s, _, _ in found[1]):
                continue
            # What the plan makes the placed layers recompute (inner_layers.placed_recompute), as the state counts it.
            reached = base(run, couple) | frozenset().union(
                *(placed_recompute(run, i, found[0]) for i in couple.groups)) & couple.switches
            if reached == state:
                consider(found, rank, True)
                continue
            key_now = best()
            bound = time_run(run, hardware, PlacedState(found[0], state)).step_seconds
            if key_now is not None and not key_now[0] and bound >= key_now[2]:
                continue
            switch = min(state - reached)
            first: dict = {}  # per class and requirement, its first layer
            for j in inner:
                first.setdefault((of(j), required.get(j, frozenset())), j)
            stack.extend({**required, j: required.get(j, frozenset()) | {switch}} for j in reversed(list(first.values())))
        return True

    def search(table: Mapping[int, tuple[LayerOption, ...]], state, memo: dict,
               forced: Mapping[int, tuple[LayerOption, ...]] = {},
               other: Mapping[int, tuple[LayerOption, ...]] | None = None,
               free: Mapping[int, tuple[StageSolution, Mapping[Any, LayerOption]]] | None = None,
               ) -> tuple[tuple[Setting, ...], list[tuple[StageSolution, bool, int]]]:
        # forced: options of single layers; other: the table of the stages holding no coupled placed layer.
        # free: per stage holding no coupled placed layer whose plan over every setting runs every layer at its fastest
        # and fits, that solution and each group's fastest option: where the table keeps those options first, the
        # stage's plan under the table is the same (the same layers at the same fastest options, which fit), found
        # without solving it again; its search_nodes are that solution's (plan_run searches the plan it keeps again).
        settings: list[Setting] = [Setting()] * run.body_count
        solutions: list[tuple[StageSolution, bool, int]] = []
        placed = {where: fixed(where, state) for where in ("first", "last")}
        for stage in range(parallel.pp):
            mine = run.stage_chunks(stage)
            mine_table = other if other is not None and stage not in coupled_stages else table
            chunks: list[list[PlacedLayer | VariableLayer]] = []
            for c in mine:
                lo, hi = bounds[c]
                # A layer held to forced options is a group of its own with them (the solver's groups share their
                # options: VariableLayer), or the solver would read its group's and drop the requirement.
                chunk: list[PlacedLayer | VariableLayer] = [
                    VariableLayer(j, (body_group[j], tuple(o.setting for o in forced[j])), forced[j]) if j in forced
                    else VariableLayer(j, body_group[j], mine_table[body_group[j]]) for j in range(lo, hi)]
                if c == 0:
                    chunk = placed["first"] + chunk
                if c == parallel.chunks - 1:
                    chunk = chunk + placed["last"]
                chunks.append(chunk)
            body = [range(*bounds[c]) for c in mine]
            # A stage whose layers' options and placed layers are as under an earlier state is solved as then.
            key = (stage, tuple(tuple(o.setting for o in layer.options) if isinstance(layer, VariableLayer)
                                else (layer.setting, layer.kept_bytes, layer.backward_working_bytes)
                                for chunk in chunks for layer in chunk))
            solution = memo.get(key)
            if solution is None and free is not None and stage in free and not forced:
                reused, fastest = free[stage]
                if all(mine_table[g][0] is option for g, option in fastest.items()):
                    solution = reused
            if solution is None:
                solution = memo[key] = solve_stage(stage, chunks, body, run.stage_inputs, limit)
            layers = [layer for chunk in chunks for layer in chunk if isinstance(layer, VariableLayer)]
            for layer, choice in zip(layers, solution.choices):
                settings[layer.index] = choice.setting
            solutions.append((solution, solution.unconstrained, solution.estimate.micro_batches_in_flight))
        return tuple(settings), solutions

    def solve(restricted: bool) -> PlanResult:
        raw = {i: options(i, restricted) for i in body_groups}
        memo: dict = {}
        unproven: tuple = ()
        if couple is None:
            # Only the front can be chosen (the solver's docstring); every stage of the group shares it.
            found = search({i: pareto_front(raw[i]) for i in body_groups}, None, memo)
            spec = compact(list(found[0]))
            chosen = (found, estimate_run(run, spec, hardware), time_run(run, hardware, spec))
        else:
            # Every state the coupled placed layers can be in, each searched with the body restricted to the
            # settings that keep it (coupled.py; module docstring, 'Placed layers'); the fastest plan that fits.
            chosen, best_key, pending, chosen_again = None, None, [], None
            free: dict[int, tuple[StageSolution, dict[Any, LayerOption]]] = {}  # search's ``free``, from the bounds

            priced_plans: dict = {}  # settings -> [estimate, time]: states often find the same plan
            estimated: dict = {}  # settings -> estimate_run of the plan, where asked

            def estimate_of(settings: tuple[Setting, ...]) -> Estimate:
                if settings not in estimated:
                    estimated[settings] = estimate_run(run, compact(list(settings)), hardware)
                return estimated[settings]

            def consider(found, rank: int, exact: bool | None = None, again=None) -> None:
                # again: the (table, state) to search the plan again under should it be kept (found with free).
                nonlocal chosen, best_key, chosen_again
                if found[0] not in priced_plans:
                    priced_plans[found[0]] = time_run(run, hardware, compact(list(found[0])))
                time = priced_plans[found[0]]
                # A plan implying another state than it was found under fits only as estimate_run says. One implying
                # its state whose stages fit fits, its estimate's peaks those the stages were solved to (asked only for
                # the plan kept, below).
                solved = all(s.fits for s, _, _ in found[1])
                fits = solved and (exact or estimate_of(found[0]).peak_bytes <= limit)
                over = 0 if fits else max(0, max(s.peak_bytes for s in estimate_of(found[0]).stages) - limit)
                key = (not fits, over, time.step_seconds, rank)
                if best_key is None or key < best_key:
                    chosen, best_key, chosen_again = (found, None, time), key, again

            # Each state's bound (coupled.py): the stages without the placed layers at their fastest over every
            # setting, those with them under the state's restriction, the placed layers priced in the state; no plan
            # found under the state, nor any plan reaching it, is faster. States are searched in order of bound
            # until the bound is no faster than the best plan that fits.
            every = {i: pareto_front(raw[i]) for i in body_groups}
            read = {i: [named(run, couple, i, o) for o in raw[i]] for i in body_groups}  # what keeps reads of each
            ordered = []
            for rank, state in enumerate(coupled_states(run, couple, raw)):
                table = {}
                for i in body_groups:
                    allowed = {found: keeps_named(couple, i, found, state) for found in set(read[i])}
                    table[i] = pareto_front([o for o, found in zip(raw[i], read[i]) if allowed[found]])
                if any(not front for front in table.values()):
                    continue
                bound = -math.inf
                if state != WHOLE:  # every body layer full: no stage free, searched whole
                    low = search(table, state, memo, other=every)
                    bound = (time_run(run, hardware, PlacedState(low[0], state)).step_seconds
                             if all(s.fits for s, _, _ in low[1]) else math.inf)
                    if not free:  # the stages without coupled placed layers at their fastest over every setting
                        free = {stage: (solution, {g: every[g][0] for g in {body_group[j] for j in solution.estimate.layers}})
                                for stage, (solution, _, _) in enumerate(low[1])
                                if stage not in coupled_stages and solution.fits and solution.unconstrained}
                ordered.append((bound, rank, state, table))
            for bound, rank, state, table in sorted(ordered, key=lambda row: row[:2]):
                if best_key is not None and not best_key[0] and (bound, rank) >= best_key[2:]:
                    break
                found = search(table, state, memo, free=free)
                priced = tuple((p.kept_bytes, p.backward_working_bytes) for p in fixed("first", state) + fixed("last", state))
                exact = priced == true_fixed(found[0])
                consider(found, rank, exact, (table, state))
                if not exact and state != WHOLE and all(s.fits for s, _, _ in found[1]):
                    pending.append((rank, state, table))  # plans reaching the state may be missed: cover (below)
            for rank, state, table in pending:
                if not covered(state, raw, table, rank, consider, lambda: best_key, memo):
                    unproven += (state,)
            if chosen_again is not None:  # the kept plan searched with every stage solved, for its stages' solutions
                again = search(chosen_again[0], chosen_again[1], memo)
                if again[0] != chosen[0][0]:
                    raise AssertionError("a stage reused at its fastest settings planned otherwise when solved")
                chosen = (again,) + chosen[1:]
            chosen = (chosen[0], estimate_of(chosen[0][0]), chosen[2])
        (settings, solutions), result, time = chosen
        settings = list(settings)
        spec = compact(settings)
        stages = []
        for (solution, fastest, in_flight), stage_estimate, stage_time in zip(solutions, result.stages, time.stages):
            layers = stage_estimate.layers
            chosen = tuple(settings[j] for j in layers)
            stages.append(StagePlan(
                index=stage_estimate.index, layers=layers, settings=chosen, ranges=_runs(layers, chosen),
                fits=solution.fits and stage_estimate.peak_bytes <= limit, peak_bytes=stage_estimate.peak_bytes, limit_bytes=limit,
                shortfall_bytes=solution.shortfall_bytes, binding_point=stage_estimate.binding_point,
                reason=_reason(solution, fastest, in_flight), micro_batch_seconds=stage_time.micro_batch_seconds,
                search_nodes=solution.nodes, estimate=stage_estimate,
            ))
        return PlanResult(
            restricted=restricted, fits=all(s.fits for s in stages), recompute=spec, stages=tuple(stages),
            step_seconds=time.step_seconds, peak_bytes=result.peak_bytes, estimate=result, time=time, unproven=unproven,
        )

    executed = solve(restricted=True)
    free = solve(restricted=False) if unrestricted else None
    provenance = {
        "runtime": rt.name,
        "runtime_options": dict(rt.option_values),
        "census": run.layers.census.name,
        "attention": run.attention,
        **precision_provenance(run.precision, run.stage_inputs.recipe),
        "hardware": hardware.name,
        "candidates": {kinds[i].name: len(candidates[i, True]) for i in body_groups},
        "offload": list(offload),
    }
    return RecomputePlan(
        model=model.name, runtime=rt.name, memory_bytes=hardware.memory_bytes, reserve_bytes=reserve_bytes,
        limit_bytes=limit, plan=executed, unrestricted=free, provenance=provenance,
    )
