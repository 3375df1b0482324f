"""What the TOML/YAML importers share: reading a trainer's file safely, typed look-ups that name the
file and field, and a per-layer recompute plan written back as a config document's ``recompute``."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from hp_core.documents import parse_document, read_text
from hp_core.engine.recompute.layout import PlanLayout, plan_layout
from hp_core.errors import ConfigError
from hp_core.io.convert import ConfigFile, structure
from hp_core.io.job import resolve_job
from hp_core.specs import Setting

__all__ = ["Fields", "layout_of", "plan_document", "read_mapping"]


def read_mapping(path: str, fmt: str) -> dict[str, Any]:
    """The file at *path* parsed as *fmt* (``toml``/``yaml``) by the bounded readers; a mapping at the top."""
    data = parse_document(read_text(path), fmt, path)
    if not isinstance(data, dict):
        raise ConfigError(path, "must hold a mapping at the top level")
    return data


class Fields:
    """A nested mapping read field by field (``"training.seq_len"``); what is never read is reported.

    Errors name the file and the field: ``train.toml: training.seq_len: expected an integer, got 'x'``.
    """

    def __init__(self, data: Mapping[str, Any], file: str, quiet: Callable[[str], bool] = lambda key: False) -> None:
        self.file, self.read, self.quiet = file, set(), quiet
        self.leaves: dict[str, Any] = {}
        stack = [("", data)]
        while stack:
            prefix, node = stack.pop()
            for key, value in node.items():
                name = f"{prefix}{key}"
                if isinstance(value, dict) and value:
                    stack.append((name + ".", value))
                else:
                    self.leaves[name] = value

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.file}: {key}", message)

    def get(self, key: str, default: Any = None, kind: type | tuple[type, ...] | None = None,
            choices: tuple[Any, ...] | None = None) -> Any:
        self.read.add(key)
        if key not in self.leaves:
            return default
        value = self.leaves[key]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise self.error(key, f"expected an integer, got {value!r}")
        if kind is bool and not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        if kind is str and not isinstance(value, str):
            raise self.error(key, f"expected a string, got {value!r}")
        if kind is list and not isinstance(value, list):
            raise self.error(key, f"expected a list, got {value!r}")
        if choices is not None and value not in choices:
            raise self.error(key, f"expected one of {', '.join(map(str, choices))}; got {value!r}")
        return value

    def degree(self, key: str, default: int = 1, minimum: int = 1) -> int:
        value = self.get(key, default, int)
        if value < minimum:
            raise self.error(key, f"expected an integer >= {minimum}, got {value}")
        return value

    def unread(self) -> list[str]:
        return [f"{key} = {value!r}: not mapped" for key, value in self.leaves.items()
                if key not in self.read and not self.quiet(key)]


def layout_of(document: Mapping[str, Any], registry) -> tuple[Any, PlanLayout]:
    """The model and the body layers' chunks of *document* (its model and layout; dp and batch left out)."""
    parallel = {k: v for k, v in document["parallel"].items()
                if k in ("tp", "pp", "vpp", "cp", "ep", "etp", "sp", "seq_len", "schedule", "layers_per_stage")}
    job = resolve_job(structure({"model": document["model"], "parallel": parallel}, ConfigFile, registry), registry)
    return job.model, plan_layout(job.model, job.parallel, registry)


def plan_document(settings: list[Setting]) -> Any:
    """Per-body-layer settings as a config's ``recompute`` (``{"default": "none", "layers": {...}}``); ``None``
    when nothing is recomputed."""
    def word(setting: Setting) -> Any:
        return sorted(setting.switches) if setting.mode == "switches" else setting.mode

    ranges, start = {}, 0
    for index in range(1, len(settings) + 1):
        if index == len(settings) or settings[index] != settings[start]:
            if settings[start].mode != "none":
                ranges[f"{start}-{index - 1}" if index - 1 > start else str(start)] = word(settings[start])
            start = index
    return {"default": "none", "layers": ranges} if ranges else None
