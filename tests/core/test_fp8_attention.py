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


def _attention_times(registry, recipe: str, hardware: str, layout: ParallelSpec, wide: bool = False, window=None,
                     quantized: bool = True):
    """One attention call's forward and backward seconds on *hardware* under *recipe*, as the layer pricer sees it."""
    from hp_core.costs import Flops, LayerCost, LayerWork
    from hp_core.engine.timing.layer import _layer_time
    from hp_core.engine.timing.rates import _rates

    runtime = registry.runtime("megatron")
    spec = registry.hardware_preset(hardware).spec
    rates = _rates(layout, spec, runtime.timing, attrs.evolve(runtime.precision, recipe=recipe), "flash",
                   recipe=registry.precision_recipe(recipe))
    rates = attrs.evolve(rates, host=None, slowdown=1.0)
    cost = LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0, forward=Flops(attention_flops=1e12))
    work = LayerWork(attention_calls=1, wide_qk_attention=wide, local_mask=window, quantized=quantized)
    t = _layer_time(cost, work, False, frozenset(), rates)
    return t.forward_seconds, t.backward_seconds


def test_the_core_runs_at_cudnns_measured_fp8_speedup(registry):
    # cuDNN's causal attention (cudnn-frontend@3929da2 results), bf16 time over FP8 time at the call's sequence
    # length: H200 at 4,096 tokens at Llama 3.1's shape, forward 1.4441, backward 0.9938 (e4m3).
    plain = _attention_times(registry, "fp8-current", "h100-sxm", LAYOUT)
    fp8 = _attention_times(registry, "fp8-current-fp8-attention", "h100-sxm", LAYOUT)
    assert fp8[0] == pytest.approx(plain[0] / 1.4441) and fp8[1] == pytest.approx(plain[1] / 0.9938)
    # GB200 under MXFP8 at 8,192 tokens: 1.397 / 1.156 ms forward, 4.127 / 4.272 ms backward (slower than bf16).
    long = ParallelSpec(dp=4, seq_len=8192)
    plain = _attention_times(registry, "mxfp8", "gb200", long)
    mx = _attention_times(registry, "mxfp8-fp8-attention", "gb200", long)
    assert mx[0] == pytest.approx(plain[0] / round(1.397 / 1.156, 4)) and mx[1] == pytest.approx(plain[1] / round(4.127 / 4.272, 4))
    # GB300 (Blackwell Ultra's band) takes its own figures: 1.185 / 0.856 ms forward at 8,192.
    ultra = _attention_times(registry, "mxfp8-fp8-attention", "gb300", long)
    base = _attention_times(registry, "mxfp8", "gb300", long)
    assert ultra[0] == pytest.approx(base[0] / round(1.185 / 0.856, 4)) and ultra[1] == pytest.approx(base[1] / round(3.832 / 3.917, 4))
    # MLA (q/k head dim 192, v 128) takes DeepSeek-V3's shape; ring CP 2 makes each call 4,096 tokens.
    ring = ParallelSpec(dp=2, cp=2, seq_len=8192)
    mla = _attention_times(registry, "mxfp8-fp8-attention", "gb200", ring, wide=True)
    mla_base = _attention_times(registry, "mxfp8", "gb200", ring, wide=True)
    # DeepSeek-V3's shape on GB200 at 4,096 tokens: bf16 0.977 / MXFP8 0.714 ms forward, 3.383 / 2.620 ms backward.
    assert mla[0] == pytest.approx(mla_base[0] / round(0.977 / 0.714, 4)) and mla[1] == pytest.approx(mla_base[1] / round(3.383 / 2.620, 4))
    # A layer kept in the compute dtype (high_precision_layers_*) runs its attention in bf16 too.
    assert (_attention_times(registry, "mxfp8-fp8-attention", "gb200", long, quantized=False)
            == _attention_times(registry, "mxfp8", "gb200", long, quantized=False))
    # A windowed core: no FP8 figure measured, the bf16 rates.
    from hp_core.score_masks import LocalMask
    window = LocalMask(seq_len=8192, window=128)
    assert (_attention_times(registry, "mxfp8-fp8-attention", "gb200", long, window=window)
            == _attention_times(registry, "mxfp8", "gb200", long, window=window))


def test_the_nearest_measured_length_by_ratio_and_the_band():
    from hp_core.specs.attention_speedups import AttentionSpeedup, pick_attention_speedup

    def entry(seq, band=None):
        return AttentionSpeedup(format="e4m3", kind="full", seq_len=seq, forward=1.0 + seq / 1e5, backward=1.0,
                                peak_ratio=band, source="toy")
    entries = (entry(2048), entry(8192), entry(4096, (4.0, 4.0)))
    # 5,000 tokens: 4,096 is nearer by ratio than 8,192, but only in its band.
    assert pick_attention_speedup(entries, "e4m3", "full", 5000, 4.0).seq_len == 4096
    assert pick_attention_speedup(entries, "e4m3", "full", 5000, 6.0).seq_len == 8192
    assert pick_attention_speedup(entries, "e4m3", "full", 5000, None).seq_len == 8192
    # A tie by ratio (2,048 and 8,192 around 4,096 outside the band) takes the longer.
    assert pick_attention_speedup(entries, "e4m3", "full", 4096, 6.0).seq_len == 8192
    assert pick_attention_speedup(entries, "mxfp8", "full", 4096, 4.0) is None
    with pytest.raises(Exception, match="peak_ratio"):
        entry(1024, (6.0, 4.0))


def test_the_step_says_which_attention_figures_it_took(registry):
    from hp_core.io.report import time_summary

    model = model_from_preset("llama3-8b", registry)
    hardware = registry.hardware_preset("h100-sxm").spec
    base = registry.runtime("megatron").precision
    steps = {r: step_time(model, LAYOUT, registry=registry, runtime="megatron", hardware=hardware,
                          precision=attrs.evolve(base, recipe=r)) for r in ("fp8-current", "fp8-current-fp8-attention")}
    assert steps["fp8-current"].provenance["attention_format"] == "bf16"
    assert steps["fp8-current-fp8-attention"].provenance["attention_format"] == "e4m3"
    # Only the kinds the model runs are named (Llama has no MLA layer).
    note = "e4m3 attention 1.44x forward, 0.99x backward of bf16; fp8 GEMMs"  # no windowed layer: no windowed note
    summary = time_summary(steps["fp8-current-fp8-attention"])
    assert note in summary and "MLA" not in summary and "attention 1.44x" not in time_summary(steps["fp8-current"])
    assert summary.splitlines()[1].startswith("  seconds: compute")  # the parts line: the step's seconds
    assert "mla_attention_speedup" not in steps["fp8-current-fp8-attention"].provenance
    # The whole step: faster forward, a backward about as fast (0.99), so faster overall than without FP8 attention.
    assert steps["fp8-current-fp8-attention"].step_seconds < steps["fp8-current"].step_seconds


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


def test_only_cudnns_attention_takes_the_fp8_speedup_under_fsdp2(registry):
    # fsdp2's default SDPA (FlashAttention-2), FlexAttention and Triton run no FP8 attention; cudnn does.
    from hp_core.runtime_options import apply_options

    model = model_from_preset("llama3-8b", registry)
    hardware = registry.hardware_preset("h100-sxm").spec
    layout = ParallelSpec(dp=8, seq_len=4096)
    for kernel, speedup in (("sdpa", (1.0, 1.0)), ("cudnn", (1.4441, 0.9938))):
        runtime = apply_options(registry.runtime("fsdp2"), {"attention_kernel": kernel})
        step = step_time(model, layout, registry=registry, runtime=runtime, hardware=hardware,
                         precision=attrs.evolve(runtime.precision, recipe="fp8-current-fp8-attention"))
        assert step.provenance["attention_speedup"] == pytest.approx(speedup), kernel
    assert all(not d.attention_speedups for d in registry.runtime("fsdp2").timing.devices)
