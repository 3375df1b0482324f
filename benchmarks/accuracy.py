"""Regenerate the measured-runs sections of docs/accuracy.md.

Run: ``python benchmarks/accuracy.py [CASES ...]`` (default: the public
Megatron-LM runs of ``tests/plugins/data/megatron_measured.json``).
Estimates every case with the runtime it names (``hp validate``) and rewrites
the text between the ``measured-runs`` markers (peak memory per stage) and the
``measured-steps`` markers (step time per measured micro-batch count) of
docs/accuracy.md, leaving the rest of the page alone. The file is replaced
atomically.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hp_core.api import build_registry
from hp_core.io.files import atomic_write
from hp_core.io.validate import load_cases, validate_case

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "accuracy.md"
DEFAULT_CASES = ROOT / "tests" / "plugins" / "data" / "megatron_measured.json"
START, END = "<!-- measured-runs:start -->", "<!-- measured-runs:end -->"
STEPS_START, STEPS_END = "<!-- measured-steps:start -->", "<!-- measured-steps:end -->"
GIB = 2**30


def section(results) -> str:
    lines = [
        START,
        "",
        "| case | runtime | stage | estimated GiB | measured GiB | error |",
        "|---|---|---|---|---|---|",
    ]
    worst = 0.0
    for result in results:
        for check in result.stages:
            worst = max(worst, abs(check.error))
            lines.append(
                f"| {result.name} | {result.runtime} | {check.stage} | {check.estimated_bytes / GIB:.2f} | "
                f"{check.measured_bytes / GIB:.2f} | {check.error * 100:+.2f}% |"
            )
    lines += ["", f"Largest error: {worst * 100:.2f}%.", "", END]
    return "\n".join(lines)


def steps_section(results) -> str:
    lines = [
        STEPS_START,
        "",
        "| case | runtime | micro-batches | estimated s | measured s | error |",
        "|---|---|---:|---:|---:|---:|",
    ]
    errors = []
    for result in results:
        for check in result.steps:
            errors.append(check.error)
            lines.append(
                f"| {result.name} | {result.runtime} | {check.micro_batches} | {check.estimated_seconds:.4f} | "
                f"{check.measured_seconds:.4f} | {check.error * 100:+.2f}% |"
            )
    if errors:
        mean = sum(abs(e) for e in errors) / len(errors)
        worst = max(errors, key=abs)
        lines += ["", f"Mean absolute error {mean * 100:.2f}%; largest {worst * 100:+.2f}% ({len(errors)} steps)."]
    lines += ["", STEPS_END]
    return "\n".join(lines)


def replace_between(text: str, start: str, end: str, new: str, heading: str) -> str:
    if start in text and end in text:
        return text[: text.index(start)] + new + text[text.index(end) + len(end):]
    return text.rstrip("\n") + f"\n\n## {heading}\n\n" + new + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("cases", nargs="*", type=Path, default=[DEFAULT_CASES])
    args = parser.parse_args()
    registry = build_registry(use_env=False)
    results = [validate_case(case, registry) for path in args.cases for case in load_cases(path, registry)]
    text = PAGE.read_text(encoding="utf-8") if PAGE.exists() else "# Accuracy\n"
    memory, steps = section(results), steps_section(results)
    text = replace_between(text, START, END, memory, "Measured runs")
    text = replace_between(text, STEPS_START, STEPS_END, steps, "Measured step times")

    def write(temporary: str) -> None:
        Path(temporary).write_text(text, encoding="utf-8")

    atomic_write(PAGE, write, ".md", flag=str(PAGE))
    print(memory)
    print(steps)


if __name__ == "__main__":
    main()
