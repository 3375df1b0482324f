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
from hp_core.specs.precision import PrecisionSpec
from hp_core.types import Runtime
from hp_plugins.runtimes.timing_profiles import GENERIC

__all__ = ["hp_runtimes"]


@hookimpl
def hp_runtimes():
    yield Runtime(
        name="generic",
        precision=PrecisionSpec(),
        attention="flash",
        zero=1,
        vocab_pad_multiple=1,
        overhead_bytes=0,
        timing=GENERIC,
        description="model math only: bf16/fp32 mixed-precision AdamW, ZeRO-1, flash attention, no trainer overheads",
    )
