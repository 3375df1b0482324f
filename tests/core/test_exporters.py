"""Trainer plans: a recompute plan written as Megatron-LM, torchtitan and HyperParallel run it.

Expectations are derived by hand from what each trainer runs (docs/trainer_plans.md):
Megatron-LM's ``block`` method fully recomputes the first N layers of every pipeline chunk
(``transformer_block.py`` ``_checkpointed_forward``); torchtitan's ``selective_ac_option = "N"``
the rank's N-th, 2N-th, ... block; HyperParallel takes a mode with per-layer exceptions.
"""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import build_registry
from hp_core.errors import ConfigError, PlanNotExecutable
from hp_core.markers import hookimpl
from hp_core.engine.recompute.layout import describe_plan, plan_layout, settings_of
from hp_core.registry import Registry
from hp_core.specs import ModelSpec, ParallelSpec, RecomputeSpec, Setting
from hp_core.types import Exporter
from hp_plugins.models.hf import model_from_hf_config

FULL = Setting("full")
NONE = Setting()
HAS_OFFLOAD = "offload" in attrs.fields_dict(Setting)


def _toy(layers: int) -> ModelSpec:
    return model_from_hf_config(
        {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": layers,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000},
        name=f"toy-{layers}", source="made up for tests",
    )


def _full_on(*layers: int) -> RecomputeSpec:
    return RecomputeSpec(layers=tuple((i, i, FULL) for i in layers))


def _export(registry: Registry, trainer: str, plan: RecomputeSpec, model: ModelSpec, parallel: ParallelSpec):
    return registry.exporter(trainer).export(plan, model, parallel, registry=registry)


# ----------------------------------------------------------------------------- registration


def test_builtin_exporters_name_their_runtimes(registry: Registry):
    assert {e.name: e.runtime for e in registry.exporters} == {
        "hyperparallel": "hyperparallel", "megatron": "megatron", "torchtitan": "fsdp2",
    }
    for exporter in registry.exporters:
        registry.runtime(exporter.runtime)  # every exporter's runtime is registered
        assert registry.provider("hp_exporters", exporter.name).distribution == "hp-planner"


def test_a_one_off_plugin_adds_an_exporter():
    def write(plan, model, parallel, *, registry):
        settings = settings_of(plan, plan_layout(model, parallel, registry).count)
        return ",".join(str(i) for i, s in enumerate(settings) if s.mode == "full")

    class MyTrainer:
        @hookimpl
        def hp_exporters(self):
            yield Exporter(name="mytrainer", runtime="generic", export=write, description="full layers, comma-joined")

    registry = build_registry([MyTrainer()], use_env=False)
    assert registry.provider("hp_exporters", "mytrainer").plugin == "MyTrainer"
    assert _export(registry, "mytrainer", _full_on(1, 3), _toy(4), ParallelSpec(seq_len=128)) == "1,3"
    with pytest.raises(ConfigError, match="unknown trainer plan exporter 'nope'; known: .*mytrainer"):
        registry.exporter("nope")


# ----------------------------------------------------------------------------- Megatron-LM


def test_megatron_block_recompute_of_the_first_two_layers_per_stage(registry: Registry, llama8b: ModelSpec):
    # 32 layers over pp=4: stages run 0-7, 8-15, 16-23, 24-31; the first 2 of each are full.
    parallel = ParallelSpec(tp=2, pp=4, sp=True, seq_len=4096)
    plan = _full_on(0, 1, 8, 9, 16, 17, 24, 25)
    assert _export(registry, "megatron", plan, llama8b, parallel) == (
        "--recompute-granularity full --recompute-method block --recompute-num-layers 2"
    )


def test_megatron_block_counts_per_virtual_chunk(registry: Registry, llama8b: ModelSpec):
    # pp=2, vpp=2: four chunks of 8 layers (0-7, 8-15, 16-23, 24-31); block N acts on each chunk.
    parallel = ParallelSpec(pp=2, vpp=2, seq_len=4096, global_batch_size=4)
    # The interleaved schedule's virtual pipeline flag follows the recompute flags.
    assert _export(registry, "megatron", _full_on(0, 8, 16, 24), llama8b, parallel) == (
        "--recompute-granularity full --recompute-method block --recompute-num-layers 1 "
        "--num-layers-per-virtual-pipeline-stage 8"
    )
    # Full on the first layer of chunks 0 and 1 only leaves chunks 2 and 3 (16-23, 24-31) without: refused.
    with pytest.raises(PlanNotExecutable, match="pipeline chunk 16-23"):
        _export(registry, "megatron", _full_on(0, 8), llama8b, parallel)


def test_megatron_block_with_uneven_chunks(registry: Registry):
    # Chunks of 3 and 5 layers; block 4 recomputes all 3 of the first and the first 4 of the second.
    model, parallel = _toy(8), ParallelSpec(pp=2, seq_len=128, layers_per_stage=(3, 5))
    assert _export(registry, "megatron", _full_on(0, 1, 2, 3, 4, 5, 6), model, parallel) == (
        "--recompute-granularity full --recompute-method block --recompute-num-layers 4"
        " --decoder-first-pipeline-num-layers 3 --decoder-last-pipeline-num-layers 5"
    )


@pytest.mark.parametrize(
    ("plan", "flags"),
    [
        (RecomputeSpec(), ""),
        (RecomputeSpec.uniform("full"), "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"),
        (RecomputeSpec.uniform("selective"), "--recompute-granularity selective --recompute-modules core_attn"),
        (RecomputeSpec.uniform(["normOp"]), "--recompute-granularity selective --recompute-modules layernorm"),
        (RecomputeSpec.uniform(["attBMM", "headCast", "dropout", "softmax", "normOp"]),
         "--recompute-granularity selective --recompute-modules core_attn layernorm"),
        # gather is what Megatron always recomputes under SP: asking for it adds no flag.
        (RecomputeSpec.uniform(["gather"]), ""),
    ],
)
def test_megatron_flags(registry: Registry, llama8b: ModelSpec, plan: RecomputeSpec, flags: str):
    assert _export(registry, "megatron", plan, llama8b, ParallelSpec(tp=2, pp=4, sp=True, seq_len=4096)) == flags


def test_megatron_mla_up_projection(registry: Registry):
    from hp_core.api import model_from_preset

    model = model_from_preset("deepseek-v3", registry).with_body_layers(4, registry.kinds_placed("body"))
    plan = RecomputeSpec.uniform(["attUp"])
    assert _export(registry, "megatron", plan, model, ParallelSpec(seq_len=4096)) == (
        "--recompute-granularity selective --recompute-modules mla_up_proj"
    )


def test_megatron_moe_act_acts_only_on_routed_experts(registry: Registry):
    from hp_core.api import model_from_preset

    body = registry.kinds_placed("body")
    moe = model_from_preset("qwen3-30b-a3b", registry).with_body_layers(2, body)
    assert _export(registry, "megatron", RecomputeSpec.uniform(["ffAct"]), moe, ParallelSpec(seq_len=4096)) == (
        "--recompute-granularity selective --recompute-modules moe_act"
    )
    # DeepSeek-V3's first three layers are dense: moe_act does not recompute their MLP activation, and mlp
    # recomputes it only with the FC1 outputs (ffFc1).
    deepseek = model_from_preset("deepseek-v3", registry).with_body_layers(4, body)
    with pytest.raises(PlanNotExecutable, match="layer 0 recomputes ffAct, which no union of --recompute-modules"):
        _export(registry, "megatron", RecomputeSpec.uniform(["ffAct"]), deepseek, ParallelSpec(seq_len=4096))
    with pytest.raises(PlanNotExecutable, match="layer 0 recomputes ffAct"):
        _export(registry, "megatron", RecomputeSpec.uniform(["ffAct"]), _toy(2), ParallelSpec(seq_len=128))


def test_megatron_mlp_acts_only_on_dense_mlp_layers(registry: Registry):
    from hp_core.api import model_from_preset

    body = registry.kinds_placed("body")
    deepseek = model_from_preset("deepseek-v3", registry).with_body_layers(4, body)  # 3 dense (mla) + 1 mla_moe
    dense_mlp = RecomputeSpec(layers=((0, 2, Setting.parse(["ffAct", "ffFc1"])),))
    assert _export(registry, "megatron", dense_mlp, deepseek, ParallelSpec(seq_len=4096)) == (
        "--recompute-granularity selective --recompute-modules mlp"
    )
    # With moe_act beside it the MoE layer recomputes its experts' activation; mlp leaves that layer alone.
    both = RecomputeSpec(layers=((0, 2, Setting.parse(["ffAct", "ffFc1"])), (3, 3, Setting.parse(["ffAct"]))))
    assert _export(registry, "megatron", both, deepseek, ParallelSpec(seq_len=4096)) == (
        "--recompute-granularity selective --recompute-modules moe_act mlp"
    )
    # An MoE layer has no ffFc1 (its experts keep their FC1 outputs under no switch).
    with pytest.raises(ConfigError, match=r"layer kind mla_moe has no recompute switch \['ffFc1'\]"):
        _export(registry, "megatron", RecomputeSpec.uniform(["ffAct", "ffFc1"]), deepseek, ParallelSpec(seq_len=4096))


def test_megatron_refuses_full_layers_not_at_the_start_of_each_stage(registry: Registry, llama8b: ModelSpec):
    parallel = ParallelSpec(tp=2, pp=4, sp=True, seq_len=4096)
    with pytest.raises(PlanNotExecutable) as info:
        _export(registry, "megatron", _full_on(0, 1, 9, 10), llama8b, parallel)
    message = str(info.value)
    assert "\n" not in message
    assert "pipeline chunk 8-15 (9, 10) are not its first 2" in message
    assert "--recompute-method block --recompute-num-layers N (the first N layers of every pipeline chunk)" in message
    # The closest plan: block 2 (two layers per chunk, as many as the plan's largest chunk count).
    assert "Closest plan it runs: --recompute-granularity full --recompute-method block --recompute-num-layers 2" in message
    assert settings_of(info.value.suggestion, 32) == settings_of(_full_on(0, 1, 8, 9, 16, 17, 24, 25), 32)
    assert _export(registry, "megatron", info.value.suggestion, llama8b, parallel).endswith("--recompute-num-layers 2")


def test_megatron_refuses_different_selective_sets(registry: Registry, llama8b: ModelSpec):
    plan = RecomputeSpec(default=Setting.parse("selective"), layers=((4, 7, Setting.parse(["normOp"])),))
    with pytest.raises(PlanNotExecutable, match="different selective sets") as info:
        _export(registry, "megatron", plan, llama8b, ParallelSpec(seq_len=4096))
    # Closest: the modules covering every switch any layer recomputes, on every layer.
    assert "--recompute-modules core_attn layernorm" in str(info.value)


def test_megatron_refuses_mixed_full_and_selective(registry: Registry, llama8b: ModelSpec):
    plan = RecomputeSpec(default=Setting.parse("selective"), layers=((0, 1, FULL),))
    with pytest.raises(PlanNotExecutable, match="mixes full and selective") as info:
        _export(registry, "megatron", plan, llama8b, ParallelSpec(seq_len=4096))
    # Every layer recomputes something: the closest plan recomputes every layer fully.
    assert "--recompute-method uniform --recompute-num-layers 1" in str(info.value)
    assert describe_plan(info.value.suggestion) == "full on every layer"


def test_megatron_refuses_a_switch_no_module_gives_exactly(registry: Registry, llama8b: ModelSpec):
    with pytest.raises(PlanNotExecutable, match="layer 0 recomputes softmax, which no union of --recompute-modules"):
        _export(registry, "megatron", RecomputeSpec.uniform(["softmax"]), llama8b, ParallelSpec(seq_len=4096))


# ----------------------------------------------------------------------------- torchtitan


def test_torchtitan_modes(registry: Registry):
    model, parallel = _toy(8), ParallelSpec(pp=2, seq_len=128)
    assert _export(registry, "torchtitan", RecomputeSpec(), model, parallel) == '[activation_checkpoint]\nmode = "none"\n'
    assert _export(registry, "torchtitan", RecomputeSpec.uniform("full"), model, parallel) == (
        '[activation_checkpoint]\nmode = "full"\n'
    )
    assert _export(registry, "torchtitan", RecomputeSpec.uniform(["normOp", "ffAct"]), model, parallel) == (
        '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "op"\n'
    )


def test_torchtitan_every_second_layer_counts_per_rank(registry: Registry):
    # pp=2 over 8 layers: rank 0 runs 0-3, rank 1 runs 4-7; each counts its blocks from 1.
    model, parallel = _toy(8), ParallelSpec(pp=2, seq_len=128)
    assert _export(registry, "torchtitan", _full_on(1, 3, 5, 7), model, parallel) == (
        '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "2"\n'
    )
    # Uneven stages of 3 and 5: rank 0's second block is layer 1, rank 1's second and fourth are 4 and 6.
    uneven = ParallelSpec(pp=2, seq_len=128, layers_per_stage=(3, 5))
    assert _export(registry, "torchtitan", _full_on(1, 4, 6), model, uneven) == (
        '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "2"\n'
        # The uneven chunks as torchtitan's module_fqns_per_model_part (its own split's module names).
        '\n[parallelism]\nmodule_fqns_per_model_part = [["tok_embeddings", "layers.0", "layers.1", "layers.2"], '
        '["layers.3", "layers.4", "layers.5", "layers.6", "layers.7", "norm", "lm_head"]]\n')
    with pytest.raises(PlanNotExecutable, match="not every N-th layer"):
        _export(registry, "torchtitan", _full_on(1, 3, 5, 7), model, uneven)


def test_torchtitan_refuses_with_the_closest_stride(registry: Registry):
    model, parallel = _toy(8), ParallelSpec(pp=2, seq_len=128)
    with pytest.raises(PlanNotExecutable) as info:
        _export(registry, "torchtitan", _full_on(0, 1), model, parallel)
    # Rank 0 recomputes 2 of its 4 layers: every 2nd layer recomputes as many.
    assert 'Closest plan it runs: [activation_checkpoint] mode = "selective" selective_ac_option = "2"' in str(info.value)
    assert describe_plan(info.value.suggestion) == "full on 1, 3, 5, 7; none elsewhere"
    with pytest.raises(PlanNotExecutable, match="op-level selective checkpointing recomputes ffAct\\+normOp"):
        _export(registry, "torchtitan", RecomputeSpec.uniform("selective"), model, parallel)


# ----------------------------------------------------------------------------- HyperParallel


def test_hyperparallel_mode_with_exceptions(registry: Registry):
    model, parallel = _toy(10), ParallelSpec(seq_len=128)
    plan = RecomputeSpec(default=FULL, layers=((3, 7, NONE), (9, 9, Setting.parse(["softmax", "attBMM"]))))
    assert _export(registry, "hyperparallel", plan, model, parallel) == {
        "activation_checkpoint": {"mode": "full", "layers": {"3-7": "off", "9": ["attBMM", "softmax"]}}
    }
    # The mode is the setting leaving the fewest exceptions, whatever the plan's default.
    flipped = RecomputeSpec(default=NONE, layers=((0, 2, FULL), (8, 8, FULL)))
    assert _export(registry, "hyperparallel", flipped, model, parallel) == {
        "activation_checkpoint": {"mode": "off", "layers": {"0-2": "full", "8": "full"}}
    }
    assert _export(registry, "hyperparallel", RecomputeSpec.uniform("selective"), model, parallel) == {
        "activation_checkpoint": {"mode": "selective"}
    }


def test_hyperparallel_refuses_an_unknown_switch(registry: Registry):
    with pytest.raises(ConfigError, match="has no recompute switch"):
        _export(registry, "hyperparallel", RecomputeSpec.uniform(["attUp"]), _toy(2), ParallelSpec(seq_len=128))


def test_a_range_beyond_the_model_is_a_config_error(registry: Registry):
    for trainer in ("megatron", "torchtitan", "hyperparallel"):
        with pytest.raises(ConfigError, match="beyond the model's 4 layers"):
            _export(registry, trainer, _full_on(4), _toy(4), ParallelSpec(seq_len=128))


@pytest.mark.skipif(not HAS_OFFLOAD, reason="Setting has no offload share")
@pytest.mark.parametrize("trainer", ["megatron", "torchtitan", "hyperparallel"])
def test_offload_is_refused_with_the_plan_without_it(registry: Registry, trainer: str):
    plan = RecomputeSpec.uniform({"mode": "full", "offload": 0.5})
    with pytest.raises(PlanNotExecutable, match="writes no activation offload") as info:
        _export(registry, trainer, plan, _toy(4), ParallelSpec(seq_len=128))
    assert info.value.suggestion == RecomputeSpec.uniform("full")


# ----------------------------------------------------------------------------- pipeline schedules


def test_megatron_writes_the_virtual_pipeline_and_refuses_schedules_it_lacks(registry: Registry, llama8b: ModelSpec):
    interleaved = ParallelSpec(pp=2, vpp=2, seq_len=4096, global_batch_size=4)
    assert _export(registry, "megatron", RecomputeSpec(), llama8b, interleaved) == "--num-layers-per-virtual-pipeline-stage 8"
    # Uneven chunks (7, 9, 7, 9): rank 0 runs chunks 0 and 2 (14 layers), rank 1 chunks 1 and 3 (18): the virtual
    # stages per rank, and the first and last ranks' counts (Megatron-LM get_num_layers_to_build splits each evenly).
    uneven = ParallelSpec(pp=2, vpp=2, seq_len=4096, global_batch_size=4, layers_per_stage=(7, 9, 7, 9))
    assert _export(registry, "megatron", RecomputeSpec(), llama8b, uneven) == (
        "--num-virtual-stages-per-pipeline-rank 2 --decoder-first-pipeline-num-layers 14 --decoder-last-pipeline-num-layers 18")
    # pp=4, (7, 9, 9, 7): the middle ranks even at 9, so only the first and last counts.
    four = ParallelSpec(pp=4, seq_len=4096, layers_per_stage=(7, 9, 9, 7))
    assert _export(registry, "megatron", RecomputeSpec(), llama8b, four) == (
        "--decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 7")
    only_first = ParallelSpec(pp=4, seq_len=4096, layers_per_stage=(5, 9, 9, 9))
    assert _export(registry, "megatron", RecomputeSpec(), llama8b, only_first) == "--decoder-first-pipeline-num-layers 5"
    # What those flags cannot state: a rank whose virtual stages differ (7 and 8 on rank 0), uneven middle ranks.
    for layers, why in (((7, 9, 8, 8), r"rank 0's chunks hold \[7, 8\] layers"),
                        ((8, 7, 9, 8), r"the middle ranks hold \[7, 9\] layers")):
        vpp = 2 if layers == (7, 9, 8, 8) else 1
        bad = ParallelSpec(pp=4 // vpp, vpp=vpp, seq_len=4096, global_batch_size=4, layers_per_stage=layers)
        with pytest.raises(ConfigError, match=r"^\$\.parallel\.layers_per_stage: megatron states uneven pipeline stages "
                                              rf"only as first and last rank counts .*, but {why}; change layers_per_stage$"):
            _export(registry, "megatron", RecomputeSpec(), llama8b, bad)
    assert _export(registry, "megatron", RecomputeSpec(), llama8b, ParallelSpec(pp=2, seq_len=4096)) == ""
    for name in ("gpipe", "zb_h1", "dualpipe"):
        with pytest.raises(ConfigError, match=rf"^\$\.parallel\.schedule: megatron cannot run the {name} pipeline "
                                              "schedule; it runs 1f1b, interleaved_1f1b"):
            _export(registry, "megatron", RecomputeSpec(), llama8b, ParallelSpec(pp=2, seq_len=4096, schedule=name))


def test_torchtitan_writes_its_schedule_name_and_refuses_schedules_it_lacks(registry: Registry):
    model = _toy(8)
    plain = _export(registry, "torchtitan", RecomputeSpec(), model, ParallelSpec(pp=2, seq_len=128))
    assert plain == '[activation_checkpoint]\nmode = "none"\n'
    # Four chunks of 2 layers: torchtitan's own split of 8 layers over 4 stages, the embedding and the output
    # counted as a layer each, would give 2, 3, 2, 1, so the chunks are written out.
    four = ('module_fqns_per_model_part = [["tok_embeddings", "layers.0", "layers.1"], ["layers.2", "layers.3"], '
            '["layers.4", "layers.5"], ["layers.6", "layers.7", "norm", "lm_head"]]\n')
    for name, vpp, written in (("gpipe", 1, "GPipe"), ("interleaved_1f1b", 2, "Interleaved1F1B"), ("dualpipev", 2, "DualPipeV"),
                               ("zb_v", 2, "ZBVZeroBubble")):
        parallel = ParallelSpec(pp=2, vpp=vpp, seq_len=128, schedule=name)
        assert _export(registry, "torchtitan", RecomputeSpec(), model, parallel) == (
            plain + f'\n[parallelism]\npipeline_parallel_schedule = "{written}"\n' + (four if vpp == 2 else "")
        )
    for name in ("dualpipe", "zb_h1", "zb_h2"):
        with pytest.raises(ConfigError, match=f"torchtitan cannot run the {name} pipeline schedule"):
            _export(registry, "torchtitan", RecomputeSpec(), model, ParallelSpec(pp=2, seq_len=128, schedule=name))


def test_torchtitan_writes_the_chunks_only_where_its_own_split_differs(registry: Registry, llama8b: ModelSpec):
    # torchtitan splits 32 layers over 4 stages as 34 "layers" (the embedding and the output one each): 9, 9, 8, 8,
    # less one on the first and the last: 8, 9, 8, 7 (torchtitan/distributed/pipeline_parallel.py).
    own = ParallelSpec(pp=4, seq_len=4096, layers_per_stage=(8, 9, 8, 7))
    assert _export(registry, "torchtitan", RecomputeSpec(), llama8b, own) == '[activation_checkpoint]\nmode = "none"\n'
    even = _export(registry, "torchtitan", RecomputeSpec(), llama8b, ParallelSpec(pp=4, seq_len=4096))
    parts = even.split("module_fqns_per_model_part = ", 1)[1]
    assert [chunk.count('"layers.') for chunk in parts.split("], [")] == [8, 8, 8, 8]
    assert parts.startswith('[["tok_embeddings", "layers.0", ') and parts.endswith('"layers.31", "norm", "lm_head"]]\n')
