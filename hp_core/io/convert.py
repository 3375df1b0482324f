"""The one converter at the edge: config files (YAML, JSON, TOML) to frozen specs.

Built after the plugins load, so a third-party layer kind's config takes part:
a layer group names its ``kind`` and its ``config`` is structured into that
kind's ``config_type``. Unknown keys are refused; every error names the field
path the way the file reads (``$.parallel.tp``).

A config file::

    model: llama3-8b          # a preset, a config.json path, or {name:, layers: [...]}
    num_layers: 16            # optional: keep the first 16 body layers
    parallel: {dp: 4, tp: 2, sp: true, seq_len: 8192, micro_batch_size: 1, global_batch_size: 64}
    runtime: generic          # optional; or {name: megatron, options: {cross_entropy_fusion: false}}
    census: formulas          # optional
    attention: flash          # optional: the runtime's when absent
    precision: {grad_bytes: 2}  # optional: the runtime's when absent (stated keys override)
    hardware: h100-sxm        # optional: a preset name or {name:, memory_bytes:, ...}
    recompute: {default: none, layers: {"0-3": full, "4-7": [softmax, attBMM]}}
"""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any, Mapping

import attrs
import cattrs
import cattrs.gen

from hp_core.bounds import short_repr
from hp_core.documents import read_document as _read_document
from hp_core.errors import ConfigError, describe
from hp_core.registry import Registry
from hp_core.types import ATTENTION_IMPLS
from hp_core.validators import one_of, optional
from hp_core.specs import HardwareSpec, LayerGroup, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting

__all__ = ["ConfigFile", "InlineModel", "RuntimeRef", "load_config", "make_converter", "read_document", "structure"]


def _non_empty(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not value:
        raise ValueError(f"{attribute.name} must list at least one layer group")


def _positive_or_none(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {short_repr(value)}")


@attrs.frozen(kw_only=True)
class InlineModel:
    """A model written out in the config file."""

    name: str
    layers: tuple[LayerGroup, ...] = attrs.field(validator=_non_empty)


@attrs.frozen(kw_only=True)
class RuntimeRef:
    """A runtime named with per-run options (``runtime: {name: megatron, options: {...}}``; docs/runtimes.md)."""

    name: str
    options: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class ConfigFile:
    """What a config file states; absent optional parts take the runtime's defaults."""

    model: str | InlineModel
    parallel: ParallelSpec
    num_layers: int | None = attrs.field(default=None, validator=_positive_or_none)
    runtime: str | RuntimeRef = "generic"
    census: str = "formulas"
    attention: str | None = attrs.field(default=None, validator=optional(one_of(ATTENTION_IMPLS)))
    precision: Mapping[str, Any] | None = None
    hardware: str | HardwareSpec | None = None
    recompute: RecomputeSpec | None = None

    @property
    def runtime_name(self) -> str:
        """The runtime profile's name."""
        return self.runtime if isinstance(self.runtime, str) else self.runtime.name

    @property
    def runtime_options(self) -> Mapping[str, Any]:
        """The runtime options the config sets (none for a plain name)."""
        return {} if isinstance(self.runtime, str) else dict(self.runtime.options)


def _strict(kind: type, name: str):
    def hook(value: Any, _: type) -> Any:
        if kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if not ok:
            raise ValueError(f"expected {name}, got {short_repr(value)}")
        return float(value) if kind is float else value

    return hook


_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def _structure_recompute(value: Any, _: type) -> RecomputeSpec:
    if isinstance(value, str) or isinstance(value, list):
        return RecomputeSpec(default=Setting.parse(value))
    if not isinstance(value, dict):
        raise ValueError(f"expected a setting or a mapping with 'default' and 'layers', got {short_repr(value)}")
    extra = set(value) - {"default", "layers"}
    if extra:
        raise ValueError(f"unknown keys {sorted(extra)}; use 'default' and 'layers'")
    default = Setting.parse(value.get("default", "none"))
    ranges = []
    layers = value.get("layers", {}) or {}
    if not isinstance(layers, dict):
        raise ValueError("'layers' must map 'a-b' ranges to settings")
    for key, setting in layers.items():
        match = _RANGE.match(str(key))
        if not match:
            raise ValueError(f"layer range {short_repr(key)} must read 'a-b' or 'a'")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise ValueError(f"layer range {short_repr(key)} ends before it starts")
        ranges.append((first, last, Setting.parse(setting)))
    return RecomputeSpec(default=default, layers=tuple(ranges))


def make_converter(registry: Registry, *, forbid_extra_keys: bool = True) -> cattrs.Converter:
    """The converter for config files, aware of the registry's layer kinds.

    *forbid_extra_keys* False reads a published format (``megatron_measured.json``)
    whose records carry notes the planner does not read; a missing key and a
    wrong type are still refused with their path.
    """
    converter = cattrs.Converter(forbid_extra_keys=forbid_extra_keys, detailed_validation=True)
    converter.register_structure_hook(int, _strict(int, "an integer"))
    converter.register_structure_hook(float, _strict(float, "a number"))
    converter.register_structure_hook(bool, _strict(bool, "true or false"))
    converter.register_structure_hook(str, _strict(str, "a string"))
    converter.register_structure_hook(Setting, lambda v, _: Setting.parse(v))

    # A list field (tuple[X, ...]) takes a list only: a mapping or a string is not read as
    # its keys or its characters (``cases: {}``, ``steps: ""``).
    def homogeneous_tuple(cls: type) -> Any:
        item = typing.get_args(cls)[0]

        def hook(value: Any, _: type) -> Any:
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"expected a list, got {type(value).__name__} {short_repr(value)}")
            return tuple(converter.structure(list(value), list[item]))

        return hook

    converter.register_structure_hook_factory(
        lambda t: typing.get_origin(t) is tuple and len(typing.get_args(t)) == 2 and typing.get_args(t)[1] is Ellipsis,
        homogeneous_tuple,
    )

    def mapping_of(cls: type) -> Any:
        inner = cattrs.gen.make_mapping_structure_fn(cls, converter)

        def hook(value: Any, type_: type) -> Any:
            if not isinstance(value, dict):
                raise ValueError(f"expected a mapping, got {type(value).__name__} {short_repr(value)}")
            return inner(value, type_)

        return hook

    converter.register_structure_hook_factory(lambda t: typing.get_origin(t) is dict, mapping_of)

    # A section that must be a mapping (any attrs class) or a list says so,
    # rather than failing inside cattrs on a str, a number or a list.
    def mapping_first(cls: type) -> Any:
        inner = cattrs.gen.make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=forbid_extra_keys)

        def hook(value: Any, type_: type) -> Any:
            if not isinstance(value, dict):
                raise ValueError(f"expected a mapping, got {type(value).__name__} {short_repr(value)}")
            return inner(value, type_)

        return hook

    converter.register_structure_hook_factory(
        lambda t: attrs.has(t) and t not in (LayerGroup, Setting, RecomputeSpec), mapping_first
    )

    def group_list(value: Any, _: type) -> tuple[LayerGroup, ...]:
        # A tuple: a document built in Python (an importer's attrs.asdict of a config keeps its tuples).
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"expected a list of layer groups, got {type(value).__name__} {short_repr(value)}")
        return converter.structure(list(value), list[LayerGroup])

    converter.register_structure_hook_func(lambda t: t == tuple[LayerGroup, ...], group_list)

    def int_list(value: Any, _: type) -> tuple[int, ...] | None:
        if value is None:
            return None
        if not isinstance(value, list):
            raise ValueError(f"expected a list of integers, got {type(value).__name__} {short_repr(value)}")
        return tuple(converter.structure(value, list[int]))

    converter.register_structure_hook_func(lambda t: t == (tuple[int, ...] | None), int_list)
    converter.register_structure_hook(RecomputeSpec, _structure_recompute)

    def layer_group(value: Any, _: type) -> LayerGroup:
        if not isinstance(value, dict):
            raise ValueError(f"expected a mapping with kind, count and config, got {short_repr(value)}")
        extra = set(value) - {"kind", "count", "config"}
        if extra:
            raise ValueError(f"unknown keys {sorted(extra)}; a layer group has kind, count and config")
        if "kind" not in value:
            raise ValueError("required field 'kind' missing")
        known = [k.name for k in registry.layer_kinds]
        if value["kind"] not in known:
            raise ValueError(f"'kind' must be a registered layer kind ({', '.join(known)}), got {short_repr(value['kind'])}")
        kind = registry.layer_kind(value["kind"])
        count = value.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int):
            raise ValueError(f"count must be a positive integer, got {count!r}")
        try:
            config = converter.structure(value.get("config", {}), kind.config_type)
        except cattrs.BaseValidationError as exc:
            exc.__notes__ = [*getattr(exc, "__notes__", [])]
            note = cattrs.AttributeValidationNote("Structuring config", "config", kind.config_type)
            exc.add_note(note)
            raise cattrs.ClassValidationError("While structuring LayerGroup", [exc], LayerGroup) from None
        return LayerGroup(kind.name, config, count)

    converter.register_structure_hook(LayerGroup, layer_group)

    def model_ref(value: Any, _: type) -> str | InlineModel:
        if isinstance(value, str):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"expected a preset name, a config.json path or a mapping, got {short_repr(value)}")
        return converter.structure(value, InlineModel)

    def hardware_ref(value: Any, _: type) -> str | HardwareSpec | None:
        if value is None or isinstance(value, str):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"expected a hardware preset name or a mapping, got {short_repr(value)}")
        return converter.structure(value, HardwareSpec)

    def precision_overrides(value: Any, _: type) -> Mapping[str, Any] | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ValueError(f"expected a mapping of precision fields, got {short_repr(value)}")
        known = {f.name for f in attrs.fields(PrecisionSpec)}
        extra = sorted(set(value) - known)
        if extra:
            raise ValueError(f"unknown keys {extra}; known: {sorted(known)}")
        return dict(value)

    def runtime_ref(value: Any, _: type) -> str | RuntimeRef:
        if isinstance(value, str):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"expected a runtime name or a mapping with name and options, got {value!r}")
        return converter.structure(value, RuntimeRef)

    def option_values(value: Any, _: type) -> Mapping[str, Any]:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ValueError(f"expected a mapping of option names to values, got {value!r}")
        return dict(value)

    converter.register_structure_hook(str | RuntimeRef, runtime_ref)
    converter.register_structure_hook_func(lambda t: t == Mapping[str, Any], option_values)
    converter.register_structure_hook(str | InlineModel, model_ref)
    converter.register_structure_hook(str | HardwareSpec | None, hardware_ref)
    converter.register_structure_hook(Mapping[str, Any] | None, precision_overrides)
    return converter


# A validator's message that starts with the field it is about ("tp must ...",
# "'zero' must ...", "num_key_value_heads=3 must ...") extends the path by that field.
_FIELD_FIRST = re.compile(r"^'?([a-z_][a-z0-9_]*(?:\[\d+\]|\.[A-Za-z0-9_]+)*)'?(?:=\S+)? must")


def _format(exc: BaseException, type_: Any) -> str:
    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unknown keys {sorted(exc.extra_fields)}; remove them or check the spelling"
    if isinstance(exc, ConfigError):
        return exc.message
    if isinstance(exc, (ValueError, TypeError)):
        return describe(exc)
    return f"invalid value ({type(exc).__name__}: {exc})"


def structure(data: Any, cls: type, registry: Registry, root: str = "$", *, forbid_extra_keys: bool = True) -> Any:
    """Structure *data* into *cls*, turning the first error into a one-line :class:`ConfigError`."""
    converter = make_converter(registry, forbid_extra_keys=forbid_extra_keys)
    try:
        return converter.structure(data, cls)
    except cattrs.BaseValidationError as exc:
        messages = cattrs.transform_error(exc, path=root, format_exception=_format)
        # An unknown key first: a misspelt field (``seq_lenn``, ``paralel``) also leaves the field it
        # meant missing, and the misspelling is what the user has to see.
        messages.sort(key=lambda text: not text.startswith("unknown keys "))
        message, _, path = messages[0].rpartition(" @ ")
        match = _FIELD_FIRST.match(message)
        if match and not path.endswith(f".{match.group(1)}"):
            path = f"{path}.{match.group(1)}"
        raise ConfigError(path, message) from None
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        raise ConfigError(root, describe(exc)) from None


def read_document(path: str | Path) -> Any:
    """Parse a YAML, JSON or TOML file by its suffix (YAML for anything else), within the bounds
    of :mod:`hp_core.documents` (size, nesting, alias expansion)."""
    return _read_document(path)


def load_config(path: str | Path, registry: Registry) -> ConfigFile:
    """Read and structure a config file."""
    if not Path(path).exists():
        raise ConfigError("config", f"no such config file: {short_repr(str(path))} (the argument after the command is "
                                    "read as a config file; a flag such as --sp or --json takes no value)")
    data = read_document(path)
    if not isinstance(data, dict):
        raise ConfigError("$", f"{path} must hold a mapping at the top level")
    return structure(data, ConfigFile, registry)


def inline_model(model: InlineModel, source: str) -> ModelSpec:
    """The model spec of a model written out in a config file."""
    return ModelSpec(name=model.name, layers=model.layers, source=source)
