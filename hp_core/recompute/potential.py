"""Recompute potentials: at fixed degrees, the plans that each recompute one more layer fully.

DESIGN section 5 and the seed planner's potentials (``shared/seeds/002_*``).
From a starting plan (nothing recomputed by default), each step fully
recomputes the one further body layer that gives the lowest step time, ties
going to the lower peak memory, then to the lower layer index; the sequence
ends when every layer is fully recomputed or after the steps asked for. It
is the memory/time trade-off curve of one layout: how much memory each
further recomputed layer frees, and what the cost model expects it to cost.

The score of a plan is :func:`hp_core.timing.step_time`'s ``step_seconds``
and its memory :func:`hp_core.api.estimate`'s peak over stages: the cost
model's own estimates, not measurements, so a difference between two steps
reads as what the cost model expects the further layer to cost.

:func:`plot_groups` selects, across configurations ranked by their own
score, the plans a plot shows; :func:`write_potentials_csv` writes the
sequences (columns in docs/recompute_potentials.md) and
:func:`plot_potentials` draws memory against step time (the optional extra
``plots``: matplotlib).
"""

from __future__ import annotations

import csv
import json
import math
import os
from typing import Any, Iterator, Mapping, Sequence

import attrs

from hp_core.engine.estimate import estimate_run
from hp_core.engine.prepare import prepare
from hp_core.errors import ConfigError
from hp_core.files import atomic_write, check_png, pyplot
from hp_core.recompute.layout import compact, plan_layout, range_key, setting_value, settings_of, spec_from_settings
from hp_core.registry import Registry
from hp_core.results import Estimate
from hp_core.specs import HardwareSpec, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_core.timing import time_run

__all__ = [
    "CSV_COLUMNS",
    "DEFAULT_TOP",
    "DEGREES",
    "PotentialSequence",
    "PotentialStep",
    "plot_groups",
    "plot_potentials",
    "potential_rows",
    "recompute_potentials",
    "write_potentials_csv",
]

# The configurations a plot shows when no number is asked for (the seed's).
DEFAULT_TOP = 20
# The layout degrees a row states, in this order.
DEGREES = ("dp", "tp", "pp", "vpp", "cp", "ep", "etp")
# The columns after TOP, step and the degrees (docs/recompute_potentials.md).
CSV_COLUMNS = (
    "changed_layer", "full_layers", "memory_mb", "score", "recompute_mode", "recompute_layers",
    "layer_recompute", "stage_memory_mb", "stage_savings", "plan_scope",
)
_MIB = 2**20
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

    def score(plan: RecomputeSpec) -> float:
        return time_run(run, hardware, plan).step_seconds

    def memory(plan: RecomputeSpec) -> Estimate:
        return estimate_run(run, plan, hardware)

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
        trials = {}
        for index in candidates:
            trial = settings.copy()
            trial[index] = Setting("full")
            plan = spec_from_settings(trial, start.default)
            trials[index] = (score(plan), plan)
        fastest = min(seconds for seconds, _ in trials.values())
        tied = [i for i in candidates if trials[i][0] <= fastest + _TIE * abs(fastest)]
        results = {i: memory(trials[i][1]) for i in tied}
        chosen = min(tied, key=lambda i: (results[i].peak_bytes, trials[i][0], i))
        settings[chosen] = Setting("full")
        found.append(record(len(found), trials[chosen][1], chosen, trials[chosen][0], results[chosen], first.stage_peak_bytes))
    return PotentialSequence(degrees=_degrees(parallel), steps=tuple(found), rank=rank)


# ----------------------------------------------------------------------------- plot groups


def _ordered(steps: Sequence[PotentialStep]) -> list[PotentialStep]:
    """Fastest first, the lower peak breaking ties."""
    return sorted(steps, key=lambda s: (s.step_seconds, s.peak_bytes))


def plot_groups(
    sequences: Sequence[PotentialSequence], top: int | None = None
) -> list[tuple[PotentialSequence, list[PotentialStep]]]:
    """The plans a plot shows of each of the top configurations.

    Args:
        sequences: The configurations' potentials, best configuration first
            (each configuration's score is its starting plan's step time).
        top: How many configurations; :data:`DEFAULT_TOP` when ``None``.

    Returns:
        Per configuration, in the given order, its plans fastest first: every
        plan scored below the next configuration's score and the first at or
        above it, at least two where it has two (so a group shows an
        alternative even when scores tie). The last configuration has no
        next one: it takes the mean size of the groups before it, rounded
        half up, at least two; alone, up to two plans.
    """
    shown = list(sequences[: max(0, DEFAULT_TOP if top is None else top)])
    groups: list[tuple[PotentialSequence, list[PotentialStep]]] = []
    for sequence, following in zip(shown, shown[1:]):
        plans = _ordered(sequence.steps)
        below = sum(plan.step_seconds < following.score_seconds for plan in plans)
        groups.append((sequence, plans[: max(2, below + 1)]))
    if shown:
        size = math.floor(sum(len(plans) for _, plans in groups) / len(groups) + 0.5) if groups else 2
        groups.append((shown[-1], _ordered(shown[-1].steps)[: max(2, size)]))
    return groups


# ----------------------------------------------------------------------------- CSV


def _mib(value: float) -> float:
    return round(value / _MIB, 3)


def _scope(plan: RecomputeSpec) -> str:
    settings = (plan.default, *(s for _, _, s in plan.layers))
    if any(getattr(s, "offload", 0.0) for s in settings):
        return "offload"
    return "per_layer" if plan.layers else "whole_model"


def _layer_runs(plan: RecomputeSpec, kinds: Sequence[str]) -> list[dict[str, Any]]:
    """Maximal runs of consecutive body layers of one kind and one setting."""
    runs: list[list[Any]] = []
    for index, kind in enumerate(kinds):
        setting = plan.setting_of(index)
        if runs and runs[-1][2] == kind and runs[-1][3] == setting:
            runs[-1][1] = index
        else:
            runs.append([index, index, kind, setting])
    return [{"layers": range_key(a, b), "kind": kind, "setting": setting_value(s)} for a, b, kind, s in runs]


def potential_rows(sequence: PotentialSequence, kinds: Sequence[str]) -> Iterator[dict[str, Any]]:
    """The CSV rows of one sequence (``kinds``: each body layer's kind name)."""
    for step in sequence.steps:
        settings = [step.plan.setting_of(i) for i in range(len(kinds))]
        shown = compact(settings)
        row: dict[str, Any] = {"TOP": sequence.rank, "step": step.step}
        row.update(sequence.degrees)
        row.update({
            "changed_layer": "" if step.changed_layer is None else str(step.changed_layer),
            "full_layers": step.full_layers,
            "memory_mb": _mib(step.peak_bytes),
            "score": step.step_seconds,
            "recompute_mode": json.dumps(setting_value(shown.default)) if shown.default.mode == "switches" else setting_value(shown.default),
            "recompute_layers": json.dumps({range_key(a, b): setting_value(s) for a, b, s in shown.layers}),
            "layer_recompute": json.dumps(_layer_runs(step.plan, kinds)),
            "stage_memory_mb": json.dumps([_mib(p) for p in step.stage_peak_bytes]),
            "stage_savings": json.dumps([_mib(s) for s in step.stage_savings_bytes]),
            "plan_scope": _scope(step.plan),
        })
        yield row


def write_potentials_csv(
    sequences: Sequence[PotentialSequence], kinds: Sequence[str], path: str | os.PathLike
) -> None:
    """Replace *path* with the sequences' rows (columns: docs/recompute_potentials.md).

    Written to a temporary file in the same folder and moved over *path*
    (``os.replace``), so a reader never sees half a file.

    Args:
        sequences: The configurations' potentials, in rank order.
        kinds: Each body layer's kind name (the ``layer_recompute`` column).
        path: The CSV; its folder is created where missing.
    """
    columns = ["TOP", "step", *DEGREES, *CSV_COLUMNS]

    def write(temporary: str) -> None:
        with open(temporary, "w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            for sequence in sequences:
                writer.writerows(potential_rows(sequence, kinds))

    atomic_write(path, write, ".csv", flag="--csv")


# ----------------------------------------------------------------------------- plot


def plot_potentials(
    sequences: Sequence[PotentialSequence], path: str | os.PathLike, *, top: int | None = None, title: str = ""
) -> None:
    """Draw peak memory against step time as a PNG.

    One configuration: its whole sequence. Several: :func:`plot_groups`' plans
    of the *top* of them. Each point is labelled with its count of fully
    recomputed layers. Needs matplotlib (``pip install 'hp-planner[plots]'``).

    Raises:
        ConfigError: matplotlib is not installed, or *path* does not end in ``.png``.
    """
    check_png(path)
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(8, 5), dpi=120)
    try:
        groups = plot_groups(sequences, top) if len(sequences) > 1 else [(s, _ordered(s.steps)) for s in sequences]
        for sequence, plans in groups:
            label = f"TOP {sequence.rank}: " + " ".join(f"{k}={v}" for k, v in sequence.degrees.items() if v != 1 or k == "dp")
            xs = [plan.step_seconds for plan in plans]
            ys = [plan.peak_bytes / 2**30 for plan in plans]
            axes.plot(xs, ys, marker="o", label=label)
            for plan, x, y in zip(plans, xs, ys):
                axes.annotate(str(plan.full_layers), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        axes.set_xlabel("step time (s, cost model)")
        axes.set_ylabel("peak memory (GiB, largest stage)")
        axes.set_title(title or "Recompute potentials: one more fully recomputed layer per point")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
        figure.tight_layout()
        atomic_write(path, lambda temporary: figure.savefig(temporary, format="png"), ".png", flag="--plot")
    finally:
        plt.close(figure)
