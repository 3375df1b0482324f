"""What the exporters share: a plan read per layer, and refusing a plan with the closest one."""

from __future__ import annotations

from typing import Callable

import attrs

from hp_core.errors import ConfigError, PlanNotExecutable
from hp_core.engine.recompute.layout import PlanLayout, compact, describe_plan, settings_of
from hp_core.registry import Registry
from hp_core.specs import ParallelSpec, RecomputeSpec, Setting

__all__ = ["LayerPlan", "offloaded", "per_layer", "read_plan", "refuse", "trainer_schedule", "without_offload"]


@attrs.frozen
class LayerPlan:
    """A plan per body layer, as a trainer sees it.

    Attributes:
        settings: Each layer's setting.
        full: Whether each layer is fully recomputed.
        recomputed: Each layer's recomputed switches beyond what the
            trainer always recomputes (empty for a full layer).
    """

    settings: tuple[Setting, ...]
    full: tuple[bool, ...]
    recomputed: tuple[frozenset[str], ...]

    @property
    def active(self) -> tuple[bool, ...]:
        """Whether each layer recomputes anything."""
        return tuple(f or bool(r) for f, r in zip(self.full, self.recomputed))


def read_plan(plan: RecomputeSpec, layout: PlanLayout, implicit: frozenset[str]) -> LayerPlan:
    """*plan* per body layer of *layout*, less the *implicit* switches its trainer always recomputes."""
    settings = settings_of(plan, layout.count)
    full, recomputed = [], []
    for index, setting in enumerate(settings):
        is_full, switches = layout.switches(setting, index)
        full.append(is_full)
        recomputed.append(frozenset() if is_full else switches - implicit)
    return LayerPlan(tuple(settings), tuple(full), tuple(recomputed))


def without_offload(plan: RecomputeSpec) -> RecomputeSpec:
    """*plan* with every offload share set to 0."""
    def strip(setting: Setting) -> Setting:
        return attrs.evolve(setting, offload=0.0) if getattr(setting, "offload", 0.0) else setting

    return RecomputeSpec(default=strip(plan.default), layers=tuple((a, b, strip(s)) for a, b, s in plan.layers))


def offloaded(plan: RecomputeSpec) -> bool:
    """Whether any setting of *plan* offloads."""
    return any(getattr(s, "offload", 0.0) for s in (plan.default, *(s for _, _, s in plan.layers)))


def refuse(trainer: str, why: str, runs: str, suggestion: RecomputeSpec, write: Callable[[RecomputeSpec], object]) -> PlanNotExecutable:
    """The error refusing a plan: why, what the trainer runs, and the closest plan it runs, written out."""
    text = write(suggestion)
    shown = text if isinstance(text, str) else repr(text)
    shown = " ".join(shown.split()) or "(no recompute)"
    return PlanNotExecutable(
        trainer,
        f"{trainer} cannot run this plan: {why}. It runs {runs}. Closest plan it runs: {shown} "
        f"({describe_plan(suggestion)})",
        suggestion,
    )


def refuse_offload(trainer: str, runs: str, plan: RecomputeSpec, write: Callable[[RecomputeSpec], object]) -> PlanNotExecutable:
    """The error refusing an offloading plan: the closest plan is *plan* without offload,
    or, where the trainer refuses that too, the plan it suggests instead."""
    stripped = without_offload(plan)
    try:
        write(stripped)
        closest = stripped
    except PlanNotExecutable as exc:
        closest = exc.suggestion if exc.suggestion is not None else RecomputeSpec()
    return refuse(trainer, "this exporter writes no activation offload", runs, closest, write)


def per_layer(settings: list[Setting]) -> RecomputeSpec:
    """The compact plan giving each body layer its setting."""
    return compact(settings)


def trainer_schedule(trainer: str, parallel: ParallelSpec, registry: Registry) -> str:
    """The trainer's own name for the layout's pipeline schedule (``Schedule.trainer_names``).

    Raises:
        ConfigError: The schedule names no such trainer: the trainer does not run it (one line,
            naming the schedules it runs).
    """
    schedule = registry.schedule(parallel.resolved_schedule)
    name = schedule.trainer_names.get(trainer)
    if name is None:
        runs = ", ".join(s.name for s in registry.schedules if trainer in s.trainer_names) or "none"
        raise ConfigError("$.parallel.schedule", f"{trainer} cannot run the {schedule.name} pipeline schedule; it runs {runs} "
                                                 "(docs/schedules.md); choose one with --schedule")
    return name
