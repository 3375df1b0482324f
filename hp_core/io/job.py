"""A resolved job: a config file's names turned into specs, ready to estimate.

The command line, ``hp validate`` and embedding code share this resolution:
a preset name, a ``config.json`` path or an inline stack becomes a
:class:`~hp_core.specs.ModelSpec`; the runtime's precision takes the config's
overrides; a hardware name becomes a :class:`~hp_core.specs.HardwareSpec`.
"""

from __future__ import annotations

import attrs

from hp_core.engine.estimate import estimate_run
from hp_core.engine.prepare import PreparedRun, prepare
from hp_core.errors import ConfigError, SpecError, describe
from hp_core.io.convert import ConfigFile, InlineModel, inline_model
from hp_core.registry import Registry, device_families, misspelt_families
from hp_core.types import Runtime
from hp_core.models import load_model_config, model_from_config, model_from_preset
from hp_core.results import Estimate
from hp_core.runtime_options import apply_options, check_precision_fields, rederive_precision_fields
from hp_core.specs import HardwareSpec, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec

__all__ = ["Job", "estimate_job", "prepare_job", "resolve_job", "resolve_model", "step_time_job"]


@attrs.frozen
class Job:
    """Everything one estimate needs, resolved.

    ``runtime`` is a profile's name, or the profile with the run's options
    applied (:func:`hp_core.runtime_options.apply_options`) where it sets any.
    """

    model: ModelSpec
    parallel: ParallelSpec
    runtime: str | Runtime = "generic"
    precision: PrecisionSpec | None = None
    hardware: HardwareSpec | None = None
    recompute: RecomputeSpec | None = None
    census: str = "formulas"
    attention: str | None = None


def resolve_model(config: ConfigFile, registry: Registry, field: str = "$.model") -> ModelSpec:
    """The model a config names: a preset, a Hugging Face ``config.json`` (file or folder), or inline.

    *field* is what an error about the model names (``--model`` where no config file is read).
    """
    if isinstance(config.model, InlineModel):
        model = inline_model(config.model, source="config file")
    elif any(m.name == config.model for m in registry.models):
        model = model_from_preset(config.model, registry)
    else:
        data, where = load_model_config(config.model, field)
        model = model_from_config(data, registry, name=data.get("_name_or_path") or config.model, source=where, where=where)
    if config.num_layers is not None:
        body = registry.kinds_placed("body")
        available = sum(group.count for group in model.layers if group.kind in body)
        if config.num_layers > available:
            raise ConfigError("$.num_layers", f"num_layers={config.num_layers} exceeds the model's {available} layers")
        model = model.with_body_layers(config.num_layers, body)
    return model


def resolve_job(config: ConfigFile, registry: Registry) -> Job:
    """Resolve every name in *config* against *registry*; the runtime's options are applied here, once."""
    runtime = registry.runtime(config.runtime_name)
    if config.runtime_options:
        runtime = apply_options(runtime, config.runtime_options)
    precision = None
    if config.precision:
        check_precision_fields(runtime, config.precision)
        try:
            precision = attrs.evolve(runtime.precision, **config.precision)
        except SpecError as exc:  # a field's validator: its path below $.precision
            raise ConfigError(f"$.precision.{exc.path}", exc.message) from None
        except (TypeError, ValueError) as exc:
            raise ConfigError("$.precision", describe(exc)) from None
        precision = rederive_precision_fields(runtime, config.precision, precision)
    hardware = config.hardware
    if isinstance(hardware, str):
        hardware = registry.hardware_preset(hardware).spec
    elif hardware is not None and hardware.architecture is not None:
        _check_architecture(hardware.architecture, registry)
    return Job(
        model=resolve_model(config, registry),
        parallel=config.parallel,
        runtime=runtime if runtime.option_values else config.runtime_name,
        precision=precision,
        hardware=hardware,
        recompute=config.recompute,
        census=config.census,
        attention=config.attention,
    )


def prepare_job(job: Job, registry: Registry, parallel: ParallelSpec | None = None) -> PreparedRun:
    """The resolved job's run, prepared once (on *parallel* instead of its layout when given)."""
    return prepare(job.model, parallel if parallel is not None else job.parallel, registry=registry, runtime=job.runtime,
                   precision=job.precision, census=job.census, attention=job.attention)


def estimate_job(job: Job, registry: Registry, run: PreparedRun | None = None, reserve_bytes: int | None = None) -> Estimate:
    """The memory estimate of a resolved job (of *run*, its prepared run, when given), with *reserve_bytes*
    kept free beside the peak (the runtime's reserve when ``None``)."""
    run = run if run is not None else prepare_job(job, registry)
    return estimate_run(run, job.recompute, job.hardware, reserve_bytes)


def step_time_job(job: Job, registry: Registry, parallel: ParallelSpec | None = None, run: PreparedRun | None = None):
    """The step time of a resolved job (on *parallel* instead of its layout, or of *run*, when given).

    Raises:
        ConfigError: The job states no hardware, or the step cannot be priced (one line, with the field path).
    """
    from hp_core.engine.timing import time_run

    run = run if run is not None else prepare_job(job, registry, parallel)
    return time_run(run, job.hardware, job.recompute)


def _check_architecture(architecture: str, registry: Registry) -> None:
    """Refuse a stated device's architecture that is a near miss of one a hardware preset or a runtime's timing
    profile names (``hoper`` would take the profiles' ``*`` efficiencies silently); another family (``ada``) is
    taken as stated (:func:`~hp_core.registry.misspelt_families`)."""
    known = device_families(registry.hardware, registry.runtimes)
    for name, near in misspelt_families([architecture], known).items():
        raise ConfigError("$.hardware.architecture", f"{name!r} is no architecture a hardware preset or timing profile "
                          f"names; did you mean {near!r}? (known: {', '.join(sorted(known))})")
