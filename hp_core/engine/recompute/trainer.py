"""The fastest recompute plan a trainer can express: a search within its exporter's candidates.

A per-layer optimum (:mod:`hp_core.engine.recompute.plan`) may be one a trainer's
flags cannot say: Megatron-LM recomputes the same modules on every layer, or
fully recomputes the first N layers of every pipeline chunk, never a mix. An
exporter that lists every plan its trainer expresses (``Exporter.candidates``)
lets the planner price each with the same estimate and step time and keep
the fastest whose every stage fits, so the flags it prints are ones the
trainer runs.
"""

from __future__ import annotations

import attrs

from hp_core.engine.estimate import estimate_run
from hp_core.engine.prepare import prepare
from hp_core.errors import ConfigError, call_plugin
from hp_core.engine.recompute.plan import plan_run
from hp_core.registry import Registry
from hp_core.results import Estimate
from hp_core.specs import HardwareSpec, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec
from hp_core.engine.timing import StepTime, time_run

__all__ = ["TrainerPlan", "plan_for_trainer"]


@attrs.frozen
class TrainerPlan:
    """The chosen trainer-expressible plan.

    Attributes:
        trainer: The exporter's name.
        recompute: The plan.
        written: The plan as the trainer reads it (flags or config).
        estimate: Its memory estimate.
        time: Its step time.
        fits: Whether every stage fits ``memory - reserve``.
        shortfall_bytes: When nothing fits, how far the least-peak candidate is over.
        candidates: How many plans the trainer expresses here (all were priced).
    """

    trainer: str
    recompute: RecomputeSpec
    written: object
    estimate: Estimate
    time: StepTime
    fits: bool
    shortfall_bytes: int
    candidates: int


def plan_for_trainer(
    model: ModelSpec,
    parallel: ParallelSpec,
    *,
    registry: Registry,
    hardware: HardwareSpec,
    trainer: str,
    reserve_bytes: int = 0,
    precision: PrecisionSpec | None = None,
    census: str = "formulas",
    attention: str | None = None,
) -> TrainerPlan:
    """The fastest plan *trainer* expresses whose every stage fits; the least-peak one when none does.

    The candidates are the exporter's (``Exporter.candidates``); a trainer that
    runs any per-layer plan (its runtime states no ``recompute_modules``) takes
    the exact per-layer optimum of :func:`hp_core.engine.recompute.plan.plan_run`.

    Raises:
        ConfigError: The trainer has no exporter or its exporter lists no candidates.
    """
    exporter = registry.exporter(trainer)
    run = prepare(model, parallel, registry=registry, runtime=exporter.runtime, precision=precision, census=census,
                  attention=attention)
    if exporter.candidates is not None:
        candidates = list(exporter.candidates(model, parallel, registry=registry))
    elif registry.runtime(exporter.runtime).recompute_modules is None:
        # A trainer running any per-layer plan (HyperParallel): the exact per-layer optimum is one.
        found = plan_run(run, hardware, reserve_bytes=reserve_bytes)
        candidates = [found.plan.recompute]
    else:
        raise ConfigError("--export", f"the {trainer} exporter does not list the plans its trainer expresses")
    limit = hardware.memory_bytes - reserve_bytes
    best = None
    least = None
    count = 0
    for plan in candidates:
        count += 1
        memory = estimate_run(run, plan, hardware)
        fits = memory.peak_bytes <= limit
        if least is None or memory.peak_bytes < least[1].peak_bytes:
            least = (plan, memory)
        if not fits:
            continue
        time = time_run(run, hardware, plan)
        if best is None or time.step_seconds < best[2].step_seconds:
            best = (plan, memory, time)
    if best is None:
        plan, memory = least
        time = time_run(run, hardware, plan)
        best = (plan, memory, time)
    plan, memory, time = best
    return TrainerPlan(
        trainer=trainer,
        recompute=plan,
        written=call_plugin(exporter.name, "exporter", exporter.export, plan, model, parallel, registry=registry),
        estimate=memory,
        time=time,
        fits=memory.peak_bytes <= limit,
        shortfall_bytes=max(0, memory.peak_bytes - limit),
        candidates=count,
    )
