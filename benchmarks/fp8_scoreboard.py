"""Where issue 19's targets stand: every collection of measured FP8 / MXFP8 / NVFP4 runs against hp, in one table.

Run: ``python benchmarks/fp8_scoreboard.py [--write]`` (a few seconds). Each collection is priced by the benchmark that
prints its own table (benchmarks/fp8_runs.py, fp8_torchtitan.py, fp8_nemo.py, fp8_dgxc.py, fp8_deepseek.py,
mlperf_runs.py, mlperf_v60.py, megatron_ci.py, megatron_ci_moe.py); this script only counts. The targets are the
issue's: step time within 10% of the measured one, peak memory within 3% where memory is published.

Counting rules:

- A row's step-time error is its error as run (the runtime options its trainer set) where its collection prices
  one, else its error with the runtime's defaults.
- A row counts under the split it states; a collection whose rows state none is held out as its page says (nothing
  in hp fitted to it). Calibration rows (DGX Cloud's H100 calibration split, the MPT rows' fit) are counted apart.
- A row id counted by an earlier collection is not counted again.
- DeepSeek's published step times are upper bounds (its page's "at most"), counted as they are.

``--write`` replaces the text between the ``fp8-scoreboard`` markers of docs/precision.md (atomically).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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


def collections(registry) -> list[tuple[str, list[dict], str | None]]:
    """``(collection, priced rows, memory-error key or None)`` in the order of docs/precision.md."""
    import fp8_deepseek
    import fp8_dgxc
    import fp8_nemo
    import fp8_runs
    import megatron_ci
    import megatron_ci_moe
    import mlperf_runs
    import mlperf_v60

    v60 = mlperf_v60.load()
    v60_rows = [r for key, _ in mlperf_v60.DENSE for r in mlperf_runs.results(v60.get(key) or [], registry)]
    v60_rows += [r for key, _ in mlperf_v60.MOE for r in mlperf_v60.moe_results(v60.get(key) or [], registry)]
    return [
        ("Megatron-Bridge Llama (H100, B200, GB200, GB300) and NeMo 24.07", fp8_runs.results(registry), None),
        ("FSDP memory rows (torchtitan, torchao)", fp8_runs.memory_results(registry), "error"),
        ("torchao Llama4 MXFP8 on 4 B200s", fp8_runs.torchao_moe_results(registry), "memory_error"),
        ("torchtitan DeepSeek-V3 on 256 B200s", fp8_runs.torchtitan_dsv3_results(registry), None),
        ("torchtitan DeepSeek-V3 on 64 GB300s", fp8_runs.torchtitan_gb300_results(registry), "memory_error"),
        ("torchtitan Llama 3 8B on 4 GB200s", fp8_runs.torchtitan_gb200_results(registry), "memory_error"),
        ("llm-foundry MPT FP8", fp8_runs.fsdp_results(registry), None),
        ("Megatron-Bridge MoE", fp8_runs.moe_results(registry), None),
        ("Megatron-Bridge MoE, full-iteration CUDA graphs", fp8_runs.moe_fi_results(registry), None),
        ("Megatron-Bridge Nemotron 3 Nano", fp8_runs.nemotron_results(registry), None),
        ("Megatron-Bridge Nemotron 3 Super", fp8_runs.nemotron_super_results(registry), None),
        ("Megatron-Bridge Nemotron 3.5 Lightning", fp8_runs.nemotron_lightning_results(registry), None),
        ("torchtitan / torchao Float8 on H100", fp8_runs.torchtitan_results(registry), None),
        ("NeMo performance pages", fp8_nemo.nemo_results(registry), None),
        ("DGX Cloud benchmarking", fp8_dgxc.results(registry), None),
        ("DGX Cloud Nemotron-H", fp8_dgxc.nemotronh_results(registry), None),
        ("DeepSeek-V3 (published bounds)", fp8_deepseek.results(registry), None),
        ("MLPerf v5.0 / v5.1 Llama 3.1 405B", mlperf_runs.results(mlperf_runs.load("llama31_405b_rows"), registry), None),
        ("MLPerf v5.1 Llama 3.1 8B", mlperf_runs.results(mlperf_runs.load("llama31_8b_rows"), registry), None),
        ("MLPerf v3.1 / v4.1 GPT-3 175B", mlperf_runs.results(mlperf_runs.load(mlperf_runs.GPT3_KEY), registry), None),
        ("MLPerf v5.0 / v5.1 Llama 2 70B LoRA", mlperf_runs.results(mlperf_runs.load(mlperf_runs.LORA_KEY), registry), None),
        ("MLPerf v6.0", v60_rows, None),
        ("Megatron-LM CI, dense", megatron_ci.results(), "peak_error"),
        ("Megatron-LM CI, MoE", megatron_ci_moe.results(registry), "peak_error"),
    ]


def _cells(errors: list[float], band: float) -> str:
    if not errors:
        return "0 | | | "
    within = sum(abs(e) <= band for e in errors)
    mae = sum(abs(e) for e in errors) / len(errors)
    return f"{len(errors)} | {within} | {mae:.1%} | {min(errors):+.1%} to {max(errors):+.1%}"


def section(found: list[tuple[str, list[dict], str | None]]) -> str:
    """The table between the markers: per collection and split, step time and memory against their bands."""
    lines = [START, "", "| collection | split | step-time rows | within 10% | mean absolute error | range | "
             "memory rows | within 3% | mean absolute error | range |", "|---|---|---:|---:|---:|---|---:|---:|---:|---|"]
    seen: set[str] = set()
    totals: dict[str, tuple[list[float], list[float]]] = {"held_out": ([], []), "calibration": ([], [])}
    for name, rows, memory_key in found:
        by_split: dict[str, tuple[list[float], list[float]]] = {}
        for r in rows:
            if _row_id(r) in seen:
                continue
            seen.add(_row_id(r))
            steps, memory = by_split.setdefault(_split(r), ([], []))
            if memory_key != "error":  # the memory rows' "error" is their memory error; they publish no step time
                steps.append(_step_error(r))
            if memory_key is not None and r.get(memory_key) is not None:
                memory.append(r[memory_key])
        for split, (steps, memory) in sorted(by_split.items(), key=lambda kv: kv[0] != "held_out"):
            lines.append(f"| {name} | {split.replace('_', '-')} | {_cells(steps, STEP_BAND)} | {_cells(memory, MEMORY_BAND)} |")
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
