"""The covering search of the MTP union (hp_core/engine/recompute/plan.py ``covered``) on stages of many like layers.

A branch requires one body layer to recompute a switch. Before, such a layer kept its group's key, and the per-stage
solver reads a group's options from its first layer (solver.VariableLayer: a group's layers share their options), so
a requirement on any layer but the group's first in its stage was dropped (the branch found its parent's plan and
branched again) and one on the first held every layer of the group to it. And it branched on every layer: on the
union-plan module of test_mtp_union_plan.py, one stage of 12 layers (dp 4) at 289,000,000 bytes, three states ran
past the 2,000 searches (7 s a plan on a quiet machine). Now a required layer is a group of its own, and of the layers
coupled.interchangeable puts in one class (the same group and chunk, and in a stage's last chunk the same side of
each group's topmost layer) required the same, only the first is branched on.
"""

from __future__ import annotations

import random

import pytest

import hp_core.engine.recompute.plan as plan_module
from hp_core.api import model_from_preset, plan_recompute, step_time
from hp_core.engine.estimate import estimate_run
from hp_core.engine.prepare import prepare
from hp_core.engine.recompute.coupled import interchangeable
from hp_core.engine.recompute.profile import candidate_settings
from hp_core.engine.recompute.solver import VariableLayer
from hp_core.engine.timing import time_run
from hp_core.specs import LayerGroup, ParallelSpec, RecomputeSpec, Setting
from hp_plugins.kinds.mtp import MTPConfig
from test_mtp_recompute import PARALLEL as SMALL_PARALLEL
from test_mtp_recompute import REGISTRY, RUNTIME, SMALL, VOCAB, H, _model
from test_mtp_union_plan import BLAS, BODY, INNER, MODEL, assert_planned_as_brute_force, brute_force, spread_limits

ONE_STAGE = ParallelSpec(seq_len=4096, dp=4, pp=1, global_batch_size=8)
HARDWARE = REGISTRY.hardware_preset("h100-sxm").spec


def _switches(*names: str) -> Setting:
    return Setting(mode="switches", switches=frozenset(names))


def _planned(model, parallel, limit):
    return plan_recompute(model, parallel, registry=REGISTRY, hardware=HARDWARE, runtime="megatron",
                          reserve_bytes=HARDWARE.memory_bytes - limit - BLAS).plan  # limits set before BLAS


def _count_branches(monkeypatch) -> list[int]:
    """Counts the stage solves of covering branches (a layer held to a requirement: a group of its own, keyed by its
    group and its options' settings)."""
    count = [0]
    solve = plan_module.solve_stage

    def counting(index, chunks, *args, **kwargs):
        count[0] += any(isinstance(layer, VariableLayer) and isinstance(layer.group, tuple)
                        for chunk in chunks for layer in chunk)
        return solve(index, chunks, *args, **kwargs)

    monkeypatch.setattr(plan_module, "solve_stage", counting)
    return count


@pytest.mark.parametrize("limit", [289_000_000, 290_000_000])
def test_twelve_like_layers_are_proven_at_the_default_budget(monkeypatch, limit):
    # The plan the old search kept unproven (normOp, ffAct and ffAct+normOp past 2,000 searches each): every layer
    # full but layer 0, ffAct+moeLayer, so the module recomputes ffAct and moeLayer. Now proven: each of the three
    # states' searches branches on two layers (0 and 11, the classes of coupled.interchangeable), each branch's plan
    # reaching the state, and none of them faster.
    branches = _count_branches(monkeypatch)
    plan = _planned(MODEL, ONE_STAGE, limit)
    assert plan.fits and plan.unproven == ()
    assert plan.recompute == RecomputeSpec(default=Setting(mode="full"), layers=((0, 0, _switches("ffAct", "moeLayer")),))
    timed = step_time(MODEL, ONE_STAGE, registry=REGISTRY, runtime=RUNTIME, hardware="h100-sxm", recompute=plan.recompute)
    assert plan.step_seconds == timed.step_seconds
    assert branches[0] == 3 * 2


def test_one_branch_per_class_of_like_layers(monkeypatch):
    # At 289,000,000 bytes each state's search visits three nodes: the state's plan and one branch per class (layers
    # 0-10, layer 11). Branching on every layer visits 13; with a budget of 3 that is unproven.
    monkeypatch.setattr(plan_module, "_COVER_SEARCHES", 3)
    assert _planned(MODEL, ONE_STAGE, 289_000_000).unproven == ()
    monkeypatch.setattr(plan_module, "interchangeable", lambda run: None)  # each layer its own class
    assert _planned(MODEL, ONE_STAGE, 289_000_000).unproven == (
        frozenset({"normOp"}), frozenset({"ffAct"}), frozenset({"ffAct", "normOp"}))


def test_the_classes_by_hand():
    def classes(parallel, **kwargs):
        found = interchangeable(prepare(MODEL, parallel, registry=REGISTRY, runtime=RUNTIME, **kwargs))
        if found is None:
            return None
        groups: dict = {}
        for layer, key in found.items():
            groups.setdefault(key, []).append(layer)
        return sorted(groups.values())

    # One stage: the topmost layer (a marker of the warm-up walk, its kept bytes under its own term) apart.
    assert classes(ONE_STAGE) == [list(range(11)), [11]]
    # pp 2 (11 + 1 layers): each stage's topmost apart.
    assert classes(ParallelSpec(seq_len=4096, dp=2, pp=2, global_batch_size=8, layers_per_stage=(11, 1))) == [
        list(range(10)), [10], [11]]
    # pp 2, vpp 2: chunks of 3; stage 0 runs chunks 0 and 2, stage 1 chunks 1 and 3; only the last chunks split.
    assert classes(ParallelSpec(seq_len=4096, dp=2, pp=2, vpp=2, global_batch_size=8)) == [
        [0, 1, 2], [3, 4, 5], [6, 7], [8], [9, 10], [11]]
    # Why the topmost is apart: on that layout stage 0's last chunk is layers 6-8 (no module after them), and
    # recomputing layer 8 fully instead of layer 6 moves its peak (the walk's term of layer 8); 6 for 7 does not.
    run = prepare(MODEL, ParallelSpec(seq_len=4096, dp=2, pp=2, vpp=2, global_batch_size=8), registry=REGISTRY,
                  runtime=RUNTIME)

    def stage_0_peak(full_layer):
        return estimate_run(run, tuple(Setting(mode="full") if j == full_layer else Setting() for j in range(12)),
                            HARDWARE).stages[0].peak_bytes

    assert stage_0_peak(6) == stage_0_peak(7) != stage_0_peak(8)
    # FSDP (zero 3: a layer's gathers hide behind its neighbours) and the fsdp2 runtime's own peak points: none.
    assert classes(ParallelSpec(seq_len=4096, dp=4, pp=1, global_batch_size=8, zero=3)) is None
    assert interchangeable(prepare(MODEL, ONE_STAGE, registry=REGISTRY, runtime="fsdp2")) is None


@pytest.mark.parametrize("model, parallel", [
    (MODEL, ONE_STAGE),
    (MODEL, ParallelSpec(seq_len=4096, dp=2, pp=2, vpp=2, global_batch_size=8)),
    ("deepseek-v3", ParallelSpec(dp=64, tp=1, sp=False, pp=16, ep=64, seq_len=4096, global_batch_size=1024, zero=1,
                                 layers_per_stage=(3,) + (4,) * 14 + (2,))),
], ids=["one-stage", "vpp", "deepseek-v3"])
def test_swapping_like_layers_moves_no_peak_and_no_time(model, parallel):
    # What the symmetry rests on, checked on random plans: swapping two layers' settings within a class leaves every
    # stage's every peak point (integers, exactly) and the step time (up to the order of the sums) as they were.
    if isinstance(model, str):
        model = model_from_preset(model, REGISTRY)
    run = prepare(model, parallel, registry=REGISTRY, runtime=RUNTIME)
    found = interchangeable(run)
    members: dict = {}
    for layer, key in found.items():
        members.setdefault(key, []).append(layer)
    pairs = [layers for layers in members.values() if len(layers) > 1]
    options = {g: candidate_settings(run.kinds[g], run.runtime) for g in run.layers.body_groups}
    rng = random.Random(0)
    for _ in range(6):
        settings = [rng.choice(options[g]) for g in run.body_group]
        for layers in pairs:
            a, b = rng.sample(layers, 2)
            if settings[a] == settings[b]:
                settings[a] = next(s for s in options[run.body_group[a]] if s != settings[b])
            swapped = list(settings)
            swapped[a], swapped[b] = settings[b], settings[a]
            before, after = estimate_run(run, tuple(settings), HARDWARE), estimate_run(run, tuple(swapped), HARDWARE)
            assert [s.peak_points for s in before.stages] == [s.peak_points for s in after.stages]
            assert (time_run(run, HARDWARE, tuple(swapped)).step_seconds
                    == pytest.approx(time_run(run, HARDWARE, tuple(settings)).step_seconds, rel=1e-12, abs=0))


def test_three_layers_against_brute_force(monkeypatch):
    # One stage of three such layers (layers 0 and 1 one class, layer 2 the topmost) and the module, over nine of the
    # runtime's settings (monkeypatched into the planner: none, normOp, ffAct, ffAct+normOp, ffAct+moeLayer,
    # ffAct+moeLayer+normOp, the two attention-core sets, full): every one of the 729 plans priced by estimate_run /
    # time_run; at limits spread over their peaks (and just above them) the planner's step is the least step of the
    # plans that fit, proven.
    keep = {"none", "normOp", "ffAct", "ffAct+normOp", "ffAct+moeLayer", "ffAct+moeLayer+normOp",
            "attBMM+dropout+headCast+softmax", "attBMM+dropout+headCast+normOp+softmax", "full"}
    subset = [s for s in candidate_settings(REGISTRY.layer_kind("moe", "$"), RUNTIME) if s.describe() in keep]
    assert len(subset) == 9
    every = plan_module.candidate_settings
    monkeypatch.setattr(plan_module, "candidate_settings",
                        lambda kind, rt, **kwargs: subset if kind.name == "moe" else every(kind, rt, **kwargs))
    model = _model(LayerGroup("moe", BODY, count=3),
                   mtp=LayerGroup("mtp", MTPConfig(vocab_size=VOCAB, hidden_size=H, layer=LayerGroup("moe", INNER))))
    parallel = ParallelSpec(seq_len=4096, dp=2, pp=1, global_batch_size=4)
    run = prepare(model, parallel, registry=REGISTRY, runtime=RUNTIME)
    plans = brute_force(run, HARDWARE, subset, 3)
    assert_planned_as_brute_force(model, parallel, HARDWARE, plans, spread_limits(plans))


def test_three_moe_only_layers_against_brute_force():
    # test_mtp_full_recompute.py's module over three small moe_only layers, one stage, all 13 candidate settings of
    # the runtime: 2,197 plans priced by estimate_run / time_run. At limits spread over their peaks (and the all-full
    # peak) the planner's step is the least step of the plans that fit, proven. The search before missed it at 5 of
    # these 42 limits, proven all the same (e.g. 0.0421037078 s for 0.0421036330 s at 173,115,904 bytes: its branch
    # requiring layer 0 to recompute moeLayer held layers 1 and 2 to it too, and one requiring layer 1 required nothing).
    model = _model(LayerGroup("moe_only", SMALL, count=3))
    run = prepare(model, SMALL_PARALLEL, registry=REGISTRY, runtime=RUNTIME)
    candidates = candidate_settings(REGISTRY.layer_kind("moe_only", "$"), RUNTIME)
    assert len(candidates) == 13
    plans = brute_force(run, HARDWARE, candidates, 3)
    peaks = sorted({peak for peak, _ in plans})
    full = estimate_run(run, (Setting(mode="full"),) * 3, HARDWARE).peak_bytes
    limits = [full] + peaks[::max(1, len(peaks) // 40)] + [peaks[-1]]
    assert len(limits) == 42
    assert_planned_as_brute_force(model, SMALL_PARALLEL, HARDWARE, plans, limits)
