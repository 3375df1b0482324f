"""docs/runtimes.md's options tables are generated from the runtimes' option records: regenerate and compare."""

from __future__ import annotations

from pathlib import Path
from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "runtimes.md"


def _generator():
    return load_script("docs/_tools/gen_runtime_options.py")


def test_the_options_tables_are_what_the_records_generate():
    assert PAGE.read_text(encoding="utf-8") == _generator().render(), \
        "docs/runtimes.md is stale: run python docs/_tools/gen_runtime_options.py"


def test_every_built_in_option_has_a_row_with_its_default(registry):
    text = PAGE.read_text(encoding="utf-8")
    for runtime in registry.runtimes:
        section = text.split(f"### Options of `{runtime.name}`\n", 1)[1].split("\n### ", 1)[0]
        for option in runtime.options:
            assert f"| `{option.name}` |" in section, (runtime.name, option.name)


def test_render_replaces_only_the_generated_part():
    gen = _generator()
    page = "intro\n" + gen.BEGIN + "\nstale\n" + gen.END + "\noutro\n"
    rendered = gen.render(page)
    assert rendered.startswith("intro\n" + gen.BEGIN) and rendered.endswith(gen.END + "\noutro\n")
    assert "stale" not in rendered and "### Options of `megatron`" in rendered
