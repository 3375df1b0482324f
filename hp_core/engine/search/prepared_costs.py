"""The first phase's layer costs as :func:`~hp_core.engine.prepare.prepare` has them: the precision recipe applied,
the layers the precision keeps in the compute dtype split off and priced so.

The memo (:mod:`~hp_core.engine.search.memo`) answers each group's cost with
the census applied; :func:`~hp_core.engine.prepare.evaluate_layers` goes on
to apply the precision recipe (``with_recipe``) and to price the groups split
off at the layers kept in the compute dtype (``in_compute_dtype``).
:class:`PreparedCosts` does the same to the memo's answers, so every bound
the first phase takes (:mod:`~hp_core.engine.search.bounds`) is of the costs
the estimate prices: a recipe that keeps linear layers' inputs quantized
keeps less than the compute dtype, and so does the working set of a layer
fully recomputed with them; a layer kept in bf16 holds no quantized weight
copy and runs its GEMMs at the bf16 rate. See docs/search.md.
"""

from __future__ import annotations

from typing import Any

from hp_core.costs import LayerCost
from hp_core.engine.precision import (
    check_high_precision_layers,
    compute_dtype_groups,
    compute_dtype_kinds,
    in_compute_dtype,
    kept_layer_counts,
    recipe_changes_costs,
    recipe_cost,
    split_high_precision_layers,
)
from hp_core.engine.search.layouts import _reason_of
from hp_core.errors import ConfigError
from hp_core.precision_recipes import PrecisionRecipe
from hp_core.specs import ModelSpec, PrecisionSpec
from hp_core.types import LayerKind


class PreparedCosts:
    """The model as the search prices it and the memo's costs as ``prepare`` evaluates them.

    Attributes:
        model: The model with its body groups split at the layers kept in the compute dtype
            (:func:`~hp_core.engine.precision.split_high_precision_layers`), as ``prepare`` splits it; the split
            is the same at every ``pp`` (only the refusal of a count above a stage's layers reads it:
            :meth:`kept_refusal`). The model itself where none are kept.
        exempt: The indices of the split-off groups, and of the groups whose kind *runtime* runs in the compute
            dtype under the recipe (:func:`~hp_core.engine.precision.compute_dtype_groups`).
        compute_dtype_kinds: The kinds of those the runtime runs in the compute dtype, sorted
            (:func:`~hp_core.engine.precision.compute_dtype_kinds`).
        kept_layers: ``(at start, at end)``: the body layers kept; ``(0, 0)`` where none are or the recipe
            quantizes nothing.

    Raises:
        ConfigError: What no layout runs (:func:`~hp_core.engine.precision.check_high_precision_layers` at pp 1: a
            delayed-scaling recipe, a count above the body's layers).
    """

    def __init__(self, model: ModelSpec, kinds: list[LayerKind], precision: PrecisionSpec, recipe: PrecisionRecipe,
                 runtime: Any = None) -> None:
        self.precision, self.recipe = precision, recipe
        body = [k.placement == "body" for k in kinds]
        if any(placed and group.count for placed, group in zip(body, model.layers)):
            self.model, self.exempt = split_high_precision_layers(model, body, precision, recipe)
        else:  # no body layers: the search refuses the model, by that reason
            self.model, self.exempt = model, frozenset()
        # And the groups of kinds the runtime runs in the compute dtype under the recipe (compute_dtype_groups).
        self.exempt = self.exempt | compute_dtype_groups(self.model, recipe, runtime)
        self.compute_dtype_kinds = tuple(compute_dtype_kinds(self.model, recipe, runtime))
        self.body_count = sum(group.count for placed, group in zip(body, model.layers) if placed)
        self.kept_layers = kept_layer_counts(precision, recipe)
        self.changes = recipe_changes_costs(recipe) or bool(self.exempt)
        # By (id(census-applied cost), id(formula cost), tp_sp, exempt): both costs held, so their ids are not reused.
        self._made: dict[tuple[int, int, bool, bool], tuple[LayerCost, LayerCost, LayerCost]] = {}

    def kept_refusal(self, pp: int) -> str | None:
        """Why *pp* stages cannot keep the layers in the compute dtype (more than a stage's body layers,
        :func:`~hp_core.engine.precision.check_high_precision_layers`, as ``prepare`` refuses it), or ``None``."""
        if self.kept_layers == (0, 0):
            return None
        try:
            check_high_precision_layers(self.precision, self.recipe, self.body_count, pp)
        except ConfigError as error:
            return _reason_of(error)
        return None

    def costs(self, formula: tuple[LayerCost, ...], measured: tuple[LayerCost, ...], tp_sp: bool) -> tuple[LayerCost, ...]:
        """The memo's census-applied costs (*measured*; *formula*: as the evaluators state them) as
        ``evaluate_layers`` answers them: as the recipe keeps them (:func:`~hp_core.engine.precision.recipe_cost`,
        what ``with_recipe`` does to each), the :attr:`exempt` groups' in the compute dtype
        (:func:`~hp_core.engine.precision.in_compute_dtype` of the census-applied cost). *tp_sp*: the layers run
        under TP > 1 with sequence parallelism. One object per memoized pair, so that what the bounds keep by cost
        identity is shared; *measured* itself where nothing changes."""
        if not self.changes:
            return measured
        changed = []
        for i, (cost, by_formula) in enumerate(zip(measured, formula)):
            exempt = i in self.exempt
            key = (id(cost), id(by_formula), tp_sp, exempt)
            found = self._made.get(key)
            if found is None or found[0] is not cost or found[1] is not by_formula:
                made = (in_compute_dtype(cost) if exempt else
                        recipe_cost(cost, by_formula, self.recipe, self.precision.activation_bytes, tp_sp,
                                    self.precision.module_formats))
                found = self._made[key] = (cost, by_formula, made)
            changed.append(found[2])
        return tuple(changed)

    def forget(self) -> None:
        """Drop the costs made (with the memo's answers they were made from)."""
        self._made.clear()
