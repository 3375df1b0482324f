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


def test_hopper_rowwise_figures_are_the_h200_measurement(data):
    """torchao's rowwise recipe: its forward GEMM is the measured bf16 / row-wise fast-accumulation seconds of the
    eight layers' fprop GEMMs (the second run's rowwise_fast records, one per shape); its backward GEMMs, which
    torchao runs on the per-tensor kernel at unit scales, the per-tensor split-accumulation figure itself."""
    stated = dict(HOPPER_SPEEDUPS)
    assert stated["fp8_rowwise"].value == round(hopper_kernel_level.rowwise_fast_speedup(data), 4) == 1.9622
    assert "h200_hopper_kernels.json" in stated["fp8_rowwise"].source and "use_fast_accum=True" in stated["fp8_rowwise"].source
    assert stated["fp8_rowwise:split_accumulator"].value == stated["fp8_tensorwise:split_accumulator"].value
    forward = [g for g in hopper_kernel_level.layer_gemms(data) if g["pass"] == "fprop"]
    assert len(forward) == 32 and all(g[hopper_kernel_level.ROWWISE_FAST] > 0 for g in forward)
    # Not the row-wise kernel without fast accumulation (the dense records' fp8_rowwise_seconds), which torchao avoids.
    slow = hopper_kernel_level.speedup(forward, hopper_kernel_level.ROWWISE)
    assert slow < stated["fp8_rowwise"].value - 0.15


def test_hopper_grouped_figures_are_the_h200_fit(data):
    """Hopper's grouped-GEMM pair is the fit to the H200's torch._grouped_mm records, all three passes."""
    from hp_plugins.runtimes.timing_profiles import HOPPER_KERNELS

    stated = (HOPPER_KERNELS.grouped_matmul.value, HOPPER_KERNELS.grouped_half_rows.value)
    assert stated == hopper_kernel_level.grouped_fit(data)


def test_hopper_fp8_curves_are_the_h200_records_by_octave(data):
    """Hopper's FP8 speedups by GEMM size: the forward GEMMs' fast-accumulation and the backward GEMMs'
    split-accumulation records per octave of FLOPs (hopper_kernel_level.speedup_curve), each single figure's kernel."""
    from hp_plugins.runtimes.hopper_fp8_curves import HOPPER_FP8_CURVES

    curves = dict(HOPPER_FP8_CURVES)
    assert set(curves) == {"fp8_tensorwise", "fp8_tensorwise:split_accumulator", "fp8_rowwise",
                           "fp8_rowwise:split_accumulator"} <= set(dict(HOPPER_SPEEDUPS))
    for kernel, passes, key in (("fp8_tensorwise", ("fprop",), hopper_kernel_level.FAST),
                                ("fp8_tensorwise:split_accumulator", ("dgrad", "wgrad"), hopper_kernel_level.SPLIT),
                                ("fp8_rowwise", ("fprop",), hopper_kernel_level.ROWWISE_FAST),
                                ("fp8_rowwise:split_accumulator", ("dgrad", "wgrad"), hopper_kernel_level.SPLIT)):
        curve = curves[kernel]
        assert (curve.flops, curve.values) == hopper_kernel_level.speedup_curve(data, passes, key)
        assert "h200_hopper_kernels.json" in curve.source


def test_hopper_fp8_curve_interpolates_in_log_flops_and_clamps(data):
    """At a point its value; between two points linear in log FLOPs; beyond the ends the end's value. The curve
    reads each measured layer's backward within 4% of its measured bf16 / split-accumulation seconds."""
    import math

    from hp_plugins.runtimes.hopper_fp8_curves import HOPPER_FP8_CURVES

    curve = dict(HOPPER_FP8_CURVES)["fp8_tensorwise:split_accumulator"]
    for f, v in zip(curve.flops, curve.values):
        assert curve.at(f) == pytest.approx(v)
    a, b = curve.flops[1], curve.flops[2]
    middle = 2 ** ((math.log2(a) + math.log2(b)) / 2)
    assert curve.at(middle) == pytest.approx((curve.values[1] + curve.values[2]) / 2)
    assert curve.at(curve.flops[0] / 10) == curve.values[0]
    assert curve.at(curve.flops[-1] * 10) == curve.values[-1]
    layers: dict = {}
    for g in hopper_kernel_level.layer_gemms(data):
        if g["pass"] != "fprop":
            layers.setdefault((g["model"], g["tp"]), []).append(g)
    for gemms in layers.values():
        measured = hopper_kernel_level.speedup(gemms, hopper_kernel_level.SPLIT)
        priced = sum(g["bf16_seconds"] for g in gemms) / sum(g["bf16_seconds"] / curve.at(g["flops"]) for g in gemms)
        assert priced == pytest.approx(measured, rel=0.04)


def test_the_torchao_run_times_torchtitans_separate_projections_by_hand():
    """``device_hopper_kernels.py --torchao`` times torchtitan's wq, wk, wv apart: at TP 8, Llama-3-70B's key and
    value projections are 1,024 / 8 = 128 columns over the 8,192-wide input, the query 8,192 / 8 = 1,024."""
    import device_hopper_kernels

    assert device_hopper_kernels.separate_qkv_gemms(8192, 8192, 1024, 8) == [
        ("wq", 1024, 8192), ("wk", 128, 8192), ("wv", 128, 8192)]
    assert device_hopper_kernels.pass_shape("wgrad", 131072, 128, 8192) == (128, 8192, 131072)
