"""benchmarks/fit_fp8_overhead.py: the per-FP8-GEMM-call form it fits to the DGX Cloud calibration rows, counted by hand,
and docs/precision.md's report of it (current, and its prose citing the printed figures); the form is not adopted."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

from hp_core.api import build_registry
from hp_core.costs import LayerWork
from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "precision.md"

# Per-rank (tokens, fan-out, fan-in) of the layers the dgxc rows price (benchmarks/fp8_dgxc.py): Llama 3.1 8B at CP 2
# (fused QKV 4096 + 2 x 1024, output, fused gate and up 2 x 14336, down); GPT-3 175B at TP 4 on 2,048 tokens (QKV
# 3 x 12288 / 4, output 12288 / 4 -> 12288, and the MLP's two GEMMs, 12288 -> 49152 / 4 and back, one shape);
# NeMo's Grok-1 at TP 4 (the router's bf16 gating GEMM, QKV, output; 4 local experts, gated 32768 / 2 per rank).
LLAMA_8B = ((4096, 6144, 4096), (4096, 4096, 4096), (4096, 28672, 4096), (4096, 4096, 14336))
GPT3_175B = ((2048, 9216, 12288), (2048, 12288, 3072), (2048, 12288, 12288))
GROK_GATE = (1024, 8, 6144)
GROK = (GROK_GATE, (4096, 2048, 6144), (4096, 6144, 1536))
GROK_EXPERTS = ((4, 2048.0, 16384, 6144), (4, 2048.0, 6144, 8192))


def _flops(gemms) -> float:
    return sum(2.0 * rows * out * inp for rows, out, inp in gemms)


@pytest.fixture(scope="module")
def fit():
    return load_script("benchmarks/fit_fp8_overhead.py")


@pytest.fixture(scope="module")
def printed(fit):
    return fit.section(build_registry(use_env=False))


def test_calls_are_counted_per_quantized_gemm_and_grouped_gemm(fit):
    # Llama 3.1 8B: four GEMMs, each shape once.
    assert fit.fp8_gemm_calls(LayerWork(gemms=LLAMA_8B), _flops(LLAMA_8B)) == pytest.approx(4.0)
    # GPT-3 175B: the layer lists its MLP's one shape once; scaled to the layer's FLOPs (QKV 9216, output 3072 and
    # twice 12288 over 9216 + 3072 + 12288 listed: 36864 / 24576 = 1.5) it counts 4.5 calls, not 4.
    dense = 2.0 * 2048 * 12288 * (9216 + 3072 + 2 * 12288)
    assert fit.fp8_gemm_calls(LayerWork(gemms=GPT3_175B), dense) == pytest.approx(4.5)
    # Grok-1: the gating GEMM stays bf16; QKV and output, plus one call per grouped GEMM (2), or one per expert (8).
    grok = LayerWork(gemms=GROK, high_precision_gemms=(GROK_GATE,), expert_gemms=GROK_EXPERTS, grouped_flops=1.0)
    assert fit.fp8_gemm_calls(grok, _flops(GROK)) == pytest.approx(4.0)
    assert fit.fp8_gemm_calls(grok, _flops(GROK), per_expert=True) == pytest.approx(10.0)


def test_a_trial_adds_the_calls_once_forward_and_twice_backward_then_restores(fit):
    from hp_core.engine.timing import layer

    original = layer._low_precision_seconds
    rates = types.SimpleNamespace(gemm_speedup=2.0, gemm_speedup_backward=1.5, quant_input_fwd=0.0, quant_input_bwd=0.0,
                                  quant_grad=0.0, quant_weight=0.0, memory=1.0, gemm_scope="all", rescale=(0.0, 0.0, 0.0))
    work = LayerWork(gemms=LLAMA_8B)
    assert original(_flops(LLAMA_8B), 0.0, work, rates, 1.0, 3.0) == pytest.approx((0.5, 2.0, 0.0, 0.0))
    with fit.trial("call", 1e-5):
        # 4 calls: forward 4 x 10 us, backward (dgrad and wgrad) 8 x 10 us.
        assert layer._low_precision_seconds(_flops(LLAMA_8B), 0.0, work, rates, 1.0, 3.0) == pytest.approx((0.5 + 4e-5, 2.0 + 8e-5, 0.0, 0.0))
    with fit.trial("factor", 0.1):
        assert layer._low_precision_seconds(_flops(LLAMA_8B), 0.0, work, rates, 1.0, 3.0) == pytest.approx((0.55, 2.2, 0.0, 0.0))
    assert layer._low_precision_seconds is original


def test_precision_page_fit_section_is_current(printed, fit):
    """Regenerate with ``python benchmarks/fit_fp8_overhead.py --write``."""
    _, text = printed
    page = PAGE.read_text(encoding="utf-8")
    start, end = page.index(fit.START), page.index(fit.END) + len(fit.END)
    assert page[start:end] == text


def test_no_form_passes_and_the_prose_states_the_printed_figures(printed):
    """The page says the form is not adopted and why, with the table's figures; hp prices no per-call time."""
    values, text = printed
    assert "passes" not in text and text.count("fails:") == 3
    page = PAGE.read_text(encoding="utf-8")
    prose = " ".join(page[page.index("**Not adopted: hp states no such time.**"):page.index("## Writing a recipe")].split())
    assert f"fits {values['call'] * 1e6:.1f} us" in prose
    row = {line.split(" | ")[0].lstrip("| ").removesuffix(" (fitted)"): line.split(" | ") for line in text.splitlines() if line.startswith("| ")}

    def mae(collection: str, column: int) -> str:
        return re.match(r"([\d.]+%)", row[collection][column]).group(1)

    # Columns: collection, rows, hp as stated, the per-call form, per expert, the control.
    for collection in ("dgxc held_out", "torchtitan Float8", "MPT FP8", "NeMo 24.07", "NeMo 24.07, launcher options"):
        assert f"from {mae(collection, 2)} to {mae(collection, 3)}" in prose, collection
    assert f"({mae('dgxc held_out', 5)})" in prose
    by_model = dict(re.findall(r"^- ([\w.-]+(?: \([^)]*\))?): \d+ rows, mean absolute error ([\d.]+% to [\d.]+%)", text, re.M))
    for model, said in (("llama3.1-405b", "the 405B rows go from"), ("llama3.1-70b (25.02.01, CP 1)", "at CP 1 from"),
                        ("gpt3-175b", "GPT-3 goes from"), ("llama3.1-70b", "at CP 2 from")):
        assert f"{said} {by_model[model]}" in prose, model
    host = "Megatron-Bridge MoE (the host fit's rows)"
    assert f"({mae(host, 2)} to {mae(host, 4)})" in prose
