"""Low-precision GEMM speedups over bf16, per device family (``DeviceEfficiency.gemm_speedups``; docs/precision.md, "Time").

Two measurements, each of the kernels alone (inputs already quantized):

* Transformer Engine's GEMM benchmark (``benchmarks/gemm/benchmark_gemm.py``) as its tutorial
  ``docs/examples/gemm_profiling/gemm_profiling.rst`` publishes it (TransformerEngine@d0067d0, read 2026-11-30):
  a 5B model (hidden 4096, intermediate 16384, 15,872 tokens), per-layer time of its 12 GEMMs (4 Fprop + 4 Dgrad +
  4 Wgrad), ``--pre-quantize``. Its pre-quantized FP8 path (``benchmark_fp8_current_prequantized``) calls
  ``tex.generic_gemm`` with ``use_split_accumulator=False`` for every one of the twelve, so on Hopper it times FP8
  *fast accumulation* (``common/gemm/cublaslt_gemm.cu``: ``CUBLASLT_MATMUL_DESC_FAST_ACCUM`` on), which training runs
  in the forward GEMM only.
* The split-accumulator rate (``:split_accumulator``), which training runs in the backward GEMMs: Transformer Engine
  promotes their partial sums (``pytorch/module/base.py`` ``_2X_ACC_DGRAD = _2X_ACC_WGRAD = True``,
  ``_2X_ACC_FPROP = False``; ``Float8CurrentScaling``'s ``fp8_gemm_dgrad`` / ``fp8_gemm_wgrad`` ``MMParams(True)``),
  as torchao's ``Float8LinearConfig`` does (``gemm_config_output`` fast, ``gemm_config_grad_input`` /
  ``gemm_config_grad_weight`` not). Hopper's figure is measured at training shapes on one H200 SXM
  (``tests/plugins/data/h200_hopper_kernels.json``, ``benchmarks/device_hopper_kernels.py``): the summed ``torch.mm``
  bf16 seconds over the summed ``torch._scaled_mm`` seconds (per-tensor scales, ``use_fast_accum=False``) of the
  input- and weight-gradient GEMMs of Llama-3-8B and -70B layers at 8,192 tokens and TP 1, 2, 4 and 8
  (``benchmarks/hopper_kernel_level.py`` ``split_accumulator_speedup``), per layer as TE's tutorial sums its GEMMs. It
  replaced the ratio of stas00's maximum achievable matmul rates on an H100 SXM (1402.6 / 794.5 = 1.7654), a ratio of
  two best-of-sweep rates at different shapes. The same measurement puts the fast-accumulation forward GEMMs at
  1.886, within 1% of TE's 1.905, which is kept.

* torchao's rowwise recipe on Hopper (``fp8_rowwise``): its forward GEMM on ``torch._scaled_mm``'s row-wise kernel
  with fast accumulation, measured on the same H200 at the same layers' forward shapes; its backward GEMMs on the
  per-tensor kernel at unit scales (``fp8_rowwise:split_accumulator``, the per-tensor split figure), their outputs
  rescaled apart (``PrecisionRecipe.rescaled_outputs``).

On Hopper both FP8 tensorwise figures, and the rowwise ones, are refined by GEMM size (``hopper_fp8_curves.HOPPER_FP8_CURVES``, the same
records per octave of FLOPs): a layer's dense GEMMs take the curves, the single figures price its grouped GEMMs.
"""

from __future__ import annotations

from hp_core.specs.timing import Sourced
from hp_plugins.runtimes.hopper_fp8_curves import HOPPER_FP8_CURVES  # the two FP8 figures below by GEMM size

__all__ = ["BLACKWELL_BANDED_SPEEDUPS", "BLACKWELL_FP4_BAND", "BLACKWELL_SPEEDUPS", "BLACKWELL_ULTRA_FP4_BAND", "HOPPER_FP8_CURVES", "HOPPER_SPEEDUPS"]

_TE_GEMMS = "Transformer Engine docs/examples/gemm_profiling/gemm_profiling.rst (TransformerEngine@d0067d0), pre-quantized"
# stas00/ml-engineering compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS comparison table" (at 744d01e).
_MAMF = ("stas00/ml-engineering@744d01e compute/accelerator/README.md 'Maximum Achievable Matmul FLOPS comparison table', "
         "NVIDIA H100 SXM, torch 2.7.0+cu126 in both rows: FP8 (float8_e4m3fn, torch._scaled_mm at its default "
         "use_fast_accum=False, compute/accelerator/benchmarks/mamf-finder.py) 1402.6 TFLOP/s at 1024x9216x14336 over BF16 "
         "794.5 at 2048x2048x13312, the best of each sweep")

_H200_KERNELS = ("tests/plugins/data/h200_hopper_kernels.json (benchmarks/device_hopper_kernels.py on one H200 SXM, torch "
                 "2.11.0+cu130, 2026-12-04): summed torch.mm bf16 seconds / summed torch._scaled_mm seconds (per-tensor "
                 "scales, use_fast_accum=False) of the dgrad and wgrad GEMMs of Llama-3-8B and -70B layers at 8,192 tokens, "
                 "TP 1, 2, 4, 8 (benchmarks/hopper_kernel_level.py); per layer 1.580-1.881")

_H200_ROWWISE = ("tests/plugins/data/h200_hopper_kernels.json `backward` (benchmarks/device_hopper_kernels.py --backward "
                 "on the same H200, 2026-12-04)")

BLACKWELL_SPEEDUPS = (
    ("fp8_tensorwise", Sourced(1.923, f"{_TE_GEMMS} on B300: BF16 13.102 ms / FP8CurrentScaling 6.812 ms per layer "
                                       "(B300, the B200's FP8:BF16 dense peak ratio of 2)")),
    ("mxfp8", Sourced(1.830, f"{_TE_GEMMS} on B300: BF16 13.102 ms / MXFP8 7.161 ms per layer")),
)
# NVFP4's speedup carries only between devices whose FP4 and BF16 dense peaks stand in one ratio
# (DeviceEfficiency.banded_gemm_speedups). Blackwell Ultra: TE's tutorial names its device once, in the header of its
# autocast printout (gemm_profiling.rst line 64 at d0067d0): "NVIDIA B300 SXM6 AC", the name an HGX / DGX B300 reports
# (the b300 preset, 1,000-1,100 W), not a GB300 (1,400 W); it states no power limit or clocks, and no NVFP4 or MXFP8 GEMM
# measurement on a GB300 was found, so the GB300 takes this figure by its peak ratio (docs/precision.md). An HGX B300
# states 12,600 (the DGX B300 datasheet, as stas00/ml-engineering@744d01e compute/accelerator/README.md tabulates it) or
# 14,000 (NVIDIA's Blackwell Ultra datasheet, as ai-dynamo/aiconfigurator@095f58a aic-core/src/aiconfigurator_core/
# systems/b300_sxm.yaml states it) dense FP4 TFLOP/s over 2,250 BF16, 5.60-6.22; a GB300 15,000 over 2,500, 6.00. The
# B200 and GB200 run FP4 at 4.0 times BF16 (9,000 / 2,250, 10,000 / 2,500; the same files' b200_sxm.yaml and gb200.yaml,
# and torchao's printout below): pytorch/ao#2427 (2025-06-23) prints torch._scaled_mm on NVFP4 operands against torch.mm in
# bf16 on a B200 at cubes of 1,024 to 8,192 (tests/plugins/data/blackwell_gemm_measurements.json, torchao2427-b200-*);
# the figure is its bf16 over NVFP4 time at the cubes within the sizes of TE's per-layer GEMMs (the tutorial's 5B layer,
# 15,872 tokens: 0.53 to 2.1 TFLOP a GEMM), 8,192 alone: 7.74e-4 / 2.05e-4 s (benchmarks/blackwell_gemm_level.py
# b200_nvfp4_speedup()). FP8 (2.0 on every Blackwell part) is not banded.
_TORCHAO_2427 = ("pytorch/ao#2427 'add-to-benchmarks' (2025-06-23), benchmarks/float8/bench_matmul.py --recipe nvfp4 on an "
                 "NVIDIA B200: torch.mm bf16 7.74e-4 s / torch._scaled_mm NVFP4 2.05e-4 s at 8192 x 8192 x 8192, the cube "
                 "within the sizes of TE's tutorial GEMMs (0.53-2.1 TFLOP)")
# The FP4:BF16 dense peak ratio bands of Blackwell (B200, GB200) and Blackwell Ultra (B300, GB300), comment above.
BLACKWELL_FP4_BAND = (4.0, 4.0)
BLACKWELL_ULTRA_FP4_BAND = (12600 / 2250, 14000 / 2250)
BLACKWELL_BANDED_SPEEDUPS = (
    ("nvfp4", *BLACKWELL_FP4_BAND, Sourced(round(7.74e-4 / 2.05e-4, 4), _TORCHAO_2427 + " (FP4:BF16 dense peak 4.0: B200, GB200)")),
    ("nvfp4", *BLACKWELL_ULTRA_FP4_BAND,
     Sourced(round(13.102 / 3.764, 4), f"{_TE_GEMMS} on B300: BF16 13.102 ms / NVFP4 3.764 ms per layer "
                                       "(FP4:BF16 dense peak 5.60-6.22: Blackwell Ultra, B300 and GB300)")),
)
HOPPER_SPEEDUPS = (
    ("fp8_tensorwise", Sourced(1.905, f"{_TE_GEMMS} on H200 NVL: BF16 31.968 ms / FP8CurrentScaling 16.785 ms per layer "
                                       "(fast accumulation: tex.generic_gemm with use_split_accumulator=False)")),
    # tests/plugins/data/h200_hopper_kernels.json: bf16 / FP8 split-accumulation GEMM seconds of the backward GEMMs
    # of 8 Llama-3 layers (8B and 70B at TP 1-8; per layer 1.580-1.881, median 1.846); was round(1402.6 / 794.5, 4)
    # from _MAMF, two best-of-sweep rates at different shapes. tests/plugins/test_hopper_kernels.py checks it.
    ("fp8_tensorwise:split_accumulator", Sourced(1.8547, f"{_H200_KERNELS}; it replaced 1.7654, the ratio {_MAMF}")),
    # torchao's rowwise recipe (pytorch/ao@36027d8 float8/config.py, float8/float8_ops.py addmm_float8_unwrapped): the
    # forward GEMM on torch._scaled_mm's row-wise CUTLASS kernel with fast accumulation, measured at the same layers'
    # fprop shapes (the second run's rowwise_fast records); the backward GEMMs, run without fast accumulation, on the
    # per-tensor cuBLAS kernel at unit scales ("the rowwise CUTLASS-based kernel is so slow without fast-accum"): the
    # tensorwise split-accumulation figure, their output rescale priced apart (PrecisionRecipe.rescaled_outputs).
    ("fp8_rowwise", Sourced(1.9622, f"{_H200_ROWWISE}: summed torch.mm bf16 seconds (the first run's dense records, "
                                    "the same shapes) / summed torch._scaled_mm seconds (row-wise scales, "
                                    "use_fast_accum=True) of the fprop GEMMs of the same layers")),
    ("fp8_rowwise:split_accumulator", Sourced(1.8547, f"torchao runs a row-wise GEMM without fast accumulation on the "
                                                      f"per-tensor cuBLAS kernel at unit scales: {_H200_KERNELS}")),
    # Blockwise FP8 has no pre-quantized Hopper figure ("Hopper's cuBLAS does not support" the pre-quantized
    # 2D-by-2D block-scaled inputs); the autocast run times the quantization with the GEMMs.
    ("fp8_blockwise:autocast", Sourced(1.399, f"{_TE_GEMMS.replace(', pre-quantized', '')} on H200 NVL, autocast mode "
                                              "(quantization included): BF16 32.014 ms / FP8Block 22.882 ms per layer")),
)
