"""Layers placed first or last that run body layers inside themselves (the MTP module): the switches their terms may
name, and what they recompute.

Megatron-Core builds the MTP block, and each MTP layer's inner ``TransformerLayer`` or ``HybridStack``, with the
model's one ``TransformerConfig`` (``megatron/core/transformer/multi_token_prediction.py`` at
NVIDIA/Megatron-LM@d98e8a6 lines 1203-1214, 1220-1228, 1929-1936, 1946-1955), so its selective recompute modules act
inside the MTP layer as in the decoder's (docs/kinds.md, '``mtp``'). Such a layer's cost names its inner layers'
kinds (:attr:`LayerCost.inner_kinds <hp_core.costs.LayerCost.inner_kinds>`) and keeps their terms under their
switches; a runtime whose one recompute configuration reaches them (:attr:`Runtime.inner_recompute
<hp_core.types.Runtime.inner_recompute>`) has it recompute what the run's body layers of those kinds recompute.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hp_core.costs import LayerCost
from hp_core.errors import PluginError
from hp_core.registry import Registry
from hp_core.types import LayerKind

if TYPE_CHECKING:
    from hp_core.engine.prepare import PreparedRun
    from hp_core.specs import Setting

__all__ = ["check_switches", "placed_recompute"]


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
    always recomputes (a body layer recomputed fully adds nothing: its whole-layer checkpoint is no switch of its
    inner layers; Megatron-Core's full recompute of the MTP layer is not priced, docs/kinds.md).
    """
    inner = run.costs[group].inner_kinds
    if not (inner and run.runtime.inner_recompute):
        return frozenset()
    found: set[str] = set()
    for body_group, setting in dict.fromkeys(zip(run.body_group, settings)):
        if run.kinds[body_group].name in inner:
            full, switches = run.resolve(body_group, setting)
            if not full:
                found |= switches
    return frozenset(found)
