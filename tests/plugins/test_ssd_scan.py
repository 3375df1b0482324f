"""The Mamba-2 SSD scan's measured rates (Blackwell's and Hopper's ``ssd_scan_forward``, docs/time.md 'Mamba-2 SSD
scans'): each figure from its source rows, Hopper's against an independent H200 measurement, a Nano Mamba layer priced
at it by hand, the devices that state none unchanged."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import attrs
import pytest

from hp_core.api import layer_context
from hp_core.costs import LayerWork
from hp_core.engine.timing.layer import _layer_time
from hp_core.engine.timing.rates import _rates
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.kinds.mamba import Mamba2LayerConfig, evaluate_mamba2
from hp_plugins.kit.ssm import Mamba2Fields, ssd_chunk_flops
from hp_plugins.runtimes.timing_profiles import BLACKWELL, BLACKWELL_MEGATRON, HOPPER, MEGATRON_TE

DATA = Path(__file__).resolve().parent / "data" / "ssd_scan_b200.json"
HOPPER_DATA = Path(__file__).resolve().parent / "data" / "ssd_scan_hopper.json"
B200_BF16_PEAK = 2.25e15  # the b200 preset's dense bf16 peak
H100_BF16_PEAK = 989.4e12  # the h100-sxm preset's dense bf16 peak


def _flops(heads: int, head_dim: int, state: int, groups: int, chunk: int, batch: int, seq: int) -> int:
    c = Mamba2Fields(hidden_size=1, mamba_num_heads=heads, mamba_head_dim=head_dim, ssm_state_size=state,
                     n_groups=groups, chunk_size=chunk)
    return batch * -(-seq // chunk) * ssd_chunk_flops(c, heads, groups, per_head_cb=False)


def _filled_rates(rows) -> list[float]:
    """FLOP/s on hp's count of the latency rows ([model, batch, seq, heads, head dim, state, groups, chunk, ms]) of 2 or
    more sequences and 16,384 or more tokens: the calls that fill the GPU, the criterion of Blackwell's figure."""
    return [_flops(h, p, n, g, chunk, b, s) / (ms * 1e-3) for _, b, s, h, p, n, g, chunk, ms in rows if b >= 2 and b * s >= 16384]


def test_the_figure_is_the_median_rate_of_the_calls_that_fill_the_gpu():
    doc = json.loads(DATA.read_text())
    assert "4c5709ac66b6a30c4369dfe5ec838a94fc101840" in doc["source"]["commit"]
    assert len(doc["rows"]) == 305
    rates = _filled_rates(doc["rows"])
    assert len(rates) == 68
    assert statistics.median(rates) == pytest.approx(83.31e12, rel=1e-3)
    assert min(rates) == pytest.approx(74.48e12, rel=1e-3) and max(rates) == pytest.approx(88.71e12, rel=1e-3)
    assert BLACKWELL.ssd_scan_forward.value == pytest.approx(statistics.median(rates) / B200_BF16_PEAK, abs=5e-5)
    assert BLACKWELL.ssd_scan_backward.value == BLACKWELL.ssd_scan_forward.value  # assumed: the forward's rate
    assert "assumed" in BLACKWELL.ssd_scan_backward.source
    assert BLACKWELL_MEGATRON.ssd_scan_forward == BLACKWELL.ssd_scan_forward


def test_hoppers_figure_is_the_median_rate_of_the_h100_calls_of_16k_tokens_or_more():
    doc = json.loads(HOPPER_DATA.read_text())
    assert "pull/27299" in doc["source"]["url"] and "2025-10-25" in doc["source"]["where"]
    assert len(doc["rows"]) == 9
    # Each row: tokens at tokens/s, so its time is tokens / rate; hp's FLOPs at chunk 128 (one packed sequence).
    rates = {tokens: _flops(h, p, n, g, chunk, 1, tokens) * tps / tokens for tokens, h, p, g, n, chunk, tps in doc["rows"]}
    # 8,192 tokens: 64 chunks of 2 * 128^2 * 128 (C B^T, 1 group) + 128 * (2 * 128^2 * 64 + 4 * 128 * 128 * 64 +
    # 2 * 128 * 64) = 811,597,824 FLOPs, 51,942,260,736 in all, at 1.262327e7 tokens/s (0.649 ms): 80.04 TFLOP/s.
    assert _flops(128, 64, 128, 1, 128, 1, 8192) == 51_942_260_736
    assert rates[8192] == pytest.approx(80.04e12, rel=1e-3)
    filled = [r for tokens, r in rates.items() if tokens >= 16384]
    assert len(filled) == 5
    assert statistics.median(filled) == pytest.approx(70.18e12, rel=1e-3)
    assert min(filled) == pytest.approx(67.86e12, rel=1e-3) and max(filled) == pytest.approx(81.94e12, rel=1e-3)
    assert HOPPER.ssd_scan_forward.value == pytest.approx(statistics.median(filled) / H100_BF16_PEAK, abs=5e-5)
    assert HOPPER.ssd_scan_backward.value == HOPPER.ssd_scan_forward.value  # assumed: the forward's rate
    assert "assumed" in HOPPER.ssd_scan_backward.source
    # Had the column run at the model's chunk 256 (not stated in the copy read), the same times would read 1.335 as high.
    at_256 = [_flops(h, p, n, g, 256, 1, tokens) * tps / tokens for tokens, h, p, g, n, _, tps in doc["rows"] if tokens >= 16384]
    assert statistics.median(at_256) / H100_BF16_PEAK == pytest.approx(0.0947, abs=5e-5)


def test_hoppers_figure_against_mamba_ssm_on_an_h200():
    # tile-ai/TileOPs c9f559f: mamba_ssm's scan on an H200 locked at 1,830 MHz, chunk 256; its calls of 2 or more
    # sequences and 16,384 or more tokens (the criterion of Blackwell's figure) run at a median 62.5 TFLOP/s on hp's
    # count, 0.0632 of the peak: 11% under the H100 figure, which the H200's faster HBM would not make slower.
    doc = json.loads(HOPPER_DATA.read_text())
    assert "c9f559f297ea25504cf21e51349f4f82199991c4" in doc["cross_check_source"]["url"]
    assert len(doc["cross_check_rows"]) == 20
    rates = _filled_rates(doc["cross_check_rows"])
    assert len(rates) == 15
    assert statistics.median(rates) / H100_BF16_PEAK == pytest.approx(0.0632, abs=5e-5)
    assert 0.85 < statistics.median(rates) / H100_BF16_PEAK / HOPPER.ssd_scan_forward.value < 0.95


def test_a_nano_call_by_hand():
    # Nano: 64 heads of 64, 8 groups, state 128, chunk 128. A chunk: C B^T per group 2 * 128^2 * 128 * 8 = 33,554,432;
    # per head 2 * 128^2 * 64 + 4 * 128 * 128 * 64 + 2 * 128 * 64 = 6,307,840, times 64 = 403,701,760: 437,256,192.
    # 2 x 8,192 tokens are 128 chunks: 55,968,792,576 FLOPs, measured in 0.720879 ms, 77.6 TFLOP/s.
    assert _flops(64, 64, 128, 8, 128, 2, 8192) == 55_968_792_576
    row = next(r for r in json.loads(DATA.read_text())["rows"] if r[0].endswith("Nano-30B-A3B-BF16") and r[1:3] == [2, 8192])
    assert row[-1] == pytest.approx(0.720879)
    assert 55_968_792_576 / (row[-1] * 1e-3) == pytest.approx(77.64e12, rel=1e-3)


def _nano_layer(attention: str = "flash"):
    # Nemotron 3 Nano's Mamba-2 mixer (the nemotron-3-nano-30b-a3b preset), micro-batch 2 x 8,192 at TP 1.
    c = Mamba2LayerConfig(hidden_size=2688, mamba_num_heads=64, mamba_head_dim=64, ssm_state_size=128, n_groups=8,
                          chunk_size=128, norm="rmsnorm_fp32_weight")
    return evaluate_mamba2(c, layer_context(ParallelSpec(seq_len=8192, micro_batch_size=2), PrecisionSpec(), attention))


def _megatron_rates(device, attention="flash"):
    from hp_core.api import build_registry

    hardware = build_registry().hardware_preset("b200").spec
    profile = attrs.evolve(MEGATRON_TE, devices=(device,))
    return _rates(ParallelSpec(dp=1, seq_len=8192, micro_batch_size=2), hardware, profile, PrecisionSpec(), attention)


def test_a_nano_mamba_layer_prices_its_scan_at_the_measured_rate():
    cost = _nano_layer()
    assert cost.work.ssd_scan and cost.work.attention_calls == 0
    assert cost.forward.attention_flops == 55_968_792_576
    r = _megatron_rates(BLACKWELL_MEGATRON)
    k = BLACKWELL_MEGATRON.sustained_slowdown.value
    scan = _layer_time(cost, cost.work, False, frozenset(), r)
    plain = _layer_time(attrs.evolve(cost, forward=attrs.evolve(cost.forward, attention_flops=0.0)), cost.work, False,
                        frozenset(), r)
    # Forward: 55,968,792,576 / (2.25e15 * 0.0370) = 0.6723 ms; backward 2.5 times it; both times the slowdown.
    assert scan.forward_seconds - plain.forward_seconds == pytest.approx(k * 55_968_792_576 / (2.25e15 * 0.0370), rel=1e-9)
    assert k * 55_968_792_576 / (2.25e15 * 0.0370) == pytest.approx(k * 0.6723e-3, rel=1e-4)
    assert scan.backward_seconds - plain.backward_seconds == pytest.approx(2.5 * (scan.forward_seconds - plain.forward_seconds))
    # A device that states no SSD figure prices the scan as fused attention: half the FLOPs at 0.529 of the peak
    # forward (0.0235 ms), 2.5 times them at 0.4 backward, no attention call's fixed time (the layer makes none).
    bare = attrs.evolve(BLACKWELL_MEGATRON, ssd_scan_forward=None, ssd_scan_backward=None)
    r0 = _megatron_rates(bare)
    before = _layer_time(cost, cost.work, False, frozenset(), r0)
    assert before.forward_seconds - plain.forward_seconds == pytest.approx(k * 0.5 * 55_968_792_576 / (2.25e15 * 0.529), rel=1e-9)
    assert before.backward_seconds - plain.backward_seconds == pytest.approx(k * 2.5 * 0.5 * 55_968_792_576 / (2.25e15 * 0.4),
                                                                             rel=1e-9)


def test_the_eager_path_and_plain_attention_keep_their_pricing():
    # The reference PyTorch path runs the scan as batched matmuls: not marked, priced as before.
    eager = _nano_layer("eager")
    assert not eager.work.ssd_scan
    # A layer whose attention is an attention core is never priced at the scan's rates.
    r = _megatron_rates(BLACKWELL_MEGATRON)
    from hp_core.costs import Flops, LayerCost

    cost = LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0, forward=Flops(attention_flops=1e12))
    t = _layer_time(cost, LayerWork(attention_calls=1), False, frozenset(), r)
    k = BLACKWELL_MEGATRON.sustained_slowdown.value
    assert t.forward_seconds == pytest.approx(k * (0.5e12 / (2.25e15 * 0.529) + 59.5e-6), rel=1e-9)


def test_a_nano_mamba_layer_on_an_h100_prices_its_scan_at_hoppers_figure():
    from hp_core.api import build_registry

    cost = _nano_layer()
    hardware = build_registry().hardware_preset("h100-sxm").spec
    r = _rates(ParallelSpec(dp=1, seq_len=8192, micro_batch_size=2), hardware, MEGATRON_TE, PrecisionSpec(), "flash")
    scan = _layer_time(cost, cost.work, False, frozenset(), r)
    plain = _layer_time(attrs.evolve(cost, forward=attrs.evolve(cost.forward, attention_flops=0.0)), cost.work, False,
                        frozenset(), r)
    assert HOPPER.sustained_slowdown is None  # no whole-run slowdown on Hopper: the scan's time as it is
    # Forward: 55,968,792,576 / (989.4e12 * 0.0709) = 0.7978 ms; backward 2.5 times it.
    assert scan.forward_seconds - plain.forward_seconds == pytest.approx(55_968_792_576 / (989.4e12 * 0.0709), rel=1e-9)
    assert 55_968_792_576 / (989.4e12 * 0.0709) == pytest.approx(0.7978e-3, rel=1e-4)
    assert scan.backward_seconds - plain.backward_seconds == pytest.approx(2.5 * (scan.forward_seconds - plain.forward_seconds))
