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
251); hp marks the dense attention's and the dense MLP's (:attr:`hp_core.costs.LayerWork.userbuffers_gemms`), not
MLA's, Mamba's, a shared expert's or the routed experts' (grouped GEMMs run no userbuffer).
"""

from __future__ import annotations

import attrs

from hp_core.types import Runtime

__all__ = ["CONFIGS", "GEMMS", "SOURCE", "TE_1X_DEFAULT", "TE_DEFAULT", "UserbuffersConfig", "sm_margins"]

# The userbuffers GEMMs a transformer layer runs (initialize_ub's names, the external wgrads aside).
GEMMS = ("qkv_fprop", "qkv_dgrad", "qkv_wgrad", "proj_fprop", "proj_dgrad", "fc1_fprop", "fc1_dgrad", "fc1_wgrad",
         "fc2_fprop", "fc2_dgrad")


def _te_default(margin: bool) -> dict[str, tuple[str, int, bool]]:
    """``initialize_ub``'s ``get_default_config`` (transformer_engine/pytorch/module/base.py lines 350-396 at
    d0067d0): ring_exchange for qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad (num_sm 1, no margin), pipeline for
    proj_fprop and fc2_fprop, bulk for the qkv and fc1 dgrad and wgrad (num_sm 16, ``set_sm_margin`` = not
    ring_exchange: *margin*)."""
    ring = ("qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad")
    pipeline = ("proj_fprop", "fc2_fprop")
    return {g: ("ring_exchange", 1, False) if g in ring else ("pipeline" if g in pipeline else "bulk", 16, margin)
            for g in GEMMS}


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
    config = CONFIGS[name]
    return tuple((g, config[g][1]) for g in GEMMS if config[g][2])


@attrs.frozen
class UserbuffersConfig:
    """``apply`` of the megatron runtime's ``tp_comm_overlap_cfg``: sets the overlap schedule's
    :attr:`~hp_core.specs.overlap.OverlapSchedule.userbuffers_sm_margins` to the named config's margins."""

    def __call__(self, runtime: Runtime, value: str) -> Runtime:
        timing = runtime.timing
        if timing is None:
            raise ValueError(f"runtime {runtime.name} states no timing profile, so it has no overlap schedule to set")
        schedule = attrs.evolve(timing.schedule, userbuffers_sm_margins=sm_margins(value))
        return attrs.evolve(runtime, timing=attrs.evolve(timing, schedule=schedule))

