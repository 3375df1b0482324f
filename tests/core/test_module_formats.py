"""Linear modules in a format of their own inside a recipe run (PrecisionSpec.module_formats; docs/precision.md
"Modules in a format of their own"): Megatron-Core's per-module quant_recipe, as Megatron-Bridge's Nemotron 3 Super
NVFP4 recipes state it (te_quant.cfg: linear_qkv, linear_proj, the latent projections in bf16)."""

from __future__ import annotations

import itertools

import attrs
import pytest

from hp_core.api import estimate, step_time
from hp_core.engine.prepare import prepare
from hp_core.errors import ConfigError, SpecError
from hp_core.io.convert import ConfigFile, structure
from hp_core.io.job import resolve_job
from hp_core.models import model_from_config
from hp_core.specs import ParallelSpec, PrecisionSpec

# A two-layer Nemotron-H hybrid: one Mamba-2 layer, then one attention layer (pattern "M*").
H, HEADS, KV, D = 4096, 32, 2, 128
MAMBA_HEADS, MAMBA_DIM, GROUPS, STATE = 128, 64, 8, 128
CONFIG = {"model_type": "nemotron_h", "vocab_size": 4096, "hidden_size": H, "num_hidden_layers": 2,
          "hybrid_override_pattern": "M*", "num_attention_heads": HEADS, "num_key_value_heads": KV,
          "attention_head_dim": D, "attention_bias": False, "attention_dropout": 0.0, "intermediate_size": 4096,
          "mlp_hidden_act": "relu2", "mlp_bias": False, "mamba_num_heads": MAMBA_HEADS, "mamba_head_dim": MAMBA_DIM,
          "mamba_hidden_act": "silu", "ssm_state_size": STATE, "n_groups": GROUPS, "conv_kernel": 4, "chunk_size": 128,
          "expand": 2, "use_bias": False, "use_conv_bias": True, "layer_norm_epsilon": 1e-05, "residual_in_fp32": False,
          "tie_word_embeddings": False}
SEQ, MICRO = 8192, 4
LAYOUT = ParallelSpec(tp=1, dp=8, seq_len=SEQ, micro_batch_size=MICRO, global_batch_size=64)
T = SEQ * MICRO
# Per-rank weight elements of each module (tp 1): in_proj h (2I + 2GN + H), out_proj I h, qkv h (a + 2g) d, o_proj a d h.
INNER = MAMBA_HEADS * MAMBA_DIM
ELEMENTS = {"mamba_in_proj": H * (2 * INNER + 2 * GROUPS * STATE + MAMBA_HEADS), "mamba_out_proj": INNER * H,
            "attention_qkv": H * (HEADS + 2 * KV) * D, "attention_proj": HEADS * D * H}
# NVFP4 under Transformer Engine: row-wise and column-wise weight copies of 4 bits plus an E4M3 byte per 16 elements.
NVFP4_COPY_BYTES = 2 * (0.5 + 1 / 16)


@pytest.fixture
def hybrid(registry):
    return model_from_config(CONFIG, registry, name="tiny-hybrid", source="test")


def _precision(registry, formats=None, recipe="nvfp4", **counts):
    return attrs.evolve(registry.runtime("megatron").precision, recipe=recipe, module_formats=formats or {}, **counts)


def _run(registry, model, precision):
    kw = dict(registry=registry, runtime="megatron", hardware="b200", precision=precision)
    return estimate(model, LAYOUT, **kw).stages[0].memory, step_time(model, LAYOUT, **kw)


def test_attention_in_bf16_changes_exactly_its_gemms_and_kept_bytes(registry, hybrid):
    base_mem, base_time = _run(registry, hybrid, _precision(registry))
    mem, time = _run(registry, hybrid, _precision(registry, {"attention_qkv": "bf16", "attention_proj": "bf16"}))
    # Kept per micro-batch (1F1B at pp 1: one in flight): linear_qkv's input, the norm's output, is no longer its
    # NVFP4 copy (0.5625 bytes an element, owned) but the bf16 tensor; linear_proj keeps its bf16 input under
    # Megatron-Core's save_original_input either way (the kernel's output), no copy.
    assert mem.activations_bytes - base_mem.activations_bytes == T * H * 2 - T * H * 9 // 16 == 192_937_984
    # Its weights' NVFP4 copies go: (qkv + o_proj elements) * 2 * 0.5625 bytes.
    dropped = (ELEMENTS["attention_qkv"] + ELEMENTS["attention_proj"]) * NVFP4_COPY_BYTES
    assert base_mem.parameters_bytes - mem.parameters_bytes == dropped == 40_108_032
    assert (mem.gradients_bytes, mem.optimizer_states_bytes) == (base_mem.gradients_bytes, base_mem.optimizer_states_bytes)
    # Time: the attention layer's GEMMs are all of linear_qkv and linear_proj, so the step is the one with that (the
    # last) layer kept in bf16 whole (high_precision_layers_at_end 1), memory included; the Mamba layer untouched.
    kept_mem, kept_time = _run(registry, hybrid, _precision(registry, high_precision_layers_at_end=1))
    assert time.step_seconds == kept_time.step_seconds > base_time.step_seconds
    assert mem == kept_mem
    run, plain = (prepare(hybrid, LAYOUT, registry=registry, runtime="megatron", precision=p) for p in (
        _precision(registry, {"attention_qkv": "bf16", "attention_proj": "bf16"}), _precision(registry)))
    assert run.costs[1] == plain.costs[1]  # the Mamba layer, as it was
    work = run.costs[2].work
    assert work.high_precision_gemms == ((T, (HEADS + 2 * KV) * D, H), (T, H, HEADS * D))
    assert work.original_input_gemms == () and plain.costs[2].work.original_input_gemms == ((T, H, HEADS * D),)


def test_mamba_projections_in_bf16_are_the_mamba_layer_kept_in_bf16(registry, hybrid):
    mem, time = _run(registry, hybrid, _precision(registry, {"mamba_in_proj": "bf16", "mamba_out_proj": "bf16"}))
    kept_mem, kept_time = _run(registry, hybrid, _precision(registry, high_precision_layers_at_start=1))
    assert mem == kept_mem and time.step_seconds == kept_time.step_seconds


def test_module_changes_add_up_and_weights_only_shrink(registry, hybrid):
    # Each GEMM is priced on its own (a listed shape, its quantization per element), so moving a set of modules to
    # bf16 changes the step's compute time by the sum of each one's change; the stage's parameters lose exactly the
    # moved modules' NVFP4 copies (2 * 0.5625 bytes an element; every quantized element is one of the four's).
    names = sorted(ELEMENTS)
    base_mem, base_time = _run(registry, hybrid, _precision(registry))
    alone = {n: _run(registry, hybrid, _precision(registry, {n: "bf16"}))[1].compute_seconds - base_time.compute_seconds
             for n in names}
    quantized = sum(ELEMENTS.values())
    for k in range(2, len(names) + 1):
        for chosen in itertools.combinations(names, k):
            mem, time = _run(registry, hybrid, _precision(registry, dict.fromkeys(chosen, "bf16")))
            assert time.compute_seconds - base_time.compute_seconds == pytest.approx(sum(alone[n] for n in chosen),
                                                                                     rel=1e-9)
            kept = quantized - sum(ELEMENTS[n] for n in chosen)
            assert base_mem.parameters_bytes - mem.parameters_bytes == (quantized - kept) * NVFP4_COPY_BYTES


def test_no_mapping_and_no_recipe_change_nothing(registry, hybrid):
    plain = _run(registry, hybrid, _precision(registry, recipe="bf16"))
    mapped = _run(registry, hybrid, _precision(registry, {"attention_qkv": "bf16"}, recipe="bf16"))
    assert plain[0] == mapped[0] and plain[1].step_seconds == mapped[1].step_seconds
    assert PrecisionSpec().module_formats == ()


def test_unknown_modules_and_formats_are_refused_in_one_line(registry, hybrid):
    with pytest.raises(SpecError, match=r"^module_formats names 'linear_qkv', not a linear module hp knows") as info:
        PrecisionSpec(module_formats={"linear_qkv": "bf16"})
    assert info.value.path == "module_formats.linear_qkv"
    document = {"model": "llama3-8b", "parallel": {"dp": 8, "seq_len": 4096, "micro_batch_size": 1,
                                                   "global_batch_size": 8},
                "runtime": "megatron", "precision": {"recipe": "nvfp4", "module_formats": {"qkv": "bf16"}}}
    with pytest.raises(ConfigError) as info:
        resolve_job(structure(document, ConfigFile, registry), registry)
    assert str(info.value).startswith("$.precision.module_formats.qkv: module_formats names 'qkv'")
    assert "\n" not in str(info.value)
    with pytest.raises(SpecError, match=r"module_formats.mamba_out_proj is .fp8.; a module.s own format is priced for "):
        PrecisionSpec(module_formats={"mamba_out_proj": "fp8"})


def test_a_module_the_model_lacks_is_refused(registry):
    from hp_core.api import model_from_preset

    llama = model_from_preset("llama3-8b", registry)
    with pytest.raises(ConfigError, match=r"^\$\.precision\.module_formats\.mamba_out_proj: module mamba_out_proj is "
                                          r"in no layer of this model \(its layers mark \['attention_proj', "
                                          r"'attention_qkv'\]\)"):
        prepare(llama, LAYOUT, registry=registry, runtime="megatron", precision=_precision(registry, {"mamba_out_proj": "bf16"}))


# MXFP8 under Transformer Engine: row-wise and column-wise copies of a byte plus an E8M0 byte per 32 elements.
MXFP8_COPY_BYTES = 2 * (1 + 1 / 32)
KEPT = {"attention_qkv": "bf16", "attention_proj": "bf16", "mamba_in_proj": "bf16"}


@pytest.mark.parametrize("layout", [LAYOUT, ParallelSpec(tp=2, sp=True, dp=4, seq_len=SEQ, micro_batch_size=MICRO,
                                                         global_batch_size=64)])
def test_an_mxfp8_module_in_an_nvfp4_run_is_the_mxfp8_recipe_on_its_gemms(registry, hybrid, layout):
    # Every linear but out_proj kept in bf16: out_proj in MXFP8 inside an NVFP4 run is the MXFP8 run with the same
    # three kept in bf16 (its GEMMs at MXFP8's speedup and quantization, its weight copies, its SP gather of the
    # output gradient in MXFP8 under TP 2), to the byte and the second.
    kw = dict(registry=registry, runtime="megatron", hardware="b200")
    inside = _precision(registry, {**KEPT, "mamba_out_proj": "mxfp8"})
    alone = _precision(registry, KEPT, recipe="mxfp8")
    assert estimate(hybrid, layout, precision=inside, **kw).stages[0].memory == estimate(
        hybrid, layout, precision=alone, **kw).stages[0].memory
    assert step_time(hybrid, layout, precision=inside, **kw).step_seconds == pytest.approx(
        step_time(hybrid, layout, precision=alone, **kw).step_seconds, rel=1e-12)


def test_super_modules_change_exactly_their_gemms_and_kept_bytes(registry, hybrid):
    # te_quant.cfg's mix on the hybrid: attention's linears in bf16, out_proj in MXFP8, NVFP4 elsewhere.
    base_mem, base_time = _run(registry, hybrid, _precision(registry))
    mem, time = _run(registry, hybrid, _precision(registry, {"attention_qkv": "bf16", "attention_proj": "bf16",
                                                            "mamba_out_proj": "mxfp8"}))
    # Kept: linear_qkv's bf16 input in place of its NVFP4 copy, and out_proj's input as an MXFP8 copy (a byte and an
    # E8M0 scale per 32 elements) in place of an NVFP4 one (half a byte and an E4M3 scale per 16).
    assert mem.activations_bytes - base_mem.activations_bytes == (T * H * 2 - T * H * 9 // 16
                                                                  + T * INNER * 33 // 32 - T * INNER * 9 // 16)
    # Weights: attention's NVFP4 copies go, out_proj's NVFP4 copies become MXFP8 ones.
    attention = (ELEMENTS["attention_qkv"] + ELEMENTS["attention_proj"]) * NVFP4_COPY_BYTES
    out_proj = ELEMENTS["mamba_out_proj"] * (MXFP8_COPY_BYTES - NVFP4_COPY_BYTES)
    assert base_mem.parameters_bytes - mem.parameters_bytes == attention - out_proj == 8_650_752
    # Time: the two layers' changes add (out_proj alone, attention alone); out_proj in MXFP8 lies between its NVFP4 and
    # its bf16 time on this device (MXFP8's measured speedup below NVFP4's).
    alone = {f: _run(registry, hybrid, _precision(registry, {"mamba_out_proj": f}))[1].compute_seconds for f in ("mxfp8", "bf16")}
    attention_only = _run(registry, hybrid, _precision(registry, {"attention_qkv": "bf16", "attention_proj": "bf16"}))[1]
    assert base_time.compute_seconds < alone["mxfp8"] < alone["bf16"]
    assert time.compute_seconds - base_time.compute_seconds == pytest.approx(
        (alone["mxfp8"] - base_time.compute_seconds) + (attention_only.compute_seconds - base_time.compute_seconds), rel=1e-9)


def test_a_module_format_needs_a_recipe_priced_per_module(registry, hybrid):
    # torchao's MXFP8 keeps compute-dtype inputs and no weight copies: no per-module format is priced inside it.
    with pytest.raises(ConfigError, match=r"^\$\.precision\.module_formats\.mamba_out_proj: module mamba_out_proj in "
                                          r"nvfp4 inside a torchao-mxfp8 run: recipe torchao-mxfp8 is not one"):
        prepare(hybrid, LAYOUT, registry=registry, runtime="megatron",
                precision=_precision(registry, {"mamba_out_proj": "nvfp4"}, recipe="torchao-mxfp8"))


def test_a_search_prices_module_formats_as_estimate_and_step_time_do(registry, hybrid):
    from hp_core.api import plan_recompute, search

    precision = _precision(registry, {"attention_qkv": "bf16", "attention_proj": "bf16", "mamba_out_proj": "mxfp8"})
    kw = dict(registry=registry, hardware=registry.hardware_preset("b200").spec, runtime="megatron", precision=precision)
    result = search(hybrid, top=3, devices=8, global_batch_size=16, seq_len=2048, **kw)
    for c in result.top:
        parallel = c.layout.parallel(2048, 16)
        plan = plan_recompute(hybrid, parallel, **kw)
        assert (plan.plan.step_seconds, plan.plan.peak_bytes) == (c.step_seconds, c.peak_bytes)
        assert step_time(hybrid, parallel, recompute=c.recompute, **kw).step_seconds == c.step_seconds
        assert estimate(hybrid, parallel, recompute=c.recompute, **kw).peak_bytes == c.peak_bytes
