"""MosaicML MPT ``config.json`` files (llm-foundry's ``MPTConfig``), as llm-foundry builds them.

``model_type`` ``mpt``, read field by field as llm-foundry names them, at
llm-foundry commit 8c8dd48f72168c5d51e2f7b151595892a8fba43d (2025-07-21):
``llmfoundry/models/mpt/configuration_mpt.py`` (``MPTConfig.__init__`` and
``_validate_config``); a field the file omits takes that class's default
(:data:`DEFAULTS`; the ``attn_config`` and ``ffn_config`` defaults of
``llmfoundry/models/utils/config_defaults.py``). The model (``MPTModel`` in
``llmfoundry/models/mpt/modeling_mpt.py``, its MLP in
``llmfoundry/models/layers/ffn.py``, same commit):

* ``embedding`` of ``vocab_size x d_model`` and, with ``learned_pos_emb``
  (the default), a learned absolute position table of ``max_seq_len x d_model``
  (``wpe``) added to it, indexed by per-token position ids (the attention mask
  shifts them; :mod:`hp_plugins.kinds.embedding`);
* ``n_layers`` ``dense`` blocks: pre-norm LayerNorm (``norm_type``
  ``low_precision_layernorm`` or ``layernorm``, with a bias),
  multi-head attention through one fused ``Wqkv`` of ``3 d_model`` outputs and
  ``out_proj``, an ``mptmlp`` (``up_proj``, GeLU, ``down_proj``) of
  ``ffn_config.ffn_hidden_size`` outputs where stated, else ``int(d_model *
  expansion_ratio)``, which must be whole (``resolve_ffn_hidden_size`` in
  ``ffn.py``, lines 97-122: ``expansion_ratio`` may be a float); every linear
  layer with a bias (``no_bias`` false);
* ``output``: the final LayerNorm ``norm_f`` and the head, tied to the token
  embedding unless ``tie_word_embeddings`` is false.

``fc_type`` ``te`` (Transformer Engine ``te.Linear`` for every linear layer,
``llmfoundry/models/layers/layer_builders.py`` ``build_fc``) is accepted:
the layers keep the same weights and biases, GEMMs and saved inputs; whether
they run in FP8 is the precision recipe's choice (``--precision``), not the
config's.

Each field is checked before the layers are built, so an error names the MPT
field (``$.attn_config.attn_pdrop``). What hp does not price is refused
naming the field's path: ALiBi, rotary or no position embedding other than the
learned table (``attn_config.alibi``, ``attn_config.rope``,
``attn_config.nope``), grouped or multi-query attention
(``attn_config.attn_type``), q/k norms (``qk_ln``, ``qk_gn``), clipped q/k/v
(``clip_qkv``), sliding windows, cross-attention key/value widths
(``attn_config.kv_dim``), shared key/value caches (``reuse_kv_layer_idx``,
``reuse_kv_x_layer_idx``), soft-capping (``attn_config.attn_logit_softcapping``,
``final_logit_softcapping``), ``logit_scale``, a ``head_dim`` other than
``d_model / n_heads``, ``attention_bias: false``, per-layer
``block_overrides``, ``use_pad_tok_in_ffn: false``, feed-forward types other
than ``mptmlp``, activations other than the default exact GeLU
(``ffn_act_fn``), ``fc_type`` other than ``torch`` or ``te``,
``embedding_fraction`` other than 1, ``no_bias: true`` and
``learned_pos_emb: false``.
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

# MPTConfig.__init__ defaults (llm-foundry 8c8dd48f configuration_mpt.py, lines 30-57).
DEFAULTS: dict[str, Any] = {
    "d_model": 2048, "n_heads": 16, "n_layers": 24, "head_dim": None, "expansion_ratio": 4, "max_seq_len": 2048,
    "vocab_size": 50368, "resid_pdrop": 0.0, "emb_pdrop": 0.0, "learned_pos_emb": True, "logit_scale": None,
    "no_bias": False, "attention_bias": None, "embedding_fraction": 1.0, "norm_type": "low_precision_layernorm",
    "fc_type": "torch", "tie_word_embeddings": True, "use_pad_tok_in_ffn": True, "block_overrides": None,
    "final_logit_softcapping": None,
}
# attn_config_defaults / ffn_config_defaults (llm-foundry 8c8dd48f llmfoundry/models/utils/config_defaults.py);
# reuse_kv_layer_idx / reuse_kv_x_layer_idx are read by MPTModel when stated (modeling_mpt.py), absent: none.
ATTN_DEFAULTS: dict[str, Any] = {
    "attn_type": "multihead_attention", "attn_pdrop": 0.0, "qk_ln": False, "qk_gn": False, "fused_qkv": True,
    "clip_qkv": None, "sliding_window_size": -1, "attn_logit_softcapping": None, "alibi": False, "rope": False,
    "nope": False, "kv_dim": None, "reuse_kv_layer_idx": None, "reuse_kv_x_layer_idx": None,
}
FFN_DEFAULTS: dict[str, Any] = {"ffn_type": "mptmlp", "ffn_hidden_size": None, "ffn_act_fn": None, "fc_type": None}
# MPTMLP's activation: _FFN_ACT_FN_DEFAULT, torch.nn.functional.gelu with approximate='none' (ffn.py lines 49-52),
# also when ffn_act_fn states it (resolve_ffn_act_fn, lines 68-91: the name and F.gelu's own default 'none').
_GELU = "gelu"
_NORMS = {"low_precision_layernorm": "layernorm", "layernorm": "layernorm"}
# fc_type names whose linear layers hp prices alike: torch.nn.Linear and Transformer Engine's te.Linear.
_FC_TYPES = ("torch", "te")
# hp's layer fields, where a fallback error names one, back to the MPT field a user states.
_MPT_FIELD = {"hidden_size": "d_model", "num_attention_heads": "n_heads", "num_key_value_heads": "n_heads",
              "intermediate_size": "expansion_ratio", "attention_dropout": "attn_config.attn_pdrop",
              "hidden_dropout": "resid_pdrop", "dropout": "emb_pdrop", "position_embeddings": "max_seq_len"}


def _section(cfg: Mapping[str, Any], key: str, defaults: Mapping[str, Any], where: str) -> ConfigReader:
    value = cfg.get(key)
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} $.{key}", f"must be a mapping, got {type(value).__name__}")
    return ConfigReader(value, defaults, where, prefix=f"{key}.")


def _refuse(path: str, what: str) -> ConfigError:
    return ConfigError(path, f"{what} is not priced by hp; see docs/kinds.md (MPT)")


def _positive(r: ConfigReader, key: str) -> int:
    value = r.get(key, int)
    if value < 1:
        raise r.fail(key, "a positive integer", value)
    return value


def _probability(r: ConfigReader, key: str) -> float:
    # MPTConfig._validate_config refuses a probability outside [0, 1]; hp's dropout also needs some kept (p < 1).
    value = r.get(key, float)
    if not 0 <= value < 1:
        raise r.fail(key, "a dropout probability at least 0 and below 1", value)
    return float(value)


def _fc_type(r: ConfigReader, key: str) -> None:
    """``fc_type``: ``torch`` or ``te``, as a name or ``{"name": ...}`` (MPTConfig turns a name into that mapping)."""
    value = r.cfg.get(key, r.defaults.get(key))
    if value is None:
        return
    if isinstance(value, Mapping):
        extra = sorted(set(value) - {"name"})
        if extra:
            raise _refuse(r.path(f"{key}.{extra[0]}"), f"fc_type argument {extra[0]!r}")
        value = value.get("name", "torch")
    if not isinstance(value, str):
        raise r.fail(key, "a string or a mapping with a name", value)
    if value not in _FC_TYPES:
        raise _refuse(r.path(key), f"fc_type {value!r}")


def _ffn_hidden_size(r: ConfigReader, ffn: ConfigReader, d_model: int) -> int:
    """llm-foundry's resolve_ffn_hidden_size (ffn.py lines 97-122): ffn_hidden_size where stated, else
    int(d_model * expansion_ratio), which must equal the product."""
    stated = ffn.get("ffn_hidden_size", int, nullable=True)
    if stated is not None:
        if stated < 1:
            raise ffn.fail("ffn_hidden_size", "a positive integer or null", stated)
        return stated
    ratio = r.get("expansion_ratio", float)
    if ratio <= 0:
        raise r.fail("expansion_ratio", "a positive number", ratio)
    width = int(d_model * ratio)
    if width != d_model * ratio or width < 1:
        raise r.fail("expansion_ratio", f"a ratio making d_model * expansion_ratio a positive whole number "
                     f"(d_model={d_model})", ratio)
    return width


def _check_unpriced(r: ConfigReader, attn: ConfigReader, ffn: ConfigReader, d_model: int, n_heads: int) -> None:
    """Refuse every field stated with a value hp does not price, naming its path."""
    for key in ("alibi", "rope", "nope", "qk_ln", "qk_gn"):
        if attn.get(key, bool):
            raise _refuse(attn.path(key), f"attn_config.{key}: true")
    for key in ("clip_qkv", "attn_logit_softcapping"):
        if attn.get(key, float, nullable=True) is not None:
            raise _refuse(attn.path(key), f"attn_config.{key}")
    for key in ("kv_dim", "reuse_kv_layer_idx", "reuse_kv_x_layer_idx"):
        if attn.cfg.get(key) is not None:
            raise _refuse(attn.path(key), f"attn_config.{key}")
    if attn.get("sliding_window_size", float) != -1:
        raise _refuse(attn.path("sliding_window_size"), "a sliding window")
    attn_type = attn.get("attn_type", str)
    if attn_type != "multihead_attention":
        raise _refuse(attn.path("attn_type"), f"attn_type {attn_type!r}")
    ffn_type = ffn.get("ffn_type", str)
    if ffn_type != "mptmlp":
        raise _refuse(ffn.path("ffn_type"), f"ffn_type {ffn_type!r}")
    act = ffn.cfg.get("ffn_act_fn")
    if act is not None:
        if not isinstance(act, Mapping) or act.get("name") != _GELU or set(act) - {"name", "approximate"} \
                or act.get("approximate", "none") != "none":
            raise _refuse(ffn.path("ffn_act_fn"), "an activation other than MPTMLP's default GeLU (approximate 'none')")
    extra = sorted(set(ffn.cfg) - set(FFN_DEFAULTS))
    if extra:
        raise _refuse(ffn.path(extra[0]), f"ffn_config.{extra[0]} (not an mptmlp argument)")
    _fc_type(ffn, "fc_type")
    _fc_type(r, "fc_type")
    for key in ("logit_scale", "final_logit_softcapping", "block_overrides"):
        if r.cfg.get(key) is not None:
            raise _refuse(r.path(key), key)
    head_dim = r.get("head_dim", int, nullable=True)
    if head_dim is not None and head_dim != d_model // n_heads:
        raise _refuse(r.path("head_dim"), f"head_dim {head_dim} other than d_model / n_heads = {d_model // n_heads}")
    if r.get("attention_bias", bool, nullable=True) is False:
        raise _refuse(r.path("attention_bias"), "attention_bias: false (attention projections without a bias)")
    if not r.get("use_pad_tok_in_ffn", bool):
        raise _refuse(r.path("use_pad_tok_in_ffn"), "use_pad_tok_in_ffn: false (padding removed before the MLP)")
    if r.get("embedding_fraction", float) != 1.0:
        raise _refuse(r.path("embedding_fraction"), "embedding_fraction other than 1")
    norm = r.get("norm_type", str)
    if norm not in _NORMS:
        raise _refuse(r.path("norm_type"), f"norm_type {norm!r}")
    if r.get("no_bias", bool):
        # hp's LayerNorm always carries its bias; llm-foundry drops it with no_bias.
        raise _refuse(r.path("no_bias"), "no_bias: true (LayerNorms without a bias)")
    if not r.get("learned_pos_emb", bool):
        raise _refuse(r.path("learned_pos_emb"), "an MPT without position embeddings (learned_pos_emb: false)")


def model_from_mpt_config(cfg: Mapping[str, Any], *, name: str, source: str, where: str = "config.json") -> ModelSpec:
    """The layer stack of an llm-foundry MPT config: embedding (with ``wpe``), ``n_layers`` dense blocks, the head.

    Raises:
        ConfigError: A missing or invalid field, or a feature hp does not price; the path names the MPT field.
    """
    if cfg.get("model_type") != "mpt":
        raise ConfigError(f"{where} $.model_type", f"model_type {cfg.get('model_type')!r} is not 'mpt'")
    r = ConfigReader(cfg, DEFAULTS, where)
    attn = _section(cfg, "attn_config", ATTN_DEFAULTS, where)
    ffn = _section(cfg, "ffn_config", FFN_DEFAULTS, where)
    # The MPT fields, checked before any layer is built (MPTConfig._validate_config's rules and hp's).
    h, heads = _positive(r, "d_model"), _positive(r, "n_heads")
    if h % heads:
        raise r.fail("n_heads", f"a divisor of d_model={h} (MPTConfig: d_model must be divisible by n_heads)", heads)
    layers, vocab = _positive(r, "n_layers"), _positive(r, "vocab_size")
    _check_unpriced(r, attn, ffn, h, heads)
    positions = _positive(r, "max_seq_len")  # learned_pos_emb is true here: the table's rows
    width = _ffn_hidden_size(r, ffn, h)
    emb_p, resid_p, attn_p = _probability(r, "emb_pdrop"), _probability(r, "resid_pdrop"), _probability(attn, "attn_pdrop")
    fused = attn.get("fused_qkv", bool)
    norm = _NORMS[r.get("norm_type", str)]
    tied = r.get("tie_word_embeddings", bool)
    try:
        # Positions from the learned table (wpe) alone: no rotary embedding (rope and ALiBi are refused above).
        layer = DenseConfig(hidden_size=h, num_attention_heads=heads, num_key_value_heads=heads,
                            intermediate_size=width, gated_mlp=False, hidden_act="gelu", norm=norm,
                            attention_bias=True, attention_out_bias=True, mlp_bias=True, fused_qkv=fused,
                            attention_dropout=attn_p, hidden_dropout=resid_p, partial_rotary_factor=0.0)
        groups = (
            # MPT's position ids are per token: MPTModel.forward shifts them by the attention mask Composer passes.
            LayerGroup("embedding", EmbeddingConfig(vocab_size=vocab, hidden_size=h, dropout=emb_p,
                                                    position_embeddings=positions, position_ids_per_token=True)),
            LayerGroup("dense", layer, layers),
            LayerGroup("output", OutputConfig(vocab_size=vocab, hidden_size=h, norm=norm, tie_word_embeddings=tied)),
        )
    except SpecError as exc:
        field = exc.path.split(".")[-1]
        raise ConfigError(f"{where} $.{_MPT_FIELD.get(field, field)}", exc.message) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(where, describe(exc)) from None
    return ModelSpec(name=name, layers=groups, source=source)


def mpt_formats():
    """The format record (yielded by :func:`hp_plugins.models.hf.hp_model_formats`)."""
    yield ModelFormat(name="mpt", build=model_from_mpt_config, model_types=("mpt",),
                      description="llm-foundry MPT config.json (MPTConfig): learned positions, LayerNorm, GeLU MLP")
