"""Rotary position embedding in the step time, by hand (docs/time.md, "Rotary position embedding").

RoPE is elementwise work of the attention block: 4 ops per rotated element of q and k (two multiplies, the add,
rotate_half's sign flip), which a fused kernel moves as a read and a write (4 bytes at bf16) and eager kernels as
hp_plugins/kit/eager.py counts (torchtitan's complex multiply 20 bytes each way; transformers' rotate_half 20
forward, 30 backward); its backward is the inverse rotation. Layers with learned positions, ALiBi or NoPE rotate
nothing.
"""

from __future__ import annotations

import shlex

import attrs
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hp_core.api import layer_context, model_from_preset, step_time
from hp_core.errors import ConfigError
from hp_core.runtime_options import apply_options
from hp_core.specs import LayerGroup, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_plugins.kinds.dense import DenseConfig
from hp_plugins.kit.eager import EAGER_ROPE_BYTES
from hp_plugins.models.hf import model_from_hf_config
from hp_plugins.models.mpt import model_from_mpt_config

HBM = 3.35e12 * 0.85  # H100 SXM's HBM at the fsdp2 profile's memory efficiency


def _without_rope(model: ModelSpec) -> ModelSpec:
    layers = tuple(attrs.evolve(g, config=attrs.evolve(g.config, partial_rotary_factor=0.0))
                   if hasattr(g.config, "partial_rotary_factor") else g for g in model.layers)
    return attrs.evolve(model, layers=layers)


def _work(registry, config, kind="dense", traits=frozenset(), **layout):
    parallel = ParallelSpec(**{"seq_len": 4096, **layout})
    return registry.layer_kind(kind).evaluate(config, layer_context(parallel, PrecisionSpec(), "flash", traits=traits))


def test_llama3_8b_rotates_40_heads_of_128_per_token(registry):
    layer = next(g for g in model_from_preset("llama3-8b", registry).layers if g.kind == "dense").config
    T = 4096
    # q's 32 heads and k's 8 of 128 channels: 5,120 rotated elements a token, 4 ops each.
    cost = _work(registry, layer)
    assert cost.work.rotary_flops == 4 * 5120 * T
    # Eager: torchtitan's complex multiply 20 bytes an element forward and backward; transformers' rotate_half 30 back.
    assert cost.work.rotary_eager_bytes == (20 * 5120 * T, 20 * 5120 * T)
    assert _work(registry, layer, traits=frozenset({"rope_rotate_half"})).work.rotary_eager_bytes == (20 * 5120 * T, 30 * 5120 * T)
    assert cost.work.copy_bytes == 0  # every channel rotated: nothing copied past the rotation
    # Over TP 8 a rank rotates 4 + 1 heads.
    assert _work(registry, layer, tp=8).work.rotary_flops == 4 * 5 * 128 * T
    # Without RoPE the layer has 20,480 fewer elementwise ops a token and states none.
    plain = _work(registry, attrs.evolve(layer, partial_rotary_factor=0.0))
    assert cost.forward.elementwise_flops - plain.forward.elementwise_flops == 4 * 5120 * T
    assert plain.work.rotary_flops == 0 and plain.work.rotary_eager_bytes == (0.0, 0.0)


@pytest.mark.parametrize(("options", "bytes_per_element"), [
    # Fused (torch.compile): 4 ops at the profile's 0.5 accesses of 2 bytes, a read and a write, each way.
    ({"elementwise_kernels": "fused"}, 4 + 4),
    # Eager torchtitan (the default): 20 bytes forward, 20 backward.
    ({"elementwise_kernels": "eager"}, 20 + 20),
    # Eager transformers: 20 forward, 30 backward.
    ({"elementwise_kernels": "eager", "rope_implementation": "rotate_half"}, 20 + 30),
    # The eager form is moot where the kernels are fused.
    ({"elementwise_kernels": "fused", "rope_implementation": "rotate_half"}, 4 + 4),
])
def test_llama3_8b_rope_time_per_step_by_hand(registry, options, bytes_per_element):
    model = model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(dp=8, seq_len=8192, micro_batch_size=2, global_batch_size=16)
    h100 = registry.hardware_preset("h100-sxm").spec
    runtime = apply_options(registry.runtime("fsdp2"), options)
    with_rope = step_time(model, layout, registry=registry, hardware=h100, runtime=runtime)
    without = step_time(_without_rope(model), layout, registry=registry, hardware=h100, runtime=runtime)
    # 32 layers x 16,384 tokens x 5,120 rotated elements, HBM at 3.35 TB/s x 0.85, the rest of the layer unchanged.
    expected = 32 * 16384 * 5120 * bytes_per_element / HBM
    assert with_rope.compute_seconds - without.compute_seconds == pytest.approx(expected, rel=1e-9)


def test_partial_rotary_rotates_its_share_and_copies_the_rest(registry):
    # Nemotron-4 15B (NemotronConfig, partial_rotary_factor 0.5): 48 query and 8 key heads of 128, 64 channels rotated,
    # the other 64 copied into the output (read and write, 2 bytes) each way.
    layer = next(g for g in model_from_preset("nemotron-4-15b", registry).layers if g.kind == "dense").config
    assert layer.partial_rotary_factor == 0.5 and layer.rotary_width == 64
    T = 4096
    work = _work(registry, layer).work
    assert work.rotary_flops == 4 * 56 * 64 * T
    assert work.copy_bytes == 2 * 2 * 56 * 64 * T and work.backward_copy_bytes is None


def test_layers_without_rotary_positions_price_none(registry):
    import scale_cases

    # llm-foundry's MPT (learned positions, ALiBi refused), Megatron-LM's GPT (learned absolute), Nemotron-H's attention.
    mpt_row = scale_cases.MPT_ROWS[0]
    mpt = model_from_mpt_config(mpt_row["model"]["mpt"], name="mpt", source="test")
    gpt = scale_cases._gpt({"hidden_size": 2048, "num_layers": 4, "num_attention_heads": 16, "vocab_size": 50257})
    nemotron_h = model_from_preset("nemotron-h-8b", registry)
    for model in (mpt, gpt, nemotron_h):
        for group in model.layers:
            if group.kind in ("dense", "attention"):
                cost = _work(registry, group.config, group.kind)
                assert group.config.partial_rotary_factor == 0.0
                assert cost.work.rotary_flops == 0 and cost.work.copy_bytes == 0


def test_llama4_nope_layers_rotate_nothing(registry):
    # Llama 4: every fourth layer has no_rope_layers[i] == 0 (transformers' default), and rotates nothing.
    factors = [g.config.partial_rotary_factor for g in model_from_preset("llama4-scout", registry).layers
               if g.kind in ("dense", "moe") for _ in range(g.count)]
    assert factors == [0.0 if (i + 1) % 4 == 0 else 1.0 for i in range(48)]


def test_hf_configs_state_the_rotary_share_where_transformers_reads_it():
    base = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
            "num_hidden_layers": 2, "num_attention_heads": 4}

    def factor(**extra):
        model = model_from_hf_config({**base, **extra}, name="m", source="test")
        return model.layers[1].config.partial_rotary_factor

    assert factor() == 1.0
    assert factor(partial_rotary_factor=0.25) == 0.25
    # transformers 5.24 reads rope_parameters (or the legacy rope_scaling) before the top-level field.
    assert factor(partial_rotary_factor=0.25, rope_parameters={"rope_type": "default", "partial_rotary_factor": 0.5}) == 0.5
    assert factor(rope_scaling={"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.75}) == 0.75
    with pytest.raises(ConfigError, match=r"\$\.rope_parameters\.partial_rotary_factor: must be a number in \(0, 1\]"):
        factor(rope_parameters={"partial_rotary_factor": 0})
    with pytest.raises(ConfigError, match=r"\$\.partial_rotary_factor: must be a number in \(0, 1\]"):
        factor(partial_rotary_factor=1.5)
    with pytest.raises(ConfigError, match="partial_rotary_factor must be a number in"):
        DenseConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=4, intermediate_size=512,
                    partial_rotary_factor=-0.1)


def test_megatron_arguments_state_rotary_positions(registry):
    from hp_plugins.importers.megatron import import_megatron_args

    small = ("--num-layers 2 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 2048 --seq-length 512 "
             "--vocab-size 1000 --micro-batch-size 1 --global-batch-size 8 --bf16 --max-position-embeddings 512")

    def factor(extra: str) -> float:
        job = import_megatron_args(shlex.split(small + extra), registry, devices=8)
        return job.document["model"]["layers"][1]["config"]["partial_rotary_factor"]

    assert factor("") == 0.0  # learned_absolute, Megatron-LM's default: no rotation
    assert factor(" --position-embedding-type rope") == 1.0
    assert factor(" --position-embedding-type rope --rotary-percent 0.5") == 0.5
    assert factor(" --use-rotary-position-embeddings --rotary-percent 0.25") == 0.25
    assert factor(" --rotary-percent 0.5") == 0.0  # read by Megatron-LM only under rope
    with pytest.raises(ConfigError, match="--rotary-percent: expected a number in"):
        factor(" --position-embedding-type rope --rotary-percent 0")


@settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(factor=st.sampled_from([0.25, 0.5, 1.0]), kv=st.sampled_from([2, 4, 8]), tp=st.sampled_from([1, 2]),
       options=st.sampled_from([{"elementwise_kernels": "eager"}, {"elementwise_kernels": "fused"},
                                {"elementwise_kernels": "eager", "rope_implementation": "rotate_half"}]),
       recompute=st.sampled_from(["none", "full", "op_sac"]), runtime_name=st.sampled_from(["fsdp2", "megatron"]))
def test_rope_never_makes_a_step_faster(registry, factor, kv, tp, options, recompute, runtime_name):
    layer = DenseConfig(hidden_size=1024, num_attention_heads=8, num_key_value_heads=kv, intermediate_size=2816,
                        partial_rotary_factor=factor)
    from hp_plugins.kinds.embedding import EmbeddingConfig
    from hp_plugins.kinds.output import OutputConfig

    model = ModelSpec(name="small", layers=(LayerGroup("embedding", EmbeddingConfig(vocab_size=32000, hidden_size=1024)),
                                            LayerGroup("dense", layer, 4),
                                            LayerGroup("output", OutputConfig(vocab_size=32000, hidden_size=1024))))
    runtime = registry.runtime(runtime_name)
    if runtime_name == "fsdp2":
        runtime = apply_options(runtime, options)
        settings_ = {"none": "none", "full": "full", "op_sac": sorted(runtime.recompute_modules["op_sac"])}[recompute]
    else:
        settings_ = "full" if recompute == "full" else "none"
    layout = ParallelSpec(dp=8 // tp, tp=tp, sp=tp > 1, seq_len=2048, micro_batch_size=1, global_batch_size=8 // tp,
                          zero=3 if runtime_name == "fsdp2" else 1)
    h100 = registry.hardware_preset("h100-sxm").spec
    spec = RecomputeSpec(default=Setting.parse(settings_))
    with_rope = step_time(model, layout, registry=registry, hardware=h100, runtime=runtime, recompute=spec)
    without = step_time(_without_rope(model), layout, registry=registry, hardware=h100, runtime=runtime, recompute=spec)
    assert with_rope.step_seconds >= without.step_seconds
    assert with_rope.compute_seconds >= without.compute_seconds
    if runtime_name == "fsdp2":  # no host floor: the rotation's bytes always show (megatron's may hide under the host's)
        assert with_rope.compute_seconds > without.compute_seconds


def test_eager_rope_bytes_are_what_the_operators_move():
    """The counted bytes against the real operators (census extra; benchmarks/count_eager_rope_bytes.py)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from repo_script import load_script

    script = load_script("benchmarks/count_eager_rope_bytes.py")
    assert script.transformers_rotate_half()[:2] == pytest.approx(EAGER_ROPE_BYTES["rotate_half"], abs=1e-12)
    assert script.torchtitan_complex()[:2] == pytest.approx(EAGER_ROPE_BYTES["complex"], abs=1e-12)

