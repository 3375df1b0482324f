"""``hp-cases/2``: measured runs that state only what they measured.

Unlike ``hp-cases/1`` (a peak for every pipeline stage), a case may give a peak
for some stages only (the last rank's, as Megatron-LM logs it), the caching
allocator's ``reserved`` figure beside or instead of ``allocated``, step times,
or tokens per second per GPU or MFU alone; an error is computed for each figure
given and for nothing else (docs/validate.md)::

    format: hp-cases/2
    cases:
      - name: llama3-70b-last-rank
        config: {model: llama3-70b, runtime: megatron, hardware: h100-sxm,
                 parallel: {dp: 2, tp: 8, sp: true, pp: 4, seq_len: 8192, global_batch_size: 64}}
        measured:
          source: "Megatron-LM log, iterations 5-10"
          stages:                              # optional: any stages, "last" for the last one
            - {stage: last, allocated_gib: 30.9, reserved_gib: 33.0}
          steps:                               # optional: one figure each
            - {micro_batches: 32, seconds: 10.4}
            - {global_batch_size: 64, tokens_per_second_per_gpu: 780.0}
            - {micro_batches: 32, mfu: 0.41}

Every field is read through the config converter, so an error names its path
(``$.cases[0].measured.stages[1].reserved_gib``).
"""

from __future__ import annotations

from typing import Any

import attrs

from hp_core.bounds import MAX_MEMORY_BYTES, short_repr
from hp_core.errors import ConfigError, SpecError
from hp_core.io.convert import ConfigFile, structure
from hp_core.io.job import Job, estimate_job, resolve_job, step_time_job
from hp_core.registry import Registry
from hp_core.runtime_options import runtime_name
from hp_core.validators import bounded_int, optional, positive_number

__all__ = ["FORMAT_V2", "MeasuredCaseV2", "StageMeasure", "StepMeasure", "check_case_v2", "read_cases_v2"]

FORMAT_V2 = "hp-cases/2"
_GIB = 2**30
QUANTITIES = ("allocated", "reserved")
METRICS = ("seconds", "tokens_per_second_per_gpu", "mfu")


def in_case(exc: ConfigError, where: str, config: bool = True) -> ConfigError:
    """*exc*, raised by a case's config (a path from ``$``), where the cases file has it: under the case's ``config``
    (``$.cases[1].config.precision.recipe``) for a case that states one (*config*), else after the case's path (a case
    format's own layout, whose fields the config was made from: ``$.cases[0]: $.parallel.pp: ...``)."""
    if where == "$":
        return exc
    if not config:
        return ConfigError(where, f"{exc.path}: {exc.message}")
    return ConfigError(f"{where}.config{exc.path[1:]}" if exc.path.startswith("$") else exc.path, exc.message)


# A case's steps a refusal at one of these leaves unpriced, its memory rows kept: no device or device field, a runtime
# without a timing profile, a recipe the profile has no measured speedup for.
UNPRICED_STEPS = ("$.runtime", "$.hardware", "$.precision")


def unique_names(names: list[str]) -> None:
    """Refuse a case name used twice (their rows could not be told apart), at the later one's path."""
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            raise ConfigError(f"$.cases[{i}].name", f"case name {name!r} is also case {seen[name]}'s; name each case once")
        seen[name] = i


def _at_most(limit: float, what: str) -> Any:
    """A positive finite number (:func:`~hp_core.validators.positive_number`) of at most *limit*, or absent."""
    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        positive_number(instance, attribute, value)
        if value > limit:
            raise SpecError(attribute.name, f"{attribute.name} must be at most {limit:,} ({what}), got {short_repr(value)}")
    return optional(check)


# A memory figure in bytes: an int of at most MAX_MEMORY_BYTES, or absent.
_MEMORY_BYTES = optional(bounded_int(MAX_MEMORY_BYTES, what="MAX_MEMORY_BYTES"))


def _positive_int(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


def _some_cases(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not value:
        raise ValueError("cases must list at least one measured case")


def _stage_ref(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not (value == "last" or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)):
        raise ValueError(f"stage must be a stage index (0, 1, ...) or 'last', got {value!r}")


@attrs.frozen(kw_only=True)
class _Stage:
    stage: Any = attrs.field(validator=_stage_ref)
    allocated_gib: float | None = attrs.field(default=None, validator=_at_most(MAX_MEMORY_BYTES / _GIB, "MAX_MEMORY_BYTES"))
    allocated_bytes: int | None = attrs.field(default=None, validator=_MEMORY_BYTES)
    reserved_gib: float | None = attrs.field(default=None, validator=_at_most(MAX_MEMORY_BYTES / _GIB, "MAX_MEMORY_BYTES"))
    reserved_bytes: int | None = attrs.field(default=None, validator=_MEMORY_BYTES)


@attrs.frozen(kw_only=True)
class _Step:
    micro_batches: int | None = attrs.field(default=None, validator=_positive_int)
    global_batch_size: int | None = attrs.field(default=None, validator=_positive_int)
    seconds: float | None = attrs.field(default=None, validator=optional(positive_number))
    tokens_per_second_per_gpu: float | None = attrs.field(default=None, validator=optional(positive_number))
    mfu: float | None = attrs.field(default=None, validator=_at_most(1.0, "a fraction of the compute dtype's peak"))


@attrs.frozen(kw_only=True)
class _Measured:
    source: str
    stages: tuple[_Stage, ...] = ()
    steps: tuple[_Step, ...] = ()


@attrs.frozen(kw_only=True)
class _Case:
    name: str
    config: ConfigFile
    measured: _Measured


@attrs.frozen(kw_only=True)
class _File:
    format: str
    cases: tuple[_Case, ...] = attrs.field(validator=_some_cases)


@attrs.frozen
class StageMeasure:
    """One measured memory figure of one stage: ``stage`` an index or ``"last"``, ``quantity`` allocated or reserved."""

    stage: int | str
    quantity: str
    measured_bytes: int
    where: str


@attrs.frozen
class StepMeasure:
    """One measured step figure: its batch (micro-batches and/or global batch) and one metric of :data:`METRICS`."""

    micro_batches: int | None
    global_batch_size: int | None
    metric: str
    value: float
    where: str


@attrs.frozen
class MeasuredCaseV2:
    """An ``hp-cases/2`` case: the resolved job and what was measured of it."""

    name: str
    runtime: str
    job: Job
    source: str
    stages: tuple[StageMeasure, ...]
    steps: tuple[StepMeasure, ...]
    where: str


def _bytes(gib: float | None, nbytes: int | None, quantity: str, where: str) -> int | None:
    if gib is not None and nbytes is not None:
        raise ConfigError(where, f"state {quantity}_gib or {quantity}_bytes, not both")
    return nbytes if nbytes is not None else (round(gib * _GIB) if gib is not None else None)


def read_cases_v2(document: Any, registry: Registry) -> list[MeasuredCaseV2]:
    """The cases of an ``hp-cases/2`` document.

    Raises:
        ConfigError: A field of the wrong type or value, a stage entry with no
            figure, a step entry with no batch or not exactly one metric, a case
            measuring nothing (each naming its path).
    """
    parsed = structure(document, _File, registry)
    unique_names([case.name for case in parsed.cases])
    cases = []
    for i, case in enumerate(parsed.cases):
        where = f"$.cases[{i}].measured"
        stages = []
        for j, entry in enumerate(case.measured.stages):
            at = f"{where}.stages[{j}]"
            found = False
            for quantity in QUANTITIES:
                value = _bytes(getattr(entry, f"{quantity}_gib"), getattr(entry, f"{quantity}_bytes"), quantity, at)
                if value is not None:
                    stages.append(StageMeasure(entry.stage, quantity, value, f"{at}.{quantity}"))
                    found = True
            if not found:
                raise ConfigError(at, "state allocated_gib/_bytes, reserved_gib/_bytes or both")
        steps = []
        for j, entry in enumerate(case.measured.steps):
            at = f"{where}.steps[{j}]"
            if entry.micro_batches is None and entry.global_batch_size is None:
                raise ConfigError(at, "state the step's micro_batches or global_batch_size")
            given = [metric for metric in METRICS if getattr(entry, metric) is not None]
            if len(given) != 1:
                raise ConfigError(at, f"state exactly one of {', '.join(METRICS)}, got {given or 'none'}")
            steps.append(StepMeasure(entry.micro_batches, entry.global_batch_size, given[0], getattr(entry, given[0]), at))
        if not stages and not steps:
            raise ConfigError(where, "a case measures something: state stages, steps or both")
        try:
            job = resolve_job(case.config, registry)
        except ConfigError as exc:
            raise in_case(exc, f"$.cases[{i}]") from None
        cases.append(MeasuredCaseV2(case.name, runtime_name(job.runtime), job, case.measured.source, tuple(stages),
                                    tuple(steps), f"$.cases[{i}]"))
    return cases


def check_case_v2(case: MeasuredCaseV2, registry: Registry):
    """Estimate *case* and pair each figure it gives with the estimate's.

    Returns ``(estimate, stage checks, step checks, why steps were not priced)``:
    each stage check ``(stage, estimated bytes, measured bytes, quantity)``,
    each step check the fields of :class:`~hp_core.io.validate.StepCheck`, in order.
    """
    try:
        result = estimate_job(case.job, registry)
    except ConfigError as exc:
        raise in_case(exc, case.where) from None
    pp = len(result.stages)
    checks = []
    for measure in case.stages:
        index = pp - 1 if measure.stage == "last" else measure.stage
        if index >= pp:
            raise ConfigError(measure.where.rpartition(".")[0] + ".stage",
                              f"stage {index} is beyond the layout's {pp} stages (0-{pp - 1}, or 'last')")
        stage = result.stages[index]
        # Reserved memory: the peak and what the runtime states the caching allocator keeps beside it.
        estimated = stage.peak_bytes if measure.quantity == "allocated" else stage.reserved_bytes
        checks.append((index, estimated, measure.measured_bytes, measure.quantity))
    steps, unavailable = _check_steps(case, registry) if case.steps else ((), None)
    return result, tuple(checks), steps, unavailable


def _check_steps(case: MeasuredCaseV2, registry: Registry):
    job = case.job
    if job.hardware is None:
        return (), f"{case.where}.config.hardware: measured step figures are priced on the device they ran on; name it"
    parallel = job.parallel
    per_step = parallel.micro_batch_size * parallel.dp
    checks = []
    for step in case.steps:
        batch = step.global_batch_size or step.micro_batches * per_step
        if batch % per_step or (step.micro_batches is not None and batch // per_step != step.micro_batches):
            raise ConfigError(step.where, f"global batch {batch} is not {step.micro_batches or 'a whole number of'} "
                                          f"micro-batches of micro_batch_size*dp={per_step} on this layout")
        try:
            priced = step_time_job(job, registry, attrs.evolve(parallel, global_batch_size=batch))
        except ConfigError as exc:
            if exc.path.startswith(UNPRICED_STEPS):
                return (), str(in_case(exc, case.where))
            raise ConfigError(step.where, str(exc)) from None
        estimated = {"seconds": priced.step_seconds,
                     "tokens_per_second_per_gpu": priced.tokens_per_second / parallel.world_size,
                     "mfu": priced.mfu}[step.metric]
        # The measured figure as the step time it implies at this batch (tokens and FLOPs are the estimate's).
        implied_seconds = priced.step_seconds * estimated / step.value if step.metric != "seconds" else step.value
        checks.append((batch // per_step, batch, priced.step_seconds, implied_seconds, step.metric, estimated, step.value))
    return tuple(checks), None
