"""Checking the estimator against measured runs: ``hp validate CASES``.

A cases file holds measured runs, each with the configuration it ran and what
it measured. The project's own layout is read here; any other is read by the
case format (a plugin, :class:`~hp_core.types.CaseFormat`) that accepts it:

* the project's own (``format: hp-cases/1``, YAML, JSON or TOML)::

      format: hp-cases/1
      cases:
        - name: llama3-8b-tp2-dp4
          config: {model: llama3-8b, parallel: {dp: 4, tp: 2, sp: true, seq_len: 8192}, runtime: megatron,
                   hardware: h100-sxm}
          measured:
            source: "torch.cuda.max_memory_allocated, 3 iterations, 8x H100, 2026-11-01"
            stage_peak_gib: [52.1]          # or stage_peak_bytes; one per pipeline stage
            steps: [{micro_batches: 16, seconds: 4.2}]   # optional

  ``config`` is exactly an ``hp estimate`` config file;
* the built-in ``megatron-measured`` format reads ``megatron_measured.json`` as published.

For every case and stage the report gives the estimated and the measured peak
and the signed error ``(estimated - measured) / measured``; for every measured
step time, the step time estimated on the device the case ran on (the config's
``hardware``; a ``megatron_measured.json`` case names B200) at that step's
micro-batch count, and the same signed error.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import attrs

from hp_core.bounds import MAX_INT, MAX_MEMORY_BYTES, short_repr
from hp_core.errors import ConfigError, SpecError, call_plugin
from hp_core.io.cases2 import FORMAT_V2, UNPRICED_STEPS, MeasuredCaseV2, check_case_v2, in_case, read_cases_v2, unique_names
from hp_core.io.convert import ConfigFile, read_document, structure
from hp_core.io.job import Job, estimate_job, resolve_job, step_time_job
from hp_core.registry import Registry
from hp_core.runtime_options import runtime_label, runtime_name
from hp_core.specs import ModelSpec, ParallelSpec

__all__ = ["CaseResult", "MeasuredCase", "MeasuredStep", "StageCheck", "StepCheck", "load_cases", "measure_cases", "validate_case"]

FORMAT = "hp-cases/1"
MEASURE_FORMAT = "hp-measure/1"  # what --measure hands the case formats: cases to measure now
_GIB = 2**30


def _positive_int(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT):
        raise SpecError(attribute.name, f"{attribute.name} must be a positive integer, got {short_repr(value)} (at most {MAX_INT:,})")


def _positive_seconds(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not value > 0:
        raise SpecError(attribute.name, f"{attribute.name} must be a positive number of seconds, got {short_repr(value)} (finite)")


@attrs.frozen
class MeasuredStep:
    """A measured step time at one micro-batch count (``global_batch_size``: the step's, where stated)."""

    micro_batches: int = attrs.field(validator=_positive_int)
    seconds: float = attrs.field(validator=_positive_seconds)
    global_batch_size: int | None = attrs.field(default=None, validator=_positive_int)


@attrs.frozen
class MeasuredCase:
    """One measured run: what it ran and what it measured.

    ``where`` is the case's path in its file (``$.cases[2]``), ``steps_where``
    the path of its step list and ``hardware_where`` of the device it names,
    for error messages; ``has_config``: the case states an ``hp estimate``
    config under ``config`` (``hp-cases/1``), where its config's refusals are said.
    """

    name: str
    model: ModelSpec
    parallel: ParallelSpec
    runtime: str
    stage_peak_bytes: tuple[int, ...]
    source: str
    steps: tuple[MeasuredStep, ...] = ()
    hardware: str | None = None
    job: Job | None = None
    where: str = "$"
    steps_where: str = "$.measured.steps"
    hardware_where: str = "$.config.hardware"
    has_config: bool = False


@attrs.frozen
class StageCheck:
    """One stage: estimated and measured peak, and the signed relative error.

    ``quantity`` is what was measured: ``allocated`` (``max_memory_allocated``)
    or, in ``hp-cases/2``, ``reserved`` (the caching allocator's
    ``max_memory_reserved``, compared with the estimated peak plus what the
    runtime states the allocator keeps beside it, ``StageEstimate.reserved_bytes``).
    """

    stage: int
    estimated_bytes: int
    measured_bytes: int
    quantity: str = "allocated"

    @property
    def error(self) -> float:
        return (self.estimated_bytes - self.measured_bytes) / self.measured_bytes


@attrs.frozen
class StepCheck:
    """One measured step time: the micro-batches it ran, estimated and measured seconds, the signed relative error."""

    micro_batches: int
    global_batch_size: int
    estimated_seconds: float
    measured_seconds: float
    metric: str = "seconds"
    estimated_value: float | None = None
    measured_value: float | None = None

    @property
    def error(self) -> float:
        """The signed error in the metric measured (``hp-cases/2``: tokens per second per GPU or MFU where given)."""
        if self.metric != "seconds" and self.estimated_value is not None and self.measured_value is not None:
            return (self.estimated_value - self.measured_value) / self.measured_value
        return (self.estimated_seconds - self.measured_seconds) / self.measured_seconds


@attrs.frozen
class CaseResult:
    """A case's per-stage checks, its step-time checks, and the estimate behind them.

    ``time_unavailable`` says why measured step times were not priced (no device
    stated, a runtime without a timing profile, a recipe the profile has no
    measured speedup for); ``None`` when they were, or when the case measured
    none. ``precision_recipe`` is the recipe the case was priced under.
    """

    name: str
    runtime: str
    stages: tuple[StageCheck, ...]
    estimate: Any
    steps: tuple[StepCheck, ...] = ()
    time_unavailable: str | None = None
    precision_recipe: str = "bf16"


def _peaks(unit_bytes: int) -> Any:
    """Measured peaks: a non-empty list of positive, finite amounts of at most MAX_MEMORY_BYTES."""

    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is None:
            return
        if not value:
            raise SpecError(attribute.name, f"{attribute.name} must list one peak per pipeline stage, got none")
        for i, peak in enumerate(value):
            if isinstance(peak, bool) or not isinstance(peak, (int, float)) or not math.isfinite(peak) or not peak > 0 \
                    or peak * unit_bytes > MAX_MEMORY_BYTES:
                raise SpecError(f"{attribute.name}[{i}]", f"{attribute.name}[{i}] must be a positive finite amount of "
                                                          f"at most {MAX_MEMORY_BYTES // unit_bytes:,}, got {short_repr(peak)}")

    return check


@attrs.frozen(kw_only=True)
class _Measured:
    source: str
    stage_peak_gib: tuple[float, ...] | None = attrs.field(default=None, validator=_peaks(_GIB))
    stage_peak_bytes: tuple[int, ...] | None = attrs.field(default=None, validator=_peaks(1))
    steps: tuple[MeasuredStep, ...] = ()


@attrs.frozen(kw_only=True)
class _OwnCase:
    name: str
    config: ConfigFile
    measured: _Measured


def _some_cases(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not value:
        raise SpecError("cases", "cases must list at least one measured case")


@attrs.frozen(kw_only=True)
class _OwnFile:
    format: str
    cases: tuple[_OwnCase, ...] = attrs.field(validator=_some_cases)


def load_cases(path: str | Path, registry: Registry) -> list:
    """Read a cases file in any layout (``hp-cases/2`` cases are :class:`~hp_core.io.cases2.MeasuredCaseV2`)."""
    document = read_document(path)
    for fmt in registry.case_formats:
        if call_plugin(fmt.name, "case format accepts()", fmt.accepts, document):
            return list(call_plugin(fmt.name, "case format read()", fmt.read, document, registry))
    if isinstance(document, dict) and document.get("format") == FORMAT_V2:
        return read_cases_v2(document, registry)
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ConfigError("$.format", f"a cases file states format: {FORMAT} or hp-cases/2 (or is megatron_measured.json "
                                      "as published)")
    own = structure(document, _OwnFile, registry)
    unique_names([case.name for case in own.cases])
    cases = []
    for i, case in enumerate(own.cases):
        measured = case.measured
        if (measured.stage_peak_gib is None) == (measured.stage_peak_bytes is None):
            raise ConfigError(f"$.cases[{i}].measured", "state exactly one of stage_peak_gib and stage_peak_bytes")
        peaks = measured.stage_peak_bytes or tuple(round(g * _GIB) for g in measured.stage_peak_gib)
        try:
            job = resolve_job(case.config, registry)
        except ConfigError as exc:
            raise in_case(exc, f"$.cases[{i}]") from None
        cases.append(
            MeasuredCase(
                name=case.name, model=job.model, parallel=job.parallel, runtime=runtime_name(job.runtime),
                stage_peak_bytes=tuple(peaks), source=measured.source, steps=measured.steps, job=job,
                where=f"$.cases[{i}]", steps_where=f"$.cases[{i}].measured.steps", hardware_where=f"$.cases[{i}].config.hardware",
                has_config=True,
            )
        )
    return cases


def measure_cases(path: str | Path, registry: Registry) -> list[MeasuredCase]:
    """``hp validate --measure CONFIG``: the estimate config at *path* as one case of an ``hp-measure/1``
    document, read (so measured now) by the case format that accepts it."""
    document = {"format": MEASURE_FORMAT, "cases": [{"name": Path(path).stem, "config": read_document(path)}]}
    for fmt in registry.case_formats:
        if fmt.accepts(document):
            return list(fmt.read(document, registry))
    raise ConfigError("--measure", f"no installed case format measures {MEASURE_FORMAT} documents (hp plugins lists them)")


def validate_case(case: MeasuredCase, registry: Registry) -> CaseResult:
    """Estimate *case* with the runtime it names and compare stage by stage (what it gives, for ``hp-cases/2``)."""
    if isinstance(case, MeasuredCaseV2):
        result, stages, steps, unavailable = check_case_v2(case, registry)
        return CaseResult(name=case.name, runtime=runtime_label(case.runtime), stages=tuple(StageCheck(*s) for s in stages),
                          estimate=result, steps=tuple(StepCheck(*s) for s in steps), time_unavailable=unavailable,
                          precision_recipe=result.provenance.get("precision_recipe", "bf16"))
    job = case.job or Job(model=case.model, parallel=case.parallel, runtime=case.runtime)
    try:
        result = estimate_job(job, registry)
    except ConfigError as exc:
        raise in_case(exc, case.where, case.has_config) from None
    if len(result.stages) != len(case.stage_peak_bytes):
        raise ConfigError(
            f"{case.where}.measured",
            f"case {case.name}: measured {len(case.stage_peak_bytes)} stage peaks for a layout of {len(result.stages)} stages",
        )
    checks = tuple(
        StageCheck(stage.index, stage.peak_bytes, measured)
        for stage, measured in zip(result.stages, case.stage_peak_bytes)
    )
    steps, unavailable = _check_steps(case, job, registry)
    return CaseResult(name=case.name, runtime=runtime_label(case.runtime), stages=checks, estimate=result, steps=steps,
                      time_unavailable=unavailable, precision_recipe=result.provenance.get("precision_recipe", "bf16"))


def _check_steps(case: MeasuredCase, job: Job, registry: Registry) -> tuple[tuple[StepCheck, ...], str | None]:
    """Each measured step time against the estimate at its global batch (module docstring).

    A step whose batch the layout cannot run is refused with the step's path;
    a case whose steps cannot be priced at all (no device, a runtime without a
    timing profile, a device field the model needs unstated) keeps its memory
    checks and says why.
    """
    if not case.steps:
        return (), None
    if job.hardware is None and case.hardware is not None:
        job = attrs.evolve(job, hardware=registry.hardware_preset(case.hardware, case.hardware_where).spec)
    if job.hardware is None:
        return (), f"{case.hardware_where}: measured step times are priced on the device they ran on; name it (hardware: h100-sxm)"
    parallel = job.parallel
    checks = []
    for i, step in enumerate(case.steps):
        where = f"{case.steps_where}[{i}]"
        batch = step.global_batch_size or step.micro_batches * parallel.micro_batch_size * parallel.dp
        per_step = parallel.micro_batch_size * parallel.dp
        if batch % per_step:
            raise ConfigError(f"{where}.global_batch_size",
                              f"global batch {batch} is not a multiple of micro_batch_size*dp={per_step} on this layout")
        micro_batches = batch // per_step
        if micro_batches != step.micro_batches:
            fix = ("the entry's global_batch_size and micro_batches disagree" if step.global_batch_size is not None
                   else "state the step's global_batch_size")
            raise ConfigError(
                where,
                f"global batch {batch} is {micro_batches} micro-batches per replica on this layout, "
                f"not the {step.micro_batches} measured; {fix}",
            )
        try:
            priced = step_time_job(job, registry, attrs.evolve(parallel, global_batch_size=batch))
        except ConfigError as exc:
            if exc.path.startswith(UNPRICED_STEPS):
                return (), str(in_case(exc, case.where, case.has_config))
            raise ConfigError(where, str(exc)) from None
        checks.append(StepCheck(step.micro_batches, batch, priced.step_seconds, step.seconds))
    return tuple(checks), None
