"""The megatron runtime's host floor (docs/time.md, "Overlap and host time"): its fitted seconds per kernel is what
benchmarks/fit_host_seconds.py fits to the calibration rows today, and the floor it sets is the counted kernels times it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hp_core.api import build_registry
from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[2]


def _fit_module():
    return load_script("benchmarks/fit_host_seconds.py")


@pytest.fixture(scope="module")
def registry():
    return build_registry()


def test_the_calibration_rows_are_the_three_h100_ep16_runs():
    rows = json.loads((ROOT / "tests" / "plugins" / "data" / "fp8_measured_runs.json").read_text())["moe_rows"]
    calibration = sorted(row["id"] for row in rows if row["split"] == "calibration")
    assert calibration == ["mb26.04-h100-qwen3-30b-a3b-fp8cs", "mb26.04.01-h100-qwen3-30b-a3b-fp8cs",
                           "mb26.06-h100-qwen3-30b-a3b-fp8cs"]
    # None of them states CUDA graphs: the count is of an eager layer.
    for row in rows:
        if row["split"] == "calibration":
            assert row["hardware"] == "h100-sxm" and row["micro_batch_size"] == 1
            assert not any("graph" in item.lower() for item in row["not_priced"])


def test_stated_seconds_per_kernel_is_the_fit(registry):
    """Refit with ``python benchmarks/fit_host_seconds.py`` when the model changes, then refit the B200 slowdown."""
    fit = _fit_module()
    assert fit.fitted_seconds_per_kernel(registry) == pytest.approx(registry.runtime("megatron").timing.host.seconds_per_kernel)


def test_the_floor_is_what_moves_the_calibration_rows(registry):
    """Without the floor the three rows are 29-31% fast (their layers' kernels are priced shorter than their issue;
    30-31% before Hopper's grouped-GEMM pair and FP8 speedups by GEMM size were measured on an H200, 2026-12-04 (31-32%
    with the pair alone); 27-29% before HybridEP's permutation became the flex dispatcher's two passes over the received tokens, 2026-12-02,
    docs/time.md "The model"; 29-30% before the backward FP8 GEMMs took Hopper's split-accumulator rate,
    docs/precision.md "Time")."""
    fit = _fit_module()
    rows = fit.calibration_rows()
    without = fit.relative_errors(0.0, rows, registry)
    assert all(-0.31 < e < -0.29 for e in without)
    stated = registry.runtime("megatron").timing.host.seconds_per_kernel
    assert all(abs(e) < 0.01 for e in fit.relative_errors(stated, rows, registry))


def test_a_qwen3_moe_layer_counts_its_kernels(registry):
    """Qwen3-30B-A3B's layer under Megatron-Core: QKV, output and gate GEMMs plus the experts' grouped GEMM (4 x 5.5
    kernels), one attention kernel, the router's 53 and the permutation's 4 forward; twice the GEMM kernels, 26 router
    and 4 permutation kernels backward; plus the collective calls the layer states."""
    from hp_core.engine.timing.layer import _host_floor
    import types

    host = registry.runtime("megatron").timing.host
    assert (host.kernels_per_gemm, host.router_kernels, host.permute_kernels) == (5.5, (53, 26), 4)
    from hp_core.costs import LayerWork

    work = LayerWork(gemms=((1, 2, 3),) * 3, grouped_flops=1.0, attention_calls=1, router_elements=1.0, permute_bytes=1.0)
    rates = types.SimpleNamespace(host=host)
    forward, backward = _host_floor(work, 0.0, 0.0, rates)
    assert forward == pytest.approx((4 * 5.5 + 1 + 53 + 4) * host.seconds_per_kernel)
    assert backward == pytest.approx((8 * 5.5 + 1 + 26 + 4) * host.seconds_per_kernel)
