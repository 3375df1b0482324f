"""Fixtures for the core tests: the CLI tests must not see a developer's HP_BLOCK_PLUGINS."""

from __future__ import annotations

import pytest

from hp_core.manager import BLOCK_ENV


@pytest.fixture(autouse=True, scope="module")
def _no_block_env():
    """The CLI honours HP_BLOCK_PLUGINS; a developer's setting must not leak in (module-scoped: hypothesis tests too)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(BLOCK_ENV, raising=False)
        yield
