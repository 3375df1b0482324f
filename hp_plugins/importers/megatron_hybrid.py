"""Megatron-LM's hybrid models (``pretrain_hybrid.py``, ``HybridModel``) as the ``megatron`` importer reads them.

Megatron-LM builds a hybrid model wherever ``--hybrid-layer-pattern`` is given (``megatron/training/utils``
``is_hybrid_model`` at NVIDIA/Megatron-LM@d98e8a6: the pattern is the sole indicator; the deprecated
``--hybrid-override-pattern`` is forwarded to it, ``arguments.py`` ``validate_args``; ``--is-hybrid-model`` only
changes the output layers' initialisation, ``transformer_config.py``). Every layer is one block behind its own
pre-norm and residual, as ``megatron/core/models/hybrid/hybrid_layer_specs.py`` ``hybrid_stack_spec`` builds it,
and maps onto the hybrid layer kinds of hp's ``nemotron_h`` format (:mod:`hp_plugins.models.ssm`):

* ``M``: ``MambaLayer`` with ``MambaMixer`` (``megatron/core/ssm/mamba_mixer.py``): the pre-norm fused into
  ``in_proj`` (``TELayerNormColumnParallelLinear``, ``h -> 2 d_inner + 2 G N + H``, no bias: the mixer asserts
  ``not bias``), a depthwise conv over ``d_inner + 2 G N`` channels of width 4 with a bias (the mixer's defaults
  ``d_conv=4``, ``conv_bias=True``, which no argument changes), ``dt_bias``, ``A_log`` and ``D`` per head, the
  gated RMSNorm over ``d_inner`` and ``out_proj`` (``d_inner -> h``, no bias); ``H = --mamba-num-heads`` and
  ``d_inner = H * --mamba-head-dim``, or without ``--mamba-num-heads`` ``d_inner = 2 h`` (``expand=2``) and
  ``H = d_inner / --mamba-head-dim``; ``--mamba-state-dim`` ``N`` (default 128), ``--mamba-head-dim`` (64),
  ``--mamba-num-groups`` ``G`` (8) are ``TransformerConfig`` fields (``ArgumentGroupFactory`` makes each a flag);
  the SSD chunk is the mixer's default 128. hp's ``mamba2`` kind.
* ``*``: a ``TransformerLayer`` with ``SelfAttention`` alone (``linear_qkv`` with the pre-norm fused,
  ``linear_proj``): the GPT path's attention arguments, biases and q/k norms (:func:`megatron_model`); no rotary
  embedding unless ``--position-embedding-type rope``. hp's ``attention`` kind.
* ``-``: ``MLPLayer``, a ``TransformerLayer`` with an MLP alone (``linear_fc1`` with the pre-norm fused,
  ``linear_fc2``) of ``--ffn-hidden-size``, gated under ``--swiglu``. hp's ``mlp`` kind.
* ``E``: ``MoETransformerLayer`` with ``pre_mlp_layernorm`` and the MoE layer alone: the router (an ``E x h``
  weight; ``--moe-router-dtype fp32`` runs it in fp32, ``router_fp32``), ``--num-experts`` experts of
  ``--moe-ffn-hidden-size`` (default ``--ffn-hidden-size``), a shared expert of
  ``--moe-shared-expert-intermediate-size``, and with ``--moe-latent-size`` the latent projections
  ``fc1_latent_proj`` / ``fc2_latent_proj`` (``moe_layer.py``), the experts then reading and writing the latent
  width (``experts.py``). Its biases (router, experts, latent projections) are refused: state
  ``--disable-bias-linear`` (Megatron-Core refuses biases with shared experts, ``shared_experts.py``). hp's
  ``moe_only`` kind.

The pattern (``megatron/core/models/hybrid/hybrid_layer_allocation.py``): ``|`` ends a pipeline segment, segment
``v * pp + r`` on pipeline rank ``r`` and virtual stage ``v`` (``select_pipeline_segment``), which is hp's chunk
order (``layers_per_stage``); without ``|`` an even split over ``--pipeline-model-parallel-size`` or
``--decoder-first/last-pipeline-num-layers``; ``/`` starts the multi-token-prediction part, one identical pattern a
depth (``parse_hybrid_pattern``), each depth ``enorm``, ``hnorm``, ``eh_proj`` (``2h -> h``), that pattern's layers
and a final norm (``multi_token_prediction.py`` ``MultiTokenPredictionLayer``, its layers a ``HybridStack``), on the
last pipeline stage: hp's ``mtp`` kind with that layer, or with that pattern's layers in order where it has several
(``*E``: an attention and an MoE layer; :mod:`hp_plugins.kinds.mtp`). ``G`` (gated delta net), ``D`` (DeepSeek sparse
attention) and ``+`` (MLA) layers are refused.
"""

from __future__ import annotations

from typing import Any

import attrs

from hp_core.errors import ConfigError
from hp_core.specs.model import LayerGroup, ModelSpec
from hp_plugins.importers.megatron_options import first_last_totals
from hp_plugins.kinds.embedding import EmbeddingConfig
from hp_plugins.kinds.hybrid import AttentionLayerConfig, MLPLayerConfig, MoELayerConfig
from hp_plugins.kinds.mamba import Mamba2LayerConfig
from hp_plugins.kinds.mtp import MTPConfig
from hp_plugins.kinds.output import OutputConfig
from hp_plugins.models.stack import grouped

__all__ = ["HybridPattern", "hybrid_model", "hybrid_pattern", "hybrid_split", "with_mtp"]

# hybrid_layer_allocation.py Symbols: the layers hp maps, as hp's layer kinds.
_KINDS = {"M": "mamba2", "*": "attention", "-": "mlp", "E": "moe_only"}
# The layers Megatron-LM builds that hp has no kind for here.
_REFUSED = {"G": "gated delta net", "D": "DeepSeek sparse attention", "+": "multi-latent attention"}
# Megatron-LM's hybrid stack specs whose M layer is MambaMixer (hybrid_layer_specs.py; mamba_stack_spec is the
# backward-compatible alias); the gated-delta-product specs build another mixer there.
_MAMBA_SPECS = ("hybrid_stack_spec", "mamba_stack_spec")
# The flags Megatron-LM refuses with --hybrid-layer-pattern (arguments.py validate_args asserts each), the layout
# being the pattern's.
_LAYOUT_FLAGS = ("num-layers-per-virtual-pipeline-stage", "num-virtual-stages-per-pipeline-rank",
                 "virtual-pipeline-model-parallel-size", "pipeline-model-parallel-layout")
_SPLIT_FLAGS = ("account-for-embedding-in-pipeline-split", "account-for-loss-in-pipeline-split")


@attrs.frozen
class HybridPattern:
    """``--hybrid-layer-pattern`` parsed as ``parse_hybrid_pattern`` parses it.

    Attributes:
        text: The pattern as given.
        segments: The main pattern's pipeline segments (split at ``|``).
        mtp: The pattern of one MTP depth (``""``: none).
        depths: MTP depths (the ``/``-separated parts after the main pattern).
    """

    text: str
    segments: tuple[str, ...]
    mtp: str
    depths: int

    @property
    def layers(self) -> str:
        """The main pattern's layers in order, without ``|``."""
        return "".join(self.segments)


def _check_symbols(text: str, part: str, allowed: str) -> None:
    for ch in text:
        if ch in _REFUSED:
            raise ConfigError("--hybrid-layer-pattern", f"'{ch}' ({_REFUSED[ch]}) layers are not mapped: hp prices the "
                                                        "hybrid layers M, *, - and E; drop them from the pattern")
        if ch not in allowed:
            raise ConfigError("--hybrid-layer-pattern", f"{part} pattern: {ch!r} is not a layer symbol "
                                                        f"(M, *, -, E{', |' if '|' in allowed else ''})")


def hybrid_pattern(a: Any, unmapped: list[str]) -> HybridPattern | None:
    """The hybrid pattern the arguments state (with the deprecated ``--hybrid-override-pattern`` and the legacy
    ``--mtp-hybrid-override-pattern`` read as ``arguments.py`` forwards them), or ``None`` for a GPT model.

    Raises:
        ConfigError: ``--is-hybrid-model`` without a pattern, both pattern flags, an unknown or refused symbol, or
            MTP depths that differ.
    """
    given, legacy = a.value("hybrid-layer-pattern"), a.value("hybrid-override-pattern")
    marked = a.flag("is-hybrid-model")
    legacy_mtp, depth_count = a.value("mtp-hybrid-override-pattern"), a.value("mtp-num-layers", int)
    if given is not None and legacy is not None:  # arguments.py asserts it
        raise ConfigError("--hybrid-override-pattern", "Megatron-LM takes it or --hybrid-layer-pattern, not both; "
                                                       "state --hybrid-layer-pattern")
    text = given if given is not None else legacy
    if text is None:
        if marked:
            raise ConfigError("--is-hybrid-model", "Megatron-LM builds a hybrid model from --hybrid-layer-pattern, "
                                                   "which is missing; state it")
        if legacy_mtp is not None:
            unmapped.append("--mtp-hybrid-override-pattern: read by Megatron-LM for hybrid models only; ignored")
        return None
    # arguments.py: the legacy MTP pattern joins the main one as depth_count identical '/'-parts.
    if legacy_mtp is not None and depth_count and "/" not in text:
        text = text + "/" + "/".join([legacy_mtp] * depth_count)
    main, *mtp_parts = text.split("/")
    _check_symbols(main, "main", "ME*-|")
    mtp_parts = mtp_parts if any(mtp_parts) else []
    if any(p != mtp_parts[0] for p in mtp_parts):
        raise ConfigError("--hybrid-layer-pattern", f"{text!r}: every MTP depth must have the same pattern, as "
                                                    "Megatron-LM requires")
    mtp = mtp_parts[0] if mtp_parts else ""
    _check_symbols(mtp, "MTP", "ME*-")
    if not main.replace("|", ""):
        raise ConfigError("--hybrid-layer-pattern", f"{text!r} has no decoder layer; state at least one")
    depths = len(mtp_parts) if mtp else 0
    if depth_count and depth_count != depths:
        # arguments.py: the pattern's depths win over --mtp-num-layers (a warning); without an MTP pattern
        # HybridModel builds no MTP block.
        unmapped.append(f"--mtp-num-layers {depth_count}: the pattern states {depths} MTP depths, which Megatron-LM "
                        "builds; priced so")
    return HybridPattern(text=text, segments=tuple(main.split("|")), mtp=mtp, depths=depths)


def _spec(a: Any, unmapped: list[str]) -> None:
    spec = a.values("spec")
    if spec is None:  # hybrid_builders.py: "You must provide a valid hybrid layer spec via --spec"
        unmapped.append("--spec not given (Megatron-LM's hybrid builder requires it): priced as "
                        "megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec")
        return
    words = " ".join(spec).replace("[", " ").replace("]", " ").split()
    if not words or words[-1] not in _MAMBA_SPECS:
        raise ConfigError("--spec", f"{' '.join(spec)!r}: hp maps Megatron-LM's hybrid_stack_spec (Mamba-2 M layers, "
                                    "hybrid_layer_specs.py); state it")


def _mamba(a: Any, h: int) -> Mamba2LayerConfig:
    head_dim = a.value("mamba-head-dim", int, 64)
    heads = a.value("mamba-num-heads", int)
    if heads is None:  # mamba_mixer.py: d_inner = expand * d_model (expand 2), nheads = d_inner / headdim
        if (2 * h) % head_dim:
            raise ConfigError("--mamba-head-dim", f"{head_dim} does not divide 2 x --hidden-size ({2 * h}), which "
                                                  "Megatron-Core requires without --mamba-num-heads; state one")
        heads = 2 * h // head_dim
    groups = a.value("mamba-num-groups", int, 8)
    if heads % groups:  # mamba_mixer.py asserts it
        raise ConfigError("--mamba-num-groups", f"{groups} groups do not divide {heads} Mamba heads")
    return Mamba2LayerConfig(hidden_size=h, mamba_num_heads=heads, mamba_head_dim=head_dim,
                             ssm_state_size=a.value("mamba-state-dim", int, 128), n_groups=groups, conv_kernel=4,
                             chunk_size=128, use_bias=False, use_conv_bias=True)


def _attention(a: Any, h: int) -> AttentionLayerConfig:
    heads = a.value("num-attention-heads", int)
    if heads is None:
        raise ConfigError("--num-attention-heads", "the pattern's attention layers '*' need it; state it")
    groups = a.value("num-query-groups", int, heads) if a.flag("group-query-attention") else heads
    # Its biases (attention.py SelfAttention: linear_qkv with add_bias_linear or add_qkv_bias, linear_proj with
    # add_bias_linear) and q/k norms are set by megatron_options.megatron_model, as on every GQA layer.
    return AttentionLayerConfig(hidden_size=h, num_attention_heads=heads, num_key_value_heads=groups,
                                head_dim=a.value("kv-channels", int, h // heads),
                                attention_dropout=a.value("attention-dropout", float, 0.1))


def _moe(a: Any, h: int, ffn: int) -> MoELayerConfig:
    experts = a.value("num-experts", int)
    if not experts:
        raise ConfigError("--num-experts", "the pattern's MoE layers 'E' need it; state it")
    a.flag("moe-router-enable-expert-bias")  # router.py: an fp32 buffer of E floats, not a parameter
    if not a.flag("disable-bias-linear"):
        raise ConfigError("--disable-bias-linear", "hp does not price the biases of a hybrid MoE layer (router, "
                                                   "experts, latent projections); state --disable-bias-linear")
    return MoELayerConfig(hidden_size=h, num_experts=experts, num_experts_per_tok=a.value("moe-router-topk", int, 2),
                          moe_intermediate_size=a.value("moe-ffn-hidden-size", int, ffn),
                          shared_expert_intermediate_size=a.value("moe-shared-expert-intermediate-size", int, 0),
                          expert_activation="mlp", moe_latent_size=a.value("moe-latent-size", int),
                          router_fp32=a.value("moe-router-dtype") == "fp32")


def hybrid_model(a: Any, pattern: HybridPattern, vocab: int, ffn: int, name: str, source: str,
                 unmapped: list[str]) -> tuple[ModelSpec, tuple[LayerGroup, ...] | None]:
    """The embedding, the main pattern's layers and the output head (module docstring), and the layers of one MTP
    depth in order (``None``: no MTP), which :func:`with_mtp` adds once Megatron's norms, activations and biases are
    set on them (``megatron_model``).

    *ffn* is ``--ffn-hidden-size`` with Megatron-LM's default applied.
    """
    _spec(a, unmapped)
    h = a.value("hidden-size", int)
    if h is None:
        raise ConfigError("--hidden-size", "required to build the model; state it")
    layers = a.value("num-layers", int)
    if layers is not None and layers != len(pattern.layers):  # arguments.py: the pattern's count wins, a warning
        unmapped.append(f"--num-layers {layers}: --hybrid-layer-pattern states {len(pattern.layers)} layers, which "
                        "Megatron-LM builds; priced so")
    if a.value("moe-layer-freq") is not None:
        unmapped.append(f"--moe-layer-freq {a.value('moe-layer-freq')}: not read for a hybrid model, whose pattern "
                        "places its MoE layers 'E'")
    builders = {"M": lambda: _mamba(a, h), "*": lambda: _attention(a, h),
                "-": lambda: MLPLayerConfig(hidden_size=h, intermediate_size=ffn, mlp_bias=not a.flag("disable-bias-linear")),
                "E": lambda: _moe(a, h, ffn)}
    built = {symbol: builders[symbol]() for symbol in "M*-E" if symbol in pattern.layers + pattern.mtp}
    for flag in ("num-attention-heads", "num-query-groups", "kv-channels", "attention-dropout", "add-qkv-bias",
                 "group-query-attention"):
        a.value(flag)  # Megatron-LM reads them for the attention layers '*' alone: without any, they change nothing
    # HybridModel's max_sequence_length sizes only a learned position table (megatron_model reads it for one).
    a.value("max-position-embeddings")
    dropout = a.value("hidden-dropout", float, 0.1)
    if dropout and set(built) & set("ME"):
        unmapped.append(f"--hidden-dropout {dropout}: the dropout after the Mamba and MoE layers' outputs is not "
                        "priced (hp's mamba2 and moe_only kinds state none); the attention and MLP layers' is")
    body = grouped([(_KINDS[ch], built[ch]) for ch in pattern.layers])
    tied = not a.flag("untie-embeddings-and-output-weights")
    model = ModelSpec(name=name, source=source, layers=(
        LayerGroup("embedding", EmbeddingConfig(vocab_size=vocab, hidden_size=h)), *body,
        LayerGroup("output", OutputConfig(vocab_size=vocab, hidden_size=h, tie_word_embeddings=tied))))
    if not pattern.depths:
        return model, None
    position = "rope" if a.flag("use-rotary-position-embeddings") else a.value("position-embedding-type", str,
                                                                                  "learned_absolute")
    if position not in ("rope", "none"):  # arguments.py validate_args asserts it for MTP
        raise ConfigError("--position-embedding-type", f"Megatron-LM runs MTP with rope or none positions, not "
                                                       f"{position}; state one")
    # Each depth's layers in order: a HybridStack of the '/'-part (multi_token_prediction.py MultiTokenPredictionLayer).
    return model, tuple(LayerGroup(_KINDS[ch], built[ch], 1) for ch in pattern.mtp)


def with_mtp(model: ModelSpec, depths: int, layers: tuple[LayerGroup, ...]) -> ModelSpec:
    """*model* with *depths* MTP depths of hp's ``mtp`` kind, each running *layers* in order (their configs as
    Megatron's arguments set them; one layer: the kind's one-layer form), with the output head's norm as ``enorm``,
    ``hnorm`` and the final norm (Megatron-Core builds the three as ``TENorm`` of ``--normalization``,
    ``hybrid_layer_specs.py`` ``_hybrid_mtp_block_spec``; a depth of several layers runs them as a ``HybridStack``
    between them, ``multi_token_prediction.py`` ``MultiTokenPredictionLayer``, hp_plugins/kinds/mtp.py)."""
    output = next(g for g in model.layers if g.kind == "output").config
    depth = {"layer": layers[0]} if len(layers) == 1 else {"layers": layers}
    mtp = MTPConfig(vocab_size=output.vocab_size, hidden_size=output.hidden_size, norm=output.norm, **depth)
    return attrs.evolve(model, layers=(*model.layers, LayerGroup("mtp", mtp, depths)))


def hybrid_split(a: Any, pattern: HybridPattern, pp: int) -> tuple[int, list[int]]:
    """``(vpp, layers per chunk)`` as Megatron-LM splits a hybrid pattern (module docstring): its ``|`` segments,
    ``vpp`` their count over ``pp`` where that exceeds 1; else ``--decoder-first/last-pipeline-num-layers`` or an
    even split (``select_pipeline_segment``), without virtual stages.

    Raises:
        ConfigError: a flag Megatron-LM refuses with the pattern, or a split it refuses.
    """
    for flag in _LAYOUT_FLAGS:
        if a.value(flag) is not None:
            raise ConfigError(f"--{flag}", "Megatron-LM does not take it with --hybrid-layer-pattern, whose '|' "
                                           "segments place the layers; drop it")
    for flag in _SPLIT_FLAGS:
        if a.flag(flag):
            raise ConfigError(f"--{flag}", "Megatron-LM does not take it with --hybrid-layer-pattern; drop it")
    first = a.value("decoder-first-pipeline-num-layers", int)
    last = a.value("decoder-last-pipeline-num-layers", int)
    segments = pattern.segments
    if len(segments) > 1:
        if first is not None or last is not None:
            raise ConfigError("--decoder-first-pipeline-num-layers" if first is not None else
                              "--decoder-last-pipeline-num-layers",
                              "Megatron-LM does not take it with '|' in --hybrid-layer-pattern; drop one")
        if len(segments) % pp:
            raise ConfigError("--hybrid-layer-pattern", f"its {len(segments)} '|' segments do not divide over "
                                                        f"--pipeline-model-parallel-size {pp}")
        return len(segments) // pp, [len(s) for s in segments]
    layers = len(pattern.layers)
    if pp == 1:
        return 1, [layers]
    if first is None and last is None:
        if layers % pp:
            raise ConfigError("--pipeline-model-parallel-size", f"{layers} layers do not split evenly over {pp} ranks; "
                                                                "add '|' segments to --hybrid-layer-pattern")
        return 1, [layers // pp] * pp
    return 1, first_last_totals(layers, pp, first, last)
