"""hp's step time against the MoE rows of NeMo's performance summary pages (tests/plugins/data/nemo_moe_measured.json).

Run: ``python benchmarks/fp8_nemo_moe.py``. One row per run: Mixtral-8x7B and Mixtral-8x22B on DGX-B200 (NeMo 25.02) and
DGX-GB200 (NeMo 25.04), LLAMA4-Scout-LLM on DGX-GB200 (NeMo 25.07): the measured step time (GBS x sequence / (tokens
per second per GPU x GPUs)), hp's under the row's recipe as run (the ``megatron`` runtime with the row's
``runtime_options``, its token dropping at capacity 1.0 as the row's ``moe`` states, no recompute: none of the runs
recomputes), the error, hp's bf16 time of the same layout and hp's FP8 speedup, and the check of the page's model
TFLOP/s against NeMo's FLOPs count of the row; then per device. All rows are held out: nothing is fitted to them
(docs/precision.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import attrs

from hp_core import api

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import fp8_runs  # noqa: E402  (layout(), _decoder_layers() and the scale-case helpers of the other FP8 rows)

DATA = Path(__file__).resolve().parents[1] / "tests" / "plugins" / "data" / "nemo_moe_measured.json"
DEVICES = {"b200": "DGX-B200", "gb200": "DGX-GB200"}


def rows() -> list[dict]:
    return json.loads(DATA.read_text(encoding="utf-8"))["rows"]


# The page's step time: GBS x sequence length over the tokens per second of all GPUs, as for the other FP8 rows.
measured_seconds = fp8_runs.measured_seconds


def nemo_flops_per_token(row: dict, causal: bool = False) -> float:
    """NeMo's model FLOPs per token of *row* (its ``nemo_flops``): nemo/utils/flops_formulas.py at v2.2.0 to v2.4.0,
    ``mixtral``: L h^2 (12 + 12 g / a + 18 k f / h + 12 s / h + 6 V / (L h)) with k the router's top-k; ``llama3``
    (which flops_callback.py maps ``llama4`` to): the same with k = 1. V is NeMo's per family (perf_metrics_utils.py
    LLM_VOCAB_SIZE_MAP), or *vocab* where the row's ``nemo_flops`` names another. Both count full attention;
    *causal* halves the attention term (6 s / h), the count the 8x22B and Scout figures follow (``flops_check``)."""
    c = row["nemo_flops"]
    layers, h, s = c["layers"], c["hs"], row["seq_len"]
    topk = c.get("moe_router_topk", 1) if c["formula"] == "mixtral" else 1
    return layers * h * h * (12 + 12 * c["query_groups"] / c["attention_heads"] + 18 * topk * c["ffn_hs"] / h
                             + (6 if causal else 12) * s / h + 6 * c["vocab"] / (layers * h))


def nemo_tflops_per_gpu(row: dict, causal: bool = False, vocab: int | None = None) -> float:
    """The model TFLOP/s per GPU NeMo's count gives the row's tokens per second (a *vocab* in place of the row's)."""
    shaped = dict(row, nemo_flops=dict(row["nemo_flops"], vocab=vocab)) if vocab else row
    return nemo_flops_per_token(shaped, causal) * row["tokens_per_second_per_gpu"] / 1e12


def model(row: dict, registry):
    """The row's preset, with its ``model_overrides`` of config.json fields (tests/plugins/scale_cases.py's preset
    builder refuses a key the preset lacks) and its experts padded to capacity (``moe``: Megatron-Core's
    drop-and-pad routing, as the Grok-1 DGX Cloud rows)."""
    scale = fp8_runs._scale_cases()
    built = (scale._preset(row["model"], registry, row["model_overrides"]) if "model_overrides" in row
             else api.model_from_preset(row["model"], registry=registry))
    return scale.with_megatron_capacity(built, row.get("moe"))


def price(row: dict, registry, recipe: str | None = None):
    """hp's step time of *row* as run under *recipe* (the row's when ``None``): the ``megatron`` runtime with the row's
    options, the row's hardware preset, no recompute."""
    built = model(row, registry)
    runtime = api.apply_options(registry.runtime("megatron"), row["runtime_options"])
    precision = attrs.evolve(runtime.precision, recipe=recipe or row["recipe"])
    return api.step_time(built, fp8_runs.layout(row, fp8_runs._decoder_layers(built)), registry=registry, runtime=runtime,
                         precision=precision, hardware=registry.hardware_preset(row["hardware"]).spec)


def results(registry=None) -> list[dict]:
    """Each row priced under its recipe and in bf16: measured and hp step time, the error, the FLOPs check."""
    registry = registry or api.build_registry()
    found = []
    for row in rows():
        measured = measured_seconds(row)
        fp8 = price(row, registry).step_seconds
        bf16 = price(row, registry, "bf16").step_seconds
        printed, counted = row.get("model_tflops_per_gpu"), nemo_tflops_per_gpu(row)
        found.append({"id": row["id"], "row": row, "hardware": row["hardware"], "measured_seconds": measured,
                      "estimated_seconds": fp8, "error": fp8 / measured - 1, "bf16_seconds": bf16,
                      "nemo_tflops": counted, "printed_tflops": printed,
                      "flops_ratio": None if printed is None else printed / counted})
    return found


def _layout(row: dict) -> str:
    degrees = " ".join(f"{k}{row[k]}" for k in ("tp", "pp", "cp", "vpp", "ep") if row[k] > 1)
    return f"{row['gpus']} GPUs {degrees}, mbs {row['micro_batch_size']}, gbs {row['global_batch_size']}, seq {row['seq_len']}"


def _summary(label: str, chosen: list[dict]) -> str:
    return f"- {label}, held out: {fp8_runs._summary([r['error'] for r in chosen])}."


def section(found: list[dict]) -> str:
    """The table docs/precision.md shows (tests/plugins/test_fp8_nemo_moe.py checks it is current)."""
    lines = ["| run | container, system | recipe | layout | measured s | hp s | error | hp bf16 s | hp FP8 speedup "
             "| page TFLOP/s / NeMo's count |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in found:
        row = r["row"]
        check = "n/a" if r["printed_tflops"] is None else f"{r['printed_tflops']} / {r['nemo_tflops']:.0f}"
        lines.append(f"| `{r['id']}` | {row['container']}, {row['system']} | {row['recipe']} | {_layout(row)} "
                     f"| {r['measured_seconds']:.3f} | {r['estimated_seconds']:.3f} | {r['error']:+.1%} | {r['bf16_seconds']:.3f} "
                     f"| {r['bf16_seconds'] / r['estimated_seconds']:.2f} | {check} |")
    lines.append("")
    for key, name in DEVICES.items():
        chosen = [r for r in found if r["hardware"] == key]
        if chosen:
            lines.append(_summary(name, chosen))
    lines.append(_summary("all", found))
    return "\n".join(lines) + "\n"


def main() -> None:
    print(section(results()), end="")


if __name__ == "__main__":
    main()
