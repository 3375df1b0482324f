"""NeMo AutoModel's ``FakeBalancedGate`` (``fsdp2`` option ``moe_gate: fake_balanced``, trait ``moe_fake_balanced_gate``), by hand.

The gate (``nemo_automodel/components/moe/layers.py`` at NVIDIA-NeMo/Automodel 89e3a9f, bb0c0bf and e458120) has
no parameter and runs no router: its weights are ``torch.ones(n, k) / k`` and its indices
``torch.arange(n * k).view(-1, k) % E``, so the ``t``-th token of a rank's micro-batch goes to the consecutive
experts ``(t k + j) mod E``. DeepEP sends a token once to each rank it reaches (``is_token_in_rank``), so the
dispatch and combine move the tokens' bytes times the ranks those consecutive experts sit on.
"""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
import pytest

from hp_core.api import build_registry, layer_context, step_time
from hp_core.collectives import CollectiveCall, Fabric, GroupPlacement, Routing
from hp_core.runtime_options import apply_options
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.collectives.deepep import deepep_seconds
from hp_plugins.kinds.moe import MoEConfig, evaluate_moe

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale_cases as sc  # noqa: E402

TRAIT = frozenset({"moe_fake_balanced_gate"})


def _gate_ranks(experts: int, top_k: int, ranks: int, tokens: int) -> float:
    """The gate run on *tokens* tokens: its indices as the code builds them, each token's ranks counted, the mean."""
    per_rank = experts // ranks
    indices = [[(t * top_k + j) % experts for j in range(top_k)] for t in range(tokens)]
    return sum(len({e // per_rank for e in row}) for row in indices) / tokens


def test_round_robin_routing_reaches_the_ranks_of_consecutive_experts():
    rr = lambda e, k: Routing(e, k, assignment="round_robin")  # noqa: E731
    # Qwen3-30B-A3B (128 experts, top-8) over EP 8: 16 experts a rank; token t's 8 experts start at 8t mod 128,
    # a multiple of 8, so they lie in one rank's 16: one rank a token, against the uniform router's
    # 8 (1 - C(112, 8) / C(128, 8)) = 5.34.
    assert rr(128, 8).distinct(8) == 1.0
    assert Routing(128, 8).distinct(8) == pytest.approx(5.339, abs=1e-3)
    # GPT-OSS 20B (32 experts, top-4) over EP 8: 4 experts a rank, blocks starting at 4t mod 32: one rank.
    assert rr(32, 4).distinct(8) == 1.0
    # Nemotron 3 Nano (128 experts, top-6) over EP 8: the block starts at 6t mod 128, an even number; it spills
    # into the next rank's 16 when it starts at 12 or 14 (mod 16), 2 of the 8 even residues: 1 + 2/8 = 1.25.
    assert rr(128, 6).distinct(8) == 1.25
    # 8 experts, top-3, 4 groups of 2: every block of 3 consecutive experts spans 2 groups.
    assert rr(8, 3).distinct(4) == 2.0
    assert rr(8, 3).distinct(1) == 1.0
    # The gate itself, run on a micro-batch of 4 x 4,096 tokens (a whole number of periods), agrees.
    for experts, top_k in ((128, 8), (32, 4), (128, 6), (8, 3)):
        assert rr(experts, top_k).distinct(8 if experts >= 8 else 4) == pytest.approx(
            _gate_ranks(experts, top_k, 8 if experts >= 8 else 4, 16384))


def test_round_robin_routing_is_validated():
    with pytest.raises(ValueError, match="assignment"):
        Routing(8, 2, assignment="random")
    with pytest.raises(ValueError, match="routing groups"):
        Routing(8, 2, groups=4, groups_per_token=4, assignment="round_robin")


def test_deepep_moves_a_round_robin_token_to_its_one_rank():
    # 16,384 tokens of h = 2,048 in bf16, top-8: 536,870,912 bytes of routed copies, 67,108,864 of tokens; each
    # reaches one of the 8 ranks, at DeepEP's 153/200 of H100's 450 GB/s NVLink.
    fabric = Fabric(intra_bandwidth=270e9, intra_a2a_bandwidth=225e9, intra_latency=8e-6, nic_bandwidth=None,
                    inter_latency=None, intra_link_bandwidth=450e9)
    call = CollectiveCall("all_to_all", 16384 * 8 * 2048 * 2, GroupPlacement(8, 8, 1), fabric,
                          routing=Routing(128, 8, assignment="round_robin"))
    assert deepep_seconds(call) == pytest.approx(67_108_864 / (450e9 * 153 / 200))
    uniform = attrs.evolve(call, routing=Routing(128, 8))
    assert deepep_seconds(uniform) / deepep_seconds(call) == pytest.approx(Routing(128, 8).distinct(8))


# Qwen3-30B-A3B's MoE layer shape: h 2,048, 128 experts of 768, top-8; 4 x 4,096 tokens, EP 8.
QWEN3 = MoEConfig(hidden_size=2048, num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
                  num_experts_per_tok=8, moe_intermediate_size=768)


def _cost(traits):
    context = layer_context(ParallelSpec(dp=8, ep=8, seq_len=4096, micro_batch_size=4), PrecisionSpec(), "flash",
                            traits=traits)
    return evaluate_moe(QWEN3, context)


def test_no_router_parameter_gemm_or_kernels_under_the_fake_gate():
    learned, fake = _cost(frozenset()), _cost(TRAIT)
    tokens = 4 * 4096
    # The gating GEMM, 2 T h E FLOPs forward, is gone; nothing else of the layer's GEMMs moves.
    assert learned.forward.matmul_flops - fake.forward.matmul_flops == 2 * tokens * 2048 * 128 == 8_589_934_592
    assert fake.forward.attention_flops == learned.forward.attention_flops
    assert learned.work.router_elements == tokens * 128 and fake.work.router_elements == 0
    assert (tokens, 128, 2048) in learned.work.gemms and (tokens, 128, 2048) not in fake.work.gemms
    assert learned.work.high_precision_gemms == ((tokens, 128, 2048),) and fake.work.high_precision_gemms == ()
    # No router parameter (E x h); the kept weights are k per token in bf16, not the probabilities over E.
    names = lambda cost: {p.name for p in cost.params}  # noqa: E731
    assert "router" in names(learned) and "router" not in names(fake)
    kept = lambda cost: {t.op: t.bytes for t in cost.activations}  # noqa: E731
    assert kept(learned)["router_probs"] == tokens * 128 * 2 and kept(fake)["router_probs"] == tokens * 8 * 2
    # The expert all-to-alls: the same bytes, routed round-robin.
    (ep_learned,) = [c for c in learned.work.collectives if c.group == "ep"]
    (ep_fake,) = [c for c in fake.work.collectives if c.group == "ep"]
    assert ep_fake.bytes == ep_learned.bytes == tokens * 8 * 2048 * 2
    assert ep_learned.routing.assignment == "uniform" and ep_fake.routing == Routing(128, 8, assignment="round_robin")
    # torchtitan's op-level SAC re-runs wk, wo, then the gate (5th, saved) and every grouped GEMM: without the
    # gate the same, its place left empty (q, k, v, o over 32 query and 4 key/value heads of 128).
    grouped = 2 * tokens * 8 * 3 * 2048 * 768
    assert fake.work.alternate_matmul_flops == learned.work.alternate_matmul_flops == 2 * tokens * 2048 * (512 + 4096) + grouped


def test_the_fake_gate_leaves_no_place_in_the_op_sac_matmul_order():
    # DeepSeek-V3's MoE layer (h 7168; q_lora 1536, 128 heads of 128 + 64, kv_lora 512, v 128; 8 of 256 experts and
    # one shared of 2048): learned, torchtitan's order wq_a, wq_b, wkv_a, wkv_b, wo, gate, w1, w3, w2 re-runs wq_b,
    # wkv_b, the gate and w3; with no gate, wq_b, wkv_b, w1 and w2. Every grouped GEMM either way.
    registry = build_registry(use_env=False)
    group = next(g for g in sc._preset("deepseek-v3", registry).layers if g.kind == "mla_moe")
    kind = registry.layer_kind("mla_moe")
    T = 4096

    def alternate(traits):
        context = layer_context(ParallelSpec(seq_len=T), PrecisionSpec(), "flash", traits=traits)
        return kind.evaluate(group.config, context).work.alternate_matmul_flops

    grouped = 2 * T * 8 * 3 * 7168 * 2048
    attention = 1536 * 128 * 192 + 512 * 128 * 256  # wq_b, wkv_b
    assert alternate(frozenset()) == 2 * T * (attention + 7168 * 256 + 7168 * 2048) + grouped
    assert alternate(TRAIT) == 2 * T * (attention + 2 * 7168 * 2048) + grouped


def test_the_option_sets_the_trait_and_the_automodel_rows_state_it():
    registry = build_registry(use_env=False)
    fsdp2 = registry.runtime("fsdp2")
    assert "moe_fake_balanced_gate" not in fsdp2.traits
    fake = apply_options(fsdp2, {"moe_gate": "fake_balanced"})
    assert "moe_fake_balanced_gate" in fake.traits
    assert "moe_fake_balanced_gate" not in apply_options(fake, {"moe_gate": "learned"}).traits
    # Every AutoModel MoE row's config sets fake_balanced_gate true (the sources' config notes), and each row says so.
    for name in ("am-qwen3-30b-a3b-ep8", "am-gpt-oss-20b-ep8", "am-nemotron-3-nano-30b-a3b-ep8"):
        row = next(r for r in sc.ROWS if r["id"] == name)
        assert row["options"]["moe_gate"] == "fake_balanced"
        assert "fake_balanced_gate true" in sc.DATA["sources"][row["source"]]["config_note"]


def test_the_qwen3_row_loses_its_router_time_and_most_of_its_dispatch_bytes():
    registry = build_registry(use_env=False)
    row = next(r for r in sc.ROWS if r["id"] == "am-qwen3-30b-a3b-ep8")
    fake = sc.runtime(row, registry)
    learned = apply_options(fake, {"moe_gate": "learned"})
    args = dict(registry=registry, hardware=sc.hardware(row, registry), recompute=sc.recompute(row, registry))
    on = step_time(sc.model(row, registry), sc.layout(row), runtime=fake, **args)
    off = step_time(sc.model(row, registry), sc.layout(row), runtime=learned, **args)
    ep = lambda t: next(total for g, total, _ in t.stages[0].communication_by_group if g == "ep")  # noqa: E731
    # DeepEP's bytes are the tokens times the ranks reached: 1 against the uniform router's 5.34 (no fixed time).
    assert ep(off) / ep(on) == pytest.approx(Routing(128, 8).distinct(8))
    assert on.step_seconds < off.step_seconds
