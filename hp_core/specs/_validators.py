"""Small attrs validators shared by the specs."""

from __future__ import annotations

from typing import Any

import attrs


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
