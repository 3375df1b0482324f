"""The gb300 preset's fused attention rates (HardwareSpec.attention_rate_scale, mla_attention_rate_scale): Blackwell
Ultra's attention over Blackwell's as benchmarks/attention_rate_level.py computes it from NVIDIA's cuDNN benchmark,
and how the rates take them."""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import build_registry
from hp_core.costs import Flops, LayerCost, LayerWork
from hp_core.engine.timing.layer import _layer_time
from hp_core.engine.timing.rates import _rates
from hp_core.errors import SpecError
from hp_core.specs import HardwareSpec, ParallelSpec, PrecisionSpec
from repo_script import load_script  # tests/repo_script.py


@pytest.fixture(scope="module")
def registry():
    return build_registry()


def test_the_gb300_states_what_the_script_computes(registry):
    scales = load_script("benchmarks/attention_rate_level.py").rate_scales()
    spec = registry.hardware_preset("gb300").spec
    assert spec.attention_rate_scale == scales["full"] == (1.2042, 1.0927)
    assert spec.mla_attention_rate_scale == scales["mla"] == (1.1517, 1.0822)
    assert "cudnn-frontend@3929da2" in registry.hardware_preset("gb300").provenance
    # Every other part keeps the family's attention (the GB200 is the benchmark's reference).
    for name in ("b200", "b200-simumax", "gb200", "b300", "h100-sxm", "h200", "a100-80gb"):
        spec = registry.hardware_preset(name).spec
        assert spec.attention_rate_scale is None and spec.mla_attention_rate_scale is None, name


def test_the_ratios_by_hand():
    level = load_script("benchmarks/attention_rate_level.py")
    found = {(r["kind"], r["seq_len"]): r["ratio"] for r in level.ratios()}
    # Llama 3.1's attention at 8,192 tokens: GB200 1.397 / 4.127 ms, GB300 1.185 / 3.832 ms.
    assert found[("full", 8192)] == pytest.approx((1.397 / 1.185, 4.127 / 3.832))
    # The medians of the five lengths: forward 1.250, 1.211, 1.179, 1.121, 1.204 -> 1.204 (1.211 / ... by hand:
    # 0.391 / 0.323 = 1.2105, 21.692 / 18.014 = 1.2042 the middle one).
    full_fwd = sorted(found[("full", s)][0] for s in (2048, 4096, 8192, 16384, 32768))
    assert round(full_fwd[2], 4) == 1.2042 == round(21.692 / 18.014, 4)


def test_the_rates_take_the_scales_on_the_family_efficiencies(registry):
    runtime = registry.runtime("megatron")
    spec = registry.hardware_preset("gb300").spec
    bare = attrs.evolve(spec, attention_rate_scale=None, mla_attention_rate_scale=None)
    layout = ParallelSpec(dp=1, seq_len=8192)
    scaled = _rates(layout, spec, runtime.timing, PrecisionSpec(), "flash")
    family = _rates(layout, bare, runtime.timing, PrecisionSpec(), "flash")
    assert scaled.attn_fwd == pytest.approx(family.attn_fwd * 1.2042) and scaled.attn_bwd == pytest.approx(family.attn_bwd * 1.0927)
    assert (scaled.mla_attn_fwd, scaled.mla_attn_bwd) == pytest.approx((family.mla_attn_fwd * 1.1517, family.mla_attn_bwd * 1.0822))
    assert scaled.matmul == family.matmul  # GEMMs untouched
    # A call's FLOP part speeds up by the scale, its fixed time per call does not.
    cost = LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0, forward=Flops(attention_flops=1e12))
    work = LayerWork(attention_calls=1)
    fast = _layer_time(cost, work, False, frozenset(), attrs.evolve(scaled, host=None))
    slow = _layer_time(cost, work, False, frozenset(), attrs.evolve(family, host=None))
    fixed = family.attn_fwd_overhead * family.slowdown
    assert fast.forward_seconds - fixed == pytest.approx((slow.forward_seconds - fixed) / 1.2042)


def test_a_scale_is_a_forward_backward_pair_of_positive_numbers():
    with pytest.raises(SpecError, match="attention_rate_scale"):
        HardwareSpec(name="x", memory_bytes=1, attention_rate_scale=(1.2,))
    with pytest.raises(SpecError):
        HardwareSpec(name="x", memory_bytes=1, mla_attention_rate_scale=(1.2, -1.0))


def test_the_step_states_the_machines_attention_rate(registry):
    from hp_core.api import model_from_preset, step_time
    from hp_core.io.report import time_summary

    model = model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(dp=8, seq_len=8192, micro_batch_size=1, global_batch_size=8)
    steps = {name: step_time(model, layout, registry=registry, runtime="megatron",
                             hardware=registry.hardware_preset(name).spec) for name in ("gb200", "gb300")}
    assert steps["gb300"].provenance["attention_rate_scale"] == (1.2042, 1.0927)
    assert "attention_rate_scale" not in steps["gb200"].provenance
    assert "this machine's attention at 1.2042x forward, 1.0927x backward of its family's figures" in time_summary(steps["gb300"])
