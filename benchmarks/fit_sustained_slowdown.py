"""Fit the ``megatron-te`` Blackwell ``sustained_slowdown`` to measured Megatron-LM step times on B200.

Run: ``python benchmarks/fit_sustained_slowdown.py [--write]``.

The data are the 43 step times of SimuMax v1.2's B200 perf-vs-real table
(``tests/plugins/data/simumax_b200_runs.json``; Megatron-Core 0.14, TE 2.11,
8x B200, Llama-3-70B, Llama-3-405B, DeepSeek-V2 and a DeepSeek-V3-shaped MoE,
TP/PP/DP/CP/EP layouts, 4 to 32 micro-batches). Every row is priced with the
``megatron`` runtime and :data:`~hp_plugins.runtimes.timing_profiles.MEGATRON_TE` with
no slowdown (each kernel and collective as its microbenchmark measured it).
The factor is fitted (least squares in relative error) to the 33 rows whose
layout is NOT among the four of ``megatron_measured.json``; those 10 rows are
held out and only checked. Also printed: each model family held out in turn
(the factor fitted to the other three). ``--write`` replaces the text between
the ``simumax-runs`` markers of docs/time.md (atomically) with the printout.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "plugins"))
sys.path.insert(0, str(ROOT / "benchmarks"))  # marked_section

from simumax_runs import fitted_slowdown, simumax_rows, unslowed  # noqa: E402

from hp_core.api import build_registry  # noqa: E402
from marked_section import write_section  # noqa: E402
from hp_core.api import step_time  # noqa: E402
from hp_plugins.runtimes.timing_profiles import MEGATRON_TE  # noqa: E402

PAGE = ROOT / "docs" / "time.md"
START, END = "<!-- simumax-runs:start -->", "<!-- simumax-runs:end -->"


def priced_rows(registry) -> list[tuple[dict, float, dict[str, float]]]:
    """``(row, estimated step seconds with no slowdown, features)`` for every row.

    The features are what the other forms compared in :func:`alternatives` scale:
    the slowest stage's compute (recompute included) and exposed communication
    over the step, the pipeline's micro-batch slots ``m + pp - 1`` and those
    times the layers per stage.
    """
    hardware = registry.hardware_preset("b200-simumax").spec
    profile = unslowed(MEGATRON_TE)
    priced = []
    for row, model, parallel in simumax_rows(registry):
        t = step_time(model, parallel, registry=registry, hardware=hardware, runtime="megatron", profile=profile)
        slots = t.micro_batches + parallel.pp - 1
        features = {
            "compute": t.compute_seconds + t.recompute_seconds,
            "communication": t.communication_seconds,
            "slots": float(slots),
            "layer_slots": float(slots * row["layers"] / parallel.pp),
        }
        priced.append((row, t.step_seconds, features))
    return priced


def _solve(rows, columns) -> list[float]:
    """``b`` minimising ``sum(((e + sum_j b_j x_j - m) / m) ** 2)``: the normal equations (one or two unknowns)."""
    a = [[0.0] * len(columns) for _ in columns]
    y = [0.0] * len(columns)
    for row, e, x in rows:
        m = row["real_ms"] / 1e3
        v = [x[c] / m for c in columns]
        for i in range(len(columns)):
            y[i] += v[i] * (m - e) / m
            for j in range(len(columns)):
                a[i][j] += v[i] * v[j]
    if len(columns) == 1:
        return [y[0] / a[0][0]]
    det = a[0][0] * a[1][1] - a[0][1] * a[1][0]
    return [(y[0] * a[1][1] - a[0][1] * y[1]) / det, (a[0][0] * y[1] - a[1][0] * y[0]) / det]


FORMS = {
    "a factor on the whole step (the one stated)": ("step",),
    "a factor on compute alone": ("compute",),
    "a factor on compute and one on communication": ("compute", "communication"),
    "a fixed time per micro-batch slot": ("slots",),
    "a fixed time per layer and micro-batch slot": ("layer_slots",),
}


def alternatives(rows) -> list[str]:
    """Each form fitted to the rows not held out, then with each model family held out in turn (its rows predicted by the rest)."""
    def with_step(x, e):
        return {**x, "step": e}

    rows = [(r, e, with_step(x, e)) for r, e, x in rows]
    families = sorted({r["model"] for r, _, _ in rows})
    lines = []
    for label, columns in FORMS.items():
        fitted = [t for t in rows if not t[0]["in_public_case_file"]]
        b = _solve(fitted, columns)

        def error(t, b=b):
            r, e, x = t
            return (e + sum(bj * x[c] for bj, c in zip(b, columns)) - r["real_ms"] / 1e3) / (r["real_ms"] / 1e3)

        held = [error(t) for t in rows if t[0]["in_public_case_file"]]
        out = []
        for family in families:
            bf = _solve([t for t in rows if t[0]["model"] != family], columns)
            out += [error(t, bf) for t in rows if t[0]["model"] == family]
        rms = (sum(v * v for v in out) / len(out)) ** 0.5
        lines.append(
            f"- {label}: held-out ten {_summary(held)}; each family held out in turn, root-mean-square error "
            f"{rms * 100:.2f}%, largest {max(out, key=abs) * 100:+.2f}%."
        )
    return lines


def _summary(errors: list[float]) -> str:
    return f"mean absolute error {sum(abs(e) for e in errors) / len(errors) * 100:.2f}%, largest {max(errors, key=abs) * 100:+.2f}%"


def section(priced: list[tuple[dict, float, dict[str, float]]]) -> tuple[float, str]:
    """The fitted factor and the markdown between the markers (the table uses the factor as stated, to 4 decimals)."""
    rows = [(r, e) for r, e, _ in priced]
    fit_pairs = [(e, r["real_ms"] / 1e3) for r, e in rows if not r["in_public_case_file"]]
    fitted = fitted_slowdown(fit_pairs)
    k = round(fitted, 4)
    lines = [
        START,
        "",
        f"Fitted factor: **{k:.4f}** ({len(fit_pairs)} rows fitted, {len(rows) - len(fit_pairs)} held out).",
        "",
        "| run | micro-batches | measured ms | kernels alone ms | error | with the factor ms | error | held out |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    errors: dict[bool, list[float]] = {True: [], False: []}
    before: list[float] = []
    for row, e in rows:
        measured = row["real_ms"]
        alone = (e * 1e3 - measured) / measured
        after = (k * e * 1e3 - measured) / measured
        before.append(alone)
        errors[row["in_public_case_file"]].append(after)
        name = row["case"].removesuffix("_cef")
        lines.append(
            f"| {name} | {row['micro_batch_count']} | {measured:.1f} | {e * 1e3:.1f} | {alone * 100:+.1f}% | "
            f"{k * e * 1e3:.1f} | {after * 100:+.1f}% | {'yes' if row['in_public_case_file'] else ''} |"
        )
    lines += [
        "",
        f"- Kernels alone, all {len(before)} rows: {_summary(before)}.",
        f"- With the factor, the {len(errors[False])} fitted rows: {_summary(errors[False])}.",
        f"- With the factor, the {len(errors[True])} held-out rows: {_summary(errors[True])}.",
    ]
    for family in sorted({r["model"] for r, _ in rows}):
        k_other = fitted_slowdown([(e, r["real_ms"] / 1e3) for r, e in rows if r["model"] != family])
        own = [(k_other * e * 1e3 - r["real_ms"]) / r["real_ms"] for r, e in rows if r["model"] == family]
        lines.append(f"- {family} held out (factor {k_other:.4f} fitted to the other models): its {len(own)} rows' {_summary(own)}.")
    lines += ["", "Other forms, fitted the same way (kernels alone plus the form's terms):", ""]
    lines += alternatives(priced)
    lines += ["", END]
    return fitted, "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="replace the simumax-runs section of docs/time.md")
    args = parser.parse_args()
    _, text = section(priced_rows(build_registry(use_env=False)))
    print(text)
    if args.write:
        write_section(PAGE, START, END, text)


if __name__ == "__main__":
    main()
