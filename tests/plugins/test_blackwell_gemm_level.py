"""benchmarks/blackwell_gemm_level.py prices each public GEMM measurement as hp would (hand-derived checks)."""

from __future__ import annotations

import pytest

from repo_script import load_script  # tests/repo_script.py

LEVEL = load_script("benchmarks/blackwell_gemm_level.py")
RECORDS = {r["id"]: r for r in LEVEL.load()["records"]}


def test_a_shape_the_b200_table_holds_takes_simumax_s_figure():
    # OpenXLA sm_100, 4096^3 bf16: 1416867213789406 FLOP/s; SimuMax's TN row m=4096 k=4096 n=4096 is 0.6376213966722232,
    # so hp prices 0.6376213966722232 * 2250e12 = 1434.648e12 FLOP/s and the ratio is 1416.867 / 1434.648 = 0.98761.
    x = LEVEL.evaluate(RECORDS["xla-sm100-bf16-4096x4096x4096"])
    assert x["where"] == "table"
    assert x["hp_efficiency"] == pytest.approx(0.6376213966722232, rel=1e-12)
    assert x["ratio"] == pytest.approx(0.98761, abs=2e-5)


def test_an_off_table_shape_takes_matmul_and_gb200_its_own_peak():
    # MAMF B200 1745.0 TFLOP/s at 1792x16128x3072, off the table: 1745 / (0.4878 * 2250) = 1.58990;
    # GB200 1822.0 at 4096x9728x2048 against 0.4878 * 2500: 1.49406.
    b200 = LEVEL.evaluate(RECORDS["mamf-b200-bf16"])
    gb200 = LEVEL.evaluate(RECORDS["mamf-gb200-bf16"])
    assert (b200["where"], gb200["where"]) == ("off-table: matmul", "off-table: matmul")
    assert b200["ratio"] == pytest.approx(1.58990, abs=2e-5)
    assert gb200["ratio"] == pytest.approx(1.49406, abs=2e-5)


def test_a_grouped_mxfp8_record_takes_the_grouped_fit_times_the_speedup():
    # torchao's MXFP8 forward, 8 groups of 16384 rows, 2048 x 7168: 2 * 131072 * 2048 * 7168 FLOPs in 1671.2 us =
    # 2302.71 TFLOP/s; hp: 0.4876 * 16384 / (16384 + 250) * 2250 * 1.830 = 1977.52 TFLOP/s; ratio 1.16444.
    x = LEVEL.evaluate(RECORDS["torchao-moe-b200-mxfp8-fwd"])
    assert x["where"] == "grouped fit"
    assert x["measured_flops_per_second"] / 1e12 == pytest.approx(2302.71, abs=0.01)
    assert x["hp_flops_per_second"] / 1e12 == pytest.approx(1977.52, abs=0.01)
    assert x["ratio"] == pytest.approx(1.16444, abs=2e-5)


def test_a_time_only_record_is_priced_from_its_shape_and_time():
    # Liger-Kernel #1380's cuBLAS column, B200 bf16, M=128256 N=4096 K=2048 in 1.336 ms: 2 * 128256 * 4096 * 2048 =
    # 2151778615296 FLOPs, 1610.613 TFLOP/s, 0.7158 of 2250; off the table, hp prices 0.4878 * 2250 = 1097.55, ratio 1.46746.
    x = LEVEL.evaluate(RECORDS["liger1380-b200-bf16-128256x4096x2048"])
    assert x["where"] == "off-table: matmul"
    assert x["measured_flops_per_second"] / 1e12 == pytest.approx(1610.613, abs=1e-3)
    assert x["measured_fraction_of_peak"] == pytest.approx(0.71583, abs=1e-5)
    assert x["ratio"] == pytest.approx(1.46746, abs=2e-5)


def test_the_presets_state_the_script_s_figures():
    # b200's and gb200's large_gemm_speedup: the median of measured/hp over the 8 independent B200 dense records of at
    # least 1 TFLOP, (1.152 + 1.294) / 2 = 1.223 (Tilus 10240-cubed and torchao 8192-cubed, the middle two);
    # gb200's gemm_rate_scale: (1822.0 / 1745.0) / (2500 / 2250) = 0.93971.
    from hp_plugins.hardware.presets import PRESETS

    speedup, chosen = LEVEL.large_gemm_speedup()
    assert len(chosen) == 8 and len({x["record"]["source"] for x in chosen}) == 4
    assert all(x["ratio"] > 1.1 for x in chosen) and speedup == pytest.approx(1.2231, abs=5e-5)
    assert LEVEL.gb200_rate_scale() == pytest.approx(1822.0 / 1745.0 * 2250 / 2500, rel=1e-12) == pytest.approx(0.93971, abs=5e-6)
    by_name = {p.name: p.spec for p in PRESETS}
    for name in ("b200", "gb200"):
        assert by_name[name].large_gemm_speedup == round(speedup, 3) and by_name[name].large_gemm_flops == LEVEL.LARGE_GEMM_FLOPS
    assert by_name["gb200"].gemm_rate_scale == round(LEVEL.gb200_rate_scale(), 4)
    # b300: MAMF's B300 over B200 at one peak, 1769.0 / 1745.0 = 1.01375, and the B200's large-GEMM speedup.
    assert LEVEL.b300_rate_scale() == pytest.approx(1769.0 / 1745.0, rel=1e-12) == pytest.approx(1.01375, abs=5e-6)
    assert by_name["b300"].gemm_rate_scale == round(LEVEL.b300_rate_scale(), 4)
    assert by_name["b300"].large_gemm_speedup == round(speedup, 3) and by_name["b300"].large_gemm_flops == LEVEL.LARGE_GEMM_FLOPS
    # gb300: triton#740's six GB300 matmuls over hp's figure at 2,500 TFLOP/s, off the table 0.4878 * 2500 = 1219.5
    # (8192 x 8192 x 4096 on it, 0.56108 * 2500): 1595.79, 1745.78, 1751.9, 1756.31, 1717.37, 1812.09 TFLOP/s read
    # 1.3086, 1.4316, 1.4366, 1.2520, 1.4083, 1.4859; the median, (1.4083 + 1.4316) / 2 = 1.4199; no large-GEMM step.
    scale, records = LEVEL.gb300_rate_scale()
    assert len(records) == 6 and scale == pytest.approx((1717.37 + 1745.78) / 2 / 1219.5, abs=5e-5)
    assert by_name["gb300"].gemm_rate_scale == round(scale, 4) and by_name["gb300"].large_gemm_speedup is None


def test_the_b200_nvfp4_speedup_is_the_script_s_figure():
    # pytorch/ao#2427 on a B200: of its cubes only 8192 (1.0995 TFLOP) lies within TE's tutorial GEMM sizes,
    # 2 * 15872 * 4096 * 4096 = 0.533 to 2 * 15872 * 4096 * 16384 = 2.130 TFLOP; bf16 7.74e-4 s / NVFP4 2.05e-4 s = 3.77561.
    from hp_plugins.runtimes.gemm_speedups import BLACKWELL_BANDED_SPEEDUPS

    figure, cubes = LEVEL.b200_nvfp4_speedup()
    assert cubes == ["torchao2427-b200-nvfp4-8192"] and figure == pytest.approx(3.77561, abs=5e-6)
    by_band = {(low, high): sourced.value for kernel, low, high, sourced in BLACKWELL_BANDED_SPEEDUPS if kernel == "nvfp4"}
    assert by_band[(4.0, 4.0)] == round(figure, 4)
