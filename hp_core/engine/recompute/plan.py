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
settings (the MTP module under the ``megatron`` runtime: its inner layers' switches as the body layers of their kinds,
its own whole checkpoint where every body layer is recomputed fully; :mod:`hp_core.engine.inner_layers`), which no
stage's search decides alone. The planner searches with the placed layers recomputing nothing, then again with them
as the plan found implies, until a plan implies what it was searched under: then the solver's peaks are the
estimate's of that plan (the printed peak and step time are always :func:`estimate_run` and :func:`time_run` of the
plan). A stage whose placed layers price as in an earlier search is not searched again. Where no such plan turns up
within a few searches (a plan whose placed layers keep less lets the body recompute less, which makes them keep more
again), the first plan is kept: found with them recomputing nothing, the plan's own placed layers keep no more.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import attrs

from hp_core.engine.estimate import estimate_run
from hp_core.engine.inner_layers import placed_layer
from hp_core.engine.precision import on_device
from hp_core.engine.prepare import PreparedRun
from hp_core.engine.recompute.layout import compact
from hp_core.engine.recompute.profile import SettingCost, SwitchProfile, candidate_settings, switch_profile
from hp_core.engine.recompute.solver import LayerOption, StageSolution, VariableLayer, pareto_front, solve_stage
from hp_core.engine.stage import PlacedLayer
from hp_core.errors import ConfigError
from hp_core.results import Estimate, StageEstimate
from hp_core.specs import HardwareSpec, RecomputeSpec, Setting
from hp_core.engine.timing import StepTime, layer_pricer, time_run

__all__ = ["PlanResult", "RecomputePlan", "StagePlan", "plan_run"]

_ROUNDS = 4  # searches after the first, each under the placed layers the last one's plan implies (plan_run)


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
    """

    restricted: bool
    fits: bool
    recompute: RecomputeSpec
    stages: tuple[StagePlan, ...]
    step_seconds: float
    peak_bytes: int
    estimate: Estimate = attrs.field(repr=False)
    time: StepTime = attrs.field(repr=False)


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
                          recipe=run.stage_inputs.recipe, collectives=collectives)
    profiles: dict[int, SwitchProfile] = {
        i: switch_profile(kinds[i], costs[i], model.layers[i].config, context, pricer, implicit=rt.implicit_recompute)
        for i in body_groups
    }

    candidates = {(i, restricted): candidate_settings(kinds[i], rt, unrestricted=not restricted, offload=offload)
                  for i in body_groups for restricted in ((True, False) if unrestricted else (True,))}

    def options(i: int, restricted: bool) -> tuple[LayerOption, ...]:
        found = []
        for setting in candidates[i, restricted]:
            priced: SettingCost = profiles[i].price(setting)
            # What PlacedLayer.make gives for the setting (tests/core/test_recompute_profile.py), from the profile.
            placed = PlacedLayer(kinds[i].name, costs[i], priced.full, priced.recomputed, setting.describe(),
                                 priced.kept_bytes, priced.warmup_working_bytes)
            found.append(LayerOption(setting, placed, priced.micro_batch_seconds))
        # Only the front can be chosen (the solver's docstring); every stage of the group shares it.
        return pareto_front(found)

    def fixed(where: str, assumed: tuple[Setting, ...]) -> list[PlacedLayer]:
        # A placed layer as the body's settings *assumed* make it recompute (the MTP's: inner_layers.placed_layer).
        made = {i: placed_layer(run, i, assumed, where) for i in set(run.placed_groups(where))}
        return [made[i] for i in run.placed_groups(where)]

    def placed_key(assumed: tuple[Setting, ...]) -> tuple:
        return tuple((p.setting, p.kept_bytes, p.backward_working_bytes) for p in fixed("first", assumed) + fixed("last", assumed))

    limit = hardware.memory_bytes - reserve_bytes
    body_group, bounds = run.body_group, run.chunk_bounds

    def search(table: Mapping[int, tuple[LayerOption, ...]], assumed: tuple[Setting, ...],
               memo: dict) -> tuple[tuple[Setting, ...], list[tuple[StageSolution, bool, int]]]:
        settings: list[Setting] = [Setting()] * run.body_count
        solutions: list[tuple[StageSolution, bool, int]] = []
        for stage in range(parallel.pp):
            mine = run.stage_chunks(stage)
            chunks: list[list[PlacedLayer | VariableLayer]] = []
            for c in mine:
                lo, hi = bounds[c]
                chunk: list[PlacedLayer | VariableLayer] = [VariableLayer(j, body_group[j], table[body_group[j]])
                                                            for j in range(lo, hi)]
                if c == 0:
                    chunk = fixed("first", assumed) + chunk
                if c == parallel.chunks - 1:
                    chunk = chunk + fixed("last", assumed)
                chunks.append(chunk)
            body = [range(*bounds[c]) for c in mine]
            key = (stage, tuple((p.setting, p.kept_bytes, p.backward_working_bytes) for chunk in chunks for p in chunk
                                if isinstance(p, PlacedLayer)))
            solution = memo.get(key)  # a stage whose placed layers price as before is solved as before
            if solution is None:
                solution = memo[key] = solve_stage(stage, chunks, body, run.stage_inputs, limit)
            layers = [layer for chunk in chunks for layer in chunk if isinstance(layer, VariableLayer)]
            for layer, choice in zip(layers, solution.choices):
                settings[layer.index] = choice.setting
            solutions.append((solution, solution.unconstrained, solution.estimate.micro_batches_in_flight))
        return tuple(settings), solutions

    def solve(restricted: bool) -> PlanResult:
        table = {i: options(i, restricted) for i in body_groups}
        # The placed layers priced as the plan's settings make them recompute (the MTP module under a runtime whose
        # recompute reaches it, inner_layers): first as nothing recomputed, then as the plan found implies, until
        # the plan implies what it was found under (module docstring, 'Placed layers'). Where no such plan turns
        # up within _ROUNDS, the first is kept: found with the placed layers keeping the most, it fits as found.
        memo: dict = {}
        assumed = (Setting(),) * run.body_count
        first = found = search(table, assumed, memo)
        for _ in range(_ROUNDS):
            if placed_key(found[0]) == placed_key(assumed):
                break
            assumed = found[0]
            found = search(table, assumed, memo)
        else:
            found = found if placed_key(found[0]) == placed_key(assumed) else first
        settings, solutions = list(found[0]), found[1]
        spec = compact(settings)
        result = estimate_run(run, spec, hardware)
        time = time_run(run, hardware, spec)
        stages = []
        for (solution, fastest, in_flight), stage_estimate, stage_time in zip(solutions, result.stages, time.stages):
            layers = stage_estimate.layers
            chosen = tuple(settings[j] for j in layers)
            stages.append(StagePlan(
                index=stage_estimate.index, layers=layers, settings=chosen, ranges=_runs(layers, chosen),
                fits=solution.fits, peak_bytes=stage_estimate.peak_bytes, limit_bytes=limit,
                shortfall_bytes=solution.shortfall_bytes, binding_point=stage_estimate.binding_point,
                reason=_reason(solution, fastest, in_flight), micro_batch_seconds=stage_time.micro_batch_seconds,
                search_nodes=solution.nodes, estimate=stage_estimate,
            ))
        return PlanResult(
            restricted=restricted, fits=all(s.fits for s in stages), recompute=spec, stages=tuple(stages),
            step_seconds=time.step_seconds, peak_bytes=result.peak_bytes, estimate=result, time=time,
        )

    executed = solve(restricted=True)
    free = solve(restricted=False) if unrestricted else None
    provenance = {
        "runtime": rt.name,
        "runtime_options": dict(rt.option_values),
        "census": run.layers.census.name,
        "attention": run.attention,
        "hardware": hardware.name,
        "candidates": {kinds[i].name: len(candidates[i, True]) for i in body_groups},
        "offload": list(offload),
    }
    return RecomputePlan(
        model=model.name, runtime=rt.name, memory_bytes=hardware.memory_bytes, reserve_bytes=reserve_bytes,
        limit_bytes=limit, plan=executed, unrestricted=free, provenance=provenance,
    )
