"""Model formats of state-space and hybrid ``config.json`` files: ``mamba2`` and ``nemotron_h``.

Fields are read by name as transformers' config classes read them (5.24:
``Mamba2Config``, ``NemotronHConfig``); a field the file omits takes that class's
default where it is a structural flag (:data:`DEFAULTS`), and the fields that
size the model must be stated.

* ``mamba2`` (``Mamba2ForCausalLM``): an embedding, ``num_hidden_layers``
  ``mamba2`` layers (``Mamba2Block``: ``num_heads`` heads of ``head_dim``,
  ``hidden_size * expand == num_heads * head_dim`` as ``Mamba2Config`` checks),
  the final norm and the LM head.
* ``nemotron_h`` (``NemotronHForCausalLM``): layer ``i`` is
  ``hybrid_override_pattern[i]`` (or ``layers_block_type`` / ``layer_types``):
  ``M`` a ``mamba2`` layer (``mamba_num_heads``, ``mamba_head_dim``,
  ``ssm_state_size``, ``n_groups``, ``conv_kernel``, ``chunk_size``; the legacy
  ``mamba_n_groups``, ``mamba_d_conv``, ``mamba_conv_bias``, ``mamba_chunk_size``
  names as ``NemotronHConfig.__post_init__`` renames them), ``*`` an
  ``attention`` layer (``head_dim``, no biases, no rotary embedding), ``-`` an
  ``mlp`` layer (``intermediate_size``, ``mlp_hidden_act``), ``E`` a ``moe_only``
  layer (``NemotronHMoE``: ``n_routed_experts`` (or ``num_local_experts``) ungated
  experts of ``moe_intermediate_size``, ``num_experts_per_tok`` per token, a shared
  expert of ``moe_shared_expert_intermediate_size``, ``mlp_hidden_act``, the latent
  projections where ``moe_latent_size`` is stated, an fp32 router routing within
  ``topk_group`` of ``n_group`` expert groups (``NemotronHTopkRouter``; defaults 1 and 1,
  no limit); refused with
  ``mlp_bias``, whose shared-expert and latent biases are not priced). Every norm
  is ``NemotronHRMSNorm`` (``rmsnorm_fp32_weight``).
  ``num_nextn_predict_layers`` (default 0) multi-token-prediction depths follow the
  output head, each of the layers ``mtp_hybrid_override_pattern`` (or
  ``mtp_layers_block_type``) states, in order, as the main pattern's symbols build
  them: hp's ``mtp`` kind (``enorm``, ``hnorm``, ``eh_proj``, the layers, a final norm;
  the checkpoint's ``mtp.layers.{i}`` as NVIDIA-NeMo/Megatron-Bridge v0.6.0's
  ``nemotron_h_bridge.py`` maps them onto Megatron-Core's hybrid MTP depth). A config
  with depths and no MTP pattern is refused (Megatron-Bridge refuses it too).
"""

from __future__ import annotations

from typing import Any, Mapping

from hp_core.errors import ConfigError, describe
from hp_core.markers import hookimpl
from hp_core.specs.model import LayerGroup, ModelSpec
from hp_core.types import ModelFormat
from hp_plugins.kinds.embedding import EmbeddingConfig
from hp_plugins.kinds.hybrid import AttentionLayerConfig, MLPLayerConfig, MoELayerConfig
from hp_plugins.kinds.mamba import Mamba2LayerConfig
from hp_plugins.kinds.mtp import MTPConfig
from hp_plugins.kinds.output import OutputConfig
from hp_plugins.models.stack import ConfigReader, grouped, router_groups

__all__ = ["DEFAULTS", "grouped", "hp_model_formats", "model_from_body", "model_from_mamba2_config", "model_from_nemotron_h_config"]

# transformers 5.24 config classes' defaults for the structural fields the estimate reads.
DEFAULTS: dict[str, dict[str, Any]] = {
    "mamba2": {"head_dim": 64, "state_size": 128, "expand": 2, "conv_kernel": 4, "n_groups": 8, "use_bias": False,
               "use_conv_bias": True, "chunk_size": 256, "tie_word_embeddings": False},
    "nemotron_h": {"head_dim": 128, "num_key_value_heads": None, "attention_bias": False, "attention_dropout": 0.0,
                   "mlp_hidden_act": "relu2", "mlp_bias": False, "mamba_head_dim": 64, "ssm_state_size": 128,
                   "n_groups": 8, "conv_kernel": 4, "use_conv_bias": True, "chunk_size": 128, "use_bias": False,
                   "tie_word_embeddings": False, "hybrid_override_pattern": None, "layers_block_type": None,
                   "layer_types": None, "moe_latent_size": None, "n_group": 1, "topk_group": 1,
                   "num_nextn_predict_layers": 0, "mtp_hybrid_override_pattern": None, "mtp_layers_block_type": None},
}
# NemotronHConfig.__post_init__: the legacy names it renames.
_NEMOTRON_LEGACY = {"n_groups": "mamba_n_groups", "conv_kernel": "mamba_d_conv", "use_conv_bias": "mamba_conv_bias",
                    "chunk_size": "mamba_chunk_size", "n_routed_experts": "num_local_experts"}
# NemotronHConfig._pattern_to_list.
# NemotronHRMSNorm multiplies by ``self.weight.to(torch.float32)`` before casting back
# (hp_plugins.kit.norms.fp32_norm_bytes); its gated norm in the mixer is the kit's own term.
_NEMOTRON_NORM = "rmsnorm_fp32_weight"
_PATTERN = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}


def model_from_body(r: ConfigReader, body: list[tuple[str, Any]], name: str, source: str, norm: str = "rmsnorm") -> ModelSpec:
    h, vocab = r.get("hidden_size"), r.get("vocab_size")
    groups = [LayerGroup("embedding", EmbeddingConfig(vocab_size=vocab, hidden_size=h)), *grouped(body),
              LayerGroup("output", OutputConfig(vocab_size=vocab, hidden_size=h, norm=norm,
                                                tie_word_embeddings=r.get("tie_word_embeddings", bool)))]
    return ModelSpec(name=name, layers=tuple(groups), source=source)


def _check_type(cfg: Mapping[str, Any], model_type: str, where: str) -> None:
    if cfg.get("model_type") != model_type:
        raise ConfigError(f"{where} $.model_type", f"must be {model_type!r}, got {cfg.get('model_type')!r}")


def model_from_mamba2_config(cfg: Mapping[str, Any], *, name: str, source: str = "", where: str = "config.json") -> ModelSpec:
    """The layer stack of a ``mamba2`` ``config.json`` (module docstring).

    Raises:
        ConfigError: A missing or invalid field, or ``hidden_size * expand != num_heads * head_dim``.
    """
    _check_type(cfg, "mamba2", where)
    r = ConfigReader(cfg, DEFAULTS["mamba2"], where)
    h, heads, head_dim = r.get("hidden_size"), r.get("num_heads"), r.get("head_dim")
    if h * r.get("expand") != heads * head_dim:
        raise ConfigError(f"{where} $.num_heads", f"hidden_size * expand ({h * r.get('expand')}) must equal "
                                                  f"num_heads * head_dim ({heads * head_dim}), as Mamba2Config checks")
    try:
        layer = Mamba2LayerConfig(
            hidden_size=h, mamba_num_heads=heads, mamba_head_dim=head_dim, ssm_state_size=r.get("state_size"),
            n_groups=r.get("n_groups"), conv_kernel=r.get("conv_kernel"), chunk_size=r.get("chunk_size"),
            use_bias=r.get("use_bias", bool), use_conv_bias=r.get("use_conv_bias", bool),
        )
        return model_from_body(r, [("mamba2", layer)] * r.get("num_hidden_layers"), name, source)
    except (TypeError, ValueError) as exc:
        raise ConfigError(where, describe(exc)) from exc


def _nemotron_types(r: ConfigReader, mtp: bool = False) -> list[str]:
    """The layer types of the main pattern (or, with *mtp*, of one MTP depth)."""
    key = "mtp_hybrid_override_pattern" if mtp else "hybrid_override_pattern"
    pattern = r.get(key, str)
    if pattern is not None:
        if not pattern or any(ch not in _PATTERN for ch in pattern):
            raise ConfigError(f"{r.where} $.{key}",
                              f"must be a string of {', '.join(_PATTERN)} (one per layer), got {pattern!r}")
        return [_PATTERN[ch] for ch in pattern]
    for key in (("mtp_layers_block_type",) if mtp else ("layers_block_type", "layer_types")):
        stated = r.get(key, list)
        if stated is not None:
            if not stated or any(t not in _PATTERN.values() for t in stated):
                raise ConfigError(f"{r.where} $.{key}", f"must list layer types from {sorted(_PATTERN.values())}, got {stated!r}")
            return list(stated)
    if mtp:
        raise ConfigError(f"{r.where} $.mtp_hybrid_override_pattern", "is missing (or mtp_layers_block_type); "
                                                                      "num_nextn_predict_layers > 0 needs the depth's layers")
    raise ConfigError(f"{r.where} $.hybrid_override_pattern", "is missing (or layers_block_type); the layer stack needs it")


def model_from_nemotron_h_config(cfg: Mapping[str, Any], *, name: str, source: str = "",
                                 where: str = "config.json") -> ModelSpec:
    """The layer stack of a ``nemotron_h`` ``config.json`` (module docstring).

    Raises:
        ConfigError: A missing or invalid field, or an ``E`` (mixture-of-experts) layer.
    """
    _check_type(cfg, "nemotron_h", where)
    r = ConfigReader(cfg, DEFAULTS["nemotron_h"], where, _NEMOTRON_LEGACY)
    types = _nemotron_types(r)
    depths = r.get("num_nextn_predict_layers")
    mtp_types = _nemotron_types(r, mtp=True) if depths else []
    if "moe" in types + mtp_types and r.get("mlp_bias", bool):
        raise ConfigError(f"{where} $.mlp_bias", "true with E (mixture-of-experts) layers: the biases of their shared "
                                                 "expert and latent projections are not priced; set it false")
    h = r.get("hidden_size")
    try:
        built: dict[str, tuple[str, Any]] = {}
        for layer_type in types + mtp_types:
            if layer_type not in built:
                if layer_type == "linear_attention":
                    built[layer_type] = ("mamba2", Mamba2LayerConfig(
                        hidden_size=h, mamba_num_heads=r.get("mamba_num_heads"), mamba_head_dim=r.get("mamba_head_dim"),
                        ssm_state_size=r.get("ssm_state_size"), n_groups=r.get("n_groups"),
                        conv_kernel=r.get("conv_kernel"), chunk_size=r.get("chunk_size"),
                        use_bias=r.get("use_bias", bool), use_conv_bias=r.get("use_conv_bias", bool), norm=_NEMOTRON_NORM))
                elif layer_type == "moe":
                    built[layer_type] = ("moe_only", MoELayerConfig(
                        hidden_size=h, num_experts=r.get("n_routed_experts"), num_experts_per_tok=r.get("num_experts_per_tok"),
                        moe_intermediate_size=r.get("moe_intermediate_size"),
                        shared_expert_intermediate_size=r.get("moe_shared_expert_intermediate_size"),
                        hidden_act=r.get("mlp_hidden_act", str), expert_activation="mlp",
                        moe_latent_size=r.get("moe_latent_size"), router_fp32=True, norm=_NEMOTRON_NORM,
                        **router_groups(r, r.get("n_routed_experts"))))
                elif layer_type == "full_attention":
                    heads, kv = r.get("num_attention_heads"), r.get("num_key_value_heads")  # None: MHA; 0 refused
                    built[layer_type] = ("attention", AttentionLayerConfig(
                        hidden_size=h, num_attention_heads=heads, num_key_value_heads=heads if kv is None else kv,
                        head_dim=r.get("head_dim"), attention_dropout=float(r.get("attention_dropout", float)),
                        norm=_NEMOTRON_NORM))
                else:
                    built[layer_type] = ("mlp", MLPLayerConfig(
                        hidden_size=h, intermediate_size=r.get("intermediate_size"), gated_mlp=False,
                        hidden_act=r.get("mlp_hidden_act", str), mlp_bias=r.get("mlp_bias", bool), norm=_NEMOTRON_NORM))
        model = model_from_body(r, [built[t] for t in types], name, source, _NEMOTRON_NORM)
        if not depths:
            return model
        # Each depth: its layers in order, as the main pattern's (module docstring).
        layers = tuple(LayerGroup(*built[t], 1) for t in mtp_types)
        mtp = MTPConfig(vocab_size=r.get("vocab_size"), hidden_size=h, norm=_NEMOTRON_NORM,
                        **({"layer": layers[0]} if len(layers) == 1 else {"layers": layers}))
        return ModelSpec(name=name, layers=(*model.layers, LayerGroup("mtp", mtp, depths)), source=source)
    except (TypeError, ValueError) as exc:
        raise ConfigError(where, describe(exc)) from exc


@hookimpl
def hp_model_formats():
    """The ``mamba2`` and ``nemotron_h`` ``config.json`` formats."""
    yield ModelFormat(name="mamba2", build=model_from_mamba2_config, model_types=("mamba2",),
                      description="Hugging Face config.json of Mamba-2 models (mamba2)")
    yield ModelFormat(name="nemotron_h", build=model_from_nemotron_h_config, model_types=("nemotron_h",),
                      description="Hugging Face config.json of Nemotron-H hybrids (nemotron_h: M, *, -, E layers)")
