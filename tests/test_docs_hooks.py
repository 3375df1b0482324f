"""One page per hook under docs/hooks/, each complete and each example plugin runnable.

Every hook of ``hp_core.hookspecs.HOOKS`` has ``docs/hooks/<hook>.md`` with its arguments, every
field of its record, its call semantics, an example plugin and the built-ins implementing it;
docs/hooks.md links every page. The example's first Python block is a plugin module (its first
line names the file); it is imported under that name, the page's other Python blocks run as a
script, and what they print is the page's ``text`` block.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import attrs
import pytest

from hp_core.api import build_registry
from hp_core.hookspecs import HOOKS

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "hooks"
SECTIONS = ("## Arguments", "## Returns", "## Call semantics", "## Example", "## Built-in implementations")


def _page(hook: str) -> str:
    return (PAGES / f"{hook}.md").read_text(encoding="utf-8")


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, flags=re.M | re.S)


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_every_hook_has_a_complete_page_linked_from_the_index(hook):
    text = _page(hook)
    assert text.startswith(f"# `{hook}`\n")
    for section in SECTIONS:
        assert f"\n{section}\n" in text, f"docs/hooks/{hook}.md lacks {section}"
    for field in attrs.fields(HOOKS[hook]):
        assert f"`{field.name}`" in text, f"docs/hooks/{hook}.md does not document {HOOKS[hook].__name__}.{field.name}"
    assert f"(hooks/{hook}.md)" in (ROOT / "docs" / "hooks.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_every_built_in_record_of_the_hook_is_named_on_its_page(hook):
    section = _page(hook).split("\n## Built-in implementations\n", 1)[1]
    registry = build_registry(use_env=False)
    for record in getattr(registry, hook.removeprefix("hp_")):
        assert f"`{record.name}`" in section, f"docs/hooks/{hook}.md does not name the built-in {record.name}"


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_the_example_plugin_of_every_hook_page_runs(hook, monkeypatch, capsys):
    text = _page(hook)
    plugin_source, *script = _blocks(text, "python")
    name = re.match(r"# (\w+)\.py\n", plugin_source).group(1)
    module = types.ModuleType(name)
    exec(compile(plugin_source, f"docs/hooks/{hook}.md:{name}.py", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, name, module)
    registry = build_registry(plugins=[module], use_env=False)
    provided = [r.name for r in getattr(registry, hook.removeprefix("hp_")) if registry.provider(hook, r.name).plugin == name]
    assert provided, f"the example plugin of docs/hooks/{hook}.md yields no {HOOKS[hook].__name__}"
    namespace: dict = {"__name__": f"hooks_doc_{hook}"}
    exec(compile("\n".join(script), f"docs/hooks/{hook}.md", "exec"), namespace)
    shown = _blocks(text, "text")
    assert shown, f"docs/hooks/{hook}.md shows no output of its example"
    assert capsys.readouterr().out == shown[-1]
