"""Switch profiles price every setting of every built-in kind as the stage planner evaluates it directly."""

from __future__ import annotations

import itertools

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hp_core.api import build_registry, layer_context, model_from_preset, with_sublayers
from hp_core.engine.prepare import _evaluate
from hp_core.errors import ConfigError
from hp_core.engine.recompute.profile import candidate_settings, switch_profile
from hp_core.specs import ParallelSpec, PrecisionSpec, Setting
from hp_core.engine.stage import PlacedLayer
from hp_core.engine.timing import layer_pricer, offload_seconds
from hp_core.costs import LayerCost

REGISTRY = build_registry()
HARDWARE = REGISTRY.hardware_preset("h100-sxm").spec
# A model per built-in body kind: dense (Llama), moe (Mixtral), mla and mla_moe (DeepSeek-V3).
GROUPS = {}
for preset in ("llama3-8b", "mixtral-8x7b", "deepseek-v3"):
    for group in model_from_preset(preset, REGISTRY).layers:
        GROUPS.setdefault(group.kind, group)
BODY_KINDS = ("dense", "moe", "mla", "mla_moe")


def _layer(kind_name: str, parallel: ParallelSpec, attention: str, runtime: str = "generic"):
    rt = REGISTRY.runtime(runtime)
    kind = REGISTRY.layer_kind(kind_name, "$")
    context = with_sublayers(layer_context(parallel, PrecisionSpec(), attention, 1, rt.traits), REGISTRY)
    config = GROUPS[kind_name].config
    cost = _evaluate(kind, config, context, "$")
    pricer = layer_pricer(parallel, hardware=HARDWARE, timing=rt.timing, precision=PrecisionSpec(), attention=attention)
    return kind, cost, config, context, pricer, rt


def _subsets(switches):
    return [frozenset(c) for n in range(len(switches) + 1) for c in itertools.combinations(switches, n)]


@pytest.mark.parametrize("kind_name", BODY_KINDS)
@settings(max_examples=10, deadline=None)
@given(
    tp=st.sampled_from((1, 2)),
    sp=st.booleans(),
    attention=st.sampled_from(("flash", "eager")),
    runtime=st.sampled_from(("generic", "megatron")),
    share=st.sampled_from((0.0, 0.25)),
)
def test_every_setting_prices_as_the_layer_evaluated_directly(kind_name, tp, sp, attention, runtime, share):
    moe = "moe" in kind_name
    parallel = ParallelSpec(tp=tp, sp=(sp or moe) and tp > 1, seq_len=4096, ep=2 if moe else 1, dp=2)
    kind, cost, config, context, pricer, rt = _layer(kind_name, parallel, attention, runtime)
    profile = switch_profile(kind, cost, config, context, pricer, implicit=rt.implicit_recompute)
    implicit = rt.implicit_recompute & frozenset(kind.switches)
    subsets = _subsets(kind.switches)
    # Seven switches and one of ffFc1 (dense) or moeLayer (moe): eight; with attUp (mla, mla_moe) nine.
    assert len(subsets) == 2 ** (7 + ("attUp" in kind.switches) + ("ffFc1" in kind.switches) + ("moeLayer" in kind.switches))
    for switches in subsets + ["full"]:
        setting = Setting(mode="full") if switches == "full" else Setting(mode="switches", switches=switches)
        setting = attrs.evolve(setting, offload=share)
        priced = profile.price(setting)
        full = switches == "full"
        direct = PlacedLayer.make(kind.name, cost, full, frozenset() if full else switches | implicit, "", share)
        assert priced.kept_bytes == direct.kept_bytes
        assert priced.warmup_working_bytes == direct.backward_working_bytes
        assert priced.last_backward_working_bytes == direct.backward_working_bytes
        assert priced.per_micro_batch_bytes == direct.kept_bytes + cost.buffers_per_micro_batch_bytes
        assert priced.once_bytes == cost.buffers_once_bytes


def test_memory_adds_up_over_switches_and_time_is_priced_per_setting():
    parallel = ParallelSpec(tp=2, sp=True, seq_len=4096)
    kind, cost, config, context, pricer, _ = _layer("dense", parallel, "eager")
    profile = switch_profile(kind, cost, config, context, pricer)
    pair = frozenset({"softmax", "attBMM"})
    both = profile.price(Setting(mode="switches", switches=pair))
    plain, soft, bmm = profile.plain, profile.alone["softmax"], profile.alone["attBMM"]
    # Memory: plain less what each switch alone drops.
    assert both.kept_bytes == plain.kept_bytes - (plain.kept_bytes - soft.kept_bytes) - (plain.kept_bytes - bmm.kept_bytes)
    # Time: one re-run of the attention core rebuilds both, so the pair costs less than the two alone.
    extra = both.seconds.recompute_seconds - plain.seconds.recompute_seconds
    alone = (soft.seconds.recompute_seconds - plain.seconds.recompute_seconds) + (
        bmm.seconds.recompute_seconds - plain.seconds.recompute_seconds)
    assert 0 < extra < alone
    # Full recompute keeps only the input and re-runs the whole forward.
    assert profile.full.kept_bytes == cost.input_bytes
    assert profile.full.seconds.recompute_seconds == pytest.approx(profile.full.seconds.forward_seconds)


def test_a_setting_measured_whole_overrides_additivity():
    parallel = ParallelSpec(seq_len=1024)
    kind, cost, config, context, pricer, _ = _layer("dense", parallel, "flash")
    measured = attrs.evolve(cost, measured=((frozenset({"softmax", "ffAct"}), 12345),))
    profile = switch_profile(kind, measured, config, context, pricer)
    assert profile.price(Setting(mode="switches", switches={"softmax", "ffAct"})).kept_bytes == 12345
    direct = PlacedLayer.make("dense", measured, False, frozenset({"softmax", "ffAct"}), "")
    assert direct.kept_bytes == 12345


def test_candidates_follow_what_the_runtime_executes():
    dense = REGISTRY.layer_kind("dense", "$")
    megatron = REGISTRY.runtime("megatron")
    restricted = candidate_settings(dense, megatron)
    everything = candidate_settings(dense, megatron, unrestricted=True)
    assert len(everything) == 257  # the 2**8 subsets of the dense kind's eight switches (ffFc1 included), and full
    assert all(s.mode == "full" or megatron.executes(s.switches) for s in restricted)
    assert len(restricted) < len(everything)
    with_offload = candidate_settings(dense, megatron, offload=(0.5,))
    assert len(with_offload) == 2 * len(restricted)
    assert {s.offload for s in with_offload} == {0.0, 0.5}


def test_offload_costs_only_the_copy_time_it_cannot_hide():
    # 64 GB/s link: 32 GB take 0.5 s each way; 0.3 s of forward and 0.6 s of backward hide 0.3 and 0.5.
    assert offload_seconds(32e9, 64e9, 0.3, 0.6) == pytest.approx(0.2)
    assert offload_seconds(0, 64e9, 0.0, 0.0) == 0.0
    parallel = ParallelSpec(seq_len=4096)
    kind, cost, config, context, pricer, _ = _layer("dense", parallel, "flash")
    profile = switch_profile(kind, cost, config, context, pricer)
    half = profile.price(Setting(offload=0.5))
    assert half.offloaded_bytes == cost.kept_bytes // 2
    assert half.kept_bytes == cost.kept_bytes - cost.kept_bytes // 2
    copy = half.offloaded_bytes / HARDWARE.host_link_bandwidth_bytes_per_second
    s = half.seconds
    assert s.offload_seconds == pytest.approx(max(0, copy - s.forward_seconds) + max(0, copy - s.backward_with_recompute_seconds))


def test_offload_needs_a_stated_host_link():
    parallel = ParallelSpec(seq_len=1024)
    bare = attrs.evolve(HARDWARE, host_link_bandwidth_bytes_per_second=None)
    rt = REGISTRY.runtime("generic")
    pricer = layer_pricer(parallel, hardware=bare, timing=rt.timing, precision=PrecisionSpec(), attention="flash")
    kind, cost, config, context, _, _ = _layer("dense", parallel, "flash")
    profile = switch_profile(kind, cost, config, context, pricer)
    with pytest.raises(ConfigError, match="host_link_bandwidth"):
        profile.price(Setting(offload=0.5))
    assert isinstance(profile.price(Setting()).kept_bytes, int)
    assert isinstance(cost, LayerCost)


def test_offload_reads_from_config_and_lowers_the_estimate():
    from hp_core.api import estimate
    from hp_core.io.convert import ConfigFile, structure
    from hp_core.specs import RecomputeSpec

    config = structure({"model": "llama3-8b", "parallel": {"seq_len": 4096},
                        "recompute": {"default": {"mode": "none", "offload": 0.5},
                                      "layers": {"0-3": {"mode": ["softmax", "ffAct"], "offload": 0.25}}}},
                       ConfigFile, REGISTRY)
    assert config.recompute.default == Setting(offload=0.5)
    assert config.recompute.layers[0][2] == Setting(mode="switches", switches={"softmax", "ffAct"}, offload=0.25)
    assert Setting(offload=0.5).describe() == "none@offload=0.5"
    with pytest.raises(ValueError, match="offload"):
        Setting(offload=1.5)
    with pytest.raises(ValueError, match="mode"):
        Setting.parse({"offload": 0.5})
    model = model_from_preset("llama3-8b", REGISTRY)
    parallel = ParallelSpec(seq_len=4096)
    plain = estimate(model, parallel, registry=REGISTRY)
    half = estimate(model, parallel, registry=REGISTRY, recompute=RecomputeSpec(default=Setting(offload=0.5)))
    assert half.stages[0].memory.activations_bytes < plain.stages[0].memory.activations_bytes


def test_step_time_prices_offload_as_the_profile_does():
    from hp_core.specs import RecomputeSpec
    from hp_core.api import step_time

    model = model_from_preset("llama3-8b", REGISTRY).with_body_layers(4, REGISTRY.kinds_placed("body"))
    parallel = ParallelSpec(seq_len=8192, micro_batch_size=4)
    kind, cost, config, context, pricer, _ = _layer("dense", parallel, "flash")
    profile = switch_profile(kind, cost, config, context, pricer)
    exposed = profile.price(Setting(offload=1.0)).seconds.offload_seconds
    assert exposed > 0  # the whole activation does not hide behind one layer's compute over PCIe
    plain = step_time(model, parallel, registry=REGISTRY, hardware=HARDWARE)
    moved = step_time(model, parallel, registry=REGISTRY, hardware=HARDWARE,
                      recompute=RecomputeSpec(default=Setting(offload=1.0)))
    extra = moved.stages[0].communication_seconds - plain.stages[0].communication_seconds
    assert extra == pytest.approx(4 * exposed)
