"""The ``qwen3_next`` model format: Qwen3-Next ``config.json`` files onto Gated DeltaNet and gated attention layers.

Read as transformers 5.24's ``Qwen3NextConfig`` and ``Qwen3NextDecoderLayer`` read
them (``configuration_qwen3_next.py``, ``modeling_qwen3_next.py``):

* layer ``i``'s token mixer is ``layer_types[i]``; without ``layer_types``, full
  attention where ``(i + 1) % full_attention_interval == 0`` (default 4), else
  linear attention;
* its feed-forward block is a mixture of experts where ``i`` is not in
  ``mlp_only_layers``, ``num_experts > 0`` and ``(i + 1) % decoder_sparse_step == 0``
  (a shared expert of ``shared_expert_intermediate_size`` with a sigmoid gate
  ``Linear(h, 1)``), else a SwiGLU MLP of ``intermediate_size``.

Linear-attention layers become ``gdn_moe`` (``gdn`` with a dense MLP); full-attention
layers ``gated_attention_moe`` (``gated_attention``): grouped-query attention of
``head_dim`` with per-head q/k RMSNorm, biases on q, k, v and o where
``attention_bias``, the output gate, and RoPE on ``partial_rotary_factor`` (default 0.25)
of each query and key head. Around them the built-in ``embedding`` and
``output``. A field the file omits takes ``Qwen3NextConfig``'s default where it is a
structural flag (:data:`DEFAULTS`); the fields that size the model must be stated.
transformers builds no multi-token-prediction module (its ``mtp.*`` weights are
ignored on load), so none is counted.
"""

from __future__ import annotations

from typing import Any, Mapping

from hp_core.errors import ConfigError, describe
from hp_core.markers import hookimpl
from hp_core.specs.model import ModelSpec
from hp_core.types import ModelFormat
from hp_plugins.kinds.qwen3_next import GDNConfig, GDNMoEConfig, GatedAttentionConfig, GatedAttentionMoEConfig
from hp_plugins.models.ssm import model_from_body
from hp_plugins.models.stack import ConfigReader, rotary_factor

__all__ = ["DEFAULTS", "hp_model_formats", "model_from_qwen3_next_config"]

# Qwen3NextConfig's defaults (transformers 5.24) for the structural fields.
DEFAULTS: dict[str, Any] = {
    "head_dim": 256, "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
    "attention_dropout": 0.0, "linear_conv_kernel_dim": 4, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "full_attention_interval": 4, "layer_types": None, "num_key_value_heads": None,
    "partial_rotary_factor": 0.25,  # Qwen3NextConfig.__post_init__: RoPE on a quarter of each head
}
_LINEAR, _FULL = "linear_attention", "full_attention"
# Qwen3NextRMSNorm is zero-centred: it scales by ``1.0 + self.weight.float()`` in fp32 before casting back
# (hp_plugins.kit.norms.fp32_norm_bytes), the layers' norms, the q/k norms and the final norm alike.
_NORM = "rmsnorm_fp32_weight"


def _layer_types(r: ConfigReader, layers: int) -> list[str]:
    stated = r.get("layer_types", list)
    if stated is None:
        interval = r.get("full_attention_interval")
        if interval < 1:
            raise ConfigError(f"{r.where} $.full_attention_interval", f"must be at least 1, got {interval}")
        return [_FULL if (i + 1) % interval == 0 else _LINEAR for i in range(layers)]
    if len(stated) != layers or any(t not in (_LINEAR, _FULL) for t in stated):
        raise ConfigError(f"{r.where} $.layer_types", f"must list {layers} entries, each {_LINEAR!r} or {_FULL!r}, got {stated!r}")
    return list(stated)


def model_from_qwen3_next_config(cfg: Mapping[str, Any], *, name: str, source: str = "",
                                 where: str = "config.json") -> ModelSpec:
    """The layer stack of a ``qwen3_next`` ``config.json`` (module docstring).

    Raises:
        ConfigError: Another ``model_type``, or a missing or invalid field (with its path).
    """
    if cfg.get("model_type") != "qwen3_next":
        raise ConfigError(f"{where} $.model_type", f"must be 'qwen3_next', got {cfg.get('model_type')!r}")
    r = ConfigReader(cfg, DEFAULTS, where)
    h, layers, act = r.get("hidden_size"), r.get("num_hidden_layers"), r.get("hidden_act", str)
    types = _layer_types(r, layers)
    experts, step = r.get("num_experts"), r.get("decoder_sparse_step")
    only = set(r.indices("mlp_only_layers"))
    try:
        mixer = {"hidden_size": h, "linear_num_key_heads": r.get("linear_num_key_heads"),
                 "linear_num_value_heads": r.get("linear_num_value_heads"),
                 "linear_key_head_dim": r.get("linear_key_head_dim"),
                 "linear_value_head_dim": r.get("linear_value_head_dim"),
                 "linear_conv_kernel_dim": r.get("linear_conv_kernel_dim"), "norm": _NORM}
        bias, heads, kv = r.get("attention_bias", bool), r.get("num_attention_heads"), r.get("num_key_value_heads")
        attention = {"hidden_size": h, "num_attention_heads": heads,
                     "num_key_value_heads": heads if kv is None else kv, "head_dim": r.get("head_dim"),  # 0 refused
                     "attention_bias": bias, "attention_out_bias": bias, "qk_norm": True, "norm": _NORM,
                     "attention_dropout": float(r.get("attention_dropout", float)),
                     "partial_rotary_factor": rotary_factor(r)}
        body: list[tuple[str, Any]] = []
        for i, mixer_type in enumerate(types):
            sparse = i not in only and experts > 0 and step > 0 and (i + 1) % step == 0
            if sparse:
                shared = r.get("shared_expert_intermediate_size")
                ffn = {"num_experts": experts, "num_experts_per_tok": r.get("num_experts_per_tok"),
                       "moe_intermediate_size": r.get("moe_intermediate_size"),
                       "shared_expert_intermediate_size": shared, "shared_expert_gate": shared > 0, "hidden_act": act}
            else:
                ffn = {"intermediate_size": r.get("intermediate_size"), "gated_mlp": True, "hidden_act": act}
            if mixer_type == _LINEAR:
                body.append(("gdn_moe", GDNMoEConfig(**mixer, **ffn)) if sparse else ("gdn", GDNConfig(**mixer, **ffn)))
            else:
                body.append(("gated_attention_moe", GatedAttentionMoEConfig(**attention, **ffn)) if sparse
                            else ("gated_attention", GatedAttentionConfig(**attention, **ffn)))
        return model_from_body(r, body, name, source, _NORM)
    except (TypeError, ValueError) as exc:
        raise ConfigError(where, describe(exc)) from exc


@hookimpl
def hp_model_formats():
    """The ``qwen3_next`` ``config.json`` format."""
    yield ModelFormat(name="qwen3_next", build=model_from_qwen3_next_config, model_types=("qwen3_next",),
                      description="Hugging Face config.json of Qwen3-Next (gdn, gated attention, experts)")
