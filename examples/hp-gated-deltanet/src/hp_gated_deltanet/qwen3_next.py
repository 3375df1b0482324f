"""The layer stack of a Qwen3-Next ``config.json``: Gated DeltaNet and full-attention layers.

hp-planner's Hugging Face importer maps the model types its built-in kinds
cover; a plugin that adds layer kinds brings the mapping for the models made of
them. This one reads a ``qwen3_next`` config the way transformers'
``Qwen3NextConfig`` and ``Qwen3NextDecoderLayer`` do
(``src/transformers/models/qwen3_next/configuration_qwen3_next.py`` and
``modeling_qwen3_next.py``):

* layer ``i``'s token mixer is ``layer_types[i]``; without ``layer_types``, full
  attention where ``(i + 1) % full_attention_interval == 0`` (default 4, i.e. three
  linear-attention layers then one full-attention layer), else linear attention;
* its feed-forward block is a mixture of experts where ``i`` is not in
  ``mlp_only_layers``, ``num_experts > 0`` and ``(i + 1) % decoder_sparse_step == 0``,
  else a dense SwiGLU MLP of ``intermediate_size``; the experts' shared expert
  (``shared_expert_intermediate_size``) has a sigmoid gate ``Linear(h, 1)``.

Linear-attention layers become this package's ``gated_deltanet_moe`` (or
``gated_deltanet`` with a dense MLP); full-attention layers the built-in ``moe``
(or ``dense``): grouped-query attention of ``head_dim`` with per-head q/k RMSNorm.
Around them sit the built-in ``embedding`` and ``output`` kinds.

A field the file omits takes ``Qwen3NextConfig``'s default where it is a
structural flag (:data:`DEFAULTS`); the fields that size the model must be stated.

Known limitation: Qwen3-Next's full attention gates its output
(``Qwen3NextAttention``: ``q_proj`` is ``2 a d`` wide, half of it a sigmoid gate on
the attention output); the built-in kinds have no such gate, so each
full-attention layer counts ``h a d`` fewer parameters than transformers and
keeps no gate activations. For Qwen3-Next-80B-A3B that is ``12 * 2048 * 16 * 256
= 100,663,296`` of ``79,674,391,296`` parameters (0.13 %).
"""

from __future__ import annotations

from typing import Any, Mapping

from hp_core.errors import ConfigError, describe
from hp_core.specs import LayerGroup, ModelSpec
from hp_plugins.kinds.dense import DenseConfig
from hp_plugins.kinds.embedding import EmbeddingConfig
from hp_plugins.kinds.moe import MoEConfig
from hp_plugins.kinds.output import OutputConfig

from hp_gated_deltanet.deltanet import GatedDeltaNetConfig, GatedDeltaNetMoEConfig

__all__ = ["DEFAULTS", "QWEN3_NEXT_80B_A3B", "QWEN3_NEXT_80B_A3B_PROVENANCE", "model_from_qwen3_next_config"]

# Qwen3NextConfig's defaults (transformers 5.24.0) for the structural fields; the rest must be stated.
DEFAULTS: dict[str, Any] = {
    "head_dim": 256,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "linear_conv_kernel_dim": 4,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "full_attention_interval": 4,
    "layer_types": None,
}

# Qwen3-Next-80B-A3B's architecture: transformers' Qwen3NextConfig, whose defaults are
# "the Qwen3-Next-80B-A3B style configuration" (its docstring), stated in full.
QWEN3_NEXT_80B_A3B: dict[str, Any] = {
    "model_type": "qwen3_next",
    "vocab_size": 151936,
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "attention_bias": False,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "full_attention_interval": 4,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
}
QWEN3_NEXT_80B_A3B_PROVENANCE = (
    "transformers 5.24.0 Qwen3NextConfig defaults (Qwen/Qwen3-Next-80B-A3B); Qwen3NextForCausalLM "
    "built on the meta device counts 79,674,391,296 parameters"
)

_LINEAR, _FULL = "linear_attention", "full_attention"


class _Reader:
    """Reads one config's fields by name, with :data:`DEFAULTS` and errors naming the field."""

    def __init__(self, cfg: Mapping[str, Any], where: str) -> None:
        self.cfg, self.where = cfg, where

    def get(self, key: str, kind: type = int) -> Any:
        if self.cfg.get(key) is not None:
            value = self.cfg[key]
        elif key in DEFAULTS:
            return DEFAULTS[key]
        else:
            raise ConfigError(f"{self.where} $.{key}", "is missing and the estimate needs it; add it to the config")
        ok = {
            int: isinstance(value, int) and not isinstance(value, bool) and value >= 0,
            bool: isinstance(value, bool),
            str: isinstance(value, str),
            float: isinstance(value, (int, float)) and not isinstance(value, bool),
            list: isinstance(value, list),
        }[kind]
        if not ok:
            raise ConfigError(f"{self.where} $.{key}", f"must be a {kind.__name__}, got {value!r}")
        return value


def _layer_types(r: _Reader, layers: int) -> list[str]:
    stated = r.get("layer_types", list)
    if stated is None:
        interval = r.get("full_attention_interval")
        if interval < 1:
            raise ConfigError(f"{r.where} $.full_attention_interval", f"must be at least 1, got {interval}")
        return [_FULL if (i + 1) % interval == 0 else _LINEAR for i in range(layers)]
    if len(stated) != layers or any(t not in (_LINEAR, _FULL) for t in stated):
        raise ConfigError(
            f"{r.where} $.layer_types",
            f"must list {layers} entries, each {_LINEAR!r} or {_FULL!r}, got {stated!r}",
        )
    return list(stated)


def model_from_qwen3_next_config(
    cfg: Mapping[str, Any], *, name: str, source: str = "", where: str = "config.json"
) -> ModelSpec:
    """The layer stack of a Qwen3-Next ``config.json``: embedding, the hybrid body, output head.

    Args:
        cfg: The ``config.json`` mapping (``model_type`` ``qwen3_next``).
        name: The model's display name.
        source: Provenance to record.
        where: How error messages name the file.

    Raises:
        ConfigError: Another ``model_type``, or a missing or invalid field (with its path).
    """
    if cfg.get("model_type") != "qwen3_next":
        raise ConfigError(f"{where} $.model_type", f"must be 'qwen3_next', got {cfg.get('model_type')!r}")
    r = _Reader(cfg, where)
    h, layers = r.get("hidden_size"), r.get("num_hidden_layers")
    act = r.get("hidden_act", str)
    types = _layer_types(r, layers)
    experts = r.get("num_experts")
    step, only = r.get("decoder_sparse_step"), set(r.get("mlp_only_layers", list))
    try:
        mixer = {
            "hidden_size": h,
            "linear_num_key_heads": r.get("linear_num_key_heads"),
            "linear_num_value_heads": r.get("linear_num_value_heads"),
            "linear_key_head_dim": r.get("linear_key_head_dim"),
            "linear_value_head_dim": r.get("linear_value_head_dim"),
            "linear_conv_kernel_dim": r.get("linear_conv_kernel_dim"),
        }
        bias = r.get("attention_bias", bool)
        attention = {
            "hidden_size": h,
            "num_attention_heads": r.get("num_attention_heads"),
            "num_key_value_heads": r.get("num_key_value_heads"),
            "head_dim": r.get("head_dim"),
            "attention_bias": bias,
            "attention_out_bias": bias,
            "qk_norm": True,
            "attention_dropout": float(r.get("attention_dropout", float)),
        }
        body: list[tuple[str, Any]] = []
        for i, mixer_type in enumerate(types):
            sparse = i not in only and experts > 0 and step > 0 and (i + 1) % step == 0
            if sparse:
                shared = r.get("shared_expert_intermediate_size")
                ffn = {
                    "num_experts": experts,
                    "num_experts_per_tok": r.get("num_experts_per_tok"),
                    "moe_intermediate_size": r.get("moe_intermediate_size"),
                    "shared_expert_intermediate_size": shared,
                    "shared_expert_gate": shared > 0,
                    "hidden_act": act,
                }
            else:
                ffn = {"intermediate_size": r.get("intermediate_size"), "gated_mlp": True, "hidden_act": act}
            if mixer_type == _LINEAR:
                body.append(("gated_deltanet_moe", GatedDeltaNetMoEConfig(**mixer, **ffn)) if sparse
                            else ("gated_deltanet", GatedDeltaNetConfig(**mixer, **ffn)))
            else:
                body.append(("moe", MoEConfig(**attention, **ffn)) if sparse else ("dense", DenseConfig(**attention, **ffn)))
        vocab = r.get("vocab_size")
        groups = [LayerGroup("embedding", EmbeddingConfig(vocab_size=vocab, hidden_size=h))]
        for kind, config in body:
            if groups[-1].kind == kind and groups[-1].config == config:
                groups[-1] = LayerGroup(kind, config, groups[-1].count + 1)
            else:
                groups.append(LayerGroup(kind, config, 1))
        groups.append(LayerGroup("output", OutputConfig(vocab_size=vocab, hidden_size=h,
                                                        tie_word_embeddings=r.get("tie_word_embeddings", bool))))
    except (TypeError, ValueError) as exc:
        raise ConfigError(where, describe(exc)) from exc
    return ModelSpec(name=name, layers=tuple(groups), source=source)
