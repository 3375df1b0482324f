"""Record FSDP2 steps measured by PyTorch's FSDPMemTracker as the repository's cases (needs the census extra).

    python benchmarks/record_fsdp2_cases.py                 # every case of the grid below, into CASES
    python benchmarks/record_fsdp2_cases.py --case NAME     # re-measure one case and print it
    python benchmarks/record_fsdp2_cases.py --missing       # measure only the cases not recorded yet
    python benchmarks/record_fsdp2_cases.py --table         # the recorded cases' rows of docs/runtimes.md

Each case is an ``hp estimate`` config measured by ``hp_plugins.cases.fsdp2_measured``
(a fake process group of the case's world size, ``fully_shard`` per decoder layer and
the root, bf16 params / fp32 reduce, AdamW; two steps, the second read). The file is
an ``hp-measure/1`` document: ``hp validate tests/plugins/data/fsdp2_tracker_cases.json``
compares the fsdp2 runtime's estimate with every recorded peak.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "plugins" / "data" / "fsdp2_tracker_cases.json"
SEQ = 4096


def grid() -> list[tuple[str, dict, dict]]:
    """(name, config, measure) of every recorded case, FSDP alone with and without AC first."""
    found = []
    # Cheap cases first: every 4-layer case of both models, then the 32-layer Llama (TP last, minutes each).
    for model, layers, tps in (("llama3-8b", 4, (1, 2)), ("qwen3-30b-a3b", 4, (1, 2)), ("llama3-8b", 32, (1,)),
                               ("llama3-8b", 32, (2,)), ("qwen3-30b-a3b", 32, (1, 2))):
        for world in (8, 64):
            for tp in tps:
                for head in (("vocab",) if tp == 1 else ("vocab", "replicated")):
                    for ac in ("none", "full"):
                        name = f"{model}-{layers}l-w{world}-tp{tp}{'-' + head if tp > 1 else ''}-ac{ac}"
                        config = {"model": model, "num_layers": layers, "runtime": "fsdp2",
                                  "parallel": {"dp": world // tp, "tp": tp, "seq_len": SEQ, "micro_batch_size": 1}}
                        if ac == "full":
                            config["recompute"] = "full"
                        if tp > 1:  # the TP plan the tracker runs, as the fsdp2 runtime's options state it
                            config["runtime"] = {"name": "fsdp2", "options": (
                                {"tp_head_plan": "replicated"} if head == "replicated" else {"loss_parallel": False})}
                        found.append((name, config, {}))
    # torchtitan's selective checkpointing on Llama-3-8B, 4 layers: per-op (selective_ac_option = "op", the fsdp2
    # runtime's op_sac switches on every layer) and every 2nd layer (selective_ac_option = 2: layers 1 and 3 full).
    for world in (8, 64):
        for ac, recompute in (("op", {"default": ["normOp", "ffAct"]}), ("layer2", {"default": "none", "layers": {"1": "full", "3": "full"}})):
            found.append((f"llama3-8b-4l-w{world}-tp1-ac{ac}",
                          {"model": "llama3-8b", "num_layers": 4, "runtime": "fsdp2", "recompute": recompute,
                           "parallel": {"dp": world, "tp": 1, "seq_len": SEQ, "micro_batch_size": 1}}, {}))
    # Per-op SAC under TP (vocabulary-parallel head, gathered logits): the policy's split of each saved tensor.
    found.append(("llama3-8b-4l-w8-tp2-vocab-acop",
                  {"model": "llama3-8b", "num_layers": 4, "recompute": {"default": ["normOp", "ffAct"]},
                   "runtime": {"name": "fsdp2", "options": {"tp_plan": "vocab_gathered"}},
                   "parallel": {"dp": 4, "tp": 2, "seq_len": SEQ, "micro_batch_size": 1}}, {}))
    return found


_GROUPS = {"parameters": "Params", "gradients": "Grads", "optimizer_states": "Optim", "gathered": "Buffers",
           "activations": "Activ+Working"}


def table_rows() -> list[str]:
    """Each recorded case's row of docs/runtimes.md: tracker peak, the estimate's signed error, the worst category."""
    from hp_core.api import build_registry
    from hp_core.io.convert import ConfigFile, structure
    from hp_core.io.job import estimate_job, resolve_job

    from hp_plugins.cases.fsdp2_measured import as_tracker_sees, estimated_categories, measured_categories

    registry = build_registry()
    rows = []
    for case in json.loads(CASES.read_text())["cases"]:
        job = as_tracker_sees(resolve_job(structure(case["config"], ConfigFile, registry), registry), registry)
        (stage,) = estimate_job(job, registry).stages
        m = case["measured"]
        want = measured_categories(m["phases"][m["peak_phase"]])
        got = estimated_categories(stage.memory, stage.binding_point)
        errors = {k: (got[k] - v) / v for k, v in want.items() if v}
        worst = max(errors, key=lambda k: abs(errors[k]))
        rows.append(f"| `{case['name']}` | {m['peak_bytes'] / 2**30:.3f} ({m['peak_phase']}) | "
                    f"{(stage.peak_bytes - m['peak_bytes']) / m['peak_bytes']:+.2%} ({stage.binding_point}) | "
                    f"{_GROUPS[worst]} {errors[worst]:+.2%} |")
    return rows


def write_cases(cases: list[dict], existing: dict[str, dict], visited: set[str]) -> None:
    """Replace CASES atomically with *cases* and every *existing* case not *visited* yet (an interrupted run
    keeps what it measured and what was recorded before)."""
    from hp_core.io.files import atomic_write

    kept = cases + [case for name, case in existing.items() if name not in visited]
    text = json.dumps({"format": "hp-measure/1", "cases": kept}, indent=1) + "\n"
    atomic_write(CASES, lambda path: Path(path).write_text(text, encoding="utf-8"), ".json", flag=str(CASES))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", help="re-measure this case only and print it")
    parser.add_argument("--only", help="re-measure only cases whose name contains this (others kept as recorded)")
    parser.add_argument("--missing", action="store_true", help="measure only the cases the file does not hold yet")
    parser.add_argument("--table", action="store_true", help="print docs/runtimes.md's rows of the recorded cases (no measuring)")
    args = parser.parse_args(argv)
    if args.table:
        print("\n".join(table_rows()))
        return 0
    from hp_core.api import build_registry
    from hp_plugins.cases.fsdp2_measured import measure_request, request_of

    registry = build_registry()
    existing = {c["name"]: c for c in json.loads(CASES.read_text())["cases"]} if CASES.is_file() else {}
    cases, visited = [], set()
    for name, config, measure in grid():
        if args.case and name != args.case:
            continue
        visited.add(name)
        if name in existing and ((args.only and args.only not in name) or args.missing):
            cases.append(existing[name])
            continue
        request = request_of(config, registry, measure=measure)
        try:
            measured = measure_request(request, cache=False)
        except Exception as exc:  # noqa: BLE001 - a layout the tracker cannot run is reported and left out
            print(f"{name}: not measured: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", file=sys.stderr, flush=True)
            continue
        measured["command"] = f"python benchmarks/record_fsdp2_cases.py --case {name}"
        case = {"name": name, "config": config, "measure": measure, "measured": measured}
        if not measure:
            del case["measure"]
        print(f"{name}: peak {measured['peak_bytes'] / 2**30:.3f} GiB ({measured['peak_phase']}), {measured['seconds']} s",
              file=sys.stderr, flush=True)
        cases.append(case)
        if not args.case:  # written after every case, so an interrupted run keeps what it measured
            write_cases(cases, existing, visited)
    if args.case:
        print(json.dumps(cases, indent=1))
        return 0
    write_cases(cases, existing, set(existing))  # the grid's cases as measured now (a failed one left out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
