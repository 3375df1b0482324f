"""Golden test: parameter counts equal Hugging Face transformers' exactly.

Reference: ``data/params.json`` (``numel`` of every ``nn.Parameter`` of
``LlamaForCausalLM`` built from the config shown, tied weights counted once).
Tolerance: none.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from hp_core.api import estimate, layer_context
from hp_core.errors import ConfigError
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.kinds.dense import evaluate_dense
from hp_plugins.models.hf import model_from_hf_config

CASE_FILE = Path(__file__).resolve().parent / "data" / "params.json"

LLAMA = json.loads(CASE_FILE.read_text(encoding="utf-8"))["models"]["Llama-3-8B"]
CFG = LLAMA["config"]
DENSE = LLAMA["layers"]["dense"]
BREAKDOWN = DENSE["breakdown"]
VOCAB, HIDDEN, LAYERS = CFG["vocab_size"], CFG["hidden_size"], CFG["num_hidden_layers"]

PRECISION = PrecisionSpec()  # bf16 parameters: 2 bytes each
PARAM_BYTES = 2


def _model(**overrides):
    return model_from_hf_config({**CFG, **overrides}, name="Llama-3-8B", source="tests/plugins/data/params.json")


def _dense_config(model):
    (group,) = [g for g in model.layers if g.kind == "dense"]
    return group


def _by_name(params):
    found = {p.name: p for p in params}
    assert len(found) == len(params), "parameter families must have distinct names"
    return found


def test_case_file_is_self_consistent():
    """The reference's parts add up to its total (guards the golden data)."""
    per_layer = sum(part["params"] for part in BREAKDOWN.values())
    assert per_layer == DENSE["params_per_layer"] == 218112000
    assert LLAMA["embedding_params"] + LLAMA["lm_head_params"] + LLAMA["final_norm_params"] + LAYERS * per_layer == LLAMA["total_params"]


def test_layer_stack_of_the_config():
    model = _model()
    assert [(g.kind, g.count) for g in model.layers] == [("embedding", 1), ("dense", DENSE["num_layers"]), ("output", 1)]


def test_totals_equal_transformers(registry):
    result = estimate(_model(), ParallelSpec(seq_len=128), registry=registry)
    params = result.parameters
    assert params.total == LLAMA["total_params"] == 8030261248
    assert params.by_kind["embedding"] == LLAMA["embedding_params"]
    assert params.by_kind["output"] == LLAMA["lm_head_params"] + LLAMA["final_norm_params"]
    assert params.by_kind["dense"] == DENSE["num_layers"] * DENSE["params_per_layer"]
    assert params.by_group == {"dense": LLAMA["total_params"]}


def test_preset_equals_case_file(registry, llama8b):
    """The shipped llama3-8b preset is the same model as the reference config."""
    result = estimate(llama8b, ParallelSpec(seq_len=128), registry=registry)
    assert result.parameters.total == LLAMA["total_params"]


def test_output_head_parts(registry):
    model = _model()
    (out_group,) = [g for g in model.layers if g.kind == "output"]
    context = layer_context(ParallelSpec(seq_len=128), PRECISION, "flash")
    cost = registry.layer_kind("output").evaluate(out_group.config, context)
    parts = _by_name(cost.params)
    assert parts["lm_head"].elements == LLAMA["lm_head_params"]
    assert parts["lm_head"].shared_with is None
    assert parts["final_norm"].elements == LLAMA["final_norm_params"]


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_per_layer_breakdown(tp):
    """evaluate_dense's parameter families against transformers' modules (whole-model counts at any tp)."""
    group = _dense_config(_model())
    cost = evaluate_dense(group.config, layer_context(ParallelSpec(tp=tp, seq_len=128), PRECISION, "flash"))
    parts = _by_name(cost.params)
    attn, mlp = BREAKDOWN["self_attn"]["children"], BREAKDOWN["mlp"]["children"]
    assert parts["qkv_proj"].elements == attn["q_proj"] + attn["k_proj"] + attn["v_proj"] == 25165824
    assert parts["o_proj"].elements == attn["o_proj"] == 16777216
    assert parts["mlp_in_proj"].elements == mlp["gate_proj"] + mlp["up_proj"] == 117440512
    assert parts["mlp_out_proj"].elements == mlp["down_proj"] == 58720256
    assert parts["attn_norm"].elements == BREAKDOWN["input_layernorm"]["params"] == 4096
    assert parts["mlp_norm"].elements == BREAKDOWN["post_attention_layernorm"]["params"] == 4096
    assert set(parts) == {"qkv_proj", "o_proj", "mlp_in_proj", "mlp_out_proj", "attn_norm", "mlp_norm"}
    assert cost.param_elements() == DENSE["params_per_layer"]
    assert cost.param_elements("dense") == DENSE["params_per_layer"]
    assert {name for name, p in parts.items() if p.tp_split} == {"qkv_proj", "o_proj", "mlp_in_proj", "mlp_out_proj"}


def test_tied_embedding_counts_the_head_once(registry):
    result = estimate(_model(tie_word_embeddings=True), ParallelSpec(seq_len=128), registry=registry)
    params = result.parameters
    assert params.total == LLAMA["total_params"] - LLAMA["lm_head_params"] == 7504924672
    assert params.by_kind["embedding"] == LLAMA["embedding_params"]
    assert params.by_kind["output"] == LLAMA["final_norm_params"]


def _stage_params(registry, tied: bool, pp: int, tp: int):
    parallel = ParallelSpec(tp=tp, pp=pp, zero=0, seq_len=128)
    result = estimate(_model(tie_word_embeddings=tied), parallel, registry=registry, precision=PRECISION)
    return [stage.memory.parameters_bytes for stage in result.stages]


def _hand_stage_bytes(layers: int, tp: int, *, embedding: bool, head: bool) -> int:
    """Parameter bytes of one stage, from the reference counts: split families over tp, norms whole."""
    per_layer_split = DENSE["params_per_layer"] - 8192  # the two RMSNorm scales are replicated
    elements = layers * (per_layer_split // tp + 8192)
    if embedding:
        elements += VOCAB * HIDDEN // tp
    if head:
        elements += VOCAB * HIDDEN // tp + LLAMA["final_norm_params"]
    return elements * PARAM_BYTES


@pytest.mark.parametrize("tp", [1, 8])
def test_tied_head_with_one_stage_holds_one_tensor(registry, tp):
    untied = _stage_params(registry, False, 1, tp)
    tied = _stage_params(registry, True, 1, tp)
    assert untied == [_hand_stage_bytes(LAYERS, tp, embedding=True, head=True)]
    assert tied == [untied[0] - VOCAB * HIDDEN * PARAM_BYTES // tp]


@pytest.mark.parametrize("tp", [1, 8])
@pytest.mark.parametrize("pp", [2, 4])
def test_tied_head_with_pipeline_keeps_a_copy_on_the_last_stage(registry, tp, pp):
    tied = _stage_params(registry, True, pp, tp)
    untied = _stage_params(registry, False, pp, tp)
    per_stage = LAYERS // pp
    head_copy = VOCAB * HIDDEN * PARAM_BYTES // tp
    # The last stage holds the head's copy of the embedding: as much as an untied head.
    without_copy = _hand_stage_bytes(per_stage, tp, embedding=False, head=True) - head_copy
    assert tied[-1] == without_copy + head_copy == untied[-1]
    # The first stage holds the embedding itself, whether tied or not.
    assert tied[0] == untied[0] == _hand_stage_bytes(per_stage, tp, embedding=True, head=False)
    # Middle stages hold body layers only.
    for middle in tied[1:-1]:
        assert middle == _hand_stage_bytes(per_stage, tp, embedding=False, head=False)


# Nemotron-4 15B (tests/plugins/data/hf_preset_params.json measures the whole model in transformers): here the
# layer by hand. q and o 6144 x 6144 each, k and v 6144 x (8 x 128) each, up and down 6144 x 24576 each, two
# LayerNorms of weight and bias (2 x 2 x 6144).
NEMOTRON = {"model_type": "nemotron", "vocab_size": 256000, "hidden_size": 6144, "intermediate_size": 24576,
            "num_hidden_layers": 32, "num_attention_heads": 48, "num_key_value_heads": 8}


def test_nemotron_layer_by_hand(registry):
    model = model_from_hf_config(NEMOTRON, name="nemotron-4-15b", source="test")
    (group,) = [g for g in model.layers if g.kind == "dense"]
    c = group.config
    assert (c.gated_mlp, c.hidden_act, c.norm, c.mlp_bias, c.attention_bias) == (False, "relu2", "layernorm", False, False)
    cost = registry.layer_kind("dense").evaluate(c, layer_context(ParallelSpec(seq_len=8), PRECISION, "flash"))
    attention = 2 * 6144 * 6144 + 2 * 6144 * 1024
    mlp = 2 * 6144 * 24576
    assert sum(p.elements for p in cost.params) == attention + mlp + 4 * 6144 == 390_094_848
    (head,) = [g for g in model.layers if g.kind == "output"]
    assert head.config.norm == "layernorm"


def test_nemotron_missing_width_is_refused_with_its_path():
    cfg = {k: v for k, v in NEMOTRON.items() if k != "intermediate_size"}
    with pytest.raises(ConfigError, match=r"config\.json \$\.intermediate_size: is missing"):
        model_from_hf_config(cfg, name="n", source="test")


@pytest.mark.parametrize("model_type, out_bias", [("llama", True), ("qwen3", True), ("nemotron", True), ("qwen2", False)])
def test_attention_bias_reaches_o_proj_as_transformers_builds_it(registry, model_type, out_bias):
    # transformers 5.24.0: LlamaAttention, Qwen3Attention and NemotronAttention build o_proj with
    # bias=config.attention_bias; Qwen2Attention always without. Biases by hand at hidden 6144, 48 heads of 128,
    # 8 KV heads: q 6144, k and v 1024 each, o 6144.
    cfg = {**NEMOTRON, "model_type": model_type, "attention_bias": True}
    if model_type != "nemotron":
        cfg.update(hidden_act="silu")
    model = model_from_hf_config(cfg, name=model_type, source="test")
    (group,) = [g for g in model.layers if g.kind == "dense"]
    ctx = layer_context(ParallelSpec(seq_len=8), PRECISION, "flash")
    with_bias = sum(p.elements for p in registry.layer_kind("dense").evaluate(group.config, ctx).params)
    bare = attrs.evolve(group.config, attention_bias=False, attention_out_bias=False)
    without = sum(p.elements for p in registry.layer_kind("dense").evaluate(bare, ctx).params)
    assert with_bias - without == 6144 + 2 * 1024 + (6144 if out_bias else 0)
