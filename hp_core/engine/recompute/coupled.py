"""Placed layers whose recompute follows the body's settings: the states the planner enumerates (docs/recompute.md,
'Why it is exact').

Under a runtime whose one recompute configuration reaches the layers a layer placed first or last runs inside itself
(``Runtime.inner_recompute``; the MTP module under ``megatron``), that layer recomputes the union ``U`` of the
switches the run's body layers of its inner kinds recompute, fully recomputed ones adding nothing, and runs under its
own whole checkpoint where every body layer is recomputed fully (:mod:`hp_core.engine.inner_layers`). So a setting
chosen for a body layer in one stage can change the time and peak of the stage the placed layer sits in, which no
stage's search sees alone.

What the placed layer keeps and costs depends on ``U`` only through the switches its terms name (``S``; every switch
of its inner kinds where it states measured settings, which are looked up by the exact set). The planner therefore
enumerates the states :func:`coupled_states` lists: each union ``V = U & S`` a plan can reach (the closure under union
of ``switches & S`` over the candidate settings of the inner kinds' body groups, each with the runtime's
always-recomputed switches, :func:`base`, which alone is the state where every such layer is fully recomputed) and, where the layer states a checkpoint, every body layer fully recomputed. Under each state it
solves every stage with the body groups of the inner kinds restricted to the settings that keep the state
(:func:`keeps`; full always keeps a union state, as it adds nothing) and the placed layer priced under it. Every plan
is found under the state it implies, where it is priced as :func:`~hp_core.engine.estimate.estimate_run` prices it,
so the fastest plan that fits over all states is the fastest plan that fits.

A plan found under ``V`` may imply a smaller union (no layer needed a switch of ``V``, or every layer went full); the
planner prices it as it is (:func:`~hp_core.engine.estimate.estimate_run`, :func:`~hp_core.engine.timing.time_run`)
and keeps it only if it fits so, then searches the plans reaching ``V`` exactly by branch and bound
(``plan_run``'s ``covered``): branching on a switch of ``V`` no layer reaches, each branch requiring one body layer of
an inner kind to recompute it (one of each class of interchangeable layers required alike, :func:`interchangeable`),
cut where its stages cannot fit or where its plan priced with the placed layer in the state
(:class:`~hp_core.engine.inner_layers.PlacedState`, a lower bound on the branch) is no faster than the best plan. A
state whose branching runs past its budget is reported (``PlanResult.unproven``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import attrs

from hp_core.engine.inner_layers import PlacedState, placed_layer
from hp_core.engine.stage import PlacedLayer
from hp_core.specs import Setting

if TYPE_CHECKING:
    from hp_core.engine.prepare import PreparedRun
    from hp_core.engine.recompute.solver import LayerOption

__all__ = ["Coupling", "WHOLE", "base", "coupled_states", "coupling", "interchangeable", "keeps", "keeps_named", "named",
           "placed_under"]

WHOLE = "whole"  # the state: every body layer fully recomputed, the placed layer under its own checkpoint


@attrs.frozen
class Coupling:
    """The placed layers whose recompute follows the body's, and what of the body they read.

    Attributes:
        groups: The placed groups with inner kinds (``first`` and ``last``).
        inner: The body groups of those inner kinds.
        switches: ``S``: the switches the placed layers' pricing can tell apart.
        checkpoint: Whether one of them states a whole checkpoint (the :data:`WHOLE` state exists).
    """

    groups: frozenset[int]
    inner: frozenset[int]
    switches: frozenset[str]
    checkpoint: bool


def coupling(run: PreparedRun) -> Coupling | None:
    """The run's coupling, or ``None`` where no placed layer's recompute follows the body's."""
    if not run.runtime.inner_recompute:
        return None
    groups = {i for where in ("first", "last") for i in run.placed_groups(where)
              if run.costs[i].inner_kinds or run.costs[i].checkpoint is not None}
    if not groups:
        return None
    kinds = {name for i in groups for name in run.costs[i].inner_kinds}
    inner = frozenset(i for i in run.layers.body_groups if run.kinds[i].name in kinds)
    switches: set[str] = set()
    for i in groups:
        cost = run.costs[i]
        if cost.measured:  # looked up by the exact set (LayerCost.kept_under): every switch tells
            switches |= {s for j in inner for s in run.kinds[j].switches}
        switches |= {t.switch for t in cost.activations if t.switch is not None}
    checkpoint = any(run.costs[i].checkpoint is not None for i in groups)
    return Coupling(frozenset(groups), inner, frozenset(switches), checkpoint)


def base(run: PreparedRun, couple: Coupling) -> frozenset[str]:
    """What every state but :data:`WHOLE` holds: the runtime's always-recomputed switches the placed layers name
    (:func:`hp_core.engine.inner_layers.placed_recompute`)."""
    return frozenset(run.runtime.implicit_recompute) & couple.switches


def coupled_states(run: PreparedRun, couple: Coupling, options: dict[int, Sequence[LayerOption]]) -> list:
    """The states to search: each reachable union ``V`` (a frozenset; the closure under union of the inner groups'
    non-full options' ``switches & S``, from :func:`base`), fewest switches first, then :data:`WHOLE` where a
    placed layer states a checkpoint and every body group can be fully recomputed."""
    seeds = {run.resolve(i, o.setting)[1] & couple.switches for i in couple.inner for o in options[i]
             if not run.resolve(i, o.setting)[0]}
    closure: set[frozenset[str]] = {base(run, couple)}
    for seed in seeds:
        closure |= {found | seed for found in closure}
    states: list = sorted(closure, key=lambda s: (len(s), sorted(s)))
    if couple.checkpoint and all(any(run.resolve(i, o.setting)[0] for o in options[i]) for i in run.layers.body_groups):
        states.append(WHOLE)
    return states


def keeps(run: PreparedRun, couple: Coupling, group: int, option: LayerOption, state) -> bool:
    """Whether a body layer of *group* under *option* is allowed under *state*: under :data:`WHOLE` only full; under a
    union ``V`` full, or switches within ``V`` (of ``S``) for a group of the inner kinds, anything for another."""
    return keeps_named(couple, group, named(run, couple, group, option), state)


def named(run: PreparedRun, couple: Coupling, group: int, option: LayerOption) -> tuple[bool, frozenset[str]]:
    """What :func:`keeps` reads of an option: whether it is full, and its switches within ``S``. Options alike in it
    are kept under the same states (the planner asks once for each)."""
    full, switches = run.resolve(group, option.setting)
    return full, switches & couple.switches


def keeps_named(couple: Coupling, group: int, found: tuple[bool, frozenset[str]], state) -> bool:
    """:func:`keeps` of an option of *group* that :func:`named` reads as *found*."""
    full, switches = found
    if state == WHOLE:
        return full
    return full or group not in couple.inner or switches <= state


def placed_under(run: PreparedRun, group: int, state, where: str) -> PlacedLayer:
    """A placed layer of *group* priced under *state*: :func:`hp_core.engine.inner_layers.placed_layer` with the state
    stated (:class:`~hp_core.engine.inner_layers.PlacedState`), as it prices it for a plan implying that state."""
    return placed_layer(run, group, PlacedState((Setting(),) * run.body_count, state), where)


def interchangeable(run: PreparedRun) -> dict[int, tuple] | None:
    """Per body layer, its class of interchangeable layers: swapping the settings of two layers of a class leaves
    every stage's peak, every stage's time and what the placed layers recompute as they were (the covering search
    branches on one layer of a class, ``plan_run``'s ``covered``); ``None`` where that is not argued.

    Two body layers are interchangeable when they are of one group (the same options: the same kept bytes ``k``,
    time and ``k + w = A`` under each setting) and of one chunk (the same stages run them, each keeping the same
    micro-batches of it, :func:`~hp_core.engine.stage.plan_stage`), and where that chunk is the last a stage runs,
    on the same side of every marker of its warm-up walk, the topmost layer of each group in it
    (:mod:`hp_core.engine.recompute.solver`: the warm-up peak is a constant, plus ``n_c`` times the bytes chunk
    ``c``'s layers keep, plus the largest ``A_j - S_j`` over the last chunk, ``S_j`` the bytes kept by layer ``j``
    and those above it, which is reached at a marker or a placed layer; the placed layers sit before or after every
    body layer of their chunk). A swap within a class changes none of those sums; the last-backward point holds
    the stage's first layer's ``A``, the same under every setting. A stage's time is the sum of its layers' times,
    each priced by group and setting (:func:`hp_core.engine.timing.time_run`; up to the order of the floating-point
    sum), and the placed layers' state is the union of the switches (or every layer full), which no swap moves.
    The other peak points are the solver's too: a runtime's own points beside the planner's (the megatron runtime's
    ``optimizer``) hold no activation. Where layer order does matter, none is argued: a runtime whose own peak points
    replace the end of warm-up (``Runtime.peak_points``; the solver calibrates its model on them and does not prove
    its plan there) and FSDP (``zero`` 3: each layer's gathers hide behind its neighbours' compute,
    :func:`hp_core.engine.timing.overlap.fsdp_layers`).
    """
    from hp_core.engine.estimate import estimate_run

    if run.zero >= 3:
        return None
    if run.runtime.peak_points is not None and any(
            "warmup_end" not in stage.peak_points for stage in estimate_run(run, (Setting(),) * run.body_count).stages):
        return None
    last_chunks = {run.stage_chunks(stage)[-1] for stage in range(run.parallel.pp)}
    found: dict[int, tuple] = {}
    for c, (lo, hi) in enumerate(run.chunk_bounds):
        # The markers: the topmost layer of each group in a stage's last chunk (the solver's).
        tops = {g: j for j, g in enumerate(run.body_group[lo:hi], lo)}.values() if c in last_chunks else ()
        for j in range(lo, hi):
            found[j] = (c, run.body_group[j], sum(top <= j for top in tops))
    return found
