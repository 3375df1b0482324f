"""The layout search: enumeration counts, rejection reasons, ranking, executors and the CLI."""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import attrs
import pytest

from hp_core.api import build_registry, estimate, model_from_preset, plan_recompute
from hp_core.cli import main
from hp_core.errors import ConfigError
from hp_core.specs import RecomputeSpec, Setting
from hp_core.api import step_time
from hp_core.engine.search import balanced_layers, search, zero_levels
from hp_core.engine.search.layouts import R_BATCH, R_FULL, R_LAYERS, R_SLOWER, R_STATIC

REGISTRY = build_registry()
MODEL = model_from_preset("llama3-8b", REGISTRY).with_body_layers(4, REGISTRY.kinds_placed("body"))
H100 = REGISTRY.hardware_preset("h100-sxm").spec
ARGS = dict(registry=REGISTRY, devices=8, hardware=H100, global_batch_size=16, seq_len=2048, runtime="megatron")


@pytest.fixture(scope="module")
def everything():
    return search(MODEL, top=1000, **ARGS)


def test_the_enumerated_count_is_the_one_counted_by_hand(everything):
    # dp*cp*tp*pp = 8 = 2^3: with exponents (a, b, c, d), 4 - a - d tuples per (a, d).
    # Micro-batch sizes divide 16 / dp: 5, 4, 3, 2 for a = 0..3. vpp divides 4 // pp: two for pp = 2,
    # one otherwise (pp = 8 > 4 layers keeps vpp 1 and is rejected). Megatron runs ZeRO 0 and 1.
    #   a=0: 4*5 + 3*5*2 + 2*5 + 1*5 = 65;  a=1: 3*4 + 2*4*2 + 1*4 = 32;  a=2: 2*3 + 1*3*2 = 12;  a=3: 1*2 = 2
    assert zero_levels(REGISTRY.runtime("megatron")) == (0, 1)
    assert zero_levels(REGISTRY.runtime("fsdp2")) == (3,)
    assert zero_levels(REGISTRY.runtime("generic")) == (0, 1, 2, 3)
    assert everything.considered == (65 + 32 + 12 + 2) * 2 == 222
    # pp=8 (dp=cp=tp=1): 5 micro-batch sizes x 2 levels.
    assert everything.rejected[R_LAYERS] == 10
    # Interleaved (pp=2, vpp=2) needs an even count of micro-batches: dp*mbs = 16 fails, once per
    # (cp, tp) with dp*cp*tp = 4: 3 tuples at dp=1, 2 at dp=2, 1 at dp=4; times 2 levels.
    assert everything.rejected[R_BATCH] == 12
    assert everything.planned + sum(everything.rejected.values()) == everything.considered
    assert everything.fitting == len(everything.top) == everything.planned  # 80 GB is plenty for 4 layers


def test_the_top_is_no_slower_than_any_candidate_and_its_plan_is_the_planners(everything):
    times = [c.step_seconds for c in everything.top]
    assert times == sorted(times)
    keys = [(c.step_seconds, c.layout.key) for c in everything.top]
    assert keys == sorted(keys)
    best = everything.best
    assert all(best.step_seconds <= c.step_seconds for c in everything.top)
    plan = plan_recompute(MODEL, best.layout.parallel(2048, 16), registry=REGISTRY, hardware=H100, runtime="megatron")
    assert plan.plan.step_seconds == best.step_seconds
    assert plan.plan.peak_bytes == best.peak_bytes
    assert plan.recompute == best.recompute
    assert 0 < best.mfu < 1


def test_pruning_by_the_step_time_bound_keeps_the_exact_top(everything):
    # Nothing recomputed is the fastest any plan runs: the bound the second phase prunes with.
    for c in everything.top[:40]:
        fastest = step_time(MODEL, c.layout.parallel(2048, 16), registry=REGISTRY, hardware=H100, runtime="megatron")
        assert fastest.step_seconds <= c.step_seconds * (1 + 1e-12)
    few = search(MODEL, top=3, **ARGS)
    assert few.top == everything.top[:3]
    assert few.planned < everything.planned and few.rejected[R_SLOWER] == everything.planned - few.planned
    assert few.planned + sum(few.rejected.values()) == few.considered


def test_a_layout_that_cannot_fit_is_counted_under_its_reason():
    fixed = {"tp": 1, "cp": 1, "pp": 1, "zero": 1}  # dp = 8: per-DP batch 2, micro-batch sizes 1 and 2
    tiny = attrs.evolve(H100, memory_bytes=2**30)
    result = search(MODEL, fixed=fixed, **{**ARGS, "hardware": tiny})
    assert (result.considered, result.planned, result.top) == (2, 0, ())
    assert result.rejected == {R_STATIC: 2}

    layout = search(MODEL, fixed=fixed, top=1, **ARGS).best.layout
    bound = estimate(MODEL, attrs.evolve(layout.parallel(2048, 16), micro_batch_size=1), registry=REGISTRY,
                     runtime="megatron", recompute=RecomputeSpec(default=Setting(mode="full")))
    stage = bound.stages[0]
    between = attrs.evolve(H100, memory_bytes=(stage.memory.static_bytes + stage.peak_bytes) // 2)
    result = search(MODEL, fixed=fixed, **{**ARGS, "hardware": between})
    assert result.rejected == {R_FULL: 2} and result.planned == 0


def test_balanced_layers_put_extra_layers_in_the_middle():
    assert balanced_layers(8, 4) is None
    assert balanced_layers(61, 16) == (3,) + (4,) * 13 + (3, 3)
    assert balanced_layers(10, 4) == (2, 3, 3, 2)
    assert sum(balanced_layers(61, 16)) == 61


def test_the_same_top_whatever_the_executor():
    kwargs = dict(top=8, fixed={"zero": 1}, **ARGS)
    serial = search(MODEL, **kwargs)
    with ThreadPoolExecutor(max_workers=3) as pool:
        threaded = search(MODEL, executor=pool, **kwargs)
    with ProcessPoolExecutor(max_workers=2) as pool:
        processes = search(MODEL, executor=pool, **kwargs)
    assert serial == threaded == processes
    assert len(serial.top) == 8


def test_fixed_degrees_and_errors():
    result = search(MODEL, fixed={"tp": 2, "pp": 2, "zero": 1}, top=50, **ARGS)
    assert {(c.layout.tp, c.layout.pp, c.layout.zero) for c in result.top} == {(2, 2, 1)}
    with pytest.raises(ConfigError, match="cannot fix"):
        search(MODEL, fixed={"xp": 2}, **ARGS)
    with pytest.raises(ConfigError):
        search(MODEL, **{**ARGS, "devices": 0})


def test_experts_are_searched_only_for_models_with_routed_experts():
    moe = model_from_preset("mixtral-8x7b", REGISTRY).with_body_layers(2, REGISTRY.kinds_placed("body"))
    result = search(moe, fixed={"tp": 1, "cp": 1, "pp": 1, "zero": 1, "micro_batch_size": 1}, top=50,
                    **{**ARGS, "hardware": REGISTRY.hardware_preset("b200").spec})
    assert {c.layout.ep * c.layout.etp for c in result.top} <= {1, 2, 4, 8}
    assert any(c.layout.ep > 1 for c in result.top)
    dense = search(MODEL, fixed={"tp": 1, "cp": 1, "pp": 1, "zero": 1, "micro_batch_size": 1}, top=50, **ARGS)
    assert {(c.layout.ep, c.layout.etp) for c in dense.top} == {(1, 1)}


def test_the_cli_prints_json_and_one_line_errors(capsys):
    argv = ["search", "--model", "llama3-8b", "--num-layers", "4", "--devices", "8", "--hardware", "h100-sxm",
            "--global-batch-size", "16", "--seq-len", "2048", "--runtime", "megatron", "--fix", "tp=2", "--fix", "zero=1"]
    assert main([*argv, "--json", "--top", "3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["top"]) == 3 and doc["top"][0]["layout"]["tp"] == 2 and doc["top"][0]["layout"]["sp"] is True
    expected = search(MODEL, fixed={"tp": 2, "zero": 1}, top=3, **ARGS)
    assert [c["step_seconds"] for c in doc["top"]] == [c.step_seconds for c in expected.top]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Fastest layouts" in out and "Considered" in out
    assert main([*argv, "--fix", "pp=3"]) == 0  # nothing to enumerate: an empty table, not an error
    assert "No layout fits" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--fix", "nope=1"])
    assert exit_.value.code == 2
    capsys.readouterr()
    # ZeRO's levels start at 0 (Megatron-LM without the distributed optimizer); a degree at 1.
    assert main([*argv[:-2], "--fix", "zero=0", "--json", "--top", "2"]) == 0
    assert {entry["layout"]["zero"] for entry in json.loads(capsys.readouterr().out)["top"]} == {0}
    for bad in ("tp=0", "zero=4"):  # a degree from 1; ZeRO's levels 0 to 3
        with pytest.raises(SystemExit):
            main([*argv, "--fix", bad])
    capsys.readouterr()
    assert main(["search", "--model", "nope", "--devices", "8", "--hardware", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hp search: error:" in err


@pytest.mark.parametrize("runtime", ["megatron", "hyperparallel"])
@pytest.mark.parametrize("name, layers", [("llama3-8b", 4), ("deepseek-v3", 5)])
def test_the_first_phase_bounds_are_below_the_estimates_they_bound(name, layers, runtime):
    # The cheap bounds the first phase ranks and rejects by: the pipeline of the stages' layer times
    # (at most the step time with nothing recomputed), the heaviest stage's static memory (equal to
    # estimate's) and the first stage's static memory plus what it keeps and works with fully recomputed
    # (at most that stage's peak with every body layer fully recomputed).
    from hp_core.engine.search.bounds import _Bounder, _time_bound
    from hp_core.engine.search.layouts import Layout, _Job

    model = model_from_preset(name, REGISTRY).with_body_layers(layers, REGISTRY.kinds_placed("body"))
    b200 = REGISTRY.hardware_preset("b200").spec
    job = _Job(model, REGISTRY, b200, runtime, None, "formulas", 0, 2048, 64)
    shift = 2 if runtime == "hyperparallel" else 0  # HyperParallel at ZeRO 2 and 3: whole gradients at the end
    bounder = _Bounder(job)
    moe = name == "deepseek-v3"
    checked = 0
    for dp, tp, pp, vpp, ep, mbs, zero in [(2, 2, 2, 1, 2 if moe else 1, 1, 0), (1, 4, 2, 2, 4 if moe else 1, 2, 1),
                                           (4, 1, 2, 1, 4 if moe else 1, 4, 1), (1, 2, 4, 1, 2 if moe else 1, 1, 1)]:
        split = balanced_layers(bounder.body_count, pp * vpp)
        zero += shift
        layout = Layout(dp=dp, cp=1, tp=tp, pp=pp, vpp=vpp, ep=ep, etp=1, zero=zero, micro_batch_size=mbs,
                        layers_per_stage=split)
        parallel = layout.parallel(2048, 64)
        layers_found = bounder.layers(layout)
        compositions = bounder.compositions(pp, vpp, split)
        m = 64 // (mbs * dp)
        full = estimate(model, parallel, registry=REGISTRY, runtime=runtime,
                        recompute=RecomputeSpec(default=Setting(mode="full")))
        fastest = step_time(model, parallel, registry=REGISTRY, hardware=b200, runtime=runtime)
        bound = _time_bound(layers_found.seconds, compositions, m, bounder.fill(pp, vpp))
        assert 0 < bound <= fastest.step_seconds * (1 + 1e-12)
        static = bounder.static_bytes(layout, layers_found.costs, compositions, zero)
        assert max(s.memory.static_bytes for s in full.stages) <= static <= full.peak_bytes
        if runtime == "megatron":
            assert static == max(s.memory.static_bytes for s in full.stages)
        first = bounder.first_stage_static(layout, layers_found.costs, zero) + sum(bounder.first_stage_activations(
            layout, layers_found, m))
        assert first <= full.stages[0].peak_bytes
        if runtime == "megatron":
            assert full.stages[0].memory.static_bytes < first
        checked += 1
    assert checked == 4


def test_a_micro_batch_size_past_one_the_working_set_rejects_is_still_tried():
    # The first stage's first-backward working set can fall as mbs grows (here the embedding's
    # backward binds at mbs 2 and the layers above it free more at mbs 4), so it rejects one size
    # at a time; only what the stage keeps ends the walk. Both layouts fit and are planned.
    model = model_from_preset("llama3-8b", REGISTRY).with_body_layers(8, REGISTRY.kinds_placed("body"))
    # Exactly the least peak the planner finds for (1, 4, 1, 2, 1, 1, 1, 4, 0); the first stage's bound at
    # mbs 2 is 26,231,775,232 bytes, above it.
    hardware = attrs.evolve(H100, memory_bytes=26_227_580_928)
    result = search(model, registry=REGISTRY, devices=8, hardware=hardware, global_batch_size=4, seq_len=1024,
                    runtime="generic", top=1000, fixed={"pp": 2, "zero": 0, "tp": 1})
    keys = {c.layout.key for c in result.top}
    assert (1, 4, 1, 2, 1, 1, 1, 4, 0) in keys and (2, 2, 1, 2, 1, 1, 1, 2, 0) in keys
    assert result.planned + sum(result.rejected.values()) == result.considered


def test_the_static_bound_holds_whole_gradients_where_the_runtime_defers_their_reduction():
    # HyperParallel reduces gradients once, after the last backward: from ZeRO 2 plan_stage's
    # last_backward point holds them whole, and the static bound is that point's static memory.
    from hp_core.engine.search.bounds import _Bounder
    from hp_core.engine.search.layouts import Layout, _Job

    assert REGISTRY.runtime("hyperparallel").deferred_grad_reduction
    job = _Job(MODEL, REGISTRY, H100, "hyperparallel", None, "formulas", 0, 2048, 16)
    bounder = _Bounder(job)
    for zero in (1, 2, 3):
        layout = Layout(dp=4, cp=1, tp=1, pp=2, vpp=1, ep=1, etp=1, zero=zero, micro_batch_size=1)
        found = bounder.layers(layout)
        full = estimate(MODEL, layout.parallel(2048, 16), registry=REGISTRY, runtime="hyperparallel",
                        recompute=RecomputeSpec(default=Setting(mode="full")))
        static = bounder.static_bytes(layout, found.costs, bounder.compositions(2, 1, None), zero)
        assert static == max(s.memory.static_bytes for s in full.stages)


def test_the_routed_experts_come_from_what_the_layers_state():
    """The early EP rejection reads LayerWork.routed_experts, not a config field: 8 for Mixtral, none for Llama."""
    from hp_core.engine.search.first_phase import _routed_experts

    runtime = REGISTRY.runtime("megatron")
    mixtral = model_from_preset("mixtral-8x7b", REGISTRY)
    assert _routed_experts(mixtral, REGISTRY, runtime, runtime.precision, 1024) == 8
    assert _routed_experts(MODEL, REGISTRY, runtime, runtime.precision, 1024) is None
