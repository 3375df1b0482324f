"""A rank's static memory: the parameter elements it holds of a layer, and the bytes ZeRO leaves it.

Parameters, gradients, master parameters and optimizer states per rank, sharded by
ZeRO stage (Rajbhandari et al. 2020, "ZeRO", Section 5; Megatron-LM
``theoretical_memory_usage.py``): the stage planner's static part
(:mod:`hp_core.engine.stage`, which re-exports both functions).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from hp_core.costs import LayerCost
from hp_core.engine.optimizer import rank_params
from hp_core.specs.precision import PrecisionSpec

__all__ = ["layer_elements", "static_bytes"]


def layer_elements(cost: LayerCost, tp: int, ep: int, etp: int, owners_here: frozenset[str] | set[str]) -> dict[str, int]:
    """Parameter elements one rank holds of one layer, by group (before ZeRO sharding).

    Args:
        owners_here: The kinds on the rank's stage: a tied weight whose owner
            is among them is one tensor, counted with its owner.
    """
    found: dict[str, int] = {}
    for p, n in rank_params(cost, tp, ep, etp, owners_here):
        found[p.group] = found.get(p.group, 0) + n
    return found


def static_bytes(
    elements: dict[str, int], states: Mapping[str, Any], precision: PrecisionSpec, master_param_bytes: int, zero: int,
    dense_degree: int, expert_degree: int, whole_grads: bool = False, frozen_bytes: Mapping[str, Any] | None = None,
) -> tuple[int, int, int, int]:
    """Parameters, gradients, master parameters and optimizer states of one rank.

    Args:
        elements: Parameter elements by group (:func:`layer_elements` summed over the stage).
        states: The optimizer's state bytes by group, before ZeRO sharding, an
            ``int`` or an exact fraction (:func:`hp_core.engine.optimizer.layer_load`
            added up over the stage by :func:`~hp_core.engine.optimizer.group_states`).
        master_param_bytes: Master-copy bytes per element
            (:func:`~hp_core.engine.optimizer.master_bytes`: 0 where the optimizer keeps none).
        dense_degree: What ZeRO shards dense and shared-expert groups over (DP*CP).
        expert_degree: What it shards routed experts over (expert DP).
        whole_grads: The gradients are held unsharded whatever the ZeRO level
            (deferred gradient reduction, at the end of the last backward).
        frozen_bytes: Bytes of frozen parameters by group (``ParamCount.trainable``
            false; :class:`~hp_core.engine.optimizer.OptimizerLoad`): parameters
            only, sharded at ZeRO-3 as the group's trainable ones.
    """
    p = precision
    params = grads = master = optimizer = 0
    for group, n in elements.items():
        shard = expert_degree if group == "routed_expert" else dense_degree
        params += math.ceil(n * p.param_bytes / (shard if zero >= 3 else 1))
        grads += math.ceil(n * p.grad_bytes / (shard if zero >= 2 and not whole_grads else 1))
        master += math.ceil(n * master_param_bytes / (shard if zero >= 1 else 1))
        optimizer += math.ceil(states.get(group, 0) / (shard if zero >= 1 else 1))
    for group, n in (frozen_bytes or {}).items():
        shard = expert_degree if group == "routed_expert" else dense_degree
        params += math.ceil(n / (shard if zero >= 3 else 1))
    return params, grads, master, optimizer
