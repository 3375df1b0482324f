"""A precision recipe changes census-measured activations as it changes the formulas' (docs/precision.md): the
bytes each formula term of a linear layer's input moves, moved in the census term of its recompute switch."""

from __future__ import annotations

from pathlib import Path

import attrs
import yaml

from hp_core.api import estimate, layer_context
from hp_core.engine.census import apply_record
from hp_core.engine.precision import apply_recipe, apply_recipe_measured
from hp_core.specs import ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_core.types import CensusBytes, CensusRecord
from hp_plugins.kinds.dense import DenseConfig

PROVENANCE = {"source": "hand-written for a test", "seq_len": 1024}
LAYOUT = ParallelSpec(dp=1, tp=2, sp=True, seq_len=1024)
# Per token: 100,000 bytes kept unsplit (1024 tokens over sp 2: 51,200,000 per rank), 20,000 of them the
# normOp switch's (10,240,000), 8,000 the softmax's (4,096,000); the kind's selective set keeps 60,000 (30,720,000).
RECORD = {"saved": 100000, "saved_tp": 0, "working": 500, "working_tp": 2000, "provenance": PROVENANCE,
          "per_op": {"normOp": {"saved": 20000, "saved_tp": 0}, "softmax": {"saved": 8000, "saved_tp": 0}},
          "policies": {"selective": {"saved": 60000, "saved_tp": 0}}}
# Llama-3-8B's dense layer at tp 2 with SP over 1024 tokens, fp8-current (1 byte for 2): a hidden-size bf16 tensor
# is 512 * 4096 * 2 = 4,194,304 bytes, the FC2 input 1024 * 7168 * 2 = 14,680,064. What the formulas' terms move:
# normOp: both norm outputs (QKV and FC1 inputs, owned) -2 * 2,097,152; gather: their SP-gathered copies, the same;
# ffAct: the FC2 input (owned) -7,340,032; ungated: the output projection's input (shared: the flash kernel keeps
# its bf16 output) +2,097,152.
NORM, GATHER, FFACT, UNGATED = -4_194_304, -4_194_304, -7_340_032, 2_097_152


def _precision(registry, recipe):
    return attrs.evolve(registry.runtime("generic").precision, recipe=recipe)


def test_the_formula_deltas_by_switch(registry):
    context = layer_context(LAYOUT, PrecisionSpec(), "flash")
    kind = registry.layer_kind("dense")
    cost = kind.evaluate(DenseConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                                     intermediate_size=14336), context)
    changed = apply_recipe(cost, registry.precision_recipe("fp8-current"), 2)
    delta: dict = {}
    for before, after in zip(cost.activations, changed.activations):
        delta[before.switch] = delta.get(before.switch, 0) + after.bytes - before.bytes
    assert {k: v for k, v in delta.items() if v} == {"normOp": NORM, "gather": GATHER, "ffAct": FFACT, None: UNGATED}


def test_a_census_record_moves_as_the_formulas_do(registry):
    context = layer_context(LAYOUT, PrecisionSpec(), "flash")
    kind = registry.layer_kind("dense")
    cost = kind.evaluate(DenseConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                                     intermediate_size=14336), context)
    record = CensusRecord(100000.0, 0.0, 500.0, 2000.0, dict(PROVENANCE),
                          per_op={"normOp": CensusBytes(20000.0, 0.0), "softmax": CensusBytes(8000.0, 0.0)},
                          policies={"selective": CensusBytes(60000.0, 0.0)})
    measured = apply_record(cost, record, kind, context)
    fp8 = apply_recipe_measured(measured, cost, registry.precision_recipe("fp8-current"), 2)
    assert {t.op: t.bytes for t in fp8.activations} == {
        "census.normOp": 10_240_000 + NORM,
        "census.softmax": 4_096_000,  # no linear input under softmax
        # the rest: gather and ffAct have no census term of their own, so their change lands here
        "census.saved": 51_200_000 - 10_240_000 - 4_096_000 + GATHER + FFACT + UNGATED,
    }
    assert fp8.kept_bytes == 51_200_000 + NORM + GATHER + FFACT + UNGATED == 37_568_512
    # The selective set recomputes none of those switches: every change applies to what it keeps.
    assert fp8.kept_under(kind.selective) == 30_720_000 + NORM + GATHER + FFACT + UNGATED
    assert fp8.working_bytes == measured.working_bytes
    # bf16 and torchao's compute-dtype inputs leave the measured cost as it is, the same object.
    assert apply_recipe_measured(measured, cost, registry.precision_recipe("bf16"), 2) is measured
    assert apply_recipe_measured(measured, cost, registry.precision_recipe("torchao-float8-tensorwise"), 2) is measured


def test_an_estimate_with_a_census_file_and_a_recipe(registry, llama8b, tmp_path: Path):
    path = tmp_path / "census.yaml"
    path.write_text(yaml.safe_dump({"model": "llama3-8b", "kinds": {"dense": RECORD}}), encoding="utf-8")
    bf16 = estimate(llama8b, LAYOUT, registry=registry, census=str(path), precision=_precision(registry, "bf16"))
    fp8 = estimate(llama8b, LAYOUT, registry=registry, census=str(path), precision=_precision(registry, "fp8-current"))
    assert bf16.stages[0].activations_by_kind["dense"] == 32 * 51_200_000
    assert fp8.stages[0].activations_by_kind["dense"] == 32 * 37_568_512
    selective = RecomputeSpec(default=Setting.parse("selective"))
    fp8_selective = estimate(llama8b, LAYOUT, registry=registry, census=str(path), recompute=selective,
                             precision=_precision(registry, "fp8-current"))
    assert fp8_selective.stages[0].activations_by_kind["dense"] == 32 * (30_720_000 - 13_631_488)
    # The formula-priced kinds move exactly as without a census.
    formulas = estimate(llama8b, LAYOUT, registry=registry, precision=_precision(registry, "fp8-current"))
    for kind in ("embedding", "output"):
        assert fp8.stages[0].activations_by_kind[kind] == formulas.stages[0].activations_by_kind[kind]
