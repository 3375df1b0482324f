"""Blackwell's Mamba-2 SSD scan rates (``DeviceEfficiency.ssd_scan_forward`` and ``ssd_scan_backward``): the forward
measured, the backward assumed. The rows and their provenance: ``tests/plugins/data/ssd_scan_b200.json``; the
figure's derivation and what it moves: docs/time.md, 'Mamba-2 SSD scans'.
"""

from __future__ import annotations

from hp_core.specs.timing import Sourced

__all__ = ["BLACKWELL_SSD_SCAN_BACKWARD", "BLACKWELL_SSD_SCAN_FORWARD"]

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
