"""FSDP (zero 3) under interleaved 1F1B as torch 2.13's multi-stage runtime runs it (docs/time.md, "FSDP under
pipeline parallelism"): the rank's compute order, the UNSHARD actions torch's ``_add_unshard_reshard`` inserts in
it, and what they cost. Hand-derived counts here; torch's own lowering where torch is installed."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from hp_core.engine.timing.overlap import fsdp_multi_stage, gathered_chunks, unshards
from hp_core.schedules import ScheduleLayout
from hp_core.specs.overlap import FsdpPipelineError, check_fsdp_pipeline
from hp_core.specs.parallel import ParallelSpec
from hp_plugins.schedules.classic import interleaved_order


def _order(p: int, v: int, m: int, rank: int) -> list[tuple[str, int, int]]:
    return list(interleaved_order(ScheduleLayout(p, v, m), rank))


def test_order_pp2_vpp2_four_micro_batches_by_hand():
    # Rank 0: warm-up min((2 - 0 - 1) * 2 + (2 - 1) * 2, 8) = 4 forwards, chunk (k // 2) % 2; then forwards 4..7
    # each with backward k = 0..3 on chunk 1 - (k // 2) % 2; then backwards 4..7.
    assert _order(2, 2, 4, 0) == [
        ("F", 0, 0), ("F", 0, 1), ("F", 1, 0), ("F", 1, 1),
        ("F", 0, 2), ("B", 1, 0), ("F", 0, 3), ("B", 1, 1), ("F", 1, 2), ("B", 0, 0), ("F", 1, 3), ("B", 0, 1),
        ("B", 1, 2), ("B", 1, 3), ("B", 0, 2), ("B", 0, 3)]
    # Rank 1: warm-up 2 forwards.
    assert [(k, c) for k, c, _ in _order(2, 2, 4, 1)][:6] == [("F", 0), ("F", 0), ("F", 1), ("B", 1), ("F", 1), ("B", 1)]


def test_unshards_pp2_vpp2_four_micro_batches_by_hand():
    # Two chunks fit the window of three: both gathered before the first action, once a step; chunk 1 first
    # computes at action 2.
    for rank in (0, 1):
        chunks = [c for _, c, _ in _order(2, 2, 4, rank)]
        assert unshards(chunks) == ((0, 0, 0), (1, 0, 2 if rank == 0 else 2))


def test_unshards_pp2_vpp4_evict_and_gather_again_by_hand():
    # Rank 1 of pp 2, vpp 4, m 2: warm-up min(0 * 2 + 3 * 2, 8) = 6 forwards, so its chunks run
    # 0 0 1 1 2 2 | 3 3 3 3 | 2 2 1 1 0 0 (forwards on chunks 0..3, then backwards on 3..0).
    chunks = [c for _, c, _ in _order(2, 4, 2, 1)]
    assert chunks == [0, 0, 1, 1, 2, 2, 3, 3, 3, 3, 2, 2, 1, 1, 0, 0]
    # Action 0 wants {0, 1, 2}; action 2 wants {1, 2, 3}: 0 evicted, 3 gathered (first used at 6); action 10
    # wants {2, 1, 0}: 3 evicted, 0 gathered again (used at 14). Five chunk gathers a step, chunk 0 twice.
    assert unshards(chunks) == ((0, 0, 0), (1, 0, 2), (2, 0, 4), (3, 2, 6), (0, 10, 14))


def test_every_chunk_gathered_at_least_once_and_used_after_issue():
    for p, v in itertools.product((2, 3, 4, 8), (2, 3, 4, 5, 8)):
        for m in (p, 2 * p, 3 * p):
            for rank in range(p):
                chunks = [c for _, c, _ in _order(p, v, m, rank)]
                found = unshards(chunks)
                counts = Counter(c for c, _, _ in found)
                assert set(counts) == set(range(v)) and len(found) >= v
                assert all(i <= j and chunks[j] == c and c not in chunks[i:j] for c, i, j in found)
                if v <= 3:  # the whole rank fits the window: one gather per chunk
                    assert len(found) == v


def test_gather_seconds_pp2_vpp2_by_hand():
    order = [(k, c) for k, c, _ in _order(2, 2, 4, 0)]
    # Both gathers issued before action 0 on one stream: chunk 0 over [0, 3], chunk 1 over [3, 8]. Action 0 waits
    # 3 s (first); actions 0 and 1 (forwards of 1 s) end at 5, action 2 waits for chunk 1 until 8: 3 s stalled.
    assert fsdp_multi_stage(order, [1.0, 1.0], [2.0, 2.0], [3.0, 5.0]) == (3.0, 3.0, 8.0)
    # Resharding after forward: each forward leaves its chunk's body layers sharded, so the next action on the
    # chunk passes over them again: actions 1, 4, 6, 9 on chunk 0 and 3, 5, 10, 12 on chunk 1 (m = 4 passes each).
    # Action 1 ends at 5.25 (0.25 exposed), action 2 waits until 8 (2.75), then 3 * 0.25 + 4 * 0.35 more.
    first, stalls, total = fsdp_multi_stage(order, [1.0, 1.0], [2.0, 2.0], [3.0, 5.0], [(0.5, 0.25), (0.7, 0.35)])
    assert (first, total) == (3.0, pytest.approx(8.0 + 4 * 0.5 + 4 * 0.7))
    assert stalls == pytest.approx(2.75 + 4 * 0.25 + 4 * 0.35)


def test_gathered_seconds_at_least_one_gather_per_chunk():
    for p, v, m in ((4, 8, 8), (8, 4, 16), (2, 5, 4)):
        gather = [float(c + 1) for c in range(v)]
        for rank in range(p):
            order = [(k, c) for k, c, _ in _order(p, v, m, rank)]
            _, _, total = fsdp_multi_stage(order, [0.5] * v, [1.0] * v, gather)
            assert total >= sum(gather)
            assert total == sum(gather[c] for c, _, _ in unshards([c for _, c in order]))


def test_check_fsdp_pipeline_multi_stage_reshard_after_forward_for_the_step_time_only():
    spec = ParallelSpec(dp=2, pp=2, vpp=2, zero=3, seq_len=1024, schedule="interleaved_1f1b", reshard_after_forward=True)
    check_fsdp_pipeline(3, spec, multi_stage=True)
    with pytest.raises(FsdpPipelineError, match=r"interleaved pipeline stages \(vpp=2\) is priced without reshard_after_forward") as err:
        check_fsdp_pipeline(3, spec)
    assert err.value.path == "$.parallel.reshard_after_forward"
    # Without it, the memory estimate prices it too.
    check_fsdp_pipeline(3, ParallelSpec(dp=2, pp=2, vpp=2, zero=3, seq_len=1024, schedule="interleaved_1f1b",
                                        reshard_after_forward=False))
    # A multi-stage schedule whose order the runtime lowering is not stated for: refused at the schedule.
    with pytest.raises(FsdpPipelineError, match=r"\$.parallel.schedule"):
        check_fsdp_pipeline(3, ParallelSpec(dp=2, pp=2, vpp=2, zero=3, seq_len=1024, schedule="zb_v",
                                            reshard_after_forward=False), multi_stage=True)


def test_check_fsdp_pipeline_needs_a_resolved_layout():
    # reshard_after_forward None (the config left it out; prepare resolves it to the runtime's default) is no answer:
    # read as false, an interleaved layout whose runtime default reshards would pass. Refused, as StageView refuses it.
    unresolved = ParallelSpec(dp=2, pp=2, vpp=2, zero=3, seq_len=1024, schedule="interleaved_1f1b")
    assert unresolved.reshard_after_forward is None
    for multi_stage in (False, True):
        with pytest.raises(ValueError, match=r"check_fsdp_pipeline needs the layout as the run resolves it "
                                             r"\(reshard_after_forward stated.*got reshard_after_forward None"):
            check_fsdp_pipeline(3, unresolved, multi_stage=multi_stage)
    with pytest.raises(ValueError, match="got reshard_after_forward None"):  # a single-stage schedule too
        check_fsdp_pipeline(3, ParallelSpec(dp=2, pp=2, zero=3, seq_len=1024, schedule="1f1b"))
    # Where FSDP under PP does not apply there is nothing to resolve: ZeRO < 3, one stage, nothing sharded.
    check_fsdp_pipeline(2, unresolved)
    check_fsdp_pipeline(3, ParallelSpec(dp=2, zero=3, seq_len=1024))
    check_fsdp_pipeline(3, ParallelSpec(dp=1, pp=2, vpp=2, zero=3, seq_len=1024, schedule="interleaved_1f1b"))


def test_hp_order_and_unshards_equal_torchs():
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")

    def torch_order(p: int, v: int, m: int, rank: int):
        # ScheduleInterleaved1F1B.__init__ needs pipeline stages (a process group); its order calculation reads only these.
        s = object.__new__(schedules.ScheduleInterleaved1F1B)
        s.pp_group_size, s.n_local_stages, s._n_microbatches = p, v, m
        s.number_of_rounds = max(1, m // p)
        s.microbatches_per_round = m // s.number_of_rounds
        return s._calculate_single_rank_operations(rank)

    checked = 0
    for p, v in itertools.product((2, 3, 4, 8), (2, 3, 4, 6, 8)):
        for m in (p, 2 * p, 4 * p):
            for rank in range(p):
                actions = torch_order(p, v, m, rank)
                compute = [("F" if a.computation_type == schedules.FORWARD else "B", (a.stage_index - rank) // p,
                            a.microbatch_index) for a in actions if a is not None]
                assert compute == _order(p, v, m, rank), (p, v, m, rank)
                lowered = schedules._add_unshard_reshard(list(actions))
                theirs = [(a.stage_index - rank) // p for a in lowered if a.computation_type == schedules.UNSHARD]
                assert theirs == [c for c, _, _ in unshards([c for _, c, _ in compute])], (p, v, m, rank)
                # The chunks torch's lowered list counts gathered at each compute action (UNSHARDed, not yet
                # RESHARDed), which the memory estimate holds, and its REDUCE_GRAD right after each chunk's m-th
                # backward, which ends that chunk's accumulators.
                held: set[int] = set()
                active: list[frozenset[int]] = []
                for a in schedules._add_reduce_grad(lowered, m):
                    c = (a.stage_index - rank) // p
                    if a.computation_type == schedules.UNSHARD:
                        held.add(c)
                    elif a.computation_type == schedules.RESHARD:
                        held.remove(c)
                    elif a.computation_type == schedules.REDUCE_GRAD:
                        assert compute[len(active) - 1][:2] == ("B", c) and active[-1] >= {c}
                        assert [k for _, k, _ in compute[:len(active)]].count(c) == 2 * m
                    else:
                        active.append(frozenset(held))
                assert tuple(active) == gathered_chunks([c for _, c, _ in compute]), (p, v, m, rank)
                checked += 1
    assert checked == 5 * 3 * (2 + 3 + 4 + 8)
