"""Every result and spec as JSON, and back: :func:`to_json` and :func:`from_json`.

The JSON form of an attrs record is a mapping of its fields by name, each in
its own JSON form: a tuple or a list is a list, a frozen set (a
:class:`~hp_core.specs.Setting`'s ``switches``) a sorted list, a mapping an
object; numbers and strings are themselves (a float that is not finite is
written as JavaScript's ``Infinity`` / ``NaN``, as :func:`json.dumps` does).
:func:`from_json` reads that form back into the type asked for, so
``from_json(to_json(x), type(x)) == x`` for every result (``Estimate``,
``StepTime``, ``RecomputePlan``, ``SearchResult``) and every spec. A
:class:`~hp_core.specs.ModelSpec` (and anything holding one) names its layer
kinds, whose config classes a plugin defines: reading one back needs the
registry. docs/api.md documents the forms; ``tests/core/test_jsonforms.py``
checks each round trip.
"""

from __future__ import annotations

import json
import typing
from typing import Any, Mapping

import cattrs

from hp_core.errors import ConfigError
from hp_core.specs import LayerGroup, Setting

__all__ = ["dumps", "from_json", "loads", "to_json"]


def _converter(registry: Any = None) -> cattrs.Converter:
    converter = cattrs.Converter()
    converter.register_unstructure_hook(frozenset, lambda value: sorted(value, key=str))
    converter.register_unstructure_hook_func(lambda t: typing.get_origin(t) is frozenset,
                                             lambda value: sorted(value, key=str))
    converter.register_unstructure_hook(Setting, lambda s: {"mode": s.mode, "switches": sorted(s.switches),
                                                            "offload": s.offload})
    converter.register_structure_hook(Setting, lambda d, _: Setting(mode=d["mode"], switches=frozenset(d["switches"]),
                                                                   offload=d["offload"]))
    converter.register_unstructure_hook_func(lambda t: typing.get_origin(t) in (Mapping, typing.Mapping),
                                             lambda value: {k: converter.unstructure(v) for k, v in value.items()})
    converter.register_structure_hook_func(
        lambda t: t is Any, lambda value, _: value)
    converter.register_structure_hook_func(
        lambda t: typing.get_origin(t) in (Mapping, typing.Mapping) or t is Mapping,
        lambda value, t: {k: (converter.structure(v, typing.get_args(t)[1]) if typing.get_args(t) else v)
                          for k, v in value.items()})

    def layer_group(value: Any, _: type) -> LayerGroup:
        if registry is None:
            raise ConfigError("$.layers", "reading a layer stack back needs the registry of its layer kinds: "
                                          "from_json(data, ModelSpec, registry=registry)")
        kind = registry.layer_kind(value["kind"])
        return LayerGroup(kind.name, converter.structure(value["config"], kind.config_type), value.get("count", 1))

    converter.register_structure_hook(LayerGroup, layer_group)
    converter.register_unstructure_hook(LayerGroup, lambda g: {"kind": g.kind, "config": converter.unstructure(g.config),
                                                               "count": g.count})
    return converter


def to_json(value: Any) -> Any:
    """*value* (an attrs record, a tuple, a mapping, ...) in its JSON form: plain dicts, lists, numbers, strings."""
    return _converter().unstructure(value)


def from_json(data: Any, cls: type, registry: Any = None) -> Any:
    """The *cls* whose JSON form is *data* (:func:`to_json`); *registry* where it holds a layer stack.

    Raises:
        ConfigError: *data* is not the JSON form of a *cls* (naming the first field that is not).
    """
    from hp_core.io.convert import _format  # the converter's one-line messages

    try:
        return _converter(registry).structure(data, cls)
    except ConfigError:
        raise
    except cattrs.BaseValidationError as exc:
        messages = cattrs.transform_error(exc, path="$", format_exception=_format)
        message, _, path = messages[0].rpartition(" @ ")
        raise ConfigError(path or "$", message) from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError("$", f"not the JSON form of a {cls.__name__}: {type(exc).__name__}: {exc}") from None


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps(to_json(value))``."""
    return json.dumps(to_json(value), **kwargs)


def loads(text: str, cls: type, registry: Any = None) -> Any:
    """``from_json(json.loads(text), cls, registry)``."""
    return from_json(json.loads(text), cls, registry)

