"""Hugging Face ``config.json`` formats of the local-attention families.

Each ``model_type`` is mapped field by field onto the built-in ``dense`` and
``moe`` kinds with the kit's local-attention fields
(:mod:`hp_plugins.kit.local_attention`); a field the file omits takes the
default of the model type's transformers config class (:data:`DEFAULTS`,
transformers 5.24.0), and a field without one is refused with its path. A
field stated as ``null`` means what transformers reads it as (no window).

* ``mistral`` (``MistralConfig``): ``dense``, every layer with the
  ``sliding_window`` (default 4096; ``null``: full attention), as
  ``MistralModel`` masks every layer with it.
* ``phi3`` (``Phi3Config``): ``dense`` with the fused ``qkv_proj`` and
  ``gate_up_proj`` (the same parameters as separate projections; ``fused_qkv``:
  v's slice keeps the projection's whole output alive), the
  ``sliding_window`` on every layer (default ``null``), ``resid_pdrop`` as
  the dropout after each block.
* ``gemma2`` (``Gemma2Config``), ``gemma3_text`` (``Gemma3TextConfig``):
  ``dense`` with four norms per layer (the blocks' post-norms), the gated
  ``hidden_activation``, ``sliding_window`` on the ``layer_types`` marked
  ``sliding_attention`` (Gemma 2 by default every other layer from the first;
  Gemma 3 five of every ``sliding_window_pattern`` = 6), the scores soft-capped
  by ``attn_logit_softcapping`` and the logits by ``final_logit_softcapping``;
  Gemma 3 adds per-head q/k norms. The embedding's scaling by ``sqrt(h)``
  keeps nothing. Their norms are ``rmsnorm_fp32_weight`` (the module scales
  by ``1 + weight`` in fp32), as GPT-OSS's.
* ``gpt_oss`` (``GptOssConfig``): ``moe`` in every layer: attention with
  biases on q, k, v and the output and a sink logit per head, the
  ``sliding_window`` on ``sliding_attention`` layers (every other from the
  first); ``num_local_experts`` experts of ``intermediate_size`` with biases,
  a router with a bias and a softmax over its top ``num_experts_per_tok``
  logits, the clamped SwiGLU (:mod:`hp_plugins.kit.clamped_glu`).
* ``llama4_text`` (``Llama4TextConfig``): ``moe`` on ``moe_layers`` (by
  default every ``interleave_moe_layer_step``-th) with ``num_local_experts`` of
  ``intermediate_size`` and one shared expert as wide, else ``dense`` of
  ``intermediate_size_mlp``; layers using RoPE (``no_rope_layers[i] == 1``,
  by default all but every fourth) attend within chunks of
  ``attention_chunk_size`` and, with ``use_qk_norm``, L2-normalise q and k
  (no weights); the others attend globally and rotate nothing (NoPE). Its eager softmax runs in the
  compute dtype (``softmax_in_compute_dtype``: ``Llama4`` ``eager_attention_forward``).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from hp_core.bounds import short_repr
from hp_core.errors import ConfigError, describe
from hp_core.specs.model import LayerGroup, ModelSpec
from hp_core.types import ModelFormat
from hp_plugins.kinds.dense import DenseConfig
from hp_plugins.kinds.embedding import EmbeddingConfig
from hp_plugins.kinds.moe import MoEConfig
from hp_plugins.kinds.output import OutputConfig
from hp_plugins.models.stack import ConfigReader, grouped, rotary_factor

__all__ = ["DEFAULTS", "MODEL_TYPES", "local_formats", "model_from_local_config"]

# The norm type of the families whose transformers RMSNorm scales by its weight in fp32
# (Gemma2RMSNorm, Gemma3RMSNorm: ``* (1.0 + self.weight.float())``; GptOssRMSNorm:
# ``(self.weight * hidden_states)`` on the fp32 tensor; hp_plugins.kit.norms.fp32_norm_bytes).
FP32_WEIGHT_NORM = "rmsnorm_fp32_weight"
_FP32_WEIGHT_TYPES = ("gemma2", "gemma3_text", "gpt_oss")
_COMMON = {"num_key_value_heads": None, "head_dim": None, "attention_dropout": 0.0, "partial_rotary_factor": 1.0}
_GEMMA = {**_COMMON, "head_dim": 256, "attention_bias": False, "hidden_activation": "gelu_pytorch_tanh",
          "tie_word_embeddings": True, "sliding_window": 4096, "layer_types": None}
# Defaults of the transformers 5.24.0 config classes for the fields read here (absent: no default).
DEFAULTS: dict[str, dict[str, Any]] = {
    "mistral": {**_COMMON, "hidden_act": "silu", "tie_word_embeddings": False, "sliding_window": 4096},
    "phi3": {**_COMMON, "hidden_act": "silu", "tie_word_embeddings": False, "sliding_window": None,
             "resid_pdrop": 0.0},
    "gemma2": {**_GEMMA, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
    "gemma3_text": {**_GEMMA, "attn_logit_softcapping": None, "final_logit_softcapping": None,
                    "sliding_window_pattern": 6},
    "gpt_oss": {**_COMMON, "head_dim": 64, "attention_bias": True, "tie_word_embeddings": False,
                "sliding_window": 128, "layer_types": None, "num_experts_per_tok": 4, "hidden_act": "silu"},
    "llama4_text": {**_COMMON, "head_dim": 128, "attention_bias": False, "hidden_act": "silu",
                    "tie_word_embeddings": False, "attention_chunk_size": 8192, "use_qk_norm": True,
                    "no_rope_layers": None, "no_rope_layer_interval": 4, "moe_layers": None,
                    "interleave_moe_layer_step": 1, "layer_types": None},
}


def _gqa(r: ConfigReader, bias: bool = False, **extra: Any) -> dict[str, Any]:
    heads = r.get("num_attention_heads")
    return {
        "hidden_size": r.get("hidden_size"),
        "num_attention_heads": heads,
        "num_key_value_heads": heads if r.get("num_key_value_heads") is None else r.get("num_key_value_heads"),
        "head_dim": r.get("head_dim"),
        "attention_bias": bias,
        "attention_out_bias": bias,
        "attention_dropout": float(r.get("attention_dropout", float)),
        "partial_rotary_factor": rotary_factor(r),
        **extra,
    }


def _dense(r: ConfigReader, attention: dict[str, Any], act_key: str = "hidden_act", width_key: str = "intermediate_size",
           **extra: Any) -> DenseConfig:
    return DenseConfig(**attention, intermediate_size=r.get(width_key), gated_mlp=True, hidden_act=r.get(act_key, str),
                       **extra)


def _alternating(layers: int, pattern: int) -> list[str]:
    """transformers' default: layer ``i`` slides unless ``(i + 1) % pattern == 0``."""
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]


def _layers_every(r: ConfigReader, model_type: str) -> list[tuple[str, Any]]:
    """Mistral and Phi-3: one dense layer, its window on every layer."""
    phi3 = model_type == "phi3"
    attention = _gqa(r, sliding_window=r.window("sliding_window"), fused_qkv=phi3)
    dropout = float(r.get("resid_pdrop", float)) if phi3 else 0.0
    return [("dense", _dense(r, attention, hidden_dropout=dropout))] * r.get("num_hidden_layers")


def _layers_gemma(r: ConfigReader, model_type: str) -> list[tuple[str, Any]]:
    gemma3 = model_type == "gemma3_text"
    count = r.get("num_hidden_layers")
    pattern = r.get("sliding_window_pattern") if gemma3 else 2
    types = r.layer_types(_alternating(count, pattern), ("sliding_attention", "full_attention"))
    softcap = r.get("attn_logit_softcapping", float, nullable=True)
    base = _gqa(r, bias=r.get("attention_bias", bool), qk_norm=gemma3, norm=FP32_WEIGHT_NORM,
                attn_logit_softcapping=None if softcap is None else float(softcap))
    full = _dense(r, base, "hidden_activation", post_block_norms=True)
    sliding = _dense(r, {**base, "sliding_window": r.window("sliding_window")}, "hidden_activation", post_block_norms=True)
    return [("dense", sliding if t == "sliding_attention" else full) for t in types]


def _layers_gpt_oss(r: ConfigReader, model_type: str) -> list[tuple[str, Any]]:
    count = r.get("num_hidden_layers")
    types = r.layer_types(_alternating(count, 2), ("sliding_attention", "full_attention"))
    experts = {
        "num_experts": r.get("num_local_experts"), "num_experts_per_tok": r.get("num_experts_per_tok"),
        "moe_intermediate_size": r.get("intermediate_size"), "router_bias": True, "router_topk_softmax": True,
        "expert_bias": True, "expert_activation": "clamped_swiglu",
    }
    base = _gqa(r, bias=r.get("attention_bias", bool), attention_sinks=True, norm=FP32_WEIGHT_NORM)
    full = MoEConfig(**base, **experts)
    sliding = MoEConfig(**base, sliding_window=r.window("sliding_window"), **experts)
    return [("moe", sliding if t == "sliding_attention" else full) for t in types]


def _layers_llama4(r: ConfigReader, model_type: str) -> list[tuple[str, Any]]:
    count = r.get("num_hidden_layers")
    interval, step = r.get("no_rope_layer_interval"), r.get("interleave_moe_layer_step")
    # transformers: an empty or absent no_rope_layers takes the default (1: the layer uses RoPE).
    rope = r.get("no_rope_layers", list, nullable=True) or [int((i + 1) % interval != 0) for i in range(count)]
    moe_layers = r.get("moe_layers", list, nullable=True)
    if moe_layers is None:
        moe_layers = list(range(step - 1, count, step)) if step > 0 else []
    if len(rope) != count:
        raise ConfigError(f"{r.where} $.no_rope_layers", f"must hold one 0 or 1 per layer ({count}), got {len(rope)}")
    chunk = r.window("attention_chunk_size")
    default_types = ["chunked_attention" if uses and chunk is not None else "full_attention" for uses in rope]
    types = r.layer_types(default_types, ("chunked_attention", "full_attention"))
    qk_norm = r.get("use_qk_norm", bool)
    width = r.get("intermediate_size")
    experts = {"num_experts": r.get("num_local_experts"), "num_experts_per_tok": r.get("num_experts_per_tok"),
               "moe_intermediate_size": width, "shared_expert_intermediate_size": width,
               "hidden_act": r.get("hidden_act", str)}
    layers = []
    for i in range(count):
        # A NoPE layer (no_rope_layers[i] == 0) rotates nothing: Llama4TextAttention applies RoPE only where use_rope.
        attention = _gqa(r, bias=r.get("attention_bias", bool), qk_norm=bool(qk_norm and rope[i]), qk_norm_weight=False,
                         softmax_in_compute_dtype=True, **({} if rope[i] else {"partial_rotary_factor": 0.0}),
                         attention_chunk_size=chunk if types[i] == "chunked_attention" else None)
        if i in moe_layers:
            layers.append(("moe", MoEConfig(**attention, **experts)))
        else:
            layers.append(("dense", _dense(r, attention, width_key="intermediate_size_mlp")))
    return layers


_BUILDERS: dict[str, Callable[[ConfigReader, str], list[tuple[str, Any]]]] = {
    "mistral": _layers_every,
    "phi3": _layers_every,
    "gemma2": _layers_gemma,
    "gemma3_text": _layers_gemma,
    "gpt_oss": _layers_gpt_oss,
    "llama4_text": _layers_llama4,
}
MODEL_TYPES = tuple(sorted(_BUILDERS))


def model_from_local_config(cfg: Mapping[str, Any], *, name: str, source: str, where: str = "config.json") -> ModelSpec:
    """The layer stack of a config of one of :data:`MODEL_TYPES`: embedding, decoder layers, output head.

    Raises:
        ConfigError: An unsupported ``model_type`` or a missing/invalid field, named by its path.
    """
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or model_type not in _BUILDERS:
        raise ConfigError(f"{where} $.model_type",
                          f"model_type {short_repr(model_type)} is not one of {', '.join(MODEL_TYPES)}")
    r = ConfigReader(cfg, DEFAULTS[model_type], where)
    try:
        body = grouped(_BUILDERS[model_type](r, model_type))
        hidden, vocab = r.get("hidden_size"), r.get("vocab_size")
        final_cap = r.get("final_logit_softcapping", float, nullable=True) if model_type.startswith("gemma") else None
        output = OutputConfig(vocab_size=vocab, hidden_size=hidden, tie_word_embeddings=r.get("tie_word_embeddings", bool),
                              final_logit_softcapping=None if final_cap is None else float(final_cap),
                              norm=FP32_WEIGHT_NORM if model_type in _FP32_WEIGHT_TYPES else "rmsnorm")
        groups = [LayerGroup("embedding", EmbeddingConfig(vocab_size=vocab, hidden_size=hidden)), *body,
                  LayerGroup("output", output)]
    except (TypeError, ValueError) as exc:
        raise ConfigError(where, describe(exc)) from exc
    return ModelSpec(name=name, layers=tuple(groups), source=source)


def local_formats():
    """The format record (yielded by :func:`hp_plugins.models.hf.hp_model_formats`)."""
    yield ModelFormat(name="hf_local", build=model_from_local_config, model_types=MODEL_TYPES,
                      description="Hugging Face config.json of local-attention families: " + ", ".join(MODEL_TYPES))
