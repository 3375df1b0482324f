"""MosaicML MPT ``config.json`` files (llm-foundry's ``MPTConfig``), as llm-foundry builds them.

``model_type`` ``mpt``, read field by field as llm-foundry's
``llmfoundry/models/mpt/configuration_mpt.py`` names them; a field the file
omits takes that class's default (:data:`DEFAULTS`; the ``attn_config`` and
``ffn_config`` defaults of ``llmfoundry/models/utils/config_defaults.py``).
The model (``MPTModel`` in ``llmfoundry/models/mpt/modeling_mpt.py``):

* ``embedding`` of ``vocab_size x d_model`` and, with ``learned_pos_emb``
  (the default), a learned absolute position table of ``max_seq_len x d_model``
  (``wpe``) added to it;
* ``n_layers`` ``dense`` blocks: pre-norm LayerNorm (``norm_type``
  ``low_precision_layernorm`` or ``layernorm``, with a bias),
  multi-head attention through one fused ``Wqkv`` of ``3 d_model`` outputs and
  ``out_proj``, an ``mptmlp`` of ``expansion_ratio * d_model`` (``up_proj``,
  GeLU, ``down_proj``); every linear layer with a bias (``no_bias`` false);
* ``output``: the final LayerNorm ``norm_f`` and the head, tied to the token
  embedding unless ``tie_word_embeddings`` is false.

What hp does not price is refused with the field's path: ALiBi, rotary or no
position embedding other than the learned table (``attn_config.alibi``,
``attn_config.rope``, ``attn_config.nope``), grouped or multi-query attention
(``attn_config.attn_type``), q/k norms (``qk_ln``, ``qk_gn``), clipped q/k/v
(``clip_qkv``), sliding windows, soft-capping, feed-forward types other than
``mptmlp`` and activations other than GeLU, and ``embedding_fraction`` other
than 1.
"""

from __future__ import annotations

from typing import Any, Mapping

from hp_core.errors import ConfigError, SpecError, describe
from hp_core.specs.model import LayerGroup, ModelSpec
from hp_core.types import ModelFormat
from hp_plugins.kinds.dense import DenseConfig
from hp_plugins.kinds.embedding import EmbeddingConfig
from hp_plugins.kinds.output import OutputConfig
from hp_plugins.models.stack import ConfigReader

__all__ = ["DEFAULTS", "model_from_mpt_config", "mpt_formats"]

# MPTConfig.__init__ defaults (llm-foundry configuration_mpt.py).
DEFAULTS: dict[str, Any] = {
    "d_model": 2048, "n_heads": 16, "n_layers": 24, "expansion_ratio": 4, "max_seq_len": 2048, "vocab_size": 50368,
    "resid_pdrop": 0.0, "emb_pdrop": 0.0, "learned_pos_emb": True, "no_bias": False, "embedding_fraction": 1.0,
    "norm_type": "low_precision_layernorm", "tie_word_embeddings": True,
}
# attn_config_defaults / ffn_config_defaults (llm-foundry llmfoundry/models/utils/config_defaults.py).
ATTN_DEFAULTS: dict[str, Any] = {
    "attn_type": "multihead_attention", "attn_pdrop": 0.0, "qk_ln": False, "qk_gn": False, "fused_qkv": True,
    "clip_qkv": None, "sliding_window_size": -1, "attn_logit_softcapping": None, "alibi": False, "rope": False,
    "nope": False,
}
FFN_DEFAULTS: dict[str, Any] = {"ffn_type": "mptmlp"}
# MPTMLP's activation: torch.nn.GELU(approximate='none') unless ffn_act_fn states another (llm-foundry ffn.py).
_NORMS = {"low_precision_layernorm": "layernorm", "layernorm": "layernorm"}


def _section(cfg: Mapping[str, Any], key: str, defaults: Mapping[str, Any], where: str) -> ConfigReader:
    value = cfg.get(key) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} $.{key}", f"must be a mapping, got {type(value).__name__}")
    return ConfigReader(value, defaults, f"{where} $.{key}:")


def _refuse(path: str, what: str) -> ConfigError:
    return ConfigError(path, f"{what} is not priced by hp; see docs/kinds.md (MPT)")


def model_from_mpt_config(cfg: Mapping[str, Any], *, name: str, source: str, where: str = "config.json") -> ModelSpec:
    """The layer stack of an llm-foundry MPT config: embedding (with ``wpe``), ``n_layers`` dense blocks, the head.

    Raises:
        ConfigError: A missing or invalid field, or a feature hp does not price.
    """
    if cfg.get("model_type") != "mpt":
        raise ConfigError(f"{where} $.model_type", f"model_type {cfg.get('model_type')!r} is not 'mpt'")
    r = ConfigReader(cfg, DEFAULTS, where)
    attn = _section(cfg, "attn_config", ATTN_DEFAULTS, where)
    ffn = _section(cfg, "ffn_config", FFN_DEFAULTS, where)
    for key in ("alibi", "rope", "nope", "qk_ln", "qk_gn"):
        if attn.get(key, bool):
            raise _refuse(f"{where} $.attn_config.{key}", f"attn_config.{key}: true")
    for key in ("clip_qkv", "attn_logit_softcapping"):
        if attn.get(key, float, nullable=True) is not None:
            raise _refuse(f"{where} $.attn_config.{key}", f"attn_config.{key}")
    if attn.get("sliding_window_size", float) != -1:
        raise _refuse(f"{where} $.attn_config.sliding_window_size", "a sliding window")
    if attn.get("attn_type", str) != "multihead_attention":
        raise _refuse(f"{where} $.attn_config.attn_type", f"attn_type {attn.get('attn_type', str)!r}")
    if ffn.get("ffn_type", str) != "mptmlp":
        raise _refuse(f"{where} $.ffn_config.ffn_type", f"ffn_type {ffn.get('ffn_type', str)!r}")
    if "ffn_act_fn" in (cfg.get("ffn_config") or {}):
        raise _refuse(f"{where} $.ffn_config.ffn_act_fn", "an activation other than MPTMLP's default GeLU")
    if r.get("embedding_fraction", float) != 1.0:
        raise _refuse(f"{where} $.embedding_fraction", "embedding_fraction other than 1")
    norm = r.get("norm_type", str)
    if norm not in _NORMS:
        raise _refuse(f"{where} $.norm_type", f"norm_type {norm!r}")
    if r.get("no_bias", bool):
        # hp's LayerNorm always carries its bias; llm-foundry drops it with no_bias.
        raise _refuse(f"{where} $.no_bias", "no_bias: true (LayerNorms without a bias)")
    if not r.get("learned_pos_emb", bool):
        raise _refuse(f"{where} $.learned_pos_emb", "an MPT without position embeddings (learned_pos_emb: false)")
    try:
        h, heads, bias = r.get("d_model"), r.get("n_heads"), True
        vocab, layers = r.get("vocab_size"), r.get("n_layers")
        if not 1 <= layers:
            raise r.fail("n_layers", "at least 1", layers)
        layer = DenseConfig(hidden_size=h, num_attention_heads=heads, num_key_value_heads=heads,
                            intermediate_size=r.get("expansion_ratio") * h, gated_mlp=False, hidden_act="gelu",
                            norm=_NORMS[norm], attention_bias=bias, attention_out_bias=bias, mlp_bias=bias,
                            fused_qkv=attn.get("fused_qkv", bool), attention_dropout=float(attn.get("attn_pdrop", float)),
                            hidden_dropout=float(r.get("resid_pdrop", float)))
        groups = (
            LayerGroup("embedding", EmbeddingConfig(vocab_size=vocab, hidden_size=h, dropout=float(r.get("emb_pdrop", float)),
                                                    position_embeddings=r.get("max_seq_len"))),
            LayerGroup("dense", layer, layers),
            LayerGroup("output", OutputConfig(vocab_size=vocab, hidden_size=h, norm=_NORMS[norm],
                                              tie_word_embeddings=r.get("tie_word_embeddings", bool))),
        )
    except SpecError as exc:
        raise ConfigError(f"{where} $.{exc.path}", exc.message) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(where, describe(exc)) from None
    return ModelSpec(name=name, layers=groups, source=source)


def mpt_formats():
    """The format record (yielded by :func:`hp_plugins.models.hf.hp_model_formats`)."""
    yield ModelFormat(name="mpt", build=model_from_mpt_config, model_types=("mpt",),
                      description="llm-foundry MPT config.json (MPTConfig): learned positions, LayerNorm, GeLU MLP")
