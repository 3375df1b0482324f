"""A latent MoE layer's latent projections run over the rank's own sequence shard under TP with SP (Megatron-Core
``MoELayer.__init__`` builds fc1_latent_proj and fc2_latent_proj as ``TELinear`` with ``parallel_mode="duplicated"``:
megatron/core/transformer/moe/moe_layer.py), not over the SP-gathered micro-batch as the layer's other linears: their
listed GEMMs (:attr:`LayerWork.gemms`) carry the shard's rows, as their FLOPs always did."""

from __future__ import annotations

import pytest

from hp_core.api import build_registry, layer_context
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.kinds.hybrid import MoELayerConfig

_REGISTRY = build_registry(use_env=False)
H, LATENT, SHARED = 256, 64, 512
MOE = MoELayerConfig(hidden_size=H, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
                     shared_expert_intermediate_size=SHARED, hidden_act="relu2", expert_activation="mlp",
                     moe_latent_size=LATENT)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_latent_projections_run_over_the_rank_s_shard(tp):
    parallel = ParallelSpec(tp=tp, sp=tp > 1, ep=2, dp=2, seq_len=1024, micro_batch_size=2, global_batch_size=8)
    x = layer_context(parallel, PrecisionSpec(), "flash")
    cost = _REGISTRY.layer_kind("moe_only").evaluate(MOE, x)
    T = 2 * 1024
    gemms = {(fan_out, fan_in): rows for rows, fan_out, fan_in in cost.work.gemms}
    # fc1_latent_proj (h -> L) and fc2_latent_proj (L -> h): the rank's T / tp tokens.
    assert gemms[(LATENT, H)] == gemms[(H, LATENT)] == T // tp
    # The shared expert's FC1 and FC2 (sequence-parallel linears): the gathered micro-batch; the router: the shard.
    assert gemms[(SHARED // tp, H)] == gemms[(H, SHARED // tp)] == T
    assert gemms[(8, H)] == T // tp
    # The same rows in the moe module's whole-block re-run (Megatron-Core's moe recompute module).
    (block,) = [r for s, r in cost.work.reruns if s == "moeLayer"]
    rerun = {(fan_out, fan_in): rows for rows, fan_out, fan_in in block.gemms}
    assert rerun[(LATENT, H)] == rerun[(H, LATENT)] == T // tp and rerun[(SHARED // tp, H)] == T
