"""A recompute plan written out: one-line ranges and the stable JSON document (docs/json.md).

The planner (:func:`hp_core.engine.recompute.plan.plan_run`) computes the plan;
this module only presents it.
"""

from __future__ import annotations

from typing import Any

from hp_core.engine.recompute.layout import describe_ranges, range_key, setting_value
from hp_core.engine.recompute.plan import PlanResult, RecomputePlan

__all__ = ["describe_ranges", "recompute_plan_to_json", "unproven_json", "unproven_text"]


def unproven_json(states: tuple) -> list:
    """A plan's unproven states (:attr:`PlanResult.unproven`) as ``--json`` lists them: each a sorted list of switches
    (docs/json.md ``plan.unproven_states``, ``top[].unproven_states``)."""
    return [s if isinstance(s, str) else sorted(s) for s in states]


def unproven_text(states: tuple) -> str:
    """The same in words: each state's switches joined with ``+`` (``nothing`` for the empty one), ``; `` between."""
    return "; ".join(s if isinstance(s, str) else "+".join(sorted(s)) or "nothing" for s in states)


def _result_to_json(result: PlanResult) -> dict[str, Any]:
    return {
        "restricted": result.restricted,
        "fits": result.fits,
        "step_seconds": result.step_seconds,
        "peak_bytes": result.peak_bytes,
        "unproven_states": unproven_json(result.unproven),
        "recompute": {
            "default": setting_value(result.recompute.default),
            "layers": {range_key(first, last): setting_value(setting) for first, last, setting in result.recompute.layers},
        },
        "stages": [
            {
                "index": stage.index,
                "layers": list(stage.layers),
                "ranges": [{"first": first, "last": last, "setting": setting_value(setting)} for first, last, setting in stage.ranges],
                "fits": stage.fits,
                "peak_bytes": stage.peak_bytes,
                "limit_bytes": stage.limit_bytes,
                "shortfall_bytes": stage.shortfall_bytes,
                "binding_point": stage.binding_point,
                "reason": stage.reason,
                "micro_batches_in_flight": stage.estimate.micro_batches_in_flight,
                "micro_batch_seconds": stage.micro_batch_seconds,
                "search_nodes": stage.search_nodes,
            }
            for stage in result.stages
        ],
    }


def recompute_plan_to_json(plan: RecomputePlan) -> dict[str, Any]:
    """The stable JSON document of a plan: byte quantities end in ``_bytes``, times in ``_seconds``.

    The ``recompute`` mappings read back as a config file's ``recompute`` section (docs/config.md).
    """
    return {
        "model": plan.model,
        "runtime": plan.runtime,
        "memory_bytes": plan.memory_bytes,
        "reserve_bytes": plan.reserve_bytes,
        "limit_bytes": plan.limit_bytes,
        "fits": plan.fits,
        "plan": _result_to_json(plan.plan),
        "unrestricted": _result_to_json(plan.unrestricted) if plan.unrestricted is not None else None,
        "provenance": dict(plan.provenance),
    }
