"""Generate docs/cli.md from the ``hp`` parser, so ``hp --help`` and the docs never drift.

Usage::

    python docs/_tools/gen_cli.py          # rewrite docs/cli.md
    python docs/_tools/gen_cli.py --check  # exit 1 when docs/cli.md differs from the parser

``tests/test_docs_cli.py`` regenerates the page in memory and compares it with the file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hp_core.bounds import BOUNDS
from hp_core.cli import build_parser

__all__ = ["render", "main"]

PAGE = Path(__file__).resolve().parents[1] / "cli.md"

_INTRO = """\
# Command-line reference

<!-- Generated from hp_core.cli.build_parser() by docs/_tools/gen_cli.py: do not edit by hand.
     Regenerate with: python docs/_tools/gen_cli.py  (tests/test_docs_cli.py checks it). -->

Every option of every `hp` command, generated from the parser that `hp --help` prints, so the two
cannot drift. Regenerate this page after changing `hp_core/cli/parser.py`:

```bash
python docs/_tools/gen_cli.py
```

A user error (a bad flag, a bad field, an unknown name) prints one line naming the field and exits
with status 2; no traceback. A comma-separated list of names or shares (`--schedules`, `hp search
--precision`, `--offload`) names each entry once and leaves none empty. Every command takes `--json`: the documents are described field by
field in [json.md](json.md). `hp estimate`, `hp recompute` and `hp potentials` read the same
config files ([config.md](config.md)); their flags override the file.
"""


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.dest}`"
    return ", ".join(f"`{flag}`" for flag in action.option_strings)


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "-"
    if action.choices is not None and not isinstance(action.choices, dict):
        return " \\| ".join(f"`{choice}`" for choice in action.choices)
    if action.metavar is not None:
        return f"`{action.metavar}`"
    if action.option_strings:
        return f"`{action.dest.upper()}`"
    return "-"


def _default(action: argparse.Action) -> str:
    default = action.default
    if action.nargs == 0 or default is None or default == argparse.SUPPRESS:
        return "-"
    if isinstance(default, (list, tuple)) and not default:
        return "-"
    return f"`{default}`"


# Meanings for the few options whose parser help is empty (from hp_core/specs/parallel.py), marked
# "(config field ...)" so a reader knows where they come from; a help added to the parser wins.
_FIELD_MEANINGS = {
    "micro_batch_size": "sequences per micro-batch (config field parallel.micro_batch_size, default 1)",
    "seq_len": "tokens per sequence (config field parallel.seq_len)",
    "schedule": "pipeline schedule (config field parallel.schedule; default 1f1b, interleaved_1f1b when vpp > 1)",
}


def _help(action: argparse.Action) -> str:
    text = action.help or _FIELD_MEANINGS.get(action.dest, "")
    if isinstance(action, argparse.BooleanOptionalAction):
        # argparse appends " (default: ...)" to the help of a BooleanOptionalAction on some versions.
        text = text.split(" (default:")[0]
    if not action.option_strings and action.nargs == "?":
        text = f"optional: {text}"
    return _cell(text)


def _table(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| Argument | Value | Default | Meaning |", "| --- | --- | --- | --- |"]
    for action in parser._actions:
        if isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)):
            continue
        if action.required and action.option_strings:
            meaning = "**required**; " + _help(action)
        else:
            meaning = _help(action)
        rows.append(f"| {_flags(action)} | {_value(action)} | {_default(action)} | {meaning} |")
    rows.append("| `-h`, `--help` | - | - | print the help and exit |")
    return rows


def _synopsis(prog: str, parser: argparse.ArgumentParser) -> str:
    parts = [prog]
    for action in parser._actions:
        if action.option_strings:
            continue
        if isinstance(action, argparse._SubParsersAction):
            parts.append("COMMAND ...")
        elif action.nargs == "?":
            parts.append(f"[{action.dest}]")
        else:
            parts.append(action.dest)
    required = [a for a in parser._actions if a.option_strings and a.required]
    parts.extend(f"{a.option_strings[0]} {_value(a).strip('`')}" for a in required)
    parts.append("[options]")
    return " ".join(parts)


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def _bounds() -> list[str]:
    """The bounds of hp_core.bounds.BOUNDS as a table."""
    lines = ["## Bounds", "",
             "Every count, size and degree is checked where it enters, from a flag, a config file, a census or",
             "case file, a `config.json` or the Python API, against an upper bound far beyond any real job and",
             "below where the arithmetic or the work would fail; a value past it is refused with the one-line",
             "error naming the field and the bound. Numbers must be finite (`.inf`, `.nan` and `1e400` are",
             "refused) and a zero where it would divide (a device's `peak_flops`, a bandwidth) is refused. Work",
             "that grows with the input is counted before it starts: `hp search` refuses a search of more",
             "candidate layouts than `MAX_SEARCH_LAYOUTS` with the count and the limit, and starts no more",
             "worker processes than there are CPUs. YAML files are read with a safe loader that refuses nesting",
             "and alias expansion past the bounds while it parses (a \"billion laughs\" file costs nothing).",
             "The bounds are `hp_core.bounds`:", "",
             "| Bound | Value | What it bounds |", "| --- | --- | --- |"]
    lines += [f"| `{name}` | {value:,} | {_cell(what)} |" for name, value, what in BOUNDS]
    lines += ["", "Output files (`--csv`, `--plot`, `hp census --out`) are written atomically with one file mode",
              "(0666 less the umask, as a plain `open()`); the temporary file is removed on every way out, SIGTERM",
              "and SIGHUP included. `-` (or `/dev/stdout`) writes to standard output; a symbolic link is followed",
              "(the link is kept); a target that is not a regular file (a device, a FIFO, a folder) is refused.", ""]
    return lines


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The page for *parser* (default: ``hp_core.cli.build_parser()``)."""
    parser = parser if parser is not None else build_parser()
    commands = _subcommands(parser)
    lines = [_INTRO]
    lines += _bounds()
    lines += ["## Commands", "", "| Command | What it does |", "| --- | --- |"]
    lines += [f"| [`hp {name}`](#hp-{name}) | {_cell(help_)} |" for name, help_, _ in commands]
    lines += ["", "## `hp`", "", _cell(parser.description or ""), "", "```text", _synopsis("hp", parser), "```", ""]
    lines += ["Global options go before the command (`hp --no-entry-points plugins`).", ""]
    lines += _table(parser)
    for name, _help_text, sub in commands:
        lines += ["", f"## `hp {name}`", "", _cell(sub.description or ""), "", "```text",
                  _synopsis(f"hp {name}", sub), "```", ""]
        lines += _table(sub)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write docs/cli.md, or with ``--check`` report whether it is current."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--check", action="store_true", help="do not write; exit 1 if docs/cli.md is stale")
    ns = args.parse_args(argv)
    text = render()
    if ns.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            sys.stderr.write("docs/cli.md is stale: run python docs/_tools/gen_cli.py\n")
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
