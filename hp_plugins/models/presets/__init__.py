"""Model presets shipped as data: one JSON file per model (Hugging Face ``config.json`` plus provenance).

Each file holds ``name``, ``description``, ``provenance`` and ``config``.
"""

from __future__ import annotations

import json
from importlib.resources import files

from hp_core.markers import hookimpl
from hp_core.types import ModelPreset

__all__ = ["hp_models", "load_presets"]


def load_presets() -> list[ModelPreset]:
    """Every preset file of this package, as records."""
    found = []
    for entry in sorted(files(__name__).iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            data = json.loads(entry.read_text(encoding="utf-8"))
            found.append(
                ModelPreset(
                    name=data["name"], hf_config=data["config"], provenance=data["provenance"], description=data["description"]
                )
            )
    return found


@hookimpl
def hp_models():
    yield from load_presets()
