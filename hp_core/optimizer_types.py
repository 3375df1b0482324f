"""The optimizer record plugins yield (hook ``hp_optimizers``) and what it is asked about.

:class:`Optimizer` and :class:`ParamSlice`, re-exported by :mod:`hp_core.types`
(kept here so that module stays small).
"""

from __future__ import annotations

from typing import Callable

import attrs

from hp_core.costs import Flops, ParamCount
from hp_core.specs.precision import PrecisionSpec
from hp_core.validators import non_negative_int, plugin_name

__all__ = ["Optimizer", "ParamSlice"]

@attrs.frozen
class ParamSlice:
    """What one rank holds of one parameter tensor family of one layer: what an :class:`Optimizer` is asked about.

    Attributes:
        param: The family (:class:`~hp_core.costs.ParamCount`): its name and
            group, the matrices a rank holds of it and whether it is the
            embedding or the output head.
        elements: Its elements on the rank before ZeRO sharding: TP-split
            families over ``tp``, routed experts over ``ep`` (and ``etp``),
            padding included, as the memory estimate counts them.
    """

    param: ParamCount
    elements: int = attrs.field(validator=non_negative_int)

    @property
    def matrices(self) -> tuple[tuple[int, int, int], ...]:
        """The family's matrices on the rank, each ``(count, rows, columns)`` (:attr:`ParamCount.matrices`)."""
        return self.param.matrices

    @property
    def matrix_elements(self) -> int:
        """Elements of the slice in its matrices."""
        return self.param.matrix_elements

    @property
    def vector_elements(self) -> int:
        """Elements of the slice outside its matrices (biases, norm scales; all of a family that states none)."""
        return self.elements - self.param.matrix_elements


@attrs.frozen
class Optimizer:
    """An optimizer: what it keeps per parameter element and what its step costs.

    The engine asks it about each :class:`ParamSlice` of a rank (one layer's
    tensor family) and applies the ZeRO level: states and master copies are
    sharded over the data-parallel group from ZeRO-1 (the expert
    data-parallel group for routed experts), and so is the memory-bound
    update (each rank updates its shard). Its functions must be pure: the
    planner asks them once per family and precision and keeps the answers.

    Attributes:
        name: Registry name (``"adamw"``): what ``precision.optimizer`` and
            ``--optimizer`` name.
        state_bytes: ``state_bytes(slice, precision) -> float``: bytes of
            state it keeps on the device per element of the slice, before ZeRO
            sharding (AdamW: two moments, ``2 * moment_bytes``).
        step_bytes: ``step_bytes(slice, precision) -> float``: HBM bytes its
            update moves per element of the slice: it reads the gradient, reads
            and writes what it updates (the master copy, or the parameters in
            place) and its states, and casts a master copy into the parameters
            (AdamW: ``2 * master + grad_bytes + 2 * 2 * moment_bytes + cast``).
            The runtime's passes over the gradient (clipping, zeroing: its
            timing profile's ``optimizer_grad_passes``, ``grad_buffer_passes``)
            are the step time's, not the optimizer's.
        master_copy: It keeps the precision's master copy of the parameters
            (``master_param_bytes`` per element, none where that is 0);
            ``False``: it keeps none whatever the precision says.
        step_flops: Optional ``step_flops(slice, precision) ->``
            :class:`~hp_core.costs.Flops`: what its step computes on the slice
            beyond its memory-bound update (Muon's Newton-Schulz matrix
            products), run by every rank whatever the ZeRO level (a ZeRO shard
            is gathered whole first: ``gather_bytes``); the step time prices
            the matmul FLOPs at the device's matmul efficiency and the
            elementwise ones as a layer's. ``None``: nothing.
        gather_bytes: Optional ``gather_bytes(slice, precision) -> float``:
            bytes of the slice's states its step needs whole, all-gathered once
            per step over the sharding group where ZeRO shards them (the
            gathered output's size, NCCL's convention); priced as a
            data-parallel collective, not overlapped. ``None``: nothing.
        foreach_step_bytes: Optional ``foreach_step_bytes(slice, precision) -> float``: HBM bytes its update moves
            per element under PyTorch's multi-tensor (``foreach``) implementation, which runs the update as a chain
            of ``torch._foreach_*`` kernels, each reading its inputs from HBM and writing its output back (AdamW:
            torch/optim/adam.py ``_multi_tensor_adam``, eight passes). The step time uses it where the runtime's
            timing profile says the update runs so (``TimingProfile.optimizer_foreach``); ``None``: its update is
            priced at ``step_bytes`` there too (the optimizer states no unfused form).
        description: One line for ``hp plugins``; say where the figures come from.
    """

    name: str = attrs.field(validator=plugin_name)
    state_bytes: Callable[[ParamSlice, PrecisionSpec], float]
    step_bytes: Callable[[ParamSlice, PrecisionSpec], float]
    master_copy: bool = True
    step_flops: Callable[[ParamSlice, PrecisionSpec], Flops] | None = None
    gather_bytes: Callable[[ParamSlice, PrecisionSpec], float] | None = None
    description: str = ""
    foreach_step_bytes: Callable[[ParamSlice, PrecisionSpec], float] | None = None
