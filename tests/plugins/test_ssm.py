"""Mamba-2 and Nemotron-H: the ``mamba2``, ``attention`` and ``mlp`` kinds and the ``mamba2`` / ``nemotron_h`` formats.

Parameter counts are derived by hand from transformers' ``Mamba2Mixer`` /
``NemotronHBlock`` shapes (module docstrings of hp_plugins.kit.ssm and
hp_plugins.kinds.hybrid), and, with the census extra, equal the count of
transformers' own modules built on the meta device. The torch census measures
transformers' reference PyTorch path (the formulas' ``eager`` path).
"""

from __future__ import annotations

import math

import pytest

from hp_core.api import build_registry, count_parameters, layer_context, model_from_preset
from hp_core.errors import ConfigError
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_core.testing import check_layer_kind
from hp_plugins.kinds.mamba import Mamba2LayerConfig, evaluate_mamba2
from hp_plugins.models.ssm import model_from_mamba2_config, model_from_nemotron_h_config
from samples_ssm import SSM_SAMPLES

_REGISTRY = build_registry(use_env=False)


def _mamba_layer_params(h, heads, head_dim, groups, state, kernel=4, bias=False, conv_bias=True):
    inner = heads * head_dim
    conv = inner + 2 * groups * state
    proj = inner + conv + heads
    return (h  # the block's RMSNorm
            + h * proj + proj * bias  # in_proj: z, x, B, C, dt
            + conv * kernel + conv * conv_bias  # depthwise conv1d
            + 3 * heads  # dt_bias, A_log, D
            + inner  # gated RMSNorm
            + inner * h + h * bias)  # out_proj


def test_mamba_codestral_parameters_by_hand():
    h, vocab = 4096, 32768
    layer = _mamba_layer_params(h, 128, 64, 8, 128)
    assert layer == 109_640_064
    total = 2 * vocab * h + h + 64 * layer  # embedding, untied LM head, final norm
    assert total == 7_285_403_648  # the count the model card publishes
    assert count_parameters(model_from_preset("mamba-codestral-7b", _REGISTRY), _REGISTRY).total == total


def test_nemotron_h_8b_parameters_by_hand():
    h, vocab, pattern = 4096, 131072, "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
    mamba = _mamba_layer_params(h, 128, 64, 8, 128)
    attention = h + h * (32 + 2 * 8) * 128 + 32 * 128 * h
    mlp = h + 2 * h * 21504
    counts = {ch: pattern.count(ch) for ch in "M*-"}
    assert counts == {"M": 24, "*": 4, "-": 24}
    summary = count_parameters(model_from_preset("nemotron-h-8b", _REGISTRY), _REGISTRY)
    assert summary.by_kind == {"embedding": vocab * h, "mamba2": 24 * mamba, "attention": 4 * attention,
                               "mlp": 24 * mlp, "output": vocab * h + h}
    assert summary.total == 8_100_852_736


def test_nemotron_h_layer_stack_follows_the_pattern():
    model = model_from_preset("nemotron-h-8b", _REGISTRY)
    kinds = "".join({"mamba2": "M", "attention": "*", "mlp": "-"}[g.kind] * g.count for g in model.layers[1:-1])
    assert kinds == "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"


@pytest.mark.parametrize("cfg, match", [
    ({"hybrid_override_pattern": "M-E*", "mlp_bias": True}, r"mlp_bias: true with E \(mixture-of-experts\) layers"),
    ({"hybrid_override_pattern": "M-E*"}, r"n_routed_experts: is missing"),
    ({"hybrid_override_pattern": "M-X"}, r"hybrid_override_pattern: must be a string of M, E, \*, -"),
    ({"hybrid_override_pattern": None}, r"hybrid_override_pattern: is missing"),
    ({"mamba_num_heads": "many"}, r"mamba_num_heads: must be a non-negative int"),
    ({"n_groups": 3}, r"n_groups=3 must divide mamba_num_heads=128"),
])
def test_nemotron_h_format_refuses_bad_fields(cfg, match):
    base = dict(_REGISTRY.model("nemotron-h-8b").hf_config)
    base.pop("n_groups")
    with pytest.raises(ConfigError, match=match):
        model_from_nemotron_h_config({**base, "n_groups": 8, **cfg}, name="x", where="config.json")


def test_nemotron_h_reads_the_legacy_mamba_names():
    base = {k: v for k, v in _REGISTRY.model("nemotron-h-8b").hf_config.items() if k not in ("n_groups", "conv_kernel")}
    model = model_from_nemotron_h_config({**base, "mamba_n_groups": 4, "mamba_d_conv": 3}, name="x")
    mamba = next(g.config for g in model.layers if g.kind == "mamba2")
    assert (mamba.n_groups, mamba.conv_kernel) == (4, 3)


def test_mamba2_format_checks_the_inner_width():
    base = dict(_REGISTRY.model("mamba-codestral-7b").hf_config)
    with pytest.raises(ConfigError, match=r"num_heads: hidden_size \* expand \(8192\) must equal num_heads \* head_dim \(4096\)"):
        model_from_mamba2_config({**base, "num_heads": 64}, name="x")
    with pytest.raises(ConfigError, match=r"model_type: must be 'mamba2'"):
        model_from_mamba2_config({**base, "model_type": "mamba"}, name="x")


def test_nemotron_3_nano_parameters_by_hand():
    """NemotronHMoE: an fp32 router E x h, 128 ungated experts (up I x h, down h x I), a shared NemotronHMLP of 3712;
    the E layers' pre-norm. 23 M, 23 E and 6 * layers; the published total is 31.6B."""
    h, vocab, pattern = 2688, 131072, "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
    assert {ch: pattern.count(ch) for ch in "ME*"} == {"M": 23, "E": 23, "*": 6}
    mamba = _mamba_layer_params(h, 64, 64, 8, 128)
    moe = h + 128 * h + 128 * 2 * h * 1856 + 2 * h * 3712
    attention = h + h * (32 + 2 * 2) * 128 + 32 * 128 * h
    summary = count_parameters(model_from_preset("nemotron-3-nano-30b-a3b", _REGISTRY), _REGISTRY)
    assert summary.by_kind == {"embedding": vocab * h, "mamba2": 23 * mamba, "moe_only": 23 * moe,
                               "attention": 6 * attention, "output": vocab * h + h}
    assert summary.total == 31_577_937_344


def test_nemotron_3_super_parameters_by_hand():
    """The latent MoE layer (moe_latent_size L = 1024): the E layer's pre-norm, the fp32 router E x h, 512 ungated
    experts reading and writing L (up I x L, down L x I), fc1_latent_proj / fc2_latent_proj (h x L each) and the
    shared NemotronHMLP of 5376 at h. 40 M, 40 E and 8 * layers, the main model, 120,668,687,360; with its one MTP
    depth ('*E', 2,942,324,736) the BF16 checkpoint's 123,611,033,088 less the 41 x 512 fp32 router correction biases
    (buffers, not priced; Megatron-Bridge v0.6.0 model verification card)."""
    h, vocab, latent, pattern = 4096, 131072, 1024, _REGISTRY.model("nemotron-3-super-120b-a12b").hf_config[
        "hybrid_override_pattern"]
    assert len(pattern) == 88 and {ch: pattern.count(ch) for ch in "ME*"} == {"M": 40, "E": 40, "*": 8}
    mamba = _mamba_layer_params(h, 128, 64, 8, 128)
    moe = h + 512 * h + 512 * 2 * latent * 2688 + 2 * h * latent + 2 * h * 5376
    attention = h + h * (32 + 2 * 2) * 128 + 32 * 128 * h
    assert (mamba, moe, attention) == (109_640_064, 2_873_102_336, 35_655_680)
    summary = count_parameters(model_from_preset("nemotron-3-super-120b-a12b", _REGISTRY), _REGISTRY)
    mtp_depth = 3 * h + 2 * h * h + attention + moe  # enorm, hnorm, final norm, eh_proj, the '*E' layers
    assert summary.by_kind == {"embedding": vocab * h, "mamba2": 40 * mamba, "moe_only": 40 * moe,
                               "attention": 8 * attention, "output": vocab * h + h, "mtp": mtp_depth}
    assert summary.total - mtp_depth == 120_668_687_360 and mtp_depth == 2_942_324_736
    assert summary.total + 41 * 512 == 123_611_033_088


def test_nemotron_moe_latent_projections_by_hand():
    """moe_latent_size L: the experts read and write L, and fc1_latent_proj / fc2_latent_proj add 2 h L."""
    base = dict(_REGISTRY.model("nemotron-3-nano-30b-a3b").hf_config)
    plain = model_from_nemotron_h_config(base, name="x")
    latent = model_from_nemotron_h_config({**base, "moe_latent_size": 1024}, name="x")
    by_kind = {m: count_parameters(m, _REGISTRY).by_kind["moe_only"] // 23 for m in (plain, latent)}
    h, experts, width = 2688, 128, 1856
    assert by_kind[plain] - by_kind[latent] == experts * 2 * width * (h - 1024) - 2 * h * 1024


def test_latent_projections_are_whole_on_every_tp_rank():
    """Megatron-Core builds fc1_latent_proj / fc2_latent_proj with parallel_mode="duplicated": at tp 2 each rank holds
    all 2 h L of them and runs them over its own T / 2 tokens (SP), h = 256, L = 64, T = 1024."""
    latent = SSM_SAMPLES["moe_only"][1]
    kind = _REGISTRY.layer_kind("moe_only")
    costs = {tp: kind.evaluate(latent, layer_context(ParallelSpec(tp=tp, sp=tp > 1, seq_len=1024), PrecisionSpec(), "flash"))
             for tp in (1, 2)}
    for cost in costs.values():
        (proj,) = [p for p in cost.params if p.name == "moe_latent_proj"]
        assert proj.elements == 2 * 256 * 64 and not proj.tp_split
    kept = {tp: next(t.bytes for t in c.activations if t.op == "latent_combined") for tp, c in costs.items()}
    assert kept == {1: 1024 * 64 * 2, 2: 512 * 64 * 2}


@pytest.mark.parametrize("kind", ["attention", "mamba2", "mlp", "moe_only"])
def test_kinds_keep_the_contract(kind):
    report = check_layer_kind(_REGISTRY.layer_kind(kind), SSM_SAMPLES[kind], registry=_REGISTRY)
    if kind == "moe_only":
        # A mixture of experts with tp > 1 needs sequence parallelism (Megatron-LM), as the moe kind: the
        # contract's 8 layouts per sample with tp 2 or 4 and sp off are refused (no evaluation), 69 evaluated.
        assert report.evaluations == 69 * len(SSM_SAMPLES[kind])
        assert len(report.refused) == 8 * len(SSM_SAMPLES[kind])
        assert all("sp=off" in line and "tp=1 " not in line for line in report.refused)
        return
    assert report.evaluations == 115 * len(SSM_SAMPLES[kind])


CODESTRAL = Mamba2LayerConfig(hidden_size=4096, mamba_num_heads=128, mamba_head_dim=64, ssm_state_size=128, n_groups=8)


def _cost(config, tp=1, seq=4096, attention="flash", sp=False, mb=1):
    return evaluate_mamba2(config, layer_context(ParallelSpec(tp=tp, sp=sp, seq_len=seq, micro_batch_size=mb),
                                                 PrecisionSpec(), attention))


def test_fused_path_keeps_the_kernel_inputs_by_hand():
    """Megatron-Core + mamba_ssm: norm in/out, zxbcdt, out_x, the gated norm's input and rstd, out_proj's input."""
    T, h, I, G, N, H = 4096, 4096, 8192, 8, 128, 128
    for tp in (1, 2, 4):
        kept = {t.op: t.bytes for t in _cost(CODESTRAL, tp=tp).activations}
        assert kept == {"mamba_norm_in": 2 * T * h, "mamba_norm_out": 2 * T * h,
                        "zxbcdt": 2 * T * (2 * I + 2 * G * N + H) // tp, "ssm_out_x": 2 * T * I // tp,
                        "gated_norm_in": 2 * T * I // tp, "gated_norm_rstd": 4 * T * G // tp, "out_proj_in": 2 * T * I // tp}



def test_a_recipe_keeps_out_projs_input_quantized_by_hand():
    """Under MXFP8 (Transformer Engine's row-parallel out_proj keeps its input quantized: 1 byte an element and an
    E8M0 scale per 32) out_proj's input is kept as that copy; in_proj's is the fused pre-norm's output (kept by
    in_proj as every layernorm-fused linear's); nothing else of the mixer is a GEMM input."""
    from hp_core.engine.precision import apply_recipe, resolve_recipe

    T, I = 4096, 8192
    registry = build_registry(use_env=False)
    recipe = resolve_recipe(registry, PrecisionSpec(recipe="mxfp8"))
    for tp in (1, 2):
        plain = _cost(CODESTRAL, tp=tp)
        assert [t.op for t in plain.activations if t.gemm_input] == ["mamba_norm_out", "out_proj_in"]
        kept = {t.op: t.bytes for t in apply_recipe(plain, recipe, 2).activations}
        bf16 = {t.op: t.bytes for t in plain.activations}
        assert kept["out_proj_in"] == T * I // tp + T * I // tp // 32 == 34_603_008 // tp
        assert {op: b for op, b in kept.items() if op not in ("out_proj_in", "mamba_norm_out")} == {
            op: b for op, b in bf16.items() if op not in ("out_proj_in", "mamba_norm_out")}

def test_reference_path_per_token_by_hand():
    """transformers' PyTorch path at 1,024 tokens: 1,178,472.5 bytes per token (the census measures 1,194,989.5:
    the block norm's fp32 copy and normalised copy 4h + 4, the two causal masks 2 L^2 / s, -exp(A_log))."""
    s, h, I, G, N, H, P, L = 1024, 4096, 8192, 8, 128, 128, 64, 256
    c = math.ceil(s / L)
    per_sequence = (2 * 2 * s * h + 2 * s * (2 * I + 2 * G * N + H) + 2 * (s + 3) * (I + 2 * G * N)
                    + (2 * 2 + 8) * s * H + 8 * s * I + 4 * s * H * N + 4 * s * (4 * H * N + 2 * I)
                    + 3 * 4 * s * H * L + 8 * s * H + 4 * (2 * c + 1) * H * P * N + 4 * s * I
                    + 4 * H * (c + 1) ** 2 + 4 * s * I + 4 * s * (4 * I + G) + 2 * s * I)
    assert _cost(CODESTRAL, seq=s, attention="eager").kept_bytes == per_sequence
    assert per_sequence / s == 1_178_472.5


def test_ssd_flops_by_hand():
    """Dao & Gu 2024 Section 6: per chunk C B^T per group (mamba_ssm) or per head (reference), the masked
    product with x, the chunk state, the output from the states and the recurrence, 2 FLOPs per multiply-add."""
    L, N, P, H, G, s = 256, 128, 64, 128, 8, 4096
    per_head = 2 * L * L * P + 4 * L * N * P + 2 * N * P
    assert _cost(CODESTRAL, seq=s).forward.attention_flops == (s // L) * (2 * L * L * N * G + H * per_head)
    assert _cost(CODESTRAL, seq=s, attention="eager").forward.attention_flops == (s // L) * (2 * L * L * N * H + H * per_head)
    # The projections: in_proj and out_proj over the tokens, split over TP.
    assert _cost(CODESTRAL, seq=s, tp=2).forward.matmul_flops == 2 * s * 4096 * (18560 // 2) + 2 * s * (8192 // 2) * 4096


def test_tp_splits_every_mixer_parameter_but_the_pre_norm():
    params = {p.name: p for p in _cost(CODESTRAL, tp=2).params}
    assert {name for name, p in params.items() if not p.tp_split} == {"mamba_norm"}
    work = _cost(CODESTRAL, tp=2, sp=True).work
    assert {(c.group, c.op, c.forward_calls, c.backward_calls) for c in work.collectives} == {
        ("tp", "all_gather", 1, 1), ("tp", "reduce_scatter", 1, 1)}


def test_mamba_layers_refuse_context_parallelism_and_uneven_groups():
    registry, kind = _REGISTRY, _REGISTRY.layer_kind("mamba2")
    with pytest.raises(ConfigError, match=r"\$\.parallel\.cp: cp=2: Mamba-2 layers are not priced"):
        kind.validate(CODESTRAL, layer_context(ParallelSpec(cp=2, seq_len=1024), PrecisionSpec(), "flash"))
    with pytest.raises(ConfigError, match=r"\$\.parallel\.tp: tp=16 must divide n_groups=8"):
        kind.validate(CODESTRAL, layer_context(ParallelSpec(tp=16, seq_len=1024), PrecisionSpec(), "flash"))
    assert registry.layer_kind("attention").selective == frozenset({"attBMM", "headCast", "dropout", "softmax"})
