"""The ``torchtitan`` exporter: a recompute plan as torchtitan's ``[activation_checkpoint]`` TOML section.

What torchtitan runs (``torchtitan/distributed/activation_checkpoint.py``
``apply_ac``, which wraps every transformer block of ``model.layers`` in turn):

* ``mode = "none"``: nothing recomputed;
* ``mode = "full"``: every block checkpointed (keeps only its input);
* ``mode = "selective"`` with ``selective_ac_option = "op"``: op-level
  selective checkpointing on every block, which saves matmul outputs and
  recomputes the ops between them; the runtime profile ``fsdp2`` states the
  switches that recomputes (``hp_plugins/runtimes/fsdp2.py``: ``normOp``, ``ffAct``);
* ``mode = "selective"`` with ``selective_ac_option = "N"`` (a string of
  digits; torchtitan calls ``.isdigit()`` on it): ``_apply_layer_sac`` counts
  blocks in a process-wide counter and fully checkpoints the blocks whose
  count is a multiple of N, so on each pipeline rank the rank's
  (N)th, (2N)th, ... block, counted from 1 over its model chunks in order.

A plan outside these is refused (:class:`~hp_core.errors.PlanNotExecutable`)
with the closest plan torchtitan runs: op-level selective where every layer's
switches are among those it recomputes, else every N-th layer with the
largest N that recomputes, on every rank, at least as many layers as the plan
recomputes anything on (``full`` when that N is 1).
"""

from __future__ import annotations

from hp_core.markers import hookimpl
from hp_core.engine.recompute.layout import PlanLayout, plan_layout
from hp_core.registry import Registry
from hp_core.specs import ModelSpec, ParallelSpec, RecomputeSpec, Setting
from hp_core.types import Exporter
from hp_plugins.importers.torchtitan import _stage_layers  # torchtitan's default split, as its importer reads it
from hp_plugins.exporters._common import (
    LayerPlan, offloaded, per_layer, read_plan, refuse, refuse_offload, trainer_schedule,
)

__all__ = ["export_torchtitan", "hp_exporters", "torchtitan_candidates"]

_TRAINER = "torchtitan"
_RUNTIME = "fsdp2"
_RUNS = (
    'mode = "none", "full", or "selective" with selective_ac_option = "op" (op-level selective checkpointing of '
    'every block) or "N" (every N-th block of each pipeline rank fully recomputed)'
)


def _section(mode: str, option: str | None = None) -> str:
    lines = ["[activation_checkpoint]", f'mode = "{mode}"']
    if option is not None:
        lines.append(f'selective_ac_option = "{option}"')
    return "\n".join(lines) + "\n"


def _every_nth(layout: PlanLayout, every: int) -> RecomputeSpec:
    """Full on each rank's every-th layer, counted from 1 over its chunks in order."""
    settings = [Setting()] * layout.count
    for stage in range(layout.pp):
        for position, index in enumerate(layout.stage_layers(stage)):
            if (position + 1) % every == 0:
                settings[index] = Setting("full")
    return per_layer(settings)


def _op_plan(layout: PlanLayout, op: frozenset[str]) -> RecomputeSpec:
    settings = []
    for kind in layout.kinds:
        sw = op & frozenset(kind.switches)
        settings.append(Setting("switches", sw) if sw else Setting())
    return per_layer(settings)


def _closest(layout: PlanLayout, plan: LayerPlan, op: frozenset[str]) -> RecomputeSpec:
    if not any(plan.full) and all(r <= op for r in plan.recomputed):
        return _op_plan(layout, op)
    every = None
    for stage in range(layout.pp):
        mine = layout.stage_layers(stage)
        active = sum(plan.active[i] for i in mine)
        if active:
            every = min(every or len(mine), len(mine) // active)
    if every is None or every <= 1:
        return RecomputeSpec.uniform("full")
    return _every_nth(layout, every)


def export_torchtitan(plan: RecomputeSpec, model: ModelSpec, parallel: ParallelSpec, *, registry: Registry) -> str:
    """*plan* as torchtitan's ``[activation_checkpoint]`` TOML section, and its pipeline schedule.

    A schedule other than torchtitan's default ``1F1B`` follows as
    ``[parallelism] pipeline_parallel_schedule`` (the names of PyTorch
    ``torch/distributed/pipelining/schedules.py`` ``get_schedule_class``:
    ``GPipe``, ``Interleaved1F1B``, ``DualPipeV``, ...), and uneven pipeline chunks as
    ``module_fqns_per_model_part`` (:func:`_model_parts`).

    Args:
        plan: The recompute plan.
        model: The layer stack.
        parallel: The layout: its pipeline stages decide which layers every N-th counts.
        registry: Layer kinds and the ``fsdp2`` runtime (the switches op-level SAC recomputes).

    Raises:
        PlanNotExecutable: torchtitan cannot run *plan*; it names the closest plan it runs.
        ConfigError: An unknown kind, a range beyond the model, a layout that does not split, or
            a schedule torchtitan does not run.
    """
    schedule = trainer_schedule(_TRAINER, parallel, registry)
    section = _activation_checkpoint(plan, model, parallel, registry)
    lines = [] if schedule == "1F1B" else [f'pipeline_parallel_schedule = "{schedule}"']
    lines += _model_parts(plan_layout(model, parallel, registry))
    return section + ("\n[parallelism]\n" + "\n".join(lines) + "\n" if lines else "")


def _model_parts(layout: PlanLayout) -> list[str]:
    """The layout's chunks as torchtitan's ``[parallelism] module_fqns_per_model_part`` where torchtitan's
    own split would differ: per model chunk in pipeline order, its modules, named as that split names
    them (``torchtitan/distributed/pipeline_parallel.py`` ``_generate_llm_fqn_per_model_part``:
    ``tok_embeddings`` first, ``layers.N``, ``norm`` and ``lm_head`` last; its default counts the
    embedding and the output as one layer each, :func:`hp_plugins.importers.torchtitan._stage_layers`);
    nothing where the two agree."""
    sizes = [hi - lo for lo, hi in layout.chunk_bounds]
    if len(sizes) == 1 or sizes == _stage_layers(sum(sizes), len(sizes), 1, 1):
        return []
    parts = []
    for c, (lo, hi) in enumerate(layout.chunk_bounds):
        names = (["tok_embeddings"] if c == 0 else []) + [f"layers.{i}" for i in range(lo, hi)]
        names += ["norm", "lm_head"] if c == len(layout.chunk_bounds) - 1 else []
        parts.append("[" + ", ".join(f'"{n}"' for n in names) + "]")
    return [f"module_fqns_per_model_part = [{', '.join(parts)}]"]


def _activation_checkpoint(plan: RecomputeSpec, model: ModelSpec, parallel: ParallelSpec, registry: Registry) -> str:
    runtime = registry.runtime(_RUNTIME)
    modules = dict(runtime.recompute_modules or {})
    op = modules.get("op_sac", frozenset().union(*modules.values()) if modules else frozenset())
    layout = plan_layout(model, parallel, registry)

    def write(suggestion: RecomputeSpec) -> str:
        return _activation_checkpoint(suggestion, model, parallel, registry)

    if offloaded(plan):
        raise refuse_offload(_TRAINER, _RUNS, plan, write)

    layers = read_plan(plan, layout, runtime.implicit_recompute)
    if not any(layers.active):
        return _section("none")
    if all(layers.full):
        return _section("full")
    closest = _closest(layout, layers, op)
    if not any(layers.full):
        for index, (kind, switches) in enumerate(zip(layout.kinds, layers.recomputed)):
            wanted = op & frozenset(kind.switches)
            if switches != wanted:
                raise refuse(
                    _TRAINER,
                    f"layer {index} recomputes {'+'.join(sorted(switches)) or 'nothing'}, while op-level selective "
                    f"checkpointing recomputes {'+'.join(sorted(wanted)) or 'nothing'} on every layer of its kind",
                    _RUNS, closest, write,
                )
        return _section("selective", "op")
    if not all(f or not a for f, a in zip(layers.full, layers.active)):
        raise refuse(_TRAINER, "it mixes full and selective recompute", _RUNS, closest, write)
    longest = max(len(layout.stage_layers(s)) for s in range(layout.pp))
    for every in range(2, longest + 1):
        wanted = _every_nth(layout, every)
        if all(wanted.setting_of(i).mode == ("full" if f else "none") for i, f in enumerate(layers.full)):
            return _section("selective", str(every))
    full = ", ".join(str(i) for i, f in enumerate(layers.full) if f)
    raise refuse(
        _TRAINER,
        f"its fully recomputed layers ({full}) are not every N-th layer of each pipeline rank",
        _RUNS, closest, write,
    )


def torchtitan_candidates(model: ModelSpec, parallel: ParallelSpec, *, registry: Registry) -> list[RecomputeSpec]:
    """Every plan torchtitan's ``[activation_checkpoint]`` expresses for *model* on *parallel*:
    none, full, op-level selective, and every N-th block of each rank full for N from 2 up to
    the most blocks a rank holds (see the module docstring)."""
    layout = plan_layout(model, parallel, registry)
    op = frozenset((registry.runtime(_RUNTIME).recompute_modules or {}).get("op_sac", frozenset()))
    found = [RecomputeSpec(), RecomputeSpec.uniform("full"), _op_plan(layout, op)]
    most = max(len(layout.stage_layers(stage)) for stage in range(layout.pp))
    found += [_every_nth(layout, every) for every in range(2, most + 1)]
    return found


@hookimpl
def hp_exporters():
    yield Exporter(
        name=_TRAINER,
        runtime=_RUNTIME,
        export=export_torchtitan,
        candidates=torchtitan_candidates,
        description='torchtitan activation_checkpoint TOML section: mode "none", "full", or "selective" with "op" or every N-th layer',
    )
