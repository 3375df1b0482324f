"""The hooks of hp-planner: this module is their manual.

Every hook is a *registration hook*: it takes no arguments and returns an
iterable of typed, frozen records from :mod:`hp_core.types`. The planner never
calls hooks itself; :func:`hp_core.registry.Registry.from_manager` calls each
hook once, checks every record's type, sorts by name, refuses a name two
plugins both provide, and freezes the result. Choices of "exactly one
provider" (which runtime, which census source) are made by name from the
configuration, never by which plugin answers first.

A plugin implements any subset of the hooks with :data:`hp_core.markers.hookimpl`::

    from hp_core.markers import hookimpl

    @hookimpl
    def hp_layer_kinds():
        yield LayerKind(name="my_kind", config_type=MyConfig, evaluate=evaluate_my_kind)

and is registered in code (``get_plugin_manager(plugins=[module])``) or
through the ``hp`` entry-point group of its distribution.
"""

from __future__ import annotations

from typing import Iterable

from hp_core.collectives import CollectiveModel
from hp_core.markers import hookspec
from hp_core.precision_recipes import PrecisionRecipe
from hp_core.types import (
    CaseFormat, CensusSource, Exporter, HardwarePreset, LayerAspect, LayerKind, ModelFormat, ModelPreset, Optimizer,
    Runtime,
)
from hp_core.schedules import Schedule
from hp_core.importers import Importer

__all__ = [
    "HOOKS", "hp_case_formats", "hp_census_sources", "hp_exporters", "hp_hardware", "hp_layer_aspects", "hp_layer_kinds", "hp_model_formats",
    "hp_models", "hp_optimizers", "hp_runtimes", "hp_schedules", "hp_importers",
]


@hookspec
def hp_layer_kinds() -> Iterable[LayerKind]:
    """Yield the layer kinds this plugin provides.

    Arguments: none.

    Returns: an iterable of :class:`hp_core.types.LayerKind`. Each names its
    config type (a frozen attrs class), its evaluator
    ``evaluate(config, context) -> LayerCost`` and where its layers sit
    (``first``, ``body``, ``last``).

    Call semantics: called once per registry build; all results are
    collected; a name provided twice is an error naming both plugins.

    Example::

        @hookimpl
        def hp_layer_kinds():
            yield LayerKind(name="mamba2", config_type=Mamba2Config, evaluate=evaluate_mamba2,
                            switches=("normOp",), description="Mamba-2 SSM block")
    """


@hookspec
def hp_census_sources() -> Iterable[CensusSource]:
    """Yield the census sources this plugin provides.

    Arguments: none.

    Returns: an iterable of :class:`hp_core.types.CensusSource`. A source's
    ``provide(request)`` returns measured :class:`~hp_core.types.CensusRecord`
    per layer kind; a kind it has no record for is priced by the formulas.

    Call semantics: called once per registry build; all results collected;
    the run picks one source by name (``census: formulas``), never by order.

    Example::

        @hookimpl
        def hp_census_sources():
            yield CensusSource(name="profiler", provide=read_profiler_trace,
                               description="activations read from a profiler trace")
    """


@hookspec
def hp_runtimes() -> Iterable[Runtime]:
    """Yield the runtime profiles (trainers) this plugin provides.

    Arguments: none.

    Returns: an iterable of :class:`hp_core.types.Runtime`: the trainer's
    default precision and sharding, its attention implementation, its
    vocabulary padding and the bytes it holds beyond the model math.

    Call semantics: called once per registry build; all results collected;
    the run picks one by name (``runtime: generic``).

    Example::

        @hookimpl
        def hp_runtimes():
            yield Runtime(name="mytrainer", precision=PrecisionSpec(grad_bytes=2),
                          attention="flash", description="bf16 gradients, flash attention")
    """


@hookspec
def hp_hardware() -> Iterable[HardwarePreset]:
    """Yield hardware presets (device types) with their provenance.

    Arguments: none.

    Returns: an iterable of :class:`hp_core.types.HardwarePreset`, each a
    :class:`~hp_core.specs.HardwareSpec` and where its figures come from.

    Call semantics: called once per registry build; all results collected;
    chosen by name (``--hardware h100-sxm``).

    Example::

        @hookimpl
        def hp_hardware():
            yield HardwarePreset(name="my-accel", provenance="vendor datasheet rev 3",
                                 spec=HardwareSpec(name="MyAccel", memory_bytes=96 * 2**30))
    """


@hookspec
def hp_models() -> Iterable[ModelPreset]:
    """Yield model presets: Hugging Face style configs shipped as data.

    Arguments: none.

    Returns: an iterable of :class:`hp_core.types.ModelPreset`: a name, the
    ``config.json`` mapping and its provenance. ``hp models`` lists them and
    ``--model NAME`` builds one through the Hugging Face importer.

    Call semantics: called once per registry build; all results collected.

    Example::

        @hookimpl
        def hp_models():
            yield ModelPreset(name="tiny-llama", provenance="made up for tests",
                              hf_config={"model_type": "llama", "hidden_size": 256, ...})
    """


@hookspec
def hp_exporters() -> Iterable[Exporter]:
    """Yield trainer plan writers: a recompute plan as one trainer runs it.

    Arguments: none.

    Returns: an iterable of :class:`hp_core.types.Exporter`: a trainer's
    name, the runtime profile whose trainer it writes for, and its writer
    ``export(plan, model, parallel, *, registry) -> str | dict`` (flags or
    config text as ``str``, a config mapping as ``dict``). A writer refuses a
    plan its trainer cannot run with :class:`hp_core.errors.PlanNotExecutable`,
    naming what the trainer runs and the closest plan it can run.

    Call semantics: called once per registry build; all results collected;
    chosen by name (``hp estimate --export megatron``), never by order.

    Example::

        @hookimpl
        def hp_exporters():
            yield Exporter(name="mytrainer", runtime="mytrainer", export=write_mytrainer_flags,
                           description="--checkpoint-layers flags of mytrainer")
    """


@hookspec
def hp_model_formats() -> Iterable[ModelFormat]:
    """Yield model config formats: Hugging Face ``model_type`` values turned into layer stacks.

    Arguments: none.

    Returns: an iterable of :class:`hp_core.types.ModelFormat`: a name, the
    ``model_type`` values it reads and its builder
    ``build(config, *, name, source, where) -> ModelSpec``. A ``config.json``
    (``--model path``) or a preset is built by the format that lists its
    ``model_type``; the built-in Hugging Face importer is one such format.

    Call semantics: called once per registry build; all results collected; a
    ``model_type`` two formats both claim is an error naming both.

    Example::

        @hookimpl
        def hp_model_formats():
            yield ModelFormat(name="mamba2", model_types=("mamba2",), build=build_mamba2,
                              description="Mamba-2 config.json files")
    """


@hookspec
def hp_case_formats() -> Iterable[CaseFormat]:
    """Yield formats of measured runs that ``hp validate`` reads besides ``hp-cases/1``.

    Arguments: none.

    Returns: an iterable of :class:`hp_core.types.CaseFormat`: ``accepts(document)``
    recognises a parsed file, ``read(document, registry)`` returns its cases.

    Call semantics: called once per registry build; all results collected; a
    file is read by the first format, in name order, that accepts it.

    Example::

        @hookimpl
        def hp_case_formats():
            yield CaseFormat(name="my-runs", accepts=lambda doc: "my_runs" in doc, read=read_my_runs,
                             description="our cluster's run logs")
    """


@hookspec
def hp_optimizers() -> Iterable[Optimizer]:
    """Yield the optimizers this plugin provides: what each keeps per parameter and what its step costs.

    Arguments: none.

    Returns: an iterable of :class:`hp_core.types.Optimizer`. Each states, per
    element of a :class:`~hp_core.types.ParamSlice` (one layer's tensor family
    on a rank) and given the precision, the state bytes it keeps and the HBM
    bytes its update moves, whether it keeps a master copy, and optionally the
    FLOPs its step runs and the states it gathers whole under ZeRO.

    Call semantics: called once per registry build; all results collected; a
    run picks one by name (``precision: {optimizer: NAME}``, ``--optimizer
    NAME``), checked where the run is prepared.

    Example::

        @hookimpl
        def hp_optimizers():
            yield Optimizer(name="lion", state_bytes=lambda s, p: p.moment_bytes,
                            step_bytes=lambda s, p: 2 * p.master_param_bytes + p.grad_bytes + 2 * p.moment_bytes
                                                    + p.master_param_bytes + p.param_bytes,
                            description="Lion (Chen et al. 2023): one momentum buffer")
    """


@hookspec
def hp_layer_aspects() -> Iterable[LayerAspect]:
    """Yield cost aspects of existing layer kinds: one field of another plugin's kind, stated apart.

    Arguments: none.

    Returns: an iterable of :class:`hp_core.types.LayerAspect`: the kind it
    applies to, which :class:`~hp_core.costs.LayerCost` field it states
    (``params``, ``activations`` or ``work``) and
    ``evaluate(config, context, cost) -> value``.

    Call semantics: called once per registry build; all results collected.
    The registry composes each kind's evaluator with its aspects, so every
    consumer sees the composed cost. An aspect naming a kind no plugin
    provides, or two aspects stating the same field of one kind, is an error
    naming them.

    Example::

        @hookimpl
        def hp_layer_aspects():
            yield LayerAspect(name="nvls-dense", kind="dense", aspect="work", evaluate=dense_work_with_nvls,
                              description="dense layers' TP all-reduces on NVLink SHARP")
    """


@hookspec
def hp_schedules() -> Iterable[Schedule]:
    """Yield pipeline schedules: per layout and stage, the chunks it runs, what it keeps and its pipeline time.

    Arguments: none.

    Returns: an iterable of :class:`hp_core.schedules.Schedule`. Each states,
    for a :class:`~hp_core.schedules.ScheduleLayout` (``pp``, ``vpp``,
    micro-batches) and a stage index, the chunks the stage runs, the
    micro-batches each keeps at the stage's peak point, the passes it runs
    (forward and backward, or the backward split into input-gradient and
    weight-gradient passes), how many model copies the pipeline holds and the
    pipeline time of given per-stage times, which prices its bubble.

    Call semantics: called once per registry build; all results collected; a
    run picks one by name (``parallel: {schedule: NAME}``, ``--schedule NAME``);
    without one, ``1f1b`` for ``vpp == 1`` and ``interleaved_1f1b`` otherwise.

    Example::

        @hookimpl
        def hp_schedules():
            yield Schedule(name="all-forward-first", in_flight=lambda layout, stage: (layout.micro_batches,),
                           pipeline_seconds=lambda layout, stages: (layout.micro_batches + layout.pp - 1)
                                                                   * max(s.seconds for s in stages),
                           default_micro_batches=lambda pp, vpp: pp, description="GPipe, equal stages")
    """


@hookspec
def hp_precision_recipes() -> Iterable[PrecisionRecipe]:
    """Yield low-precision GEMM recipes (FP8, MXFP8, NVFP4): formats, scalings and what they keep.

    Arguments: none.

    Returns: an iterable of :class:`hp_core.precision_recipes.PrecisionRecipe`:
    per GEMM operand (weights, activations, gradients) the format and scaling,
    what a linear layer keeps of its input for backward, the low-precision
    weight copies held and whether they are cached across micro-batches,
    whether parameters and sequence-parallel inputs are gathered quantized,
    and the trainer flags per exporter.

    Call semantics: called once per registry build; all results collected; a
    run picks one by name (``precision: {recipe: NAME}``, ``--precision
    NAME``), checked where the run is prepared.

    Example::

        @hookimpl
        def hp_precision_recipes():
            yield PrecisionRecipe(name="fp8-mine", description="FP8 current scaling, bf16 saved inputs",
                                  source="my trainer", weights=GemmOperand("e4m3", "tensor_current"),
                                  activations=GemmOperand("e4m3", "tensor_current"),
                                  gradients=GemmOperand("e5m2", "tensor_current"), saved_input="compute")
    """


@hookspec
def hp_collective_models() -> Iterable[CollectiveModel]:
    """Yield collective libraries' pricing: how long one collective call takes on a placed group.

    Arguments: none.

    Returns: an iterable of :class:`hp_core.collectives.CollectiveModel`:
    ``seconds(call) -> float`` for a :class:`~hp_core.collectives.CollectiveCall`
    (operation, bytes, the group's placement -- ranks, members per node,
    nodes -- the fabric's links with the profile's efficiencies applied, and
    the all-reduce algorithm).

    Call semantics: called once per registry build; all results collected. A
    timing profile names one (``TimingProfile.collective_model``); ``None``
    prices with the built-in ``nccl`` (:data:`hp_core.collectives.NCCL`).

    Example::

        @hookimpl
        def hp_collective_models():
            yield CollectiveModel(name="hccl", seconds=hccl_seconds, description="Huawei HCCL on HCCS and RoCE")
    """


@hookspec
def hp_importers() -> Iterable[Importer]:
    """Yield trainer-config importers: a job as a trainer states it, read into an ``hp`` config.

    Arguments: none.

    Returns: an iterable of :class:`hp_core.importers.Importer`. Each reads a
    source (a file's path, or the text itself where ``reads_text``) with
    ``read(source, *, registry) -> ImportedJob``: an ``hp estimate`` config
    document and one line per setting it could not map.

    Call semantics: called once per registry build; all results collected; a
    run picks one by name (``hp estimate --from NAME SOURCE``); the flags then
    override what it mapped, field by field, and each unmapped line is printed
    as a warning.

    Example::

        @hookimpl
        def hp_importers():
            yield Importer(name="mytrainer", read=read_mytrainer_yaml, description="MyTrainer YAML recipes")
    """


# Every hook, with the record type it yields: the registry's build table.
HOOKS = {
    "hp_layer_kinds": LayerKind,
    "hp_census_sources": CensusSource,
    "hp_runtimes": Runtime,
    "hp_hardware": HardwarePreset,
    "hp_models": ModelPreset,
    "hp_exporters": Exporter,
    "hp_model_formats": ModelFormat,
    "hp_case_formats": CaseFormat,
    "hp_optimizers": Optimizer,
    "hp_layer_aspects": LayerAspect,
    "hp_schedules": Schedule,
    "hp_precision_recipes": PrecisionRecipe,
    "hp_collective_models": CollectiveModel,
    "hp_importers": Importer,
}
