"""Fixtures shared by the plugin tests."""

from __future__ import annotations

import pytest

from hp_core.api import build_registry


@pytest.fixture(scope="module")
def megatron_registry():
    """The built-in plugins (``HP_BLOCK_PLUGINS`` ignored); skips where the ``megatron`` runtime is not registered."""
    registry = build_registry(use_env=False)
    if "megatron" not in {r.name for r in registry.runtimes}:
        pytest.skip("the megatron runtime is not registered")
    return registry
