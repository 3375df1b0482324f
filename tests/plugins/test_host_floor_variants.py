"""benchmarks/host_floor_variants.py, the what-if variants of the megatron runtime's host floor (docs/time.md, "Overlap
and host time"): its ``stated`` variant is the engine's floor, and its partial-graph and per-expert variants take off
and add the kernels its docstring names, by hand on a Qwen3-235B-A22B layer."""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import build_registry
from hp_core.engine.timing import layer as layer_timing
from repo_script import load_script  # tests/repo_script.py

ROW = "mb26.02-gb200-qwen3-235b-a22b-mxfp8"  # micro-batch 1, attention, router and preprocessing graphed


@pytest.fixture(scope="module")
def variants():
    return load_script("benchmarks/host_floor_variants.py")


@pytest.fixture(scope="module")
def registry():
    return build_registry()


def _row(variants, name):
    return next(row for row in variants.rows() if row["id"] == name)


def test_the_scopes_are_read_from_the_rows_notes(variants):
    assert variants.graph_scopes(_row(variants, ROW)) == {"attn", "moe_router", "moe_preprocess"}
    assert variants.graph_scopes(_row(variants, "mb26.04-h100-qwen3-30b-a3b-fp8cs")) == frozenset()
    assert variants.graph_scopes(_row(variants, "mb26.04-gb200-nemotron-3-super-mxfp8")) == {
        "attn", "mamba", "moe_router", "moe_preprocess"}


def test_the_split_path_launches_by_recipe(variants, registry):
    """Two linears a local expert: MXFP8 a GEMM and a quantize a split forward, two GEMMs and a quantize backward;
    per-tensor current scaling four quantize kernels a split each way; NVFP4 (v2.14) its GEMMs with a
    global scale each."""
    assert variants.expert_launches(_row(variants, ROW), registry) == (4.0, 6.0)
    assert variants.expert_launches(_row(variants, "mb26.04-h100-qwen3-30b-a3b-fp8cs"), registry) == (10.0, 12.0)
    assert variants.expert_launches(_row(variants, "mb26.04-b200-nemotron-3-super-nvfp4"), registry) == (4.0, 8.0)
    with pytest.raises(ValueError, match="no split-path launch count"):
        variants.expert_launches({"id": "x", "recipe": "fp8-delayed"}, registry)


def test_the_stated_variant_is_the_engines_floor(variants, registry):
    """The row's floor binds (its price is 28% above the price without one), and the stated variant reproduces
    benchmarks/fp8_runs.py's price to the last digit."""
    fp8_runs = variants.fp8_runs
    row = _row(variants, ROW)
    stated = registry.runtime("megatron").timing.host.seconds_per_kernel
    engine = fp8_runs.price_moe(row, registry).step_seconds
    measured = fp8_runs.measured_seconds(row)
    assert variants.relative_error("stated", row, registry, stated, (0.0, 0.0)) == pytest.approx((engine - measured) / measured, rel=1e-12)
    runtime = registry.runtime("megatron")
    eager = attrs.evolve(runtime, timing=attrs.evolve(runtime.timing, host=None))
    unfloored = fp8_runs.price_moe(row, registry, base_runtime=eager).step_seconds
    assert engine / unfloored == pytest.approx(1.166, abs=0.002)
    assert layer_timing._host_floor is variants.layer_timing._host_floor  # the context restored the engine's floor


def test_the_variants_count_a_qwen3_moe_layer_by_hand(variants, registry, monkeypatch):
    """The layer lists its router's gating GEMM and its QKV and output GEMMs (the last two the attention modules'),
    the experts' grouped GEMMs (counted as one), one attention call, two expert all-to-alls each way, a router and a
    permutation; 4 local experts (128 over EP 32). At 42 us a kernel and 5.5 kernels a GEMM:

    * stated: forward (4 x 5.5 + 1 + 2 + 53 + 4) = 82 kernels, backward (8 x 5.5 + 1 + 2 + 26 + 4) = 77;
    * graphs (attn, moe_router): the three listed GEMMs, the attention call and the router's kernels off, one graph
      launch on: forward 5.5 + 2 + 4 + 1 = 12.5, backward 11 + 2 + 4 + 1 = 18;
    * experts: the stated count plus 4 local experts x (4, 6) launches at 11.3 us.
    """
    captured = []
    stated_floor = layer_timing._host_floor

    def spy(work, forward, backward, r, frozen=0):
        if work.router_elements and not captured:
            captured.append((work, r))
        return stated_floor(work, forward, backward, r, frozen)

    monkeypatch.setattr(layer_timing, "_host_floor", spy)
    variants.fp8_runs.price_moe(_row(variants, ROW), registry)
    work, r = captured[0]
    assert len(work.gemms) == 3 and work.attention_calls == 1 and max(e for e, *_ in work.expert_gemms) == 4
    us = 42e-6
    assert variants.variant_floor(work, 0.0, 0.0, r) == pytest.approx((82 * us, 77 * us))
    assert variants.variant_floor(work, 0.0, 0.0, r) == pytest.approx(stated_floor(work, 0.0, 0.0, r))
    graphs = variants.variant_floor(work, 0.0, 0.0, r, scopes=frozenset({"attn", "moe_router", "moe_preprocess"}))
    assert graphs == pytest.approx((12.5 * us, 18 * us))
    experts = variants.variant_floor(work, 0.0, 0.0, r, per_expert=(4.0, 6.0), launch_seconds=11.3e-6)
    assert experts == pytest.approx((82 * us + 16 * 11.3e-6, 77 * us + 24 * 11.3e-6))
    # A floor never shortens the layer's own time.
    assert variants.variant_floor(work, 1.0, 2.0, r, scopes=frozenset({"attn"})) == (1.0, 2.0)
