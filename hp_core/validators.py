"""attrs validators for specs and layer-kind configs (also for plugin authors' config classes).

Each raises ``ValueError("<field> must ...")``: the config loader turns that into a
one-line error naming the field's path (``$.model.layers[1].config.hidden_size``).
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["non_negative_int", "optional", "positive_int", "positive_number", "probability"]


def positive_int(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A strictly positive ``int`` (``bool`` refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


def non_negative_int(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A non-negative ``int`` (``bool`` refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative integer, got {value!r}")


def positive_number(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A strictly positive ``int`` or ``float``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{attribute.name} must be a positive number, got {value!r}")


def optional(validator):
    """Run *validator* unless the value is ``None`` (absent)."""
    return attrs.validators.optional(validator)


def probability(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A number in ``[0, 1)``, such as a dropout probability."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"{attribute.name} must be a probability in [0, 1), got {value!r}")
