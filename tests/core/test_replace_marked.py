"""hp_core.io.files.replace_marked: the benchmark scripts' refresh of a generated section of a page."""

from __future__ import annotations

import pytest

from hp_core.errors import ConfigError
from hp_core.io.files import replace_marked

START, END = "<!-- t:start -->", "<!-- t:end -->"


def test_the_block_replaces_the_markers_and_what_lies_between_them(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"# Title\n\nbefore\n{START}\nold\nrows\n{END}\nafter\n", encoding="utf-8")
    replace_marked(page, START, END, f"{START}\n\n| new |\n{END}")
    assert page.read_text(encoding="utf-8") == f"# Title\n\nbefore\n{START}\n\n| new |\n{END}\nafter\n"
    # Idempotent: the same block again leaves the page as it is.
    replace_marked(page, START, END, f"{START}\n\n| new |\n{END}")
    assert page.read_text(encoding="utf-8") == f"# Title\n\nbefore\n{START}\n\n| new |\n{END}\nafter\n"


def test_a_missing_marker_is_refused_and_the_page_left_alone(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"{START}\nold\n", encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        replace_marked(page, START, END, f"{START}\nnew\n{END}")
    assert refused.value.path == "--write" and END in str(refused.value) and "\n" not in str(refused.value)
    assert page.read_text(encoding="utf-8") == f"{START}\nold\n"
    assert [p.name for p in tmp_path.iterdir()] == ["page.md"]  # no temporary left behind


def test_an_end_marker_before_the_start_is_refused_and_the_page_left_alone(tmp_path):
    page = tmp_path / "page.md"
    text = f"a\n{END}\nmid\n{START}\nold\n"
    page.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="end comes first"):
        replace_marked(page, START, END, f"{START}\nnew\n{END}")
    assert page.read_text(encoding="utf-8") == text
    # With a later end marker too, the section from the start to the end after it is the one replaced.
    page.write_text(text + f"{END}\nz\n", encoding="utf-8")
    replace_marked(page, START, END, f"{START}\nnew\n{END}")
    assert page.read_text(encoding="utf-8") == f"a\n{END}\nmid\n{START}\nnew\n{END}\nz\n"


def test_an_unreadable_page_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        replace_marked(tmp_path / "missing.md", START, END, "x")
