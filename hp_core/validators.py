"""attrs validators for specs and layer-kind configs (also for plugin authors' config classes).

Each raises :class:`~hp_core.errors.SpecError` (a ``ConfigError`` that is also a
``ValueError``) with a message starting with the field's name: ``except HPError``
catches a spec built wrongly through the API, and the config loader turns it
into a one-line error naming the field's path
(``$.model.layers[1].config.hidden_size``). Integers are bounded by
:data:`~hp_core.bounds.MAX_INT` unless a tighter bound applies
(:func:`bounded_int`); numbers must be finite (docs/cli.md lists the bounds).
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

import attrs

from hp_core.bounds import MAX_INT, short_repr
from hp_core.errors import SpecError

__all__ = [
    "bounded_int", "finite_number", "is_finite", "instance_of", "name_matching", "non_empty_text", "non_negative_int",
    "non_negative_number", "one_of", "optional", "plugin_name", "positive_int", "positive_number", "probability",
    "weight_gradient_part",
]


def bounded_int(high: int, low: int = 1, what: str = "") -> Callable[[Any, attrs.Attribute, Any], None]:
    """An ``int`` in ``[low, high]`` (``bool`` refused); *what* names the bound in the message."""

    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            kind = "a positive integer" if low == 1 else "a non-negative integer" if low == 0 else f"an integer >= {low}"
            raise SpecError(attribute.name, f"{attribute.name} must be {kind}, got {short_repr(value)}")
        if value > high:
            bound = f"{high:,}" + (f", {what}" if what else "")
            raise SpecError(attribute.name, f"{attribute.name} must be at most {bound}, got {short_repr(value)}")

    return check


positive_int = bounded_int(MAX_INT)
positive_int.__doc__ = "A strictly positive ``int`` up to :data:`~hp_core.bounds.MAX_INT` (``bool`` refused)."
non_negative_int = bounded_int(MAX_INT, low=0)
non_negative_int.__doc__ = "A non-negative ``int`` up to :data:`~hp_core.bounds.MAX_INT` (``bool`` refused)."


def is_finite(value: Any) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def positive_number(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A strictly positive, finite ``int`` or ``float``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not is_finite(value) or not value > 0:
        raise SpecError(attribute.name, f"{attribute.name} must be a positive finite number, got {short_repr(value)}")


def non_negative_number(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A finite ``int`` or ``float`` at least 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not is_finite(value) or value < 0:
        raise SpecError(attribute.name, f"{attribute.name} must be a non-negative finite number, got {short_repr(value)}")


def finite_number(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A finite ``int`` or ``float`` (any sign)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not is_finite(value):
        raise SpecError(attribute.name, f"{attribute.name} must be a finite number, got {short_repr(value)}")


def optional(validator):
    """Run *validator* unless the value is ``None`` (absent)."""
    return attrs.validators.optional(validator)


def probability(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A number in ``[0, 1)``, such as a dropout probability."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise SpecError(attribute.name, f"{attribute.name} must be a probability in [0, 1), got {short_repr(value)}")


def one_of(choices: tuple) -> Callable[[Any, attrs.Attribute, Any], None]:
    """One of *choices* (``attrs.validators.in_`` raising :class:`SpecError`)."""

    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        try:
            ok = value in choices and not (isinstance(value, bool) and not any(c is value for c in choices))
        except TypeError:  # an unhashable value against a set
            ok = False
        if not ok:
            raise SpecError(attribute.name, f"{attribute.name} must be one of {', '.join(map(repr, choices))}, "
                                            f"got {short_repr(value)}")

    return check


def instance_of(kind: type | tuple[type, ...], name: str) -> Callable[[Any, attrs.Attribute, Any], None]:
    """An instance of *kind* (``bool`` only where *kind* is ``bool``); *name* says what is expected."""

    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise SpecError(attribute.name, f"{attribute.name} must be {name}, got {short_repr(value)}")

    return check


def name_matching(pattern: str, rule: str) -> Callable[[Any, attrs.Attribute, Any], None]:
    """A ``str`` matching the regular expression *pattern*; *rule* says in words what it allows."""
    regex = re.compile(pattern)

    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if not isinstance(value, str) or not regex.match(value):
            raise SpecError(attribute.name, f"{attribute.name} must be {rule}, got {short_repr(value)}")

    return check


# The name a plugin record is registered and named by (a layer kind, runtime, optimizer, schedule, ...).
plugin_name = name_matching(r"^[a-z][a-z0-9_.-]*$", "a lower-case name (letters, digits, '_', '-', '.')")


def non_empty_text(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A ``str`` with something besides white space."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(attribute.name, f"{attribute.name} must be a non-empty string, got {short_repr(value)}")


def weight_gradient_part(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """``(input bytes, input elements, output-gradient elements)``, non-negative integers, the bytes part of
    ``weight_gradient_bytes`` where it is stated
    (where it is not, nothing is restated: a kind that drops its W, as LoRA does, need not drop these too)."""
    if value is None:
        return
    if (not isinstance(value, tuple) or len(value) != 3
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value)):
        raise ValueError(f"{attribute.name} must be (input bytes, input elements, output-gradient elements), three "
                         f"non-negative integers, got {value!r}")
    if instance.weight_gradient_bytes is not None and value[0] > instance.weight_gradient_bytes:
        raise ValueError(f"{attribute.name}: its {value[0]} bytes must be part of weight_gradient_bytes "
                         f"({instance.weight_gradient_bytes})")
