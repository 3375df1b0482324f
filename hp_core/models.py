"""Models from configs: a preset or a ``config.json`` built through the registry's model formats.

The core reads the file (a ``config.json``, or the one in a folder) and
hands the mapping to the :class:`~hp_core.types.ModelFormat` that lists its
``model_type`` (:meth:`~hp_core.registry.Registry.format_for`); the built-in
Hugging Face importer is such a format, registered as a plugin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from hp_core.documents import read_document
from hp_core.errors import ConfigError, HPError, PluginError, describe
from hp_core.registry import Registry
from hp_core.specs import ModelSpec

__all__ = ["load_model_config", "model_from_config", "model_from_preset", "preset_config"]


def load_model_config(path: str | Path, field: str = "--model") -> tuple[dict[str, Any], str]:
    """Read a ``config.json`` (or the one in a folder); returns the mapping and the file's path.

    *field* is what an error names when there is no such file: the flag, or the config file's
    ``$.model`` when the name came from one.

    Raises:
        ConfigError: No such file, or not a JSON object.
    """
    target = Path(path)
    if target.is_dir():
        target = target / "config.json"
    if not target.is_file():
        raise ConfigError(field, f"no such preset or config file: {path}; run 'hp models' for presets")
    data = read_document(target)  # bounded: size, nesting (hp_core.documents)
    if not isinstance(data, dict):
        raise ConfigError(str(target), "must hold a JSON object")
    return data, str(target)


def model_from_config(config: Mapping[str, Any], registry: Registry, *, name: str, source: str,
                      where: str = "config.json") -> ModelSpec:
    """The layer stack of a config mapping, built by the model format that reads its ``model_type``.

    Raises:
        ConfigError: No format reads it, or the format refuses a field (with its path).
        PluginError: The format's builder failed otherwise.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(where, f"a model config is a mapping of its fields, got {type(config).__name__}")
    fmt = registry.format_for(config, where)
    try:
        model = fmt.build(config, name=name, source=source, where=where)
    except HPError:
        raise
    except (Exception, SystemExit) as exc:  # a plugin must not end the command
        raise PluginError(fmt.name, f"model format raised {type(exc).__name__}: {describe(exc)}") from exc
    if not isinstance(model, ModelSpec):
        raise PluginError(fmt.name, f"model format must return a ModelSpec, got {type(model).__name__}")
    return model


def preset_config(name: str, registry: Registry) -> Mapping[str, Any] | None:
    """The config mapping of the preset *name*, ``None`` when no preset has that name."""
    for preset in registry.models:
        if preset.name == name:
            return preset.hf_config
    return None


def model_from_preset(name: str, registry: Registry, path: str = "$.model") -> ModelSpec:
    """The model of the preset *name*, built through its model format."""
    preset = registry.model(name, path)
    return model_from_config(preset.hf_config, registry, name=preset.name, source=f"preset {preset.name}: {preset.provenance}")
