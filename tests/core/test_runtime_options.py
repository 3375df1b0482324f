"""Per-run runtime options: defaults change nothing, each option flips exactly the terms it names,
every command honours them, bad names and values get the one-line error."""

from __future__ import annotations

import json
import pickle

import attrs
import pytest

from hp_core.api import apply_options, estimate, model_from_preset, plan_recompute, step_time
from hp_core.errors import ConfigError
from hp_core.runtime_options import RuntimeOption, field_option, option_summary, parse_assignments, trait_option
from hp_core.specs import ParallelSpec

from cli_run import run

# Llama-3-8B on tp=2 with SP, 8k tokens, one micro-batch in flight (pp=1): the figures below are per rank.
T, TP, A, G, D, H, FFN, LAYERS = 8192, 2, 32, 8, 128, 4096, 14336, 32
PADDED_VOCAB = 128256  # already a multiple of 128 * tp = 256


@pytest.fixture
def llama(registry):
    return model_from_preset("llama3-8b", registry)


def _stage(registry, model, runtime, **extra):
    parallel = ParallelSpec(dp=1, tp=TP, sp=True, seq_len=T, **extra)
    (stage,) = estimate(model, parallel, registry=registry, runtime=runtime).stages
    return stage


@pytest.mark.parametrize("name", ["generic", "megatron", "fsdp2", "hyperparallel"])
def test_every_option_at_its_default_leaves_the_profile_as_registered(registry, name):
    profile = registry.runtime(name)
    defaults = {option.name: option.default for option in profile.options}
    applied = apply_options(profile, defaults)
    assert attrs.evolve(applied, option_values={}) == profile
    assert dict(applied.option_values) == defaults
    assert apply_options(profile, {}) is profile


def test_megatron_lists_its_options(registry):
    names = [option.name for option in registry.runtime("megatron").options]
    assert names == ["cross_entropy_fusion", "attention_backend", "swiglu_fusion", "activation_func_fp8_input_store", "linear_proj_save_original_input", "moe_grouped_gemm",
                     "moe_fused_grouped_mlp", "moe_permute_fusion",
                     "gradient_accumulation_fusion", "make_vocab_size_divisible_by", "grad_reduce_in_fp32", "overlap_grad_reduce",
                     "overlap_param_gather", "ddp_bucket_size", "tp_comm_overlap", "tp_comm_overlap_cfg", "overlap_p2p_communication", "overlap_moe_expert_parallel_comm",
                     "delay_wgrad_compute", "ep_all_to_all", "hybridep_num_sms", "rope_kernels", "cuda_graphs",
                     "cublas_workspace_kib"]
    assert all(option.source and option.description for option in registry.runtime("megatron").options)


# Llama-3-8B's parameter elements on one rank at tp = 2: per layer q and o 4096 x 4096, k and v 4096 x 1024, gate,
# up and down 4096 x 14336, each split over tp, and two replicated norms of 4096; the embedding and the head
# split over the vocabulary; the final norm.
LLAMA_RANK_ELEMENTS = (LAYERS * ((2 * H * H + 2 * H * G * D + 3 * H * FFN) // TP + 2 * H)
                       + 2 * PADDED_VOCAB * H // TP + H)


def test_grad_reduce_in_fp32_false_holds_a_bf16_gradient_buffer(registry, llama):
    # Megatron-Core distributed_data_parallel.py: grad_dtype = fp32 if grad_reduce_in_fp32 else param.dtype (bf16);
    # the buffer holds one element per parameter of the rank (dp = 1: the distributed optimizer shards nothing).
    assert LLAMA_RANK_ELEMENTS == 4_015_263_744
    megatron = registry.runtime("megatron")
    fp32 = _stage(registry, llama, megatron)
    bf16_runtime = apply_options(megatron, {"grad_reduce_in_fp32": False})
    assert bf16_runtime.precision.grad_bytes == 2 and megatron.precision.grad_bytes == 4
    bf16 = _stage(registry, llama, bf16_runtime)
    assert fp32.memory.gradients_bytes == LLAMA_RANK_ELEMENTS * 4 == 16_061_054_976
    assert bf16.memory.gradients_bytes == LLAMA_RANK_ELEMENTS * 2 == 8_030_527_488
    # Only the buffer moves: parameters, fp32 master copy, moments and activations are the same.
    assert fp32.memory.peak_bytes - bf16.memory.peak_bytes == LLAMA_RANK_ELEMENTS * 2
    assert (bf16.memory.master_parameters_bytes, bf16.memory.optimizer_states_bytes, bf16.memory.activations_bytes) == \
        (fp32.memory.master_parameters_bytes, fp32.memory.optimizer_states_bytes, fp32.memory.activations_bytes)
    # true is the profile itself; a config's "false" string is read as the bool.
    assert attrs.evolve(apply_options(megatron, {"grad_reduce_in_fp32": True}), option_values={}) == megatron
    assert apply_options(megatron, {"grad_reduce_in_fp32": "false"}).precision == bf16_runtime.precision


def test_unfused_cross_entropy_keeps_an_fp32_softmax_instead_of_the_bf16_logits(registry, llama):
    megatron = registry.runtime("megatron")
    fused = _stage(registry, llama, megatron)
    unfused = _stage(registry, llama, apply_options(megatron, {"cross_entropy_fusion": False}))
    # Output layer: fp32 softmax over this rank's vocabulary shard instead of the bf16 logits: 2 more bytes per element.
    assert unfused.activations_by_kind["output"] - fused.activations_by_kind["output"] == T * (PADDED_VOCAB // TP) * (4 - 2)
    assert unfused.activations_by_kind["dense"] == fused.activations_by_kind["dense"]
    assert unfused.memory.parameters_bytes == fused.memory.parameters_bytes


def test_unfused_attention_keeps_bf16_probabilities_and_repeated_kv_heads(registry, llama):
    megatron = registry.runtime("megatron")
    fused = _stage(registry, llama, megatron)
    unfused_rt = apply_options(megatron, {"attention_backend": "unfused"})
    assert (unfused_rt.attention, unfused_rt.precision.softmax_bytes) == ("eager", 2)
    unfused = _stage(registry, llama, unfused_rt)
    per_layer = (
        T * (A - G) * D * 2 // TP  # k repeated from g to a heads
        + T * (A - G) * D * 2 // TP  # v likewise
        + (A // TP) * T * T * 2  # the bf16 probabilities (no fp32 copy, no dropout: attention_dropout 0)
        - T * (A // TP) * 4  # no flash log-sum-exp statistics
    )
    assert unfused.activations_by_kind["dense"] - fused.activations_by_kind["dense"] == LAYERS * per_layer
    assert unfused.activations_by_kind["output"] == fused.activations_by_kind["output"]


def test_unfused_swiglu_keeps_one_more_intermediate_tensor(registry, llama):
    megatron = registry.runtime("megatron")
    fused = _stage(registry, llama, megatron)
    unfused = _stage(registry, llama, apply_options(megatron, {"swiglu_fusion": False}))
    # gate, up, act and product (4 x wide) instead of fc1 output (2 x wide) and product (1 x wide)
    assert unfused.activations_by_kind["dense"] - fused.activations_by_kind["dense"] == LAYERS * T * (FFN // TP) * 2


def test_vocab_padding_option_pads_to_its_multiple_times_tp(registry, llama):
    megatron = registry.runtime("megatron")
    padded = apply_options(megatron, {"make_vocab_size_divisible_by": "1000"})
    assert padded.vocab_pad_multiple == 1000
    base, wide = _stage(registry, llama, megatron), _stage(registry, llama, padded)
    # 128256 padded to a multiple of 2000: 130000; embedding and head each hold (130000 - 128256) / tp more rows.
    assert wide.parameters_by_kind["embedding"] - base.parameters_by_kind["embedding"] == (130000 - PADDED_VOCAB) // TP * H


def test_gradient_accumulation_fusion_off_drops_the_dummy_weight_gradients(registry, llama):
    megatron = registry.runtime("megatron")
    off = apply_options(megatron, {"gradient_accumulation_fusion": False})
    assert off.dummy_weight_gradients is False and megatron.dummy_weight_gradients is True
    with_dummy, without = _stage(registry, llama, megatron), _stage(registry, llama, off)
    assert without.peak_bytes < with_dummy.peak_bytes
    assert without.activations_by_kind == with_dummy.activations_by_kind


def test_permute_fusion_off_drops_the_row_map(registry):
    model = model_from_preset("mixtral-8x7b", registry).with_body_layers(2, registry.kinds_placed("body"))
    megatron = registry.runtime("megatron")
    parallel = ParallelSpec(dp=1, ep=1, tp=1, seq_len=1024)
    (fused,) = estimate(model, parallel, registry=registry, runtime=megatron).stages
    (plain,) = estimate(model, parallel, registry=registry,
                        runtime=apply_options(megatron, {"moe_permute_fusion": False})).stages
    experts = 8
    # int32 row map of [tokens, 2E + 1] per MoE layer (Transformer Engine moe_permute), two layers.
    assert fused.activations_by_kind["moe"] - plain.activations_by_kind["moe"] == 2 * 1024 * (2 * experts + 1) * 4


def test_options_reach_the_step_time_and_the_planner(registry, llama):
    megatron = registry.runtime("megatron")
    unfused = apply_options(megatron, {"attention_backend": "unfused"})
    parallel = ParallelSpec(dp=1, tp=TP, sp=True, seq_len=T)
    hardware = registry.hardware_preset("h100-sxm").spec
    flash_time = step_time(llama, parallel, registry=registry, runtime=megatron, hardware=hardware)
    eager_time = step_time(llama, parallel, registry=registry, runtime=unfused, hardware=hardware)
    assert eager_time.step_seconds != flash_time.step_seconds
    plan = plan_recompute(llama, parallel, registry=registry, runtime=unfused, hardware=hardware)
    assert plan.provenance["runtime_options"] == {"attention_backend": "unfused"}
    assert plan.runtime == "megatron"


def test_values_parse_by_type_and_refuse_with_the_field_path(registry):
    megatron = registry.runtime("megatron")
    assert apply_options(megatron, {"cross_entropy_fusion": "off"}).option_values == {"cross_entropy_fusion": False}
    with pytest.raises(ConfigError, match=r"^\$\.runtime\.options\.cross_entropy_fusion: expected true or false"):
        apply_options(megatron, {"cross_entropy_fusion": "maybe"})
    with pytest.raises(ConfigError, match=r"make_vocab_size_divisible_by: expected at least 1"):
        apply_options(megatron, {"make_vocab_size_divisible_by": 0})
    with pytest.raises(ConfigError, match=r"make_vocab_size_divisible_by: expected an integer"):
        apply_options(megatron, {"make_vocab_size_divisible_by": 1.5})
    with pytest.raises(ConfigError, match=r"no option 'fused_ce'; its options: cross_entropy_fusion, attention_backend"):
        apply_options(megatron, {"fused_ce": True})
    assert parse_assignments(["a=1", "b-c = x", "a=2"]) == {"a": "2", "b_c": "x"}
    with pytest.raises(ConfigError, match="NAME=VALUE"):
        parse_assignments(["novalue"])


def test_option_records_check_themselves():
    with pytest.raises(ValueError, match="lists its choices"):
        RuntimeOption("x", "choice", "a", "d", "s", lambda r, v: r)
    with pytest.raises(ConfigError):
        field_option("x", "zero", "int", default="a", description="d", source="s")
    option = trait_option("fused", "fused_swiglu", default=False, description="d", source="s")
    assert pickle.loads(pickle.dumps(option)).name == "fused"  # a search ships it to worker processes


def test_a_trait_setter_turns_its_trait_on_for_its_value_only(registry):
    from hp_core.runtime_options import trait_setter

    fsdp2 = registry.runtime("fsdp2")
    gate = trait_setter("moe_fake_balanced_gate", "fake_balanced")
    on = gate(fsdp2, "fake_balanced")
    assert on.traits == fsdp2.traits | {"moe_fake_balanced_gate"}
    assert gate(on, "learned").traits == fsdp2.traits - {"moe_fake_balanced_gate"}
    gathered = trait_setter("gathered_logits", when=False)  # a bool option whose false turns the trait on
    assert "gathered_logits" in gathered(fsdp2, False).traits and "gathered_logits" not in gathered(fsdp2, True).traits
    assert gate == trait_setter("moe_fake_balanced_gate", "fake_balanced") and pickle.loads(pickle.dumps(gate)) == gate


def test_the_command_line_and_the_config_file_set_the_same_options(capsys, tmp_path):
    argv = ["--model", "llama3-8b", "--tp", "2", "--sp", "--dp", "1", "--seq-len", "4096", "--runtime", "megatron"]
    status, out, _ = run(capsys, "estimate", *argv, "--runtime-option", "cross_entropy_fusion=false",
                         "--runtime-option", "attention_backend=unfused", "--json")
    assert status == 0
    flags = json.loads(out)
    assert flags["provenance"]["runtime_options"] == {"cross_entropy_fusion": False, "attention_backend": "unfused"}
    assert flags["provenance"]["attention"] == "eager"
    config = tmp_path / "job.yaml"
    config.write_text("model: llama3-8b\nparallel: {dp: 1, tp: 2, sp: true, seq_len: 4096}\n"
                      "runtime: {name: megatron, options: {cross_entropy_fusion: false, attention_backend: unfused}}\n")
    status, out, _ = run(capsys, "estimate", config, "--json")
    assert status == 0 and json.loads(out)["stages"] == flags["stages"]
    # A flag overrides the file's option by name; the others stay.
    status, out, _ = run(capsys, "estimate", config, "--runtime-option", "attention_backend=flash", "--json")
    doc = json.loads(out)
    assert doc["provenance"]["runtime_options"] == {"cross_entropy_fusion": False, "attention_backend": "flash"}
    status, out, _ = run(capsys, "estimate", config)
    assert "runtime megatron (cross_entropy_fusion=false, attention_backend=unfused)" in " ".join(out.split())


def test_grad_reduce_in_fp32_false_prices_the_fp32_gradient_copy_at_the_optimizer_step(registry, llama):
    # Megatron-Core (at 23e00ed0 and core_v0.18.0) _copy_model_grads_to_main_grads: each fp32 main parameter gets
    # .grad = main_grad.float(), a new fp32 tensor of a bf16 buffer (of the rank's shard under the distributed
    # optimizer, distrib_optimizer.py; of the whole gradient without it, optimizer.py), the buffer itself of an fp32
    # one. The optimizer point holds the buffer, and that copy as working set: against grad_reduce_in_fp32 true, the
    # buffer is 2 bytes per element lighter and the copy 4 bytes per element of the master shard heavier.
    megatron = registry.runtime("megatron")
    bf16 = apply_options(megatron, {"grad_reduce_in_fp32": False})
    n = LLAMA_RANK_ELEMENTS

    def optimizer_point(runtime, **layout):
        parallel = ParallelSpec(tp=TP, sp=True, seq_len=T, **layout)
        return [s.peak_points["optimizer"] for s in estimate(llama, parallel, registry=registry, runtime=runtime).stages]

    # ZeRO-1 over dp = 4: the master shard is a quarter of the rank's elements: -2 n + 4 n / 4 = -n.
    zero1 = {"dp": 4, "zero": 1, "global_batch_size": 4}
    assert [b - a for a, b in zip(optimizer_point(megatron, **zero1), optimizer_point(bf16, **zero1))] == [-n]
    assert n == 4_015_263_744
    # ZeRO-0: every gradient copied: -2 n + 4 n = 2 n, which the bf16 buffer's saving does not cover.
    zero0 = {"dp": 4, "zero": 0, "global_batch_size": 4}
    assert [b - a for a, b in zip(optimizer_point(megatron, **zero0), optimizer_point(bf16, **zero0))] == [2 * n]
    # With the fp32 buffer the step holds nothing the end of warm-up does not: that point still binds, as before.
    (stage,) = estimate(llama, ParallelSpec(tp=TP, sp=True, seq_len=T, **zero0), registry=registry, runtime=megatron).stages
    m = stage.memory
    assert stage.binding_point == "warmup_end"
    assert stage.peak_points["optimizer"] == (m.parameters_bytes + m.gradients_bytes + m.master_parameters_bytes
                                              + m.optimizer_states_bytes + m.runtime_overhead_bytes)
    # Where the activations are below the copy it binds: one 1024-token micro-batch at ZeRO-0.
    (short,) = estimate(llama, ParallelSpec(tp=TP, sp=True, seq_len=1024, **zero0), registry=registry, runtime=bf16).stages
    assert short.binding_point == "optimizer" and short.memory.working_set_bytes == 4 * n


@pytest.mark.parametrize(("text", "message"), [
    ("{name: megatron, options: {cross_entropy_fusion: maybe}}",
     "$.runtime.options.cross_entropy_fusion: expected true or false, got 'maybe'"),
    ("{name: megatron, options: {nope: 1}}", "$.runtime.options.nope: runtime megatron has no option 'nope'"),
    ("{name: fsdp2, options: {reduce_dtype: fp16}}",
     "$.runtime.options.reduce_dtype: expected one of fp32, bf16, got 'fp16'"),
    ("{name: megatron, options: {grad_reduce_in_fp32: bf16}}",
     "$.runtime.options.grad_reduce_in_fp32: expected true or false, got 'bf16'"),
    ("{name: megatron, opts: {}}", "$.runtime: unknown keys ['opts']"),
    ("{name: megatron, options: [a]}", "$.runtime.options: expected a mapping of option names to values"),
])
def test_bad_runtime_options_in_a_file_are_one_line_errors(capsys, tmp_path, text, message):
    config = tmp_path / "job.yaml"
    config.write_text(f"model: llama3-8b\nparallel: {{dp: 1, tp: 2, seq_len: 1024}}\nruntime: {text}\n")
    status, out, err = run(capsys, "estimate", config)
    assert status == 2 and out == ""
    assert err.startswith(f"hp estimate: error: {message}") and err.count("\n") == 1


@pytest.mark.parametrize(("runtime", "precision", "message"), [
    # Megatron-Core reduces the gradient buffer in place, in its own dtype: no reduce width apart from it.
    ("{name: megatron}", "{reduce_bytes: 2}",
     "$.precision.reduce_bytes: runtime megatron has no reduce dtype of its own: it reduces gradients in its gradient "
     "buffer's dtype (grad_bytes 4), so reduce_bytes 2 cannot be priced; use the runtime option grad_reduce_in_fp32"),
    ("{name: megatron, options: {grad_reduce_in_fp32: false}}", "{reduce_bytes: 4}",
     "$.precision.reduce_bytes: runtime megatron has no reduce dtype of its own: it reduces gradients in its gradient "
     "buffer's dtype (grad_bytes 2), so reduce_bytes 4 cannot be priced"),
    # A stated width and an option setting the same field must agree: neither wins silently.
    ("{name: megatron, options: {grad_reduce_in_fp32: false}}", "{grad_bytes: 4}",
     "$.precision.grad_bytes: 4 disagrees with runtime option grad_reduce_in_fp32=false, which sets grad_bytes 2; "
     "state one of them, or both alike"),
    ("{name: megatron, options: {grad_reduce_in_fp32: true}}", "{grad_bytes: 2}",
     "$.precision.grad_bytes: 2 disagrees with runtime option grad_reduce_in_fp32=true, which sets grad_bytes 4"),
    ("{name: fsdp2, options: {reduce_dtype: bf16}}", "{reduce_bytes: 4}",
     "$.precision.reduce_bytes: 4 disagrees with runtime option reduce_dtype=bf16, which sets reduce_bytes 2"),
])
def test_precision_a_runtime_cannot_run_is_a_one_line_error(capsys, tmp_path, runtime, precision, message):
    config = tmp_path / "job.yaml"
    config.write_text(f"model: llama3-8b\nnum_layers: 1\nparallel: {{dp: 1, seq_len: 1024}}\nruntime: {runtime}\n"
                      f"precision: {precision}\n")
    status, out, err = run(capsys, "estimate", config)
    assert status == 2 and out == ""
    assert err.startswith(f"hp estimate: error: {message}") and err.count("\n") == 1


@pytest.mark.parametrize(("runtime", "precision"), [
    ("{name: megatron, options: {grad_reduce_in_fp32: false}}", "{grad_bytes: 2}"),
    ("{name: megatron, options: {grad_reduce_in_fp32: true}}", "{grad_bytes: 4, reduce_bytes: 4}"),
    ("{name: megatron}", "{grad_bytes: 2, reduce_bytes: 2}"),
    ("{name: fsdp2, options: {reduce_dtype: bf16}}", "{reduce_bytes: 2}"),
])
def test_precision_that_agrees_with_the_runtime_options_is_accepted(capsys, tmp_path, runtime, precision):
    config = tmp_path / "job.yaml"
    config.write_text(f"model: llama3-8b\nnum_layers: 1\nparallel: {{dp: 1, seq_len: 1024}}\nruntime: {runtime}\n"
                      f"precision: {precision}\n")
    status, out, err = run(capsys, "estimate", config, "--json")
    assert status == 0, err
    assert json.loads(out)["stages"]


def test_recompute_potentials_and_search_take_runtime_options(capsys):
    job = ["--model", "llama3-8b", "--num-layers", "2", "--tp", "2", "--dp", "1", "--seq-len", "2048",
           "--runtime", "megatron", "--runtime-option", "cross_entropy_fusion=false", "--hardware", "h100-sxm"]
    status, out, _ = run(capsys, "recompute", *job, "--json")
    assert status == 0 and json.loads(out)["provenance"]["runtime_options"] == {"cross_entropy_fusion": False}
    status, out, _ = run(capsys, "potentials", *job, "--steps", "1")
    assert status == 0 and "runtime megatron (cross_entropy_fusion=false)" in " ".join(out.split())
    status, out, err = run(capsys, "search", "--model", "llama3-8b", "--num-layers", "2", "--devices", "2",
                           "--hardware", "h100-sxm", "--runtime", "megatron", "--runtime-option", "swiglu_fusion=maybe")
    assert status == 2 and "$.runtime.options.swiglu_fusion: expected true or false" in err
    status, out, _ = run(capsys, "search", "--model", "llama3-8b", "--num-layers", "2", "--devices", "2",
                         "--global-batch-size", "8", "--seq-len", "1024", "--hardware", "h100-sxm", "--runtime",
                         "megatron", "--runtime-option", "swiglu_fusion=false", "--top", "1")
    assert status == 0 and "runtime megatron (swiglu_fusion=false)" in " ".join(out.split())


def test_option_summary_names_what_was_set(registry):
    assert option_summary(registry.runtime("megatron")) == ""
    rt = apply_options(registry.runtime("megatron"), {"swiglu_fusion": False, "cross_entropy_fusion": "true"})
    assert option_summary(rt) == "swiglu_fusion=false, cross_entropy_fusion=true"


def test_grad_reduce_in_fp32_false_follows_a_stated_param_bytes(capsys, tmp_path):
    """Megatron-Core's gradient buffer takes param.dtype when grad_reduce_in_fp32 is false (distributed_data_parallel.py
    grad_dtype), so fp32 parameters (param_bytes: 4) keep a 4-byte buffer: 2 bytes per gradient was priced before."""
    def grads_bytes(precision: str) -> int:
        config = tmp_path / "job.yaml"
        config.write_text("model: llama3-8b\nnum_layers: 1\nparallel: {dp: 1, seq_len: 1024}\n"
                          "runtime: {name: megatron, options: {grad_reduce_in_fp32: false}}\n"
                          f"precision: {precision}\n")
        status, out, err = run(capsys, "estimate", config, "--json")
        assert status == 0, err
        return json.loads(out)["stages"][0]["memory"]["gradients_bytes"]
    # llama3-8b truncated to one decoder layer: the embedding 525,336,576, one layer 218,112,000, the head and final
    # norm 525,340,672 parameters.
    elements = 525_336_576 + 218_112_000 + 525_340_672
    assert grads_bytes("{param_bytes: 4}") == 4 * elements
    assert grads_bytes("{param_bytes: 2}") == 2 * elements


def test_search_with_hsdp_rejects_layouts_it_cannot_split(capsys):
    """hsdp_replicate 4 on 16 devices: layouts whose dp 4 does not divide (dp 1, 2) are rejected under their own
    reason, only ZeRO 3 is searched, and every ranked layout has dp a multiple of 4 (pipelined ones too: the fsdp2
    profile prices HSDP's once-per-step reduction under PP)."""
    status, out, err = run(capsys, "search", "--model", "llama3-8b", "--num-layers", "4", "--devices", "16",
                           "--hardware", "h100-sxm", "--runtime", "fsdp2", "--runtime-option", "hsdp_replicate=4",
                           "--global-batch-size", "64", "--seq-len", "2048", "--json")
    assert status == 0, err
    found = json.loads(out)
    assert found["top"] and all(r["layout"]["dp"] % 4 == 0 and r["layout"]["zero"] == 3 for r in found["top"])
    reason = "the runtime's hsdp_replicate does not divide the (expert) data-parallel degree, or pp > 1 where its profile refuses it"
    assert found["rejected"][reason] > 0


def test_hsdp_under_pipeline_parallelism_is_refused_only_where_the_profile_prices_per_micro_batch(capsys):
    """fsdp2 prices HSDP under PP (its all-reduce once per step); a profile without fsdp_pipeline_step_reduce refuses
    it in one line."""
    args = ["estimate", "--model", "llama3-8b", "--num-layers", "4", "--dp", "4", "--pp", "2", "--seq-len", "1024",
            "--runtime", "fsdp2", "--runtime-option", "hsdp_replicate=2", "--hardware", "h100-sxm"]
    status, _, err = run(capsys, *args)
    assert status == 0, err
    from types import SimpleNamespace
    from hp_core.specs.overlap import check_fsdp_replicate
    layout = SimpleNamespace(dp=4, pp=2, ep=1, expert_dp=4)
    check_fsdp_replicate(2, 3, layout, pipeline_step_reduce=True)
    with pytest.raises(ConfigError, match=r"HSDP under pipeline parallelism \(pp 2\) is not priced by this timing profile"):
        check_fsdp_replicate(2, 3, layout)


def test_fsdp_under_interleaved_pipelining_with_reshard_after_forward_is_a_one_line_error(capsys, tmp_path):
    """fsdp2's memory estimate prices FSDP under interleaved 1F1B without reshard_after_forward (torchtitan's default
    under PP, and fsdp2's where the config states none) and refuses it where a config states it (each forward frees
    what the chunk's UNSHARD gathered: not followed) in one line; the step time prices both
    (tests/core/test_fsdp_multi_stage.py)."""
    config = tmp_path / "job.yaml"
    config.write_text("model: llama3-8b\nparallel: {dp: 4, pp: 2, vpp: 2, seq_len: 1024, reshard_after_forward: true}\n"
                      "runtime: fsdp2\nhardware: h100-sxm\n")
    status, _, err = run(capsys, "estimate", config, "--num-layers", "4")
    assert status == 2 and err.count("\n") == 1
    assert err.startswith("hp estimate: error: $.parallel.reshard_after_forward: the memory of FSDP (zero 3) under "
                          "interleaved pipeline stages (vpp=2) is priced without reshard_after_forward")
    config.write_text("model: llama3-8b\nparallel: {dp: 4, pp: 2, vpp: 2, seq_len: 1024, reshard_after_forward: false}\n"
                      "runtime: fsdp2\nhardware: h100-sxm\n")
    status, out, err = run(capsys, "estimate", config, "--num-layers", "4", "--json")
    assert status == 0, err
    assert json.loads(out)["layout"]["reshard_after_forward"] is False
    # Left out, fsdp2's default under PP (torchtitan's fsdp_reshard_after_forward: default): the same estimate.
    status, left_out, err = run(capsys, "estimate", "--model", "llama3-8b", "--num-layers", "4", "--dp", "4", "--pp",
                                "2", "--vpp", "2", "--seq-len", "1024", "--runtime", "fsdp2", "--hardware", "h100-sxm",
                                "--json")
    assert status == 0, err
    assert json.loads(left_out)["stages"] == json.loads(out)["stages"]
    assert json.loads(left_out)["layout"]["reshard_after_forward"] is False
    # The flags state it over the file: --reshard-after-forward is refused as the file's true was, --no-... priced.
    status, _, err = run(capsys, "estimate", config, "--num-layers", "4", "--reshard-after-forward")
    assert status == 2 and err.count("\n") == 1 and "$.parallel.reshard_after_forward: the memory of FSDP" in err
    status, flagged, err = run(capsys, "estimate", config, "--num-layers", "4", "--no-reshard-after-forward", "--json")
    assert status == 0 and json.loads(flagged)["stages"] == json.loads(out)["stages"], err
    # Stage 0 (the embedding, 128,256 x 4,096 elements, and two 218,112,000-element layers in two chunks) binds in
    # backward with both chunks gathered in bf16 and both accumulators in fp32.
    stage = json.loads(out)["stages"][0]
    elements = 128_256 * 4096 + 2 * 218_112_000
    assert stage["binding_point"] == "backward"
    assert (stage["memory"]["communication_buffers_bytes"], stage["memory"]["gradients_bytes"]) == (2 * elements, 4 * elements)


def test_the_ddp_bucket_size_sets_what_the_overlapped_reduction_leaves_exposed(registry, llama):
    # Megatron-LM --ddp-bucket-size: the last bucket of the gradient reduction and the first of the parameter gather
    # stay exposed under the overlaps (hp_core/engine/timing/step.py); a bucket holding every parameter of the rank is
    # the whole reduction, as without the overlaps; 0 is Megatron's own max(40e6, 1e6 x dp).
    megatron = registry.runtime("megatron")
    parallel = ParallelSpec(dp=16, tp=1, seq_len=8192, global_batch_size=16)
    overlapped = apply_options(megatron, {"overlap_grad_reduce": True, "overlap_param_gather": True})

    def dp_seconds(runtime):
        return step_time(llama, parallel, registry=registry, hardware="h100-sxm", runtime=runtime).stages[0].data_parallel_seconds

    default = dp_seconds(overlapped)
    assert dp_seconds(apply_options(overlapped, {"ddp_bucket_size": 0})) == default
    assert dp_seconds(apply_options(overlapped, {"ddp_bucket_size": 40_000_000})) == default  # max(40e6, 16e6)
    sizes = [10_000_000, 40_000_000, 200_000_000, 1_000_000_000, 10_000_000_000]
    exposed = [dp_seconds(apply_options(overlapped, {"ddp_bucket_size": n})) for n in sizes]
    assert exposed == sorted(exposed) and exposed[0] < exposed[-1]
    assert exposed[-1] == pytest.approx(dp_seconds(megatron), rel=1e-12)  # one bucket: nothing hidden
    with pytest.raises(ConfigError, match=r"\$\.runtime\.options\.ddp_bucket_size: expected at least 0"):
        apply_options(megatron, {"ddp_bucket_size": -1})
