"""The local-attention families against transformers: parameter counts and the torch census.

Skipped without the ``census`` extra. Parameter counts: each new preset's
transformers model built on the meta device, ``numel`` per parameter (tied
weights once), per layer and in all. Activations: bytes per token at
micro-batch 1, bf16, transformers 5.24.0 layers under FakeTensorMode; the
TP-split part (the attention core with its window, soft-cap or sinks, the MLP
or experts) equals the formulas exactly, and the whole difference is the
named Hugging Face implementation tensors (its RMSNorm's fp32 copies, as for
Llama, docs/accuracy.md), so once those are named the census and the
formulas agree to the byte, far within 2%.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hp_core.api import model_from_preset  # noqa: E402
from hp_core.engine.census import run_census  # noqa: E402
from hp_plugins.census.torch import measure_kind  # noqa: E402

PRESETS = ("mistral-7b", "phi-3-mini", "phi-3-medium", "gemma-2-9b", "gemma-2-27b", "gemma-3-27b", "gpt-oss-20b",
           "gpt-oss-120b", "llama4-scout", "llama4-maverick")


def _meta_model(hf):
    cfg = dict(hf)
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config)


@pytest.mark.parametrize("name", PRESETS)
def test_parameters_equal_transformers_per_layer(registry, name):
    model = model_from_preset(name, registry)
    hf_model = _meta_model(registry.model(name).hf_config)
    ours = [g for g in model.layers if g.kind in ("dense", "moe") for _ in range(g.count)]
    assert len(ours) == len(hf_model.model.layers)
    for group, layer in zip(ours, hf_model.model.layers):
        cost = registry.layer_kind(group.kind).evaluate(group.config, _context())
        assert sum(p.elements for p in cost.params) == sum(p.numel() for p in layer.parameters()), name
    unique = {id(p): p.numel() for p in hf_model.parameters()}
    from hp_core.api import count_parameters

    assert count_parameters(model, registry).total == sum(unique.values())


def _context():
    from hp_core.api import layer_context
    from hp_core.specs import ParallelSpec, PrecisionSpec

    return layer_context(ParallelSpec(seq_len=8), PrecisionSpec(), "flash")


def _eager(seq_len):
    from hp_core.api import layer_context
    from hp_core.specs import ParallelSpec, PrecisionSpec

    return layer_context(ParallelSpec(seq_len=seq_len), PrecisionSpec(softmax_bytes=4), "eager")


def _norm_extra(width: int) -> int:
    """Llama's RMSNorm beyond the formulas' input and output (tests/plugins/test_census_torch.py)."""
    return 4 * width + 4


def _gemma_norm_extra(width: int) -> int:
    """Gemma's RMSNorm (``x.float()``, then ``* (1 + w)`` in fp32) keeps its fp32 input (4w), root (4) and fp32
    normalised tensor (4w); the formulas count a pre-norm's input and output (2w + 2w, the output saved by the next
    linear) and a post-norm's input (2w): 6w + 4 more for either."""
    return 6 * width + 4


def _diff(run, kind):
    record, formulas = run.records[kind], run.formulas[kind]
    assert record.saved_tp == formulas.saved_tp, kind  # the TP-split part: exactly the formulas'
    return (record.saved + record.saved_tp) - (formulas.saved + formulas.saved_tp), formulas.saved + formulas.saved_tp


@pytest.mark.parametrize("seq_len", [1024, 4096])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_mistral_window_keeps_what_full_attention_keeps(registry, seq_len, attention):
    # Eager adds the window to the full score matrix as a mask; the flash kernel keeps its statistics.
    run = run_census(registry, "mistral-7b", "torch", seq_len, attention, 2)
    diff, _ = _diff(run, "dense")
    assert diff == 2 * _norm_extra(4096)


@pytest.mark.parametrize("seq_len", [1024, 4096])
def test_gemma2_softcap_and_sandwich_norms(registry, seq_len):
    h = 3584
    run = run_census(registry, "gemma-2-9b", "torch", seq_len, "eager", 2)
    # The core's TP part: the fp32 softmax and the soft-cap's bf16 tanh output over the 16 heads' s x s scores.
    assert run.records["dense"].per_op["softmax"].saved_tp == run.formulas["dense"].per_op["softmax"].saved_tp
    assert run.records["dense"].per_op["softmax"].saved_tp == 16 * seq_len * (4 + 2)
    diff, formulas = _diff(run, "dense")
    # Four Gemma norms, and their (1 + w) fp32 copies, 4h bytes each per sequence.
    named = 4 * _gemma_norm_extra(h) + 4 * 4 * h / seq_len
    assert diff == pytest.approx(named, abs=1e-6)
    assert abs(diff - named) / formulas < 0.02
    # The head: the tanh of the soft-capped logits (bf16) is split with the vocabulary.
    diff, _ = _diff(run, "output")
    assert diff == pytest.approx(_gemma_norm_extra(h) + 8 + 4 * h / seq_len, abs=0.05)  # + the int64 labels


@pytest.mark.parametrize("seq_len", [1024, 4096])
def test_gemma3_qk_norms(registry, seq_len):
    h, heads, kv, d = 5376, 32, 16, 128
    run = run_census(registry, "gemma-3-27b", "torch", seq_len, "eager", 2)
    record, formulas = run.records["dense"], run.formulas["dense"]
    # Its per-head q/k norms are Gemma norms too: 6 d + 4 more per head row, split with the heads.
    assert record.saved_tp - formulas.saved_tp == (heads + kv) * (6 * d + 4)
    total = (record.saved + record.saved_tp) - (formulas.saved + formulas.saved_tp)
    named = 4 * _gemma_norm_extra(h) + (heads + kv) * (6 * d + 4) + (4 * 4 * h + 2 * 4 * d) / seq_len
    assert total == pytest.approx(named, abs=1e-6)


@pytest.mark.parametrize("seq_len", [1024, 4096])
def test_gpt_oss_sinks_and_clamped_experts(registry, seq_len):
    h = 2880
    run = run_census(registry, "gpt-oss-20b", "torch", seq_len, "eager", 2)
    # The TP part: the bf16 softmax over s + 1 columns and its int64 row-max index, exactly the formulas'.
    assert run.records["moe"].per_op["softmax"].saved_tp == run.formulas["moe"].per_op["softmax"].saved_tp
    assert run.records["moe"].per_op["softmax"].saved_tp == 64 * (seq_len + 1) * 2 + 64 * 8
    diff, formulas = _diff(run, "moe")
    # GptOssRMSNorm multiplies by its weight in fp32: 2h more than Llama's per norm; the router's int64
    # top-4 indices (32), the dispatch's four int64 index vectors (128) and bf16 weights (8) per token;
    # the grouped GEMM's int32 offsets, 32 * 4 bytes per sequence.
    named = 2 * (_norm_extra(h) + 2 * h) + 32 + 128 + 8 + 128 / seq_len
    assert diff == pytest.approx(named, abs=1e-6)
    tensors = {(t.op, t.module) for t in measure_kind(registry.model("gpt-oss-20b").hf_config, "moe", 1024).tensors}
    assert {("clamp", "mlp.experts"), ("sigmoid", "mlp.experts"), ("add", "mlp.experts")} <= tensors


@pytest.mark.parametrize("seq_len", [1024, 4096])
def test_phi3_fused_projections(registry, seq_len):
    a, d = 32, 96
    run = run_census(registry, "phi-3-mini", "torch", seq_len, "eager", 2)
    record, formulas = run.records["dense"], run.formulas["dense"]
    # v is a view of the fused qkv_proj output, so it keeps that whole storage alive: q's and k's parts
    # (2 a d bf16) beyond the roped q and k, which the formulas' fused_qkv term counts (32 heads, none repeated).
    assert record.saved_tp == formulas.saved_tp
    assert formulas.per_op["softmax"].saved_tp == a * seq_len * 4  # eager's fp32 softmax, as Llama's
    terms = {t.op: t.bytes for t in registry.layer_kind("dense").evaluate(
        model_from_preset("phi-3-mini", registry).layers[1].config, _eager(seq_len)).activations}
    assert terms["qkv_fused_slices"] == seq_len * 2 * a * d * 2
    assert record.saved - formulas.saved == 2 * _norm_extra(3072)
    # Phi-3-medium (40 heads, 10 KV heads): eager repeats v with a copy, so the slices die.
    medium = run_census(registry, "phi-3-medium", "torch", seq_len, "eager", 2)
    assert medium.records["dense"].saved_tp == medium.formulas["dense"].saved_tp


def test_llama4_runs_every_expert_on_every_token_in_transformers(registry):
    # Llama4TextMoe repeats each token to all 16 experts (scores zero but for the top-1), so transformers keeps
    # 16 experts' activations per token where a dispatching trainer keeps one: the formulas price the latter,
    # and this layer's census is not a check of them. Its attention is: a bf16 softmax (no fp32 copy) over
    # the chunked layer's whole s x s scores, and the weightless L2 QK-norm's fp32 copies.
    measured = measure_kind(registry.model("llama4-scout").hf_config, "moe", 1024, "eager", 1)
    shapes = {(t.op, t.shape): t.nbytes for t in measured.tensors}
    # The fused gate/up output of all 16 experts over all 1024 tokens (a view of it saved), and the repeated input.
    assert shapes[("bmm", (16, 1024, 8192))] == 16 * 1024 * 2 * 8192 * 2
    assert ("repeat", (16 * 1024, 5120)) in shapes
    assert ("_softmax", (1, 40, 1024, 1024)) in shapes
