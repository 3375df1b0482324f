"""hp's step time against NeMo's own FP8 performance pages (``nemo_rows`` of tests/plugins/data/fp8_measured_runs.json).

Run: ``python benchmarks/fp8_nemo.py`` (``python benchmarks/fp8_runs.py`` prints it before the DGX Cloud rows). One row per
run: the measured step time (from the page's tokens/s/GPU, or from its model TFLOP/s/GPU through NeMo's own FLOPs count),
hp's under the row's recipe with the ``megatron`` runtime's defaults, as :func:`fp8_runs.price` prices it, and beside it
with the options the row states, hp's bf16 time of the same layout; then per collection. All held out
(docs/precision.md, "NeMo's performance pages"). Moved here from benchmarks/fp8_runs.py, which still answers these names.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hp_core import api

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import fp8_runs  # noqa: E402  (the data file, price() and measured_seconds() of the other FP8 rows)


# NeMo's model-FLOPs count, by which its performance pages print "Model TFLOP / sec / GPU" (the 24.07 summary) and
# "TFLOPS / GPU" (the 25.04 long-sequence table): NVIDIA/NeMo nemo/collections/common/metrics/perf_metrics.py
# FLOPsMeasurementCallback (_gpt3, _llama2, _llama3, _nemotron) at 9c5c5e9709 (NeMo 24.07's figures) and
# nemo/utils/flops_formulas.py (gpt3, llama2, llama3, nemotron) at 14d427f575 (the long-sequence table's commit; the
# same expressions at v2.3.0rc2 and v2.3.0, NeMo 25.04), which nemo/lightning/pytorch/callbacks/flops_callback.py
# divides by the world size and the mean step time. Every formula counts full (not causal) attention. The
# vocabulary is NeMo's per family (perf_metrics_utils.py LLM_VOCAB_SIZE_MAP), not the model's.
NEMO_FLOPS_VOCAB = {"gpt3": 51200, "llama2": 32000, "llama3": 128256, "nemotron": 256000}


def nemo_model_flops(row: dict) -> float:
    """NeMo's model FLOPs of one step of *row* (its ``nemo_flops``: the formula and the FLOPSConfig fields ``layers``,
    ``hs``, ``ffn_hs``, ``attention_heads``, ``query_groups``; the row's global batch and sequence length).

    GPT-3: (24 B s h^2 + 4 B s^2 h) x 3 L + 6 B s h V. Llama 2 and 3: B s L h^2 (12 + 12 g / a + 18 f / h + 12 s / h
    + 6 V / (L h)) (a gated MLP: three f x h matrices); Nemotron: the same with 12 f / h (an ungated MLP)."""
    c = row["nemo_flops"]
    b, s, layers, h = row["global_batch_size"], row["seq_len"], c["layers"], c["hs"]
    vocab = NEMO_FLOPS_VOCAB[c["formula"]]
    if c["formula"] == "gpt3":
        return (24 * b * s * h * h + 4 * b * s * s * h) * 3 * layers + 6 * b * s * h * vocab
    mlp = {"llama2": 18, "llama3": 18, "nemotron": 12}[c["formula"]]
    return b * s * layers * h * h * (12 + 12 * c["query_groups"] / c["attention_heads"] + mlp * c["ffn_hs"] / h
                                     + 12 * s / h + 6 * vocab / (layers * h))


def nemo_measured_seconds(row: dict) -> float:
    """A ``nemo_rows`` row's measured step time: from its tokens per second per GPU where the table prints them (the
    24.07 summary), else from its model TFLOP/s per GPU through NeMo's FLOPs count of the same step
    (:func:`nemo_model_flops` over TFLOP/s x 1e12 x GPUs: the long-sequence table)."""
    if "tokens_per_second_per_gpu" in row:
        return fp8_runs.measured_seconds(row)
    return nemo_model_flops(row) / (row["model_tflops_per_gpu"] * 1e12 * row["gpus"])


NEMO_COLLECTIONS = {"nemo-24.07-summary": "NeMo 24.07 performance summary, DGX-H100",
                    "nemo-25.04-long-sequence": "NeMo 25.04 long-sequence Llama 3 8B with CP, DGX-B200"}
# The NeMo Framework user guide's performance summaries of NeMo 2.0's containers (dense models; docs.nvidia.com, not a
# git repository): their own table (nemo_summary_section), priced with the defaults and as run.
NEMO_SUMMARIES = {"nemo-25.02-summary": "NeMo 25.02 performance summary (DGX-B200, DGX-H100)",
                  "nemo-25.04-summary": "NeMo 25.04 performance summary (DGX-GB200)",
                  "nemo-25.07-summary": "NeMo 25.07 performance summary (DGX-GB200)"}
NEMO_DEVICES = {"h100-sxm": "DGX-H100", "b200": "DGX-B200", "gb200": "DGX-GB200"}


def nemo_results(registry=None) -> list[dict]:
    """Each ``nemo_rows`` row priced as :func:`fp8_runs.results` prices the NeMo 24.07 rows of ``rows`` (the ``megatron``
    runtime's defaults, the row's recipe; no row states runtime options): measured and hp step time, the error, hp's
    bf16 time of the same layout; and, where the row carries ``launcher_options`` (the options NeMo-Framework-Launcher
    24.07's yaml for the model states, an assumption: source nemo-24.07-launcher-options), hp's time with them; where it
    carries ``runtime_options`` (the 25.x summaries' rows: what NeMo's performance scripts of the container set), hp's
    time as run."""
    registry = registry or api.build_registry()
    found = []
    for row in json.loads(fp8_runs.DATA.read_text(encoding="utf-8"))["nemo_rows"]:
        measured = nemo_measured_seconds(row)
        estimated = fp8_runs.price(row, registry)
        bf16 = fp8_runs.price(row, registry, "bf16")
        launcher = (fp8_runs.price(dict(row, runtime_options=row["launcher_options"]), registry, as_run=True).step_seconds
                    if "launcher_options" in row else None)
        as_run = fp8_runs.price(row, registry, as_run=True).step_seconds if "runtime_options" in row else None
        found.append({"as_run_seconds": as_run, "as_run_error": None if as_run is None else (as_run - measured) / measured,
                      "launcher_seconds": launcher,
                      "launcher_error": None if launcher is None else (launcher - measured) / measured,
                      "id": row["id"], "collection": row["collection"], "split": row["split"], "recipe": row["recipe"],
                      "layout": row, "commit": row["url"].split("/blob/")[1][:7] if "/blob/" in row["url"] else None, "measured_seconds": measured,
                      "estimated_seconds": estimated.step_seconds, "error": (estimated.step_seconds - measured) / measured,
                      "bf16_seconds": bf16.step_seconds, "mfu": estimated.mfu, "mfu_recipe_peak": estimated.mfu_recipe_peak})
    return found


def nemo_section(found: list[dict]) -> str:
    """The NeMo rows' table docs/precision.md shows (tests/plugins/test_fp8_runs.py checks it is current): the
    collections of :data:`NEMO_COLLECTIONS` (the 25.x summaries are :func:`nemo_summary_section`'s)."""
    found = [r for r in found if r["collection"] in NEMO_COLLECTIONS]
    lines = ["| run | table at | recipe | layout | measured s | hp s | error | hp, launcher options s | error "
             "| hp bf16 s | hp FP8 speedup | hp MFU (bf16 peak / recipe peak) |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in found:
        launcher = "| |" if r["launcher_seconds"] is None else f"| {r['launcher_seconds']:.3f} | {r['launcher_error']:+.1%} |"
        lines.append(f"| `{r['id']}` | {r['commit']} | {r['recipe']} | {_layout(r['layout'])} "
                     f"| {r['measured_seconds']:.3f} | {r['estimated_seconds']:.3f} "
                     f"| {r['error']:+.1%} {launcher} {r['bf16_seconds']:.3f} | {r['bf16_seconds'] / r['estimated_seconds']:.2f} "
                     f"| {r['mfu']:.1%} / {r['mfu_recipe_peak']:.1%} |")
    lines.append("")
    for key, name in NEMO_COLLECTIONS.items():
        chosen = [r for r in found if r["collection"] == key]
        lines.append(f"- {name}, held out: {fp8_runs._summary([r['error'] for r in chosen])}.")
        if any(r["launcher_seconds"] is not None for r in chosen):
            lines.append(f"  - with the options of NeMo-Framework-Launcher 24.07's yaml for each model (launcher_options, an "
                         f"assumption): {fp8_runs._summary([r['launcher_error'] for r in chosen])}.")
        commits = sorted({r["commit"] for r in chosen}, key=lambda c: [r["commit"] for r in chosen].index(c))
        if len(commits) > 1:
            for commit in commits:
                lines.append(f"  - first printed at {commit}: {fp8_runs._summary([r['error'] for r in chosen if r['commit'] == commit])}.")
            # The same layout measured at more than one commit: how far apart its measured step times are.
            groups: dict = {}
            for r in chosen:
                groups.setdefault((r["layout"]["model"], r["layout"]["gpus"]), []).append(r["measured_seconds"])
            spread = {key: max(v) / min(v) - 1 for key, v in groups.items() if len(v) > 1}
            widest = max(spread, key=spread.get)
            lines.append(f"  - the same layout printed with another figure at a later commit: {len(spread)} layouts, measured step "
                         f"times up to {spread[widest]:.1%} apart ({widest[0]} on {widest[1]} GPUs).")
    return "\n".join(lines) + "\n"


def _layout(row: dict) -> str:
    degrees = "".join(f" {k}{row[k]}" for k in ("tp", "pp", "vpp", "cp") if row[k] > 1)
    return (f"{row['gpus']} GPUs{degrees}{' FSDP' if row.get('zero') == 3 else ''}, mbs {row['micro_batch_size']}, "
            f"gbs {row['global_batch_size']}, seq {row['seq_len']}")


def nemo_summary_section(found: list[dict]) -> str:
    """The 25.x summaries' table docs/precision.md shows (tests/plugins/test_fp8_runs.py checks it is current): each row
    with the defaults and as run, then per collection, per device and per model family (all held out)."""
    found = [r for r in found if r["collection"] in NEMO_SUMMARIES]
    lines = ["| run | system | recipe | layout | options as run | measured s | hp s | error | hp as run s | error as run "
             "| hp bf16 s | hp FP8 speedup | hp MFU (bf16 peak / recipe peak) |",
             "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in found:
        row = r["layout"]
        options = ", ".join(k if v is True else f"{k} {str(v).lower()}" for k, v in row["runtime_options"].items())
        lines.append(f"| `{r['id']}` | {NEMO_DEVICES[row['hardware']]} | {r['recipe']} | {_layout(row)} | {options} "
                     f"| {r['measured_seconds']:.3f} | {r['estimated_seconds']:.3f} | {r['error']:+.1%} | {r['as_run_seconds']:.3f} "
                     f"| {r['as_run_error']:+.1%} | {r['bf16_seconds']:.3f} | {r['bf16_seconds'] / r['estimated_seconds']:.2f} "
                     f"| {r['mfu']:.1%} / {r['mfu_recipe_peak']:.1%} |")
    lines.append("")
    groups = [(name, [r for r in found if r["collection"] == key]) for key, name in NEMO_SUMMARIES.items()]
    groups += [(f"{name}, all containers", [r for r in found if r["layout"]["hardware"] == key]) for key, name in NEMO_DEVICES.items()]
    families = {"Llama 3": ("llama3-",), "GPT-3 175B": ("gpt3-",), "Nemotron-4": ("nemotron-4-",)}
    groups += [(f"{name}, all devices", [r for r in found if r["layout"]["model"].startswith(prefix)]) for name, prefix in families.items()]
    groups += [("Megatron-FSDP rows (zero 3)", [r for r in found if r["layout"].get("zero") == 3]), ("all", found)]
    for name, chosen in groups:
        if chosen:
            lines.append(f"- {name}, held out: with the defaults {fp8_runs._summary([r['error'] for r in chosen])}; as run "
                         f"{fp8_runs._summary([r['as_run_error'] for r in chosen])}.")
    return "\n".join(lines) + "\n"


def main() -> None:
    found = nemo_results()
    print(nemo_section(found), end="")
    print()
    print(nemo_summary_section(found), end="")


if __name__ == "__main__":
    main()
