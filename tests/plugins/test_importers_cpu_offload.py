"""The megatron importer's ``--cpu-offloading-num-layers``: Megatron-Core's activation CPU offloading as the first N
layers offloading every tensor they keep (hp_plugins/importers/megatron.py cpu_offloading_plan), refused where
Megatron-Core refuses it."""

from __future__ import annotations

import json
import shlex

import pytest

from hp_core.cli import main
from hp_core.errors import ConfigError
from hp_plugins.importers.megatron import cpu_offloading_plan, import_megatron_args

from megatron_args import SMALL  # tests/plugins/megatron_args.py


def _job(registry, extra: str = ""):
    return import_megatron_args(shlex.split(SMALL + " " + extra), registry, devices=8)


def test_the_first_layers_offload_everything_they_keep(registry):
    job = _job(registry, "--cpu-offloading-num-layers 3")
    assert job.document["recompute"] == {"default": "none", "layers": {"0-2": {"mode": "none", "offload": 1.0}}}
    assert not any("cpu-offloading" in line for line in job.unmapped)
    assert cpu_offloading_plan(40)["layers"] == {"0-39": {"mode": "none", "offload": 1.0}}
    assert "recompute" not in _job(registry).document  # no flag, no plan
    assert "recompute" not in _job(registry, "--cpu-offloading-num-layers 0").document
    # Graphing the whole iteration is allowed beside it (transformer_config.py at d98e8a6).
    graphed = _job(registry, "--cpu-offloading-num-layers 3 --cuda-graph-impl full_iteration")
    assert graphed.document["recompute"]["layers"] == {"0-2": {"mode": "none", "offload": 1.0}}


@pytest.mark.parametrize("extra, message", [
    ("--cpu-offloading-num-layers 8", "must lie between 1 and 7"),
    ("--cpu-offloading-num-layers 2 --pipeline-model-parallel-size 2", "pipeline parallelism"),
    ("--cpu-offloading-num-layers 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
     "activation recompute"),
    ("--cpu-offloading-num-layers 2 --cuda-graph-impl transformer_engine", "per-layer CUDA graphs"),
    ("--cpu-offloading-num-layers 2 --enable-cuda-graph", "per-layer CUDA graphs"),
    ("--cpu-offloading-num-layers 2 --cuda-graph-impl transformer_engine --cuda-graph-modules attn", "per-layer CUDA graphs"),
])
def test_refused_where_megatron_core_refuses_it(registry, extra, message):
    with pytest.raises(ConfigError, match=message) as refused:
        _job(registry, extra)
    assert refused.value.path == "--cpu-offloading-num-layers"


def _estimate(capsys, extra: str) -> dict:
    status = main(["estimate", "--from", "megatron-args", SMALL + " " + extra, "--devices", "8", "--hardware", "gb200",
                   "--json"])
    assert status == 0
    return json.loads(capsys.readouterr().out)


def test_offloading_lowers_the_peak_and_never_speeds_the_step(capsys):
    """Three of eight layers offloaded: the stage keeps less (their kept activations live on the host), and the step
    is no faster (the copies hide behind compute at best)."""
    eager, offloaded = _estimate(capsys, ""), _estimate(capsys, "--cpu-offloading-num-layers 3")
    assert offloaded["peak_bytes"] < eager["peak_bytes"]
    assert offloaded["stages"][0]["recompute"] != eager["stages"][0]["recompute"]
    assert offloaded["time"]["step_seconds"] >= eager["time"]["step_seconds"] * (1 - 1e-12)
