"""The Mamba-2 layer: a pre-norm, the Mamba-2 (SSD) mixer and a residual.

``Mamba2Block`` (transformers ``modeling_mamba2.py``) and the ``M`` layers of a
Nemotron-H hybrid (``NemotronHBlock`` with a ``NemotronHMamba2Mixer``) are this
layer; the mixer is the public kit's block (:mod:`hp_plugins.kit.ssm`: its
parameters, kept tensors on the fused and the reference path, FLOPs and
tensor-parallel split, with sources).
"""

from __future__ import annotations

import attrs

from hp_core.costs import LayerContext, LayerCost
from hp_core.markers import hookimpl
from hp_core.types import LayerKind
from hp_core.validators import one_of
from hp_plugins.kit import NORMS, MAMBA_SWITCHES, LayerBuilder, Mamba2Fields, mamba2_mixer, validate_mamba2

__all__ = ["Mamba2LayerConfig", "evaluate_mamba2", "hp_layer_kinds"]


@attrs.frozen(kw_only=True, slots=False)
class Mamba2LayerConfig(Mamba2Fields):
    """One Mamba-2 layer: the fields of :class:`~hp_plugins.kit.ssm.Mamba2Fields` and its pre-norm.

    Attributes:
        norm: The pre-norm's type (:data:`~hp_plugins.kit.NORMS`): ``rmsnorm``
            (``Mamba2RMSNorm``) or ``rmsnorm_fp32_weight`` (``NemotronHRMSNorm``).
    """

    norm: str = attrs.field(default="rmsnorm", validator=one_of(NORMS))


def evaluate_mamba2(c: Mamba2LayerConfig, x: LayerContext) -> LayerCost:
    """One Mamba-2 layer's cost on one rank."""
    b = LayerBuilder(x, c.hidden_size)
    mamba2_mixer(b, c, c.norm)
    return b.build()


@hookimpl
def hp_layer_kinds():
    yield LayerKind(
        name="mamba2",
        config_type=Mamba2LayerConfig,
        evaluate=evaluate_mamba2,
        placement="body",
        switches=MAMBA_SWITCHES,
        validate=validate_mamba2,
        description="Mamba-2 (SSD) layer: pre-norm, selective state-space mixer with gated RMSNorm (Mamba2, Nemotron-H M)",
    )
