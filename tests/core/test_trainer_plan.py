"""Planning within what a trainer's configuration expresses (``hp recompute --export``)."""

from __future__ import annotations

import attrs

from hp_core.api import model_from_preset
from hp_core.engine.recompute.trainer import plan_for_trainer
from hp_core.specs import ParallelSpec, RecomputeSpec, Setting
from hp_core.api import step_time
from hp_plugins.exporters.megatron import megatron_candidates


def _job(registry):
    model = model_from_preset("llama3-70b", registry).with_body_layers(8, registry.kinds_placed("body"))
    parallel = ParallelSpec(dp=2, tp=4, pp=2, sp=True, seq_len=8192, global_batch_size=16)
    return model, parallel


def test_megatron_candidates_are_what_its_flags_express(registry):
    model, parallel = _job(registry)
    plans = megatron_candidates(model, parallel, registry=registry)
    # none; block 1..4 (4 layers per chunk); the distinct selective plans of the module unions on a
    # dense model: core_attn, layernorm, mlp (moe_act and mla_up_proj act on nothing here) -> 7 distinct.
    assert len(plans) == 1 + 4 + 7
    for plan in plans:
        registry.exporter("megatron").export(plan, model, parallel, registry=registry)  # never refused


def test_trainer_plan_fits_and_beats_full_recompute(registry):
    model, parallel = _job(registry)
    hardware = attrs.evolve(registry.hardware_preset("h100-sxm").spec, memory_bytes=40 * 2**30)
    plan = plan_for_trainer(model, parallel, registry=registry, hardware=hardware, trainer="megatron")
    assert plan.fits and plan.estimate.peak_bytes <= 40 * 2**30
    full = step_time(model, parallel, registry=registry, hardware=hardware, runtime="megatron",
                     recompute=RecomputeSpec(default=Setting("full")))
    assert plan.time.step_seconds <= full.step_seconds
    assert plan.written.startswith("--recompute-granularity") or plan.written == ""
    # Nothing fits in 10 GiB: the least-peak plan Megatron runs, with the shortfall.
    tiny = attrs.evolve(hardware, memory_bytes=10 * 2**30)
    none = plan_for_trainer(model, parallel, registry=registry, hardware=tiny, trainer="megatron")
    assert not none.fits and none.shortfall_bytes == none.estimate.peak_bytes - 10 * 2**30
    assert none.written == "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"


def test_torchtitan_and_hyperparallel_plans(registry):
    model, parallel = _job(registry)
    hardware = attrs.evolve(registry.hardware_preset("h100-sxm").spec, memory_bytes=40 * 2**30)
    titan = plan_for_trainer(model, parallel, registry=registry, hardware=hardware, trainer="torchtitan")
    # none, full, op SAC, every 2nd..4th block of each rank (4 blocks per rank): 6 plans.
    assert titan.candidates == 6
    assert titan.fits and titan.written.startswith("[activation_checkpoint]")
    hyper = plan_for_trainer(model, parallel, registry=registry, hardware=hardware, trainer="hyperparallel")
    assert hyper.candidates == 1 and hyper.fits
