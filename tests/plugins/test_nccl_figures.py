"""The Hopper and Ampere collective figures against the published nccl-tests bus bandwidths they come from.

Each collective time is derived by hand from the figures (docs/time.md, "Collectives on the cluster"
and "Every figure and its source"): the H100's NVLink 4 at 450 GB/s each way and 0.805 of it for
ring collectives, 0.711 for all-to-all; one 400 Gb/s adapter per GPU (50 GB/s) at 0.96, 0.743 for an
all-to-all's cross-node share; 1.27 us per NVLink ring step, 3.58 us per network step and 30 us per all-to-all
call spanning nodes (hardware presets' latency_source). The last tests price the small-message nccl-tests runs
those two network figures come from, and the runs they are checked against.
"""

from __future__ import annotations

import pytest

from hp_core.engine.timing.rates import _links
from hp_core.collectives import NCCL, CollectiveCall
from hp_core.specs.parallel import ParallelSpec
from hp_plugins.runtimes.timing_profiles import AMPERE, BLACKWELL, BLACKWELL_MEGATRON, HOPPER, MEGATRON_TE

GB = 1e9
GIB = 2**30


def _h100_links(registry, **degrees):
    hardware = registry.hardware_preset("h100-sxm").spec
    return _links(hardware, ParallelSpec(seq_len=4096, **degrees), HOPPER, MEGATRON_TE, NCCL)


def test_the_hopper_figures_are_the_published_bus_bandwidths():
    # NVIDIA GTC 2024 S62129 / GTC 2025 S72583 and nccl-tests on 8x H200: busbw over the link bandwidth.
    assert HOPPER.intra_node_bus.value == pytest.approx((361.4 + 362.9) / 2 / 450, abs=5e-4)
    assert HOPPER.all_to_all_bus.value == pytest.approx(320 / 450, abs=5e-4)
    assert HOPPER.inter_node_bus.value == 48 / 50
    assert HOPPER.inter_node_all_to_all_bus.value == pytest.approx(48 * 24 / 31 / 50, abs=5e-4)
    assert AMPERE.intra_node_bus.value == pytest.approx(232 / 300, abs=5e-4)
    assert AMPERE.all_to_all_bus.value == 210 / 300
    assert AMPERE.inter_node_bus.value == 24 / 25
    assert AMPERE.inter_node_all_to_all_bus.value == pytest.approx(24 * 24 / 31 / 25, abs=5e-4)


def test_intra_node_tp8_collectives_on_h100(registry):
    links = _h100_links(registry, tp=8)
    nbytes = 64 * 2**20  # a 64 MiB reduce-scatter input: 7/8 of it at 0.805 x 450 GB/s, then 7 steps of 1.27 us
    assert links.seconds("tp", "reduce_scatter", nbytes) == pytest.approx(7 / 8 * nbytes / 362.25e9 + 7 * 1.27e-6, rel=1e-12)
    assert links.seconds("tp", "reduce_scatter", nbytes) * 1e6 == pytest.approx(170.99, abs=0.005)
    # A 16 GiB all-gather reads back the 8x H200 measurement's busbw (361.4 GB/s) within 0.3%.
    busbw = 7 / 8 * 16 * GIB / links.seconds("tp", "all_gather", 16 * GIB)
    assert busbw / GB == pytest.approx(362.17, abs=0.01)  # 362.25 less 7 steps of latency
    # The small-message floor: 32 KiB all-reduce, 14 steps, 17.9 us as nccl-tests measured on 8x H200.
    assert links.seconds("tp", "all_reduce", 32768) * 1e6 == pytest.approx(2 * 7 / 8 * 32768 / 362.25e3 + 14 * 1.27, rel=1e-9)
    assert links.seconds("tp", "all_reduce", 32768) * 1e6 == pytest.approx(17.94, abs=0.01)
    # All-to-all within the node: 7/8 of the buffer at 0.711 x 450 = 319.95 GB/s, 7 steps.
    assert links.seconds("tp", "all_to_all", nbytes) == pytest.approx(7 / 8 * nbytes / 319.95e9 + 7 * 1.27e-6, rel=1e-12)


def test_multi_node_collectives_on_h100(registry):
    # Megatron GPT 32B's layout: dp48 x tp8 on 384 GPUs. Its DP group has one member on each of 48 nodes, so its
    # reduce-scatter runs on one adapter: 47/48 of the buffer at 0.96 x 50 = 48 GB/s and 48 network steps of 3.58 us.
    links = _h100_links(registry, tp=8, dp=48)
    assert links.groups["dp"].per_node == 1 and links.groups["dp"].nodes == 48
    nbytes = 4 * 4e9  # 4 GB of fp32 gradients' worth
    assert links.seconds("dp", "reduce_scatter", nbytes) == pytest.approx(47 / 48 * nbytes / 48e9 + 48 * 3.58e-6, rel=1e-12)
    assert links.seconds("dp", "reduce_scatter", nbytes) == pytest.approx(0.32656, abs=1e-5)
    # A DP group filling 4 whole nodes (32 GPUs, dp32): 8 adapters carry each ring pass, so a 16 GiB all-reduce's busbw
    # is 8 x 48 = 384 GB/s less its latency (383.56), against the 380 (GTC 2024) and 370 (GTC 2025) NVIDIA measured for DGX H100.
    whole = _h100_links(registry, dp=32)
    assert (whole.groups["dp"].per_node, whole.groups["dp"].nodes) == (8, 4)
    seconds = whole.seconds("dp", "all_reduce", 16 * GIB)
    assert seconds == pytest.approx(2 * (31 / 32 * 16 * GIB / (8 * 48e9) + 28 * 1.27e-6 + 4 * 3.58e-6), rel=1e-12)
    assert 2 * 31 / 32 * 16 * GIB / seconds / GB == pytest.approx(383.56, abs=0.01)
    # An all-to-all over the same 32 GPUs (ep32): 7/32 of the buffer over NVLink at 319.95 GB/s, 24/32 over the adapter
    # at 0.743 x 50 = 37.15 GB/s, concurrently, and one 30 us round for the call's peers; busbw (31/32 S / t) 48.0 GB/s
    # before latency, as NVIDIA's GTC 2025 slide measured.
    ep = _h100_links(registry, ep=32, dp=32)
    assert (ep.groups["ep"].per_node, ep.groups["ep"].nodes) == (8, 4)
    a2a = ep.seconds("ep", "all_to_all", 16 * GIB)
    assert a2a == pytest.approx(max(7 / 32 * 16 * GIB / 319.95e9, 24 / 32 * 16 * GIB / 37.15e9) + 30e-6, rel=1e-12)
    assert 31 / 32 * 16 * GIB / a2a / GB == pytest.approx(47.99, abs=0.01)  # 48.0 less its 30 us of latency


def test_the_blackwell_adapter_figures_are_the_400gb_adapter_measurements():
    # DGX B200 crosses nodes on the same 400 Gb/s ConnectX-7 adapters as DGX H100, one per GPU (hardware preset b200):
    # the one-adapter all-reduce busbw (48 of 50 GB/s, GTC 2024) and the DGX H100 all-to-all's adapter share
    # (48 x 24/31 of 50, GTC 2025), as the Hopper entry states them; the whole-run entry keeps them.
    assert BLACKWELL.inter_node_bus.value == 48 / 50 == HOPPER.inter_node_bus.value
    assert BLACKWELL.inter_node_all_to_all_bus.value == HOPPER.inter_node_all_to_all_bus.value
    assert BLACKWELL_MEGATRON.inter_node_bus is BLACKWELL.inter_node_bus
    assert BLACKWELL_MEGATRON.inter_node_all_to_all_bus is BLACKWELL.inter_node_all_to_all_bus


def test_multi_node_collectives_on_b200(registry):
    # GPT-OSS 120B's Megatron-Bridge 26.02 layout on 64 B200: dp64 ep64, the expert group on 8 per node over 8 nodes.
    hardware = registry.hardware_preset("b200").spec
    links = _links(hardware, ParallelSpec(seq_len=4096, dp=64, ep=64), BLACKWELL, MEGATRON_TE, NCCL)
    assert (links.groups["ep"].per_node, links.groups["ep"].nodes) == (8, 8)
    # One layer's dispatch: 4 x 4096 tokens, each to its top-4 experts, 2880 bf16 values: 377,487,360 bytes. 7/64 of
    # it over NVLink 5 at 0.5968 x 900 = 537.12 GB/s and 56/64 over the adapter at 0.743 x 50 = 37.15 GB/s,
    # concurrently, and one round for the call's peers: the H100's 30 us (its fixed time included: the profile's
    # 23.6 us per call is not added on top), but never less than the call's latency within one node, which on B200 is
    # 23.6 us plus 7 NVLink steps of 9.18 us (SimuMax's fit) = 87.86 us, so 87.86 us.
    nbytes = 4 * 4096 * 4 * 2880 * 2
    assert nbytes == 377_487_360
    a2a = links.seconds("ep", "all_to_all", nbytes)
    assert a2a == pytest.approx(max(7 / 64 * nbytes / 537.12e9, 56 / 64 * nbytes / 37.15e9) + 87.86e-6, rel=1e-12)
    assert a2a * 1e3 == pytest.approx(8.9789, abs=1e-4)  # 8.8910 ms over the adapters
    within = links.seconds("ep", "all_to_all", nbytes) - 56 / 64 * nbytes / 37.15e9
    assert within == pytest.approx(23.6e-6 + 7 * 9.18e-6, rel=1e-9)
    # The dense DP group fills whole nodes (8 per node): a ring pass crosses each node on its 8 adapters at 48 GB/s,
    # slower than the 7/8 of it on NVLink 5 at 0.6735 x 900 = 606.15 GB/s; 56 NVLink and 8 network steps.
    grads = 2 * 4e9  # 4e9 bf16 gradients
    assert links.seconds("dp", "reduce_scatter", grads) == pytest.approx(
        23.6e-6 + 63 / 64 * grads * max(7 / (8 * 606.15e9), 1 / (8 * 48e9)) + 56 * 9.18e-6 + 8 * 3.58e-6, rel=1e-12)


def test_the_network_step_is_the_two_node_small_all_reduce(registry):
    # NVIDIA/nccl-tests issue 309, first post (2025-05-20): 2 Dell XE9680 nodes of 8x H100 SXM, one 400 Gb/s
    # ConnectX-7 NDR InfiniBand adapter per GPU, NCCL 2.26.2; all_reduce_perf at 16 B: 24.96 us out of place, 24.93 in
    # place. NCCL runs its tree (LL) there, which hp prices 2 ((g-1) a_intra + log2(k) a_inter): the network step is
    # 24.945 / 2 - 7 x 1.27 = 3.5825 us, the preset's 3.58.
    measured_2 = (24.96 + 24.93) / 2
    preset = registry.hardware_preset("h100-sxm")
    # The preset states the arithmetic, with its own intra-node step: 24.945 / 2 - 7 x 1.27 = 3.58 us.
    intra_us = preset.spec.intra_node_latency_seconds * 1e6
    assert f"{measured_2:.3f} / 2 - 7 x {intra_us:.2f} = {measured_2 / 2 - 7 * intra_us:.2f} us" in _latency_source("h100-sxm")
    assert registry.hardware_preset("h100-sxm").spec.inter_node_latency_seconds == pytest.approx(3.58e-6, rel=1e-12)
    two = _h100_links(registry, dp=16)
    assert (two.groups["dp"].per_node, two.groups["dp"].nodes) == (8, 2)
    tree = NCCL.seconds(CollectiveCall("all_reduce", 16, two.groups["dp"], two.fabric, "tree"))
    assert tree * 1e6 == pytest.approx(2 * (7 * 1.27 + 3.58), abs=1e-3)  # the 16 bytes take under a nanosecond
    assert tree * 1e6 == pytest.approx(measured_2, rel=1e-3)
    # Checked against a run it was not taken from: the same issue's 4 nodes (32 H100 in virtual machines, the same
    # adapters) read 34.82 and 34.45 us at 16 B; hp's tree, 2 (7 x 1.27 + 2 x 3.58) = 32.10 us, is 7.3% under it.
    four = _h100_links(registry, dp=32)
    assert (four.groups["dp"].per_node, four.groups["dp"].nodes) == (8, 4)
    tree = NCCL.seconds(CollectiveCall("all_reduce", 16, four.groups["dp"], four.fabric, "tree"))
    assert tree * 1e6 == pytest.approx(2 * (7 * 1.27 + 2 * 3.58), abs=1e-3)
    assert tree * 1e6 / ((34.82 + 34.45) / 2) - 1 == pytest.approx(-0.073, abs=0.001)


def test_a_cross_node_all_to_all_is_one_round_per_call(registry):
    # deepseek-ai/DeepEP issue 3, first post (2025-02-25): nccl-tests alltoall on 2 DGX H100 nodes with 400 Gb/s
    # adapters, NVLink disabled, "30 microseconds small message latency": the preset's call latency, charged once
    # whatever the peers (NCCL progresses them in one round: NCCL_MAX_DEV_WORK_P2P_PER_BATCH sends or receives per
    # channel batch, the peers of each node on their own channels; docs/time.md).
    assert registry.hardware_preset("h100-sxm").spec.inter_node_all_to_all_latency_seconds == pytest.approx(30e-6, rel=1e-12)
    small = _h100_links(registry, ep=16, dp=16)
    assert small.seconds("ep", "all_to_all", 1024) * 1e6 == pytest.approx(30.0 + 8 / 16 * 1024 / 37.15e3, rel=1e-9)
    # Checked against runs it was not taken from: torch.distributed.all_to_all_single (NCCL) on H100 clusters,
    # ppl-ai/pplx-kernels@12cecfda252e4e646417ac263d96e994d476ee5d README.md "Benchmark Results", 1 token per GPU, row
    # "Torch AtA" (H100 and the DeepSeek-V3 configuration: the repository's issue 10). Its tests/bench_all_to_all.py
    # sends a (world, 256 / world, 1 x (7168 + 56 x 4)) uint8 buffer: 256 x 7392 = 1,892,352 bytes per rank at any EP.
    # hp prices them 27-49% under the measurement (which also holds torch's own launch time); the time is flat in EP
    # as measured, where a latency per peer would grow eightfold from EP 16 to EP 128.
    nbytes = 256 * 7392
    measured_us = {16: 109.7, 32: 95.7, 64: 101.6, 128: 132.0}
    for ep, us in measured_us.items():
        links = _h100_links(registry, ep=ep, dp=ep)
        assert (links.groups["ep"].per_node, links.groups["ep"].nodes) == (8, ep // 8)
        seconds = links.seconds("ep", "all_to_all", nbytes)
        assert seconds == pytest.approx((ep - 8) / ep * nbytes / 37.15e9 + 30e-6, rel=1e-12)
        assert 0.5 <= seconds * 1e6 / us <= 1.0, ep


def _latency_source(name: str) -> str:
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).resolve().parents[2] / "hp_plugins" / "hardware" / "data" / "hardware.json").read_text())
    return next(p for p in data["presets"] if p["name"] == name)["latency_source"]
