"""What every ``config.json`` format shares: runs of equal consecutive layers as layer groups."""

from __future__ import annotations

from typing import Any

from hp_core.specs.model import LayerGroup

__all__ = ["grouped"]


def grouped(layers: list[tuple[str, Any]]) -> list[LayerGroup]:
    """``(kind, config)`` per layer, in order, as :class:`LayerGroup` runs of equal consecutive layers."""
    groups: list[LayerGroup] = []
    for kind, config in layers:
        if groups and groups[-1].kind == kind and groups[-1].config == config:
            groups[-1] = LayerGroup(kind, config, groups[-1].count + 1)
        else:
            groups.append(LayerGroup(kind, config, 1))
    return groups
