"""Layers kept in the compute dtype under a recipe: Megatron-LM's ``--first-last-layers-bf16``
(PrecisionSpec.high_precision_layers_at_start / _at_end; docs/precision.md "Layers kept in the compute dtype")."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hp_core.api import estimate, model_from_preset, step_time
from hp_core.engine.precision import split_high_precision_layers
from hp_core.engine.prepare import prepare
from hp_core.errors import ConfigError
from hp_core.specs import ParallelSpec

LAYOUT = ParallelSpec(tp=2, sp=True, dp=4, seq_len=4096, micro_batch_size=1, global_batch_size=32)


def _precision(registry, recipe, start=0, end=0):
    return attrs.evolve(registry.runtime("megatron").precision, recipe=recipe, high_precision_layers_at_start=start,
                        high_precision_layers_at_end=end)


def _run(registry, recipe, start=0, end=0, layout=LAYOUT, model="llama3-8b"):
    m = model_from_preset(model, registry)
    p = _precision(registry, recipe, start, end)
    return (estimate(m, layout, registry=registry, runtime="megatron", hardware="b200", precision=p),
            step_time(m, layout, registry=registry, runtime="megatron", hardware="b200", precision=p))


def test_the_model_is_split_at_the_named_layers(registry):
    # Llama 3 8B: embedding, 32 decoder layers, output head. One at the start and two at the end: 1 + 29 + 2.
    model = model_from_preset("llama3-8b", registry)
    run = prepare(model, LAYOUT, registry=registry, runtime="megatron", precision=_precision(registry, "mxfp8", 1, 2))
    counts = [(g.kind, g.count) for g in run.model.layers]
    assert counts == [("embedding", 1), ("dense", 1), ("dense", 29), ("dense", 2), ("output", 1)]
    quantized = [c.work.quantized for c in run.costs]
    assert quantized == [True, False, True, False, True]
    assert all(p.high_precision for c, q in zip(run.costs, quantized) if not q for p in c.params)
    # No recipe: nothing split, nothing kept apart (the counts mean nothing without quantized layers).
    plain = prepare(model, LAYOUT, registry=registry, runtime="megatron", precision=_precision(registry, "bf16", 1, 2))
    assert plain.model == model


def test_every_layer_kept_is_the_bf16_run_and_none_is_the_recipe_run(registry):
    bf16 = _run(registry, "bf16")
    everything = _run(registry, "mxfp8", 32, 0)  # pp 1: all 32 decoder layers kept in bf16
    assert everything[0].stages[0].memory == bf16[0].stages[0].memory
    assert everything[1].step_seconds == pytest.approx(bf16[1].step_seconds, rel=1e-12)
    recipe, none = _run(registry, "mxfp8"), _run(registry, "mxfp8", 0, 0)
    assert none[0].stages[0].memory == recipe[0].stages[0].memory and none[1].step_seconds == recipe[1].step_seconds


def test_two_layers_in_bf16_drop_their_mxfp8_weight_copies(registry):
    # MXFP8 keeps row-wise and column-wise copies of each quantized weight, 2 * (1 + 1/32) bytes an element
    # (docs/precision.md): two of 32 decoder layers in bf16 drop 2/32 of the stage's quantized elements' copies.
    from hp_core.engine.precision import quantized_weight_elements

    model = model_from_preset("llama3-8b", registry)
    full = prepare(model, LAYOUT, registry=registry, runtime="megatron", precision=_precision(registry, "mxfp8"))
    per_layer = quantized_weight_elements([(full.costs[1], 1)])  # one decoder layer's quantized elements on a rank
    stage = quantized_weight_elements([(full.costs[1], 32)])
    assert stage == 32 * per_layer
    kept, base = _run(registry, "mxfp8", 1, 1)[0], _run(registry, "mxfp8")[0]
    dropped = base.stages[0].memory.parameters_bytes - kept.stages[0].memory.parameters_bytes
    assert dropped == -(-stage * 66 // 32) - -(-(stage - 2 * per_layer) * 66 // 32)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 16), st.integers(0, 16))
def test_more_layers_kept_never_price_a_step_faster(registry, start, end):
    # A layer kept in bf16 runs its GEMMs at the bf16 rate: the step never shortens as more are kept.
    fewer = _run(registry, "mxfp8", start, end)[1].step_seconds
    more = _run(registry, "mxfp8", min(start + 1, 16), end)[1].step_seconds
    assert more >= fewer * (1 - 1e-12)


def test_megatron_refuses_what_hp_refuses(registry):
    # Megatron-Core (TransformerConfig.__post_init__, fp8_utils.py at NVIDIA/Megatron-LM@d98e8a6): no layers in bf16
    # under delayed scaling, and at most a pipeline stage's layers (32 // 4 = 8 under pp 4).
    with pytest.raises(ConfigError, match=r"^\$\.precision\.high_precision_layers_at_start: precision recipe fp8-delayed"):
        _run(registry, "fp8-delayed", 1, 1)
    piped = ParallelSpec(tp=2, sp=True, dp=1, pp=4, seq_len=4096, micro_batch_size=1, global_batch_size=32)
    with pytest.raises(ConfigError, match=r"^\$\.precision\.high_precision_layers_at_end: high_precision_layers_at_end "
                                          r"is 9, more than the 8 body layers of a pipeline stage"):
        _run(registry, "mxfp8", 1, 9, layout=piped)
    assert _run(registry, "mxfp8", 8, 8, layout=piped)[1].step_seconds > 0


def test_split_keeps_counts_and_marks_groups_across_a_boundary():
    from hp_core.precision_recipes import GemmOperand, PrecisionRecipe
    from hp_core.specs import LayerGroup, ModelSpec, PrecisionSpec

    recipe = PrecisionRecipe(name="x", description="x", source="x", weights=GemmOperand("mxfp8", "mx_32"),
                             activations=GemmOperand("mxfp8", "mx_32"), gradients=GemmOperand("mxfp8", "mx_32"))
    model = ModelSpec("m", (LayerGroup("embedding", None, 1), LayerGroup("a", None, 3), LayerGroup("b", None, 2),
                            LayerGroup("output", None, 1)))
    body = [False, True, True, False]
    split, exempt = split_high_precision_layers(model, body, PrecisionSpec(high_precision_layers_at_start=4,
                                                                           high_precision_layers_at_end=1), recipe)
    # Body a a a b b: the first four (a a a b) and the last (b) kept: a3 | b1 | b1, every body group kept.
    assert [(g.kind, g.count) for g in split.layers] == [("embedding", 1), ("a", 3), ("b", 1), ("b", 1), ("output", 1)]
    assert exempt == {1, 2, 3}


def test_a_shared_evaluation_must_be_of_the_split_model(registry):
    # A search evaluates a context's groups once and shares them (prepare's layers): with layers kept in bf16 the
    # evaluation must be of the split model with its exempt groups, and gives the run prepare evaluates itself.
    from hp_core.engine.estimate import estimate_run
    from hp_core.engine.precision import resolve_recipe
    from hp_core.engine.prepare import evaluate_layers, model_kinds

    model = model_from_preset("llama3-8b", registry)
    precision = _precision(registry, "mxfp8", 1, 2)
    runtime = registry.runtime("megatron")
    census = registry.census_source("formulas")

    def evaluated(m, exempt=frozenset()):
        return evaluate_layers(m, LAYOUT, precision=precision, attention=runtime.attention, runtime=runtime,
                               registry=registry, census=census, exempt=exempt)

    with pytest.raises(ConfigError, match=r"^\$\.precision\.high_precision_layers_at_start: .* not of the split model"):
        prepare(model, LAYOUT, registry=registry, runtime="megatron", precision=precision, layers=evaluated(model))
    body = [k.placement == "body" for k in model_kinds(model, registry)]
    split, exempt = split_high_precision_layers(model, body, precision, resolve_recipe(registry, precision))
    assert exempt == {1, 3}
    shared = prepare(model, LAYOUT, registry=registry, runtime="megatron", precision=precision,
                     layers=evaluated(split, exempt))
    own = prepare(model, LAYOUT, registry=registry, runtime="megatron", precision=precision)
    assert shared.costs == own.costs and estimate_run(shared, None) == estimate_run(own, None)
