"""hp's step time against the public FP8 / MXFP8 runs of tests/plugins/data/fp8_measured_runs.json.

Run: ``python benchmarks/fp8_runs.py`` (prints one row per run: measured and estimated step
time, the relative error, and hp's bf16 time of the same layout for the estimated speedup).
The runs are priced with the ``megatron`` runtime and the recipe each row names; nothing is
fitted to them (docs/precision.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs

from hp_core import api
from hp_core.specs import ParallelSpec

DATA = Path(__file__).resolve().parents[1] / "tests" / "plugins" / "data" / "fp8_measured_runs.json"


def layout(row: dict) -> ParallelSpec:
    """The row's layout: Megatron-Core with sequence parallelism at tp > 1, the distributed optimizer."""
    model_parallel = row["tp"] * row["pp"] * row["cp"]
    dp = row["gpus"] // model_parallel
    chunks = row["pp"] * row["vpp"]
    per_chunk = None
    if "layers_per_stage" in row:  # the embedding and the loss count as a layer each in the split
        per_chunk = (1,) + (2,) * (chunks - 2) + (1,)
    return ParallelSpec(layers_per_stage=per_chunk, tp=row["tp"], pp=row["pp"], cp=row["cp"], dp=dp, vpp=row["vpp"], ep=row["ep"], sp=row["tp"] > 1,
                        micro_batch_size=row["micro_batch_size"], seq_len=row["seq_len"],
                        global_batch_size=row["global_batch_size"],
                        schedule="interleaved_1f1b" if row["vpp"] > 1 else None)


def price(row: dict, registry, recipe: str | None = None):
    """hp's step time of *row* under *recipe* (the row's when ``None``)."""
    model = api.model_from_preset(row["model"], registry=registry)
    precision = attrs.evolve(registry.runtime("megatron").precision, recipe=recipe or row["recipe"])
    hardware = registry.hardware_preset(row["hardware"]).spec
    return api.step_time(model, layout(row), registry=registry, runtime="megatron", precision=precision, hardware=hardware)


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
        found.append({"id": row["id"], "split": row["split"], "hardware": row["hardware"], "recipe": row["recipe"],
                      "measured_seconds": measured, "estimated_seconds": estimated.step_seconds,
                      "error": (estimated.step_seconds - measured) / measured, "bf16_seconds": bf16.step_seconds,
                      "mfu": estimated.mfu, "mfu_recipe_peak": estimated.mfu_recipe_peak})
    return found


def section(found: list[dict]) -> str:
    """The table docs/precision.md shows (tests/plugins/test_fp8_runs.py checks it is current)."""
    lines = [
        "| run | split | recipe | measured s | hp s | error | hp bf16 s | hp FP8 speedup | hp MFU (bf16 peak / recipe peak) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in found:
        lines.append(f"| `{r['id']}` | {r['split']} | {r['recipe']} | {r['measured_seconds']:.3f} | {r['estimated_seconds']:.3f} "
                     f"| {r['error']:+.1%} | {r['bf16_seconds']:.3f} | {r['bf16_seconds'] / r['estimated_seconds']:.2f} "
                     f"| {r['mfu']:.1%} / {r['mfu_recipe_peak']:.1%} |")
    errors = [abs(r["error"]) for r in found]
    within = sum(e <= 0.10 for e in errors)
    lines.append("")
    lines.append(f"Held-out rows: {len(errors)}; within 10%: {within}; mean absolute error {sum(errors) / len(errors):.1%}, "
                 f"largest {max(errors):.1%}.")
    return "\n".join(lines) + "\n"


def main() -> None:
    print(section(results()), end="")


if __name__ == "__main__":
    main()
