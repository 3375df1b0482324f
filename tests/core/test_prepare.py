"""prepare(): a run's layers evaluated once, and evaluations shared between runs of one registry only."""

from __future__ import annotations

import gc

import attrs

from hp_core.api import build_registry, model_from_preset, prepare
from hp_core.costs import Flops, LayerContext, LayerCost, LayerWork, ParamCount
from hp_core.engine import prepare as prepare_module
from hp_core.markers import hookimpl
from hp_core.specs import LayerGroup, ModelSpec, ParallelSpec
from hp_core.types import LayerKind


@attrs.frozen
class ToyConfig:
    width: int = 8


def _plugin(elements: int):
    def evaluate(c: ToyConfig, x: LayerContext) -> LayerCost:
        return LayerCost(params=(ParamCount("w", "dense", elements, False),), activations=(), input_bytes=0,
                         working_bytes=0, forward=Flops(), work=LayerWork())

    class Toy:
        @hookimpl
        def hp_layer_kinds(self):
            yield LayerKind(name="toy", config_type=ToyConfig, evaluate=evaluate)

    return Toy()


MODEL = ModelSpec(name="toy", layers=(LayerGroup("toy", ToyConfig(), 2),), source="test")


def test_a_run_prepared_again_reuses_its_evaluations():
    registry = build_registry(use_env=False)
    model = model_from_preset("llama3-8b", registry)
    parallel = ParallelSpec(dp=4, tp=2, sp=True, seq_len=2048, global_batch_size=16)
    one, two = prepare(model, parallel, registry=registry), prepare(model, parallel, registry=registry)
    assert all(a is b for a, b in zip(one.layers.formula_costs, two.layers.formula_costs))
    # Another context is evaluated anew.
    other = prepare(model, attrs.evolve(parallel, tp=4), registry=registry)
    assert other.layers.formula_costs[1] != one.layers.formula_costs[1]


def test_evaluations_are_not_shared_between_registries():
    small, large = build_registry([_plugin(10)], use_env=False), build_registry([_plugin(20)], use_env=False)
    parallel = ParallelSpec(seq_len=16)
    assert prepare(MODEL, parallel, registry=small).costs[0].params[0].elements == 10
    assert prepare(MODEL, parallel, registry=large).costs[0].params[0].elements == 20
    # A registry's answers go with it.
    key = id(small)
    assert key in prepare_module._SHARED
    del small
    gc.collect()
    assert key not in prepare_module._SHARED


def test_the_shared_answers_are_bounded(monkeypatch):
    monkeypatch.setattr(prepare_module, "_SHARED_KEPT", 2)
    registry = build_registry([_plugin(10)], use_env=False)
    for width in range(5):
        model = ModelSpec(name="toy", layers=(LayerGroup("toy", ToyConfig(width), 1),), source="test")
        prepare(model, ParallelSpec(seq_len=16), registry=registry)
    assert len(prepare_module._SHARED[id(registry)]) == 2
