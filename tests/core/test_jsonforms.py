"""hp_core.jsonforms: ``from_json(to_json(x), type(x)) == x`` for the results and specs its docstring names.

tests/core/test_bad_input_examples.py round-trips a model, a layout, a hardware spec, an
estimate, a recompute plan and a search; this adds the step time and runs with options
and recipes set, whose records carry the most nested fields.
"""

from __future__ import annotations

import json

import pytest

from hp_core.api import apply_options, estimate, model_from_preset, step_time
from hp_core.jsonforms import dumps, from_json, loads, to_json
from hp_core.specs import ParallelSpec
from hp_core.specs.precision import PrecisionSpec


@pytest.fixture
def model(registry):
    return model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))


def test_a_step_time_round_trips(registry, model):
    parallel = ParallelSpec(dp=2, tp=2, pp=2, sp=True, seq_len=2048, global_batch_size=16)
    result = step_time(model, parallel, registry=registry, hardware="h100-sxm")
    assert result.step_seconds > 0
    assert from_json(json.loads(json.dumps(to_json(result))), type(result), registry=registry) == result
    assert loads(dumps(result), type(result), registry=registry) == result


def test_an_estimate_under_options_and_a_recipe_round_trips(registry, model):
    runtime = apply_options(registry.runtime("megatron"), {"cross_entropy_fusion": False})
    parallel = ParallelSpec(dp=2, tp=2, pp=2, sp=True, seq_len=2048, schedule="zb_h1")
    precision = PrecisionSpec(recipe="fp8-delayed")
    result = estimate(model, parallel, registry=registry, hardware="h100-sxm", runtime=runtime, precision=precision)
    assert result.provenance["runtime_options"] == {"cross_entropy_fusion": False}
    back = from_json(json.loads(json.dumps(to_json(result))), type(result), registry=registry)
    assert back == result
    assert back.provenance["runtime_options"] == {"cross_entropy_fusion": False}
