"""MPT configs (``hp_plugins/models/mpt.py``) and learned position embeddings (``hp_plugins/kinds/embedding.py``).

Parameter counts are checked against the ``NumParams`` column of llm-foundry's
benchmark tables (``data/scale_measured_mpt.json``, provenance in ``data/README.md``);
the position embedding's costs are derived by hand here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hp_core.api import build_registry, estimate
from hp_core.cli import main
from hp_core.costs import LayerContext
from hp_core.errors import ConfigError
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.kinds.embedding import EmbeddingConfig, evaluate_embedding
from hp_plugins.models.mpt import model_from_mpt_config
from scale_cases import MPT_ROWS, model

REGISTRY = build_registry(use_env=False)
FP8_FILE = Path(__file__).resolve().parent / "data" / "fp8_measured_runs.json"


def _params(spec) -> int:
    return estimate(spec, ParallelSpec(seq_len=512), registry=REGISTRY).parameters.total


def test_every_mpt_row_has_the_tables_parameter_count():
    for row in MPT_ROWS:
        assert _params(model(row, REGISTRY)) == row["model"]["num_params"] == int(row["row"].strip(" |").split("|")[-1]), row["id"]


def test_mpt_7b_by_hand():
    # V d + S d + L (12 d^2 + 13 d) + 2 d: the tied token table, the position table, per block Wqkv, out_proj,
    # up_proj and down_proj (12 d^2) with their biases (9 d) and two LayerNorms with bias (4 d), the final LayerNorm.
    d, layers, vocab, seq = 4096, 32, 50368, 2048
    spec = model_from_mpt_config({"model_type": "mpt", "d_model": d, "n_heads": 32, "n_layers": layers, "max_seq_len": seq,
                                  "vocab_size": vocab}, name="mpt-7b", source="test")
    by_kind = estimate(spec, ParallelSpec(seq_len=seq), registry=REGISTRY).parameters.by_kind
    assert by_kind["embedding"] == vocab * d + seq * d == 214_695_936
    assert by_kind["dense"] == layers * (12 * d * d + 13 * d)
    assert by_kind["output"] == 2 * d  # the head is the token table, counted once
    assert sum(by_kind.values()) == 6_658_859_008


MPT_125M = {"model_type": "mpt", "d_model": 768, "n_heads": 12, "n_layers": 12, "max_seq_len": 2048, "vocab_size": 50368}


def _mpt(**fields):
    return model_from_mpt_config({**MPT_125M, **fields}, name="m", source="test")


def _dense_params(spec) -> int:
    return estimate(spec, ParallelSpec(seq_len=512), registry=REGISTRY).parameters.by_kind["dense"]


# Each field hp does not price, stated with a non-default value, and the path the refusal names.
REFUSED = [
    ({"attn_config": {"alibi": True}}, "attn_config.alibi"), ({"attn_config": {"rope": True}}, "attn_config.rope"),
    ({"attn_config": {"nope": True}}, "attn_config.nope"), ({"attn_config": {"qk_ln": True}}, "attn_config.qk_ln"),
    ({"attn_config": {"qk_gn": True}}, "attn_config.qk_gn"), ({"attn_config": {"clip_qkv": 8.0}}, "attn_config.clip_qkv"),
    ({"attn_config": {"attn_logit_softcapping": 50.0}}, "attn_config.attn_logit_softcapping"),
    ({"attn_config": {"sliding_window_size": 1024}}, "attn_config.sliding_window_size"),
    ({"attn_config": {"attn_type": "grouped_query_attention"}}, "attn_config.attn_type"),
    ({"attn_config": {"kv_dim": 512}}, "attn_config.kv_dim"),
    ({"attn_config": {"reuse_kv_layer_idx": -1}}, "attn_config.reuse_kv_layer_idx"),
    ({"ffn_config": {"ffn_type": "mptglu"}}, "ffn_config.ffn_type"),
    ({"ffn_config": {"ffn_act_fn": {"name": "gelu", "approximate": "tanh"}}}, "ffn_config.ffn_act_fn"),
    ({"ffn_config": {"ffn_act_fn": {"name": "relu"}}}, "ffn_config.ffn_act_fn"),
    ({"ffn_config": {"bias": False}}, "ffn_config.bias"),
    ({"ffn_config": {"fc_type": {"name": "foo"}}}, "ffn_config.fc_type"),
    ({"fc_type": "foo"}, "fc_type"), ({"fc_type": {"name": "te", "bias": False}}, "fc_type.bias"),
    ({"final_logit_softcapping": 30.0}, "final_logit_softcapping"), ({"logit_scale": "inv_sqrt_d_model"}, "logit_scale"),
    ({"block_overrides": {"order": [{"name": "default"}], "overrides": {}}}, "block_overrides"),
    ({"head_dim": 128}, "head_dim"), ({"attention_bias": False}, "attention_bias"),
    ({"use_pad_tok_in_ffn": False}, "use_pad_tok_in_ffn"), ({"embedding_fraction": 0.1}, "embedding_fraction"),
    ({"norm_type": "rmsnorm"}, "norm_type"), ({"no_bias": True}, "no_bias"), ({"learned_pos_emb": False}, "learned_pos_emb"),
]


@pytest.mark.parametrize("fields, path", REFUSED, ids=[p for _, p in REFUSED])
def test_what_hp_does_not_price_is_refused_by_field(fields, path):
    with pytest.raises(ConfigError) as exc:
        _mpt(**fields)
    assert exc.value.path == f"config.json $.{path}"
    assert "is not priced by hp" in exc.value.message and "\n" not in str(exc.value)


def test_ffn_hidden_size_overrides_expansion_ratio_exactly():
    # llm-foundry resolve_ffn_hidden_size: ffn_hidden_size where stated (expansion_ratio ignored). Per block:
    # Wqkv 768 x 2304 + 2304, out_proj 768^2 + 768, up_proj 768 x 3000 + 3000, down_proj 3000 x 768 + 768, 2 LN 4 x 768.
    d, f = 768, 3000
    per_block = d * 3 * d + 3 * d + d * d + d + d * f + f + f * d + d + 4 * d
    assert per_block == 6_977_208
    assert _dense_params(_mpt(ffn_config={"ffn_hidden_size": f}, expansion_ratio=7)) == 12 * per_block
    assert _dense_params(_mpt()) == 12 * (12 * d * d + 13 * d) == 85_054_464  # expansion_ratio 4: 3,072


def test_a_float_expansion_ratio_is_int_of_the_product():
    # int(d_model * expansion_ratio) = int(768 * 2.5) = 1920, the same model as ffn_hidden_size 1920.
    assert _dense_params(_mpt(expansion_ratio=2.5)) == _dense_params(_mpt(ffn_config={"ffn_hidden_size": 1920}))
    d, f = 768, 1920
    assert _dense_params(_mpt(expansion_ratio=2.5)) == 12 * (4 * d * d + 2 * d * f + 9 * d + f) == 63_806_976
    # llm-foundry raises where the product is not whole; hp refuses naming the field.
    with pytest.raises(ConfigError) as exc:
        _mpt(expansion_ratio=2.0001)
    assert exc.value.path == "config.json $.expansion_ratio"


@pytest.mark.parametrize("fields", [{"fc_type": "te"}, {"fc_type": {"name": "te"}}, {"fc_type": "torch"},
                                    {"ffn_config": {"fc_type": {"name": "torch"}}},
                                    {"ffn_config": {"ffn_act_fn": {"name": "gelu", "approximate": "none"}}},
                                    {"ffn_config": {"ffn_act_fn": {"name": "gelu"}}}, {"attention_bias": True},
                                    {"head_dim": 64}, {"attn_config": {"kv_dim": None}}])
def test_default_equivalent_fields_are_accepted_and_priced_alike(fields):
    # te.Linear holds the same weight and bias as torch.nn.Linear; the rest state llm-foundry's defaults.
    plain = estimate(_mpt(), ParallelSpec(seq_len=2048), registry=REGISTRY)
    stated = estimate(_mpt(**fields), ParallelSpec(seq_len=2048), registry=REGISTRY)
    assert stated.parameters.total == plain.parameters.total == 125_311_488
    assert stated.stages[0].memory.peak_bytes == plain.stages[0].memory.peak_bytes


# An MPT field with a wrong value and the path the error names (the MPT field, not hp's layer field).
BAD_VALUES = [
    ({"resid_pdrop": 1.5}, "resid_pdrop"), ({"attn_config": {"attn_pdrop": 1.5}}, "attn_config.attn_pdrop"),
    ({"emb_pdrop": 1.5}, "emb_pdrop"), ({"expansion_ratio": 0}, "expansion_ratio"), ({"n_heads": 0}, "n_heads"),
    ({"d_model": 1000, "n_heads": 16}, "n_heads"), ({"attn_config": {"alibi": "yes"}}, "attn_config.alibi"),
    ({"max_seq_len": 0}, "max_seq_len"), ({"ffn_config": {"ffn_hidden_size": 0}}, "ffn_config.ffn_hidden_size"),
    ({"attn_config": [1]}, "attn_config"), ({"d_model": 0}, "d_model"), ({"n_layers": 0}, "n_layers"),
]


@pytest.mark.parametrize("fields, path", BAD_VALUES, ids=[f"{p}={list(f.values())[0]}" for f, p in BAD_VALUES])
def test_a_bad_mpt_value_names_the_mpt_field(fields, path):
    with pytest.raises(ConfigError) as exc:
        _mpt(**fields)
    assert exc.value.path == f"config.json $.{path}"


def _cli(capsys, tmp_path, cfg, *argv):
    file = tmp_path / "config.json"
    file.write_text(json.dumps(cfg), encoding="utf-8")
    try:
        status = main(["estimate", "--model", str(file), *argv])
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err, str(file)


@pytest.mark.parametrize("fields, path", BAD_VALUES[:7], ids=[p for _, p in BAD_VALUES[:7]])
def test_a_bad_mpt_value_on_the_command_line(capsys, tmp_path, fields, path):
    status, out, err, file = _cli(capsys, tmp_path, {**MPT_125M, **fields}, "--seq-len", "2048")
    assert status == 2 and out == ""
    assert err.startswith(f"hp estimate: error: {file} $.{path}: ") and err.count("\n") == 1
    assert "Traceback" not in err


def test_a_run_longer_than_the_position_table_is_refused(capsys, tmp_path):
    # llm-foundry MPTModel.forward asserts S <= max_seq_len: the table has no row for later positions.
    spec = _mpt()
    with pytest.raises(ConfigError) as exc:
        estimate(spec, ParallelSpec(seq_len=8192), registry=REGISTRY)
    assert exc.value.path == "$.parallel.seq_len" and "position_embeddings=2048" in exc.value.message
    assert estimate(spec, ParallelSpec(seq_len=2048), registry=REGISTRY).parameters.total == 125_311_488
    status, out, err, _ = _cli(capsys, tmp_path, MPT_125M, "--seq-len", "8192")
    assert status == 2 and err.startswith("hp estimate: error: $.parallel.seq_len: seq_len=8192 exceeds")
    assert err.count("\n") == 1 and "Traceback" not in err


def _cost(positions: int, tp: int = 1, b: int = 4, seq: int = 2048, per_token: bool = False, sp: bool = False):
    x = LayerContext(tp=tp, cp=1, sp=sp, ep=1, etp=1, micro_batch_size=b, seq_len=seq, precision=PrecisionSpec(),
                     attention="flash", traits=frozenset())
    return evaluate_embedding(EmbeddingConfig(vocab_size=50368, hidden_size=768, position_embeddings=positions,
                                              position_ids_per_token=per_token), x)


def test_position_embedding_costs_by_hand():
    plain, learned = _cost(0), _cost(2048)
    params = {p.name: p for p in learned.params}
    # 2048 x 768 parameters, whole on every TP rank.
    assert params["embed_positions"].elements == 1_572_864 and not params["embed_positions"].tp_split
    assert {p.name for p in plain.params} == {"embed_tokens"}
    # Kept (GPT-2, Megatron-LM): one sequence's (1, S) int64 position ids, 2048 x 8 = 16 KiB, beside the 4 x 2048 token ids.
    kept = {t.op: t.bytes for t in learned.activations}
    assert kept == {"token_ids": 4 * 2048 * 8, "position_ids": 16_384}
    # Backward working set: the bf16 gradient of the whole position table, 3 MiB more.
    assert learned.working_bytes - plain.working_bytes == 1_572_864 * 2 == 3 * 2**20
    # Forward: one add per output element (4 x 2048 tokens x 768); backward: the table's dense gradient.
    assert learned.forward.elementwise_flops == 4 * 2048 * 768 and plain.forward.elementwise_flops == 0
    assert learned.work.table_elements - plain.work.table_elements == 1_572_864


def test_mpt_keeps_one_position_id_per_token():
    # MPTModel.forward: clamp(pos - cumsum(~attention_mask)) is a (B, S) int64 tensor: 4 x 2048 x 8 = 64 KiB.
    kept = {t.op: t.bytes for t in _cost(2048, per_token=True).activations}
    assert kept == {"token_ids": 65_536, "position_ids": 65_536}
    spec = _mpt()
    assert spec.layers[0].config.position_ids_per_token is True
    assert spec.layers[0].config.position_embeddings == 2048


def test_the_position_add_runs_before_the_sequence_parallel_scatter():
    # Megatron-LM LanguageModelEmbedding: with positions, no reduce-scatter in the lookup; the add on the full
    # 4 x 2048 x 768 output; then all-reduce forward and the scatter's all-gather backward (bf16: 12 MiB each).
    with_sp, plain_sp = _cost(2048, tp=2, sp=True), _cost(0, tp=2, sp=True)
    assert with_sp.forward.elementwise_flops == 4 * 2048 * 768 == 6_291_456
    full = 4 * 2048 * 768 * 2
    assert [(c.op, c.bytes, c.forward_calls, c.backward_calls) for c in with_sp.work.collectives] == [
        ("all_reduce", full, 1, 0), ("all_gather", full, 0, 1)]
    assert [(c.op, c.forward_calls, c.backward_calls) for c in plain_sp.work.collectives] == [
        ("reduce_scatter", 1, 0), ("all_gather", 0, 1)]


def test_position_table_is_not_split_over_tp():
    one, two = _cost(2048, tp=1), _cost(2048, tp=2)
    p1 = {p.name: p for p in one.params}["embed_positions"]
    p2 = {p.name: p for p in two.params}["embed_positions"]
    assert p1.elements == p2.elements == 1_572_864
    assert two.work.table_elements - one.work.table_elements / 2 == pytest.approx(1_572_864 / 2)


def test_position_parameters_carry_gradients_and_optimizer_states():
    # fsdp2 at dp=1: fp32 parameters (4 bytes), fp32 gradients (4), two fp32 AdamW moments (8) per element.
    base = {"model_type": "mpt", "d_model": 768, "n_heads": 12, "n_layers": 12, "vocab_size": 50368}
    short = model_from_mpt_config({**base, "max_seq_len": 1024}, name="a", source="t")
    long = model_from_mpt_config({**base, "max_seq_len": 2048}, name="b", source="t")
    runtime = REGISTRY.runtime("fsdp2")
    layout = ParallelSpec(seq_len=512)
    a = estimate(short, layout, registry=REGISTRY, runtime=runtime).stages[0].memory
    b = estimate(long, layout, registry=REGISTRY, runtime=runtime).stages[0].memory
    extra = 1024 * 768
    assert b.parameters_bytes - a.parameters_bytes == extra * 4
    assert b.gradients_bytes - a.gradients_bytes == extra * 4
    assert b.optimizer_states_bytes - a.optimizer_states_bytes == extra * 8
def test_every_mpt_fp8_row_has_the_tables_parameter_count():
    rows = json.loads(FP8_FILE.read_text(encoding="utf-8"))["fsdp_rows"]
    assert len(rows) == 7
    for row in rows:
        spec = model_from_mpt_config(row["model_config"]["mpt"], name=row["id"], source="test")
        assert _params(spec) == row["num_params"] == int(row["row"].strip(" |").split("|")[-1]), row["id"]


