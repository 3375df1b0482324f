"""The compiled loss (the fsdp2 option ``loss_implementation: compiled``; docs/kinds.md, ``output``).

What torch.compile's ``logits.float()`` then ``cross_entropy`` saves and allocates is measured by
benchmarks/count_compiled_loss.py (run here where torch is installed); the layer's bytes are derived by hand from it."""

from __future__ import annotations

import pytest

from hp_core.runtime_options import apply_options
from loss_cases import loss_cost as _cost
from repo_script import load_script


def test_option_sets_its_trait_alone(registry):
    runtime = registry.runtime("fsdp2")
    compiled = apply_options(runtime, {"loss_implementation": "compiled"})
    assert compiled.traits == runtime.traits - {"upcast_cross_entropy"} | {"compiled_cross_entropy"}


def test_compiled_keeps_the_bf16_logits_and_their_row_statistics(registry):
    # 2 sequences x 40 tokens (T 80), h 64, V 1000, bf16 activations.
    compiled, upcast = _cost(registry, "compiled"), _cost(registry, "upcast")
    kept = {t.op: t.bytes for t in compiled.activations}
    assert kept == {"final_norm_in": 80 * 64 * 2, "final_norm_out": 80 * 64 * 2, "loss_logits": 80 * 1000 * 2,
                    "loss_row_stats": 80 * 8, "loss_targets": 80 * 8}
    assert compiled.forward_working_bytes == 0  # Inductor allocates only the per-row statistics it keeps
    assert compiled.working_bytes == 80 * 1000 * 2 + 80 * 64 * 2 == 170_240  # the logits' bf16 gradient, the input's
    # Against the eager upcast: 160,000 kept instead of 320,000 fp32, no 480,000-byte forward, 170,240 not 640,000.
    assert {t.op: t.bytes for t in upcast.activations}["loss_softmax"] == 80 * 1000 * 4
    assert (upcast.forward_working_bytes, upcast.working_bytes) == (480_000, 640_000)
    # Time and FLOPs as the upcast loss: the same GEMM and the same operations.
    assert compiled.forward == upcast.forward and compiled.work.gemms == upcast.work.gemms


def test_the_measurement_behind_it():
    pytest.importorskip("torch")
    script = load_script("benchmarks/count_compiled_loss.py")
    import torch

    saved, grad = script.saved_tensors(compiled=True, batch=2, seq=64, vocab=1000)
    assert grad == torch.bfloat16
    # The logits themselves (bf16, their own storage), the int64 targets, two fp32 per-row statistics and a scalar.
    assert sorted(saved, key=str) == sorted([((2, 64, 1000), torch.bfloat16, True), ((2, 64), torch.int64, False),
                                             ((128, 1), torch.float32, False), ((128, 1), torch.float32, False),
                                             ((), torch.float32, False)], key=str)
    eager, _ = script.saved_tensors(compiled=False, batch=2, seq=64, vocab=1000)
    assert sum(1 for shape, dtype, _ in eager if shape == (128, 1000) and dtype == torch.float32) == 2
