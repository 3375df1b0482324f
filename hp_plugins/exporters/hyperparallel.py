"""The ``hyperparallel`` exporter: a recompute plan as HyperParallel's ``activation_checkpoint`` config.

HyperParallel recomputes per op and per layer (docs/trainer_plans.md; its
runtime profile ``hyperparallel`` states no module restriction: any set of
switches runs), so every plan without offload is written, as a mode for
every body layer plus per-layer exceptions over inclusive 0-based body
layer ranges::

    {"activation_checkpoint": {"mode": "full", "layers": {"3-7": "off", "8": ["attBMM", "softmax"]}}}

The vocabulary (HyperParallel's own planner's, ``hyper_parallel/auto_parallel/sapp_nd/recompute/profile.py``;
docs/recompute.md):

* ``"off"``: nothing recomputed (hp's ``none``);
* ``"full"``: the layer keeps only its input;
* ``"selective"``: the layer kind's own selective set;
* a list of switch names (``attBMM``, ``headCast``, ``dropout``, ``softmax``,
  ``normOp``, ``gather``, ``ffAct``, ``attUp``): exactly those recomputed.

The mode is the setting that leaves the fewest exceptions
(:func:`hp_core.engine.recompute.layout.compact`); ``layers`` is left out when there
are none. A plan that offloads is refused (the exporter writes no offload)
with the same plan without it.
"""

from __future__ import annotations

from typing import Any

from hp_core.errors import PlanNotExecutable
from hp_core.markers import hookimpl
from hp_core.engine.recompute.layout import compact, plan_layout, range_key, settings_of
from hp_core.registry import Registry
from hp_core.specs import ModelSpec, ParallelSpec, RecomputeSpec, Setting
from hp_core.types import Exporter
from hp_plugins.exporters._common import offloaded, refuse_offload

__all__ = ["export_hyperparallel", "hp_exporters"]

_TRAINER = "hyperparallel"
_RUNTIME = "hyperparallel"
_RUNS = 'a mode ("off", "full", "selective" or a list of switches) for every layer with per-layer exceptions over ranges, no offload'


def _value(setting: Setting) -> Any:
    if setting.mode == "none":
        return "off"
    if setting.mode == "switches":
        return sorted(setting.switches)
    return setting.mode


def export_hyperparallel(plan: RecomputeSpec, model: ModelSpec, parallel: ParallelSpec, *, registry: Registry) -> dict:
    """*plan* as ``{"activation_checkpoint": {"mode": ..., "layers": {"a-b": ...}}}``.

    Args:
        plan: The recompute plan.
        model: The layer stack (its body layer count bounds the ranges).
        parallel: The layout (checked to split over its chunks, as the estimate does).
        registry: Layer kinds (each setting's switches must be its kind's) and
            the ``hyperparallel`` runtime.

    Raises:
        PlanNotExecutable: The plan offloads; it names the plan without offload.
        ConfigError: An unknown kind or switch, a range beyond the model, or a
            layout that does not split.
    """
    runtime = registry.runtime(_RUNTIME)
    layout = plan_layout(model, parallel, registry)

    def write(suggestion: RecomputeSpec) -> dict:
        return export_hyperparallel(suggestion, model, parallel, registry=registry)

    if offloaded(plan):
        raise refuse_offload(_TRAINER, _RUNS, plan, write)
    settings = settings_of(plan, layout.count)
    for index, setting in enumerate(settings):
        full, switches = layout.switches(setting, index)  # an unknown switch is a ConfigError here
        if full and not runtime.full_recompute:
            raise PlanNotExecutable(_TRAINER, f"layer {index} is fully recomputed; runtime {runtime.name} runs no full recompute")
        if not runtime.executes(switches):
            raise PlanNotExecutable(_TRAINER, f"layer {index} recomputes {'+'.join(sorted(switches))}, which runtime {runtime.name} does not run")
    spec = compact(settings)
    section: dict[str, Any] = {"mode": _value(spec.default)}
    if spec.layers:
        section["layers"] = {range_key(first, last): _value(setting) for first, last, setting in spec.layers}
    return {"activation_checkpoint": section}


@hookimpl
def hp_exporters():
    yield Exporter(
        name=_TRAINER,
        runtime=_RUNTIME,
        export=export_hyperparallel,
        description='HyperParallel activation_checkpoint: a mode with per-layer exceptions such as {"3-7": "off"}',
    )
