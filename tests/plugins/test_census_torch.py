"""The torch census: full-size transformers layers under FakeTensorMode, against the formulas.

Skipped without the ``census`` extra (torch and transformers). Every number is
bytes per token at micro-batch 1, bf16; each difference from the formulas is
accounted for by the tensors docs/accuracy.md names.
"""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hp_core.engine.census import formulas_precision, formulas_records, run_census  # noqa: E402
from hp_core.cli import main  # noqa: E402
from hp_core.api import estimate, model_from_preset  # noqa: E402
from hp_core.specs import ParallelSpec  # noqa: E402
from hp_plugins.census.torch import measure_kind  # noqa: E402


def _hf(registry, preset):
    return registry.model(preset).hf_config


def _norm_extra(width: int) -> int:
    """What Hugging Face's RMSNorm keeps beyond the formulas' norm input (2w) and output (2w), per token:
    the fp32 copy of its input (4w) and its normalised bf16 tensor (2w) in place of the bf16 input,
    and its fp32 reciprocal root (4)."""
    return 4 * width + 4


def _totals(run, kind):
    record, formulas = run.records[kind], run.formulas[kind]
    return record.saved + record.saved_tp, formulas.saved + formulas.saved_tp


@pytest.mark.parametrize("seq_len", [1024, 4096])
def test_llama3_8b_dense_eager_is_the_formulas_plus_hf_rmsnorm_copies(registry, seq_len):
    run = run_census(registry, "llama3-8b", "torch", seq_len, "eager", 2)
    census, formulas = _totals(run, "dense")
    h = 4096
    assert census - formulas == 2 * _norm_extra(h) == 32776
    # What TP splits is measured equal to the formulas' (q, k and v repeated to 32 heads, the fp32
    # softmax and its bf16 cast, the attention output, the SwiGLU tensors).
    assert run.records["dense"].saved_tp == run.formulas["dense"].saved_tp
    assert run.records["dense"].saved_tp == 3 * 8192 + 8192 + 32 * seq_len * (4 + 2) + 4 * 28672
    per_op = run.records["dense"].per_op
    assert per_op["softmax"].saved_tp == 32 * seq_len * 4
    assert per_op["headCast"].saved_tp == 32 * seq_len * 2
    assert per_op["ffAct"].saved_tp == 2 * 28672
    # Both norms' fp32 copies, normalised tensors, outputs and roots, less the inputs a recompute keeps.
    assert per_op["normOp"].saved == 2 * (4 * h + 2 * h + 2 * h + 4) - 2 * 2 * h
    if seq_len == 4096:
        assert census == 999432 and formulas == 966656


@pytest.mark.parametrize("seq_len", [1024, 4096])
def test_mixtral_moe_eager_adds_only_norm_copies_and_router_bookkeeping(registry, seq_len):
    run = run_census(registry, "mixtral-8x7b", "torch", seq_len, "eager", 2)
    census, formulas = _totals(run, "moe")
    # Beyond the norms: the router's fp32 softmax (8 * 4 bytes, the formulas count 8 * 2) and the
    # dispatch's int64 indices and fp32 weights (100 bytes per token in all).
    # (and the grouped GEMM's int32 offsets, 8 * 4 bytes per sequence).
    assert census - formulas == pytest.approx(2 * _norm_extra(4096) + 100, abs=0.5)
    # Two experts per token through grouped_mm: dispatched tokens, FC1 out (gate and up), SiLU out,
    # product, expert out, whatever the routing.
    tensors: dict = {}
    for t in measure_kind(_hf(registry, "mixtral-8x7b"), "moe", seq_len).tensors:
        tensors[(t.op, t.module)] = max(tensors.get((t.op, t.module), 0), t.nbytes / seq_len)
    assert tensors[("index", "mlp.experts")] == 2 * 4096 * 2
    assert tensors[("silu", "mlp.experts.act_fn")] == 2 * 14336 * 2


@pytest.mark.parametrize("seq_len", [1024, 4096])
def test_deepseek_v3_mla_kinds_eager_add_only_the_named_tensors(registry, seq_len):
    run = run_census(registry, "deepseek-v3", "torch", seq_len, "eager", 2)
    h, q_rank, kv_rank, rope = 7168, 1536, 512, 64
    norms = 2 * _norm_extra(h) + _norm_extra(q_rank) + _norm_extra(kv_rank) - 2 * rope
    census, formulas = _totals(run, "mla")
    assert census - formulas == norms == 65424
    census, formulas = _totals(run, "mla_moe")
    # The MoE router runs in fp32: it keeps an fp32 copy of its input (4h) and its fp32 sigmoid
    # (256 * 4, the formulas count 256 * 2), and the dispatch's indices and weights.
    extra = census - formulas - norms - 4 * h - 256 * 2
    assert 0 <= extra < 1000
    assert run.records["mla"].per_op["attUp"].saved_tp == 128 * (192 + 192 + 256) * 2


def test_full_size_layers_run_in_under_a_minute_per_kind(registry):
    for preset, kinds in (("llama3-8b", ("embedding", "dense", "output")), ("mixtral-8x7b", ("moe",)),
                          ("deepseek-v3", ("mla", "mla_moe", "output"))):
        for kind in kinds:
            started = time.perf_counter()
            measured = measure_kind(_hf(registry, preset), kind, 4096, "eager", 1)
            assert time.perf_counter() - started < 60, (preset, kind)
            assert measured.saved_bytes > 0


def test_sdpa_on_cpu_keeps_what_a_gpu_flash_kernel_keeps_for_gqa(registry):
    run = run_census(registry, "llama3-8b", "torch", 4096, "sdpa", 2)
    census, formulas = _totals(run, "dense")
    # The CPU flash kernel with enable_gqa saves q, k and v (8 KV heads), the output and the fp32
    # log-sum-exp: the formulas' flash terms; only the norm copies differ.
    assert census - formulas == 2 * _norm_extra(4096)
    names = {(t.op, t.dtype) for t in measure_kind(_hf(registry, "llama3-8b"), "dense", 4096, "sdpa").tensors}
    assert ("_scaled_dot_product_flash_attention_for_cpu", "torch.float32") in names


def test_sdpa_on_cpu_falls_back_to_the_math_kernel_for_mla(registry):
    # q/k are 192 wide and v 128: the CPU flash kernel does not take them, and the math kernel
    # upcasts to fp32 and keeps the fp32 probabilities, which a GPU flash kernel never does.
    measured = measure_kind(_hf(registry, "deepseek-v3"), "mla", 1024, "sdpa")
    largest = measured.tensors[0]
    assert (largest.op, largest.dtype, largest.switch) == ("_safe_softmax", "torch.float32", "softmax")
    assert largest.nbytes == 128 * 1024 * 1024 * 4


def test_embedding_and_output(registry):
    run = run_census(registry, "llama3-8b", "torch", 1024, "eager", 2)
    assert (run.records["embedding"].saved, run.records["embedding"].saved_tp) == (8, 0)
    census, formulas = _totals(run, "output")
    # The fp32 log-softmax over the vocabulary shard is split by TP, as the formulas say; HF's final
    # norm adds its copies and the loss its int64 labels.
    assert run.records["output"].saved_tp == run.formulas["output"].saved_tp == 128256 * 4
    assert census - formulas == pytest.approx(_norm_extra(4096) + 8, abs=0.05)


def test_tensor_parallel_split_is_measured_at_the_degree_asked(registry):
    hf = _hf(registry, "deepseek-v3")
    one, eight = measure_kind(hf, "mla_moe", 1024, "eager", 1), measure_kind(hf, "mla_moe", 1024, "eager", 8)
    # Heads and the shared experts' width are divided by 8; routed experts and the latents are not.
    assert one.per_op_bytes["softmax"] == 8 * eight.per_op_bytes["softmax"]
    assert one.per_op_bytes["ffAct"] - eight.per_op_bytes["ffAct"] == 2 * (2048 - 256) * 2 * 1024
    assert one.per_op_bytes["normOp"] == eight.per_op_bytes["normOp"]


def test_the_torch_source_prices_an_estimate(registry):
    model = model_from_preset("llama3-8b", registry)
    result = estimate(model, ParallelSpec(dp=1, tp=2, sp=True, seq_len=1024), registry=registry, census="torch", attention="eager")
    assert result.provenance["kinds"] == {"embedding": "census:torch", "dense": "census:torch", "output": "census:torch"}
    # One rank, sp = tp = 2: 1024 * (65,544 / 2 + 344,064 / 2) per dense layer, 32 layers.
    assert result.stages[0].activations_by_kind["dense"] == 32 * 1024 * (65544 + 344064) // 2


def test_hp_census_torch_json(capsys):
    assert main(["census", "--model", "mixtral-8x7b", "--seq-len", "1024", "--tp", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    moe = doc["kinds"]["moe"]
    assert {"saved", "saved_tp", "working", "working_tp", "per_op", "provenance"} <= set(moe)
    assert moe["provenance"]["transformers"] and moe["provenance"]["tp_degrees"] == [1, 2]
    assert moe["provenance"]["attention"] == "eager" and moe["provenance"]["seq_len"] == 1024
    assert doc["formulas"]["moe"]["saved_tp"] == moe["saved_tp"]


def test_tp_is_measured_not_assumed_linear(registry):
    # At tp = 8 a Mixtral rank holds one KV head: transformers' repeat_kv then reshapes an expanded
    # size-1 dimension, a view, so the matmuls keep one head of k and v, not four copies.
    hf = _hf(registry, "mixtral-8x7b")
    at = {tp: {(t.op, t.shape): t.nbytes for t in measure_kind(hf, "moe", 1024, "eager", tp).tensors} for tp in (2, 8)}
    assert at[2][("clone", (16, 1024, 128))] == 16 * 1024 * 128 * 2  # v repeated from 4 KV heads to 16
    assert at[8][("mm", (4, 1024, 128))] == 1 * 1024 * 128 * 2  # v: a view of the one KV head


def test_formulas_records_agree_with_hp_census_formulas(registry):
    model = model_from_preset("deepseek-v3", registry)
    records = formulas_records(model, registry, 1024, "eager", formulas_precision("eager"), (1, 8))
    assert records["mla"].per_op["attUp"].saved_tp == 128 * (192 + 192 + 256) * 2


def test_branches_the_forward_frees_are_not_kept(registry):
    """DeepSeek-V3's router picks its groups on a branch whose outputs the forward drops (the group top-k, the
    masked scores): what that branch saved dies with it before the backward, 416 bytes per token."""
    measured = measure_kind(_hf(registry, "deepseek-v3"), "mla_moe", 1024, "eager", 1)
    gate = sorted((t.op, t.dtype, t.shape) for t in measured.tensors if t.saved_by == "mlp.gate")
    assert gate == [("_to_copy", "torch.float32", (1024, 7168)), ("add", "torch.float32", (1024, 1)),
                    ("clone", "torch.float32", (1024, 8)), ("sigmoid", "torch.float32", (1024, 256)),
                    ("topk", "torch.int64", (1024, 8))]


_HF_TRAITS = {"fp32_norm_copy", "upcast_cross_entropy"}  # what the fsdp2 runtime states of transformers' modules


@pytest.mark.parametrize("preset", ["llama3-8b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"])
def test_formulas_with_transformers_norms_match_the_census_within_two_percent(registry, preset):
    """Every built-in kind at 1k and 4k tokens: the formulas configured for transformers' unfused RMSNorm and upcast
    loss against the torch census (DeepSeek-V3's MoE layer, whose router keeps an fp32 copy of its input, -0.01%)."""
    model = model_from_preset(preset, registry)
    for seq_len in (1024, 4096):
        run = run_census(registry, preset, "torch", seq_len, "eager", 1)
        formulas = formulas_records(model, registry, seq_len, "eager", formulas_precision("eager"), (1,), traits=_HF_TRAITS)
        for kind, record in run.records.items():
            measured = record.saved + record.saved_tp
            priced = formulas[kind].saved + formulas[kind].saved_tp
            assert abs(priced - measured) <= 0.02 * measured, (preset, seq_len, kind, priced, measured)
            if preset == "deepseek-v3" and kind == "mla_moe":  # the router's fp32 input copy and scores priced
                assert abs(priced - measured) <= 0.001 * measured, (seq_len, priced, measured)
