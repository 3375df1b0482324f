"""The ``hyperparallel`` runtime: the semantics of HyperParallel's planner (``hyper_parallel.auto_parallel.sapp_nd``).

Mixed-precision AdamW (bf16 parameters and activations, fp32 gradients, master
parameters and moments), flash attention, FSDP that reshards after forward, and
**deferred gradient reduction**: gradients are accumulated unsharded over a
step's micro-batches and reduce-scattered once after the last backward. A stage
then has two peak points (docs/runtimes.md; ``Cost.working`` and
``Cost.first_working`` of HyperParallel's
``hyper_parallel/auto_parallel/sapp_nd/recompute/profile.py``): the end of
warm-up (every in-flight micro-batch's activations, two layers' gathered
parameters) and the end of its last backward (no activations, the whole
unsharded gradient, one layer's gathered parameters and its first layer's
backward working set).
"""

from __future__ import annotations

from hp_core.markers import hookimpl
from hp_core.runtime_options import field_option
from hp_core.specs.precision import PrecisionSpec
from hp_core.types import Runtime
from hp_plugins.runtimes.reserve import CUDA_CONTEXT_BYTES
from hp_plugins.runtimes.timing_profiles import GENERIC

__all__ = ["hp_runtimes"]


@hookimpl
def hp_runtimes():
    yield Runtime(
        name="hyperparallel",
        precision=PrecisionSpec(),
        attention="flash",
        zero=3,
        vocab_pad_multiple=1,
        reserve_bytes=CUDA_CONTEXT_BYTES,  # the CUDA context (hp_plugins/runtimes/reserve.py)
        overhead_bytes=0,
        deferred_grad_reduction=True,
        timing=GENERIC,
        options=(
            field_option(
                "deferred_grad_reduction", "deferred_grad_reduction", "bool", default=True,
                description="gradients accumulate unsharded over the step and are reduce-scattered once after the last "
                            "backward (a second peak point); false: reduced after each micro-batch's backward",
                source="HyperParallel hyper_parallel/auto_parallel/sapp_nd/recompute/profile.py Cost.first_working",
            ),
        ),
        description="HyperParallel: resharding FSDP with deferred gradient reduction (a second peak at the last backward)",
        zero_levels=(1, 2, 3),  # its ZeRO 1-3 sharding levels
    )
