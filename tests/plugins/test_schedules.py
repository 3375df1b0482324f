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

# Per-chunk F, B (whole backward less W) and W durations: the zero-bubble paper's equal passes, an
# unequal set, and one whose input gradient outweighs twice the forward (ZB-H2's B - F term).
EQUAL = {"F": 1.0, "B": 1.0, "W": 1.0}
UNEQUAL = {"F": 1.0, "B": 1.25, "W": 0.75}
B_HEAVY = {"F": 0.5, "B": 2.0, "W": 1.5}
# Chunks per stage each built-in runs.
VPP = {"interleaved_1f1b": 2, "dualpipev": 2, "zb_v": 2}
# The schedules priced by running their order (hp_plugins/schedules/_timeline.py): exact for unequal stages too.
RUN_AS_TIMELINE = {"zb_v", "dualpipe", "dualpipev"}


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
    "zb_h2": lambda layout: sim.zb_h2(layout.pp, layout.micro_batches),
    "zb_v": lambda layout: sim.zb_v(layout.pp, layout.micro_batches),
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
        for durations in (EQUAL, UNEQUAL, B_HEAVY):
            timeline = sim.simulate(orders, paths, rank_chunks, durations)
            assert max(timeline.busy) == pytest.approx(layout.micro_batches * per_chunk_runs * sum(durations.values()))
            stages = tuple(_stage(durations, per_chunk_runs) for _ in range(layout.pp))
            assert schedule.pipeline_seconds(layout, stages) == pytest.approx(timeline.makespan, rel=1e-12), (layout, durations)
        # The peak (simulate() asserts that no other moment keeps more, or more whole): what is kept, what awaits W.
        assert tuple(tuple(schedule.in_flight(layout, i)) for i in range(layout.pp)) == timeline.peaks, layout
        awaiting = schedule.awaiting_weight_gradient
        assert tuple(tuple(awaiting(layout, i)) if awaiting else (0,) * len(rank_chunks[i]) for i in range(layout.pp)) \
            == timeline.awaiting, layout
        if name in RUN_AS_TIMELINE:
            # Unequal stages: every rank its own passes, the first and last slower (embedding, output head).
            per_rank = [{k: v * (1.5 if r in (0, layout.pp - 1) else 1 + 0.05 * r) for k, v in UNEQUAL.items()}
                        for r in range(layout.pp)]
            timeline = sim.simulate(orders, paths, rank_chunks, per_rank)
            stages = tuple(_stage(d, per_chunk_runs) for d in per_rank)
            assert schedule.pipeline_seconds(layout, stages) == pytest.approx(timeline.makespan, rel=1e-12), layout
        checked += 1
    assert checked >= 32


def _stage(durations, runs: int) -> StagePasses:
    """A stage running *runs* chunks per micro-batch of the given passes each."""
    return StagePasses(runs * (durations["F"] + durations["B"] + durations["W"]), runs * durations["W"], runs * durations["F"])


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
    assert result.micro_batches == m == {"interleaved_1f1b": 8, "dualpipe": 8, "dualpipev": 8, "zb_h2": 7, "zb_v": 7}.get(name, 4)
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


def _readme_bubble(name: str, p: int, f: float, b: float, w: float) -> float:
    """The DualPipe README's ``(PP/2 - 1)(F&B + B - 3W)`` with ``F&B = F + B``, ``B`` the whole backward
    (``PP`` stages: DualPipe's ``p`` ranks, DualPipeV's ``2p`` chunks), per rank of DualPipeV's two chunks."""
    whole = b + w
    return (p / 2 - 1) * (f + 2 * whole - 3 * w) if name == "dualpipe" else (p - 1) * (f + 2 * whole - 3 * w)


@pytest.mark.parametrize("durations, simulated", [
    ((1, 1, 1), (6, 14)), ((1, 1, 0.5), (7.5, 17.5)), ((2, 1, 1), (12, 28)), ((1, 2, 1), (11, 27)), ((1, 1, 2), (6, 14)),
])
def test_dualpipe_is_priced_by_its_order_where_the_readme_form_departs(durations, simulated):
    # docs/schedules.md's table: p = 8, m = 32; the simulated bubble, which hp now prices, against the README's form,
    # which it equals for equal passes only.
    f, b, w = durations
    for name, copies, bubble in (("dualpipe", 2, simulated[0]), ("dualpipev", 1, simulated[1])):
        schedule = REGISTRY.schedule(name)
        layout = ScheduleLayout(8, VPP.get(name, 1), 32)
        runs = layout.vpp if copies == 1 else 1
        timeline = sim.simulate(*ORDERS[name](layout), {"F": f, "B": b, "W": w})
        t = runs * (f + b + w)
        assert timeline.makespan - 32 * t == pytest.approx(bubble)
        priced = schedule.pipeline_seconds(layout, tuple(StagePasses(t, runs * w, runs * f) for _ in range(8)))
        assert priced - 32 * t == pytest.approx(bubble)
        readme = _readme_bubble(name, 8, f, b, w)
        assert (readme == pytest.approx(bubble)) == (durations in ((1, 1, 1), (1, 1, 0.5)))


def test_zb_h2_and_zb_v_at_pp_4_and_8_micro_batches_by_hand():
    # ZB-H2, F = B = W = 1: stage i runs 2(4 - i) - 1 = 7, 5, 3, 1 forwards before its first B, then one
    # more per W it delays (i): 7, 6, 5, 4 kept at the peak, 0, 1, 2, 3 of them past their B. The last stage
    # starts after the 3 forwards upstream and is never idle after: 3 + 8 * 3 = 27.
    h2, v = REGISTRY.schedule("zb_h2"), REGISTRY.schedule("zb_v")
    layout = ScheduleLayout(4, 1, 8)
    assert [h2.in_flight(layout, i) for i in range(4)] == [(7,), (6,), (5,), (4,)]
    assert [h2.awaiting_weight_gradient(layout, i) for i in range(4)] == [(0,), (1,), (2,), (3,)]
    assert h2.pipeline_seconds(layout, (StagePasses(3.0, 1.0, 1.0),) * 4) == 27.0
    # F = 1, B = 2, W = 1: each B comes back late by B - W over the 3 stages downstream: 3 * 2 + 8 * 4 = 38.
    assert h2.pipeline_seconds(layout, (StagePasses(4.0, 1.0, 1.0),) * 4) == 38.0
    assert sim.simulate(*sim.zb_h2(4, 8), {"F": 1, "B": 2, "W": 1}).makespan == 38.0
    # ZB-V, chunks (0, 7), (1, 6), (2, 5), (3, 4): rank r runs 2(4 - r) - 1 forwards of its first chunk and r of
    # its second before its first B: 7+1, 6+2, 5+3, 4+4 chunk-micro-batches, none past its B; per rank two chunks
    # of 3 each per micro-batch: 8 * 6 + 3 forwards of stagger = 51.
    layout = ScheduleLayout(4, 2, 8)
    assert [v.in_flight(layout, r) for r in range(4)] == [(7, 1), (6, 2), (5, 3), (4, 4)]
    assert v.awaiting_weight_gradient is None
    assert v.pipeline_seconds(layout, (StagePasses(6.0, 2.0, 2.0),) * 4) == 51.0


@pytest.mark.parametrize("name, pp, vpp, gbs, message", [
    ("zb_h2", 4, 1, 6, "the zb_h2 schedule needs micro-batches per step at least 7, got 6"),
    ("zb_v", 4, 2, 6, "the zb_v schedule needs micro-batches per step at least 7, got 6"),
    ("zb_v", 4, 1, 8, "the zb_v schedule runs vpp=2 chunks per stage, got vpp=1"),
])
def test_zero_bubble_layouts_outside_their_range_are_refused_in_one_line(name, pp, vpp, gbs, message, capsys):
    from hp_core.cli import main

    argv = ["estimate", "--model", "llama3-8b", "--pp", str(pp), "--vpp", str(vpp), "--seq-len", "4096",
            "--global-batch-size", str(gbs), "--schedule", name]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err and "$.parallel." in err


def test_dualpipe_sums_the_mirrored_ranks_gradients_once_per_step():
    from hp_core.specs import ParallelSpec

    model = model_from_preset("llama3-8b", REGISTRY)
    h100 = REGISTRY.hardware_preset("h100-sxm").spec
    found = {}
    for name in ("1f1b", "dualpipe"):
        # 8 ranks on one node: pp 4 x dp 2, no ZeRO: the data-parallel group and the mirrored pair are both two
        # ranks on one node, so the pair's all-reduce of a rank's whole gradient is its DP all-reduce again.
        layout = ParallelSpec(pp=4, dp=2, zero=0, seq_len=4096, global_batch_size=16, schedule=name)
        found[name] = step_time(model, layout, registry=REGISTRY, hardware=h100)
    assert REGISTRY.schedule("dualpipe").gradient_sync.ranks == 2
    for stage in found["dualpipe"].stages:
        groups = {g: (total, exposed) for g, total, exposed in stage.communication_by_group}
        assert groups["mirror"][0] == groups["mirror"][1] > 0
        assert groups["mirror"][0] == pytest.approx(groups["dp"][0], rel=1e-12)
        assert stage.data_parallel_seconds == pytest.approx(groups["dp"][1] + groups["mirror"][0], rel=1e-12)
    assert all("mirror" not in {g for g, _, _ in s.communication_by_group} for s in found["1f1b"].stages)


def test_the_order_timeline_prices_pp_16_and_64_micro_batches_in_milliseconds():
    import time

    from hp_plugins.schedules import _timeline

    for name, vpp in (("dualpipe", 1), ("dualpipev", 2), ("zb_v", 2)):
        layout = ScheduleLayout(16, vpp, 64)
        stages = tuple(StagePasses(3.0 + 0.1 * i, 1.0, 1.0) for i in range(16))
        REGISTRY.schedule(name).pipeline_seconds(layout, stages)  # compiles the order once
        start = time.perf_counter()
        for _ in range(20):
            REGISTRY.schedule(name).pipeline_seconds(layout, stages)
        # Generous for a loaded 2-core CI machine; docs/schedules.md states the measured times.
        assert (time.perf_counter() - start) / 20 < 0.05
    assert _timeline._compiled.cache_info().currsize >= 3


def test_zb_h2_prices_zb_h1_s_step_where_w_is_at_most_f_and_b():
    """docs/schedules.md: where W <= min(F, B) ZB-H2's step is ZB-H1's, (p - 1)(F + B - W) + m (F + B + W),
    with more kept; F = 1, B = 2, W = 0.5 at pp 4 and 8 micro-batches: 3 * 2.5 + 8 * 3.5 = 35.5."""
    layout, passes = ScheduleLayout(4, 1, 8), (StagePasses(3.5, 0.5, 1.0),) * 4  # seconds, W, F
    assert REGISTRY.schedule("zb_h1").pipeline_seconds(layout, passes) == 35.5
    assert REGISTRY.schedule("zb_h2").pipeline_seconds(layout, passes) == 35.5
    # The page's example: Llama-3-8B, pp 4, 8 micro-batches on H100, both 2.205 s (2.194 s before rotary embeddings were
    # priced, docs/time.md "Rotary position embedding"; 2.222 s before Hopper's GEMMs were priced
    # by shape, docs/time.md "Hopper GEMMs by shape": its 8,192-token GEMMs take factors of 0.99 to 1.02 and the
    # whole-run factor was refitted from 1.240 to 1.235; 1.883 s before every Hopper GEMM ran at 0.70 / 1.240 of peak,
    # docs/time.md "The fsdp2 fit": the step is its GEMMs, attention and elementwise passes, so only the GEMMs' share
    # grows); peaks 86.00 against 110.64 GiB.
    model = model_from_preset("llama3-8b", REGISTRY)
    found = {name: (step_time(model, {"pp": 4, "seq_len": 8192, "global_batch_size": 8, "schedule": name}, registry=REGISTRY,
                              hardware="h100-sxm"),
                    estimate(model, {"pp": 4, "seq_len": 8192, "global_batch_size": 8, "schedule": name}, registry=REGISTRY))
             for name in ("zb_h1", "zb_h2")}
    assert found["zb_h1"][0].step_seconds == found["zb_h2"][0].step_seconds
    assert round(found["zb_h1"][0].step_seconds, 3) == 2.205
    peaks = {name: round(max(s.memory.peak_bytes for s in e.stages) / 2**30, 2) for name, (_, e) in found.items()}
    assert peaks == {"zb_h1": 86.00, "zb_h2": 110.64}
