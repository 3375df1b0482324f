"""Time the in-process ``step_time(...)`` call for dense and MoE presets.

Run: ``python benchmarks/bench_step_time.py [--repeat N] [--hardware NAME]``.
Imports and the registry build are excluded; each figure is the median of N
calls. The layouts are those of ``bench_estimate.py``. Results go into
docs/time.md by hand, with the machine they were taken on.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

from hp_core.api import build_registry, model_from_preset
from hp_core.api import step_time

from bench_estimate import LAYOUTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument("--hardware", default="h100-sxm")
    args = parser.parse_args()
    registry = build_registry(use_env=False)
    hardware = registry.hardware_preset(args.hardware).spec
    print(f"python {platform.python_version()} on {platform.machine()} ({platform.processor() or 'cpu'}), {args.hardware}")
    print(f"{'preset':<17}{'layout':<41}{'median us':>10}{'step s':>9}{'MFU':>7}")
    for name, parallel in LAYOUTS.items():
        model = model_from_preset(name, registry)
        result = step_time(model, parallel, registry=registry, hardware=hardware)  # warm caches and imports
        timings = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            step_time(model, parallel, registry=registry, hardware=hardware)
            timings.append(time.perf_counter() - start)
        layout = f"dp{parallel.dp} tp{parallel.tp} pp{parallel.pp} vpp{parallel.vpp} ep{parallel.ep} seq{parallel.seq_len}"
        print(f"{name:<17}{layout:<41}{statistics.median(timings) * 1e6:>10.0f}{result.step_seconds:>9.2f}{result.mfu:>7.2f}")


if __name__ == "__main__":
    main()
