"""Host time of the built-in runtimes' trainers (:class:`~hp_core.specs.overlap.HostOverhead`; docs/time.md,
"Overlap and host time")."""

from __future__ import annotations

from hp_core.specs.overlap import HostOverhead

# The router measurement the megatron-te profile's router times come from (timing_profiles.py).
ROUTER_H200 = (
    "benchmarks/bench_moe_router.py on one H200 (torch 2.11, CUDA 13.0): Megatron-Core 0.14's router path "
    "(megatron/core/transformer/moe/moe_utils.py at 23e00ed0: topk_routing_with_score_function with pre-softmax, "
    "8 groups, group top-3, top-6, scaling 16; apply_router_token_dropping with capacity 1 and padding; "
    "compute_routing_scores_for_aux_loss and switch_load_balancing_loss_func for seq_aux_loss; "
    "MoEAuxLossAutoScaler) at 4096 tokens x 160 experts, kernel time summed by torch.profiler"
)

# The host time of an eager Megatron-Core step (docs/time.md, "Overlap and host time"): a floor under each layer's
# forward and backward. The kernel counts are counted or measured; the seconds per kernel is fitted
# (benchmarks/fit_host_seconds.py) to the three Megatron-Bridge Qwen3-30B-A3B FP8 rows on 16 H100s at micro-batch 1
# (the `calibration` rows of fp8_measured_runs.json's moe_rows); every other row is held out.
MEGATRON_HOST = HostOverhead(
    seconds_per_kernel=42.0e-6,
    kernels_per_gemm=5.5,
    router_kernels=(53, 26),
    permute_kernels=4,
    source=(
        "seconds_per_kernel: fit (least squares in relative error) to the three Megatron-Bridge Qwen3-30B-A3B FP8 rows on "
        "16 H100s at micro-batch 1 (benchmarks/fit_host_seconds.py): an effective figure per counted kernel, above the "
        "11.3-17.7 us per bare launch of NVIDIA's CPU-overhead microbenchmark (NVIDIA/dgxc-benchmarking "
        "microbenchmarks/cpu_overhead at 841f546) since it carries the Python and Transformer Engine work of kernels the "
        "count leaves out (quantization, allocations); kernels_per_gemm: benchmarks/count_eager_kernels.py on transformers' "
        "LlamaDecoderLayer, 37 kernels beside its attention over 7 GEMMs forward (5.29) and 80 over 14 backward (5.71), "
        "their mean; router_kernels: " + ROUTER_H200 + ", 53 forward and 26 backward kernels; permute_kernels: "
        "SimuMax v1.2 (MooreThreads/SimuMax@4dcaae5) configs/system/b200_bf16_ceperm.json permute_fwd/permute_bwd, "
        "4 kernel launches per direction"
    ),
)
