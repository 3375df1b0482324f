"""Measured bf16 GEMM throughput of an H100 per shape: OpenXLA's default matmul performance table, verbatim.

Source: openxla/xla at commit b2766086ecf90e6e0a52b32f3b1837348859027f (also
tensorflow/tensorflow@372d578 ``third_party/xla/...``),
``xla/service/gpu/model/matmul_interpolator_data.h``, ``kDefaultMatmulPTable``,
key ``sm_90``, its ``bf16xbf16->bf16`` values: 375 batched dots ``[b, m, k] x
[b, k, n]``, ``b`` in {1, 2, 4} and ``m, n, k`` in {256, ..., 4096}, each the
FLOP/s of XLA's compiled dot (cuBLAS or a Triton GEMM, as XLA's autotuner picks)
over the median kernel time CUPTI records (``xla/tools/matmul_perf_table_gen.cc``).
The table names no GPU; it reads as an H100 SXM (the package data file,
``hp_plugins/hardware/data/gemm_h100_xla.json``, says why, and docs/time.md
"Hopper GEMMs by shape" how it is used).

:func:`shape_scale` makes a :class:`~hp_core.specs.gemms.GemmShapeScale` of it:
a batched dot of ``b`` products of ``m`` rows is read as one GEMM of ``b * m``
rows (the table's rates at equal ``b * m`` agree to a median 1%, up to 13%), so
the rows axis runs 256 to 16,384; each grid point takes the row of the smallest
``b`` (``b = 1`` up to 4,096 rows); the values are each rate over the rate at
the largest shape (16,384 x 4,096 x 4,096).
"""

from __future__ import annotations

import json
from importlib.resources import files

from hp_core.specs.gemms import GemmShapeScale

__all__ = ["ROWS", "SOURCE", "shape_scale"]

_DATA = json.loads((files("hp_plugins.hardware") / "data" / "gemm_h100_xla.json").read_text(encoding="utf-8"))

SOURCE: str = _DATA["source"]["summary"]

# (b, m, n, k, flops_per_second): the table's rows in its order.
ROWS: tuple[tuple[int, int, int, int, int], ...] = tuple(tuple(row) for row in _DATA["rows"])


def shape_scale() -> GemmShapeScale:
    """The H100 bf16 GEMM rates relative to the largest measured shape, on a (rows, outputs, inputs) grid."""
    chosen: dict[tuple[int, int, int], tuple[int, int]] = {}  # (b * m, n, k) -> (b, rate) of the smallest b
    for b, m, n, k, rate in ROWS:
        key = (b * m, n, k)
        if key not in chosen or b < chosen[key][0]:
            chosen[key] = (b, rate)
    rows, outputs, inputs = (tuple(sorted({key[i] for key in chosen})) for i in range(3))
    top = chosen[(rows[-1], outputs[-1], inputs[-1])][1]
    values = tuple(chosen[(r, n, k)][1] / top for r in rows for n in outputs for k in inputs)
    return GemmShapeScale(
        source=(f"{SOURCE}; read as one GEMM of b * m rows (the smallest b per point), each rate over the rate at "
                f"{rows[-1]} x {outputs[-1]} x {inputs[-1]} ({top / 1e12:.1f} TFLOP/s), interpolated in log2 of each "
                "dimension and clamped to 256-16,384 rows and 256-4,096 outputs and inputs"),
        rows=rows, outputs=outputs, inputs=inputs, values=values)
