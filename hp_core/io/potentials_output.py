"""Recompute potentials written out: the CSV rows and file, and the plot (docs/recompute_potentials.md).

:func:`hp_core.engine.recompute.potential.recompute_potentials` computes the
sequences; here :func:`plot_groups` selects, across configurations ranked by
their own score, the plans a plot shows; :func:`write_potentials_csv` writes
the sequences (columns in docs/recompute_potentials.md) and
:func:`plot_potentials` draws memory against step time (the optional extra
``plots``: matplotlib).
"""

from __future__ import annotations

import csv
import json
import math
import os
from typing import Any, Iterator, Sequence

from hp_core.engine.recompute.layout import compact, range_key, setting_value
from hp_core.engine.recompute.potential import DEGREES, PotentialSequence, PotentialStep
from hp_core.io.files import atomic_write, check_png, pyplot
from hp_core.specs import RecomputeSpec

__all__ = [
    "CSV_COLUMNS",
    "DEFAULT_TOP",
    "plot_groups",
    "plot_potentials",
    "potential_rows",
    "write_potentials_csv",
]

# The configurations a plot shows when no number is asked for (the seed's).
DEFAULT_TOP = 20
# The columns after TOP, step and the degrees (docs/recompute_potentials.md).
CSV_COLUMNS = (
    "changed_layer", "full_layers", "memory_mb", "score", "recompute_mode", "recompute_layers",
    "layer_recompute", "stage_memory_mb", "stage_savings", "plan_scope",
)
_MIB = 2**20


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
