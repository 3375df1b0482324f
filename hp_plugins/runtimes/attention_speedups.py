"""FP8 attention speedups over bf16 from NVIDIA's published cuDNN attention benchmark
(``DeviceEfficiency.attention_speedups``; docs/precision.md, "FP8 attention").

``hp_plugins/hardware/data/cudnn_sdpa.json`` holds the rows of cudnn-frontend's
``benchmark/sdpa_benchmark_training`` results (NVIDIA/cudnn-frontend@3929da2, 2026-05-08): cuDNN's fused
attention forward and backward kernel times in bf16, FP8 (``fp8``: per-tensor scaled E4M3, hp's ``e4m3``) and
MXFP8, causal (``top_left``), the non-deterministic backward, at sequence lengths 2,048 to 32,768:

* Llama 3.1's attention (64 query heads, 8 KV heads, head dim 128; batch 2 on GB200 and GB300, 1 on H200):
  the ``full`` kind, every attention whose q/k and v head dims are equal;
* DeepSeek-V3's (128 heads, q/k head dim 192, v 128; GB200 and GB300): the ``mla`` kind.

Each speedup is the bf16 kernel time over the FP8 one at the same shape. The GB200 figures carry to the parts
whose FP4:BF16 dense peak ratio is 4.0 (B200, GB200) and the GB300 ones to Blackwell Ultra (5.6-6.22: B300,
GB300), as :data:`hp_plugins.runtimes.gemm_speedups.BLACKWELL_BANDED_SPEEDUPS` bands NVFP4: Blackwell Ultra
doubles the exponential throughput attention's softmax runs on (NVIDIA's Blackwell Ultra datasheet), so its
FP8 gain differs (1.49 against 1.28 forward at 4,096). H200's carry to every Hopper part (no MXFP8 there; no MLA
either: cuDNN refuses FP8 attention at DeepSeek-V3's head dims on Hopper, every such row failing with
cudnnGraphNotSupportedError, "hidden_dim shoud be equal to 128").
"""

from __future__ import annotations

import json
from importlib.resources import files

from hp_core.specs.attention_speedups import AttentionSpeedup
from hp_plugins.runtimes.gemm_speedups import BLACKWELL_FP4_BAND, BLACKWELL_ULTRA_FP4_BAND

__all__ = ["BLACKWELL_ATTENTION_SPEEDUPS", "HOPPER_ATTENTION_SPEEDUPS", "attention_speedups", "load"]

_FORMATS = {"fp8": "e4m3", "mxfp8": "mxfp8"}
_KINDS = {"llama3.1": "full", "dsv3": "mla"}
# The FP4:BF16 dense peak ratio band of the parts a measured device's figures carry to (module docstring).
_BANDS = {"NVIDIA GB200": BLACKWELL_FP4_BAND, "NVIDIA GB300": BLACKWELL_ULTRA_FP4_BAND, "NVIDIA H200": None}


def load() -> dict:
    return json.loads((files("hp_plugins.hardware") / "data" / "cudnn_sdpa.json").read_text(encoding="utf-8"))


def attention_speedups(gpus: tuple[str, ...]) -> tuple[AttentionSpeedup, ...]:
    """Every FP8 format's speedup per kind and sequence length measured on *gpus* (the data's ``gpu`` names)."""
    times: dict[tuple, float] = {}
    sources: dict[tuple, str] = {}
    for r in load()["records"]:
        if r["gpu"] not in gpus:
            continue
        key = (r["gpu"], _KINDS[r["model"]], r["seq_len"])
        times[key + (r["data_type"], r["pass"])] = r["time_ms"]
        sources[key] = r["source"]
    found = []
    for (gpu, kind, seq), source in sorted(sources.items()):
        for data_type, fmt in _FORMATS.items():
            pick = lambda dtype, direction: times.get((gpu, kind, seq, dtype, direction))
            bf_f, bf_b, q_f, q_b = pick("bfloat16", "fwd"), pick("bfloat16", "bwd"), pick(data_type, "fwd"), pick(data_type, "bwd")
            if None in (bf_f, bf_b, q_f, q_b):
                continue
            found.append(AttentionSpeedup(
                format=fmt, kind=kind, seq_len=seq, forward=round(bf_f / q_f, 4), backward=round(bf_b / q_b, 4),
                peak_ratio=_BANDS[gpu],
                source=f"{source} ({gpu}, cuDNN {kind} causal attention at {seq} tokens: bf16 forward {bf_f} ms / "
                       f"{data_type} {q_f} ms, backward {bf_b} / {q_b} ms)"))
    return tuple(found)


BLACKWELL_ATTENTION_SPEEDUPS = attention_speedups(("NVIDIA GB200", "NVIDIA GB300"))
HOPPER_ATTENTION_SPEEDUPS = attention_speedups(("NVIDIA H200",))
