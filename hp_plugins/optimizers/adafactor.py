"""Adafactor: a factored second moment, no first moment (Shazeer and Stern 2018).

Adafactor ("Adafactor: Adaptive Learning Rates with Sublinear Memory Cost",
ICML 2018) keeps, for a matrix of ``r x c``, the row sums and the column sums of
its squared gradients' moving average, ``r + c`` elements instead of ``r * c``,
and the full second moment of a 1-D parameter; by default it keeps no first
moment (``beta1=None``). So per :class:`~hp_core.types.ParamSlice`, in
``moment_bytes`` each::

    sum over its matrices of count * (rows + columns) + its 1-D elements

as Hugging Face transformers' ``Adafactor`` does (``exp_avg_sq_row`` and
``exp_avg_sq_col`` for every parameter of two or more dimensions, one
``exp_avg_sq`` otherwise). The matrices are those the layer kind states a rank
holds (:attr:`ParamCount.matrices <hp_core.costs.ParamCount.matrices>`): under
tensor parallelism each rank factors its own shard (``rows / tp + columns`` for
a column-parallel weight), as an optimizer stepping each rank's local tensors
does. A family that states no matrices is counted as 1-D, a full second moment
(an upper bound for a third-party kind that states none). ZeRO-1 and up divide
its states over the sharding group as any optimizer's.

Step traffic: the fused update's (:mod:`hp_plugins.optimizers.update`) with its
states' bytes, and two more reads of the gradient: the row and column sums of
its squares must be complete before any element is updated, and update
clipping (the paper's Section 6, threshold 1) needs the update's RMS before
applying it, so a fused implementation passes over the gradient three times
(Hugging Face's implementation materialises the update and moves more).
"""

from __future__ import annotations

from fractions import Fraction

from hp_core.markers import hookimpl
from hp_core.specs.precision import PrecisionSpec
from hp_core.types import Optimizer, ParamSlice
from hp_plugins.optimizers.update import per_element, update_bytes

__all__ = ["factored_elements", "hp_optimizers"]


def factored_elements(s: ParamSlice) -> int:
    """Second-moment elements Adafactor keeps for the slice: ``r + c`` per matrix, one per 1-D element."""
    return sum(count * (rows + columns) for count, rows, columns in s.matrices) + s.vector_elements


def adafactor_state_bytes(s: ParamSlice, p: PrecisionSpec) -> Fraction | int:
    """Per element of the slice, exactly: its factored second moment's bytes over its elements."""
    return per_element(factored_elements(s) * p.moment_bytes, s.elements)


def adafactor_step_bytes(s: ParamSlice, p: PrecisionSpec) -> float:
    return update_bytes(p, adafactor_state_bytes(s, p)) + 2 * p.grad_bytes


@hookimpl
def hp_optimizers():
    yield Optimizer(
        name="adafactor", state_bytes=adafactor_state_bytes, step_bytes=adafactor_step_bytes,
        description="Adafactor (Shazeer and Stern 2018): row and column second moments per matrix, no first moment",
    )
