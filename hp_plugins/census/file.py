"""The ``file`` census source: records read from a YAML or JSON file, e.g. measured on a GPU.

A run names the file instead of a source (``--census measured.yaml``,
``census: measured.yaml``); :func:`hp_core.engine.census.resolve_source` binds this
source to it. The file, which ``hp census --out FILE`` writes::

    model: llama3-8b                 # optional, for the reader
    kinds:
      dense:                         # a layer kind's name
        saved: 49160.0               # bytes per token at micro-batch 1 that TP does not split
        saved_tp: 360448.0           # ... that TP splits (stated at tp = 1)
        working: 16388.0             # the backward's peak beyond what is kept
        working_tp: 425984.0
        per_op:                      # optional: the part of saved each recompute switch drops
          softmax: {saved: 0, saved_tp: 131072.0}
        policies:                    # optional: bytes kept under a selective policy, measured whole
          selective: {saved: 49160.0, saved_tp: 32768.0}
        provenance:                  # required: where the numbers come from
          source: H100 run 2026-11-01, torch.cuda.memory_stats
          seq_len: 4096

Everything is checked on load: unknown keys, a value that is not a
non-negative number, a pair stated by half (``saved`` without ``saved_tp``), a
record without a provenance naming its ``source``, and a record measured at
another sequence length than the run's (``provenance.seq_len``) are refused
with one line naming the file and the field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

import yaml

from hp_core.costs import is_switch_name
from hp_core.engine.census import FILE_SOURCE
from hp_core.documents import parse_document, read_text
from hp_core.bounds import MAX_MEMORY_BYTES, short_repr
from hp_core.errors import ConfigError
from hp_core.validators import is_finite
from hp_core.io.files import atomic_write
from hp_core.markers import hookimpl
from hp_core.types import CensusBytes, CensusRecord, CensusRequest, CensusSource

__all__ = ["hp_census_sources", "load_census_file", "provide_file", "records_to_document", "write_census_file"]

_TOP_KEYS = ("model", "kinds")
_RECORD_KEYS = ("saved", "saved_tp", "working", "working_tp", "per_op", "policies", "provenance")
_PAIRS = (("saved", "saved_tp"), ("working", "working_tp"))


def _read(path: Path) -> Any:
    """The file's document, YAML unless it ends in ``.json``; bounded (hp_core.documents)."""
    fmt = "json" if path.suffix.lower() == ".json" else "yaml"
    return parse_document(read_text(path), fmt, str(path))


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not is_finite(value):
        raise ConfigError(where, f"must be a number of bytes per token (finite), got {short_repr(value)}")
    if value < 0:
        raise ConfigError(where, f"must not be negative, got {short_repr(value)}")
    if value > MAX_MEMORY_BYTES:
        raise ConfigError(where, f"must be at most {MAX_MEMORY_BYTES:,} bytes per token (MAX_MEMORY_BYTES), got {short_repr(value)}")
    return float(value)


def _mapping(value: Any, where: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(where, f"must be a mapping of {what}, got {type(value).__name__} {short_repr(value)}")
    return value


def _unknown(value: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    extra = sorted(str(key) for key in set(value) - set(known))
    if extra:
        raise ConfigError(f"{where}.{extra[0]}", f"unknown key; a census record has {', '.join(known)}")


def _pair(value: Mapping[str, Any], first: str, second: str, where: str) -> tuple[float, float]:
    if first in value and second not in value:
        raise ConfigError(f"{where}.{second}", f"missing: {first} is stated without {second}; state both (0 where nothing is split)")
    if second in value and first not in value:
        raise ConfigError(f"{where}.{first}", f"missing: {second} is stated without {first}; state both (0 where nothing is split)")
    if first not in value:
        raise ConfigError(f"{where}.{first}", f"missing: a census record states {first} and {second}")
    return _number(value[first], f"{where}.{first}"), _number(value[second], f"{where}.{second}")


def _parts(value: Any, where: str, switches: bool) -> dict[str, CensusBytes]:
    """Named parts; *switches*: the names are recompute switches (whether the kind has them is checked where
    the records are asked for: hp_core.engine.census.request_records)."""
    parts: dict[str, CensusBytes] = {}
    for name, part in _mapping(value, where, "names to {saved, saved_tp}").items():
        at = f"{where}.{name}"
        if switches and not is_switch_name(name):
            raise ConfigError(at, "is not a recompute switch name (letters, digits, '_', '-', '.', starting with a letter)")
        part = _mapping(part, at, "saved and saved_tp")
        _unknown(part, ("saved", "saved_tp"), at)
        parts[str(name)] = CensusBytes(*_pair(part, "saved", "saved_tp", at))
    return parts


def _record(kind: str, value: Any, where: str, seq_len: int | None) -> CensusRecord:
    value = _mapping(value, where, "record fields")
    _unknown(value, _RECORD_KEYS, where)
    if "provenance" not in value:
        raise ConfigError(f"{where}.provenance", "missing: say where the numbers come from (provenance: {source: ...})")
    provenance = _mapping(value["provenance"], f"{where}.provenance", "facts")
    if not isinstance(provenance.get("source"), str) or not provenance["source"].strip():
        raise ConfigError(f"{where}.provenance.source", "missing: name the measurement (a trainer run, a profiler trace, ...)")
    saved, saved_tp = _pair(value, *_PAIRS[0], where)
    working, working_tp = _pair(value, *_PAIRS[1], where)
    measured_at = provenance.get("seq_len")
    if seq_len is not None and measured_at is not None and measured_at != seq_len:
        raise ConfigError(
            f"{where}.provenance.seq_len",
            f"measured at seq_len={short_repr(measured_at)}, the run uses seq_len={seq_len}; per-token bytes of attention "
            "change with the sequence length: measure at the run's length",
        )
    per_op = _parts(value.get("per_op", {}), f"{where}.per_op", True)
    policies = _parts(value.get("policies", {}), f"{where}.policies", False)
    gated = (sum(p.saved for p in per_op.values()), sum(p.saved_tp for p in per_op.values()))
    if gated[0] > saved * (1 + 1e-9) + 1e-6 or gated[1] > saved_tp * (1 + 1e-9) + 1e-6:
        raise ConfigError(
            f"{where}.per_op",
            f"adds up to saved={gated[0]:g}, saved_tp={gated[1]:g}, more than the record keeps ({saved:g}, {saved_tp:g})",
        )
    return CensusRecord(saved, saved_tp, working, working_tp, dict(provenance), per_op, policies)


def load_census_file(path: str | Path, seq_len: int | None = None) -> dict[str, CensusRecord]:
    """Read and check a census file; the records by kind.

    Args:
        path: A ``.yaml``/``.yml`` or ``.json`` file.
        seq_len: The run's sequence length: a record measured at another is refused.

    Raises:
        ConfigError: The first problem, as ``FILE $.kinds.KIND.FIELD: what to do``.
    """
    target = Path(path)
    if not target.is_file():
        raise ConfigError(str(target), "census file does not exist")
    data = _read(target)
    root = f"{target} $"
    top = _mapping(data, root, "'model' and 'kinds'")
    _unknown(top, _TOP_KEYS, root)
    if "kinds" not in top:
        raise ConfigError(f"{root}.kinds", "missing: a census file maps layer kinds to records under 'kinds'")
    kinds = _mapping(top["kinds"], f"{root}.kinds", "layer kinds to records")
    return {str(kind): _record(str(kind), value, f"{root}.kinds.{kind}", seq_len) for kind, value in kinds.items()}


def provide_file(request: CensusRequest) -> Mapping[str, CensusRecord]:
    """The records of the file the request names (``request.location``)."""
    if not request.location:
        raise ConfigError("$.census", "the file census source reads a census file: name it (--census FILE.yaml)")
    return load_census_file(request.location, request.seq_len)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def records_to_document(records: Mapping[str, CensusRecord], model: str | None = None) -> dict[str, Any]:
    """A census file's document of *records* (what :func:`load_census_file` reads back)."""
    kinds: dict[str, Any] = {}
    for kind, record in records.items():
        entry: dict[str, Any] = {
            "saved": record.saved,
            "saved_tp": record.saved_tp,
            "working": record.working,
            "working_tp": record.working_tp,
        }
        if record.per_op:
            entry["per_op"] = {name: {"saved": p.saved, "saved_tp": p.saved_tp} for name, p in record.per_op.items()}
        if record.policies:
            entry["policies"] = {name: {"saved": p.saved, "saved_tp": p.saved_tp} for name, p in record.policies.items()}
        entry["provenance"] = _plain(record.provenance)
        kinds[kind] = entry
    document: dict[str, Any] = {"model": model} if model is not None else {}
    document["kinds"] = kinds
    return document


def write_census_file(path: str | Path, records: Mapping[str, CensusRecord], model: str | None = None) -> Path:
    """Write *records* as a census file, atomically: a temporary file in the same folder, then ``os.replace``.

    JSON for a ``.json`` path, YAML otherwise.

    Raises:
        ConfigError: The folder does not exist or cannot be written.
    """
    target = Path(path)
    document = records_to_document(records, model)
    if target.suffix.lower() == ".json":
        text = json.dumps(document, indent=2) + "\n"
    else:
        text = yaml.safe_dump(document, sort_keys=False)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise ConfigError(str(target), f"cannot write the census file: no folder {folder}")

    def write(temporary: str) -> None:
        with open(temporary, "w", encoding="utf-8") as out:
            out.write(text)

    # Atomic, one file mode, the temporary removed on every way out (hp_core.io.files).
    atomic_write(target, write, ".tmp", flag="--out")
    return target


@hookimpl
def hp_census_sources():
    yield CensusSource(
        name=FILE_SOURCE,
        provide=provide_file,
        description="records read from a census file (YAML/JSON), e.g. measured on a GPU; --census FILE",
        write=write_census_file,
    )
