"""Mamba-2 and Nemotron-H against transformers' own modules (the ``census`` extra; skipped without it).

Parameter counts: each preset's ``config.json`` built by transformers on the meta
device, the whole model and every layer type's block. Activations: the torch
census runs transformers' reference PyTorch path (mamba_ssm and causal-conv1d
are not installed: ``mamba2_chunk_scan``, ``causal_conv1d_fn``), which the
formulas' ``eager`` path describes (hp_plugins.kit.ssm); every byte the census
measures beyond the formulas is named here.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hp_core.api import build_registry, count_parameters, model_from_preset  # noqa: E402
from hp_core.engine.census import run_census  # noqa: E402
from hp_plugins.census.torch import measure_kind  # noqa: E402

_REGISTRY = build_registry(use_env=False)
_BLOCK_KIND = {"linear_attention": "mamba2", "full_attention": "attention", "mlp": "mlp", "moe": "moe_only"}


def _transformers_model(name):
    cfg = dict(_REGISTRY.model(name).hf_config)
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config)


@pytest.mark.parametrize("name", ["mamba-codestral-7b", "nemotron-h-8b", "nemotron-h-56b", "nemotron-3-nano-30b-a3b"])
def test_parameters_equal_transformers_modules(name):
    model = _transformers_model(name)
    summary = count_parameters(model_from_preset(name, _REGISTRY), _REGISTRY)
    assert summary.total == sum(p.numel() for p in model.parameters())
    per_kind: dict[str, int] = {}
    for block in model.backbone.layers if hasattr(model, "backbone") else model.model.layers:
        kind = _BLOCK_KIND[getattr(block, "block_type", "linear_attention")]
        per_kind[kind] = per_kind.get(kind, 0) + sum(p.numel() for p in block.parameters())
    assert per_kind == {kind: n for kind, n in summary.by_kind.items() if kind not in ("embedding", "output")}


def _norm_extra(h, fp32_weight_product=False):
    """What transformers' RMSNorm keeps per token beyond the formulas' norm input and output (2h each):
    Mamba2RMSNorm (as LlamaRMSNorm) an fp32 copy of its input (4h) and its bf16 normalised tensor (2h) in place
    of the bf16 input, and its fp32 reciprocal root (4); NemotronHRMSNorm multiplies by the weight in fp32, so
    its normalised tensor is fp32 (4h more than Mamba2's 2h... 6h + 4 in all)."""
    return 6 * h + 4 if fp32_weight_product else 4 * h + 4


def _head_vector_bytes(heads):
    """The per-head fp32 vectors transformers' reference path keeps per sequence, split over TP with the heads:
    up to 5.24 ``-exp(A_log)`` (its ``exp`` and ``neg``, 8 bytes a head); from 5.25 (the modular rewrite of
    ``modeling_mamba2.py``) three (two ``exp`` and a ``neg``, 12 bytes a head), measured by the census of
    transformers 5.25.0 (three float32 tensors of shape (heads,) in ``mixer``)."""
    major_minor = tuple(int(part) for part in transformers.__version__.split(".")[:2])
    return (12 if major_minor >= (5, 25) else 8) * heads


def _totals(run, kind):
    record, formulas = run.records[kind], run.formulas[kind]
    return record.saved + record.saved_tp, formulas.saved + formulas.saved_tp


@pytest.mark.parametrize("seq_len", [1024, 4096])
def test_mamba2_reference_path_is_the_formulas_plus_the_norm_copies(seq_len):
    run = run_census(_REGISTRY, "mamba-codestral-7b", "torch", seq_len, "eager", 2)
    census, formulas = _totals(run, "mamba2")
    # The two bool 256 x 256 causal masks of segment_sum and the per-head fp32 vectors (_head_vector_bytes) per
    # sequence (and under a byte per token of per-chunk scalars).
    heads = _head_vector_bytes(128) / seq_len
    left_out = 2 * 256 * 256 / seq_len + heads
    assert census - formulas == pytest.approx(_norm_extra(4096) + left_out, abs=1.0)
    assert abs(census - formulas) / census < 0.02
    # Everything TP splits (heads and groups over 2 ranks) is measured as the formulas say, but the per-head
    # vectors, which split with the heads.
    assert run.records["mamba2"].saved_tp == pytest.approx(run.formulas["mamba2"].saved_tp + heads, abs=1.0)
    if seq_len == 1024:
        # 1,194,989.55 under transformers 5.24 (two per-head vectors); a third adds 512 bytes a sequence.
        expected = 1_194_989.55 + (_head_vector_bytes(128) - 8 * 128) / seq_len
        assert census == pytest.approx(expected, abs=0.01) and formulas == 1_178_472.5


@pytest.mark.parametrize("seq_len", [1024, 4096])
def test_nemotron_h_kinds_are_the_formulas_plus_the_norm_copies(seq_len):
    run = run_census(_REGISTRY, "nemotron-h-8b", "torch", seq_len, "eager", 2)
    h = 4096
    # NemotronHRMSNorm's fp32 copy of the weight (4h bytes per layer, whatever the tokens).
    weight = 4 * h / seq_len
    heads = _head_vector_bytes(128) / seq_len
    for kind, extra, split in (("attention", 0.0, 0.0), ("mlp", 0.0, 0.0),
                               ("mamba2", 2 * 128 * 128 / seq_len + heads, heads)):
        census, formulas = _totals(run, kind)
        assert census - formulas == pytest.approx(_norm_extra(h, fp32_weight_product=True) + weight + extra, abs=1.0), kind
        assert run.records[kind].saved_tp == pytest.approx(run.formulas[kind].saved_tp + split, abs=1.0), kind
    # Without the norm copies the Mamba-2 layer is within 1% (2.4% with them at h = 4096, 128 heads of 64).
    census, formulas = _totals(run, "mamba2")
    assert abs(census - _norm_extra(h, True) - formulas) / census < 0.01


def test_squared_relu_keeps_its_output_and_the_square():
    hf = _REGISTRY.model("nemotron-h-8b").hf_config
    measured = measure_kind(hf, "mlp", 1024, "eager", 1)
    ops = {(t.op, t.module): t.nbytes for t in measured.tensors if t.module.startswith("mixer")}
    assert ops[("relu", "mixer.act_fn")] == ops[("pow", "mixer.act_fn")] == 2 * 21504 * 1024


def test_qwen3_next_parameters_equal_transformers_modules():
    model = _transformers_model("qwen3-next-80b-a3b")
    summary = count_parameters(model_from_preset("qwen3-next-80b-a3b", _REGISTRY), _REGISTRY)
    assert summary.total == sum(p.numel() for p in model.parameters()) == 79_674_391_296
    per_kind: dict[str, int] = {}
    for layer in model.model.layers:
        kind = "gdn_moe" if hasattr(layer, "linear_attn") else "gated_attention_moe"
        per_kind[kind] = per_kind.get(kind, 0) + sum(p.numel() for p in layer.parameters())
    assert per_kind == {kind: n for kind, n in summary.by_kind.items() if kind not in ("embedding", "output")}


def test_qwen3_next_output_gate_keeps_what_the_formulas_say():
    """Qwen3NextAttention: the attention output's contiguous copy, the sigmoid and the product (o_proj's input),
    ``a d`` wide each: the formulas' attn_out, attn_gate_sigmoid and attn_gated_out. (The layer's totals differ
    more: the zero-centred RMSNorm's and the q/k norms' fp32 copies and the router's bookkeeping.)"""
    hf = _REGISTRY.model("qwen3-next-80b-a3b").hf_config
    measured = measure_kind(hf, "gated_attention_moe", 1024, "eager", 1)
    gate = {t.op: t.nbytes for t in measured.tensors if t.module == "self_attn" and t.shape == (1, 1024, 4096)}
    assert gate == {"clone": 2 * 1024 * 4096, "sigmoid": 2 * 1024 * 4096}
    product = [t for t in measured.tensors if t.saved_by == "self_attn.o_proj"]
    assert [(t.op, t.nbytes) for t in product] == [("mul", 2 * 1024 * 4096)]
