"""Named tensor-parallel plans of the ``fsdp2`` runtime (its ``tp_plan`` option).

A plan states which modules TP shards and how the loss sees the logits; the
decoder layers' projections are split the same way in every plan (attention
q/k/v and the MLP's gate/up column-wise, the output projections row-wise,
torchtitan ``apply_tp``). What differs:

========================  ======================  ===============  ==========
plan                      embedding and head      loss             sequence
                                                                    parallel
========================  ======================  ===============  ==========
``torchtitan_llama3``     vocabulary-parallel     loss parallel    yes
``vocab_gathered``        vocabulary-parallel     gathered logits  no
``replicated_head``       whole on every TP rank  whole logits     no
========================  ======================  ===============  ==========

``torchtitan_llama3`` is torchtitan's Llama 3 plan (torchtitan/models/llama3/infra/parallelize.py
``apply_tp``): ``tok_embeddings`` ``RowwiseParallel(input_layouts=Replicate(),
output_layouts=Shard(1))``, the norms ``SequenceParallel()``, ``output``
``ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1))`` under
``loss_parallel()``. ``vocab_gathered`` is the same head with
``output_layouts=Replicate()`` (the logits all-gathered before the loss) and
no sequence parallelism; ``replicated_head`` leaves ``tok_embeddings`` and
``output`` out of the plan. The last two are the plans PyTorch's memory
tracker runs (``hp_plugins/census/fsdp_step.py``, head plans ``vocab`` and
``replicated``).
"""

from __future__ import annotations

import attrs

__all__ = ["TP_PLANS", "TpPlan"]


@attrs.frozen
class TpPlan:
    """One named plan: the traits it sets and whether it runs sequence parallelism."""

    name: str
    replicated_vocab: bool
    gathered_logits: bool
    sequence_parallel: bool
    description: str


TP_PLANS = {
    plan.name: plan
    for plan in (
        TpPlan("torchtitan_llama3", False, False, True,
               "torchtitan's Llama 3 plan: vocabulary-parallel embedding and head, loss parallel, sequence-parallel norms"),
        TpPlan("vocab_gathered", False, True, False,
               "vocabulary-parallel embedding and head, logits all-gathered before the loss, no sequence parallelism"),
        TpPlan("replicated_head", True, False, False,
               "embedding and head whole on every TP rank (left out of the plan), no sequence parallelism"),
    )
}
