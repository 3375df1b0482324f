"""hp_core.distributions reads installed distributions as importlib.metadata does, without importing it."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

from hp_core.distributions import declares_entry_points, distribution_version, planner_version


def _installed() -> list[str]:
    return sorted({dist.metadata["Name"] for dist in metadata.distributions() if dist.metadata["Name"]})


@pytest.mark.parametrize("name", _installed())
def test_every_installed_version_is_importlib_metadatas(name):
    assert distribution_version(name) == metadata.version(name)


def test_an_absent_distribution_has_no_version():
    assert distribution_version("no-such-distribution-hp-test") is None
    assert planner_version() == metadata.version("hp-planner")


def test_entry_point_groups_are_declared_as_importlib_metadata_lists_them():
    groups = {ep.group for dist in metadata.distributions() for ep in dist.entry_points}
    for group in sorted(groups) + ["hp", "no-such-group-hp-test"]:
        if group in groups:
            assert declares_entry_points(group), group
        else:
            # False only where importlib.metadata lists no entry point of the group.
            assert not declares_entry_points(group) or not metadata.entry_points().select(group=group)


def test_the_version_is_read_without_importing_importlib_metadata():
    code = ("import sys, hp_core; hp_core.__version__; "
            "print('importlib.metadata' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_public_surface_resolves_and_a_plugin_import_does_not_load_the_engine():
    import hp_core

    for name in hp_core.__all__:
        assert getattr(hp_core, name) is not None, name
    code = "import sys, hp_core.types, hp_core.markers; print(sorted(m for m in sys.modules if m.startswith(('hp_core.api', 'hp_core.engine'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
