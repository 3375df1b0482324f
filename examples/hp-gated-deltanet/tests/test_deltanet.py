"""Hand-derived parameters, kept bytes, working set and FLOPs of the Gated DeltaNet layers.

The small layer: ``h = 256``, ``n_k = 4`` key heads and ``n_v = 8`` value heads of
width 32, so ``K = 128``, ``V = 256``, conv channels ``2K + V = 512``, kernel 4; a
SwiGLU MLP of 512. At sequence length 64, micro-batch 1: ``T = 64`` tokens, bf16.
"""

from __future__ import annotations

import pytest

from hp_core.errors import ConfigError
from hp_core.specs import PrecisionSpec
from hp_core.costs import LayerContext
from hp_gated_deltanet.deltanet import (
    CHUNK,
    GatedDeltaNetConfig,
    GatedDeltaNetMoEConfig,
    chunk_flops,
    evaluate_gated_deltanet,
    validate_gated_deltanet,
    validate_gated_deltanet_moe,
)
from hp_gated_deltanet.qwen3_next import QWEN3_NEXT_80B_A3B

SMALL = GatedDeltaNetConfig(hidden_size=256, linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=32,
                            linear_value_head_dim=32, intermediate_size=512)

MIXER_PARAMS = {
    "attn_norm": 256,
    "in_proj_qkvz": 256 * (2 * 128 + 2 * 256),  # 196,608
    "in_proj_ba": 256 * 2 * 8,  # 4,096
    "conv1d": 512 * 4,  # 2,048
    "dt_bias": 8,
    "A_log": 8,
    "norm": 32,
    "out_proj": 256 * 256,  # 65,536
}

# Bytes at tp = 1 (T = 64, 2-byte activations, 4-byte statistics).
MIXER_TERMS_TP1 = {
    "attn_norm_in": 64 * 256 * 2,  # 32,768
    "attn_norm_out": 64 * 256 * 2,
    "conv_in": 64 * 512 * 2,  # 65,536
    "qk_l2norm_out": 64 * 256 * 2,  # q and k, 128 wide each
    "qk_l2norm_rstd": 64 * 8 * 4,  # 4 + 4 rows per token
    "qk_heads": 64 * 2 * 8 * 32 * 2,  # q and k repeated to the 8 value heads: 65,536
    "v_heads": 64 * 256 * 2,
    "decay_in": 64 * 8 * 4,  # 2,048
    "decay_softplus": 64 * 8 * 4,
    "decay_cumsum": 64 * 8 * 4,
    "beta": 64 * 8 * 2,  # 1,024
    "wy_inverse": 64 * 8 * 64 * 2,  # 65,536
    "core_out": 64 * 256 * 2,
    "out_gate": 64 * 256 * 2,
    "out_norm_rstd": 64 * 8 * 4,
    "gated_out": 64 * 256 * 2,
}
ATT_UP = ("qk_l2norm_out", "qk_l2norm_rstd", "qk_heads", "v_heads")


def _context(*, tp: int = 1, sp: bool = False, b: int = 1, cp: int = 1, seq_len: int = 64) -> LayerContext:
    return LayerContext(tp=tp, cp=cp, sp=sp, ep=1, etp=1, micro_batch_size=b, seq_len=seq_len,
                        precision=PrecisionSpec(), attention="flash")


def test_parameters_are_transformers_qwen3_next_gated_deltanet():
    cost = evaluate_gated_deltanet(SMALL, _context())
    params = {p.name: p.elements for p in cost.params}
    assert {name: params[name] for name in MIXER_PARAMS} == MIXER_PARAMS
    assert sum(MIXER_PARAMS.values()) == 268_592
    # Megatron-Core's layout: everything but the norms is split over tp.
    assert {p.name for p in cost.params if p.tp_split} >= {"in_proj_qkvz", "in_proj_ba", "conv1d", "dt_bias", "A_log",
                                                          "out_proj"}
    assert {p.name for p in cost.params if not p.tp_split} == {"attn_norm", "norm", "mlp_norm"}


def test_qwen3_next_80b_mixer_parameters():
    """Qwen3-Next-80B-A3B: h = 2048, 16 key heads and 32 value heads of 128, kernel 4.

    K = 2048, V = 4096: in_proj_qkvz 2048 * 12288 = 25,165,824; in_proj_ba 2048 * 64 = 131,072;
    conv1d 8192 * 4 = 32,768; dt_bias 32; A_log 32; norm 128; out_proj 4096 * 2048 = 8,388,608:
    33,718,464, as transformers 5.24.0 counts Qwen3NextGatedDeltaNet.
    """
    config = GatedDeltaNetConfig(
        hidden_size=2048, linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
        linear_value_head_dim=128, intermediate_size=5632,
    )
    cost = evaluate_gated_deltanet(config, _context())
    mixer = sum(p.elements for p in cost.params if p.name in MIXER_PARAMS and p.name != "attn_norm")
    assert mixer == 25_165_824 + 131_072 + 32_768 + 32 + 32 + 128 + 8_388_608 == 33_718_464
    assert QWEN3_NEXT_80B_A3B["linear_num_value_heads"] == 32


def test_kept_terms_at_tp1():
    cost = evaluate_gated_deltanet(SMALL, _context())
    terms = {t.op: t.bytes for t in cost.activations}
    assert {op: terms[op] for op in MIXER_TERMS_TP1} == MIXER_TERMS_TP1
    assert sum(MIXER_TERMS_TP1.values()) == 437_248
    # attUp drops the per-head tensors rebuilt from the kept conv input.
    assert {t.op for t in cost.activations if t.switch == "attUp"} == set(ATT_UP)
    assert cost.kept_bytes - cost.kept_under(frozenset({"attUp"})) == 32_768 + 2_048 + 65_536 + 32_768


def test_kept_terms_under_tensor_and_sequence_parallelism():
    cost = evaluate_gated_deltanet(SMALL, _context(tp=2, sp=True))
    terms = {t.op: t.bytes for t in cost.activations}
    expected = {op: n // 2 for op, n in MIXER_TERMS_TP1.items()}
    expected["attn_gathered"] = 64 * 256 * 2 - 64 * 256 * 2 // 2  # the SP all-gather's other half: 16,384
    assert {op: terms[op] for op in expected} == expected
    assert terms["attn_gathered"] == 16_384 and terms["conv_in"] == 32_768


def test_equal_key_and_value_heads_keep_no_repeated_heads():
    config = GatedDeltaNetConfig(hidden_size=256, linear_num_key_heads=8, linear_num_value_heads=8,
                                 linear_key_head_dim=32, linear_value_head_dim=32, intermediate_size=512)
    ops = {t.op for t in evaluate_gated_deltanet(config, _context()).activations}
    assert "qk_heads" not in ops and "qk_l2norm_out" in ops


def test_working_set_holds_the_chunk_states_and_their_gradients():
    """h and dh: 2 x (1 chunk x 8 heads x 32 x 32) x 2 bytes = 32,768; per token and value head
    five key-wide and five value-wide tensors (5 x 64 x 2 = 640), dg and dg2 in fp32 (8) and db (2):
    64 x 8 x 650 = 332,800. The mixer's 365,568 beats the MLP's 3 x 64 x 512 x 2 = 196,608; with
    the output gradient (32,768) the layer's working set is 398,336."""
    cost = evaluate_gated_deltanet(SMALL, _context())
    assert cost.working_bytes == 64 * 256 * 2 + (2 * 1 * 8 * 32 * 32 * 2 + 64 * 8 * 650) == 398_336
    # Two sequences of 128 tokens: four chunks' states, 256 tokens.
    long = evaluate_gated_deltanet(SMALL, _context(b=2, seq_len=128))
    assert long.working_bytes == 256 * 256 * 2 + 2 * 4 * 8 * 32 * 32 * 2 + 256 * 8 * 650


def test_chunk_flops():
    """Per chunk and value head with C = 64, d_k = d_v = 32: 3 x 2C^2 d_k = 786,432;
    2 x 2C^2 d_v = 524,288; 3 x 2C d_k d_v = 393,216; the inverse 2 x 64 x 63 x 62 / 6 = 83,328."""
    assert CHUNK == 64
    assert chunk_flops(SMALL) == 786_432 + 524_288 + 393_216 + 83_328 == 1_787_264


def test_forward_flops():
    cost = evaluate_gated_deltanet(SMALL, _context())
    # One chunk of 64 tokens, 8 value heads.
    assert cost.forward.attention_flops == 8 * 1_787_264
    # in_proj (qkvz and ba, 784 wide), out_proj, the MLP's gate/up (1024) and down projections.
    assert cost.forward.matmul_flops == 2 * 64 * 256 * 784 + 2 * 64 * 256 * 256 + 2 * 64 * 256 * 1024 + 2 * 64 * 512 * 256
    assert cost.forward.matmul_flops == 84_410_368
    half = evaluate_gated_deltanet(SMALL, _context(tp=2, sp=True))
    assert half.forward.attention_flops == 4 * 1_787_264
    # Megatron-Core's one in_proj and its out_proj, per rank, as the dummy-gradient trait reads them.
    assert half.weight_shapes[:2] == ((392, 256), (256, 128))


def test_validate_refuses_uneven_heads_and_context_parallelism():
    validate_gated_deltanet(SMALL, _context(tp=4, sp=True))
    with pytest.raises(ConfigError, match=r"\$\.parallel\.tp: tp=8 must divide linear_num_key_heads=4"):
        validate_gated_deltanet(SMALL, _context(tp=8, sp=True))
    with pytest.raises(ConfigError, match=r"\$\.parallel\.cp: cp=2: Gated DeltaNet layers do not run under context"):
        validate_gated_deltanet(SMALL, _context(cp=2))
    moe = GatedDeltaNetMoEConfig(hidden_size=256, linear_num_key_heads=4, linear_num_value_heads=8,
                                 linear_key_head_dim=32, linear_value_head_dim=32, num_experts=8,
                                 num_experts_per_tok=2, moe_intermediate_size=128)
    with pytest.raises(ConfigError, match=r"\$\.parallel\.sp"):
        validate_gated_deltanet_moe(moe, _context(tp=2))


def test_value_heads_must_be_a_multiple_of_key_heads():
    with pytest.raises(ValueError, match="linear_num_value_heads=6 must be a multiple of linear_num_key_heads=4"):
        GatedDeltaNetConfig(hidden_size=256, linear_num_key_heads=4, linear_num_value_heads=6,
                            linear_key_head_dim=32, linear_value_head_dim=32, intermediate_size=512)


def test_the_layer_states_its_tensor_parallel_collectives():
    """Two TP blocks (the mixer and the MLP), each all-gathering its input and reduce-scattering its
    output under sequence parallelism, forward and backward, over the full 64 x 256 x 2-byte activation."""
    from hp_core.costs import Collective

    work = evaluate_gated_deltanet(SMALL, _context(tp=2, sp=True)).work
    full = 64 * 256 * 2  # 32,768 bytes
    assert work.collectives == (
        Collective("tp", "all_gather", full, 2, 2, rerun_switch="gather", gemm_input=True),  # GEMM inputs
        Collective("tp", "reduce_scatter", full, 2, 2),
    )
    # Without sequence parallelism, one all-reduce per block each way; at tp = 1 none.
    assert evaluate_gated_deltanet(SMALL, _context(tp=2)).work.collectives == (Collective("tp", "all_reduce", full, 2, 2),)
    assert evaluate_gated_deltanet(SMALL, _context()).work.collectives == ()
