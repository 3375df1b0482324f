"""hp_core.collectives: group placement by rank order and NCCL's algorithms on the cluster, by hand."""

from __future__ import annotations

import math

import attrs
import pytest

from hp_core.collectives import CollectiveCall, Fabric, GroupPlacement, nccl_seconds, place_group

ORDER = ("tp", "cp", "ep", "dp", "pp")
NVLINK, NIC, A_IN, A_OUT = 300e9, 40e9, 8e-6, 30e-6
FABRIC = Fabric(intra_bandwidth=NVLINK, intra_a2a_bandwidth=NVLINK / 2, intra_latency=A_IN, nic_bandwidth=NIC,
                inter_latency=A_OUT, nvls_bandwidth=450e9, overhead=0.0)


def _call(op, nbytes, ranks, per_node, nodes, algorithm="ring"):
    return nccl_seconds(CollectiveCall(op, nbytes, GroupPlacement(ranks, per_node, nodes), FABRIC, algorithm))


def test_place_group_follows_the_rank_order():
    sizes = {"tp": 8, "cp": 1, "ep": 1, "dp": 16, "pp": 2}
    assert place_group(sizes, ORDER, ("tp",), 8) == GroupPlacement(8, 8, 1)
    assert place_group(sizes, ORDER, ("dp",), 8) == GroupPlacement(16, 1, 16)  # one member per node under TP 8
    assert place_group(sizes, ORDER, ("pp",), 8) == GroupPlacement(2, 1, 2)
    # dp fastest: the DP group fills nodes, TP spans them.
    assert place_group(sizes, ("dp", "tp", "cp", "ep", "pp"), ("dp",), 8) == GroupPlacement(16, 8, 2)
    assert place_group(sizes, ("dp", "tp", "cp", "ep", "pp"), ("tp",), 8) == GroupPlacement(8, 1, 8)
    # tp 2: the dense DP*CP group of cp 2 x dp 4 has 4 members on each of 2 nodes.
    assert place_group({"tp": 2, "cp": 2, "dp": 4}, ORDER, ("cp", "dp"), 8) == GroupPlacement(8, 4, 2)


def test_within_a_node_the_formulas_are_the_flat_ones():
    assert _call("all_gather", 8e9, 8, 8, 1) == pytest.approx(7 / 8 * 8e9 / NVLINK + 7 * A_IN)
    assert _call("all_reduce", 8e9, 8, 8, 1) == pytest.approx(2 * (7 / 8 * 8e9 / NVLINK + 7 * A_IN))
    assert _call("all_reduce", 8e9, 8, 8, 1, "tree") == pytest.approx(2 * 7 / 8 * 8e9 / NVLINK + 2 * 3 * A_IN)
    assert _call("all_reduce", 8e9, 8, 8, 1, "nvls") == pytest.approx(2 * 7 / 8 * 8e9 / 450e9 + 2 * A_IN)
    assert _call("all_to_all", 8e9, 8, 8, 1) == pytest.approx(7 / 8 * 8e9 / (NVLINK / 2) + 7 * A_IN)
    assert _call("p2p", 1e9, 2, 2, 1) == pytest.approx(1e9 / NVLINK + A_IN)


def test_a_ring_spanning_whole_nodes_uses_every_adapter_and_one_member_per_node_one():
    # 32 ranks, 8 per node on 4 nodes: each member sends 1/8 over its adapter, 7/8 over NVLink.
    whole = _call("reduce_scatter", 32e9, 32, 8, 4)
    assert whole == pytest.approx(31 / 32 * 32e9 * max(7 / (8 * NVLINK), 1 / (8 * NIC)) + 28 * A_IN + 4 * A_OUT)
    # 4 ranks, one per node: the whole pass over one adapter.
    single = _call("reduce_scatter", 32e9, 4, 1, 4)
    assert single == pytest.approx(3 / 4 * 32e9 / NIC + 4 * A_OUT)
    assert single > 5 * whole


def test_all_reduce_algorithms_across_nodes():
    ring = _call("all_reduce", 16e9, 16, 8, 2)
    tree = _call("all_reduce", 16e9, 16, 8, 2, "tree")
    hier = _call("all_reduce", 16e9, 16, 8, 2, "hierarchical")
    assert ring - tree == pytest.approx(2 * (14 * A_IN + 2 * A_OUT) - 2 * (7 * A_IN + math.log2(2) * A_OUT))
    # Within: reduce-scatter and all-gather of 16e9 over 8; across: all-reduce of 2e9 between 2 nodes on one adapter each.
    assert hier == pytest.approx(2 * (7 / 8 * 16e9 / NVLINK + 7 * A_IN) + 2 * (1 / 2 * 2e9 / NIC + 2 * A_OUT))
    assert _call("all_reduce", 16e9, 16, 8, 2, "auto") == pytest.approx(min(ring, tree, hier, _call("all_reduce", 16e9, 16, 8, 2, "nvls")))


def test_all_to_all_and_sends_across_nodes():
    # 16 ranks, 8 per node: 7/16 of the buffer over NVLink, 8/16 over the member's adapter, concurrently; a fabric
    # stating no all-to-all call latency is charged a step per peer (7 on the node, 8 across).
    assert _call("all_to_all", 16e9, 16, 8, 2) == pytest.approx(max(7 / 16 * 16e9 / (NVLINK / 2), 8 / 16 * 16e9 / NIC) + 7 * A_IN + 8 * A_OUT)
    # One stating it (one round for every peer, its fixed time included) is charged it once, whatever the peers and
    # without the fixed time per call, but never less than the same call's latency within one node: here 5 + 7 x 8 =
    # 61 us of fixed time and NVLink steps against a 25 us round, so 61 us; with a 100 us round, 100 us.
    stated = attrs.evolve(FABRIC, inter_a2a_latency=25e-6, overhead=5e-6)
    for ranks, nodes in ((16, 2), (64, 8)):
        seconds = nccl_seconds(CollectiveCall("all_to_all", 16e9, GroupPlacement(ranks, 8, nodes), stated))
        assert seconds == pytest.approx(max(7 / ranks * 16e9 / (NVLINK / 2), (ranks - 8) / ranks * 16e9 / NIC) + 61e-6)
        slow = nccl_seconds(CollectiveCall("all_to_all", 16e9, GroupPlacement(ranks, 8, nodes),
                                           attrs.evolve(stated, inter_a2a_latency=100e-6)))
        assert slow == pytest.approx(max(7 / ranks * 16e9 / (NVLINK / 2), (ranks - 8) / ranks * 16e9 / NIC) + 100e-6)
    inside = nccl_seconds(CollectiveCall("all_to_all", 8e9, GroupPlacement(8, 8, 1), stated))
    assert inside == pytest.approx(5e-6 + 7 / 8 * 8e9 / (NVLINK / 2) + 7 * A_IN)
    assert _call("p2p", 1e9, 2, 1, 2) == pytest.approx(1e9 / NIC + A_OUT)
    assert _call("all_gather", 0, 16, 8, 2) == 0.0 and _call("all_gather", 1e9, 1, 1, 1) == 0.0


def test_an_all_to_all_within_a_large_nvlink_domain_takes_the_8_gpu_calls_latency():
    # 64 ranks in one 72-GPU NVLink domain: the buffer's 63/64 over NVLink, and 7 NVLink steps of latency (the 8-GPU
    # node the per-step figures were fitted on), not 63 in series; 8 or fewer ranks keep one step per peer.
    assert _call("all_to_all", 16e9, 64, 64, 1) == pytest.approx(63 / 64 * 16e9 / (NVLINK / 2) + 7 * A_IN)
    assert _call("all_to_all", 16e9, 4, 4, 1) == pytest.approx(3 / 4 * 16e9 / (NVLINK / 2) + 3 * A_IN)
    # Spanning two such domains, the within-domain floor under a stated round is the same 7 steps.
    stated = attrs.evolve(FABRIC, inter_a2a_latency=25e-6, overhead=5e-6)
    seconds = nccl_seconds(CollectiveCall("all_to_all", 16e9, GroupPlacement(128, 64, 2), stated))
    assert seconds == pytest.approx(max(63 / 128 * 16e9 / (NVLINK / 2), 64 / 128 * 16e9 / NIC) + 5e-6 + 7 * A_IN)


def test_a_rank_order_names_each_dimension_once():
    from hp_core.specs import ParallelSpec

    assert ParallelSpec(seq_len=8, rank_order="dp-tp-cp-ep-pp").rank_order == "dp-tp-cp-ep-pp"
    for bad in ("tp-dp", "tp-cp-ep-dp-dp", "tp cp ep dp pp"):
        with pytest.raises(ValueError, match="rank_order must name tp, cp, ep, dp and pp once each"):
            ParallelSpec(seq_len=8, rank_order=bad)
