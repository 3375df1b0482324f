"""SGD and SGD with momentum: no state, or one buffer per parameter element.

``sgd`` keeps nothing beyond the weights it updates; ``sgd_momentum`` keeps one
momentum buffer of ``moment_bytes`` per element (Polyak 1964; PyTorch
``torch.optim.SGD(momentum=...)``): half of AdamW's states. Both update with
the fused update's traffic (:mod:`hp_plugins.optimizers.update`).
"""

from __future__ import annotations

from hp_core.markers import hookimpl
from hp_core.specs.precision import PrecisionSpec
from hp_core.types import Optimizer, ParamSlice
from hp_plugins.optimizers.update import update_bytes

__all__ = ["hp_optimizers"]


def sgd_state_bytes(s: ParamSlice, p: PrecisionSpec) -> int:
    return 0


def sgd_step_bytes(s: ParamSlice, p: PrecisionSpec) -> float:
    return update_bytes(p, 0)


def momentum_state_bytes(s: ParamSlice, p: PrecisionSpec) -> int:
    """One momentum buffer of ``moment_bytes``."""
    return p.moment_bytes


def momentum_step_bytes(s: ParamSlice, p: PrecisionSpec) -> float:
    return update_bytes(p, momentum_state_bytes(s, p))


@hookimpl
def hp_optimizers():
    yield Optimizer(name="sgd", state_bytes=sgd_state_bytes, step_bytes=sgd_step_bytes,
                    description="plain SGD: no state, fused update")
    yield Optimizer(name="sgd_momentum", state_bytes=momentum_state_bytes, step_bytes=momentum_step_bytes,
                    description="SGD with momentum: one buffer of moment_bytes, fused update")
