"""A model as a layer stack: groups of layers of a kind."""

from __future__ import annotations

from typing import Any

import attrs

from hp_core.bounds import MAX_LAYERS
from hp_core.errors import SpecError
from hp_core.validators import bounded_int

__all__ = ["LayerGroup", "ModelSpec"]


@attrs.frozen
class LayerGroup:
    """``count`` consecutive layers of one kind sharing one architecture.

    Attributes:
        kind: A registered layer kind's name (``"dense"``).
        config: That kind's config (an instance of its ``config_type``).
        count: How many such layers.
    """

    kind: str
    config: Any
    count: int = attrs.field(default=1, validator=bounded_int(MAX_LAYERS, what="the layer bound MAX_LAYERS"))


def _groups(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, tuple) or not value or not all(isinstance(g, LayerGroup) for g in value):
        raise SpecError("layers", "layers must be a non-empty list of layer groups")
    total = sum(group.count for group in value)
    if total > MAX_LAYERS:
        raise SpecError("layers", f"layers must number at most {MAX_LAYERS:,} in all (MAX_LAYERS), got {total:,}")


@attrs.frozen
class ModelSpec:
    """A model: its name, its layer stack and where its numbers come from.

    The stack lists every group in model order: those of kinds placed
    ``first`` (the embedding), the ``body`` (split over pipeline stages) and
    those placed ``last`` (the output head, MTP). Which kind sits where is the
    kind's own ``placement``.

    Attributes:
        name: Display name.
        layers: The layer groups.
        source: Where the architecture was read from (a preset, a file).
    """

    name: str
    layers: tuple[LayerGroup, ...] = attrs.field(converter=tuple, validator=_groups)
    source: str = ""

    def with_body_layers(self, count: int, body_kinds: frozenset[str]) -> "ModelSpec":
        """The model truncated to its first *count* body layers, as benchmark runs do.

        Args:
            count: Body layers to keep (at least 1).
            body_kinds: Names of the kinds placed in the body.
        """
        kept: list[LayerGroup] = []
        left = count
        for group in self.layers:
            if group.kind not in body_kinds:
                kept.append(group)
            elif left > 0:
                take = min(left, group.count)
                kept.append(attrs.evolve(group, count=take))
                left -= take
        return attrs.evolve(self, layers=tuple(kept))
