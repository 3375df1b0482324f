"""hp's step time against the public FP8 / MXFP8 / NVFP4 runs of tests/plugins/data/fp8_measured_runs.json.

Run: ``python benchmarks/fp8_runs.py`` (prints one row per run (Megatron-Bridge's Llama rows on H100, B200, GB200 and
GB300, NeMo 24.07's on H100; the GB200 and GB300 rows summarised apart, also per recipe and NVFP4 against MXFP8 on the
same layout): measured and estimated step
time and the relative error, with the ``megatron`` runtime's defaults and as run (the overlap
options the row's trainer set), and hp's bf16 time of the same layout for the estimated speedup; then
the memory rows: measured and estimated peak GiB and the error; then torchao's Llama4 MXFP8 rows, ``torchao_moe_rows``: a
2-layer Llama4 17Bx16E on 4 B200s under torchao's MXFP8 linears, grouped GEMMs or both, step time and memory against
the table's bf16 row; then the PyTorch / Nebius DeepSeek-V3 671B rows, ``torchtitan_dsv3_rows``: torchtitan on 256 B200s,
bf16 with the standard all-to-all, bf16 with DeepEP and torchao's MXFP8 grouped GEMMs with DeepEP, each against the bf16
standard-EP row; then DeepSeek-V3 671B on 64 GB300s, ``torchtitan_gb300_rows``: the bf16 control of torchtitan's NVFP4
page, step time and peak reserved memory; then Llama 3 8B on 4 GB200s, ``torchtitan_gb200_rows``: the BF16 and MXFP8
arms of the same page's Llama 3 8B runs, step time and peak reserved memory, the MXFP8 row against the BF16 one). The
step-time runs are priced
with the ``megatron`` runtime, the memory rows with the torchtitan importer (``fsdp2`` runtime),
each under the recipe its row names; then llm-foundry's MPT FP8 rows (``fsdp_rows``: Composer FSDP,
Transformer Engine delayed scaling), priced with the ``fsdp2`` runtime as docs/time.md prices the
MPT bf16 rows; then Megatron-Bridge's MoE rows (``moe_rows``: Qwen3 30B-A3B and 235B-A22B on H100, B200, GB200, GB300 and
B300, DeepSeek-V3 on B200, GB200, GB300 and B300, Kimi K2 (Muon) on GB300, each of the GB200, GB300 and B300 rows a class of their own), priced as run with the ``megatron`` runtime and the recompute modules each row states, per class the mean absolute error; then the
MoE rows of the 26.06 to 26.08 containers that capture the full iteration in CUDA graphs (``moe_fi_rows``: Qwen3
30B-A3B and 235B-A22B MXFP8 with FP8 attention, the static per-rank expert token budget and the paged stash, on GB200,
GB300 and B300, DeepSeek-V3 and GPT-OSS 120B on GB200 and GB300; classes of their own), priced the same way; then
Megatron-Bridge's Nemotron 3 Nano 30B-A3B MXFP8 rows (``nemotron_rows``: a hybrid Mamba-2 / attention / MoE model on 8
GB300, GB200, B300 and B200 GPUs at EP 8 with HybridEP, 26.02.01 to 26.08; a class per system), priced the same way
with the nemotron-3-nano-30b-a3b preset (and its DGX-H100 FP8 rows on 16 GPUs, recomputing the moe, layernorm, core_attn
and moe_act modules); then Megatron-Bridge's Nemotron 3 Super 120B-A12B MXFP8 and NVFP4 rows (``nemotron_super_rows``:
the hybrid Mamba-2 / attention / latent-MoE model on 64 GB300 and GB200 GPUs at EP 64, B300 at EP 8 and B200 at EP 64,
HybridEP, 26.04 to 26.08, the MTP module applied at two depths, the NVFP4 rows with their per-module formats and 14
bf16 end layers; a class per system),
priced the same way with the nemotron-3-super-120b-a12b preset; then Megatron-Bridge's Nemotron 3.5 Lightning MXFP8 row
(``nemotron_lightning_rows``: 26.08's one row, the Nano GB200 configuration on 8 GPUs with a '*E' MTP block applied at
two depths), priced the same way with the nemotron-3.5-lightning-30b-a3b preset; then torchtitan's and torchao's Float8 rows
(``torchtitan_rows``: Llama 3 8B / 70B / 405B under torchao float8 tensorwise on torchtitan's Grand Teton H100s),
priced as tests/plugins/scale_cases.py prices those pages' bf16 rows (``fsdp2``, the Grand Teton case device), each
beside its bf16 baseline of the same table, measured and priced, and both FP8 speedups; nothing is fitted to them
(docs/precision.md); then NeMo's own performance pages (``nemo_rows``: the 24.07 summary's FP8 pre-training rows on
H100 as three commits of the table print them, and the 25.04 long-sequence Llama 3 8B rows with CP on B200, whose
model TFLOP/s per GPU NeMo's FLOPs count turns into a step time), priced as the NeMo 24.07 rows of ``rows``, and the
dense rows of NeMo 2.0's 25.02, 25.04 and 25.07 summaries (B200, H100, GB200), with the defaults and as run, all held
out (benchmarks/fp8_nemo.py); last, NVIDIA's DGX Cloud benchmarking rows (``dgxc_rows``: Llama 3.1, GPT-3 175B, Nemotron-4 and
NeMo's Grok-1 on H100 under NeMo 24.05 to 25.04.01; Llama 3.1 405B and Grok-1 on GB200), priced by benchmarks/fp8_dgxc.py.
The memory, torchao Llama4, torchtitan, torchtitan DeepSeek-V3 (B200 and GB300) and torchtitan Llama 3 8B GB200 rows are
priced in
benchmarks/fp8_torchtitan.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import attrs

from hp_core import api
from hp_core.engine.prepare import split_layers
from hp_core.specs import ParallelSpec
from hp_plugins.kinds.mtp import with_repeated_module

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
# The torchtitan / torchao rows (memory, Llama4 MXFP8, Float8 step times) are priced in benchmarks/fp8_torchtitan.py; their
# names are this module's too, as before they moved there.
from fp8_torchtitan import (  # noqa: E402,F401
    TORCHTITAN_CLASSES,
    _scale_cases,
    _substituted,
    _torchao_moe_priced,
    _torchtitan_dsv3_priced,
    _torchtitan_gb200_priced,
    _torchtitan_peak_gib,
    memory_results,
    memory_section,
    price_torchtitan,
    torchao_moe_results,
    torchao_moe_section,
    torchtitan_baseline,
    torchtitan_dsv3_results,
    torchtitan_dsv3_section,
    torchtitan_gb300_results,
    torchtitan_gb300_section,
    torchtitan_gb200_results,
    torchtitan_gb200_section,
    torchtitan_results,
    torchtitan_section,
)

DATA = Path(__file__).resolve().parents[1] / "tests" / "plugins" / "data" / "fp8_measured_runs.json"


def layout(row: dict, decoder_layers: int) -> ParallelSpec:
    """The row's layout: Megatron-Core with sequence parallelism at tp > 1, the distributed optimizer; the experts split
    over ``etp`` where the row states it (else 1); context parallelism's exchange ``cp_kind`` where the row states it
    (else ring attention, ``p2p``).

    A row whose ``layers_per_stage`` is a list states its decoder layers per chunk, in chunk order (a row
    placing its layers by a pipeline layout, ``pipeline_layout``: the embedding on the first chunk, the MTP
    module and the loss on the last, where hp places them). A row whose ``layers_per_stage`` is text splits its
    decoder layers with the embedding and the loss counted as a layer each (Megatron-Core
    account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split): ``(decoder_layers + 2) /
    chunks`` per chunk, the first and the last chunk one fewer (126 layers over 64 chunks: 1, 2, ..., 2, 1). A row
    stating ``zero`` shards at that level (3: Megatron-FSDP's ``optim_grads_params``, priced by hp's per-layer ZeRO-3
    sharding), else at the runtime's. A row stating ``schedule`` runs that pipeline schedule (DeepSeek-V3's
    ``dualpipe``), else interleaved 1F1B where ``vpp > 1``."""
    model_parallel = row["tp"] * row["pp"] * row["cp"]
    dp = row["gpus"] // model_parallel
    chunks = row["pp"] * row["vpp"]
    per_chunk = None
    if isinstance(row.get("layers_per_stage"), list):
        per_chunk = tuple(row["layers_per_stage"])
    elif "layers_per_stage" in row:
        each, left = divmod(decoder_layers + 2, chunks)
        if left:
            raise ValueError(f"{row['id']}: {decoder_layers} decoder layers + 2 do not split evenly over {chunks} chunks")
        per_chunk = (each - 1,) + (each,) * (chunks - 2) + (each - 1,)
    return ParallelSpec(layers_per_stage=per_chunk, tp=row["tp"], pp=row["pp"], cp=row["cp"], dp=dp, vpp=row["vpp"], ep=row["ep"],
                        etp=row.get("etp", 1), sp=row["tp"] > 1,
                        micro_batch_size=row["micro_batch_size"], seq_len=row["seq_len"],
                        global_batch_size=row["global_batch_size"],
                        schedule=row.get("schedule") or ("interleaved_1f1b" if row["vpp"] > 1 else None),
                        **{k: row[k] for k in ("rank_order", "cp_kind", "zero") if k in row})


def row_model(row: dict, registry):
    """The row's model: a Hugging Face style config (``hf``, with its ``model_source``), a GPT as NeMo 1.0 builds it
    from its launcher yaml (``model_config``: tests/plugins/scale_cases.py ``_gpt``, Megatron's default GPT, with the
    yaml's learned position table and dropout, as benchmarks/fp8_dgxc.py builds GPT-3 175B), else the preset ``model``
    names. A row stating ``lora`` (:class:`~hp_plugins.kinds.lora.LoRAConfig`'s fields but ``layer``) fine-tunes that
    model with LoRA (:func:`~hp_plugins.kinds.lora.with_lora`)."""
    if "lora" in row:
        from hp_plugins.kinds.lora import with_lora

        return with_lora(row_model({k: v for k, v in row.items() if k != "lora"}, registry), registry, **row["lora"])
    if "hf" in row:
        from hp_plugins.models.hf import model_from_hf_config

        return model_from_hf_config(row["hf"], name=f"{row['model']} ({row['id']})", source=row["model_source"])
    if "model_config" in row:
        config = row["model_config"]
        if config["ffn_hidden_size"] != 4 * config["hidden_size"]:
            raise ValueError(f"{row['id']}: model_config ffn_hidden_size {config['ffn_hidden_size']} is not 4 x hidden_size, "
                             "which Megatron's default GPT builds")
        keys = ("hidden_size", "num_attention_heads", "num_layers", "vocab_size", "hidden_dropout", "attention_dropout")
        return _scale_cases()._gpt({**{k: config[k] for k in keys}, "position_embeddings": config["max_position_embeddings"]})
    return api.model_from_preset(row["model"], registry=registry)


def price(row: dict, registry, recipe: str | None = None, as_run: bool = False, runtime=None):
    """hp's step time of *row* under *recipe* (the row's when ``None``): with the ``megatron`` runtime's defaults,
    or, *as_run*, with the runtime options the row states its trainer ran with (``runtime_options``); *runtime*
    replaces the registry's ``megatron`` runtime (a trial of benchmarks/fit_fsdp2_sustained.py); the precision fields
    the row states (:func:`row_precision`: NeMo's first and last layers kept in bf16) over the runtime's."""
    model, parallel, run = row_run(row, registry, recipe, as_run, runtime)
    return api.step_time(model, parallel, **run)


def row_run(row: dict, registry, recipe: str | None = None, as_run: bool = False, runtime=None):
    """``(model, layout, keywords)`` of *row* as :func:`price` runs it (the same arguments), the keywords those
    ``api.step_time`` and ``api.estimate`` take: registry, runtime, precision, hardware and the row's recompute plan."""
    model = row_model(row, registry)
    runtime = runtime or registry.runtime("megatron")
    if as_run and row.get("runtime_options"):
        runtime = api.apply_options(runtime, row["runtime_options"])
    precision = attrs.evolve(runtime.precision, recipe=recipe or row["recipe"], **row_precision(row, recipe))
    hardware = registry.hardware_preset(row["hardware"]).spec
    return model, layout(row, _decoder_layers(model)), {"registry": registry, "runtime": runtime, "precision": precision,
                                                         "hardware": hardware, "recompute": row_recompute(row, registry)}


def row_recompute(row: dict, registry):
    """The row's recompute plan: Megatron-Core's activation CPU offloading where it states
    ``cpu_offloading_num_layers`` (its config's ``cpu_offloading_num_layers``: the first N decoder layers offload every
    tensor they keep, :func:`hp_plugins.importers.megatron.cpu_offloading_plan`, as the megatron importer maps
    ``--cpu-offloading-num-layers``), else none."""
    from hp_core.io.convert import structure
    from hp_core.specs import RecomputeSpec
    from hp_plugins.importers.megatron import cpu_offloading_plan

    layers = row.get("cpu_offloading_num_layers")
    return structure(cpu_offloading_plan(layers), RecomputeSpec, registry, "$.recompute") if layers else None


# The precision fields that describe the run's optimizer (the precision-aware optimizer's Adam-moment and master-copy
# widths: Megatron-Core OptimizerConfig exp_avg_dtype / exp_avg_sq_dtype / main_params_dtype, as
# hp_plugins/importers/megatron.py _optimizer_widths maps them), which hold whatever recipe the GEMMs run under.
OPTIMIZER_FIELDS = ("moment_bytes", "master_param_bytes")


def row_precision(row: dict, recipe: str | None = None) -> dict:
    """The row's ``precision`` fields to price it with under *recipe* (the row's when ``None``): all of them under its
    own recipe; under another (a bf16 comparison) only the optimizer's widths (:data:`OPTIMIZER_FIELDS`), the same
    optimizer having run, the layers kept in bf16 and module formats quantizing nothing there."""
    fields = row.get("precision", {})
    if recipe in (None, row["recipe"]):
        return dict(fields)
    return {k: v for k, v in fields.items() if k in OPTIMIZER_FIELDS}


def measured_seconds(row: dict) -> float:
    return row["global_batch_size"] * row["seq_len"] / (row["tokens_per_second_per_gpu"] * row["gpus"])


def results(registry=None) -> list[dict]:
    """Each run of the data file priced: measured and estimated step time, the error, hp's bf16 time."""
    registry = registry or api.build_registry()
    data = json.loads(DATA.read_text())
    found = []
    for row in data["rows"]:
        measured = measured_seconds(row)
        estimated = price(row, registry)
        bf16 = price(row, registry, "bf16")
        as_run = price(row, registry, as_run=True).step_seconds if row.get("runtime_options") else None
        found.append({"as_run_seconds": as_run, "as_run_error": None if as_run is None else (as_run - measured) / measured,"id": row["id"], "split": row["split"], "hardware": row["hardware"], "recipe": row["recipe"],
                      "model": row["model"], "container": row["id"].split("-", 1)[0],
                      "layout": tuple(row[k] for k in ("gpus", "tp", "pp", "cp", "vpp", "global_batch_size", "micro_batch_size")),
                      "measured_seconds": measured, "estimated_seconds": estimated.step_seconds,
                      "error": (estimated.step_seconds - measured) / measured, "bf16_seconds": bf16.step_seconds,
                      "mfu": estimated.mfu, "mfu_recipe_peak": estimated.mfu_recipe_peak})
    return found


def nvfp4_pairs(found: list[dict]) -> list[tuple[dict, dict]]:
    """(MXFP8, NVFP4) pairs of :func:`results` rows: the same hardware, container, model and layout (GPUs, degrees,
    global and micro-batch), each priced as run with its own options."""
    key = lambda r: (r["hardware"], r["container"], r["model"], r["layout"])  # noqa: E731
    # MXFP8 under either parameter gather: Megatron-Bridge's MXFP8 rows run mxfp8-param-gather (bf16_with_mxfp8_mixed).
    mx = {key(r): r for r in found if r["recipe"] in ("mxfp8", "mxfp8-param-gather")}
    return [(mx[key(r)], r) for r in found if r["recipe"] == "nvfp4" and key(r) in mx]


def section(found: list[dict]) -> str:
    """The table docs/precision.md shows (tests/plugins/test_fp8_runs.py checks it is current)."""
    lines = [
        "| run | split | recipe | measured s | hp s | error | hp as run s | error as run | hp bf16 s | hp FP8 speedup "
        "| hp MFU (bf16 peak / recipe peak) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in found:
        as_run = ("| | " if r["as_run_seconds"] is None
                  else f"| {r['as_run_seconds']:.3f} | {r['as_run_error']:+.1%} ")
        lines.append(f"| `{r['id']}` | {r['split']} | {r['recipe']} | {r['measured_seconds']:.3f} | {r['estimated_seconds']:.3f} "
                     f"| {r['error']:+.1%} {as_run}| {r['bf16_seconds']:.3f} | {r['bf16_seconds'] / r['estimated_seconds']:.2f} "
                     f"| {r['mfu']:.1%} / {r['mfu_recipe_peak']:.1%} |")
    # The H100 / B200 rows, the GB200 rows (added with the gb200 preset) and the GB300 rows (added with the gb300 preset)
    # summarised apart, every one held out.
    before = [r for r in found if r["hardware"] not in ("gb200", "gb300")]
    errors = [abs(r["error"]) for r in before]
    within = sum(e <= 0.10 for e in errors)
    lines.append("")
    lines.append(f"Held-out rows on H100 and B200: {len(errors)}; within 10%: {within}; mean absolute error "
                 f"{sum(errors) / len(errors):.1%}, largest {max(errors):.1%}.")
    ran = [abs(r["as_run_error"]) for r in before if r["as_run_error"] is not None]
    lines.append(f"As run (the {len(ran)} rows stating their trainer's options): within 10%: {sum(e <= 0.10 for e in ran)}; "
                 f"mean absolute error {sum(ran) / len(ran):.1%}, largest {max(ran):.1%}.")
    # The GB200 and GB300 rows: all of a device's, then per recipe (the GB200 NVFP4 rows, added once hp priced nvfp4 on
    # the gb200 preset, are the GB200 nvfp4 line), then NVFP4 against MXFP8 where both ran the same layout.
    for name in ("GB200", "GB300"):
        rows = [r for r in found if r["hardware"] == name.lower()]
        base, run = [abs(r["error"]) for r in rows], [abs(r["as_run_error"]) for r in rows]
        lines.append(f"Held-out rows on {name}: {len(rows)}; with the defaults mean absolute error {sum(base) / len(base):.1%}, "
                     f"largest {max(base):.1%}; as run within 10%: {sum(e <= 0.10 for e in run)}, mean absolute error "
                     f"{sum(run) / len(run):.1%}, largest {max(run):.1%}.")
        for recipe in dict.fromkeys(r["recipe"] for r in rows):
            run = [r["as_run_error"] for r in rows if r["recipe"] == recipe]
            lines.append(f"- {name}, {recipe}: {len(run)} rows, as run mean absolute error {sum(map(abs, run)) / len(run):.1%}, "
                         f"{min(run):+.1%} to {max(run):+.1%}.")
        pairs = nvfp4_pairs(rows)
        if pairs:
            ran = [m["measured_seconds"] / n["measured_seconds"] for m, n in pairs]
            priced = [m["as_run_seconds"] / n["as_run_seconds"] for m, n in pairs]
            lines.append(f"- {name}, NVFP4 over MXFP8 on the same layout (container, model and degrees): {len(pairs)} pairs, "
                         f"measured {min(ran):.2f} to {max(ran):.2f} times faster, hp as run {min(priced):.2f} to {max(priced):.2f}.")
    return "\n".join(lines) + "\n"


def _price_fsdp(row: dict, registry, recipe: str):
    """hp's step time of an MPT FSDP row under *recipe*: its MPT config, ``fsdp2`` with the row's options, dp = GPUs."""
    from hp_core.specs import RecomputeSpec, Setting
    from hp_plugins.models.mpt import model_from_mpt_config

    model = model_from_mpt_config(row["model_config"]["mpt"], name=row["id"], source=f"llm-foundry {row['yaml']}")
    runtime = api.apply_options(registry.runtime(row["runtime"]), row["runtime_options"])
    precision = attrs.evolve(runtime.precision, recipe=recipe)
    layout = ParallelSpec(dp=row["gpus"], seq_len=row["seq_len"], micro_batch_size=row["micro_batch_size"],
                          global_batch_size=row["global_batch_size"])
    return api.step_time(model, layout, registry=registry, runtime=runtime, precision=precision,
                         hardware=registry.hardware_preset(row["hardware"]).spec,
                         recompute=RecomputeSpec(default=Setting.parse(row["recompute"])))


def fsdp_results(registry=None) -> list[dict]:
    """Each MPT FSDP row priced under its recipe and in bf16: measured and estimated step time, the error."""
    registry = registry or api.build_registry()
    found = []
    for row in json.loads(DATA.read_text())["fsdp_rows"]:
        measured = row["global_batch_tokens"] / row["tokens_per_second"]
        estimated = _price_fsdp(row, registry, row["recipe"])
        bf16 = _price_fsdp(row, registry, "bf16")
        found.append({"id": row["id"], "split": row["split"], "recipe": row["recipe"], "recompute": row["recompute"],
                      "measured_seconds": measured, "estimated_seconds": estimated.step_seconds,
                      "error": (estimated.step_seconds - measured) / measured, "bf16_seconds": bf16.step_seconds})
    return found


def fsdp_section(found: list[dict]) -> str:
    """The MPT FP8 table docs/precision.md shows (tests/plugins/test_fp8_runs.py checks it is current)."""
    lines = ["| run | split | recipe | recompute | measured s | hp s | error | hp bf16 s | hp FP8 speedup |",
             "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for r in found:
        lines.append(f"| `{r['id']}` | {r['split']} | {r['recipe']} | {r['recompute']} | {r['measured_seconds']:.3f} "
                     f"| {r['estimated_seconds']:.3f} | {r['error']:+.1%} | {r['bf16_seconds']:.3f} "
                     f"| {r['bf16_seconds'] / r['estimated_seconds']:.2f} |")
    errors = [abs(r["error"]) for r in found]
    lines.append("")
    lines.append(f"Held-out MPT FP8 rows: {len(errors)}; within 10%: {sum(e <= 0.10 for e in errors)}; "
                 f"mean absolute error {sum(errors) / len(errors):.1%}, largest {max(errors):.1%}.")
    return "\n".join(lines) + "\n"


MOE_CLASSES = ("multi-node Megatron-Core MoE, H100", "Megatron-Core MoE, B200", "Megatron-Core MoE, GB200",
               "Megatron-Core MoE, GB300", "Megatron-Core MoE, B300")
# The rows of ``moe_fi_rows``: the 26.06 to 26.08 containers' full-iteration CUDA graphs with HybridEP's static
# per-rank token budget and Megatron-Core's paged stash (docs/precision.md, 'The full-iteration rows').
MOE_FI_CLASSES = ("Megatron-Core MoE full-iteration graphs, GB200", "Megatron-Core MoE full-iteration graphs, GB300",
                  "Megatron-Core MoE full-iteration graphs, B300")
# The rows of ``nemotron_rows``: Megatron-Bridge's Nemotron 3 Nano 30B-A3B MXFP8 rows, a hybrid Mamba-2 / attention /
# MoE stack on 8 GPUs at EP 8, and its DGX-H100 FP8 rows on 16 (recompute moe, layernorm, core_attn, moe_act)
# (docs/precision.md, 'Megatron-Bridge's Nemotron 3 Nano rows').
NEMOTRON_CLASSES = ("Megatron-Core hybrid Mamba-MoE, GB300", "Megatron-Core hybrid Mamba-MoE, GB200",
                    "Megatron-Core hybrid Mamba-MoE, B300", "Megatron-Core hybrid Mamba-MoE, B200",
                    "Megatron-Core hybrid Mamba-MoE, H100")
# The rows of ``nemotron_super_rows``: Megatron-Bridge's Nemotron 3 Super 120B-A12B MXFP8 and NVFP4 rows, the hybrid Mamba-2 /
# attention / latent-MoE stack with its MTP block on 64 GPUs (docs/precision.md, 'Megatron-Bridge's Nemotron 3 Super rows').
NEMOTRON_SUPER_CLASSES = tuple(f"Megatron-Core hybrid Mamba-MoE with MTP, {system}" for system in ("GB300", "GB200", "B300", "B200"))
# The rows of ``nemotron_lightning_rows``: Megatron-Bridge's Nemotron 3.5 Lightning MXFP8 row, the Nano stack with a '*E' MTP
# block on 8 GB200 GPUs (docs/precision.md, 'Megatron-Bridge's Nemotron 3.5 Lightning row'); the Super GB200 rows' class name,
# in a table of its own.
NEMOTRON_LIGHTNING_CLASSES = ("Megatron-Core hybrid Mamba-MoE with MTP, GB200",)


def _decoder_layers(model) -> int:
    """The model's decoder layers: every layer group but the embedding, the output head and DeepSeek-V3's MTP module
    (the kinds hp places first and last, not in the body; under LoRA their frozen wrappers ``lora_first``, ``lora_last``)."""
    ends = ("embedding", "output", "mtp", "lora_first", "lora_last")
    return sum(group.count for group in model.layers if group.kind not in ends)


def moe_recompute(row: dict, model, registry, runtime):
    """The row's ``recompute_modules`` (Megatron-Core ``--recompute-modules``) as a recompute plan: each body layer
    recomputes the switches of every module the runtime states that acts on its kind; ``None`` where the row
    recomputes nothing (the Qwen3 rows). A module the runtime does not state is refused, not dropped."""
    from hp_core.specs import RecomputeSpec, Setting

    modules = row.get("recompute_modules") or []
    known = runtime.recompute_modules or {}
    unknown = [m for m in modules if m not in known]
    if unknown:
        raise ValueError(f"{row['id']}: recompute modules {unknown} are not among the megatron runtime's ({sorted(known)})")
    if not modules:
        return None
    ranges, first = [], 0
    for group in model.layers:
        kind = registry.layer_kind(group.kind)
        if kind.placement != "body":
            continue
        switches = set()
        for module in modules:
            if module not in runtime.module_kinds or kind.name in runtime.module_kinds[module]:
                switches |= set(known[module]) & set(kind.switches)
        if switches:
            ranges.append((first, first + group.count - 1, Setting.parse(sorted(switches))))
        first += group.count
    return RecomputeSpec(layers=tuple(ranges))


def moe_row_model(row: dict, registry):
    """The model a Megatron-Bridge MoE row ran: its preset, with its MTP module applied at ``mtp_applications`` depths
    where the row states it (Megatron-Core's ``mtp_use_repeated_layer`` with ``mtp_num_layers`` that many: one MTP
    layer built and applied at each depth, its weights once, ``multi_token_prediction.py``
    ``MultiTokenPredictionBlock``; the ``mtp`` kind's ``applications``), as Nemotron 3 Super's runs apply the
    checkpoint's one MTP depth twice."""
    model = api.model_from_preset(row["model"], registry=registry)
    if row.get("mtp_applications", 1) == 1:
        return model
    mtp = [group for group in model.layers if group.kind == "mtp"]
    if len(mtp) != 1 or mtp[0].count != 1:
        raise ValueError(f"{row['id']}: mtp_applications needs one MTP module in {row['model']}, found {len(mtp)} groups")
    return with_repeated_module(model, row["mtp_applications"])


def price_moe(row: dict, registry, recipe: str | None = None, base_runtime=None):
    """hp's step time of a Megatron-Bridge MoE row under *recipe* (the row's when ``None``), as run: the
    ``megatron`` runtime (or *base_runtime*, a variant of it) with the row's options and the recompute modules it
    states (:func:`moe_recompute`), the model :func:`moe_row_model`, the optimizer the row states (``optimizer``) where
    it states one."""
    model = moe_row_model(row, registry)
    runtime = api.apply_options(base_runtime or registry.runtime("megatron"), row["runtime_options"])
    # The row's precision fields (layers kept in bf16, module formats: Nemotron 3 Super's NVFP4 recipe) under its own
    # recipe; a bf16 comparison quantizes nothing, so they would change nothing there; the optimizer's widths
    # (DeepSeek-V3's bf16 Adam moments) under every recipe (row_precision).
    fields = row_precision(row, recipe)
    # The optimizer the row ran (``optimizer``: Kimi K2's Muon), under every recipe; else the runtime's (AdamW).
    if "optimizer" in row:
        fields = {**fields, "optimizer": row["optimizer"]}
    precision = attrs.evolve(runtime.precision, recipe=recipe or row["recipe"], **fields)
    hardware = registry.hardware_preset(row["hardware"]).spec
    return api.step_time(model, layout(row, _decoder_layers(model)), registry=registry, runtime=runtime,
                         precision=precision, hardware=hardware, recompute=moe_recompute(row, model, registry, runtime))


def moe_results(registry=None, key: str = "moe_rows") -> list[dict]:
    """Each MoE row (of *key*: ``moe_rows`` or ``moe_fi_rows``) priced under its recipe and in bf16: measured and
    estimated step time, the error."""
    registry = registry or api.build_registry()
    found = []
    for row in json.loads(DATA.read_text())[key]:
        measured = measured_seconds(row)
        estimated = price_moe(row, registry)
        bf16 = price_moe(row, registry, "bf16")
        # The shortfall per decoder layer and micro-batch: over the micro-batches a stage runs (and its pipeline
        # bubble, (pp - 1) / vpp of them) times the decoder layers of the busiest stage, which paces the pipeline.
        # A diagnostic, not a figure of hp.
        decoder = _decoder_layers(moe_row_model(row, registry))
        spec = layout(row, decoder)
        slots = spec.global_batch_size // (spec.dp * spec.micro_batch_size) + (spec.pp - 1) / spec.vpp
        chunks = split_layers(decoder, spec)
        busiest = max(sum(chunks[rank::spec.pp]) for rank in range(spec.pp))
        found.append({"id": row["id"], "class": row["class"], "split": row["split"], "recipe": row["recipe"],
                      "layout": row, "measured_seconds": measured, "estimated_seconds": estimated.step_seconds,
                      "error": (estimated.step_seconds - measured) / measured, "bf16_seconds": bf16.step_seconds,
                      "dispatch": row["runtime_options"].get("ep_all_to_all", "nccl"),
                      "shortfall_per_layer_seconds": (measured - estimated.step_seconds) / (slots * busiest)})
    return found


def moe_fi_results(registry=None) -> list[dict]:
    """The full-iteration rows (``moe_fi_rows``) priced as :func:`moe_results` prices ``moe_rows``."""
    return moe_results(registry, "moe_fi_rows")


def nemotron_results(registry=None) -> list[dict]:
    """The Nemotron 3 Nano rows (``nemotron_rows``) priced as :func:`moe_results` prices ``moe_rows``."""
    return moe_results(registry, "nemotron_rows")


def nemotron_section(found: list[dict]) -> str:
    """The Nemotron 3 Nano rows' table docs/precision.md shows (tests/plugins/test_fp8_runs_nemotron.py checks it)."""
    return moe_section(found, NEMOTRON_CLASSES)


def nemotron_super_results(registry=None) -> list[dict]:
    """The Nemotron 3 Super rows (``nemotron_super_rows``) priced as :func:`moe_results` prices ``moe_rows``."""
    return moe_results(registry, "nemotron_super_rows")


def nemotron_super_section(found: list[dict]) -> str:
    """The Nemotron 3 Super rows' table docs/precision.md shows (tests/plugins/test_fp8_runs_nemotron_super.py checks it)."""
    return moe_section(found, NEMOTRON_SUPER_CLASSES)


def nemotron_lightning_results(registry=None) -> list[dict]:
    """The Nemotron 3.5 Lightning row (``nemotron_lightning_rows``) priced as :func:`moe_results` prices ``moe_rows``."""
    return moe_results(registry, "nemotron_lightning_rows")


def nemotron_lightning_section(found: list[dict]) -> str:
    """The Nemotron 3.5 Lightning row's table docs/precision.md shows (tests/plugins/test_fp8_runs_nemotron_lightning.py checks it)."""
    return moe_section(found, NEMOTRON_LIGHTNING_CLASSES)


def moe_fi_section(found: list[dict]) -> str:
    """The full-iteration rows' table docs/precision.md shows (tests/plugins/test_fp8_runs_moe_fi.py checks it)."""
    return moe_section(found, MOE_FI_CLASSES)


def moe_section(found: list[dict], classes: tuple[str, ...] = MOE_CLASSES) -> str:
    """The MoE table docs/precision.md shows (tests/plugins/test_fp8_runs.py checks it is current)."""
    lines = ["| run | class | split | recipe | layout | measured s | hp as run s | error | hp bf16 s | hp FP8 speedup "
             "| unpriced ms per layer and micro-batch |",
             "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in found:
        row = r["layout"]
        degrees = " ".join(f"{k}{row[k]}" for k in ("tp", "pp", "vpp", "ep") if row[k] > 1)
        dispatch = {"nccl": "", "deepep": " DeepEP", "hybridep": " HybridEP"}[r["dispatch"]]
        dispatch += "".join(f" recompute {m}" for m in row.get("recompute_modules", ()))
        lines.append(f"| `{r['id']}` | {r['class']} | {r['split']} | {r['recipe']} | {row['gpus']} GPUs {degrees} mbs {row['micro_batch_size']}"
                     f"{dispatch} | {r['measured_seconds']:.3f} | {r['estimated_seconds']:.3f} | {r['error']:+.1%} "
                     f"| {r['bf16_seconds']:.3f} | {r['bf16_seconds'] / r['estimated_seconds']:.2f} "
                     f"| {r['shortfall_per_layer_seconds'] * 1e3:+.2f} |")
    lines.append("")
    for cls in classes:
        for split, name in (("held_out", "held-out"), ("calibration", "calibration")):
            errors = [r["error"] for r in found if r["class"] == cls and r["split"] == split]
            if errors:
                lines.append(f"- {cls}: {len(errors)} {name} rows, mean absolute error {sum(map(abs, errors)) / len(errors):.1%}, "
                             f"{min(errors):+.1%} to {max(errors):+.1%}, {sum(abs(e) <= 0.10 for e in errors)} within 10%.")
    return "\n".join(lines) + "\n"


def _summary(errors: list[float]) -> str:
    return (f"{len(errors)} rows, mean absolute error {sum(map(abs, errors)) / len(errors):.1%}, {min(errors):+.1%} to "
            f"{max(errors):+.1%}, {sum(abs(e) <= 0.10 for e in errors)} within 10%")


def __getattr__(name: str):
    """The NeMo rows' functions (``nemo_model_flops``, ``nemo_measured_seconds``, ``nemo_results``, ``nemo_section``,
    ``NEMO_COLLECTIONS``...), moved to benchmarks/fp8_nemo.py, reached through this module too, as before they moved."""
    if name.startswith(("nemo_", "NEMO_")):
        import fp8_nemo  # this file's folder is on sys.path (above)

        return getattr(fp8_nemo, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    print(section(results()), end="")
    print()
    print(memory_section(memory_results()), end="")
    print()
    print(torchao_moe_section(torchao_moe_results()), end="")
    print()
    print(torchtitan_dsv3_section(torchtitan_dsv3_results()), end="")
    print()
    print(torchtitan_gb300_section(torchtitan_gb300_results()), end="")
    print()
    print(torchtitan_gb200_section(torchtitan_gb200_results()), end="")
    print()
    print(fsdp_section(fsdp_results()), end="")
    print()
    print(moe_section(moe_results()), end="")
    print()
    print(moe_fi_section(moe_fi_results()), end="")
    print()
    print(nemotron_section(nemotron_results()), end="")
    print()
    print(nemotron_super_section(nemotron_super_results()), end="")
    print()
    print(nemotron_lightning_section(nemotron_lightning_results()), end="")
    print()
    print(torchtitan_section(torchtitan_results()), end="")
    print()
    import fp8_dgxc  # this file's folder is on sys.path (above)
    import fp8_nemo

    nemo = fp8_nemo.nemo_results()
    print(fp8_nemo.nemo_section(nemo), end="")
    print()
    print(fp8_nemo.nemo_summary_section(nemo), end="")
    print()

    print(fp8_dgxc.section(fp8_dgxc.results()), end="")
    print()
    print(fp8_dgxc.nemotronh_section(fp8_dgxc.nemotronh_results()), end="")
    print()
    import fp8_deepseek

    print(fp8_deepseek.section(fp8_deepseek.results()), end="")


if __name__ == "__main__":
    main()
