"""Recompute settings and plans stated by the user."""

from __future__ import annotations

from typing import Any

import attrs

from hp_core.errors import SpecError
from hp_core.validators import one_of

__all__ = ["RecomputeSpec", "Setting"]

_MODES = ("none", "full", "selective", "switches")


def _share(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise SpecError("recompute", f"Setting.offload is a share of the kept bytes between 0 and 1, got {value!r}")


@attrs.frozen
class Setting:
    """One layer's recompute setting.

    Attributes:
        mode: ``none`` (keep everything), ``full`` (keep only the layer input),
            ``selective`` (the kind's own selective set) or ``switches`` (the
            switches named in ``switches``).
        switches: The recomputed switches when ``mode == "switches"``.
        offload: The share (0 to 1) of the bytes the layer keeps under
            ``mode`` that is copied to the host during forward and back during
            backward (docs/recompute.md; priced in :mod:`hp_core.engine.recompute.profile`).
    """

    mode: str = attrs.field(default="none", validator=one_of(_MODES))
    switches: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)
    offload: float = attrs.field(default=0.0, validator=_share, kw_only=True)

    @classmethod
    def parse(cls, value: Any) -> "Setting":
        """A setting from config text.

        ``"none"``, ``"full"``, ``"selective"``, a list of switch names, or a
        mapping ``{"mode": <one of those>, "offload": <share 0-1>}``
        (``{"mode": ["softmax", "ffAct"], "offload": 0.5}``).
        """
        if isinstance(value, Setting):
            return value
        if isinstance(value, dict):
            stray = sorted(set(value) - {"mode", "offload"})
            if stray or "mode" not in value:
                raise SpecError("recompute", f"a recompute setting mapping has 'mode' and optionally 'offload', got keys {sorted(value)}")
            base = cls.parse(value["mode"])
            return attrs.evolve(base, offload=value.get("offload", 0.0))
        if isinstance(value, str) and value in ("none", "full", "selective"):
            return cls(mode=value)
        if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
            return cls(mode="switches", switches=frozenset(value)) if value else cls()
        raise SpecError("recompute", f"a recompute setting is 'none', 'full', 'selective' or a list of switches, got {value!r}")

    def describe(self) -> str:
        """The display name: the mode, or the switches joined by ``+``; ``@offload=<share>`` when offloading."""
        base = "+".join(sorted(self.switches)) if self.mode == "switches" else self.mode
        return f"{base}@offload={self.offload:g}" if self.offload else base


def _ranges(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    for first, last, setting in value:
        if not (isinstance(first, int) and isinstance(last, int) and 0 <= first <= last):
            raise SpecError("recompute", f"layer range {first}-{last} must be 'a-b' with 0 <= a <= b")
        if not isinstance(setting, Setting):
            raise SpecError("recompute", "each layer range needs a recompute setting")


@attrs.frozen
class RecomputeSpec:
    """A recompute plan: a default setting and per-range exceptions over body layer indices.

    Attributes:
        default: The setting of every body layer no range names.
        layers: ``(first, last, setting)`` triples, inclusive, 0-based body layer indices.
    """

    default: Setting = attrs.field(factory=Setting)
    layers: tuple[tuple[int, int, Setting], ...] = attrs.field(default=(), converter=tuple, validator=_ranges)

    def setting_of(self, index: int) -> Setting:
        """The setting of body layer *index* (the last range naming it wins)."""
        chosen = self.default
        for first, last, setting in self.layers:
            if first <= index <= last:
                chosen = setting
        return chosen

    @classmethod
    def uniform(cls, value: Any) -> "RecomputeSpec":
        """Every body layer recomputes as *value* says (see :meth:`Setting.parse`)."""
        return cls(default=Setting.parse(value))
