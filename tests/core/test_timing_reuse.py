"""What one step-time call prices once and reuses: collective prices and the stages a pipeline repeats.

The step time keeps each collective's price by (group, operation, bytes) and
prices a stage once for every stage running the same layers in the same chunk
roles with the same neighbours; these tests check that what is reused is what
pricing again would give, and that what differs between stages is not reused.
"""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import step_time
from hp_core.collectives import CollectiveModel, Fabric, GroupPlacement, nccl_seconds, place_group
from hp_core.engine.timing.rates import _Links
from hp_core.specs import ParallelSpec, RecomputeSpec, Setting

# Llama-3-8B's 32 layers on 4 stages of 8, two micro-batches per stage.
PARALLEL = ParallelSpec(tp=2, sp=True, pp=4, seq_len=4096, global_batch_size=8)


def _groups(stage):
    return {g: (total, exposed) for g, total, exposed in stage.communication_by_group}


def test_a_collective_is_priced_once_per_group_operation_and_bytes():
    asked = []

    def counting(call):
        asked.append(call)
        return nccl_seconds(call)

    fabric = Fabric(intra_bandwidth=300e9, intra_a2a_bandwidth=150e9, intra_latency=8e-6, nic_bandwidth=40e9,
                    inter_latency=30e-6)
    links = _Links(fabric, {"dp": GroupPlacement(16, 1, 16), "tp": GroupPlacement(8, 8, 1)},
                   CollectiveModel("counting", counting), "ring")
    first = links.seconds("dp", "all_reduce", 1e9)
    assert links.seconds("dp", "all_reduce", 1e9) == first
    assert len(asked) == 1
    # Two ring passes of 16 members on 16 nodes: 15/16 of 1 GB over each member's 40 GB/s adapter and 16
    # inter-node steps of 30 us each (hp_core.collectives._ring_pass).
    assert first == pytest.approx(2 * (15 / 16 * 1e9 / 40e9 + 16 * 30e-6))
    # A different group, operation or size is priced on its own.
    links.seconds("tp", "all_reduce", 1e9)
    links.seconds("dp", "all_gather", 1e9)
    links.seconds("dp", "all_reduce", 2e9)
    assert len(asked) == 4
    assert links.seconds("tp", "all_reduce", 1e9) == pytest.approx(2 * (7 / 8 * 1e9 / 300e9 + 7 * 8e-6))
    assert len(asked) == 4


def test_place_group_takes_lists_and_gives_the_same_placement_again():
    sizes = {"tp": 8, "cp": 1, "ep": 1, "dp": 16, "pp": 2}
    assert place_group(sizes, ["tp", "cp", "ep", "dp", "pp"], ["dp"], 8) == GroupPlacement(16, 1, 16)
    assert place_group(dict(sizes), ("tp", "cp", "ep", "dp", "pp"), ("dp",), 8) == GroupPlacement(16, 1, 16)


def test_middle_stages_are_alike_and_the_ends_send_half_as_much(registry, llama8b):
    t = step_time(llama8b, PARALLEL, registry=registry, hardware="h100-sxm", runtime="megatron")
    first, second, third, last = t.stages
    assert [s.index for s in t.stages] == [0, 1, 2, 3]
    assert attrs.evolve(second, index=2) == third
    # The first and last stages send one activation per micro-batch each way, a middle one two.
    assert 2 * _groups(first)["pp"][0] == _groups(second)["pp"][0]
    assert 2 * _groups(last)["pp"][0] == _groups(second)["pp"][0]
    # The ends hold the embedding (its dense gradient written in backward) and the head besides their 8 layers.
    assert first.backward_seconds > second.backward_seconds
    assert last.flops > second.flops


def test_a_stage_whose_layers_recompute_is_not_taken_for_its_neighbour(registry, llama8b):
    # Layers 8-15 (stage 1) recompute fully; stage 2 runs the same kind of layers without recompute.
    recompute = RecomputeSpec(layers=((8, 15, Setting("full")),))
    t = step_time(llama8b, PARALLEL, registry=registry, hardware="h100-sxm", runtime="megatron", recompute=recompute)
    plain = step_time(llama8b, PARALLEL, registry=registry, hardware="h100-sxm", runtime="megatron")
    assert t.stages[1].recompute_seconds == plain.stages[1].forward_seconds > 0
    assert t.stages[2] == plain.stages[2]
    assert t.stages[2].recompute_seconds == 0
