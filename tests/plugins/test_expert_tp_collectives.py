"""The expert-tensor-parallel collectives of Megatron-Core's alltoall dispatcher, by hand.

``MoEAlltoAllTokenDispatcher`` (megatron/core/transformer/moe/token_dispatcher.py) with an expert-TP group of
``etp > 1`` ranks all-gathers the dispatched tokens over that group after the all-to-all and reduce-scatters the
experts' output back before it: an all-gather and a reduce-scatter forward, a reduce-scatter and an all-gather
backward, each of the ``etp`` ranks' routed tokens (NCCL's convention: the gathered output, the reduce-scatter's
input). Under that trait the routed experts have no dense-MLP TP gather of their own (moe_layer.py); shared
experts keep theirs (shared_experts.py).
"""

from __future__ import annotations

from hp_core.api import layer_context
from hp_core.costs import Collective
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.kinds.mla import MLAMoEConfig, evaluate_mla_moe
from hp_plugins.kinds.moe import MoEConfig, evaluate_moe

MEGATRON = frozenset({"moe_expert_tp_dispatch"})
# h = 1,024, 8 experts of width 2,048, top-2; 512 tokens a micro-batch, 2-byte activations.
SMALL = MoEConfig(hidden_size=1024, num_attention_heads=8, num_key_value_heads=8, num_experts=8,
                  num_experts_per_tok=2, moe_intermediate_size=2048)


def _collectives(config, etp: int, traits=MEGATRON, evaluate=evaluate_moe, seq_len: int = 512):
    context = layer_context(ParallelSpec(tp=2, sp=True, ep=4, etp=etp, dp=8, seq_len=seq_len), PrecisionSpec(), "flash",
                            traits=traits)
    return evaluate(config, context).work.collectives


def test_etp2_gathers_and_reduce_scatters_the_two_ranks_routed_tokens():
    found = _collectives(SMALL, etp=2)
    # A rank routes 512 / 2 (SP) = 256 tokens, 2 copies each: 512 routed copies of 1,024 x 2 bytes = 1 MiB; the
    # expert-TP pair gathers both ranks' copies: 1,024 rows, 2 MiB.
    routed_bytes, gathered_bytes = 512 * 1024 * 2, 1024 * 1024 * 2
    assert (routed_bytes, gathered_bytes) == (1_048_576, 2_097_152)
    etp = [c for c in found if c.group == "etp"]
    # Each issued again in backward under moeLayer, the MoE block's re-run (Megatron-Core's moe module).
    assert etp == [Collective("etp", "all_gather", gathered_bytes, 1, 1, rerun_switch="moeLayer"),
                   Collective("etp", "reduce_scatter", gathered_bytes, 1, 1, rerun_switch="moeLayer")]
    assert [c for c in found if c.group == "ep"] == [Collective("ep", "all_to_all", routed_bytes, 2, 2, rerun_switch="moeLayer",
                                                                routing=found[-3].routing)]
    # TP: attention's block alone (its input gathered, output reduce-scattered: 512 x 1,024 x 2 bytes), not the experts'.
    tp = [c for c in found if c.group == "tp"]
    assert [(c.op, c.bytes, c.forward_calls, c.backward_calls) for c in tp] == [
        ("all_gather", 1_048_576, 1, 1), ("reduce_scatter", 1_048_576, 1, 1)]


def test_etp1_states_no_expert_tp_collective():
    found = _collectives(SMALL, etp=1)
    assert not [c for c in found if c.group == "etp"]
    assert [(c.op, c.forward_calls) for c in found if c.group == "tp"] == [("all_gather", 1), ("reduce_scatter", 1)]


def test_without_the_trait_the_experts_gather_over_tp_like_a_dense_mlp():
    found = _collectives(SMALL, etp=2, traits=frozenset())
    assert not [c for c in found if c.group == "etp"]
    assert [(c.op, c.forward_calls, c.backward_calls) for c in found if c.group == "tp"] == [
        ("all_gather", 2, 2), ("reduce_scatter", 2, 2)]


def test_shared_experts_keep_their_tp_block_and_mla_moe_states_the_same_etp_collectives():
    shared = MoEConfig(hidden_size=1024, num_attention_heads=8, num_key_value_heads=8, num_experts=8,
                       num_experts_per_tok=2, moe_intermediate_size=2048, shared_expert_intermediate_size=2048)
    found = _collectives(shared, etp=2)
    assert [c.forward_calls for c in found if c.group == "tp"] == [2, 2]
    assert [(c.op, c.bytes) for c in found if c.group == "etp"] == [("all_gather", 2_097_152), ("reduce_scatter", 2_097_152)]
    mla = MLAMoEConfig(hidden_size=1024, num_attention_heads=8, q_lora_rank=256, kv_lora_rank=128, qk_nope_head_dim=64,
                       qk_rope_head_dim=32, v_head_dim=64, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=2048)
    found = _collectives(mla, etp=2, evaluate=evaluate_mla_moe)
    assert [(c.op, c.bytes, c.forward_calls, c.backward_calls) for c in found if c.group == "etp"] == [
        ("all_gather", 2_097_152, 1, 1), ("reduce_scatter", 2_097_152, 1, 1)]
    assert [c.forward_calls for c in found if c.group == "tp"] == [1, 1]
