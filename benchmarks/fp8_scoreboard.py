"""Where issue 19's targets stand: every collection of measured FP8 / MXFP8 / NVFP4 runs against hp, in one table.

Run: ``python benchmarks/fp8_scoreboard.py [--write]`` (a few seconds). Each collection is priced by the benchmark that
prints its own table (benchmarks/fp8_runs.py, fp8_torchtitan.py, fp8_nemo.py, fp8_dgxc.py, fp8_deepseek.py,
mlperf_runs.py, mlperf_v60.py, megatron_ci.py, megatron_ci_moe.py); this script only counts. The targets are the
issue's: step time within 10% of the measured one, peak memory within 3% where memory is published.

Counting rules:

- A row's step-time error is its error as run (the runtime options its trainer set) where its collection prices
  one, else its error with the runtime's defaults.
- A row counts under the split it states; a collection whose rows state none is held out as its page says (nothing
  in hp fitted to it). Calibration rows (DGX Cloud's H100 calibration split, three Megatron-Bridge MoE H100 rows) are counted apart.
- Only low-precision rows count: a row whose recipe is ``bf16`` (a collection's bf16 baseline or control) is left
  out; a row's recipe is the one its collection's results state (Megatron-LM's CI rows: the recipe their launch
  arguments import as). A row that states none is refused.
- A row id counted by an earlier collection is not counted again.
- DeepSeek-V3's own run is listed but not counted: its measured figure is an upper bound and its micro-batch is not
  published, so hp prices it at each micro-batch its row lists (its section, "at most").

``--write`` replaces the text between the ``fp8-scoreboard`` markers of docs/precision.md (atomically).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import attrs

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from marked_section import write_section  # noqa: E402

PAGE = ROOT / "docs" / "precision.md"
START, END = "<!-- fp8-scoreboard:start -->", "<!-- fp8-scoreboard:end -->"
STEP_BAND, MEMORY_BAND = 0.10, 0.03


def _step_error(r: dict) -> float:
    """As run where the collection prices it, else with the defaults (the counting rules)."""
    for key in ("as_run_error", "time_error", "error"):
        if r.get(key) is not None:
            return r[key]
    raise ValueError(f"{r.get('id')}: no step-time error")


def _split(r: dict) -> str:
    split = r.get("split") or (r.get("row") or {}).get("split") or "held_out"
    return "held_out" if split == "held_out" else "calibration"


def _row_id(r: dict) -> str:
    return r.get("id") or r["row"]["id"]


@attrs.frozen
class Collection:
    """One collection as counted: its priced rows (each collection's own results), the key of their memory error
    (``None``: no memory published; ``"error"``: memory rows, which publish no step time), and whether it counts in
    the totals (the counting rules)."""

    name: str
    rows: list
    memory: str | None = None
    counted: bool = True


def collections(registry) -> list[Collection]:
    """Every collection in the order of docs/precision.md."""
    import fp8_deepseek
    import fp8_dgxc
    import fp8_nemo
    import fp8_runs
    import megatron_ci
    import megatron_ci_moe
    import mlperf_runs
    import mlperf_v60

    v60_rows = [r for _, found, _ in mlperf_v60.tables(registry) for r in found]
    return [
        Collection("Megatron-Bridge Llama (H100, B200, GB200, GB300) and NeMo 24.07", fp8_runs.results(registry)),
        Collection("FSDP memory rows (torchtitan, torchao)", fp8_runs.memory_results(registry), "error"),
        Collection("torchao Llama4 MXFP8 on 4 B200s", fp8_runs.torchao_moe_results(registry), "memory_error"),
        Collection("torchtitan DeepSeek-V3 on 256 B200s", fp8_runs.torchtitan_dsv3_results(registry)),
        Collection("torchtitan DeepSeek-V3 on 64 GB300s", fp8_runs.torchtitan_gb300_results(registry), "memory_error"),
        Collection("torchtitan Llama 3 8B on 4 GB200s", fp8_runs.torchtitan_gb200_results(registry), "memory_error"),
        Collection("llm-foundry MPT FP8", fp8_runs.fsdp_results(registry)),
        Collection("Megatron-Bridge MoE", fp8_runs.moe_results(registry)),
        Collection("Megatron-Bridge MoE, full-iteration CUDA graphs", fp8_runs.moe_fi_results(registry)),
        Collection("Megatron-Bridge Nemotron 3 Nano", fp8_runs.nemotron_results(registry)),
        Collection("Megatron-Bridge Nemotron 3 Super", fp8_runs.nemotron_super_results(registry)),
        Collection("Megatron-Bridge Nemotron 3.5 Lightning", fp8_runs.nemotron_lightning_results(registry)),
        Collection("torchtitan / torchao Float8 on H100", fp8_runs.torchtitan_results(registry)),
        Collection("NeMo performance pages", fp8_nemo.nemo_results(registry)),
        Collection("DGX Cloud benchmarking", fp8_dgxc.results(registry)),
        Collection("DGX Cloud Nemotron-H", fp8_dgxc.nemotronh_results(registry)),
        Collection("MLPerf v5.0 / v5.1 Llama 3.1 405B", mlperf_runs.results(mlperf_runs.load("llama31_405b_rows"), registry)),
        Collection("MLPerf v5.1 Llama 3.1 8B", mlperf_runs.results(mlperf_runs.load("llama31_8b_rows"), registry)),
        Collection("MLPerf v3.1 / v4.1 GPT-3 175B", mlperf_runs.results(mlperf_runs.load(mlperf_runs.GPT3_KEY), registry)),
        Collection("MLPerf v5.0 / v5.1 Llama 2 70B LoRA", mlperf_runs.results(mlperf_runs.load(mlperf_runs.LORA_KEY), registry)),
        Collection("MLPerf v6.0", v60_rows),
        Collection("Megatron-LM CI, dense", megatron_ci.results(), "peak_error"),
        Collection("Megatron-LM CI, MoE", megatron_ci_moe.results(registry), "peak_error"),
        Collection("DeepSeek-V3's own run (an upper bound, its micro-batch unpublished)", fp8_deepseek.results(registry),
                   counted=False),
    ]


def _cells(errors: list[float], band: float) -> str:
    if not errors:
        return "0 | | | "
    within = sum(abs(e) <= band for e in errors)
    mae = sum(abs(e) for e in errors) / len(errors)
    return f"{len(errors)} | {within} | {mae:.1%} | {min(errors):+.1%} to {max(errors):+.1%}"


def recipe_of(r: dict) -> str:
    """The recipe a priced row ran, as its collection's results state it (the counting rules)."""
    found = r.get("recipe") or (r.get("row") or {}).get("recipe")
    if not found:
        raise ValueError(f"{_row_id(r)}: its results state no recipe")
    return found


def section(found: list[Collection]) -> str:
    """The table between the markers: per collection and split, its low-precision rows' step time and memory against
    their bands; the totals over the counted collections."""
    lines = [START, "", "| collection | split | step-time rows | within 10% | mean absolute error | range | "
             "memory rows | within 3% | mean absolute error | range |", "|---|---|---:|---:|---:|---|---:|---:|---:|---|"]
    seen: set[str] = set()
    totals: dict[str, tuple[list[float], list[float]]] = {"held_out": ([], []), "calibration": ([], [])}
    for c in found:
        by_split: dict[str, tuple[list[float], list[float]]] = {}
        for r in c.rows:
            if recipe_of(r) == "bf16" or (c.counted and _row_id(r) in seen):
                continue
            seen.add(_row_id(r))
            steps, memory = by_split.setdefault(_split(r) if c.counted else "not counted", ([], []))
            if c.memory != "error":  # the memory rows' "error" is their memory error; they publish no step time
                steps.append(_step_error(r))
            if c.memory is not None and r.get(c.memory) is not None:
                memory.append(r[c.memory])
        for split, (steps, memory) in sorted(by_split.items(), key=lambda kv: kv[0] != "held_out"):
            lines.append(f"| {c.name} | {split.replace('_', '-')} | {_cells(steps, STEP_BAND)} | {_cells(memory, MEMORY_BAND)} |")
            if c.counted:
                totals[split][0].extend(steps)
                totals[split][1].extend(memory)
    for split, (steps, memory) in totals.items():
        if steps or memory:
            lines.append(f"| **all** | {split.replace('_', '-')} | {_cells(steps, STEP_BAND)} | {_cells(memory, MEMORY_BAND)} |")
    lines += ["", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="replace the fp8-scoreboard section of docs/precision.md")
    args = parser.parse_args()
    from hp_core import api

    text = section(collections(api.build_registry()))
    print(text)
    if args.write:
        write_section(PAGE, START, END, text)


if __name__ == "__main__":
    main()
