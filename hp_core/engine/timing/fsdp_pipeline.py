"""FSDP (zero 3) under pipeline parallelism as ``torch.distributed.pipelining`` runs FSDP2 stages (torch 2.13): one
stage's collectives priced into its groups (:func:`stage_fsdp`), and the fill delay of a multi-stage schedule's first
gathers (:func:`fill_delay`); docs/time.md, "FSDP under pipeline parallelism"."""

from __future__ import annotations

from typing import Sequence

import attrs

from hp_core.engine.timing.overlap import fsdp_layers, fsdp_layers_pipelined, fsdp_multi_stage
from hp_core.engine.timing.results import StageTime

__all__ = ["StageFsdp", "fill_delay", "stage_fsdp"]


@attrs.frozen
class StageFsdp:
    """A stage's FSDP under PP, priced: its groups (``fsdp`` per micro-batch, ``fsdp_step`` and ``hsdp_step`` per
    step), the exposed seconds added to each micro-batch, its exposed first-forward gathers on the fill (*head*,
    single-stage schedules), its once-per-step exposed reductions (*dp*) and, under a multi-stage schedule, *first*:
    ``(exposed wait of its first action for its gather, that action's forward seconds)``."""

    groups: dict
    comm: float
    head: float
    dp: float
    first: tuple[float, float] = (0.0, 0.0)


def stage_fsdp(per_layer: Sequence[tuple[float, float, float, float]], replicated: Sequence[float],
               is_body: Sequence[bool], chunk_sizes: Sequence[int], order: Sequence[tuple[str, int, int]] | None, *,
               reshard: bool, prefetch: bool, keep: float, slowdown: float, micro_batches: int) -> StageFsdp:
    """One stage's FSDP2 collectives under PP: *per_layer* ``(gather, reduce_scatter, forward, backward)`` seconds in
    the stage's chunk order (*chunk_sizes* layers a chunk), *replicated* HSDP's all-reduces, *is_body* whether each is
    its own unit; *keep* scales an exposed second (the data-parallel overlap left and the sustained slowdown),
    *slowdown* a total one.

    *order* ``None`` (a single-stage schedule, :func:`fsdp_layers_pipelined`): a pass of the body layers per
    micro-batch only under *reshard*, one of every unit in the stage's first forward (on the fill: *head*). Else
    the rank's compute order under torch's multi-stage runtime (:func:`fsdp_multi_stage`): whole-chunk gathers
    where its UNSHARD actions put them, hidden behind the actions between issue and use, and under *reshard* a pass
    of a chunk's body layers after each forward it still counts gathered. Either way the reduce-scatters (HSDP: then
    the all-reduces) run once per step after the last backward, exposed whole.
    """
    groups: dict[str, list[float]] = {}
    if order is None:
        (mb_total, mb_exposed), (head_total, head_exposed), reduce, all_reduce = fsdp_layers_pipelined(
            per_layer, replicated, is_body, reshard=reshard, prefetch=prefetch)
        if mb_total:
            groups["fsdp"] = [mb_total * slowdown, mb_exposed * keep]
        head = head_exposed * keep
        groups["fsdp_step"] = [(head_total + reduce) * slowdown, head + reduce * keep]
        comm, first = mb_exposed * keep, (0.0, 0.0)
    else:
        cut = [sum(chunk_sizes[:k]) for k in range(len(chunk_sizes) + 1)]
        spans = [range(cut[k], cut[k + 1]) for k in range(len(chunk_sizes))]
        forward = [sum(per_layer[i][2] for i in span) for span in spans]
        regather = None
        if reshard:
            regather = [fsdp_layers([(per_layer[i][0] if is_body[i] else 0.0, 0.0, per_layer[i][2], per_layer[i][3])
                                     for i in span], reshard=False, prefetch=prefetch, reduce_overlap=False) for span in spans]
        waited, stalls, gathered = fsdp_multi_stage(
            [(kind, c) for kind, c, _ in order], forward, [sum(per_layer[i][3] for i in span) for span in spans],
            [sum(per_layer[i][0] for i in span) for span in spans], regather)
        reduce, all_reduce = sum(r for _, r, _, _ in per_layer), sum(replicated)
        groups["fsdp"] = [gathered / micro_batches * slowdown, stalls / micro_batches * keep]
        groups["fsdp_step"] = [reduce * slowdown, reduce * keep]
        comm, head, first = stalls / micro_batches * keep, 0.0, (waited * keep, forward[order[0][1]] * slowdown)
    if replicated:
        groups["hsdp_step"] = [all_reduce * slowdown, all_reduce * keep]
    return StageFsdp(groups, comm, head, (reduce + all_reduce) * keep, first)


def fill_delay(stages: list[StageTime], firsts: Sequence[tuple[float, float]]) -> float:
    """The fill delay of a multi-stage schedule's first gathers: every rank issues its first UNSHARDs at the step's
    start, so stage ``i``'s first gather runs while stages ``0 .. i-1`` run micro-batch 0's first forward; stage
    ``i``'s first action starts at the later of the two, and the fill is delayed by the largest excess. Each stage's
    excess is added to its group ``fsdp_step`` (in place in *stages*)."""
    fill = delay = 0.0
    for index, (waited, forward) in enumerate(firsts):
        late = max(0.0, waited - fill)
        if late:
            groups = [(g, t, e + late if g == "fsdp_step" else e) for g, t, e in stages[index].communication_by_group]
            stages[index] = attrs.evolve(stages[index], communication_by_group=tuple(groups))
        delay = max(delay, late)
        fill += forward
    return delay
