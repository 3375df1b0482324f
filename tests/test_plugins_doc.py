"""docs/plugins.md stays true: its Python blocks run, in order, as one script."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "plugins.md"


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.M | re.S)


def test_the_python_blocks_of_the_plugin_guide_run(capsys):
    blocks = _python_blocks(DOC.read_text(encoding="utf-8"))
    assert len(blocks) == 4
    namespace: dict = {"__name__": "plugins_doc"}
    exec(compile("\n".join(blocks), str(DOC), "exec"), namespace)
    # The printed stages are the ones the page shows.
    shown = re.search(r"^```text\n(0 \(0, 1, 2, 3\).*?)^```$", DOC.read_text(encoding="utf-8"), flags=re.M | re.S)
    assert shown is not None
    assert capsys.readouterr().out == shown.group(1)


def test_the_guide_is_linked_from_the_readme_and_names_the_example():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/plugins.md)" in readme
    text = DOC.read_text(encoding="utf-8")
    assert "../examples/hp-gated-deltanet/README.md" in text
    assert (ROOT / "examples" / "hp-gated-deltanet" / "README.md").is_file()
