"""Blackwell Ultra: the ``b300`` and ``gb300`` presets, and the NVFP4 GEMM speedup that carries only to them
(docs/precision.md "Time"; docs/time.md, the hardware presets)."""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import model_from_preset, step_time
from hp_core.errors import ConfigError
from hp_core.specs import ParallelSpec
from hp_core.specs.timing import DeviceEfficiency, Sourced

LAYOUT = ParallelSpec(tp=2, sp=True, dp=4, seq_len=4096)
# GEMM-bound: at LAYOUT (4,096 tokens a micro-batch) Megatron-LM's host floor binds and every recipe's compute is the
# same; at 32,768 tokens a micro-batch the GEMMs take three quarters of it (bf16, b200: 0.6091 of 0.7984 s).
GEMM_BOUND = ParallelSpec(tp=2, sp=True, dp=4, seq_len=8192, micro_batch_size=4)
FASTER = 1.1  # a GEMM rate 10% above the machine's: what it removes from a compute time is 1/11 of its GEMM seconds
B300_NVFP4 = 3.4809  # Transformer Engine's B300 NVFP4 GEMM speedup, 13.102 / 3.764
B200_NVFP4 = 3.7756  # pytorch/ao#2427's B200 figure, 7.74e-4 / 2.05e-4
MXFP8 = 1.83  # the blackwell entry's mxfp8 GEMM speedup


def _precision(registry, recipe):
    return attrs.evolve(registry.runtime("megatron").precision, recipe=recipe)


def _time(registry, hardware, recipe, layout=LAYOUT):
    model = model_from_preset("llama3-8b", registry)
    return step_time(model, layout, registry=registry, runtime="megatron", hardware=hardware,
                     precision=_precision(registry, recipe))


def _spec(registry, hardware, **changes):
    return attrs.evolve(registry.hardware_preset(hardware).spec, **changes)


def _compute(registry, spec, recipe):
    return _time(registry, spec, recipe, GEMM_BOUND).compute_seconds


def _gemm_seconds(registry, spec, recipe):
    """The GEMM seconds of the GEMM-bound step's compute on *spec* under *recipe*: the GEMMs (and they alone) run at the
    machine's ``gemm_rate_scale`` (:class:`~hp_core.specs.gemms.MachineGemms`, ``_Rates.matmul``), and a recipe's
    GEMMs at their bf16 time over its speedup, so a rate ``FASTER`` times the machine's takes ``1 - 1/FASTER`` of
    them off and leaves attention, elementwise and quantization as they were (no GEMM's efficiency reaches the cap
    of 1: Blackwell's largest here is the table's 0.6 times the 1.223 large-GEMM speedup)."""
    faster = attrs.evolve(spec, gemm_rate_scale=(spec.gemm_rate_scale or 1.0) * FASTER)
    return (_compute(registry, spec, recipe) - _compute(registry, faster, recipe)) / (1 - 1 / FASTER)


def _check_recipe_gemms(registry, spec, nvfp4):
    """The GEMM seconds under bf16, mxfp8 and nvfp4 are ``kept + quantized / speedup`` (the output head kept in
    bf16): bf16 and mxfp8 give the two parts, from which nvfp4's follows by hand."""
    bf16, mxfp8, fp4 = (_gemm_seconds(registry, spec, r) for r in ("bf16", "mxfp8", "nvfp4"))
    quantized = (bf16 - mxfp8) / (1 - 1 / MXFP8)
    kept = bf16 - quantized
    assert fp4 == pytest.approx(kept + quantized / nvfp4, rel=1e-9)
    assert 0 < kept < 0.1 * bf16  # the head: 6.7% of the bf16 GEMM seconds
    return bf16, quantized, kept


def test_the_presets_state_their_sources_figures(registry):
    b300 = registry.hardware_preset("b300").spec
    gb300 = registry.hardware_preset("gb300").spec
    # nvidia-smi's totals (ai-dynamo/aiconfigurator b300_sxm.yaml and gb300.yaml): 275040 and 284208 MiB.
    assert b300.memory_bytes == 275040 * 2**20 and gb300.memory_bytes == 284208 * 2**20
    assert b300.peak_flops == {"bf16": 2250e12, "fp16": 2250e12, "fp8": 4500e12, "fp4": 14000e12}
    assert gb300.peak_flops == {"bf16": 2500e12, "fp16": 2500e12, "fp8": 5000e12, "fp4": 15000e12}
    assert (b300.devices_per_node, gb300.devices_per_node) == (8, 72)
    # One 800 Gb/s ConnectX-8 per GPU: 100 GB/s each way; NVLink 5, 900 GB/s each way.
    assert b300.inter_node_bandwidth_bytes_per_second == gb300.inter_node_bandwidth_bytes_per_second == 100e9
    assert b300.intra_node_bandwidth_bytes_per_second == gb300.intra_node_bandwidth_bytes_per_second == 900e9
    assert b300.memory_bandwidth_bytes_per_second == 7750e9 and gb300.memory_bandwidth_bytes_per_second == 8000e9
    assert b300.architecture == gb300.architecture == "blackwell"


def test_nvfp4_takes_the_b300_speedup_on_blackwell_ultra(registry):
    # Transformer Engine's pre-quantized GEMM benchmark on a B300: 13.102 ms bf16 / 3.764 ms NVFP4 per layer = 3.4809.
    for hardware in ("b300", "gb300"):
        priced = _time(registry, hardware, "nvfp4")
        assert priced.provenance["gemm_speedup_forward"] == pytest.approx(13.102 / 3.764, abs=1e-4)
        assert priced.provenance["gemm_dtype"] == "fp4"
        # MFU against the recipe's own (FP4) peak, labelled apart from the bf16 one: the ratio of the two peaks.
        peaks = registry.hardware_preset(hardware).spec.peak_flops
        assert priced.mfu / priced.mfu_recipe_peak == pytest.approx(peaks["fp4"] / peaks["bf16"])
        _check_recipe_gemms(registry, _spec(registry, hardware), B300_NVFP4)
    # GEMM-bound (Llama 3 8B, 32,768 tokens a micro-batch): every GEMM but the head's runs 3.4809 times faster under
    # nvfp4, 1.83 under mxfp8; on the B300 0.6008 s of bf16 GEMMs, 0.5608 s of them quantized and the head's 0.0400 s.
    bf16, quantized, kept = _check_recipe_gemms(registry, _spec(registry, "b300"), B300_NVFP4)
    assert (bf16, quantized, kept) == pytest.approx((0.6008, 0.5608, 0.03998), rel=2e-4)
    fp4, mx, bf = (_compute(registry, _spec(registry, "b300"), r) for r in ("nvfp4", "mxfp8", "bf16"))
    # The output projection keeps its bf16 input under both (Megatron-Core's set_save_original_input) and quantizes it
    # again in backward: over its 32,768 x 2,048 elements a layer, 32 layers, 4 bytes more an element under nvfp4 (two
    # reads of 2 bytes and a 0.5625-byte write again, one write fewer forward) and 2 under mxfp8 (one read, one
    # 1.03125-byte write): 8.6 and 4.3 GB, 1.74 and 0.87 ms. One micro-batch a step: the cached weights' once-a-step
    # quantization adds 3.65 ms under nvfp4 and 2.89 ms under mxfp8 (hp_core/engine/timing/stage_weights.py).
    assert fp4 < mx < bf and (fp4, mx, bf) == pytest.approx((0.44465, 0.57858, 0.79177), rel=2e-4)


def test_nvfp4_on_b200_and_gb200_takes_the_b200_figure(registry):
    # FP4 runs 4.0 times BF16 on both (9,000 / 2,250, 10,000 / 2,500): pytorch/ao#2427's B200 figure, bf16 7.74e-4 s over
    # NVFP4 2.05e-4 s at 8192 cubed = 3.7756, not the B300's 3.4809.
    for hardware in ("b200", "gb200"):
        priced = _time(registry, hardware, "nvfp4")
        assert priced.provenance["gemm_speedup_forward"] == pytest.approx(7.74e-4 / 2.05e-4, abs=1e-4)
    # GEMM-bound on the B200: the B300's GEMMs but for its rate (the B300's 0.6008 s at 1.0138 are 0.6091 s at 1), the
    # quantized ones 3.7756 times faster under nvfp4.
    bf16, quantized, kept = _check_recipe_gemms(registry, _spec(registry, "b200"), B200_NVFP4)
    assert bf16 == pytest.approx(1.0138 * _gemm_seconds(registry, _spec(registry, "b300"), "bf16"), rel=1e-9)
    assert bf16 == pytest.approx(0.6091, rel=2e-4)
    assert _compute(registry, _spec(registry, "b200"), "nvfp4") < _compute(registry, _spec(registry, "b200"), "mxfp8")


@pytest.mark.parametrize(("fp4_tflops", "shown"), [(10000, r"10000 / 2250 TFLOP/s, 4\.444"),
                                                    (11250, r"11250 / 2250 TFLOP/s, 5\.000"),
                                                    (9000.00009, r"9000\.00009 / 2250 TFLOP/s, 4\.000")])
def test_nvfp4_is_refused_where_no_measured_ratio_holds_the_device(registry, fp4_tflops, shown):
    # A B200 stating 10,000 (its NVFP4 column in some tables) or 11,250 TFLOP/s of FP4: 4.444 or 5.000 times its BF16,
    # held by neither measured range (4.000; 5.600-6.222), so no speedup carries. 9,000.00009 (4.00000004 times: beyond
    # the band's 1e-9 tolerance) is refused too, the message showing both peaks (at 2 decimals it read "4.00 ... 4.00").
    b200 = registry.hardware_preset("b200").spec
    with_fp4 = attrs.evolve(b200, peak_flops={**b200.peak_flops, "fp4": fp4_tflops * 1e12})
    with pytest.raises(ConfigError, match=r"fp4 dense peak is 4\.000, 5\.600-6\.222 times the bf16 one; "
                                          rf"NVIDIA B200 180GB states {shown} times, so none carries"):
        _time(registry, with_fp4, "nvfp4")
    # Stating no FP4 peak at all is refused before any ratio is read.
    no_fp4 = attrs.evolve(b200, peak_flops={k: v for k, v in b200.peak_flops.items() if k != "fp4"})
    with pytest.raises(ConfigError, match="states no peak FLOP/s"):
        _time(registry, no_fp4, "nvfp4")


def test_nvfp4_on_hopper_stays_refused(registry):
    with pytest.raises(ConfigError):
        _time(registry, "h100-sxm", "nvfp4")


def test_the_b300_prices_as_the_b200_but_for_its_gemm_rate_and_its_hbm(registry):
    # Same peaks, the same blackwell fractions: what differs in compute is the B300's gemm_rate_scale (1.0138, MAMF)
    # and its HBM (7.75 against 8 TB/s). Given the B200's HBM, the B300 prices as a B200 with GEMMs 1.0138 times as fast.
    assert _time(registry, "b300", "mxfp8").provenance["gemm_rate_scale"] == 1.0138
    b200, b200_faster = _spec(registry, "b200"), _spec(registry, "b200", gemm_rate_scale=1.0138)
    b300, b300_hbm = _spec(registry, "b300"), _spec(registry, "b300", memory_bandwidth_bytes_per_second=8000e9)
    for recipe in ("bf16", "mxfp8"):
        assert _compute(registry, b300_hbm, recipe) == pytest.approx(_compute(registry, b200_faster, recipe), rel=1e-12)
        # Its GEMMs take 1 - 1/1.0138 = 1.361% less: 0.1497 of what 1 - 1/1.1 (9.09%) takes off the B200's.
        gained = _compute(registry, b200, recipe) - _compute(registry, b300_hbm, recipe)
        assert gained / (_gemm_seconds(registry, b200, recipe) * (1 - 1 / FASTER)) == pytest.approx(
            (1 - 1 / 1.0138) / (1 - 1 / FASTER), rel=1e-9)
    # bf16: a little faster in GEMMs (8.29 ms of 0.6091 s), a little slower in memory-bound work (8 / 7.75: 1.68 ms).
    gemms = _gemm_seconds(registry, b200, "bf16") * (1 - 1 / 1.0138)
    memory = _compute(registry, b300, "bf16") - _compute(registry, b300_hbm, "bf16")
    assert (gemms, memory) == pytest.approx((8.291e-3, 1.678e-3), rel=1e-3)
    assert _compute(registry, b300, "bf16") == pytest.approx(_compute(registry, b200, "bf16") - gemms + memory, rel=1e-12)


def _entry(**changes):
    base = dict(
        architecture="x", matmul=Sourced(0.5, "s"), attention_forward=Sourced(0.5, "s"), attention_backward=Sourced(0.5, "s"),
        attention_forward_overhead_seconds=Sourced(0.0, "s"), attention_backward_overhead_seconds=Sourced(0.0, "s"),
        grouped_matmul=Sourced(0.5, "s"), grouped_half_rows=Sourced(100, "s"), memory_bandwidth=Sourced(0.8, "s"),
        intra_node_bus=Sourced(0.8, "s"), inter_node_bus=Sourced(0.8, "s"), all_to_all_bus=Sourced(0.7, "s"),
        collective_overhead_seconds=Sourced(0.0, "s"),
    )
    return DeviceEfficiency(**{**base, **changes})


def test_a_banded_speedup_is_picked_by_the_device_ratio_and_bands_do_not_overlap():
    entry = _entry(banded_gemm_speedups=(("nvfp4", 4.0, 4.0, Sourced(3.7, "s")), ("nvfp4", 5.6, 6.2, Sourced(3.4, "s"))))
    assert entry.gemm_speedup("nvfp4", 4.0) == 3.7 and entry.gemm_speedup("nvfp4", 6.0) == 3.4
    assert entry.gemm_speedup("nvfp4", 5.0) is None and entry.gemm_speedup("nvfp4") is None
    assert entry.speedup_bands("nvfp4") == ((4.0, 4.0), (5.6, 6.2)) and entry.speedup_bands("mxfp8") == ()
    assert entry.pass_speedups("nvfp4", ("dgrad",), 6.0) == (3.4, 3.4, 3.4)
    assert set(entry.figures()) >= {"gemm_speedup_nvfp4@4.00-4.00", "gemm_speedup_nvfp4@5.60-6.20"}
    for rows in ((("nvfp4", 4.0, 5.0, Sourced(3.0, "s")), ("nvfp4", 4.5, 6.0, Sourced(3.0, "s"))),  # overlapping
                 (("nvfp4", 6.2, 5.6, Sourced(3.0, "s")),), (("nvfp4", 0, 1.0, Sourced(3.0, "s")),),
                 (("bf16", 1.0, 1.0, Sourced(1.0, "s")),), (("nvfp4", 4.0, 4.0, 3.7),)):
        with pytest.raises(ValueError, match="banded_gemm_speedups"):
            _entry(banded_gemm_speedups=rows)
    with pytest.raises(ValueError, match="banded_gemm_speedups"):  # a kernel stated both plain and banded
        _entry(gemm_speedups=(("nvfp4", Sourced(3.0, "s")),), banded_gemm_speedups=(("nvfp4", 4.0, 4.0, Sourced(3.7, "s")),))


@pytest.mark.parametrize("row", [("nvfp4", True, 4.0, Sourced(3.7, "s")), ("nvfp4", 4.0, True, Sourced(3.7, "s")),
                                 ("nvfp4", False, True, Sourced(3.7, "s")), 4.0, None, Sourced(3.7, "s"),
                                 (["nvfp4"], 4.0, 4.0, Sourced(3.7, "s"))])
def test_a_banded_row_of_booleans_or_no_sequence_is_a_value_error(row):
    # True is an int to isinstance: as a peak ratio it would read 1.0; a row that is no sequence has no len().
    with pytest.raises(ValueError, match="banded_gemm_speedups: a row must be"):
        _entry(banded_gemm_speedups=(row,))


def test_a_banded_kernel_states_no_autocast_figure():
    # nvfp4:autocast in gemm_speedups would price nvfp4 on any device outside every band (autocast_speedup is read
    # where no banded row holds the device's ratio), defeating the banding.
    with pytest.raises(ValueError, match=r"banded_gemm_speedups: nvfp4 is banded, so gemm_speedups may not state "
                                         r"'nvfp4:autocast'"):
        _entry(gemm_speedups=(("nvfp4:autocast", Sourced(3.0, "s")),),
               banded_gemm_speedups=(("nvfp4", 4.0, 4.0, Sourced(3.7, "s")),))
    # Another kernel's autocast figure beside a banded one stands.
    entry = _entry(gemm_speedups=(("mxfp8:autocast", Sourced(1.5, "s")),),
                   banded_gemm_speedups=(("nvfp4", 4.0, 4.0, Sourced(3.7, "s")),))
    assert entry.autocast_speedup("mxfp8") == 1.5 and entry.autocast_speedup("nvfp4") is None
