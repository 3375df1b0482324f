"""What every ``config.json`` format shares: a reader of its fields, and runs of equal consecutive layers as layer groups."""

from __future__ import annotations

from typing import Any, Mapping

from hp_core.bounds import MAX_INT, MAX_LAYERS, short_repr
from hp_core.errors import ConfigError
from hp_core.specs.model import LayerGroup
from hp_core.validators import is_finite

__all__ = ["ConfigReader", "grouped", "rotary_factor", "router_groups"]

_ABSENT = object()


class ConfigReader:
    """Reads one ``config.json``'s fields by name, with its model type's defaults; each refusal names the field's path.

    A field the file omits, or states as ``null`` where the caller does not
    read ``null`` as a value (``nullable``), takes its default from
    *defaults* (the transformers config class's); a field without one is
    refused. Integers are non-negative and at most ``MAX_INT``
    (``num_hidden_layers`` at least 1 and at most ``MAX_LAYERS``), floats
    finite, lists at most ``MAX_LAYERS`` long. *prefix* is the path of a
    nested mapping the reader reads (``attn_config.``), put before each key.
    """

    def __init__(self, cfg: Mapping[str, Any], defaults: Mapping[str, Any], where: str,
                 aliases: Mapping[str, str] | None = None, prefix: str = "") -> None:
        self.cfg, self.defaults, self.where, self.aliases, self.prefix = cfg, defaults, where, aliases or {}, prefix

    def path(self, key: str) -> str:
        """The error path of field *key*."""
        return f"{self.where} $.{self.prefix}{key}"

    def fail(self, key: str, what: str, value: Any) -> ConfigError:
        """The error for field *key*: it must be *what*."""
        return ConfigError(self.path(key), f"must be {what}, got {short_repr(value)}")

    def get(self, key: str, kind: type = int, nullable: bool = False) -> Any:
        """Field *key* (or its legacy name in *aliases* where the file states that instead) as a *kind* (``int``,
        ``bool``, ``str``, ``float`` or ``list``); ``None`` where it is ``null`` and *nullable*."""
        if self.cfg.get(key) is None and key in self.aliases and self.cfg.get(self.aliases[key]) is not None:
            key = self.aliases[key]
        value = self.cfg.get(key, _ABSENT)
        if value is _ABSENT or (value is None and not nullable):
            if key in self.defaults:
                return self.defaults[key]
            raise ConfigError(self.path(key), "is missing and the estimate needs it; add it to the config")
        if value is None:
            return None
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise self.fail(key, "a non-negative integer", value)
        if kind is int and key == "num_hidden_layers" and not 1 <= value <= MAX_LAYERS:
            raise self.fail(key, f"at least 1 and at most {MAX_LAYERS:,} (MAX_LAYERS)", value)
        if kind is int and value > MAX_INT:
            raise self.fail(key, f"at most {MAX_INT:,} (MAX_INT)", value)
        if kind is bool and not isinstance(value, bool):
            raise self.fail(key, "true or false", value)
        if kind is str and not isinstance(value, str):
            raise self.fail(key, "a string", value)
        if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float)) or not is_finite(value)):
            raise self.fail(key, "a finite number", value)
        if kind is list and not (isinstance(value, list) and len(value) <= MAX_LAYERS):
            raise self.fail(key, f"a list of at most {MAX_LAYERS:,} entries", value)
        return value

    def indices(self, key: str) -> list[int]:
        """Field *key* as a list of layer indices (non-negative integers)."""
        value = self.get(key, list)
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value):
            raise self.fail(key, "a list of layer indices", value)
        return value

    def layer_types(self, default: list[str], allowed: tuple[str, ...]) -> list[str]:
        """``layer_types`` as stated (one per layer, each in *allowed*), else *default*."""
        types = self.get("layer_types", list, nullable=True)
        if types is None:
            return default
        if len(types) != len(default) or any(t not in allowed for t in types):
            raise ConfigError(self.path("layer_types"), f"must list one of {list(allowed)} for each of the "
                              f"{len(default)} layers, got {short_repr(types)}")
        return types

    def window(self, key: str, nullable: bool = True) -> int | None:
        """A window in tokens (``sliding_window``, ``attention_chunk_size``); ``null``: none (*nullable*) or the
        default; 0 is refused."""
        value = self.get(key, int, nullable=nullable)
        if value == 0:
            raise self.fail(key, "a positive number of tokens or null", value)
        return value


def router_groups(r: ConfigReader, experts: int | None = None) -> dict[str, Any]:
    """A group-limited router's ``n_group`` and ``topk_group`` as :class:`~hp_plugins.kit.MoEFields` states them:
    each at least 1, ``n_group`` dividing the *experts* and ``topk_group`` at most ``n_group``, refused naming the
    config's field and, where the file omits it, the default it took (whether they hold the top-k, the layer's
    config checks)."""
    found = {}
    for key, field in (("n_group", "router_num_groups"), ("topk_group", "router_group_topk")):
        value = r.get(key)
        absent = "" if r.cfg.get(key) is not None else f" (absent from the file: the config class's default {value})"
        if value < 1:
            raise r.fail(key, f"a positive integer{absent}", value)
        if key == "n_group" and experts is not None and experts % value:
            raise r.fail(key, f"a divisor of the {experts} routed experts{absent}", value)
        if key == "topk_group" and value > found["router_num_groups"]:
            raise r.fail(key, f"at most n_group ({found['router_num_groups']}){absent}", value)
        found[field] = value
    return found


def rotary_factor(r: ConfigReader) -> float:
    """``partial_rotary_factor``, the share of each head's channels RoPE rotates, read as transformers 5.24 reads it
    (``modeling_rope_utils.py`` ``RotaryEmbeddingConfigMixin.convert_rope_params_to_dict``): from ``rope_parameters``
    (or the legacy ``rope_scaling`` it replaces) first, then the top-level field, then the model type's default;
    refused outside ``(0, 1]``."""
    for key in ("rope_parameters", "rope_scaling"):
        nested = r.cfg.get(key)
        if isinstance(nested, Mapping) and nested.get("partial_rotary_factor") is not None:
            value, path = nested["partial_rotary_factor"], f"{key}.partial_rotary_factor"
            break
    else:
        value, path = r.get("partial_rotary_factor", float), "partial_rotary_factor"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise r.fail(path, "a number in (0, 1]", value)
    return float(value)


def grouped(layers: list[tuple[str, Any]]) -> list[LayerGroup]:
    """``(kind, config)`` per layer, in order, as :class:`LayerGroup` runs of equal consecutive layers."""
    groups: list[LayerGroup] = []
    for kind, config in layers:
        if groups and groups[-1].kind == kind and groups[-1].config == config:
            groups[-1] = LayerGroup(kind, config, groups[-1].count + 1)
        else:
            groups.append(LayerGroup(kind, config, 1))
    return groups
