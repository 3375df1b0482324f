"""Time the in-process ``estimate(...)`` call for dense and MoE presets.

Run: ``python benchmarks/bench_estimate.py [--repeat N]``. Imports and the
registry build are excluded; each figure is the median of N calls. Results go
into docs/performance.md by hand, with the machine they were taken on.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

from hp_core.api import build_registry, estimate, model_from_preset
from hp_core.specs import ParallelSpec

# A representative layout per preset: (dp, tp, pp, vpp, sp, seq_len, global batch).
LAYOUTS = {
    "llama3-8b": ParallelSpec(dp=4, tp=2, sp=True, seq_len=8192, global_batch_size=64),
    "qwen2.5-7b": ParallelSpec(dp=4, tp=2, sp=True, seq_len=8192, global_batch_size=64),
    "qwen3-32b": ParallelSpec(dp=4, tp=8, pp=4, sp=True, seq_len=8192, global_batch_size=256),
    "llama3-70b": ParallelSpec(dp=4, tp=8, pp=4, vpp=5, sp=True, seq_len=8192, global_batch_size=256),
    "qwen2.5-72b": ParallelSpec(dp=4, tp=8, pp=8, vpp=5, sp=True, seq_len=8192, global_batch_size=512),
    "llama3-405b": ParallelSpec(dp=8, tp=8, pp=9, vpp=2, sp=True, seq_len=8192, global_batch_size=576,
                                layers_per_stage=(7,) * 18),
    "mixtral-8x7b": ParallelSpec(dp=8, tp=2, pp=4, ep=8, sp=True, seq_len=4096, global_batch_size=256),
    "qwen3-235b-a22b": ParallelSpec(dp=16, tp=4, pp=8, ep=16, sp=True, seq_len=4096, global_batch_size=1024,
                                    layers_per_stage=(12,) * 7 + (10,)),
    "deepseek-v3": ParallelSpec(dp=128, pp=16, ep=64, seq_len=4096, global_batch_size=4096,
                                layers_per_stage=(4,) * 15 + (1,)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    registry = build_registry(use_env=False)
    print(f"python {platform.python_version()} on {platform.machine()} ({platform.processor() or 'cpu'})")
    print(f"{'preset':<17}{'layout':<41}{'median us':>10}")
    for name, parallel in LAYOUTS.items():
        model = model_from_preset(name, registry)
        estimate(model, parallel, registry=registry)  # warm caches and imports
        timings = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            estimate(model, parallel, registry=registry)
            timings.append(time.perf_counter() - start)
        layout = f"dp{parallel.dp} tp{parallel.tp} pp{parallel.pp} vpp{parallel.vpp} ep{parallel.ep} seq{parallel.seq_len}"
        print(f"{name:<17}{layout:<41}{statistics.median(timings) * 1e6:>10.0f}")


if __name__ == "__main__":
    main()
