"""The ``megatron`` exporter: a recompute plan as Megatron-LM's command-line flags.

What Megatron-LM runs (Megatron-Core 0.14; ``megatron/core/transformer/transformer_config.py``
validates the combinations, ``transformer_block.py`` ``_checkpointed_forward`` runs them):

* nothing (no ``--recompute-*`` flag);
* ``--recompute-granularity full --recompute-method uniform --recompute-num-layers N``:
  the layers of each pipeline chunk (``TransformerBlock``, one per virtual
  stage) are checkpointed in groups of N, each group keeping only its input.
  With N = 1 every layer is fully recomputed, keeping its own input: the
  plan "full on every layer". N > 1 keeps one input per group, which a plan
  per layer does not state, so this exporter writes only N = 1;
* ``--recompute-granularity full --recompute-method block --recompute-num-layers N``:
  in every pipeline chunk the first N layers are checkpointed (``layer_idx <
  recompute_num_layers``), the rest keep everything. Under fp8/fp4 a layer
  whose input needs no gradient is skipped and the window moves on by one;
* ``--recompute-granularity selective --recompute-modules M ...``: every layer
  recomputes the modules ``M`` (the default is ``core_attn``); the runtime
  profile ``megatron`` states the switches each module recomputes
  (``hp_plugins/runtimes/megatron.py``). ``moe_act`` acts only on layers with
  routed experts, ``mlp`` only on layers with a dense MLP (their ``ffFc1`` and
  ``ffAct`` together), ``moe`` only on layers with routed experts (their
  ``moeLayer`` and ``ffAct`` together: the whole MoE layer re-run): the layer
  kinds the runtime's ``module_kinds`` names, so a dense layer's ``ffAct`` alone
  has no module; a module within another written one (``moe_act`` within
  ``moe``) is not written. ``recompute_num_layers`` must
  then be unset, and full and selective recompute never mix.

* ``--cpu-offloading-num-layers N`` (Megatron-Core's activation CPU offloading, Transformer Engine's
  ``get_cpu_offload_context``): the first N decoder layers copy every tensor they keep to the host and
  back, nothing recomputed anywhere: the plan "offload 1.0 on layers 0 to N-1". Megatron-Core refuses it
  under pipeline parallelism, beside activation recompute and at N not below the layer count
  (``transformer_config.py``), and a hybrid model's stack wraps no layer in it, so it is written only for one
  pipeline stage of transformer layers (:func:`_offload_flags`);
  ``docs/importers.md`` reads it back the same way.

A plan outside these is refused (:class:`~hp_core.errors.PlanNotExecutable`)
with the closest plan Megatron runs: the one recomputing, in every chunk, at
least as many layers as the plan recomputes anything on (full: ``block`` with
the largest such count, ``uniform`` when that is every layer), or, for a plan
with no full layer, the selective modules covering every switch any layer
recomputes.
"""

from __future__ import annotations

from typing import Mapping

from hp_core.errors import ConfigError
from hp_core.markers import hookimpl
from hp_core.engine.recompute.layout import PlanLayout, plan_layout
from hp_core.registry import Registry
from hp_core.specs import ModelSpec, ParallelSpec, RecomputeSpec, Setting
from hp_core.types import Exporter, Runtime
from hp_plugins.exporters._common import LayerPlan, offloaded, per_layer, read_plan, refuse, refuse_offload, trainer_schedule

__all__ = ["export_megatron", "hp_exporters", "megatron_candidates"]

_TRAINER = "megatron"
_RUNTIME = "megatron"


def _runs(modules: Mapping[str, frozenset[str]]) -> str:
    return (
        "no recompute; --recompute-granularity full with --recompute-method uniform --recompute-num-layers 1 "
        "(every layer) or --recompute-method block --recompute-num-layers N (the first N layers of every "
        "pipeline chunk); or --recompute-granularity selective with one --recompute-modules set on every layer "
        f"({', '.join(modules) or 'none'})"
    )


def _full_flags(layout: PlanLayout, count: int) -> str:
    if all(count >= hi - lo for lo, hi in layout.chunk_bounds):
        return "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
    return f"--recompute-granularity full --recompute-method block --recompute-num-layers {count}"


def _block_plan(layout: PlanLayout, count: int) -> RecomputeSpec:
    """Full on the first *count* layers of every chunk, nothing elsewhere."""
    settings = [Setting()] * layout.count
    for lo, hi in layout.chunk_bounds:
        for index in range(lo, min(hi, lo + count)):
            settings[index] = Setting("full")
    return per_layer(settings)


def _layer_modules(layout: PlanLayout, runtime: Runtime, modules) -> list[dict[str, frozenset[str]]]:
    """Per body layer, the switches each module recomputes on it (empty where it does not act: the runtime's
    ``module_kinds``, ``moe_act`` only on kinds with routed experts, ``mlp`` only on kinds with a dense MLP)."""
    return [
        {m: (sw & frozenset(kind.switches)) if runtime.module_acts_on(m, kind.name) else frozenset()
         for m, sw in modules.items()}
        for kind in layout.kinds
    ]


def _exact_modules(switches: frozenset[str], acting: Mapping[str, frozenset[str]], implicit) -> list[str] | None:
    """The modules whose union recomputes exactly *switches* on a layer (*acting*: each module's switches there), or
    ``None``; a module whose switches another chosen one's include is left out (``moe_act`` within ``moe``)."""
    chosen = [m for m, sw in acting.items() if sw and sw <= switches | implicit]
    covered = frozenset().union(*(acting[m] for m in chosen)) - implicit
    if covered != switches:
        return None
    return [m for m in chosen if not any(acting[m] < acting[other] for other in chosen)]


def _closest(layout: PlanLayout, plan: LayerPlan, acting: list[dict[str, frozenset[str]]], modules) -> RecomputeSpec:
    """The closest plan Megatron runs (see the module docstring)."""
    coverable = all(r <= frozenset().union(*a.values()) for r, a in zip(plan.recomputed, acting))
    if not any(plan.full) and coverable:
        chosen = [m for m in modules if any(a[m] & r for r, a in zip(plan.recomputed, acting))]
        settings = []
        for index in range(layout.count):
            sw = frozenset().union(*(acting[index][m] for m in chosen))
            settings.append(Setting("switches", sw) if sw else Setting())
        return per_layer(settings)
    return _block_plan(layout, max(sum(plan.active[lo:hi]) for lo, hi in layout.chunk_bounds))


def _schedule_flags(layout: PlanLayout, parallel: ParallelSpec, registry: Registry) -> str:
    """The virtual pipeline flags of interleaved 1F1B (Megatron-LM ``arguments.py``): its layers per
    virtual stage where the chunks are even, else its virtual stages per rank; nothing for 1F1B."""
    if trainer_schedule(_TRAINER, parallel, registry) != "interleaved_1f1b":
        return ""
    sizes = {hi - lo for lo, hi in layout.chunk_bounds}
    if len(sizes) == 1:
        return f"--num-layers-per-virtual-pipeline-stage {sizes.pop()}"
    return f"--num-virtual-stages-per-pipeline-rank {parallel.vpp}"


def _uneven_flags(layout: PlanLayout) -> str:
    """Uneven first and last stages as Megatron-LM states them (``arguments.py``
    ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``;
    ``transformer_block.py`` ``get_num_layers_to_build``: the first and last ranks get their counts, the
    middle ranks split the rest evenly, and each rank's count is split evenly over its virtual stages).

    Raises:
        ConfigError: The layout's chunks are uneven in a way those flags cannot state: a rank whose
            chunks differ, or middle ranks that differ.
    """
    sizes = [hi - lo for lo, hi in layout.chunk_bounds]
    if len(set(sizes)) <= 1:
        return ""
    pp = layout.pp
    ranks = [sizes[r::pp] for r in range(pp)]
    odd = next((r for r, mine in enumerate(ranks) if len(set(mine)) > 1), None)
    if odd is not None or len({sum(mine) for mine in ranks[1:-1]}) > 1:
        why = (f"rank {odd}'s chunks hold {ranks[odd]} layers" if odd is not None
               else f"the middle ranks hold {[sum(mine) for mine in ranks[1:-1]]} layers")
        raise ConfigError("$.parallel.layers_per_stage",
                          f"megatron states uneven pipeline stages only as first and last rank counts with the middle ranks "
                          f"even and every rank's virtual stages even (--decoder-first/last-pipeline-num-layers), but {why}; "
                          "change layers_per_stage")
    totals = [sum(mine) for mine in ranks]
    middle = totals[1] if pp > 2 else None
    flags = []
    if totals[0] != middle:
        flags.append(f"--decoder-first-pipeline-num-layers {totals[0]}")
    if totals[-1] != middle:
        flags.append(f"--decoder-last-pipeline-num-layers {totals[-1]}")
    return " ".join(flags)


def export_megatron(plan: RecomputeSpec, model: ModelSpec, parallel: ParallelSpec, *, registry: Registry) -> str:
    """*plan* as Megatron-LM flags (``""`` for no recompute), the schedule's flags after them.

    The layout's schedule must be one Megatron-LM runs (``1f1b``, or ``interleaved_1f1b``, whose
    virtual pipeline flags follow the recompute flags); uneven stages follow last
    (``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``).

    Args:
        plan: The recompute plan.
        model: The layer stack.
        parallel: The layout: its pipeline chunks decide ``block``'s count.
        registry: Layer kinds (their switches and selective sets) and the
            ``megatron`` runtime (the modules it recomputes).

    Raises:
        PlanNotExecutable: Megatron-LM cannot run *plan*; it names the closest plan it runs.
        ConfigError: An unknown kind, a range beyond the model, a layout that does not split, or
            a schedule Megatron-LM does not run, or uneven stages its flags cannot state.
    """
    layout = plan_layout(model, parallel, registry)
    schedule = _schedule_flags(layout, parallel, registry)
    uneven = _uneven_flags(layout)
    flags = _recompute_flags(plan, model, parallel, registry, layout)
    return " ".join(part for part in (flags, schedule, uneven) if part)


def _recompute_flags(plan: RecomputeSpec, model: ModelSpec, parallel: ParallelSpec, registry: Registry,
                     layout: PlanLayout) -> str:
    runtime = registry.runtime(_RUNTIME)
    modules = dict(runtime.recompute_modules or {})
    implicit = runtime.implicit_recompute
    runs = _runs(modules)

    def write(suggestion: RecomputeSpec) -> str:
        return export_megatron(suggestion, model, parallel, registry=registry)

    layers = read_plan(plan, layout, implicit)  # a range beyond the model is a ConfigError first
    if offloaded(plan):
        return _offload_flags(plan, layout, runs, write)
    if not any(layers.active):
        return ""
    acting = _layer_modules(layout, runtime, modules)
    closest = _closest(layout, layers, acting, modules)
    if any(layers.full):
        if not all(f or not a for f, a in zip(layers.full, layers.active)):
            raise refuse(_TRAINER, "it mixes full and selective recompute", runs, closest, write)
        count = max(sum(layers.full[lo:hi]) for lo, hi in layout.chunk_bounds)
        for lo, hi in layout.chunk_bounds:
            if list(layers.full[lo:hi]) != [i < count for i in range(hi - lo)]:
                full = ", ".join(str(i) for i in range(lo, hi) if layers.full[i]) or "none"
                raise refuse(
                    _TRAINER,
                    f"the fully recomputed layers of pipeline chunk {lo}-{hi - 1} ({full}) are not its first "
                    f"{min(count, hi - lo)}, as --recompute-method block recomputes in every chunk",
                    runs, closest, write,
                )
        return _full_flags(layout, count)

    # Selective on every layer: one module set must give each layer exactly its switches.
    chosen: list[str] = []
    for index, switches in enumerate(layers.recomputed):
        exact = _exact_modules(switches, acting[index], implicit) if switches else []
        if exact is None:
            raise refuse(
                _TRAINER,
                f"layer {index} recomputes {'+'.join(sorted(switches))}, which no union of --recompute-modules "
                "recomputes exactly",
                runs, closest, write,
            )
        chosen += [m for m in exact if m not in chosen]
    chosen = [m for m in modules if m in chosen]
    for index, switches in enumerate(layers.recomputed):
        gets = frozenset().union(*(acting[index][m] for m in chosen)) - implicit
        if gets != switches:
            raise refuse(
                _TRAINER,
                f"its layers recompute different selective sets (layer {index}: "
                f"{'+'.join(sorted(switches)) or 'none'}, while --recompute-modules {' '.join(chosen)} applies "
                "to every layer)",
                runs, closest, write,
            )
    return f"--recompute-granularity selective --recompute-modules {' '.join(chosen)}"


# The single-block layers of a hybrid stack (hp_plugins/kinds/mamba.py, hybrid.py): Megatron-LM builds such a model as
# its HybridModel, whose layer stack no CPU offload context wraps (only TransformerBlock and the MTP block call
# get_cpu_offload_context at NVIDIA/Megatron-LM@d98e8a6), so --cpu-offloading-num-layers offloads nothing there.
_HYBRID_STACK_KINDS = frozenset({"mamba2", "attention", "mlp", "moe_only"})


def _offloads(layout: PlanLayout) -> bool:
    """Whether ``--cpu-offloading-num-layers`` acts on the layout: one pipeline stage, no hybrid-stack layer."""
    return len(layout.chunk_bounds) == 1 and not any(kind.name in _HYBRID_STACK_KINDS for kind in layout.kinds)


def _offload_plan(count: int) -> RecomputeSpec:
    """The first *count* body layers offloading every tensor they keep, nothing recomputed."""
    return RecomputeSpec(layers=((0, count - 1, Setting(offload=1.0)),))


def _offload_flags(plan: RecomputeSpec, layout: PlanLayout, runs: str, write) -> str:
    """``--cpu-offloading-num-layers N`` for *plan* where it is that plan (see the module docstring); else refused with
    the closest plan Megatron runs: without the offload where it also recomputes or the layout has pipeline chunks,
    else every layer up to its last offloaded one offloaded whole (what it keeps is then no more than the plan's)."""
    settings = [plan.setting_of(i) for i in range(layout.count)]
    recomputes = any(s.mode != "none" for s in settings)
    if recomputes or not _offloads(layout):
        where = ("beside activation recompute" if recomputes else "under pipeline parallelism"
                 if len(layout.chunk_bounds) > 1 else "on a hybrid stack, whose layers no CPU offload context wraps")
        raise refuse_offload(_TRAINER, runs + "; or, on one pipeline stage of transformer layers with no recompute, "
                             f"--cpu-offloading-num-layers N (the first N layers offloaded whole), never {where}", plan, write)
    last = max(i for i, s in enumerate(settings) if s.offload)
    count = last + 1
    if count < layout.count and all(s.offload == (1.0 if i < count else 0.0) for i, s in enumerate(settings)):
        return f"--cpu-offloading-num-layers {count}"
    closest = _offload_plan(min(count, layout.count - 1))
    why = ("it offloads the last layer, which Megatron-Core never offloads (--cpu-offloading-num-layers below the layer count)"
           if count == layout.count else
           "its offloaded layers are not the first N, each offloaded whole, as --cpu-offloading-num-layers offloads them")
    raise refuse(_TRAINER, why, runs + "; or, on one pipeline stage with no recompute, --cpu-offloading-num-layers N",
                 closest, write)


def megatron_candidates(model: ModelSpec, parallel: ParallelSpec, *, registry: Registry) -> list[RecomputeSpec]:
    """Every plan Megatron-LM's flags express for *model* on *parallel* (see the module docstring).

    No recompute; full on the first N layers of every chunk for each N up to the
    longest chunk (``block``; ``uniform 1`` at the top); each distinct
    selective plan a non-empty set of ``--recompute-modules`` gives; and on one
    pipeline stage the first N layers offloaded for each N below the layer count
    (``--cpu-offloading-num-layers``).
    """
    runtime = registry.runtime(_RUNTIME)
    modules = dict(runtime.recompute_modules or {})
    layout = plan_layout(model, parallel, registry)
    acting = _layer_modules(layout, runtime, modules)
    found: dict[tuple, RecomputeSpec] = {(): RecomputeSpec()}
    longest = max(hi - lo for lo, hi in layout.chunk_bounds)
    for count in range(1, longest + 1):
        spec = _block_plan(layout, count)
        found.setdefault(("full", count), spec)
    names = list(modules)
    for mask in range(1, 2 ** len(names)):
        chosen = [m for bit, m in enumerate(names) if mask >> bit & 1]
        settings = []
        for index in range(layout.count):
            switches = frozenset().union(*(acting[index][m] for m in chosen))
            settings.append(Setting("switches", switches) if switches else Setting())
        key = tuple(s.switches for s in settings)
        if any(key):
            found.setdefault(key, per_layer(settings))
    if _offloads(layout):
        for count in range(1, layout.count):
            found.setdefault(("offload", count), _offload_plan(count))
    return list(found.values())


@hookimpl
def hp_exporters():
    yield Exporter(
        name=_TRAINER,
        runtime=_RUNTIME,
        export=export_megatron,
        candidates=megatron_candidates,
        description="Megatron-LM flags: --recompute-granularity, --recompute-modules, --recompute-method, --recompute-num-layers, "
                    "--cpu-offloading-num-layers",
    )
