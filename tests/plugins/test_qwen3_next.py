"""Qwen3-Next built in: the ``gdn``/``gdn_moe`` and ``gated_attention``/``gated_attention_moe`` kinds and the
``qwen3_next`` format; the worked example's own kinds register beside them under their own names."""

from __future__ import annotations

from pathlib import Path

import pytest

from hp_core.api import build_registry, count_parameters, layer_context, model_from_preset
from hp_core.errors import ConfigError
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_core.testing import check_layer_kind
from hp_plugins.kinds.qwen3_next import GatedAttentionMoEConfig
from hp_plugins.models.qwen3_next import model_from_qwen3_next_config
from samples_ssm import SSM_SAMPLES

_REGISTRY = build_registry(use_env=False)
QWEN3_NEXT = "qwen3-next-80b-a3b"


def test_parameters_by_hand():
    h, vocab, E, I_e, I_s = 2048, 151936, 512, 512, 512
    nk, nv, dk, dv, w = 16, 32, 128, 128, 4
    K, V = nk * dk, nv * dv
    gdn = h + h * (2 * K + 2 * V) + h * 2 * nv + (2 * K + V) * w + 2 * nv + dv + V * h
    a, g, d = 16, 2, 256
    attention = h + h * (2 * a + 2 * g) * d + a * d * h + 2 * d  # q_proj twice as wide (query and gate), q/k norms
    experts = h + E * h + E * 3 * h * I_e + 3 * h * I_s + h  # norm, router, experts, shared expert and its gate
    summary = count_parameters(model_from_preset(QWEN3_NEXT, _REGISTRY), _REGISTRY)
    assert summary.by_kind == {"embedding": vocab * h, "gdn_moe": 36 * (gdn + experts),
                               "gated_attention_moe": 12 * (attention + experts), "output": vocab * h + h}
    # transformers' Qwen3NextForCausalLM on the meta device (tests/plugins/test_ssm_torch.py checks it when
    # torch is installed); the example package, without the output gate, counts 12 * h * a * d fewer.
    assert summary.total == 79_674_391_296


def test_layer_pattern_and_refusals():
    model = model_from_preset(QWEN3_NEXT, _REGISTRY)
    assert [(g.kind, g.count) for g in model.layers[1:3]] == [("gdn_moe", 3), ("gated_attention_moe", 1)]
    base = dict(_REGISTRY.model(QWEN3_NEXT).hf_config)
    dense = model_from_qwen3_next_config({**base, "mlp_only_layers": [0, 3]}, name="x")
    assert [(g.kind, g.count) for g in dense.layers[1:5]] == [("gdn", 1), ("gdn_moe", 2), ("gated_attention", 1),
                                                             ("gdn_moe", 3)]
    with pytest.raises(ConfigError, match=r"config.json \$\.layer_types: must list 48 entries"):
        model_from_qwen3_next_config({**base, "layer_types": ["linear_attention"]}, name="x")
    with pytest.raises(ConfigError, match=r"config.json \$\.linear_num_key_heads: is missing"):
        model_from_qwen3_next_config({k: v for k, v in base.items() if k != "linear_num_key_heads"}, name="x")


def test_output_gate_keeps_the_sigmoid_and_the_product():
    c = GatedAttentionMoEConfig(hidden_size=2048, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
                                qk_norm=True, num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512)
    for tp in (1, 2):
        cost = _REGISTRY.layer_kind("gated_attention_moe").evaluate(
            c, layer_context(ParallelSpec(tp=tp, sp=True, seq_len=4096), PrecisionSpec(), "flash"))
        kept = {t.op: t.bytes for t in cost.activations}
        assert kept["attn_gate_sigmoid"] == kept["attn_gated_out"] == 2 * 4096 * 16 * 256 // tp
        assert {p.name: p.elements for p in cost.params}["attn_output_gate"] == 2048 * 16 * 256


@pytest.mark.parametrize("kind", ["gdn", "gdn_moe", "gated_attention", "gated_attention_moe"])
def test_kinds_keep_the_contract(kind):
    report = check_layer_kind(_REGISTRY.layer_kind(kind), SSM_SAMPLES[kind], registry=_REGISTRY)
    assert report.samples == len(SSM_SAMPLES[kind])


def test_the_example_registers_beside_the_built_in_kinds(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "examples" / "hp-gated-deltanet" / "src"))
    from hp_gated_deltanet import plugin

    registry = build_registry(use_env=False, plugins=[plugin])
    names = {kind.name for kind in registry.layer_kinds}
    assert {"gdn", "gdn_moe", "gated_deltanet", "gated_deltanet_moe"} <= names
