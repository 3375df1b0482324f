"""Hardware presets: device memory and dense peak throughput, with provenance.

Memory is the capacity the driver reports (``nvidia-smi`` "Total", MiB), not
the marketing figure. Peak FLOP/s are dense (no structured sparsity).
"""

from __future__ import annotations

from hp_core.markers import hookimpl
from hp_core.specs.hardware import HardwareSpec
from hp_core.types import HardwarePreset

__all__ = ["hp_hardware"]

_MIB = 2**20
_TERA = 1e12


@hookimpl
def hp_hardware():
    yield HardwarePreset(
        name="a100-80gb",
        spec=HardwareSpec(
            name="NVIDIA A100 SXM 80GB", memory_bytes=81920 * _MIB, peak_flops={"bf16": 312 * _TERA, "fp16": 312 * _TERA},
            devices_per_node=8,
        ),
        provenance="NVIDIA A100 datasheet (312 TFLOP/s dense BF16); nvidia-smi reports 81920 MiB",
    )
    yield HardwarePreset(
        name="h100-sxm",
        spec=HardwareSpec(
            name="NVIDIA H100 SXM 80GB", memory_bytes=81559 * _MIB,
            peak_flops={"bf16": 989.4 * _TERA, "fp16": 989.4 * _TERA, "fp8": 1978.9 * _TERA}, devices_per_node=8,
        ),
        provenance="NVIDIA H100 datasheet (989.4 TFLOP/s dense BF16, 1978.9 FP8); nvidia-smi reports 81559 MiB",
    )
