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

from typing import TYPE_CHECKING

import attrs

from hp_core.costs import LayerCost, LayerWork, Rerun
from hp_core.errors import ConfigError
from hp_core.linear_modules import LinearModule
from hp_core.engine.inner_layers import checkpointed_whole, placed_recompute
from hp_core.engine.timing.gemm_seconds import _less
from hp_core.engine.timing.layer import _layer_time, _LayerTime

if TYPE_CHECKING:
    from hp_core.engine.prepare import PreparedRun
    from hp_core.engine.timing.rates import _Rates
    from hp_core.specs import Setting

__all__ = ["checkpoint_inside", "placed_time"]


def _renumbered(positions: tuple[int, ...], outside: frozenset[int]) -> tuple[int, ...]:
    """*positions* (into a layer's ``gemms``) less those *outside*, each moved back by the outside ones before it:
    their positions in the GEMMs left."""
    return tuple(p - sum(q < p for q in outside) for p in positions if p not in outside)


def _inside_rerun(rerun: Rerun, outside: frozenset[int]) -> Rerun:
    """*rerun* with its GEMMs outside the checkpoint left out and its positions those of the GEMMs inside."""
    kept = [(p, g) for p, g in zip(rerun.positions, rerun.gemms) if p not in outside]
    return attrs.evolve(rerun, gemms=tuple(g for _, g in kept), positions=_renumbered(rerun.positions, outside),
                        high_precision_positions=_renumbered(rerun.high_precision_positions, outside),
                        original_input_positions=_renumbered(rerun.original_input_positions, outside),
                        userbuffers_linears=tuple((n, _renumbered((p,), outside)[0]) for n, p in rerun.userbuffers_linears
                                                  if p not in outside))


def _inside_module(module: LinearModule, outside: frozenset[int]) -> LinearModule:
    """*module* with its GEMMs outside the checkpoint left out (and their entries of its original-input list) and its
    positions those of the GEMMs inside."""
    dropped = tuple(g for p, g in zip(module.positions, module.gemms) if p in outside)
    return attrs.evolve(module, gemms=tuple(g for p, g in zip(module.positions, module.gemms) if p not in outside),
                        positions=_renumbered(module.positions, outside),
                        original_input_gemms=_less(module.original_input_gemms, dropped))


def checkpoint_inside(cost: LayerCost, work: LayerWork) -> tuple[LayerCost, LayerWork]:
    """The part of a placed layer inside its whole checkpoint: its cost less the GEMMs and collectives outside
    (``checkpoint.gemms`` at ``checkpoint.positions``, ``checkpoint.collectives``) and their forward FLOPs
    (``2 rows fan_out fan_in`` each). The GEMMs outside leave ``gemms`` by place; the lists of shapes
    (``high_precision_gemms``, ``original_input_gemms``, ``frozen_gemms``) lose one listing of each, as they are priced
    by shape; the re-runs' and modules' positions are renumbered to the GEMMs left (:class:`~hp_core.costs.Rerun`,
    :class:`~hp_core.linear_modules.LinearModule`), so each still names its own GEMM there."""
    outside = cost.checkpoint
    if any(p >= len(work.gemms) or work.gemms[p] != g for p, g in zip(outside.positions, outside.gemms)):
        raise ConfigError("$.model", f"the checkpoint's outside GEMMs {outside.gemms} are not the layer's at their "
                                     f"positions {outside.positions}")
    places = frozenset(outside.positions)
    flops = sum(2 * rows * out * fan_in for rows, out, fan_in in outside.gemms)
    inside = attrs.evolve(work, gemms=tuple(g for p, g in enumerate(work.gemms) if p not in places),
                          high_precision_gemms=_less(work.high_precision_gemms, outside.gemms),
                          original_input_gemms=_less(work.original_input_gemms, outside.gemms),
                          frozen_gemms=_less(work.frozen_gemms, outside.gemms),
                          collectives=_less(work.collectives, outside.collectives),
                          reruns=tuple((switch, _inside_rerun(r, places)) for switch, r in work.reruns),
                          modules=tuple(_inside_module(m, places) for m in work.modules))
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
