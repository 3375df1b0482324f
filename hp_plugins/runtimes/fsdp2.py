"""The ``fsdp2`` runtime: PyTorch FSDP2 (``fully_shard``) as torchtitan runs it, optionally with tensor parallel.

What it holds, and where that comes from (torchtitan ``parallelize_llama``,
PyTorch ``torch.distributed.fsdp.fully_shard``):

* Sharded parameters are fp32 (the optimizer updates them in place: no separate
  master copy); ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``
  all-gathers them to bf16 for compute and reduce-scatters fp32 gradients;
  AdamW keeps two fp32 moments, sharded like the parameters. So ``zero: 3``
  with 4-byte parameters, 4-byte gradients and no master copy.
* Gathered parameters: the running and the prefetched layer's (one
  ``fully_shard`` unit per transformer block), bf16, plus one layer's unsharded
  gradient before its reduce-scatter; ``reshard_after_forward`` (torchtitan's
  default for all but the last block) frees them after forward.
* Kernels: SDPA flash attention; an unfused SwiGLU (``F.silu(w1(x)) * w3(x)``);
  the loss upcasts the logits to fp32 (``cross_entropy(pred.flatten(0, 1).float(), ...)``).
"""

from __future__ import annotations

import attrs

from hp_core.markers import hookimpl
from hp_core.runtime_options import RuntimeOption
from hp_core.specs.overlap import schedule_option
from hp_core.specs.precision import PrecisionSpec
from hp_core.types import Runtime
from hp_plugins.runtimes.reserve import CUDA_CONTEXT_BYTES
from hp_plugins.runtimes.timing_profiles import FSDP2, HOPPER_CUDNN, HOPPER_SDPA


def _attention_kernel(runtime: Runtime, value: str) -> Runtime:
    """The Hopper entry of the runtime's timing profile with the attention kernel's measured rates."""
    entry = HOPPER_CUDNN if value == "cudnn" else HOPPER_SDPA
    timing = runtime.timing
    devices = tuple(entry if d.architecture == "hopper" else d for d in timing.devices)
    return attrs.evolve(runtime, timing=attrs.evolve(timing, devices=devices))


_FULLY_SHARD = "torch/distributed/fsdp/_fully_shard (FSDP2)"
OPTIONS = (
    RuntimeOption(
        "attention_kernel", "choice", "sdpa",
        "the fused attention kernel: sdpa (PyTorch scaled_dot_product_attention, FlashAttention-2 on Hopper, as "
        "torchtitan runs it) or cudnn (Transformer Engine's fused attention on cuDNN, as NeMo AutoModel's TE backend)",
        "torchtitan torchtitan/models/attention.py (F.scaled_dot_product_attention); Transformer Engine "
        "DotProductAttention (FusedAttention, cuDNN); rates: Shah et al. 2024, FlashAttention-3, Figures 5-6",
        _attention_kernel, choices=("sdpa", "cudnn"),
    ),
    schedule_option(
        "fsdp_prefetch", "fsdp_prefetch", default=True,
        description="a layer's parameter all-gather runs while the previous layer computes (FSDP2's implicit prefetch "
                    "by CPU run-ahead; set_modules_to_forward_prefetch); false: every gather exposed",
        source=f"{_FULLY_SHARD}: all-gather stream, FSDPModule.set_modules_to_forward_prefetch",
    ),
    schedule_option(
        "fsdp_reduce_scatter_overlap", "fsdp_reduce_scatter_overlap", default=True,
        description="a layer's gradient reduce-scatter runs during the next layer's backward; false: exposed",
        source=f"{_FULLY_SHARD}: reduce-scatter stream",
    ),
    schedule_option(
        "async_tp", "tp_comm_overlap", default=False,
        description="torchtitan --parallelism.enable_async_tensor_parallel: TP all-gathers and reduce-scatters "
                    "micro-pipelined with their GEMMs (SymmetricMemory), exposed max(comm - GEMMs, comm / tp)",
        source="torchtitan torchtitan/distributed/tensor_parallel.py maybe_enable_async_tp; "
               "torch/distributed/_symmetric_memory fused_all_gather_matmul, fused_matmul_reduce_scatter",
    ),
)

__all__ = ["hp_runtimes"]


@hookimpl
def hp_runtimes():
    yield Runtime(
        name="fsdp2",
        precision=PrecisionSpec(param_bytes=4, grad_bytes=4, master_param_bytes=0, optimizer="adamw", moment_bytes=4,
                                activation_bytes=2, softmax_bytes=4, logits_bytes=4),
        attention="flash",
        zero=3,
        vocab_pad_multiple=1,
        reserve_bytes=CUDA_CONTEXT_BYTES,  # the CUDA context (hp_plugins/runtimes/reserve.py)
        overhead_bytes=0,
        timing=FSDP2,
        options=OPTIONS,
        # torchtitan activation checkpointing: mode "full" (whole blocks) or "selective" with
        # op-level SAC, which saves matmul outputs and recomputes the ops between them: the norms'
        # outputs and the MLP activation (torchtitan/distributed/activation_checkpoint.py).
        recompute_modules={"op_sac": frozenset({"normOp", "ffAct"})},
        description="PyTorch FSDP2 / torchtitan: fp32 sharded params, bf16 gathered compute, fp32 reduce, AdamW",
        zero_levels=(3,),  # fully_shard: parameters, gradients and optimizer states sharded
    )
