"""hp's step time against NVIDIA's DGX Cloud benchmarking FP8 runs (``dgxc_rows`` of tests/plugins/data/fp8_measured_runs.json).

Run: ``python benchmarks/fp8_dgxc.py`` (``python benchmarks/fp8_runs.py`` prints it last). One row per run: the measured
FP8 step time, hp's under the row's recipe, ``fp8-delayed-param-gather`` (the runs' scaling: Transformer Engine delayed
scaling, HYBRID, amax history 1024, with the parameter all-gather in FP8 as every run's ``fp8_params`` made it) and under
``fp8-delayed`` (the same scaling with a bf16 parameter all-gather), the same release's BF16 figure measured and priced,
and both FP8 speedups; then per container and model, and per split; the DGX-GB200 rows (added after the ``gb200`` preset, all held out) apart. Every row is priced as run: the
``megatron`` runtime with the row's ``runtime_options``, its activation ``recompute`` where its config sets one (absent: none),
the row's hardware preset (``h100-sxm``; ``gb200`` for the DGX-GB200 rows). Nothing is fitted to these rows
(``dgxc_split_rule``; docs/precision.md). The Nemotron-H 56B rows (``dgxc_nemotronh_rows``, no BF16 twin printed, all held
out) are a collection apart, priced by the same :func:`price` and printed after the others (``nemotronh_section``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import attrs

from hp_core import api
from hp_core.specs import RecomputeSpec, Setting

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import fp8_runs  # noqa: E402  (the data file, layout() and _decoder_layers() of the other FP8 rows)

# The NeMo containers in the split's order; nemo:dev is the development image release v24.11.1 ran Grok-1 in (its
# launch.sh names FW_VERSION 24.09; the next release moved to 24.12).
CONTAINERS = ("nemo:24.05", "nemo:24.09", "nemo:dev", "nemo:24.12", "nemo:25.02.01", "nemo:25.04.00", "nemo:25.04.01")
MODELS = {"llama3-8b": "Llama 3.1 8B", "llama3-70b": "Llama 3.1 70B", "gpt3-175b": "GPT-3 175B", "llama3-405b": "Llama 3.1 405B",
          "nemotron-4-15b": "Nemotron-4 15B", "nemotron-4-340b": "Nemotron-4 340B", "grok1-314b": "Grok-1 314B"}
# The Nemotron-4 rows, added after the others and split among themselves (dgxc_split_rule); the Grok-1 rows likewise.
NEMOTRON = ("nemotron-4-15b", "nemotron-4-340b")
GROK = ("grok1-314b",)
# The rows added later, each collection split among itself: not in the first 62.
LATER = NEMOTRON + GROK
SPLITS = ("calibration", "held_out")
# The DGX-GB200 rows (Llama 3.1 405B and Grok-1 of releases v25.05 to v25.05.05, priced on the gb200 preset): held out, apart.
GB200 = "gb200"
HARDWARE = ("h100-sxm", GB200)
# The second FP8 column's recipe: the rows' scaling with the parameter all-gather in bf16 (hp's fp8-delayed).
BF16_GATHER = "fp8-delayed"
# The Nemotron-H 56B rows (nemotronh/README.md, v25.05 to v25.05.05), a collection of their own kept apart from dgxc_rows
# (dgxc_nemotronh_note): no BF16 twin printed, all held out (dgxc_nemotronh_split_rule).
NEMOTRONH_ROWS = "dgxc_nemotronh_rows"


def rows() -> list[dict]:
    return json.loads(fp8_runs.DATA.read_text(encoding="utf-8"))["dgxc_rows"]


def _gpt3(config: dict):
    """GPT-3 175B as NeMo 1.0 builds it from gpt3_175b_hydra.yaml (the row's ``model_config`` says where each field comes
    from): Megatron's default GPT, tests/plugins/scale_cases.py ``_gpt`` (LayerNorm, multi-head attention, a GeLU MLP of
    4h with biases, tied embeddings), with the yaml's learned position table and its dropout on the embedding output,
    the attention probabilities and each block's output."""
    if config["ffn_hidden_size"] != 4 * config["hidden_size"]:
        raise ValueError(f"GPT-3 model_config: ffn_hidden_size {config['ffn_hidden_size']} is not 4 x hidden_size, "
                         "which Megatron's default GPT builds")
    keys = ("hidden_size", "num_attention_heads", "num_layers", "vocab_size", "hidden_dropout", "attention_dropout")
    return fp8_runs._scale_cases()._gpt({**{k: config[k] for k in keys}, "position_embeddings": config["max_position_embeddings"]})


def model(row: dict, registry):
    """The row's model: GPT-3 from its ``model_config``; a Hugging Face style config (``hf``: NeMo's Grok-1, a Mixtral-shaped
    MoE) with the row's ``moe`` capacity; a Llama preset, with the row's ``model_overrides`` of its config.json fields where
    the run changed them (the 405B proxies' layer count, the NeMo 1.0 405B runs' GPT-2 vocabulary); a key the preset's
    config lacks is refused (ValueError)."""
    if "model_config" in row:
        return _gpt3(row["model_config"])
    if "hf" in row:
        from hp_plugins.models.hf import model_from_hf_config

        built = model_from_hf_config(row["hf"], name=f"{row['model']} ({row['id']})", source=f"fp8_measured_runs.json dgxc_rows {row['id']}")
        # Megatron-Core's drop-and-pad routing where the run passed it (tests/plugins/measured_cases.py, as the bf16 rows).
        return fp8_runs._scale_cases().with_megatron_capacity(built, row.get("moe"))
    if "model_overrides" not in row:
        return api.model_from_preset(row["model"], registry=registry)
    # tests/plugins/scale_cases.py's preset builder: it refuses an override naming a key the preset's config lacks.
    return fp8_runs._scale_cases()._preset(row["model"], registry, row["model_overrides"])


def price(row: dict, registry, bf16: bool = False, recipe: str | None = None):
    """hp's step time of *row* as run: its recipe, or ``bf16`` on the BF16 table's layout (*bf16*), or the registered
    *recipe* named in its place (the second FP8 column's ``fp8-delayed``)."""
    name = "bf16" if bf16 else (recipe or row["recipe"])
    runtime = api.apply_options(registry.runtime("megatron"), row["runtime_options"])
    # The precision fields the run states (``precision``: NeMo 1.0's Apex DistributedFusedAdam state and main-weight
    # widths, which fp8_params changes) under either FP8 recipe; the BF16 twin's own (``bf16.precision``).
    fields = row["bf16"].get("precision", {}) if bf16 else row.get("precision", {})
    built = model(row, registry)
    shaped = dict(row, **row["bf16"].get("layout", {})) if bf16 else row
    # A row states ``recompute`` only where its config recomputes (NeMo 1.0's activations_checkpoint_granularity:
    # "selective" is Megatron-Core's core-attention recompute, hp's selective set); the BF16 twin ran the same.
    recompute = RecomputeSpec(default=Setting.parse(row["recompute"])) if "recompute" in row else None
    return api.step_time(built, fp8_runs.layout(shaped, fp8_runs._decoder_layers(built)), registry=registry, runtime=runtime,
                         precision=attrs.evolve(runtime.precision, recipe=name, **fields), recompute=recompute,
                         hardware=registry.hardware_preset(row["hardware"]).spec)


def results(registry=None) -> list[dict]:
    """Each dgxc row priced: FP8 under its recipe and under ``fp8-delayed`` (a bf16 gather), its BF16 twin, both speedups."""
    registry = registry or api.build_registry()
    found = []
    for row in rows():
        fp8 = price(row, registry).step_seconds
        bf16_gather = price(row, registry, recipe=BF16_GATHER).step_seconds
        bf16 = price(row, registry, bf16=True).step_seconds
        measured, base = row["step_seconds"], row["bf16"]["step_seconds"]
        found.append({"id": row["id"], "container": row["container"], "model": row["model"], "split": row["split"], "row": row,
                      "hardware": row["hardware"],
                      "measured_seconds": measured, "estimated_seconds": fp8, "error": fp8 / measured - 1,
                      "bf16_gather_seconds": bf16_gather, "bf16_gather_error": bf16_gather / measured - 1,
                      "bf16_measured_seconds": base, "bf16_seconds": bf16, "bf16_error": bf16 / base - 1,
                      "measured_speedup": base / measured, "estimated_speedup": bf16 / fp8,
                      "speedup_gap": (bf16 / fp8) / (base / measured) - 1})
    return found


def nemotronh_rows() -> list[dict]:
    return json.loads(fp8_runs.DATA.read_text(encoding="utf-8"))[NEMOTRONH_ROWS]


def nemotronh_results(registry=None) -> list[dict]:
    """Each Nemotron-H row priced with :func:`price` as the dgxc rows are: FP8 under its recipe and under ``fp8-delayed``
    (a bf16 gather); the release prints no BF16 table, so there is no twin and no speedup."""
    registry = registry or api.build_registry()
    found = []
    for row in nemotronh_rows():
        fp8 = price(row, registry).step_seconds
        bf16_gather = price(row, registry, recipe=BF16_GATHER).step_seconds
        measured = row["step_seconds"]
        found.append({"id": row["id"], "container": row["container"], "model": row["model"], "split": row["split"], "row": row,
                      "hardware": row["hardware"], "measured_seconds": measured, "estimated_seconds": fp8,
                      "error": fp8 / measured - 1, "bf16_gather_seconds": bf16_gather, "bf16_gather_error": bf16_gather / measured - 1})
    return found


def nemotronh_section(found: list[dict]) -> str:
    """The Nemotron-H table docs/precision.md shows (tests/plugins/test_fp8_runs_dgxc_nemotronh.py checks it is current)."""
    lines = ["| run | split | layout | measured s | hp s | error | hp, bf16 gather s | error |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in found:
        lines.append(f"| `{r['id']}` | {r['split']} | {_layout(r['row'])} | {r['measured_seconds']:.3f} | {r['estimated_seconds']:.3f} "
                     f"| {r['error']:+.1%} | {r['bf16_gather_seconds']:.3f} | {r['bf16_gather_error']:+.1%} |")
    largest = max(found, key=lambda r: abs(r["error"]))
    lines += ["", f"- Nemotron-H 56B, H100 (held out): {len(found)} rows, mean absolute error {_mae(r['error'] for r in found):.1%} "
              f"(with the bf16 gather {_mae(r['bf16_gather_error'] for r in found):.1%}), {min(r['error'] for r in found):+.1%} to "
              f"{max(r['error'] for r in found):+.1%}, largest {largest['error']:+.1%} (`{largest['id']}`), "
              f"{sum(abs(r['error']) <= 0.10 for r in found)} within 10%; no BF16 twin printed."]
    return "\n".join(lines) + "\n"


def _layout(row: dict) -> str:
    degrees = " ".join(f"{k}{row.get(k, 1)}" for k in ("tp", "pp", "cp", "vpp", "ep", "etp") if row.get(k, 1) > 1)
    layers = row.get("model_overrides", {}).get("num_hidden_layers")
    if "hf" in row and row["hf"]["num_hidden_layers"] < 64:  # a Grok-1 proxy
        layers = row["hf"]["num_hidden_layers"]
    return (f"{row['gpus']} GPUs {degrees}, gbs {row['global_batch_size']}" + (f", {layers} layers" if layers else "")
            + (f", {row['recompute']} recompute" if "recompute" in row else ""))


def _mae(values) -> float:
    values = list(values)
    return sum(map(abs, values)) / len(values)


def section(found: list[dict]) -> str:
    """The tables docs/precision.md shows (tests/plugins/test_fp8_runs.py checks they are current)."""
    lines = ["| run | split | layout | measured s | hp s | error | hp, bf16 gather s | error | bf16 measured s | hp bf16 s "
             "| bf16 error | measured FP8 speedup | hp FP8 speedup |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in found:
        lines.append(f"| `{r['id']}` | {r['split']} | {_layout(r['row'])} | {r['measured_seconds']:.3f} | {r['estimated_seconds']:.3f} "
                     f"| {r['error']:+.1%} | {r['bf16_gather_seconds']:.3f} | {r['bf16_gather_error']:+.1%} | {r['bf16_measured_seconds']:.3f} "
                     f"| {r['bf16_seconds']:.3f} | {r['bf16_error']:+.1%} | {r['measured_speedup']:.2f} | {r['estimated_speedup']:.2f} |")
    lines += ["", "| container | model | rows | error | mean absolute error | within 10% | bf16 error | measured FP8 speedup "
              "| hp FP8 speedup |", "|---|---|---:|---|---:|---:|---|---|---|"]
    for hardware in HARDWARE:
        for container in CONTAINERS:
            for name, label in MODELS.items():
                chosen = [r for r in found if r["container"] == container and r["model"] == name and r["hardware"] == hardware]
                if chosen:
                    lines.append(_class_line(container, label + (", GB200" if hardware == GB200 else ""), chosen))
    lines.append("")
    # The H100 rows: per split, then each collection (the Nemotron-4 and the Grok-1 rows were added later, each split among
    # itself, dgxc_split_rule); then the GB200 rows, all held out.
    h100 = [r for r in found if r["hardware"] != GB200]
    for split in SPLITS + (None,):
        lines.append(_summary(f"H100, {split or 'all'}", [r for r in h100 if split in (None, r["split"])]))
    nemotron = [r for r in h100 if r["model"] in NEMOTRON]
    grok = [r for r in h100 if r["model"] in GROK]
    if nemotron or grok:
        lines.append(_summary("Llama 3.1 and GPT-3 175B", [r for r in h100 if r["model"] not in LATER]))
    if nemotron:
        lines.append(_summary("Nemotron-4", nemotron))
    if grok:
        for split in SPLITS + (None,):
            lines.append(_summary(f"Grok-1{', ' + split if split else ''}", [r for r in grok if split in (None, r["split"])]))
    gb200 = [r for r in found if r["hardware"] == GB200]
    if gb200:
        for name, label in MODELS.items():
            chosen = [r for r in gb200 if r["model"] == name]
            if chosen:
                lines.append(_summary(f"GB200, {label}", chosen))
        lines.append(_summary("GB200, all (held out)", gb200))
    return "\n".join(lines) + "\n"


def _class_line(container: str, label: str, chosen: list[dict]) -> str:
    """One line of the per-container table: the rows of one container, model and device."""
    span = lambda key, fmt: " to ".join(dict.fromkeys(f"{f(r[key] for r in chosen):{fmt}}" for f in (min, max)))
    return (f"| {container} | {label} | {len(chosen)} | {span('error', '+.1%')} | {_mae(r['error'] for r in chosen):.1%} "
            f"| {sum(abs(r['error']) <= 0.10 for r in chosen)} | {span('bf16_error', '+.1%')} "
            f"| {span('measured_speedup', '.2f')} | {span('estimated_speedup', '.2f')} |")


def _summary(label: str, chosen: list[dict]) -> str:
    largest = max(chosen, key=lambda r: abs(r["error"]))
    return (f"- {label}: {len(chosen)} rows, mean absolute error {_mae(r['error'] for r in chosen):.1%} "
            f"(with the bf16 gather {_mae(r['bf16_gather_error'] for r in chosen):.1%}), largest {largest['error']:+.1%} "
            f"(`{largest['id']}`), {sum(abs(r['error']) <= 0.10 for r in chosen)} within 10%; bf16 twins "
            f"{_mae(r['bf16_error'] for r in chosen):.1%}; hp's FP8 speedup over the measured one "
            f"{min(r['speedup_gap'] for r in chosen):+.1%} to {max(r['speedup_gap'] for r in chosen):+.1%}, "
            f"mean absolute {_mae(r['speedup_gap'] for r in chosen):.1%}.")


if __name__ == "__main__":
    print(section(results()), end="")
    print()
    print(nemotronh_section(nemotronh_results()), end="")
