"""The built-in pipeline schedules: their closed forms against a discrete-event simulation, and their use.

For every built-in, every ``pp <= 8``, ``vpp <= 4`` and micro-batch count ``<= 32`` where the
schedule is defined, the simulation of its published order (:mod:`pipeline_sim`) gives the
pipeline time the record's ``pipeline_seconds`` states for equal stages, and the micro-batches
each chunk keeps at each stage's peak that its ``in_flight`` states.
"""

from __future__ import annotations

import pytest

import pipeline_sim as sim
from hp_core.api import build_registry, estimate, model_from_preset, step_time
from hp_core.errors import ConfigError
from hp_core.schedules import ScheduleLayout, StagePasses

REGISTRY = build_registry(use_env=False)

# Per-chunk F, B (whole backward less W) and W durations: the zero-bubble paper's equal passes and an unequal set.
EQUAL = {"F": 1.0, "B": 1.0, "W": 1.0}
UNEQUAL = {"F": 1.0, "B": 1.25, "W": 0.75}
# DualPipe's closed form (its README's) holds for equal passes; the others' for any.
EQUAL_ONLY = {"dualpipe", "dualpipev"}
# Chunks per stage each built-in runs.
VPP = {"interleaved_1f1b": 2, "dualpipev": 2}


def _cases(name: str):
    """(layout, simulated orders) of every layout the schedule is defined on, within the bounds."""
    schedule = REGISTRY.schedule(name)
    for pp in range(1, 9):
        for vpp in range(1, 5):
            for m in range(1, 33):
                layout = ScheduleLayout(pp, vpp, m)
                try:
                    schedule.check(layout)
                except ConfigError:
                    continue
                yield layout


ORDERS = {
    "gpipe": lambda layout: sim.gpipe(layout.pp, layout.micro_batches),
    "1f1b": lambda layout: sim.one_f_one_b(layout.pp, layout.micro_batches),
    "interleaved_1f1b": lambda layout: sim.interleaved(layout.pp, layout.vpp, layout.micro_batches),
    "zb_h1": lambda layout: sim.zb_h1(layout.pp, layout.micro_batches),
    "dualpipe": lambda layout: sim.dualpipe(layout.pp, layout.micro_batches),
    "dualpipev": lambda layout: sim.dualpipev(layout.pp, layout.micro_batches),
}


@pytest.mark.parametrize("name", sorted(ORDERS))
def test_closed_forms_agree_with_the_simulation(name):
    schedule = REGISTRY.schedule(name)
    checked = 0
    for layout in _cases(name):
        orders, paths, rank_chunks = ORDERS[name](layout)
        # The chunks each stage runs, as the record states them.
        assert [tuple(schedule.stage_chunks(layout, i)) for i in range(layout.pp)] == [tuple(c) for c in rank_chunks]
        per_chunk_runs = layout.vpp if schedule.model_copies == 1 else 1
        for durations in (EQUAL,) if name in EQUAL_ONLY else (EQUAL, UNEQUAL):
            timeline = sim.simulate(orders, paths, rank_chunks, durations)
            per_micro_batch = per_chunk_runs * (durations["F"] + durations["B"] + durations["W"])
            stages = tuple(StagePasses(per_micro_batch, per_chunk_runs * durations["W"], per_chunk_runs * durations["F"])
                           for _ in range(layout.pp))
            assert max(timeline.busy) == pytest.approx(layout.micro_batches * per_micro_batch)
            assert schedule.pipeline_seconds(layout, stages) == pytest.approx(timeline.makespan, rel=1e-12), (layout, durations)
        assert tuple(tuple(schedule.in_flight(layout, i)) for i in range(layout.pp)) == timeline.peaks, layout
        checked += 1
    assert checked >= 32


def test_every_built_in_is_simulated():
    assert {s.name for s in REGISTRY.schedules} == set(ORDERS)


# ----------------------------------------------------------------------------- the schedules in use


def test_hp_plugins_lists_the_schedules(capsys):
    import json

    from hp_core.cli import main

    assert main(["plugins", "--json"]) == 0
    listed = {s["name"]: s for s in json.loads(capsys.readouterr().out)["schedules"]}
    assert set(listed) >= set(ORDERS)
    assert listed["1f1b"]["plugin"] == "hp_plugins.schedules.classic"
    assert listed["1f1b"]["description"].startswith("forward/backward; ")


@pytest.mark.parametrize("name", sorted(ORDERS))
def test_hp_estimate_runs_every_built_in(name, capsys):
    import json

    from hp_core.cli import main

    vpp = VPP.get(name, 1)
    argv = ["estimate", "--model", "llama3-8b", "--dp", "1", "--pp", "4", "--vpp", str(vpp), "--seq-len", "4096",
            "--global-batch-size", "16", "--hardware", "h100-sxm", "--schedule", name, "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["layout"]["schedule"] == name
    assert doc["time"]["provenance"]["schedule"] == name
    assert doc["layout"]["global_batch_size"] == 16


@pytest.mark.parametrize("name", sorted(ORDERS))
def test_without_a_global_batch_the_micro_batches_are_the_schedules_default(name):
    from hp_core.specs import ParallelSpec

    model = model_from_preset("llama3-8b", REGISTRY)
    vpp = VPP.get(name, 1)
    result = estimate(model, ParallelSpec(pp=4, vpp=vpp, dp=2, seq_len=4096, schedule=name), registry=REGISTRY)
    m = REGISTRY.schedule(name).default_micro_batches(4, vpp)
    assert result.micro_batches == m == {"interleaved_1f1b": 8, "dualpipe": 8, "dualpipev": 8}.get(name, 4)
    assert result.layout["global_batch_size"] == 2 * m


def test_an_unknown_schedule_is_one_line_naming_the_field(capsys):
    from hp_core.cli import main

    assert main(["estimate", "--model", "llama3-8b", "--pp", "2", "--seq-len", "4096", "--schedule", "zigzag"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "$.parallel.schedule: unknown pipeline schedule 'zigzag'" in err


def test_gpipe_keeps_every_micro_batch_and_1f1b_p_minus_i():
    model = model_from_preset("llama3-8b", REGISTRY)
    kept = {}
    for name in ("gpipe", "1f1b"):
        from hp_core.specs import ParallelSpec

        layout = ParallelSpec(pp=4, seq_len=4096, global_batch_size=8, schedule=name)
        kept[name] = [s.micro_batches_in_flight for s in estimate(model, layout, registry=REGISTRY).stages]
    assert kept == {"gpipe": [8, 8, 8, 8], "1f1b": [4, 3, 2, 1]}


def test_a_third_party_schedule_changes_the_estimate_and_the_step_time():
    import slack_schedule

    from hp_core.specs import ParallelSpec

    registry = build_registry(plugins=[slack_schedule], use_env=False)
    model = model_from_preset("llama3-8b", registry)
    h100 = registry.hardware_preset("h100-sxm").spec
    found = {}
    for name in ("1f1b", "slack-1f1b"):
        layout = ParallelSpec(pp=2, seq_len=4096, global_batch_size=8, schedule=name)
        memory = estimate(model, layout, registry=registry)
        time = step_time(model, layout, registry=registry, hardware=h100)
        found[name] = ([s.micro_batches_in_flight for s in memory.stages], memory, time)
    assert found["1f1b"][0] == [2, 1]
    assert found["slack-1f1b"][0] == [3, 2]
    # One more micro-batch of every layer's activations on stage 0: exactly stage 0's activations per micro-batch more.
    plain, slack = found["1f1b"][1].stages[0], found["slack-1f1b"][1].stages[0]
    assert slack.memory.activations_bytes * 2 == plain.memory.activations_bytes * 3
    # Its pipeline: (m + p) t_max against 1F1B's m t_max + (sum t - t_max).
    t = [s.micro_batch_seconds for s in found["1f1b"][2].stages]
    assert found["slack-1f1b"][2].bubble_seconds == pytest.approx(2 * max(t))
    assert found["1f1b"][2].bubble_seconds == pytest.approx(sum(t) - max(t))


def test_the_search_takes_schedules_as_a_dimension():
    from hp_core.api import search
    from hp_core.specs import ParallelSpec

    model = model_from_preset("llama3-8b", REGISTRY).with_body_layers(8, REGISTRY.kinds_placed("body"))
    h100 = REGISTRY.hardware_preset("h100-sxm").spec
    common = dict(registry=REGISTRY, devices=8, hardware=h100, global_batch_size=16, seq_len=1024, runtime="generic",
                  top=1000, fixed={"pp": 4, "vpp": 1, "zero": 1, "micro_batch_size": 1})
    plain = search(model, **common)
    one = search(model, schedules=["1f1b"], **common)
    # 1F1B named is the default search at vpp 1: the same candidates in the same order.
    assert [(c.layout.key, c.step_seconds) for c in one.top] == [(c.layout.key, c.step_seconds) for c in plain.top]
    both = search(model, schedules=["1f1b", "zb_h1", "dualpipe"], **common)
    assert {c.layout.schedule for c in both.top} == {"1f1b", "zb_h1", "dualpipe"}
    assert both.considered == 3 * plain.considered
    assert [c.step_seconds for c in both.top] == sorted(c.step_seconds for c in both.top)
    # Each candidate's step time is the step time of its layout under its schedule.
    for candidate in both.top[:4]:
        layout = candidate.layout
        parallel = layout.parallel(1024, 16)
        assert parallel.schedule == layout.schedule
        assert step_time(model, parallel, registry=REGISTRY, hardware=h100, recompute=candidate.recompute).step_seconds \
            == pytest.approx(candidate.step_seconds)
    with pytest.raises(ConfigError, match=r"^--schedules: unknown pipeline schedule 'nope'"):
        search(model, schedules=["nope"], **common)


@pytest.mark.parametrize("durations, bubbles", [
    ((1, 1, 1), (6, 6, 14, 14)), ((1, 1, 0.5), (7.5, 7.5, 17.5, 17.5)), ((2, 1, 1), (12, 9, 28, 21)),
    ((1, 2, 1), (11, 12, 27, 28)), ((1, 1, 2), (6, 3, 14, 7)),
])
def test_where_dualpipes_closed_form_departs_from_its_simulation(durations, bubbles):
    # The table of docs/schedules.md: p = 8, m = 32; simulated and closed-form bubbles of DualPipe and DualPipeV.
    f, b, w = durations
    found = []
    for name, copies in (("dualpipe", 2), ("dualpipev", 1)):
        schedule = REGISTRY.schedule(name)
        vpp = VPP.get(name, 1)
        layout = ScheduleLayout(8, vpp, 32)
        runs = vpp if copies == 1 else 1
        timeline = sim.simulate(*ORDERS[name](layout), {"F": f, "B": b, "W": w})
        t = runs * (f + b + w)
        closed = schedule.pipeline_seconds(layout, tuple(StagePasses(t, runs * w, runs * f) for _ in range(8)))
        found += [timeline.makespan - 32 * t, closed - 32 * t]
    assert found == pytest.approx(list(bubbles))
