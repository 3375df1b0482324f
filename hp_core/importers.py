"""Trainer-config importers: what the ``hp_importers`` hook yields.

An :class:`Importer` reads a job as a trainer states it (a Megatron-LM
argument list or launch script, a torchtitan TOML, ...) and returns an
:class:`ImportedJob`: an ``hp estimate`` config document (model, layout,
batch, runtime with its options, precision, recompute) and one line per
setting it could not map. ``hp estimate --from NAME SOURCE`` (and ``hp
recompute``, ``hp potentials``) reads it; flags override what it maps, field
by field, as they override a config file.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

import attrs

__all__ = ["ImportedJob", "Importer"]

_NAME = re.compile(r"^[a-z][a-z0-9_.-]*$")


def _check_name(instance: Any, attribute: attrs.Attribute, value: str) -> None:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(f"Importer.name must be a lower-case name (letters, digits, '_', '-', '.'), got {value!r}")


@attrs.frozen
class ImportedJob:
    """What an importer read.

    Attributes:
        document: An ``hp estimate`` config document (docs/config.md): a plain
            mapping the config converter reads, so every error names its field.
        unmapped: One line per setting of the source the importer could not
            map (``--fp8-format hybrid: FP8 is not priced``); shown as warnings.
        devices: The device count the source states (torchrun's
            ``--nproc_per_node * --nnodes``), from which ``dp`` is derived
            where the document states none; ``None``: not stated.
    """

    document: Mapping[str, Any]
    unmapped: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    devices: int | None = None


@attrs.frozen
class Importer:
    """A trainer-config reader, chosen by name (``--from NAME``).

    Attributes:
        name: Registry name (``"megatron"``).
        read: ``read(source, *, registry) -> ImportedJob``: *source* is a file's
            path, or the text itself where ``reads_text``; raises
            :class:`hp_core.errors.ConfigError` naming what it cannot read.
        description: One line for ``hp plugins``: the trainer and its format.
        reads_text: *source* is the configuration text itself (an argument
            list given on the command line), not a path.
        exporter: The exporter (``hp_exporters``) that writes this trainer's
            recompute plans, for round trips; ``None`` if none.
    """

    name: str = attrs.field(validator=_check_name)
    read: Callable[..., ImportedJob]
    description: str = ""
    reads_text: bool = False
    exporter: str | None = None
