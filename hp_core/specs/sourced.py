"""A figure and where it comes from (:class:`Sourced`), and the checks a spec field holding one applies.

Every figure of a timing profile (:mod:`hp_core.specs.timing`) and of its per-device efficiencies
(:mod:`hp_core.specs.device_efficiency`) is a :class:`Sourced` value; :mod:`hp_core.specs.timing` re-exports it.
"""

from __future__ import annotations

from typing import Any

import attrs

from hp_core.errors import SpecError

__all__ = ["Sourced"]


def _number(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise SpecError(attribute.name, f"{attribute.name} must be a non-negative number, got {value!r}")


def _text(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(attribute.name, f"{attribute.name} must state where the figure comes from (a non-empty string)")


@attrs.frozen
class Sourced:
    """A figure and where it comes from.

    Attributes:
        value: The number (its unit is the field's).
        source: The paper, benchmark, source file or measurement it comes from.
    """

    value: float = attrs.field(validator=_number)
    source: str = attrs.field(validator=_text)


def _fraction(instance: Any, attribute: attrs.Attribute, value: Sourced) -> None:
    if not isinstance(value, Sourced):
        raise SpecError(attribute.name, f"{attribute.name} must be a Sourced figure")
    if not 0 < value.value <= 1:
        raise SpecError(attribute.name, f"{attribute.name} must be a fraction in (0, 1], got {value.value!r}")


def _overlap(instance: Any, attribute: attrs.Attribute, value: Sourced) -> None:
    if not isinstance(value, Sourced):
        raise SpecError(attribute.name, f"{attribute.name} must be a Sourced figure")
    if not 0 <= value.value <= 1:
        raise SpecError(attribute.name, f"{attribute.name} must be a fraction in [0, 1], got {value.value!r}")


def _positive(instance: Any, attribute: attrs.Attribute, value: Sourced) -> None:
    if not isinstance(value, Sourced):
        raise SpecError(attribute.name, f"{attribute.name} must be a Sourced figure")
    if not value.value > 0:
        raise SpecError(attribute.name, f"{attribute.name} must be positive, got {value.value!r}")


def _at_least_one(instance: Any, attribute: attrs.Attribute, value: Sourced) -> None:
    if not isinstance(value, Sourced):
        raise SpecError(attribute.name, f"{attribute.name} must be a Sourced figure")
    if not value.value >= 1:
        raise SpecError(attribute.name, f"{attribute.name} must be at least 1, got {value.value!r}")


def _sourced(instance: Any, attribute: attrs.Attribute, value: Sourced) -> None:
    if not isinstance(value, Sourced) or not 0 <= value.value < float("inf"):
        raise SpecError(attribute.name, f"{attribute.name} must be a Sourced figure, finite and >= 0; got {value!r}")
