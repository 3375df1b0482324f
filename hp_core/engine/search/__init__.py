"""The N-D layout search: every layout of a device count, planned and ranked by step time (docs/search.md).

:func:`search` enumerates every ``dp cp tp pp vpp ep etp`` whose product
``dp * cp * tp * pp`` is the device count (``ep * etp`` dividing
``dp * cp * tp``; experts only for a model with routed experts), every
micro-batch size dividing the per-data-parallel batch, every ZeRO level the
runtime runs (:func:`zero_levels`), the schedule ``vpp`` implies
(``1f1b`` or ``interleaved_1f1b``), with sequence parallelism whenever
``tp > 1``. Each candidate is rejected with a counted reason
(:data:`REASONS`) or planned with the exact recompute planner
(:func:`hp_core.api.plan_recompute`, restricted to what the runtime's
trainer executes), and the fitting ones are ranked by the plan's step time,
ties broken by the layout's key.

Two phases, both exact (they never drop a candidate the planner would fit and
rank in the top K):

1. **Bounds**, for every candidate (serially in this process, or through the
   executor one task per ``(cp, tp)``, whose layer evaluations no other task
   shares; serially too the families are bounded one ``(cp, tp)`` at a time,
   the evaluations of one dropped before the next): divisibility (heads,
   experts, layers, sequence, batch) from the layout alone or from the layers'
   own validation; then, from layer evaluations shared by every layout with
   the same ``(tp, cp, ep, etp, mbs)`` (a group's cost and its time per
   micro-batch depend on nothing else; a kind's answer is further shared
   between contexts that agree on every field its evaluator read,
   :mod:`~hp_core.engine.search.memo`), the heaviest stage's static memory
   (parameters, gradients, master copies, optimizer states: what no recompute
   changes), the first stage's static memory plus what it keeps and works
   with fully recomputed (the least any plan holds there), and a lower bound
   on the step-time bound: the pipeline of the layer times of the body group
   with the most layers alone, nothing recomputed. Micro-batch sizes are
   walked smallest first; a ZeRO level whose static bound fails is rejected at
   every size, and one whose first stage's static memory and kept activations
   alone exceed the device at every larger size too (the sequences in flight,
   ``mbs * min(in-flight, micro-batches)``, do not fall as ``mbs`` grows), so
   those sizes are never evaluated. The first backward's working set can fall
   as ``mbs`` grows (the layers above a large one free more), so with it the
   bound rejects one size at a time. A bounded candidate is kept as one
   integer (its lower bound's bits and its layout key).
2. **Best first**, in waves of a fixed size through the executor: the
   candidates are taken in the order of their *cheap bound*, the pipeline of
   every group's layer time with nothing recomputed (its sends, data-parallel
   reduction and optimizer step left out), which is priced in this process
   only for a candidate whose lower bound comes up before anything else
   (so the order is exactly the cheap bounds'); one taken with its cheap
   bound is *refined* (the exact memory bounds from :func:`estimate` with
   every body layer fully recomputed, and its exact step time with nothing
   recomputed, :func:`step_time`, a lower bound on any plan's since recompute
   only adds time), one taken with its refined bound is *planned* with the
   exact recompute planner (serially, both reuse the layer evaluations made
   to price the cheap bound). A wave takes only what is at most the K-th
   fastest plan found so far; once the next bound exceeds it, nothing left
   can enter the top K and the rest are counted as such (:data:`R_SLOWER`,
   which so also holds candidates whose full-recompute bound was never
   checked). ``planned`` and ``fitting`` count what was planned.

Layers the precision keeps in the compute dtype (``high_precision_layers_at_start``
/ ``_at_end``) are held fixed in every candidate, not searched: the model is
split at them as ``prepare`` splits it and every bound is of the split groups;
a ``pp`` whose stages hold fewer body layers than a count is rejected
(:data:`~hp_core.engine.search.layouts.R_KEPT`).

Answers are merged in submission order and the waves have a fixed size, so
nothing depends on the executor or its number of workers.

The package, one module per responsibility:

- :mod:`~hp_core.engine.search.layouts`: what is searched and answered
  (:class:`Layout`, :class:`Candidate`, :class:`SearchResult`), the rejection
  reasons (:data:`REASONS`), :data:`FIXABLE`, :func:`balanced_layers` and
  :func:`zero_levels`;
- :mod:`~hp_core.engine.search.first_phase`: the first phase, every
  candidate enumerated, rejected on sight or bounded;
- :mod:`~hp_core.engine.search.bounds`: the first phase's bounds, from layer
  evaluations shared between layouts;
- :mod:`~hp_core.engine.search.memo`: layer evaluations shared between the
  first phase's contexts;
- :mod:`~hp_core.engine.search.prepared_costs`: those evaluations as
  ``prepare`` has them (the precision recipe applied, the layers kept in the
  compute dtype split off and priced so);
- :mod:`~hp_core.engine.search.best_first`: the second phase and
  :func:`search`.

Its JSON document, CSV and plot are written by :mod:`hp_core.io.search_output`.
"""

from __future__ import annotations

from hp_core.engine.search.best_first import search
from hp_core.engine.search.layouts import FIXABLE, REASONS, Candidate, Layout, SearchResult, balanced_layers, zero_levels

__all__ = [
    "FIXABLE",
    "REASONS",
    "Candidate",
    "Layout",
    "SearchResult",
    "balanced_layers",
    "search",
    "zero_levels",
]
