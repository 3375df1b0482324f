"""Contract tests every registered layer kind must pass.

Every registered kind runs :func:`hp_core.testing.check_layer_kind`, the same
function a third-party plugin's test suite runs on its own kinds (docs/plugins.md),
once plainly and once with every runtime trait. Parametrised over the kinds a fresh
registry holds, so a new kind is tested as soon as it is registered -- and fails
:func:`test_every_registered_kind_has_a_sample` until it adds a small config to
:data:`SAMPLES`. Each sample is sized so that every degree the contract uses
(``tp`` 1, 2, 4; micro-batch 1, 2, 4) divides its shapes.
"""

from __future__ import annotations

import pytest

from hp_core.api import build_registry
from hp_core.specs import LayerGroup
from hp_core.testing import check_layer_kind
from hp_core.costs import TRAITS
from hp_plugins.kinds.dense import DenseConfig
from hp_plugins.kinds.embedding import EmbeddingConfig
from hp_plugins.kinds.mla import MLAConfig, MLAMoEConfig
from hp_plugins.kinds.moe import MoEConfig
from hp_plugins.kinds.mtp import MTPConfig
from hp_plugins.kinds.output import OutputConfig
from samples_ssm import SSM_SAMPLES

_MLA = dict(hidden_size=256, num_attention_heads=8, kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32)
_MLA_MOE = MLAMoEConfig(**_MLA, q_lora_rank=64, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
                        shared_expert_intermediate_size=128)

# Small configs per kind name; several per kind cover its options.
SAMPLES: dict[str, list[object]] = {
    "dense": [
        DenseConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4, intermediate_size=512),
        DenseConfig(
            hidden_size=256,
            num_attention_heads=4,
            num_key_value_heads=4,
            intermediate_size=1024,
            gated_mlp=False,
            hidden_act="gelu",
            norm="layernorm",
            attention_dropout=0.1,
            hidden_dropout=0.1,
            attention_bias=True,
            attention_out_bias=True,
            mlp_bias=True,
        ),
        DenseConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4, head_dim=64, intermediate_size=768, qk_norm=True),
        # Gemma 2 style: a sliding window, soft-capped scores, post-block norms.
        DenseConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4, head_dim=64, intermediate_size=512,
                    hidden_act="gelu_pytorch_tanh", sliding_window=32, attn_logit_softcapping=50.0, post_block_norms=True),
        # Llama 4 style: chunked attention with weightless QK-norm.
        DenseConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4, intermediate_size=512,
                    attention_chunk_size=48, qk_norm=True, qk_norm_weight=False),
    ],
    "moe": [
        MoEConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4, num_experts=8, num_experts_per_tok=2,
                  moe_intermediate_size=128),
        MoEConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4, num_experts=8, num_experts_per_tok=2,
                  moe_intermediate_size=128, shared_expert_intermediate_size=256, shared_expert_gate=True,
                  capacity_factor=1.25, pad_to_capacity=True, attention_bias=True, qk_norm=True),
        # GPT-OSS style: sinks, a sliding window, biases, the clamped SwiGLU and its router.
        MoEConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4, num_experts=8, num_experts_per_tok=2,
                  moe_intermediate_size=128, attention_bias=True, attention_out_bias=True, attention_sinks=True,
                  sliding_window=16, router_bias=True, router_topk_softmax=True, expert_bias=True,
                  expert_activation="clamped_swiglu"),
    ],
    "mla": [
        MLAConfig(**_MLA, q_lora_rank=64, intermediate_size=512),
        MLAConfig(**_MLA, intermediate_size=512, attention_dropout=0.1, hidden_dropout=0.1),
    ],
    "mla_moe": [_MLA_MOE],
    "mtp": [
        MTPConfig(vocab_size=1024, hidden_size=256, layer=LayerGroup("mla_moe", _MLA_MOE)),
        MTPConfig(vocab_size=1024, hidden_size=256, layer=LayerGroup("dense", DenseConfig(
            hidden_size=256, num_attention_heads=8, num_key_value_heads=4, intermediate_size=512))),
        # A depth of several layers (Megatron-Core's hybrid MTP, Nemotron 3 Super's '*E').
        MTPConfig(vocab_size=1024, hidden_size=256, layers=(
            LayerGroup("attention", SSM_SAMPLES["attention"][0]), LayerGroup("moe_only", SSM_SAMPLES["moe_only"][0]))),
    ],
    "embedding": [
        EmbeddingConfig(vocab_size=1024, hidden_size=256),
        EmbeddingConfig(vocab_size=1024, hidden_size=256, dropout=0.1),
    ],
    "output": [
        OutputConfig(vocab_size=1024, hidden_size=256),
        OutputConfig(vocab_size=1024, hidden_size=256, tie_word_embeddings=True, norm="layernorm"),
        OutputConfig(vocab_size=1024, hidden_size=256, tie_word_embeddings=True, final_logit_softcapping=30.0),
    ],
}


SAMPLES.update(SSM_SAMPLES)
# Kinds whose validate refuses tp > 1 (LoRA adapters under tensor parallelism are not priced).
TP_DEGREES = {"lora": (1,), "lora_first": (1,), "lora_last": (1,)}


def _kind_names() -> list[str]:
    return [kind.name for kind in build_registry(use_env=False).layer_kinds]


def pytest_generate_tests(metafunc):
    if "kind_name" in metafunc.fixturenames:
        metafunc.parametrize("kind_name", _kind_names())


def _samples(kind_name: str) -> list[object]:
    if kind_name not in SAMPLES:
        pytest.fail(f"layer kind {kind_name!r} is registered but has no sample config in SAMPLES; add one")
    return SAMPLES[kind_name]


def test_every_registered_kind_has_a_sample(registry):
    missing = sorted(kind.name for kind in registry.layer_kinds if kind.name not in SAMPLES)
    assert not missing, f"registered layer kinds without a sample config in tests/plugins/test_contract.py: {missing}"
    assert {kind.name for kind in registry.layer_kinds} >= {"dense", "embedding", "output"}


@pytest.mark.parametrize("traits", [frozenset(), frozenset(TRAITS)], ids=["plain", "every-trait"])
def test_kind_keeps_the_contract(registry, kind_name, traits):
    report = check_layer_kind(registry.layer_kind(kind_name), _samples(kind_name), registry=registry, traits=traits,
                              tp_degrees=TP_DEGREES.get(kind_name, (1, 2, 4)))
    assert report.kind == kind_name
    assert report.samples == len(SAMPLES[kind_name])
    # 115 evaluations per sample when no layout is refused (tests/core/test_testing.py derives it);
    # a kind needing SP with tp > 1 (MoE) skips the refused ones.
    assert 0 < report.evaluations <= 115 * report.samples


def test_only_kinds_needing_sequence_parallelism_refuse_layouts(registry):
    """Every built-in kind runs every contract layout, except MoE layers with tp > 1 and SP off."""
    refusing = {}
    for kind in registry.layer_kinds:
        report = check_layer_kind(kind, _samples(kind.name), registry=registry,
                                  tp_degrees=TP_DEGREES.get(kind.name, (1, 2, 4)))
        if report.refused:
            refusing[kind.name] = report.refused
    assert sorted(refusing) == ["gated_attention_moe", "gdn_moe", "mla_moe", "moe", "moe_only", "mtp"]
    for name, refused in refusing.items():
        assert all("sp=off" in where and "tp=1 " not in where for where in refused), (name, refused)
