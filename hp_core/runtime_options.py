"""Per-run options of a runtime profile: what a trainer's flags change, stated per run.

A :class:`~hp_core.types.Runtime` fixes how its trainer runs (fused kernels,
attention backend, vocabulary padding, ...). Each behaviour a user may change
per run is a :class:`RuntimeOption` the runtime lists in ``Runtime.options``:
its name, its type (``bool``, ``int``, ``float`` or ``choice``), its default
(the profile's own behaviour), a description, the source of what it changes,
and ``apply(runtime, value) -> Runtime``, the profile changed by the value
(``attrs.evolve`` of its fields, traits or precision).

A run sets options in a config file::

    runtime: {name: megatron, options: {cross_entropy_fusion: false, attention_backend: unfused}}

or on the command line (``--runtime-option cross_entropy_fusion=false``,
repeatable). :func:`apply_options` checks every name and value (a
:class:`~hp_core.errors.ConfigError` naming ``$.runtime.options.<name>``
and listing the valid names or values) and returns the runtime every engine
function takes in place of a name; its ``option_values`` record what was set,
which the provenance shows. docs/runtimes.md has each built-in runtime's
options, generated from these records.

A plugin states its own runtime's options with :func:`trait_option` (a
:data:`~hp_core.costs.TRAITS` trait on or off; :func:`trait_setter` for a choice that turns one on,
:func:`trait_chooser` for one whose values each turn on a trait of their own), :func:`field_option` (one
``Runtime`` field, or ``precision.<field>``) or a ``RuntimeOption`` with its
own ``apply``; ``apply`` must be picklable and compare equal by value (a
module-level function, or a frozen attrs class with ``__call__`` as these
helpers use) so a layout search can ship the runtime to its worker processes
and two registries built alike compare equal.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import attrs

from hp_core.bounds import MAX_INT, short_repr
from hp_core.errors import ConfigError, describe
from hp_core.validators import name_matching, one_of

if TYPE_CHECKING:  # pragma: no cover
    from hp_core.types import Runtime

__all__ = [
    "OPTION_TYPES",
    "RuntimeOption",
    "apply_options",
    "check_precision_fields",
    "check_reduce_width",
    "field_option",
    "format_option_value",
    "option_summary",
    "parse_assignments",
    "rederive_precision_fields",
    "runtime_label",
    "runtime_name",
    "trait_chooser",
    "trait_option",
    "trait_setter",
]

OPTION_TYPES = ("bool", "int", "float", "choice")
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


_option_name = name_matching(r"^[a-z][a-z0-9_]*$", "lower-case letters, digits and '_'")


@attrs.frozen
class RuntimeOption:
    """One per-run option of a runtime profile.

    Attributes:
        name: What a config's ``runtime.options`` and ``--runtime-option`` name
            (lower-case letters, digits, ``_``).
        type: ``bool``, ``int``, ``float`` or ``choice``.
        default: The profile's own behaviour (a value of the type).
        description: One line: what it changes and the trainer flag it mirrors.
        source: Where that behaviour comes from (framework source file and
            function, or documentation).
        apply: ``apply(runtime, value) -> Runtime``: the runtime changed by
            *value* (already parsed); applying the default returns the profile
            unchanged. Picklable (module docstring).
        choices: The values of a ``choice`` option.
        minimum: The least value of an ``int`` or ``float`` option, if any.
        mapping: An option that also takes a mapping (in a config file, or from an importer; not from
            ``--runtime-option``): ``mapping(value, path) -> value`` checks it, raising a
            :class:`~hp_core.errors.ConfigError` at *path* or below, and returns what ``apply`` takes
            (a plain mapping, compared by value; ``megatron``'s ``tp_comm_overlap_cfg``: a custom userbuffers config).
            ``None``: the option takes its type's values only.
        precision_fields: The :class:`~hp_core.specs.PrecisionSpec` fields
            *apply* sets (Megatron's ``grad_reduce_in_fp32``: ``grad_bytes``). A
            run that sets the option and states one of them in ``precision``
            must state the same width: :func:`check_precision_fields` refuses
            a disagreement rather than letting either win silently; where it
            states none of them, :func:`rederive_precision_fields` derives them
            again from the stated precision.
    """

    name: str = attrs.field(validator=_option_name)
    type: str = attrs.field(validator=one_of(OPTION_TYPES))
    default: Any
    description: str
    source: str
    apply: Callable[[Any, Any], Any]
    choices: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    minimum: float | None = None
    precision_fields: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    mapping: Callable[[Any, str], Any] | None = None

    def __attrs_post_init__(self) -> None:
        if (self.type == "choice") != bool(self.choices):
            raise ValueError(f"runtime option {self.name}: a choice option, and only one, lists its choices")
        self.parse(self.default)  # the default is a value of the type

    def parse(self, value: Any, path: str | None = None) -> Any:
        """*value* as this option's type (a string as the command line gives it is read too).

        Raises:
            ConfigError: Not a value of the type, naming *path* and what it takes.
        """
        where = path or f"$.runtime.options.{self.name}"
        if self.mapping is not None and isinstance(value, Mapping):
            return self.mapping(dict(value), where)
        text = value.strip().lower() if isinstance(value, str) else None
        if self.type == "bool":
            if isinstance(value, bool):
                return value
            if text in _TRUE or text in _FALSE:
                return text in _TRUE
            raise ConfigError(where, f"expected true or false, got {value!r}")
        if self.type == "choice":
            if text is not None and text in self.choices:
                return text
            also = " or a mapping (in a config file, not from --runtime-option: docs/runtimes.md)" if self.mapping is not None else ""
            raise ConfigError(where, f"expected one of {', '.join(self.choices)}{also}, got {value!r}")
        kind = int if self.type == "int" else float
        expected = f"expected {'an integer' if kind is int else 'a number'}, got {short_repr(value)}"
        if isinstance(value, bool) or not isinstance(value, (int, float, str)) or (kind is int and isinstance(value, float)):
            raise ConfigError(where, expected)
        try:
            number = kind(value)
        except ValueError:
            raise ConfigError(where, expected) from None
        except OverflowError:  # an integer too large for a float
            number = math.inf
        if kind is float and not math.isfinite(number):
            raise ConfigError(where, f"expected a finite number, got {short_repr(value)}")
        if self.minimum is not None and number < self.minimum:
            raise ConfigError(where, f"expected at least {self.minimum:g}, got {short_repr(value)}")
        if abs(number) > MAX_INT:  # hp_core.bounds: past it an integer no longer converts to a float exactly
            raise ConfigError(where, f"expected at most {MAX_INT:,} (MAX_INT), got {short_repr(value)}")
        return number


@attrs.frozen
class _SetTrait:
    """``apply`` of :func:`trait_option` and :func:`trait_setter`: equal by value and picklable, so registries built
    twice compare equal. The option's value *when* turns the trait on, any other off."""

    trait: str
    when: Any = True

    def __call__(self, runtime: Runtime, value: Any) -> Runtime:
        traits = runtime.traits | {self.trait} if value == self.when else runtime.traits - {self.trait}
        return attrs.evolve(runtime, traits=traits)


def trait_setter(trait: str, when: Any = True) -> Callable[[Runtime, Any], Runtime]:
    """An option's ``apply`` that turns *trait* on where the option's value is *when* (a choice, or ``False`` for a
    ``bool`` option whose false turns it on) and off for any other value."""
    return _SetTrait(trait, when)


@attrs.frozen
class _ChooseTrait:
    """``apply`` of :func:`trait_chooser`: equal by value and picklable. The trait the option's value names is turned
    on, every other trait it names off."""

    traits: tuple[tuple[Any, str], ...]

    def __call__(self, runtime: Runtime, value: Any) -> Runtime:
        named = {trait for _, trait in self.traits}
        chosen = {trait for when, trait in self.traits if when == value}
        return attrs.evolve(runtime, traits=(runtime.traits - named) | chosen)


def trait_chooser(traits: Mapping[Any, str]) -> Callable[[Runtime, Any], Runtime]:
    """An option's ``apply`` for a choice whose values name traits (*traits*: value -> trait): the trait of the
    value set is turned on and the others named off; a value *traits* does not name turns them all off."""
    return _ChooseTrait(tuple(traits.items()))


@attrs.frozen
class _SetField:
    """``apply`` of :func:`field_option`: sets one ``Runtime`` field or ``precision.<field>``."""

    field: str

    def __call__(self, runtime: Runtime, value: Any) -> Runtime:
        owner, _, name = self.field.rpartition(".")
        if owner == "precision":
            return attrs.evolve(runtime, precision=attrs.evolve(runtime.precision, **{name: value}))
        return attrs.evolve(runtime, **{self.field: value})


def trait_option(name: str, trait: str, *, default: bool, description: str, source: str) -> RuntimeOption:
    """A ``bool`` option that turns the trait *trait* (:data:`~hp_core.costs.TRAITS`) on or off."""
    return RuntimeOption(name, "bool", default, description, source, _SetTrait(trait))


def field_option(name: str, field: str, type: str, *, default: Any, description: str, source: str,
                 choices: Iterable[str] = (), minimum: float | None = None) -> RuntimeOption:
    """An option that sets one ``Runtime`` field (or ``precision.<field>``) to its value."""
    return RuntimeOption(name, type, default, description, source, _SetField(field),
                         tuple(choices), minimum)


def apply_options(runtime: Runtime, values: Mapping[str, Any], path: str = "$.runtime.options") -> Runtime:
    """*runtime* with the options *values* set (each parsed by its type), in the order the runtime lists them.

    The returned runtime keeps the profile's name; its ``option_values``
    hold every value set (its own earlier ones updated).

    Raises:
        ConfigError: An unknown name (listing the runtime's options) or a bad
            value (naming ``<path>.<name>`` and what it takes).
    """
    if not values:
        return runtime
    known = {option.name: option for option in runtime.options}
    for name in values:
        if name not in known:
            listed = ", ".join(known) if known else "none"
            raise ConfigError(f"{path}.{name}", f"runtime {runtime.name} has no option {name!r}; its options: {listed} "
                                                f"(see docs/runtimes.md)")
    parsed = {name: known[name].parse(values[name], f"{path}.{name}") for name in values}
    changed = runtime
    for option in runtime.options:
        if option.name in parsed:
            try:
                changed = option.apply(changed, parsed[option.name])
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{path}.{option.name}", describe(exc)) from None
    return attrs.evolve(changed, option_values={**runtime.option_values, **parsed})


def check_precision_fields(runtime: Runtime, stated: Mapping[str, Any]) -> None:
    """Refuse a ``precision`` field a run states (*stated*: field to value) that disagrees with what an option it set
    makes of the same field (:attr:`RuntimeOption.precision_fields`); agreeing values are accepted.

    *runtime* has the run's options applied (:func:`apply_options`), so its precision holds what they set.

    Raises:
        ConfigError: At ``$.precision.<field>``, naming the option and both widths (one line).
    """
    for option in runtime.options:
        if option.name not in runtime.option_values:
            continue
        for field in option.precision_fields:
            if field in stated and stated[field] != getattr(runtime.precision, field):
                value = format_option_value(runtime.option_values[option.name])
                raise ConfigError(f"$.precision.{field}",
                                  f"{stated[field]!r} disagrees with runtime option {option.name}={value}, which sets "
                                  f"{field} {getattr(runtime.precision, field)!r}; state one of them, or both alike")


def rederive_precision_fields(runtime: Runtime, stated: Mapping[str, Any], precision: Any) -> Any:
    """*precision* (the runtime's with the *stated* fields) with each set option's :attr:`RuntimeOption.precision_fields`
    derived again from it, where the run states none of them: an option that derives a width from another field
    (Megatron's ``grad_reduce_in_fp32: false``: the gradient buffer takes the parameters' dtype) follows a stated
    ``param_bytes`` rather than the runtime's.
    """
    for option in runtime.options:
        if option.name not in runtime.option_values or not option.precision_fields:
            continue
        if any(field in stated for field in option.precision_fields):
            continue
        again = option.apply(attrs.evolve(runtime, precision=precision), runtime.option_values[option.name])
        precision = attrs.evolve(precision, **{field: getattr(again.precision, field) for field in option.precision_fields})
    return precision


def check_reduce_width(runtime: Runtime, precision: Any) -> Any:
    """*precision* where *runtime* can reduce in its ``reduce_bytes`` (:attr:`~hp_core.types.Runtime.reduce_width_setting`).

    Raises:
        ConfigError: At ``$.precision.reduce_bytes``: the runtime reduces in its gradient buffer's dtype and the
            width differs from ``grad_bytes``; refused rather than priced in a width the trainer cannot run (one line).
    """
    reduce_bytes = precision.reduce_bytes
    if runtime.reduce_width_setting is not None and reduce_bytes is not None and reduce_bytes != precision.grad_bytes:
        raise ConfigError("$.precision.reduce_bytes",
                          f"runtime {runtime.name} has no reduce dtype of its own: it reduces gradients in its gradient "
                          f"buffer's dtype (grad_bytes {precision.grad_bytes}), so reduce_bytes {reduce_bytes} cannot be "
                          f"priced; use {runtime.reduce_width_setting} instead")
    return precision


def parse_assignments(texts: Iterable[str], path: str = "$.runtime.options") -> dict[str, str]:
    """``NAME=VALUE`` texts (``--runtime-option``) as a mapping, the last of a name winning.

    Raises:
        ConfigError: A text without ``=`` or a name.
    """
    values: dict[str, str] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name:
            raise ConfigError(path, f"--runtime-option takes NAME=VALUE, got {text!r}")
        values[name] = value.strip()
    return values


def format_option_value(value: Any) -> str:
    """An option's value as a config states it (``false``, ``unfused``, ``128``; a mapping as compact JSON)."""
    if isinstance(value, Mapping):
        return json.dumps(value, separators=(",", ":"))
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def option_summary(runtime: Runtime) -> str:
    """The options a run set, ``name=value`` joined by ``, ``; empty when none."""
    return ", ".join(f"{name}={format_option_value(value)}" for name, value in runtime.option_values.items())


def runtime_name(runtime: Any) -> str:
    """The profile's name of a runtime given by name or as a record."""
    return runtime if isinstance(runtime, str) else runtime.name


def runtime_label(runtime: Any) -> str:
    """The runtime as the tables name it: its name, with the options set in parentheses."""
    if isinstance(runtime, str) or not runtime.option_values:
        return runtime_name(runtime)
    return f"{runtime.name} ({option_summary(runtime)})"
