"""Fit the whole-run Hopper and Ampere GEMM factor, Triton FlashAttention factor and FSDP1 per-unit time to llm-foundry's MPT rows.

Run: ``python benchmarks/fit_fsdp2_sustained.py [--write]``.

The data are llm-foundry's MPT benchmark rows (``tests/plugins/data/scale_measured_mpt.json``:
Composer FSDP, eager PyTorch, ``attn_impl: triton``; H100 80GB, A100 80GB and A100 40GB). Per
device class (``hopper``: the H100 rows; ``ampere``: both A100 tables) two factors are fitted
together, least squares in relative error of the step time, to the rows the file marks
``calibration`` (the split was fixed in the file before anything was priced): ``m`` on every
GEMM's time (the ``matmul`` efficiency is the kernel figure over ``m``) and ``a`` on the Triton
attention kernel's (its efficiencies are FlashAttention-2's over ``a``); every other figure as
stated (``tests/plugins/fsdp2_fit.py`` says how). Then, with ``m`` and ``a`` held at their stated
values, ``u``: FSDP1's per-unit serial time (every MPT row ran torch FSDP1 and states
``fsdp_implementation: fsdp1``), the seconds each body layer adds once per micro-batch, fitted to
the same calibration rows, by a rule that consults no row's error, held out or not: a
trainer-specific figure is fitted with the device-wide and profile-wide figures fitted before it
held, so adding it changes no figure any other row is priced with. The joint fit of all three is
printed beside it, with what it would do to the rows outside the MPT tables (information, not the
basis of the choice).
Printed: the fitted factors; the calibration
and held-out rows' errors apart, per device, with the kernel figures alone (``m = a = 1``) and
with the factors as ``hp_plugins/runtimes/timing_profiles.py`` states them (rounded to 3
decimals), without and with ``u``; the other ``fsdp2`` rows of ``scale_measured.json`` (torchtitan, NeMo AutoModel: none
runs Triton attention, so only ``m`` applies; all held out from this fit; the multi-node MoE class, added after this
report was stated, is not among them: ``fsdp2_fit.LATER_CLASSES``) before and after; and
each MPT model size held out in turn (``m`` and ``a``, then ``u`` with those held, fitted to the other sizes'
calibration rows).
Hopper's ``m`` is the device's: every profile's Hopper entry (``HOPPER``) states the kernel
figure over it, so the script also prints the 14 Megatron-Core H100 rows (``megatron``
runtime; none fitted to) at the kernel figure and with ``m``. Ampere's ``m`` stays the
``fsdp2`` profile's: the script prints the A100 Megatron-LM rows of Korthikanti et al. 2022
(``megatron-lm-2022``; none fitted to) at the kernel figure and with ``m``, whose mean absolute
error it raises.
``--write`` replaces the text between the ``fsdp2-fit`` markers of docs/time.md (atomically).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "plugins"))
sys.path.insert(0, str(ROOT / "benchmarks"))  # marked_section

from fsdp2_fit import (KERNEL_FIGURES, Priced, calibration, fit, fitted, joint, korthikanti_rows,  # noqa: E402
                       megatron_hopper_rows, mpt_rows, other_rows, size)

from hp_core.api import build_registry  # noqa: E402
from marked_section import write_section  # noqa: E402
from hp_plugins.runtimes.timing_profiles import (  # noqa: E402
    FSDP1_UNIT_SECONDS, FSDP2, FSDP2_AMPERE, HOPPER, TRITON_FLASH, TRITON_FLASH_FACTORS, WHOLE_RUN_MATMUL_FACTORS)

PAGE = ROOT / "docs" / "time.md"
START, END = "<!-- fsdp2-fit:start -->", "<!-- fsdp2-fit:end -->"
DEVICES = {"h100-sxm": "H100", "a100-80gb": "A100 80GB", "a100-40gb": "A100 40GB"}
LABELS = {"hopper": "hopper (H100)", "ampere": "ampere (A100 80GB and 40GB)"}


def _summary(errors: list[float]) -> str:
    within = sum(abs(e) <= 0.10 for e in errors)
    return (f"{sum(map(abs, errors)) / len(errors) * 100:.1f}% | {max(errors, key=abs) * 100:+.1f}% | "
            f"{within}/{len(errors)}")


def _mae(errors: list[float]) -> float:
    return sum(map(abs, errors)) / len(errors) * 100


def _megatron_class(row: dict) -> str:
    """The source a Megatron-Core H100 row comes from, by its id."""
    if row["id"].startswith("mlm-gpt"):
        return "Megatron-LM weak scaling, bf16"
    if "gpt-oss" in row["id"]:
        return "Megatron-Bridge GPT-OSS 120B, bf16"
    return "NeMo 24.07, FP8" if row["id"].startswith("nemo") else "Megatron-Bridge, FP8"


def _options(row: dict) -> str:
    return "as run" if row.get("options") or row.get("runtime_options") else "defaults"


def _before_after(title: str, label: str, priced: list[Priced], factor: float, classes) -> list[str]:
    """A before/after table of *priced* at the kernel figure and at *factor*, and a summary per class and in all."""
    lines = ["", title, "", f"| row | options | measured s | kernel figure s | error | {label} s | error |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for p in priced:
        lines.append(f"| {p.row['id']} | {_options(p.row)} | {p.measured:.3f} | {p.seconds(1.0, 1.0):.3f} | "
                     f"{p.error(1.0, 1.0) * 100:+.1f}% | {p.seconds(factor, 1.0):.3f} | {p.error(factor, 1.0) * 100:+.1f}% |")
    lines += ["", "| rows | count | kernel figure: mean | largest | within 10% | with m: mean | largest | within 10% |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    groups = [(name, [p for p in priced if classes(p.row) == name]) for name in dict.fromkeys(classes(p.row) for p in priced)]
    for name, group in groups + ([("all", priced)] if len(groups) > 1 else []):
        lines.append(f"| {name} | {len(group)} | {_summary([p.error(1.0, 1.0) for p in group])} | "
                     f"{_summary([p.error(factor, 1.0) for p in group])} |")
    return lines


def _held(rows: list[Priced], arch: str) -> list[Priced]:
    return [p for p in rows if p.architecture == arch and p.row["split"] == "held-out"]


def section(rows: list[Priced], others: list[Priced], megatron: list[Priced],
            korthikanti: list[Priced]) -> tuple[dict[str, tuple[float, float, float]], str]:
    """The fitted figures (unrounded) and the markdown between the markers (errors at the stated, rounded figures)."""
    stated_ma = {arch: (WHOLE_RUN_MATMUL_FACTORS[arch], TRITON_FLASH_FACTORS[arch]) for arch in KERNEL_FIGURES}
    fits = fitted(None, rows, stated_ma)
    stated = {arch: (*stated_ma[arch], FSDP1_UNIT_SECONDS[arch]) for arch in KERNEL_FIGURES}
    no_unit = {arch: (*stated_ma[arch], 0.0) for arch in KERNEL_FIGURES}  # fsdp2 as priced before FSDP1's unit time
    joints = {arch: joint(rows, arch) for arch in KERNEL_FIGURES}
    lines = [START, "", "| device class | calibration rows | GEMM factor m (fitted) | stated | `matmul` | Triton factor a (fitted) | "
             "stated | `triton_flash` forward / backward | FSDP1 unit time u (fitted, m and a as stated) | stated |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for arch, (m, a, u) in fits.items():
        base, (ms, as_, us) = KERNEL_FIGURES[arch], stated[arch]
        lines.append(
            f"| {LABELS[arch]} | {len(calibration(rows, arch))} | {m:.4f} | {ms:.3f} | {base.matmul.value:g} / {ms:.3f} = "
            f"{base.matmul.value / ms:.4f} | {a:.4f} | {as_:.3f} | {base.attention_forward.value:.4f} / {as_:.3f} = "
            f"{base.attention_forward.value / as_:.4f}; {base.attention_backward.value:.4f} / {as_:.3f} = "
            f"{base.attention_backward.value / as_:.4f} | {u * 1e3:.4f} ms | {us * 1e3:.3f} ms |")
    lines += ["", "MPT rows: mean absolute error, largest error and rows within 10%, with the kernel figures alone (m = a = 1, "
              "u = 0), with the stated m and a and no FSDP1 unit time (u = 0: the rows priced as FSDP2), and with the stated "
              "m, a and u (the rows as run, `fsdp_implementation: fsdp1`):", "",
              "| rows | split | kernels alone: mean | largest | within 10% | m, a: mean | largest | within 10% | "
              "m, a, u: mean | largest | within 10% |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    groups = [(f"{LABELS[arch]}, all", [p for p in rows if p.architecture == arch]) for arch in KERNEL_FIGURES]
    groups += [(DEVICES[hw], [p for p in rows if p.row["hardware"] == hw]) for hw in DEVICES]
    for label, group in groups:
        for split in ("calibration", "held-out"):
            chosen = [p for p in group if p.row["split"] == split]
            alone = [p.error(1.0, 1.0) for p in chosen]
            without = [p.error(*no_unit[p.architecture]) for p in chosen]
            after = [p.error(*stated[p.architecture]) for p in chosen]
            lines.append(f"| {label} | {split} | {_summary(alone)} | {_summary(without)} | {_summary(after)} |")
    lines += _choice(rows, stated, joints, others, megatron, korthikanti)
    lines += ["", "The other `fsdp2` rows (`scale_measured.json`; none runs Triton attention, so only m applies; all held "
              "out from this fit, whatever their split in that file):", "",
              "| row | attention | measured s | kernels alone s | error | with m s | error |", "|---|---|---:|---:|---:|---:|---:|"]
    before, after = [], []
    for p in others:
        ms, as_, _ = stated[p.architecture]
        e0, e1 = p.error(1.0, 1.0), p.error(ms, as_)
        before.append(e0)
        after.append(e1)
        kernel = p.row.get("options", {}).get("attention_kernel", "sdpa")
        lines.append(f"| {p.row['id']} | {kernel} | {p.measured:.3f} | {p.seconds(1.0, 1.0):.3f} | {e0 * 100:+.1f}% | "
                     f"{p.seconds(ms, as_):.3f} | {e1 * 100:+.1f}% |")
    lines += ["", f"- Those {len(others)} rows: mean absolute error {_mae(before):.1f}% with the kernel figures alone, "
              f"{_mae(after):.1f}% with m; within 10%: {sum(abs(e) <= 0.10 for e in before)} and "
              f"{sum(abs(e) <= 0.10 for e in after)}."]
    lines += _before_after(
        f"Hopper's m on the `megatron` runtime: the {len(megatron)} Megatron-Core H100 rows (`scale_measured.json`'s "
        "validated `mlm-gpt` rows, `scale_measured_mbridge.json`'s H100 GPT-OSS rows, `fp8_measured_runs.json`'s H100 rows), "
        "as run where the row states its trainer's options, else the runtime's defaults; none is fitted to. The "
        f"Hopper `matmul` at the kernel figure {KERNEL_FIGURES['hopper'].matmul.value:g} and at "
        f"{KERNEL_FIGURES['hopper'].matmul.value:g} / m = {HOPPER.matmul.value:.4f} (every profile's Hopper entry):",
        "with m", megatron, WHOLE_RUN_MATMUL_FACTORS["hopper"], _megatron_class)
    lines += _before_after(
        f"Ampere's m on the A100 Megatron-LM rows of Korthikanti et al. 2022 (`megatron-lm-2022`, eager attention, as "
        f"`tests/plugins/test_step_time_cases.py` prices them; none is fitted to): the Ampere `matmul` at the kernel "
        f"figure {KERNEL_FIGURES['ampere'].matmul.value:g} and at {KERNEL_FIGURES['ampere'].matmul.value:g} / m = "
        f"{FSDP2_AMPERE.matmul.value:.4f}; the other profiles keep the kernel figure unless this does not raise the "
        "mean absolute error:",
        "with m", korthikanti, WHOLE_RUN_MATMUL_FACTORS["ampere"], lambda row: "Korthikanti et al. 2022, Table 5")
    lines += ["",
              "Each MPT model size held out in turn: m and a fitted to the other sizes' calibration rows (u = 0), then u "
              "to them with those m and a held; the size's own rows, calibration and held-out, priced with those m and a "
              "(u = 0), then with those m, a and u, and with the stated figures:", "",
              "| device class | size | rows | m | a | mean absolute error | largest | with the stated m, a | u ms | "
              "mean absolute error | largest | with the stated m, a, u |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for arch, (m, a, u) in fits.items():
        mine = [p for p in rows if p.architecture == arch]
        for name in sorted({size(p.row) for p in mine}, key=lambda s: float(s.split("-")[1][:-1]) * (1e3 if s.endswith("b") else 1)):
            rest = [p for p in calibration(mine, arch) if size(p.row) != name]
            own_rows = [p for p in mine if size(p.row) == name]
            mo, ao, _ = fit(rest, start=(m, a, 0.0), fixed=("u",))
            uo = fit(rest, start=(mo, ao, u), fixed=("m", "a"))[2]  # u with the size's own m and a held, not the stated
            own = [p.error(mo, ao) for p in own_rows]
            own_u = [p.error(mo, ao, uo) for p in own_rows]
            lines.append(f"| {arch} | {name} | {len(own)} | {mo:.3f} | {ao:.3f} | {_mae(own):.1f}% | "
                         f"{max(own, key=abs) * 100:+.1f}% | {_mae([p.error(*no_unit[arch]) for p in own_rows]):.1f}% | "
                         f"{uo * 1e3:.3f} | {_mae(own_u):.1f}% | {max(own_u, key=abs) * 100:+.1f}% | "
                         f"{_mae([p.error(*stated[arch]) for p in own_rows]):.1f}% |")
    lines += ["", "The figures as `hp_plugins/runtimes/timing_profiles.py` states them:", ""]
    for entry, title in ((HOPPER, "**every profile, hopper** (`HOPPER`: every figure as the **hopper** kernel entry "
                                  "`HOPPER_KERNELS` except `matmul` and `matmul_whole_run_factor`)"),
                         (FSDP2_AMPERE, "**fsdp2, ampere** (`FSDP2_AMPERE`: every figure as **ampere** except `matmul` and `matmul_whole_run_factor`)")):
        factor = entry.matmul_whole_run_factor
        lines += [title, "", f"- `matmul` = {entry.matmul.value:.6g}: {entry.matmul.source}",
                  f"- `matmul_whole_run_factor` = {factor.value:.6g}: {factor.source}", ""]
    for arch, (forward, backward) in TRITON_FLASH.items():
        lines += [f"**fsdp2 `attention_kernel=triton_flash`, {arch}** (`TRITON_FLASH`)", "",
                  f"- `attention_forward` = {forward.value:.6g}: {forward.source}",
                  f"- `attention_backward` = {backward.value:.6g}: {backward.source}", ""]
    for arch in KERNEL_FIGURES:
        figure = FSDP2.device(arch).fsdp1_unit_seconds
        lines += [f"**fsdp2 `fsdp_implementation=fsdp1`, {arch}** (`fsdp1_unit_seconds` of fsdp2's {arch} entry)", "",
                  f"- `fsdp1_unit_seconds` = {figure.value:.6g}: {figure.source}", ""]
    lines.pop()
    lines += ["", END]
    return fits, "\n".join(lines)


def _choice(rows: list[Priced], stated: dict, joints: dict, others: list[Priced], megatron: list[Priced],
            korthikanti: list[Priced]) -> list[str]:
    """The two ways of fitting u, side by side, and which is stated: (a) m, a and u together, (b) u alone with m and a
    as stated. (b), by a rule that consults no row's error: a trainer-specific
    figure (FSDP1's u) is fitted with the device-wide and profile-wide figures fitted before it (m, a) held, so adding
    it changes no figure any other row is priced with. What (a) would do to the rows outside the MPT tables is printed
    as a consequence, not as the basis of the choice."""
    lines = ["", "Two ways of fitting u: (a) m, a and u together; (b) u alone, m and a as stated (no row other than "
             "the MPT rows moves). Mean absolute error, largest error and rows within 10%:", "",
             "| device class | fit | m | a | u ms | calibration: mean | largest | within 10% | held-out: mean | largest | "
             "within 10% |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for arch in KERNEL_FIGURES:
        for name, x in (("(a) joint", joints[arch]), ("(b) u alone", stated[arch])):
            lines.append(f"| {LABELS[arch]} | {name} | {x[0]:.4f} | {x[1]:.4f} | {x[2] * 1e3:.3f} | "
                         f"{_summary([p.error(*x) for p in calibration(rows, arch)])} | "
                         f"{_summary([p.error(*x) for p in _held(rows, arch)])} |")
    m_a, m_b = joints["hopper"][0], stated["hopper"][0]
    mega_a, mega_b = _mae([p.error(m_a, 1.0) for p in megatron]), _mae([p.error(m_b, 1.0) for p in megatron])
    other_a = _mae([p.error(*joints[p.architecture]) for p in others])
    other_b = _mae([p.error(*stated[p.architecture]) for p in others])
    tt = [p for p in others if p.row["id"].startswith("tt24-") and p.architecture == "ampere"]
    tt_a, tt_b = _mae([p.error(*joints[p.architecture]) for p in tt]), _mae([p.error(*stated[p.architecture]) for p in tt])
    kor_a = _mae([p.error(joints["ampere"][0], 1.0) for p in korthikanti])
    kor_b = _mae([p.error(stated["ampere"][0], 1.0) for p in korthikanti])
    lines += ["", "- Stated: (b), for both device classes, by a rule that consults no row's error, "
              "held out or not: a trainer-specific figure (FSDP1's u) is fitted with the device-wide and profile-wide figures "
              "fitted before it (m, a) held, so adding it changes no figure any other row is priced with.",
              f"- Consequences of (a), for information only (not the basis of the choice; none of these rows is fitted "
              f"to): Hopper's m is every profile's, and the {len(megatron)} Megatron-Core H100 rows (below) have a mean "
              f"absolute error of {mega_b:.1f}% at (b)'s m {m_b:.3f} and {mega_a:.1f}% at (a)'s {m_a:.3f}; the "
              f"{len(others)} other `fsdp2` rows (below; none runs FSDP1) {other_b:.1f}% and {other_a:.1f}%, of which "
              f"torchtitan's {len(tt)} A100 rows (`tt24-*`, at fsdp2's Ampere m {stated['ampere'][0]:.3f} and "
              f"{joints['ampere'][0]:.3f}) {tt_b:.1f}% and {tt_a:.1f}%; the Korthikanti A100 rows (below) at those two "
              f"Ampere m {kor_b:.1f}% and {kor_a:.1f}%."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="replace the fsdp2-fit section of docs/time.md")
    args = parser.parse_args()
    registry = build_registry(use_env=False)
    fits, text = section(mpt_rows(registry), other_rows(registry), megatron_hopper_rows(registry), korthikanti_rows(registry))
    print(text)
    for arch, (m, a, u) in fits.items():
        stated = (WHOLE_RUN_MATMUL_FACTORS[arch], TRITON_FLASH_FACTORS[arch], FSDP1_UNIT_SECONDS[arch])
        # m and a to 3 decimals, u to the microsecond
        if abs(m - stated[0]) > 5e-4 + 1e-9 or abs(a - stated[1]) > 5e-4 + 1e-9 or abs(u - stated[2]) > 5e-7 + 1e-12:
            print(f"note: {arch} fits m {m:.4f}, a {a:.4f}, u {u:.7f}; whole_run.py states {stated}: update it", file=sys.stderr)
    if args.write:
        write_section(PAGE, START, END, text)


if __name__ == "__main__":
    main()
