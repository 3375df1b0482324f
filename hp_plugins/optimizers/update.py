"""The HBM traffic of a fused elementwise optimizer update, shared by the built-in optimizers.

A fused update (one kernel per parameter shard: PyTorch's ``fused`` AdamW, Apex
``FusedAdam``, Megatron-Core's distributed optimizer; PyTorch's ``foreach`` AdamW
runs one kernel per op instead: ``Optimizer.foreach_step_bytes``) reads the
gradient once, reads and writes the weights it updates (the master copy, or
the parameters in place where there is none) and each of its states, and
then the master copy is read again and cast into the model's parameters.
Per parameter element, with ``w`` the master copy's width (the parameters'
where there is none) and ``s`` the state bytes::

    2 * w + grad_bytes + 2 * s + cast,    cast = master_param_bytes + param_bytes (0 without a master copy)

For AdamW (``s = 2 * moment_bytes``) this is the figure the step time has
always used (Kingma and Ba 2015; docs/time.md).
"""

from __future__ import annotations

from fractions import Fraction

from hp_core.specs.precision import PrecisionSpec

__all__ = ["per_element", "update_bytes", "weight_widths"]


def weight_widths(precision: PrecisionSpec) -> tuple[int, int]:
    """``(w, cast)``: the width of the weights an update reads and writes (the master copy's, else the parameters')
    and the bytes per element of casting a master copy into the parameters (0 without one)."""
    p = precision
    if p.master_param_bytes:
        return p.master_param_bytes, p.master_param_bytes + p.param_bytes
    return p.param_bytes, 0


def update_bytes(precision: PrecisionSpec, state_bytes: float) -> float:
    """HBM bytes a fused update moves per parameter element that keeps *state_bytes* of state (module docstring)."""
    weights, cast = weight_widths(precision)
    return 2 * weights + precision.grad_bytes + 2 * state_bytes + cast


def per_element(total: Fraction | int, elements: int) -> Fraction | int:
    """*total* bytes over *elements*, exactly: an ``int`` where it divides, else a fraction (0 for no elements)."""
    if not elements:
        return 0
    found = Fraction(total) / elements
    return found.numerator if found.denominator == 1 else found
