"""Group-limited routing (DeepSeek-V3's ``n_group`` / ``topk_group``, Megatron-Core's ``--moe-router-num-groups`` /
``--moe-router-group-topk``): the expected distinct expert groups a token reaches, which DeepEP's model prices
(docs/time.md, "Eager kernels, op-level SAC and DeepEP"), checked by exhaustive enumeration and by hand."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hp_core.collectives import Routing, _limited_distinct


def _brute_force(experts: int, top_k: int, groups: int, per_token: int, placement: int) -> Fraction:
    """Every choice of ``per_token`` routing groups, then of ``top_k`` experts among theirs, equally likely (balanced
    routing): the mean number of the ``placement`` consecutive expert groups reached, exactly."""
    n, m = experts // groups, experts // placement
    total, count = Fraction(0), 0
    for chosen in itertools.combinations(range(groups), per_token):
        pool = [e for r in chosen for e in range(r * n, (r + 1) * n)]
        for picked in itertools.combinations(pool, top_k):
            total += len({e // m for e in picked})
            count += 1
    return total / count


def _unlimited(experts: int, top_k: int, placement: int) -> float:
    """The unlimited formula, from binomials: ``G (1 - C(E - E/G, k) / C(E, k))``."""
    m = experts // placement
    return placement * (1 - math.comb(experts - m, top_k) / math.comb(experts, top_k))


def test_group_limited_routing_by_hand():
    # 8 experts in 4 routing groups of 2; a token picks 2 groups, then 2 of their 4 experts.
    r = Routing(8, 2, groups=4, groups_per_token=2)
    # 8 placement groups of one expert: two distinct experts always reach 2.
    assert r.distinct(8) == pytest.approx(2.0)
    # 4 placement groups = the routing groups: each chosen with 2/4, then missed only if both experts fall in the
    # other chosen group, C(2, 2) / C(4, 2) = 1/6: 4 * 1/2 * 5/6 = 5/3.
    assert r.distinct(4) == pytest.approx(5 / 3)
    # 2 placement groups of 2 routing groups each: s of a placement group's 2 chosen with P(0) = 1/6, P(1) = 4/6,
    # P(2) = 1/6; missed with 1, C(2, 2) / C(4, 2) = 1/6, 0: 1/6 + 4/36 = 5/18, so 2 * 13/18 = 13/9,
    # fewer than the unlimited 2 * (1 - C(4, 2) / C(8, 2)) = 11/7.
    assert r.distinct(2) == pytest.approx(13 / 9)
    assert Routing(8, 2).distinct(2) == pytest.approx(11 / 7)
    assert r.distinct(1) == 1.0
    for placement, expected in ((8, Fraction(2)), (4, Fraction(5, 3)), (2, Fraction(13, 9))):
        assert _brute_force(8, 2, 4, 2, placement) == expected


@pytest.mark.parametrize("experts, top_k, groups, per_token, placements", [
    (8, 2, 4, 2, (1, 2, 4, 8)),
    (8, 3, 4, 2, (2, 4, 8)),
    (12, 2, 6, 2, (2, 3, 6, 12)),
    (12, 3, 3, 2, (3, 6, 12)),
    (16, 4, 4, 2, (2, 4, 8, 16)),
    (16, 2, 8, 3, (2, 4, 8, 16)),
])
def test_group_limited_routing_equals_exhaustive_enumeration(experts, top_k, groups, per_token, placements):
    r = Routing(experts, top_k, groups=groups, groups_per_token=per_token)
    for placement in placements:
        assert r.distinct(placement) == pytest.approx(float(_brute_force(experts, top_k, groups, per_token, placement)),
                                                      rel=1e-12), placement


def test_placements_across_routing_groups_price_the_unlimited_upper_bound():
    # 12 experts in 3 routing groups, 2 placement groups: neither divides the other, so the unlimited formula,
    # at least the exact expectation.
    r = Routing(12, 2, groups=3, groups_per_token=1)
    assert r.distinct(2) == Routing(12, 2).distinct(2)
    assert r.distinct(2) >= float(_brute_force(12, 2, 3, 1, 2))
    assert r.distinct(2) == pytest.approx(2 * (1 - 15 / 66))


def test_deepseek_v3_reaches_fewer_nodes_under_its_node_limited_routing():
    # 256 experts, 8 groups, 4 per token, top-8, over 8 nodes (EP 64): 4 * (1 - C(96, 8) / C(128, 8)).
    v3 = Routing(256, 8, groups=8, groups_per_token=4)
    assert v3.distinct(8) == pytest.approx(4 * (1 - math.comb(96, 8) / math.comb(128, 8)))
    assert v3.distinct(8) == pytest.approx(3.629, abs=1e-3) and v3.distinct(8) <= 4
    assert Routing(256, 8).distinct(8) == pytest.approx(5.295, abs=1e-3)
    # 64 ranks of 4 experts, each inside one routing group: 64 * 1/2 * (1 - C(124, 8) / C(128, 8)).
    assert v3.distinct(64) == pytest.approx(32 * (1 - math.comb(124, 8) / math.comb(128, 8)))


@given(per_group=st.integers(1, 8), groups=st.integers(1, 16), top_k=st.integers(1, 16), placement=st.integers(1, 64))
def test_unlimited_routing_is_the_formula_without_groups(per_group, groups, top_k, placement):
    experts = per_group * groups
    top_k = min(top_k, experts)
    unlimited = Routing(experts, top_k).distinct(placement)
    # No groups (R = 1) or every group (g = R): the unlimited formula exactly.
    assert Routing(experts, top_k, groups=1, groups_per_token=1).distinct(placement) == unlimited
    assert Routing(experts, top_k, groups=groups, groups_per_token=groups).distinct(placement) == unlimited
    if experts % placement == 0:
        assert unlimited == pytest.approx(_unlimited(experts, top_k, placement), rel=1e-12)


@given(per_group=st.integers(1, 6), groups=st.sampled_from([1, 2, 4, 8]), data=st.data())
def test_group_limited_routing_reaches_no_more_than_unlimited(per_group, groups, data):
    experts = per_group * groups
    per_token = data.draw(st.integers(1, groups))
    top_k = data.draw(st.integers(1, per_token * per_group))
    placement = data.draw(st.sampled_from([d for d in (1, 2, 4, 8, 16, 32) if experts % d == 0]))
    limited = Routing(experts, top_k, groups=groups, groups_per_token=per_token).distinct(placement)
    assert 1.0 - 1e-9 <= limited <= min(top_k, placement, placement * per_token / groups if placement >= groups
                                         else placement) + 1e-9
    assert limited <= Routing(experts, top_k).distinct(placement) + 1e-9
    # The group-limited branches at g = R (which distinct() short-cuts to the unlimited formula) agree with it.
    if per_token == groups and groups > 1:
        for G in (groups // 2, groups, 2 * groups):
            if G >= 1 and experts % G == 0:
                assert _limited_distinct(experts, top_k, groups, groups, G) == pytest.approx(
                    _unlimited(experts, top_k, G), rel=1e-12)


def test_routing_groups_are_validated():
    with pytest.raises(ValueError, match="divide"):
        Routing(10, 2, groups=4, groups_per_token=2)
    with pytest.raises(ValueError, match="groups_per_token"):
        Routing(8, 2, groups=4, groups_per_token=5)
    with pytest.raises(ValueError, match="top_k"):
        Routing(8, 5, groups=4, groups_per_token=2)  # 2 groups of 2 hold 4 experts
    with pytest.raises(ValueError, match="groups_per_token"):
        Routing(8, 2, groups=1, groups_per_token=2)
    with pytest.raises(ValueError, match="positive"):
        Routing(8, 2, groups=0)


# ----------------------------------------------------------------------------- plumbing: configs, readers, step time

import copy
import shlex

import attrs

from hp_core.api import model_from_preset, step_time
from hp_core.errors import ConfigError
from hp_core.runtime_options import apply_options
from hp_core.specs import ParallelSpec
from hp_plugins.importers.megatron import import_megatron_args
from hp_plugins.models.hf import model_from_hf_config

_V3_TINY = {"model_type": "deepseek_v3", "hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 64,
            "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 1000, "n_routed_experts": 16,
            "num_experts_per_tok": 4, "n_shared_experts": 1, "first_k_dense_replace": 1, "kv_lora_rank": 32,
            "q_lora_rank": 64, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}


def _groups(model):
    (config,) = {g.config for g in model.layers if hasattr(g.config, "router_num_groups")}
    return config.router_num_groups, config.router_group_topk


def test_hf_deepseek_configs_state_their_router_groups(registry):
    assert _groups(model_from_preset("deepseek-v3", registry)) == (8, 4)
    assert _groups(model_from_preset("deepseek-v2", registry)) == (8, 3)  # topk_method group_limited_greedy
    assert _groups(model_from_preset("nemotron-3-nano-30b-a3b", registry)) == (1, 1)
    assert _groups(model_from_preset("qwen3-30b-a3b", registry)) == (1, None)
    # DeepseekV3Config's defaults where the file omits them: 8 groups, 4 per token.
    assert _groups(model_from_hf_config(_V3_TINY, name="t", source="t")) == (8, 4)
    assert _groups(model_from_hf_config({**_V3_TINY, "n_group": 4, "topk_group": 2}, name="t", source="t")) == (4, 2)
    # DeepSeek-V2's router limits groups only with group_limited_greedy (DeepseekV2TopkRouter); its default is greedy.
    v2 = {**_V3_TINY, "model_type": "deepseek_v2"}
    assert _groups(model_from_hf_config(v2, name="t", source="t")) == (1, None)
    assert _groups(model_from_hf_config({**v2, "n_group": 4, "topk_group": 2}, name="t", source="t")) == (1, None)
    limited = {**v2, "topk_method": "group_limited_greedy", "n_group": 4, "topk_group": 2}
    assert _groups(model_from_hf_config(limited, name="t", source="t")) == (4, 2)


@pytest.mark.parametrize("change, path, message", [
    ({"model_type": "deepseek_v2", "topk_method": "group_limited_greedy"}, "$.n_group", "missing"),
    ({"model_type": "deepseek_v2", "topk_method": "noaux_tc"}, "$.topk_method", "greedy"),
    ({"n_group": 0}, "$.n_group", "positive"),
    ({"topk_group": 0}, "$.topk_group", "positive"),
    ({"n_group": 3}, "$.n_group", "a divisor of the 16 routed experts, got 3"),
    ({"n_group": 4, "topk_group": 5}, "$.topk_group", "at most n_group (4), got 5"),
    # An omitted field takes DeepseekV3Config's default, and the error says so.
    ({"n_routed_experts": 12}, "$.n_group", "(absent from the file: the config class's default 8)"),
    ({"n_group": 8, "topk_group": 1}, "config.json", "num_experts_per_tok=4 must not exceed the 2 experts"),
])
def test_hf_router_groups_refused_with_their_path(change, path, message):
    with pytest.raises(ConfigError) as info:
        model_from_hf_config({**_V3_TINY, **change}, name="t", source="t")
    assert path in info.value.path and message in info.value.message


def test_megatron_router_group_flags_import_as_the_layers_router_groups(registry):
    base = ("--num-layers 2 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 2048 --seq-length 512 "
            "--vocab-size 1000 --swiglu --normalization RMSNorm --disable-bias-linear --micro-batch-size 1 "
            "--global-batch-size 8 --bf16 --num-experts 16 --moe-router-topk 4 --expert-model-parallel-size 8 "
            "--position-embedding-type rope --moe-token-dispatcher-type alltoall")

    def layers(extra):
        job = import_megatron_args(shlex.split(base + extra), registry, devices=8)
        return {(layer["config"]["router_num_groups"], layer["config"]["router_group_topk"])
                for layer in job.document["model"]["layers"] if "router_num_groups" in layer["config"]}, job.unmapped

    assert layers(" --moe-router-num-groups 4 --moe-router-group-topk 2") == ({(4, 2)}, ())
    # Megatron-Core limits the groups only when --moe-router-group-topk is set.
    assert layers(" --moe-router-num-groups 4") == ({(1, None)}, ())
    for extra, flag in ((" --moe-router-group-topk 2", "--moe-router-num-groups"),
                        (" --moe-router-num-groups 3 --moe-router-group-topk 2", "--moe-router-num-groups"),
                        (" --moe-router-num-groups 4 --moe-router-group-topk 5", "--moe-router-group-topk"),
                        (" --moe-router-num-groups 8 --moe-router-group-topk 1", "--moe-router-group-topk")):
        with pytest.raises(ConfigError) as info:
            layers(extra)
        assert info.value.path == flag, extra


def test_the_measured_deepseek_case_states_its_router_groups(registry):
    import json
    from pathlib import Path

    from hp_plugins.cases.megatron_measured import read_megatron_case

    cases = json.loads((Path(__file__).parent / "data" / "megatron_measured.json").read_text(encoding="utf-8"))["cases"]
    (index,) = [i for i, c in enumerate(cases) if (c["training_config"].get("moe") or {}).get("router_group_topk")]
    assert _groups(read_megatron_case(cases[index], index).model) == (8, 3)
    broken = copy.deepcopy(cases[index])
    del broken["training_config"]["moe"]["router_num_groups"]
    with pytest.raises(ConfigError, match="router_num_groups"):
        read_megatron_case(broken, index)


def _ep_seconds(registry, model):
    runtime = apply_options(registry.runtime("fsdp2"), {"ep_all_to_all": "deepep"})
    layout = ParallelSpec(dp=8, ep=8, seq_len=4096, micro_batch_size=1, global_batch_size=8)
    timed = step_time(model, layout, registry=registry, hardware=registry.hardware_preset("h100-sxm").spec, runtime=runtime)
    return dict((g, t) for g, t, _ in timed.stages[0].communication_by_group)["ep"]


def test_deepep_prices_a_group_limited_router_from_the_groups_a_token_reaches(registry):
    # Qwen3-30B-A3B (128 experts, top-8) on one node of 8 ranks, as docs/time.md's DeepEP check, with its router
    # limited to 2 of 8 groups of 16 experts: the groups are the ranks, so a token reaches
    # 8 * 2/8 * (1 - C(16, 8) / C(32, 8)) ranks rather than 8 * (1 - C(112, 8) / C(128, 8)).
    model = model_from_preset("qwen3-30b-a3b", registry)
    grouped = attrs.evolve(model, layers=tuple(
        attrs.evolve(g, config=attrs.evolve(g.config, router_num_groups=8, router_group_topk=2))
        if hasattr(g.config, "router_num_groups") else g for g in model.layers))
    limited = 2 * (1 - math.comb(16, 8) / math.comb(32, 8))
    unlimited = 8 * (1 - math.comb(112, 8) / math.comb(128, 8))
    assert limited == pytest.approx(1.9976, abs=1e-4) and unlimited == pytest.approx(5.34, abs=0.01)
    # 192 all-to-alls of 4096 tokens x 2048 x 2 bytes, each token sent once per rank it reaches, at 153/200 of NVLink.
    assert _ep_seconds(registry, grouped) == pytest.approx(192 * 4096 * 2048 * 2 * limited / (450e9 * 153 / 200), rel=1e-9)
    assert _ep_seconds(registry, model) == pytest.approx(192 * 4096 * 2048 * 2 * unlimited / (450e9 * 153 / 200), rel=1e-9)
