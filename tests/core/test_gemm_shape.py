"""GEMM efficiency by shape relative to the largest measured (hp_core/specs/gemms.py GemmShapeScale) and its H100 data."""

from __future__ import annotations

import math

import pytest

from hp_core.errors import SpecError
from hp_core.specs.gemms import GemmShapeScale, ShapedGemms
from hp_plugins.hardware import gemm_h100
from hp_plugins.runtimes.timing_profiles import B200_GEMMS, BLACKWELL, H100_GEMM_SHAPE, HOPPER, HOPPER_KERNELS

# A 2 x 2 x 2 grid, rows outermost, inputs innermost: value = 0.1 + 0.4 * [rows is 1024] + 0.2 * [outputs is 1024]
# + 0.1 * [inputs is 1024], so each corner is told apart.
VALUES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


def _scale() -> GemmShapeScale:
    return GemmShapeScale(source="a hand-made grid", rows=(256, 1024), outputs=(256, 1024), inputs=(256, 1024), values=VALUES)


def test_a_grid_point_takes_its_value():
    scale = _scale()
    assert scale.factor(256, 256, 256) == 0.1
    assert scale.factor(256, 256, 1024) == 0.2
    assert scale.factor(256, 1024, 256) == 0.3
    assert scale.factor(1024, 256, 256) == 0.5
    assert scale.factor(1024, 1024, 1024) == 0.8


def test_between_two_points_the_value_is_linear_in_log2_of_the_dimension():
    scale = _scale()
    # 512 rows is halfway from 256 to 1024 in log2: the mean of 0.1 and 0.5.
    assert scale.factor(512, 256, 256) == pytest.approx(0.3, rel=1e-12)
    # 2^9.5 outputs, a quarter of the way in log2 (8 + 2 * 0.75 = 9.5): 0.1 + 0.75 * (0.3 - 0.1) = 0.25.
    assert scale.factor(256, 2 ** 9.5, 256) == pytest.approx(0.25, rel=1e-12)
    # All three halfway: the mean of the eight corners, 0.45.
    assert scale.factor(512, 512, 512) == pytest.approx(0.45, rel=1e-12)


def test_each_dimension_is_clamped_to_its_axis():
    scale = _scale()
    assert scale.factor(64, 100, 1) == 0.1  # below every axis: the smallest shape's value
    assert scale.factor(10 ** 6, 4096, 2048) == 0.8  # above: the largest's
    assert scale.factor(10 ** 6, 256, 512) == pytest.approx(0.55, rel=1e-12)  # rows clamped, inputs halfway: (0.5 + 0.6) / 2


def test_the_three_passes_are_keyed_as_cublas_runs_them():
    scale = _scale()
    # One layer of 1024 tokens, fan_out 256, fan_in 1024: forward (M 1024, N 256, K 1024) 0.6, input gradient (M 1024,
    # N 1024, K 256) 0.7, weight gradient (M 256, N 1024, K 1024) 0.4.
    flops = 2.0 * 1024 * 256 * 1024
    listed, forward, backward = scale.price(((1024, 256, 1024),))
    assert listed == flops
    assert forward == pytest.approx(flops / 0.6, rel=1e-12)
    assert backward == pytest.approx(flops / 0.7 + flops / 0.4, rel=1e-12)
    # Bound to a matmul efficiency of 0.5: as a GemmTable prices it, every dense GEMM covered; grouped ones not scaled.
    shaped = scale.bind(0.5)
    assert shaped == ShapedGemms(scale=scale, matmul=0.5)
    assert shaped.price(((1024, 256, 1024),)) == pytest.approx((flops, flops, flops / 0.6 / 0.5, (flops / 0.7 + flops / 0.4) / 0.5))
    assert shaped.price(((8, 100.0, 256, 1024),), grouped=True) == (2.0 * 8 * 100 * 256 * 1024, 0.0, 0.0, 0.0)
    # The weight-gradient GEMMs' part of that backward apart (a frozen weight's backward skips it): factor 0.4.
    assert shaped.weight_gradient(((1024, 256, 1024),)) == pytest.approx(flops / 0.4 / 0.5, rel=1e-12)
    assert shaped.weight_gradient(((8, 100.0, 256, 1024),), grouped=True) == 0.0


def test_a_malformed_grid_is_refused():
    with pytest.raises(SpecError, match="values must be 2 x 2 x 2"):
        GemmShapeScale(source="x", rows=(256, 1024), outputs=(256, 1024), inputs=(256, 1024), values=VALUES[:7])
    with pytest.raises(SpecError, match="rows must be at least two increasing positive integers"):
        GemmShapeScale(source="x", rows=(1024, 256), outputs=(256, 1024), inputs=(256, 1024), values=VALUES)
    with pytest.raises(SpecError, match="positive finite"):
        GemmShapeScale(source="x", rows=(256, 1024), outputs=(256, 1024), inputs=(256, 1024), values=VALUES[:7] + (0.0,))
    with pytest.raises(SpecError, match="source"):
        GemmShapeScale(source=" ", rows=(256, 1024), outputs=(256, 1024), inputs=(256, 1024), values=VALUES)


# The OpenXLA sm_90 table (hp_plugins/hardware/data/gemm_h100_xla.json, openxla/xla@b2766086
# xla/service/gpu/model/matmul_interpolator_data.h): bf16 FLOP/s of b x [m, k] x [k, n].
CORNER = 793131337247852  # b 4, m n k 4096: the largest shape, 16,384 rows


def test_the_h100_table_is_the_published_one():
    rows = {row[:4]: row[4] for row in gemm_h100.ROWS}
    assert len(gemm_h100.ROWS) == len(rows) == 3 * 5 ** 3  # b in {1, 2, 4}, m, n, k in {256, ..., 4096}
    assert {b for b, *_ in rows} == {1, 2, 4} and {m for _, m, *_ in rows} == {256, 512, 1024, 2048, 4096}
    assert rows[(1, 4096, 4096, 4096)] == 783328793548203
    assert rows[(4, 4096, 4096, 4096)] == CORNER
    assert gemm_h100.ROWS[0] == (1, 1024, 2048, 256, 139519467775467)  # the file's first entry
    # No rate exceeds the H100 SXM's 989.4 TFLOP/s dense bf16 peak; the largest, 808.7, exceeds the PCIe part's 756.
    assert 756e12 < max(rows.values()) < 989.4e12


def test_the_h100_scale_is_each_rate_over_the_largest_shape_s():
    scale = H100_GEMM_SHAPE
    assert scale.rows == (256, 512, 1024, 2048, 4096, 8192, 16384)
    assert scale.outputs == scale.inputs == (256, 512, 1024, 2048, 4096)
    assert scale.factor(16384, 4096, 4096) == 1.0
    # b = 1 up to 4,096 rows: 783.33 / 793.13 TFLOP/s.
    assert scale.factor(4096, 4096, 4096) == pytest.approx(783328793548203 / CORNER, rel=1e-12)
    assert scale.factor(4096, 4096, 4096) == pytest.approx(0.98764, abs=5e-6)
    assert scale.factor(2048, 1024, 512) == pytest.approx(238397385435168 / CORNER, rel=1e-12)  # 0.3006
    # 8,192 rows: b 2 of m 4,096 (the smallest b), not b 4 of m 2,048 (710.6 TFLOP/s).
    assert scale.factor(8192, 1024, 2048) == pytest.approx(713449716943521 / CORNER, rel=1e-12)
    # Between two measured inputs, halfway in log2 (2^9.5): the mean of the two rates (619.86 and 725.51 TFLOP/s).
    assert scale.factor(16384, 4096, 2 ** 9.5) == pytest.approx((619859436746254 + 725508891943538) / 2 / CORNER, rel=1e-12)
    # Beyond the table: the largest shape's (the factor 1); below it, the smallest's (6.45 TFLOP/s: 0.0081).
    assert scale.factor(98304, 14336, 8192) == 1.0
    assert scale.factor(128, 64, 100) == pytest.approx(6452775384615 / CORNER, rel=1e-12)
    assert math.isclose(scale.factor(128, 64, 100), 0.008136, abs_tol=5e-7)


def test_every_hopper_entry_scales_its_dense_gemms_and_blackwell_keeps_its_table():
    assert HOPPER_KERNELS.gemm_shape is H100_GEMM_SHAPE and HOPPER.gemm_shape is H100_GEMM_SHAPE
    assert HOPPER.gemm_table is None and H100_GEMM_SHAPE.dtype == "bf16"
    assert BLACKWELL.gemm_table is B200_GEMMS and BLACKWELL.gemm_shape is None
    assert "openxla/xla@b2766086" in H100_GEMM_SHAPE.source and "793.1 TFLOP/s" in H100_GEMM_SHAPE.source
