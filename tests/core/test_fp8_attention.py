"""FP8 attention (docs/precision.md 'FP8 attention'): the ``*-fp8-attention`` recipes, what they keep, what they refuse.

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
    # Beside NVFP4 linears: e4m3 attention at the scaling NVTE_DPA_FP8_RECIPE=Float8CurrentScaling states (Transformer
    # Engine release_v2.8 dot_product_attention.py), so q, k, v 1 byte an element and the output in bf16
    # (NVTE_DPA_FP8CS_O_in_F16 defaults to 1); the linears as nvfp4's.
    nv = recipes["nvfp4-fp8-attention"]
    assert (nv.attention_format, nv.attention_scaling, nv.attention_scaling_used) == ("e4m3", "tensor_current", "tensor_current")
    assert nv.attention_qkv_bytes_per_element(2) == 1.0 and nv.attention_out_fp8 is False
    assert attrs.evolve(nv, attention_scaling="tensor_delayed").attention_out_fp8 is True
    plain = recipes["nvfp4"]
    assert nv.bf16_attention_recipe == "nvfp4" and plain.attention_scaling is None
    assert attrs.evolve(nv, name="nvfp4", description=plain.description, source=plain.source, attention_format="bf16",
                        attention_scaling=None, bf16_attention_recipe=None, flags=plain.flags) == plain
    # FP8 parameters with FP8 attention: fp8-megatron-param-gather with e4m3 attention in its own current scaling.
    both = recipes["fp8-megatron-param-gather-fp8-attention"]
    assert (both.attention_format, both.attention_scaling_used, both.param_gather) == ("e4m3", "tensor_current", "stored")
    assert both.attention_out_fp8 is False and both.bf16_attention_recipe == "fp8-megatron-param-gather"


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


NVFP4 = GemmOperand("nvfp4", "nvfp4_16")


@pytest.mark.parametrize("activations, attention, scaling, match", [
    (NVFP4, "e4m3", None, "attention_format"),  # NVFP4 activations run no FP8 attention of their own
    (NVFP4, "mxfp8", "tensor_current", "attention_format"),  # the stated per-tensor scaling runs e4m3, not mxfp8
    (NVFP4, "bf16", "tensor_current", "attention_scaling"),  # no FP8 attention, nothing to scale
    (GemmOperand("e4m3", "tensor_delayed"), "e4m3", "tensor_current", "attention_scaling"),  # follows its own recipe
    (NVFP4, "e4m3", "mx_32", "attention_scaling"),  # only a per-tensor scaling
    (NVFP4, "mxfp8", "mx_32", "attention_scaling"),  # TE's NVTE_DPA_FP8_RECIPE beside NVFP4 is DS or CS, not MXFP8
])
def test_an_attention_scaling_only_beside_nvfp4_linears(activations, attention, scaling, match):
    with pytest.raises(ValueError, match=match):
        PrecisionRecipe(name="x", description="x", source="x", weights=activations, activations=activations,
                        gradients=activations, attention_format=attention, attention_scaling=scaling)


@pytest.mark.parametrize("recipe, base, q_k, v, out", [
    # 1 byte an element of q, k and v; the output in bf16 (current scaling), which Megatron-Core's output projection
    # keeps as its own input (set_save_original_input): no FP8 copy.
    ("fp8-current-fp8-attention", "fp8-current", Q_K // 2, V // 2, OUT),
    # The output in FP8 (8,388,608 bytes) plus the projection's FP8 input (8,388,608): delayed scaling, no original input.
    ("fp8-delayed-fp8-attention", "fp8-delayed", Q_K // 2, V // 2, 16_777_216),
    # MXFP8: 10,485,760 q/k elements * 2.0625 = 21,626,880; 2,097,152 v elements * 2.0625 = 4,325,376; the output
    # in bf16, the projection's input itself.
    ("mxfp8-fp8-attention", "mxfp8", 21_626_880, 4_325_376, OUT),
    # NVFP4 linears with current-scaling FP8 attention: q, k, v 1 byte an element, the output in bf16.
    ("nvfp4-fp8-attention", "nvfp4", Q_K // 2, V // 2, OUT),
    # FP8 parameters beside it change no activation: as fp8-current-fp8-attention.
    ("fp8-megatron-param-gather-fp8-attention", "fp8-megatron-param-gather", Q_K // 2, V // 2, OUT),
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
                     quantized: bool = True, flops: float = 1e12):
    """One attention call's forward and backward seconds on *hardware* under *recipe*, as the layer pricer sees it."""
    from hp_core.costs import Flops, LayerCost, LayerWork
    from hp_core.engine.timing.layer import _layer_time
    from hp_core.engine.timing.rates import _rates

    runtime = registry.runtime("megatron")
    spec = registry.hardware_preset(hardware).spec
    rates = _rates(layout, spec, runtime.timing, attrs.evolve(runtime.precision, recipe=recipe), "flash",
                   recipe=registry.precision_recipe(recipe))
    rates = attrs.evolve(rates, host=None, slowdown=1.0)
    cost = LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0, forward=Flops(attention_flops=flops))
    work = LayerWork(attention_calls=1, wide_qk_attention=wide, local_mask=window, quantized=quantized)
    t = _layer_time(cost, work, False, frozenset(), rates)
    return t.forward_seconds, t.backward_seconds


def _attention_rates(registry, recipe: str, hardware: str, layout: ParallelSpec):
    from hp_core.engine.timing.rates import _rates

    runtime = registry.runtime("megatron")
    return _rates(layout, registry.hardware_preset(hardware).spec, runtime.timing,
                  attrs.evolve(runtime.precision, recipe=recipe), "flash", recipe=registry.precision_recipe(recipe))


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
    # NVFP4 linears with e4m3 attention take the per-tensor FP8 ('fp8') figures at 8,192 tokens: GB200's on a B200
    # (FP4:BF16 peak 4.0), 1.397 / 1.074 ms forward, 4.127 / 3.781 backward; GB300's on a B300 (5.6-6.22), 1.185 / 0.759
    # and 3.832 / 3.087: Blackwell Ultra's doubled exponential rate gains more.
    for hardware, fwd, bwd in (("b200", (1.397, 1.074), (4.127, 3.781)), ("b300", (1.185, 0.759), (3.832, 3.087))):
        nv = _attention_times(registry, "nvfp4-fp8-attention", hardware, long)
        nv_base = _attention_times(registry, "nvfp4", hardware, long)
        assert nv[0] == pytest.approx(nv_base[0] / round(fwd[0] / fwd[1], 4)), hardware
        assert nv[1] == pytest.approx(nv_base[1] / round(bwd[0] / bwd[1], 4)), hardware
    # MLA (q/k head dim 192, v 128) takes DeepSeek-V3's shape; ring CP 2 makes each call 4,096 tokens.
    ring = ParallelSpec(dp=2, cp=2, seq_len=8192)
    mla = _attention_times(registry, "mxfp8-fp8-attention", "gb200", ring, wide=True)
    mla_base = _attention_times(registry, "mxfp8", "gb200", ring, wide=True)
    # DeepSeek-V3's shape on GB200 at 4,096 tokens: bf16 0.977 / MXFP8 0.714 ms forward, 3.383 / 2.620 ms backward.
    assert mla[0] == pytest.approx(mla_base[0] / round(0.977 / 0.714, 4)) and mla[1] == pytest.approx(mla_base[1] / round(3.383 / 2.620, 4))
    # A layer kept in the compute dtype (high_precision_layers_*) runs its attention in bf16 too.
    assert (_attention_times(registry, "mxfp8-fp8-attention", "gb200", long, quantized=False)
            == _attention_times(registry, "mxfp8", "gb200", long, quantized=False))
    # A windowed core on Blackwell: the forward at the bf16 rates over the window's pairs (no FP8 figure measured for it);
    # the backward over the whole causal triangle at the full-width FP8 backward rate (cuDNN's MXFP8 backward with a
    # 128-token window measured quadratic in the length: 2.080, 7.427, 27.940 ms at 4,096, 8,192, 16,384 tokens on
    # GB200, cudnn-frontend@3929da2 results/gpt_oss). The window's share of the 8,192 x 8,193 / 2 causal pairs:
    # (128 x 129 / 2 + 8,064 x 128) / 33,558,528 = 1,040,448 / 33,558,528; a layer states its square times that share.
    from hp_core.score_masks import LocalMask
    window = LocalMask(seq_len=8192, window=128)
    share = 1_040_448 / 33_558_528
    windowed = _attention_times(registry, "mxfp8-fp8-attention", "gb200", long, window=window, flops=1e12 * share)
    assert windowed[0] == pytest.approx(_attention_times(registry, "mxfp8", "gb200", long, window=window,
                                                         flops=1e12 * share)[0])
    assert windowed[1] == pytest.approx(mx[1])  # the full causal core's FP8 backward, 1e12 FLOPs over the square
    assert windowed[1] > 10 * _attention_times(registry, "mxfp8", "gb200", long, window=window, flops=1e12 * share)[1]
    # Hopper: no FP8 windowed figure measured (every FP8 row of the H200 GPT-OSS run failed at head dim 64): bf16 rates.
    assert (_attention_times(registry, "fp8-current-fp8-attention", "h100-sxm", long, window=window)
            == _attention_times(registry, "fp8-current", "h100-sxm", long, window=window))
    # A windowed layer kept in the compute dtype runs its attention in bf16, its backward over the window too.
    assert (_attention_times(registry, "mxfp8-fp8-attention", "gb200", long, window=window, quantized=False)
            == _attention_times(registry, "mxfp8", "gb200", long, window=window, quantized=False))
    # A chunked core (Llama 4's): Megatron-Bridge folds the chunks into the batch, each a causal sequence of its own
    # (llama4_utils.py chunkify at v0.4.0), the kernel the figures time: its chunks' FLOPs at the full core's FP8
    # speedups both ways, on Blackwell and Hopper alike; no whole-sequence backward. 16,384 tokens in chunks of 8,192:
    # the chunks keep 2 x 8,192 x 8,193 / 2 of the 16,384 x 16,385 / 2 causal pairs.
    chunked, wide_seq = LocalMask(seq_len=16384, chunk=8192), ParallelSpec(dp=4, seq_len=16384)
    chunk_flops = 1e12 * (8192 * 8193) / (16384 * 16385 / 2) / 2
    for recipe, plain_recipe, hardware in (("mxfp8-fp8-attention", "mxfp8", "gb200"),
                                           ("fp8-current-fp8-attention", "fp8-current", "h100-sxm")):
        fp8_chunks = _attention_times(registry, recipe, hardware, wide_seq, window=chunked, flops=chunk_flops)
        bf16_chunks = _attention_times(registry, plain_recipe, hardware, wide_seq, window=chunked, flops=chunk_flops)
        rates = _attention_rates(registry, recipe, hardware, wide_seq)
        assert fp8_chunks[0] == pytest.approx(bf16_chunks[0] / rates.attn_speedup[0]), recipe
        assert fp8_chunks[1] == pytest.approx(bf16_chunks[1] / rates.attn_speedup[1]), recipe


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


def test_the_step_names_the_windowed_fp8_backward(registry):
    # GPT-OSS 20B (12 of 24 layers with a 128-token window) on GB200 under MXFP8 attention: the windowed cores' backward
    # over the whole causal triangle (docs/precision.md "FP8 attention"), said in the provenance and the summary.
    from hp_core.io.report import time_summary

    model = model_from_preset("gpt-oss-20b", registry)
    hardware = registry.hardware_preset("gb200").spec
    base = registry.runtime("megatron").precision
    layout = ParallelSpec(dp=8, ep=8, seq_len=4096)
    steps = {r: step_time(model, layout, registry=registry, runtime="megatron", hardware=hardware,
                          precision=attrs.evolve(base, recipe=r)) for r in ("mxfp8", "mxfp8-fp8-attention")}
    prov = steps["mxfp8-fp8-attention"].provenance
    assert prov["windowed_fp8_backward_full_causal"] is True and prov["windowed_attention_bf16"] is True
    assert "windowed_fp8_backward_full_causal" not in steps["mxfp8"].provenance
    assert ("windowed mxfp8 attention forward at the bf16 rates, its backward over the whole causal triangle at the "
            "mxfp8 rate") in time_summary(steps["mxfp8-fp8-attention"])


def test_layers_that_mark_no_kernel_tensors_are_refused(registry):
    base = registry.runtime("megatron").precision
    precision = attrs.evolve(base, recipe="fp8-current-fp8-attention")
    words = r"^\$\.precision\.recipe: precision recipe fp8-current-fp8-attention runs attention in e4m3: needs the fused"
    with pytest.raises(ConfigError, match=words):  # eager attention keeps no fused kernel's tensors
        estimate(model_from_preset("llama3-8b", registry), LAYOUT, registry=registry, runtime="megatron",
                 precision=precision, attention="eager")
    with pytest.raises(ConfigError, match=words):  # Mamba-2's SSD core is no fused softmax attention kernel
        estimate(model_from_preset("mamba-codestral-7b", registry), ParallelSpec(dp=8, seq_len=4096), registry=registry,
                 runtime="megatron", precision=precision)


def test_only_cudnns_attention_takes_the_fp8_speedup_under_fsdp2(registry):
    # fsdp2's default SDPA (FlashAttention-2), FlexAttention and Triton run no FP8 attention: refused, naming the
    # option; cudnn runs it at cuDNN's measured speedup (Llama's shape at 4,096 tokens on H100).
    from hp_core.runtime_options import apply_options

    model = model_from_preset("llama3-8b", registry)
    hardware = registry.hardware_preset("h100-sxm").spec
    layout = ParallelSpec(dp=8, seq_len=4096)
    runtime = apply_options(registry.runtime("fsdp2"), {"attention_kernel": "cudnn"})
    step = step_time(model, layout, registry=registry, runtime=runtime, hardware=hardware,
                     precision=attrs.evolve(runtime.precision, recipe="fp8-current-fp8-attention"))
    assert step.provenance["attention_speedup"] == pytest.approx((1.4441, 0.9938))
    assert all(not d.attention_speedups for d in registry.runtime("fsdp2").timing.devices)
    for kernel in ("sdpa", "flex", "triton_flash", None):  # None: the option's default, sdpa
        runtime = registry.runtime("fsdp2") if kernel is None else apply_options(registry.runtime("fsdp2"), {"attention_kernel": kernel})
        precision = attrs.evolve(runtime.precision, recipe="fp8-current-fp8-attention")
        words = (rf"^\$\.runtime\.options\.attention_kernel: precision recipe fp8-current-fp8-attention runs attention in "
                 rf"e4m3, but the fsdp2 runtime's attention_kernel={kernel or 'sdpa'} runs no FP8 attention \(only cudnn, "
                 r"Transformer Engine's cuDNN fused attention, does\); set attention_kernel=cudnn or choose a recipe "
                 r"without FP8 attention$")
        with pytest.raises(ConfigError, match=words):
            estimate(model, layout, registry=registry, runtime=runtime, precision=precision)
        # A recipe without FP8 attention runs under every kernel.
        estimate(model, layout, registry=registry, runtime=runtime, precision=attrs.evolve(precision, recipe="fp8-current"))


def test_megatrons_flash_backend_runs_no_fp8_attention(registry):
    # --attention-backend flash sets NVTE_FUSED_ATTN=0, and Transformer Engine trains FP8 attention on cuDNN's fused
    # attention only: refused, naming the option; auto and fused price it, unfused is refused by the layers (eager).
    from hp_core.runtime_options import apply_options

    model = model_from_preset("llama3-8b", registry)
    for backend, words in (("flash", r"^\$\.runtime\.options\.attention_backend: precision recipe fp8-current-fp8-attention "
                                     r"runs attention in e4m3, but megatron's --attention-backend flash turns Transformer "
                                     r"Engine's fused \(cuDNN\) attention off, the only backend it runs FP8 attention on in "
                                     r"training; set attention_backend=auto or fused$"),
                           ("unfused", r"^\$\.precision\.recipe: .* needs the fused \(flash\) attention kernel")):
        runtime = apply_options(registry.runtime("megatron"), {"attention_backend": backend})
        with pytest.raises(ConfigError, match=words):
            estimate(model, LAYOUT, registry=registry, runtime=runtime,
                     precision=attrs.evolve(runtime.precision, recipe="fp8-current-fp8-attention"))
    kept = {}
    for backend in ("auto", "fused"):
        runtime = apply_options(registry.runtime("megatron"), {"attention_backend": backend})
        kept[backend] = estimate(model, LAYOUT, registry=registry, runtime=runtime,
                                 precision=attrs.evolve(runtime.precision, recipe="fp8-current-fp8-attention")).stages[0].peak_bytes
    assert kept["auto"] == kept["fused"]
    # Back to auto after flash: the refusal goes with the option's value.
    runtime = apply_options(apply_options(registry.runtime("megatron"), {"attention_backend": "flash"}), {"attention_backend": "auto"})
    assert runtime.fp8_attention_refusal is None


def test_the_cli_refuses_fp8_attention_the_runtime_or_device_does_not_run(capsys):
    from hp_core.cli import main

    fsdp2 = ["estimate", "--model", "deepseek-v2", "--devices", "64", "--ep", "8", "--runtime", "fsdp2",
             "--hardware", "gb200", "--precision", "fp8-current-fp8-attention"]
    assert main(fsdp2) == 2  # a user error's exit status
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("hp estimate: error: $.runtime.options.attention_kernel: precision recipe "
                          "fp8-current-fp8-attention runs attention in e4m3, but the fsdp2 runtime's attention_kernel=sdpa")
    assert main(fsdp2 + ["--runtime-option", "attention_kernel=cudnn"]) == 0
    capsys.readouterr()
    hopper = ["estimate", "--model", "deepseek-v3", "--devices", "256", "--ep", "8", "--pp", "16", "--layers-per-stage",
              "4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,1", "--runtime", "megatron", "--hardware", "h100-sxm",
              "--precision", "fp8-current-fp8-attention"]
    assert main(hopper) == 2  # a user error's exit status
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err == ("hp estimate: error: $.precision.recipe: precision recipe fp8-current-fp8-attention runs attention in "
                   "e4m3 on NVIDIA H100 SXM 80GB, but cuDNN runs FP8 attention on Hopper only at q/k and v head dims 128 "
                   "and 128, and a layer's are 192 and 128 (cudnn-frontend's H200 benchmarks: every FP8 row at "
                   "DeepSeek-V3's MLA dims (q/k 192, v 128) and GPT-OSS's head dim 64 failed, cudnnGraphNotSupportedError, "
                   "head dim must be 128; docs/precision.md 'FP8 attention'); choose a recipe without FP8 attention "
                   "(fp8-current) or a Blackwell device")
    assert main(hopper[:-1] + ["fp8-current"]) == 0  # without FP8 attention it prices
    capsys.readouterr()
    # A search refuses them too (no layout runs them), rather than rejecting every layout as not fitting.
    for args, path in ((["--model", "llama3-8b", "--runtime", "fsdp2", "--hardware", "h100-sxm"],
                        "$.runtime.options.attention_kernel"),
                       (["--model", "deepseek-v2", "--runtime", "megatron", "--hardware", "h100-sxm"], "$.precision.recipe")):
        assert main(["search", "--devices", "8", *args, "--precision", "fp8-current-fp8-attention"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith(f"hp search: error: {path}: precision recipe fp8-current-fp8-attention")


# MLA (docs/precision.md 'FP8 attention'): a small layer, hidden 256, 4 heads, q/k head dim 16 + 8 = 24, v 16,
# kv_lora_rank 32, no q compression; one sequence of 128 tokens, flash. Per rank at TP t, in bf16: q and k
# 128 * 4 * 24 * 2 / t = 24,576 / t bytes each, v (its own copy) 128 * 4 * 16 * 2 / t = 16,384 / t, kv_b_proj's output
# (k_nope and v) 128 * 4 * (16 + 16) * 2 / t = 32,768 / t, the attention output 16,384 / t (8,192 / t elements).
_MLA = dict(hidden_size=256, num_attention_heads=4, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
            v_head_dim=16, intermediate_size=128)
_MLA_OPS = ("q_heads", "k_heads", "v_heads", "kv_up_out", "attn_out")


def _mla_cost(tp: int = 1, contiguous: bool = False, attention: str = "flash", cp: int = 1, cp_kind: str = "p2p"):
    from hp_core.engine.prepare import layer_context
    from hp_core.specs import PrecisionSpec
    from hp_plugins.kinds.mla import MLAConfig, evaluate_mla

    traits = frozenset({"mla_contiguous_qkv"}) if contiguous else frozenset()
    layout = ParallelSpec(tp=tp, cp=cp, cp_kind=cp_kind, dp=1, seq_len=128 * cp)
    return evaluate_mla(MLAConfig(**_MLA), layer_context(layout, PrecisionSpec(), attention, traits=traits))


def _mla_terms(registry, recipe: str, **layout) -> dict[str, tuple[int, str | None]]:
    from hp_core.engine.precision import apply_recipe

    cost = apply_recipe(_mla_cost(**layout), registry.precision_recipe(recipe), 2)
    return {t.op: (t.bytes, t.switch) for t in cost.activations if t.op in _MLA_OPS}


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("contiguous", [False, True])
def test_mla_kernel_tensors_by_hand(registry, tp, contiguous):
    from hp_core.engine.precision import apply_recipe

    up = "attUp"
    v_op, v_bf16 = ("v_heads", 16_384 // tp) if contiguous else ("kv_up_out", 32_768 // tp)
    # bf16 and a recipe without FP8 attention: as before the kit marked them (the up-projected heads under attUp).
    assert _mla_terms(registry, "bf16", tp=tp, contiguous=contiguous) == {
        "q_heads": (24_576 // tp, up), "k_heads": (24_576 // tp, up), v_op: (v_bf16, up), "attn_out": (16_384 // tp, None)}
    # fp8-current: the output projection's quantized input (8,192 / t bytes) on top of the kernel's bf16 output.
    assert _mla_terms(registry, "fp8-current", tp=tp, contiguous=contiguous) == {
        "q_heads": (24_576 // tp, up), "k_heads": (24_576 // tp, up), v_op: (v_bf16, up), "attn_out": (24_576 // tp, None)}
    # FP8 attention: q and k 1 byte an element (12,288 / t), under no switch (the kernel's own copies). v: its
    # quantized copy, 8,192 / t, whether it was its own tensor or a view of kv_b_proj's output, which is freed (its
    # k_nope share, 8,192 / t bf16 bytes, kept by nothing).
    fp8 = {"q_heads": (12_288 // tp, None), "k_heads": (12_288 // tp, None), v_op: (8_192 // tp, None)}
    # Current scaling: the kernel keeps its bf16 output, the projection its FP8 input on top (24,576 / t).
    assert _mla_terms(registry, "fp8-current-fp8-attention", tp=tp, contiguous=contiguous) == {
        **fp8, "attn_out": (24_576 // tp, None)}
    # Delayed scaling: the kernel's FP8 output (8,192 / t) and the projection's FP8 input (8,192 / t).
    assert _mla_terms(registry, "fp8-delayed-fp8-attention", tp=tp, contiguous=contiguous) == {
        **fp8, "attn_out": (16_384 // tp, None)}
    # MXFP8 attention: 2.0625 bytes an element of q, k (12,288 / t elements: 25,344 / t) and v (8,192 / t: 16,896 / t).
    assert _mla_terms(registry, "mxfp8-fp8-attention", tp=tp, contiguous=contiguous) == {
        "q_heads": (25_344 // tp, None), "k_heads": (25_344 // tp, None), v_op: (16_896 // tp, None),
        "attn_out": (16_384 // tp + 8_448 // tp, None)}
    # Every other term as the recipe without FP8 attention keeps it; attUp recomputes nothing of the kernel's copies.
    cost = _mla_cost(tp=tp, contiguous=contiguous)
    plain = apply_recipe(cost, registry.precision_recipe("fp8-current"), 2)
    with_attention = apply_recipe(cost, registry.precision_recipe("fp8-current-fp8-attention"), 2)
    assert ([t for t in with_attention.activations if t.op not in _MLA_OPS]
            == [t for t in plain.activations if t.op not in _MLA_OPS])
    assert plain.kept_bytes - plain.kept_under(frozenset({up})) == 2 * 24_576 // tp + v_bf16
    assert with_attention.kept_bytes == with_attention.kept_under(frozenset({up}))


def test_mla_under_all_to_all_cp_leaves_the_projections_input_unmarked(registry):
    # Ulysses CP 2: the kernel's output is attn_out_a2a (bf16, 16,384 bytes), the projection's input attn_out as
    # fp8-current keeps it (16,384 + 8,192), both recipes alike; q, k and v still quantized.
    terms = _mla_terms(registry, "fp8-delayed-fp8-attention", cp=2, cp_kind="a2a")
    assert terms == {"q_heads": (12_288, None), "k_heads": (12_288, None), "kv_up_out": (8_192, None),
                     "attn_out": (24_576, None)}


def test_eager_mla_is_refused(registry):
    from hp_core.engine.precision import apply_recipe

    with pytest.raises(ConfigError, match="needs the fused"):
        apply_recipe(_mla_cost(attention="eager"), registry.precision_recipe("fp8-current-fp8-attention"), 2)


def test_a_census_measured_mla_cost_moves_the_kernels_copies_off_attup(registry):
    from hp_core.costs import ActivationTerm
    from hp_core.engine.precision import apply_recipe_measured

    formula = _mla_cost()
    measured = attrs.evolve(formula, activations=(ActivationTerm("census.saved", 1_000_000),
                                                  ActivationTerm("census.attUp", 100_000, "attUp")),
                            measured=((frozenset({"attUp"}), 900_000),))
    plain, fp8 = (apply_recipe_measured(measured, formula, registry.precision_recipe(r), 2)
                  for r in ("fp8-current", "fp8-current-fp8-attention"))
    # attUp loses its bf16 q, k and kv_b_proj output (2 * 24,576 + 32,768 = 81,920 bytes); the kept terms gain the
    # kernel's FP8 q, k and v (2 * 12,288 + 8,192 = 32,768), also under a policy recomputing attUp.
    assert [t.bytes for t in plain.activations[:2]] == [fp8.activations[0].bytes - 32_768, 100_000]
    assert fp8.activations[1].bytes == 100_000 - 81_920
    assert fp8.measured[0][1] - plain.measured[0][1] == 32_768


def test_delayed_scaling_adds_the_mla_attention_state(registry):
    costs = [(_mla_cost(), 5)]
    added = (scaling_state_bytes(costs, registry.precision_recipe("fp8-delayed-fp8-attention"))
             - scaling_state_bytes(costs, registry.precision_recipe("fp8-delayed")))
    # 5 layers * 3 GEMMs * 5 quantizers * (1024 + 1) fp32 values * 4 bytes.
    assert added == 307_500


def test_deepseek_v3_and_its_mtp_layer_under_fp8_attention(registry):
    # DeepSeek-V3 under Megatron-Core (mla_contiguous_qkv), one 4,096-token sequence, EP 32: the MTP module's layer
    # keeps its q and k (4096 * 128 * 192 * 2 = 201,326,592 bytes each) and v (4096 * 128 * 128 * 2 = 134,217,728)
    # as the body's MLA layers, halved by FP8 attention; its output projection keeps its bf16 input, the kernel's output
    # (Megatron-Core set_save_original_input under current scaling).
    model = model_from_preset("deepseek-v3", registry)
    layout = ParallelSpec(dp=32, ep=32, seq_len=4096)
    terms = {}
    for recipe in ("fp8-current", "fp8-current-fp8-attention"):
        precision = attrs.evolve(registry.runtime("megatron").precision, recipe=recipe)
        run = prepare(model, layout, registry=registry, runtime="megatron", precision=precision)
        mtp = next(i for i, group in enumerate(model.layers) if group.kind == "mtp")
        body = next(i for i, group in enumerate(model.layers) if group.kind == "mla_moe")
        terms[recipe] = ({t.op: t.bytes for t in run.costs[mtp].activations},
                         {t.op: t.bytes for t in run.costs[body].activations})
    (mtp_plain, body_plain), (mtp_fp8, body_fp8) = terms["fp8-current"], terms["fp8-current-fp8-attention"]
    for op, bf16 in (("q_heads", 201_326_592), ("k_heads", 201_326_592), ("v_heads", 134_217_728)):
        assert (mtp_plain[f"layer.{op}"], body_plain[op]) == (bf16, bf16)
        assert (mtp_fp8[f"layer.{op}"], body_fp8[op]) == (bf16 // 2, bf16 // 2)
    assert mtp_fp8["layer.attn_out"] == mtp_plain["layer.attn_out"] == 134_217_728


def test_the_step_takes_the_mla_fp8_speedup(registry):
    from hp_core.io.report import time_summary

    # DeepSeek-V2 (MLA layers only: q/k head dim 192, v 128) at 4,096 tokens. GB200: DeepSeek-V3's shape measured at
    # 4,096 tokens, bf16 0.977 / FP8 0.656 ms forward, 3.383 / 2.112 ms backward; H200: refused (cuDNN runs no FP8
    # attention at MLA's head dims on Hopper).
    model = model_from_preset("deepseek-v2", registry)
    layout = ParallelSpec(dp=32, ep=32, seq_len=4096)
    base = registry.runtime("megatron").precision
    steps = {(hw, r): step_time(model, layout, registry=registry, runtime="megatron",
                                hardware=registry.hardware_preset(hw).spec, precision=attrs.evolve(base, recipe=r))
             for hw in ("gb200",) for r in ("fp8-current", "fp8-current-fp8-attention")}
    gb200 = steps["gb200", "fp8-current-fp8-attention"]
    assert gb200.provenance["mla_attention_speedup"] == (round(0.977 / 0.656, 4), round(3.383 / 2.112, 4)) == (1.4893, 1.6018)
    assert "attention_speedup" not in gb200.provenance and "mla_attention_speedup" not in steps["gb200", "fp8-current"].provenance
    assert "e4m3 MLA attention 1.49x forward, 1.60x backward of bf16;" in time_summary(gb200)
    assert gb200.step_seconds < steps["gb200", "fp8-current"].step_seconds
    # Hopper: cuDNN runs no FP8 attention at MLA's head dims, so both the step and the estimate are refused.
    for price in (lambda **kw: step_time(model, layout, **kw), lambda **kw: estimate(model, layout, **kw)):
        with pytest.raises(ConfigError, match=r"^\$\.precision\.recipe: .* on NVIDIA H100 SXM 80GB, but cuDNN runs FP8 "
                                              r"attention on Hopper only at q/k and v head dims 128 and 128, and a "
                                              r"layer's are 192 and 128"):
            price(registry=registry, runtime="megatron", hardware=registry.hardware_preset("h100-sxm").spec,
                  precision=attrs.evolve(base, recipe="fp8-current-fp8-attention"))
    # GQA on Hopper keeps cuDNN's measured speedup (Llama's shape), and a model without a device is not refused.
    llama = step_time(model_from_preset("llama3-8b", registry), ParallelSpec(dp=8, seq_len=4096), registry=registry,
                      runtime="megatron", hardware=registry.hardware_preset("h100-sxm").spec,
                      precision=attrs.evolve(base, recipe="fp8-current-fp8-attention"))
    assert llama.provenance["attention_speedup"] == pytest.approx((1.4441, 0.9938))
    estimate(model, layout, registry=registry, runtime="megatron", precision=attrs.evolve(base, recipe="fp8-current-fp8-attention"))


@pytest.mark.parametrize("saved, view", [("qkv_view", 0), ("qkv_view", 11), ("qkv", 5), (None, 5)])
def test_a_view_term_states_its_views_bytes_and_only_it(saved, view):
    from hp_core.costs import ActivationTerm

    with pytest.raises(ValueError, match="attention_view_bytes"):
        ActivationTerm("t", 10, attention_saved=saved, attention_view_bytes=view)
    assert ActivationTerm("t", 10, attention_saved="qkv_view", attention_view_bytes=10).attention_view_bytes == 10


@pytest.mark.parametrize("recipe, q_k, fused_out", [
    # Phi-3-mini (32 heads, 32 KV heads, head dim 96), one 4,096-token sequence, TP 1: the roped q and k, 4096 x 64 x 96
    # bf16 elements (50,331,648 bytes), and qkv_proj's whole output, 4096 x 96 x 96 (75,497,472), kept because v
    # (4096 x 32 x 96, 12,582,912 elements) is a view of it.
    ("bf16", 50_331_648, 75_497_472),
    # FP8 attention: q, k and v quantized (1 byte an element), the fused output freed but for v's FP8 copy.
    ("fp8-current-fp8-attention", 25_165_824, 12_582_912),
    ("mxfp8-fp8-attention", 51_904_512, 25_952_256),  # 2 x (1 + 1/32) bytes an element
])
def test_phi3_fused_qkv_output_is_freed_under_fp8_attention(registry, recipe, q_k, fused_out):
    model = model_from_preset("phi-3-mini", registry)
    precision = attrs.evolve(registry.runtime("megatron").precision, recipe=recipe)
    run = prepare(model, ParallelSpec(dp=8, seq_len=4096), registry=registry, runtime="megatron", precision=precision)
    terms = {t.op: t for t in run.costs[1].activations}
    assert (terms["q_k"].bytes, terms["qkv_fused_out"].bytes) == (q_k, fused_out)
    assert "v" not in terms and "qkv_fused_slices" not in terms
    # Without FP8 attention the fused output is kept whole, v's view and q's and k's slices: the bf16 figure.
    plain = prepare(model, ParallelSpec(dp=8, seq_len=4096), registry=registry, runtime="megatron",
                    precision=attrs.evolve(precision, recipe="fp8-current"))
    assert {t.op: t.bytes for t in plain.costs[1].activations}["qkv_fused_out"] == 75_497_472


@pytest.mark.parametrize("contiguous", [False, True])
def test_attup_still_reruns_the_up_projections_under_fp8_attention(registry, contiguous):
    # Megatron-Core's mla_up_proj recompute (CheckpointWithoutOutput, multi_latent_attention.py core_v0.16.0 lines
    # 344-347, 838-843) re-runs the up projections in backward whatever Transformer Engine saved: under FP8 attention
    # attUp saves nothing but costs what it cost in bf16. The small MLA layer above, TP 1: attUp regenerates q and k
    # (24,576 bytes each) and kv_b_proj's output (32,768) or, contiguous, v (16,384): 81,920 or 65,536 bytes, 40,960
    # or 32,768 elements, each a 2 * kv_lora_rank = 64 FLOP dot product: 2,621,440 or 2,097,152 FLOPs. Besides it
    # re-assembles q and k (LayerWork.reruns): 128 tokens * 4 heads * (2 * 8 + 2 * 24 + 16 + 24 [+ 2 * 16]) * 2 bytes.
    from hp_core.engine.precision import apply_recipe
    from hp_core.engine.timing.layer import _layer_time
    from hp_core.engine.timing.rates import _rates

    flops, assembly = (2_097_152, 128 * 4 * 136 * 2) if contiguous else (2_621_440, 128 * 4 * 104 * 2)
    regenerated = {"q_heads": 24_576, "k_heads": 24_576, "v_heads" if contiguous else "kv_up_out": (16_384 if contiguous else 32_768)}
    runtime = registry.runtime("megatron")
    spec = registry.hardware_preset("gb200").spec
    cost = _mla_cost(contiguous=contiguous)
    times = {}
    for recipe in ("fp8-current", "fp8-current-fp8-attention", "mxfp8-fp8-attention"):
        kept = apply_recipe(cost, registry.precision_recipe(recipe), 2)
        if recipe != "fp8-current":  # the moved terms name the switch and the bf16 bytes it rebuilds
            assert {t.op: (t.switch, t.rerun_switch, t.rerun_bytes) for t in kept.activations if t.rerun_switch} == {
                op: (None, "attUp", n) for op, n in regenerated.items()}
            assert kept.kept_bytes == kept.kept_under(frozenset({"attUp"}))  # and saves none of them
        rates = _rates(ParallelSpec(seq_len=128), spec, runtime.timing, attrs.evolve(runtime.precision, recipe=recipe),
                       "flash", recipe=registry.precision_recipe(recipe))
        rates = attrs.evolve(rates, host=None, slowdown=1.0)
        t = _layer_time(kept, kept.work, False, frozenset({"attUp"}), rates)
        assert t.recomputed_flops == flops, recipe
        assert t.recompute_seconds == pytest.approx(flops / (rates.peak * rates.matmul) + assembly / rates.memory), recipe
        times[recipe] = t.recompute_seconds
    assert times["fp8-current"] == times["fp8-current-fp8-attention"] == times["mxfp8-fp8-attention"] > 0


def test_a_census_measured_mla_cost_keeps_attups_rerun(registry):
    from hp_core.costs import ActivationTerm
    from hp_core.engine.precision import apply_recipe_measured

    formula = _mla_cost()
    measured = attrs.evolve(formula, activations=(ActivationTerm("census.saved", 1_000_000),
                                                  ActivationTerm("census.attUp", 100_000, "attUp")))
    fp8 = apply_recipe_measured(measured, formula, registry.precision_recipe("fp8-current-fp8-attention"), 2)
    # The census's attUp term gives up the formula's 81,920 bytes; byte-free terms carry what attUp still rebuilds.
    assert [(t.op, t.bytes, t.switch, t.rerun_switch, t.rerun_bytes) for t in fp8.activations[-3:]] == [
        ("q_heads", 0, None, "attUp", 24_576), ("k_heads", 0, None, "attUp", 24_576),
        ("kv_up_out", 0, None, "attUp", 32_768)]
    assert fp8.activations[1].bytes == 100_000 - 81_920


@pytest.mark.parametrize("rerun, nbytes, switch", [("attUp", 0, None), (None, 5, None), ("attUp", 5, "normOp")])
def test_a_rerun_term_states_its_switch_and_bytes_and_no_switch_of_its_own(rerun, nbytes, switch):
    from hp_core.costs import ActivationTerm

    with pytest.raises(ValueError, match="rerun_bytes"):
        ActivationTerm("t", 10, switch, rerun_switch=rerun, rerun_bytes=nbytes)
    assert ActivationTerm("t", 10, rerun_switch="attUp", rerun_bytes=5).rerun_bytes == 5


def test_the_planner_never_picks_attup_under_fp8_attention(registry):
    # attUp saves nothing under FP8 attention and costs its re-run: a pure cost, which no plan takes, where without FP8
    # attention the same limit has the plan recompute it (DeepSeek-V2, PP 4, EP 8 on 64 GB200s, 150 GiB usable).
    from hp_core.api import plan_recompute

    model = model_from_preset("deepseek-v2", registry)
    layout = ParallelSpec(dp=16, ep=8, pp=4, seq_len=4096, global_batch_size=256)
    base = registry.runtime("megatron").precision
    gb200 = registry.hardware_preset("gb200").spec
    uses = {}
    for recipe in ("mxfp8", "mxfp8-fp8-attention"):
        plan = plan_recompute(model, layout, registry=registry, hardware=gb200, runtime="megatron",
                              precision=attrs.evolve(base, recipe=recipe), reserve_bytes=gb200.memory_bytes - 150 * 2**30)
        assert all(stage.fits for stage in plan.plan.stages)
        uses[recipe] = any("attUp" in s.switches for stage in plan.plan.stages for s in stage.settings)
    assert uses == {"mxfp8": True, "mxfp8-fp8-attention": False}
    # Recomputing attUp everywhere: the same peak, a longer step (the up projections' GEMMs again).
    precision = attrs.evolve(base, recipe="mxfp8-fp8-attention")
    runs = [(estimate(model, layout, registry=registry, runtime="megatron", precision=precision, recompute=r),
                step_time(model, layout, registry=registry, runtime="megatron", hardware=gb200, precision=precision,
                          recompute=r)) for r in ("none", ["attUp"])]
    assert [s.peak_bytes for s in runs[1][0].stages] == [s.peak_bytes for s in runs[0][0].stages]
    assert runs[1][1].step_seconds > runs[0][1].step_seconds


def test_a_qk_norm_switch_states_no_rerun_and_is_charged_nothing_for_q_k(registry):
    # A qk-norm layer (GQA kit: q_k under normOp), hidden 256, 4 heads, 2 KV heads, head dim 64, one sequence of
    # 128 tokens, TP 1: q_k 128 * (4 + 2) * 64 * 2 = 98,304 bytes. The layer states no re-run for normOp
    # (LayerWork.reruns names ffFc1 only), so FP8 attention moves q_k off it with no rerun_switch: recomputing
    # normOp rewrites the two pre-norm outputs only, each 128 * 256 elements kept as MXFP8 (1 + 1/32 bytes an
    # element): 2 * 33,792 bytes, written once (2 * bytes / memory), nothing for q_k's bf16 bytes.
    from hp_core.engine.precision import apply_recipe
    from hp_core.engine.prepare import layer_context
    from hp_core.engine.timing.layer import _layer_time
    from hp_core.engine.timing.rates import _rates
    from hp_core.specs import PrecisionSpec
    from hp_plugins.kinds.dense import evaluate_dense

    config = DenseConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                         intermediate_size=128, qk_norm=True)
    layout = ParallelSpec(tp=1, dp=1, seq_len=128)
    cost = evaluate_dense(config, layer_context(layout, PrecisionSpec(), "flash"))
    assert {t.op: (t.bytes, t.switch) for t in cost.activations if t.op == "q_k"} == {"q_k": (98_304, "normOp")}
    assert cost.work.rerun("normOp") is None
    recipe = registry.precision_recipe("mxfp8-fp8-attention")
    kept = apply_recipe(cost, recipe, 2)
    assert [t.op for t in kept.activations if t.rerun_switch] == []
    q_k = next(t for t in kept.activations if t.op == "q_k")
    assert (q_k.switch, q_k.rerun_bytes, q_k.bytes) == (None, 0, 101_376)  # 49,152 elements * 2.0625
    runtime = registry.runtime("megatron")
    rates = _rates(layout, registry.hardware_preset("gb200").spec, runtime.timing,
                   attrs.evolve(runtime.precision, recipe=recipe.name), "flash", recipe=recipe)
    rates = attrs.evolve(rates, host=None, slowdown=1.0)
    t = _layer_time(kept, kept.work, False, frozenset({"normOp"}), rates)
    assert t.recompute_seconds == pytest.approx(2 * (2 * 33_792) / rates.memory)


@pytest.mark.parametrize("dims, refused", [((128, 128), False), ((64, 64), True), ((192, 128), True),
                                           ((128, 64), True), (None, True)])
def test_hopper_runs_fp8_attention_only_at_head_dim_128(registry, dims, refused):
    # cudnn-frontend's H200 CSVs: FP8 rows at head dim 128 ran (llama3.1), at MLA's (192, 128) and GPT-OSS's 64 all
    # failed ("hidden_dim shoud be equal to 128"); a layer stating no head dims is refused (absent is not zero).
    from hp_core.costs import LayerWork
    from hp_core.engine.precision import check_fp8_attention_device
    from hp_core.errors import RunRefusal

    recipe = registry.precision_recipe("fp8-current-fp8-attention")
    works = [LayerWork(attention_calls=1, attention_head_dims=dims)]
    if refused:
        with pytest.raises(RunRefusal, match="only at q/k and v head dims 128 and 128"):
            check_fp8_attention_device(recipe, works, "hopper", "NVIDIA H100 SXM 80GB")
    else:
        check_fp8_attention_device(recipe, works, "hopper", "NVIDIA H100 SXM 80GB")
    check_fp8_attention_device(recipe, works, "blackwell", "NVIDIA B200")  # Blackwell: measured at these dims
    # A layer kept in the compute dtype runs its core in bf16, and so does every layer under a bf16-attention recipe.
    check_fp8_attention_device(recipe, [LayerWork(attention_calls=1, attention_head_dims=dims, quantized=False)],
                               "hopper", "NVIDIA H100 SXM 80GB")
    check_fp8_attention_device(registry.precision_recipe("fp8-current"), works, "hopper", "NVIDIA H100 SXM 80GB")


def test_the_kits_state_their_head_dims(registry):
    # GQA: head_dim (or hidden / heads: 256 / 4 = 64); MLA (the small layer above): q/k 16 + 8, v 16.
    from hp_core.engine.prepare import layer_context
    from hp_core.specs import PrecisionSpec
    from hp_plugins.kinds.dense import evaluate_dense

    context = layer_context(ParallelSpec(dp=1, seq_len=128), PrecisionSpec(), "flash")
    dense = evaluate_dense(DenseConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                                       intermediate_size=128), context)
    assert dense.work.attention_head_dims == (64, 64)
    assert _mla_cost().work.attention_head_dims == (24, 16)
    assert dense.work.attention_head_dims and not attrs.evolve(dense.work, attention_head_dims=None).attention_head_dims
    with pytest.raises(ValueError, match="attention_head_dims"):
        attrs.evolve(dense.work, attention_head_dims=(64, 0))


def test_the_cli_refuses_gqa_at_head_dim_64_on_hopper(capsys):
    from cli_run import run

    argv = ["estimate", "--model", "gpt-oss-20b", "--num-layers", "4", "--devices", "8", "--hardware", "h100-sxm",
            "--runtime", "megatron"]
    status, _, err = run(capsys, *argv, "--precision", "fp8-current-fp8-attention")
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert ("but cuDNN runs FP8 attention on Hopper only at q/k and v head dims 128 and 128, and a layer's are 64 and 64"
            in err)
    assert run(capsys, *argv, "--precision", "fp8-current")[0] == 0
    assert run(capsys, *argv[:-4], "--hardware", "b200", "--runtime", "megatron",
               "--precision", "fp8-current-fp8-attention")[0] == 0


def test_the_hopper_refusal_suggests_the_plain_recipe_only_where_it_prices(capsys):
    # fp8-current prices on Hopper (megatron-te measures its GEMM speedup there): the FP8-attention refusal names it.
    # mxfp8 does not run there at all (Transformer Engine wants compute capability 10.0 for MXFP8): refused before its
    # attention is looked at, the plain recipe as well.
    from cli_run import run

    argv = ["--model", "gpt-oss-20b", "--num-layers", "4", "--devices", "8", "--hardware", "h100-sxm", "--runtime", "megatron"]
    for command in ("estimate", "search"):
        status, _, err = run(capsys, command, *argv, "--precision", "fp8-current-fp8-attention")
        assert status == 2 and len(err.strip().splitlines()) == 1
        assert err.strip().endswith("head dim must be 128; docs/precision.md 'FP8 attention'); choose a recipe without "
                                    "FP8 attention (fp8-current) or a Blackwell device"), err
        for recipe in ("mxfp8-fp8-attention", "mxfp8"):
            status, _, err = run(capsys, command, *argv, "--precision", recipe)
            assert status == 2 and len(err.strip().splitlines()) == 1
            assert f"precision recipe {recipe} runs on blackwell devices only" in err, err


def test_an_mla_windowed_core_is_not_named_as_priced_over_the_whole_triangle():
    # layer.py prices a windowed core's FP8 backward over the whole causal triangle only where its q/k are not wider
    # than v (an MLA core keeps the bf16 rates both ways): the provenance says so only where such a core runs.
    from types import SimpleNamespace

    from hp_core.costs import LayerWork
    from hp_core.engine.timing.attention_speedup import fp8_attention_provenance
    from hp_core.score_masks import LocalMask

    recipe = SimpleNamespace(attention_format="mxfp8")
    rates = SimpleNamespace(attn_speedup=(1.2, 0.97), mla_attn_speedup=(1.4, 1.3), windowed_fp8_full_backward=True)
    window = LocalMask(seq_len=8192, window=128)
    mla = LayerWork(attention_calls=1, wide_qk_attention=True, local_mask=window, quantized=True)
    plain = LayerWork(attention_calls=1, local_mask=window, quantized=True)
    assert fp8_attention_provenance(recipe, rates, [mla]) == {"windowed_attention_bf16": True}
    assert fp8_attention_provenance(recipe, rates, [mla, plain]) == {"windowed_attention_bf16": True,
                                                                      "windowed_fp8_backward_full_causal": True}
    # Off Blackwell (the rates' flag false) neither names it.
    hopper = SimpleNamespace(attn_speedup=(1.0, 1.0), mla_attn_speedup=(1.0, 1.0), windowed_fp8_full_backward=False)
    assert fp8_attention_provenance(recipe, hopper, [plain]) == {"windowed_attention_bf16": True}
    # A chunked core runs as causal chunks at the full core's speedups: named as such, never as windowed.
    chunked = LayerWork(attention_calls=1, local_mask=LocalMask(seq_len=16384, chunk=8192), quantized=True)
    assert fp8_attention_provenance(recipe, rates, [chunked]) == {"attention_speedup": (1.2, 0.97)}
