"""docs/cli.md is generated from the ``hp`` parser: regenerate it in memory and compare."""

from __future__ import annotations

import argparse
from pathlib import Path

from hp_core.cli import build_parser
from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli.md"


def _generator():
    return load_script("docs/_tools/gen_cli.py")


def test_docs_cli_is_what_the_parser_generates():
    expected = _generator().render()
    assert PAGE.read_text(encoding="utf-8") == expected, "docs/cli.md is stale: run python docs/_tools/gen_cli.py"


def test_every_command_and_option_of_the_parser_is_on_the_page():
    text = PAGE.read_text(encoding="utf-8")
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert subparsers.choices, "hp has commands"
    for name, sub in [("", parser), *((f" {n}", s) for n, s in subparsers.choices.items())]:
        section = text.split(f"## `hp{name}`\n", 1)[1].split("\n## ", 1)[0]
        for action in sub._actions:
            for flag in action.option_strings:
                assert f"`{flag}`" in section, f"hp{name} {flag} is not documented"


def test_the_page_names_its_regeneration_command_and_is_linked_from_the_readme():
    assert "python docs/_tools/gen_cli.py" in PAGE.read_text(encoding="utf-8")
    assert "(docs/cli.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_default_on_the_page_is_a_value_the_option_takes():
    # The Default column shows what a user may type: passing the shown default parses to what leaving
    # the option out gives (a default kept as a parsed value, e.g. a tuple, would show its repr).
    generator = _generator()
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    required_values = {"--model": "llama3-8b", "--devices": "8", "--hardware": "h100-sxm"}
    checked = set()
    for name, sub in subparsers.choices.items():
        base = [name]
        for action in sub._actions:
            if not action.option_strings and action.nargs is None:
                base.append("cases.yaml")
            elif action.required:
                base += [action.option_strings[0], required_values[action.option_strings[0]]]
        for action in sub._actions:
            shown = generator._default(action)
            if not action.option_strings or shown == "-":
                continue
            typed = vars(parser.parse_args([*base, action.option_strings[0], shown.strip("`")]))[action.dest]
            assert typed == vars(parser.parse_args(base))[action.dest], f"hp {name} {action.option_strings[0]}: {shown}"
            checked.add((name, action.option_strings[0]))
    assert {("search", "--executor"), ("search", "--top"), ("census", "--tp")} <= checked
