"""One reader of config.json fields (hp_plugins.models.stack.ConfigReader) for every built-in format: the same
defaults, bounds and refusals, each naming the field's path, whichever format reads the file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from hp_core.api import build_registry
from hp_core.bounds import MAX_INT
from hp_core.errors import ConfigError
from hp_core.models import model_from_config
from hp_plugins.models.stack import ConfigReader

PRESETS = Path(__file__).resolve().parents[2] / "hp_plugins" / "models" / "presets"


def _reader(**cfg):
    return ConfigReader(cfg, {"head_dim": 128, "sliding_window": 4096, "layer_types": None}, "c.json",
                        aliases={"conv_kernel": "mamba_d_conv"})


def _refusal(call) -> str:
    with pytest.raises(ConfigError) as caught:
        call()
    return str(caught.value)


def test_defaults_nulls_and_aliases():
    r = _reader(hidden_size=64, head_dim=None, sliding_window=None, mamba_d_conv=4)
    assert r.get("hidden_size") == 64
    assert r.get("head_dim") == 128  # null: the default
    assert r.get("sliding_window", nullable=True) is None  # null read as a value
    assert r.window("sliding_window", nullable=False) == 4096
    assert r.get("conv_kernel") == 4  # the legacy name
    assert _refusal(lambda: r.get("vocab_size")) == "c.json $.vocab_size: is missing and the estimate needs it; add it to the config"


@pytest.mark.parametrize("cfg, read, message", [
    ({"hidden_size": -1}, lambda r: r.get("hidden_size"), "c.json $.hidden_size: must be a non-negative integer, got -1"),
    ({"hidden_size": True}, lambda r: r.get("hidden_size"), "c.json $.hidden_size: must be a non-negative integer, got True"),
    ({"hidden_size": MAX_INT + 1}, lambda r: r.get("hidden_size"),
     f"c.json $.hidden_size: must be at most {MAX_INT:,} (MAX_INT), got {MAX_INT + 1}"),
    ({"num_hidden_layers": 0}, lambda r: r.get("num_hidden_layers"),
     "c.json $.num_hidden_layers: must be at least 1 and at most 10,000 (MAX_LAYERS), got 0"),
    ({"attention_dropout": math.nan}, lambda r: r.get("attention_dropout", float),
     "c.json $.attention_dropout: must be a finite number, got nan"),
    ({"tie_word_embeddings": "yes"}, lambda r: r.get("tie_word_embeddings", bool),
     "c.json $.tie_word_embeddings: must be true or false, got 'yes'"),
    ({"mlp_only_layers": [0, "1"]}, lambda r: r.indices("mlp_only_layers"),
     "c.json $.mlp_only_layers: must be a list of layer indices, got [0, '1']"),
    ({"sliding_window": 0}, lambda r: r.window("sliding_window"),
     "c.json $.sliding_window: must be a positive number of tokens or null, got 0"),
    ({"mamba_d_conv": 2.5}, lambda r: r.get("conv_kernel"), "c.json $.mamba_d_conv: must be a non-negative integer, got 2.5"),
])
def test_each_refusal_names_the_field(cfg, read, message):
    assert _refusal(lambda: read(_reader(**cfg))) == message


@pytest.mark.parametrize("preset", ["qwen3-30b-a3b", "mistral-7b", "qwen3-next-80b-a3b", "nemotron-h-8b"])
def test_every_format_refuses_a_non_finite_or_mistyped_field_alike(preset):
    # hf (qwen3_moe), hf_local (mistral), qwen3_next and nemotron_h read their files with the one reader.
    cfg = json.loads((PRESETS / f"{preset}.json").read_text())["config"]
    registry = build_registry(use_env=False)
    model_from_config(cfg, registry, name=preset, source="test")  # the preset as it stands is read
    assert _refusal(lambda: model_from_config({**cfg, "hidden_size": "4096"}, registry, name=preset, source="test")) \
        == "config.json $.hidden_size: must be a non-negative integer, got '4096'"
    assert _refusal(lambda: model_from_config({**cfg, "tie_word_embeddings": 1}, registry, name=preset, source="test")) \
        == "config.json $.tie_word_embeddings: must be true or false, got 1"
