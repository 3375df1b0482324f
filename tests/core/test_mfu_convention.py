"""MFU's model FLOPs count every matmul and the attention core three times their forward (Narayanan et al. 2021,
Section 5.1; Megatron-LM ``num_floating_point_operations``; docs/time.md); a fused core's backward re-runs the scores
(FlashAttention-2: 2.5 forwards where the convention counts 2), which HFU counts and MFU does not."""

from __future__ import annotations

import pytest

from hp_core.api import build_registry, step_time
from hp_core.specs import ParallelSpec

REGISTRY = build_registry(use_env=False)
# Llama-3-8B, 8 sequences of 8,192 a step: per layer and sequence the attention core's forward over the whole score
# square, 2 x 32 heads x 8,192^2 x (128 + 128) FLOPs (q k^T and p v), 32 layers.
ATTENTION_FORWARD = 8 * 32 * 2 * 32 * 8192 * 8192 * 256


@pytest.mark.parametrize("attention", ["flash", "eager"])
def test_the_attention_core_counts_three_times_in_mfu_and_flashs_rerun_in_hfu(attention):
    parallel = ParallelSpec(dp=8, seq_len=8192, micro_batch_size=1, global_batch_size=8)
    t = step_time("llama3-8b", parallel, registry=REGISTRY, hardware="h100-sxm", runtime="generic", attention=attention)
    matmul = t.model_flops - 3 * ATTENTION_FORWARD
    # The matmuls three times their forward: 2 x 8 x 8,192 tokens x the matmul parameters (Llama-3-8B's 6.98e9 in the
    # 32 layers and the 525M head; the embedding is a lookup).
    assert matmul == pytest.approx(3 * 2 * 8 * 8192 * (32 * 218_103_808 + 4096 * 128_256), rel=1e-12)
    extra = t.model_flops * (t.hfu / t.mfu - 1)
    assert extra == pytest.approx(0.5 * ATTENTION_FORWARD if attention == "flash" else 0.0, rel=1e-9, abs=1.0)
