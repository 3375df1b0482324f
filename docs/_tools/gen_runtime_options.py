"""Generate the options tables of docs/runtimes.md from the built-in runtimes' option records.

Usage::

    python docs/_tools/gen_runtime_options.py          # rewrite the tables in docs/runtimes.md
    python docs/_tools/gen_runtime_options.py --check  # exit 1 when they differ from the records

The tables sit between ``<!-- options:begin -->`` and ``<!-- options:end -->``;
``tests/test_docs_runtime_options.py`` regenerates them in memory and compares.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hp_core.api import build_registry
from hp_core.runtime_options import format_option_value

__all__ = ["main", "render", "render_tables"]

PAGE = Path(__file__).resolve().parents[1] / "runtimes.md"
BEGIN, END = "<!-- options:begin -->", "<!-- options:end -->"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _type(option) -> str:
    if option.type == "choice":
        also = " \\| a mapping (below)" if option.mapping is not None else ""
        return " \\| ".join(f"`{choice}`" for choice in option.choices) + also
    if option.minimum is not None:
        return f"{option.type} >= {option.minimum:g}"
    return option.type


def render_tables() -> str:
    """Per built-in runtime, a table of its options: name, values, default, what it changes, source."""
    registry = build_registry(entry_points=False, use_env=False)
    parts = [BEGIN, "<!-- Generated from the runtimes' option records by docs/_tools/gen_runtime_options.py: "
                    "do not edit by hand. -->", ""]
    for runtime in registry.runtimes:
        parts.append(f"### Options of `{runtime.name}`")
        parts.append("")
        if not runtime.options:
            parts += ["None.", ""]
            continue
        parts += ["| option | values | default | what it changes | source |", "|---|---|---|---|---|"]
        for option in runtime.options:
            parts.append(f"| `{option.name}` | {_type(option)} | `{format_option_value(option.default)}` | "
                         f"{_cell(option.description)} | {_cell(option.source)} |")
        parts.append("")
    parts.append(END)
    return "\n".join(parts)


def render(text: str | None = None) -> str:
    """docs/runtimes.md with its options tables regenerated."""
    text = PAGE.read_text(encoding="utf-8") if text is None else text
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + render_tables() + tail


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    expected = render()
    if "--check" in argv:
        return 0 if PAGE.read_text(encoding="utf-8") == expected else 1
    PAGE.write_text(expected, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
