"""Docs stay true to the code: every hook has a page section, the README opens with the two commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hp_core.hookspecs import HOOKS
from hp_core import hookspecs

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_every_hook_has_a_section_in_docs_hooks(hook):
    text = (ROOT / "docs" / "hooks.md").read_text(encoding="utf-8")
    assert f"## `{hook}`" in text


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_every_hook_spec_documents_arguments_return_semantics_and_example(hook):
    doc = getattr(hookspecs, hook).__doc__
    for part in ("Arguments:", "Returns:", "Call semantics:", "Example::"):
        assert part in doc, f"{hook} docstring lacks {part}"


def test_hookspec_module_declares_exactly_the_documented_hooks():
    declared = {name for name in dir(hookspecs) if name.startswith("hp_")}
    documented = set(re.findall(r"^## `(hp_\w+)`", (ROOT / "docs" / "hooks.md").read_text(encoding="utf-8"), re.M))
    assert declared == set(HOOKS) == documented


def test_readme_opens_with_the_two_setup_commands():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    block = lines[lines.index("```bash") + 1:]
    assert block[:3] == ["pip install -e . && hp estimate", "pip install -e '.[test]' && pytest", "```"]


def test_ci_runs_the_readme_commands():
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install -e . && hp estimate" in script
    assert "pip install -e '.[test]' && pytest" in script


def test_the_readme_links_every_docs_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    pages = sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "docs" / "hooks").glob("*.md"))
    missing = [str(p.relative_to(ROOT)) for p in pages if f"({p.relative_to(ROOT).as_posix()})" not in readme]
    assert not missing, f"README.md's Documentation list lacks {missing}"


def test_every_trait_has_a_row_in_the_runtimes_page():
    from hp_core.traits import TRAITS

    page = (ROOT / "docs" / "runtimes.md").read_text(encoding="utf-8")
    missing = [trait for trait in TRAITS if f"| `{trait}` |" not in page]
    assert not missing, f"docs/runtimes.md's traits table lacks {missing}"


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_every_hook_has_its_own_page(hook):
    assert (ROOT / "docs" / "hooks" / f"{hook}.md").is_file()


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_relative_links_of_the_readme_and_docs_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"^```.*?^```$", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", re.sub(r"^```.*?^```$", "", file.read_text(encoding="utf-8"),
                                                             flags=re.M | re.S), re.M)
                if anchor not in {_slug(h) for h in headings}:
                    broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken
