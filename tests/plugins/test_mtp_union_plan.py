"""The planner and the MTP module's union: under the megatron runtime the module recomputes the union of what the
body layers of its inner kinds recompute (hp_core/engine/inner_layers.py), so a switch chosen for a body layer in
stage 0 slows the last stage. The planner enumerates the unions (hp_core/engine/recompute/coupled.py).

The model: h 64, a vocabulary of 1,024, 4,096 tokens, bf16, pp 2 (layers 11 + 1), dp 2, 4 micro-batches; twelve
small ``moe`` layers (4 heads, 2 KV heads, 8 experts of width 32 top-2, a shared expert of width 48) and an MTP module
whose one ``moe`` layer has experts and a shared expert of width 512: ``moeLayer`` is cheap to recompute in a body
layer and dear in the module. Last, the planner against brute force on a one-stage model of two such layers.
"""

from __future__ import annotations

import itertools

import pytest

from hp_core.api import estimate, plan_recompute, step_time
from hp_core.engine.estimate import estimate_run
from hp_core.engine.inner_layers import PlacedState
from hp_core.blas_workspaces import DEFAULT_WORKSPACE_BYTES
from hp_core.engine.prepare import prepare
from hp_core.engine.recompute.coupled import WHOLE, coupled_states, coupling
from hp_core.engine.recompute.profile import candidate_settings
from hp_core.engine.timing import time_run
from hp_core.specs import LayerGroup, ParallelSpec, RecomputeSpec, Setting
from hp_plugins.kinds.moe import MoEConfig
from hp_plugins.kinds.mtp import MTPConfig
from test_mtp_recompute import H, REGISTRY, RUNTIME, VOCAB, _model
from test_mtp_recompute import MODEL as SMALL_MODEL, PARALLEL as SMALL_PARALLEL

_ATTN = dict(hidden_size=H, num_attention_heads=4, num_key_value_heads=2)
BODY = MoEConfig(**_ATTN, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48)
INNER = MoEConfig(**_ATTN, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=512, shared_expert_intermediate_size=512)
MODEL = _model(LayerGroup("moe", BODY, count=12),
               mtp=LayerGroup("mtp", MTPConfig(vocab_size=VOCAB, hidden_size=H, layer=LayerGroup("moe", INNER))))
PARALLEL = ParallelSpec(seq_len=4096, dp=2, pp=2, global_batch_size=8, layers_per_stage=(11, 1))
# PyTorch's two cuBLAS workspaces (hp_core/blas_workspaces.py), which every stage of this module holds under megatron (its
# routers' and heads' GEMMs run through torch): the limits here were set before they were priced and are shifted by them.
BLAS = 2 * DEFAULT_WORKSPACE_BYTES
LIMIT = 323_000_000 + BLAS  # stage 0 must drop activations; stage 1 (283,051,008 bytes plain, + BLAS) fits as it is


def _switches(*names: str) -> Setting:
    return Setting(mode="switches", switches=frozenset(names))


# What the planner found before (a fixed point of the placed layers it searched under): layer 9's moeLayer is the
# cheapest way for stage 0 to fit, and the module then recomputes moeLayer too.
OLD = RecomputeSpec(default=_switches("ffAct", "normOp"),
                    layers=((9, 9, _switches("ffAct", "moeLayer", "normOp")), (10, 11, Setting())))


def _plan():
    hardware = REGISTRY.hardware_preset("h100-sxm").spec
    return plan_recompute(MODEL, PARALLEL, registry=REGISTRY, hardware=hardware, runtime="megatron",
                          reserve_bytes=hardware.memory_bytes - LIMIT).plan


def _timed(spec):
    return step_time(MODEL, PARALLEL, registry=REGISTRY, runtime=RUNTIME, hardware="h100-sxm", recompute=spec)


def brute_force(run, hardware, settings, layers):
    """(peak bytes, step seconds) of every plan of *layers* body layers over *settings*, priced by estimate_run and
    time_run."""
    return [(estimate_run(run, plan, hardware).peak_bytes, time_run(run, hardware, plan).step_seconds)
            for plan in itertools.product(settings, repeat=layers)]


def spread_limits(plans):
    """Limits spread over the plans' peaks: the least and greatest, about 40 between, and about 20 just above one."""
    peaks = sorted({peak for peak, _ in plans})
    return [peaks[0], peaks[-1]] + peaks[::max(1, len(peaks) // 40)] + [p + 1000 for p in peaks[::max(1, len(peaks) // 20)]]


def assert_planned_as_brute_force(model, parallel, hardware, plans, limits):
    """At each limit the megatron planner's plan fits, is proven, and its step is the least step of the plans that
    fit."""
    for limit in limits:
        best = min(step for peak, step in plans if peak <= limit)
        found = plan_recompute(model, parallel, registry=REGISTRY, hardware=hardware, runtime="megatron",
                               reserve_bytes=hardware.memory_bytes - limit).plan
        assert found.fits and found.unproven == ()
        assert found.step_seconds == pytest.approx(best, rel=1e-12, abs=0)


def test_the_states_are_the_unions_the_inner_kind_can_reach():
    run = prepare(MODEL, PARALLEL, registry=REGISTRY, runtime=RUNTIME)
    couple = coupling(run)
    # Body options none, normOp, moeLayer, full: the unions of their switches (full adds none), then every layer full.
    options = {i: [type("O", (), {"setting": s})() for s in (Setting(), _switches("normOp"), _switches("moeLayer"),
                                                             Setting("full"))] for i in run.layers.body_groups}
    states = coupled_states(run, couple, options)
    assert states == [frozenset(), frozenset({"moeLayer"}), frozenset({"normOp"}), frozenset({"moeLayer", "normOp"}),
                      WHOLE]


def test_the_plan_keeps_the_module_plain_where_that_is_faster():
    plan = _plan()
    assert plan.fits and plan.peak_bytes <= LIMIT and plan.unproven == ()
    # The plan the old search stopped at fits too, but is slower: its module recomputes moeLayer.
    old_peak = estimate(MODEL, PARALLEL, registry=REGISTRY, runtime=RUNTIME, recompute=OLD).peak_bytes
    assert old_peak <= LIMIT
    old, new = _timed(OLD), _timed(plan.recompute)
    assert plan.step_seconds == new.step_seconds < old.step_seconds
    # No body layer of the plan recomputes moeLayer, so the module does not; what stage 1 gains by it is more than
    # stage 0 pays (a full layer 9 instead of its moeLayer).
    assert all(s.mode == "full" or "moeLayer" not in s.switches for s in (plan.recompute.setting_of(i) for i in range(12)))
    gained = old.stages[1].micro_batch_seconds - new.stages[1].micro_batch_seconds
    paid = new.stages[0].micro_batch_seconds - old.stages[0].micro_batch_seconds
    assert gained > paid > 0
    # What it reports is hp estimate / step time of its plan.
    again = estimate(MODEL, PARALLEL, registry=REGISTRY, runtime=RUNTIME, recompute=plan.recompute)
    assert [s.peak_bytes for s in plan.stages] == [s.peak_bytes for s in again.stages]
    assert [s.micro_batch_seconds for s in plan.stages] == [s.micro_batch_seconds for s in new.stages]


def test_the_plan_is_deterministic():
    first, second = _plan(), _plan()
    assert first.recompute == second.recompute and first.step_seconds == second.step_seconds


def test_deepseek_v3_docs_plan_is_no_slower_than_layer_6_full(monkeypatch):
    # docs/recompute.md's DeepSeek-V3 command: the plan before printed 10.3546 s (layer 6 moeLayer made the MTP
    # recompute moeLayer); the same plan with layer 6 full fits and gives 10.2621 s.
    import hp_core.engine.recompute.plan as plan_module

    solved = []
    solve = plan_module.solve_stage
    monkeypatch.setattr(plan_module, "solve_stage", lambda *args, **kwargs: solved.append(args[0]) or solve(*args, **kwargs))
    parallel = ParallelSpec(dp=64, tp=1, sp=False, pp=16, ep=64, seq_len=4096, global_batch_size=1024, zero=1,
                            layers_per_stage=(3,) + (4,) * 14 + (2,))
    hardware = REGISTRY.hardware_preset("h100-sxm").spec
    found = plan_recompute("deepseek-v3", parallel, registry=REGISTRY, hardware=hardware, runtime="megatron",
                           reserve_bytes=2 * 2**30).plan
    # The stages' searches as `hp recompute --json` prints them (search_nodes), as when every stage was solved under
    # every state: a stage at its fastest over every setting is taken as it is under a state keeping those settings
    # (plan.py, search's ``free``), and the plan kept is searched again with each stage solved. 106 stage solves
    # (155 before: stages 8-14, which run every layer at its fastest and hold no MTP, are not solved again under each
    # state). Nodes 5, 71, 5, 28, 49, 39, 37, 27 before PyTorch's cuBLAS workspaces were priced (64 MiB less room on
    # every stage, the same plan and step).
    assert [s.search_nodes for s in found.stages] == [5, 72, 4, 28, 48, 39, 36, 27] + [1] * 8
    assert len(solved) == 106
    assert found.fits and found.step_seconds <= 10.2621 and found.unproven == ()
    # The plan docs/recompute.md prints (and kinds.md quotes): 10.2310 s (10.1537 s before the MTP module's shared
    # embedding had its gradients all-reduced with the first stage's, 10.2587 s before Hopper's grouped-GEMM pair was
    # measured on an H200, 2026-12-04), no layer recomputing moeLayer.
    assert found.step_seconds == pytest.approx(10.2310, abs=1e-4)
    assert not any("moeLayer" in str(setting) for stage in found.stages for setting in stage.settings)
    timed = step_time("deepseek-v3", parallel, registry=REGISTRY, runtime=RUNTIME, hardware="h100-sxm",
                      recompute=found.recompute)
    assert found.stages[15].micro_batch_seconds == timed.stages[15].micro_batch_seconds
    assert found.step_seconds == timed.step_seconds


def test_a_stated_state_prices_the_module_in_it():
    # The planner's lower bound (coupled.py): the body's settings with the module priced in a stated state. On the
    # small model of test_mtp_recompute.py (the module keeps 541,184 bytes plain; moeLayer gates 101,888 of them;
    # under its checkpoint it keeps 295,936), with nothing recomputed in the body.
    run = prepare(SMALL_MODEL, SMALL_PARALLEL, registry=REGISTRY, runtime=RUNTIME)
    plain = (Setting(),) * run.body_count
    kept = {state: estimate_run(run, PlacedState(plain, state)).stages[0].activations_by_kind["mtp"]
            for state in (frozenset(), frozenset({"moeLayer"}), WHOLE)}
    assert kept == {frozenset(): 541_184, frozenset({"moeLayer"}): 541_184 - 101_888, WHOLE: 295_936}
    assert estimate_run(run, plain).stages[0].activations_by_kind["mtp"] == 541_184


def test_the_plan_is_brute_force_s_on_a_small_model():
    # One stage, two body layers of the small moe kind and the module's wide one: every pair of the megatron
    # runtime's 25 candidate settings priced by estimate_run / time_run (625 plans); at limits spread over their
    # peaks (and just above them), the planner's step is the least step of the plans that fit (the planner before
    # missed it at 16 of these 52 limits, e.g. 0.0515845 s for 0.0515678 s at 290,412,008 bytes).
    model = _model(LayerGroup("moe", BODY, count=2),
                   mtp=LayerGroup("mtp", MTPConfig(vocab_size=VOCAB, hidden_size=H, layer=LayerGroup("moe", INNER))))
    parallel = ParallelSpec(seq_len=4096, dp=2, pp=1, global_batch_size=4)
    hardware = REGISTRY.hardware_preset("h100-sxm").spec
    run = prepare(model, parallel, registry=REGISTRY, runtime=RUNTIME)
    candidates = candidate_settings(REGISTRY.layer_kind("moe", "$"), RUNTIME)
    assert len(candidates) == 25
    plans = brute_force(run, hardware, candidates, 2)
    assert_planned_as_brute_force(model, parallel, hardware, plans, spread_limits(plans))


def test_a_state_past_its_search_budget_is_reported_unproven(monkeypatch, capsys):
    # With no budget for the covering search (plan.py _COVER_SEARCHES 0), a state whose plan under-reaches it cannot be
    # proven: the plan says so (PlanResult.unproven), `hp recompute --json` lists its switches (docs/json.md
    # plan.unproven_states) and the text output prints a note. On this module at a 300,000,000-byte limit the state
    # is normOp.
    import json

    import hp_core.engine.recompute.plan as plan_module
    from hp_core.io.recompute_output import recompute_plan_to_json

    monkeypatch.setattr(plan_module, "_COVER_SEARCHES", 0)
    hardware = REGISTRY.hardware_preset("h100-sxm").spec
    found = plan_recompute(MODEL, PARALLEL, registry=REGISTRY, hardware=hardware, runtime="megatron",
                           reserve_bytes=hardware.memory_bytes - 300_000_000 - BLAS)
    assert found.plan.fits and found.plan.unproven == (frozenset({"normOp"}),)
    assert json.loads(json.dumps(recompute_plan_to_json(found)))["plan"]["unproven_states"] == [["normOp"]]
    monkeypatch.setattr(plan_module, "_COVER_SEARCHES", 2000)
    assert plan_recompute(MODEL, PARALLEL, registry=REGISTRY, hardware=hardware, runtime="megatron",
                          reserve_bytes=hardware.memory_bytes - 300_000_000 - BLAS).plan.unproven == ()


def test_hp_search_carries_a_plan_s_unproven_states(monkeypatch):
    # `hp search` plans each layout with the same planner: a candidate carries its plan's unproven states
    # (Candidate.unproven, `top[].unproven_states` in --json, docs/json.md; a note under the table) and is ranked by
    # its plan's step time all the same. With no budget for the covering search, this module on one stage of 12 layers
    # (dp 4) at a 289,000,000-byte limit leaves four states unproven: nothing, normOp, ffAct, ffAct+normOp, as
    # `hp recompute` of that layout reports them; at 320,000,000 bytes none.
    import json

    import hp_core.engine.recompute.plan as plan_module
    from hp_core.api import search
    from hp_core.io.search_output import search_to_json

    monkeypatch.setattr(plan_module, "_COVER_SEARCHES", 0)
    hardware = REGISTRY.hardware_preset("h100-sxm").spec
    fixed = {"dp": 4, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "etp": 1, "vpp": 1, "micro_batch_size": 1, "zero": 1}
    states = (frozenset(), frozenset({"normOp"}), frozenset({"ffAct"}), frozenset({"ffAct", "normOp"}))

    def searched(limit):
        return search(MODEL, registry=REGISTRY, devices=4, hardware=hardware, global_batch_size=8, seq_len=4096,
                      runtime="megatron", fixed=fixed, reserve_bytes=hardware.memory_bytes - limit)

    found = searched(289_000_000 + BLAS)
    (candidate,) = found.top
    planned = plan_recompute(MODEL, candidate.layout.parallel(4096, 8), registry=REGISTRY, hardware=hardware,
                             runtime="megatron", reserve_bytes=hardware.memory_bytes - 289_000_000 - BLAS).plan
    assert candidate.unproven == planned.unproven == states
    assert candidate.step_seconds == planned.step_seconds
    assert json.loads(json.dumps(search_to_json(found)))["top"][0]["unproven_states"] == [
        [], ["normOp"], ["ffAct"], ["ffAct", "normOp"]]
    (proven,) = searched(320_000_000 + BLAS).top
    assert proven.unproven == () and search_to_json(searched(320_000_000 + BLAS))["top"][0]["unproven_states"] == []


def test_hp_search_notes_an_unproven_plan_under_its_table(monkeypatch, capsys):
    # The same layout and limit through `hp search` (the model handed to the command as --model resolves it), budget
    # 0: the text output says which ranked plan is not proven the fastest and which states a faster plan might put the
    # module in.
    import hp_core.engine.recompute.plan as plan_module
    import hp_core.io.job as job
    from hp_core.cli import main

    monkeypatch.setattr(plan_module, "_COVER_SEARCHES", 0)
    monkeypatch.setattr(job, "resolve_model", lambda *args, **kwargs: MODEL)
    memory = REGISTRY.hardware_preset("h100-sxm").spec.memory_bytes
    fixed = [f"--fix={name}={value}" for name, value in (("dp", 4), ("tp", 1), ("pp", 1), ("cp", 1), ("ep", 1),
                                                         ("etp", 1), ("vpp", 1), ("mbs", 1), ("zero", 1))]
    status = main(["search", "--model", "union-mtp", "--devices", "4", "--hardware", "h100-sxm", "--global-batch-size",
                   "8", "--seq-len", "4096", "--runtime", "megatron", "--reserve", str(memory - 289_000_000 - BLAS), *fixed])
    out = " ".join(capsys.readouterr().out.split())
    assert status == 0
    assert ("Note: #1's plan is not proven the fastest; a plan making the placed layers recompute nothing; normOp; "
            "ffAct; ffAct+normOp may be faster") in out
