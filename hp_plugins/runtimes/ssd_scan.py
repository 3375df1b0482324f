"""Blackwell's and Hopper's Mamba-2 SSD scan rates (``DeviceEfficiency.ssd_scan_forward`` and ``ssd_scan_backward``):
the forwards measured, the backwards assumed. The rows and their provenance: ``tests/plugins/data/ssd_scan_b200.json``
and ``ssd_scan_hopper.json``; the figures' derivation and what they move: docs/time.md, 'Mamba-2 SSD scans'.
"""

from __future__ import annotations

from hp_core.specs.timing import Sourced

__all__ = ["BLACKWELL_SSD_SCAN_BACKWARD", "BLACKWELL_SSD_SCAN_FORWARD", "HOPPER_SSD_SCAN_BACKWARD", "HOPPER_SSD_SCAN_FORWARD"]

_AIC_SSD_B200 = ("ai-dynamo/aiconfigurator@4c5709ac66b6a30c4369dfe5ec838a94fc101840 aic-core/src/aiconfigurator_core/systems/"
                 "data/b200_sxm/linear_attention/trtllm/1.3.0rc15/mamba2_perf.parquet: TensorRT-LLM 1.3.0rc15's "
                 "mamba_chunk_scan_combined forward (mamba_ssm's five Triton scan kernels), bf16, on one B200, at the "
                 "Nemotron 3 Nano, Super and Ultra Mamba-2 shapes; the median of its 68 calls of 2 or more sequences "
                 "and 16,384 or more tokens, 83.3 TFLOP/s (74.5 to 88.7) on the FLOPs hp counts for the scan "
                 "(hp_plugins/kit/ssm.py ssd_chunk_flops), over the 2.25 PFLOP/s bf16 dense peak")
# Of the dense bf16 peak: 83.31 TFLOP/s / 2.25 PFLOP/s (tests/plugins/test_ssd_scan.py recomputes it from the rows).
BLACKWELL_SSD_SCAN_FORWARD = Sourced(0.0370, _AIC_SSD_B200)
BLACKWELL_SSD_SCAN_BACKWARD = Sourced(
    0.0370, "no measured backward found (aiconfigurator times the forward only); assumed: the forward's rate "
    f"({_AIC_SSD_B200}), on the attention backward factor's FLOPs (2.5 times the forward's)")

_VLLM_SSD_H100 = ("vllm-project/vllm pull request #27299, comment by cyang49 of 2025-10-25: vLLM's unfused copy of "
                  "mamba_ssm's five Triton SSD forward kernels (the 'Original' column of the table 'default "
                  "(CHUNK_SIZE_FUSED=128)') on a single H100 at ibm-granite/granite-4.0-h-small's Mamba-2 shape (128 "
                  "heads of 64, 1 group, state 128, chunk 128), 1,024 to 262,144 tokens; the median of its 5 rows of "
                  "16,384 or more tokens, 70.2 TFLOP/s (67.9 to 81.9) on the FLOPs hp counts for the scan "
                  "(hp_plugins/kit/ssm.py ssd_chunk_flops), over the H100 SXM's 989.4 TFLOP/s dense bf16 peak. Not "
                  "stated there: the H100 variant (taken as SXM) and whether that column ran at chunk 128 or the "
                  "model's 256 (at 256 the same times read 0.0947). Cross-check: mamba_ssm's own scan on an H200 locked "
                  "at 1,830 MHz, chunk 256 (tile-ai/TileOPs c9f559f, #1557), 62.5 TFLOP/s on the same count over its "
                  "15 calls of 2 or more sequences and 16,384 or more tokens (0.0632)")
# Of the dense bf16 peak: 70.18 TFLOP/s / 989.4 TFLOP/s (tests/plugins/test_ssd_scan.py recomputes it from the rows).
HOPPER_SSD_SCAN_FORWARD = Sourced(0.0709, _VLLM_SSD_H100)
HOPPER_SSD_SCAN_BACKWARD = Sourced(
    0.0709, "no measured backward found on any device (neither source times one); assumed: the forward's rate "
    f"({_VLLM_SSD_H100}), on the attention backward factor's FLOPs (2.5 times the forward's), as Blackwell's")
