"""The hp plugin: two layer kinds, registered through the ``hp`` entry-point group.

``pyproject.toml`` declares::

    [project.entry-points.hp]
    gated_deltanet = "hp_gated_deltanet.plugin"

so installing the distribution makes ``hp`` (and ``build_registry(entry_points=True)``)
load this module; ``hp plugins`` then lists the kinds with the distribution's name
and version. In code, without installing: ``build_registry(plugins=[plugin])``.
"""

from __future__ import annotations

from hp_core.markers import hookimpl
from hp_core.types import LayerKind

from hp_gated_deltanet.deltanet import (
    GDN_SWITCHES,
    GatedDeltaNetConfig,
    GatedDeltaNetMoEConfig,
    evaluate_gated_deltanet,
    evaluate_gated_deltanet_moe,
    validate_gated_deltanet,
    validate_gated_deltanet_moe,
)

__all__ = ["hp_layer_kinds"]


@hookimpl
def hp_layer_kinds():
    """Yield ``gated_deltanet`` and ``gated_deltanet_moe``."""
    yield LayerKind(
        name="gated_deltanet",
        config_type=GatedDeltaNetConfig,
        evaluate=evaluate_gated_deltanet,
        placement="body",
        switches=GDN_SWITCHES,
        validate=validate_gated_deltanet,
        description="Gated DeltaNet linear attention (Qwen3-Next) with a SwiGLU MLP",
    )
    yield LayerKind(
        name="gated_deltanet_moe",
        config_type=GatedDeltaNetMoEConfig,
        evaluate=evaluate_gated_deltanet_moe,
        placement="body",
        switches=GDN_SWITCHES,
        validate=validate_gated_deltanet_moe,
        description="Gated DeltaNet linear attention (Qwen3-Next) with routed and shared experts",
    )
