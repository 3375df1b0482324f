"""Layers placed first or last that run body layers inside themselves (the MTP module): the switches their terms may
name, and what they recompute.

Megatron-Core builds the MTP block, and each MTP layer's inner ``TransformerLayer`` or ``HybridStack``, with the
model's one ``TransformerConfig`` (``megatron/core/transformer/multi_token_prediction.py`` at
NVIDIA/Megatron-LM@d98e8a6 lines 1203-1214, 1220-1228, 1929-1936, 1946-1955), so its selective recompute modules act
inside the MTP layer as in the decoder's (docs/kinds.md, '``mtp``'). Such a layer's cost names its inner layers'
kinds (:attr:`LayerCost.inner_kinds <hp_core.costs.LayerCost.inner_kinds>`) and keeps their terms under their
switches; a runtime whose one recompute configuration reaches them (:attr:`Runtime.inner_recompute
<hp_core.types.Runtime.inner_recompute>`) has it recompute what the run's body layers of those kinds recompute.

Full recompute is the layer's own: Megatron-Core's ``MultiTokenPredictionLayer.forward`` (lines 1705-1720) runs
``_checkpointed_forward`` (lines 1492-1653) where ``recompute_granularity`` is ``full``, which under
``recompute_method uniform`` checkpoints ``_proj_and_transformer_layer`` whole (``recompute_num_layers`` must be 1) and
under ``block`` warns and runs it plainly. hp's plan states a setting per body layer, not the method: every body layer
``full`` is the plan Megatron runs as ``uniform`` (the ``megatron`` exporter writes it so, the importer reads
``uniform`` 1 so), and there the layer keeps only what lies outside its checkpoint (:attr:`LayerCost.checkpoint
<hp_core.costs.LayerCost.checkpoint>`) and re-runs the rest in backward (:func:`checkpointed_whole`,
:func:`checkpointed_layer`; the time in :mod:`hp_core.engine.timing.placed`). Any other plan with full layers is
``block`` (the first N layers of every chunk), under which the module keeps everything; a ``block`` N covering every
chunk is the same plan as ``uniform`` 1 in hp and is priced as it (Megatron-Core would skip the module's checkpoint).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hp_core.costs import LayerCost
from hp_core.engine.stage import PlacedLayer
from hp_core.errors import PluginError
from hp_core.registry import Registry
from hp_core.types import LayerKind

if TYPE_CHECKING:
    from hp_core.engine.prepare import PreparedRun
    from hp_core.specs import Setting

__all__ = ["PlacedState", "check_switches", "checkpointed_layer", "checkpointed_whole", "placed_layer", "placed_recompute"]


class PlacedState(tuple):
    """Body settings (a tuple, one per body layer) with the placed layers priced in a stated state instead of the one
    the settings imply: ``whole`` (every body layer full) or a set of switches (the planner's lower bound for the plans
    that reach a state, :mod:`hp_core.engine.recompute.coupled`).

    Attributes:
        state: ``"whole"`` or a frozenset of switches.
    """

    state: object

    def __new__(cls, settings: tuple, state: object) -> "PlacedState":
        made = super().__new__(cls, settings)
        made.state = state
        return made


def check_switches(kind: LayerKind, cost: LayerCost, registry: Registry | None) -> None:
    """Refuse a cost whose terms name a switch neither its kind declares nor, for a layer running body layers inside
    itself, its inner layers' kinds (looked up in *registry*, the one its inner layers were evaluated through).

    Raises:
        PluginError: A switch none of them declares.
    """
    declared = set(kind.switches)
    if cost.inner_kinds and registry is not None:
        declared |= {s for name in cost.inner_kinds for s in registry.layer_kind(name).switches}
    stray = {t.switch for t in cost.activations if t.switch is not None} - declared
    if stray:
        inner = f" nor its inner layers' kinds ({', '.join(sorted(cost.inner_kinds))})" if cost.inner_kinds else ""
        raise PluginError(kind.name, f"activation terms name switches {sorted(stray)} the kind does not declare{inner}")


def placed_recompute(run: PreparedRun, group: int, settings: tuple[Setting, ...]) -> frozenset[str]:
    """The switches a layer of *group* placed first or last recomputes when the body layers run *settings*.

    Nothing, unless the layer runs body layers inside itself (``inner_kinds``) and the runtime's recompute reaches
    them (``inner_recompute``); then what the body layers of those kinds recompute, together, with what the trainer
    always recomputes (``Runtime.implicit_recompute``, whatever the body runs; a body layer recomputed fully adds
    nothing more: its whole-layer checkpoint is no switch of its inner layers; Megatron-Core's full recompute of the MTP layer is the layer's own checkpoint: :func:`checkpointed_whole`).
    """
    inner = run.costs[group].inner_kinds
    if not (inner and run.runtime.inner_recompute):
        return frozenset()
    if isinstance(settings, PlacedState):
        return frozenset() if settings.state == "whole" else frozenset(settings.state)
    # What the trainer always recomputes reaches the module whatever the body runs (Megatron's sequence-parallel
    # re-gather: a body layer recomputed fully adds no switch, but the module's own layers still re-gather).
    found: set[str] = set(run.runtime.implicit_recompute)
    for body_group, setting in dict.fromkeys(zip(run.body_group, settings)):
        if run.kinds[body_group].name in inner:
            full, switches = run.resolve(body_group, setting)
            if not full:
                found |= switches
    return frozenset(found)


def checkpointed_whole(run: PreparedRun, group: int, settings: tuple[Setting, ...]) -> bool:
    """Whether a layer of *group* placed first or last runs under its own whole checkpoint when the body layers run
    *settings*: it states one (:attr:`LayerCost.checkpoint <hp_core.costs.LayerCost.checkpoint>`), the runtime's
    recompute reaches it (``inner_recompute``) and every body layer is recomputed fully (Megatron-Core's ``uniform``
    method, module docstring)."""
    if run.costs[group].checkpoint is None or not run.runtime.inner_recompute or not run.body_group:
        return False
    if isinstance(settings, PlacedState):
        return settings.state == "whole"
    return all(run.resolve(body_group, setting)[0] for body_group, setting in dict.fromkeys(zip(run.body_group, settings)))


def checkpointed_layer(kind: str, cost: LayerCost, placement: str) -> PlacedLayer:
    """A placed layer under its whole checkpoint: it keeps the terms outside it (``checkpoint.kept``), and its
    backward holds what the checkpoint drops, rebuilt, beside its working set, as a fully recomputed body layer's does
    (:meth:`PlacedLayer.make <hp_core.engine.stage.PlacedLayer.make>`)."""
    kept = sum(t.bytes for t in cost.activations if t.op in cost.checkpoint.kept)
    return PlacedLayer(kind, cost, False, frozenset(), "full", kept, cost.working_bytes + cost.kept_bytes - kept, placement)


def placed_layer(run: PreparedRun, group: int, settings: tuple[Setting, ...], where: str) -> PlacedLayer:
    """A layer of *group* placed *where* (``first``, ``last``) when the body layers run *settings*: under its whole
    checkpoint (:func:`checkpointed_whole`), else recomputing what :func:`placed_recompute` says."""
    name = run.kinds[group].name
    if checkpointed_whole(run, group, settings):
        return checkpointed_layer(name, run.costs[group], where)
    switches = placed_recompute(run, group, settings)
    return PlacedLayer.make(name, run.costs[group], False, switches, "+".join(sorted(switches)) or "none", placement=where)
