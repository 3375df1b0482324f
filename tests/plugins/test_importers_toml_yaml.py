"""The torchtitan and accelerate-fsdp importers: hand-derived documents from sample files, every plan the
torchtitan exporter writes imports back as the same plan, and bad files are one-line errors naming file and field."""

from __future__ import annotations

import json

import pytest

from hp_core.api import estimate, prepare
from hp_core.documents import parse_document
from hp_core.io.convert import ConfigFile, structure
from hp_core.io.job import resolve_job
from hp_plugins.exporters.torchtitan import export_torchtitan, torchtitan_candidates
from hp_plugins.importers.accelerate import import_accelerate_fsdp
from hp_plugins.importers.torchtitan import import_torchtitan
from cli_run import run  # tests/cli_run.py


def toml(data: dict) -> str:
    """A two-level dict as TOML (tables of scalars and lists of strings; dotted table names)."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)
    return "".join(f"[{table}]\n" + "".join(f"{k} = {value(v)}\n" for k, v in body.items()) + "\n"
                   for table, body in data.items())


BASE = {
    "job": {"dump_folder": "./outputs", "description": "Llama 3 8B training"},
    "model": {"name": "llama3", "flavor": "8B", "hf_assets_path": "./assets/hf/Llama-3.1-8B"},
    "optimizer": {"name": "AdamW", "lr": 3e-4},
    "training": {"local_batch_size": 1, "seq_len": 8192, "steps": 1000, "dataset": "c4"},
    "parallelism": {"data_parallel_shard_degree": -1, "tensor_parallel_degree": 2},
    "activation_checkpoint": {"mode": "selective", "selective_ac_option": "op"},
}


def test_a_torchtitan_job_maps_to_a_hand_derived_document(registry):
    data = dict(BASE, model=dict(BASE["model"], converters=["quantize.linear.float8"]),
                quantize={"linear": {"float8": {"enable_fsdp_float8_all_gather": True, "filter_fqns": ["output"]}}})
    job = import_torchtitan(data, registry, file="llama3_8b.toml", devices=16)
    # 16 devices / tp 2 = dp_shard 8; local batch 1 is the micro-batch; global = 1 * 8.
    assert job.document["parallel"] == {"dp": 8, "tp": 2, "pp": 1, "cp": 1, "sp": True, "ep": 1, "etp": 1,
                                        "seq_len": 8192, "reshard_after_forward": True, "micro_batch_size": 1,
                                        "global_batch_size": 8}
    assert job.document["model"] == "llama3-8b"
    # e347b1e5e wraps the embedding as an FSDP unit of its own (llama3/infra/parallelize.py apply_fsdp, lines 333-339).
    assert job.document["runtime"] == {"name": "fsdp2", "options": {"async_tp": False, "embedding_unit": "own"}}
    assert job.document["precision"] == {"optimizer": "adamw", "recipe": "torchao-float8-tensorwise"}
    # op-level SAC recomputes the fsdp2 runtime's op_sac switches on all 32 dense blocks
    assert job.document["recompute"] == {"default": "none", "layers": {"0-31": ["ffAct", "normOp"]}}
    assert job.unmapped == ()


def test_torchtitans_float8_recipe_names_are_the_torchao_float8_recipes(registry):
    """torchao's three float8 recipes (Float8LinearRecipeName: tensorwise, rowwise, rowwise_with_gw_hp) are hp's
    three torchao-float8 recipes (rowwise gathers bf16 as hp's recipe does; the job names no filter, so its head's
    warning stands); another name is priced as rowwise with a warning line naming it."""
    def recipe(name):
        job = import_torchtitan(dict(BASE, model=dict(BASE["model"], converters=["quantize.linear.float8"]),
                                     quantize={"linear": {"float8": {"recipe_name": name}}}), registry, devices=16)
        return job.document["precision"]["recipe"], job.unmapped

    head = "quantize.linear.float8.filter_fqns names no 'output': the output head runs in float8; priced in bf16"
    assert recipe("rowwise") == ("torchao-float8-rowwise", (head,))
    assert recipe("rowwise_with_gw_hp") == ("torchao-float8-rowwise-gw-hp", (head,))
    assert recipe("rowwise_v2") == ("torchao-float8-rowwise", (
        head, "quantize.linear.float8.recipe_name = 'rowwise_v2': priced as torchao-float8-rowwise"))


def test_torchtitans_float8_filters_beyond_the_head_are_a_warning(registry):
    """Float8Converter leaves the linears filter_fqns names in bf16, none by default (torchtitan's Float8Linear
    config: an empty list; its llama3 tomls name "output"); hp keeps the output head and a router's gate in bf16 and
    prices every other linear in float8: a filter without the head, another filter, or torchao's auto filter of small
    linears is one warning line, not a silent pricing."""
    def unmapped(filters):
        float8 = {"recipe_name": "rowwise"} if filters is None else {"recipe_name": "rowwise", "filter_fqns": filters}
        return import_torchtitan(dict(BASE, model=dict(BASE["model"], converters=["quantize.linear.float8"]),
                                      quantize={"linear": {"float8": float8}}), registry, devices=16).unmapped

    head = ("quantize.linear.float8.filter_fqns names no 'output': the output head runs in float8; priced in bf16",)
    assert unmapped(None) == unmapped([]) == head
    assert unmapped(["output"]) == unmapped("output, router.gate") == ()
    assert unmapped(["output", "attention.wk", "attention.wv"]) == (
        "quantize.linear.float8.filter_fqns = ['output', 'attention.wk', 'attention.wv']: priced with every linear "
        "layer but the output head and a router's gate in float8",)
    assert unmapped(["output", "auto_filter_small_kn"]) == (
        "quantize.linear.float8.filter_fqns = ['output', 'auto_filter_small_kn']: priced with every linear layer but "
        "the output head and a router's gate in float8 (torchao's auto filter of small linears is not priced)",)


def test_torchtitans_mx_converters_are_the_torchao_mx_recipes(registry):
    """torchtitan's MX converters (components/quantization/mx.py; --model.converters mx at 6fc499f, quantize.linear.mx
    and quantize.grouped_mm.mx at d880de2): both cuBLAS MXFP8 linear recipes are torchao-mxfp8, the grouped GEMMs of
    fqns ["experts"] torchao-mxfp8-experts, both converters torchao-mxfp8-linears-experts; the filters hp keeps anyway
    (["output"], the llama4 toml's ["output", "router.gate"]) are quiet, another one warning line, as is a grouped
    converter with no fqns (it converts nothing); other MX recipes, other fqns and a float8 converter beside them are
    refused naming the field."""
    def imported(converters, **sections):
        return import_torchtitan(dict(BASE, model=dict(BASE["model"], converters=converters), **sections), registry, devices=16)

    cases = (
        (["mx"], {"mx": {"recipe_name": "mxfp8_cublas_rceil"}}, "torchao-mxfp8"),
        (["quantize.linear.mx"], {"quantize": {"linear": {"mx": {"filter_fqns": ["output", "router.gate"]}}}}, "torchao-mxfp8"),
        (["quantize.grouped_mm.mx"], {"quantize": {"grouped_mm": {"mx": {"fqns": ["experts"]}}}}, "torchao-mxfp8-experts"),
        (["quantize.grouped_mm.mx", "quantize.linear.mx"], {"quantize": {"grouped_mm": {"mx": {"fqns": "experts"}}}},
         "torchao-mxfp8-linears-experts"),
        (["mx"], {"mx": {"moe_fqns_prototype": ["experts"]}}, "torchao-mxfp8-linears-experts"),
    )
    for converters, sections, recipe in cases:
        job = imported(converters, **sections)
        assert job.document["precision"] == {"optimizer": "adamw", "recipe": recipe}, converters
        assert job.unmapped == (), converters
    assert imported(["mx"], mx={"filter_fqns": ["output", "attention.wk"]}).unmapped == (
        "mx.filter_fqns = ['output', 'attention.wk']: priced with every linear layer but the output head and a router's "
        "gate in MXFP8",)
    empty = imported(["quantize.grouped_mm.mx"])
    assert "recipe" not in empty.document.get("precision", {})
    assert empty.unmapped == ("quantize.grouped_mm.mx.fqns = []: the MX grouped-GEMM converter converts no module "
                              "(its default); priced so",)
    with pytest.raises(Exception, match=r"mx\.recipe_name.*'mxfp8_emulated'.*torchao-mxfp8"):
        imported(["mx"], mx={"recipe_name": "mxfp8_emulated"})
    with pytest.raises(Exception, match=r"quantize\.grouped_mm\.mx\.fqns.*\['moe'\]"):
        imported(["quantize.grouped_mm.mx"], quantize={"grouped_mm": {"mx": {"fqns": ["moe"]}}})
    with pytest.raises(Exception, match="model.converters.*a float8 and an MX converter"):
        imported(["float8", "mx"])


def test_torchtitans_deepep_backend_is_the_runtime_option(registry):
    # job_config.py Parallelism.expert_parallel_comm_backend: "standard" (the default) or "deepep".
    deepep = dict(BASE, parallelism=dict(BASE["parallelism"], expert_parallel_comm_backend="deepep"))
    assert import_torchtitan(deepep, registry, devices=16).document["runtime"]["options"]["ep_all_to_all"] == "deepep"
    assert "ep_all_to_all" not in import_torchtitan(BASE, registry, devices=16).document["runtime"]["options"]
    other = dict(BASE, parallelism=dict(BASE["parallelism"], expert_parallel_comm_backend="nvshmem"))
    with pytest.raises(Exception, match="parallelism.expert_parallel_comm_backend"):
        import_torchtitan(other, registry, devices=16)


@pytest.mark.parametrize(("schedule", "vpp", "hp_schedule"), [("1F1B", 1, "1f1b"), ("Interleaved1F1B", 2, "interleaved_1f1b")])
def test_pipeline_stages_split_as_torchtitan_splits_them(registry, schedule, vpp, hp_schedule):
    # 32 layers + 1 (embedding) + 1 (output) = 34 over 4 stages: 9, 9, 8, 8, less one on the first and last.
    data = dict(BASE, training=dict(BASE["training"], local_batch_size=8, global_batch_size=64),
                parallelism={"data_parallel_shard_degree": 2, "pipeline_parallel_degree": 4 // vpp,
                             "pipeline_parallel_schedule": schedule, "pipeline_parallel_microbatch_size": 2},
                activation_checkpoint={"mode": "full"})
    parallel = import_torchtitan(data, registry).document["parallel"]
    assert parallel["layers_per_stage"] == [8, 9, 8, 7]
    assert (parallel["pp"], parallel["vpp"], parallel["schedule"]) == (4 // vpp, vpp, hp_schedule)
    assert (parallel["micro_batch_size"], parallel["global_batch_size"], parallel["reshard_after_forward"]) == (2, 64, False)


def test_torchtitans_default_checkpointing_is_every_second_block_of_each_rank(registry):
    data = {k: v for k, v in BASE.items() if k != "activation_checkpoint"}
    data["parallelism"] = {"data_parallel_shard_degree": 1, "pipeline_parallel_degree": 2}
    job = import_torchtitan(data, registry)
    # 34 effective layers over 2 stages: 17 each, so 16 blocks per rank; blocks 2, 4, ... of each rank.
    assert job.document["parallel"]["layers_per_stage"] == [16, 16]
    assert job.document["recompute"] == {"default": "none", "layers": {str(i): "full" for i in range(1, 32, 2)}}


def _resolved(registry, document):
    job = resolve_job(structure(document, ConfigFile, registry), registry)
    run_ = prepare(job.model, job.parallel, registry=registry, runtime=job.runtime)
    return job, [run_.resolve(g, s) for g, s in zip(run_.body_group, run_.settings(job.recompute))]


@pytest.mark.parametrize(("pp", "schedule"), [(1, "1F1B"), (2, "1F1B"), (2, "Interleaved1F1B"), (2, "GPipe")])
def test_every_plan_the_torchtitan_exporter_writes_imports_back_as_the_same_plan(registry, tmp_path, pp, schedule):
    base = dict(BASE, parallelism={"data_parallel_shard_degree": 2, "tensor_parallel_degree": 2,
                                   "pipeline_parallel_degree": pp, "pipeline_parallel_schedule": schedule},
                training=dict(BASE["training"], local_batch_size=4, global_batch_size=16))
    plain = import_torchtitan(base, registry)
    job, _ = _resolved(registry, dict(plain.document))
    candidates = torchtitan_candidates(job.model, job.parallel, registry=registry)
    # none, full, op, and every N-th block for N = 2 .. the most blocks a rank holds (32 on one rank, 16 on two)
    assert len(candidates) == 3 + (32 // pp - 1)
    seen = set()
    for plan in candidates:
        text = export_torchtitan(plan, job.model, job.parallel, registry=registry)
        exported = parse_document(text, "toml", "exported")
        merged = {k: dict(v) for k, v in base.items()}
        for table, body in exported.items():
            merged.setdefault(table, {}).update(body)
        path = tmp_path / "job.toml"
        path.write_text(toml(merged))
        back = registry.importer("torchtitan").read(str(path), registry=registry, devices=None, model=None)
        assert back.unmapped == plain.unmapped, text
        again, resolved = _resolved(registry, dict(back.document))
        assert again.parallel == job.parallel, text
        expected = resolve_job(structure(dict(plain.document), ConfigFile, registry), registry)
        run_ = prepare(expected.model, expected.parallel, registry=registry, runtime=expected.runtime)
        assert resolved == [run_.resolve(g, s) for g, s in zip(run_.body_group, run_.settings(plan))], text
        seen.add(text)
    assert len(seen) == len(candidates)


def test_torchtitan_from_the_command_line_with_warnings(capsys, tmp_path):
    path = tmp_path / "job.toml"
    data = dict(BASE, parallelism={"data_parallel_replicate_degree": 2, "data_parallel_shard_degree": 4},
                compile={"enable": True}, training=dict(BASE["training"], mystery_knob=3))
    path.write_text(toml(data))
    status, out, err = run(capsys, "estimate", "--from", "torchtitan", path, "--hardware", "h100-sxm", "--json")
    assert status == 0, err
    doc = json.loads(out)
    assert (doc["world_size"], doc["layout"]["dp"], doc["layout"]["global_batch_size"]) == (8, 8, 8)
    # HSDP: the fsdp2 runtime's hsdp_replicate (shards over 4, all-reduced across the 2 replicas), no warning.
    assert doc["provenance"]["runtime_options"]["hsdp_replicate"] == 2
    assert err.splitlines() == [
        "hp estimate: warning: compile.enable = true: priced as elementwise_kernels = fused where the model is "
        "compiled and loss_implementation = compiled where the loss is; torch.compile's other changes (what the "
        "model's blocks save for backward) are not priced",
        "hp estimate: warning: training.mystery_knob = 3: not mapped",
    ]


@pytest.mark.parametrize(("compile_", "kernels", "loss"), [
    (None, "eager", "upcast"), ({"enable": False}, "eager", "upcast"), ({"enable": True}, "fused", "compiled"),
    ({"enable": True, "components": ["model", "loss"]}, "fused", "compiled"),
    ({"enable": True, "components": ["loss"]}, "eager", "compiled"), ({"enable": True, "components": ["model"]}, "fused", "upcast"),
])
def test_torchtitan_compile_fuses_the_elementwise_kernels(registry, compile_, kernels, loss):
    from hp_plugins.importers.torchtitan import import_torchtitan

    data = dict(BASE, compile=compile_) if compile_ is not None else dict(BASE)
    imported = import_torchtitan(data, registry, devices=8)
    options = imported.document["runtime"]["options"]
    defaults = {o.name: o.default for o in registry.runtime("fsdp2").options}
    assert options.get("elementwise_kernels", defaults["elementwise_kernels"]) == kernels
    assert options.get("loss_implementation", defaults["loss_implementation"]) == loss


@pytest.mark.parametrize(("text", "flags", "message"), [
    ("[training\nseq_len = 1", (), "job.toml: is not valid TOML"),
    (toml(dict(BASE, training={"seq_len": "long"})), ("--devices", "8"), "job.toml: training.seq_len: expected an integer, got 'long'"),
    (toml(BASE), (), "job.toml: parallelism.data_parallel_shard_degree: -1 (torchtitan's default) means the devices"),
    (toml(dict(BASE, model={"name": "llama3", "flavor": "debugmodel"})), ("--devices", "8"),
     "job.toml: model.flavor: llama3 'debugmodel' is no hp preset"),
    (toml(dict(BASE, activation_checkpoint={"mode": "selective", "selective_ac_option": "x"})), ("--devices", "8"),
     "job.toml: activation_checkpoint.selective_ac_option: expected 'op' or a positive integer, got 'x'"),
])
def test_bad_torchtitan_files_are_one_line_errors(capsys, tmp_path, monkeypatch, text, flags, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.toml").write_text(text)
    status, out, err = run(capsys, "estimate", "--from", "torchtitan", "job.toml", *flags)
    assert status == 2 and out == "" and err.count("\n") == 1 and message in err, err


ACCELERATE = """\
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch_policy: BACKWARD_PRE
  fsdp_sharding_strategy: {strategy}
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_activation_checkpointing: true
  fsdp_use_orig_params: true
mixed_precision: bf16
machine_rank: 0
num_machines: 2
num_processes: 16
"""


@pytest.mark.parametrize(("strategy", "reshard"), [("FULL_SHARD", True), (1, True), ("SHARD_GRAD_OP", False), (2, False)])
def test_an_accelerate_fsdp_config_maps_to_a_hand_derived_document(registry, strategy, reshard):
    data = parse_document(ACCELERATE.format(strategy=strategy), "yaml", "accelerate.yaml")
    job = import_accelerate_fsdp(data, registry, model="llama3-8b")
    assert job.document == {"model": "llama3-8b", "parallel": {"zero": 3, "reshard_after_forward": reshard},
                            "runtime": "fsdp2", "recompute": "full"}
    assert (job.devices, job.unmapped) == (16, ())


def test_accelerates_parameter_offload_is_the_fsdp2_option(registry):
    """``fsdp_offload_params: true`` (Accelerate's FullyShardedDataParallelPlugin.cpu_offload) is the fsdp2 option
    ``cpu_offload``, its time named as not priced; ``fsdp_cpu_offload``, not a key Accelerate reads, prices nothing."""
    text = ACCELERATE.format(strategy="FULL_SHARD").replace("  fsdp_use_orig_params: true",
                                                            "  fsdp_use_orig_params: true\n  fsdp_offload_params: true")
    job = import_accelerate_fsdp(parse_document(text, "yaml", "accelerate.yaml"), registry, model="llama3-8b")
    assert job.document["runtime"] == {"name": "fsdp2", "options": {"cpu_offload": True}}
    assert job.unmapped == ("fsdp_config.fsdp_offload_params = true: the fsdp2 option cpu_offload (the sharded "
                            "parameters, their gradients and the optimizer states in host memory); the step time prices "
                            "neither the copies over the host link nor the optimizer step on the host",)
    stray = ACCELERATE.format(strategy="FULL_SHARD").replace("  fsdp_use_orig_params: true",
                                                             "  fsdp_use_orig_params: true\n  fsdp_cpu_offload: true")
    job = import_accelerate_fsdp(parse_document(stray, "yaml", "accelerate.yaml"), registry, model="llama3-8b")
    assert job.document["runtime"] == "fsdp2" and len(job.unmapped) == 1 and "not a key Accelerate reads" in job.unmapped[0]
    offloaded = resolve_job(structure(dict(import_accelerate_fsdp(parse_document(text, "yaml", "a.yaml"), registry,
                                                                  model="llama3-8b").document, parallel={
        "dp": 16, "zero": 3, "reshard_after_forward": True, "seq_len": 4096}), ConfigFile, registry), registry)
    plain = resolve_job(structure({"model": "llama3-8b", "runtime": "fsdp2", "recompute": "full", "parallel": {
        "dp": 16, "zero": 3, "reshard_after_forward": True, "seq_len": 4096}}, ConfigFile, registry), registry)
    held = [estimate(j.model, j.parallel, registry=registry, runtime=j.runtime, recompute=j.recompute).peak_bytes
            for j in (offloaded, plain)]
    assert held[0] < held[1]


def test_accelerate_from_the_command_line_matches_the_hand_written_job(capsys, tmp_path, registry):
    path = tmp_path / "fsdp.yaml"
    path.write_text(ACCELERATE.format(strategy="SHARD_GRAD_OP"))
    status, out, err = run(capsys, "estimate", "--from", "accelerate-fsdp", path, "--model", "llama3-8b",
                           "--seq-len", "4096", "--json")
    assert status == 0 and err == "", err
    doc = json.loads(out)
    assert (doc["world_size"], doc["layout"]["dp"], doc["layout"]["zero"]) == (16, 16, 3)
    hand = resolve_job(structure({"model": "llama3-8b", "runtime": "fsdp2", "recompute": "full", "parallel": {
        "dp": 16, "zero": 3, "reshard_after_forward": False, "seq_len": 4096}}, ConfigFile, registry), registry)
    reference = estimate(hand.model, hand.parallel, registry=registry, runtime="fsdp2", recompute=hand.recompute)
    assert [s["memory"]["peak_bytes"] for s in doc["stages"]] == [s.peak_bytes for s in reference.stages]


@pytest.mark.parametrize(("text", "flags", "message"), [
    (ACCELERATE.format(strategy="FULL_SHARD"), (), "--model: an Accelerate config does not name the model"),
    ("fsdp_config: [unclosed\n", ("--model", "llama3-8b"), "fsdp.yaml: is not valid YAML"),
    (ACCELERATE.format(strategy="NO_SHARD"), ("--model", "llama3-8b"), "fsdp.yaml: fsdp_config.fsdp_sharding_strategy: NO_SHARD is DDP"),
    (ACCELERATE.format(strategy="HALF_SHARD"), ("--model", "llama3-8b"), "fsdp.yaml: fsdp_config.fsdp_sharding_strategy: expected one of"),
    (ACCELERATE.replace("num_processes: 16", "num_processes: many"), ("--model", "llama3-8b"),
     "fsdp.yaml: num_processes: expected an integer, got 'many'"),
    (ACCELERATE.replace("distributed_type: FSDP", "distributed_type: DEEPSPEED"), ("--model", "llama3-8b"),
     "fsdp.yaml: distributed_type: expected FSDP"),
])
def test_bad_accelerate_files_are_one_line_errors(capsys, tmp_path, monkeypatch, text, flags, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fsdp.yaml").write_text(text)
    status, out, err = run(capsys, "estimate", "--from", "accelerate-fsdp", "fsdp.yaml", "--seq-len", "4096", *flags)
    assert status == 2 and out == "" and err.count("\n") == 1 and message in err, err


def test_hybrid_shard_is_a_warning(capsys, tmp_path):
    path = tmp_path / "fsdp.yaml"
    path.write_text(ACCELERATE.format(strategy="HYBRID_SHARD"))
    status, _, err = run(capsys, "estimate", "--from", "accelerate-fsdp", path, "--model", "llama3-8b", "--seq-len", "4096")
    assert status == 0
    assert err == ("hp estimate: warning: fsdp_config.fsdp_sharding_strategy = HYBRID_SHARD: shards within each of 2 "
                   "machines only; priced as sharding over all 16 devices (memory under-estimated)\n")


def test_torchtitans_flex_attention_flavors_set_the_attention_kernel(registry):
    # llama3 8B_flex is the 8B model with attn_type "flex", attn_mask_type "block_causal" (torchtitan
    # models/llama3/__init__.py at e347b1e5e): the same preset, FlexAttention, the document mask a warning.
    flex = import_torchtitan(dict(BASE, model=dict(BASE["model"], flavor="8B_flex")), registry, devices=16)
    assert flex.document["model"] == "llama3-8b"
    assert flex.document["runtime"] == {"name": "fsdp2", "options": {"async_tp": False, "embedding_unit": "own",
                                                                     "attention_kernel": "flex"}}
    assert flex.unmapped == ("model llama3 8B_flex: FlexAttention's block_causal (per-document) mask is not priced; "
                             "priced as one causal sequence",)
    # deepseek_v3 16B (attn_type flex, block_causal) through --model; gpt_oss 20b (flex by default, causal: no warning
    # beyond the model's own).
    dsv3 = import_torchtitan(dict(BASE, model={"name": "deepseek_v3", "flavor": "16B"}), registry, devices=16,
                             model="deepseek-v3")
    assert dsv3.document["runtime"]["options"]["attention_kernel"] == "flex" and len(dsv3.unmapped) == 2
    oss = import_torchtitan(dict(BASE, model={"name": "gpt_oss", "flavor": "20b"}), registry, devices=16, model="gpt-oss-20b")
    assert oss.document["runtime"]["options"]["attention_kernel"] == "flex"
    assert oss.unmapped == ("model gpt_oss 20b: no hp preset; priced as --model gpt-oss-20b",)
    # The 8B flavor (attn_type's default "sdpa") states no kernel: the runtime's default, sdpa.
    assert "attention_kernel" not in import_torchtitan(BASE, registry, devices=16).document["runtime"]["options"]


def test_torchtitans_embedding_unit(registry):
    # e347b1e5e's apply_fsdp (llama3/infra/parallelize.py lines 333-339) wraps the embedding with the layers' reshard
    # rule: embedding_unit own (under PP by default not resharded, which the runtime prices as the root's); under PP
    # with "always" that unit reshards, which the runtime does not price: the root's, with a warning line.
    assert import_torchtitan(BASE, registry, devices=16).document["runtime"]["options"]["embedding_unit"] == "own"
    data = dict(BASE, training=dict(BASE["training"], local_batch_size=8, global_batch_size=64),
                parallelism={"data_parallel_shard_degree": 2, "pipeline_parallel_degree": 4,
                             "pipeline_parallel_microbatch_size": 2},
                activation_checkpoint={"mode": "full"})
    assert import_torchtitan(data, registry).document["runtime"]["options"]["embedding_unit"] == "own"
    always = dict(data, parallelism=dict(data["parallelism"], fsdp_reshard_after_forward="always"))
    job = import_torchtitan(always, registry)
    assert "embedding_unit" not in job.document["runtime"]["options"]
    assert any("fsdp_reshard_after_forward = 'always' under PP" in line for line in job.unmapped)


def test_a_tied_embedding_imports_as_the_root_s(registry):
    """A tied embedding is one FSDP unit with the final norm and the head, resharded only under "always"
    (torchtitan/distributed/fsdp.py apply_fsdp_to_decoder lines 177-189 at bcc09297a, since 29e27d038): the root's,
    embedding_unit root, whether torchtitan's flavor ties it (qwen3 0.6B, enable_weight_tying at e347b1e5e) or the
    model hp prices does (gemma-2-9b's tie_word_embeddings); an untied one (llama3 8B) keeps its own unit."""
    untied = import_torchtitan(BASE, registry, devices=16)
    assert untied.document["runtime"]["options"]["embedding_unit"] == "own"
    qwen = import_torchtitan(dict(BASE, model={"name": "qwen3", "flavor": "0.6B"}), registry, devices=16,
                             model="llama3-8b")
    assert qwen.document["runtime"]["options"]["embedding_unit"] == "root"
    assert qwen.unmapped == ("model qwen3 0.6B: no hp preset; priced as --model llama3-8b",)
    gemma = import_torchtitan(dict(BASE, model={"name": "llama3", "flavor": "debugmodel"}), registry, devices=16,
                              model="gemma-2-9b")
    assert gemma.document["runtime"]["options"]["embedding_unit"] == "root"
    # Under "always" the tied unit reshards after forward, which root does not price: one warning line.
    always = import_torchtitan(dict(BASE, model={"name": "qwen3", "flavor": "0.6B"},
                                    parallelism=dict(BASE["parallelism"], fsdp_reshard_after_forward="always")),
                               registry, devices=16, model="llama3-8b")
    assert always.document["runtime"]["options"]["embedding_unit"] == "root"
    assert always.unmapped[1:] == ("parallelism.fsdp_reshard_after_forward = 'always' with a tied embedding: its "
                                   "FSDP unit (embedding, final norm and head), resharded after forward, is priced "
                                   "as kept gathered in the root unit",)
    # The imported document resolves with the runtime's option set.
    job = resolve_job(structure(dict(qwen.document), ConfigFile, registry), registry)
    assert job.runtime.option_values["embedding_unit"] == "root"


def test_torchtitans_async_tp_is_stated_under_tp_alone_and_needs_the_model_compiled(registry, capsys, tmp_path,
                                                                                      monkeypatch):
    # torchtitan (e347b1e5e) enables async TP inside its TP branch (llama3/infra/parallelize.py) and refuses it unless
    # the model is compiled (distributed/tensor_parallel.py maybe_enable_async_tp raises RuntimeError).
    compiled = {"enable": True, "components": ["model", "loss"]}
    on = dict(BASE, parallelism=dict(BASE["parallelism"], enable_async_tensor_parallel=True), compile=compiled)
    job = import_torchtitan(on, registry, devices=16)
    assert job.document["runtime"]["options"]["async_tp"] is True and job.document["parallel"]["tp"] == 2
    assert not any("async" in line for line in job.unmapped)
    at_tp1 = dict(on, parallelism={"data_parallel_shard_degree": -1, "tensor_parallel_degree": 1,
                                   "enable_async_tensor_parallel": True})
    job = import_torchtitan(at_tp1, registry, devices=16)
    assert job.document["runtime"]["options"]["async_tp"] is False
    (line,) = [line for line in job.unmapped if "enable_async_tensor_parallel" in line]
    assert "tensor_parallel_degree 1" in line and "nothing is priced" in line
    # Under TP without the model compiled torchtitan does not start: one line naming the field, exit 2.
    for compile_ in (None, {"enable": False}, {"enable": True, "components": ["loss"]}):
        eager = {k: v for k, v in on.items() if k != "compile"}
        if compile_ is not None:
            eager["compile"] = compile_
        monkeypatch.chdir(tmp_path)
        (tmp_path / "job.toml").write_text(toml(eager))
        status, out, err = run(capsys, "estimate", "--from", "torchtitan", "job.toml", "--devices", "16")
        assert status == 2 and out == "" and err.count("\n") == 1, err
        assert "job.toml: parallelism.enable_async_tensor_parallel: true needs the model compiled" in err


def test_torchtitans_cpu_offload_is_the_fsdp2_option(registry):
    """``training.enable_cpu_offload``: FSDP2's CPUOffloadPolicy, the fsdp2 option ``cpu_offload`` (memory), with the
    warning that its time is not priced; the estimate then holds no sharded state on the device."""
    from hp_core.api import estimate
    from hp_core.io.convert import ConfigFile, structure
    from hp_core.io.job import resolve_job

    offloaded = import_torchtitan(dict(BASE, training=dict(BASE["training"], enable_cpu_offload=True)), registry, devices=16)
    assert offloaded.document["runtime"]["options"]["cpu_offload"] is True
    assert [line for line in offloaded.unmapped if "enable_cpu_offload" in line] == [
        "training.enable_cpu_offload = true: the fsdp2 option cpu_offload (the sharded parameters, their gradients and "
        "the optimizer states in host memory); the step time prices neither the copies of the shards and gradients "
        "over the host link nor the optimizer step on the host"]
    plain = import_torchtitan(BASE, registry, devices=16)
    assert "cpu_offload" not in plain.document["runtime"]["options"]

    def peak(document) -> int:
        job = resolve_job(structure(dict(document), ConfigFile, registry), registry)
        found = estimate(job.model, job.parallel, registry=registry, runtime=job.runtime, recompute=job.recompute,
                         hardware="h100-sxm")
        return found.peak_bytes, sum(s.memory.optimizer_states_bytes for s in found.stages)

    (with_offload, optimizer_offloaded), (without, optimizer) = peak(offloaded.document), peak(plain.document)
    assert with_offload < without and optimizer_offloaded == 0 < optimizer
