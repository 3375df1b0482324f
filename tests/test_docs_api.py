"""docs/api.md stays true: its Python blocks run, in order, as one script, printing its text blocks."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, flags=re.M | re.S)


def test_the_python_blocks_of_the_api_page_run_and_print_what_it_shows(capsys):
    text = DOC.read_text(encoding="utf-8")
    blocks = _blocks(text, "python")
    assert len(blocks) >= 5
    exec(compile("\n".join(blocks), str(DOC), "exec"), {"__name__": "api_doc"})
    assert capsys.readouterr().out == "".join(_blocks(text, "text"))


def test_the_page_documents_every_public_function_it_promises():
    text = DOC.read_text(encoding="utf-8")
    for name in ("build_registry", "estimate", "step_time", "plan_recompute", "count_parameters", "model_from_preset",
                 "model_from_hf_config", "load_hf_config"):
        assert f"`{name}(" in text, name
    assert "(docs/api.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
