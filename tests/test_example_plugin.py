"""The worked external plugin (examples/hp-gated-deltanet) installs, registers and passes its own tests.

A copy of the example is pip-installed into a target folder with no dependencies
and no build isolation (the running environment provides hp-planner and
setuptools, so nothing is downloaded). Subprocesses of this interpreter with
that folder on ``PYTHONPATH`` then see the example as an installed
distribution, exactly as a user's environment would: ``hp plugins --json`` must
list its kinds with the distribution's name and version, and the example's own
test suite (which uses ``hp_core.testing``'s fixtures through hp-planner's
``pytest11`` entry point) must pass.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "hp-gated-deltanet"
TIMEOUT_SECONDS = 300


@pytest.fixture(scope="module")
def project() -> dict:
    return tomllib.loads((EXAMPLE / "pyproject.toml").read_text(encoding="utf-8"))["project"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The example's copy and the environment of a process that has it installed."""
    if importlib.util.find_spec("setuptools") is None:  # pip builds with the running environment's setuptools
        pytest.fail("building the example without network needs setuptools: pip install -e '.[test]'")
    work = tmp_path_factory.mktemp("example")
    source = work / EXAMPLE.name
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", ".pytest_cache"))
    target = work / "site-packages"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index", "--no-deps",
         "--no-build-isolation", "--target", str(target), str(source)],
        capture_output=True, text=True, timeout=TIMEOUT_SECONDS,
    )
    assert pip.returncode == 0, f"pip install of the example failed:\n{pip.stdout}\n{pip.stderr}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(target), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("HP_BLOCK_PLUGINS", None)
    return source, env


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_SECONDS)


def test_hp_plugins_lists_the_kinds_with_their_distribution(installed, project, tmp_path):
    _, env = installed
    done = _run(["-m", "hp_core.cli", "plugins", "--json"], tmp_path, env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    kinds = {k["name"]: k for k in doc["layer_kinds"]}
    for name in ("gated_deltanet", "gated_deltanet_moe"):
        assert (kinds[name]["plugin"], kinds[name]["distribution"], kinds[name]["version"]) == (
            "gated_deltanet", project["name"], project["version"]
        )
    assert {"name": "gated_deltanet", "distribution": "hp-gated-deltanet", "version": "0.1.0"} in doc["plugins"]
    # The built-ins are still there, from hp-planner.
    assert kinds["dense"]["distribution"] == "hp-planner"


def test_the_example_passes_its_own_tests(installed):
    source, env = installed
    done = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], source, env)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, f"the example's tests failed:\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 25, summary
    assert "failed" not in summary and "error" not in summary, summary
    if all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers")):
        # With the census extra, the check against transformers' own modules runs too (.ci/run).
        assert "skipped" not in summary, summary
