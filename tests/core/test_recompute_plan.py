"""The recompute planner is exact: it equals brute force over every assignment of every setting.

Brute force prices each assignment with the stage planner's own peak
(:func:`hp_core.engine.stage.plan_stage`), the function every estimate uses.
"""

from __future__ import annotations

import itertools
import math

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hp_core.engine.recompute.solver import LayerOption, VariableLayer, pareto_front, solve_stage
from hp_core.specs import ParallelSpec, PrecisionSpec, Setting
from hp_core.engine.stage import PlacedLayer, StageInputs, plan_stage
from hp_core.costs import ActivationTerm, LayerCost, ParamCount
from hp_plugins.optimizers.adam import hp_optimizers as adam_optimizers
from hp_plugins.schedules.classic import hp_schedules as classic_schedules
from hp_plugins.schedules.zero_bubble import hp_schedules as zero_bubble_schedules

BUILTIN_SCHEDULES = {s.name: s for s in (*classic_schedules(), *zero_bubble_schedules())}

# AdamW, the built-in plugin's record: the stage planner asks the run's optimizer what it keeps.
ADAMW = next(o for o in adam_optimizers() if o.name == "adamw")

SWITCHES = ("softmax", "ffAct")


def _cost(draw, name: str) -> LayerCost:
    ints = st.integers(0, 40)
    terms = (
        ActivationTerm("input", draw(st.integers(1, 10))),
        ActivationTerm("softmax_out", draw(ints), "softmax"),
        ActivationTerm("act", draw(ints), "ffAct"),
        ActivationTerm("rest", draw(ints)),
    )
    return LayerCost(
        params=(ParamCount(f"{name}_w", "dense", draw(st.integers(0, 50)), False),),
        activations=terms,
        input_bytes=terms[0].bytes,
        working_bytes=draw(ints),
        buffers_per_micro_batch_bytes=draw(st.integers(0, 3)),
        # What a micro-batch awaiting its W keeps (zero-bubble schedules): unstated, less or more than it keeps.
        weight_gradient_bytes=draw(st.one_of(st.none(), st.integers(0, 80))),
    )


def _options(draw, kind: str, cost: LayerCost) -> tuple[LayerOption, ...]:
    found = []
    for size in range(len(SWITCHES) + 1):
        for combo in itertools.combinations(SWITCHES, size):
            setting = Setting(mode="switches", switches=frozenset(combo)) if combo else Setting()
            found.append(LayerOption(setting, PlacedLayer.make(kind, cost, False, frozenset(combo), setting.describe()),
                                     draw(st.integers(0, 30))))
    full = Setting(mode="full")
    found.append(LayerOption(full, PlacedLayer.make(kind, cost, True, frozenset(), "full"), draw(st.integers(0, 30))))
    share = draw(st.sampled_from((0.0, 0.5)))
    if share:
        base = found[0]
        offloaded = Setting(offload=share)
        found.append(LayerOption(offloaded, PlacedLayer.make(kind, cost, False, frozenset(), offloaded.describe(), share),
                                 base.seconds + draw(st.integers(0, 10))))
    return tuple(found)


@st.composite
def instances(draw):
    schedule = draw(st.sampled_from(("1f1b", "interleaved_1f1b", "zb_h1", "zb_h2", "zb_v")))
    pp = draw(st.integers(1, 3)) if schedule == "1f1b" else draw(st.integers(2, 3))
    vpp = 2 if schedule in ("interleaved_1f1b", "zb_v") else 1
    m = draw(st.integers(1, 6)) * (pp if schedule == "interleaved_1f1b" else 1)
    if schedule.startswith("zb"):  # ZB-H1 needs m >= p, ZB-H2 and ZB-V m >= 2p - 1
        m = draw(st.integers(pp if schedule == "zb_h1" else 2 * pp - 1, 8))
    stage = draw(st.integers(0, pp - 1))
    zero = draw(st.sampled_from((0, 2)))
    deferred = draw(st.booleans())
    parallel = ParallelSpec(dp=2, pp=pp, vpp=vpp, seq_len=8, schedule=schedule, zero=zero)
    inputs = StageInputs(parallel, zero, PrecisionSpec(), m, BUILTIN_SCHEDULES[schedule], draw(st.integers(0, 20)), deferred,
                         optimizer=ADAMW)
    groups = draw(st.integers(1, 3))
    costs = [_cost(draw, f"k{g}") for g in range(groups)]
    options = [_options(draw, f"k{g}", costs[g]) for g in range(groups)]
    sizes = [1] * vpp
    for _ in range(draw(st.integers(0, 4 - vpp))):
        sizes[draw(st.integers(0, vpp - 1))] += 1
    chunks, body, index = [], [], 0
    for size in sizes:
        chunk = []
        for _ in range(size):
            g = draw(st.integers(0, groups - 1))
            chunk.append(VariableLayer(index, g, options[g]))
            index += 1
        chunks.append(chunk)
        body.append(range(index - size, index))
    if draw(st.booleans()):  # an output head on top of the last chunk
        head = _cost(draw, "head")
        chunks[-1].append(PlacedLayer.make("head", head, False, frozenset(), "none"))
    if draw(st.booleans()):  # an embedding under the first chunk
        emb = _cost(draw, "emb")
        chunks[0].insert(0, PlacedLayer.make("emb", emb, False, frozenset(), "none"))
    return stage, chunks, body, inputs


def _brute(stage, chunks, body, inputs, limit):
    variables = [layer for chunk in chunks for layer in chunk if isinstance(layer, VariableLayer)]
    best = (math.inf, None)
    least = math.inf
    for combo in itertools.product(*(layer.options for layer in variables)):
        chosen = {id(layer): option for layer, option in zip(variables, combo)}
        placed = [[chosen[id(x)].placed if isinstance(x, VariableLayer) else x for x in chunk] for chunk in chunks]
        peak = plan_stage(stage, placed, body, (), inputs).peak_bytes
        least = min(least, peak)
        if peak <= limit:
            seconds = sum(option.seconds for option in combo)
            best = min(best, (seconds, peak), key=lambda pair: pair[0])
    return best[0], least


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.floats(0.0, 1.3))
def test_the_planner_equals_brute_force(instance, position):
    stage, chunks, body, inputs = instance
    variables = [layer for chunk in chunks for layer in chunk if isinstance(layer, VariableLayer)]
    peaks = []
    for pick in (0, -1):
        chosen = {id(layer): layer.options[pick] for layer in variables}
        placed = [[chosen[id(x)].placed if isinstance(x, VariableLayer) else x for x in chunk] for chunk in chunks]
        peaks.append(plan_stage(stage, placed, body, (), inputs).peak_bytes)
    low, high = min(peaks), max(peaks)
    limit = int(low * 0.9 + (high * 1.05 - low * 0.9) * position)
    expected, least = _brute(stage, chunks, body, inputs, limit)
    solution = solve_stage(stage, chunks, body, inputs, limit)
    if expected == math.inf:
        assert not solution.fits
        assert solution.shortfall_bytes == least - limit
        assert solution.estimate.peak_bytes == least
    else:
        assert solution.fits
        assert solution.seconds == pytest.approx(expected, rel=1e-12, abs=1e-12)
        assert solution.estimate.peak_bytes <= limit


def test_the_front_drops_what_keeps_more_and_runs_slower():
    cost = LayerCost(params=(), activations=(ActivationTerm("x", 10), ActivationTerm("s", 6, "softmax")),
                     input_bytes=10, working_bytes=0)
    plain = LayerOption(Setting(), PlacedLayer.make("k", cost, False, frozenset(), "none"), 1.0)
    soft = LayerOption(Setting(mode="switches", switches={"softmax"}),
                       PlacedLayer.make("k", cost, False, frozenset({"softmax"}), "softmax"), 2.0)
    slow_soft = LayerOption(Setting(mode="selective"), soft.placed, 3.0)
    full = LayerOption(Setting(mode="full"), PlacedLayer.make("k", cost, True, frozenset(), "full"), 2.5)
    # full keeps 10 like softmax, and is slower: softmax dominates it, and the slower copy of itself.
    assert pareto_front([plain, soft, slow_soft, full]) == (plain, soft)
    # Faster than everything with the least kept, full dominates them all.
    quick = attrs.evolve(full, seconds=0.5)
    assert pareto_front([plain, soft, slow_soft, quick]) == (quick,)


def _two_layer_stage(limit):
    """Two layers keeping 10 bytes each (2 of them the input, 8 dropped by softmax), nothing else on the stage."""
    cost = LayerCost(params=(), activations=(ActivationTerm("x", 2), ActivationTerm("s", 8, "softmax")),
                     input_bytes=2, working_bytes=0)
    none = LayerOption(Setting(), PlacedLayer.make("k", cost, False, frozenset(), "none"), 1.0)
    full = LayerOption(Setting(mode="full"), PlacedLayer.make("k", cost, True, frozenset(), "full"), 3.0)
    layers = [VariableLayer(0, "k", (none, full)), VariableLayer(1, "k", (none, full))]
    parallel = ParallelSpec(seq_len=8, schedule="1f1b")
    inputs = StageInputs(parallel, 0, PrecisionSpec(), 1, BUILTIN_SCHEDULES["1f1b"], 0, optimizer=ADAMW)
    return solve_stage(0, [layers], [range(2)], inputs, limit)


def test_hand_derived_the_lower_layer_is_recomputed_where_the_walk_makes_the_top_one_cost_more():
    # One micro-batch in flight. Both plain: 10 + 10 kept, no working set: peak 20.
    assert _two_layer_stage(20).choices == (_two_layer_stage(20).choices[0],) * 2
    assert _two_layer_stage(20).seconds == 2.0
    # Top layer full: 10 + 2 kept, its backward rebuilds 8 while nothing above freed anything: 12 + 8 = 20.
    # Bottom layer full: 2 + 10 kept; its backward (8) runs after the top freed 10: 12 + max(0, 8 - 10) = 12.
    plan = _two_layer_stage(12)
    assert [c.setting.mode for c in plan.choices] == ["full", "none"]
    assert plan.seconds == 4.0 and plan.estimate.peak_bytes == 12
    # Both full: 2 + 2 kept, the top's backward holds 8: peak 12 as well, so 11 bytes fit nothing.
    short = _two_layer_stage(11)
    assert not short.fits and short.shortfall_bytes == 1 and short.estimate.peak_bytes == 12


def test_the_layers_of_a_group_share_their_options():
    # The solver reads a group's options from its first layer (VariableLayer): a layer of the group handed others
    # (the MTP covering search's requirement on one layer, plan.py, before it made that layer a group of its own)
    # would be solved with its group's, so it is refused.
    cost = LayerCost(params=(), activations=(ActivationTerm("x", 2), ActivationTerm("s", 8, "softmax")),
                     input_bytes=2, working_bytes=0)
    none = LayerOption(Setting(), PlacedLayer.make("k", cost, False, frozenset(), "none"), 1.0)
    full = LayerOption(Setting(mode="full"), PlacedLayer.make("k", cost, True, frozenset(), "full"), 3.0)
    inputs = StageInputs(ParallelSpec(seq_len=8, schedule="1f1b"), 0, PrecisionSpec(), 1, BUILTIN_SCHEDULES["1f1b"], 0,
                         optimizer=ADAMW)
    with pytest.raises(ValueError, match="layer 1 of group 'k': options differ from its group's"):
        solve_stage(0, [[VariableLayer(0, "k", (none, full)), VariableLayer(1, "k", (full,))]], [range(2)], inputs, 20)
    # Equal options given apart are one group's.
    assert solve_stage(0, [[VariableLayer(0, "k", (none, full)), VariableLayer(1, "k", [none, full])]], [range(2)],
                       inputs, 12).seconds == 4.0


from hp_core.api import build_registry, estimate, model_from_preset, plan_recompute  # noqa: E402
from hp_core.specs import RecomputeSpec  # noqa: E402
from hp_core.api import step_time  # noqa: E402

REGISTRY = build_registry()
H100 = REGISTRY.hardware_preset("h100-sxm").spec
LLAMA = model_from_preset("llama3-70b", REGISTRY).with_body_layers(16, REGISTRY.kinds_placed("body"))
LAYOUT = ParallelSpec(tp=8, sp=True, pp=2, seq_len=8192, global_batch_size=16)


def test_a_plan_fits_is_no_slower_than_full_recompute_and_matches_estimate_and_step_time():
    # Nothing recomputed peaks at 21.5 GiB, everything recomputed at 18.1 GiB.
    memory = attrs.evolve(H100, memory_bytes=20 * 2**30)
    plan = plan_recompute(LLAMA, LAYOUT, registry=REGISTRY, hardware=memory, runtime="megatron", reserve_bytes=2**30)
    assert plan.fits and plan.limit_bytes == 19 * 2**30
    none = estimate(LLAMA, LAYOUT, registry=REGISTRY, runtime="megatron")
    assert none.peak_bytes > plan.limit_bytes  # it needs recompute
    again = estimate(LLAMA, LAYOUT, registry=REGISTRY, runtime="megatron", recompute=plan.recompute)
    assert [s.peak_bytes for s in again.stages] == [s.peak_bytes for s in plan.stages]
    assert all(s.peak_bytes <= plan.limit_bytes for s in plan.stages)
    full = step_time(LLAMA, LAYOUT, registry=REGISTRY, hardware=memory, runtime="megatron", recompute=RecomputeSpec.uniform("full"))
    assert plan.plan.step_seconds <= full.step_seconds
    # Every stage's settings cover its layers, and the ranges say the same.
    for stage in plan.stages:
        assert [plan.recompute.setting_of(i) for i in stage.layers] == list(stage.settings)
        assert sum(last - first + 1 for first, last, _ in stage.ranges) == len(stage.layers)
    megatron = REGISTRY.runtime("megatron")
    assert all(s.mode == "full" or megatron.executes(s.switches) for st_ in plan.stages for s in st_.settings)


def test_unrestricted_reports_both_and_is_no_slower():
    memory = attrs.evolve(H100, memory_bytes=20 * 2**30)
    plan = plan_recompute(LLAMA, LAYOUT, registry=REGISTRY, hardware=memory, runtime="megatron", unrestricted=True)
    assert plan.unrestricted is not None and not plan.unrestricted.restricted and plan.plan.restricted
    assert plan.unrestricted.step_seconds <= plan.plan.step_seconds * (1 + 1e-12)


def test_interleaved_plans_fit_and_nothing_fits_reports_the_shortfall():
    layout = attrs.evolve(LAYOUT, vpp=2, schedule="interleaved_1f1b", global_batch_size=8)
    memory = attrs.evolve(H100, memory_bytes=22 * 2**30)  # 27.6 GiB with nothing recomputed, 17.8 with everything
    plan = plan_recompute(LLAMA, layout, registry=REGISTRY, hardware=memory, runtime="generic")
    assert plan.fits and all(s.peak_bytes <= memory.memory_bytes for s in plan.stages)
    tiny = attrs.evolve(H100, memory_bytes=16 * 2**30)
    none = plan_recompute(LLAMA, layout, registry=REGISTRY, hardware=tiny, runtime="generic")
    assert not none.fits
    worst = max(none.stages, key=lambda s: s.shortfall_bytes)
    assert worst.shortfall_bytes == worst.peak_bytes - tiny.memory_bytes > 0
    assert "over the limit" in worst.reason
    assert all(s.mode == "full" for s in worst.settings)


def test_offload_is_planned_when_asked_and_refused_without_a_host_link():
    memory = attrs.evolve(H100, memory_bytes=22 * 2**30)
    plain = plan_recompute(LLAMA, LAYOUT, registry=REGISTRY, hardware=memory, runtime="generic")
    offloaded = plan_recompute(LLAMA, LAYOUT, registry=REGISTRY, hardware=memory, runtime="generic", offload=(0.25, 0.5))
    assert offloaded.fits and offloaded.plan.step_seconds <= plain.plan.step_seconds * (1 + 1e-12)
    # A PCIe-class link hides a share of each layer's bytes behind its compute: the plan uses it.
    assert any(s.offload for stage in offloaded.stages for s in stage.settings)
    assert offloaded.plan.step_seconds < plain.plan.step_seconds
    bare = attrs.evolve(memory, host_link_bandwidth_bytes_per_second=None)
    from hp_core.errors import ConfigError

    with pytest.raises(ConfigError, match="host_link_bandwidth"):
        plan_recompute(LLAMA, LAYOUT, registry=REGISTRY, hardware=bare, offload=(0.5,))


def test_the_json_plan_reads_back_as_a_config_recompute_section():
    from hp_core.io.convert import ConfigFile, structure
    from hp_core.io.recompute_output import describe_ranges, recompute_plan_to_json

    memory = attrs.evolve(H100, memory_bytes=20 * 2**30)
    plan = plan_recompute(LLAMA, LAYOUT, registry=REGISTRY, hardware=memory, runtime="generic", offload=(0.5,))
    doc = recompute_plan_to_json(plan)
    config = structure({"model": "llama3-8b", "parallel": {"seq_len": 8}, "recompute": doc["plan"]["recompute"]},
                       ConfigFile, REGISTRY)
    for index in range(16):
        assert config.recompute.setting_of(index) == plan.recompute.setting_of(index)
    assert describe_ranges(((0, 3, Setting(mode="full")), (4, 4, Setting(offload=0.5)))) == "0-3 full, 4 none@offload=0.5"


def test_the_awaiting_w_point_is_the_moment_holding_most_not_keeping_most():
    """ZB-V at pp 3, stage 1, 5 micro-batches: the schedule's moments between a B and its W are (counts, waits)
    ((3, 1), (1, 1)), ((3, 1), (2, 1)), ((4, 2), (0, 1)) and ((5, 1), (1, 0)). Chunk 0's layer keeps 1 byte a whole
    micro-batch and 10 awaiting W; chunk 1's keeps 1 and 0 awaiting W, and holds a 20-byte buffer per micro-batch in
    flight. Activations by moment: 2 + 10 = 12, 1 + 20 = 21, 4 + 1 = 5, 4 + 10 + 1 = 15; with the buffers (20 a
    chunk-1 micro-batch): 32, 41, 45, 35. The point is the third moment (45), not the second, which keeps most
    (21): against the same stage without the buffer (whose point is the second moment's 21) it holds 24 more.
    A Hypothesis example of test_the_planner_equals_brute_force found it: the planner refused a plan the
    estimate, taking the moment that kept most, said fit."""
    def stage_peak(buffer: int) -> int:
        def layer(name: str, waiting: int, per_micro_batch: int) -> PlacedLayer:
            cost = LayerCost(params=(), activations=(ActivationTerm("x", 1),), input_bytes=1, working_bytes=0,
                             buffers_per_micro_batch_bytes=per_micro_batch, weight_gradient_bytes=waiting)
            return PlacedLayer.make(name, cost, False, frozenset(), "none")

        parallel = ParallelSpec(dp=2, pp=3, vpp=2, seq_len=8, schedule="zb_v", zero=2)
        inputs = StageInputs(parallel, 2, PrecisionSpec(), 5, BUILTIN_SCHEDULES["zb_v"], 0, False, optimizer=ADAMW)
        assert inputs.stage_plan(1)[1] == (4, 2)
        estimate = plan_stage(1, [[layer("a", 10, 0)], [layer("b", 0, buffer)]], [range(0, 1), range(1, 2)], (), inputs)
        return estimate.peak_points["awaiting_w"]

    assert stage_peak(20) - stage_peak(0) == 24
