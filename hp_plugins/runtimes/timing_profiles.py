"""Built-in timing profiles: what trainers achieve on each device family, every figure sourced.

Two profiles:

* :data:`GENERIC` -- the model math on the vendor's libraries: the device
  efficiencies below, no communication overlap, a plain AdamW step.
* :data:`MEGATRON_LM_2022` -- Megatron-LM as Korthikanti et al. 2022 ran it
  (their Table 5): MEGATRON_TE's figures with the pipeline scatter/gather
  optimisation; price it with ``attention="eager"``.
* :data:`MEGATRON_TE` -- Megatron-Core with Transformer Engine as
  ``pretrain_gpt.py`` runs it with its default flags (no TP-communication
  overlap, no gradient-reduce or parameter-gather overlap, blocking pipeline
  sends), the alltoall MoE token dispatcher, and its distributed optimizer
  with gradient clipping.

Device efficiencies, per architecture (the hardware presets' ``architecture``):

* ``blackwell`` (B200) -- third-party microbenchmarks on an 8x B200 node:
  SimuMax v1.2 ``configs/system/b200_bf16_ceperm.json`` (MooreThreads/SimuMax
  commit 4dcaae5), measured with Transformer Engine 2.11, cuBLAS and NCCL by
  that project's ``simu_tools/efficency_test`` sweep. This is the same
  publisher and machine family as the Megatron runs of SimuMax's B200
  perf-vs-real table (``docs/b200/b200_release_v1.2_summary.json``, the
  runs of ``tests/plugins/data/megatron_measured.json``): the figures are kernel and
  collective microbenchmarks on that machine, not fitted to the runs' step
  times (except ``megatron-te``'s ``sustained_slowdown``, below, fitted to
  other runs of that machine). Three figure pairs (the attention kernels' fixed time and efficiency,
  the same for MLA's head-dim-192/128 kernels, the grouped GEMM's
  half-efficiency rows) are least-squares fits of a two-parameter model to
  those microbenchmarks, done for this module (``docs/time.md`` shows the
  fits). Its GEMM table (:data:`B200_GEMMS`) is that file's per-shape GEMM
  and grouped-GEMM measurements as published (:mod:`hp_plugins.hardware.gemm_b200`);
  ``matmul`` is their mean, for shapes the table lacks. The MoE router
  figures were measured for this module on an H200
  (``benchmarks/bench_moe_router.py``), for want of a B200 measurement.
* ``hopper`` (H100, H200) -- kernel figures are starter values, not
  shape-calibrated: SimuMax's ``configs/system/h100_nvlink.json`` (commit
  160921c), whose own note says so, and the FlashAttention-3 paper for
  attention (:data:`HOPPER_KERNELS`); the MoE router figures are an H200
  measurement (``benchmarks/bench_moe_router.py``). Expect larger errors.
  :data:`HOPPER`, the entry every profile uses, states ``matmul`` as the
  starter over a whole-run GEMM factor (below). The collective
  figures are published nccl-tests bus bandwidths: NVIDIA's GTC 2024 and 2025
  NCCL talks (8x H100 NVLink 4, DGX H100 with 8x 400 Gb/s adapters) and an
  8x H200 nccl-tests run (stas00/ml-engineering).
* ``ampere`` (A100) -- the median of SimuMax's 183 A100 GEMM measurements
  (``configs/system/a100_pcie.json``, an A100 PCIe: 300 W, so an SXM part may
  run somewhat faster), FlashAttention-2's reported A100 efficiencies, and
  NVIDIA's published nccl-tests bus bandwidths of DGX A100 (GTC 2024 and 2025).
* ``*`` -- any other device: round rules of thumb, marked as such.

Those are the kernels and collectives each measured alone. A whole run is
slower than their sum: :data:`MEGATRON_TE` states, for Blackwell, a
``sustained_slowdown`` (:data:`BLACKWELL_MEGATRON`) fitted to 33 measured
Megatron-LM step times on B200 that are not the public test cases, which are
held out (``benchmarks/fit_sustained_slowdown.py``, ``docs/time.md``).
:data:`HOPPER` (every profile) and :data:`FSDP2_AMPERE` (``fsdp2`` only) state a
``matmul`` efficiency that is the kernel figure over a whole-run GEMM factor
(:data:`WHOLE_RUN_MATMUL_FACTORS`) fitted to the calibration rows of
llm-foundry's MPT benchmark, the other rows held out, as are, for Hopper, the
14 Megatron-Core H100 rows (a device figure: clocks under sustained load at
the power limit, whatever the trainer); Ampere's stays ``fsdp2``'s because it
worsens the held-out A100 Megatron-LM rows. :data:`FSDP2`'s
``attention_kernel=triton_flash`` option states FlashAttention-2's rates over
a fitted Triton factor (:data:`TRITON_FLASH`;
``benchmarks/fit_fsdp2_sustained.py``). The other devices state none: no
full-run measurement backs one.
"""

from __future__ import annotations

import attrs

from hp_core.specs.overlap import OverlapSchedule
from hp_core.specs.timing import CommOverlap, DeviceEfficiency, Sourced, TimingProfile
from hp_plugins.hardware import gemm_b200, gemm_h100
from hp_plugins.runtimes.attention_speedups import BLACKWELL_ATTENTION_SPEEDUPS, HOPPER_ATTENTION_SPEEDUPS
from hp_plugins.runtimes.gemm_speedups import BLACKWELL_BANDED_SPEEDUPS, BLACKWELL_SPEEDUPS, HOPPER_FP8_CURVES, HOPPER_SPEEDUPS
from hp_plugins.runtimes.h200_grouped import H200_GROUPED_HALF_ROWS, H200_GROUPED_MATMUL
from hp_plugins.runtimes.host import MEGATRON_HOST, ROUTER_H200
from hp_plugins.runtimes.hybridep_sms import MEGATRON_HYBRIDEP_SMS, TORCHTITAN_HYBRIDEP_SMS
from hp_plugins.runtimes import ssd_scan
from hp_plugins.runtimes.userbuffers import TE_DEFAULT, sm_margins
from hp_plugins.runtimes.whole_run import (FSDP1_UNIT_SECONDS, MPT_CALIBRATION, TRITON_FLASH_FACTORS, WHOLE_RUN_MATMUL_FACTORS, fitted_matmul, fsdp1_unit, mpt_fit)

__all__ = ["AMPERE", "ANY_DEVICE", "B200_GEMMS", "BLACKWELL", "BLACKWELL_MEGATRON", "EAGER_ACCESSES", "FSDP1_UNIT_SECONDS", "FSDP2",
           "FSDP2_AMPERE",
           "FUSED_ACCESSES", "GENERIC", "H100_GEMM_SHAPE", "HOPPER_CUDNN", "HOPPER_KERNELS", "HOPPER_SDPA", "HOPPER", "MEGATRON_LM_2022",
           "MEGATRON_TE", "PROFILES", "TRITON_FLASH", "TRITON_FLASH_FACTORS", "WHOLE_RUN_MATMUL_FACTORS"]

_SIMUMAX_B200 = "SimuMax v1.2 configs/system/b200_bf16_ceperm.json (MooreThreads/SimuMax@4dcaae5), measured on 8x B200 with TE 2.11"
_SIMUMAX_H100 = "SimuMax configs/system/h100_nvlink.json (MooreThreads/SimuMax@160921c): spec-based starter value, 'NOT shape-calibrated' per its note"
_ROUTER_H200 = ROUTER_H200
_SIMUMAX_A100 = "SimuMax configs/system/a100_pcie.json (MooreThreads/SimuMax@acdbb66), measured on A100 PCIe"
# Published nccl-tests bus bandwidths (large messages), per fabric in NVIDIA's NCCL talks (slides in stas00/ml-engineering).
_GTC24 = ("NVIDIA GTC 2024 session S62129 (https://www.nvidia.com/en-us/on-demand/session/gtc24-s62129/), slide 12 "
          "'NCCL Tests Allreduce Bus Bandwidth in GB/s' (stas00/ml-engineering@dbe5e8a "
          "network/benchmarks/images/all-reduce-multi-node-bandwidth.png)")
_GTC25 = ("NVIDIA GTC 2025 session S72583 (https://www.nvidia.com/en-us/on-demand/session/gtc25-s72583/), slides 12-13 "
          "'NCCL Tests Allreduce/Alltoall Bus Bandwidth in GB/s' (stas00/ml-engineering@f2d6d3d "
          "network/images/all-reduce-bw-2025.png, all-to-all-bw-2025.png)")
_STAS_H200 = ("stas00/ml-engineering@744d01e network/README.md, SHARP: nccl-tests on 8x H200 SXM (NVLink 4, NVSwitch), "
              "NCCL 2.27.7, 16 GiB, 8 GPUs")


# The B200 table: 144 dense and 20 grouped GEMM shapes, each measured in its three passes.
B200_GEMMS = gemm_b200.gemm_table()
# Hopper's dense GEMMs by shape, relative to the largest measured (OpenXLA's sm_90 table; docs/time.md).
H100_GEMM_SHAPE = gemm_h100.shape_scale()

BLACKWELL = DeviceEfficiency(
    architecture="blackwell",
    matmul=Sourced(0.4878, f"{_SIMUMAX_B200}: accelerator.op.matmul.efficient_factor over 514 measured bf16 GEMM shapes"),
    attention_forward=Sourced(
        0.529,
        f"fit of time = overhead + executed FLOPs / (peak * efficiency) to the 19 TE fused-attention forward "
        f"measurements (causal, seq 4k-128k, 4-128 heads) in {_SIMUMAX_B200} (sdp_fwd)",
    ),
    attention_backward=Sourced(0.400, f"the same fit to the 19 backward measurements (sdp_bwd) in {_SIMUMAX_B200}"),
    attention_forward_overhead_seconds=Sourced(59.5e-6, f"the same forward fit's intercept, {_SIMUMAX_B200}"),
    attention_backward_overhead_seconds=Sourced(35.1e-6, f"the same backward fit's intercept, {_SIMUMAX_B200}"),
    grouped_matmul=Sourced(
        0.4876,
        f"fit of efficiency = e * rows / (rows + half_rows) to 60 TE grouped-GEMM measurements (fwd, dgrad, wgrad; "
        f"20-256 experts, 128-9832 rows each) in {_SIMUMAX_B200} (group_matmul)",
    ),
    grouped_half_rows=Sourced(
        250,
        f"the same fit; the roofline ridge point peak * e / (HBM bandwidth * memory efficiency) = 206 rows, where "
        f"reading an expert's weights takes as long as its FLOPs, agrees. {_SIMUMAX_B200}",
    ),
    memory_bandwidth=Sourced(0.666, f"{_SIMUMAX_B200}: accelerator.bandwidth.default.efficient_factor of 8 TB/s"),
    intra_node_bus=Sourced(
        0.6735, f"{_SIMUMAX_B200}: NCCL all_gather fit (reduce_scatter 0.6731, all_reduce 0.7424) of 900 GB/s NVLink 5"
    ),
    inter_node_bus=Sourced(0.96, f"{_GTC24}: one 400Gb adapter 48 GB/s all-reduce busbw of 50: a figure of the adapter, and DGX "
                           "B200 has DGX H100's 400 Gb/s ConnectX-7, one per GPU; no B200 inter-node measurement is published"),
    all_to_all_bus=Sourced(0.5968, f"{_SIMUMAX_B200}: NCCL all2all fit of 900 GB/s NVLink 5"),
    inter_node_all_to_all_bus=Sourced(0.743, f"{_GTC25}: DGX H100 alltoall 48 GB/s busbw at 32 GPUs, 48 x 24/31 = 37.2 of each "
                                      "adapter's 50 (the Hopper entry's); DGX B200 has the same adapters; no B200 measurement"),
    collective_overhead_seconds=Sourced(
        23.6e-6, f"{_SIMUMAX_B200}: mean of the NCCL fits' fixed_latency_us of all_reduce (22.2), all_gather (23.1) and "
        "reduce_scatter (25.6); its all2all fit has 0-51 us by group size, priced the same"
    ),
    mla_attention_forward=Sourced(
        0.4118,
        f"fit of time = overhead + executed FLOPs / (peak * efficiency) to the 6 TE fused-attention forward "
        f"measurements with q/k head dim 192 and v head dim 128 (causal, seq 4k-128k, 16-128 heads) in {_SIMUMAX_B200} "
        "(sdp_fwd); 128 heads at 4k tokens: fitted 0.759 ms, measured 0.735 ms",
    ),
    mla_attention_backward=Sourced(
        0.3233,
        f"the same fit to the 6 head-dim-192/128 backward measurements (sdp_bwd) in {_SIMUMAX_B200}; "
        "128 heads at 4k tokens: fitted 2.392 ms, measured 2.377 ms",
    ),
    mla_attention_forward_overhead_seconds=Sourced(17.7e-6, f"the same MLA forward fit's intercept, {_SIMUMAX_B200}"),
    mla_attention_backward_overhead_seconds=Sourced(30.5e-6, f"the same MLA backward fit's intercept, {_SIMUMAX_B200}"),
    moe_permute_bandwidth=Sourced(
        0.543,
        f"{_SIMUMAX_B200}: accelerator.bandwidth.permute_fwd (0.5008) and permute_bwd (0.5108) efficient_factor of "
        "8000 GiB/s, i.e. 0.538 and 0.549 of 8 TB/s, averaged: TE moe_permute_with_probs + moe_unpermute timed on the "
        "DeepSeek-V2 (4096 tokens, hidden 5120, 160 experts, top-6, capacity 1) and DeepSeek-V3 shapes "
        "(simu_tools/efficency_test/test_ce_permute_efficiency.py), bytes counted as 2 x tokens + 6 x dispatched rows",
    ),
    moe_permute_overhead_seconds=Sourced(
        120e-6,
        f"{_SIMUMAX_B200}: the same measurement's fixed part, 4 kernel launches per direction at its "
        "permute_fwd/permute_bwd latency_us of 30, subtracted before the efficiency was taken",
    ),    moe_router_forward_seconds=Sourced(
        344e-6, f"{_ROUTER_H200} (no B200 measurement; the kernels are top-k selections, sorts and reductions over a few MB, bound by launch and occupancy rather than by HBM or FLOPs, so the H200 time is taken as is): 53 forward kernels, 366.3 us, less the gating GEMM and its split-K reduce (21.9 us)"
    ),
    moe_router_backward_seconds=Sourced(
        52.3e-6, f"{_ROUTER_H200} (as for the forward, taken from H200): 26 backward kernels, 122.0 us, less the gating GEMM's two gradient GEMMs (39.1 us) "
        "and the benchmark's own accumulation into its input's .grad (30.6 us)"
    ),
    ssd_scan_forward=ssd_scan.BLACKWELL_SSD_SCAN_FORWARD, ssd_scan_backward=ssd_scan.BLACKWELL_SSD_SCAN_BACKWARD,
    gemm_table=B200_GEMMS,
    gemm_speedups=BLACKWELL_SPEEDUPS,
    banded_gemm_speedups=BLACKWELL_BANDED_SPEEDUPS,
    attention_speedups=BLACKWELL_ATTENTION_SPEEDUPS,
)

# Hopper's figures as the kernels measure alone; HOPPER, below, divides its matmul by the whole-run GEMM factor.
HOPPER_KERNELS = DeviceEfficiency(
    architecture="hopper",
    matmul=Sourced(0.70, f"{_SIMUMAX_H100}: matmul efficient_factor"),
    attention_forward=Sourced(
        0.75, "Shah et al. 2024, FlashAttention-3 (arXiv:2407.08608), Section 4.1: up to 740 TFLOP/s (75%) FP16 forward on H100"
    ),
    attention_backward=Sourced(0.55, f"{_SIMUMAX_H100}: sdp_bwd efficient_factor"),
    attention_forward_overhead_seconds=Sourced(0.0, "not measured on Hopper: no fixed time assumed"),
    attention_backward_overhead_seconds=Sourced(0.0, "not measured on Hopper: no fixed time assumed"),
    # The H200's torch._grouped_mm fit, all three passes (hp_plugins/runtimes/h200_grouped.py).
    grouped_matmul=H200_GROUPED_MATMUL,
    grouped_half_rows=H200_GROUPED_HALF_ROWS,
    memory_bandwidth=Sourced(0.85, f"{_SIMUMAX_H100}: bandwidth default efficient_factor"),
    intra_node_bus=Sourced(
        0.805, f"{_STAS_H200}: all_gather 361.4 and reduce_scatter 362.9 GB/s busbw (ring), mean 362.15 of 450 GB/s NVLink 4; "
        f"all_reduce with NVLS off 367.2 (0.816); {_GTC24}: NVLink4 (H100) all-reduce 370 (0.822)"
    ),
    inter_node_bus=Sourced(
        0.96, f"{_GTC24}: one 400Gb RDMA (IB/RoCE) adapter 48 GB/s all-reduce busbw, of 50 GB/s; the same slide's DGX H100 "
        "(NVLink 4 + 8x 400Gb, 32 GPUs) 380 of 400 (0.95), GTC 2025's 370 (0.925)"
    ),
    all_to_all_bus=Sourced(0.711, f"{_GTC25}: NVLink4 (H100) alltoall 320 GB/s busbw, 8 GPUs, of 450 GB/s"),
    inter_node_all_to_all_bus=Sourced(
        0.743, f"{_GTC25}: 8x 400Gb RDMA (DGX H100) alltoall 48 GB/s busbw at 32 GPUs (4 nodes): a busbw of (n-1)/n S/t puts "
        "(n-g)/n S = 24/32 of the buffer across each GPU's adapter at 48 x 24/31 = 37.2 GB/s, of 50"
    ),
    collective_overhead_seconds=Sourced(
        0.0, "none: the intra-node step latency (hardware preset) carries nccl-tests' whole small-message time on 8x H200"
    ),
    moe_router_forward_seconds=Sourced(
        344e-6, f"{_ROUTER_H200}: 53 forward kernels, 366.3 us, less the gating GEMM and its split-K reduce (21.9 us)"
    ),
    moe_router_backward_seconds=Sourced(
        52.3e-6, f"{_ROUTER_H200}: 26 backward kernels, 122.0 us, less the gating GEMM's two gradient GEMMs (39.1 us) "
        "and the benchmark's own accumulation into its input's .grad (30.6 us)"
    ),
    ssd_scan_forward=ssd_scan.HOPPER_SSD_SCAN_FORWARD, ssd_scan_backward=ssd_scan.HOPPER_SSD_SCAN_BACKWARD,
    gemm_shape=H100_GEMM_SHAPE, gemm_speedups=HOPPER_SPEEDUPS, attention_speedups=HOPPER_ATTENTION_SPEEDUPS, gemm_speedup_curves=HOPPER_FP8_CURVES,
)

AMPERE = DeviceEfficiency(
    architecture="ampere",
    matmul=Sourced(0.7175, f"{_SIMUMAX_A100}: median of the 183 measured bf16 GEMM shapes (range 0.45-0.80)"),
    attention_forward=Sourced(
        0.73, "Dao 2023, FlashAttention-2 (arXiv:2307.08691), Section 4.1: forward up to 73% of the A100's peak"
    ),
    attention_backward=Sourced(0.63, "Dao 2023, FlashAttention-2, Section 4.1: backward up to 63% of the A100's peak"),
    attention_forward_overhead_seconds=Sourced(0.0, "not measured on Ampere: no fixed time assumed"),
    attention_backward_overhead_seconds=Sourced(0.0, "not measured on Ampere: no fixed time assumed"),
    grouped_matmul=Sourced(0.647, f"{_SIMUMAX_A100}: median of the 12 measured grouped-GEMM shapes"),
    grouped_half_rows=Sourced(
        109, "roofline ridge point 312 TFLOP/s * 0.647 / (2.04 TB/s * 0.91) = 109 rows: a derived figure, not a measurement"
    ),
    memory_bandwidth=Sourced(0.91, f"{_SIMUMAX_A100}: accelerator.bandwidth.default.efficient_factor"),
    intra_node_bus=Sourced(0.773, f"{_GTC24}: NVLink3 (A100) all-reduce 232 GB/s busbw, 8 GPUs, of 300 GB/s (GTC 2025: 232)"),
    inter_node_bus=Sourced(
        0.96, f"{_GTC24}: one 200Gb RDMA (IB/RoCE) adapter 24 GB/s all-reduce busbw, of 25 GB/s; the same slide's DGX A100 "
        "(NVLink 3 + 8x 200Gb) 192 of 200 (0.96)"
    ),
    all_to_all_bus=Sourced(0.70, f"{_GTC25}: NVLink3 (A100) alltoall 210 GB/s busbw, 8 GPUs, of 300 GB/s"),
    inter_node_all_to_all_bus=Sourced(
        0.743, f"{_GTC25}: 8x 200Gb RDMA (DGX A100) alltoall 24 GB/s busbw at 32 GPUs: 24 x 24/31 = 18.6 GB/s across "
        "each GPU's adapter, of 25"
    ),
    collective_overhead_seconds=Sourced(0.0, "not measured on Ampere: no fixed time per call assumed"),
)

# Hopper as a whole run sustains it, in every profile.
HOPPER = fitted_matmul(HOPPER_KERNELS)
# fsdp2's Ampere entry: the whole-run GEMM factor and FSDP1's fitted per-unit time (option fsdp_implementation=fsdp1).
FSDP2_AMPERE = fsdp1_unit(fitted_matmul(AMPERE))


ANY_DEVICE = DeviceEfficiency(
    architecture="*",
    matmul=Sourced(0.60, "rule of thumb for a device with no measured entry: large bf16 GEMMs reach 0.5-0.8 of peak"),
    attention_forward=Sourced(0.50, "rule of thumb for a device with no measured entry"),
    attention_backward=Sourced(0.40, "rule of thumb for a device with no measured entry"),
    attention_forward_overhead_seconds=Sourced(0.0, "not measured: no fixed time assumed"),
    attention_backward_overhead_seconds=Sourced(0.0, "not measured: no fixed time assumed"),
    grouped_matmul=Sourced(0.50, "rule of thumb for a device with no measured entry"),
    grouped_half_rows=Sourced(200, "rule of thumb: the roofline ridge point of current accelerators is 100-300 rows"),
    memory_bandwidth=Sourced(0.75, "rule of thumb for a device with no measured entry"),
    intra_node_bus=Sourced(0.65, "rule of thumb for a device with no measured entry"),
    inter_node_bus=Sourced(0.65, "rule of thumb for a device with no measured entry"),
    all_to_all_bus=Sourced(0.50, "rule of thumb for a device with no measured entry"),
    collective_overhead_seconds=Sourced(0.0, "not measured: no fixed time per call assumed"),
)

_DEVICES = (BLACKWELL, HOPPER, AMPERE, ANY_DEVICE)

# Megatron-Core 0.14 + TE 2.11 on B200: a whole step against its kernels priced one by one. Refitted on 2026-12-03
# from 1.0542 to 1.0534 when every linear of a layer became a listed GEMM (docs/time.md, "What moved (2026-12-03)").
BLACKWELL_MEGATRON = attrs.evolve(
    BLACKWELL,
    sustained_slowdown=Sourced(
        1.0534,
        "fit (least squares in relative error) of measured over priced step time, every other figure as stated, to the "
        "33 Megatron-LM runs on 8x B200 (Megatron-Core 0.14, TE 2.11; Llama-3-70B/405B, DeepSeek-V2, a DeepSeek-V3-shaped "
        "MoE; TP/PP/DP/CP/EP; 4-32 micro-batches) of SimuMax v1.2 docs/b200/b200_release_v1.2_summary.json "
        "(MooreThreads/SimuMax@4dcaae5) whose layouts are not the four of megatron_measured.json, which are held out "
        "(benchmarks/fit_sustained_slowdown.py): clocks under sustained load, evicted caches, launch gaps and host work "
        "that kernel microbenchmarks leave out",
    ),
)

# Trainer-independent figures, counted from the ops.
_MATMUL_BACKWARD = Sourced(
    2.0, "the input gradient and the weight gradient are each a GEMM of the forward's size (Narayanan et al. 2021, arXiv:2104.04473, Section 5.1)"
)
_ATTENTION_BACKWARD = Sourced(
    2.5, "Dao 2023, FlashAttention-2 (arXiv:2307.08691), Section 4.1: the backward does 5 matmuls to the forward's 2"
)
_CAUSAL = Sourced(
    0.5, "Dao 2023, FlashAttention-2, Section 3.1.1: under a causal mask the kernel skips the blocks above the diagonal, about half"
)
_ACCESSES = Sourced(
    0.5,
    "counted from the kinds' op definitions (hp_plugins/kit/builder.py, feedforward.py, norms.py): a fused kernel reads its input and "
    "writes its output, 2 accesses per element, over 4-8 counted ops (RMSNorm+residual 5, SiLU-gated 6, softmax 5, GeLU 8, RoPE 4); "
    "gated and dropout kernels move a third tensor",
)
# Eager PyTorch launches one kernel per op, each reading its operands from HBM and writing its result. Counted
# per token of a Llama block (width h, SwiGLU width I) as torch runs it without torch.compile:
# RMSNorm (torch.rms_norm's composite, aten/src/ATen/native/layer_norm.cpp: to fp32 2+4 B, pow 4+4, mean 4,
# mul by the inverse root 4+4, cast back 4+2, weight mul 2+2) 36 B per element, twice; two residual adds
# 2+2+2 B each; SiLU 2+2 B and the gate product 2+2+2 B per element of I: 84 h + 10 I bytes against the kinds'
# 2 (4 + 1) h + 6 I counted ops, 3.84 bytes (1.92 bf16 accesses) per op at I = 3.5 h (Llama 3 8B and 70B): exactly
# 119 / 62 = 1.9194, rounded to 1.92. A kit layer counts its own figure from its widths (hp_plugins/kit/eager.py,
# LayerWork.eager_accesses_per_flop); this one prices what counts none (the head's norm and loss, uncounted blocks).
# The fused figure moves 2 accesses per element of 4-8 ops (0.5). A kit layer's own count includes its rotary embedding
# (20 bytes per rotated q/k element, 4 ops: Llama 3 8B's block 2.0); this figure, a block without it, does not.
EAGER_ACCESSES = Sourced(
    1.92,
    "counted: eager PyTorch runs one kernel per op, each reading its operands and writing its result; a Llama block's "
    "RMSNorms (torch.rms_norm composite: fp32 upcast, pow, mean, mul, downcast, weight mul: 36 B per element), residual "
    "adds (6 B) and SiLU-gated product (10 B per element of I) move 84 h + 10 I bytes per token against 10 h + 6 I counted "
    "ops: 3.84 bytes, 1.92 bf16 accesses per op at I = 3.5 h",
)
FUSED_ACCESSES = _ACCESSES
_ELEMENTWISE_BACKWARD = Sourced(
    2.0, "counted: an elementwise backward reads the saved input and the output gradient and writes the input gradient "
    "(3 accesses to the forward's 2), and a norm's backward makes a reduction pass before it"
)

_NO_OVERLAP = Sourced(0.0, "the model math alone: no overlap assumed")

GENERIC = TimingProfile(
    name="generic",
    description="model math on vendor libraries: measured kernel and NCCL efficiencies per device, no overlap, plain AdamW",
    devices=_DEVICES,
    overlap=CommOverlap(
        tensor_parallel=_NO_OVERLAP, context_parallel=_NO_OVERLAP, expert_parallel=_NO_OVERLAP,
        data_parallel=_NO_OVERLAP, pipeline=_NO_OVERLAP,
    ),
    matmul_backward_factor=_MATMUL_BACKWARD,
    attention_backward_factor=_ATTENTION_BACKWARD,
    flash_causal_fraction=_CAUSAL,
    elementwise_accesses_per_flop=_ACCESSES,
    elementwise_backward_factor=_ELEMENTWISE_BACKWARD,
    moe_permute_passes=Sourced(2, "a gather into expert order before the experts and a scatter back after them"),
    optimizer_grad_passes=Sourced(0, "plain AdamW: no gradient clipping"),
    grad_buffer_passes=Sourced(0, "torch.optim zero_grad(set_to_none=True), PyTorch's default since 2.0: no memset"),
    grad_scale_passes=Sourced(0, "averaging folded into the reduction (NCCL ReduceOp.AVG): no separate pass"),
    all_reduce_algorithm="ring",
    algorithm_source="NCCL picks ring for large messages within a node (NCCL_ALGO, NCCL docs)",
)

_MEGATRON_ARGS = "Megatron-LM megatron/training/arguments.py at core 0.14 (commit 23e00ed0)"

MEGATRON_TE = TimingProfile(
    name="megatron-te",
    description=(
        "Megatron-Core 0.14 + Transformer Engine 2.x with default flags: measured kernel and NCCL efficiencies per device, "
        "no communication overlap, alltoall MoE dispatcher, distributed optimizer with gradient clipping"
    ),
    devices=(BLACKWELL_MEGATRON, HOPPER, AMPERE, ANY_DEVICE),
    overlap=CommOverlap(
        tensor_parallel=Sourced(0.0, f"--tp-comm-overlap defaults to off ({_MEGATRON_ARGS}); the measured runs pass --disable-tp-comm-*"),
        context_parallel=Sourced(
            0.0,
            "TE's p2p ring attention issues the next K/V exchange before the current chunk's attention "
            "(transformer_engine/pytorch/attention AttnFuncWithCPAndKVP2P) but the first exchange and any excess stay exposed; "
            "priced as not overlapped. The a2a exchange is on the critical path by construction",
        ),
        expert_parallel=Sourced(0.0, f"--overlap-moe-expert-parallel-comm defaults to off ({_MEGATRON_ARGS})"),
        data_parallel=Sourced(0.0, f"--overlap-grad-reduce and --overlap-param-gather default to off ({_MEGATRON_ARGS})"),
        pipeline=Sourced(0.0, "non-interleaved 1F1B sends and receives are blocking (megatron/core/pipeline_parallel/p2p_communication.py)"),
    ),
    matmul_backward_factor=_MATMUL_BACKWARD,
    attention_backward_factor=_ATTENTION_BACKWARD,
    flash_causal_fraction=_CAUSAL,
    elementwise_accesses_per_flop=_ACCESSES,
    elementwise_backward_factor=_ELEMENTWISE_BACKWARD,
    moe_permute_passes=Sourced(
        4, "MoEAlltoAllTokenDispatcher (megatron/core/transformer/moe/token_dispatcher.py): permute, sort_chunks_by_idxs, "
        "unsort, unpermute, each reading and writing the dispatched tokens (permute reads, unpermute writes the "
        "layer's own tokens instead)"
    ),
    moe_local_sort_passes=Sourced(
        2, "MoEAlltoAllTokenDispatcher.dispatch_postprocess and combine_preprocess (megatron/core/transformer/moe/"
        "token_dispatcher.py at core_v0.16.0): sort_chunks_by_idxs and its unsort run only if num_local_experts > 1"
    ),
    optimizer_grad_passes=Sourced(
        3, "megatron/core/optimizer/clip_grads.py: the global norm reads the gradient shard, the clip reads and writes it"
    ),
    optimizer_grad_bytes=Sourced(
        4, "megatron/core/optimizer/distrib_optimizer.py _copy_model_grads_to_main_grads (shard_main_param.grad = "
        "shard_model_grad.float(); optimizer.py the same without the distributed optimizer), at 23e00ed0 and core_v0.18.0: "
        "the norm, the clip and Adam read fp32 main gradients; a bf16 buffer (grad_reduce_in_fp32 false) is copied "
        "into them, an fp32 one is the same tensor (.float() returns it)"
    ),
    grad_buffer_passes=Sourced(
        2, "megatron/core/distributed/param_and_grad_buffer.py: the fp32 gradient buffer is zeroed before each step "
        "(reset) and its norm checked for NaN before the reduction (check_for_nan_in_grad, on by default: "
        "--check-for-nan-in-loss-and-grad)"
    ),
    grad_scale_passes=Sourced(
        2, "megatron/core/distributed/param_and_grad_buffer.py start_grad_sync: grad_data *= gradient_scaling_factor "
        "(1/DP) before the reduce-scatter unless --ddp-average-in-collective (off by default); "
        "distributed_data_parallel.py sets the expert buffers' factor to 1/(DP*CP) as well, so they are scaled "
        "even where the expert data-parallel group is one rank"
    ),
    all_reduce_algorithm="ring",
    algorithm_source="NCCL picks ring for large messages within a node (NCCL_ALGO, NCCL docs)",
    host=MEGATRON_HOST,
    collective_sms={"hybridep": MEGATRON_HYBRIDEP_SMS},
    schedule=OverlapSchedule(userbuffers_sm_margins=sm_margins(TE_DEFAULT)),  # TE's default config (userbuffers.py)
)

MEGATRON_LM_2022 = attrs.evolve(
    MEGATRON_TE,
    name="megatron-lm-2022",
    description=(
        "Megatron-LM as Korthikanti et al. 2022 ran it on A100: eager attention with fused softmax, pipeline "
        "scatter/gather, no distributed optimizer; otherwise MEGATRON_TE's figures"
    ),
    # The B200 slowdown was measured on Megatron-Core 0.14, not on the 2022 trainer: kernels as measured alone.
    devices=_DEVICES,
    pp_scatter_gather=True,
    algorithm_source=(
        "Narayanan et al. 2021 (arXiv:2104.04473), Section 4.1: the scatter/gather optimisation of pipeline sends, "
        "on by default in Megatron-LM of 2021-2022; NCCL ring all-reduce"
    ),
)

_FSDP2_DOCS = ("PyTorch torch.distributed.fsdp.fully_shard (FSDP2) documentation: implicit prefetching by CPU run-ahead "
               "issues a module's all-gather on its own stream while the previous module computes, and the "
               "reduce-scatter runs on a separate stream during the next module's backward; Zhao et al. 2023, "
               "'PyTorch FSDP' (arXiv:2304.11277), Section 3.4")

_FA3_FIGURES = ("Shah et al. 2024, FlashAttention-3 (arXiv:2407.08608), Figures 5 and 6 (H100 SXM5, head dim 128, "
                "sequence 8k; forward causal, backward)")
# PyTorch's scaled_dot_product_attention runs FlashAttention-2 on Hopper (its flash backend); Transformer
# Engine's fused attention runs cuDNN's kernels. Their measured rates on H100 differ by 1.6x.
# fsdp2's Hopper entry also states FSDP1's fitted per-unit time (option fsdp_implementation=fsdp1).
# SDPA's FlashAttention-2 (fsdp2's default attention_kernel) runs no FP8 attention: its entries state no FP8 attention
# speedup (attention_kernel=cudnn restores cuDNN's, hp_plugins/runtimes/fsdp2.py).
FSDP2_BLACKWELL = attrs.evolve(BLACKWELL, attention_speedups=())
HOPPER_SDPA = fsdp1_unit(attrs.evolve(
    HOPPER, attention_speedups=(),
    attention_forward=Sourced(333 / 989.4, f"{_FA3_FIGURES}: FlashAttention-2 forward 333 TFLOP/s of 989.4"),
    attention_backward=Sourced(318 / 989.4, f"{_FA3_FIGURES}: FlashAttention-2 backward 318 TFLOP/s of 989.4"),
))
HOPPER_CUDNN = attrs.evolve(
    HOPPER,
    attention_forward=Sourced(529 / 989.4, f"{_FA3_FIGURES}: cuDNN forward 529 TFLOP/s of 989.4"),
    attention_backward=Sourced(518 / 989.4, f"{_FA3_FIGURES}: cuDNN backward 518 TFLOP/s of 989.4"),
)

def _triton_rate(entry: DeviceEfficiency, field: str) -> Sourced:
    """FlashAttention-2's rate on *entry*'s device over the fitted Triton factor."""
    factor, figure = TRITON_FLASH_FACTORS[entry.architecture], getattr(entry, field)
    return Sourced(
        figure.value / factor,
        f"FlashAttention-2's {figure.value:.4g} ({figure.source}) / {factor:.3f}, the Triton FlashAttention time factor "
        f"fitted (least squares in relative error of the step time) to {MPT_CALIBRATION[entry.architecture]} {mpt_fit('the matmul factor')} "
        "(benchmarks/fit_fsdp2_sustained.py, docs/time.md 'The fsdp2 fit'); "
        "Dao 2023 (arXiv:2307.08691) Section 4 measures FlashAttention-2 1.3-2.5x faster than FlashAttention in Triton "
        "on A100 (Section 4.1: 1.3-1.5x forward, about 2x backward)",
    )


# attention_kernel=triton_flash (llm-foundry attn_impl: triton, llmfoundry/models/layers/flash_attn_triton.py, a copy
# of flash_attn/flash_attn_triton.py of Dao's flash-attention repo on triton-pre-mlir): (forward, backward) per
# architecture; a device without a fitted factor has none and is refused.
TRITON_FLASH = {
    entry.architecture: (_triton_rate(entry, "attention_forward"), _triton_rate(entry, "attention_backward"))
    for entry in (HOPPER_SDPA, AMPERE)
}

FSDP2 = attrs.evolve(
    GENERIC,
    name="fsdp2",
    description=("PyTorch FSDP2 (torchtitan): GENERIC's kernel and NCCL figures with SDPA's FlashAttention-2 on Hopper, "
                 "the whole-run GEMM factor fitted on Ampere (Hopper's is the device's), FSDP's prefetch and "
                 "reduce-scatter overlap"),
    devices=(FSDP2_BLACKWELL, HOPPER_SDPA, FSDP2_AMPERE, ANY_DEVICE),
    # Async TP (option async_tp) runs through torch's micro-pipeline TP pass: it fuses the forward's all-gathers
    # and reduce-scatters and the backward's all-gathers with their matmuls, not the backward's reduce-scatter of a
    # block's input gradient, which sums the matmuls of wq, wk, wv (w1, w3): torch/_inductor/fx_passes/
    # micro_pipeline_tp.py fuse_matmul_reduce_scatter requires a single matmul's output.
    # Under PP torchtitan runs torch.distributed.pipelining, which reduces an FSDP2 stage's gradients once per step
    # (torch 2.13 pipelining/stage.py backward_maybe_with_nosync, perform_reduce_grad): fsdp_pipeline_step_reduce.
    schedule=OverlapSchedule(fsdp_prefetch=True, fsdp_reduce_scatter_overlap=True, tp_overlap_input_grad_reduce_scatter=False,
                             fsdp_pipeline_step_reduce=True, source=_FSDP2_DOCS),
    # torchtitan runs eager unless --compile (option elementwise_kernels). Its op-level SAC (the op_sac switches)
    # saves every op of its save list but every second mm (torchtitan/distributed/activation_checkpoint.py
    # _custom_policy), and that list holds no all-gather: under TP with SP a block re-gathers its input in backward.
    elementwise_accesses_per_flop=EAGER_ACCESSES, eager_elementwise=True,
    alternate_matmul_recompute=frozenset({"normOp", "ffAct"}), alternate_policy_recomputes=frozenset({"gather"}),
    collective_sms={"hybridep": TORCHTITAN_HYBRIDEP_SMS},
    # torch.optim.AdamW's GPU default, its foreach form: an HBM pass per op (option optimizer_implementation)
    optimizer_foreach=True,
)

PROFILES = {profile.name: profile for profile in (GENERIC, MEGATRON_TE, MEGATRON_LM_2022, FSDP2)}
