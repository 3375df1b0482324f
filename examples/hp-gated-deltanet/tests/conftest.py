"""The plugin under test, for hp-planner's fixtures (``hp_registry``: the built-ins and this plugin)."""

from __future__ import annotations

import pytest

from hp_gated_deltanet import plugin


@pytest.fixture
def hp_plugins_under_test():
    return [plugin]
