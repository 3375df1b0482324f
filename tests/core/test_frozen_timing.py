"""A frozen weight's backward (LoRA's base: ``LayerWork.frozen_matmul_flops``, ``frozen_gemms``) drops its
weight-gradient GEMM at the time the layer's pricing gave that GEMM: the device's measured table for its shape, the
machine's GEMM rates, the grouped GEMMs' figures, a low-precision recipe's speedup.

Hand-derived on the b200 preset (SimuMax's measured B200 GEMM table, ``large_gemm_speedup`` 1.223 from 1 TFLOP),
Megatron-LM's timing profile: each frozen layer's backward is the same layer's trained backward less exactly the
weight-gradient seconds of its frozen shapes.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hp_core.api import build_registry
from hp_core.costs import Flops, LayerCost, LayerWork
from hp_core.engine.timing.gemm_seconds import frozen_share
from hp_core.engine.timing.layer import _layer_time
from hp_core.engine.timing.rates import _rates
from hp_core.errors import ConfigError
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.runtimes.timing_profiles import B200_GEMMS

REGISTRY = build_registry(use_env=False)
TIMING = REGISTRY.runtime("megatron").timing
B200 = REGISTRY.hardware_preset("b200").spec
H100 = REGISTRY.hardware_preset("h100-sxm").spec
PEAK = 2.25e15  # B200 dense bf16
SLOWDOWN = 1.0534  # the Blackwell entry's sustained_slowdown: every layer time is multiplied by it
LARGE = 1.223  # b200's large_gemm_speedup, for a GEMM of at least 1e12 FLOPs

BIG = (4096, 16384, 8192)  # 2 x 4096 x 16384 x 8192 = 1.0995 TFLOP: in the table, above the large-GEMM threshold
ADAPTERS = ((4096, 16, 8192), (4096, 16384, 16))  # LoRA's A and B at rank 16 around it: trained
EXPERTS = (160, 154, 3072, 5120)  # 160 local experts of 154 rows (DeepSeek-V2's shape in the grouped table)
HEAD = (4096, 32128, 4096)  # an output head: kept in bf16 under a low-precision recipe


def _flops(*gemms):
    return sum(2.0 * rows * out * inp for rows, out, inp in gemms)


def _rates_of(hardware=B200, recipe=None, host=False):
    """The rates of one GPU of *hardware* under Megatron-LM's profile; without its host floor unless *host* (a layer
    of two big GEMMs and two adapters is launch-bound under FP8: test_the_host_floor_counts_no_frozen_weight_gradient)."""
    precision = PrecisionSpec() if recipe is None else PrecisionSpec(recipe=recipe)
    found = None if recipe is None else REGISTRY.precision_recipe(recipe)
    rates = _rates(ParallelSpec(seq_len=4096), hardware, TIMING, precision, "flash", found)
    return rates if host else attrs.evolve(rates, host=None)


def _backward(work: LayerWork, rates, matmul_flops: float):
    cost = LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0, forward=Flops(matmul_flops=matmul_flops))
    return _layer_time(cost, work, False, frozenset(), rates)


# The adapters are off the table: every pass at matmul 0.4878 (below the threshold), their backward twice their
# forward, its half the W pass.
ADAPTERS_W = SLOWDOWN * _flops(*ADAPTERS) / 0.4878 / PEAK


def test_the_table_s_passes_of_the_shapes_used():
    assert all(B200_GEMMS.pass_efficiencies(*a) is None for a in ADAPTERS)
    assert B200_GEMMS.efficiency("weight_gradient", *BIG) == pytest.approx(0.453337, abs=1e-6)
    assert B200_GEMMS.efficiency("weight_gradient", EXPERTS[1], *EXPERTS[2:], experts=EXPERTS[0]) == pytest.approx(
        0.0936523, abs=1e-7)
    assert TIMING.device("blackwell").matmul.value == 0.4878 and TIMING.device("blackwell").sustained_slowdown.value == SLOWDOWN
    assert (B200.large_gemm_speedup, B200.large_gemm_flops) == (LARGE, 1e12)


def test_a_frozen_large_gemm_on_b200_loses_its_measured_weight_gradient_at_the_machine_s_rate():
    flops = _flops(BIG, *ADAPTERS)
    trained = LayerWork(gemms=(BIG, *ADAPTERS))
    frozen = attrs.evolve(trained, frozen_matmul_flops=_flops(BIG), frozen_gemms=(BIG,))
    r = _rates_of()
    full, lora = _backward(trained, r, flops), _backward(frozen, r, flops)
    # The big GEMM's weight gradient at the table's 0.453337 times the large-GEMM speedup 1.223 = 0.554431 of the
    # peak (matmul_backward_factor 2: the weight-gradient GEMM is 1 x its forward FLOPs), times the slowdown.
    e_wgrad = 0.45333675604530027 * LARGE
    skipped = SLOWDOWN * _flops(BIG) / e_wgrad / PEAK
    assert skipped == pytest.approx(9.2846e-4, rel=1e-4)
    assert full.backward_seconds - lora.backward_seconds == pytest.approx(skipped, rel=1e-12)
    # (Before, it came off at the device's single matmul 0.4878: 0.554431 / 0.4878 = 1.137, 13.7% too much.)
    assert lora.forward_seconds == full.forward_seconds and lora.flops == pytest.approx(full.flops - _flops(BIG), rel=1e-15)
    # The W pass of a zero-bubble schedule: half the trained adapters' backward; the frozen GEMM defers nothing.
    assert lora.weight_gradient_seconds == pytest.approx(ADAPTERS_W, rel=1e-12)


def test_frozen_routed_experts_lose_their_grouped_weight_gradient():
    grouped = 2.0 * EXPERTS[0] * EXPERTS[1] * EXPERTS[2] * EXPERTS[3]  # 4.8 GFLOP an expert: below the threshold
    trained = LayerWork(gemms=ADAPTERS, grouped_flops=grouped, expert_rows=EXPERTS[1], expert_gemms=(EXPERTS,))
    frozen = attrs.evolve(trained, frozen_matmul_flops=grouped)  # no dense frozen GEMM: the grouped FLOPs are frozen
    r = _rates_of()
    full, lora = _backward(trained, r, grouped + _flops(*ADAPTERS)), _backward(frozen, r, grouped + _flops(*ADAPTERS))
    skipped = SLOWDOWN * grouped / 0.09365228280672189 / PEAK  # the grouped table's weight-gradient pass
    assert full.backward_seconds - lora.backward_seconds == pytest.approx(skipped, rel=1e-12)
    assert grouped == 775_107_379_200 and skipped == pytest.approx(3.8748e-3, rel=1e-4)
    # (Before, the grouped FLOPs came off at the dense matmul 0.4878: 0.4878 / 0.093652 = 5.21 times too little.)
    assert lora.weight_gradient_seconds == pytest.approx(ADAPTERS_W, rel=1e-12)


def test_under_fp8_the_frozen_weight_gradient_comes_off_at_its_fp8_time():
    """fp8-delayed on B200: the quantized GEMMs' backward over fp8_tensorwise's 1.923 (no split-accumulator figure
    on Blackwell: both gradient passes at it); the head, kept in bf16 (high_precision_gemms), at its bf16 time."""
    flops = _flops(BIG, HEAD, *ADAPTERS)
    trained = LayerWork(gemms=(BIG, HEAD, *ADAPTERS), high_precision_gemms=(HEAD,))
    frozen = attrs.evolve(trained, frozen_matmul_flops=_flops(BIG, HEAD), frozen_gemms=(BIG, HEAD))
    r = _rates_of(recipe="fp8-delayed")
    assert (r.gemm_speedup, r.gemm_speedup_backward) == (1.923, pytest.approx(1.923, rel=1e-12))
    full, lora = _backward(trained, r, flops), _backward(frozen, r, flops)
    big = _flops(BIG) / (0.45333675604530027 * LARGE) / PEAK / 1.923
    head = _flops(HEAD) / (B200_GEMMS.efficiency("weight_gradient", *HEAD) * LARGE) / PEAK  # 1.08 TFLOP: large too
    assert B200_GEMMS.efficiency("weight_gradient", *HEAD) == pytest.approx(0.438217, abs=1e-6)
    assert full.backward_seconds - lora.backward_seconds == pytest.approx(SLOWDOWN * (big + head), rel=1e-12)
    # Under the recipe the frozen layer's GEMM backward is still its input gradients: positive, below the trained one.
    assert 0 < lora.backward_seconds < full.backward_seconds


def test_a_frozen_statement_its_gemms_do_not_account_for_is_refused():
    work = LayerWork(gemms=(BIG, *ADAPTERS), frozen_matmul_flops=_flops(BIG))  # every FLOP listed, none said frozen
    with pytest.raises(ConfigError, match=r"LayerWork\.frozen_gemms.*must state which of its GEMMs are frozen"):
        _backward(work, _rates_of(), _flops(BIG, *ADAPTERS))
    with pytest.raises(ConfigError, match="not among its gemms"):
        _backward(attrs.evolve(work, frozen_gemms=(HEAD,)), _rates_of(), _flops(BIG, *ADAPTERS))


def test_the_host_floor_counts_no_frozen_weight_gradient():
    """Megatron-LM's host floor: 5.5 kernels a GEMM at 42 us each, each GEMM twice in backward but a frozen one once.
    Under fp8-delayed the layer of the big GEMM, the head and two adapters is launch-bound backward."""
    flops = _flops(BIG, HEAD, *ADAPTERS)
    trained = LayerWork(gemms=(BIG, HEAD, *ADAPTERS), high_precision_gemms=(HEAD,))
    frozen = attrs.evolve(trained, frozen_matmul_flops=_flops(BIG, HEAD), frozen_gemms=(BIG, HEAD))
    r = _rates_of(recipe="fp8-delayed", host=True)
    assert (r.host.seconds_per_kernel, r.host.kernels_per_gemm, r.host.cuda_graphs) == (42e-6, 5.5, "none")
    lora = _backward(frozen, r, flops)
    # (2 x 4 - 2) GEMMs x 5.5 kernels x 42 us = 1.386 ms (counting the two skipped ones, 1.848 ms), above its GEMMs
    # and quantization (both times the slowdown).
    assert lora.backward_seconds == pytest.approx(SLOWDOWN * 6 * 5.5 * 42e-6, rel=1e-12)
    assert _backward(frozen, _rates_of(recipe="fp8-delayed"), flops).backward_seconds < lora.backward_seconds
    assert _backward(trained, r, flops).backward_seconds > SLOWDOWN * 8 * 5.5 * 42e-6  # trained: compute-bound



def test_frozen_experts_launch_no_grouped_weight_gradient_under_the_host_floor():
    """A MoE layer of small experts (8 of 256 rows, 1024 x 2048: 8.59 GFLOP, off the grouped table) beside two trained
    adapters, under Megatron-LM's host floor in bf16 on B200: launch-bound (its backward GEMMs take 0.19 ms; the floor
    2.4-2.6 ms). Backward kernels: 5.5 for each of its 3 GEMMs (the experts' grouped GEMMs as one) twice, the router's
    26, the permutation's 4. All experts frozen, the grouped weight-gradient GEMM is not launched: one GEMM fewer;
    half of them frozen, it still runs (for the trained half)."""
    small = (8, 256, 1024, 2048)
    grouped = 2.0 * small[0] * small[1] * small[2] * small[3]
    work = LayerWork(gemms=ADAPTERS, grouped_flops=grouped, expert_rows=small[1], expert_gemms=(small,),
                     router_elements=4096 * 8, permute_bytes=4096 * 2 * 1024 * 2, routed_experts=64)
    flops = grouped + _flops(*ADAPTERS)
    r = _rates_of(host=True)
    assert r.host.router_kernels == (53, 26) and r.host.permute_kernels == 4

    def backward(frozen_flops: float) -> float:
        return _backward(attrs.evolve(work, frozen_matmul_flops=frozen_flops), r, flops).backward_seconds

    # Trained: (2 x 3) x 5.5 + 26 + 4 = 63 kernels x 42 us = 2.646 ms, times the slowdown 1.0534: 2.7873 ms.
    assert backward(0.0) == pytest.approx(SLOWDOWN * 63 * 42e-6, rel=1e-12)
    assert SLOWDOWN * 63 * 42e-6 == pytest.approx(2.7873e-3, rel=1e-4)
    assert backward(grouped / 2) == pytest.approx(SLOWDOWN * 63 * 42e-6, rel=1e-12)
    # Every expert frozen: (2 x 3 - 1) x 5.5 + 26 + 4 = 57.5 kernels: 2.5459 ms.
    assert backward(grouped) == pytest.approx(SLOWDOWN * 57.5 * 42e-6, rel=1e-12)
    assert SLOWDOWN * 57.5 * 42e-6 == pytest.approx(2.5440e-3, rel=1e-4)
    # Launch-bound: without the floor the trained backward is under a tenth of it.
    assert _backward(attrs.evolve(work, frozen_matmul_flops=0.0), _rates_of(), flops).backward_seconds < 2e-4


def test_frozen_sequential_experts_launch_no_weight_gradient_of_any_expert_under_the_host_floor():
    """Megatron-Core's SequentialMLP (LayerWork.sequential_experts), 4 local experts of 256 rows (FC1 1024 -> 2048, FC2
    2048 -> 1024) beside the two trained adapters, launch-bound as above: the host floor counts each expert's MLP as one
    GEMM (host_floor._expert_gemm_count), so its backward issues (2 x (2 + 4)) x 5.5 + 26 + 4 = 96 kernels trained;
    every expert frozen, none of the 4 runs its weight-gradient GEMMs: (12 - 4) x 5.5 + 30 = 74 (not 12 - 1, as the
    grouped GEMMs' one launch would be)."""
    pair = ((4, 256, 2048, 1024), (4, 256, 1024, 2048))
    grouped = sum(2.0 * e * rows * out * inp for e, rows, out, inp in pair)
    work = LayerWork(gemms=ADAPTERS, grouped_flops=grouped, expert_rows=256, expert_gemms=pair, sequential_experts=True,
                     router_elements=4096 * 8, permute_bytes=4096 * 2 * 1024 * 2, routed_experts=64)
    flops = grouped + _flops(*ADAPTERS)
    r = _rates_of(host=True)

    def backward(frozen_flops: float) -> float:
        return _backward(attrs.evolve(work, frozen_matmul_flops=frozen_flops), r, flops).backward_seconds

    assert backward(0.0) == pytest.approx(SLOWDOWN * 96 * 42e-6, rel=1e-12)
    assert backward(grouped / 2) == pytest.approx(SLOWDOWN * 96 * 42e-6, rel=1e-12)  # some experts still train
    assert backward(grouped) == pytest.approx(SLOWDOWN * 74 * 42e-6, rel=1e-12)
    # Launch-bound: without the floor the trained backward is under a tenth of it.
    assert _backward(work, _rates_of(), flops).backward_seconds < 4e-4


def test_frozen_flops_of_no_listed_shape_split_between_grouped_and_unlisted_dense_in_proportion():
    """A layer of the big GEMM and the adapters (listed), 137.4 GFLOP of dense FLOPs no listed GEMM accounts for (a
    4096 x 4096 x 4096 projection) and DeepSeek-V2's 775.1 GFLOP of experts, stating the big GEMM frozen and half of
    the 912.5 GFLOP of no listed shape: that half is split in proportion (frozen_share, an assumption), half the
    unlisted dense (68.7 GFLOP at ``matmul``'s 0.4878) and half the grouped (387.6 GFLOP at the grouped table's
    weight-gradient 0.093652)."""
    unlisted = 2.0 * 4096 * 4096 * 4096
    grouped = 2.0 * EXPERTS[0] * EXPERTS[1] * EXPERTS[2] * EXPERTS[3]
    flops = _flops(BIG, *ADAPTERS) + unlisted + grouped
    trained = LayerWork(gemms=(BIG, *ADAPTERS), grouped_flops=grouped, expert_rows=EXPERTS[1], expert_gemms=(EXPERTS,))
    frozen = attrs.evolve(trained, frozen_matmul_flops=_flops(BIG) + (unlisted + grouped) / 2, frozen_gemms=(BIG,))
    assert frozen_share(flops, grouped, frozen)[:2] == pytest.approx((_flops(BIG) + unlisted / 2, grouped / 2), rel=1e-15)
    r = _rates_of()
    full, lora = _backward(trained, r, flops), _backward(frozen, r, flops)
    big = _flops(BIG) / (0.45333675604530027 * LARGE)
    skipped = SLOWDOWN * (big + unlisted / 2 / 0.4878 + grouped / 2 / 0.09365228280672189) / PEAK
    assert skipped == pytest.approx(2.9319e-3, rel=1e-4)  # 0.9285 ms + 0.0659 ms + 1.9374 ms
    assert full.backward_seconds - lora.backward_seconds == pytest.approx(skipped, rel=1e-12)

_SHAPES = (BIG, HEAD, (4096, 4096, 4096), (4096, 28672, 4096), *ADAPTERS)


@settings(max_examples=60, deadline=None)
@given(frozen=st.lists(st.booleans(), min_size=len(_SHAPES), max_size=len(_SHAPES)), experts=st.booleans(),
       more=st.booleans(), device=st.sampled_from([(B200, None), (B200, "fp8-delayed"), (H100, None), (H100, "fp8-delayed")]))
def test_freezing_never_lengthens_a_backward_nor_takes_more_than_the_weight_gradients(frozen, experts, more, device):
    """Whichever share is frozen, the layer's backward lies between its trained backward and its input gradients
    alone (every weight frozen), never negative; freezing one more GEMM never lengthens it; its W pass is never
    negative."""
    grouped = 2.0 * EXPERTS[0] * EXPERTS[1] * EXPERTS[2] * EXPERTS[3]
    base = LayerWork(gemms=_SHAPES, high_precision_gemms=(HEAD,), grouped_flops=grouped, expert_rows=EXPERTS[1],
                     expert_gemms=(EXPERTS,))
    flops = _flops(*_SHAPES) + grouped
    r = _rates_of(*device)

    def backward(mask, experts_frozen):
        gemms = tuple(g for g, f in zip(_SHAPES, mask) if f)
        stated = _flops(*gemms) + (grouped if experts_frozen else 0.0)
        return _backward(attrs.evolve(base, frozen_gemms=gemms, frozen_matmul_flops=stated), r, flops)

    trained, some, every = backward([False] * len(_SHAPES), False), backward(frozen, experts), backward([True] * len(_SHAPES), True)
    assert 0 < every.backward_seconds <= some.backward_seconds <= trained.backward_seconds
    assert every.weight_gradient_seconds == pytest.approx(0.0, abs=1e-15) and some.weight_gradient_seconds >= -1e-15
    assert some.weight_gradient_seconds <= trained.weight_gradient_seconds
    # One more frozen GEMM (the first still trained) never lengthens the backward.
    if more and not all(frozen):
        i = frozen.index(False)
        assert backward(frozen[:i] + [True] + frozen[i + 1:], experts).backward_seconds <= some.backward_seconds * (1 + 1e-12)
