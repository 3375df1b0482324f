"""A machine whose GEMMs run at another rate than its family's figures (HardwareSpec's gemm_rate_scale,
large_gemm_speedup, large_gemm_flops; hp_core.specs.gemms.MachineGemms), with hand-derived numbers."""

from __future__ import annotations

import pytest

from hp_core.api import build_registry, model_from_preset, step_time
from hp_core.engine.timing.rates import _gemm_table
from hp_core.errors import SpecError
from hp_core.specs import HardwareSpec, ParallelSpec
from hp_core.specs.gemms import GemmTable, MachineGemms

SMALL = (4096, 4096, 4096)  # 2 x 4096^3 = 0.137 TFLOP
LARGE = (16384, 8192, 8192)  # 2 x 16384 x 8192^2 = 2.2 TFLOP


def test_off_any_table_each_gemm_takes_matmul_times_the_rate_and_the_large_speedup_from_its_size():
    machine = MachineGemms(None, 0.5, rate=0.9, large_speedup=1.2, large_flops=1e12)
    small, large = 2.0 * 4096 ** 3, 2.0 * 16384 * 8192 * 8192
    # 0.5 x 0.9 = 0.45 below 1 TFLOP; 0.5 x 0.9 x 1.2 = 0.54 at 2.2 TFLOP; every pass alike.
    listed, covered, forward, backward = machine.price((SMALL, LARGE))
    assert listed == covered == small + large
    assert forward == pytest.approx(small / 0.45 + large / 0.54, rel=1e-12)
    assert backward == pytest.approx(2 * (small / 0.45 + large / 0.54), rel=1e-12)
    # At the threshold exactly the speedup holds (2 m n k >= large_flops).
    at = MachineGemms(None, 0.5, large_speedup=1.2, large_flops=small)
    assert at.price((SMALL,))[2] == pytest.approx(small / 0.6, rel=1e-12)


def test_a_table_shape_takes_its_measured_passes_and_an_efficiency_never_passes_the_peak():
    table = GemmTable(source="hand-made", dense=(("forward",) + LARGE + (0.7,), ("input_gradient",) + LARGE + (0.6,),
                                                 ("weight_gradient",) + LARGE + (0.5,)))
    machine = MachineGemms(table, 0.4, large_speedup=1.5, large_flops=1e12)
    flops = 2.0 * 16384 * 8192 * 8192
    # 0.7 x 1.5 = 1.05 is capped at 1; 0.6 x 1.5 = 0.9; 0.5 x 1.5 = 0.75. The small GEMM is off the table: 0.4.
    _, covered, forward, backward = machine.price((LARGE,))
    assert covered == flops and forward == pytest.approx(flops / 1.0) and backward == pytest.approx(flops / 0.9 + flops / 0.75)
    assert machine.price((SMALL,))[2] == pytest.approx(2.0 * 4096 ** 3 / 0.4)
    # With nothing stated the base table prices as it always has (the same covered FLOPs and seconds).
    assert MachineGemms(table, 0.4).price((LARGE,)) == (flops, flops, flops / 0.7, flops / 0.6 + flops / 0.5)
    # The weight-gradient GEMMs' part of the backward apart: 0.5 x 1.5 on the machine, 0.5 on the table alone.
    assert machine.weight_gradient((LARGE,)) == pytest.approx(flops / 0.75, rel=1e-12)
    assert table.weight_gradient((LARGE,)) == flops / 0.5 and table.weight_gradient((SMALL,)) == 0.0  # off the table: not covered


def test_the_speedup_and_its_threshold_are_stated_together():
    with pytest.raises(SpecError, match="state both or neither"):
        HardwareSpec(name="x", memory_bytes=1 << 30, large_gemm_speedup=1.2)
    with pytest.raises(SpecError, match="state both or neither"):
        HardwareSpec(name="x", memory_bytes=1 << 30, large_gemm_flops=1e12)
    with pytest.raises(SpecError):
        HardwareSpec(name="x", memory_bytes=1 << 30, gemm_rate_scale=0.0)


def test_a_machine_stating_nothing_prices_its_family_s_figures_unchanged():
    registry = build_registry(use_env=False)
    simumax = registry.hardware_preset("b200-simumax").spec
    dev = registry.runtime("megatron").timing.device("blackwell")
    assert _gemm_table(dev, "bf16", simumax) is dev.gemm_table
    b200 = registry.hardware_preset("b200").spec
    machine = _gemm_table(dev, "bf16", b200)
    assert isinstance(machine, MachineGemms) and (machine.rate, machine.large_speedup, machine.large_flops) == (1.0, 1.223, 1e12)


def test_a_step_whose_gemms_are_all_small_is_the_same_on_b200_and_the_simumax_machine():
    # Llama 3 8B at 1,024 tokens a micro-batch: its largest GEMM, the head's 2 x 1024 x 4096 x 128256, is 1.08 TFLOP;
    # at 512 tokens 0.54 TFLOP, so every GEMM is below the threshold and nothing moves; at 8,192 tokens they differ.
    registry = build_registry(use_env=False)
    model = model_from_preset("llama3-8b", registry=registry)
    times = {}
    for seq in (512, 8192):
        layout = ParallelSpec(dp=8, micro_batch_size=1, seq_len=seq, global_batch_size=64)
        times[seq] = [step_time(model, layout, registry=registry, runtime="megatron",
                                hardware=registry.hardware_preset(name).spec).compute_seconds for name in ("b200", "b200-simumax")]
    assert times[512][0] == times[512][1]
    assert times[8192][0] < times[8192][1] / 1.05


def test_a_grouped_gemm_takes_the_rule_per_expert():
    # Off any table, an expert GEMM of r rows runs at the fitted grouped * r / (r + half_rows) = 0.5 * r / (r + 250),
    # times the rate, and times the speedup where one expert's 2 r n k reaches the threshold: 8 experts of 16384 rows,
    # 6144 -> 16384 (3.30 TFLOP each) at 0.5 * 16384 / 16634 * 0.9 * 1.2; 8 experts of 512 rows (0.10 TFLOP each) at
    # 0.5 * 512 / 762 * 0.9.
    machine = MachineGemms(None, 0.5, rate=0.9, large_speedup=1.2, large_flops=1e12, grouped=0.5, half_rows=250)
    big, small = (8, 16384, 16384, 6144), (8, 512, 16384, 6144)
    for gemm, efficiency in ((big, 0.5 * 16384 / 16634 * 0.9 * 1.2), (small, 0.5 * 512 / 762 * 0.9)):
        flops = 2.0 * 8 * gemm[1] * 16384 * 6144
        listed, covered, forward, backward = machine.price((gemm,), grouped=True)
        assert listed == covered == flops
        assert forward == pytest.approx(flops / efficiency, rel=1e-12) and backward == pytest.approx(2 * flops / efficiency, rel=1e-12)
    with pytest.raises(ValueError, match="fitted grouped efficiency"):
        MachineGemms(None, 0.5).price((small,), grouped=True)
