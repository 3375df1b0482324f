"""hp's Hopper kernel figures against one H200 SXM's measurements of the same kernels.

Run: ``python benchmarks/hopper_kernel_level.py``. It reads ``tests/plugins/data/h200_hopper_kernels.json`` (measured
by ``benchmarks/device_hopper_kernels.py``; its docstring says what each record times) and prints:

* **Dense bf16 GEMMs**: the measured FLOP/s over the H200 preset's dense bf16 peak (989.4 TFLOP/s) against the kernel
  efficiency hp prices the same GEMM at (``HOPPER_KERNELS.matmul`` times the OpenXLA shape scale, before the whole-run
  GEMM factor), per layer of Llama-3-8B and -70B (8,192 tokens, TP 1-8) and pass.
* **FP8 speedups per pass**: the layer's summed bf16 GEMM seconds over its summed FP8 seconds (``torch._scaled_mm``
  per-tensor with fast accumulation, with split accumulation, and row-wise; the forward GEMMs also row-wise with fast
  accumulation), as Transformer Engine's tutorial states its per-layer figure, against ``HOPPER_SPEEDUPS``
  (``hp_plugins/runtimes/gemm_speedups.py``).
* **Grouped GEMMs**: ``torch._grouped_mm`` and a per-expert ``torch.mm`` loop as a fraction of the peak and of the
  measured dense rate, by rows per expert, against ``grouped_matmul * rows / (rows + grouped_half_rows)``; and the
  least-squares fit (relative error of the time) of that two-figure form to the ``torch._grouped_mm`` records.
* **Host**: seconds per launch of a small eager op, and per ``torch.mm`` of the per-expert loop.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "plugins" / "data" / "h200_hopper_kernels.json"
PEAK_BF16 = 989.4e12  # hp_plugins/hardware/data/hardware.json, h200: the H100 SXM's dense bf16 peak
FAST, SPLIT, ROWWISE = "fp8_tensorwise_fast_accum_seconds", "fp8_tensorwise_split_accum_seconds", "fp8_rowwise_seconds"
ROWWISE_FAST = "fp8_rowwise_fast_accum_seconds"  # the second run's `rowwise_fast` records (`backward`)


def load() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


def layer_gemms(data: dict) -> list[dict]:
    """Every GEMM of every measured layer and pass, a shape measured once standing for each layer that runs it; a
    forward (fprop) GEMM with its row-wise fast-accumulation seconds (``ROWWISE_FAST``) from the second run's
    ``rowwise_fast`` record of its shape."""
    measured = {(r["m"], r["n"], r["k"]): r for r in data["dense"] if r["kind"] == "dense"}
    fast = {(r["m"], r["n"], r["k"]): r[ROWWISE_FAST] for r in data["backward"]["records"] if r["kind"] == "rowwise_fast"}
    gemms = []
    for r in data["dense"]:
        shape = (r["m"], r["n"], r["k"])
        g = {**measured[shape], **{k: r[k] for k in ("model", "tp", "linear", "pass")}}
        if r["pass"] == "fprop":
            g[ROWWISE_FAST] = fast[shape]
        gemms.append(g)
    return gemms


def speedup(gemms: list[dict], key: str) -> float:
    """Summed bf16 seconds over summed *key* seconds."""
    return sum(g["bf16_seconds"] for g in gemms) / sum(g[key] for g in gemms)


def split_accumulator_speedup(data: dict) -> float:
    """The backward (dgrad and wgrad) GEMMs of the eight measured layers, bf16 over FP8 split accumulation."""
    return speedup([g for g in layer_gemms(data) if g["pass"] != "fprop"], SPLIT)


def rowwise_fast_speedup(data: dict) -> float:
    """The forward (fprop) GEMMs of the eight measured layers, bf16 over row-wise FP8 with fast accumulation (the
    kernel torchao's ``rowwise`` recipe runs its forward GEMM on)."""
    return speedup([g for g in layer_gemms(data) if g["pass"] == "fprop"], ROWWISE_FAST)


def speedup_curve(data: dict, passes: tuple[str, ...], key: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(flops, speedups)``: the points of ``HOPPER_FP8_CURVES`` (``hp_plugins/runtimes/hopper_fp8_curves.py``) for
    the GEMMs of *passes* timed as *key*. The layers' GEMMs (:func:`layer_gemms`) by octave of FLOPs (``2**b`` to
    ``2**(b + 1)``); a point per octave at the geometric mean of its GEMMs' FLOPs (rounded to 0.1 GFLOP), its speedup
    their summed bf16 seconds over their summed *key* seconds (:func:`speedup`, rounded to four places)."""
    import math

    octaves: dict = {}
    for g in layer_gemms(data):
        if g["pass"] in passes:
            octaves.setdefault(math.floor(math.log2(g["flops"]) + 1e-9), []).append(g)
    points = [(round(2 ** (sum(math.log2(g["flops"]) for g in gs) / len(gs)) / 1e8) * 1e8, round(speedup(gs, key), 4))
              for _, gs in sorted(octaves.items())]
    return tuple(p[0] for p in points), tuple(p[1] for p in points)


GROUPED_PASSES = ("forward", "dgrad", "wgrad")


def grouped_points(data: dict, passes: tuple[str, ...] = GROUPED_PASSES) -> list[dict]:
    """One point per grouped record and pass: ``torch._grouped_mm``'s forward seconds (``grouped``), its input- and
    weight-gradient seconds (``backward`` ``grouped_backward``, the same shapes and FLOPs)."""
    forward = [r for r in data["grouped"] if r["kind"] == "grouped"]
    backward = {(r["model"], r["linear"], r["experts"], r["rows_per_expert"]): r
                for r in data["backward"]["records"] if r["kind"] == "grouped_backward"}
    points = []
    for r in forward:
        b = backward[(r["model"], r["linear"], r["experts"], r["rows_per_expert"])]
        seconds = {"forward": r["grouped_mm_seconds"], "dgrad": b["dgrad_grouped_mm_seconds"],
                   "wgrad": b["wgrad_grouped_mm_seconds"]}
        points += [{**r, "pass": p, "seconds": seconds[p]} for p in passes]
    return points


def grouped_fit(data: dict, passes: tuple[str, ...] = GROUPED_PASSES, key: str = "seconds") -> tuple[float, float]:
    """``(grouped_matmul, grouped_half_rows)`` minimising the squared relative error of the time
    ``flops * (rows + half_rows) / rows / (peak * grouped_matmul)`` over the grouped points of *passes* (each pass of
    each record one point, as Blackwell's pair was fitted to SimuMax's forward, dgrad and wgrad measurements;
    half_rows on a 1-row grid; for a given half_rows the best efficiency is closed-form). *key* ``per_expert_mm_seconds``
    fits the forward per-expert ``torch.mm`` loop instead."""
    records = grouped_points(data, passes)
    best = None
    for half_rows in range(0, 2001):
        a = [r["flops"] * (r["rows_per_expert"] + half_rows) / r["rows_per_expert"] / PEAK_BF16 / r[key] for r in records]
        inverse = sum(a) / sum(x * x for x in a)
        loss = sum((x * inverse - 1) ** 2 for x in a)
        if best is None or loss < best[0]:
            best = (loss, 1 / inverse, half_rows)
    return round(best[1], 3), best[2]


def grouped_errors(data: dict, efficiency: float, half_rows: float) -> list[float]:
    """Fitted over measured time minus one, per grouped point (all three passes)."""
    return [r["flops"] * (r["rows_per_expert"] + half_rows) / r["rows_per_expert"] / (PEAK_BF16 * efficiency)
            / r["seconds"] - 1 for r in grouped_points(data)]


def main() -> None:
    from hp_plugins.runtimes.gemm_speedups import HOPPER_SPEEDUPS
    from hp_plugins.runtimes.timing_profiles import HOPPER_KERNELS, H100_GEMM_SHAPE

    data = load()
    gemms = layer_gemms(data)
    hp = dict((k, v.value) for k, v in HOPPER_SPEEDUPS)
    kernel = HOPPER_KERNELS.matmul.value
    print(f"hp: fp8 fast {hp['fp8_tensorwise']}, split {hp['fp8_tensorwise:split_accumulator']}; "
          f"matmul (kernel) {kernel}; grouped {HOPPER_KERNELS.grouped_matmul.value} / {HOPPER_KERNELS.grouped_half_rows.value} rows\n")
    print("| model | TP | pass | bf16 of peak | hp kernel | FP8 fast | FP8 split | FP8 rowwise |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    groups: dict = {}
    for g in gemms:
        groups.setdefault((g["model"], g["tp"], g["pass"]), []).append(g)
    for (model, tp, name), rows in groups.items():
        flops = sum(g["flops"] for g in rows)
        hp_seconds = sum(g["flops"] / (PEAK_BF16 * kernel * H100_GEMM_SHAPE.factor(g["m"], g["n"], g["k"])) for g in rows)
        print(f"| {model} | {tp} | {name} | {flops / sum(g['bf16_seconds'] for g in rows) / PEAK_BF16:.3f} | "
              f"{flops / hp_seconds / PEAK_BF16:.3f} | {speedup(rows, FAST):.3f} | {speedup(rows, SPLIT):.3f} | "
              f"{speedup(rows, ROWWISE):.3f} |")
    for name in ("fprop", "dgrad", "wgrad"):
        rows = [g for g in gemms if g["pass"] == name]
        print(f"- {name}, all layers: fast {speedup(rows, FAST):.4f}, split {speedup(rows, SPLIT):.4f}, "
              f"rowwise {speedup(rows, ROWWISE):.4f}")
    print(f"- backward (dgrad + wgrad), all layers, split: {split_accumulator_speedup(data):.4f}; "
          f"whole layers, rowwise: {speedup(gemms, ROWWISE):.4f}")
    print(f"- fprop, all layers, rowwise with fast accumulation: {rowwise_fast_speedup(data):.4f} "
          f"(hp {hp['fp8_rowwise']}); by octave {speedup_curve(data, ('fprop',), ROWWISE_FAST)[1]}")
    dense = [r for r in data["dense"] if r["kind"] == "dense"]
    top = max(r["flops"] / r["bf16_seconds"] for r in dense)
    mean = sum(g["flops"] for g in gemms) / sum(g["bf16_seconds"] for g in gemms)
    print(f"- dense bf16: best {top / 1e12:.1f} TFLOP/s ({top / PEAK_BF16:.3f}), layers' time-weighted {mean / 1e12:.1f} "
          f"({mean / PEAK_BF16:.3f})\n")

    grouped = [r for r in data["grouped"] if r["kind"] == "grouped"]
    points = grouped_points(data)
    e, h = HOPPER_KERNELS.grouped_matmul.value, HOPPER_KERNELS.grouped_half_rows.value
    print("| rows per expert | n | forward median (range) of peak | dgrad median (range) | wgrad median (range) | "
          "loop (forward) median | forward / dense mean | hp |")
    print("|---:|---:|---|---|---|---:|---:|---:|")
    for rows in sorted({r["rows_per_expert"] for r in grouped}):
        cells = []
        for name in GROUPED_PASSES:
            x = [p["flops"] / p["seconds"] / PEAK_BF16 for p in points if p["rows_per_expert"] == rows and p["pass"] == name]
            cells.append(f"{statistics.median(x):.3f} ({min(x):.3f}-{max(x):.3f})")
        sel = [r for r in grouped if r["rows_per_expert"] == rows]
        gm = statistics.median(r["flops"] / r["grouped_mm_seconds"] / PEAK_BF16 for r in sel)
        lp = statistics.median(r["flops"] / r["per_expert_mm_seconds"] / PEAK_BF16 for r in sel)
        print(f"| {rows} | {len(sel)} | {' | '.join(cells)} | {lp:.3f} | {gm * PEAK_BF16 / mean:.2f} | "
              f"{e * rows / (rows + h):.3f} |")
    for name in GROUPED_PASSES:
        x = [p["flops"] / p["seconds"] / PEAK_BF16 for p in points if p["pass"] == name]
        fe, fh = grouped_fit(data, (name,))
        print(f"- {name}: median {statistics.median(x):.3f} of peak over {len(x)} records; fit to it alone: "
              f"grouped_matmul {fe}, grouped_half_rows {fh}")
    fe, fh = grouped_fit(data)
    errors = grouped_errors(data, fe, fh)
    print(f"- fit to all three passes ({len(points)} points): grouped_matmul {fe}, grouped_half_rows {fh}; fitted time "
          f"{min(errors):+.0%} to {max(errors):+.0%} of the measured, mean |error| "
          f"{statistics.mean(abs(x) for x in errors):.1%}, median {statistics.median(abs(x) for x in errors):.1%}")
    fe, fh = grouped_fit(data, ("forward",), "per_expert_mm_seconds")
    print(f"- fit to the forward per-expert torch.mm loop: grouped_matmul {fe}, grouped_half_rows {fh}")
    host = data["host"][0]["seconds_per_launch"]
    per_mm = [r["per_expert_mm_host_seconds"] / r["experts"] for r in grouped]
    print(f"\n- host: {host * 1e6:.2f} us per eager add_ launch; per-expert loop {statistics.median(per_mm) * 1e6:.1f} us "
          f"per torch.mm (median; {min(per_mm) * 1e6:.1f}-{max(per_mm) * 1e6:.1f})")


if __name__ == "__main__":
    main()
