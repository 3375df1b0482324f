"""Time the in-process ``plan_recompute(...)`` call: DeepSeek-V3 (61 layers and MTP) on 16 stages.

Run: ``python benchmarks/bench_recompute.py [--repeat N]``. Imports and the
registry build are excluded; each figure is the median of N calls of the
whole planner (evaluating the layers, pricing every setting of every kind,
the search of every stage, and the final estimate and step time of the plan).
The layouts do not fit an 80 GB H100 with nothing recomputed and do with
everything recomputed, so every stage's search has work to do. ``generic``
executes every switch set, so its search runs over every kind's full front
(512 settings of ``mla`` and of ``mla_moe`` priced); ``megatron`` over what
Megatron-LM's ``--recompute-modules`` run. Results go into
docs/recompute.md by hand, with the machine they were taken on.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

from hp_core.api import build_registry, estimate, model_from_preset, plan_recompute
from hp_core.specs import ParallelSpec

# 3 dense (MLA) layers and 58 MoE layers over 16 stages: 3, 4 x 14, 2 (the MTP module on the last).
DEEPSEEK_16 = ParallelSpec(dp=64, tp=1, pp=16, ep=64, seq_len=4096, global_batch_size=1024, zero=1,
                           layers_per_stage=(3,) + (4,) * 14 + (2,))
CASES = {
    "deepseek-v3 pp16 generic": ("deepseek-v3", DEEPSEEK_16, "generic", False),
    "deepseek-v3 pp16 megatron+unres.": ("deepseek-v3", DEEPSEEK_16, "megatron", True),
    "llama3-70b pp4 generic": ("llama3-70b", ParallelSpec(tp=8, sp=True, pp=4, seq_len=8192, micro_batch_size=2,
                                                          global_batch_size=32), "generic", False),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--hardware", default="h100-sxm")
    args = parser.parse_args()
    registry = build_registry(use_env=False)
    hardware = registry.hardware_preset(args.hardware).spec
    print(f"python {platform.python_version()} on {platform.machine()} ({platform.processor() or 'cpu'}), {args.hardware}")
    print(f"{'case':<34}{'median ms':>10}{'nodes':>8}{'none GiB':>10}{'plan GiB':>10}{'step s':>8}  fits")
    for label, (name, parallel, runtime, unrestricted) in CASES.items():
        model = model_from_preset(name, registry)
        plan = plan_recompute(model, parallel, registry=registry, hardware=hardware, runtime=runtime, unrestricted=unrestricted)
        timings = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            plan_recompute(model, parallel, registry=registry, hardware=hardware, runtime=runtime, unrestricted=unrestricted)
            timings.append(time.perf_counter() - start)
        none = estimate(model, parallel, registry=registry, runtime=runtime).peak_bytes
        nodes = sum(s.search_nodes for s in plan.stages)
        print(f"{label:<34}{statistics.median(timings) * 1e3:>10.1f}{nodes:>8}{none / 2**30:>10.1f}"
              f"{plan.plan.peak_bytes / 2**30:>10.1f}{plan.plan.step_seconds:>8.2f}  {plan.fits}")


if __name__ == "__main__":
    main()
