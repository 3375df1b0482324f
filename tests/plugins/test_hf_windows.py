"""``sliding_window`` in mixtral and qwen2 config.json files is honoured, not ignored."""

from __future__ import annotations

import pytest

from hp_core.api import build_registry
from hp_core.models import model_from_config
from hp_core.errors import ConfigError

_BASE = {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512,
         "num_hidden_layers": 4, "vocab_size": 1000}


def _layers(cfg):
    model = model_from_config(cfg, build_registry(), name="t", source="test")
    return [getattr(group.config, "sliding_window", None) for group in model.layers for _ in range(group.count)
            if group.kind in ("dense", "moe")]


def test_mixtral_window_applies_to_every_layer():
    moe = {**_BASE, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}
    assert _layers({**moe, "sliding_window": None}) == [None] * 4
    assert _layers({**moe, "sliding_window": 64}) == [64] * 4
    with pytest.raises(ConfigError, match=r"\$\.sliding_window"):
        _layers({**moe, "sliding_window": 0})


def test_qwen2_window_only_with_use_sliding_window_from_max_window_layers():
    dense = {**_BASE, "model_type": "qwen2", "sliding_window": 64, "max_window_layers": 2}
    assert _layers(dense) == [None] * 4  # use_sliding_window defaults to false (Qwen2Config)
    assert _layers({**dense, "use_sliding_window": True}) == [None, None, 64, 64]
