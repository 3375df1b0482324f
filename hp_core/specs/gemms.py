"""GEMM efficiency by shape: a device's measured table (:class:`GemmTable`) or a relative scale (:class:`GemmShapeScale`).

A linear layer with ``fan_in`` inputs and ``fan_out`` outputs over ``rows``
tokens runs three GEMMs (:data:`GEMM_PASSES`), each of ``2 * rows * fan_in *
fan_out`` FLOPs. :class:`GemmTable` holds absolute efficiencies measured per
pass for the shapes a benchmark timed (nearest shape within a tolerance);
:class:`GemmShapeScale` holds a device's efficiency at any shape relative to
its largest measured one, interpolated, which multiplies the device's single
``matmul`` figure (:meth:`GemmShapeScale.bind`). :mod:`hp_core.specs.timing`
re-exports both.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import attrs

from hp_core.errors import SpecError
from hp_core.specs.sourced import _text

__all__ = ["GEMM_PASSES", "GemmShapeScale", "GemmTable", "MachineGemms", "ShapedGemms", "SpeedupCurve"]

# The three GEMMs of a linear layer: the forward, the input gradient and the weight gradient.
GEMM_PASSES = ("forward", "input_gradient", "weight_gradient")


def _gemm_rows(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    width = 6 if attribute.name == "grouped" else 5
    for row in value:
        if (
            len(row) != width
            or row[0] not in GEMM_PASSES
            or any(not isinstance(d, int) or isinstance(d, bool) or d <= 0 for d in row[1:-1])
            or not 0 < row[-1] <= 1
        ):
            raise SpecError(attribute.name, f"{attribute.name}: a row must be (pass, {'experts, ' if width == 6 else ''}rows, fan_out, fan_in, efficiency) "
                             f"with pass one of {GEMM_PASSES}, positive integer sizes and an efficiency in (0, 1]; got {row!r}")


@attrs.frozen(kw_only=True, cache_hash=True)
class GemmTable:
    """Measured GEMM efficiencies of one device by shape, for the shapes a benchmark timed.

    A linear layer with ``fan_in`` inputs and ``fan_out`` outputs over ``rows``
    tokens runs three GEMMs (:data:`GEMM_PASSES`), each of ``2 * rows * fan_in *
    fan_out`` FLOPs: the forward, the input gradient and the weight gradient.
    A GEMM takes the efficiency measured for the table's shape nearest to it
    (the largest ratio over its dimensions, in log space) when every dimension
    is within :attr:`tolerance` of it, else ``None``: the caller falls back to
    the device's single figure. Grouped (expert) GEMMs are keyed by the experts
    on the rank as well.

    Attributes:
        source: Where the measurements come from.
        dense: ``(pass, rows, fan_out, fan_in, efficiency)`` rows.
        grouped: ``(pass, experts, rows per expert, fan_out, fan_in, efficiency)`` rows.
        tolerance: The largest ratio between a GEMM's dimension and the
            measured shape's for the measurement to stand for it.
        dtype: The compute dtype measured; other dtypes are not looked up.
    """

    source: str = attrs.field(validator=_text)
    dense: tuple[tuple[Any, ...], ...] = attrs.field(converter=tuple, validator=_gemm_rows, repr=False)
    grouped: tuple[tuple[Any, ...], ...] = attrs.field(default=(), converter=tuple, validator=_gemm_rows, repr=False)
    tolerance: float = attrs.field(default=1.05)
    dtype: str = "bf16"
    _index: dict = attrs.field(init=False, factory=dict, eq=False, hash=False, repr=False)
    _found: dict = attrs.field(init=False, factory=dict, eq=False, hash=False, repr=False)

    @tolerance.validator
    def _check_tolerance(self, attribute: attrs.Attribute, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 1:
            raise SpecError("tolerance", f"tolerance must be a ratio of at least 1, got {value!r}")

    def _near(self, key: tuple, point: tuple[float, ...], width: float) -> list[tuple[int, tuple[float, ...], float]]:
        """The rows of *key* whose every log-dimension lies in *point*'s bucket or a neighbouring one, in table order.

        Rows are bucketed by ``floor(log(d) / width)`` per dimension with
        ``width`` the largest log-distance a match may have, so a row within
        it of *point* is in the same or a neighbouring bucket in every dimension.
        """
        if not self._index:
            for rows, grouped in ((self.dense, False), (self.grouped, True)):
                for n, row in enumerate(rows):
                    logs = tuple(math.log(d) for d in row[1:-1])
                    cell = tuple(math.floor(v / width) for v in logs)
                    self._index.setdefault((grouped, row[0], cell), []).append((n, logs, row[-1]))
            self._index[None] = []  # built, even for an empty table
        found = []
        for offsets in itertools.product((-1, 0, 1), repeat=len(point)):
            cell = tuple(math.floor(v / width) + o for v, o in zip(point, offsets))
            found.extend(self._index.get(key + (cell,), ()))
        found.sort()
        return found

    def efficiency(self, gemm_pass: str, rows: float, fan_out: int, fan_in: int, experts: int = 0) -> float | None:
        """The measured efficiency for the nearest shape within :attr:`tolerance`, else ``None``.

        Ties go to the later row of the table.

        Args:
            gemm_pass: One of :data:`GEMM_PASSES`.
            rows: Tokens (per expert, for a grouped GEMM).
            fan_out: The layer's outputs (per expert).
            fan_in: The layer's inputs (per expert).
            experts: Experts on the rank for a grouped GEMM; 0 for a dense one.
        """
        key = (gemm_pass, experts, rows, fan_out, fan_in)
        if key in self._found:
            return self._found[key]
        point = tuple(math.log(max(d, 1)) for d in ((experts,) if experts else ()) + (rows, fan_out, fan_in))
        limit = math.log(self.tolerance) + 1e-12
        best, found = limit, None
        for _, logs, value in self._near((bool(experts), gemm_pass), point, limit):
            distance = max(abs(a - b) for a, b in zip(logs, point))
            if distance <= best:
                best, found = distance, value
        self._found[key] = found
        return found

    def pass_efficiencies(self, rows: float, fan_out: int, fan_in: int, experts: int = 0) -> tuple[float, float, float] | None:
        """The efficiencies of a linear layer's three passes (:data:`GEMM_PASSES`) where the table holds all three,
        else ``None``."""
        found = tuple(self.efficiency(p, rows, fan_out, fan_in, experts=experts) for p in GEMM_PASSES)
        return None if None in found else found

    def price(self, gemms: tuple[tuple[Any, ...], ...], grouped: bool = False) -> tuple[float, float, float, float]:
        """FLOPs of *gemms* and their FLOPs over efficiency, per pass, for the shapes the table holds (cached).

        Args:
            gemms: Dense ``(rows, fan_out, fan_in)`` or, with *grouped*,
                ``(experts, rows per expert, fan_out, fan_in)`` GEMMs, each the
                forward of a linear layer (``2 * rows * fan_out * fan_in`` FLOPs
                per expert).
            grouped: The GEMMs are grouped expert GEMMs.

        Returns:
            ``(listed, covered, forward, backward)``: the forward FLOPs of all of
            *gemms*, of those whose three passes the table holds, and for
            those the forward's and the two backward GEMMs' FLOPs divided by
            their efficiencies (times ``1 / peak`` is seconds).
        """
        return self._passes(gemms, grouped)[:4]

    def weight_gradient(self, gemms: tuple[tuple[Any, ...], ...], grouped: bool = False) -> float:
        """The weight-gradient GEMMs' part of :meth:`price`'s ``backward``: their FLOPs over efficiency (cached)."""
        return self._passes(gemms, grouped)[4]

    def _passes(self, gemms: tuple[tuple[Any, ...], ...], grouped: bool) -> tuple[float, float, float, float, float]:
        """:meth:`price`'s four figures and :meth:`weight_gradient`'s, computed once per *gemms*."""
        key = (grouped, gemms)
        if key in self._found:
            return self._found[key]
        terms = []
        for gemm in gemms:
            experts, shape = (gemm[0], gemm[1:]) if grouped else (0, gemm)
            terms.append((2.0 * max(experts, 1) * shape[0] * shape[1] * shape[2],
                          self.pass_efficiencies(*shape, experts=experts)))
        self._found[key] = result = _sum_passes(terms)
        return result


def _sum_passes(terms: Any) -> tuple[float, float, float, float, float]:
    """``(listed, covered, forward, backward, weight-gradient)`` over ``(forward FLOPs, pass efficiencies)`` pairs:
    every GEMM's FLOPs listed, those with ``(fprop, dgrad, wgrad)`` efficiencies (not ``None``) covered, each pass's
    FLOPs over its efficiency summed (times ``1 / peak`` is seconds); the backward is dgrad plus wgrad."""
    listed = covered = forward = backward = wgrad = 0.0
    for flops, passes in terms:
        listed += flops
        if passes is None:
            continue
        e_fwd, e_dgrad, e_wgrad = passes
        covered += flops
        forward += flops / e_fwd
        backward += flops / e_dgrad + flops / e_wgrad
        wgrad += flops / e_wgrad
    return listed, covered, forward, backward, wgrad


def _axis(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if (len(value) < 2 or any(not isinstance(d, int) or isinstance(d, bool) or d <= 0 for d in value)
            or any(a >= b for a, b in zip(value, value[1:]))):
        raise SpecError(attribute.name, f"{attribute.name} must be at least two increasing positive integers, got {value!r}")


@functools.lru_cache(maxsize=256)
def _log2_axis(axis: tuple[float, ...]) -> tuple[float, ...]:
    """*axis* in log2, computed once per axis (the grids' and curves' points are few and fixed)."""
    return tuple(math.log2(d) for d in axis)


def _bracket(axis: tuple[float, ...], value: float) -> tuple[int, float]:
    """The grid index below *value* on a log2 *axis* and the weight of the one above, clamped to the axis."""
    if value <= axis[0]:
        return 0, 0.0
    if value >= axis[-1]:
        return len(axis) - 2, 1.0
    i = max(j for j in range(len(axis) - 1) if axis[j] <= value)
    return i, (value - axis[i]) / (axis[i + 1] - axis[i])


@attrs.frozen(kw_only=True, cache_hash=True)
class SpeedupCurve:
    """A low-precision GEMM kernel's measured speedup over bf16 by the GEMM's size (one GEMM's ``2 * M * N * K``
    FLOPs): linear in ``log2`` of the FLOPs between the measured points, clamped at the ends (a GEMM smaller than the
    first point takes its value, one larger the last's). :attr:`DeviceEfficiency.gemm_speedup_curves
    <hp_core.specs.timing.DeviceEfficiency.gemm_speedup_curves>` states it for a kernel whose single figure it refines.

    Attributes:
        source: Where the points come from and how they were made of the measurements.
        flops: The points' GEMM sizes in FLOPs, increasing.
        values: The speedup at each point.
    """

    source: str = attrs.field(validator=_text)
    flops: tuple[float, ...] = attrs.field(converter=tuple)
    values: tuple[float, ...] = attrs.field(converter=tuple)

    @values.validator
    def _check(self, attribute: attrs.Attribute, value: Any) -> None:
        numbers = (*self.flops, *value)
        if (len(self.flops) < 2 or len(value) != len(self.flops)
                or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf for v in numbers)
                or any(a >= b for a, b in zip(self.flops, self.flops[1:]))):
            raise SpecError("values", "a speedup curve needs at least two points: increasing positive FLOPs and as "
                                      "many positive finite speedups")

    def at(self, flops: float) -> float:
        """The speedup of a GEMM of *flops* FLOPs (interpolated in log FLOPs, clamped)."""
        i, w = _bracket(_log2_axis(self.flops), math.log2(max(flops, 1.0)))
        return self.values[i] * (1 - w) + self.values[i + 1] * w


@attrs.frozen(kw_only=True, cache_hash=True)
class GemmShapeScale:
    """A device's dense GEMM efficiency at a shape relative to its largest measured shape, on a grid.

    A GEMM of ``M`` rows, ``N`` outputs and ``K`` inputs (the contracted
    dimension) takes the device's ``matmul`` efficiency times :meth:`factor`:
    the values interpolated multilinearly in ``log2`` of each dimension, each
    dimension clamped to its axis (a GEMM larger than the grid takes the
    largest measured shape's value, one smaller the smallest's). A linear
    layer's three passes are keyed as cuBLAS runs them: the forward ``M =
    rows, N = fan_out, K = fan_in``, the input gradient ``M = rows, N =
    fan_in, K = fan_out``, the weight gradient ``M = fan_out, N = fan_in, K =
    rows``. Grouped (expert) GEMMs are not scaled.

    Attributes:
        source: Where the measurements come from and how the grid was made of them.
        rows: The ``M`` axis, increasing.
        outputs: The ``N`` axis, increasing.
        inputs: The ``K`` axis, increasing.
        values: The relative efficiency at each grid point, ``rows`` outermost and ``inputs`` innermost.
        dtype: The compute dtype measured; other dtypes are not scaled.
    """

    source: str = attrs.field(validator=_text)
    rows: tuple[int, ...] = attrs.field(converter=tuple, validator=_axis)
    outputs: tuple[int, ...] = attrs.field(converter=tuple, validator=_axis)
    inputs: tuple[int, ...] = attrs.field(converter=tuple, validator=_axis)
    values: tuple[float, ...] = attrs.field(converter=tuple, repr=False)
    dtype: str = "bf16"
    _found: dict = attrs.field(init=False, factory=dict, eq=False, hash=False, repr=False)

    @values.validator
    def _check_values(self, attribute: attrs.Attribute, value: Any) -> None:
        if len(value) != len(self.rows) * len(self.outputs) * len(self.inputs) or any(
                isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf for v in value):
            raise SpecError("values", f"values must be {len(self.rows)} x {len(self.outputs)} x {len(self.inputs)} "
                                      "positive finite numbers, rows outermost")

    def factor(self, rows: float, outputs: float, inputs: float) -> float:
        """The relative efficiency of a GEMM of *rows* x *inputs* by *inputs* x *outputs* (interpolated, clamped)."""
        axes = (self.rows, self.outputs, self.inputs)
        brackets = [_bracket(_log2_axis(axis), math.log2(max(value, 1)))
                    for axis, value in zip(axes, (rows, outputs, inputs))]
        result = 0.0
        for corner in itertools.product((0, 1), repeat=3):
            weight, index = 1.0, 0
            for (i, w), c, axis in zip(brackets, corner, axes):
                weight *= w if c else 1 - w
                index = index * len(axis) + i + c
            if weight:
                result += weight * self.values[index]
        return result

    def pass_factors(self, rows: float, fan_out: int, fan_in: int) -> tuple[float, float, float]:
        """:meth:`factor` of a linear layer's three passes as cuBLAS runs them (the class docstring's keys)."""
        return (self.factor(rows, fan_out, fan_in), self.factor(rows, fan_in, fan_out), self.factor(fan_out, fan_in, rows))

    def price(self, gemms: tuple[tuple[Any, ...], ...]) -> tuple[float, float, float]:
        """``(FLOPs, forward, backward)``: the forward FLOPs of dense ``(rows, fan_out, fan_in)`` *gemms*, and their
        forward's and two backward GEMMs' FLOPs each over its :meth:`factor` (cached)."""
        return self.passes(gemms)[:3]

    def passes(self, gemms: tuple[tuple[Any, ...], ...]) -> tuple[float, float, float, float]:
        """:meth:`price`'s three figures and the weight-gradient GEMMs' part of its ``backward`` (cached)."""
        if gemms in self._found:
            return self._found[gemms]
        listed, _, forward, backward, wgrad = _sum_passes(
            (2.0 * rows * fan_out * fan_in, self.pass_factors(rows, fan_out, fan_in)) for rows, fan_out, fan_in in gemms)
        self._found[gemms] = result = (listed, forward, backward, wgrad)
        return result

    def bind(self, matmul: float) -> ShapedGemms:
        """The scale at a device's ``matmul`` efficiency, priced as a :class:`GemmTable` is."""
        return ShapedGemms(scale=self, matmul=matmul)


@attrs.frozen
class ShapedGemms:
    """A :class:`GemmShapeScale` times a ``matmul`` efficiency: :meth:`price` answers as :meth:`GemmTable.price`."""

    scale: GemmShapeScale
    matmul: float

    def price(self, gemms: tuple[tuple[Any, ...], ...], grouped: bool = False) -> tuple[float, float, float, float]:
        """``(listed, covered, forward, backward)`` as :meth:`GemmTable.price`: every dense GEMM covered, at ``matmul``
        times its shape's factor; no grouped GEMM (they keep the device's grouped figures)."""
        if grouped:
            return sum(2.0 * e * r * o * i for e, r, o, i in gemms), 0.0, 0.0, 0.0
        listed, forward, backward = self.scale.price(gemms)
        return listed, listed, forward / self.matmul, backward / self.matmul

    def weight_gradient(self, gemms: tuple[tuple[Any, ...], ...], grouped: bool = False) -> float:
        """The weight-gradient GEMMs' part of :meth:`price`'s ``backward`` (none for grouped GEMMs: not covered)."""
        return 0.0 if grouped else self.scale.passes(gemms)[3] / self.matmul


@attrs.frozen
class MachineGemms:
    """A device's GEMM pricing (a :class:`GemmTable`, a :class:`ShapedGemms` or its single ``matmul``) on one machine
    of the family whose GEMMs run at another rate (:class:`~hp_core.specs.hardware.HardwareSpec`'s
    ``gemm_rate_scale``, ``large_gemm_speedup`` and ``large_gemm_flops``): :meth:`price` answers as
    :meth:`GemmTable.price`, every dense GEMM covered.

    A dense GEMM takes the base's efficiency for each pass (the table's within its tolerance, else ``matmul``) times
    ``rate``, and times ``large_speedup`` where its ``2 * rows * fan_out * fan_in`` FLOPs reach ``large_flops``. A
    grouped GEMM likewise, per expert: the table's grouped row, else the device's fitted ``grouped * rows / (rows +
    half_rows)``, times ``rate``, and times ``large_speedup`` where one expert's GEMM reaches ``large_flops``
    (Transformer Engine runs each local expert's GEMM as its own cuBLAS call).
    """

    base: GemmTable | ShapedGemms | None
    matmul: float
    rate: float = 1.0
    large_speedup: float = 1.0
    large_flops: float = math.inf
    grouped: float = 0.0
    half_rows: float = 0.0
    _found: dict = attrs.field(init=False, factory=dict, eq=False, hash=False, repr=False)

    def _efficiencies(self, shape: tuple[Any, ...], experts: int = 0) -> tuple[float, float, float]:
        rows, fan_out, fan_in = shape
        found = self.base.pass_efficiencies(rows, fan_out, fan_in, experts) if isinstance(self.base, GemmTable) else None
        if experts:
            if found is None and not self.grouped > 0:
                raise ValueError("MachineGemms: a grouped GEMM off the table needs the device's fitted grouped efficiency")
            base = found or (self.grouped * rows / (rows + self.half_rows),) * 3
        elif isinstance(self.base, ShapedGemms):
            base = tuple(self.matmul * f for f in self.base.scale.pass_factors(rows, fan_out, fan_in))
        else:
            base = found or (self.matmul,) * 3
        k = self.rate * (self.large_speedup if 2.0 * rows * fan_out * fan_in >= self.large_flops else 1.0)
        return tuple(min(1.0, e * k) for e in base)

    def price(self, gemms: tuple[tuple[Any, ...], ...], grouped: bool = False) -> tuple[float, float, float, float]:
        """``(listed, covered, forward, backward)`` as :meth:`GemmTable.price` (cached)."""
        return self._passes(gemms, grouped)[:4]

    def weight_gradient(self, gemms: tuple[tuple[Any, ...], ...], grouped: bool = False) -> float:
        """As :meth:`GemmTable.weight_gradient`: the weight-gradient GEMMs' part of :meth:`price`'s ``backward``."""
        return self._passes(gemms, grouped)[4]

    def _passes(self, gemms: tuple[tuple[Any, ...], ...], grouped: bool) -> tuple[float, float, float, float, float]:
        key = (grouped, gemms)
        if key in self._found:
            return self._found[key]
        terms = []
        for gemm in gemms:
            experts, shape = (gemm[0], tuple(gemm[1:])) if grouped else (0, tuple(gemm))
            terms.append((2.0 * max(experts, 1) * shape[0] * shape[1] * shape[2], self._efficiencies(shape, experts)))
        self._found[key] = result = _sum_passes(terms)  # every GEMM priced: covered is listed
        return result
