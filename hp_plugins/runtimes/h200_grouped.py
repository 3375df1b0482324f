"""Hopper's grouped-GEMM pair (``DeviceEfficiency.grouped_matmul`` / ``grouped_half_rows``), fitted to one H200's
``torch._grouped_mm`` measurements (docs/time.md, "Hopper grouped GEMMs").

The form is Blackwell's (``hp_plugins/runtimes/timing_profiles.py``): an expert group runs at
``grouped_matmul * rows / (rows + grouped_half_rows)`` of the dense bf16 peak, ``rows`` the tokens per local expert,
the same in each pass. The pair minimises the squared relative error of the time over every measured shape in each of
its three passes (``benchmarks/hopper_kernel_level.py`` ``grouped_fit``; ``tests/plugins/test_hopper_kernels.py``
checks it), as Blackwell's is fitted to SimuMax's forward, dgrad and wgrad measurements. It replaced 0.60 (SimuMax's
unmeasured H100 starter) and 208 rows (a roofline ridge point), and then a fit to the forward records alone
(0.628 / 101).
"""

from __future__ import annotations

from hp_core.specs.timing import Sourced

__all__ = ["H200_GROUPED_HALF_ROWS", "H200_GROUPED_MATMUL"]

_SIMUMAX_H100 = ("SimuMax configs/system/h100_nvlink.json (MooreThreads/SimuMax@160921c): spec-based starter value, "
                 "'NOT shape-calibrated' per its note")
_H200_GROUPED = ("fit of efficiency = e * rows / (rows + half_rows) (least squares in relative error of the time) to 354 "
                 "torch._grouped_mm (CUTLASS, sm90) bf16 measurements on one H200 SXM (torch 2.11.0+cu130), the experts' "
                 "FC1 and FC2 of Qwen3-30B-A3B, GPT-OSS-120B and Mixtral-8x7B, 2-64 local experts of 512-16,384 rows, each "
                 "of 118 shapes in its three passes: forward (tests/plugins/data/h200_hopper_kernels.json 'grouped', "
                 "benchmarks/device_hopper_kernels.py) and input and weight gradient (the same file's 'backward', "
                 "device_hopper_kernels.py --backward) (benchmarks/hopper_kernel_level.py grouped_fit; a shape's three "
                 "GEMMs fitted within 20% of their measured time for 81% of the shapes, mean 13%; the Qwen3 and GPT-OSS "
                 "groups of 2-8 experts at 512-2,048 rows 48-86% short; per pass alone forward 0.628 / 101, dgrad "
                 "0.626 / 127, wgrad 0.656 / 373)")

H200_GROUPED_MATMUL = Sourced(0.633, f"{_H200_GROUPED}; replaced 0.60, {_SIMUMAX_H100}: group_matmul efficient_factor")
H200_GROUPED_HALF_ROWS = Sourced(
    170, f"the same fit ({_H200_GROUPED}); replaced 208 rows, the roofline ridge point 989 TFLOP/s * 0.60 / "
    "(3.35 TB/s * 0.85 HBM efficiency) on H100, a derived figure"
)
