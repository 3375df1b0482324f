"""The public measured runs at scale of ``data/scale_measured.json``, built and priced as each ran.

Shared by ``tests/plugins/test_scale_cases.py`` and ``benchmarks/scale_validation.py``.
Each row states its model (a preset, a Hugging Face style config, or a GPT of the
Megatron-LM README's shape), layout, runtime, recompute, hardware and the trainer
options it ran with; the measured step time is derived from the published figure
by the formula its source states (``sources[...]['step_seconds_from']``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from hp_core.api import step_time
from hp_core.engine.recompute.layout import plan_layout
from hp_core.models import model_from_config, model_from_preset
from hp_core.runtime_options import apply_options
from hp_core.specs import LayerGroup, ModelSpec, ParallelSpec, RecomputeSpec, Setting
from hp_plugins.kinds.dense import DenseConfig
from hp_plugins.kinds.embedding import EmbeddingConfig
from hp_plugins.kinds.output import OutputConfig
from hp_plugins.models.hf import MODEL_TYPES as HF_MODEL_TYPES, model_from_hf_config
from hp_plugins.models.mpt import model_from_mpt_config

from measured_cases import with_megatron_capacity  # the same directory: capacity padding as Megatron-LM's flags state it

SCALE_FILE = Path(__file__).resolve().parent / "data" / "scale_measured.json"
DATA = json.loads(SCALE_FILE.read_text(encoding="utf-8"))
ROWS: list[dict] = DATA["rows"]
# multi-node MoE: NeMo AutoModel's MoE pre-training rows on 64 to 1,024 H100s, every row held out (split_rule); its
# pipelined DeepSeek V3 and Kimi K2 rows are kept, not validated (FSDP2 under interleaved stages: their why_not_validated).
CLASSES = ("multi-node FSDP", "multi-node Megatron-Core", "single-node FSDP", "single-node MoE", "multi-node MoE")
# llm-foundry's MPT benchmark tables (Composer FSDP on H100 and A100), in a file of the same format.
MPT_FILE = SCALE_FILE.with_name("scale_measured_mpt.json")
MPT_DATA = json.loads(MPT_FILE.read_text(encoding="utf-8"))
MPT_ROWS: list[dict] = MPT_DATA["rows"]
MPT_CLASSES = tuple(f"MPT {nodes}-node FSDP, {device}" for device in ("H100", "A100 80GB", "A100 40GB")
                    for nodes in ("single", "multi"))
# The A100 40GB SXM: 40 GiB of HBM2 at 1,555 GB/s (NVIDIA A100 datasheet); the rest as the A100 80GB preset.
A100_40GB_BANDWIDTH_BYTES_PER_SECOND = 1555e9
# Megatron-Bridge's performance summaries: bf16 Megatron-Core rows (GPT-OSS 120B, the MoE classes), layouts from the
# release's performance configs; and NVIDIA's DGX Cloud benchmarking recipes (sources dgxc-*): Llama 3.1 8B on one H100
# node, Llama 3.1 8B, 70B and 405B, GPT-3 175B and Nemotron-4 15B and 340B on 16 to 2,304 H100s (the dense multi-node
# class), and Grok-1 314B on 8 to 2,048 H100s (the H100 MoE class), layouts from the recipe.
MBRIDGE_FILE = SCALE_FILE.with_name("scale_measured_mbridge.json")
MBRIDGE_DATA = json.loads(MBRIDGE_FILE.read_text(encoding="utf-8"))
MBRIDGE_ROWS: list[dict] = MBRIDGE_DATA["rows"]
MBRIDGE_CLASSES = ("multi-node Megatron-Core MoE, H100", "multi-node Megatron-Core MoE, B200", "single-node Megatron-Core, H100",
                   "single-node Megatron-Core, B200", "multi-node Megatron-Core dense, H100",
                   # GPT-OSS 120B on 64 GB200 GPUs (one NVLink domain), every row held out.
                   "multi-node Megatron-Core MoE, GB200",
                   # GPT-OSS 120B on 64 GB300 GPUs (one NVLink domain) and on 8 DGX B300 nodes, every row held out.
                   "multi-node Megatron-Core MoE, GB300", "multi-node Megatron-Core MoE, B300")
# Collections of a class reported apart as well (split among themselves: the data file's split_rule): the H100 MoE
# class's Grok-1 rows (NVIDIA's DGX Cloud recipes) and its GPT-OSS 120B rows (Megatron-Bridge).
MBRIDGE_COLLECTIONS = (("multi-node Megatron-Core MoE, H100", "Grok-1 rows alone", "-grok1-"),
                       ("multi-node Megatron-Core MoE, H100", "GPT-OSS 120B rows alone", "-gpt-oss-"))


def megatron_flops(gpt: dict, global_batch: int, seq_len: int) -> float:
    """Model FLOPs of one step as Megatron-LM counts them (training.py ``num_floating_point_operations``
    at core_r0.8.0) for a GPT with MHA, a GeLU MLP of 4h and no SwiGLU."""
    h, layers, vocab = gpt["hidden_size"], gpt["num_layers"], gpt["vocab_size"]
    return 12 * global_batch * seq_len * layers * h * h * ((1 + 1 + seq_len / h) + 4 + vocab / (2 * layers * h))


def measured_seconds(row: dict) -> float:
    """The measured step time, derived from the published figure as the row's source says."""
    m, layout = row["measured"], row["layout"]
    if "step_seconds" in m:
        return m["step_seconds"]
    if "tokens_per_second_per_gpu" in m:
        # Megatron-Bridge's summaries: every token of a global step over the step time and the GPUs.
        return layout["global_batch_size"] * layout["seq_len"] / (m["tokens_per_second_per_gpu"] * row["gpus"])
    if "tokens_per_second" in m:
        # llm-foundry: GlobalBatchSize (T) over Throughput (T/s).
        return m["global_batch_tokens"] / m["tokens_per_second"]
    if "tps_per_gpu" in m:
        # torchtitan: tokens of one data-parallel rank per step over the time and the non-DP degree.
        per_rank = layout["global_batch_size"] // layout.get("dp", 1) * layout["seq_len"]
        non_dp = layout.get("tp", 1) * layout.get("pp", 1) * layout.get("cp", 1)
        return per_rank / (m["tps_per_gpu"] * non_dp)
    gpus = layout["dp"] * layout.get("tp", 1) * layout.get("pp", 1) * layout.get("cp", 1)
    return megatron_flops(row["model"]["gpt"], layout["global_batch_size"], layout["seq_len"]) / (m["tflops_per_gpu"] * 1e12 * gpus)


def _gpt(gpt: dict) -> ModelSpec:
    """A GPT as Megatron-LM's defaults build it: LayerNorm, MHA, a GeLU MLP of 4h, tied embeddings.

    Optional keys state what a row's config sets beyond the shape: ``hidden_dropout`` (after the attention and MLP
    output projections, and on the embedding output: Megatron-Core ``LanguageModelEmbedding`` takes
    ``config.hidden_dropout``), ``attention_dropout`` and ``position_embeddings`` (the rows of a learned absolute
    position table, ``max_position_embeddings``); absent, each is none, as the Megatron-LM README rows are stated.
    ``untie_embeddings_and_output_weights`` (Megatron-LM's flag of that name): true gives the output layer its own
    vocab x h weight; absent, the output is tied to the embedding (the flag's default).
    """
    h, vocab = gpt["hidden_size"], gpt["vocab_size"]
    hidden_dropout, attention_dropout = gpt.get("hidden_dropout", 0.0), gpt.get("attention_dropout", 0.0)
    layer = DenseConfig(hidden_size=h, num_attention_heads=gpt["num_attention_heads"], num_key_value_heads=gpt["num_attention_heads"],
                        intermediate_size=4 * h, gated_mlp=False, hidden_act="gelu", norm="layernorm", attention_bias=True,
                        attention_out_bias=True, mlp_bias=True, hidden_dropout=hidden_dropout, attention_dropout=attention_dropout,
                        partial_rotary_factor=0.0)  # Megatron-LM's default learned_absolute positions: no rotary embedding
    embedding = EmbeddingConfig(vocab_size=vocab, hidden_size=h, dropout=hidden_dropout,
                                position_embeddings=gpt.get("position_embeddings", 0))
    return ModelSpec(
        name=f"gpt-h{h}-l{gpt['num_layers']}",
        layers=(LayerGroup(kind="embedding", config=embedding),
                LayerGroup(kind="dense", config=layer, count=gpt["num_layers"]),
                LayerGroup(kind="output", config=OutputConfig(vocab_size=vocab, hidden_size=h, norm="layernorm",
                                                              tie_word_embeddings=not gpt.get("untie_embeddings_and_output_weights", False)))),
        source="Megatron-LM README weak-scaling table (GPT, defaults of megatron/training/arguments.py)",
    )


# The model's ``qkv_projection`` where the row's trainer code fuses q, k and v into one GEMM that no Hugging Face
# config states: torchtitan's ``FusedQKVLinear`` (its Llama 3 flavors set fuse_qkv=True since
# pytorch/torchtitan@3396a4b37, 2026-06-24; torchtitan/models/llama3/__init__.py and models/common/config_utils.py
# make_gqa_config at bcc09297a), whose q, k and v are contiguous copies of the output's slices.
QKV_PROJECTIONS = {"torchtitan_fused": {"fused_qkv": True, "fused_qkv_contiguous": True}}


def with_qkv_projection(model: ModelSpec, projection: str | None) -> ModelSpec:
    """*model* with every attention layer's q, k, v projection as *projection* (:data:`QKV_PROJECTIONS`) states it;
    ``None``: as the model states it (separate projections for a Llama config)."""
    if projection is None:
        return model
    fields = QKV_PROJECTIONS[projection]
    if not any(hasattr(g.config, "fused_qkv") for g in model.layers):
        raise ValueError(f"{model.name}: qkv_projection {projection!r} names no attention layer's projection")
    return attrs.evolve(model, layers=tuple(attrs.evolve(g, config=attrs.evolve(g.config, **fields))
                                            if hasattr(g.config, "fused_qkv") else g for g in model.layers))


def model(row: dict, registry) -> ModelSpec:
    """The row's model: a preset (with ``overrides`` of its config's keys, and ``qkv_projection`` where the trainer
    fuses q, k and v: :func:`with_qkv_projection`), a Hugging Face style config (``hf``), an MPT config or a
    Megatron-LM GPT; a row's ``moe`` states the Megatron-Core MoE flags its run passed that a config file does not
    hold (``expert_capacity_factor`` with ``pad_expert_input_to_capacity``: drop-and-pad routing)."""
    spec = row["model"]
    if "preset" in spec:
        return with_qkv_projection(_preset(spec["preset"], registry, spec.get("overrides", {})), spec.get("qkv_projection"))
    if "hf" in spec:
        if spec["hf"].get("model_type") not in HF_MODEL_TYPES:
            # A config of another model format (e.g. nemotron_h), built by the format that reads its model_type.
            return model_from_config(spec["hf"], registry, name=row["id"], source=spec["source"])
        return with_megatron_capacity(model_from_hf_config(spec["hf"], name=row["id"], source=spec["source"]), row.get("moe"))
    if "mpt" in spec:
        return model_from_mpt_config(spec["mpt"], name=row["id"], source=f"llm-foundry {spec['yaml']}")
    return _gpt(spec["gpt"])


def _preset(name: str, registry, overrides: dict | None = None) -> ModelSpec:
    """A preset, with *overrides* of its Hugging Face config's keys where a row's recipe changes them (a proxy's
    layer count, the recipe's tokenizer's vocabulary, its query groups)."""
    preset = registry.model(name, "$.model")
    if overrides:
        if preset.hf_config.get("model_type") not in HF_MODEL_TYPES:
            raise ValueError(f"preset {name}: overrides need a Hugging Face style config")
        unknown = set(overrides) - set(preset.hf_config)
        if unknown:
            raise ValueError(f"preset {name}: overrides name keys its config does not have: {sorted(unknown)}")
        changed = ", ".join(f"{k} {v}" for k, v in sorted(overrides.items()))
        return model_from_hf_config({**preset.hf_config, **overrides}, name=f"{name} ({changed})", source=f"preset {name}, {changed}")
    if preset.hf_config.get("model_type") in HF_MODEL_TYPES:
        return model_from_hf_config(dict(preset.hf_config), name=name, source=f"preset {name}")
    return model_from_preset(name, registry)  # through its model format (e.g. gpt_oss)


def layout(row: dict) -> ParallelSpec:
    return ParallelSpec(**row["layout"])


# torchtitan's Grand Teton H100s (96 GB HBM2e at 2.4 TB/s, a 500 W power limit): the team's benchmark page says
# their dense peak lies "between SXM and NVL" and is not known (pytorch/torchtitan
# benchmarks/llama3_h100_202412_torchtitan.md, footnote 2, at b5bcd76). The interval's ends, bf16 dense, are NVIDIA's
# datasheet figures: the H100 NVL's 835.5 TFLOP/s (1,671 with sparsity) and the H100 SXM's 989.4.
GRAND_TETON_BF16_INTERVAL = (835.5e12, 989.4e12)
# The bf16 peak stated for them: the one least squares in relative step-time error over the calibration rows priced on
# this device picks within the interval (grand_teton_peak_fit; held-out rows are only checked). It is the interval's
# NVL end: every calibration row is priced too fast even there (tests/plugins/test_scale_cases.py checks both). Every
# other peak of the SXM preset (fp16, fp8) is scaled by the same ratio, a clock derating.
GRAND_TETON_BF16_PEAK = 835.5e12


def hardware(row: dict, registry, grand_teton_bf16_peak: float = GRAND_TETON_BF16_PEAK):
    """The device: a preset; ``h100-hbm2e`` is the H100 SXM preset with torchtitan's Grand Teton HBM2e (2.4 TB/s)
    and its peaks derated to *grand_teton_bf16_peak* (:data:`GRAND_TETON_BF16_PEAK`), ``a100-40gb`` the A100 80GB
    preset with the 40GB part's memory and bandwidth."""
    if row["hardware"] == "a100-40gb":
        return attrs.evolve(registry.hardware_preset("a100-80gb").spec, name="NVIDIA A100 SXM 40GB",
                            memory_bandwidth_bytes_per_second=A100_40GB_BANDWIDTH_BYTES_PER_SECOND, memory_bytes=40 * 2**30)
    if row["hardware"] == "h100-hbm2e":
        sxm = registry.hardware_preset("h100-sxm").spec
        derate = grand_teton_bf16_peak / sxm.peak_flops["bf16"]
        return attrs.evolve(sxm, name="H100 96GB HBM2e (Grand Teton, 500 W)", memory_bandwidth_bytes_per_second=2.4e12,
                            memory_bytes=96 * 2**30, peak_flops={k: v * derate for k, v in sxm.peak_flops.items()})
    return registry.hardware_preset(row["hardware"]).spec


def grand_teton_peak_fit(registry, rows=ROWS, points: int = 33) -> tuple[float, list[tuple[float, list[float]]]]:
    """The bf16 peak within :data:`GRAND_TETON_BF16_INTERVAL` (``points`` evenly spaced, both ends included) that
    minimises the sum of squared relative step-time errors of the ``calibration`` rows priced on ``h100-hbm2e``;
    and, per peak tried, those rows' errors."""
    calibration = [r for r in rows if r["hardware"] == "h100-hbm2e" and r["split"] == "calibration"]
    low, high = GRAND_TETON_BF16_INTERVAL
    tried = []
    for i in range(points):
        peak = low + (high - low) * i / (points - 1)
        errors = []
        for row in calibration:
            priced = estimated(row, registry, device=hardware(row, registry, peak))
            errors.append(priced.step_seconds / measured_seconds(row) - 1)
        tried.append((peak, errors))
    best = min(tried, key=lambda t: sum(e * e for e in t[1]))
    return best[0], tried


def recompute(row: dict, registry) -> RecomputeSpec | None:
    setting = row.get("recompute")
    if setting is None:
        return None
    if setting in ("full", "selective", "none"):
        return RecomputeSpec(default=Setting.parse(setting))
    if isinstance(setting, dict):
        # torchtitan's selective layer checkpointing (selective_ac_option = k): a full checkpoint on every k-th block,
        # counted from 1 over the blocks in order (torchtitan/parallelisms/parallelize_llama.py checkpoint_wrapper at
        # 395a526: ``_count % every_x_layer == 0``), none on the others; one pipeline rank here.
        if row["layout"].get("pp", 1) != 1:
            raise ValueError(f"{row['id']}: selective_ac_option is priced here for one pipeline rank only")
        every = setting["selective_ac_option"]
        count = len(plan_layout(model(row, registry), layout(row), registry).kinds)
        return RecomputeSpec(default=Setting(), layers=tuple((i, i, Setting("full")) for i in range(every - 1, count, every)))
    # One recompute-module name, or a list of them (Megatron's --recompute-modules): the union of their switches.
    modules = registry.runtime(row["runtime"]).recompute_modules
    switches = set().union(*(modules[name] for name in ([setting] if isinstance(setting, str) else setting)))
    return RecomputeSpec(default=Setting.parse(sorted(switches)))


def runtime(row: dict, registry, as_run: bool = True):
    """The row's runtime with the trainer options it ran with (``runtime.options`` of a config file),
    or with the runtime's defaults when not *as_run*."""
    return apply_options(registry.runtime(row["runtime"]), row.get("options", {}) if as_run else {})


def estimated(row: dict, registry, as_run: bool = True, device=None) -> Any:
    """The row's step time as hp prices it (a :class:`~hp_core.engine.timing.StepTime`), on *device* where given
    (a :class:`~hp_core.specs.HardwareSpec`), else on the row's (:func:`hardware`); the precision fields the row states
    (``precision_fields``: NeMo 1.0's Apex DistributedFusedAdam state and main-weight widths; ``precision`` names an MPT
    config's) over the runtime's, with its options or without."""
    run = runtime(row, registry, as_run)
    return step_time(model(row, registry), layout(row), registry=registry,
                     hardware=device if device is not None else hardware(row, registry),
                     runtime=run, recompute=recompute(row, registry),
                     precision=attrs.evolve(run.precision, **row["precision_fields"]) if "precision_fields" in row else None)


def validated(rows=ROWS):
    return [r for r in rows if r["split"] in ("calibration", "held-out")]


def priced(registry, rows=ROWS) -> list[tuple[dict, float, Any]]:
    """``(row, measured seconds, StepTime)`` of every row validated (``split`` calibration or held-out)."""
    return [(row, measured_seconds(row), estimated(row, registry)) for row in validated(rows)]


def report(registry) -> str:
    """The validation table and per-class summary (markdown), as docs/time.md shows it between the markers."""
    return _report(priced(registry), CLASSES)


def mpt_report(registry) -> str:
    """The MPT rows' table and per-class summary (markdown), as docs/time.md shows it between the mpt markers."""
    return _report(priced(registry, MPT_ROWS), MPT_CLASSES)


def _report(rows: list[tuple[dict, float, Any]], classes: tuple[str, ...]) -> str:
    lines = ["| row | class | split | GPUs | layout | measured s | estimated s | error | exposed comm s | hidden comm s |",
             "|---|---|---|---:|---|---:|---:|---:|---:|---:|"]
    for row, measured, t in rows:
        lay = row["layout"]
        degrees = " ".join(f"{k}{lay[k]}" for k in ("dp", "tp", "cp", "ep", "pp", "vpp") if lay.get(k, 1) > 1) or "dp1"
        gpus = lay.get("dp", 1) * lay.get("tp", 1) * lay.get("cp", 1) * lay.get("pp", 1)
        total = sum(tot for s in t.stages[:1] for _, tot, _ in s.communication_by_group)
        exposed = sum(e for s in t.stages[:1] for _, _, e in s.communication_by_group)
        opts = ", ".join(f"{k}={('on' if v else 'off') if isinstance(v, bool) else v}" for k, v in row.get("options", {}).items())
        lines.append(f"| {row['id']} | {row['class']} | {row['split']} | {gpus} | {degrees}{'; ' + opts if opts else ''} | "
                     f"{measured:.3f} | {t.step_seconds:.3f} | {100 * (t.step_seconds / measured - 1):+.1f}% | "
                     f"{exposed:.3f} | {total - exposed:.3f} |")
    lines.append("")
    lines.append("(Exposed and hidden communication: stage 0, per micro-batch for TP/CP/EP/PP/FSDP plus the step-end DP once.)")
    lines.append("")
    for cls in classes:
        for split in ("calibration", "held-out"):
            errors = [100 * (t.step_seconds / m - 1) for r, m, t in rows if r["class"] == cls and r["split"] == split]
            if not errors:
                lines.append(f"- {cls}, {split}: no rows.")
                continue
            within = sum(abs(e) <= 10 for e in errors)
            lines.append(f"- {cls}, {split}: {len(errors)} rows, mean absolute error {sum(map(abs, errors)) / len(errors):.1f}%, "
                         f"largest {max(errors, key=abs):+.1f}%, {within} within 10%.")
    return "\n".join(lines) + "\n"


def mbridge_report(registry) -> str:
    """The rows of ``scale_measured_mbridge.json`` (Megatron-Bridge's and the DGX Cloud recipes' bf16 rows) priced with
    the ``megatron`` runtime's defaults and as run (the overlap options and the gradient reduction the row's recipe
    set, its ``options``; its ``recompute`` either way), per class the calibration and held-out rows apart (docs/time.md, the mbridge markers)."""
    rows = [(row, measured_seconds(row), estimated(row, registry, as_run=False), estimated(row, registry))
            for row in validated(MBRIDGE_ROWS)]
    lines = ["| row | class | split | GPUs | layout | measured s | hp defaults s | error | hp as run s | error as run "
             "| exposed comm s (as run) | hidden comm s (as run) |",
             "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row, measured, default, t in rows:
        lay = row["layout"]
        degrees = " ".join(f"{k}{lay[k]}" for k in ("dp", "tp", "cp", "ep", "etp", "pp", "vpp") if lay.get(k, 1) > 1)
        total = sum(tot for s in t.stages[:1] for _, tot, _ in s.communication_by_group)
        exposed = sum(e for s in t.stages[:1] for _, _, e in s.communication_by_group)
        lines.append(f"| {row['id']} | {row['class']} | {row['split']} | {row['gpus']} | {degrees}, mbs {lay['micro_batch_size']} | "
                     f"{measured:.3f} | {default.step_seconds:.3f} | {100 * (default.step_seconds / measured - 1):+.1f}% | "
                     f"{t.step_seconds:.3f} | {100 * (t.step_seconds / measured - 1):+.1f}% | {exposed:.3f} | {total - exposed:.3f} |")
    lines.append("")
    lines.append("(As run: the trainer options each row's recipe sets, its `options`: `grad_reduce_in_fp32` off on every "
                 "row but NeMo 24.12's Nemotron-4 15B (Megatron-Core's distributed optimizer with no `grad_sync_dtype`: "
                 "fp32); `overlap_grad_reduce` and `overlap_param_gather` on wherever there is more than one data-parallel "
                 "rank (every row but the 405B proxy on 64 GPUs); on the dense multi-node rows and the Grok-1 rows `tp_comm_overlap` wherever "
                 "TP > 1 and `overlap_p2p_communication` wherever PP > 1; each row's `recompute` too (of the dense rows, "
                 "NeMo 24.09's Nemotron-4 340B: selective, core attention; the GPT-OSS rows: `layernorm` and `moe_act`). The "
                 "Grok-1 rows' experts drop tokens at capacity factor 1.0 and pad to it (their `moe`), either way. Exposed and "
                 "hidden communication: stage 0, per micro-batch for TP/CP/EP/PP plus the step-end DP once.)")
    lines.append("")
    groups = [(cls, cls, "") for cls in MBRIDGE_CLASSES] + [(cls, f"{cls}, {label}", part) for cls, label, part in MBRIDGE_COLLECTIONS]
    for cls, label, part in groups:
        for split in ("calibration", "held-out"):
            chosen = [(m, d, t) for r, m, d, t in rows if r["class"] == cls and r["split"] == split and part in r["id"]]
            if not chosen:
                lines.append(f"- {label}, {split}: no rows.")
                continue
            parts = []
            for name, errors in (("defaults", [100 * (d.step_seconds / m - 1) for m, d, _ in chosen]),
                                 ("as run", [100 * (t.step_seconds / m - 1) for m, _, t in chosen])):
                parts.append(f"{name} mean absolute error {sum(map(abs, errors)) / len(errors):.1f}%, "
                             f"largest {max(errors, key=abs):+.1f}%, {sum(abs(e) <= 10 for e in errors)} within 10%")
            lines.append(f"- {label}, {split}: {len(chosen)} rows; " + "; ".join(parts) + ".")
    return "\n".join(lines) + "\n"


def memory_rows(rows=ROWS) -> list[dict]:
    """Rows stating torchtitan's logged memory (``measured.memory_gib``: ``torch.cuda.max_memory_reserved``, torchtitan
    components/metrics.py ``reserved_bytes.all.peak`` at 82a9530f6 and 6b9602339), held out like their step times."""
    return [r for r in validated(rows) if "memory_gib" in r.get("measured", {})]


def memory_estimated(row: dict, registry) -> Any:
    """The row's stage 0 as hp's memory estimate prices it, run as the row ran (options, recompute, hardware)."""
    from hp_core.api import estimate

    return estimate(model(row, registry), layout(row), registry=registry, runtime=runtime(row, registry),
                    hardware=hardware(row, registry), recompute=recompute(row, registry)).stages[0]


def memory_report(registry) -> str:
    """The logged-memory table (markdown) docs/time.md shows between the scale-memory markers: the measured max
    reserved against hp's ``reserved_bytes`` (the allocated peak plus ``cached_bytes``) and the allocated peak."""
    lines = ["| row | split | measured GiB | hp reserved GiB | error | hp peak GiB | cached GiB | activations GiB | "
             "working GiB |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in memory_rows():
        s = memory_estimated(row, registry)
        measured = row["measured"]["memory_gib"]
        reserved = s.reserved_bytes / 2**30
        lines.append(f"| {row['id']} | {row['split']} | {measured:.2f} | {reserved:.2f} | {100 * (reserved / measured - 1):+.1f}% | "
                     f"{s.peak_bytes / 2**30:.2f} | {s.cached_bytes / 2**30:.2f} | {s.memory.activations_bytes / 2**30:.2f} | "
                     f"{s.memory.working_set_bytes / 2**30:.2f} |")
    return "\n".join(lines) + "\n"
