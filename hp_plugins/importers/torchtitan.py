"""The ``torchtitan`` importer: a torchtitan job TOML (``--job.config_file``) as an ``hp`` job.

Read against torchtitan ``torchtitan/config/job_config.py`` at commit e347b1e5e (2026-02-15, the
last before torchtitan replaced its TOML job files with Python config classes), whose defaults
fill what a file leaves out:

* ``[model] name, flavor``: a preset where torchtitan's flavor is the same model
  (:data:`PRESETS`: ``llama3`` ``8B``/``8B_flex``/``70B``/``405B``, ``torchtitan/models/llama3/__init__.py``);
  any other is refused unless ``--model`` names one (then one warning line); a flavor whose model
  args set ``attn_type = "flex"`` (:data:`FLEX_FLAVORS`) runs FlexAttention (option
  ``attention_kernel: flex``), its ``block_causal`` document mask not priced (one warning line);
* ``[parallelism]``: ``tensor_parallel_degree`` (with sequence parallelism, which torchtitan's
  TP plan always applies to the norms), ``pipeline_parallel_degree``, ``context_parallel_degree``,
  ``expert_parallel_degree``, ``expert_tensor_parallel_degree``; dp is
  ``data_parallel_replicate_degree * data_parallel_shard_degree``, a shard degree of -1 being
  what is left of the devices (``parallel_dims.py``: ``world_size // (dp_replicate * cp * tp * pp)``),
  so ``--devices`` is required then; ``fsdp_reshard_after_forward`` (``default``: on unless pipeline
  parallel, ``torchtitan/models/llama3/infra/parallelize.py``), the embedding an FSDP unit of its own with the
  layers' reshard rule (``apply_fsdp`` lines 333-339, torchtitan's wrapping since 83e6941: the ``fsdp2`` option
  ``embedding_unit: own``; under PP with ``always`` the root's, one warning line), but a tied embedding
  (:data:`TIED_FLAVORS`, or a priced model whose head is tied) one unit with the final norm and the head, resharded
  only under ``always`` (``torchtitan/distributed/fsdp.py`` lines 177-189 at bcc09297a, since 29e27d038): the
  root's, ``embedding_unit: root`` (with ``always`` one warning line); ``pipeline_parallel_schedule`` by
  the schedules' ``trainer_names``; the layers per stage as
  ``torchtitan/distributed/pipeline_parallel.py`` ``generate_llm_fqn_per_model_part`` splits them
  (the first and last stage ``*_stage_less_layers`` lighter; ``pipeline_parallel_layers_per_stage``,
  else one stage per rank, two for looped schedules); ``enable_async_tensor_parallel`` (option
  ``async_tp``; at TP 1, where torchtitan applies nothing, not stated, one warning line; refused without the model
  compiled, as torchtitan refuses it); ``expert_parallel_comm_backend`` ``deepep`` (option ``ep_all_to_all: deepep``);
* ``[training]``: ``local_batch_size`` (the micro-batch without PP; with PP the micro-batch is
  ``pipeline_parallel_microbatch_size``), ``global_batch_size`` (-1: local * dp), ``seq_len``,
  ``mixed_precision_param`` / ``mixed_precision_reduce`` (bf16 / fp32: the ``fsdp2`` runtime's),
  ``dtype = "bfloat16"`` (parameters, gradients and moments in bf16);
* ``[activation_checkpoint] mode``: ``none``, ``full``, ``selective`` with ``selective_ac_option``
  ``op`` (the ``fsdp2`` runtime's ``op_sac`` switches on every layer) or ``N`` (every N-th block of
  each pipeline rank), as the ``torchtitan`` exporter writes them (torchtitan's default:
  selective, ``"2"``);
* ``[optimizer] name`` ``AdamW``/``Adam``; ``[model] converters`` with ``quantize.linear.float8``
  (or the older ``float8``) and ``recipe_name`` as the ``torchao-float8-*`` precision recipes;
  ``quantize.linear.mx`` (or the older ``mx``) with ``recipe_name`` ``mxfp8_cublas`` or
  ``mxfp8_cublas_rceil`` as ``torchao-mxfp8`` (another MX recipe is refused; a ``filter_fqns``
  other than ``["output"]`` or ``["output", "router.gate"]`` one warning line), and
  ``quantize.grouped_mm.mx`` with ``fqns = ["experts"]`` (at 6fc499f ``mx.moe_fqns_prototype``) as
  ``torchao-mxfp8-experts``, both as ``torchao-mxfp8-linears-experts``.

Settings that change nothing hp prices (data, logging, checkpoints, learning rate, ...:
:data:`QUIET`) are dropped quietly; any other is one warning line.
"""

from __future__ import annotations

import math
from typing import Any

from hp_core.importers import ImportedJob, Importer
from hp_core.markers import hookimpl
from hp_core.specs import Setting
from hp_plugins.importers._common import Fields, layout_of, plan_document, read_mapping

__all__ = ["FLEX_FLAVORS", "PRESETS", "QUIET", "TIED_FLAVORS", "hp_importers", "import_torchtitan"]

# torchtitan model flavors that are an hp preset (torchtitan/models/llama3/__init__.py llama3_args:
# 8B dim 4096 x 32 layers, 70B 8192 x 80, 405B 16384 x 126, GQA 8 kv heads, vocab 128256).
PRESETS = {("llama3", "8B"): "llama3-8b", ("llama3", "8B_flex"): "llama3-8b", ("llama3", "70B"): "llama3-70b",
           ("llama3", "405B"): "llama3-405b"}
# Flavors whose model args set attn_type "flex" (FlexAttention), with their attn_mask_type, at e347b1e5e:
# torchtitan/models/{llama3,llama4,deepseek_v3}/__init__.py; gpt_oss/model/args.py GptOssModelArgs defaults to flex.
FLEX_FLAVORS = {
    **{("llama3", f): "block_causal" for f in ("debugmodel_flex_attn", "8B_flex")},
    **{("llama4", f): "block_causal" for f in ("debugmodel_irope", "17bx16e_irope", "17bx128e_irope")},
    **{("deepseek_v3", f): "block_causal" for f in ("debugmodel_flex_attn", "16B", "236B", "671B")},
    **{("gpt_oss", f): "causal" for f in ("debugmodel", "20b", "120b")},
}

# Flavors whose model args set enable_weight_tying at e347b1e5e (torchtitan/models/qwen3/__init__.py lines 44, 57, 70,
# 83: debugmodel, 0.6B, 1.7B, 4B); no other model under torchtitan/models there ties its head to the embedding.
TIED_FLAVORS = frozenset(("qwen3", f) for f in ("debugmodel", "0.6B", "1.7B", "4B"))

# Sections and keys with no effect on memory or step time as hp prices them.
QUIET_SECTIONS = ("job.", "profiling.", "metrics.", "checkpoint.", "lr_scheduler.", "comm.", "validation.",
                  "fault_tolerance.", "memory_estimation.", "debug.")
QUIET = frozenset("""
model.hf_assets_path model.tokenizer_path model.print_after_conversion optimizer.lr optimizer.eps optimizer.beta1
optimizer.beta2 optimizer.weight_decay optimizer.implementation optimizer.early_step_in_backward training.dataset
training.dataset_path training.max_norm training.steps training.gc_freq training.gc_debug training.seed
training.deterministic activation_checkpoint.preserve_rng_state activation_checkpoint.determinism_check
activation_checkpoint.debug activation_checkpoint.early_stop parallelism.disable_loss_parallel
parallelism.context_parallel_load_balancer
quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp
float8.precompute_float8_dynamic_scale_for_fsdp
""".split())

# PyTorch schedules torchtitan runs with more than one stage per rank (torch/distributed/pipelining/schedules.py
# PipelineScheduleMulti subclasses).
_LOOPED = {"Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"}
_RUNTIME = "fsdp2"


def _quiet(key: str) -> bool:
    return key in QUIET or key.startswith(QUIET_SECTIONS) or key.startswith("training.dataloader.")


def _tied(name: str, flavor: str, model: Any, seq_len: int, registry) -> bool:
    """Whether the head's weight is the embedding's: torchtitan's flavor ties it (:data:`TIED_FLAVORS`), or the model
    hp prices does (a group's ``tie_word_embeddings``, the ``output`` kind's)."""
    if (name, str(flavor)) in TIED_FLAVORS:
        return True
    priced = layout_of({"model": model, "parallel": {"seq_len": seq_len}}, registry)[0]
    return any(getattr(group.config, "tie_word_embeddings", False) for group in priced.layers)


def _stage_layers(layers: int, stages: int, first_less: int, last_less: int) -> list[int]:
    """Body layers per stage as torchtitan ``generate_llm_fqn_per_model_part`` assigns them."""
    if stages == 1:
        return [layers]
    effective = layers + first_less + last_less
    each, extra = divmod(effective, stages)
    counts = [each + (1 if i < extra else 0) for i in range(stages)]
    counts[0] -= first_less
    counts[-1] -= last_less
    return counts


def import_torchtitan(data: dict[str, Any], registry, *, file: str = "torchtitan.toml", devices: int | None = None,
                      model: str | None = None) -> ImportedJob:
    """An ``hp`` config document from a parsed torchtitan job TOML (module docstring)."""
    f = Fields(data, file, _quiet)
    unmapped: list[str] = []
    name, flavor = f.get("model.name", "llama3", str), f.get("model.flavor", "debugmodel", str)
    preset = PRESETS.get((name, str(flavor)))
    if preset is None:
        if model is None:
            raise f.error("model.flavor", f"{name} {flavor!r} is no hp preset (mapped: "
                          f"{', '.join(f'{n} {v}' for n, v in PRESETS)}); state the model with --model")
        unmapped.append(f"model {name} {flavor}: no hp preset; priced as --model {model}")
    document: dict[str, Any] = {"model": preset or model}

    tp, pp = f.degree("parallelism.tensor_parallel_degree"), f.degree("parallelism.pipeline_parallel_degree")
    cp = f.degree("parallelism.context_parallel_degree")
    replicate = f.degree("parallelism.data_parallel_replicate_degree")
    shard = f.get("parallelism.data_parallel_shard_degree", -1, int)
    if shard == -1:
        if devices is None:
            raise f.error("parallelism.data_parallel_shard_degree", "-1 (torchtitan's default) means the devices "
                          "left after replicate*cp*tp*pp; state the device count with --devices")
        if devices % (replicate * cp * tp * pp):
            raise f.error("parallelism.data_parallel_shard_degree", f"-1 with --devices {devices}: not a multiple of "
                          f"data_parallel_replicate_degree*cp*tp*pp = {replicate * cp * tp * pp}")
        shard = devices // (replicate * cp * tp * pp)
    elif shard < 1:
        raise f.error("parallelism.data_parallel_shard_degree", f"expected -1 or an integer >= 1, got {shard}")
    # torchtitan parallelize.py: FSDP (HSDP with a replicate degree: the mesh ("dp_replicate", "dp_shard_cp")) wherever
    # dp_shard or cp is above 1 (parallel_dims.py fsdp_enabled), else DDP over the replicate degree alone.
    hsdp = replicate > 1 and (shard > 1 or cp > 1)
    if replicate > 1 and not hsdp:
        unmapped.append(f"parallelism.data_parallel_replicate_degree = {replicate}: DDP priced as FSDP sharding over dp")
    dp = replicate * shard
    parallel: dict[str, Any] = {
        "dp": dp, "tp": tp, "pp": pp, "cp": cp, "sp": tp > 1,
        "ep": f.degree("parallelism.expert_parallel_degree"),
        "etp": f.degree("parallelism.expert_tensor_parallel_degree"),
        "seq_len": f.degree("training.seq_len", 2048),
    }
    if cp > 1:
        rotate = f.get("parallelism.context_parallel_rotate_method", "allgather", str)
        unmapped.append(f"parallelism.context_parallel_rotate_method = {rotate!r}: priced as hp's p2p ring exchange")
    else:
        f.get("parallelism.context_parallel_rotate_method")
    reshard = f.get("parallelism.fsdp_reshard_after_forward", "default", str, ("default", "always", "never"))
    parallel["reshard_after_forward"] = pp == 1 if reshard == "default" else reshard == "always"

    local = f.degree("training.local_batch_size", 8)
    if pp > 1:
        parallel["micro_batch_size"] = f.degree("parallelism.pipeline_parallel_microbatch_size", 1)
        if local % parallel["micro_batch_size"]:
            raise f.error("training.local_batch_size", f"{local} is not a multiple of "
                          f"parallelism.pipeline_parallel_microbatch_size = {parallel['micro_batch_size']}")
    else:
        parallel["micro_batch_size"] = local
    wanted = f.get("training.global_batch_size", -1, int)
    parallel["global_batch_size"] = wanted if wanted > 0 else local * dp

    schedule = f.get("parallelism.pipeline_parallel_schedule", "1F1B", str)
    if pp > 1:
        found = [s.name for s in registry.schedules if s.trainer_names.get("torchtitan") == schedule]
        if not found:
            runs = ", ".join(s.trainer_names["torchtitan"] for s in registry.schedules if "torchtitan" in s.trainer_names)
            raise f.error("parallelism.pipeline_parallel_schedule", f"{schedule!r} is not a schedule hp prices "
                          f"for torchtitan ({runs})")
        parallel["schedule"] = found[0]
        per_stage = f.get("parallelism.pipeline_parallel_layers_per_stage", None, int)
        first = f.get("parallelism.pipeline_parallel_first_stage_less_layers", 1, int)
        last = f.get("parallelism.pipeline_parallel_last_stage_less_layers", 1, int)
        layers = layout_of({"model": document["model"], "parallel": {"seq_len": parallel["seq_len"]}}, registry)[1].count
        stages = (math.ceil((layers + first + last) / per_stage) if per_stage
                  else pp * (2 if schedule in _LOOPED else 1))
        if stages % pp:
            raise f.error("parallelism.pipeline_parallel_layers_per_stage", f"{per_stage} gives {stages} stages, "
                          f"not a multiple of pipeline_parallel_degree = {pp}")
        parallel["vpp"] = stages // pp
        parallel["layers_per_stage"] = _stage_layers(layers, stages, first, last)
    for key in ("module_fqns_per_model_part", "pipeline_parallel_schedule_csv"):
        if f.get(f"parallelism.{key}") not in (None, "", []):
            unmapped.append(f"parallelism.{key}: not mapped (stages from torchtitan's default split)")
    document["parallel"] = parallel
    # torchtitan enables async TP inside its TP branch alone (llama3/infra/parallelize.py: maybe_enable_async_tp after
    # apply_tp, under parallel_dims.tp_enabled, at e347b1e5e): at TP 1 the flag does nothing, and hp states nothing.
    async_tp = f.get("parallelism.enable_async_tensor_parallel", False, bool)
    if async_tp and tp == 1:
        unmapped.append("parallelism.enable_async_tensor_parallel = true at tensor_parallel_degree 1: torchtitan applies "
                        "it under TP alone (llama3/infra/parallelize.py), so nothing is priced for it")
        async_tp = False
    document["runtime"] = {"name": _RUNTIME, "options": {"async_tp": async_tp}}
    # e347b1e5e wraps the embedding as an FSDP unit of its own with the layers' reshard rule (llama3/infra/parallelize.py
    # apply_fsdp, lines 333-339; so from 83e6941): the fsdp2 runtime's embedding_unit own. Under PP with the policy
    # "always" (the embedding resharded too) that option is not priced: the root's, with a warning line.
    # A tied embedding (the head's weight the embedding's) is one unit with the final norm and the head, resharded
    # only under "always" (torchtitan 29e27d038, 2026-03-11, fixing the tie e347b1e5e's separate units broke;
    # torchtitan/distributed/fsdp.py apply_fsdp_to_decoder lines 177-189 at bcc09297a): the root's, embedding_unit root.
    if _tied(name, flavor, document["model"], parallel["seq_len"], registry):
        document["runtime"]["options"]["embedding_unit"] = "root"
        if reshard == "always":
            unmapped.append("parallelism.fsdp_reshard_after_forward = 'always' with a tied embedding: its FSDP unit "
                            "(embedding, final norm and head), resharded after forward, is priced as kept gathered "
                            "in the root unit")
    elif pp > 1 and parallel["reshard_after_forward"]:
        unmapped.append("parallelism.fsdp_reshard_after_forward = 'always' under PP: the embedding's own FSDP unit, "
                        "resharded after forward, is priced as kept gathered in the root unit")
    else:
        document["runtime"]["options"]["embedding_unit"] = "own"
    if hsdp:
        document["runtime"]["options"]["hsdp_replicate"] = replicate
    # job_config.py Parallelism.expert_parallel_comm_backend: "standard" (torch all-to-all) or "deepep".
    backend = f.get("parallelism.expert_parallel_comm_backend", "standard", str, ("standard", "deepep"))
    if backend == "deepep":
        document["runtime"]["options"]["ep_all_to_all"] = "deepep"
    mask = FLEX_FLAVORS.get((name, str(flavor)))
    if mask is not None:
        document["runtime"]["options"]["attention_kernel"] = "flex"
        if mask == "block_causal":
            unmapped.append(f"model {name} {flavor}: FlexAttention's block_causal (per-document) mask is not priced; "
                            "priced as one causal sequence")

    precision: dict[str, Any] = {}
    if f.get("training.mixed_precision_param", "bfloat16", str) != "bfloat16":
        unmapped.append(f"training.mixed_precision_param = {f.get('training.mixed_precision_param')!r}: "
                        "priced as bfloat16 compute")
    f.get("training.mixed_precision_reduce", "float32", str, ("float32",))
    if f.get("training.dtype", "float32", str, ("float32", "bfloat16")) == "bfloat16":
        precision.update(param_bytes=2, grad_bytes=2, moment_bytes=2)  # job_config.py Training.dtype: all in bf16
    optimizer = f.get("optimizer.name", "AdamW", str)
    if optimizer in ("AdamW", "Adam"):
        precision["optimizer"] = optimizer.lower()
    else:
        unmapped.append(f"optimizer.name = {optimizer!r}: not mapped; priced as AdamW")
    recipe = _recipe(f, unmapped)
    if recipe is not None:
        precision["recipe"] = recipe
    if f.get("training.enable_cpu_offload", False, bool):
        # torchtitan passes it to fully_shard as offload_policy=CPUOffloadPolicy() (torchtitan/distributed/fsdp.py
        # apply_fsdp_to_decoder, cpu_offload; configs.py Training.enable_cpu_offload: "CPU offloading of parameters,
        # gradients, and optimizer states in FSDP"): the fsdp2 option that prices that in memory.
        document["runtime"]["options"]["cpu_offload"] = True
        unmapped.append("training.enable_cpu_offload = true: the fsdp2 option cpu_offload (the sharded parameters, their "
                        "gradients and the optimizer states in host memory); the step time prices neither the copies of "
                        "the shards and gradients over the host link nor the optimizer step on the host")
    components = f.get("compile.components", ["model", "loss"], list)  # torchtitan job_config.py Compile's default
    f.get("compile.backend")
    compiled = f.get("compile.enable", False, bool)
    if async_tp and not (compiled and "model" in components):
        # torchtitan/distributed/tensor_parallel.py maybe_enable_async_tp at e347b1e5e raises RuntimeError("Async TP
        # requires 'model' in --compile.components and --compile.enable"): such a job does not start.
        raise f.error("parallelism.enable_async_tensor_parallel", "true needs the model compiled (torchtitan's "
                      "maybe_enable_async_tp refuses it otherwise: 'Async TP requires model in --compile.components and "
                      "--compile.enable'); set compile.enable = true with 'model' in compile.components, or drop it")
    if compiled:
        if "model" in components:  # inductor fuses each pointwise chain of the compiled blocks (runtime option)
            document["runtime"]["options"]["elementwise_kernels"] = "fused"
        if "loss" in components:  # components/loss.py build_cross_entropy_loss: torch.compile(cross_entropy_loss)
            document["runtime"]["options"]["loss_implementation"] = "compiled"
        unmapped.append("compile.enable = true: priced as elementwise_kernels = fused where the model is compiled and "
                        "loss_implementation = compiled where the loss is; torch.compile's other changes (what the "
                        "model's blocks save for backward) are not priced")
    if precision:
        document["precision"] = precision
    recompute = _recompute(f, document, registry, unmapped)
    if recompute is not None:
        document["recompute"] = recompute
    return ImportedJob(document, tuple(unmapped + f.unread()), None)


# torchtitan's MX linear converter: its e347b1e5e name and section, and the older one (6fc499f, the build of torchao's
# B200 table: --model.converters mx, [mx]); MXConverter swaps every nn.Linear whose name matches no filter_fqns entry
# (default ["output"], the head hp keeps in bf16 anyway).
_MX = {"quantize.linear.mx": "quantize.linear.mx", "mx": "mx"}
# MXLinearConfig.from_recipe_name's recipes with the cuBLAS MXFP8 GEMM (torchao mx_formats/config.py): the recipe
# torchao-mxfp8; they differ only in the E8M0 scale's rounding, which hp does not price.
_MX_RECIPES = ("mxfp8_cublas", "mxfp8_cublas_rceil")


def _mx_linear(f: Fields, base: str, unmapped: list[str]) -> None:
    name = f.get(f"{base}.recipe_name", "mxfp8_cublas", str)
    if name not in _MX_RECIPES:
        raise f.error(f"{base}.recipe_name", f"{name!r}: hp prices torchao's MX training with the cuBLAS MXFP8 GEMM only "
                      f"({', '.join(_MX_RECIPES)}: recipe torchao-mxfp8)")
    f.get(f"{base}.mxfp8_dim1_cast_kernel_choice", "triton", str, ("triton", "cuda", "torch"))
    skipped = f.get(f"{base}.filter_fqns", ["output"], list)
    # hp keeps the output head and a router's gate in bf16 whatever the recipe (the llama4 tomls filter
    # both); another filter is not priced.
    if sorted(skipped) not in (["output"], ["output", "router.gate"]):
        unmapped.append(f"{base}.filter_fqns = {skipped!r}: priced with every linear layer but the output head and a "
                        "router's gate in MXFP8")


def _mx_experts(f: Fields, key: str, unmapped: list[str]) -> bool:
    """Whether torchtitan's MX grouped-GEMM converter converts the routed experts: its fqns (*key*) name them."""
    fqns = f.get(key, [], (list, str))
    fqns = [x for x in (fqns.split(",") if isinstance(fqns, str) else fqns) if x]
    if not fqns:
        unmapped.append(f"{key} = []: the MX grouped-GEMM converter converts no module (its default); priced so")
        return False
    if fqns != ["experts"]:
        raise f.error(key, f"{fqns!r}: hp prices MXFP8 grouped GEMMs on the routed experts (['experts']) only")
    return True


# (linear layers in MX, routed experts in MX) -> the torchao MX recipe.
_MX_SCOPES = {(True, False): "torchao-mxfp8", (False, True): "torchao-mxfp8-experts", (True, True): "torchao-mxfp8-linears-experts"}


def _recipe(f: Fields, unmapped: list[str]) -> str | None:
    converters = f.get("model.converters", [], list)
    base = next((p for c, p in (("quantize.linear.float8", "quantize.linear.float8"), ("float8", "float8"))
                 if c in converters), None)
    mx = next((_MX[c] for c in converters if c in _MX), None)
    grouped_mx = "quantize.grouped_mm.mx" in converters
    for other in converters:
        if other not in ("quantize.linear.float8", "float8", "quantize.grouped_mm.mx", *_MX):
            unmapped.append(f"model.converters {other!r}: not mapped")
    if mx is not None or grouped_mx:
        if base is not None:
            raise f.error("model.converters", "a float8 and an MX converter together: hp prices one recipe; name one")
        if mx is not None:
            _mx_linear(f, mx, unmapped)
        experts = False
        if grouped_mx:
            f.get("quantize.grouped_mm.mx.recipe_name", "mxfp8", str, ("mxfp8",))
            experts = _mx_experts(f, "quantize.grouped_mm.mx.fqns", unmapped)
        elif mx == "mx" and f.get("mx.moe_fqns_prototype", [], (list, str)):  # 6fc499f: one converter for both
            experts = _mx_experts(f, "mx.moe_fqns_prototype", unmapped)
        return _MX_SCOPES.get((mx is not None, experts))
    if base is None:
        return None
    name = f.get(f"{base}.recipe_name", None, str)
    gather = f.get(f"{base}.enable_fsdp_float8_all_gather", False, bool)
    # Float8Converter skips the linears filter_fqns names, none by default (torchtitan config/job_config.py
    # Float8Linear at e347b1e5e: filter_fqns default_factory=list; the llama3 tomls set ["output"]); hp keeps the output
    # head and a router's gate in bf16 whatever the recipe and prices every other linear in float8. So a filter
    # without "output" (the head then runs in float8), another filter, or torchao's _auto_filter_for_recipe
    # ("auto_filter_small_kn": linears whose K or N is small for the recipe left in bf16) is not priced: a warning line.
    skipped = f.get(f"{base}.filter_fqns", [], (list, str))
    skipped = [x.strip() for x in (skipped.split(",") if isinstance(skipped, str) else skipped) if x.strip()]
    if not set(skipped) <= {"output", "router.gate"}:
        unmapped.append(f"{base}.filter_fqns = {skipped!r}: priced with every linear layer but the output head and a "
                        "router's gate in float8" + (" (torchao's auto filter of small linears is not priced)"
                                                     if "auto_filter_small_kn" in skipped else ""))
    if "output" not in skipped:
        unmapped.append(f"{base}.filter_fqns names no 'output': the output head runs in float8; priced in bf16")
    if name in (None, "tensorwise"):
        if not gather:
            unmapped.append(f"{base}.enable_fsdp_float8_all_gather = false: priced as torchao-float8-tensorwise, "
                            "which gathers float8 weights")
        return "torchao-float8-tensorwise"
    if name == "rowwise_with_gw_hp":
        return "torchao-float8-rowwise-gw-hp"
    if name != "rowwise":
        unmapped.append(f"{base}.recipe_name = {name!r}: priced as torchao-float8-rowwise")
    return "torchao-float8-rowwise"


def _recompute(f: Fields, document: dict[str, Any], registry, unmapped: list[str]) -> Any:
    mode = f.get("activation_checkpoint.mode", "selective", str, ("selective", "full", "memory_budget", "none"))
    option = str(f.get("activation_checkpoint.selective_ac_option", "2", (str, int)))
    if mode == "none":
        return None
    if mode == "full":
        return "full"
    if mode == "memory_budget":
        unmapped.append("activation_checkpoint.mode = 'memory_budget': the compiler's partitioner is not priced; "
                        "priced as no recompute")
        f.get("activation_checkpoint.memory_budget")
        return None
    _, layout = layout_of(document, registry)
    if option == "op":
        op = (registry.runtime(_RUNTIME).recompute_modules or {}).get("op_sac", frozenset())
        settings = [Setting("switches", op & frozenset(k.switches)) if op & frozenset(k.switches) else Setting()
                    for k in layout.kinds]
        return plan_document(settings)
    if not option.isdigit() or int(option) < 1:
        raise f.error("activation_checkpoint.selective_ac_option", f"expected 'op' or a positive integer, got {option!r}")
    every = int(option)
    settings = [Setting()] * layout.count
    for stage in range(layout.pp):  # torchtitan _apply_layer_sac: a per-rank counter over its chunks in order
        for position, index in enumerate(layout.stage_layers(stage)):
            if (position + 1) % every == 0:
                settings[index] = Setting("full")
    return plan_document(settings)


def _read(source: str, *, registry, devices: int | None = None, model: str | None = None) -> ImportedJob:
    data = read_mapping(source, "toml")
    return import_torchtitan(data, registry, file=source, devices=devices, model=model)


@hookimpl
def hp_importers():
    yield Importer(name="torchtitan", read=_read, exporter="torchtitan", flags=("devices", "model"),
                   description="a torchtitan job TOML: model, training, parallelism, activation_checkpoint (dp_shard -1 needs --devices)")
