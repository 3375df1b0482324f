"""The installed package: its ``hp`` entry point, ``hp plugins`` and ``hp estimate`` on the shipped job file.

These need the distribution installed (``pip install -e .``), as a user's would be.
"""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from hp_core.cli import main
from hp_core.io.convert import load_config
from hp_gated_deltanet.qwen3_next import QWEN3_NEXT_80B_A3B, model_from_qwen3_next_config

JOB = Path(__file__).resolve().parents[1] / "qwen3-next-80b-a3b.yaml"
KINDS = ("gated_deltanet", "gated_deltanet_moe")


@pytest.fixture
def installed_version() -> str:
    try:
        return version("hp-gated-deltanet")
    except PackageNotFoundError:
        pytest.fail("hp-gated-deltanet is not installed: run 'pip install -e .' in examples/hp-gated-deltanet first")


def test_entry_point_registers_both_kinds_with_the_distribution(hp_installed_registry, installed_version):
    for name in KINDS:
        who = hp_installed_registry.provider("hp_layer_kinds", name)
        assert (who.plugin, who.distribution, who.version) == ("gated_deltanet", "hp-gated-deltanet", installed_version)


def test_hp_plugins_lists_the_kinds(capsys, installed_version):
    assert main(["plugins", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    listed = {k["name"]: k for k in doc["layer_kinds"]}
    for name in KINDS:
        assert (listed[name]["distribution"], listed[name]["version"]) == ("hp-gated-deltanet", installed_version)
    assert {"name": "gated_deltanet", "distribution": "hp-gated-deltanet", "version": installed_version} in doc["plugins"]


def test_blocking_the_entry_point_removes_the_kinds(capsys, installed_version):
    assert main(["--block-plugin", "gated_deltanet", "plugins", "--json"]) == 0
    names = {k["name"] for k in json.loads(capsys.readouterr().out)["layer_kinds"]}
    assert not names & set(KINDS) and "dense" in names


def test_job_file_is_the_qwen3_next_80b_stack(hp_registry):
    config = load_config(JOB, hp_registry)
    reference = model_from_qwen3_next_config(QWEN3_NEXT_80B_A3B, name="qwen3-next-80b-a3b")
    assert config.model.name == reference.name
    assert tuple(config.model.layers) == reference.layers
    assert (config.parallel.pp, config.runtime, config.hardware) == (4, "megatron", "h100-sxm")


def test_hp_estimate_prices_the_job_file(capsys, installed_version):
    assert main(["estimate", str(JOB), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["world_size"] == 8 * 2 * 4
    assert doc["parameters"]["total"] == 79_674_391_296 - 12 * 2048 * 16 * 256
    assert [s["micro_batches_in_flight"] for s in doc["stages"]] == [4, 3, 2, 1]
    assert doc["provenance"]["kinds"]["gated_deltanet_moe"] == "formulas"
    assert doc["fits"] is True
    assert doc["time"]["step_seconds"] > 0
