"""FP8 attention (docs/precision.md 'FP8 attention'): the three ``*-fp8-attention`` recipes, what they keep, what they refuse.

Llama-3 8B's dense layer under TP 2 with SP, sequence 4096, micro-batch 1 (h 4096, 32 query heads, 8 key/value
heads, head dim 128): T = 4096 tokens, so in bf16 q_k keeps 4096 * (32 + 8) * 128 * 2 / 2 = 20,971,520 bytes, v
4096 * 8 * 128 * 2 / 2 = 4,194,304 and the attention output 4096 * 32 * 128 * 2 / 2 = 16,777,216 (8,388,608
elements). Each expected number below is worked out from those.
"""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import build_registry, estimate, model_from_preset, step_time
from hp_core.engine.precision import scaling_state_bytes
from hp_core.engine.prepare import prepare
from hp_core.errors import ConfigError
from hp_core.precision_recipes import GemmOperand, PrecisionRecipe
from hp_core.specs import ParallelSpec
from hp_plugins.kinds.dense import DenseConfig

LAYOUT = ParallelSpec(tp=2, sp=True, dp=4, seq_len=4096)
Q_K, V, OUT = 20_971_520, 4_194_304, 16_777_216


@pytest.fixture(scope="module")
def registry():
    return build_registry()


def _dense_terms(registry, recipe: str) -> dict[str, int]:
    model = model_from_preset("llama3-8b", registry)
    precision = attrs.evolve(registry.runtime("megatron").precision, recipe=recipe)
    run = prepare(model, LAYOUT, registry=registry, runtime="megatron", precision=precision)
    dense = next(i for i, group in enumerate(model.layers) if isinstance(group.config, DenseConfig))
    return {t.op: t.bytes for t in run.costs[dense].activations}


def test_the_records():
    recipes = {r.name: r for r in build_registry().precision_recipes}
    assert recipes["fp8-delayed-fp8-attention"].attention_format == "e4m3"
    assert recipes["fp8-current-fp8-attention"].attention_format == "e4m3"
    assert recipes["mxfp8-fp8-attention"].attention_format == "mxfp8"
    # Per-tensor: q, k, v row-wise only, 1 byte; MXFP8: two copies of (1 + 1/32) bytes; bf16: the compute dtype.
    assert recipes["fp8-current-fp8-attention"].attention_qkv_bytes_per_element(2) == 1.0
    assert recipes["mxfp8-fp8-attention"].attention_qkv_bytes_per_element(2) == 2.0625
    assert recipes["fp8-current"].attention_qkv_bytes_per_element(2) == 2.0
    # Only delayed scaling keeps the kernel's output in FP8.
    assert [recipes[n].attention_out_fp8 for n in ("fp8-delayed-fp8-attention", "fp8-current-fp8-attention",
                                                    "mxfp8-fp8-attention", "fp8-delayed")] == [True, False, False, False]
    # Megatron-LM has no command-line flag for FP8 attention: the variants state none, so no import picks them.
    assert all(recipes[n].flags == {} for n in recipes if n.endswith("-fp8-attention"))


@pytest.mark.parametrize("activations, attention", [
    (GemmOperand("mxfp8", "mx_32"), "e4m3"),  # MXFP8 activations run MXFP8 attention
    (GemmOperand("e4m3", "tensor_current"), "mxfp8"),
    (GemmOperand("e4m3", "block_1x128"), "e4m3"),  # no blockwise FP8 attention stated
    (GemmOperand("e4m3", "tensor_current"), "nvfp4"),
    (GemmOperand("bf16"), "e4m3"),
])
def test_attention_formats_the_recipe_does_not_run_are_refused(activations, attention):
    with pytest.raises(ValueError, match="attention_format"):
        PrecisionRecipe(name="x", description="x", source="x", activations=activations, attention_format=attention)


@pytest.mark.parametrize("recipe, base, q_k, v, out", [
    # 1 byte an element of q, k and v; the output in bf16 (current scaling) plus the projection's FP8 input.
    ("fp8-current-fp8-attention", "fp8-current", Q_K // 2, V // 2, OUT + OUT // 2),
    # The output in FP8 (8,388,608 bytes) plus the projection's FP8 input (8,388,608).
    ("fp8-delayed-fp8-attention", "fp8-delayed", Q_K // 2, V // 2, 16_777_216),
    # MXFP8: 10,485,760 q/k elements * 2.0625 = 21,626,880; 2,097,152 v elements * 2.0625 = 4,325,376; the output
    # in bf16 plus the projection's MXFP8 input, 8,388,608 * 1.03125 = 8,650,752.
    ("mxfp8-fp8-attention", "mxfp8", 21_626_880, 4_325_376, OUT + 8_650_752),
])
def test_the_kernels_kept_tensors_by_hand(registry, recipe, base, q_k, v, out):
    bf16, fp8, fp8_attention = (_dense_terms(registry, r) for r in ("bf16", base, recipe))
    assert (bf16["q_k"], bf16["v"], bf16["attn_out"]) == (Q_K, V, OUT)
    assert (fp8_attention["q_k"], fp8_attention["v"], fp8_attention["attn_out"]) == (q_k, v, out)
    # Every other term as the recipe without FP8 attention keeps it.
    others = set(fp8) - {"q_k", "v", "attn_out"}
    assert {op: fp8_attention[op] for op in others} == {op: fp8[op] for op in others}
    assert set(fp8_attention) == set(fp8)


def test_delayed_scaling_adds_the_attention_modules_state(registry):
    model = model_from_preset("llama3-8b", registry)
    run = prepare(model, LAYOUT, registry=registry, runtime="megatron")
    dense = next(i for i, group in enumerate(model.layers) if isinstance(group.config, DenseConfig))
    costs = [(run.costs[dense], 32)]
    with_attention = scaling_state_bytes(costs, registry.precision_recipe("fp8-delayed-fp8-attention"))
    without = scaling_state_bytes(costs, registry.precision_recipe("fp8-delayed"))
    # 32 layers * 3 GEMMs * 5 quantizers * (1024 + 1) fp32 values * 4 bytes = 1,968,000.
    assert with_attention - without == 1_968_000
    # Current scaling keeps no amax history, with or without FP8 attention.
    assert scaling_state_bytes(costs, registry.precision_recipe("fp8-current-fp8-attention")) == 0


def test_step_time_prices_the_core_at_the_bf16_rate(registry):
    # The stated assumption: the attention core at the device's bf16 rates and its quantization unpriced, so the
    # step time equals the recipe's without FP8 attention to the last bit (memory aside).
    model = model_from_preset("llama3-8b", registry)
    hardware = registry.hardware_preset("h100-sxm").spec
    base = registry.runtime("megatron").precision
    times = [step_time(model, LAYOUT, registry=registry, runtime="megatron", hardware=hardware,
                       precision=attrs.evolve(base, recipe=r)).step_seconds
             for r in ("fp8-current", "fp8-current-fp8-attention")]
    assert times[0] == times[1] > 0


def test_the_step_says_its_attention_rate_is_a_stated_default(registry):
    from hp_core.io.report import time_summary

    model = model_from_preset("llama3-8b", registry)
    hardware = registry.hardware_preset("h100-sxm").spec
    base = registry.runtime("megatron").precision
    steps = {r: step_time(model, LAYOUT, registry=registry, runtime="megatron", hardware=hardware,
                          precision=attrs.evolve(base, recipe=r)) for r in ("fp8-current", "fp8-current-fp8-attention")}
    assert steps["fp8-current"].provenance["attention_format"] == "bf16"
    assert steps["fp8-current-fp8-attention"].provenance["attention_format"] == "e4m3"
    note = "e4m3 attention priced at the bf16 attention rates (no sourced FP8 attention figure)"
    assert note in time_summary(steps["fp8-current-fp8-attention"]) and note not in time_summary(steps["fp8-current"])


def test_layers_that_mark_no_kernel_tensors_are_refused(registry):
    base = registry.runtime("megatron").precision
    precision = attrs.evolve(base, recipe="fp8-current-fp8-attention")
    words = r"^\$\.precision\.recipe: precision recipe fp8-current-fp8-attention runs attention in e4m3: needs the fused"
    with pytest.raises(ConfigError, match=words):  # eager attention keeps no fused kernel's tensors
        estimate(model_from_preset("llama3-8b", registry), LAYOUT, registry=registry, runtime="megatron",
                 precision=precision, attention="eager")
    with pytest.raises(ConfigError, match=words):  # MLA's kit does not mark them
        estimate(model_from_preset("deepseek-v2", registry), ParallelSpec(dp=8, seq_len=4096), registry=registry,
                 runtime="megatron", precision=precision)
