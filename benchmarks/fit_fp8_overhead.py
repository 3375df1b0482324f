"""Fit what Hopper FP8 GEMMs cost beyond "bf16 time / measured speedup" to the DGX Cloud calibration rows, and judge it.

Run: ``python benchmarks/fit_fp8_overhead.py [--write]``.

hp prices a Hopper FP8 GEMM at its bf16 time over the kernel's measured speedup (docs/precision.md, "Time") and
its quantization as memory-bound passes. Against NVIDIA's DGX Cloud benchmarking rows (``dgxc_rows`` of
tests/plugins/data/fp8_measured_runs.json) that is too fast in FP8 where the same rows' bf16 twins are not, and the
more so the smaller the rank's GEMMs. The form tried here is a fixed time per FP8 GEMM call, counted from what
Transformer Engine runs per quantized linear layer and micro-batch (``transformer_engine/pytorch/module/linear.py``
at v1.11, the TE of the NeMo 24.09 container: the forward casts its input (``fp8_cast_transpose_fused``) and calls
``fp8_gemm`` once; the backward casts the output gradient and calls ``fp8_gemm`` twice, dgrad and wgrad;
``grouped_linear.py`` casts all experts' inputs in one ``fp8_multi_cast_transpose_fused`` and calls
``fp8_grouped_gemm`` once per pass): per layer, forward ``calls * t``, backward ``2 * calls * t``, where ``calls``
is the layer's quantized dense GEMMs plus one per grouped expert GEMM (a variant counts one per expert). Beside it,
as a control, a factor on every FP8 GEMM's time (the same as lowering the measured speedups). ``t`` (and the factor)
is fitted, least squares in relative error of the step time, to the 58 H100 rows ``dgxc_split_rule`` made
``calibration`` before any row was priced, and judged on the 57 held-out H100 rows and on every other H100 FP8
collection ``benchmarks/fp8_runs.py`` prints, none fitted to: Megatron-Bridge's dense rows (as run where the row
states its options), its Qwen3 MoE rows (the three the host-time fit was fitted to apart), llm-foundry's MPT FP8
rows, torchtitan's and torchao's Float8 tensorwise rows and the NeMo 24.07 performance summary (with the ``megatron`` runtime's
defaults, and with the options NeMo-Framework-Launcher 24.07's yaml states, ``launcher_options``). The form is adopted only if the
held-out rows improve and no other collection's mean absolute error rises by more than :data:`NOISE`.

The form is priced by wrapping the engine's per-layer low-precision GEMM time
(``hp_core.engine.timing.layer._low_precision_seconds``) for the duration of a trial (:func:`trial`): the model
itself states no such time. Rows on devices other than the H100 are not judged (every fit row is an H100's).
Printed: per collection the rows' mean absolute (and mean signed) error, hp as stated and under each form at its
fitted value, whether each form passes the rule, and the held-out rows by model under the per-call form.
``--write`` replaces the text between the ``fp8-overhead-fit`` markers of docs/precision.md (atomically).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fp8_dgxc  # noqa: E402
import fp8_runs  # noqa: E402
from marked_section import write_section  # noqa: E402

from hp_core.api import build_registry  # noqa: E402
from hp_core.engine.timing import layer as _layer  # noqa: E402

ROOT = HERE.parent
PAGE = ROOT / "docs" / "precision.md"
START, END = "<!-- fp8-overhead-fit:start -->", "<!-- fp8-overhead-fit:end -->"
H100 = "h100-sxm"
# The largest rise of a judged collection's mean absolute error (percentage points) read as noise, stated before the fit.
NOISE = 0.5
# The reference value each form is priced at to find its slope (the step time is priced again at the fitted value).
PROBE = {"call": 20e-6, "call_per_expert": 20e-6, "factor": 0.05}
FORMS = {
    "call": "a fixed time per FP8 GEMM call (a grouped expert GEMM one call)",
    "call_per_expert": "a fixed time per FP8 GEMM call, one per expert",
    "factor": "control: a factor on every FP8 GEMM's time (a lower speedup)",
}


def fp8_gemm_calls(work, dense_flops: float, per_expert: bool = False) -> float:
    """The FP8 GEMM calls of one pass of a layer: its known quantized dense GEMM shapes scaled to its quantized dense
    FLOPs (the layer lists each distinct shape once, ``LayerWork.gemms``; exact where no two share a shape), plus one
    per grouped expert GEMM (``fp8_grouped_gemm``), or one per expert (*per_expert*)."""
    high = list(work.high_precision_gemms)
    low = list(work.gemms)
    for gemm in high:
        if gemm in low:
            low.remove(gemm)
    high_flops = sum(2.0 * rows * out * inp for rows, out, inp in high)
    listed = sum(2.0 * rows * out * inp for rows, out, inp in low)
    calls = (dense_flops - high_flops) / listed * len(low) if listed and dense_flops > high_flops else 0.0
    if work.expert_gemms:
        calls += sum(n for n, *_ in work.expert_gemms) if per_expert else len(work.expert_gemms)
    return calls


@contextlib.contextmanager
def trial(form: str, value: float):
    """The engine with *form* at *value* added to every low-precision layer's GEMM time, restored on exit."""
    original = _layer._low_precision_seconds

    def priced(dense, grouped, work, r, mm_fwd, mm_bwd):
        fwd, bwd, q_fwd, q_bwd = original(dense, grouped, work, r, mm_fwd, mm_bwd)
        if form == "factor":
            return fwd * (1 + value), bwd * (1 + value), q_fwd, q_bwd
        calls = fp8_gemm_calls(work, dense, per_expert=form == "call_per_expert")
        return fwd + calls * value, bwd + 2 * calls * value, q_fwd, q_bwd

    _layer._low_precision_seconds = priced
    try:
        yield
    finally:
        _layer._low_precision_seconds = original


def collections(registry) -> dict[str, list[dict]]:
    """Every judged H100 FP8 row, by collection: its id, measured seconds, a pricer of its FP8 step time and, where the
    collection states one, its bf16 baseline measured and priced (unchanged by any form: no FP8 GEMM)."""
    data = json.loads(fp8_runs.DATA.read_text(encoding="utf-8"))
    found: dict[str, list[dict]] = {}

    def add(name, row_id, measured, price, base=None):
        found.setdefault(name, []).append({"id": row_id, "measured": measured, "price": price, "base": base})

    for row in fp8_dgxc.rows():
        if row["hardware"] == H100:
            base = (row["bf16"]["step_seconds"], fp8_dgxc.price(row, registry, bf16=True).step_seconds)
            add(f"dgxc {row['split']}", row["id"], row["step_seconds"], lambda row=row: fp8_dgxc.price(row, registry).step_seconds, base)
    for row in data["rows"]:
        if row["hardware"] == H100:
            add("Megatron-Bridge dense", row["id"], fp8_runs.measured_seconds(row),
                lambda row=row: fp8_runs.price(row, registry, as_run=bool(row.get("runtime_options"))).step_seconds)
    for row in data["moe_rows"]:
        if row["hardware"] == H100:
            name = "Megatron-Bridge MoE" + (" (the host fit's rows)" if row["split"] == "calibration" else "")
            add(name, row["id"], fp8_runs.measured_seconds(row), lambda row=row: fp8_runs.price_moe(row, registry).step_seconds)
    for row in data["fsdp_rows"]:
        if row["hardware"] == H100:
            add("MPT FP8", row["id"], row["global_batch_tokens"] / row["tokens_per_second"],
                lambda row=row: fp8_runs._price_fsdp(row, registry, row["recipe"]).step_seconds)
    sc = fp8_runs._scale_cases()
    for row in data["torchtitan_rows"]:
        if row["recipe"] != "torchao-float8-tensorwise":  # the rows it was judged on: rowwise's are priced since 2026-12-05
            continue
        base_row, in_scale = fp8_runs.torchtitan_baseline(row, data)
        priced = sc.estimated(base_row, registry) if in_scale else fp8_runs.price_torchtitan(base_row, registry)
        add("torchtitan Float8", row["id"], sc.measured_seconds(row), lambda row=row: fp8_runs.price_torchtitan(row, registry).step_seconds,
            (sc.measured_seconds(base_row), priced.step_seconds))
    for row in data["nemo_rows"]:
        if row["hardware"] == H100 and row["collection"] == "nemo-24.07-summary":
            measured = fp8_runs.nemo_measured_seconds(row)
            add("NeMo 24.07", row["id"], measured, lambda row=row: fp8_runs.price(row, registry).step_seconds)
            if "launcher_options" in row:  # as benchmarks/fp8_nemo.py nemo_results prices them (an assumption)
                add("NeMo 24.07, launcher options", row["id"], measured, lambda row=row: fp8_runs.price(
                    dict(row, runtime_options=row["launcher_options"]), registry, as_run=True).step_seconds)
    return found


def errors(found: dict[str, list[dict]]) -> dict[str, list[tuple[float, float | None]]]:
    """Each row's relative error and, with a baseline, hp's FP8 speedup over the measured one less 1, under the engine now."""
    out = {}
    for name, rows in found.items():
        out[name] = []
        for r in rows:
            hp = r["price"]()
            gap = None if r["base"] is None else (r["base"][1] / hp) / (r["base"][0] / r["measured"]) - 1
            out[name].append((hp / r["measured"] - 1, gap))
    return out


def fit(found, before, form: str) -> float:
    """The form's value minimising the calibration rows' squared relative errors (the step time is linear in it: priced
    at :data:`PROBE` for the slope)."""
    probe = PROBE[form]
    with trial(form, probe):
        probed = errors({"dgxc calibration": found["dgxc calibration"]})["dgxc calibration"]
    num = den = 0.0
    for (e0, _), (e1, _) in zip(before["dgxc calibration"], probed):
        slope = (e1 - e0) / probe
        num -= e0 * slope
        den += slope * slope
    return num / den


def _mae(values) -> float:
    values = list(values)
    return sum(map(abs, values)) / len(values) * 100


def _cell(rows) -> str:
    errs = [e for e, _ in rows]
    text = f"{_mae(errs):.1f}% ({sum(errs) / len(errs) * 100:+.1f}%)"
    gaps = [g for _, g in rows if g is not None]
    return text + (f", speedup {_mae(gaps):.1f}%" if gaps else "")


def _value(form: str, value: float) -> str:
    return f"{value * 1e6:.1f} us per call" if form != "factor" else f"{value:+.2%} on the FP8 GEMM time"


def adopted(before, after) -> tuple[bool, list[str]]:
    """The rule stated before the fit: the held-out rows' mean absolute error falls and no other collection's rises by
    more than :data:`NOISE` points; the collections that break it."""
    worse = [name for name in before if name not in ("dgxc calibration", "dgxc held_out")
             and _mae(e for e, _ in after[name]) - _mae(e for e, _ in before[name]) > NOISE]
    held = _mae(e for e, _ in after["dgxc held_out"]) < _mae(e for e, _ in before["dgxc held_out"])
    return held and not worse, worse + ([] if held else ["dgxc held_out"])


def section(registry) -> tuple[dict[str, float], str]:
    """The fitted value of each form and the markdown between the markers."""
    found = collections(registry)
    before = errors(found)
    values, results = {}, {}
    for form in FORMS:
        values[form] = fit(found, before, form)
        with trial(form, values[form]):
            results[form] = errors(found)
    if errors(found) != before:  # every trial restored the engine it wrapped
        raise RuntimeError("a trial left the engine's low-precision pricing changed")
    lines = [START, "", "Per collection: rows, then mean absolute error (mean signed error), and where the collection "
             "states a bf16 baseline the mean absolute gap of hp's FP8 speedup over the measured one; hp as stated, then "
             "each form at its value fitted to the dgxc calibration rows.", "",
             "| collection | rows | hp as stated | " + " | ".join(f"{FORMS[f]}: {_value(f, values[f])}" for f in FORMS) + " |",
             "|---|---:|---|" + "---|" * len(FORMS)]
    for name in found:
        lines.append(f"| {name}{' (fitted)' if name == 'dgxc calibration' else ''} | {len(found[name])} | {_cell(before[name])} | "
                     + " | ".join(_cell(results[f][name]) for f in FORMS) + " |")
    lines.append("")
    for form in FORMS:
        ok, broken = adopted(before, results[form])
        verdict = "passes" if ok else "fails: " + ", ".join(
            f"{n} {_mae(e for e, _ in before[n]):.1f}% to {_mae(e for e, _ in results[form][n]):.1f}%" for n in broken)
        lines.append(f"- {FORMS[form]}, {_value(form, values[form])}: the rule (held-out rows better, no other collection "
                     f"more than {NOISE} points worse) {verdict}.")
    lines += ["", f"The held-out rows by model, hp as stated and with {FORMS['call']}:", ""]
    lines += _by_model(found["dgxc held_out"], before["dgxc held_out"], results["call"]["dgxc held_out"])
    lines += ["", END]
    return values, "\n".join(lines)


def _by_model(rows, before, after) -> list[str]:
    """One line per model of the dgxc rows (25.02.01's 70B, at CP 1 with twice the tokens per GEMM, apart)."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        model = r["id"].split("-h100-")[1].rsplit("-fp8", 1)[0]
        groups.setdefault(model + (" (25.02.01, CP 1)" if "25.02.01" in r["id"] and "70b" in model else ""), []).append(i)
    lines = []
    for model, at in groups.items():
        lines.append(f"- {model}: {len(at)} rows, mean absolute error {_mae(before[i][0] for i in at):.1f}% to "
                     f"{_mae(after[i][0] for i in at):.1f}%, FP8 speedup gap {_mae(before[i][1] for i in at):.1f}% to "
                     f"{_mae(after[i][1] for i in at):.1f}%.")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="replace the fp8-overhead-fit section of docs/precision.md")
    args = parser.parse_args()
    _, text = section(build_registry(use_env=False))
    print(text)
    if args.write:
        write_section(PAGE, START, END, text)


if __name__ == "__main__":
    main()
