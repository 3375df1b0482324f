"""Hardware presets: device memory, dense peak throughput, memory and link bandwidths, with provenance.

Memory is the capacity the driver reports (``nvidia-smi`` "Total", MiB), not
the marketing figure. Peak FLOP/s are dense (no structured sparsity).
Bandwidths are per device and per direction: NVLink's "900 GB/s" H100 figure
is bidirectional, so 450 GB/s each way; a 400 Gb/s network adapter per GPU is
50 GB/s. Latencies are per step of a collective (one hop of a ring).

The ``architecture`` names the device family whose achieved efficiencies a
timing profile states (:mod:`hp_plugins.timing_profiles`).
"""

from __future__ import annotations

from hp_core.markers import hookimpl
from hp_core.specs.hardware import HardwareSpec
from hp_core.types import HardwarePreset

__all__ = ["PRESETS", "hp_hardware"]

_MIB = 2**20
_GIB = 2**30
_TERA = 1e12
_GB = 1e9
_US = 1e-6

# Per-step collective latencies. B200: SimuMax's NCCL fit on 8x B200 (all_gather
# latency_us 9.18 per ring step, configs/system/b200_bf16_ceperm.json); other NVLink
# nodes: SimuMax's H100 starter config (6-8 us); across nodes: 35 us, SimuMax's
# inter-node figure for InfiniBand/RoCE (all configs).
_NVLINK_LATENCY = 8 * _US
_NETWORK_LATENCY = 35 * _US

PRESETS: tuple[HardwarePreset, ...] = (
    HardwarePreset(
        name="a100-80gb",
        spec=HardwareSpec(
            name="NVIDIA A100 SXM 80GB", memory_bytes=81920 * _MIB, peak_flops={"bf16": 312 * _TERA, "fp16": 312 * _TERA},
            devices_per_node=8, architecture="ampere", memory_bandwidth_bytes_per_second=2039 * _GB,
            intra_node_bandwidth_bytes_per_second=300 * _GB, inter_node_bandwidth_bytes_per_second=25 * _GB,
            host_link_bandwidth_bytes_per_second=32 * _GB,
            intra_node_latency_seconds=_NVLINK_LATENCY, inter_node_latency_seconds=_NETWORK_LATENCY,
        ),
        provenance=(
            "NVIDIA A100 datasheet: 312 TFLOP/s dense BF16, 2,039 GB/s HBM2e, NVLink 3 600 GB/s (300 each way); "
            "DGX A100: 8 GPUs, 8x 200 Gb/s HDR InfiniBand (25 GB/s per GPU), PCIe Gen4 x16 (32 GB/s); "
            "nvidia-smi reports 81920 MiB"
        ),
    ),
    HardwarePreset(
        name="h100-sxm",
        spec=HardwareSpec(
            name="NVIDIA H100 SXM 80GB", memory_bytes=81559 * _MIB,
            peak_flops={"bf16": 989.4 * _TERA, "fp16": 989.4 * _TERA, "fp8": 1978.9 * _TERA}, devices_per_node=8,
            architecture="hopper", memory_bandwidth_bytes_per_second=3350 * _GB,
            intra_node_bandwidth_bytes_per_second=450 * _GB, inter_node_bandwidth_bytes_per_second=50 * _GB,
            host_link_bandwidth_bytes_per_second=64 * _GB,
            intra_node_latency_seconds=_NVLINK_LATENCY, inter_node_latency_seconds=_NETWORK_LATENCY,
        ),
        provenance=(
            "NVIDIA H100 datasheet: 989.4 TFLOP/s dense BF16, 1978.9 FP8, 3.35 TB/s HBM3, NVLink 4 900 GB/s (450 each way); "
            "DGX H100: 8 GPUs, 8x 400 Gb/s ConnectX-7 (50 GB/s per GPU), PCIe Gen5 x16 (64 GB/s); nvidia-smi reports 81559 MiB"
        ),
    ),
    HardwarePreset(
        name="h200",
        spec=HardwareSpec(
            name="NVIDIA H200 SXM 141GB", memory_bytes=143771 * _MIB,
            peak_flops={"bf16": 989.4 * _TERA, "fp16": 989.4 * _TERA, "fp8": 1978.9 * _TERA}, devices_per_node=8,
            architecture="hopper", memory_bandwidth_bytes_per_second=4800 * _GB,
            intra_node_bandwidth_bytes_per_second=450 * _GB, inter_node_bandwidth_bytes_per_second=50 * _GB,
            host_link_bandwidth_bytes_per_second=64 * _GB,
            intra_node_latency_seconds=_NVLINK_LATENCY, inter_node_latency_seconds=_NETWORK_LATENCY,
        ),
        provenance=(
            "NVIDIA H200 datasheet: 989 TFLOP/s dense BF16 (the H100's compute), 141 GB HBM3e at 4.8 TB/s, NVLink 4 "
            "900 GB/s (450 each way); HGX H200: 8 GPUs, 400 Gb/s per GPU (50 GB/s), PCIe Gen5 x16 (64 GB/s); "
            "nvidia-smi reports 143771 MiB"
        ),
    ),
    HardwarePreset(
        name="b200",
        spec=HardwareSpec(
            name="NVIDIA B200 180GB", memory_bytes=183359 * _MIB,
            peak_flops={"bf16": 2250 * _TERA, "fp16": 2250 * _TERA, "fp8": 4500 * _TERA}, devices_per_node=8,
            architecture="blackwell", memory_bandwidth_bytes_per_second=8000 * _GB,
            intra_node_bandwidth_bytes_per_second=900 * _GB, inter_node_bandwidth_bytes_per_second=50 * _GB,
            host_link_bandwidth_bytes_per_second=64 * _GB,
            intra_node_latency_seconds=9.18 * _US, inter_node_latency_seconds=_NETWORK_LATENCY,
        ),
        provenance=(
            "NVIDIA HGX B200 at 1,000 W: 2,250 TFLOP/s dense BF16, 4,500 FP8 (NVIDIA Blackwell datasheet, as tabulated at "
            "glennklockwood.com/garden/processors/B200), 8 TB/s HBM3e, NVLink 5 1.8 TB/s (900 each way); DGX B200: "
            "8 GPUs, 8x 400 Gb/s ConnectX-7 (50 GB/s per GPU), PCIe Gen5 hosts (64 GB/s); nvidia-smi reports 183359 MiB; "
            "NVLink step latency 9.18 us from SimuMax's NCCL fit on 8x B200"
        ),
    ),
    HardwarePreset(
        name="ascend-910b",
        spec=HardwareSpec(
            name="Huawei Ascend 910B 64GB", memory_bytes=64 * _GIB, peak_flops={"fp16": 320 * _TERA, "bf16": 320 * _TERA},
            devices_per_node=8, architecture="ascend-910b", memory_bandwidth_bytes_per_second=1600 * _GB,
            intra_node_bandwidth_bytes_per_second=196 * _GB, inter_node_bandwidth_bytes_per_second=25 * _GB,
            host_link_bandwidth_bytes_per_second=64 * _GB,
            intra_node_latency_seconds=_NVLINK_LATENCY, inter_node_latency_seconds=_NETWORK_LATENCY,
        ),
        provenance=(
            "approximate public figures (Huawei publishes no full datasheet; variants 910B1-B4 differ): about 320 TFLOP/s "
            "FP16, 64 GB HBM2e at about 1.6 TB/s; Atlas 800T A2: 8 NPUs on an HCCS full mesh of 392 GB/s per NPU "
            "(196 each way), 8x 200 GE RoCE (25 GB/s per NPU), PCIe Gen5 x16. No public HCCS or RoCE latency figure exists: the NVLink and network latencies of the NVIDIA presets are assumed. "
            "Check against your system before trusting a step time"
        ),
    ),
)


@hookimpl
def hp_hardware():
    yield from PRESETS
