"""Measured bf16 GEMM efficiencies of one 8x B200 node, per shape: SimuMax v1.2's tables, verbatim.

Source: MooreThreads/SimuMax at tag v1.2 (commit 4dcaae513ba7679d56c116a17cd4a691ec41e252),
``configs/system/b200_bf16_ceperm.json``: ``accelerator.op.matmul.accurate_efficient_factor``
(514 cuBLAS GEMMs through Transformer Engine 2.11's ``general_gemm``, timed by that project's
``simu_tools/efficency_test/test_gemm_efficiency.py``) and
``accelerator.op.group_matmul.accurate_efficient_factor`` (108 TE grouped GEMMs,
``test_grouped_gemm_efficiency.py``). Each efficiency is achieved FLOP/s over the 2250 TFLOP/s
dense bf16 peak. The same publisher ran the Megatron-LM jobs of SimuMax v1.2's B200 perf-vs-real table
(``docs/b200/b200_release_v1.2_summary.json``) on that machine; these are its kernel microbenchmarks,
not step times.

The numbers are package data, ``hp_plugins/hardware/data/gemm_b200.json``; this module reads them into
tuples. Rows are SimuMax's keys, unchanged except that the fields constant over the table are
dropped (``b=1``; dense: ``accumulate`` is true exactly for layout ``NT``; grouped:
``dtype=bf16``, ``out_dtype=bf16`` and the flags that follow from ``stage``).
:mod:`hp_plugins.runtimes.timing_profiles` reads them into a :class:`~hp_core.specs.timing.GemmTable`
(which pass each layout is, see there).
"""

from __future__ import annotations

import json
from importlib.resources import files

__all__ = ["GROUPED_MATMUL", "MATMUL", "SOURCE"]

_DATA = json.loads((files("hp_plugins.hardware") / "data" / "gemm_b200.json").read_text(encoding="utf-8"))

SOURCE: str = _DATA["source"]["summary"]

# (m, k, n, layout, out_dtype, efficiency): cuBLAS's m x k by k x n as TE calls it.
MATMUL: tuple[tuple[int, int, int, str, str, float], ...] = tuple(tuple(row) for row in _DATA["matmul"]["rows"])

# (ng, M, N, K, stage, main_grad_dtype, efficiency): ng experts of M rows each, N outputs, K inputs.
GROUPED_MATMUL: tuple[tuple[int, int, int, int, str, str, float], ...] = tuple(
    tuple(row) for row in _DATA["grouped_matmul"]["rows"]
)
