"""Shared fixtures: a fresh registry per test (no global plugin manager) and a preset model."""

from __future__ import annotations

import pytest

from hp_core.api import build_registry, model_from_preset
from hp_core.registry import Registry
from hp_core.specs import ModelSpec


@pytest.fixture
def registry() -> Registry:
    """The built-in plugins only, built anew for each test; ``HP_BLOCK_PLUGINS`` is ignored."""
    return build_registry(use_env=False)


@pytest.fixture
def llama8b(registry: Registry) -> ModelSpec:
    """Llama-3-8B from its shipped preset."""
    return model_from_preset("llama3-8b", registry)
