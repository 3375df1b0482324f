"""Several layers run one after another as one: :func:`merge_costs`, what a module of several layers costs.

Megatron-Core's multi-token prediction depth of a hybrid model is such a module: each depth's ``mtp_model_layer`` is a
``HybridStack`` of the ``/``-part's layers (``megatron/core/transformer/multi_token_prediction.py`` at
NVIDIA/Megatron-LM@d98e8a6, ``MultiTokenPredictionLayer.__init__``, "Hybrid path: use HybridStack for hybrid pattern
support", ``post_layer_norm=False``), whose forward runs its layers in order (``megatron/core/models/hybrid/
hybrid_block.py`` ``HybridStack.forward``, one ``for`` over ``self.layers``), each its own pre-norm and residual; autograd
runs their backwards in the reverse order, one at a time. So, for layers ``1..n`` with costs ``c_i``:

* what is kept, stored or computed adds: parameters, activation terms (and a setting one layer measured whole: each
  layer's bytes kept under it), buffers held per micro-batch, the weights' and
  the deferred weight gradients' bytes, FLOPs, and the :class:`~hp_core.costs.LayerWork` fields that count work
  (bytes, FLOPs, calls, elements); its tuples (GEMMs, collectives) concatenate; a switch two layers state re-runs
  both layers' blocks (:func:`_reruns`);
* what one layer's backward or forward holds transiently (``working_bytes``, ``forward_working_bytes``) and the buffers
  held once (``buffers_once_bytes``, which the stage takes as the maximum over its layers too,
  :mod:`hp_core.engine.stage`) is the largest layer's: the layers' passes do not overlap;
* what describes a kernel the layers share one record for (the attention core's head dims, window, SSD scan, wide
  query/key; the experts' rows and count; the recipe's ``quantized`` mark) must agree among the layers that run such
  a kernel, a layer without one leaving it empty; layers that disagree are refused with a
  :class:`~hp_core.errors.ConfigError` rather than priced under one of their values.

Names stay unique: each layer's parameter families and activation terms take the layer's prefix.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import attrs

from hp_core.costs import Flops, LayerCost, LayerWork, Rerun
from hp_core.errors import ConfigError

__all__ = ["merge_costs", "merge_work"]

# LayerWork fields that count work: the merged layer's is the sum.
_ADDED = ("grouped_flops", "epilogue_activation_flops", "attention_calls", "fused_softmax_flops", "copy_bytes", "permute_bytes",
          "permute_input_bytes", "router_elements", "table_elements", "frozen_matmul_flops", "rotary_flops")
# LayerWork tuples: each layer's entries, in layer order.
_JOINED = ("collectives", "gemms", "expert_gemms", "frozen_gemms", "high_precision_gemms", "original_input_gemms",
           "userbuffers_gemms", "refused_userbuffers")
# The attention core's record, read where a layer runs a core (attention calls, an SSD scan or attention FLOPs).
_CORE = ("wide_qk_attention", "ssd_scan", "attention_head_dims", "local_mask")
# The routed experts' record, read where a layer routes tokens to experts.
_EXPERTS = ("expert_rows", "routed_experts", "sequential_experts")


def _renamed(cost: LayerCost, prefix: str) -> tuple[tuple, tuple]:
    params = tuple(attrs.evolve(p, name=f"{prefix}{p.name}") for p in cost.params)
    terms = tuple(attrs.evolve(t, op=f"{prefix}{t.op}") for t in cost.activations)
    return params, terms


def _one_value(costs: Sequence[LayerCost], field: str, runs: Callable[[LayerCost], bool], where: str) -> Any:
    """The one value *field* takes among the layers that *runs* marks; the field's default where none does."""
    values = {repr(getattr(c.work, field)): getattr(c.work, field) for c in costs if runs(c)}
    if len(values) > 1:
        raise ConfigError(where, f"its layers disagree on LayerWork.{field} ({', '.join(sorted(values))}): one record "
                                 "cannot price both; state layers that agree")
    if values:
        return next(iter(values.values()))
    return attrs.fields_dict(LayerWork)[field].default


def _has_core(cost: LayerCost) -> bool:
    return cost.work.attention_calls > 0 or cost.work.ssd_scan or cost.forward.attention_flops > 0


def _has_experts(cost: LayerCost) -> bool:
    return cost.work.routed_experts > 0 or bool(cost.work.expert_gemms)


def _offsets(costs: Sequence[LayerCost]) -> list[int]:
    """Each layer's first position in the merged layer's GEMMs (its ``gemms`` joined in layer order)."""
    sizes = [len(c.work.gemms) for c in costs]
    return [sum(sizes[:i]) for i in range(len(sizes))]


def _reruns(costs: Sequence[LayerCost], where: str) -> tuple[tuple[str, Rerun], ...]:
    """Each switch's rerun once for the layers together (:class:`~hp_core.costs.Rerun`): what is a rate per byte the
    switch drops (``matmul_flops_per_byte``) the layers stating the same switch must state alike, as the merged layer
    applies it to all their dropped bytes; what each states whole (its ``copy_bytes``, a block's forward: ``gemms``,
    ``grouped_flops``, ``permutation``) adds, each layer re-running its own, its GEMMs' positions moved on by the
    merged layer's GEMMs listed before its layer's (``gemms`` joined in layer order)."""
    if len(costs) == 1:
        return costs[0].work.reruns
    found: dict[str, Rerun] = {}
    for cost, offset in zip(costs, _offsets(costs)):
        for switch, rerun in cost.work.reruns:
            rerun = rerun.shifted(offset)
            if switch not in found:
                found[switch] = rerun
                continue
            seen = found[switch]
            if seen.matmul_flops_per_byte != rerun.matmul_flops_per_byte:
                raise ConfigError(where, f"its layers state different re-run rates for switch {switch!r} "
                                         f"({seen.matmul_flops_per_byte} and {rerun.matmul_flops_per_byte} FLOPs a "
                                         "byte); state layers that agree")
            found[switch] = Rerun(seen.matmul_flops_per_byte, seen.copy_bytes + rerun.copy_bytes,
                                  seen.gemms + rerun.gemms, seen.grouped_flops + rerun.grouped_flops,
                                  seen.permutation or rerun.permutation, seen.positions + rerun.positions,
                                  seen.high_precision_positions + rerun.high_precision_positions,
                                  seen.original_input_positions + rerun.original_input_positions,
                                  seen.userbuffers_linears + rerun.userbuffers_linears)
    return tuple(found.items())


def _accesses_per_flop(costs: Sequence[LayerCost]) -> float | None:
    """Eager accesses per elementwise FLOP of the layers together: their accesses over their FLOPs (``None`` where a
    layer with elementwise FLOPs states none)."""
    counted = [c for c in costs if c.forward.elementwise_flops > 0 or c.work.eager_accesses_per_flop is not None]
    if any(c.work.eager_accesses_per_flop is None for c in counted):
        return None
    rates = {c.work.eager_accesses_per_flop for c in counted}
    if len(rates) <= 1:
        return next(iter(rates), None)
    flops = sum(c.forward.elementwise_flops for c in counted)
    return sum(c.work.eager_accesses_per_flop * c.forward.elementwise_flops for c in counted) / flops


def merge_work(costs: Sequence[LayerCost], where: str) -> LayerWork:
    """The :class:`LayerWork` of *costs* run in order (module docstring); every cost must state one.

    Raises:
        ConfigError: The layers disagree on a field one record holds (*where* names the config).
    """
    if len(costs) == 1:
        return costs[0].work
    works = [c.work for c in costs]
    fields: dict[str, Any] = {name: sum(getattr(w, name) for w in works) for name in _ADDED}
    fields.update({name: tuple(entry for w in works for entry in getattr(w, name)) for name in _JOINED})
    for name in _CORE:
        fields[name] = _one_value(costs, name, _has_core, where)
    for name in _EXPERTS:
        fields[name] = _one_value(costs, name, _has_experts, where)
    fields["quantized"] = _one_value(costs, "quantized", lambda c: True, where)
    stated = [w.backward_copy_bytes for w in works]
    fields["backward_copy_bytes"] = None if all(b is None for b in stated) else sum(
        w.copy_bytes if w.backward_copy_bytes is None else w.backward_copy_bytes for w in works)
    alternate = [w.alternate_matmul_flops for w in works]
    # Each layer's alternation restarts at its first matmul, as it is evaluated alone.
    fields["alternate_matmul_flops"] = None if any(a is None for a in alternate) else sum(alternate)
    fields["eager_accesses_per_flop"] = _accesses_per_flop(costs)
    fields["rotary_eager_bytes"] = (sum(w.rotary_eager_bytes[0] for w in works),
                                    sum(w.rotary_eager_bytes[1] for w in works))
    fields["attention_core_switches"] = frozenset().union(*(w.attention_core_switches for w in works))
    fields["reruns"] = _reruns(costs, where)
    fields["boundary_bytes"] = works[-1].boundary_bytes  # what the last layer hands on
    return LayerWork(**fields)


def merge_costs(costs: Sequence[LayerCost], prefixes: Sequence[str], where: str) -> LayerCost:
    """*costs* of layers run one after another as one layer's cost (module docstring), each layer's parameter
    families and activation terms renamed with its prefix of *prefixes*.

    Raises:
        ConfigError: The layers disagree on a field one record holds, or their names collide (*where* names the
            config).
    """
    if not costs or len(costs) != len(prefixes):
        raise ValueError("merge_costs needs one prefix per cost and at least one cost")
    renamed = [_renamed(c, prefix) for c, prefix in zip(costs, prefixes)]
    params = tuple(p for ps, _ in renamed for p in ps)
    terms = tuple(t for _, ts in renamed for t in ts)
    for what, names in (("parameter family", [p.name for p in params]), ("activation term", [t.op for t in terms])):
        if len(set(names)) != len(names):
            raise ConfigError(where, f"its layers' {what} names collide under the prefixes {list(prefixes)}")
    works = [c.work for c in costs]
    gradients = [c.weight_gradient_bytes for c in costs]
    return LayerCost(
        params=params,
        activations=terms,
        input_bytes=costs[0].input_bytes,
        working_bytes=max(c.working_bytes for c in costs),
        buffers_once_bytes=max(c.buffers_once_bytes for c in costs),
        buffers_per_micro_batch_bytes=sum(c.buffers_per_micro_batch_bytes for c in costs),
        forward=Flops(matmul_flops=sum(c.forward.matmul_flops for c in costs),
                      attention_flops=sum(c.forward.attention_flops for c in costs),
                      elementwise_flops=sum(c.forward.elementwise_flops for c in costs)),
        weight_shapes=tuple(dict.fromkeys(shape for c in costs for shape in c.weight_shapes)),
        work=None if any(w is None for w in works) else attrs.evolve(
            merge_work(costs, where),  # each layer's named modules, renamed as its families and terms are
            modules=tuple(m.renamed(prefix, offset) for c, prefix, offset in zip(costs, prefixes, _offsets(costs))
                          for m in c.work.modules)),
        forward_working_bytes=max(c.forward_working_bytes for c in costs),
        weight_gradient_bytes=None if any(g is None for g in gradients) else sum(gradients),
        # What of it a recipe restates: each layer's (none where a layer states none of its own).
        weight_gradient_quantized=None if any(g is None for g in gradients) else tuple(
            sum((c.weight_gradient_quantized or (0, 0, 0))[i] for c in costs) for i in range(3)),
        # A setting one layer measured whole keeps, merged, what each layer keeps under it (its measurement where it
        # has one, its terms' sum elsewhere: LayerCost.kept_under); the layers' assumptions and inner kinds carry.
        measured=tuple((switches, sum(c.kept_under(switches) for c in costs))
                       for switches in dict.fromkeys(s for c in costs for s, _ in c.measured)),
        assumed=tuple(dict.fromkeys(a for c in costs for a in c.assumed)),
        inner_kinds=frozenset().union(*(c.inner_kinds for c in costs)),
    )
