"""A stage as a runtime's own peak points see it (``Runtime.peak_points``, :mod:`hp_core.peak_points`): its layers with
their parameter elements and gathered bytes, what it holds statically and at each point, for
:func:`~hp_core.engine.stage.plan_stage`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Mapping, Sequence

from hp_core.engine.precision import gathered_param_bytes, quantized_weight_elements
from hp_core.engine.schedule import rank_order
from hp_core.engine.static import layer_elements
from hp_core.peak_points import StageLayer, StageView

if TYPE_CHECKING:
    from hp_core.engine.stage import PlacedLayer, StageInputs, _Composition
    from hp_core.results import MemoryBreakdown

__all__ = ["stage_view"]


def stage_view(index: int, chunk_layers: Sequence[Sequence[PlacedLayer]], in_flight: Sequence[int],
               found: _Composition, points: Mapping[str, MemoryBreakdown], inputs: StageInputs) -> StageView:
    """The stage as ``Runtime.peak_points`` sees it (:mod:`hp_core.peak_points`). A layer's elements and gathered
    bytes read only its cost, the kinds on the stage and *inputs*: kept on ``inputs.views`` by the cost's identity,
    with the cost (the recompute planner asks for the same layers under every state it searches)."""
    p = inputs.parallel
    owners = frozenset(layer.kind for layers in chunk_layers for layer in layers)

    def made(layer: PlacedLayer, count: int, chunk: int) -> StageLayer:
        kept = inputs.views.get(key := (id(layer.cost), owners))
        if kept is None:
            elements = layer_elements(layer.cost, p.tp, p.ep, p.etp, owners)
            # Gathered as the recipe gathers them (torchao's float8 all-gather: its GEMM weights in FP8).
            gathered = math.ceil(gathered_param_bytes(sum(elements.values()), quantized_weight_elements([(layer.cost, 1)]),
                                                      inputs.recipe, inputs.precision.activation_bytes)) if inputs.recipe else None
            kept = inputs.views[key] = (layer.cost, elements, gathered)
        return StageLayer(layer.kind, layer.placement, layer.kept_bytes, layer.backward_working_bytes,
                          layer.cost.forward_working_bytes, dict(kept[1]), count, gathered_bytes=kept[2],
                          terms=layer.cost.activations, input_bytes=layer.cost.input_bytes, chunk=chunk)
    layers = tuple(made(layer, count, chunk) for chunk, (layers_of_chunk, count) in enumerate(zip(chunk_layers, in_flight))
                   for layer in layers_of_chunk)
    # The rank's order, from which ZeRO 3 under a multi-stage schedule is priced (asked only there).
    multi = inputs.zero >= 3 and len(chunk_layers) > 1
    order = rank_order(inputs.schedule, inputs.layout, index, len(chunk_layers)) if multi else None
    return StageView(index, layers, found.static, dict(points), p, inputs.precision, inputs.zero, inputs.micro_batches,
                     found.overhead, order=order)
