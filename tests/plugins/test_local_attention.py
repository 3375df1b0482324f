"""Local attention (sliding windows, chunks, soft-capping, sinks), its model formats and presets, without torch.

Hand-derived values: pair counts by brute force over the mask, parameter counts
from each family's module definitions in transformers (``MistralAttention``,
``Phi3Attention``, ``Gemma2DecoderLayer``, ``Gemma3Attention``, ``GptOssAttention``,
``GptOssExperts``, ``GptOssTopKRouter``, ``Llama4TextMoe``), which
``data/hf_preset_params.json`` records as measured by transformers 5.24.0.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hp_core.api import count_parameters, estimate, layer_context, model_from_preset, step_time
from hp_core.cli import main
from hp_core.errors import ConfigError
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.kinds.dense import DenseConfig, evaluate_dense
from hp_plugins.kinds.moe import MoEConfig, evaluate_moe
from hp_plugins.kinds.output import OutputConfig, evaluate_output
from hp_plugins.kit import causal_score_pairs, score_share
from hp_plugins.models.hf_local import model_from_local_config

REFERENCE = json.loads((Path(__file__).resolve().parent / "data" / "hf_preset_params.json").read_text())["models"]
PRESETS = ("mistral-7b", "phi-3-mini", "phi-3-medium", "gemma-2-9b", "gemma-2-27b", "gemma-3-27b", "gpt-oss-20b",
           "gpt-oss-120b", "llama4-scout", "llama4-maverick")
MISTRAL = dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336)


def _context(seq_len, attention="flash", softmax_bytes=2, **parallel):
    return layer_context(ParallelSpec(seq_len=seq_len, **parallel), PrecisionSpec(softmax_bytes=softmax_bytes), attention)


def _terms(cost):
    return {t.op: t.bytes for t in cost.activations}


# ----------------------------------------------------------------------------- pair counts


def _brute_pairs(s, window=None, chunk=None):
    return sum(1 for i in range(s) for j in range(i + 1)
               if (window is None or j > i - window) and (chunk is None or j // chunk == i // chunk))


def test_pair_counts_by_hand():
    # s = 8, w = 3: rows keep 1, 2, 3, 3, 3, 3, 3, 3 keys; chunks of 3: 1+2+3, 1+2+3, 1+2.
    assert causal_score_pairs(8) == 36
    assert causal_score_pairs(8, window=3) == 21 == 3 * 4 // 2 + 5 * 3
    assert causal_score_pairs(8, chunk=3) == 15
    assert causal_score_pairs(8, window=8) == causal_score_pairs(8, window=100) == 36
    assert score_share(8, window=3) == 21 / 36


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 70), st.integers(1, 80), st.booleans())
def test_pair_counts_equal_the_mask(s, size, chunked):
    window, chunk = (None, size) if chunked else (size, None)
    assert causal_score_pairs(s, window, chunk) == _brute_pairs(s, window, chunk)


# ----------------------------------------------------------------------------- the attention block


@pytest.mark.parametrize("attention", ["flash", "eager"])
def test_a_window_at_least_the_sequence_is_full_attention(attention):
    x = _context(4096, attention)
    assert evaluate_dense(DenseConfig(**MISTRAL, sliding_window=4096), x) == evaluate_dense(DenseConfig(**MISTRAL), x)


@pytest.mark.parametrize("tp", [1, 4])
def test_flash_flops_shrink_to_the_window_and_memory_does_not(tp):
    s, w = 16384, 4096
    x = _context(s, "flash", tp=tp, sp=tp > 1)
    full, local = evaluate_dense(DenseConfig(**MISTRAL), x), evaluate_dense(DenseConfig(**MISTRAL, sliding_window=w), x)
    pairs = w * (w + 1) // 2 + (s - w) * w
    share = pairs / (s * (s + 1) // 2)
    # The square 2 * s * s * (d_qk + d_v) per head, times the share of causal pairs the window keeps.
    assert full.forward.attention_flops == 2 * (32 // tp) * s * s * 256
    assert local.forward.attention_flops == pytest.approx(full.forward.attention_flops * share, rel=1e-12)
    assert local.forward.attention_flops * 0.5 == pytest.approx(2 * (32 // tp) * pairs * 256, rel=1e-3)  # ~ executed
    assert local.work.fused_softmax_flops == pytest.approx(full.work.fused_softmax_flops * share, rel=1e-12)
    assert local.activations == full.activations and local.working_bytes == full.working_bytes
    assert local.forward.matmul_flops == full.forward.matmul_flops


def test_eager_keeps_and_computes_the_whole_square_under_a_window():
    x = _context(8192, "eager")
    full, local = evaluate_dense(DenseConfig(**MISTRAL), x), evaluate_dense(DenseConfig(**MISTRAL, sliding_window=4096), x)
    assert local == full
    # The probabilities over the full square, in the precision's softmax width.
    assert _terms(local)["softmax_out"] == 32 * 8192 * 8192 * PrecisionSpec().softmax_bytes


def test_chunked_attention_counts_its_chunks():
    s, c = 16384, 8192
    x = _context(s)
    full = evaluate_dense(DenseConfig(**MISTRAL), x)
    chunked = evaluate_dense(DenseConfig(**MISTRAL, attention_chunk_size=c), x)
    assert chunked.forward.attention_flops == pytest.approx(full.forward.attention_flops * 2 * c * (c + 1) / (s * (s + 1)))


def test_softcapping_keeps_the_tanh_output_under_eager_only():
    s, softcap = 2048, dict(attn_logit_softcapping=50.0)
    eager, flash = _context(s, "eager"), _context(s)
    plain, capped = evaluate_dense(DenseConfig(**MISTRAL), eager), evaluate_dense(DenseConfig(**MISTRAL, **softcap), eager)
    assert _terms(capped).keys() - _terms(plain).keys() == {"softcap_tanh_out"}
    assert _terms(capped)["softcap_tanh_out"] == 32 * s * s * 2
    assert next(t for t in capped.activations if t.op == "softcap_tanh_out").switch == "softmax"
    assert capped.forward.elementwise_flops - plain.forward.elementwise_flops == 3 * 32 * s * s
    plain, capped = evaluate_dense(DenseConfig(**MISTRAL), flash), evaluate_dense(DenseConfig(**MISTRAL, **softcap), flash)
    assert capped.activations == plain.activations
    # On chip under flash: fused with the softmax, so no HBM traffic.
    assert capped.work.fused_softmax_flops - plain.work.fused_softmax_flops == 3 * 32 * s * s


def test_sinks_add_a_logit_per_head_and_a_column_to_eager_softmax():
    s, a = 1024, 64
    config = dict(hidden_size=2880, num_attention_heads=a, num_key_value_heads=8, head_dim=64, intermediate_size=2880)
    eager = _context(s, "eager", softmax_bytes=4, tp=2)  # Hugging Face eager's fp32 softmax without sinks
    plain, sinks = evaluate_dense(DenseConfig(**config), eager), evaluate_dense(DenseConfig(**config, attention_sinks=True), eager)
    params = {p.name: p for p in sinks.params}
    assert params["attn_sinks"].elements == a and params["attn_sinks"].tp_split
    terms = _terms(sinks)
    # GptOss eager_attention_forward: a bf16 softmax over s + 1 columns and the int64 row-max index; no fp32 copy.
    assert terms["softmax_out"] == (a // 2) * s * (s + 1) * 2
    assert terms["sink_row_max_index"] == (a // 2) * s * 8
    assert "softmax_cast" not in terms and "softmax_cast" in _terms(plain)
    flash = _context(s)
    assert (evaluate_dense(DenseConfig(**config, attention_sinks=True), flash).activations
            == evaluate_dense(DenseConfig(**config), flash).activations)


def test_final_logit_softcapping_keeps_the_tanh_output():
    x = _context(1024, tp=2)
    plain = evaluate_output(OutputConfig(vocab_size=256000, hidden_size=3584), x)
    capped = evaluate_output(OutputConfig(vocab_size=256000, hidden_size=3584, final_logit_softcapping=30.0), x)
    assert _terms(capped)["logit_softcap_tanh_out"] == 1024 * 128000 * 2
    assert capped.forward.elementwise_flops - plain.forward.elementwise_flops == 3 * 1024 * 128000


def test_post_block_norms_keep_their_inputs():
    x = _context(1024, tp=2, sp=True)
    config = DenseConfig(**MISTRAL)
    sandwich = evaluate_dense(attrs.evolve(config, post_block_norms=True), x)
    extra = _terms(sandwich).keys() - _terms(evaluate_dense(config, x)).keys()
    assert extra == {"attn_post_norm_in", "mlp_post_norm_in"}
    assert _terms(sandwich)["attn_post_norm_in"] == 1024 * 4096 * 2 // 2
    assert sum(p.elements for p in sandwich.params if p.name.endswith("post_norm")) == 2 * 4096


def test_clamped_swiglu_experts_keep_seven_widths_per_token():
    config = MoEConfig(hidden_size=2880, num_attention_heads=64, num_key_value_heads=8, head_dim=64, num_experts=32,
                       num_experts_per_tok=4, moe_intermediate_size=2880, expert_activation="clamped_swiglu",
                       router_topk_softmax=True)
    terms = _terms(evaluate_moe(config, _context(1024)))
    routed = 1024 * 4
    # GptOssExperts._apply_gate: FC1 out (2I), clamped gate, sigmoid, up + 1, gated value (4I), product (I).
    assert terms["expert_fc1_out"] == routed * 2 * 2880 * 2
    assert terms["expert_act_out"] == routed * 4 * 2880 * 2
    assert terms["expert_mul_out"] == routed * 2880 * 2
    assert terms["router_probs"] == 1024 * 4 * 2  # a softmax over the top 4 logits


# ----------------------------------------------------------------------------- formats and presets


def _layer_params(registry, group):
    cost = registry.layer_kind(group.kind).evaluate(group.config, _context(8))
    return sum(p.elements for p in cost.params)


def _per_layer(registry, name):
    model = model_from_preset(name, registry)
    return [_layer_params(registry, g) for g in model.layers if g.kind in ("dense", "moe") for _ in range(g.count)]


def test_hand_derived_parameter_counts(registry):
    # Mistral 7B: Llama's layer. Attention h (a + 2g) d + a d h; SwiGLU 3 h I; two norms.
    h, I = 4096, 14336
    layer = h * (32 + 16) * 128 + 32 * 128 * h + 3 * h * I + 2 * h
    assert _per_layer(registry, "mistral-7b") == [layer] * 32
    assert count_parameters(model_from_preset("mistral-7b", registry), registry).total == 32 * layer + 2 * 32000 * h + h
    # Gemma 2 9B: four norms per layer, a tied head.
    h, I, d = 3584, 14336, 256
    layer = h * (16 + 16) * d + 16 * d * h + 3 * h * I + 4 * h
    assert _per_layer(registry, "gemma-2-9b") == [layer] * 42
    assert count_parameters(model_from_preset("gemma-2-9b", registry), registry).total == 42 * layer + 256000 * h + h
    # Gemma 3 27B: and per-head q/k norms of d each.
    h, I, d = 5376, 21504, 128
    layer = h * (32 + 32) * d + 32 * d * h + 2 * d + 3 * h * I + 4 * h
    assert _per_layer(registry, "gemma-3-27b") == [layer] * 62
    # GPT-OSS 20B: biased q, k, v and o, 64 sinks; router with a bias; 32 experts with biases (gate_up 2I, down h).
    h, I, E, d = 2880, 2880, 32, 64
    attention = h * (64 + 16) * d + (64 + 16) * d + 64 * d * h + h + 64
    experts = E * h + E + E * 3 * h * I + E * (2 * I + h)
    assert _per_layer(registry, "gpt-oss-20b") == [attention + experts + 2 * h] * 24
    # Llama 4 Scout: every layer MoE with a shared expert as wide; weightless QK-norm.
    h, I, E = 5120, 8192, 16
    layer = h * (40 + 16) * 128 + 40 * 128 * h + E * h + E * 3 * h * I + 3 * h * I + 2 * h
    assert _per_layer(registry, "llama4-scout") == [layer] * 48
    # Llama 4 Maverick: MoE (128 experts, no QK-norm) on odd layers, dense layers of intermediate_size_mlp between.
    moe = h * (40 + 16) * 128 + 40 * 128 * h + 128 * h + 128 * 3 * h * I + 3 * h * I + 2 * h
    dense = h * (40 + 16) * 128 + 40 * 128 * h + 3 * h * 16384 + 2 * h
    assert _per_layer(registry, "llama4-maverick") == [dense, moe] * 24


@pytest.mark.parametrize("name", PRESETS)
def test_presets_equal_the_transformers_reference(registry, name):
    assert count_parameters(model_from_preset(name, registry), registry).total == REFERENCE[name]["total_params"]


def _window_pattern(registry, name):
    model = model_from_preset(name, registry)
    return [(g.config.sliding_window, g.config.attention_chunk_size)
            for g in model.layers if g.kind in ("dense", "moe") for _ in range(g.count)]


def test_per_layer_patterns(registry):
    assert _window_pattern(registry, "mistral-7b") == [(4096, None)] * 32
    assert _window_pattern(registry, "phi-3-mini") == [(2047, None)] * 32
    assert _window_pattern(registry, "gemma-2-9b") == [(4096, None), (None, None)] * 21
    assert _window_pattern(registry, "gemma-3-27b") == ([(1024, None)] * 5 + [(None, None)]) * 10 + [(1024, None)] * 2
    assert _window_pattern(registry, "gpt-oss-20b") == [(128, None), (None, None)] * 12
    assert _window_pattern(registry, "llama4-scout") == ([(None, 8192)] * 3 + [(None, None)]) * 12
    scout = [g.config for g in model_from_preset("llama4-scout", registry).layers if g.kind == "moe"]
    assert {(c.qk_norm, c.attention_chunk_size is not None) for c in scout} == {(True, True), (False, False)}


def test_mistral_window_is_read_not_ignored(registry):
    base = dict(registry.model("mistral-7b").hf_config)
    assert _layers(base)[0].sliding_window == 4096
    assert _layers({**base, "sliding_window": None})[0].sliding_window is None  # Mistral 7B v0.3: null, no window
    del base["sliding_window"]
    assert _layers(base)[0].sliding_window == 4096  # MistralConfig's default


def _layers(cfg):
    return [g.config for g in model_from_local_config(cfg, name="m", source="t").layers if g.kind in ("dense", "moe")]


def test_llama4_interleaved_moe_and_dense_layers(registry):
    # Maverick's pattern: every other layer MoE, the others dense of intermediate_size_mlp.
    cfg = {**registry.model("llama4-scout").hf_config, "interleave_moe_layer_step": 2, "num_hidden_layers": 8}
    model = model_from_local_config(cfg, name="m", source="t")
    kinds = [g.kind for g in model.layers for _ in range(g.count)][1:-1]
    assert kinds == ["dense", "moe"] * 4
    dense = next(g.config for g in model.layers if g.kind == "dense")
    assert dense.intermediate_size == 16384


@pytest.mark.parametrize(("change", "path"), [
    ({"layer_types": ["sliding_attention"] * 3}, "$.layer_types"),
    ({"sliding_window": 0}, "$.sliding_window"),
    ({"sliding_window": "wide"}, "$.sliding_window"),
    ({"num_local_experts": None}, "$.num_local_experts"),
])
def test_bad_fields_are_named(registry, change, path):
    cfg = {**registry.model("gpt-oss-20b").hf_config, **change}
    if change.get("num_local_experts", 0) is None:
        del cfg["num_local_experts"]
    with pytest.raises(ConfigError) as error:
        model_from_local_config(cfg, name="m", source="t")
    assert path in str(error.value)


def test_cli_refuses_a_bad_window_in_one_line(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gemma2", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
                                "num_hidden_layers": 2, "num_attention_heads": 4, "sliding_window": -1}))
    assert main(["estimate", "--model", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "$.sliding_window" in err[0]


def test_a_window_shortens_the_step_time(registry):
    model = model_from_preset("mistral-7b", registry)
    full = model_from_local_config({**registry.model("mistral-7b").hf_config, "sliding_window": None}, name="m", source="t")
    parallel = ParallelSpec(dp=1, tp=8, sp=True, seq_len=32768)
    device = registry.hardware_preset("h100-sxm").spec
    windowed = step_time(model, parallel, registry=registry, hardware=device)
    plain = step_time(full, parallel, registry=registry, hardware=device)
    assert windowed.step_seconds < plain.step_seconds
    assert estimate(model, parallel, registry=registry).peak_bytes == estimate(full, parallel, registry=registry).peak_bytes
