"""Reading YAML, JSON and TOML documents safely: bounded size, depth and alias expansion.

Every file a user hands the planner (config files, census files, case files,
``config.json``) is parsed here. YAML is read with PyYAML's safe loader,
extended to count nesting and the values an alias expands to: a file nesting
deeper than :data:`~hp_core.bounds.MAX_DEPTH`, or whose aliases expand to more
than :data:`~hp_core.bounds.MAX_NODES` values (a "billion laughs" file of a few
hundred bytes), is refused while it is parsed, before anything is expanded. JSON
and TOML are parsed by the standard library, then walked (iteratively) for the
same limits. An error is a :class:`~hp_core.errors.ConfigError` naming the file
and, where the parser knows it, the line; it never quotes the expanded value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hp_core.bounds import MAX_DEPTH, MAX_DOCUMENT_BYTES, MAX_NODES
from hp_core.errors import ConfigError

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["check_shape", "parse_document", "read_document", "read_text"]


class _TooLarge(Exception):
    """A document past a bound, found while YAML is composed (turned into a ConfigError)."""


def _yaml_loader() -> type:
    import yaml  # only where a YAML file is read

    class BoundedLoader(yaml.SafeLoader):
        """The safe loader, counting nesting depth and the values aliases expand to."""

        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self.depth = 0
            self.values = 0
            self.sizes: dict[int, int] = {}

        def _size(self, node: Any) -> int:
            """Values in *node*'s tree, aliases counted each time they appear (memoised, iterative)."""
            known = self.sizes
            stack = [(node, False)]
            while stack:
                current, done = stack.pop()
                if id(current) in known:
                    continue
                children = []
                if isinstance(current, yaml.SequenceNode):
                    children = list(current.value)
                elif isinstance(current, yaml.MappingNode):
                    children = [part for pair in current.value for part in pair]
                if done or not children:
                    known[id(current)] = 1 + sum(known.get(id(child), 1) for child in children)
                else:
                    stack.append((current, True))
                    stack.extend((child, False) for child in children)
            return known[id(node)]

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                if event.anchor in self.anchors:
                    self.values += self._size(self.anchors[event.anchor])
                    if self.values > MAX_NODES:
                        raise _TooLarge(f"its aliases expand to more than {MAX_NODES:,} values (MAX_NODES) "
                                        f"at line {event.start_mark.line + 1}")
                return super().compose_node(parent, index)
            self.depth += 1
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _TooLarge(f"nests deeper than {MAX_DEPTH} levels (MAX_DEPTH) at line {mark.line + 1}")
            try:
                node = super().compose_node(parent, index)
            finally:
                self.depth -= 1
            self.values += 1
            if self.values > MAX_NODES:
                raise _TooLarge(f"holds more than {MAX_NODES:,} values (MAX_NODES)")
            return node

    return BoundedLoader


def check_shape(data: Any, name: str) -> Any:
    """*data* when it nests at most :data:`MAX_DEPTH` deep and holds at most :data:`MAX_NODES` values.

    Shared objects are counted each time they appear (what a reader walking the
    document would visit). Raises :class:`ConfigError` naming *name* otherwise.
    """
    stack = [(data, 1)]
    values = 0
    while stack:
        value, depth = stack.pop()
        values += 1
        if values > MAX_NODES:
            raise ConfigError(name, f"holds more than {MAX_NODES:,} values (MAX_NODES)")
        if isinstance(value, (dict, list, tuple)):
            if depth > MAX_DEPTH:
                raise ConfigError(name, f"nests deeper than {MAX_DEPTH} levels (MAX_DEPTH)")
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack.extend((item, depth + 1) for item in items)
    return data


def read_text(path: str | Path, name: str | None = None) -> str:
    """A file's text, at most :data:`MAX_DOCUMENT_BYTES` bytes, or a :class:`ConfigError` naming it."""
    target = Path(path)
    label = name or str(target)
    try:
        with open(target, "rb") as handle:
            raw = handle.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise ConfigError(label, f"cannot be read: {exc.strerror or exc}") from None
    except ValueError:  # a NUL character in the name
        raise ConfigError(repr(label), "cannot be read: a file name holds no NUL character") from None
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise ConfigError(label, f"is larger than {MAX_DOCUMENT_BYTES:,} bytes (MAX_DOCUMENT_BYTES)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(label, f"is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    # As open(..., newline=None) reads it: universal newlines.
    return text.replace("\r\n", "\n").replace("\r", "\n")


def parse_document(text: str, fmt: str, name: str) -> Any:
    """Parse *text* as ``yaml``, ``json`` or ``toml``, within the bounds; *name* is the file in messages."""
    import yaml

    label = {"json": "JSON", "toml": "TOML"}.get(fmt, "YAML")
    try:
        if fmt == "json":
            data = json.loads(text)
        elif fmt == "toml":
            data = tomllib.loads(text)
        else:
            data = yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except _TooLarge as exc:
        raise ConfigError(name, f"is refused: it {exc}") from None
    except RecursionError:
        raise ConfigError(name, f"nests deeper than {MAX_DEPTH} levels (MAX_DEPTH)") from None
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        first = " ".join(str(exc).split())
        raise ConfigError(name, f"is not valid {label}: {first[:300]}") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        first = " ".join(str(exc).split())
        raise ConfigError(name, f"is not valid {label}: {first[:300]}") from None
    return check_shape(data, name)


def read_document(path: str | Path, name: str | None = None) -> Any:
    """Read and parse a YAML, JSON or TOML file by its suffix (YAML for anything else)."""
    target = Path(path)
    label = name or str(target)
    suffix = target.suffix.lower()
    fmt = "json" if suffix == ".json" else "toml" if suffix == ".toml" else "yaml"
    return parse_document(read_text(target, label), fmt, label)
