"""Overlap priced as what a stream hides behind which compute (hp_core.engine.timing.overlap), by hand."""

from __future__ import annotations

import pytest

from hp_core.api import build_registry
from hp_core.engine.timing.overlap import bucketed, fsdp_layers, hidden_send
from hp_core.runtime_options import apply_options


def test_fsdp_prefetch_hides_each_gather_behind_the_previous_layers_forward():
    # Three layers: gather 2, reduce-scatter 3, forward 1, backward 4 (seconds).
    layers = [(2.0, 3.0, 1.0, 4.0)] * 3
    total, exposed = fsdp_layers(layers, reshard=True, prefetch=True, reduce_overlap=True)
    assert total == 3 * (2 + 2 + 3)
    # Forward: the first gather, then max(0, 2 - 1) twice = 4. Backward from the last layer: its re-gather (2);
    # layer 2 hides the next re-gather (2), layer 1 the re-gather and layer 2's reduce-scatter (5 - 4 = 1),
    # layer 0 layer 1's reduce-scatter (3 - 4 < 0); the last reduce-scatter (3).
    assert exposed == pytest.approx(4 + 2 + 0 + 1 + 0 + 3)
    # Nothing overlapped: all of it exposed; no reshard: no backward gathers.
    assert fsdp_layers(layers, reshard=True, prefetch=False, reduce_overlap=False) == (21.0, 21.0)
    assert fsdp_layers(layers, reshard=False, prefetch=False, reduce_overlap=False) == (15.0, 15.0)


def test_bucketed_reduction_and_sends():
    assert bucketed(10.0, 1.0, 4.0, True) == 6.0  # what the window does not hold
    assert bucketed(10.0, 1.0, 40.0, True) == 1.0  # at least the last bucket
    assert bucketed(10.0, 1.0, 40.0, False) == 10.0
    assert bucketed(0.5, 1.0, 40.0, True) == 0.5  # never more than the whole
    assert hidden_send(2.0, 1.5, True) == 0.5 and hidden_send(2.0, 1.5, False) == 2.0


def test_overlap_options_set_the_runtimes_schedule():
    registry = build_registry(use_env=False)
    megatron = registry.runtime("megatron")
    assert not megatron.timing.schedule.overlap_grad_reduce
    changed = apply_options(megatron, {"overlap_grad_reduce": "true", "tp_comm_overlap": True})
    assert changed.timing.schedule.overlap_grad_reduce and changed.timing.schedule.tp_comm_overlap
    assert changed.option_values == {"overlap_grad_reduce": True, "tp_comm_overlap": True}
    fsdp2 = registry.runtime("fsdp2")
    assert fsdp2.timing.schedule.fsdp_prefetch and fsdp2.timing.schedule.fsdp_reduce_scatter_overlap
    assert not apply_options(fsdp2, {"fsdp_prefetch": False}).timing.schedule.fsdp_prefetch
