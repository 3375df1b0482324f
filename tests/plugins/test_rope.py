"""Rotary position embedding in the step time, by hand (docs/time.md, "Rotary position embedding").

RoPE is elementwise work of the attention block: 4 ops per rotated element of q and k (two multiplies, the add,
rotate_half's sign flip), which a fused kernel moves as a read and a write (4 bytes at bf16) and eager kernels as
hp_plugins/kit/eager.py counts (torchtitan's complex multiply 20 bytes each way; transformers' rotate_half 20
forward, 30 backward; NeMo AutoModel's chunk_cat 18 forward, 20 backward); its backward is the inverse rotation.
Layers with learned positions, ALiBi or NoPE rotate nothing. fsdp2's rope_kernels=eager runs the rotation eager
where the rest is fused (NeMo AutoModel's MoE rows).
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
    # NeMo AutoModel's chunk_cat: on half the width, four multiplies (1 + 1 bytes each), a subtract and an add
    # (1 + 1 + 1 each) and the concatenation (1 + 1 + 2): 18 forward; backward a negation (1 + 1), four multiplies,
    # two adds and the chunk's concatenation: 20.
    assert _work(registry, layer, traits=frozenset({"rope_chunk_cat"})).work.rotary_eager_bytes == (18 * 5120 * T, 20 * 5120 * T)
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
    # Eager NeMo AutoModel: 18 forward, 20 backward.
    ({"elementwise_kernels": "eager", "rope_implementation": "chunk_cat"}, 18 + 20),
    # The eager form is moot where the kernels are fused.
    ({"elementwise_kernels": "fused", "rope_implementation": "rotate_half"}, 4 + 4),
    ({"elementwise_kernels": "fused", "rope_implementation": "chunk_cat"}, 4 + 4),
    # ... unless the rotation alone runs eager: its form's bytes, the rest fused.
    ({"elementwise_kernels": "fused", "rope_kernels": "eager", "rope_implementation": "chunk_cat"}, 18 + 20),
    ({"elementwise_kernels": "fused", "rope_kernels": "eager"}, 20 + 20),
    # Where every elementwise op runs eager, rope_kernels=eager changes nothing.
    ({"elementwise_kernels": "eager", "rope_kernels": "eager", "rope_implementation": "rotate_half"}, 20 + 30),
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
                                {"elementwise_kernels": "eager", "rope_implementation": "rotate_half"},
                                {"elementwise_kernels": "fused", "rope_kernels": "eager", "rope_implementation": "chunk_cat"}]),
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
    assert script.automodel_chunk_cat()[:2] == pytest.approx(EAGER_ROPE_BYTES["chunk_cat"], abs=1e-12)


def test_the_rope_options_set_one_form_trait_and_the_profiles_eager_rotation(registry):
    fsdp2 = registry.runtime("fsdp2")
    forms = {"rope_rotate_half", "rope_chunk_cat"}
    assert not forms & fsdp2.traits and fsdp2.timing.eager_rotary is False
    half = apply_options(fsdp2, {"rope_implementation": "rotate_half"})
    assert forms & half.traits == {"rope_rotate_half"}
    cat = apply_options(half, {"rope_implementation": "chunk_cat"})
    assert forms & cat.traits == {"rope_chunk_cat"}
    assert not forms & apply_options(cat, {"rope_implementation": "complex"}).traits
    fused = apply_options(fsdp2, {"elementwise_kernels": "fused"})
    eager = apply_options(fused, {"rope_kernels": "eager"})
    assert eager.timing.eager_rotary is True and eager.timing.eager_elementwise is False
    assert apply_options(eager, {"rope_kernels": "as_elementwise"}).timing == fused.timing
    with pytest.raises(ConfigError, match=r"\$\.runtime\.options\.rope_kernels: expected one of as_elementwise, eager"):
        apply_options(fsdp2, {"rope_kernels": "fused"})


def _automodel_row(name):
    import scale_cases as sc

    return next(r for r in sc.ROWS if r["id"] == name)


def test_automodel_qwen3_row_rotates_eager_while_the_rest_is_fused(registry):
    import scale_cases as sc

    row = _automodel_row("am-qwen3-30b-a3b-ep8")
    # Its config at 8d9bfb90e (the commit that prints 21.773 s) sets no RoPE fusion and none exists there: the
    # model applies AutoModel's eager _apply_rotary_emb (the source's config_note), its other elementwise ops
    # fused (Transformer Engine's norms; elementwise_kernels fused).
    assert (row["options"]["elementwise_kernels"], row["options"]["rope_kernels"], row["options"]["rope_implementation"]) \
        == ("fused", "eager", "chunk_cat")
    note = sc.DATA["sources"][row["source"]]["config_note"]
    assert "8d9bfb90e" in note and "_apply_rotary_emb" in note and "no rope_fusion" in note
    eager = sc.runtime(row, registry)
    fused = apply_options(eager, {"rope_kernels": "as_elementwise"})
    args = dict(registry=registry, hardware=sc.hardware(row, registry), recompute=sc.recompute(row, registry))
    model = sc.model(row, registry)
    on = step_time(model, sc.layout(row), runtime=eager, **args)
    off = step_time(model, sc.layout(row), runtime=fused, **args)
    # 512 x 4096 / 8 = 262,144 tokens a GPU a step through 48 layers, each rotating (32 + 4) x 128 = 4,608 elements
    # of q and k a token: eager 18 bytes forward, again in the full recompute, and 20 backward, against the fused
    # kernel's 4 each way (4 ops at 0.5 accesses of 2 bytes). HBM at 3.35 TB/s x 0.85; no sustained slowdown.
    extra = 262144 * 48 * 4608 * ((18 - 4) + (20 - 4)) / HBM
    assert on.compute_seconds - off.compute_seconds == pytest.approx(extra, rel=1e-9)
    assert on.recompute_seconds - off.recompute_seconds == pytest.approx(262144 * 48 * 4608 * (18 - 4) / HBM, rel=1e-9)
    assert (on.compute_seconds + on.recompute_seconds) - (off.compute_seconds + off.recompute_seconds) == \
        pytest.approx(0.89595, abs=1e-5)
    # Nothing but the RoPE term moves: the same model without rotary positions is priced alike either way.
    plain = _without_rope(model)
    assert step_time(plain, sc.layout(row), runtime=eager, **args) == step_time(plain, sc.layout(row), runtime=fused, **args)


def test_automodel_rows_state_eager_rope_where_their_configs_run_it(registry):
    import scale_cases as sc

    # GPT-OSS 20B (89e3a9fdd, before rope_fusion existed): the same _apply_rotary_emb, 24 layers of (64 + 8) heads
    # of 64, every layer rotated, 256 x 4096 / 8 = 131,072 tokens a GPU a step under full recompute.
    oss = _automodel_row("am-gpt-oss-20b-ep8")
    assert (oss["options"]["rope_kernels"], oss["options"]["rope_implementation"]) == ("eager", "chunk_cat")
    assert "_apply_rotary_emb" in sc.DATA["sources"][oss["source"]]["config_note"]
    eager = sc.runtime(oss, registry)
    args = dict(registry=registry, hardware=sc.hardware(oss, registry), recompute=sc.recompute(oss, registry))
    model, layout = sc.model(oss, registry), sc.layout(oss)
    on = step_time(model, layout, runtime=eager, **args)
    off = step_time(model, layout, runtime=apply_options(eager, {"rope_kernels": "as_elementwise"}), **args)
    extra = 131072 * 24 * 72 * 64 * (2 * (18 - 4) + (20 - 4)) / HBM
    assert (on.compute_seconds + on.recompute_seconds) - (off.compute_seconds + off.recompute_seconds) == \
        pytest.approx(extra, rel=1e-9)
    # Nemotron 3 Nano: Nemotron-H's attention applies no RoPE, so the option would change nothing; the row states none.
    nano = _automodel_row("am-nemotron-3-nano-30b-a3b-ep8")
    assert "rope_kernels" not in nano["options"]
    runtime = sc.runtime(nano, registry)
    args = dict(registry=registry, hardware=sc.hardware(nano, registry), recompute=sc.recompute(nano, registry))
    assert step_time(sc.model(nano, registry), sc.layout(nano), runtime=runtime, **args) == step_time(
        sc.model(nano, registry), sc.layout(nano), runtime=apply_options(runtime, {"rope_kernels": "eager"}), **args)
    # Llama 3 70B (2013a4dd6): the Llama model's BackendConfig.rope_fusion defaults on with Transformer Engine,
    # which the config leaves as it is: fused, as the row states.
    llama = _automodel_row("am-70b-fsdp32-cp2")
    assert "rope_kernels" not in llama["options"] and "rope_fusion" in sc.DATA["sources"][llama["source"]]["config_note"]

