"""Recompute potentials: at fixed degrees, the plans that each recompute one more layer fully.

docs/recompute_potentials.md, after HyperParallel's ``sapp_nd`` recompute potentials.
From a starting plan (nothing recomputed by default), each step fully
recomputes the one further body layer that gives the lowest step time, ties
going to the lower peak memory, then to the lower layer index; the sequence
ends when every layer is fully recomputed or after the steps asked for. It
is the memory/time trade-off curve of one layout: how much memory each
further recomputed layer frees, and what the cost model expects it to cost.

The score of a plan is :func:`hp_core.engine.timing.time_run`'s ``step_seconds``
and its memory :func:`hp_core.engine.estimate.estimate_run`'s peak over stages: the cost
model's own estimates, not measurements, so a difference between two steps
reads as what the cost model expects the further layer to cost.

The CSV rows, the CSV file and the plot of the sequences are written by
:mod:`hp_core.io.potentials_output`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import attrs

from hp_core.engine.estimate import estimate_run
from hp_core.engine.prepare import PreparedRun, prepare
from hp_core.engine.recompute.layout import settings_of, spec_from_settings
from hp_core.errors import ConfigError
from hp_core.registry import Registry
from hp_core.results import Estimate
from hp_core.specs import HardwareSpec, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_core.engine.timing import time_run

__all__ = ["DEGREES", "PotentialSequence", "PotentialStep", "recompute_potentials"]

# The layout degrees a sequence states, in this order.
DEGREES = ("dp", "tp", "pp", "vpp", "cp", "ep", "etp")
# Two step times closer than this share (relative) are a tie: the same layers
# summed in another order differ in the last bits.
_TIE = 1e-9


@attrs.frozen
class PotentialStep:
    """One plan of a sequence.

    Attributes:
        step: Its position: 0 for the starting plan, then one more full layer each.
        plan: The plan.
        changed_layer: The body layer this step made full; ``None`` at step 0.
        full_layers: Body layers the plan recomputes fully.
        step_seconds: The cost model's step time under the plan (the score).
        peak_bytes: The largest stage peak under the plan.
        stage_peak_bytes: Each stage's peak.
        stage_savings_bytes: Each stage's peak at step 0 less its peak now.
    """

    step: int
    plan: RecomputeSpec
    changed_layer: int | None
    full_layers: int
    step_seconds: float
    peak_bytes: int
    stage_peak_bytes: tuple[int, ...]
    stage_savings_bytes: tuple[int, ...]


@attrs.frozen
class PotentialSequence:
    """The potentials of one configuration.

    Attributes:
        degrees: The layout's degrees (:data:`DEGREES`).
        steps: The plans, step 0 (the starting plan) first.
        rank: The configuration's rank among those compared (the CSV's ``TOP``), 1 first.
    """

    degrees: Mapping[str, int]
    steps: tuple[PotentialStep, ...]
    rank: int = 1

    @property
    def score_seconds(self) -> float:
        """The configuration's own score: the step time of its starting plan."""
        return self.steps[0].step_seconds


def _degrees(parallel: ParallelSpec) -> dict[str, int]:
    return {name: getattr(parallel, name) for name in DEGREES}


def recompute_potentials(
    model: ModelSpec,
    parallel: ParallelSpec,
    *,
    registry: Registry,
    hardware: HardwareSpec,
    runtime: str = "generic",
    precision: PrecisionSpec | None = None,
    attention: str | None = None,
    census: str = "formulas",
    start: RecomputeSpec | None = None,
    steps: int | None = None,
    rank: int = 1,
) -> PotentialSequence:
    """The plans that each recompute one more body layer fully, fastest first.

    Args:
        model: The layer stack.
        parallel: The layout, fixed for the whole sequence.
        registry: Layer kinds, runtimes, census sources.
        hardware: The device the step time is priced on.
        runtime: The runtime profile (its precision, timing and recompute).
        precision: Byte widths; the runtime's when ``None``.
        attention: ``"flash"`` or ``"eager"``; the runtime's when ``None``.
        census: The census source the memory is priced with.
        start: The plan of step 0; nothing recomputed when ``None``.
        steps: At most this many further layers; every layer not yet full when ``None``.
        rank: The configuration's rank, written as ``TOP``.

    Raises:
        ConfigError: The runtime runs no full recompute, ``steps`` is
            negative, or the layout, hardware or runtime cannot be priced.
    """
    profile = registry.runtime(runtime)
    if not profile.full_recompute:
        raise ConfigError("$.runtime", f"runtime {profile.name} runs no full recompute, so it has no potentials; use a runtime that does")
    if steps is not None and steps < 0:
        raise ConfigError("--steps", f"expected a non-negative number of steps, got {steps}")
    start = start if start is not None else RecomputeSpec()
    run = prepare(model, parallel, registry=registry, runtime=runtime, precision=precision, census=census, attention=attention)
    count = run.body_count
    settings = list(settings_of(start, count))

    def score(plan: RecomputeSpec | tuple[Setting, ...]) -> float:
        return time_run(run, hardware, plan).step_seconds

    def memory(plan: RecomputeSpec | tuple[Setting, ...]) -> Estimate:
        return estimate_run(run, plan, hardware)

    def memory_peak(trial: tuple[Setting, ...]) -> int:
        return memory(trial).peak_bytes

    def record(step: int, plan: RecomputeSpec, changed: int | None, seconds: float, result: Estimate,
               base: tuple[int, ...] | None) -> PotentialStep:
        peaks = tuple(stage.peak_bytes for stage in result.stages)
        base = base if base is not None else peaks
        return PotentialStep(
            step=step, plan=plan, changed_layer=changed, full_layers=sum(s.mode == "full" for s in settings),
            step_seconds=seconds, peak_bytes=result.peak_bytes, stage_peak_bytes=peaks,
            stage_savings_bytes=tuple(b - p for b, p in zip(base, peaks)),
        )

    first = record(0, start, None, score(start), memory(start), None)
    found = [first]
    while steps is None or len(found) <= steps:
        candidates = [i for i, s in enumerate(settings) if s.mode != "full"]
        if not candidates:
            break
        # Each trial is priced from its per-layer settings directly (PreparedRun.settings takes them):
        # the same settings the trial's plan states, without writing the plan and reading it back for
        # every candidate, and its layers are the step's base list with one entry replaced
        # (SettingsTrial) instead of a walk over every layer per trial; figures are identical.
        trials = {}
        full = Setting("full")
        base, memo = tuple(settings), {}
        for index in candidates:
            trial = SettingsTrial(base, index, full, memo)
            trials[index] = (score(trial), trial)
        fastest = min(seconds for seconds, _ in trials.values())
        tied = [i for i in candidates if trials[i][0] <= fastest + _TIE * abs(fastest)]
        peaks = {i: memory_peak(trials[i][1]) for i in tied}
        chosen = min(tied, key=lambda i: (peaks[i], trials[i][0], i))
        settings[chosen] = full
        plan = spec_from_settings(settings, start.default)
        found.append(record(len(found), plan, chosen, trials[chosen][0], memory(plan), first.stage_peak_bytes))
    return PotentialSequence(degrees=_degrees(parallel), steps=tuple(found), rank=rank)


class SettingsTrial(tuple):
    """Per-layer settings that are a base's with one layer changed, as ``hp potentials`` tries them.

    A tuple of settings like any other; :meth:`PreparedRun.per_body_layer`
    builds its body list from the base's (made once per function and kept in
    *memo*) with the one entry replaced: the object the base made for the same
    ``(group, setting)`` where there is one, so runs of equal layers are the
    same objects exactly as a fresh walk makes them, and every figure priced
    from the list is identical.
    """

    base: tuple[Setting, ...]
    index: int
    memo: dict

    def __new__(cls, base: tuple[Setting, ...], index: int, setting: Setting, memo: dict) -> "SettingsTrial":
        values = list(base)
        values[index] = setting
        trial = super().__new__(cls, values)
        trial.base, trial.index, trial.memo = base, index, memo
        return trial

    def body(self, run: PreparedRun, make: Callable[[int, Setting, bool, frozenset[str]], Any]) -> list:
        key = make.__code__
        found = self.memo.get(key)
        if found is None or found[0] is not self.base:
            cache: dict[tuple[int, Setting], Any] = {}
            found = self.memo[key] = (self.base, run._per_body_layer(self.base, make, cache), cache)
        _, base_body, cache = found
        group, setting = run.body_group[self.index], self[self.index]
        made = cache.get((group, setting))
        if made is None:
            made = make(group, setting, *run.resolve(group, setting))
        body = list(base_body)
        body[self.index] = made
        return body
