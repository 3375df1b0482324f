"""The second worked plugin (examples/hp-mlp-block) installs, and its step time at tp = 2 carries its collectives.

Installed as tests/test_example_plugin.py installs the first example (no
dependencies, no build isolation, into a target folder), so ``hp`` finds its
kind and its model format through the ``hp`` entry-point group; the example's
own tests check the collectives' price by hand.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "hp-mlp-block"
CONFIG = {"model_type": "mlp_stack", "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 4,
          "vocab_size": 32000}


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    if importlib.util.find_spec("setuptools") is None:
        pytest.fail("building the example without network needs setuptools: pip install -e '.[test]'")
    work = tmp_path_factory.mktemp("mlp-example")
    source = work / EXAMPLE.name
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", ".pytest_cache"))
    target = work / "site-packages"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
                          "--no-deps", "--no-build-isolation", "--target", str(target), str(source)],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, f"pip install of the example failed:\n{pip.stdout}\n{pip.stderr}"
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join([str(target), *filter(None, [environment.get("PYTHONPATH")])])
    environment.pop("HP_BLOCK_PLUGINS", None)
    return environment


def _hp(env: dict[str, str], *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hp_core.cli", *argv], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


def test_hp_estimate_prices_the_installed_kinds_traffic(env, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG), encoding="utf-8")
    common = ("estimate", "--model", str(config), "--dp", "1", "--seq-len", "2048", "--global-batch-size", "1",
              "--hardware", "h100-sxm", "--json")
    split = _hp(env, *common, "--tp", "2", "--sp")
    assert split.returncode == 0, split.stderr
    doc = json.loads(split.stdout)
    assert doc["parameters"]["total"] == 115_872_768
    assert doc["time"]["stages"][0]["communication_seconds"] > 0
    single = json.loads(_hp(env, *common, "--tp", "1", "--no-sp").stdout)
    assert single["time"]["stages"][0]["communication_seconds"] == 0.0


def test_the_examples_own_tests_pass(env):
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests")],
                         capture_output=True, text=True, env=env, cwd=EXAMPLE, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
