"""The ``generic`` runtime: the model math alone, with the common mixed-precision defaults.

Precision: bf16 parameters and activations, fp32 gradients, fp32 master
parameters and fp32 AdamW moments: 18 bytes per parameter before sharding
(Megatron-LM ``theoretical_memory_usage.py``). ZeRO-1 (the distributed
optimizer) by default. Flash attention. No vocabulary padding beyond an equal
split over TP, and no trainer buffers, workspaces or allocator reserve: a
trainer-specific profile states those. Timing: :data:`hp_plugins.runtimes.timing_profiles.GENERIC`
(measured kernel and NCCL efficiencies per device, no communication overlap).
"""

from __future__ import annotations

from hp_core.markers import hookimpl
from hp_core.runtime_options import field_option, trait_option
from hp_core.specs.precision import PrecisionSpec
from hp_core.types import Runtime
from hp_plugins.runtimes.reserve import CUDA_CONTEXT_BYTES
from hp_plugins.runtimes.timing_profiles import GENERIC

__all__ = ["hp_runtimes"]


# The model math states no fused kernel; a run on a trainer that fuses states it (docs/runtimes.md).
OPTIONS = (
    trait_option("cross_entropy_fusion", "fused_cross_entropy", default=False,
                 description="the loss keeps the logits in the compute dtype, overwritten by their gradient, instead of "
                             "an fp32 softmax (a fused cross-entropy kernel)",
                 source="Transformer Engine transformer_engine/pytorch/cross_entropy.py parallel_cross_entropy"),
    trait_option("swiglu_fusion", "fused_swiglu", default=False,
                 description="the gated MLP's activation keeps only its input (a fused SwiGLU kernel)",
                 source="Megatron-LM megatron/core/fusions/fused_bias_swiglu.py"),
    field_option("vocab_pad_multiple", "vocab_pad_multiple", "int", default=1, minimum=1,
                 description="the vocabulary is padded to a multiple of this times tp",
                 source="Megatron-LM megatron/training/tokenizer/tokenizer.py _vocab_size_with_padding"),
)


@hookimpl
def hp_runtimes():
    yield Runtime(
        name="generic",
        precision=PrecisionSpec(),
        attention="flash",
        zero=1,
        vocab_pad_multiple=1,
        reserve_bytes=CUDA_CONTEXT_BYTES,  # the CUDA context (hp_plugins/runtimes/reserve.py)
        overhead_bytes=0,
        timing=GENERIC,
        options=OPTIONS,
        description="model math only: bf16/fp32 mixed-precision AdamW, ZeRO-1, flash attention, no trainer overheads",
    )
