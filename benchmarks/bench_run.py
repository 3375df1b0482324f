"""Time one prepared run: ``prepare``, its estimate and its step time, apart and together.

Run: ``python benchmarks/bench_run.py [--repeat N]``. What ``hp estimate --hardware`` does per
call: the run prepared once (layers evaluated, census applied, chunks placed), then the memory
estimate and the step time on it. Imports and the registry build are excluded; each figure is
the median of N calls. Results go into docs/performance.md by hand, with the machine.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

from hp_core.api import build_registry, model_from_preset, prepare
from hp_core.engine.estimate import estimate_run
from hp_core.engine.timing import time_run
from hp_core.specs import ParallelSpec

# The two cases docs/performance.md reports: a dense model on one stage, DeepSeek-V3 on 16.
CASES = {
    "llama3-8b": (ParallelSpec(dp=4, tp=2, sp=True, seq_len=8192, global_batch_size=64), "h100-sxm", "generic"),
    "deepseek-v3": (ParallelSpec(dp=128, pp=16, ep=64, seq_len=4096, global_batch_size=4096,
                                 layers_per_stage=(4,) * 15 + (1,)), "b200", "megatron"),
}


def _median_us(call, repeat: int) -> float:
    call()  # warm caches
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        timings.append(time.perf_counter() - start)
    return statistics.median(timings) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=1000)
    args = parser.parse_args()
    registry = build_registry(use_env=False)
    print(f"python {platform.python_version()} on {platform.machine()}")
    print(f"{'preset':<13}{'prepare':>10}{'estimate':>10}{'time':>10}{'together':>10}  (median us)")
    for name, (parallel, hardware_name, runtime) in CASES.items():
        model = model_from_preset(name, registry)
        hardware = registry.hardware_preset(hardware_name).spec
        run = prepare(model, parallel, registry=registry, runtime=runtime)

        def together() -> None:
            fresh = prepare(model, parallel, registry=registry, runtime=runtime)
            estimate_run(fresh, hardware=hardware)
            time_run(fresh, hardware)

        figures = (
            _median_us(lambda: prepare(model, parallel, registry=registry, runtime=runtime), args.repeat),
            _median_us(lambda: estimate_run(run, hardware=hardware), args.repeat),
            _median_us(lambda: time_run(run, hardware), args.repeat),
            _median_us(together, args.repeat),
        )
        print(f"{name:<13}" + "".join(f"{f:>10.0f}" for f in figures))


if __name__ == "__main__":
    main()
