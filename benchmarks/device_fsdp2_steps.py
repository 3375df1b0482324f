"""Measure real FSDP2 training steps of truncated models on one GPU: the CUDA allocator's peaks and the step times.

Two halves, because the device machine has PyTorch and transformers but not hp's own dependencies:

    python benchmarks/device_fsdp2_steps.py --prepare                       # here: the requests, from hp's configs
    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 benchmarks/device_fsdp2_steps.py --out "$OUT/fsdp2_steps.json"  # there
    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 benchmarks/device_fsdp2_steps.py --set deep --out "$OUT/deep.json"

``--prepare`` turns each case of :data:`CASES` (an ``hp estimate`` config, world size 1) into the request the
tracker would run (:func:`hp_plugins.cases.fsdp2_measured.request_of`: the model's ``config.json``, its layers,
the checkpointing per layer) and writes them to ``benchmarks/data/fsdp2_step_requests.json``. On the device
machine each request runs in a fresh process (:func:`hp_plugins.census.cuda_step.run_cuda_step`: one rank,
NCCL, ``fully_shard`` per layer, bf16 parameters, fp32 reduction, AdamW, two warm-up steps, one step read for the
phase peaks and five timed), and the results are written after each case (a run cut short keeps what it did).
A session that runs it copies the output into ``tests/plugins/data/`` with the date and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUESTS = ROOT / "benchmarks" / "data" / "fsdp2_step_requests.json"
SEQ = 4096


def _case(model: str, layers: int, ac: str = "none", mbs: int = 1, seq: int = SEQ, optimizer: str = "foreach") -> tuple:
    name = f"{model}-{layers}l-s{seq}-mbs{mbs}-ac{ac.replace('_', '')}" + ("" if optimizer == "foreach" else f"-{optimizer}")
    # transformers' modules: the rotary embedding is its rotate_half form (the other options' defaults are what runs).
    options: dict = {"rope_implementation": "rotate_half", "attention_kernel": "cudnn"}
    if optimizer != "foreach":
        options["optimizer_implementation"] = optimizer
    config: dict = {"model": model, "num_layers": layers, "runtime": {"name": "fsdp2", "options": options},
                    "hardware": "h200", "parallel": {"dp": 1, "tp": 1, "seq_len": seq, "micro_batch_size": mbs}}
    if ac == "full":
        config["recompute"] = "full"
    elif ac == "op_sac":  # torchtitan's per-op policy: the fsdp2 runtime's op_sac switches on every layer
        config["recompute"] = {"default": ["normOp", "ffAct"]}
    return name, config


# Llama-3-8B's layer and head at two depths (the per-layer slope), two micro-batches, two sequence lengths and the
# three checkpointings torchtitan offers; Qwen3-30B-A3B's MoE layer (transformers' grouped_mm experts) with and
# without full checkpointing.
CASES = (
    _case("llama3-8b", 4), _case("llama3-8b", 8), _case("llama3-8b", 4, mbs=2), _case("llama3-8b", 4, seq=8192),
    _case("llama3-8b", 4, ac="full"), _case("llama3-8b", 4, ac="op_sac"), _case("llama3-8b", 4, optimizer="fused"),
    _case("qwen3-30b-a3b", 4), _case("qwen3-30b-a3b", 4, ac="full"),
)
# The second run: activation-bound peaks (12 Llama layers and 6 Qwen3 MoE layers at 8,192 tokens), and the first
# case again (the spread between two runs of one case).
CASES_DEEP = (
    _case("llama3-8b", 12, seq=16384), _case("llama3-8b", 12, ac="full", seq=16384),
    _case("llama3-8b", 12, ac="op_sac", seq=16384), _case("llama3-8b", 12, seq=8192, optimizer="fused"),
    _case("qwen3-30b-a3b", 6, seq=16384), _case("qwen3-30b-a3b", 6, ac="full", seq=16384), _case("llama3-8b", 4),
)


def prepare() -> int:
    from hp_core.api import build_registry
    from hp_plugins.cases.fsdp2_measured import request_of

    registry = build_registry()
    document = {}
    for key, grid in (("cases", CASES), ("deep", CASES_DEEP)):
        cases = [{"name": name, "config": config, "request": request_of(config, registry, where=f"$.{key}[{i}]")}
                 for i, (name, config) in enumerate(grid)]
        for case in cases:
            case["request"].pop("world"), case["request"].pop("tp"), case["request"].pop("head_plan")
        document[key] = cases
    REQUESTS.parent.mkdir(exist_ok=True)
    REQUESTS.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {sum(map(len, document.values()))} requests to {REQUESTS.relative_to(ROOT)}")
    return 0


_ONE = """
import json, sys
from hp_plugins.census.cuda_step import run_cuda_step
request = json.loads(sys.argv[1])
request.pop("model", None)
print("RESULT " + json.dumps(run_cuda_step(**request)), flush=True)
"""


def measure(out: Path, only: str | None, grid: str, profile: bool = False) -> int:
    document = json.loads(REQUESTS.read_text(encoding="utf-8"))
    import torch
    import transformers
    from device_hopper_kernels import write_atomically  # benchmarks/, beside this script

    result: dict = {"what": __doc__.splitlines()[0], "date": time.strftime("%Y-%m-%d"),
                    "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                    "versions": {"torch": str(torch.__version__), "transformers": str(transformers.__version__),
                                 "cuda": str(torch.version.cuda)}, "cases": []}
    for case in document[grid]:
        if only and case["name"] not in only.split(","):
            continue
        begin = time.perf_counter()
        request = {**case["request"], "profile": True} if profile else case["request"]
        done = subprocess.run([sys.executable, "-c", _ONE, json.dumps(request)], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
        row = {"name": case["name"], "config": case["config"], "wall_seconds": round(time.perf_counter() - begin, 1)}
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if lines:
            row["measured"] = json.loads(lines[-1][len("RESULT "):])
            m = row["measured"]
            print(f"{case['name']:40s} peak {m['peak_gib']:7.3f} GiB ({m['peak_phase']}) step "
                  f"{m['seconds']['step'] * 1e3:8.1f} ms  [{m['backend']}]", flush=True)
        else:
            row["error"] = (done.stderr or done.stdout).strip().splitlines()[-5:]
            print(f"{case['name']:40s} FAILED: {row['error'][-1] if row['error'] else done.returncode}", flush=True)
        result["cases"].append(row)
        write_atomically(out, result)
    return 0


CASES_FILE = ROOT / "tests" / "plugins" / "data" / "h200_fsdp2_steps.json"


def table_rows() -> list[str]:
    """docs/runtimes.md's rows of the recorded GPU cases: the allocator's peak and hp's error, the measured phases
    and step against hp's."""
    from hp_core.api import build_registry
    from hp_core.io.convert import ConfigFile, structure
    from hp_core.io.job import estimate_job, resolve_job, step_time_job

    registry = build_registry()
    rows = []
    for case in json.loads(CASES_FILE.read_text(encoding="utf-8"))["cases"]:
        m = case["measured"]
        job = resolve_job(structure(case["config"], ConfigFile, registry), registry)
        (stage,) = estimate_job(job, registry).stages
        timed = step_time_job(job, registry)
        (priced,) = timed.stages
        s = m["seconds"]
        rows.append(
            f"| `{case['name']}` | {m['peak_bytes'] / 2**30:.2f} ({m['peak_phase']}) | "
            f"{(stage.peak_bytes - m['peak_bytes']) / m['peak_bytes']:+.2%} | "
            f"{s['forward'] * 1e3:.1f} / {s['backward'] * 1e3:.1f} / {s['optimizer'] * 1e3:.1f} | "
            f"{priced.forward_seconds * 1e3:.1f} / {(priced.backward_seconds + priced.recompute_seconds) * 1e3:.1f} / "
            f"{priced.optimizer_seconds * 1e3:.1f} | {s['step'] * 1e3:.1f} | "
            f"{(timed.step_seconds - s['step']) / s['step']:+.1%} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepare", action="store_true", help="write the requests from hp's configs (here)")
    parser.add_argument("--out", type=Path, help="measure every request on the GPU and write the results here")
    parser.add_argument("--case", help="measure this case only (a comma-separated list: these cases)")
    parser.add_argument("--profile", action="store_true", help="also profile one step's GPU kernels (torch.profiler)")
    parser.add_argument("--set", choices=("cases", "deep"), default="cases",
                        help="the requests to measure: the first run's (cases) or the activation-bound second's (deep)")
    parser.add_argument("--table", action="store_true", help="print docs/runtimes.md's rows of the recorded cases (here)")
    args = parser.parse_args(argv)
    if args.table:
        print("\n".join(table_rows()))
        return 0
    if args.prepare:
        return prepare()
    if args.out is None:
        parser.error("--prepare, or --out FILE to measure")
    return measure(args.out, args.case, args.set, args.profile)


if __name__ == "__main__":
    sys.exit(main())
