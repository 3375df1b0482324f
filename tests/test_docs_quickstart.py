"""docs/quickstart.md stays true: its files run through the commands it shows, with the figures it shows."""

from __future__ import annotations

import re
from pathlib import Path

from hp_core.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "quickstart.md"


def _files(text: str) -> dict[str, str]:
    """The page's YAML blocks, by the file name their first line gives."""
    blocks = re.findall(r"^```yaml\n# (\S+)\n(.*?)^```$", text, flags=re.M | re.S)
    return {name: body for name, body in blocks}


def _shown(text: str, command: str) -> list[str]:
    """The lines the page shows for ``$ command``, less the ``...`` marks, trailing spaces stripped."""
    block = re.search(rf"^```text\n\$ {re.escape(command)}\n(.*?)^```$", text, flags=re.M | re.S)
    assert block is not None, f"the page shows no output of {command}"
    return [line.rstrip() for line in block.group(1).splitlines() if line != "..."]


def test_the_quickstart_commands_print_what_the_page_shows(tmp_path, monkeypatch, capsys):
    text = DOC.read_text(encoding="utf-8")
    for name, body in _files(text).items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for command in ("hp estimate job.yaml", "hp recompute job.yaml --memory 40GiB", "hp validate my_runs.yaml"):
        assert main(command.split()[1:]) == 0
        printed = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
        for line in _shown(text, command):
            assert line in printed, f"{command}: the page shows {line!r}, the command does not print it"


def test_the_readme_sample_is_what_hp_estimate_prints(capsys):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sample = re.search(r"^## What `hp estimate` prints\n\n```text\n(.*?)^```$", readme, flags=re.M | re.S)
    assert sample is not None
    assert main(["estimate"]) == 0
    printed = "".join(line.rstrip() + "\n" for line in capsys.readouterr().out.splitlines())
    assert sample.group(1) == printed, "README.md's sample is stale: paste the output of 'hp estimate' (trailing spaces stripped)"
