"""The Python API: pure functions over frozen inputs returning frozen results.

This module is the façade: each function prepares the run once
(:func:`prepare`) and hands it to the engine (:mod:`hp_core.engine`). Code that
asks several questions of one run (memory under several plans, then a time)
can prepare it itself and call the engine's functions on it. Nothing in the
engine imports this module.

Example::

    from hp_core.api import build_registry, estimate, model_from_preset
    from hp_core.specs import ParallelSpec

    registry = build_registry()
    model = model_from_preset("llama3-8b", registry)
    result = estimate(model, ParallelSpec(dp=4, tp=2, seq_len=8192), registry=registry)
    print(result.peak_bytes, [s.peak_bytes for s in result.stages])

Wherever a function takes a spec it also takes a name: a model preset's name or
a ``config.json`` path for ``model``, a hardware preset's name for
``hardware``, a mapping of fields for ``parallel``, a setting (``"full"``,
``["softmax"]``) for ``recompute``. Every error a caller can cause is an
:class:`~hp_core.errors.HPError` carrying the field's path (a spec built with
a bad value raises :class:`~hp_core.errors.SpecError`, one of them); every
result has a JSON form (:func:`to_json`, :func:`from_json`; docs/api.md).
"""

from __future__ import annotations

from os import PathLike
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import attrs

from hp_core.engine.estimate import count_parameters as _count_parameters
from hp_core.engine.estimate import estimate_run
from hp_core.engine.prepare import PreparedRun, layer_context, resolve_setting, with_sublayers
from hp_core.engine.prepare import prepare as _prepare
from hp_core.bounds import MAX_DEVICES, MAX_MEMORY_BYTES, check_int, short_repr
from hp_core.errors import ConfigError, SpecError
from hp_core.jsonforms import from_json, to_json
from hp_core.manager import get_plugin_manager
from hp_core.models import load_model_config, model_from_config, model_from_preset
from hp_core.registry import Registry
from hp_core.types import ATTENTION_IMPLS, CensusSource, Runtime
from hp_core.results import Estimate
from hp_core.runtime_options import apply_options
from hp_core.specs import HardwareSpec, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting

if TYPE_CHECKING:  # the step time, the planner and the search are imported where they are asked for
    from concurrent.futures import Executor

    from hp_core.engine.recompute.plan import RecomputePlan
    from hp_core.engine.search import SearchResult
    from hp_core.engine.timing import StepTime
    from hp_core.specs.timing import TimingProfile

__all__ = [
    "PreparedRun",
    "apply_options",
    "build_registry",
    "count_parameters",
    "estimate",
    "from_json",
    "layer_context",
    "load_model_config",
    "model_from_config",
    "model_from_preset",
    "plan_recompute",
    "prepare",
    "resolve_setting",
    "search",
    "step_time",
    "to_json",
    "with_sublayers",
]


def _model(model: Any, registry: Registry) -> ModelSpec:
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, (str, PathLike)):
        if any(preset.name == str(model) for preset in registry.models):
            return model_from_preset(str(model), registry, path="model")
        data, where = load_model_config(model, "model")
        return model_from_config(data, registry, name=data.get("_name_or_path") or str(model), source=where, where=where)
    raise ConfigError("model", f"expected a ModelSpec, a model preset's name or a config.json path, got {type(model).__name__}")


def _hardware(hardware: Any, registry: Registry, required: bool = False) -> HardwareSpec | None:
    if isinstance(hardware, HardwareSpec) or (hardware is None and not required):
        return hardware
    if isinstance(hardware, str):
        return registry.hardware_preset(hardware, "hardware").spec
    raise ConfigError("hardware", f"expected a HardwareSpec or a hardware preset's name, got {type(hardware).__name__}")


def _parallel(parallel: Any) -> ParallelSpec:
    if isinstance(parallel, ParallelSpec):
        return parallel
    if isinstance(parallel, Mapping):
        unknown = sorted(set(parallel) - {f.name for f in attrs.fields(ParallelSpec)})
        if unknown:
            raise ConfigError(f"parallel.{unknown[0]}", "unknown field of ParallelSpec")
        try:
            return ParallelSpec(**parallel)
        except SpecError as exc:
            raise ConfigError(f"parallel.{exc.path}", exc.message) from None
        except TypeError as exc:  # a required field missing
            raise ConfigError("parallel", str(exc)) from None
    raise ConfigError("parallel", f"expected a ParallelSpec or a mapping of its fields, got {type(parallel).__name__}")


def _recompute(recompute: Any) -> RecomputeSpec | None:
    if recompute is None or isinstance(recompute, RecomputeSpec):
        return recompute
    try:
        return RecomputeSpec(default=Setting.parse(recompute))
    except SpecError as exc:
        raise ConfigError("recompute", exc.message) from None


def _precision(precision: Any) -> PrecisionSpec | None:
    if precision is None or isinstance(precision, PrecisionSpec):
        return precision
    raise ConfigError("precision", f"expected a PrecisionSpec, got {type(precision).__name__}")


def _registry(registry: Any) -> Registry:
    if not isinstance(registry, Registry):
        raise ConfigError("registry", f"expected a Registry (build_registry()), got {type(registry).__name__}")
    return registry


def prepare(model: ModelSpec | str, parallel: ParallelSpec | Mapping[str, Any], *, registry: Registry, **options: Any) -> PreparedRun:
    """:func:`hp_core.engine.prepare.prepare`, with names accepted for the model and a mapping for the layout.

    Raises:
        ConfigError: A bad argument, named (``attention``, ``census``, ``runtime``, a field of ``parallel``).
    """
    registry = _registry(registry)
    if "precision" in options:
        options["precision"] = _precision(options["precision"])
    attention = options.get("attention")
    if attention is not None and attention not in ATTENTION_IMPLS:
        raise ConfigError("attention", f"expected one of {', '.join(ATTENTION_IMPLS)} or None, got {short_repr(attention)}")
    census = options.get("census", "formulas")
    if not isinstance(census, (str, CensusSource)):
        raise ConfigError("census", f"expected a census source's name or a census file's path, got {type(census).__name__}")
    runtime = options.get("runtime", "generic")
    if not isinstance(runtime, (str, Runtime)):
        raise ConfigError("runtime", f"expected a runtime's name, got {type(runtime).__name__}")
    return _prepare(_model(model, registry), _parallel(parallel), registry=registry, **options)


def count_parameters(model: ModelSpec | str, registry: Registry):
    """The parameter count of *model* (a spec, a preset's name or a ``config.json`` path), as Hugging Face counts it."""
    registry = _registry(registry)
    return _count_parameters(_model(model, registry), registry)


def build_registry(
    plugins: Iterable[object] = (), *, entry_points: bool = False, blocked: Iterable[str] = (), use_env: bool = True,
    broken_ok: bool = False,
) -> Registry:
    """A frozen registry of the built-in plugins plus *plugins* (and entry points on request).

    Raises:
        PluginError: A plugin failed to import or to register, naming it and how to
            block it; with *broken_ok*, such plugins are left out and listed in
            :attr:`Registry.broken` instead.
    """
    manager = get_plugin_manager(plugins, entry_points=entry_points, blocked=blocked, use_env=use_env)
    return Registry.from_manager(manager, broken_ok=broken_ok)


def estimate(
    model: ModelSpec | str,
    parallel: ParallelSpec | Mapping[str, Any],
    *,
    registry: Registry,
    runtime: str | Runtime = "generic",
    precision: PrecisionSpec | None = None,
    hardware: HardwareSpec | str | None = None,
    recompute: RecomputeSpec | str | list | None = None,
    census: str = "formulas",
    attention: str | None = None,
    reserve_bytes: int | None = None,
) -> Estimate:
    """Per-stage peak memory of one rank of every pipeline stage.

    Args:
        model: The layer stack.
        parallel: The layout.
        registry: Layer kinds, runtimes and census sources to use.
        runtime: The runtime profile's name, or the profile with per-run options
            applied (:func:`apply_options`); it supplies the defaults below.
        precision: Byte widths; the runtime's when ``None``.
        hardware: The device, for ``fits``; ``None`` leaves ``fits`` unknown.
        recompute: Per-layer recompute settings; nothing recomputed when ``None``.
        census: The census source's name (or a census file's path).
        attention: ``"flash"`` or ``"eager"``; the runtime's when ``None``.
        reserve_bytes: Memory kept free beside the peak for ``fits``; the
            runtime's ``reserve_bytes`` (the CUDA context) when ``None``.

    Raises:
        ConfigError: An invalid layout or name (one line, with the field path).
        PluginError: A plugin's evaluator failed.
    """
    run = prepare(model, parallel, registry=registry, runtime=runtime, precision=precision, census=census, attention=attention)
    return estimate_run(run, _recompute(recompute), _hardware(hardware, registry), reserve_bytes)


def step_time(
    model: ModelSpec | str,
    parallel: ParallelSpec | Mapping[str, Any],
    *,
    registry: Registry,
    hardware: HardwareSpec | str | None,
    runtime: str | Runtime = "generic",
    profile: TimingProfile | None = None,
    precision: PrecisionSpec | None = None,
    recompute: RecomputeSpec | str | list | None = None,
    census: str = "formulas",
    attention: str | None = None,
) -> StepTime:
    """The time of one training step of *model* on *parallel*, as the runtime's trainer runs it.

    Args:
        model: The layer stack.
        parallel: The layout (``global_batch_size`` sets the micro-batches per step).
        registry: Layer kinds and runtimes.
        hardware: The device (a step time needs one).
        runtime: The runtime profile's name; it supplies precision, attention,
            ZeRO level, traits, implicit recompute and its timing profile.
        profile: A timing profile to use instead of the runtime's.
        precision: Byte widths; the runtime's when ``None``.
        recompute: Per-layer recompute settings; nothing recomputed when ``None``.
        census: The census source's name (or a census file's path): recompute
            re-runs what the census measured, as the memory estimate keeps it.
        attention: ``"flash"`` or ``"eager"``; the runtime's when ``None``.

    Raises:
        ConfigError: No hardware, a runtime without a timing profile, a
            hardware field the step needs left unstated, or an invalid layout
            (one line, with the field path).
        PluginError: A layer kind's evaluator failed.
    """
    from hp_core.engine.timing import time_run

    run = prepare(model, parallel, registry=registry, runtime=runtime, precision=precision, census=census, attention=attention)
    return time_run(run, _hardware(hardware, registry), _recompute(recompute), profile)


def plan_recompute(
    model: ModelSpec | str,
    parallel: ParallelSpec | Mapping[str, Any],
    *,
    registry: Registry,
    hardware: HardwareSpec | str,
    runtime: str | Runtime = "generic",
    reserve_bytes: int = 0,
    precision: PrecisionSpec | None = None,
    census: str = "formulas",
    attention: str | None = None,
    unrestricted: bool = False,
    offload: Iterable[float] = (),
) -> RecomputePlan:
    """Per stage, the fastest recompute settings whose every peak point fits ``hardware.memory_bytes - reserve_bytes``.

    Exact (equal to brute force) and fast: see :mod:`hp_core.engine.recompute.solver`
    and docs/recompute.md. Only settings the runtime's trainer executes are
    planned, unless *unrestricted* (then both plans are reported); *offload*
    lists the offload shares a setting may add.

    Raises:
        ConfigError: An invalid layout or name, a runtime without a timing
            profile, a reserve not below the device memory, or offload on a
            device that states no host link bandwidth.
    """
    from hp_core.engine.recompute.plan import plan_run

    check_int(reserve_bytes, "reserve_bytes", low=0, high=MAX_MEMORY_BYTES, what="MAX_MEMORY_BYTES")
    offload = tuple(offload)
    for i, share in enumerate(offload):
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise ConfigError(f"offload[{i}]", f"an offload share lies in (0, 1], got {short_repr(share)}")

    run = prepare(model, parallel, registry=registry, runtime=runtime, precision=precision, census=census, attention=attention)
    return plan_run(run, _hardware(hardware, registry), reserve_bytes=reserve_bytes, unrestricted=unrestricted,
                    offload=offload)


def search(
    model: ModelSpec | str,
    *,
    registry: Registry,
    devices: int,
    hardware: HardwareSpec | str,
    global_batch_size: int,
    seq_len: int,
    runtime: str | Runtime = "generic",
    fixed: Mapping[str, int] | None = None,
    top: int = 10,
    executor: Executor | None = None,
    precision: PrecisionSpec | None = None,
    census: str = "formulas",
    reserve_bytes: int = 0,
    zero: Iterable[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
    schedules: Iterable[str] | None = None,
) -> SearchResult:
    """Every parallel layout of a device count, recompute planned and ranked by step time.

    See :func:`hp_core.engine.search.search` for the arguments and docs/search.md.

    Raises:
        ConfigError: An unknown fixed name, a non-positive count, or a runtime
            without a timing profile.
    """
    from hp_core.engine.search import search as run_search

    registry = _registry(registry)
    for name, value in (fixed or {}).items():
        low, high = (0, 3) if name == "zero" else (1, MAX_DEVICES)
        check_int(value, f"fixed.{name}", low=low, high=high)
    if zero is not None:
        zero = tuple(zero)
        for level in zero:
            check_int(level, "zero", low=0, high=3)
    check_int(reserve_bytes, "reserve_bytes", low=0, high=MAX_MEMORY_BYTES, what="MAX_MEMORY_BYTES")

    return run_search(_model(model, registry), registry=registry, devices=devices, hardware=_hardware(hardware, registry),
                   global_batch_size=global_batch_size, seq_len=seq_len, runtime=runtime, fixed=fixed or {}, top=top,
                   executor=executor, precision=_precision(precision),
                   census=census, reserve_bytes=reserve_bytes, zero=zero, progress=progress,
                   schedules=schedules)
