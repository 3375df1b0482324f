"""The ``nccl`` collective model: :data:`hp_core.collectives.NCCL`, registered through the hook a third party uses.

The formulas and their sources are in :mod:`hp_core.collectives` (the engine's
default when a timing profile names no model) and docs/time.md.
"""

from __future__ import annotations

from hp_core.collectives import NCCL
from hp_core.markers import hookimpl

__all__ = ["hp_collective_models"]


@hookimpl
def hp_collective_models():
    yield NCCL
