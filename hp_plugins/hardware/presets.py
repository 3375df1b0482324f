"""Hardware presets: device memory, dense peak throughput, memory and link bandwidths, with provenance.

The numbers are package data, ``hp_plugins/hardware/data/hardware.json``: one entry per
preset in the units its sources state them (MiB, TFLOP/s, GB/s, microseconds),
with its ``provenance`` (datasheets, ``nvidia-smi``) and ``latency_source``.
This module turns them into :class:`~hp_core.types.HardwarePreset` records.

Memory is the capacity the driver reports (``nvidia-smi`` "Total", MiB), not
the marketing figure. Peak FLOP/s are dense (no structured sparsity).
Bandwidths are per device and per direction: NVLink's "900 GB/s" H100 figure
is bidirectional, so 450 GB/s each way; a 400 Gb/s network adapter per GPU is
50 GB/s. Latencies are per step of a collective (one hop of a ring): within a
node SimuMax's NCCL fit on 8x B200 for the B200, nccl-tests' small-message
all-reduce time on 8x H200 for the H100 and H200, and SimuMax's H100 starter
config, an unsourced guess, for the A100 and the Ascend (no public A100
small-message figure, nor any HCCS or RoCE one, was found); across nodes
3.58 us per network step on the NVIDIA presets, from nccl-tests' small-message
all-reduce on 2 x 8 H100 (NVIDIA/nccl-tests issue 309; borrowed by the B200 and
A100), and 35 us, SimuMax's unsourced guess, on the Ascend. A cross-node
all-to-all is one round per call where a preset states
``inter_node_all_to_all_latency_us`` (30 us on the NVIDIA presets: DeepEP issue 3,
nccl-tests alltoall on 2 DGX H100 nodes); each entry's ``latency_source`` gives
the arithmetic.
The cluster topology (``topology_source``): network adapters per node and their
bandwidth, whether the fabric is rail-optimised, and the NVLink SHARP all-reduce
bandwidth where the NVSwitch has it (docs/time.md, "Collectives on the cluster").

The ``gb200`` preset's node is the GB200 NVL72's NVLink domain (72 GPUs), its peaks the
B200's at 1,200 W, its latencies the B200's (no GB200 small-message figure was found).
The ``b300`` (DGX B300) and ``gb300`` (GB300 NVL72, 72 GPUs a node) presets are Blackwell Ultra,
their figures NVIDIA's as ai-dynamo/aiconfigurator states them, their latencies the B200's. Every
Blackwell preset states its FP4 peak: its ratio to the BF16 one picks which measured NVFP4 GEMM
speedup carries to it (docs/precision.md, "Time").

The ``architecture`` names the device family whose achieved efficiencies a
timing profile states (:mod:`hp_plugins.runtimes.timing_profiles`). The Blackwell
efficiencies were measured on SimuMax's 8x B200 (the ``b200-simumax`` preset), whose
largest GEMMs run slower than other B200s': the ``b200``, ``gb200`` and ``b300`` presets state
``large_gemm_speedup`` (1.223 from 1 TFLOP a GEMM, the median of 8 independent
measurements over those figures) and ``gb200`` its ``gemm_rate_scale`` (0.9397: MAMF's
GB200 over B200 rate against the peaks' ratio; ``b300`` MAMF's B300 over B200), and ``gb300`` its
``gemm_rate_scale`` alone (1.4199: six GB300 matmuls measured over those figures, no step with size);
``gemm_source`` gives the arithmetic
(``benchmarks/blackwell_gemm_level.py``, docs/time.md).

``sm_count`` is the streaming multiprocessors the device enables, each entry's ``sm_source`` saying whose figure:
NVIDIA's architecture whitepapers for the A100 (108) and H100 SXM5 (132, the H200's too), Chips and Cheese's B200
article for the B200 (148, 74 a die), and the counts CUDA enumerates as FlashInfer's sources state them for the GB200
(152), the B300 (148) and the GB300 (152; not Blackwell Ultra's full 160). It prices the GEMMs Transformer Engine's
userbuffers run on fewer SMs (docs/time.md).
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any, Mapping

from hp_core.markers import hookimpl
from hp_core.specs.hardware import HardwareSpec
from hp_core.types import HardwarePreset

__all__ = ["PRESETS", "hp_hardware"]

_MIB = 2**20
_TERA = 1e12
_GB = 1e9
_US = 1e-6


def _scaled(value: float | None, unit: float) -> float | None:
    """An optional figure in its stated unit, scaled (``null`` in the file: not stated, ``None``)."""
    return None if value is None else value * unit


def _preset(entry: Mapping[str, Any]) -> HardwarePreset:
    """One entry of ``data/hardware.json`` as a preset, scaled from its stated units."""
    return HardwarePreset(
        name=entry["name"],
        spec=HardwareSpec(
            name=entry["device"],
            memory_bytes=entry["memory_mib"] * _MIB,
            peak_flops={precision: tflops * _TERA for precision, tflops in entry["peak_tflops"].items()},
            devices_per_node=entry["devices_per_node"],
            architecture=entry["architecture"],
            memory_bandwidth_bytes_per_second=entry["memory_bandwidth_gb_per_s"] * _GB,
            intra_node_bandwidth_bytes_per_second=entry["intra_node_bandwidth_gb_per_s"] * _GB,
            inter_node_bandwidth_bytes_per_second=entry["inter_node_bandwidth_gb_per_s"] * _GB,
            host_link_bandwidth_bytes_per_second=entry["host_link_bandwidth_gb_per_s"] * _GB,
            intra_node_latency_seconds=entry["intra_node_latency_us"] * _US,
            inter_node_latency_seconds=entry["inter_node_latency_us"] * _US,
            inter_node_all_to_all_latency_seconds=_scaled(entry["inter_node_all_to_all_latency_us"], _US),
            nics_per_node=entry["nics_per_node"],
            nic_bandwidth_bytes_per_second=entry["nic_bandwidth_gb_per_s"] * _GB,
            rail_optimized=entry["rail_optimized"],
            nvls_bandwidth_bytes_per_second=_scaled(entry["nvls_bandwidth_gb_per_s"], _GB),
            gemm_rate_scale=entry["gemm_rate_scale"],
            large_gemm_speedup=entry["large_gemm_speedup"],
            large_gemm_flops=_scaled(entry["large_gemm_tflop"], _TERA),
            attention_rate_scale=_pair(entry.get("attention_rate_scale")),
            mla_attention_rate_scale=_pair(entry.get("mla_attention_rate_scale")),
            sm_count=entry.get("sm_count"),
        ),
        provenance=f"{entry['provenance']}; topology: {entry['topology_source']}"
                   + (f"; GEMM rates: {entry['gemm_source']}" if entry["gemm_source"] else "")
                   + (f"; attention rates: {entry['attention_source']}" if entry.get("attention_source") else "")
                   + (f"; SMs: {entry['sm_source']}" if entry.get("sm_count") else ""),
    )


def _pair(value):
    """A JSON ``[forward, backward]`` as a tuple; absent or null: ``None``."""
    return None if value is None else tuple(value)


_DATA = json.loads((files("hp_plugins.hardware") / "data" / "hardware.json").read_text(encoding="utf-8"))

PRESETS: tuple[HardwarePreset, ...] = tuple(_preset(entry) for entry in _DATA["presets"])


@hookimpl
def hp_hardware():
    yield from PRESETS
