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


@pytest.mark.parametrize("field, value", [("attn_config", {"alibi": True}), ("attn_config", {"rope": True}),
                                          ("no_bias", True), ("learned_pos_emb", False), ("ffn_config", {"ffn_type": "mptglu"}),
                                          ("attn_config", {"attn_type": "grouped_query_attention"})])
def test_what_hp_does_not_price_is_refused_by_field(field, value):
    with pytest.raises(ConfigError) as exc:
        model_from_mpt_config({"model_type": "mpt", field: value}, name="m", source="test")
    assert f"$.{field}" in str(exc.value)


def _cost(positions: int, tp: int = 1, b: int = 4, seq: int = 2048):
    x = LayerContext(tp=tp, cp=1, sp=False, ep=1, etp=1, micro_batch_size=b, seq_len=seq, precision=PrecisionSpec(),
                     attention="flash", traits=frozenset())
    return evaluate_embedding(EmbeddingConfig(vocab_size=50368, hidden_size=768, position_embeddings=positions), x)


def test_position_embedding_costs_by_hand():
    plain, learned = _cost(0), _cost(2048)
    params = {p.name: p for p in learned.params}
    # 2048 x 768 parameters, whole on every TP rank.
    assert params["embed_positions"].elements == 1_572_864 and not params["embed_positions"].tp_split
    assert {p.name for p in plain.params} == {"embed_tokens"}
    # Kept: one sequence's int64 position ids, 2048 x 8 = 16 KiB, beside the 4 x 2048 token ids.
    kept = {t.op: t.bytes for t in learned.activations}
    assert kept == {"token_ids": 4 * 2048 * 8, "position_ids": 16_384}
    # Backward working set: the bf16 gradient of the whole position table, 3 MiB more.
    assert learned.working_bytes - plain.working_bytes == 1_572_864 * 2 == 3 * 2**20
    # Forward: one add per output element (4 x 2048 tokens x 768); backward: the table's dense gradient.
    assert learned.forward.elementwise_flops == 4 * 2048 * 768 and plain.forward.elementwise_flops == 0
    assert learned.work.table_elements - plain.work.table_elements == 1_572_864


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


