"""An explicit ``num_key_value_heads: 0`` is refused by every config.json reader, not read as absent.

hp_plugins/models/hf.py was fixed for this (a 0 became num_attention_heads, i.e. plain MHA,
without a word); the Mamba-2 / Nemotron-H, Qwen3-Next and local-attention readers did the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import hp_plugins.models.presets

from cli_run import run

PRESETS_DIR = Path(hp_plugins.models.presets.__file__).parent


@pytest.mark.parametrize("preset", ["nemotron-h-8b", "qwen3-next-80b-a3b", "gemma-2-9b"])
def test_zero_kv_heads_is_refused_naming_the_field(tmp_path, capsys, preset):
    config = json.loads((PRESETS_DIR / f"{preset}.json").read_text(encoding="utf-8"))["config"]
    assert config["num_key_value_heads"] > 0
    config["num_key_value_heads"] = 0
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    status, out, err = run(capsys, "estimate", "--model", tmp_path, "--seq-len", "1024")
    assert status == 2 and out == ""
    assert "num_key_value_heads" in err and err.count("\n") == 1
