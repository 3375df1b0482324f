"""hp's Hopper figures that tests/plugins/data/h200_hopper_kernels.json measures (benchmarks/hopper_kernel_level.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import hopper_kernel_level  # noqa: E402

from hp_plugins.runtimes.gemm_speedups import HOPPER_SPEEDUPS  # noqa: E402


@pytest.fixture(scope="module")
def data() -> dict:
    return hopper_kernel_level.load()


def test_hopper_split_accumulator_speedup_is_the_h200_measurement(data):
    """The backward FP8 GEMMs' speedup is the measured bf16 / split-accumulation seconds of the eight layers."""
    stated = dict(HOPPER_SPEEDUPS)["fp8_tensorwise:split_accumulator"]
    assert stated.value == round(hopper_kernel_level.split_accumulator_speedup(data), 4)
    assert "h200_hopper_kernels.json" in stated.source


def test_hopper_fast_accumulation_speedup_agrees_with_the_h200_measurement(data):
    """TE's tutorial figure (kept) is within 2% of the measured forward GEMMs' fast-accumulation speedup."""
    forward = [g for g in hopper_kernel_level.layer_gemms(data) if g["pass"] == "fprop"]
    measured = hopper_kernel_level.speedup(forward, hopper_kernel_level.FAST)
    assert dict(HOPPER_SPEEDUPS)["fp8_tensorwise"].value == pytest.approx(measured, rel=0.02)


def test_hopper_grouped_figures_are_the_h200_fit(data):
    """Hopper's grouped-GEMM pair is the fit to the H200's torch._grouped_mm records, all three passes."""
    from hp_plugins.runtimes.timing_profiles import HOPPER_KERNELS

    stated = (HOPPER_KERNELS.grouped_matmul.value, HOPPER_KERNELS.grouped_half_rows.value)
    assert stated == hopper_kernel_level.grouped_fit(data)
