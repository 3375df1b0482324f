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
:func:`gemm_table` reads them into a :class:`~hp_core.specs.timing.GemmTable` (which pass each layout is, see
there), :mod:`hp_plugins.runtimes.timing_profiles`' ``B200_GEMMS``.
"""

from __future__ import annotations

import json
from importlib.resources import files

from hp_core.specs.timing import GemmTable

__all__ = ["GROUPED_MATMUL", "MATMUL", "SOURCE", "gemm_table"]

_DATA = json.loads((files("hp_plugins.hardware") / "data" / "gemm_b200.json").read_text(encoding="utf-8"))

SOURCE: str = _DATA["source"]["summary"]

# (m, k, n, layout, out_dtype, efficiency): cuBLAS's m x k by k x n as TE calls it.
MATMUL: tuple[tuple[int, int, int, str, str, float], ...] = tuple(tuple(row) for row in _DATA["matmul"]["rows"])

# (ng, M, N, K, stage, main_grad_dtype, efficiency): ng experts of M rows each, N outputs, K inputs.
GROUPED_MATMUL: tuple[tuple[int, int, int, int, str, str, float], ...] = tuple(
    tuple(row) for row in _DATA["grouped_matmul"]["rows"]
)


def gemm_table() -> GemmTable:
    """SimuMax's B200 GEMM measurements as a :class:`~hp_core.specs.timing.GemmTable` (the timing profiles' ``B200_GEMMS``).

    Transformer Engine runs a linear layer of ``fan_in`` inputs and ``fan_out``
    outputs over ``T`` tokens as three cuBLAS GEMMs, which SimuMax keys by
    cuBLAS's ``m, k, n`` and layout: the forward ``TN`` (``m = T, k = fan_in,
    n = fan_out``), the input gradient ``NN`` (``m = T, k = fan_out, n = fan_in``)
    and the weight gradient ``NT`` (``m = fan_out, k = T, n = fan_in``). Where a
    weight gradient is measured both accumulating into an fp32 buffer and
    writing bf16, the fp32 one is taken: Megatron-Core's default
    ``--gradient-accumulation-fusion`` accumulates into the fp32 ``main_grad``;
    likewise the grouped rows measured with an fp32 main gradient.
    """
    dense: dict[tuple, float] = {}
    for m, k, n, layout, out_dtype, efficiency in MATMUL:
        key = {"TN": ("forward", m, n, k), "NN": ("input_gradient", m, k, n), "NT": ("weight_gradient", k, m, n)}[layout]
        if key not in dense or out_dtype == "fp32":
            dense[key] = efficiency
    passes = {"fwd": "forward", "bwd_grad_act": "input_gradient", "bwd_grad_w": "weight_gradient"}
    grouped: dict[tuple, float] = {}
    for experts, rows, fan_out, fan_in, stage, main_grad, efficiency in GROUPED_MATMUL:
        key = (passes[stage], experts, rows, fan_out, fan_in)
        if key not in grouped or main_grad == "fp32":
            grouped[key] = efficiency
    return GemmTable(
        source=SOURCE,
        dense=tuple(key + (value,) for key, value in dense.items()),
        grouped=tuple(key + (value,) for key, value in grouped.items()),
    )
