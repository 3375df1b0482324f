"""With a census, the step time and the recompute planner price every switch alike.

A census file states what a layer keeps per op; recomputing a switch rewrites
what it drops, so its price depends on the census's bytes. The step time, the
planner's switch profiles and the plan it reports all read the prepared run's
layers (``hp_core.engine.prepare``), census applied once.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import yaml

from hp_core.api import build_registry, model_from_preset, plan_recompute, prepare, step_time
from hp_core.engine.estimate import estimate_run
from hp_core.engine.recompute.profile import switch_profile
from hp_core.engine.timing import layer_pricer, time_run
from hp_core.specs import ParallelSpec, RecomputeSpec, Setting

LAYERS = 4
PARALLEL = ParallelSpec(dp=1, tp=2, sp=True, seq_len=1024, global_batch_size=4)
# Per token at micro-batch 1: far more than the formulas state (a layer keeps about 0.5 GB of a
# 1k-token micro-batch), so the census's price of the softmax and ffAct switches cannot be the
# formulas', and the layers' activations, not the output head, bind the stage's peak.
RECORD = {
    "saved": 20000, "saved_tp": 900000, "working": 500, "working_tp": 2000,
    "per_op": {"softmax": {"saved": 0, "saved_tp": 400000}, "ffAct": {"saved": 0, "saved_tp": 300000}},
    "provenance": {"source": "hand-written for a test", "seq_len": 1024},
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    registry = build_registry(use_env=False)
    model = model_from_preset("llama3-8b", registry).with_body_layers(LAYERS, registry.kinds_placed("body"))
    path = Path(tmp_path_factory.mktemp("census")) / "census.yaml"
    path.write_text(yaml.safe_dump({"model": "llama3-8b", "kinds": {"dense": RECORD}}), encoding="utf-8")
    hardware = registry.hardware_preset("h100-sxm").spec
    return registry, model, str(path), hardware


def test_step_time_prices_recompute_from_the_census(setup):
    registry, model, census, hardware = setup
    softmax = RecomputeSpec(default=Setting.parse(["softmax"]))
    formulas = step_time(model, PARALLEL, registry=registry, hardware=hardware, runtime="megatron", recompute=softmax)
    measured = step_time(model, PARALLEL, registry=registry, hardware=hardware, runtime="megatron", recompute=softmax,
                         census=census)
    # The census keeps more softmax bytes than the formulas: rewriting them costs more.
    assert measured.recompute_seconds > formulas.recompute_seconds
    # Nothing recomputed, nothing to rewrite: the census does not move the time.
    plain = step_time(model, PARALLEL, registry=registry, hardware=hardware, runtime="megatron", census=census)
    base = step_time(model, PARALLEL, registry=registry, hardware=hardware, runtime="megatron")
    assert plain.step_seconds == base.step_seconds


@pytest.mark.parametrize("switch", ["attBMM", "headCast", "dropout", "softmax", "normOp", "gather", "ffAct"])
def test_the_planner_and_the_step_time_agree_on_every_switch(setup, switch):
    registry, model, census, hardware = setup
    run = prepare(model, PARALLEL, registry=registry, runtime="megatron", census=census)
    (dense,) = [i for i, kind in enumerate(run.kinds) if kind.name == "dense"]
    pricer = layer_pricer(PARALLEL, hardware=hardware, timing=run.runtime.timing, precision=run.precision,
                          attention=run.attention)
    profile = switch_profile(run.kinds[dense], run.costs[dense], model.layers[dense].config, run.context, pricer,
                             implicit=run.runtime.implicit_recompute)
    setting = Setting.parse([switch])
    layer = profile.price(setting).seconds
    stage = time_run(run, hardware, RecomputeSpec(default=setting)).stages[0]
    # Every body layer of the one stage runs the setting; the planner's price of one, LAYERS times.
    assert stage.recompute_seconds == pytest.approx(LAYERS * layer.recompute_seconds, rel=1e-12)
    assert profile.price(setting).kept_bytes == run.costs[dense].kept_under(
        run.resolve(dense, setting)[1])


def test_a_plan_with_a_census_reports_the_step_time_of_its_plan(setup):
    registry, model, census, hardware = setup
    run = prepare(model, PARALLEL, registry=registry, runtime="megatron", census=census)
    none = estimate_run(run).peak_bytes
    full = estimate_run(run, RecomputeSpec(default=Setting.parse("full"))).peak_bytes
    assert full < none
    # A device between the two: the planner must recompute, and can.
    device = attrs.evolve(hardware, memory_bytes=(full + none) // 2)
    plan = plan_recompute(model, PARALLEL, registry=registry, hardware=device, runtime="megatron", census=census)
    assert plan.fits and plan.plan.recompute != RecomputeSpec()
    again = step_time(model, PARALLEL, registry=registry, hardware=device, runtime="megatron", census=census,
                      recompute=plan.plan.recompute)
    assert plan.plan.step_seconds == again.step_seconds
    assert [s.micro_batch_seconds for s in plan.plan.stages] == [s.micro_batch_seconds for s in again.stages]
