"""The time of a layer placed first or last, under what the body layers' settings make it recompute
(:mod:`hp_core.engine.inner_layers`): nothing, its inner layers' switches, or its own whole checkpoint.

Under its whole checkpoint (:class:`~hp_core.reruns.WholeCheckpoint`, Megatron-Core's MTP layer under full recompute
with the ``uniform`` method) the layer's forward and backward are its plain ones, and its backward re-runs the part
inside the checkpoint, as a fully recomputed body layer re-runs its whole forward (:func:`~.layer._layer_time`
``full``): that part's forward again, its collectives' forward calls issued again, and those collectives' exposure
behind the longer backward. The part is the layer less what lies outside (the MTP's shared head GEMM, its embedding
call's and head's collectives); the increment is that part's time fully recomputed less its time plain.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import attrs

from hp_core.costs import Flops, LayerCost, LayerWork
from hp_core.engine.inner_layers import checkpointed_whole, placed_recompute
from hp_core.engine.timing.layer import _layer_time, _LayerTime

if TYPE_CHECKING:
    from hp_core.engine.prepare import PreparedRun
    from hp_core.engine.timing.rates import _Rates
    from hp_core.specs import Setting

__all__ = ["checkpoint_inside", "placed_time"]


def _less(items: tuple, outside: tuple) -> tuple:
    """*items* less one listing of each of *outside* (a multiset difference, order kept)."""
    left = Counter(outside)
    kept = []
    for item in items:
        if left[item]:
            left[item] -= 1
        else:
            kept.append(item)
    return tuple(kept)


def checkpoint_inside(cost: LayerCost, work: LayerWork) -> tuple[LayerCost, LayerWork]:
    """The part of a placed layer inside its whole checkpoint: its cost less the GEMMs and collectives outside
    (``checkpoint.gemms``, ``checkpoint.collectives``) and their forward FLOPs (``2 rows fan_out fan_in`` each)."""
    outside = cost.checkpoint
    flops = sum(2 * rows * out * fan_in for rows, out, fan_in in outside.gemms)
    inside = attrs.evolve(work, gemms=_less(work.gemms, outside.gemms),
                          high_precision_gemms=_less(work.high_precision_gemms, outside.gemms),
                          original_input_gemms=_less(work.original_input_gemms, outside.gemms),
                          frozen_gemms=_less(work.frozen_gemms, outside.gemms),
                          collectives=_less(work.collectives, outside.collectives))
    forward = attrs.evolve(cost.forward, matmul_flops=cost.forward.matmul_flops - flops)
    return attrs.evolve(cost, forward=forward, work=inside), inside


def _by_group(*parts: tuple[int, tuple[tuple[str, float, float], ...]]) -> tuple[tuple[str, float, float], ...]:
    sums: dict[str, list[float]] = {}
    for sign, groups in parts:
        for group, total, exposed in groups:
            found = sums.setdefault(group, [0.0, 0.0])
            found[0] += sign * total
            found[1] += sign * exposed
    return tuple((g, t, e) for g, (t, e) in sums.items())


def placed_time(run: PreparedRun, group: int, settings: tuple[Setting, ...], work: LayerWork, rates: _Rates) -> _LayerTime:
    """One layer of *group*, placed first or last, per micro-batch when the body layers run *settings* (module
    docstring)."""
    cost = run.costs[group]
    if not checkpointed_whole(run, group, settings):
        return _layer_time(cost, work, False, placed_recompute(run, group, settings), rates)
    plain = _layer_time(cost, work, False, frozenset(), rates)
    inside_cost, inside_work = checkpoint_inside(cost, work)
    again = _layer_time(inside_cost, inside_work, True, frozenset(), rates)
    once = _layer_time(inside_cost, inside_work, False, frozenset(), rates)
    return attrs.evolve(
        plain, recompute_seconds=plain.recompute_seconds + again.recompute_seconds,
        communication_seconds=plain.communication_seconds + again.communication_seconds - once.communication_seconds,
        recomputed_flops=plain.recomputed_flops + again.recomputed_flops,
        communication_by_group=_by_group((1, plain.communication_by_group), (1, again.communication_by_group),
                                         (-1, once.communication_by_group)))
