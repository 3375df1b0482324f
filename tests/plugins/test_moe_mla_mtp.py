"""MoE, MLA and MTP kinds; the Hugging Face importer; every preset's parameter counts.

Reference counts: ``data/hf_preset_params.json`` (transformers 5.24.0 on torch
2.13.0, each preset's config built on the meta device) and
``data/params.json``; publisher-stated totals from the model cards.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hp_core.api import build_registry, count_parameters, estimate, layer_context, model_from_preset
from hp_core.errors import ConfigError
from hp_core.specs import LayerGroup, ModelSpec, ParallelSpec, PrecisionSpec
from hp_plugins.kinds.mla import MLAConfig, evaluate_mla
from hp_plugins.kinds.moe import MoEConfig, evaluate_moe
from hp_plugins.kit import moe_tokens
from hp_plugins.models.hf import model_from_hf_config

HERE = Path(__file__).resolve().parent
REFERENCE = json.loads((HERE / "data" / "hf_preset_params.json").read_text())
CASES = HERE / "data" / "params.json"

ATTENTION_PARAMS = {"qkv_proj", "o_proj", "attn_replicated", "attn_sinks", "q_a_proj", "q_a_layernorm", "q_b_proj", "q_proj",
                    "kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj"}
MLP_PARAMS = {"mlp_in_proj", "mlp_out_proj", "mlp_out_bias", "router", "experts", "shared_experts", "shared_expert_gate",
              "expert_fc1_bias", "expert_fc2_bias"}
BODY = ("dense", "moe", "mla", "mla_moe")
_REGISTRY = build_registry(use_env=False)


def _body_layers(model):
    """(kind, config) of every body layer, in order."""
    return [(g.kind, g.config) for g in model.layers if g.kind in BODY for _ in range(g.count)]


def _layer_params(registry, kind, config):
    cost = registry.layer_kind(kind).evaluate(config, layer_context(ParallelSpec(seq_len=8), PrecisionSpec(), "flash"))
    return {p.name: p.elements for p in cost.params}


@pytest.mark.parametrize("name", sorted(REFERENCE["models"]))
def test_preset_parameters_equal_transformers(registry, name):
    ref = REFERENCE["models"][name]
    model = model_from_preset(name, registry)
    summary = count_parameters(model, registry)
    mtp = REFERENCE["deepseek_v3_mtp"]["own"] if name == "deepseek-v3" else 0
    assert summary.total == ref["total_params"] + mtp
    assert summary.by_kind["embedding"] == ref["embedding_params"]
    assert summary.by_kind["output"] == ref["lm_head_params"] + ref["final_norm_params"]
    layers = _body_layers(model)
    assert len(layers) == sum(group["count"] for group in ref["layers"])
    for group in ref["layers"]:
        for index in (group["first"], group["first"] + group["count"] - 1):
            kind, config = layers[index]
            parts = _layer_params(registry, kind, config)
            assert sum(parts.values()) == group["params_per_layer"], (name, index)
            assert sum(n for p, n in parts.items() if p in ATTENTION_PARAMS) == group["self_attn"], (name, index)
            assert sum(n for p, n in parts.items() if p in MLP_PARAMS) == group["mlp"], (name, index)


@pytest.mark.parametrize("name", sorted(REFERENCE["publisher_stated_billions"]))
def test_preset_totals_match_what_the_publisher_states(registry, name):
    stated, _source = REFERENCE["publisher_stated_billions"][name]
    preset = name.removesuffix("+mtp")
    total = count_parameters(model_from_preset(preset, registry), registry).total
    if name == "deepseek-v3":
        total -= REFERENCE["deepseek_v3_mtp"]["own"]  # the report's 671B is the main model
    if name == "deepseek-v3+mtp":
        # The hub's 685B counts the MTP module's own copies of the embedding and head.
        total += REFERENCE["deepseek_v3_mtp"]["with_copies"] - REFERENCE["deepseek_v3_mtp"]["own"]
    digits = len(str(stated).split(".")[1]) if "." in str(stated) else 0
    # Within one unit of the last digit the publisher states (some round, some truncate).
    assert abs(total / 1e9 - stated) < 10 ** -digits, (name, total)


@pytest.fixture(scope="module")
def params_cases():
    return json.loads(CASES.read_text())["models"]


@pytest.mark.parametrize("name", ["Mixtral-8x7B", "DeepSeek-V3", "DeepSeek-V3-mini"])
def test_params_json_models(registry, params_cases, name):
    case = params_cases[name]
    model = model_from_hf_config(case["config"], name=name, source="params.json")
    summary = count_parameters(model, registry)
    mtp = sum(g.count for g in model.layers if g.kind == "mtp")
    own_mtp = REFERENCE["deepseek_v3_mtp"]["own"] if name == "DeepSeek-V3" else 0
    assert mtp == (1 if name == "DeepSeek-V3" else 0)
    assert summary.total == case["total_params"] + own_mtp
    assert summary.by_kind["embedding"] == case["embedding_params"]
    layers = _body_layers(model)
    for part, ref in case["layers"].items():
        kinds = [k for k, _ in layers]
        wanted = {"dense": ("dense", "mla"), "moe": ("moe", "mla_moe")}[part]
        assert sum(k in wanted for k in kinds) == ref["num_layers"]
        kind, config = next(layer for layer in layers if layer[0] in wanted)
        parts = _layer_params(registry, kind, config)
        assert sum(parts.values()) == ref["params_per_layer"]
        mlp = ref["breakdown"]["mlp"]["children"]
        if "experts" in mlp:
            assert parts["experts"] == mlp["experts"]
            assert parts["router"] == mlp["gate"]
            assert parts.get("shared_experts", 0) == mlp.get("shared_experts", 0)


def test_deepseek_v3_stack_and_truncation(registry):
    model = model_from_preset("deepseek-v3", registry)
    assert [(g.kind, g.count) for g in model.layers] == [
        ("embedding", 1), ("mla", 3), ("mla_moe", 58), ("output", 1), ("mtp", 1)
    ]
    short = model.with_body_layers(4, registry.kinds_placed("body"))
    assert [(g.kind, g.count) for g in short.layers] == [
        ("embedding", 1), ("mla", 3), ("mla_moe", 1), ("output", 1), ("mtp", 1)
    ]
    (mtp,) = [g for g in model.layers if g.kind == "mtp"]
    assert mtp.config.layer.kind == "mla_moe"


def test_deepseek_v3_stages_differ(registry):
    model = model_from_preset("deepseek-v3", registry)
    parallel = ParallelSpec(dp=128, pp=16, ep=64, seq_len=4096, global_batch_size=4096,
                            layers_per_stage=(4,) * 15 + (1,))
    result = estimate(model, parallel, registry=registry)
    first, middle, last = result.stages[0], result.stages[1], result.stages[-1]
    assert first.kinds == {"embedding": 1, "mla": 3, "mla_moe": 1}
    assert middle.kinds == {"mla_moe": 4}
    assert last.kinds == {"mla_moe": 1, "output": 1, "mtp": 1}
    assert len({first.peak_bytes, middle.peak_bytes, last.peak_bytes}) == 3
    for stage in result.stages:
        assert sum(stage.activations_by_kind.values()) == stage.memory.activations_bytes
    # The last stage holds the MTP module's copy of the embedding (pp > 1): 129280 * 7168 elements, whole at tp=1.
    assert last.parameters_by_kind["mtp"] == REFERENCE["deepseek_v3_mtp"]["own"] - 11507286016 + (
        11507286016 - 256 * 3 * 7168 * 2048 + 256 * 3 * 7168 * 2048 // 64) + 129280 * 7168


def test_moe_tokens_per_rank_by_hand():
    # Mixtral-like: T = 4096 tokens, top-2, SP over tp=2: each rank routes 2048 tokens, 2 copies each.
    config = MoEConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, num_experts=8,
                       num_experts_per_tok=2, moe_intermediate_size=14336)
    context = layer_context(ParallelSpec(tp=2, sp=True, ep=8, dp=8, seq_len=4096), PrecisionSpec(), "flash")
    assert moe_tokens(config, context) == 4096
    cost = evaluate_moe(config, context)
    terms = {t.op: t.bytes for t in cost.activations}
    assert terms["dispatched_tokens"] == 4096 * 4096 * 2
    assert terms["expert_gate_out"] == terms["expert_mul_out"] == 4096 * 14336 * 2
    assert terms["router_probs"] == 2048 * 8 * 2
    assert terms["expert_out"] == 4096 * 4096 * 2
    padded = MoEConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, num_experts=8,
                       num_experts_per_tok=2, moe_intermediate_size=14336, capacity_factor=1.5, pad_to_capacity=True)
    assert moe_tokens(padded, context) == 6144
    # Expert tensor parallelism gathers the tokens of its etp ranks and splits the expert width.
    etp = layer_context(ParallelSpec(tp=2, sp=True, ep=4, etp=2, dp=8, seq_len=4096), PrecisionSpec(), "flash")
    etp_terms = {t.op: t.bytes for t in evaluate_moe(config, etp).activations}
    assert etp_terms["dispatched_tokens"] == 8192 * 4096 * 2
    assert etp_terms["expert_gate_out"] == 8192 * 7168 * 2


def test_mla_terms_by_hand_and_attup():
    # DeepSeek-V3 attention at tp=1, 4096 tokens, flash: per-head q and k of 128 + 64, v of 128.
    config = MLAConfig(hidden_size=7168, num_attention_heads=128, q_lora_rank=1536, kv_lora_rank=512,
                       qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, intermediate_size=18432)
    cost = evaluate_mla(config, layer_context(ParallelSpec(seq_len=4096), PrecisionSpec(), "flash"))
    terms = {t.op: (t.bytes, t.switch) for t in cost.activations}
    assert terms["q_heads"] == (4096 * 128 * 192 * 2, "attUp")
    assert terms["k_heads"] == (4096 * 128 * 192 * 2, "attUp")
    assert terms["kv_up_out"] == (4096 * 128 * 256 * 2, "attUp")
    assert terms["q_latent"] == (4096 * 1536 * 2, None)
    assert terms["kv_latent"] == (4096 * 576 * 2, None)
    assert terms["attn_lse"] == (4096 * 128 * 4, None)
    up = 4096 * 128 * (192 + 192 + 256) * 2
    assert cost.kept_bytes - cost.kept_under(frozenset({"attUp"})) == up


def test_mla_kind_prices_512_distinct_settings(registry):
    kind = registry.layer_kind("mla_moe")
    assert len(kind.switches) == 9  # the eight MLA switches and moeLayer
    config = model_from_preset("deepseek-v3", registry).layers[2].config
    cost = kind.evaluate(config, layer_context(ParallelSpec(tp=2, sp=True, ep=8, dp=8, seq_len=1024),
                                               PrecisionSpec(softmax_bytes=4), "eager"))
    switches = kind.switches
    settings_priced = {
        frozenset(s for bit, s in enumerate(switches) if mask >> bit & 1) for mask in range(2 ** len(switches))
    }
    assert len(settings_priced) == 512
    # Every switch of the MLA MoE layer drops something under eager attention except dropout (no dropout here).
    for switch in switches:
        dropped = cost.kept_bytes - cost.kept_under(frozenset({switch}))
        assert (dropped > 0) == (switch not in ("dropout", "attBMM")), switch


def test_moe_layout_errors(registry):
    model = model_from_preset("mixtral-8x7b", registry)
    with pytest.raises(ConfigError) as error:
        estimate(model, ParallelSpec(dp=6, ep=3, seq_len=1024), registry=registry)
    assert error.value.path == "$.parallel.ep"
    with pytest.raises(ConfigError) as error:
        estimate(model, ParallelSpec(tp=2, dp=4, seq_len=1024), registry=registry)
    assert error.value.path == "$.parallel.sp"


@settings(max_examples=60, deadline=None)
@given(
    experts_per_rank=st.integers(1, 8),
    ep=st.sampled_from([1, 2, 4, 8]),
    etp=st.sampled_from([1, 2, 4]),
    dp_extra=st.integers(1, 4),
    zero=st.integers(0, 3),
)
def test_expert_sharding_conserves_totals(experts_per_rank, ep, etp, dp_extra, zero):
    """Expert parameters split over ep * etp ranks add up to the whole; their states shard over expert DP."""
    experts = experts_per_rank * ep
    config = MoEConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, num_experts=experts,
                       num_experts_per_tok=1, moe_intermediate_size=16 * etp)
    registry = _REGISTRY  # a registry is immutable: one serves every example
    model = ModelSpec(name="m", layers=(LayerGroup("moe", config, 2),))
    dp = ep * etp * dp_extra
    parallel = ParallelSpec(dp=dp, ep=ep, etp=etp, zero=zero, seq_len=16)
    result = estimate(model, parallel, registry=registry, precision=PrecisionSpec())
    whole = 2 * experts * 3 * 64 * 16 * etp
    per_rank = whole // (ep * etp)
    assert per_rank * ep * etp == whole
    non_expert = 2 * (4 * 64 * 64 + 2 * 64 + 64 * experts)  # q, k, v, o; two RMSNorms; the router (tp=1)
    expert_dp = parallel.expert_dp
    assert expert_dp == dp // (ep * etp)
    stage = result.stages[0]
    assert stage.parameters_by_kind["moe"] == per_rank + non_expert
    states = stage.memory.optimizer_states_bytes
    expected = math.ceil(per_rank * 8 / (expert_dp if zero else 1)) + math.ceil(non_expert * 8 / (dp if zero else 1))
    assert states == expected


@pytest.mark.parametrize("recipe, eh_proj_in, norm_out, dispatched, attn_out", [
    # DeepSeek-V3, one 4,096-token sequence, EP 32, TP 1: eh_proj's input 4096 x 2 x 7168 bf16 elements (117,440,512
    # bytes), the layer's attention norm output 4096 x 7168 (58,720,256), its experts' FC1 input 4096 x 8 x 7168
    # (469,762,048), its output projection's input 4096 x 128 x 128 (134,217,728).
    ("bf16", 117_440_512, 58_720_256, 469_762_048, 134_217_728),
    # FP8: 1 byte an element; the output projection keeps its bf16 input (Megatron-Core set_save_original_input).
    ("fp8-current", 58_720_256, 29_360_128, 234_881_024, 134_217_728),
    ("mxfp8", 60_555_264, 30_277_632, 242_221_056, 134_217_728),  # 1 + 1/32 bytes an element
    ("fp8-delayed", 58_720_256, 29_360_128, 234_881_024, 134_217_728 + 67_108_864),  # and its FP8 copy
])
def test_the_mtp_module_runs_in_the_fp8_context_as_megatron_runs_it(registry, recipe, eh_proj_in, norm_out, dispatched,
                                                                     attn_out):
    """Megatron-Core multi_token_prediction.py (core_v0.16.0 lines 773-803) runs eh_proj and the module's layer in the
    run's FP8 context: their linear inputs are kept quantized as the body's; the norms' tensors and the shared head
    (GPTModel's output_layer, outside the context) stay bf16."""
    import attrs

    from hp_core.engine.prepare import prepare
    from hp_core.specs import ParallelSpec

    model = model_from_preset("deepseek-v3", registry)
    run = prepare(model, ParallelSpec(dp=32, ep=32, seq_len=4096), registry=registry, runtime="megatron",
                  precision=attrs.evolve(registry.runtime("megatron").precision, recipe=recipe))
    mtp = run.costs[next(i for i, group in enumerate(model.layers) if group.kind == "mtp")]
    terms = {t.op: t.bytes for t in mtp.activations}
    assert (terms["eh_proj_in"], terms["layer.attn_norm_out"], terms["layer.dispatched_tokens"],
            terms["layer.attn_out"]) == (eh_proj_in, norm_out, dispatched, attn_out)
    assert terms["enorm_out"] == terms["hnorm_out"] == terms["head_norm_out"] == 58_720_256
    # The layer's router gate and the shared head's GEMM (4096 tokens x 129,280 vocabulary x 7168) stay bf16.
    assert [p.name for p in mtp.params if p.high_precision] == ["layer.router"]
    assert mtp.work.high_precision_gemms == ((4096, 256, 7168), (4096, 129_280, 7168))
    assert mtp.work.original_input_gemms == ((4096, 7168, 16_384),)  # the output projection, 128 x 128 -> 7168
