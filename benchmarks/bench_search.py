"""Time ``search(...)`` on one core: Llama-3-70B on 256 and DeepSeek-V3 on 2048 (or 8192) B200s (global batch 4096, seq 4096).

Run: ``python benchmarks/bench_search.py [--case llama|deepseek|deepseek-8192|both] [--budget-seconds S] [--runtime R]``.
Serial, in this process (one core); imports and the registry build are
excluded. Prints the seconds, the process's peak resident memory so far
(``resource.getrusage``: run one case per process for its own figure), the
candidates considered, planned and fitting, the rejections by reason, and
the top 5. With ``--budget-seconds``
a search still running after S seconds is stopped and the figure printed is
the layouts done in that time, with the time the rest would take at the rate
measured (an extrapolation, marked as such). Results go into docs/search.md
by hand, with the machine they were taken on.
"""

from __future__ import annotations

import argparse
import platform
import resource
import sys
import time

from hp_core.api import build_registry, model_from_preset
from hp_core.engine.search import search

CASES = {"llama": ("llama3-70b", 256), "deepseek": ("deepseek-v3", 2048), "deepseek-8192": ("deepseek-v3", 8192)}


def max_rss_mib() -> float:
    """The process's peak resident set size so far, in MiB (``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


class _OutOfTime(Exception):
    pass


def run(name: str, devices: int, runtime: str, budget: float | None) -> None:
    registry = build_registry()
    model = model_from_preset(name, registry)
    hardware = registry.hardware_preset("b200").spec
    start = time.perf_counter()
    seen = [0, 0]

    def progress(done: int, total: int) -> None:
        seen[:] = [done, total]
        if budget is not None and time.perf_counter() - start > budget:
            raise _OutOfTime

    try:
        result = search(model, registry=registry, devices=devices, hardware=hardware, global_batch_size=4096,
                        seq_len=4096, runtime=runtime, top=5, progress=progress)
    except _OutOfTime:
        elapsed = time.perf_counter() - start
        done, total = seen
        print(f"{name} on {devices}: stopped after {elapsed:.1f} s with {done:,} of {total:,} layouts done; "
              f"extrapolated full search {elapsed * total / done:.0f} s", flush=True)
        return
    elapsed = time.perf_counter() - start
    print(f"{name} on {devices} ({runtime}): {elapsed:.1f} s, max RSS {max_rss_mib():.0f} MiB; considered "
          f"{result.considered:,}, planned {result.planned:,}, fitting {result.fitting:,}", flush=True)
    for reason, count in result.rejected.items():
        print(f"  rejected {count:>9,}  {reason}")
    for rank, c in enumerate(result.top, 1):
        print(f"  {rank}. {c.layout.describe():<34} {c.step_seconds:8.3f} s  MFU {c.mfu:6.1%}  "
              f"peak {c.peak_bytes / 2**30:6.1f} GiB  {c.plan_summary}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--case", choices=(*CASES, "both"), default="both")
    parser.add_argument("--runtime", default="megatron")
    parser.add_argument("--budget-seconds", type=float, default=None)
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, one core, serial")
    for case in (("llama", "deepseek") if args.case == "both" else (args.case,)):
        run(*CASES[case], args.runtime, args.budget_seconds)


if __name__ == "__main__":
    main()
