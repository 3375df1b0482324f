"""Hopper's FP8 GEMM speedups over bf16 by GEMM size (``DeviceEfficiency.gemm_speedup_curves``; docs/precision.md, "Time").

Measured on one H200 SXM (``tests/plugins/data/h200_hopper_kernels.json``, ``benchmarks/device_hopper_kernels.py``):
``torch.mm`` in bf16 against ``torch._scaled_mm`` with per-tensor scales, fast and split accumulation, at every GEMM
of Llama-3-8B and -70B layers' linears at 8,192 tokens and TP 1, 2, 4 and 8 (34 GFLOP to 7.7 TFLOP a GEMM). The
speedup grows with the GEMM's size: about 1.35 at 34-52 GFLOP (Llama-3-8B's TP-8 attention projections), 1.66 near
0.18 TFLOP, 1.85 near 0.8 TFLOP, 1.9 and flat from 1.6 TFLOP. A single figure (the records' aggregate, 1.8547 for
split accumulation) over-credits FP8 at TP-sharded shapes: a Llama-3-8B layer's backward GEMMs at TP 8 measure 1.58,
at TP 4 1.70.

Each curve's points (``benchmarks/hopper_kernel_level.py`` ``speedup_curve``): the layers' GEMMs of its passes by
octave of FLOPs (``2**35`` to ``2**36``, ...), one point per octave at the geometric mean of its GEMMs' FLOPs, the
speedup their summed bf16 seconds over their summed FP8 seconds (as Transformer Engine's tutorial sums a layer's
GEMMs); between points linear in log FLOPs, clamped beyond the ends (:class:`~hp_core.specs.timing.SpeedupCurve`).
``tests/plugins/test_hopper_kernels.py`` re-derives them from the file.

* ``fp8_tensorwise`` (fast accumulation, the forward GEMMs Transformer Engine and torchao run so): the forward
  (fprop) GEMMs' ``fp8_tensorwise_fast_accum_seconds``. Over the sizes of the GEMMs of Transformer Engine's tutorial
  layer (0.53-2.1 TFLOP) it reads 1.81-1.94, about its per-layer 1.905, which stays the single figure
  (``gemm_speedups.HOPPER_SPEEDUPS``) the curve refines: the records hold it at those sizes (all forward GEMMs
  together 1.886) and not below them.
* ``fp8_tensorwise:split_accumulator`` (the backward GEMMs): the input- and weight-gradient (dgrad, wgrad) GEMMs'
  ``fp8_tensorwise_split_accum_seconds``.
* ``fp8_rowwise`` (torchao's ``rowwise`` recipe's forward GEMM: row-wise scales, fast accumulation): the fprop GEMMs'
  ``fp8_rowwise_fast_accum_seconds`` (the second run's ``rowwise_fast`` records). Faster than the per-tensor
  kernel from 0.18 TFLOP a GEMM (2.03 against 1.85 near 0.8 TFLOP), slower below it (1.05 against 1.35 at 42 GFLOP).
* ``fp8_rowwise:split_accumulator``: the per-tensor split-accumulation curve, the kernel torchao runs a row-wise
  GEMM without fast accumulation on (``gemm_speedups.HOPPER_SPEEDUPS``).

The two share the octaves, so one FLOPs axis. The largest octave holds one forward GEMM (7.7 TFLOP, Llama-3-70B's
TP-1 ``fc1``) and two backward ones; its dip (1.905, 1.837) is kept as measured.
"""

from __future__ import annotations

from hp_core.specs.timing import SpeedupCurve

__all__ = ["HOPPER_FP8_CURVES"]

_RECORDS = ("tests/plugins/data/h200_hopper_kernels.json (benchmarks/device_hopper_kernels.py on one H200 SXM, torch "
            "2.11.0+cu130, 2026-12-04): torch.mm bf16 over torch._scaled_mm per-tensor seconds of the GEMMs of "
            "Llama-3-8B and -70B layers at 8,192 tokens, TP 1, 2, 4, 8, per octave of FLOPs at the octave's geometric "
            "mean FLOPs (benchmarks/hopper_kernel_level.py speedup_curve)")
# The octaves' geometric mean FLOPs, 2**35 to 2**43 (both curves: each octave holds the same shapes' three passes).
_FLOPS = (42.1e9, 94.8e9, 183.9e9, 382.2e9, 828.6e9, 1608.4e9, 3848.3e9, 7696.6e9)

_SPLIT = SpeedupCurve(
    source=f"{_RECORDS}; the dgrad and wgrad GEMMs, use_fast_accum=False",
    flops=_FLOPS, values=(1.3498, 1.5528, 1.6636, 1.7583, 1.8405, 1.9241, 1.9046, 1.8365))

HOPPER_FP8_CURVES = (
    ("fp8_tensorwise", SpeedupCurve(
        source=f"{_RECORDS}; the fprop GEMMs, use_fast_accum=True",
        flops=_FLOPS, values=(1.3522, 1.5575, 1.6654, 1.7716, 1.8528, 1.9242, 1.9685, 1.9051))),
    ("fp8_tensorwise:split_accumulator", _SPLIT),
    ("fp8_rowwise", SpeedupCurve(
        source=f"{_RECORDS}; the fprop GEMMs, row-wise scales, use_fast_accum=True (the second run's rowwise_fast records)",
        flops=_FLOPS, values=(1.0466, 1.4839, 1.7106, 1.8631, 2.0261, 1.9877, 2.0637, 1.9301))),
    # torchao runs a row-wise GEMM without fast accumulation on the per-tensor cuBLAS kernel at unit scales
    # (gemm_speedups.HOPPER_SPEEDUPS): the same kernel, the same curve.
    ("fp8_rowwise:split_accumulator", _SPLIT),
)
