"""The layout search's shared evaluations and its lower bound on the step-time bound.

The first phase evaluates layers through a memo that shares a kind's answer
between layer contexts agreeing on every field its evaluator read
(hp_core.engine.search.memo); its answers must be prepare's, refusals
included. Its candidates carry a lower bound on the step-time bound, made
exact only when the second phase reaches them; the bound must never be above
the exact one.
"""

from __future__ import annotations

import itertools

import attrs
import pytest
import yaml

from hp_core.api import build_registry, model_from_preset
from hp_core.costs import ActivationTerm, Flops, LayerContext, LayerCost, LayerWork, ParamCount
from hp_core.engine.prepare import evaluate_layers, layer_context
from hp_core.engine.search import balanced_layers, search
from hp_core.engine.search.bounds import _Bounder, _time_bound
from hp_core.engine.search.first_phase import _first_phase, _key_bits, _routed_experts, _unpack
from hp_core.engine.search.layouts import Layout, _Job
from hp_core.engine.search.memo import Memo, memo_formula_costs
from hp_core.errors import ConfigError
from hp_core.markers import hookimpl
from hp_core.specs import LayerGroup, ModelSpec, ParallelSpec
from hp_core.types import LayerKind

CALLS: dict[str, int] = {}


@attrs.frozen
class BlockConfig:
    hidden_size: int = 64


@attrs.frozen
class WrapperConfig:
    layer: LayerGroup = LayerGroup("branchy", BlockConfig(), 1)


def _cost(elements: int, kept: int, work: LayerWork | None = None) -> LayerCost:
    return LayerCost(params=(ParamCount("w", "dense", elements, True),), activations=(ActivationTerm("x", kept),),
                     input_bytes=kept // 2, working_bytes=kept // 4, forward=Flops(matmul_flops=2.0 * kept),
                     work=work if work is not None else LayerWork())


def _branchy(c: BlockConfig, x: LayerContext) -> LayerCost:
    # Reads ep only when tp > 1: answers for tp 1 are shared whatever ep, etp and sp.
    CALLS["branchy"] = CALLS.get("branchy", 0) + 1
    extra = x.ep if x.tp > 1 else 1
    return _cost(c.hidden_size * c.hidden_size * extra, x.tokens * c.hidden_size // x.tp)


def _picky(c: BlockConfig, x: LayerContext) -> LayerCost:
    # Refuses a micro-batch size in its evaluator (not in validate).
    CALLS["picky"] = CALLS.get("picky", 0) + 1
    if x.micro_batch_size == 3:
        raise ConfigError("$.parallel.micro_batch_size", "picky refuses 3 sequences")
    return _cost(c.hidden_size, x.tokens)


def _picky_validate(c: BlockConfig, x: LayerContext) -> None:
    if x.etp == 2:
        raise ConfigError("$.parallel.etp", "picky refuses etp 2")


def _evolver(c: BlockConfig, x: LayerContext) -> LayerCost:
    # Reads the context through attrs.evolve: every field, so shared only between equal contexts.
    CALLS["evolver"] = CALLS.get("evolver", 0) + 1
    one = attrs.evolve(x, micro_batch_size=1)
    return _cost(c.hidden_size, one.tokens * x.micro_batch_size)


def _wrapper(c: WrapperConfig, x: LayerContext) -> LayerCost:
    # A module around another kind's layer, as the MTP module: its answer follows its nested layer's.
    CALLS["wrapper"] = CALLS.get("wrapper", 0) + 1
    inner = x.sublayer(c.layer)
    return _cost(inner.params[0].elements + 1, inner.activations[0].bytes + x.tokens)


class Kinds:
    @hookimpl
    def hp_layer_kinds(self):
        yield LayerKind(name="branchy", config_type=BlockConfig, evaluate=_branchy)
        yield LayerKind(name="picky", config_type=BlockConfig, evaluate=_picky, validate=_picky_validate)
        yield LayerKind(name="evolver", config_type=BlockConfig, evaluate=_evolver)
        yield LayerKind(name="wrapper", config_type=WrapperConfig, evaluate=_wrapper, placement="last")


REGISTRY = build_registry([Kinds()], use_env=False)
TOY = ModelSpec(name="toy", layers=(LayerGroup("branchy", BlockConfig(), 2), LayerGroup("picky", BlockConfig(), 1),
                                    LayerGroup("evolver", BlockConfig(), 1), LayerGroup("wrapper", WrapperConfig(), 1)),
                source="test")


def _contexts():
    for tp, cp, ep, etp, mbs in itertools.product((1, 2), (1, 2), (1, 2, 4), (1, 2), (1, 2, 3)):
        yield ParallelSpec(dp=8, tp=tp, cp=cp, sp=tp > 1, ep=ep, etp=etp, micro_batch_size=mbs, seq_len=64,
                           global_batch_size=48)


def _prepared(model, parallel, runtime, census_source):
    try:
        return evaluate_layers(model, parallel, precision=runtime.precision, attention=runtime.attention, runtime=runtime,
                               registry=REGISTRY, census=census_source).costs
    except ConfigError as exc:
        return exc.path


def test_the_memo_answers_as_prepare_and_shares_what_an_evaluator_did_not_read():
    runtime = REGISTRY.runtime("generic")
    source = REGISTRY.census_source("formulas")
    kinds = [REGISTRY.layer_kind(g.kind) for g in TOY.layers]
    memo = Memo(REGISTRY)
    memo_calls: dict[str, int] = {}
    answers = 0
    for parallel in _contexts():
        expected = _prepared(TOY, parallel, runtime, source)
        context = layer_context(parallel, runtime.precision, runtime.attention, runtime.vocab_pad_multiple, runtime.traits)
        CALLS.clear()
        try:
            got = memo_formula_costs(memo, TOY, kinds, context, source, runtime.attention)[1]
        except ConfigError as exc:
            got = exc.path
        for name, calls in CALLS.items():
            memo_calls[name] = memo_calls.get(name, 0) + calls
        assert got == expected
        answers += not isinstance(expected, str)
    contexts = len(list(_contexts()))
    # Refusals are prepare's: picky's validate (etp 2) and its evaluator (mbs 3).
    assert answers == contexts - contexts // 2 - contexts // 2 // 3
    # branchy at tp 1 reads neither ep, etp nor sp: one answer per (cp, mbs) there.
    assert memo_calls["branchy"] < contexts // 2
    # The evolver reads every field: one answer per distinct context it was asked in.
    assert memo_calls["evolver"] == answers


def test_a_kind_that_never_shares_is_evaluated_directly():
    from hp_core.engine.search import memo as memo_module

    runtime = REGISTRY.runtime("generic")
    kinds = [REGISTRY.layer_kind("evolver")]
    model = ModelSpec(name="toy", layers=(LayerGroup("evolver", BlockConfig(), 1),), source="test")
    memo = Memo(REGISTRY)
    for mbs in range(1, memo_module._TRIES + 5):
        parallel = ParallelSpec(micro_batch_size=mbs, seq_len=64, global_batch_size=1000)
        context = layer_context(parallel, runtime.precision, runtime.attention, runtime.vocab_pad_multiple, runtime.traits)
        _, costs, _ = memo_formula_costs(memo, model, kinds, context, REGISTRY.census_source("formulas"),
                                          runtime.attention)
        assert costs == evaluate_layers(model, parallel, precision=runtime.precision, attention=runtime.attention,
                                        runtime=runtime, registry=REGISTRY, census=REGISTRY.census_source("formulas")).costs
    (entry,) = memo._entries.values()
    assert not entry.memoized and not entry.variants


@pytest.mark.parametrize("name, layers, devices, runtime, census", [
    ("deepseek-v3", 5, 64, "megatron", None),
    ("deepseek-v3", 5, 64, "hyperparallel", None),
    ("llama3-8b", 4, 8, "megatron", "census"),
])
def test_the_first_phase_sees_prepares_layers_and_bounds_the_time_bound_from_below(name, layers, devices, runtime,
                                                                                    census, tmp_path):
    registry = build_registry(use_env=False)
    model = model_from_preset(name, registry).with_body_layers(layers, registry.kinds_placed("body"))
    census_name = "formulas"
    if census:
        path = tmp_path / "census.yaml"
        path.write_text(yaml.safe_dump({"model": name, "kinds": {"dense": {
            "saved": 20000, "saved_tp": 900000, "working": 500, "working_tp": 2000,
            "per_op": {"softmax": {"saved": 0, "saved_tp": 400000}},
            "provenance": {"source": "hand-written for a test", "seq_len": 1024}}}}), encoding="utf-8")
        census_name = str(path)
    hardware = registry.hardware_preset("b200").spec
    job = _Job(model, registry, hardware, runtime, None, census_name, 0, 1024, 64)
    bounder = _Bounder(job)
    zeros = (0, 1, 2, 3)
    experts = _routed_experts(model, registry, bounder.rt, bounder.precision, 1024)
    bounded, _ = _first_phase(bounder, devices, experts, zeros, {}, {}, None)
    bits = _key_bits(devices, 64, bounder.body_count, zeros)
    exact: dict[tuple[int, ...], object] = {}
    assert bounded
    for entry in bounded[::7]:
        lower, (dp, cp, tp, pp, vpp, ep, etp, mbs, zero) = _unpack(entry, bits)
        layout = Layout(dp=dp, cp=cp, tp=tp, pp=pp, vpp=vpp, ep=ep, etp=etp, zero=zero, micro_batch_size=mbs,
                        layers_per_stage=balanced_layers(bounder.body_count, pp * vpp))
        layers = exact.get((tp, cp, ep, etp, mbs))
        if layers is None:
            layers = exact[(tp, cp, ep, etp, mbs)] = bounder.layers(layout)
            # The memo's costs are prepare's.
            assert bounder.context(layout, mbs).costs == tuple(layers.costs)
        bound = _time_bound(layers.seconds, bounder.compositions(pp, vpp, layout.layers_per_stage), 64 // (mbs * dp),
                            bounder.fill(pp, vpp))
        assert 0 < lower <= bound


def test_the_search_is_the_same_with_every_executor_on_a_model_with_experts():
    from concurrent.futures import ThreadPoolExecutor

    registry = build_registry(use_env=False)
    model = model_from_preset("deepseek-v3", registry).with_body_layers(5, registry.kinds_placed("body"))
    kwargs = dict(registry=registry, devices=32, hardware=registry.hardware_preset("b200").spec, global_batch_size=32,
                  seq_len=1024, runtime="megatron", top=4, fixed={"zero": 1})
    serial = search(model, **kwargs)
    with ThreadPoolExecutor(max_workers=2) as pool:
        assert search(model, executor=pool, **kwargs) == serial
    assert len(serial.top) == 4
