"""docs/json.md documents every key of every ``--json`` document.

Each command runs in-process on a small input; every key path of its output (lists as ``[]``) must
appear on the page in backticks. Mappings keyed by data (kind names, layer ranges, switch names)
are written with a placeholder (``<kind>``, ``<name>``); free-form values (a setting, a trainer's
config mapping, a census record's provenance) are not walked into.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hp_core.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "json.md"

# Mappings whose keys are data, with the placeholder the page writes for a key.
_KEYED = {
    "kinds": "<kind>",
    "formulas": "<kind>",
    "kinds.<kind>.per_op": "<name>",
    "kinds.<kind>.policies": "<name>",
    "formulas.<kind>.per_op": "<name>",
    "formulas.<kind>.policies": "<name>",
}
# Values documented as a whole: mappings keyed by data with plain values, settings, free-form text or mappings.
_OPAQUE = re.compile(
    r"^(parameters\.by_kind|parameters\.by_group|provenance\.kinds|stages\[\]\.kinds|stages\[\]\.activations_by_kind_bytes"
    r"|stages\[\]\.peak_points_bytes|stages\[\]\.parameters_by_kind|provenance\.candidates"
    r"|(plan|unrestricted)\.recompute\.(default|layers)|(plan|unrestricted)\.stages\[\]\.ranges\[\]\.setting"
    r"|steps\[\]\.recompute_layers|steps\[\]\.recompute_mode|export\.plan|trainer_plan\.plan|steps\[\]\.export\.plan"
    r"|(kinds|formulas)\.<kind>\.provenance|rejected|top\[\]\.recompute\.(default|layers))$"
)

_CASES = """\
format: hp-cases/1
cases:
  - name: small
    config:
      model: llama3-8b
      num_layers: 2
      parallel: {dp: 1, tp: 2, sp: true, seq_len: 1024}
    measured:
      source: "made up for the docs test"
      stage_peak_gib: [10.0]
"""

_SMALL = ["--model", "llama3-8b", "--num-layers", "4", "--tp", "2", "--pp", "2", "--seq-len", "2048", "--hardware", "h100-sxm"]


def _commands(tmp_path: Path) -> dict[str, list[list[str]]]:
    cases = tmp_path / "cases.yaml"
    cases.write_text(_CASES, encoding="utf-8")
    return {
        # gb200 states its GEMM rates, which add their provenance keys (docs/time.md, Blackwell GEMMs).
        "estimate": [["estimate", *_SMALL, "--export", "megatron"], ["estimate", *_SMALL[:-1], "gb200"]],
        "recompute": [["recompute", *_SMALL, "--sp", "--memory", "3GiB", "--unrestricted", "--export", "megatron"]],
        "potentials": [["potentials", *_SMALL, "--steps", "1", "--export", "megatron"]],
        "validate": [["validate", str(cases)]],
        "census": [["census", "--model", "llama3-8b", "--source", "formulas", "--seq-len", "512"]],
        "plugins": [["plugins"]],
        "models": [["models"]],
        "search": [["search", "--model", "llama3-8b", "--num-layers", "4", "--devices", "8", "--hardware", "h100-sxm",
                    "--global-batch-size", "8", "--seq-len", "2048", "--runtime", "megatron", "--fix", "tp=2", "--top", "2"]],
    }


def _paths(doc, prefix: str = "") -> set[str]:
    found: set[str] = set()
    if isinstance(doc, list):
        for item in doc:
            found |= _paths(item, prefix + "[]")
        return found
    if not isinstance(doc, dict) or _OPAQUE.match(prefix):
        return found
    for key, value in doc.items():
        path = f"{prefix}.{_KEYED[prefix]}" if prefix in _KEYED else (f"{prefix}.{key}" if prefix else key)
        found.add(path)
        if not _OPAQUE.match(path):
            found |= _paths(value, path)
    return found


def _documented() -> set[str]:
    return set(re.findall(r"`([^`\s]+)`", PAGE.read_text(encoding="utf-8")))


@pytest.mark.parametrize("command", ["estimate", "recompute", "potentials", "validate", "census", "plugins", "models", "search"])
def test_every_json_key_of_the_command_is_documented(command, tmp_path, capsys):
    documented = _documented()
    assert f"## `hp {command} --json`" in PAGE.read_text(encoding="utf-8")
    for argv in _commands(tmp_path)[command]:
        assert main([*argv, "--json"]) == 0, capsys.readouterr().err
        doc = json.loads(capsys.readouterr().out)
        # The page documents ``unrestricted`` by reference to ``plan``: the two have the same fields.
        paths = {re.sub(r"^unrestricted\.", "plan.", p) for p in _paths(doc)}
        assert paths, f"hp {command} printed an empty document"
        missing = sorted(p for p in paths if p not in documented)
        assert not missing, f"docs/json.md lacks hp {command} --json fields: {missing}"


def test_the_walk_sees_nested_fields():
    """The walk reaches into lists and keyed mappings, so a new nested field is caught."""
    doc = {"stages": [{"memory": {"new_bytes": 1}}], "kinds": {"dense": {"per_op": {"ffAct": {"saved": 1.0}}}}}
    assert {"stages[].memory.new_bytes", "kinds.<kind>.per_op.<name>.saved"} <= _paths(doc)


def test_the_page_is_linked_from_the_readme():
    assert "(docs/json.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
