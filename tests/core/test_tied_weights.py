"""A weight tied across pipeline stages has its two copies' gradients all-reduced once a step
(hp_core/engine/timing/tied_weights.py; Megatron-Core finalize_model_grads _allreduce_word_embedding_grads).

Gemma 2 9B ties its output head to its embedding (256,000 x 3,584): at PP 2 the last stage holds its own copy, and
both stages pay one all-reduce of the copy's TP shard over the two of them, at the main gradient's width, in their
data-parallel time; at PP 1, or for an untied model, nothing.
"""

from __future__ import annotations

import pytest

from hp_core.api import build_registry, prepare, step_time
from hp_core.engine.timing.rates import _rates
from hp_core.engine.timing.tied_weights import tied_stages
from hp_core.specs import ParallelSpec

REGISTRY = build_registry(use_env=False)
H100 = REGISTRY.hardware_preset("h100-sxm").spec
MEGATRON = REGISTRY.runtime("megatron")


def _layout(**degrees) -> ParallelSpec:
    return ParallelSpec(**{"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 8, "tp": 2, **degrees})


def test_the_tied_copy_s_stages_and_elements():
    run = prepare("gemma-2-9b", _layout(pp=2), registry=REGISTRY, runtime="megatron")
    assert tied_stages(run) == ((0, 1), 256000 * 3584 // 2)
    assert tied_stages(prepare("gemma-2-9b", _layout(), registry=REGISTRY, runtime="megatron"))[1] == 0
    assert tied_stages(prepare("llama3-8b", _layout(pp=2), registry=REGISTRY, runtime="megatron"))[1] == 0
    # DualPipe's two model copies put the embedding and the head on every stage: one tensor each, nothing exchanged.
    dual = prepare("gemma-2-9b", _layout(pp=2, schedule="dualpipe", global_batch_size=16), registry=REGISTRY,
                   runtime="megatron")
    assert tied_stages(dual)[1] == 0


def test_both_stages_pay_one_all_reduce_of_the_shard_at_the_main_gradient_s_width():
    layout = _layout(pp=2)
    step = step_time("gemma-2-9b", layout, registry=REGISTRY, runtime="megatron", hardware="h100-sxm")
    rates = _rates(layout, H100, MEGATRON.timing, MEGATRON.precision, "flash")
    expected = rates.links.subgroup_seconds("pp", "all_reduce", 2, 256000 * 3584 // 2 * MEGATRON.precision.grad_bytes)
    expected *= rates.slowdown
    for stage in step.stages:
        found = dict((g, (t, e)) for g, t, e in stage.communication_by_group)
        assert found["embedding"] == pytest.approx((expected, expected), rel=1e-12)
    # Without the sync (the function bypassed): every stage's data-parallel time less exactly that.
    import hp_core.engine.timing.step as step_module

    original = step_module.with_tied_sync
    step_module.with_tied_sync = lambda stages, *args: stages
    try:
        bare = step_time("gemma-2-9b", layout, registry=REGISTRY, runtime="megatron", hardware="h100-sxm")
    finally:
        step_module.with_tied_sync = original
    assert [s.data_parallel_seconds + expected for s in bare.stages] == pytest.approx([s.data_parallel_seconds for s in step.stages])
    flat = step_time("gemma-2-9b", _layout(), registry=REGISTRY, runtime="megatron", hardware="h100-sxm")
    assert all(g != "embedding" for s in flat.stages for g, _, _ in s.communication_by_group)
