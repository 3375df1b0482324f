"""The kimi-k2 preset's parameter count, derived by hand from its config.

Kimi K2 (moonshotai/Kimi-K2-Instruct config.json, cross-checked with Megatron-Bridge's KimiK2Provider at v0.3.1):
DeepSeek-V3's architecture with 61 layers (the first dense), MLA with 64 heads (q_lora_rank 1536, kv_lora_rank 512,
nope 128, rope 64, v 128), 384 routed experts of 2048 and 1 shared expert, top-8, vocab 163840, untied head, no MTP
module. The model card states 1T total and 32B activated parameters (both truncated).
"""

from __future__ import annotations

from hp_core.api import count_parameters, model_from_preset

H, VOCAB, HEADS = 7168, 163840, 64
Q_RANK, KV_RANK, NOPE, ROPE, V = 1536, 512, 128, 64, 128
DENSE_FFN, EXPERT_FFN, EXPERTS, SHARED, TOPK = 18432, 2048, 384, 1, 8
LAYERS, DENSE_LAYERS = 61, 1

# MLA: q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj.
ATTENTION = (H * Q_RANK + Q_RANK + Q_RANK * HEADS * (NOPE + ROPE) + H * (KV_RANK + ROPE) + KV_RANK
             + KV_RANK * HEADS * (NOPE + V) + HEADS * V * H)
NORMS = 2 * H  # input_layernorm and post_attention_layernorm
EXPERT = 3 * H * EXPERT_FFN  # gate, up and down projections (SwiGLU)
DENSE_LAYER = ATTENTION + NORMS + 3 * H * DENSE_FFN
MOE_LAYER = ATTENTION + NORMS + (EXPERTS + SHARED) * EXPERT + EXPERTS * H  # the router's weight, no bias
EMBEDDING = VOCAB * H
OUTPUT = VOCAB * H + H  # the untied head and the final norm


def test_kimi_k2_counts_every_parameter_by_hand(registry):
    assert ATTENTION == 101_124_096
    assert DENSE_LAYER == 497_500_160
    assert MOE_LAYER == 17_059_364_864
    summary = count_parameters(model_from_preset("kimi-k2", registry), registry)
    assert summary.by_kind == {"embedding": EMBEDDING, "mla": DENSE_LAYERS * DENSE_LAYER,
                               "mla_moe": (LAYERS - DENSE_LAYERS) * MOE_LAYER, "output": OUTPUT}
    assert summary.total == EMBEDDING + DENSE_LAYER + 60 * MOE_LAYER + OUTPUT == 1_026_408_209_408
    # The router's expert-score correction biases (noaux_tc: 384 a MoE layer, 23,040 in all) are buffers,
    # not parameters, in transformers' DeepseekV3 and Megatron-Core (expert_bias), and are not counted, as deepseek-v3's.
    assert summary.by_group["routed_expert"] == 60 * EXPERTS * EXPERT == 1_014_686_023_680
    # The model card's 1T total and 32B activated, truncated: a token runs every attention, the dense MLP, top-8 of
    # the routed experts, the shared expert and the router of each MoE layer, the embedding row and the head.
    activated = (LAYERS * (ATTENTION + NORMS) + 3 * H * DENSE_FFN
                 + 60 * ((TOPK + SHARED) * EXPERT + EXPERTS * H) + EMBEDDING + OUTPUT)
    assert activated == 32_861_477_888
    assert int(summary.total / 1e12) == 1 and int(activated / 1e9) == 32


def test_kimi_k2_is_the_shape_the_automodel_row_states():
    """scale_measured.json's AutoModel Kimi K2 row writes the model as deepseek-v3 with Kimi K2's keys overridden (from
    Megatron-LM's ModelOpt conf for Kimi-K2-Instruct); the preset is that config, key for key."""
    import json
    from pathlib import Path

    from hp_plugins.models.presets import load_presets

    data = json.loads((Path(__file__).resolve().parent / "data" / "scale_measured.json").read_text())
    row = next(r for r in data["rows"] if r["id"] == "am-kimi-k2-pp8-vp4-ep32-256g")
    presets = {p.name: p.hf_config for p in load_presets()}
    assert row["model"]["preset"] == "deepseek-v3"
    assert presets["kimi-k2"] == {**presets["deepseek-v3"], **row["model"]["overrides"]}
