"""Model specs from Hugging Face ``config.json`` files.

Fields are mapped by name, never guessed from the model's name. A field the
file omits takes the default of the model type's transformers config class
(stated below with the class); a field without such a default that the
estimate needs is refused with its path.

Supported ``model_type`` values and their transformers classes:

* ``llama`` (``LlamaConfig``), ``mistral`` (``MistralConfig``): biases from
  ``attention_bias`` / ``mlp_bias`` (default false), ``head_dim`` default
  ``hidden_size / num_attention_heads``;
* ``qwen2`` (``Qwen2Config``): q, k and v always carry biases
  (``Qwen2Attention`` builds them with ``bias=True``), the output projection none;
* ``qwen3`` (``Qwen3Config``): per-head RMSNorm of q and k, ``head_dim``
  default 128, ``attention_bias`` default false.

All: ``num_key_value_heads`` defaults to ``num_attention_heads``,
``hidden_act`` to ``silu``, ``tie_word_embeddings`` to false,
``attention_dropout`` to 0, RMSNorm, SwiGLU MLP.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from hp_core.errors import ConfigError, describe
from hp_core.specs.model import LayerGroup, ModelSpec
from hp_plugins.dense import DenseConfig
from hp_plugins.embedding import EmbeddingConfig
from hp_plugins.output import OutputConfig

__all__ = ["DENSE_MODEL_TYPES", "load_hf_config", "model_from_hf_config"]

# model_type -> (qkv bias rule, qk_norm, head_dim default)
DENSE_MODEL_TYPES = {
    "llama": ("field", False, None),
    "mistral": ("field", False, None),
    "qwen2": ("always", False, None),
    "qwen3": ("field", True, 128),
}


def load_hf_config(path: str | Path) -> tuple[dict[str, Any], str]:
    """Read a ``config.json`` (or the one in a folder); returns the mapping and the file's path."""
    target = Path(path)
    if target.is_dir():
        target = target / "config.json"
    if not target.is_file():
        raise ConfigError("--model", f"no such preset or config file: {path}; run 'hp models' for presets")
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(str(target), f"is not a readable JSON file: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(str(target), "must hold a JSON object")
    return data, str(target)


def _field(cfg: Mapping[str, Any], key: str, where: str, default: Any = ..., kind: type | tuple = int) -> Any:
    value = cfg.get(key, default)
    if value is ... or value is None and default is ...:
        raise ConfigError(f"{where} $.{key}", "is missing and the estimate needs it; add it to the config")
    if value is None:
        return default
    if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"{where} $.{key}", f"must be a positive integer, got {value!r}")
    if kind is bool and not isinstance(value, bool):
        raise ConfigError(f"{where} $.{key}", f"must be true or false, got {value!r}")
    return value


def model_from_hf_config(cfg: Mapping[str, Any], *, name: str, source: str, where: str = "config.json") -> ModelSpec:
    """The layer stack of a Hugging Face config: embedding, decoder layers, output head.

    Args:
        cfg: The ``config.json`` mapping.
        name: The model's display name.
        source: Provenance to record.
        where: How error messages name the file.

    Raises:
        ConfigError: An unsupported ``model_type`` or a missing/invalid field.
    """
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or model_type not in DENSE_MODEL_TYPES:
        raise ConfigError(
            f"{where} $.model_type",
            f"model_type {model_type!r} is not supported; supported: {', '.join(sorted(DENSE_MODEL_TYPES))}",
        )
    bias_rule, qk_norm, head_dim_default = DENSE_MODEL_TYPES[model_type]
    hidden = _field(cfg, "hidden_size", where)
    heads = _field(cfg, "num_attention_heads", where)
    layers = _field(cfg, "num_hidden_layers", where)
    vocab = _field(cfg, "vocab_size", where)
    kv_heads = _field(cfg, "num_key_value_heads", where, heads)
    head_dim = _field(cfg, "head_dim", where, head_dim_default)
    tied = _field(cfg, "tie_word_embeddings", where, False, bool)
    qkv_bias = True if bias_rule == "always" else _field(cfg, "attention_bias", where, False, bool)
    mlp_bias = _field(cfg, "mlp_bias", where, False, bool)
    dropout = cfg.get("attention_dropout", 0.0) or 0.0
    try:
        dense = DenseConfig(
            hidden_size=hidden,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=_field(cfg, "intermediate_size", where),
            gated_mlp=True,
            hidden_act=_field(cfg, "hidden_act", where, "silu", str),
            attention_bias=qkv_bias,
            mlp_bias=mlp_bias,
            qk_norm=qk_norm,
            norm="rmsnorm",
            attention_dropout=float(dropout),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(where, describe(exc)) from exc
    return ModelSpec(
        name=name,
        layers=(
            LayerGroup("embedding", EmbeddingConfig(vocab_size=vocab, hidden_size=hidden)),
            LayerGroup("dense", dense, layers),
            LayerGroup("output", OutputConfig(vocab_size=vocab, hidden_size=hidden, tie_word_embeddings=tied)),
        ),
        source=source,
    )
