"""Transformer Engine's userbuffers configs: which comm+GEMM overlap each TP GEMM runs and the SMs it leaves its GEMM.

Under ``--tp-comm-overlap`` Megatron-Core hands Transformer Engine a config per userbuffers GEMM (``initialize_ub``
``ub_cfgs``): its overlap ``method``, the CTAs of its communication kernel (``num_sm``) and whether the GEMM leaves
them their SMs (``set_sm_margin``). What each does (NVIDIA/TransformerEngine@d0067d0):

* ``transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp`` ``CommOverlapCore::initialize`` (lines
  116-178, the margin at 141-144): ``_math_sms = set_sm_margin ? sm_count - num_comm_sm : sm_count``, less
  ``NVTE_EXT_MARGIN_SM`` (0 unless set); every GEMM an overlap runs (``bulk_overlap``, lines 444-498;
  ``split_overlap_rs``, 611-760; the ring-exchange ``split_overlap_ag`` and ``split_overlap_rs``, 1044-1217 and
  1295-1406) passes ``_math_sms`` to ``nvte_cublas_gemm``, which sets it as cuBLASLt's
  ``CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET`` (``transformer_engine/common/gemm/cublaslt_gemm.cu`` lines 464-469). So with a margin the GEMM is tiled for ``sm_count - num_sm`` SMs while the communication kernel runs on
  the rest.
* ``transformer_engine/common/comm_gemm_overlap/userbuffers/userbuffers.cu`` (``allgather2_userbuff_inplace``, lines
  1783-1813; ``reducescatter2_userbuff_stridedoutput``, 1861-1890): the bulk and pipeline kernels launch ``comm->sms``
  (``num_sm``) CTAs; the ring exchange copies with the copy engine (``use_ce``, on by default) and launches a
  one-CTA signal kernel.
* Without a margin the GEMM is tiled for every SM and the communication kernel's CTAs share them with it: not
  priced (the sources state no figure for what that sharing costs the GEMM).

hp prices a GEMM that runs under an overlap with a margin at its time times ``sm_count / (sm_count - num_sm)``
(:func:`hp_core.engine.timing.gemm_seconds.margin_factor`, ``sm_count`` the hardware preset's): first-order, as if
its time were inversely proportional to the SMs it is tiled for (wave quantisation and a GEMM's memory-bound share
ignored), docs/time.md.

Which GEMM each name is (``transformer_engine/pytorch/module/layernorm_linear.py`` lines 690-715, 866-875 and
1040-1048, ``linear.py``): ``<block>_fprop`` the block's forward GEMM, ``<block>_dgrad`` its input-gradient GEMM (the
bulk ones overlap the all-gather of the norm output its weight gradient reads), ``<block>_wgrad`` the weight-gradient
GEMM of ``qkv`` and ``fc1`` (overlapping the bulk reduce-scatter of their input gradient); ``proj_wgrad`` and
``fc2_wgrad`` (``external``, MXFP8 only) run no GEMM of their own under a userbuffer (``bulk_overlap_external_ag``
launches none). The blocks are Megatron-Core's modules with a ``tp_comm_buffer_name``
(NVIDIA/Megatron-LM@d98e8a6): ``qkv`` (``transformer/attention.py`` line 1701, the fused query/key/value
projection, an output gate included), ``proj`` (line 422), ``fc1`` and ``fc2`` (``transformer/mlp.py`` lines 228 and
251), and the modules built with those names: a Mamba mixer's ``in_proj`` and ``out_proj`` (``fc1``, ``fc2``:
``ssm/mamba_mixer.py`` lines 291 and 447), a Gated DeltaNet's (``ssm/gated_delta_net/common.py`` lines 221 and 284), a
shared expert's ``linear_fc1`` and ``linear_fc2`` (``SharedExpertMLP`` is an ``MLP``, ``moe/shared_experts.py``) and
MLA's ``linear_proj`` (``proj``, ``multi_latent_attention.py`` line 230); hp marks each
(:attr:`hp_core.costs.LayerWork.userbuffers_gemms`) with the passes Transformer Engine runs through the userbuffers
(a ``TEColumnParallelLinear``, the shared expert's fc1, only its forward: Megatron-Core passes it no bulk overlap,
``extensions/transformer_engine.py`` lines 1189-1221). The routed experts' grouped GEMMs run no userbuffer. A module
built with another name in Megatron-Core's ``TELinear`` family turns ``tp_comm_overlap`` off on the config every
later module is built with (lines 1176-1186): MLA's ``q_down_proj`` / ``q_proj`` and ``kv_down_proj``, the MTP
module's ``mtp_eh_proj``; hp prices such a layer without the overlap (:attr:`hp_core.costs.LayerWork.refused_userbuffers`).
"""

from __future__ import annotations

from typing import Any

import attrs

from hp_core.errors import ConfigError
from hp_core.types import Runtime

__all__ = ["CONFIGS", "FIELDS", "GEMMS", "METHODS", "SOURCE", "TE_1X_DEFAULT", "TE_DEFAULT", "TE_GEMMS",
           "UserbuffersConfig", "custom_margins", "read_custom", "resolve_custom", "sm_margins"]

# The userbuffers GEMMs a transformer layer runs (initialize_ub's names, the external wgrads aside).
GEMMS = ("qkv_fprop", "qkv_dgrad", "qkv_wgrad", "proj_fprop", "proj_dgrad", "fc1_fprop", "fc1_dgrad", "fc1_wgrad",
         "fc2_fprop", "fc2_dgrad")


def _default_lists() -> dict[str, list[str]]:
    """initialize_ub's ``methods`` (base.py lines 350-360): ring_exchange for qkv_fprop, fc1_fprop, proj_dgrad,
    fc2_dgrad, pipeline for proj_fprop and fc2_fprop, bulk for the qkv and fc1 dgrad and wgrad, external for the two
    weight gradients that run no GEMM of their own under a userbuffer."""
    return {"ring_exchange": ["qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad"],
            "pipeline": ["proj_fprop", "fc2_fprop"],
            "bulk": ["qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad"],
            "external": ["proj_wgrad", "fc2_wgrad"]}


def _te_default(margin: bool) -> dict[str, tuple[str, int, bool]]:
    """``initialize_ub``'s ``get_default_config`` (transformer_engine/pytorch/module/base.py lines 375-396 at
    d0067d0) of each GEMM's method list (:func:`_default_lists`): a ring exchange num_sm 1 without a margin, the
    pipeline and bulk GEMMs num_sm 16 with ``set_sm_margin`` *margin*."""
    method = {g: listed for listed, names in _default_lists().items() for g in names}
    return {g: ("ring_exchange", 1, False) if method[g] == "ring_exchange" else (method[g], 16, margin)
            for g in GEMMS}


def _margins(config: dict[str, tuple[str, int, bool]]) -> tuple[tuple[str, int], ...]:
    """``(GEMM, num_sm)`` of *config*'s GEMMs (:data:`GEMMS`, in that order) that run with an SM margin."""
    return tuple((g, config[g][1]) for g in GEMMS if config[g][2])


# (method, num_sm, set_sm_margin) per GEMM. Megatron-LM's --tp-comm-overlap without --tp-comm-overlap-cfg passes
# ub_cfgs = {} (megatron/training/initialize.py _initialize_tp_communicators lines 211-215 at d98e8a6), so every GEMM
# takes TE's default: with a margin on the pipeline and bulk GEMMs since NVIDIA/TransformerEngine 544dd14b4
# (2025-02-07, 'Update main branch with TE 2.0 code'; the v2.0 tag's base.py has it too), without one before (933294dcd,
# v1.13: "set_sm_margin": False).
TE_DEFAULT = "te_default"
TE_1X_DEFAULT = "te_1x_default"

# Megatron-Bridge's named configs, copied as data: NVIDIA-NeMo/Megatron-Bridge@067f987
# src/megatron/bridge/training/comm_overlap.py (read 2026-12-03); NeMo 2.0's nemo/collections/llm/recipes/
# tp_overlap_configs/userbuffers.py (NVIDIA/NeMo@8cfedd7) states the same values under the same names. The
# dataclasses' defaults filled in: RingExchangeOverlapCfg num_sm 1 and set_sm_margin False unless stated. The two
# LoRA configs, which leave qkv_wgrad and fc1_wgrad to TE's default, are left out.
_NAMED: dict[str, dict[str, tuple[str, int, bool]]] = {
    "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 4, False),
        "qkv_wgrad": ('bulk', 24, False),
        "proj_fprop": ('pipeline', 24, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 2, False),
        "fc1_wgrad": ('bulk', 4, False),
        "fc2_fprop": ('pipeline', 16, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
    "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 4, False),
        "qkv_wgrad": ('bulk', 24, False),
        "proj_fprop": ('ring_exchange', 1, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 2, False),
        "fc1_wgrad": ('bulk', 4, False),
        "fc2_fprop": ('ring_exchange', 1, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
    "userbuffers_bf16_b200_h8192_tp2_mbs1_seqlen8192": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 16, False),
        "qkv_wgrad": ('bulk', 24, False),
        "proj_fprop": ('pipeline', 32, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 2, False),
        "fc1_wgrad": ('bulk', 4, False),
        "fc2_fprop": ('pipeline', 16, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
    "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 4, False),
        "qkv_wgrad": ('bulk', 24, False),
        "proj_fprop": ('ring_exchange', 1, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 2, False),
        "fc1_wgrad": ('bulk', 4, False),
        "fc2_fprop": ('ring_exchange', 1, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
    "userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 2, False),
        "qkv_wgrad": ('bulk', 24, False),
        "proj_fprop": ('pipeline', 24, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 2, False),
        "fc1_wgrad": ('bulk', 2, False),
        "fc2_fprop": ('pipeline', 8, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
    "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 2, False),
        "qkv_wgrad": ('bulk', 24, False),
        "proj_fprop": ('ring_exchange', 1, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 2, False),
        "fc1_wgrad": ('bulk', 2, False),
        "fc2_fprop": ('ring_exchange', 1, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
    "userbuffers_bf16_b200_h16384_tp4_cp2_mbs1_seqlen8192": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 8, False),
        "qkv_wgrad": ('bulk', 24, False),
        "proj_fprop": ('pipeline', 32, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 2, False),
        "fc1_wgrad": ('bulk', 2, False),
        "fc2_fprop": ('pipeline', 8, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
    "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 8, False),
        "qkv_wgrad": ('bulk', 32, False),
        "proj_fprop": ('ring_exchange', 1, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 2, False),
        "fc1_wgrad": ('bulk', 8, False),
        "fc2_fprop": ('ring_exchange', 1, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
    "userbuffers_bf16_h100_h6144_tp2_mbs2_seqlen2048": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 8, False),
        "qkv_wgrad": ('bulk', 16, False),
        "proj_fprop": ('pipeline', 16, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 4, False),
        "fc1_wgrad": ('bulk', 16, False),
        "fc2_fprop": ('pipeline', 24, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
    "userbuffers_fp8_h100_h6144_tp2_mbs2_seqlen2048": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 8, False),
        "qkv_wgrad": ('bulk', 16, False),
        "proj_fprop": ('pipeline', 16, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 4, False),
        "fc1_wgrad": ('bulk', 16, False),
        "fc2_fprop": ('pipeline', 24, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
    "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 4, False),
        "qkv_wgrad": ('bulk', 4, False),
        "proj_fprop": ('pipeline', 24, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 2, False),
        "fc1_wgrad": ('bulk', 4, False),
        "fc2_fprop": ('ring_exchange', 1, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
    "userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 4, False),
        "qkv_wgrad": ('bulk', 4, False),
        "proj_fprop": ('ring_exchange', 1, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 2, False),
        "fc1_wgrad": ('bulk', 4, False),
        "fc2_fprop": ('ring_exchange', 1, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
    "userbuffers_bf16_b200_h12288_tp4_mbs1_seqlen2048": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 4, False),
        "qkv_wgrad": ('bulk', 16, False),
        "proj_fprop": ('ring_exchange', 1, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 2, False),
        "fc1_wgrad": ('bulk', 8, False),
        "fc2_fprop": ('ring_exchange', 1, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
    "userbuffers_fp8_b200_h12288_tp4_mbs1_seqlen2048": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 4, False),
        "qkv_wgrad": ('bulk', 16, False),
        "proj_fprop": ('ring_exchange', 1, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 2, False),
        "fc1_wgrad": ('bulk', 8, False),
        "fc2_fprop": ('ring_exchange', 1, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
    "userbuffers_bf16_b200_h6144_tp2_mbs1_seqlen4096": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 8, False),
        "qkv_wgrad": ('bulk', 32, False),
        "proj_fprop": ('ring_exchange', 1, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 2, False),
        "fc1_wgrad": ('bulk', 8, False),
        "fc2_fprop": ('ring_exchange', 1, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
    "userbuffers_bf16_b200_h18432_tp8_mbs1_seqlen4096": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 8, False),
        "qkv_wgrad": ('bulk', 32, False),
        "proj_fprop": ('ring_exchange', 1, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 2, False),
        "fc1_wgrad": ('bulk', 8, False),
        "fc2_fprop": ('pipeline', 24, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
    "userbuffers_fp8_b200_h18432_tp8_mbs1_seqlen4096": {
        "qkv_fprop": ('ring_exchange', 1, False),
        "qkv_dgrad": ('bulk', 8, False),
        "qkv_wgrad": ('bulk', 32, False),
        "proj_fprop": ('ring_exchange', 1, True),
        "proj_dgrad": ('ring_exchange', 1, False),
        "fc1_fprop": ('ring_exchange', 1, False),
        "fc1_dgrad": ('bulk', 2, False),
        "fc1_wgrad": ('bulk', 8, False),
        "fc2_fprop": ('ring_exchange', 1, True),
        "fc2_dgrad": ('ring_exchange', 1, False),
    },
}

CONFIGS: dict[str, dict[str, tuple[str, int, bool]]] = {TE_DEFAULT: _te_default(True), TE_1X_DEFAULT: _te_default(False),
                                                         **_NAMED}

SOURCE = ("NVIDIA/TransformerEngine@d0067d0 transformer_engine/pytorch/module/base.py initialize_ub (get_default_config, "
          "lines 350-396) and transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp "
          "CommOverlapCore::initialize (_math_sms, lines 141-144); te_1x_default: base.py at 933294dcd (v1.13); "
          "named configs: NVIDIA-NeMo/Megatron-Bridge@067f987 src/megatron/bridge/training/comm_overlap.py (NeMo 2.0's "
          "tp_overlap_configs/userbuffers.py at NVIDIA/NeMo@8cfedd7 the same)")


def sm_margins(name: str) -> tuple[tuple[str, int], ...]:
    """``(GEMM, num_sm)`` of config *name*'s GEMMs that run with an SM margin, in :data:`GEMMS` order."""
    return _margins(CONFIGS[name])


@attrs.frozen
class UserbuffersConfig:
    """``apply`` of the megatron runtime's ``tp_comm_overlap_cfg``: sets the overlap schedule's
    :attr:`~hp_core.specs.overlap.OverlapSchedule.userbuffers_sm_margins` to the named config's margins, or to a
    custom config's (a mapping, :func:`read_custom`) laid over TE's defaults (:func:`custom_margins`)."""

    def __call__(self, runtime: Runtime, value: str | dict[str, dict[str, Any]]) -> Runtime:
        timing = runtime.timing
        if timing is None:
            raise ValueError(f"runtime {runtime.name} states no timing profile, so it has no overlap schedule to set")
        margins = sm_margins(value) if isinstance(value, str) else custom_margins(value)
        schedule = attrs.evolve(timing.schedule, userbuffers_sm_margins=margins)
        return attrs.evolve(runtime, timing=attrs.evolve(timing, schedule=schedule))



# --- A custom config: Megatron-LM's --tp-comm-overlap-cfg file, laid over TE's defaults as initialize_ub does ------
#
# Megatron-LM opens the file at the path given, relative to the training process's working directory, reads it with
# yaml.safe_load and passes it as initialize_ub's ub_cfgs (megatron/training/initialize.py
# _initialize_tp_communicators, lines 211-215 at NVIDIA/Megatron-LM@d98e8a6). initialize_ub
# (transformer_engine/pytorch/module/base.py lines 151-572 at NVIDIA/TransformerEngine@d0067d0, the TE te_default
# states) then, per GEMM of its method lists, takes get_default_config(name) (lines 375-396: num_sm 1 for a ring
# exchange, else 16; set_sm_margin = not a ring exchange; both read from the GEMM's *default* method, so a GEMM the
# file makes a ring exchange keeps its pipeline or bulk default of 16 SMs with a margin unless it states them) and
# updates it with the file's fields for that GEMM (lines 560-569), then builds the overlap (add_ub, lines 398-514).

# initialize_ub's GEMM names (its method lists, base.py lines 350-360): hp's GEMMS and the two external weight
# gradients, which run no GEMM of their own under a userbuffer.
TE_GEMMS = GEMMS + ("proj_wgrad", "fc2_wgrad")
METHODS = ("ring_exchange", "pipeline", "bulk", "external")
# add_ub's keyword arguments (base.py lines 398-414): the fields a GEMM's entry may state; any other is a TypeError
# there. The flags are bools; YAML's 0 and 1 are read as them (Megatron-LM's own functional test
# gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_tp_overlap writes set_sm_margin 0 and aggregate 1).
INT_FIELDS = ("num_sm", "cga_size", "num_splits", "comm_priority", "gemm_priority")
FLAG_FIELDS = ("is_reduce_scatter", "set_sm_margin", "aggregate", "atomic_gemm", "use_ce", "fp8_buf",
               "pipeline_rs_overlap_first_gemm")
FIELDS = ("method", *INT_FIELDS, *FLAG_FIELDS)


def _at(where: str, *keys: str) -> str:
    """A field's path in messages: ``$.runtime.options.tp_comm_overlap_cfg.fc2_fprop.num_sm`` in a config,
    ``--tp-comm-overlap-cfg FILE: fc2_fprop.num_sm`` for an importer's file."""
    return ".".join((where, *keys)) if where.startswith("$") else f"{where}: {'.'.join(keys)}"


def read_custom(value: Any, where: str) -> dict[str, dict[str, Any]]:
    """A custom userbuffers config (``ub_cfgs``: GEMM name -> its fields, as a ``--tp-comm-overlap-cfg`` file states
    it) checked field by field: each GEMM one of :data:`TE_GEMMS`, each field one of :data:`FIELDS` (``method`` one
    of :data:`METHODS`, the counts integers, the flags ``true``/``false`` or ``0``/``1``), then laid over TE's
    defaults (:func:`resolve_custom`, which refuses what ``initialize_ub`` refuses). Returns it with the GEMMs in
    :data:`TE_GEMMS` order and the flags as bools.

    A GEMM name ``initialize_ub`` does not know is refused here (it would skip it, so a misspelt name would change
    nothing); so is a method other than TE's four (``initialize_ub`` refuses one only on ``qkv_dgrad`` or
    ``fc1_dgrad``, line 536, and builds a non-ring overlap of any other string).

    Raises:
        ConfigError: At ``where.<GEMM>.<field>``, naming what it takes.
    """
    if not isinstance(value, dict):
        raise ConfigError(where, f"expected a mapping of GEMM names ({', '.join(TE_GEMMS)}) to their fields, "
                            f"got {type(value).__name__}")
    out: dict[str, dict[str, Any]] = {}
    for name, fields in value.items():
        if name not in TE_GEMMS:
            raise ConfigError(_at(where, name), f"unknown GEMM; Transformer Engine's userbuffers GEMMs are "
                                            f"{', '.join(TE_GEMMS)}")
        if not isinstance(fields, dict):
            raise ConfigError(_at(where, name), f"expected a mapping of its fields ({', '.join(FIELDS)}), got {fields!r}")
        checked: dict[str, Any] = {}
        for key, field in fields.items():
            at = _at(where, name, key)
            if key == "method":
                if field not in METHODS:
                    raise ConfigError(at, f"expected one of {', '.join(METHODS)}, got {field!r}")
                checked[key] = field
            elif key in INT_FIELDS:
                if isinstance(field, bool) or not isinstance(field, int):
                    raise ConfigError(at, f"expected an integer, got {field!r}")
                if key == "num_sm" and field < 0:
                    raise ConfigError(at, f"expected a count of SMs >= 0, got {field}")
                checked[key] = field
            elif key in FLAG_FIELDS:
                if field not in (True, False):  # 0 and 1 compare equal to them
                    raise ConfigError(at, f"expected true or false (or 1 or 0), got {field!r}")
                checked[key] = bool(field)
            else:
                raise ConfigError(at, f"unknown field; Transformer Engine's initialize_ub takes {', '.join(FIELDS)}")
        out[name] = checked
    ordered = {name: out[name] for name in TE_GEMMS if name in out}
    resolve_custom(ordered, where)
    return ordered


def resolve_custom(custom: dict[str, dict[str, Any]], where: str = "ub_cfgs") -> dict[str, tuple[str, int, bool]]:
    """``(method, num_sm, set_sm_margin)`` of every GEMM of :data:`TE_GEMMS` with *custom* laid over TE's defaults as
    ``initialize_ub`` does (base.py at d0067d0, the step each line cites):

    * a ``qkv_dgrad`` or ``fc1_dgrad`` given a method other than ``bulk`` leaves the bulk list for its new method's
      and becomes a reduce-scatter, its ``_wgrad`` no longer one (lines 516-536); the file may then not state that
      ``_wgrad`` (a ValueError there);
    * each GEMM's defaults are ``get_default_config`` of the method list it is in (lines 375-396), updated with the
      file's fields (lines 560-569);
    * ``add_ub`` refuses a ``pipeline`` on an all-gather (lines 435-438), an atomic ring exchange on one GEMM of
      ``qkv_fprop``/``proj_fprop`` or ``fc1_fprop``/``fc2_fprop`` and not on its pair (lines 439-459), and a method
      other than ``external`` on ``proj_wgrad`` or ``fc2_wgrad`` (lines 460-471). Its FP8-only check on
      ``atomic_gemm`` (lines 420-434) is not made: the option does not know the run's recipe.

    Raises:
        ConfigError: What ``initialize_ub`` refuses, at ``where.<GEMM>``.
    """
    lists = _default_lists()
    reduce_scatter = ["proj_fprop", "fc2_fprop", "qkv_wgrad", "fc1_wgrad"]  # line 346
    for name in ("qkv_dgrad", "fc1_dgrad"):
        method = custom.get(name, {}).get("method")
        if method is not None and method != "bulk":
            wgrad = name.replace("dgrad", "wgrad")
            if wgrad in custom:
                raise ConfigError(_at(where, wgrad), f"Transformer Engine refuses a config for it when {name} runs "
                                                 f"{method!r}, not 'bulk' (its input gradient's reduce-scatter is then "
                                                 f"{name}'s); leave it out")
            reduce_scatter.remove(wgrad)
            reduce_scatter.append(name)
            lists["bulk"].remove(name)
            lists[method].append(name)
    resolved: dict[str, tuple[str, int, bool]] = {}
    atomic_ring: list[str] = []
    pairs = {"qkv_fprop": "proj_fprop", "fc1_fprop": "fc2_fprop"}
    for listed, names in lists.items():
        for name in names:
            cfg = {"method": listed, "is_reduce_scatter": name in reduce_scatter,
                   "num_sm": 1 if listed == "ring_exchange" else 16, "set_sm_margin": listed != "ring_exchange",
                   "atomic_gemm": False}
            cfg.update(custom.get(name, {}))
            method, atomic = cfg["method"], cfg["atomic_gemm"] and cfg["method"] not in ("bulk", "external")
            if method == "pipeline" and not cfg["is_reduce_scatter"]:
                raise ConfigError(_at(where, name), "Transformer Engine refuses the 'pipeline' method on an all-gather "
                                                "GEMM; use ring_exchange or bulk")
            if atomic and method == "ring_exchange" and name in pairs:
                atomic_ring += [name, pairs[name]]
            if name in pairs.values():
                partner = next(k for k, v in pairs.items() if v == name)
                if (name in atomic_ring) != (atomic and method == "ring_exchange"):
                    raise ConfigError(_at(where, name), f"Transformer Engine needs {partner} and {name} both, or neither, "
                                                    "atomic ring exchanges (atomic_gemm with ring_exchange)")
            if name in ("proj_wgrad", "fc2_wgrad") and method != "external":
                raise ConfigError(_at(where, name), f"Transformer Engine takes only the 'external' method for it, got "
                                                f"{method!r}")
            resolved[name] = (method, cfg["num_sm"], bool(cfg["set_sm_margin"]))
    return {name: resolved[name] for name in TE_GEMMS}


def custom_margins(custom: dict[str, dict[str, Any]]) -> tuple[tuple[str, int], ...]:
    """``(GEMM, num_sm)`` of a custom config's GEMMs (:data:`GEMMS`, in that order) that run with an SM margin once
    laid over TE's defaults (:func:`resolve_custom`); the external weight gradients run no GEMM of their own."""
    return _margins(resolve_custom(custom))
