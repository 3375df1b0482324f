"""hp against DeepSeek-V3's own pre-training run: FP8 blockwise on 2,048 H800s (tests/plugins/data/fp8_measured_runs.json,
``deepseek_v3_report_rows`` and ``deepseek_v3_report_note``).

Run: ``python benchmarks/fp8_deepseek.py`` (``python benchmarks/fp8_runs.py`` prints it among the other FP8 rows). The
measured figure is the report's GPU hours per trillion tokens as a step time at the row's batch, an upper bound (the
note says why); hp's step time at each micro-batch size the row lists (the report states none), the error against
the bound, and hp's peak memory of the busiest rank against the device's. The row is held out: nothing is fitted to it.
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
import fp8_runs  # noqa: E402  (layout, row_precision, moe_recompute: the other FP8 rows' helpers)

DATA = fp8_runs.DATA
GIB = 2**30


def rows() -> list[dict]:
    return json.loads(DATA.read_text(encoding="utf-8"))["deepseek_v3_report_rows"]


def measured_seconds(row: dict) -> float:
    """The step time the report's GPU hours per trillion tokens give at the row's batch: GPU-seconds per token times
    the step's tokens over the GPUs."""
    per_token = row["measured"]["gpu_hours_per_trillion_tokens"] * 3600 / 1e12
    return per_token * row["global_batch_size"] * row["seq_len"] / row["gpus"]


def run(row: dict, micro_batch_size: int, registry):
    """``(model, layout, keywords)`` of *row* at *micro_batch_size*: the megatron runtime with the row's options, its
    recipe with its precision fields, its hardware preset and its recompute modules as a plan."""
    model = api.model_from_preset(row["model"], registry=registry)
    runtime = api.apply_options(registry.runtime("megatron"), row["runtime_options"])
    precision = attrs.evolve(runtime.precision, recipe=row["recipe"], **fp8_runs.row_precision(row))
    hardware = registry.hardware_preset(row["hardware"]).spec
    recompute = fp8_runs.moe_recompute(row, model, registry, runtime)
    spec = fp8_runs.layout(dict(row, micro_batch_size=micro_batch_size), fp8_runs._decoder_layers(model))
    return model, spec, dict(registry=registry, runtime=runtime, precision=precision, hardware=hardware, recompute=recompute)


def results(registry=None) -> list[dict]:
    """Per row and micro-batch size: measured (upper bound) and hp's step time, the error, MFU and the busiest rank's
    peak against the device's memory."""
    registry = registry or api.build_registry()
    found = []
    for row in rows():
        bound = measured_seconds(row)
        for mbs in row["micro_batch_sizes"]:
            model, spec, kw = run(row, mbs, registry)
            step = api.step_time(model, spec, **kw)
            estimate = api.estimate(model, spec, **kw)
            peak = max(stage.peak_bytes for stage in estimate.stages)
            found.append({"id": row["id"], "split": row["split"], "recipe": row["recipe"], "micro_batch_size": mbs,
                          "measured_seconds": bound,
                          "estimated_seconds": step.step_seconds, "error": (step.step_seconds - bound) / bound,
                          "mfu": step.mfu, "mfu_recipe_peak": step.mfu_recipe_peak,
                          "flops_per_token": step.model_flops / (spec.global_batch_size * spec.seq_len),
                          "peak_bytes": peak, "memory_bytes": kw["hardware"].memory_bytes})
    return found


def section(found: list[dict]) -> str:
    lines = ["| run | split | micro-batch | measured s (at most) | hp s | error | hp MFU (bf16 peak / recipe peak) | hp GFLOP a token | hp peak GiB | device GiB |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in found:
        lines.append(f"| `{r['id']}` | {r['split']} | {r['micro_batch_size']} | {r['measured_seconds']:.3f} | "
                     f"{r['estimated_seconds']:.3f} | {r['error']:+.1%} | {r['mfu']:.1%} / {r['mfu_recipe_peak']:.1%} | "
                     f"{r['flops_per_token'] / 1e9:.1f} | {r['peak_bytes'] / GIB:.1f} | {r['memory_bytes'] / GIB:.2f} |")
    errors = [r["error"] for r in found]
    over = [r for r in found if r["peak_bytes"] > r["memory_bytes"]]
    lines.append("")
    lines.append(f"- DeepSeek-V3's pre-training, FP8 blockwise on 2,048 H800s (held out, an upper bound): hp {min(errors):+.1%} "
                 f"to {max(errors):+.1%} over micro-batches {', '.join(str(r['micro_batch_size']) for r in found)}; hp's "
                 f"busiest rank above the device's memory at {len(over)} of {len(found)} sizes.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(section(results()), end="")
