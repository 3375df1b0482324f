"""The FP8 attention speedups a layout's rates take (:attr:`_Rates.attn_speedup <hp_core.engine.timing.rates._Rates>`;
docs/precision.md, "FP8 attention")."""

from __future__ import annotations

from typing import Any

from hp_core.precision_recipes import PrecisionRecipe
from hp_core.specs import HardwareSpec, ParallelSpec
from hp_core.specs.attention_speedups import pick_attention_speedup
from hp_core.specs.timing import DeviceEfficiency

__all__ = ["attention_call_tokens", "attention_speedups", "fp8_attention_provenance"]


def attention_call_tokens(parallel: ParallelSpec) -> int:
    """The sequence length one attention call covers: a CP rank's share under ring (p2p) CP, where each call
    attends ``seq / cp`` queries to ``seq / cp`` keys; the whole sequence otherwise (Ulysses gathers it)."""
    return max(parallel.seq_len // parallel.cp, 1) if parallel.cp > 1 and parallel.cp_kind == "p2p" else parallel.seq_len


def attention_speedups(recipe: PrecisionRecipe | None, dev: DeviceEfficiency, hardware: HardwareSpec,
                       parallel: ParallelSpec) -> dict[str, Any]:
    """The FP8 attention speedups of a recipe running the attention core in FP8, per kind (full-width, MLA): the
    device entry's measured figure for the format at the FP4:BF16 peak ratio and the call's sequence length
    (:func:`hp_core.specs.attention_speedups.pick_attention_speedup`); ``{}`` for a bf16 core, and a kind the entry
    states no figure for keeps the bf16 rates (the documented default, named in the step's provenance)."""
    if recipe is None or recipe.attention_format == "bf16":
        return {}
    peaks = hardware.peak_flops
    ratio = peaks["fp4"] / peaks["bf16"] if "fp4" in peaks and peaks.get("bf16") else None
    found = {}
    for kind, field in (("full", "attn_speedup"), ("mla", "mla_attn_speedup")):
        entry = pick_attention_speedup(dev.attention_speedups, recipe.attention_format, kind,
                                       attention_call_tokens(parallel), ratio)
        if entry is not None:
            found[field] = (entry.forward, entry.backward)
    # A windowed core's FP8 backward on Blackwell runs the whole causal triangle (WINDOWED_FP8_BACKWARD_SOURCE).
    found["windowed_fp8_full_backward"] = hardware.architecture == "blackwell"
    return found


# cuDNN's FP8 and MXFP8 attention backward with a diagonal band (a sliding window) computes the full causal triangle:
# NVIDIA's own training SDPA benchmark at GPT-OSS's window (benchmark/sdpa_benchmark_training/configs/gpt_oss.py,
# window 128, head dim 64, 2 x 128 heads, top-left causal; results/gpt_oss/gb200/gpt_oss_20260424_100011.csv and
# gb300/gpt_oss_20260424_100022.csv at NVIDIA/cudnn-frontend@3929da2, cuDNN 9.22.0, read 2026-12-03) times the
# MXFP8 backward at 2.080, 7.427, 27.940 and 108.370 ms on GB200 at 4,096 to 32,768 tokens (x3.6, x3.8, x3.9 per
# doubling: quadratic, as a full causal core), the bf16 one at 0.465, 0.911, 1.818 and 3.692 ms (linear: the band's
# tiles only), and the forward linear in both (0.210 to 1.637 ms MXFP8); GB300 alike (1.871 to 96.913 ms MXFP8
# backward). Measured on Blackwell only (every FP8 row of the H200 run failed at head dim 64), so stated there.
WINDOWED_FP8_BACKWARD_SOURCE = ("NVIDIA/cudnn-frontend@3929da2 benchmark/sdpa_benchmark_training/results/gpt_oss "
                                "(GB200, GB300; cuDNN 9.22.0): FP8/MXFP8 backward with a 128-token window quadratic "
                                "in the sequence length")


def fp8_attention_provenance(recipe: PrecisionRecipe, rates: Any, works: Any) -> dict[str, Any]:
    """Under an FP8-attention recipe: the speedup each kind of attention core the model runs in FP8 took (full-width,
    MLA, a chunked core as a full one; layers kept in the compute dtype and sliding-window cores take none), and whether
    a sliding-window core kept the bf16 rates."""
    if recipe.attention_format == "bf16":
        return {}
    # A chunked core runs as causal sequences of a chunk each (layer.py): priced at the speedups as a full core.
    fp8 = [w for w in works if w.attention_calls and w.quantized and (w.local_mask is None or w.local_mask.window is None)]
    found = {}
    if any(not w.wide_qk_attention for w in fp8):
        found["attention_speedup"] = rates.attn_speedup
    if any(w.wide_qk_attention for w in fp8):
        found["mla_attention_speedup"] = rates.mla_attn_speedup
    windowed = [w for w in works if w.attention_calls and w.quantized and w.local_mask is not None
                and w.local_mask.window is not None]
    if windowed:
        found["windowed_attention_bf16"] = True
        # As layer.py prices it: an MLA (wide q/k) windowed core keeps the bf16 rates both ways.
        if rates.windowed_fp8_full_backward and any(not w.wide_qk_attention for w in windowed):
            found["windowed_fp8_backward_full_causal"] = True
    return found
