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
