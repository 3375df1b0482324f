"""A runtime's own peak points: what its trainer holds at the moments it declares (``Runtime.peak_points``).

The stage planner (:func:`hp_core.engine.stage.plan_stage`) prices two points
by default: the end of warm-up (the first backward) and, for a runtime that
defers its gradient reduction, the end of the last backward. A trainer whose
lifetimes differ (gradients freed by ``zero_grad(set_to_none=True)`` before
the forward, parameters gathered unit by unit in execution order, a loss whose
forward holds more than its backward keeps) declares its own points: a
``Runtime.peak_points`` callable, ``peak_points(view) -> {name: MemoryBreakdown}``,
asked once per stage with a :class:`StageView` of the stage's layers in
forward order; the points it returns replace the default ones, and the stage
binds at the largest. It must be picklable and compare equal by value (a
module-level function or a frozen attrs class with ``__call__``), as runtime
options are. It may also define ``cached_bytes(view, name, point) -> int``:
what the caching allocator keeps reserved beside the point *name* (its
:class:`MemoryBreakdown` *point*) in pools that point's allocations cannot
use; it is asked for every point, and reserved memory is their high-water
(:func:`reserved_over_peak`, ``StageEstimate.cached_bytes``). The planner asks it
with the very :class:`StageView` object it gave ``peak_points``: what the points'
walk learned and ``cached_bytes`` needs again may be kept in the view's
:attr:`StageView.memo` (a fresh, empty dict per view) rather than walked twice.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from hp_core.costs import ActivationTerm
from hp_core.results import MemoryBreakdown
from hp_core.specs.parallel import ParallelSpec
from hp_core.specs.precision import PrecisionSpec

__all__ = ["StageLayer", "StageView", "reserved_over_peak"]


@attrs.frozen
class StageLayer:
    """One layer of a stage as a runtime's peak points see it.

    Attributes:
        kind: Its kind's name.
        placement: ``first``, ``body`` or ``last`` (its kind's placement).
        kept_bytes: What one micro-batch of it keeps under its recompute setting.
        backward_working_bytes: What its backward holds beyond what it keeps
            (the recomputed tensors included).
        forward_working_bytes: What its forward holds at its peak beyond what it keeps
            (:attr:`hp_core.costs.LayerCost.forward_working_bytes`).
        elements: Its parameter elements on the rank by group, before ZeRO sharding
            (a tied weight counted with its owner).
        in_flight: Micro-batches of its chunk in flight at the end of warm-up.
        gathered_bytes: Its parameters on the rank as a ZeRO-3/FSDP all-gather
            returns them: in the compute dtype, its GEMM weights in a precision
            recipe's format where the recipe gathers them so
            (``PrecisionRecipe.param_gather``); ``None``: no recipe stated.
        chunk: The position of its chunk in the stage's chunks (the schedule's
            ``stage_chunks`` order, as :attr:`StageView.order` names them).
    """

    kind: str
    placement: str
    kept_bytes: int
    backward_working_bytes: int
    forward_working_bytes: int
    elements: Mapping[str, int]
    in_flight: int
    gathered_bytes: int | None = attrs.field(default=None, kw_only=True)
    terms: tuple[ActivationTerm, ...] = attrs.field(default=(), kw_only=True)
    input_bytes: int = attrs.field(default=0, kw_only=True)
    chunk: int = attrs.field(default=0, kw_only=True)


def _resolved(instance: Any, attribute: attrs.Attribute, parallel: ParallelSpec) -> None:
    if parallel.reshard_after_forward is None:
        raise ValueError("StageView.parallel must be the layout as the run resolves it (reshard_after_forward "
                         "stated: Runtime.reshards_after_forward), got None")


@attrs.frozen
class StageView:
    """One stage of a run, for ``Runtime.peak_points``.

    Attributes:
        index: The stage.
        layers: Its layers in forward order (chunk by chunk).
        static: The planner's ``(parameters, gradients, master parameters,
            optimizer states)`` bytes of the stage under its ZeRO level.
        default_points: The points the planner priced (``warmup_end``, ...).
        parallel, precision, zero, micro_batches: The run's (``parallel`` as the
            run resolves it: its ``reshard_after_forward`` stated, the runtime's
            default where the config left it out).
        overhead_bytes: The runtime's bytes beyond the model math on this stage.
        order: Under ZeRO 3, where the stage runs more than one chunk and its
            schedule states one (:attr:`hp_core.schedules.Schedule.order`), the compute actions
            its rank issues in a step, ``(pass, chunk position, micro-batch)``;
            else ``None``.
        memo: Scratch space for the runtime's peak points on this view: what
            ``peak_points(view)`` found that its ``cached_bytes(view, ...)``
            needs again (the planner asks both with this one object), keyed by
            something of the runtime's own (the ``fsdp2`` runtime: its points
            object). Empty when the planner makes the view; no part of its
            equality.
    """

    index: int
    layers: tuple[StageLayer, ...]
    static: tuple[int, int, int, int]
    default_points: Mapping[str, MemoryBreakdown]
    parallel: ParallelSpec = attrs.field(validator=_resolved)
    precision: PrecisionSpec
    zero: int
    micro_batches: int
    overhead_bytes: int
    order: tuple[tuple[str, int, int], ...] | None = attrs.field(default=None, kw_only=True)
    memo: dict[Any, Any] = attrs.field(factory=dict, kw_only=True, eq=False, repr=False)


def reserved_over_peak(pools: Any, view: StageView, points: Mapping[str, MemoryBreakdown], peak: int) -> int:
    """How far reserved memory's high-water exceeds *peak* (``StageEstimate.cached_bytes``), *pools* a peak points'
    ``cached_bytes``: the most, over the points, of a point's peak and what the
    runtime states is cached beside it (``max_memory_reserved`` is a high-water over the whole step)."""
    reserved = peak
    for name, point in points.items():
        cached = pools(view, name, point)
        if isinstance(cached, bool) or not isinstance(cached, int) or cached < 0:
            raise ValueError(f"peak points' cached_bytes({name!r}) must be a non-negative int of bytes, got {cached!r}")
        reserved = max(reserved, point.peak_bytes + cached)
    return reserved - peak
