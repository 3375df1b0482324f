"""Typed, frozen records that plugins yield.

Registration hooks (:mod:`hp_core.hookspecs`) yield the records defined here:
:class:`LayerKind`, :class:`CensusSource`, :class:`Runtime`,
:class:`HardwarePreset`, :class:`ModelPreset`, :class:`Exporter`,
:class:`ModelFormat`, :class:`CaseFormat` and :class:`Optimizer` (asked about
a :class:`ParamSlice`). What a layer kind's evaluator
returns, :class:`~hp_core.costs.LayerCost` under a
:class:`~hp_core.costs.LayerContext`, is in :mod:`hp_core.costs`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import attrs

from hp_core.costs import (
    ATTENTION_IMPLS, TRAITS, LayerContext, LayerCost, _non_negative_int, _non_negative_number, is_switch_name,
)
from hp_core.optimizer_types import Optimizer, ParamSlice
from hp_core.runtime_options import RuntimeOption
from hp_core.specs.hardware import HardwareSpec
from hp_core.specs.precision import PrecisionSpec
from hp_core.specs.timing import TimingProfile
from hp_core.validators import plugin_name

__all__ = [
    "ASPECTS",
    "CaseFormat",
    "LayerAspect",
    "CensusBytes",
    "CensusRecord",
    "CensusRequest",
    "CensusSource",
    "Exporter",
    "HardwarePreset",
    "LayerKind",
    "ModelFormat",
    "ModelPreset",
    "Optimizer",
    "PLACEMENTS",
    "ParamSlice",
    "Runtime",
    "RuntimeOption",
]

# Where a kind's layers sit: before the body (first stage), in it, after it (last stage).
PLACEMENTS = ("first", "body", "last")


# --------------------------------------------------------------------------- records


@attrs.frozen
class LayerKind:
    """A layer kind: its config type and its evaluator.

    Attributes:
        name: Registry name (``"dense"``); what a model's layer stack names.
        config_type: A frozen attrs class holding one layer's architecture.
        evaluate: ``evaluate(config, context) -> LayerCost``; pure and deterministic.
        placement: ``"first"`` (embedding), ``"body"`` (split over stages) or
            ``"last"`` (output head, MTP).
        switches: The recompute switches this kind has: the built-in names of
            :data:`~hp_core.costs.SWITCHES` where they mean the same, or its own.
        selective: The switches its "selective" setting recomputes (a trainer's
            default selective recompute for the kind).
        validate: Optional ``validate(config, context) -> None`` raising
            :class:`hp_core.errors.ConfigError` for a layout the kind cannot run
            (``tp`` not dividing the heads).
        description: One line for ``hp plugins``.
    """

    name: str = attrs.field(validator=plugin_name)
    config_type: type
    evaluate: Callable[[Any, LayerContext], LayerCost]
    placement: str = attrs.field(default="body", validator=attrs.validators.in_(PLACEMENTS))
    switches: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    selective: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)
    validate: Callable[[Any, LayerContext], None] | None = None
    description: str = ""

    def __attrs_post_init__(self) -> None:
        malformed = [s for s in self.switches if not is_switch_name(s)]
        if malformed:
            raise ValueError(f"layer kind {self.name}: switch names are letters, digits, '_', '-' or '.', starting "
                             f"with a letter; got {malformed}")
        if not self.selective <= set(self.switches):
            raise ValueError(f"layer kind {self.name}: selective switches must be among its switches")
        if not attrs.has(self.config_type):
            raise ValueError(f"layer kind {self.name}: config_type must be an attrs class")


def _census_part(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, Mapping):
        raise ValueError(f"{type(instance).__name__}.{attribute.name} must be a mapping, got {value!r}")
    for name, part in value.items():
        if not isinstance(name, str) or not isinstance(part, CensusBytes):
            raise ValueError(f"{type(instance).__name__}.{attribute.name} must map names to CensusBytes, got {name!r}: {part!r}")


@attrs.frozen
class CensusBytes:
    """Bytes per token at micro-batch 1 of one part of what a layer keeps, split as TP splits them.

    Attributes:
        saved: The bytes tensor parallelism does not split.
        saved_tp: The bytes it splits (stated at ``tp = 1``).
    """

    saved: float = attrs.field(validator=_non_negative_number)
    saved_tp: float = attrs.field(validator=_non_negative_number)


@attrs.frozen
class CensusRecord:
    """Measured activations of one layer kind, per token at micro-batch 1 (docs/census.md).

    Attributes:
        saved: Bytes kept between passes that tensor parallelism does not split.
        saved_tp: Bytes kept between passes that it splits (stated at ``tp = 1``).
        working: Bytes the backward holds at its peak beyond what is kept, not split by TP.
        working_tp: The part of the working set TP splits.
        provenance: Where the numbers come from (source, versions, sequence length, ...).
        per_op: Optionally, per recompute switch, the part of the kept bytes
            that switch drops (so every selective setting can be priced);
            what no switch gates is kept unless the layer is fully recomputed.
        policies: Optionally, per named selective policy (``selective``, or
            switches joined by ``+``), the bytes kept under it, measured whole.
    """

    saved: float = attrs.field(validator=_non_negative_number)
    saved_tp: float = attrs.field(validator=_non_negative_number)
    working: float = attrs.field(validator=_non_negative_number)
    working_tp: float = attrs.field(validator=_non_negative_number)
    provenance: Mapping[str, Any] = attrs.field(factory=dict)
    per_op: Mapping[str, CensusBytes] = attrs.field(factory=dict, validator=_census_part)
    policies: Mapping[str, CensusBytes] = attrs.field(factory=dict, validator=_census_part)

    def __attrs_post_init__(self) -> None:
        malformed = sorted(str(s) for s in self.per_op if not is_switch_name(s))
        if malformed:
            raise ValueError(f"CensusRecord.per_op: {malformed} are not switch names")
        gated = CensusBytes(sum(p.saved for p in self.per_op.values()), sum(p.saved_tp for p in self.per_op.values()))
        # A part can not exceed the whole (a relative slack for float sums).
        if gated.saved > self.saved * (1 + 1e-9) + 1e-6 or gated.saved_tp > self.saved_tp * (1 + 1e-9) + 1e-6:
            raise ValueError(
                f"CensusRecord.per_op adds up to saved={gated.saved}, saved_tp={gated.saved_tp}, "
                f"more than the record keeps (saved={self.saved}, saved_tp={self.saved_tp})"
            )


@attrs.frozen
class CensusRequest:
    """What a census source is asked: which kinds of which model, at which shapes.

    Attributes:
        model_name: The model's name (a preset's name where it is one).
        kinds: The layer kinds wanted, sorted.
        seq_len: Tokens per sequence the records are for.
        attention: The attention implementation (``eager``, ``flash``, or a
            source's own such as ``sdpa``).
        location: Where a source reads from (the ``file`` source's path).
        hf_config: The model's Hugging Face ``config.json`` mapping, where
            known (a source that builds the real layers needs it).
        tp_degrees: The tensor-parallel degrees to measure at (the first 1),
            for a source that splits by measuring.
    """

    model_name: str
    kinds: tuple[str, ...]
    seq_len: int
    attention: str
    location: str | None = None
    hf_config: Mapping[str, Any] | None = attrs.field(default=None, eq=False)
    tp_degrees: tuple[int, ...] = (1,)


@attrs.frozen
class CensusSource:
    """A source of census records, chosen by name.

    Attributes:
        name: Registry name (``"formulas"``).
        provide: ``provide(request) -> Mapping[kind name, CensusRecord]``; a kind
            with no record is priced by its formulas.
        description: One line for ``hp plugins``.
        write: Optional ``write(path, records, model) -> Path``: writes records
            as a file this source reads back, atomically (``hp census --out``
            uses the ``file`` source's).
    """

    name: str = attrs.field(validator=plugin_name)
    provide: Callable[[CensusRequest], Mapping[str, CensusRecord]]
    description: str = ""
    write: Callable[..., Any] | None = None


@attrs.frozen
class Runtime:
    """A trainer's memory behaviour and defaults.

    Attributes:
        name: Registry name (``"generic"``).
        precision: The precision and optimizer the trainer uses unless told otherwise.
        attention: The attention implementation it runs (``"flash"`` or ``"eager"``).
        zero: Its default sharding level (0-3).
        vocab_pad_multiple: It pads the vocabulary to a multiple of this times ``tp``.
        overhead_bytes: Bytes it holds per rank beyond the model math
            (workspaces, allocator reserve), stated with a source.
        expert_overhead_bytes: Further bytes on a rank holding routed experts
            (grouped-GEMM workspaces).
        overhead_by_architecture: Where the trainer's workspaces depend on the
            device: per device architecture (:attr:`HardwareSpec.architecture
            <hp_core.specs.hardware.HardwareSpec.architecture>`), the
            ``(overhead_bytes, expert_overhead_bytes)`` a rank on such a device
            holds in place of the two fields above (Transformer Engine's cuBLAS
            workspace is 4 MiB before compute capability 9.0). A device of an
            architecture not listed, a hardware spec stating none, and an
            estimate without a device take the two fields, the documented
            default (:meth:`overheads_on`).
        description: One line for ``hp plugins``; say where the figures come from.
        traits: How it implements ops where that changes what layers keep
            (names from :data:`TRAITS`).
        implicit_recompute: Switches it always recomputes, whatever the plan
            says (Megatron-LM re-gathers sequence-parallel inputs in backward).
        deferred_grad_reduction: Gradients are accumulated unsharded over a step's micro-batches and reduce-scattered
            once after the last backward, so under ZeRO-2/3 a stage holds its whole unsharded gradient at the end of
            its last backward: a second peak point.
        timing: How fast it runs (:class:`~hp_core.specs.timing.TimingProfile`:
            achieved efficiencies, overlaps, algorithms); ``None``: it states
            none, and asking it for a step time is refused.
        recompute_modules: The selective recompute its trainer can execute:
            named modules, each the switches it recomputes, of which any union
            runs (Megatron-LM ``--recompute-modules``); ``None``: any set of
            switches runs (a per-op trainer such as HyperParallel's).
        full_recompute: Whether it can recompute whole layers.
        module_kinds: For a module of ``recompute_modules`` that acts only on
            some layer kinds, those kinds (Megatron-LM's ``moe_act`` acts only
            on layers with routed experts); a module absent here acts on every kind.
        dummy_weight_gradients: It keeps one dummy weight gradient in the
            compute dtype per distinct weight shape of a rank's linear layers
            (fused weight-gradient accumulation: Transformer Engine >= 2.3
            ``module/base.py`` ``get_dummy_wgrad``; Megatron-LM's output layer too),
            priced from the layers' ``weight_shapes``.
        zero_levels: The sharding levels its trainer runs, which a layout
            search tries (Megatron-LM: 0 and 1, without and with its
            distributed optimizer; FSDP2: 3); its default ``zero`` is always
            tried too.
        peak_points: Its own peak points (:mod:`hp_core.peak_points`):
            ``peak_points(view) -> {name: MemoryBreakdown}``, replacing the
            planner's; ``None``: the planner's (warm-up end, last backward).
        reserve_bytes: Device memory a rank cannot give to tensors: what the
            process holds outside PyTorch's caching allocator (the CUDA
            context), so not in ``max_memory_allocated``; stated with a
            source. A stage fits when its peak plus this fits the device.
        options: The per-run options it offers (:mod:`hp_core.runtime_options`;
            docs/runtimes.md), each defaulting to the profile's behaviour.
        option_values: The options a run set (name to parsed value), as
            :func:`~hp_core.runtime_options.apply_options` records them;
            empty for the profile as registered.
        reduce_width_setting: Where the trainer has no reduce dtype of its
            own (it reduces gradients in place in its gradient buffer, so the
            reduction runs in ``grad_bytes``), what sets that width instead
            (a phrase: Megatron's ``grad_reduce_in_fp32`` option): a stated
            ``precision.reduce_bytes`` other than ``grad_bytes`` is refused
            naming it. ``None``: ``reduce_bytes`` is honoured (FSDP's
            ``reduce_dtype``).
        reshard_after_forward: Under ZeRO 3 at ``pp == 1``, whether its trainer
            frees a layer's gathered parameters after forward where the layout
            states nothing (``ParallelSpec.reshard_after_forward`` ``None``):
            FSDP2's ``fully_shard(reshard_after_forward=True)`` default.
        pipeline_reshard_after_forward: The same under ``pp > 1`` (torchtitan:
            off, ``fsdp_reshard_after_forward: default`` is ``not pp_enabled``).
        fp8_attention_refusal: Where the trainer's attention kernel runs no FP8
            attention (fsdp2's ``attention_kernel`` sdpa, flex, triton_flash):
            ``(field path, why and what to do)``, and a recipe running FP8
            attention is refused with it (:func:`hp_core.engine.precision.check_fp8_attention`).
            ``None``: the kernel can (Transformer Engine's cuDNN fused attention).
        inner_recompute: Whether its one recompute configuration also reaches the body layers a layer placed first
            or last runs inside itself (:attr:`LayerCost.inner_kinds <hp_core.costs.LayerCost.inner_kinds>`: the MTP
            module's): such a layer then recomputes what the run's body layers of those kinds recompute
            (Megatron-Core: one ``TransformerConfig`` for the model, which the MTP's inner layers are built with), and
            where every body layer is recomputed fully runs under its own whole checkpoint, if its cost states one
            (:attr:`LayerCost.checkpoint <hp_core.costs.LayerCost.checkpoint>`); ``False``: a placed layer recomputes nothing.
        compute_dtype_kinds: Per GEMM dtype of a recipe (``"fp4"``), the layer kinds the trainer runs
            wholly in the compute dtype under it (Megatron-Core: the MTP module under FP4), priced as
            :func:`hp_core.engine.precision.in_compute_dtype` prices a layer kept in bf16.
        blas_workspaces: PyTorch's own cuBLAS workspaces its ranks hold (:class:`~hp_core.blas_workspaces.BlasWorkspaces`:
            the GEMMs it runs through torch); ``None``: it states none.
    """

    name: str = attrs.field(validator=plugin_name)
    precision: PrecisionSpec
    attention: str = attrs.field(validator=attrs.validators.in_(ATTENTION_IMPLS))
    zero: int = attrs.field(default=0, validator=attrs.validators.in_((0, 1, 2, 3)))
    vocab_pad_multiple: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    overhead_bytes: int = attrs.field(default=0, validator=_non_negative_int)
    description: str = ""
    expert_overhead_bytes: int = attrs.field(default=0, validator=_non_negative_int)
    traits: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)
    implicit_recompute: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)
    deferred_grad_reduction: bool = False
    timing: TimingProfile | None = None
    recompute_modules: Mapping[str, frozenset[str]] | None = None
    full_recompute: bool = True
    module_kinds: Mapping[str, frozenset[str]] = attrs.field(factory=dict)
    zero_levels: tuple[int, ...] = attrs.field(default=(0, 1, 2, 3), converter=tuple)
    dummy_weight_gradients: bool = False
    peak_points: Callable[..., Any] | None = None
    reserve_bytes: int = attrs.field(default=0, validator=_non_negative_int)
    options: tuple[RuntimeOption, ...] = attrs.field(default=(), converter=tuple)
    option_values: Mapping[str, Any] = attrs.field(factory=dict)
    reduce_width_setting: str | None = None
    reshard_after_forward: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    pipeline_reshard_after_forward: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    fp8_attention_refusal: tuple[str, str] | None = attrs.field(default=None, converter=attrs.converters.optional(tuple))
    compute_dtype_kinds: Mapping[str, frozenset[str]] = attrs.field(factory=dict)
    inner_recompute: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    overhead_by_architecture: Mapping[str, tuple[int, int]] = attrs.field(factory=dict)
    blas_workspaces: Any = None  # hp_core.blas_workspaces.BlasWorkspaces

    @overhead_by_architecture.validator
    def _check_overhead_by_architecture(self, attribute: attrs.Attribute, value: Any) -> None:
        if not isinstance(value, Mapping):
            raise ValueError(f"runtime {self.name}: overhead_by_architecture must map architecture names to "
                             f"(overhead_bytes, expert_overhead_bytes), got {value!r}")
        for key, pair in value.items():
            if (not isinstance(key, str) or not isinstance(pair, tuple) or len(pair) != 2
                    or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in pair)):
                raise ValueError(f"runtime {self.name}: overhead_by_architecture[{key!r}] must be "
                                 f"(overhead_bytes, expert_overhead_bytes), two non-negative ints, got {pair!r}")

    def overheads_on(self, architecture: str | None) -> tuple[int, int]:
        """``(overhead_bytes, expert_overhead_bytes)`` a rank holds on a device of *architecture*: its
        :attr:`overhead_by_architecture` entry, else (``None``, or an architecture not listed) the profile's
        :attr:`overhead_bytes` and :attr:`expert_overhead_bytes`."""
        found = self.overhead_by_architecture.get(architecture) if architecture is not None else None
        return found if found is not None else (self.overhead_bytes, self.expert_overhead_bytes)

    def __attrs_post_init__(self) -> None:
        names = [option.name for option in self.options]
        if len(set(names)) != len(names) or not all(isinstance(o, RuntimeOption) for o in self.options):
            raise ValueError(f"runtime {self.name}: options must be RuntimeOption records with distinct names, got {names}")
        unknown = sorted(self.traits - set(TRAITS))
        if unknown:
            raise ValueError(f"runtime {self.name}: unknown traits {unknown}; known: {sorted(TRAITS)}")
        stray = sorted(s for s in self.implicit_recompute if not is_switch_name(s))
        for switches in (self.recompute_modules or {}).values():
            stray += sorted(s for s in switches if not is_switch_name(s))
        if stray:
            raise ValueError(f"runtime {self.name}: {stray} are not switch names")

    def reshards_after_forward(self, stated: bool | None, pp: int) -> bool:
        """A layout's ``reshard_after_forward``: *stated* where it states one, else this trainer's default at *pp*
        stages (:attr:`reshard_after_forward`, :attr:`pipeline_reshard_after_forward`)."""
        if stated is not None:
            return stated
        return self.pipeline_reshard_after_forward if pp > 1 else self.reshard_after_forward

    def module_acts_on(self, module: str, kind: str) -> bool:
        """Whether the recompute *module* acts on a layer of *kind* (``module_kinds``; a module absent there acts on every kind)."""
        return module not in self.module_kinds or kind in self.module_kinds[module]

    def executes(self, switches: frozenset[str], kind: str | None = None) -> bool:
        """Whether its trainer can run a selective setting recomputing exactly *switches*
        (beyond those it always recomputes) on a layer of *kind* (any kind when ``None``)."""
        wanted = frozenset(switches) - self.implicit_recompute
        if self.recompute_modules is None or not wanted:
            return True
        acting = [
            switches_of
            for module, switches_of in self.recompute_modules.items()
            if kind is None or self.module_acts_on(module, kind)
        ]
        covered = frozenset().union(*(m for m in acting if m <= wanted | self.implicit_recompute))
        return wanted <= covered


@attrs.frozen
class HardwarePreset:
    """A device type, as data with provenance."""

    name: str = attrs.field(validator=plugin_name)
    spec: HardwareSpec
    provenance: str = ""


@attrs.frozen
class ModelPreset:
    """A model shipped as data: a Hugging Face style ``config.json`` plus where it comes from."""

    name: str = attrs.field(validator=plugin_name)
    hf_config: Mapping[str, Any]
    provenance: str
    description: str = ""


@attrs.frozen
class Exporter:
    """A trainer plan writer: a recompute plan as one trainer's configuration.

    Attributes:
        name: Registry name, the trainer's (``"megatron"``); what ``--export`` names.
        runtime: The runtime profile (:class:`Runtime` name) whose trainer runs
            what it writes; it states the recompute that trainer executes.
        export: ``export(plan, model, parallel, *, registry) -> str | dict``:
            the :class:`~hp_core.specs.RecomputeSpec` *plan* for *model* on the
            layout *parallel*, as the trainer reads it (command-line flags or
            config text as ``str``, a config mapping as ``dict``). A plan the
            trainer cannot run raises :class:`hp_core.errors.PlanNotExecutable`
            naming what it runs and the closest plan it can run.
        description: One line for ``hp plugins``: the trainer and its format.
        candidates: Optional ``candidates(model, parallel, *, registry) ->
            Iterable[RecomputeSpec]``: every whole-model plan the trainer can
            express, so a planner can search within them (``hp recompute
            --export``).
    """

    name: str = attrs.field(validator=plugin_name)
    runtime: str = attrs.field(validator=plugin_name)
    export: Callable[..., Any]
    description: str = ""
    candidates: Callable[..., Any] | None = None


@attrs.frozen
class ModelFormat:
    """A model config format: turns one family of configs into a layer stack.

    Hugging Face ``config.json`` files are dispatched by their ``model_type``
    to the format that lists it, so a plugin adds a new architecture's
    ``model_type`` (``mamba2``, ``gemma2``, ...) without touching the
    built-in importer; presets are built the same way.

    Attributes:
        name: Registry name (``"hf"``).
        build: ``build(config, *, name, source, where) -> ModelSpec``: the
            layer stack of the config mapping; ``name`` is the model's display
            name, ``source`` its provenance, ``where`` how errors name the
            file. Raises :class:`hp_core.errors.ConfigError` naming the field.
        model_types: The Hugging Face ``model_type`` values it reads; two
            formats may not both claim one.
        description: One line for ``hp plugins``.
    """

    name: str = attrs.field(validator=plugin_name)
    build: Callable[..., Any]
    model_types: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    description: str = ""


@attrs.frozen
class CaseFormat:
    """A format of measured runs that ``hp validate`` reads besides its own ``hp-cases/1``.

    Attributes:
        name: Registry name.
        accepts: ``accepts(document) -> bool``: whether a parsed file is in this format.
        read: ``read(document, registry) -> list[MeasuredCase]``
            (:class:`hp_core.io.validate.MeasuredCase`), refusing a bad
            entry with :class:`hp_core.errors.ConfigError` naming its path.
        description: One line for ``hp plugins``.
    """

    name: str = attrs.field(validator=plugin_name)
    accepts: Callable[[Any], bool]
    read: Callable[..., Any]
    description: str = ""


# The fields of a LayerCost a plugin may state for another plugin's kind (LayerAspect.aspect).
ASPECTS = ("params", "activations", "work")


@attrs.frozen
class LayerAspect:
    """One cost aspect of an existing layer kind, stated by another plugin without registering the kind again.

    The registry composes the kind's evaluator with it, so every estimate,
    step time, plan, census and contract check sees the composed cost.

    Attributes:
        name: Registry name of the aspect.
        kind: The layer kind it applies to (another plugin's, or a built-in).
        aspect: Which field of :class:`~hp_core.costs.LayerCost` it states:
            ``params`` (a tuple of ParamCount), ``activations`` (a tuple of
            ActivationTerm) or ``work`` (a LayerWork) (:data:`ASPECTS`).
        evaluate: ``evaluate(config, context, cost) -> value``: the field's
            new value, given the kind's cost (with the aspects of lower name
            already applied).
        description: One line for ``hp plugins``.
    """

    name: str = attrs.field(validator=plugin_name)
    kind: str = attrs.field(validator=plugin_name)
    aspect: str = attrs.field(validator=attrs.validators.in_(ASPECTS))
    evaluate: Callable[..., Any]
    description: str = ""
