"""What a run's optimizer keeps and runs: each layer's parameter slices asked of the :class:`~hp_core.types.Optimizer`.

A layer's parameters are tensor families (:class:`~hp_core.costs.ParamCount`);
one rank holds a slice of each (:class:`~hp_core.types.ParamSlice`: TP-split
families over ``tp``, routed experts over ``ep`` and ``etp``, a tied weight
whose owner sits on the stage once), counted exactly as
:func:`hp_core.engine.stage.layer_elements` counts them. The run's optimizer
states, per element of each slice, the bytes it keeps and the bytes its update
moves, and optionally the FLOPs its step runs and what it gathers under ZeRO;
:func:`layer_load` adds them up by parameter group (:class:`OptimizerLoad`),
before ZeRO sharding, which the memory estimate
(:func:`~hp_core.engine.stage.static_bytes`) and the step time apply.
"""

from __future__ import annotations

import functools
import math
import numbers
from fractions import Fraction
from typing import Iterator, Mapping

import attrs

from hp_core.costs import Flops, LayerCost, ParamCount
from hp_core.errors import HPError, PluginError, describe
from hp_core.registry import Registry
from hp_core.specs.precision import PrecisionSpec
from hp_core.types import Optimizer, ParamSlice

__all__ = ["OptimizerLoad", "add_loads", "foreach_form", "group_states", "layer_load", "master_bytes", "rank_params", "resolve_optimizer",
           "shard_update_bytes"]


def resolve_optimizer(registry: Registry, precision: PrecisionSpec) -> Optimizer:
    """The optimizer *precision* names, from *registry*.

    Raises:
        ConfigError: No optimizer of that name (``$.precision.optimizer``, listing the known ones).
    """
    return registry.optimizer(precision.optimizer, "$.precision.optimizer")


def rank_params(cost: LayerCost, tp: int, ep: int, etp: int,
                owners_here: frozenset[str] | set[str]) -> Iterator[tuple[ParamCount, int]]:
    """Each tensor family of *cost* one rank holds, with its elements on the rank (before ZeRO sharding).

    Args:
        owners_here: The kinds on the rank's stage: a tied weight whose owner
            is among them is one tensor, counted with its owner.
    """
    for p in cost.params:
        if p.shared_with is not None and p.shared_with in owners_here:
            continue  # a tied weight whose owner sits on this stage: one tensor
        if p.group == "routed_expert":
            # Experts over ep, each expert's matrices over etp (Megatron-Core parallel_state).
            yield p, math.ceil(p.stored_elements / (ep * (etp if p.tp_split else 1)))
        else:
            yield p, math.ceil(p.stored_elements / tp) if p.tp_split else p.stored_elements


@attrs.frozen
class OptimizerLoad:
    """What the optimizer holds and runs for one parameter group of a rank, before ZeRO sharding.

    Attributes:
        state_bytes: Its states: the sum over the group's slices of elements
            times the state bytes per element.
        step_elements: The elements its update passes over, by the HBM bytes it
            moves per element: ``((bytes per element, elements), ...)``, sorted.
        matmul_flops: Matrix-product FLOPs its step runs (on every rank).
        elementwise_flops: Elementwise FLOPs its step runs beside them.
        gather_bytes: States its step gathers whole where ZeRO shards them.
        elements: The group's trainable parameter elements on the rank (as
            :func:`hp_core.engine.stage.layer_elements` counts them).
        frozen_bytes: Bytes of the group's frozen families on the rank
            (``ParamCount.trainable`` false: held, in their ``element_bytes`` or
            the run's ``param_bytes``, with no gradient, master copy or state).
        frozen_elements: Their elements.
    """

    state_bytes: float = 0
    step_elements: tuple[tuple[float, int], ...] = ()
    matmul_flops: float = 0.0
    elementwise_flops: float = 0.0
    gather_bytes: float = 0.0
    elements: int = 0
    frozen_bytes: float = 0
    frozen_elements: int = 0

    def times(self, count: int) -> "OptimizerLoad":
        """The load of *count* such layers."""
        return OptimizerLoad(self.state_bytes * count, tuple((rate, n * count) for rate, n in self.step_elements),
                             self.matmul_flops * count, self.elementwise_flops * count, self.gather_bytes * count,
                             self.elements * count, self.frozen_bytes * count, self.frozen_elements * count)


def add_loads(loads: list[OptimizerLoad]) -> OptimizerLoad:
    """The loads added up (the step's elements merged by bytes per element)."""
    if len(loads) == 1:
        return loads[0]
    by_rate: dict[float, int] = {}
    state = matmul = elementwise = gather = elements = frozen = frozen_elements = 0
    for load in loads:
        frozen += load.frozen_bytes
        frozen_elements += load.frozen_elements
        state += load.state_bytes
        matmul += load.matmul_flops
        elementwise += load.elementwise_flops
        gather += load.gather_bytes
        elements += load.elements
        for rate, n in load.step_elements:
            by_rate[rate] = by_rate.get(rate, 0) + n
    return OptimizerLoad(state, tuple(sorted(by_rate.items())), matmul, elementwise, gather, elements, frozen,
                         frozen_elements)


def _ask(optimizer: Optimizer, what: str, slice_: ParamSlice, precision: PrecisionSpec):
    try:
        return getattr(optimizer, what)(slice_, precision)
    except HPError:
        raise
    except (Exception, SystemExit) as exc:  # a plugin must not end the command
        raise PluginError(optimizer.name, f"{what} raised {type(exc).__name__} for {slice_.param.name}: {describe(exc)}") from exc


def _non_negative(optimizer: Optimizer, what: str, value: object, name: str) -> float:
    """*value* if it is a finite non-negative real (an ``int``, a ``float`` or an exact ``Fraction``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0 or math.isinf(value):
        raise PluginError(optimizer.name, f"{what} must return a non-negative number for {name}, got {value!r}")
    return value


# Each family's answers, by the identity of the family, the optimizer and the precision, and each
# layer's load, by the identity of its families and the layout's degrees: the built-in kinds share
# equal ParamCount records between calls (hp_plugins.kit.param_count), so a search or a repeated
# estimate asks the optimizer once per family and adds a layer up once. An entry keeps the records
# its key names alive (so no identity is reused while it stands); both are emptied when full.
_ANSWERS: dict[tuple[int, int, int, int], tuple] = {}
_LAYERS: dict[tuple, tuple] = {}
_ANSWERS_MAX = 1 << 16


def _family(param: ParamCount, n: int, kind: str, optimizer: Optimizer,
            precision: PrecisionSpec) -> tuple[float, float, float, float, float]:
    """``(state bytes per element, step bytes per element, matmul FLOPs, elementwise FLOPs, gather bytes)`` of one slice."""
    key = (id(param), n, id(optimizer), id(precision))
    hit = _ANSWERS.get(key)
    if hit is not None and hit[0] is param and hit[1] is optimizer and hit[2] is precision:
        return hit[3]
    if param.matrix_elements > n:
        raise PluginError(kind, f"parameter family {param.name} states {param.matrix_elements} matrix elements on a "
                                f"rank, more than the {n} the rank holds (ParamCount.matrices are per rank)")
    slice_ = ParamSlice(param, n)
    state = _non_negative(optimizer, "state_bytes", _ask(optimizer, "state_bytes", slice_, precision), param.name)
    step = _non_negative(optimizer, "step_bytes", _ask(optimizer, "step_bytes", slice_, precision), param.name)
    matmul = elementwise = gather = 0.0
    if optimizer.step_flops is not None:
        found = _ask(optimizer, "step_flops", slice_, precision)
        if not isinstance(found, Flops):
            raise PluginError(optimizer.name, f"step_flops must return Flops for {param.name}, got {type(found).__name__}")
        matmul, elementwise = found.matmul_flops + found.attention_flops, found.elementwise_flops
    if optimizer.gather_bytes is not None:
        gather = _non_negative(optimizer, "gather_bytes", _ask(optimizer, "gather_bytes", slice_, precision), param.name)
    answers = (state, step, matmul, elementwise, gather)
    if len(_ANSWERS) >= _ANSWERS_MAX:
        _ANSWERS.clear()
    _ANSWERS[key] = (param, optimizer, precision, answers)
    return answers


@functools.lru_cache(maxsize=64)
def _foreach(optimizer: Optimizer) -> Optimizer:
    return attrs.evolve(optimizer, step_bytes=optimizer.foreach_step_bytes)


def foreach_form(optimizer: Optimizer, foreach: bool = True) -> Optimizer:
    """*optimizer* as its update runs: under PyTorch's multi-tensor (``foreach``) implementation (*foreach*: the
    runtime's ``TimingProfile.optimizer_foreach``), its :attr:`~hp_core.types.Optimizer.foreach_step_bytes` in place
    of ``step_bytes``; itself where it states none or runs fused. One record per optimizer while it is kept (the
    loads' caches key on identity)."""
    if not foreach or optimizer.foreach_step_bytes is None:
        return optimizer
    return _foreach(optimizer)


def layer_load(cost: LayerCost, kind: str, tp: int, ep: int, etp: int, owners_here: frozenset[str] | set[str],
               optimizer: Optimizer, precision: PrecisionSpec) -> dict[str, OptimizerLoad]:
    """What *optimizer* holds and runs for one layer's parameters on one rank, by group (before ZeRO sharding).

    The optimizer's answers are taken to depend on the slice and the
    precision alone (its functions are pure), so each family's are asked once.

    Raises:
        PluginError: A family states more matrix elements than the rank holds
            of it (naming the kind), or the optimizer raised or returned a
            negative or non-numeric figure.
    """
    owners_here = owners_here if isinstance(owners_here, frozenset) else frozenset(owners_here)
    params = cost.params
    key = (tuple(map(id, params)), tp, ep, etp, owners_here, id(optimizer), id(precision))
    hit = _LAYERS.get(key)
    if (hit is not None and hit[0] is optimizer and hit[1] is precision
            and all(a is b for a, b in zip(hit[2], params))):
        return dict(hit[3])
    elements: dict[str, int] = {}
    states: dict[str, float] = {}
    steps: dict[str, dict[float, int]] = {}
    flops: dict[str, list[float]] = {}
    gathers: dict[str, float] = {}
    frozen: dict[str, list] = {}
    get, oid, pid = _ANSWERS.get, id(optimizer), id(precision)
    for param, n in rank_params(cost, tp, ep, etp, owners_here):
        if not param.trainable:
            # Held, not trained: no gradient, master copy or optimizer state (ParamCount.trainable).
            width = precision.param_bytes if param.element_bytes is None else param.element_bytes
            held = frozen.setdefault(param.group, [0, 0])
            held[0] += n * (Fraction(width) if not isinstance(width, int) else width)
            held[1] += n
            continue
        hit = get((id(param), n, oid, pid))
        if hit is not None and hit[0] is param and hit[1] is optimizer and hit[2] is precision:
            state, step, matmul, elementwise, gather = hit[3]
        else:
            state, step, matmul, elementwise, gather = _family(param, n, kind, optimizer, precision)
        group = param.group
        if group in states:
            elements[group] += n
            states[group] += n * state
            by_rate = steps[group]
            by_rate[step] = by_rate.get(step, 0) + n
        else:
            elements[group] = n
            states[group] = n * state
            steps[group] = {step: n}
        if matmul or elementwise:
            totals = flops.setdefault(group, [0.0, 0.0])
            totals[0] += matmul
            totals[1] += elementwise
        if gather:
            gathers[group] = gathers.get(group, 0.0) + gather
    found = {
        group: OptimizerLoad(states.get(group, 0), tuple(sorted(steps.get(group, {}).items())),
                             *flops.get(group, (0.0, 0.0)), gathers.get(group, 0.0), elements.get(group, 0),
                             *frozen.get(group, (0, 0)))
        for group in dict.fromkeys([*states, *frozen])
    }
    if len(_LAYERS) >= _ANSWERS_MAX:
        _LAYERS.clear()
    _LAYERS[key] = (optimizer, precision, params, found)
    return dict(found)


def master_bytes(optimizer: Optimizer, precision: PrecisionSpec) -> int:
    """Bytes of master copy per parameter element: the precision's where the optimizer keeps one."""
    return precision.master_param_bytes if optimizer.master_copy else 0


def group_states(parts: Mapping[str, list[tuple[float, int]]]) -> dict[str, "int | Fraction"]:
    """Each group's state bytes on a stage from its layers' ``(state bytes of one layer, layers of it)`` parts.

    Added exactly (as fractions), so a stage's states are the same however
    its layers are grouped and walked (the memory estimate and the search's
    bounds walk them differently); a whole number of bytes is an ``int``, so
    ZeRO divides it as it divides every other byte count.
    """
    found: dict[str, int | Fraction] = {}
    for group, pairs in parts.items():
        if all(type(state) is int for state, _ in pairs):
            found[group] = sum(state * count for state, count in pairs)
            continue
        total = sum((Fraction(state) * count for state, count in pairs), Fraction(0))
        found[group] = total.numerator if total.denominator == 1 else total
    return found


def shard_update_bytes(dense: OptimizerLoad, experts: OptimizerLoad, dense_group: int, expert_group: int, zero: int,
                       grad_passes: float, grad_bytes: int, copy_bytes: int = 0) -> float:
    """HBM bytes one rank's optimizer update moves (:mod:`hp_core.engine.timing` prices them).

    Per element of the rank's shard (all its elements under ZeRO-0): the
    bytes the optimizer states its update moves (:attr:`Optimizer.step_bytes
    <hp_core.types.Optimizer.step_bytes>`: AdamW reads the gradient, reads and
    writes the master parameters and both moments, and casts the master copy
    into the parameters; Kingma and Ba 2015), plus the runtime's passes over
    the gradient shard (clipping: ``optimizer_grad_passes``) and *copy_bytes*
    (the copy of a narrower gradient buffer into the gradients the step reads:
    ``TimingProfile.optimizer_grad_bytes``). Elements are grouped by the bytes
    their update moves.
    """
    by_rate: dict[float, list[int]] = {}
    for index, load in enumerate((dense, experts)):
        for rate, n in load.step_elements:
            by_rate.setdefault(rate, [0, 0])[index] += n
    moved = 0.0
    for rate, (d, e) in sorted(by_rate.items()):
        shard = (d / dense_group + e / expert_group) if zero >= 1 else d + e
        moved += shard * (rate + grad_passes * grad_bytes + copy_bytes)
    return moved
