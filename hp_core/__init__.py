"""hp-planner core: the plugin contract, the specs and the planner.

The public surface is :data:`__all__`: the façade's functions
(:mod:`hp_core.api`), the specs a run is stated in, the results they return,
the errors they raise and the marker plugins implement hooks with. Names are
imported on first use, so ``import hp_core.types`` (what a plugin needs)
does not load the engine::

    import hp_core

    registry = hp_core.build_registry()
    model = hp_core.model_from_preset("llama3-8b", registry)
    print(hp_core.estimate(model, hp_core.ParallelSpec(dp=8, seq_len=4096), registry=registry).peak_bytes)

``hp_core.__version__`` is hp-planner's installed version, looked up on first
use (:func:`hp_core.distributions.planner_version`).
"""

from __future__ import annotations

import importlib
from typing import Any

# Each public name and the module it lives in.
_PUBLIC = {
    # the façade (hp_core.api)
    "PreparedRun": "hp_core.api",
    "build_registry": "hp_core.api",
    "count_parameters": "hp_core.api",
    "estimate": "hp_core.api",
    "load_model_config": "hp_core.api",
    "model_from_config": "hp_core.api",
    "model_from_preset": "hp_core.api",
    "plan_recompute": "hp_core.api",
    "prepare": "hp_core.api",
    "search": "hp_core.api",
    "step_time": "hp_core.api",
    # the specs a run is stated in
    "HardwareSpec": "hp_core.specs",
    "LayerGroup": "hp_core.specs",
    "ModelSpec": "hp_core.specs",
    "ParallelSpec": "hp_core.specs",
    "PrecisionSpec": "hp_core.specs",
    "RecomputeSpec": "hp_core.specs",
    "Setting": "hp_core.specs",
    # results
    "Estimate": "hp_core.results",
    "StageEstimate": "hp_core.results",
    "StepTime": "hp_core.engine.timing",
    "RecomputePlan": "hp_core.engine.recompute.plan",
    "SearchResult": "hp_core.engine.search",
    # the registry and the plugin contract
    "Registry": "hp_core.registry",
    "hookimpl": "hp_core.markers",
    # errors
    "ConfigError": "hp_core.errors",
    "HPError": "hp_core.errors",
    "PlanNotExecutable": "hp_core.errors",
    "PluginError": "hp_core.errors",
}

__all__ = sorted([*_PUBLIC, "__version__"])


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from hp_core.distributions import planner_version

        value = planner_version()
    elif name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # once per process
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
