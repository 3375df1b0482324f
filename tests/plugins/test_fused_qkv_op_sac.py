"""A fused q, k, v projection under torchtitan's per-op SAC (hp_plugins/kit/op_sac.py): torchtitan's
``FusedQKVLinear`` (pytorch/torchtitan@bcc09297a, torchtitan/models/common/attention.py) is one ``aten.mm``, so the
policy's every-second-mm counter (torchtitan/distributed/activation_checkpoint.py ``SelectiveAC._wrap_block``) saves
wqkv, w1 and w2 and recomputes wo and w3; separate projections save wq, wv, w1, w2 and recompute wk, wo, w3."""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import layer_context
from hp_core.models import model_from_preset
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.kinds.dense import DenseConfig, evaluate_dense
from hp_plugins.kit.op_sac import OP_SAC_SWITCHES, op_sac_kept_bytes

from scale_cases import with_qkv_projection  # the same directory

T = 2048  # one sequence of 2,048 tokens, TP 1


def _llama3_8b(registry, **fields) -> DenseConfig:
    group = next(g for g in model_from_preset("llama3-8b", registry).layers if g.kind == "dense")
    return attrs.evolve(group.config, **fields)


def _context(traits=frozenset()):
    return layer_context(ParallelSpec(seq_len=T), PrecisionSpec(), "flash", traits=traits)


TORCHTITAN = {"fused_qkv": True, "fused_qkv_contiguous": True}


def test_a_fused_projection_is_one_matmul_of_the_per_op_policy(registry):
    # Llama 3 8B: h 4,096, 32 query heads and 8 KV heads of d 128, I 14,336, bf16, flash attention; bytes a token:
    # the block's input 2 h = 8,192; the attention's output 2 a d = 8,192 and its fp32 log-sum-exp 4 a = 128; the MLP's
    # w1 output 2 I = 28,672 and w2 output 2 h = 8,192 (w1 the 3rd or 5th mm, w2 the 5th or 7th: saved; w3 re-run).
    # Separate (wq, wk, wv, wo): q 2 a d = 8,192 and v 2 g d = 2,048 saved, k and o re-run: 63,616.
    # Fused (wqkv, wo): wqkv's output 2 (a + 2 g) d = 12,288 saved, o re-run: 65,664, k's 2 g d = 2,048 more.
    common = 8192 + 8192 + 128 + 28672 + 8192
    separate, fused = common + 8192 + 2048, common + 12288
    assert (separate, fused) == (63_616, 65_664)
    assert op_sac_kept_bytes(_llama3_8b(registry), _context()) == T * 63_616
    assert op_sac_kept_bytes(_llama3_8b(registry, **TORCHTITAN), _context()) == T * 65_664
    # Phi-3's fused slices are one matmul too: the counter does not look at what keeps the output.
    assert op_sac_kept_bytes(_llama3_8b(registry, fused_qkv=True), _context()) == T * 65_664
    # The dense kind states it as the op_sac switches' kept bytes where the runtime runs torchtitan's policy.
    cost = evaluate_dense(_llama3_8b(registry, **TORCHTITAN), _context(frozenset({"torchtitan_op_sac"})))
    assert cost.kept_under(OP_SAC_SWITCHES) == T * 65_664
    assert evaluate_dense(_llama3_8b(registry), _context(frozenset({"torchtitan_op_sac"}))).kept_under(OP_SAC_SWITCHES) \
        == T * 63_616


def test_torchtitan_s_contiguous_copies_keep_what_separate_projections_keep(registry):
    # FusedQKVLinear._split makes q, k and v contiguous copies, so without recompute the layer keeps q, k, v as new
    # tensors (separate projections' terms); Phi-3's slices keep the whole output through v (qkv_fused_out).
    plain = evaluate_dense(_llama3_8b(registry), _context())
    torchtitan = evaluate_dense(_llama3_8b(registry, **TORCHTITAN), _context())
    sliced = evaluate_dense(_llama3_8b(registry, fused_qkv=True), _context())
    assert [(t.op, t.bytes) for t in torchtitan.activations] == [(t.op, t.bytes) for t in plain.activations]
    terms = {t.op: t.bytes for t in sliced.activations}
    assert terms["qkv_fused_out"] == T * 2 * (32 + 8 + 8) * 128 and "v" not in terms
    # One GEMM of the fused width either way: the priced GEMMs and FLOPs are the same.
    assert torchtitan.work.gemms == plain.work.gemms and torchtitan.forward == plain.forward
    # The policy re-runs every second matmul: wk, wo, w3 separate; wo, w3 fused (wk's 2 T h g d no longer).
    assert plain.work.alternate_matmul_flops == 2 * T * 4096 * (1024 + 4096 + 14336)
    assert torchtitan.work.alternate_matmul_flops == 2 * T * 4096 * (4096 + 14336)


def test_contiguous_copies_need_a_fused_projection(registry):
    with pytest.raises(ValueError, match="needs fused_qkv"):
        _llama3_8b(registry, fused_qkv_contiguous=True)


def test_a_row_s_qkv_projection_sets_every_attention_layer(registry):
    model = model_from_preset("llama3-8b", registry)
    assert with_qkv_projection(model, None) is model
    fused = with_qkv_projection(model, "torchtitan_fused")
    dense = [g.config for g in fused.layers if g.kind == "dense"]
    assert dense and all(c.fused_qkv and c.fused_qkv_contiguous for c in dense)
    assert [g.config for g in fused.layers if g.kind != "dense"] == [g.config for g in model.layers if g.kind != "dense"]
