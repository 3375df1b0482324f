"""Model specs from Hugging Face ``config.json`` files.

Fields are mapped by name, never guessed from the model's name. A field the
file omits takes the default of the model type's transformers config class
(listed in :data:`DEFAULTS`); a field without such a default that the estimate
needs is refused with its path.

Supported ``model_type`` values, the transformers classes they follow and the
layer kinds they become:

* ``llama`` (``LlamaConfig``): ``dense``; biases from ``attention_bias`` / ``mlp_bias``.
* ``qwen2`` (``Qwen2Config``): ``dense``; q, k and v always carry biases
  (``Qwen2Attention`` builds them with ``bias=True``); with ``use_sliding_window``
  the layers from ``max_window_layers`` on attend within ``sliding_window``.
* ``qwen3`` (``Qwen3Config``): ``dense`` with per-head q/k RMSNorm.
* ``nemotron`` (``NemotronConfig``, Nemotron-4): ``dense`` with a plain (ungated) MLP,
  ``up_proj`` then ``down_proj`` around ``hidden_act`` (default ``relu2``, squared ReLU),
  GQA, and LayerNorms with biases (``NemotronLayerNorm1P``, a ``torch.nn.LayerNorm``)
  in every layer and before the head; RoPE on half of each head (``partial_rotary_factor``, default 0.5).
* ``mixtral`` (``MixtralConfig``): ``moe`` in every layer; the experts are
  ``intermediate_size`` wide (``num_local_experts``, ``num_experts_per_tok``);
  ``sliding_window`` (``null``: none) bounds every layer's attention.
* ``qwen2_moe`` (``Qwen2MoeConfig``): ``moe`` where ``(i + 1) % decoder_sparse_step
  == 0`` and ``i`` is not in ``mlp_only_layers``, else ``dense`` of
  ``intermediate_size``; a shared expert of ``shared_expert_intermediate_size``
  with a sigmoid gate; q/k/v biases as Qwen2.
* ``qwen3_moe`` (``Qwen3MoeConfig``): as ``qwen2_moe`` without shared experts or
  biases, with q/k RMSNorm.
* ``deepseek_v2``, ``deepseek_v3`` (``DeepseekV2Config``, ``DeepseekV3Config``):
  ``mla`` for the first ``first_k_dense_replace`` layers and where
  ``i % moe_layer_freq != 0``, else ``mla_moe`` with ``n_routed_experts`` of
  ``moe_intermediate_size`` and ``n_shared_experts * moe_intermediate_size`` of
  shared experts; ``num_nextn_predict_layers`` MTP modules (V3) of the last
  layer's kind. Group-limited routing (:attr:`~hp_plugins.kit.MoEFields.router_num_groups`,
  ``router_group_topk``): V3 always routes within ``topk_group`` of ``n_group`` groups
  (``DeepseekV3TopkRouter``; ``DeepseekV3Config``'s defaults 8 and 4); V2 only with
  ``topk_method: group_limited_greedy`` (``DeepseekV2TopkRouter``; its default ``greedy``
  routes over every expert), where ``n_group`` and ``topk_group`` have no default and must be
  stated.

Every GQA family applies rotary position embeddings to ``partial_rotary_factor`` of each query and key
head (:func:`~hp_plugins.models.stack.rotary_factor`; 1.0 unless stated or defaulted otherwise).

``mpt`` (llm-foundry's ``MPTConfig``) is the format of :mod:`hp_plugins.models.mpt`.

``mistral``, ``phi3``, ``gemma2``, ``gemma3_text``, ``gpt_oss`` and
``llama4_text`` (sliding windows, chunks, soft-capping, sinks) are the format
of :mod:`hp_plugins.models.hf_local`, which :func:`hp_model_formats` yields too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from hp_core.errors import ConfigError, SpecError, describe
from hp_core.markers import hookimpl
from hp_core.models import load_model_config
from hp_core.specs.model import LayerGroup, ModelSpec
from hp_core.types import ModelFormat
from hp_plugins.kinds.dense import DenseConfig
from hp_plugins.kinds.embedding import EmbeddingConfig
from hp_plugins.kinds.mla import MLAConfig, MLAMoEConfig
from hp_plugins.kinds.moe import MoEConfig
from hp_plugins.kinds.mtp import MTPConfig
from hp_plugins.kinds.output import OutputConfig
from hp_plugins.models.hf_local import local_formats
from hp_plugins.models.mpt import mpt_formats
from hp_plugins.models.stack import ConfigReader, grouped, rotary_factor, router_groups

__all__ = ["DEFAULTS", "MODEL_TYPES", "hp_model_formats", "load_hf_config", "model_from_hf_config"]

# Defaults of the transformers config classes for the fields the estimate reads
# (a key absent here has no default: the file must state it). ``None`` for
# num_key_value_heads / head_dim means "derived": num_attention_heads and
# hidden_size / num_attention_heads.
_COMMON = {"num_key_value_heads": None, "head_dim": None, "hidden_act": "silu", "tie_word_embeddings": False,
           "attention_dropout": 0.0, "partial_rotary_factor": 1.0}
DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {**_COMMON, "attention_bias": False, "mlp_bias": False},
    # Qwen2Config: the window applies only with use_sliding_window, from layer max_window_layers on.
    "qwen2": {**_COMMON, "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28},
    "qwen3": {**_COMMON, "head_dim": 128, "attention_bias": False},
    # NemotronConfig (transformers models/nemotron/configuration_nemotron.py): squared ReLU, no biases on the
    # projections; head_dim None derives hidden_size / num_attention_heads as the others do; half of each head rotated
    # (NemotronConfig.__post_init__ partial_rotary_factor 0.5).
    "nemotron": {**_COMMON, "hidden_act": "relu2", "attention_bias": False, "mlp_bias": False, "partial_rotary_factor": 0.5},
    "mixtral": {**_COMMON, "sliding_window": None},  # MixtralConfig: no window unless stated
    "qwen2_moe": {**_COMMON, "decoder_sparse_step": 1, "mlp_only_layers": [], "shared_expert_intermediate_size": 0},
    "qwen3_moe": {**_COMMON, "decoder_sparse_step": 1, "mlp_only_layers": [], "attention_bias": False},
    "deepseek_v2": {**_COMMON, "first_k_dense_replace": 0, "moe_layer_freq": 1, "n_shared_experts": None,
                    "q_lora_rank": None, "attention_bias": False, "num_nextn_predict_layers": 0,
                    "topk_method": "greedy"},
    "deepseek_v3": {**_COMMON, "first_k_dense_replace": 0, "moe_layer_freq": 1, "n_shared_experts": None,
                    "q_lora_rank": None, "attention_bias": False, "num_nextn_predict_layers": 0,
                    "n_group": 8, "topk_group": 4},
}


def load_hf_config(path: str | Path) -> tuple[dict[str, Any], str]:
    """Read a ``config.json`` (or the one in a folder): :func:`hp_core.models.load_model_config`."""
    return load_model_config(path)


def _gqa(r: ConfigReader, qkv_bias: bool | None = None, qk_norm: bool = False, out_bias: bool = False) -> dict[str, Any]:
    """Grouped-query attention's fields; *out_bias*: o_proj carries a bias whenever q, k and v do (transformers'
    LlamaAttention, Qwen3Attention and NemotronAttention build it with ``bias=config.attention_bias``)."""
    heads = r.get("num_attention_heads")
    bias = r.get("attention_bias", bool) if qkv_bias is None else qkv_bias
    return {
        "hidden_size": r.get("hidden_size"),
        "num_attention_heads": heads,
        "num_key_value_heads": heads if r.get("num_key_value_heads") is None else r.get("num_key_value_heads"),
        "head_dim": r.get("head_dim"),
        "attention_bias": bias,
        "attention_out_bias": out_bias and bias,
        "qk_norm": qk_norm,
        "attention_dropout": float(r.get("attention_dropout", float)),
        "partial_rotary_factor": rotary_factor(r),
    }


def _mla(r: ConfigReader) -> dict[str, Any]:
    return {
        "hidden_size": r.get("hidden_size"),
        "num_attention_heads": r.get("num_attention_heads"),
        "q_lora_rank": r.get("q_lora_rank"),
        "kv_lora_rank": r.get("kv_lora_rank"),
        "qk_nope_head_dim": r.get("qk_nope_head_dim"),
        "qk_rope_head_dim": r.get("qk_rope_head_dim"),
        "v_head_dim": r.get("v_head_dim"),
        "attention_bias": r.get("attention_bias", bool),
        "attention_dropout": float(r.get("attention_dropout", float)),
    }


def _mlp(r: ConfigReader, width_key: str = "intermediate_size") -> dict[str, Any]:
    return {"intermediate_size": r.get(width_key), "gated_mlp": True, "hidden_act": r.get("hidden_act", str)}


def _experts(r: ConfigReader, count_key: str, width_key: str, shared: int = 0, gate: bool = False) -> dict[str, Any]:
    return {
        "num_experts": r.get(count_key),
        "num_experts_per_tok": r.get("num_experts_per_tok"),
        "moe_intermediate_size": r.get(width_key),
        "shared_expert_intermediate_size": shared,
        "shared_expert_gate": gate,
        "hidden_act": r.get("hidden_act", str),
    }


def _layers_llama(r: ConfigReader, model_type: str) -> list[tuple[str, Any]]:
    mlp_bias = r.get("mlp_bias", bool) if model_type == "llama" else False
    # Qwen2Attention biases q, k and v but never o_proj.
    attention = _gqa(r, qkv_bias=True if model_type == "qwen2" else None, qk_norm=model_type == "qwen3",
                     out_bias=model_type != "qwen2")
    layer = DenseConfig(**attention, **_mlp(r), mlp_bias=mlp_bias)
    count = r.get("num_hidden_layers")
    if model_type == "qwen2" and r.get("use_sliding_window", bool):
        # transformers Qwen2Config: layers from max_window_layers on attend within the window.
        local = DenseConfig(**attention, **_mlp(r), mlp_bias=mlp_bias, sliding_window=r.window("sliding_window", nullable=False))
        first = r.get("max_window_layers")
        return [("dense", layer if i < first else local) for i in range(count)]
    return [("dense", layer)] * count


def _layers_nemotron(r: ConfigReader, model_type: str) -> list[tuple[str, Any]]:
    # NemotronMLP: down_proj(act_fn(up_proj(x))), no gate; NemotronLayerNorm1P is a LayerNorm with a bias.
    layer = DenseConfig(**_gqa(r, out_bias=True), intermediate_size=r.get("intermediate_size"), gated_mlp=False,
                        hidden_act=r.get("hidden_act", str), mlp_bias=r.get("mlp_bias", bool), norm="layernorm")
    return [("dense", layer)] * r.get("num_hidden_layers")


def _layers_mixtral(r: ConfigReader, model_type: str) -> list[tuple[str, Any]]:
    layer = MoEConfig(**_gqa(r, qkv_bias=False), **_experts(r, "num_local_experts", "intermediate_size"),
                      sliding_window=r.window("sliding_window", nullable=False))
    return [("moe", layer)] * r.get("num_hidden_layers")


def _layers_qwen_moe(r: ConfigReader, model_type: str) -> list[tuple[str, Any]]:
    qwen2 = model_type == "qwen2_moe"
    attention = _gqa(r, qkv_bias=True if qwen2 else None, qk_norm=not qwen2)
    shared = r.get("shared_expert_intermediate_size") if qwen2 else 0
    sparse = MoEConfig(**attention, **_experts(r, "num_experts", "moe_intermediate_size", shared, gate=qwen2 and shared > 0))
    dense = None
    step, only = r.get("decoder_sparse_step"), set(r.indices("mlp_only_layers"))
    layers = []
    for i in range(r.get("num_hidden_layers")):
        if i not in only and step > 0 and (i + 1) % step == 0:
            layers.append(("moe", sparse))
        else:
            dense = dense or DenseConfig(**attention, **_mlp(r))
            layers.append(("dense", dense))
    return layers


def _deepseek_groups(r: ConfigReader, model_type: str) -> dict[str, Any]:
    experts = r.get("n_routed_experts")
    if model_type == "deepseek_v3":
        return router_groups(r, experts)
    method = r.get("topk_method", str)
    if method == "group_limited_greedy":
        return router_groups(r, experts)
    if method != "greedy":
        raise r.fail("topk_method", "'greedy' or 'group_limited_greedy' (DeepseekV2TopkRouter)", method)
    return {}


def _layers_deepseek(r: ConfigReader, model_type: str) -> list[tuple[str, Any]]:
    attention = _mla(r)
    n_shared = r.get("n_shared_experts") or 0
    width = r.get("moe_intermediate_size")
    # transformers' DeepseekV3TopkRouter.forward runs its linear on an fp32 copy of its input
    # (hidden_states.type(torch.float32)); that copy and the fp32 scores are kept only where a runtime
    # states transformers' modules (the fp32_norm_copy trait), as for Nemotron-H's router.
    sparse = MLAMoEConfig(**attention, **_experts(r, "n_routed_experts", "moe_intermediate_size", n_shared * width),
                          router_fp32=True, **_deepseek_groups(r, model_type))
    dense = MLAConfig(**attention, **_mlp(r))
    first, freq = r.get("first_k_dense_replace"), r.get("moe_layer_freq")
    return [
        ("mla_moe", sparse) if i >= first and freq > 0 and i % freq == 0 else ("mla", dense)
        for i in range(r.get("num_hidden_layers"))
    ]


_BUILDERS: dict[str, Callable[[ConfigReader, str], list[tuple[str, Any]]]] = {
    "llama": _layers_llama,
    "qwen2": _layers_llama,
    "qwen3": _layers_llama,
    "nemotron": _layers_nemotron,
    "mixtral": _layers_mixtral,
    "qwen2_moe": _layers_qwen_moe,
    "qwen3_moe": _layers_qwen_moe,
    "deepseek_v2": _layers_deepseek,
    "deepseek_v3": _layers_deepseek,
}
MODEL_TYPES = tuple(sorted(_BUILDERS))
# The norm before the head where it is not RMSNorm (NemotronModel.norm: NemotronLayerNorm1P).
_HEAD_NORMS = {"nemotron": "layernorm"}


def model_from_hf_config(cfg: Mapping[str, Any], *, name: str, source: str, where: str = "config.json") -> ModelSpec:
    """The layer stack of a Hugging Face config: embedding, decoder layers, output head (and MTP).

    Args:
        cfg: The ``config.json`` mapping.
        name: The model's display name.
        source: Provenance to record.
        where: How error messages name the file.

    Raises:
        ConfigError: An unsupported ``model_type`` or a missing/invalid field.
    """
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or model_type not in _BUILDERS:
        raise ConfigError(
            f"{where} $.model_type", f"model_type {model_type!r} is not supported; supported: {', '.join(MODEL_TYPES)}"
        )
    r = ConfigReader(cfg, DEFAULTS[model_type], where)
    try:
        body = grouped(_BUILDERS[model_type](r, model_type))
        hidden, vocab = r.get("hidden_size"), r.get("vocab_size")
        groups = [LayerGroup("embedding", EmbeddingConfig(vocab_size=vocab, hidden_size=hidden)), *body]
        groups.append(LayerGroup("output", OutputConfig(vocab_size=vocab, hidden_size=hidden,
                                                        tie_word_embeddings=r.get("tie_word_embeddings", bool),
                                                        norm=_HEAD_NORMS.get(model_type, "rmsnorm"))))
        depth = r.get("num_nextn_predict_layers") if model_type.startswith("deepseek") else 0
        if depth:
            last = body[-1]
            mtp = MTPConfig(vocab_size=vocab, hidden_size=hidden, layer=LayerGroup(last.kind, last.config, 1))
            groups.append(LayerGroup("mtp", mtp, depth))
    except SpecError as exc:
        raise ConfigError(f"{where} $.{exc.path}", exc.message) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(where, describe(exc)) from None
    return ModelSpec(name=name, layers=tuple(groups), source=source)


@hookimpl
def hp_model_formats():
    """The Hugging Face ``config.json`` format, for every ``model_type`` in :data:`MODEL_TYPES`."""
    yield ModelFormat(name="hf", build=model_from_hf_config, model_types=MODEL_TYPES,
                      description="Hugging Face config.json: " + ", ".join(MODEL_TYPES))
    yield from local_formats()
    yield from mpt_formats()
