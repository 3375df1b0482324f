"""Blackwell Ultra's fused attention against Blackwell's, as NVIDIA's cuDNN attention benchmark measures them.

Run: ``python benchmarks/attention_rate_level.py``. ``hp_plugins/hardware/data/cudnn_sdpa.json`` holds the bf16
rows of NVIDIA's cudnn-frontend training attention benchmark (NVIDIA/cudnn-frontend@3929da2, cuDNN 9.22, the same
build on both parts): Llama 3.1's attention (64 query and 8 KV heads of dim 128) and DeepSeek-V3's MLA attention
(128 heads, q/k dim 192, v 128), causal, batch 2, at 2,048 to 32,768 tokens, on a GB200 and a GB300. Both parts
state the same bf16 peak (2,500 TFLOP/s), yet the GB300 runs the same kernels faster: Blackwell Ultra doubles the
special-function (exponential) throughput attention's softmax runs on (NVIDIA's Blackwell Ultra datasheet). This
prints, per kind and length, the GB200's time over the GB300's, forward and backward.

hp's blackwell attention efficiencies were measured on a DGX B200 (SimuMax v1.2, TE fused attention) and are
applied to every Blackwell part as fractions of its peak; the ``gb300`` preset states ``attention_rate_scale``
(equal q/k and v head dims) and ``mla_attention_rate_scale`` (MLA), forward and backward: the median of that ratio
over the measured lengths (:func:`rate_scales`), a factor on the family's attention efficiencies
(``hp_core/engine/timing/rates.py``). Only the architectural step is taken from these rows, the same build on both
parts; their absolute times are not (they were run on cuDNN 9.22, newer than the builds of the runs hp is checked
against, and run faster than hp's B200 figures on both parts). Nothing here is fitted to a step time.
"""

from __future__ import annotations

import statistics

from hp_plugins.runtimes.attention_speedups import load

KINDS = {"llama3.1": "full", "dsv3": "mla"}
BASE, ULTRA = "NVIDIA GB200", "NVIDIA GB300"


def ratios() -> list[dict]:
    """Per kind and length: the GB200's bf16 kernel time over the GB300's, forward and backward."""
    times = {(r["gpu"], KINDS[r["model"]], r["seq_len"], r["pass"]): r["time_ms"]
             for r in load()["records"] if r["data_type"] == "bfloat16" and r["gpu"] in (BASE, ULTRA)}
    keys = sorted({(kind, seq) for _, kind, seq, _ in times})
    return [dict(kind=kind, seq_len=seq, base_ms=(times[(BASE, kind, seq, "fwd")], times[(BASE, kind, seq, "bwd")]),
                 ultra_ms=(times[(ULTRA, kind, seq, "fwd")], times[(ULTRA, kind, seq, "bwd")]),
                 ratio=(times[(BASE, kind, seq, "fwd")] / times[(ULTRA, kind, seq, "fwd")],
                        times[(BASE, kind, seq, "bwd")] / times[(ULTRA, kind, seq, "bwd")]))
            for kind, seq in keys]


def rate_scales() -> dict[str, tuple[float, float]]:
    """``{kind: (forward, backward)}``: the median over the measured lengths of the GB200's time over the GB300's, to
    4 decimals: the ``gb300`` preset's ``attention_rate_scale`` (``full``) and ``mla_attention_rate_scale`` (``mla``)."""
    found = ratios()
    return {kind: tuple(round(statistics.median(r["ratio"][i] for r in found if r["kind"] == kind), 4) for i in (0, 1))
            for kind in ("full", "mla")}


def main() -> None:
    print("| kind | tokens | GB200 fwd / bwd ms | GB300 fwd / bwd ms | GB200 / GB300 |")
    print("|---|---:|---:|---:|---:|")
    for r in ratios():
        print(f"| {r['kind']} | {r['seq_len']:,} | {r['base_ms'][0]:.3f} / {r['base_ms'][1]:.3f} | "
              f"{r['ultra_ms'][0]:.3f} / {r['ultra_ms'][1]:.3f} | {r['ratio'][0]:.3f} / {r['ratio'][1]:.3f} |")
    scales = rate_scales()
    print(f"\n- gb300: attention_rate_scale {scales['full']}, mla_attention_rate_scale {scales['mla']}")


if __name__ == "__main__":
    main()
