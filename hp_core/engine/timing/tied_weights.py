"""A weight tied across pipeline stages: its two copies' gradients summed once a step.

Where a layer's parameter is tied to another kind's (an output head tied to the embedding,
:attr:`ParamCount.shared_with <hp_core.costs.ParamCount.shared_with>`) and the two sit on different stages, each stage
holds its own copy (:func:`hp_core.engine.optimizer.rank_params`), and the trainer keeps them equal by summing their
gradients after the data-parallel reduction: Megatron-Core's ``finalize_model_grads`` all-reduces the word
embedding's main gradient over the embedding group, the first and the last pipeline stage
(``megatron/core/distributed/finalize_model_grads.py`` ``_allreduce_word_embedding_grads``, after
``finish_grad_sync``, at NVIDIA/Megatron-LM@d98e8a6). Nothing overlaps it: the two stages' optimizer steps wait for it.
"""

from __future__ import annotations

import attrs

from hp_core.engine.prepare import PreparedRun
from hp_core.engine.timing.results import StageTime

__all__ = ["tied_stages", "with_tied_sync"]


def tied_stages(run: PreparedRun) -> tuple[tuple[int, int], int]:
    """``((owner's stage, tied copy's stage), elements)``: the stages holding a tied weight's two copies and the
    elements one rank of them holds (its TP shard), or ``((s, s), 0)`` where no tied weight crosses stages (no
    tied weight, one stage, or both copies on one stage: DualPipe's two model copies put the first and the last chunk on
    every stage)."""
    chunks = run.parallel.chunks
    firsts = [s for s in range(run.parallel.pp) if 0 in run.stage_chunks(s)]
    lasts = [s for s in range(run.parallel.pp) if chunks - 1 in run.stage_chunks(s)]
    first, last = firsts[0], lasts[0]
    if set(firsts) & set(lasts):  # a stage holding both holds one tensor (hp_core.engine.optimizer.rank_params)
        return (first, first), 0
    owners = {run.kinds[g].name for g in run.placed_groups("first")}
    elements = 0
    for g in dict.fromkeys(run.placed_groups("last")):
        for p in run.costs[g].params:
            if p.shared_with is not None and p.shared_with in owners:
                elements += -(-p.stored_elements // run.parallel.tp) if p.tp_split else p.stored_elements
    return (first, last), elements


def with_tied_sync(stages: list[StageTime], run: PreparedRun, links, grad_bytes: float, slowdown: float) -> list[StageTime]:
    """*stages* with a cross-stage tied weight's gradient all-reduce (:func:`tied_stages`; two ranks of the ``pp``
    group, the main gradient at *grad_bytes* an element) added to the data-parallel time of the two stages holding it,
    as group ``embedding`` (per step, exposed); *stages* as they are where none crosses."""
    (owner, copy), elements = tied_stages(run)
    if not elements:
        return stages
    sync = links.subgroup_seconds("pp", "all_reduce", 2, elements * grad_bytes) * slowdown
    found = list(stages)
    for i in (owner, copy):
        s = found[i]
        found[i] = attrs.evolve(s, data_parallel_seconds=s.data_parallel_seconds + sync,
                                communication_by_group=s.communication_by_group + (("embedding", sync, sync),))
    return found
