"""The routed experts' FC2 bias as Megatron-Core adds it, by hand (trait ``moe_eager_expert_bias``).

``TEGroupedMLP._apply_bias`` (megatron/core/transformer/moe/experts.py at the Megatron-LM commits
Megatron-Bridge v0.3.0 to v0.4.2 pin) splits FC2's output by tokens per expert, adds each expert's bias
weighted by the tokens' routing probabilities (``t + b * p``) and concatenates the slices: 6 accesses per
element of the experts' output forward (b * p writes 1; the add reads 2, writes 1; the cat reads 1,
writes 1) and 8 backward (the split's gradient concatenated: 2; b's gradient, grad * p summed: 3; p's: 3).
"""

from __future__ import annotations

import sys
from pathlib import Path

import attrs

from hp_core.api import build_registry, layer_context, step_time
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.kinds.moe import MoEConfig, evaluate_moe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_cases import MBRIDGE_ROWS, hardware, layout, model, recompute, runtime  # noqa: E402

TRAIT = frozenset({"moe_eager_expert_bias"})
# h = 1,024, 8 experts of width 2,048, top-2, biased experts; 512 tokens a micro-batch, 2-byte activations.
BIASED = MoEConfig(hidden_size=1024, num_attention_heads=8, num_key_value_heads=8, num_experts=8,
                   num_experts_per_tok=2, moe_intermediate_size=2048, expert_bias=True)


def _work(config, traits=TRAIT):
    context = layer_context(ParallelSpec(ep=4, dp=4, seq_len=512), PrecisionSpec(), "flash", traits=traits)
    return evaluate_moe(config, context).work


def test_the_bias_passes_move_6_and_8_accesses_per_element_of_the_experts_output():
    work = _work(BIASED)
    # 512 tokens x top-2 = 1,024 rows on a rank (balanced), 1,024 wide: 1,048,576 elements of 2 bytes.
    elements = 512 * 2 * 1024
    assert elements == 1_048_576
    assert work.copy_bytes == 6 * 2 * elements == 12_582_912
    assert work.backward_copy_bytes == 8 * 2 * elements == 16_777_216


def test_no_bias_pass_without_the_trait_or_without_biases():
    for work in (_work(BIASED, traits=frozenset()), _work(attrs.evolve(BIASED, expert_bias=False))):
        assert work.copy_bytes == 0.0
        assert work.backward_copy_bytes is None


def test_gpt_oss_h100_row_pays_the_bias_passes_on_each_layer_of_its_slowest_stage():
    registry = build_registry(use_env=False)
    row = next(r for r in MBRIDGE_ROWS if r["id"] == "mb26.04-h100-gpt-oss-120b")
    floored = runtime(row, registry)
    # The kernels' time: the runtime's host floor (docs/time.md, "Overlap and host time") holds this row's forward
    # up, and the bias passes' forward bytes partly fill time the GPU spent waiting on the host (checked below).
    with_trait = attrs.evolve(floored, timing=attrs.evolve(floored.timing, host=None))
    without = attrs.evolve(with_trait, traits=with_trait.traits - TRAIT)
    args = dict(registry=registry, hardware=hardware(row, registry), recompute=recompute(row, registry))
    on = step_time(model(row, registry), layout(row), runtime=with_trait, **args)
    off = step_time(model(row, registry), layout(row), runtime=without, **args)
    # 4,096 tokens x top-4 = 16,384 rows a rank (EP 8 of 128 experts, balanced) x 2,880 wide: 47,185,920
    # elements; forward 6 x 2 bytes = 566,231,040 B, backward 8 x 2 = 754,974,720 B, at H100's 3.35 TB/s x 0.85
    # (SimuMax's bandwidth efficiency): 0.198852 + 0.265136 ms a layer and micro-batch; the last stage's
    # 9 layers over 80 micro-batches: 0.334071 s more compute.
    elements = 4096 * 4 * 2880
    assert elements == 47_185_920
    per_layer = (6 + 8) * 2 * elements / (3.35e12 * 0.85)
    assert abs(per_layer - 0.463988e-3) < 1e-9
    assert abs((on.compute_seconds - off.compute_seconds) - 9 * 80 * per_layer) < 1e-6
    # Under the floor the passes still cost time, at most what they cost the kernels alone.
    floored_on = step_time(model(row, registry), layout(row), runtime=floored, **args)
    floored_off = step_time(model(row, registry), layout(row), runtime=attrs.evolve(floored, traits=floored.traits - TRAIT), **args)
    assert 0 < floored_on.compute_seconds - floored_off.compute_seconds <= on.compute_seconds - off.compute_seconds + 1e-9
