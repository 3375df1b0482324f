"""The built-in hardware presets and B200 GEMM table, read from package data, hold the published numbers.

``hp_plugins/hardware/data/hardware.json`` and ``hp_plugins/hardware/data/gemm_b200.json`` are
loaded by ``hp_plugins/hardware/presets.py`` and ``hp_plugins/hardware/gemm_b200.py``. The
values below are written out from their sources (vendor datasheets and
``nvidia-smi``; SimuMax v1.2's ``configs/system/b200_bf16_ceperm.json``) in the
same arithmetic the presets were first written in, so a changed digit, a lost
row or a reordered table fails here.
"""

from __future__ import annotations

import json
import sys
from importlib.resources import files
from pathlib import Path

import attrs
import pytest

from hp_core.api import build_registry
from hp_plugins.hardware import gemm_b200, presets
from hp_plugins.runtimes.timing_profiles import B200_GEMMS

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

MIB, GIB, TERA, GB, US = 2**20, 2**30, 1e12, 1e9, 1e-6
ROOT = Path(__file__).resolve().parents[2]


def _data(name: str) -> dict:
    return json.loads((files("hp_plugins.hardware") / "data" / name).read_text(encoding="utf-8"))


def test_the_hardware_presets_in_order():
    assert [p.name for p in presets.PRESETS] == ["a100-80gb", "h100-sxm", "h800", "h200", "b200", "b200-simumax", "gb200", "b300", "gb300", "ascend-910b"]
    registry = build_registry(use_env=False)
    for preset in presets.PRESETS:
        assert registry.hardware_preset(preset.name) == preset


def test_hardware_values_are_the_stated_figures():
    by_name = {p.name: p.spec for p in presets.PRESETS}
    h100 = by_name["h100-sxm"]
    assert h100.name == "NVIDIA H100 SXM 80GB" and h100.architecture == "hopper" and h100.devices_per_node == 8
    assert h100.memory_bytes == 81559 * MIB
    assert dict(h100.peak_flops) == {"bf16": 989.4 * TERA, "fp16": 989.4 * TERA, "fp8": 1978.9 * TERA}
    assert list(h100.peak_flops) == ["bf16", "fp16", "fp8"]
    assert h100.memory_bandwidth_bytes_per_second == 3350 * GB
    assert (h100.intra_node_bandwidth_bytes_per_second, h100.inter_node_bandwidth_bytes_per_second,
            h100.host_link_bandwidth_bytes_per_second) == (450 * GB, 50 * GB, 64 * GB)
    assert (h100.intra_node_latency_seconds, h100.inter_node_latency_seconds) == (1.27 * US, 3.58 * US)
    # The network figures measured on H100 nodes (nccl-tests issue 309, DeepEP issue 3) serve the H200, B200 and A100,
    # which cross nodes on 400 or 200 Gb/s ConnectX adapters as NCCL drives them; not the Ascend, whose HCCL is not NCCL.
    for name in ("a100-80gb", "h100-sxm", "h800", "h200", "b200", "gb200", "b300", "gb300"):
        spec = by_name[name]
        assert (spec.inter_node_latency_seconds, spec.inter_node_all_to_all_latency_seconds) == (3.58 * US, 30 * US), name
    assert (by_name["ascend-910b"].inter_node_latency_seconds, by_name["ascend-910b"].inter_node_all_to_all_latency_seconds) \
        == (35 * US, None)
    # The H800: the H100 SXM with NVLink cut to 400 GB/s (200 each way) and no NVLink SHARP figure; everything else the
    # H100's (the DeepSeek-V3 papers, the preset's provenance), its 132 SMs the DeepSeek-V3 report's.
    h800 = by_name["h800"]
    assert h800.intra_node_bandwidth_bytes_per_second == 200 * GB and h800.nvls_bandwidth_bytes_per_second is None
    assert (h800.sm_count, h800.nics_per_node, h800.nic_bandwidth_bytes_per_second, h800.rail_optimized) == (132, 8, 50 * GB, True)
    assert attrs.evolve(h800, name=h100.name, intra_node_bandwidth_bytes_per_second=450 * GB,
                        nvls_bandwidth_bytes_per_second=h100.nvls_bandwidth_bytes_per_second) == h100
    b200 = by_name["b200"]
    assert b200.memory_bytes == 183359 * MIB and b200.peak_flops["bf16"] == 2250 * TERA
    assert b200.intra_node_bandwidth_bytes_per_second == 900 * GB and b200.intra_node_latency_seconds == 9.18 * US
    # The machine the blackwell figures were measured on: the b200 preset but for its GEMM rates, which it states none of.
    simumax = by_name["b200-simumax"]
    assert attrs.evolve(simumax, name=b200.name, large_gemm_speedup=1.223, large_gemm_flops=1e12) == b200
    assert (simumax.gemm_rate_scale, simumax.large_gemm_speedup, simumax.large_gemm_flops) == (None, None, None)
    # From 1 TFLOP a GEMM, 1.223 (the median of 8 independent measurements over the blackwell figures); GB200 also at
    # (1822 / 1745) / (2500 / 2250) = 0.9397 of them (MAMF); benchmarks/blackwell_gemm_level.py computes both.
    assert (b200.gemm_rate_scale, b200.large_gemm_speedup, b200.large_gemm_flops) == (None, 1.223, 1e12)
    assert (by_name["gb200"].gemm_rate_scale, by_name["gb200"].large_gemm_speedup, by_name["gb200"].large_gemm_flops) \
        == (0.9397, 1.223, 1e12)
    a100 = by_name["a100-80gb"]
    assert a100.memory_bytes == 81920 * MIB and a100.memory_bandwidth_bytes_per_second == 2039 * GB
    assert a100.host_link_bandwidth_bytes_per_second == 32 * GB
    assert by_name["h200"].memory_bytes == 143771 * MIB and by_name["h200"].memory_bandwidth_bytes_per_second == 4800 * GB
    ascend = by_name["ascend-910b"]
    assert ascend.memory_bytes == 64 * GIB and list(ascend.peak_flops) == ["fp16", "bf16"]
    assert ascend.intra_node_bandwidth_bytes_per_second == 196 * GB
    assert isinstance(ascend.memory_bytes, int) and isinstance(ascend.devices_per_node, int)


def test_every_hardware_preset_states_its_sources():
    entries = _data("hardware.json")["presets"]
    assert len(entries) == len(presets.PRESETS)
    for entry, preset in zip(entries, presets.PRESETS):
        gemms = f"; GEMM rates: {entry['gemm_source']}" if entry["gemm_source"] else ""
        attention = f"; attention rates: {entry['attention_source']}" if entry.get("attention_source") else ""
        sms = f"; SMs: {entry['sm_source']}" if entry["sm_count"] else ""
        assert preset.provenance == f"{entry['provenance']}; topology: {entry['topology_source']}{gemms}{attention}{sms}" and entry["provenance"]
        assert entry["sm_source"] and preset.spec.sm_count == entry["sm_count"]  # stated, or why not
        # A machine whose fused attention runs at another rate than its family's says where that comes from.
        assert bool(entry.get("attention_source")) == (entry.get("attention_rate_scale") is not None), entry["name"]
        # A machine whose GEMMs run at another rate than its family's figures says where that comes from.
        stated = (entry["gemm_rate_scale"], entry["large_gemm_speedup"])
        assert bool(entry["gemm_source"]) == (stated != (None, None)) or entry["name"] == "b200-simumax", entry["name"]
        assert entry["latency_source"] and entry["topology_source"]
        spec = preset.spec
        assert spec.nics_per_node == entry["nics_per_node"] and spec.nic_bandwidth_bytes_per_second == entry["nic_bandwidth_gb_per_s"] * GB
        assert spec.rail_optimized is entry["rail_optimized"]
    assert "nvidia-smi reports 81559 MiB" in presets.PRESETS[1].provenance
    # DGX H100: eight 400 Gb/s adapters, one per GPU; NVLink SHARP at nccl-tests' 480 GB/s (NVIDIA GTC 2024/2025).
    h100 = presets.PRESETS[1].spec
    assert h100.nic_share_bytes_per_second() == 50 * GB and h100.nvls_bandwidth_bytes_per_second == 480 * GB


def test_the_gb200_preset_is_the_1200_watt_b200_in_a_72_gpu_nvlink_domain():
    gb200 = {p.name: p for p in presets.PRESETS}["gb200"]
    spec = gb200.spec
    # 1,200 W B200 peaks (glennklockwood.com/garden/processors/B200): 2,500 dense BF16/FP16, 5,000 FP8 TFLOP/s; 10,000 FP4
    # (ai-dynamo/aiconfigurator gb200.yaml, NVIDIA's Blackwell datasheet).
    assert spec.architecture == "blackwell" and dict(spec.peak_flops) == {"bf16": 2500 * TERA, "fp16": 2500 * TERA, "fp8": 5000 * TERA, "fp4": 10000 * TERA}
    # NVIDIA's NVL72 rack figures over 72 GPUs: 576 TB/s HBM3e -> 8 TB/s, 130 TB/s NVLink -> 1.8 TB/s, 900 GB/s each way.
    assert spec.memory_bandwidth_bytes_per_second == 576e12 / 72 == 8000 * GB
    assert spec.intra_node_bandwidth_bytes_per_second == 900 * GB  # 130 TB/s / 72 = 1.8 TB/s, 900 GB/s each way
    # nvidia-smi's 189471 MiB for an "NVIDIA GB200": 185.03 GiB, the "186 GB" of MLCommons' system descriptions.
    assert spec.memory_bytes == 189471 * MIB and round(spec.memory_bytes / GIB, 2) == 185.03
    # hp's node is the NVLink domain: 72 GPUs, each with its own 400 Gb/s ConnectX-7 (50 GB/s) across racks.
    assert (spec.devices_per_node, spec.nics_per_node, spec.nic_bandwidth_bytes_per_second) == (72, 72, 50 * GB)
    assert spec.nic_share_bytes_per_second() == 50 * GB and spec.inter_node_bandwidth_bytes_per_second == 50 * GB
    # Latencies borrowed from b200 (stated so); no NVLink SHARP figure, no rail layout stated.
    assert spec.intra_node_latency_seconds == 9.18 * US and spec.nvls_bandwidth_bytes_per_second is None and spec.rail_optimized is None
    # NVLink-C2C: 900 GB/s bidirectional per Grace, shared by two GPUs -> 225 GB/s each way.
    assert spec.host_link_bandwidth_bytes_per_second == 900 * GB / 2 / 2
    assert "measured on 8x B200" in gb200.provenance and "as fractions" in gb200.provenance
    assert "its GEMMs, which take gemm_rate_scale of them" in gb200.provenance


def test_a_step_on_gb200_prices_the_b200_efficiencies_at_its_peaks():
    """One 8-GPU data-parallel step of Llama 3 8B: the same blackwell efficiencies on both presets and the same
    large-GEMM rule, so attention (a fraction of peak) runs 2,250 / 2,500 = 0.9 as long on gb200 and every GEMM
    0.9 / 0.9397 = 0.9578 as long (its gemm_rate_scale: MAMF's GB200 over B200 rate); the step as a whole (memory-bound
    and latency parts unchanged, the NVLink ring the same: 8 GPUs in one NVLink domain) between 0.9 and 1."""
    from hp_core import api
    from hp_core.specs import ParallelSpec

    registry = build_registry(use_env=False)
    model = api.model_from_preset("llama3-8b", registry=registry)
    layout = ParallelSpec(dp=8, micro_batch_size=1, seq_len=8192, global_batch_size=64)
    times = {name: api.step_time(model, layout, registry=registry, hardware=registry.hardware_preset(name).spec,
                                 runtime=registry.runtime("megatron"))
             for name in ("b200", "gb200")}
    ratio = times["gb200"].step_seconds / times["b200"].step_seconds
    assert 0.9 < ratio < 0.96, ratio
    # The compute alone: the GEMMs (most of it) at 0.9578 and attention at 0.9 of their b200 time, the memory-bound
    # kernels alike on both (the same 8 TB/s HBM): 0.9515 for this step.
    assert times["gb200"].compute_seconds / times["b200"].compute_seconds == pytest.approx(0.9515, abs=5e-4)


def test_the_gemm_table_rows_as_published():
    assert len(gemm_b200.MATMUL) == 514 and len(gemm_b200.GROUPED_MATMUL) == 108
    assert gemm_b200.MATMUL[0] == (4096, 8192, 10240, "TN", "bf16", 0.6451614102335537)
    assert gemm_b200.MATMUL[2] == (10240, 4096, 8192, "NT", "fp32", 0.5979461534906494)
    assert gemm_b200.MATMUL[-1] == (65536, 6144, 5120, "NN", "bf16", 0.4802879026723184)
    assert gemm_b200.GROUPED_MATMUL[0] == (160, 154, 3072, 5120, "fwd", "fp32", 0.19968557879607124)
    assert gemm_b200.GROUPED_MATMUL[-1] == (40, 9832, 5120, 1536, "fwd", "fp32", 0.44471565623403814)
    for row in gemm_b200.MATMUL:
        assert type(row) is tuple and [type(x) for x in row] == [int, int, int, str, str, float]
    for row in gemm_b200.GROUPED_MATMUL:
        assert type(row) is tuple and [type(x) for x in row] == [int, int, int, int, str, str, float]
    assert gemm_b200.SOURCE.startswith("SimuMax v1.2 configs/system/b200_bf16_ceperm.json (MooreThreads/SimuMax@4dcaae5)")
    # 144 dense and 20 grouped shapes, each in its three passes.
    assert (len(B200_GEMMS.dense), len(B200_GEMMS.grouped)) == (432, 60)
    assert B200_GEMMS.source == gemm_b200.SOURCE


def test_the_data_files_ship_with_the_package():
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    assert "data/*.json" in package_data["hp_plugins.hardware"]
    assert "*.json" in package_data["hp_plugins.models.presets"]
