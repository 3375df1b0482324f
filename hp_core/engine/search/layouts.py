"""What the layout search searches and answers: layouts, candidates, results, and why a candidate is rejected.

A :class:`Layout` is one candidate (degrees, micro-batch size, ZeRO level,
schedule); a :class:`Candidate` is a layout that fits, with its recompute
plan; a :class:`SearchResult` is :func:`~hp_core.engine.search.search`'s
answer. Every candidate not ranked is counted under one of :data:`REASONS`.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from hp_core.errors import ConfigError, RunRefusal
from hp_core.registry import Registry
from hp_core.specs import HardwareSpec, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec
from hp_core.specs.overlap import FsdpPipelineError
from hp_core.engine.layout_checks import PipelineTraitError
from hp_core.types import Runtime

# Why a candidate was not ranked; ``search`` counts every candidate under one.
R_LAYERS = "pp*vpp does not divide over the body layers"
R_EXPERTS = "ep does not divide the routed experts"
R_MODEL = "tp/cp/ep do not divide the model's heads, experts or widths"
R_SEQUENCE = "cp or tp (sequence parallel) does not divide the sequence"
R_BATCH = "global batch does not divide into micro-batches of the layout"
R_STATIC = "static memory alone exceeds the device"
R_FULL = "does not fit even fully recomputed"
R_PLAN = "does not fit with the runtime's least-memory plan"
R_SLOWER = "cannot enter the top K: slower with nothing recomputed than the K-th plan"
R_SCHEDULE = "the pipeline schedule does not run this pp, vpp or micro-batch count"
R_FSDP_PP = ("the runtime prices FSDP (zero 3) memory under pp > 1 on gpipe and 1f1b, and on interleaved_1f1b (vpp > 1) "
             "without reshard_after_forward, only")
R_PIPELINE_TRAIT = ("the runtime's options are not priced under pp > 1 (a chunked loss) or change nothing there "
                    "(fsdp2's fsdp_reduce_scatter_overlap false; fsdp_prefetch false under vpp > 1)")
R_OPTION = ("a runtime option the layout cannot run (fsdp2's reshard_after_forward_to not a factor of the shard group, "
            "or an option that needs zero 3 below it), or a precision recipe its ZeRO level cannot (one keeping its "
            "parameters in its format at zero 0, one gathering through the gradient buffer at zero 3)")
R_HSDP = "the runtime's hsdp_replicate does not divide the (expert) data-parallel degree, or pp > 1 where its profile refuses it"
R_KEPT = ("more layers kept in the compute dtype (high_precision_layers_at_start or _at_end) than a pipeline stage's "
          "body layers")
REASONS = (R_LAYERS, R_KEPT, R_EXPERTS, R_MODEL, R_OPTION, R_SEQUENCE, R_HSDP, R_BATCH, R_STATIC, R_FULL, R_PLAN, R_SLOWER,
           R_SCHEDULE, R_FSDP_PP, R_PIPELINE_TRAIT)

# The names ``fixed`` accepts.
FIXABLE = ("dp", "cp", "tp", "pp", "vpp", "ep", "etp", "zero", "micro_batch_size")


def zero_levels(runtime: Runtime) -> tuple[int, ...]:
    """The ZeRO levels searched for *runtime*: those its trainer runs (``Runtime.zero_levels``) and its default."""
    return tuple(sorted(set(runtime.zero_levels) | {runtime.zero}))


def balanced_layers(body_layers: int, chunks: int) -> tuple[int, ...] | None:
    """Body layers per chunk when *chunks* does not divide them: one more on the middle chunks; ``None`` when it does.

    The first and last chunks, which also hold the embedding and the output
    head, take an extra layer only when the middle ones cannot absorb them all.
    """
    base, extra = divmod(body_layers, chunks)
    if extra == 0:
        return None
    counts = [base] * chunks
    middle = sorted(range(1, chunks - 1), key=lambda c: (abs(2 * c - (chunks - 1)), c))
    for c in (middle + [0, chunks - 1])[:extra]:
        counts[c] += 1
    return tuple(counts)


@attrs.frozen(order=False)
class Layout:
    """One searched layout: degrees, micro-batch size, ZeRO level and schedule.

    Attributes:
        dp: Data-parallel degree.
        cp: Context-parallel degree.
        tp: Tensor-parallel degree (sequence parallel when above 1).
        pp: Pipeline stages.
        vpp: Chunks per stage (interleaved 1F1B when above 1).
        ep: Expert-parallel degree.
        etp: Expert tensor-parallel degree.
        zero: Sharding level over DP*CP.
        micro_batch_size: Sequences per micro-batch.
        layers_per_stage: Body layers per chunk when ``pp * vpp`` does not
            divide them (:func:`balanced_layers`); ``None``: an even split.
        schedule_name: The pipeline schedule searched (``--schedules``);
            ``None``: ``1f1b``, or ``interleaved_1f1b`` when ``vpp > 1``.
    """

    dp: int
    cp: int
    tp: int
    pp: int
    vpp: int
    ep: int
    etp: int
    zero: int
    micro_batch_size: int
    layers_per_stage: tuple[int, ...] | None = None
    schedule_name: str | None = None

    @property
    def key(self) -> tuple[int, ...]:
        """The deterministic tie-break: ``(dp, cp, tp, pp, vpp, ep, etp, mbs, zero)`` (then the schedule's name
        where several are searched)."""
        return (self.dp, self.cp, self.tp, self.pp, self.vpp, self.ep, self.etp, self.micro_batch_size, self.zero)

    @property
    def schedule(self) -> str:
        if self.schedule_name is not None:
            return self.schedule_name
        return "1f1b" if self.vpp == 1 else "interleaved_1f1b"

    def describe(self) -> str:
        """``dp8 tp8 pp4 mbs1 zero1`` (degrees of 1 left out, sp implied by tp)."""
        parts = [f"{name}{value}" for name, value in (("dp", self.dp), ("cp", self.cp), ("tp", self.tp), ("pp", self.pp),
                                                        ("vpp", self.vpp), ("ep", self.ep), ("etp", self.etp))
                 if value > 1 or name == "dp"]
        searched = [self.schedule_name] if self.schedule_name is not None else []
        return " ".join(parts + [f"mbs{self.micro_batch_size}", f"zero{self.zero}"] + searched)

    def parallel(self, seq_len: int, global_batch_size: int) -> ParallelSpec:
        """The layout as a :class:`~hp_core.specs.ParallelSpec`."""
        return ParallelSpec(
            dp=self.dp, cp=self.cp, tp=self.tp, pp=self.pp, vpp=self.vpp, ep=self.ep, etp=self.etp, sp=self.tp > 1,
            zero=self.zero, micro_batch_size=self.micro_batch_size, global_batch_size=global_batch_size,
            seq_len=seq_len, schedule=self.schedule, layers_per_stage=self.layers_per_stage,
        )


@attrs.frozen
class Candidate:
    """A layout that fits, with its plan.

    Attributes:
        layout: The layout.
        step_seconds: The step time under the plan.
        mfu: Model FLOPs utilisation under the plan.
        peak_bytes: The highest stage peak under the plan.
        stage_peaks_bytes: Every stage's peak under the plan.
        recompute: The plan (a default setting and ranges of exceptions).
        plan_summary: The plan in one line (``default none; 0-3 full``).
        unproven: The planner's unproven states of the plan (:attr:`PlanResult.unproven
            <hp_core.engine.recompute.plan.PlanResult.unproven>`: the MTP module's states under which a plan might be
            faster, the search of the plans reaching them having run past its budget); empty where the plan is proven
            the fastest. The candidate is ranked by its plan's step time all the same.
    """

    layout: Layout
    step_seconds: float
    mfu: float
    peak_bytes: int
    stage_peaks_bytes: tuple[int, ...]
    recompute: RecomputeSpec
    plan_summary: str
    unproven: tuple = ()


@attrs.frozen
class SearchResult:
    """What :func:`~hp_core.engine.search.search` answers.

    Attributes:
        model: The model's name.
        runtime: The runtime profile's name.
        hardware: The device's name.
        devices: The device count.
        global_batch_size: Sequences per step.
        seq_len: Tokens per sequence.
        considered: Candidates enumerated (layout, micro-batch size, ZeRO level).
        planned: Candidates the recompute planner ran on.
        fitting: Candidates planned whose plan fits.
        top: The fastest fitting candidates, fastest first (ties by layout key).
        rejected: Candidates not ranked, by reason (:data:`REASONS`; only those with a count).
        high_precision_layers: ``(at start, at end)``: the first and last body layers every candidate keeps in the
            compute dtype under the precision recipe (``PrecisionSpec.high_precision_layers_at_start`` / ``_at_end``,
            fixed, not searched); ``(0, 0)`` where none are or the recipe quantizes nothing.
        compute_dtype_kinds: The layer kinds the runtime runs wholly in the compute dtype under the recipe in every
            candidate (``Runtime.compute_dtype_kinds``: ``("mtp",)``, Megatron-Core's MTP module under FP4), sorted;
            empty where the model has none.
        precision: The precision every candidate is priced under, as an estimate's provenance records it
            (:func:`~hp_core.engine.estimate.precision_provenance`: ``precision_recipe`` and, where set, the layers
            kept and the module formats).
        mfu_dtype: The dtype whose dense peak each candidate's MFU is taken against (the compute dtype's).
    """

    model: str
    runtime: str
    hardware: str
    devices: int
    global_batch_size: int
    seq_len: int
    considered: int
    planned: int
    fitting: int
    top: tuple[Candidate, ...]
    rejected: Mapping[str, int]
    high_precision_layers: tuple[int, int] = (0, 0)
    compute_dtype_kinds: tuple[str, ...] = ()
    precision: Mapping[str, Any] = attrs.field(factory=lambda: {"precision_recipe": "bf16"})
    mfu_dtype: str = "bf16"

    @property
    def best(self) -> Candidate | None:
        """The fastest fitting candidate, ``None`` when nothing fits."""
        return self.top[0] if self.top else None


@attrs.frozen
class _Job:
    """What a worker needs to bound or plan one candidate."""

    model: ModelSpec
    registry: Registry
    hardware: HardwareSpec
    runtime: str
    precision: PrecisionSpec | None
    census: str
    reserve_bytes: int
    seq_len: int
    global_batch_size: int
    schedule: str | None = None  # the schedule searched; None: by vpp (Layout.schedule)


# Field paths whose every refusal holds for the run as a whole, whatever the layout: the recipe's (its device,
# its dtype peaks, FP8 attention on a layer that marks no kernel tensors). A refusal at a runtime option is run-wide
# only where it is a RunRefusal (Runtime.fp8_attention_refusal); others (reshard_after_forward_to) depend on the layout.
RUN_WIDE_PATHS = ("$.precision.recipe",)


def _reason_of(error: ConfigError) -> str:
    """The rejection reason of a layout refused with *error*.

    Raises:
        ConfigError: *error* itself where it refuses the run whatever the layout (:class:`~hp_core.errors.RunRefusal`,
            or at one of :data:`RUN_WIDE_PATHS`): the search says it on one line rather than rejecting every layout.
    """
    if isinstance(error, FsdpPipelineError):
        return R_FSDP_PP
    if isinstance(error, PipelineTraitError):
        return R_PIPELINE_TRAIT
    path = error.path
    if isinstance(error, RunRefusal) or path in RUN_WIDE_PATHS:
        raise error  # the recipe or the runtime, not the layout: no layout runs it (FP8 attention refused), said as is
    if path.startswith("$.precision.high_precision_layers_at_"):  # check_high_precision_layers, per pp
        return R_KEPT
    if path in ("$.parallel.schedule", "$.parallel.vpp"):
        return R_SCHEDULE
    if path in ("$.parallel.cp", "$.parallel.sp"):
        return R_SEQUENCE
    if path == "$.parallel.global_batch_size":
        return R_BATCH
    if path in ("$.parallel.pp", "$.parallel.layers_per_stage"):
        return R_LAYERS
    if path.startswith("$.runtime.options.") or path == "$.parallel.zero":  # an option's or a recipe's check of the layout
        return R_OPTION
    return R_MODEL
