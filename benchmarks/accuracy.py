"""Regenerate the measured-runs section of docs/accuracy.md.

Run: ``python benchmarks/accuracy.py [CASES ...]`` (default: the public
``megatron_measured.json`` next to the repository, ``../shared/cases/``).
Estimates every case with the runtime it names (``hp validate``) and rewrites
the text between the ``measured-runs`` markers of docs/accuracy.md, leaving
the rest of the page alone. The file is replaced atomically.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from hp_core.api import build_registry
from hp_core.validate import load_cases, validate_case

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "accuracy.md"
DEFAULT_CASES = ROOT.parent / "shared" / "cases" / "megatron_measured.json"
START, END = "<!-- measured-runs:start -->", "<!-- measured-runs:end -->"
GIB = 2**30


def section(paths: list[Path]) -> str:
    registry = build_registry(use_env=False)
    lines = [
        START,
        "",
        "| case | runtime | stage | estimated GiB | measured GiB | error |",
        "|---|---|---|---|---|---|",
    ]
    worst = 0.0
    for path in paths:
        for case in load_cases(path, registry):
            result = validate_case(case, registry)
            for check in result.stages:
                worst = max(worst, abs(check.error))
                lines.append(
                    f"| {case.name} | {case.runtime} | {check.stage} | {check.estimated_bytes / GIB:.2f} | "
                    f"{check.measured_bytes / GIB:.2f} | {check.error * 100:+.2f}% |"
                )
    lines += ["", f"Largest error: {worst * 100:.2f}%.", "", END]
    return "\n".join(lines)


def write_atomically(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("cases", nargs="*", type=Path, default=[DEFAULT_CASES])
    args = parser.parse_args()
    text = PAGE.read_text(encoding="utf-8") if PAGE.exists() else "# Accuracy\n"
    new = section(args.cases)
    if START in text and END in text:
        text = text[: text.index(START)] + new + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n## Measured runs\n\n" + new + "\n"
    write_atomically(PAGE, text)
    print(new)


if __name__ == "__main__":
    main()
