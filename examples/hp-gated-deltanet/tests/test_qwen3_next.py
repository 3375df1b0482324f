"""A Qwen3-Next-style hybrid stack, counted and estimated end to end over pipeline stages.

The small hybrid: 8 layers (three Gated DeltaNet layers, then one full-attention
layer, twice), ``h = 256``, full attention of 8 heads of 32 with 2 KV heads,
linear attention of 4 key and 8 value heads of 32, 8 experts (top 2) of 128 and a
gated shared expert of 128, vocabulary 1024.
"""

from __future__ import annotations

import pytest

from hp_core.api import count_parameters, estimate
from hp_core.errors import ConfigError
from hp_core.specs import ParallelSpec, RecomputeSpec, Setting
from hp_gated_deltanet.qwen3_next import QWEN3_NEXT_80B_A3B, model_from_qwen3_next_config

SMALL_HYBRID = {
    "model_type": "qwen3_next", "vocab_size": 1024, "hidden_size": 256, "num_hidden_layers": 8,
    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
    "linear_num_key_heads": 4, "linear_num_value_heads": 8, "linear_key_head_dim": 32, "linear_value_head_dim": 32,
    "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128,
}


def test_layer_stack_is_three_linear_then_one_full():
    model = model_from_qwen3_next_config(SMALL_HYBRID, name="small")
    assert [(g.kind, g.count) for g in model.layers] == [
        ("embedding", 1), ("gated_deltanet_moe", 3), ("moe", 1), ("gated_deltanet_moe", 3), ("moe", 1), ("output", 1),
    ]
    full = model.layers[2].config
    assert (full.qk_norm, full.shared_expert_gate, full.head_dim) == (True, True, 32)


def test_mlp_only_layers_and_explicit_layer_types():
    cfg = dict(SMALL_HYBRID, intermediate_size=512, mlp_only_layers=[0, 3],
               layer_types=["full_attention"] + ["linear_attention"] * 7)
    kinds = [(g.kind, g.count) for g in model_from_qwen3_next_config(cfg, name="x").layers]
    assert kinds == [("embedding", 1), ("dense", 1), ("gated_deltanet_moe", 2), ("gated_deltanet", 1),
                     ("gated_deltanet_moe", 4), ("output", 1)]


def test_bad_configs_name_the_field():
    with pytest.raises(ConfigError, match=r"config.json \$\.model_type: must be 'qwen3_next'"):
        model_from_qwen3_next_config(dict(SMALL_HYBRID, model_type="qwen3"), name="x")
    missing = {k: v for k, v in SMALL_HYBRID.items() if k != "linear_num_value_heads"}
    with pytest.raises(ConfigError, match=r"\$\.linear_num_value_heads: is missing"):
        model_from_qwen3_next_config(missing, name="x")
    with pytest.raises(ConfigError, match=r"\$\.layer_types: must list 8 entries"):
        model_from_qwen3_next_config(dict(SMALL_HYBRID, layer_types=["linear_attention"]), name="x")
    with pytest.raises(ConfigError, match=r"\$\.intermediate_size: is missing"):
        model_from_qwen3_next_config(dict(SMALL_HYBRID, mlp_only_layers=[1]), name="x")


def test_qwen3_next_80b_parameters(hp_registry):
    """Per linear-attention layer: the mixer 33,718,464, two norms 4,096, experts 512 x 3 x 2048 x 512 =
    1,610,612,736, router 512 x 2048 = 1,048,576, shared expert 3 x 2048 x 512 = 3,145,728 and its
    gate 2,048: 1,648,531,648, as transformers counts Qwen3NextDecoderLayer. Transformers' model has
    79,674,391,296; the built-in ``moe`` kind has no attention output gate, 12 x 2048 x 16 x 256 fewer."""
    model = model_from_qwen3_next_config(QWEN3_NEXT_80B_A3B, name="qwen3-next-80b-a3b")
    summary = count_parameters(model, hp_registry)
    layer = 33_718_464 + 4_096 + 1_610_612_736 + 1_048_576 + 3_145_728 + 2_048
    assert layer == 1_648_531_648
    assert summary.by_kind["gated_deltanet_moe"] == 36 * layer
    assert summary.by_kind["embedding"] == summary.by_kind["output"] - 2048 == 151_936 * 2048
    assert summary.total == 79_674_391_296 - 12 * 2048 * 16 * 256 == 79_573_728_000


def test_parameters_equal_transformers_on_the_meta_device(hp_registry):
    """Counted by transformers itself, where it is installed (hp-planner's 'census' extra)."""
    torch = pytest.importorskip("torch")
    modeling = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    from transformers import Qwen3NextConfig

    model = model_from_qwen3_next_config(SMALL_HYBRID, name="small")
    config = Qwen3NextConfig(**{k: v for k, v in SMALL_HYBRID.items() if k != "model_type"})
    with torch.device("meta"):
        linear = modeling.Qwen3NextDecoderLayer(config, 0)
        reference = modeling.Qwen3NextForCausalLM(config)
    assert hasattr(linear, "linear_attn")  # layer 0 of the 3:1 pattern is a Gated DeltaNet layer
    summary = count_parameters(model, hp_registry)
    assert summary.by_kind["gated_deltanet_moe"] == 6 * sum(p.numel() for p in linear.parameters())
    # Two full-attention layers, each without the output gate half of q_proj (8 heads of 32).
    assert summary.total == sum(p.numel() for p in reference.parameters()) - 2 * 256 * 8 * 32
    with torch.device("meta"):
        mixer = modeling.Qwen3NextGatedDeltaNet(Qwen3NextConfig(), 0)
    assert sum(p.numel() for p in mixer.parameters()) == 33_718_464


# Kept bytes of one small Gated DeltaNet MoE layer at T = 128 tokens, tp = 1, bf16: the mixer
# (tests/test_deltanet.py's 437,248 at 64 tokens, doubled) and the MoE block as the built-in
# kinds price it: norm input and output 2 x 65,536, router probabilities 128 x 8 x 2 = 2,048,
# dispatched tokens (k T = 256) 256 x 256 x 2 = 131,072, the experts' gate, up, activation and
# product 4 x 256 x 128 x 2 = 262,144, their outputs 131,072, the shared expert's output for its
# gate 65,536 and its gate, up, activation and product 4 x 128 x 128 x 2 = 131,072.
MIXER_KEPT = 2 * 437_248
MOE_BLOCK_KEPT = 2 * 65_536 + 2_048 + 131_072 + 262_144 + 131_072 + 65_536 + 131_072
GDN_MOE_KEPT = MIXER_KEPT + MOE_BLOCK_KEPT
# attUp drops q, k after their L2 norm, the fp32 norms, the repeated heads and v (at 128 tokens).
ATT_UP_BYTES = 2 * (32_768 + 2_048 + 65_536 + 32_768)


def test_estimate_plans_the_hybrid_over_two_stages(hp_registry):
    model = model_from_qwen3_next_config(SMALL_HYBRID, name="small")
    parallel = ParallelSpec(dp=4, ep=4, pp=2, seq_len=128)
    result = estimate(model, parallel, registry=hp_registry)
    assert result.micro_batches == 2 and result.world_size == 8
    first, last = result.stages
    assert (first.layers, last.layers) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert dict(first.kinds) == {"embedding": 1, "gated_deltanet_moe": 3, "moe": 1}
    assert dict(last.kinds) == {"gated_deltanet_moe": 3, "moe": 1, "output": 1}
    # 1F1B: stage 0 of 2 keeps two micro-batches, stage 1 one.
    assert (first.micro_batches_in_flight, last.micro_batches_in_flight) == (2, 1)
    assert MOE_BLOCK_KEPT == 854_016 and GDN_MOE_KEPT == 1_728_512
    assert first.activations_by_kind["gated_deltanet_moe"] == 2 * 3 * GDN_MOE_KEPT == 10_371_072
    assert last.activations_by_kind["gated_deltanet_moe"] == 3 * GDN_MOE_KEPT == 5_185_536
    assert result.provenance["kinds"]["gated_deltanet_moe"] == "formulas"

    # Recompute the per-head tensors (attUp) of every Gated DeltaNet layer: each keeps 266,240 fewer bytes.
    attup = Setting("switches", frozenset({"attUp"}))
    planned = estimate(model, parallel, registry=hp_registry,
                       recompute=RecomputeSpec(layers=((0, 2, attup), (4, 6, attup))))
    assert ATT_UP_BYTES == 266_240
    assert planned.stages[0].activations_by_kind["gated_deltanet_moe"] == 2 * 3 * (GDN_MOE_KEPT - ATT_UP_BYTES)
    assert planned.stages[1].activations_by_kind["gated_deltanet_moe"] == 3 * (GDN_MOE_KEPT - ATT_UP_BYTES)
    assert planned.stages[0].activations_by_kind["moe"] == result.stages[0].activations_by_kind["moe"]
    assert planned.stages[0].settings[:4] == ("attUp", "attUp", "attUp", "none")


def test_qwen3_next_80b_over_four_stages(hp_registry):
    """48 layers over pp = 4: twelve per stage, nine linear-attention and three full-attention."""
    model = model_from_qwen3_next_config(QWEN3_NEXT_80B_A3B, name="qwen3-next-80b-a3b")
    result = estimate(model, ParallelSpec(dp=8, tp=2, sp=True, pp=4, ep=8, seq_len=4096), registry=hp_registry)
    assert [s.micro_batches_in_flight for s in result.stages] == [4, 3, 2, 1]
    for i, stage in enumerate(result.stages):
        assert stage.layers == tuple(range(12 * i, 12 * i + 12))
        assert (stage.kinds["gated_deltanet_moe"], stage.kinds["moe"]) == (9, 3)
    # Per rank and layer: the TP-split mixer (33,718,336 / 2) and shared expert (3,145,728 / 2),
    # the replicated norms, router and shared-expert gate (128 + 2 x 2,048 + 1,048,576 + 2,048),
    # and the routed experts over ep = 8 (1,610,612,736 / 8).
    per_rank = 16_859_168 + 1_572_864 + 1_054_848 + 201_326_592
    assert result.stages[1].parameters_by_kind["gated_deltanet_moe"] == 9 * per_rank == 1_987_321_248
    with pytest.raises(ConfigError, match=r"\$\.parallel\.cp"):
        estimate(model, ParallelSpec(dp=4, tp=2, sp=True, cp=2, pp=4, ep=8, seq_len=4096), registry=hp_registry)
