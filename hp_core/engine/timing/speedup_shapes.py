"""A layer's low-precision GEMM speedups made of the device's speedups by GEMM size (docs/precision.md, "Time").

Where the device states a kernel's speedup as a curve over the GEMM's size (:attr:`DeviceEfficiency.gemm_speedup_curves
<hp_core.specs.timing.DeviceEfficiency.gemm_speedup_curves>`: Hopper's FP8, measured per shape), each layer's forward
and backward speedups (``_Rates.gemm_speedup``, ``gemm_speedup_backward``) are those of its own quantized GEMMs:
:func:`shape_speedup_rates`.
"""

from __future__ import annotations

import attrs

from hp_core.costs import LayerWork
from hp_core.engine.timing.gemm_seconds import _less, _matmul_seconds, _passes
from hp_core.engine.timing.rates import _Rates

__all__ = ["shape_speedup_rates"]


def shape_speedup_rates(work: LayerWork, r: _Rates, grouped: float) -> _Rates:
    """*r* with the layer's forward and backward GEMM speedups made of the passes' curves (``r.gemm_speedup_curves``);
    *r* itself where there are none, the recipe quantizes no dense GEMM (``experts``) or the layer lists none.

    Each dense GEMM the layer quantizes (:attr:`~hp_core.costs.LayerWork.gemms` less its
    :attr:`~hp_core.costs.LayerWork.high_precision_gemms`) takes, per pass, the curve at its FLOPs (``2 * rows *
    fan_out * fan_in``; a pass without a curve its single figure); the layer's speedup of a pass is their bf16 seconds
    as priced (:func:`~hp_core.engine.timing.gemm_seconds._matmul_seconds` of each GEMM alone: its forward, its
    input-gradient and weight-gradient parts of the backward) over their FP8 seconds. The grouped GEMMs the recipe
    quantizes (*grouped* FLOPs, ``gemm_scope`` ``all``) keep the single figures, their bf16 seconds weighed in. Dense
    FLOPs no listed GEMM accounts for take the listed ones' speedup.
    """
    curves = r.gemm_speedup_curves
    if not curves or not any(curves) or r.gemm_scope == "experts":
        return r
    quantized = _less(work.gemms, work.high_precision_gemms)
    if not quantized:
        return r
    backward = r.gemm_speedup_backward
    singles = r.gemm_pass_speedups or (r.gemm_speedup, backward, backward)
    bf16 = [0.0, 0.0, 0.0]
    low = [0.0, 0.0, 0.0]
    for gemm in quantized:
        rows, fan_out, fan_in = gemm
        flops = 2.0 * rows * fan_out * fan_in
        # One dense GEMM alone, as _matmul_seconds prices a layer's dense GEMMs (its table's shape, else matmul).
        f, b, w = (x / r.peak for x in _passes(flops, (gemm,), False, r.matmul, r.gemm_table, r, rescale=False))
        for i, (seconds, curve) in enumerate(zip((f, b - w, w), curves)):
            bf16[i] += seconds
            low[i] += seconds / (curve.at(flops) if curve is not None else singles[i])
    if grouped and r.gemm_scope == "all":  # the experts' GEMMs at the single figures (no dense FLOPs: none priced)
        f, b, _ = _matmul_seconds(0.0, grouped, work, r)
        bf16[0], low[0] = bf16[0] + f, low[0] + f / r.gemm_speedup
        bf16[1], low[1] = bf16[1] + b, low[1] + b / backward
    if not low[0] or not low[1] + low[2]:
        return r
    return attrs.evolve(r, gemm_speedup=bf16[0] / low[0], gemm_speedup_backward=(bf16[1] + bf16[2]) / (low[1] + low[2]))
