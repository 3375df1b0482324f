"""The megatron exporter's ``--cpu-offloading-num-layers``: a plan offloading the first N layers whole, nothing
recomputed, on one pipeline stage is written as the flag the megatron importer reads back; every other offloading
plan is refused with the closest plan Megatron-Core runs; the trainer's candidates offer each N, so the planner picks
offloading where it is the fastest plan that fits (hp_plugins/exporters/megatron.py)."""

from __future__ import annotations

import shlex
from pathlib import Path

import attrs
import pytest

from hp_core import api
from hp_core.engine.recompute.trainer import plan_for_trainer
from hp_core.errors import PlanNotExecutable
from hp_core.io.convert import ConfigFile, structure
from hp_core.io.job import resolve_job
from hp_core.specs import ParallelSpec, RecomputeSpec, Setting
from hp_plugins.exporters.megatron import megatron_candidates
from hp_plugins.importers.megatron import import_megatron_args
from hp_plugins.models.hf import model_from_hf_config

from megatron_args import SMALL  # tests/plugins/megatron_args.py


def _toy(layers: int):
    return model_from_hf_config(
        {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": layers,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000},
        name=f"toy-{layers}", source="made up for tests",
    )


def _offload(*ranges: tuple[int, int, float], mode: str = "none") -> RecomputeSpec:
    return RecomputeSpec(layers=tuple((a, b, Setting.parse({"mode": mode, "offload": share})) for a, b, share in ranges))


def _export(registry, plan, layers: int = 8, parallel: ParallelSpec | None = None) -> str:
    return registry.exporter("megatron").export(plan, _toy(layers), parallel or ParallelSpec(seq_len=128), registry=registry)


def test_the_first_layers_offloaded_whole_are_the_flag(registry):
    assert _export(registry, _offload((0, 2, 1.0))) == "--cpu-offloading-num-layers 3"
    assert _export(registry, _offload((0, 6, 1.0))) == "--cpu-offloading-num-layers 7"


def test_the_importer_reads_back_what_the_exporter_writes(registry):
    imported = import_megatron_args(shlex.split(SMALL + " --cpu-offloading-num-layers 5"), registry, devices=8)
    job = resolve_job(structure(imported.document, ConfigFile, registry), registry)
    assert job.recompute == RecomputeSpec(layers=((0, 4, Setting(offload=1.0)),))
    written = registry.exporter("megatron").export(job.recompute, job.model, job.parallel, registry=registry)
    assert written == "--cpu-offloading-num-layers 5"


@pytest.mark.parametrize("plan, why, closest", [
    # Partly offloaded layers: Megatron-Core offloads a layer whole.
    (_offload((0, 2, 0.5)), "not the first N, each offloaded whole", _offload((0, 2, 1.0))),
    # Not the first layers: offloading up to the last one keeps no more than the plan.
    (_offload((2, 4, 1.0)), "not the first N", _offload((0, 4, 1.0))),
    # Every layer: Megatron-Core offloads fewer layers than the model has.
    (_offload((0, 7, 1.0)), "never offloads", _offload((0, 6, 1.0))),
])
def test_other_offloading_plans_are_refused_with_the_closest(registry, plan, why, closest):
    with pytest.raises(PlanNotExecutable, match=why) as refused:
        _export(registry, plan)
    assert refused.value.suggestion == closest
    assert "--cpu-offloading-num-layers" in str(refused.value)


def test_an_offloaded_range_beyond_the_model_is_a_config_error(registry):
    from hp_core.errors import ConfigError

    with pytest.raises(ConfigError, match="beyond the model's 8 layers"):
        _export(registry, _offload((9, 12, 1.0)))


def test_offloading_beside_recompute_or_under_pipeline_parallelism_is_refused_without_it(registry):
    with pytest.raises(PlanNotExecutable, match="writes no activation offload") as refused:
        _export(registry, _offload((0, 2, 1.0), mode="full"))
    assert "never beside activation recompute" in str(refused.value)
    assert refused.value.suggestion == RecomputeSpec(layers=((0, 2, Setting("full")),))
    with pytest.raises(PlanNotExecutable, match="under pipeline parallelism") as refused:
        _export(registry, _offload((0, 2, 1.0)), parallel=ParallelSpec(pp=2, seq_len=128))
    assert refused.value.suggestion == RecomputeSpec(layers=((0, 2, Setting()),))


def test_the_candidates_offer_each_count_on_one_stage(registry):
    offloading = [p for p in megatron_candidates(_toy(8), ParallelSpec(seq_len=128), registry=registry)
                  if any(s.offload for _, _, s in p.layers)]
    assert offloading == [_offload((0, n - 1, 1.0)) for n in range(1, 8)]
    assert not [p for p in megatron_candidates(_toy(8), ParallelSpec(pp=2, seq_len=128), registry=registry)
                if any(s.offload for _, _, s in p.layers)]


def test_the_planner_offloads_where_the_host_link_hides_it(registry):
    """Llama 3 70B, Megatron-FSDP over 64 GPUs at micro-batch 2 and 8,192 tokens, FP8-CS (Megatron-Bridge's GB200 and
    GB300 layout): it does not fit a GB200 as it is; the fastest plan Megatron runs that fits offloads the first layers
    over the GB200's 225 GB/s link (the run itself offloaded 40, docs/precision.md); on a B200, whose preset's host link is
    64 GB/s, the copies would not hide and it recomputes instead; a GB300 needs neither."""
    model = api.model_from_preset("llama3-70b", registry=registry)
    parallel = ParallelSpec(dp=64, micro_batch_size=2, seq_len=8192, global_batch_size=256, zero=3)
    precision = attrs.evolve(registry.runtime("megatron").precision, recipe="fp8-megatron-param-gather")

    def plan(hardware: str):
        spec = registry.hardware_preset(hardware).spec
        return plan_for_trainer(model, parallel, registry=registry, hardware=spec, trainer="megatron",
                                precision=precision, reserve_bytes=2**31), spec

    gb200, spec = plan("gb200")
    assert gb200.written.startswith("--cpu-offloading-num-layers ") and gb200.fits
    count = int(gb200.written.split()[-1])
    assert 0 < count < 40
    # One layer fewer would not fit: the planner took the least offloading that fits, the fastest.
    fewer = [p for p in megatron_candidates(model, parallel, registry=registry)
             if p == RecomputeSpec(layers=((0, count - 2, Setting(offload=1.0)),))]
    fewer_peak = api.estimate(model, parallel, registry=registry, runtime="megatron", precision=precision,
                              hardware=spec, recompute=fewer[0]).peak_bytes if count > 1 else spec.memory_bytes + 1
    assert fewer_peak > spec.memory_bytes - 2**31
    b200, _ = plan("b200")
    assert b200.written.startswith("--recompute-granularity full --recompute-method block") and b200.fits
    gb300, _ = plan("gb300")
    assert gb300.written == "" and gb300.fits
    # The per-layer optimum without offload is slower; with offload among its settings it reaches the same time.
    gb200_spec = registry.hardware_preset("gb200").spec
    eager = api.plan_recompute(model, parallel, registry=registry, hardware=gb200_spec, runtime="megatron",
                               precision=precision, reserve_bytes=2**31)
    offloading = api.plan_recompute(model, parallel, registry=registry, hardware=gb200_spec, runtime="megatron",
                                    precision=precision, reserve_bytes=2**31, offload=(1.0,))
    assert eager.plan.step_seconds > gb200.time.step_seconds
    assert offloading.plan.step_seconds == pytest.approx(gb200.time.step_seconds, rel=1e-9)
    # docs/recompute.md states the plans and their step times.
    page = " ".join((Path(__file__).resolve().parents[2] / "docs" / "recompute.md").read_text(encoding="utf-8").split())
    assert (f"the fastest Megatron plan that fits is `{gb200.written}`, {gb200.time.step_seconds:.3f} s a step, where the "
            f"per-layer optimum without offload takes {eager.plan.step_seconds:.3f} s" in page
            and f"`{b200.written}`, {b200.time.step_seconds:.3f} s; a GB300 needs neither" in page)


def test_a_hybrid_stack_offloads_nothing(registry):
    """Megatron-LM builds a Mamba hybrid as its HybridModel, whose stack no CPU offload context wraps: the exporter
    offers no offloading plan and refuses one without the offload; the importer warns that the flag does nothing."""
    model = api.model_from_preset("nemotron-3-nano-30b-a3b", registry=registry)
    parallel = ParallelSpec(seq_len=4096)
    assert not [p for p in megatron_candidates(model, parallel, registry=registry) if any(s.offload for _, _, s in p.layers)]
    with pytest.raises(PlanNotExecutable, match="never on a hybrid stack") as refused:
        registry.exporter("megatron").export(_offload((0, 2, 1.0)), model, parallel, registry=registry)
    assert refused.value.suggestion == RecomputeSpec(layers=((0, 2, Setting()),))
    hybrid = ("--num-layers 4 --hybrid-layer-pattern M*-E --hidden-size 1024 --num-attention-heads 8 "
              "--group-query-attention --num-query-groups 4 --ffn-hidden-size 2048 --num-experts 8 --moe-router-topk 2 "
              "--moe-ffn-hidden-size 512 --seq-length 512 --vocab-size 1000 --normalization RMSNorm "
              "--disable-bias-linear --untie-embeddings-and-output-weights --micro-batch-size 1 --global-batch-size 8 "
              "--bf16 --use-distributed-optimizer --position-embedding-type none --cpu-offloading-num-layers 2")
    job = import_megatron_args(shlex.split(hybrid), registry, devices=8)
    assert "recompute" not in job.document
    assert any(line.startswith("--cpu-offloading-num-layers: a hybrid model's layer stack offloads no layer")
               for line in job.unmapped)
