"""What the ``megatron`` importer reads beyond the model: the pipeline split, the overlaps and the
expert dispatcher as the ``megatron`` runtime's options, and the low-precision recipe.

Each reads Megatron-LM's arguments as ``megatron/training/arguments.py`` (Megatron-Core 0.14,
``validate_args``) and the modules it names define them; ``a`` is the importer's argument reader
(``flag``, ``value``), ``unmapped`` the list of warning lines.

* **Pipeline split** (:func:`pipeline_split`): body layers per pipeline chunk in hp's chunk order
  (chunk ``c`` on rank ``c % pp``, ``ParallelSpec.layers_per_stage``), from exactly one of
  ``--pipeline-model-parallel-layout``, ``--decoder-first/last-pipeline-num-layers`` (with
  ``--num-virtual-stages-per-pipeline-rank``) or an even split, where
  ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split`` count the
  embedding and the loss as one layer each (``transformer_block.py`` ``get_num_layers_to_build``).
* **Overlaps** (:func:`trainer_options`): ``--overlap-grad-reduce``, ``--overlap-param-gather``,
  ``--tp-comm-overlap`` (with ``--tp-comm-overlap-cfg``'s file as ``tp_comm_overlap_cfg``, :func:`userbuffers_file`),
  ``--overlap-moe-expert-parallel-comm``, ``--delay-wgrad-compute``, and the pipeline sends, which
  Megatron overlaps by default under the interleaved schedule (``--no-overlap-p2p-communication``,
  ``dest='overlap_p2p_comm'``, default on, turned off without virtual stages); the flex dispatcher's
  backend (DeepEP or HybridEP) as ``ep_all_to_all``, ``--moe-hybridep-num-sms`` (or Megatron-LM d98e8a6's ``--moe-flex-dispatcher-num-sms``, first) as ``hybridep_num_sms``; the CUDA-graph flags as ``cuda_graphs``
  (:func:`cuda_graphs`).
* **Model** (:func:`megatron_model`): what Megatron-LM's GPT builds by default beside what the
  Hugging Face format builds: LayerNorm (``--normalization``, default ``LayerNorm``), a GeLU MLP
  unless ``--swiglu`` (``--squared-relu``: squared ReLU), experts of the same activation, and a
  learned position table of ``--max-position-embeddings`` rows (``--position-embedding-type``,
  default ``learned_absolute``), or under ``rope`` (``mrope``) a rotary embedding of
  ``--rotary-percent`` of each query and key head's channels.
* **Recipe**: :mod:`hp_plugins.importers.megatron_recipe`.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from hp_core.documents import parse_document, read_text
from hp_core.errors import ConfigError
from hp_plugins.runtimes.userbuffers import TE_GEMMS, read_custom

__all__ = ["cpu_offloading", "cpu_offloading_plan", "cuda_graphs", "first_last_totals", "megatron_model", "parse_layout", "pipeline_split", "trainer_options"]

# Megatron-LM's layout characters (megatron/core/transformer/pipeline_parallel_layer_layout.py,
# parse_str_to_list): embedding, decoder layer, MTP layer, loss; '|' ends a chunk; ',' is cosmetic.
_LAYOUT_CHARS = frozenset("EtmL")


def parse_layout(text: str) -> list[str]:
    """A ``--pipeline-model-parallel-layout`` string as one string of layer characters per chunk.

    ``(…)*n`` repeats a group and ``x*n`` a character, as Megatron-LM unrolls them (groups first):
    ``"Et*2|(t*2|)*2L"`` is ``["Ett", "tt", "ttL"]``.
    """
    flat = text.replace(",", "").replace(" ", "")
    flat = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), flat)
    flat = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), flat)
    bad = sorted(set(flat) - _LAYOUT_CHARS - {"|"})
    if bad:
        raise ConfigError("--pipeline-model-parallel-layout",
                          f"{text!r}: unknown layer characters {''.join(bad)!r} (E, t, m, L and '|' only)")
    return flat.split("|")


def _layout_counts(text: str, pp: int, layers: int, mtp_layers: int, unmapped: list[str]) -> tuple[int, list[int]]:
    chunks = parse_layout(text)
    where = "--pipeline-model-parallel-layout"
    if len(chunks) % pp:
        raise ConfigError(where, f"{len(chunks)} chunks do not divide over --pipeline-model-parallel-size {pp}")
    # pipeline_parallel_layer_layout.py validate_layer_layout: the embedding first, the loss last, once each,
    # every decoder layer and every MTP layer named.
    flat = "".join(chunks)
    if not flat.startswith("E") or flat.count("E") != 1:
        raise ConfigError(where, f"{text!r}: the embedding 'E' must come first, once")
    if not flat.endswith("L") or flat.count("L") != 1:
        raise ConfigError(where, f"{text!r}: the loss 'L' must come last, once")
    if flat.count("t") != layers:
        raise ConfigError(where, f"{text!r} places {flat.count('t')} decoder layers 't'; --num-layers is {layers}")
    if flat.count("m") != mtp_layers:
        raise ConfigError(where, f"{text!r} places {flat.count('m')} MTP layers 'm'; --mtp-num-layers is {mtp_layers}")
    if mtp_layers and chunks[-1].count("m") != mtp_layers:
        unmapped.append(f"{where} {text}: its MTP layers are not in the last chunk, where hp places them "
                        "with the output head; priced there")
    return len(chunks) // pp, [chunk.count("t") for chunk in chunks]


def first_last_totals(layers: int, pp: int, first: int | None, last: int | None) -> list[int]:
    """Each rank's decoder layers under ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
    (one of them at least): the stated first and last ranks', the rest split evenly over the middle ranks
    (``transformer_block.py`` ``get_num_layers_to_build``).

    Raises:
        ConfigError: a count below 1 (``transformer_config.py``: "must be larger than 0"), both counts on one rank,
            or layers left that do not split evenly over the middle ranks.
    """
    named = "--decoder-first-pipeline-num-layers" if first is not None else "--decoder-last-pipeline-num-layers"
    for flag, value in (("--decoder-first-pipeline-num-layers", first), ("--decoder-last-pipeline-num-layers", last)):
        if value is not None and value <= 0:
            raise ConfigError(flag, f"must be larger than 0, got {value}")
    rest, ranks_left = layers - (first or 0) - (last or 0), pp - (first is not None) - (last is not None)
    if ranks_left < 0:
        raise ConfigError(named, f"--pipeline-model-parallel-size {pp} has no rank for both the first and the last "
                                 "stage's counts; state one")
    if rest < 0 or (ranks_left > 0 and rest % ranks_left) or (ranks_left == 0 and rest):
        raise ConfigError(named, f"the {max(rest, 0)} layers left do not split evenly over the {ranks_left} middle ranks")
    totals = [rest // ranks_left if ranks_left else 0] * pp
    if first is not None:
        totals[0] = first
    if last is not None:
        totals[-1] = last
    return totals


def pipeline_split(a: Any, layers: int, mtp_layers: int, pp: int, unmapped: list[str]) -> tuple[int, list[int]]:
    """``(vpp, body layers per chunk)`` as Megatron-LM builds them (module docstring)."""
    layout = a.value("pipeline-model-parallel-layout")
    per_chunk = a.value("num-layers-per-virtual-pipeline-stage", int)
    stages = a.value("num-virtual-stages-per-pipeline-rank", int) or a.value("virtual-pipeline-model-parallel-size", int)
    first = a.value("decoder-first-pipeline-num-layers", int)
    last = a.value("decoder-last-pipeline-num-layers", int)
    embedding = a.flag("account-for-embedding-in-pipeline-split")
    loss = a.flag("account-for-loss-in-pipeline-split")
    given = [name for name, value in (("--num-layers-per-virtual-pipeline-stage", per_chunk),
                                      ("--num-virtual-stages-per-pipeline-rank", stages),
                                      ("--pipeline-model-parallel-layout", layout)) if value is not None]
    if len(given) > 1:  # arguments.py: no more than one of them
        raise ConfigError(given[1], f"Megatron-LM takes at most one of {', '.join(given)}; state one")
    if layout is not None:
        for name, value in (("decoder-first-pipeline-num-layers", first), ("decoder-last-pipeline-num-layers", last),
                            ("account-for-embedding-in-pipeline-split", embedding or None),
                            ("account-for-loss-in-pipeline-split", loss or None)):
            if value is not None:  # transformer_config.py __post_init__ raises ValueError for the pair
                raise ConfigError(f"--{name}", "Megatron-LM does not take it with --pipeline-model-parallel-layout, "
                                               "which places every layer; drop one")
        return _layout_counts(layout, pp, layers, mtp_layers, unmapped)
    if first is not None or last is not None:
        named = "--decoder-first-pipeline-num-layers" if first is not None else "--decoder-last-pipeline-num-layers"
        if embedding or loss:  # transformer_block.py get_num_layers_to_build asserts it
            raise ConfigError(named, "Megatron-LM does not take it with --account-for-embedding/loss-in-pipeline-split; "
                                     "drop one")
        if per_chunk is not None:  # arguments.py asserts it
            raise ConfigError("--num-layers-per-virtual-pipeline-stage", "uneven stages need "
                              "--num-virtual-stages-per-pipeline-rank instead; state that")
        vpp = stages or 1
        totals = first_last_totals(layers, pp, first, last)
        if any(total % vpp for total in totals):
            raise ConfigError("--num-virtual-stages-per-pipeline-rank",
                              f"ranks hold {totals} layers, not divisible by {vpp} virtual stages each")
        return vpp, [totals[c % pp] // vpp for c in range(pp * vpp)]
    counted = layers + embedding + loss
    if counted % pp:
        raise ConfigError("--pipeline-model-parallel-size", f"{counted} layers (embedding and loss as counted) do not "
                          f"split evenly over {pp} ranks; state --decoder-first/last-pipeline-num-layers or a layout")
    per_rank = counted // pp
    vpp = stages or (per_rank // per_chunk if per_chunk else 1)
    if vpp < 1 or per_rank % vpp or (per_chunk and per_rank % per_chunk):
        raise ConfigError("--num-layers-per-virtual-pipeline-stage" if per_chunk else "--num-virtual-stages-per-pipeline-rank",
                          f"{per_rank} layers per rank do not split evenly into virtual stages")
    counts = [per_rank // vpp] * (pp * vpp)
    counts[0] -= embedding
    counts[-1] -= loss
    if min(counts) < 0:
        raise ConfigError("--account-for-embedding-in-pipeline-split", "a chunk has no layer left for the embedding or the "
                          "loss to take the place of")
    return vpp, counts


_TP_OVERLAP_SWITCHES = ("disable-tp-comm-overlap-ag", "disable-tp-comm-overlap-rs", "disable-tp-comm-bulk-wgrad",
                        "disable-tp-comm-bulk-dgrad", "disable-tp-comm-split-ag", "disable-tp-comm-split-rs")


def userbuffers_file(path: str) -> dict[str, dict[str, Any]]:
    """``--tp-comm-overlap-cfg``'s file as the ``megatron`` runtime's ``tp_comm_overlap_cfg`` custom config
    (:func:`hp_plugins.runtimes.userbuffers.read_custom`).

    Megatron-LM opens the path as given, relative to the training process's working directory, and reads it with
    ``yaml.safe_load`` (``megatron/training/initialize.py`` ``_initialize_tp_communicators``, lines 211-213 at
    NVIDIA/Megatron-LM@d98e8a6): hp opens it relative to its own current directory, not the launch script's. An
    empty file is TE's default config (``ub_cfgs`` ``None``: ``initialize_ub`` lays nothing over its defaults).

    Raises:
        ConfigError: At ``--tp-comm-overlap-cfg``: the file cannot be read or parsed, holds no mapping, or a GEMM or
            field in it is not one Transformer Engine takes (one line each).
    """
    flag = "--tp-comm-overlap-cfg"
    try:
        text = read_text(path)
    except ConfigError as exc:
        raise ConfigError(flag, f"{path}: {exc.message}; Megatron-LM opens it relative to the training process's "
                                "working directory: run hp from there or give its absolute path") from None
    data = parse_document(text, "yaml", f"{flag} {path}")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{flag} {path}", f"must hold a mapping of GEMM names ({', '.join(TE_GEMMS)}) to their "
                                            f"fields, got {type(data).__name__}")
    return read_custom(data, f"{flag} {path}")


def trainer_options(a: Any, pp: int, vpp: int, ep: int, unmapped: list[str]) -> dict[str, Any]:
    """The ``megatron`` runtime's overlap and dispatcher options the arguments set (module docstring)."""
    options: dict[str, Any] = {}
    for flag, option in (("overlap-grad-reduce", "overlap_grad_reduce"), ("overlap-param-gather", "overlap_param_gather"),
                         ("tp-comm-overlap", "tp_comm_overlap"),
                         ("overlap-moe-expert-parallel-comm", "overlap_moe_expert_parallel_comm"),
                         ("delay-wgrad-compute", "delay_wgrad_compute")):
        if a.flag(flag):
            options[option] = True
    # TE userbuffers' per-collective switches (arguments.py --disable-tp-comm-*): priced as every TP collective
    # overlapped, so a switch turning one off is named; without --tp-comm-overlap they change nothing.
    cfg = a.value("tp-comm-overlap-cfg")
    if cfg is not None:
        if options.get("tp_comm_overlap"):
            options["tp_comm_overlap_cfg"] = userbuffers_file(cfg)
        else:  # initialize.py reads it only in _initialize_tp_communicators, called under --tp-comm-overlap
            unmapped.append(f"--tp-comm-overlap-cfg {cfg}: not read, as Megatron-LM reads it only with "
                            "--tp-comm-overlap")
    disabled = [f"--{flag}" for flag in _TP_OVERLAP_SWITCHES if a.flag(flag)]
    if disabled and options.get("tp_comm_overlap"):
        unmapped.append(f"{' '.join(disabled)}: priced with every TP collective overlapped (--tp-comm-overlap)")
    if not a.flag("no-overlap-p2p-communication") and pp > 1 and vpp > 1:
        options["overlap_p2p_communication"] = True  # Megatron's default under the interleaved schedule
    dispatcher = a.value("moe-token-dispatcher-type", str, "allgather")
    deepep = a.flag("moe-enable-deepep")
    backend = a.value("moe-flex-dispatcher-backend", str, "deepep")
    if deepep and dispatcher != "flex":  # transformer_config.py raises it
        raise ConfigError("--moe-enable-deepep", "Megatron-LM takes it only with --moe-token-dispatcher-type flex")
    if dispatcher == "flex":
        if backend not in ("deepep", "hybridep"):
            raise ConfigError("--moe-flex-dispatcher-backend", f"expected deepep or hybridep, got {backend!r}")
        options["ep_all_to_all"] = "deepep" if deepep else backend
        # TransformerConfig.moe_hybridep_num_sms (core_v0.16.0); from NVIDIA/Megatron-LM d98e8a6 it is deprecated for
        # moe_flex_dispatcher_num_sms (--moe-flex-dispatcher-num-sms, every flex backend), which __post_init__ lets
        # take precedence over the deprecated knob.
        flex_sms, hybrid_sms = a.value("moe-flex-dispatcher-num-sms", int), a.value("moe-hybridep-num-sms", int)
        sms = flex_sms if flex_sms is not None else hybrid_sms
        if options["ep_all_to_all"] == "hybridep" and sms is not None:
            options["hybridep_num_sms"] = sms
        elif options["ep_all_to_all"] == "hybridep":
            # transformer_config.py: 16 at core_v0.16.0 and core_v0.17.0, None (DeepEP's own default: 24 SMs within
            # one NVLink domain, 8 across) from core_v0.17.1; the runtime's default is Megatron-Bridge's.
            unmapped.append("--moe-hybridep-num-sms (--moe-flex-dispatcher-num-sms) not given: Megatron-Core's default "
                            "is 16 SMs at core_v0.16.0 and "
                            "core_v0.17.0 and DeepEP's own (24 within one NVLink domain, 8 across) from core_v0.17.1; "
                            "priced at the megatron runtime's hybridep_num_sms 32 (Megatron-Bridge's performance "
                            "recipes): pass either flag")
        if options["ep_all_to_all"] == "hybridep" and a.flag("moe-permute-fusion-into-hybridep"):
            # transformer_config.py moe_permute_fusion_into_hybridep (NVIDIA/Megatron-LM 8c5cf05): the permute
            # runs inside HybridEP's dispatch kernel; hp prices the flex dispatcher's separate pass each way.
            unmapped.append("--moe-permute-fusion-into-hybridep: priced with HybridEP's permute as its own pass each "
                            "way (the flex dispatcher's unfused default)")
    elif dispatcher == "allgather" and ep > 1:
        unmapped.append("--moe-token-dispatcher-type allgather (Megatron's default): priced as the all-to-all "
                        "dispatcher's traffic")
    graphs = cuda_graphs(a, unmapped)
    if graphs is not None:
        options["cuda_graphs"] = graphs
    return options


# Megatron-LM's --cuda-graph-scope values that capture part of a layer (megatron/core/transformer/enums.py
# CudaGraphScope at 2edffadb: attn, mlp, moe, moe_router, moe_preprocess, mamba); full_iteration and
# full_iteration_inference capture a whole iteration.
_PARTIAL_SCOPES = frozenset({"attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba"})


def cuda_graphs(a: Any, unmapped: list[str]) -> str | None:
    """The ``megatron`` runtime's ``cuda_graphs`` option from Megatron-LM's CUDA-graph flags, or ``None`` (eager).

    ``megatron/training/arguments.py`` (NVIDIA/Megatron-LM@2edffadb): ``--enable-cuda-graph`` and
    ``--external-cuda-graph`` are the deprecated spellings of ``--cuda-graph-impl local`` and
    ``transformer_engine``; ``--cuda-graph-scope`` left empty (or ``full``) captures each whole transformer layer
    (``layers``), ``full_iteration`` (``local`` only) the whole training iteration (``full_iteration``), and the
    other scopes part of a layer, which hp does not price: those runs are priced eager, and said so. At
    NVIDIA/Megatron-LM@d98e8a6 the scopes are ``--cuda-graph-modules`` (``--cuda-graph-scope`` its hidden,
    deprecated spelling, read too) and the whole iteration is ``--cuda-graph-impl full_iteration``
    (``transformer_config.py`` ``cuda_graph_impl``), whose modules must be empty; a list value written as one
    bracketed word (``"[attn mamba]"``, as the functional tests' ``model_config.yaml`` files state it) is read as its
    words.
    """
    impl = a.value("cuda-graph-impl", str, "none")
    if a.flag("enable-cuda-graph"):
        impl = "local"
    if a.flag("external-cuda-graph"):
        impl = "transformer_engine"
    modules = a.values("cuda-graph-modules")
    flag = "--cuda-graph-modules" if modules else "--cuda-graph-scope"
    words = [w for v in (modules or []) + (a.values("cuda-graph-scope") or [])
             for w in v.replace("[", " ").replace("]", " ").replace(",", " ").split()]
    scopes = [s for s in words if s != "full"]
    if impl == "none":
        return None
    if impl == "full_iteration":
        if scopes:
            raise ConfigError(flag, "must be empty with --cuda-graph-impl full_iteration, as Megatron-LM requires")
        return "full_iteration"
    if impl not in ("local", "transformer_engine"):
        raise ConfigError("--cuda-graph-impl", f"expected none, local, transformer_engine or full_iteration, "
                                               f"got {impl!r}")
    unknown = [s for s in scopes if s not in _PARTIAL_SCOPES | {"full_iteration", "full_iteration_inference"}]
    if unknown:
        raise ConfigError(flag, f"unknown scope {unknown[0]!r}; Megatron-LM takes full, "
                          f"{', '.join(sorted(_PARTIAL_SCOPES))}, full_iteration or full_iteration_inference")
    if not scopes:
        return "layers"
    if "full_iteration" in scopes:
        if impl != "local":  # training.py wraps FullCudaGraphWrapper under local only; TECudaGraphHelper refuses it
            raise ConfigError(flag, "full_iteration needs --cuda-graph-impl local; Megatron-LM refuses "
                              "it under transformer_engine")
        return "full_iteration"
    if scopes == ["full_iteration_inference"]:
        unmapped.append(f"--cuda-graph-impl {impl} {flag} full_iteration_inference: an inference scope, no "
                        "training graph; priced with every kernel launched eagerly")
        return None
    unmapped.append(f"--cuda-graph-impl {impl} {flag} {' '.join(scopes)}: part of each layer captured; "
                    "priced with every kernel launched eagerly (the host floor of docs/time.md)")
    return None


def bf16_layers(a: Any, recipe: str | None, unmapped: list[str]) -> dict[str, int]:
    """``--first-last-layers-bf16`` with ``--num-layers-at-start-in-bf16`` / ``--num-layers-at-end-in-bf16`` (each 1
    by default: Megatron-Core ``TransformerConfig`` at NVIDIA/Megatron-LM@d98e8a6) as the precision's
    ``high_precision_layers_at_start`` / ``_at_end``; nothing where the flag is absent (the counts are then not read
    by Megatron-Core) or no low-precision recipe is stated (nothing is quantized to keep in bf16)."""
    start, end = a.value("num-layers-at-start-in-bf16", int, 1), a.value("num-layers-at-end-in-bf16", int, 1)
    if not a.flag("first-last-layers-bf16"):
        return {}
    if recipe is None:
        unmapped.append("--first-last-layers-bf16: no --fp8-format or --fp4-format, so no layer is quantized; ignored")
        return {}
    return {"high_precision_layers_at_start": start, "high_precision_layers_at_end": end}


# arguments.py: --position-embedding-type choices (learned_absolute, the default, keeps a table).
_POSITIONS = ("learned_absolute", "rope", "mrope", "relative", "none")
# arguments.py: --normalization choices and default (LayerNorm), as hp's norm names.
_NORMS = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}


def megatron_model(a: Any, model: Any, unmapped: list[str]) -> Any:
    """*model* (built from the Hugging Face style config) with Megatron-LM's norm, MLP activation and
    position table and rotary share (module docstring): ``arguments.py`` ``--normalization``, ``--swiglu``,
    ``--squared-relu``, ``--position-embedding-type``, ``--max-position-embeddings``, ``--rotary-percent``; Megatron-Core
    ``models/gpt/gpt_model.py`` adds the learned table only for ``learned_absolute``."""
    name = a.value("normalization", str, "LayerNorm")
    if name not in _NORMS:
        raise ConfigError("--normalization", f"expected LayerNorm or RMSNorm, got {name!r}")
    gated, squared = a.flag("swiglu"), a.flag("squared-relu")
    act = "silu" if gated else ("relu2" if squared else "gelu")
    position = a.value("position-embedding-type", str, "learned_absolute")
    if a.flag("use-rotary-position-embeddings"):  # arguments.py: the legacy RoPE flag sets the type to rope
        position = "rope"
    if position not in _POSITIONS:
        raise ConfigError("--position-embedding-type", f"expected one of {', '.join(_POSITIONS)}, got {position!r}")
    if a.flag("no-position-embedding") and position != "rope":  # arguments.py raises RuntimeError for it
        raise ConfigError("--no-position-embedding", "Megatron-LM takes it only with rope positions; state "
                                                     "--position-embedding-type instead")
    # Megatron-Core rotates int(kv_channels * rotary_percent) channels of each q and k head under rope and mrope
    # (models/common/embeddings/rotary_pos_embedding.py RotaryEmbedding; arguments.py --rotary-percent, default 1.0);
    # the other position types rotate none.
    percent = a.value("rotary-percent", float, 1.0)
    if not 0 < percent <= 1:
        raise ConfigError("--rotary-percent", f"expected a number in (0, 1], got {percent}")
    rotary = percent if position in ("rope", "mrope") else 0.0
    # Megatron-Core's attention (megatron/core/transformer/attention.py at NVIDIA/Megatron-LM@d98e8a6): linear_qkv
    # carries a bias with add_bias_linear or add_qkv_bias, linear_proj with add_bias_linear alone; q_layernorm and
    # k_layernorm are norms of --normalization's type over one head (hidden_size_per_attention_head) under
    # --qk-layernorm, or weightless L2 norms under --qk-l2-norm, which wins where both are given; MLA's latent norms
    # are the deepseek format's own.
    bias = not a.flag("disable-bias-linear")
    qkv_bias = bias or a.flag("add-qkv-bias")
    l2 = a.flag("qk-l2-norm")
    mla = a.flag("multi-latent-attention")
    qk = (a.flag("qk-layernorm") and not mla) or l2
    if a.flag("qk-layernorm") and not (mla or l2) and name == "LayerNorm":
        unmapped.append("--qk-layernorm with --normalization LayerNorm: the per-head LayerNorms priced as RMSNorms "
                        "(their biases, 2 x kv-channels parameters a layer, left out)")
    experts = a.value("num-experts", int)
    if experts and bias:
        unmapped.append("--num-experts without --disable-bias-linear: the experts' own linear biases are not priced "
                        "(the attention's and dense layers' are)")
    gate = a.flag("moe-shared-expert-gate")
    rows = 0
    if position == "learned_absolute":
        rows = a.value("max-position-embeddings", int)
        if rows is None:  # arguments.py validate_args requires it
            raise ConfigError("--max-position-embeddings", "Megatron-LM requires it (the learned position table's "
                                                           "rows); state it")

    def change(config: Any) -> Any:
        names = {f.name for f in attrs.fields(type(config))}
        updates: dict[str, Any] = {}
        if "norm" in names:
            updates["norm"] = _NORMS[name]
        if "gated_mlp" in names:
            updates.update(gated_mlp=gated, hidden_act=act)
        if "expert_activation" in names:
            updates.update(expert_activation="swiglu" if gated else "mlp", hidden_act=act)
        if "position_embeddings" in names:
            updates["position_embeddings"] = rows
        if "partial_rotary_factor" in names:
            updates["partial_rotary_factor"] = rotary
        if "qk_norm" in names:  # a GQA layer, dense or MoE
            updates.update(attention_bias=qkv_bias, attention_out_bias=bias, qk_norm=qk, qk_norm_weight=not l2)
            if "mlp_bias" in names:
                updates["mlp_bias"] = bias
        if "shared_expert_gate" in names and not mla:
            # Megatron-Core's SharedExpertMLP: a (1, hidden) sigmoid gate only with --moe-shared-expert-gate
            # (megatron/core/transformer/moe/shared_experts.py at NVIDIA/Megatron-LM@d98e8a6).
            updates["shared_expert_gate"] = gate and bool(config.shared_expert_intermediate_size)
        return attrs.evolve(config, **updates)

    return attrs.evolve(model, layers=tuple(attrs.evolve(g, config=change(g.config)) for g in model.layers))


def cpu_offloading_plan(num_layers: int) -> dict:
    """The recompute plan of Megatron-Core's activation CPU offloading (``--cpu-offloading-num-layers N``): the first
    *num_layers* decoder layers keep nothing recomputed and copy every tensor they save for backward to the host,
    ``offload: 1.0`` (docs/recompute.md, "Offload"). Megatron-Core wraps each TransformerLayer's forward in Transformer
    Engine's ``get_cpu_offload_context(cpu_offloading, cpu_offloading_num_layers, num_layers, activations=True,
    weights=False, ...)`` (megatron/core/transformer/transformer_block.py at NVIDIA/Megatron-LM@d98e8a6), which offloads
    layers ``0 .. N-1`` (NVIDIA/TransformerEngine v2.12 ``pytorch/cpu_offload.py`` ``DefaultOffloadSynchronizer``: "the
    optimal strategy ... is to offload layers 0, ..., num_offloaded_layers - 1"; v2.9's
    ``AsyncDoubleBufferGroupOffloadHandler`` the first ``num_offload_group`` groups, one a layer)."""
    return {"default": "none", "layers": {f"0-{num_layers - 1}": {"mode": "none", "offload": 1.0}}}


def cpu_offloading(a: Any, pp: int, layers: int, hybrid: bool, unmapped: list[str]) -> dict | None:
    """The plan of ``--cpu-offloading-num-layers`` (:func:`cpu_offloading_plan`); ``None`` where it is 0 or absent,
    and on a *hybrid* model (a warning line in *unmapped*): only TransformerBlock and the MTP block wrap their layers
    in the CPU offload context (get_cpu_offload_context at NVIDIA/Megatron-LM@d98e8a6), a hybrid stack none.
    Refused where Megatron-Core refuses it (megatron/core/transformer/transformer_config.py at d98e8a6: N must be
    below the layer count, and no pipeline parallelism, activation recompute or per-layer CUDA graphs beside it); the
    offloading of weights and the double buffering have no command-line flag (arguments.py leaves
    ``cpu_offloading_weights`` and ``cpu_offloading_double_buffering`` at False)."""
    count = a.value("cpu-offloading-num-layers", int, 0)
    if not count:
        return None
    if hybrid:
        unmapped.append("--cpu-offloading-num-layers: a hybrid model's layer stack offloads no layer in Megatron-Core "
                        "(no CPU offload context around its layers); nothing priced for it")
        return None
    if not 0 < count < layers:
        raise ConfigError("--cpu-offloading-num-layers", f"{count} must lie between 1 and {layers - 1} (--num-layers "
                          f"{layers}: Megatron-Core offloads fewer layers than the model has); state one there")
    if pp > 1:
        raise ConfigError("--cpu-offloading-num-layers", "Megatron-Core refuses CPU offloading with pipeline "
                          "parallelism; drop one of them")
    if a.value("recompute-granularity") is not None:
        raise ConfigError("--cpu-offloading-num-layers", "Megatron-Core refuses CPU offloading with activation "
                          "recompute (--recompute-granularity); drop one of them")
    # transformer_config.py at d98e8a6: "CUDA graphs not supported with CPU offloading" unless the whole iteration is
    # graphed (--cuda-graph-impl full_iteration, or local with the full_iteration scope).
    impl = ("local" if a.flag("enable-cuda-graph") else "transformer_engine" if a.flag("external-cuda-graph")
            else a.value("cuda-graph-impl", str, "none"))
    scopes = " ".join((a.values("cuda-graph-modules") or []) + (a.values("cuda-graph-scope") or []))
    if impl in ("local", "transformer_engine") and "full_iteration" not in scopes:
        raise ConfigError("--cpu-offloading-num-layers", f"Megatron-Core refuses CPU offloading with per-layer CUDA "
                          f"graphs (--cuda-graph-impl {impl}); drop one of them")
    return cpu_offloading_plan(count)
