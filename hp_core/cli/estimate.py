"""``hp estimate``: per-stage peak memory of one layout, the step time beside it, the plan as a trainer runs it."""

from __future__ import annotations

import argparse
import json

import attrs
from rich.console import Console

from hp_core.cli.jobs import config_from_args, export_of, print_export
from hp_core.errors import ConfigError
from hp_core.io.job import estimate_job, prepare_job, resolve_job, step_time_job
from hp_core.io.report import (communication_table, compute_dtype_kinds_text, estimate_table, estimate_to_json, gib,
                               kinds_table, time_summary, time_table, time_to_json)
from hp_core.registry import Registry
from hp_core.runtime_options import option_summary, runtime_name
from hp_core.specs import HardwareSpec

__all__ = ["estimate_command"]


def estimate_command(args: argparse.Namespace, registry: Registry, console: Console) -> int:
    config = config_from_args(args, registry)
    job = resolve_job(config, registry)
    priced = job.hardware is not None  # a device stated only by --memory has no peaks to price a step with
    if args.memory is not None:
        hardware = job.hardware or HardwareSpec(name="device", memory_bytes=args.memory)
        job = attrs.evolve(job, hardware=attrs.evolve(hardware, memory_bytes=args.memory))
    run = prepare_job(job, registry)
    result = estimate_job(job, registry, run, reserve_bytes=args.reserve)
    exported = export_of(args.export, job, registry)
    step, unavailable = _step_time_of(job, registry, run) if priced else (None, None)
    if args.json:
        doc = estimate_to_json(result)
        doc["time"] = time_to_json(step) if step is not None else None
        if unavailable is not None:
            doc["time_unavailable"] = unavailable
        if exported is not None:
            doc["export"] = exported
        print(json.dumps(doc, indent=2, sort_keys=False))
        return 0
    console.print(estimate_table(result))
    console.print(kinds_table(result))
    params = result.parameters
    console.print(
        f"Parameters: {params.total:,} in all ("
        + ", ".join(f"{kind} {count:,}" for kind, count in params.by_kind.items())
        + ")"
    )
    line = f"Peak: {gib(result.peak_bytes)} GiB on stage {max(result.stages, key=lambda s: s.peak_bytes).index}"
    line += f" + reserve {gib(result.reserve_bytes)} GiB"
    if result.device_memory_bytes is not None:
        verdict = "fits" if result.fits else "does NOT fit"
        line += f"; device {gib(result.device_memory_bytes)} GiB: {verdict}"
    console.print(line)
    if "recompute_assumptions" in result.provenance:  # a setting priced by a stated assumption: say so
        console.print(f"Note (recompute): {result.provenance['recompute_assumptions']}", markup=False, highlight=False,
                      soft_wrap=True)
    if step is not None:
        console.print(time_table(step))
        if any(total for s in step.stages for _, total, _ in s.communication_by_group):
            console.print(communication_table(step))
        console.print(time_summary(step))
        if "alternate_matmul_default" in step.provenance:  # absent is not zero: say what was priced instead
            console.print(f"Note (op-level SAC): {step.provenance['alternate_matmul_default']}")
    elif unavailable is not None:
        console.print(f"Step time: not estimated ({unavailable})")
    prov = result.provenance
    runtime = prov["runtime"] + (f" ({option_summary(job.runtime)})" if prov["runtime_options"] else "")
    recipe = prov.get("precision_recipe", "bf16")
    precision = f", precision {recipe}" if recipe != "bf16" else ""
    console.print(f"Provenance: runtime {runtime}, census {prov['census']}, attention {prov['attention']}{precision}, "
                  f"model {prov['model_source']}")
    if step is None and compute_dtype_kinds_text(prov, recipe):  # with a step time its summary says it
        console.print(compute_dtype_kinds_text(prov, recipe), markup=False, highlight=False)
    if exported is not None:
        print_export(exported, runtime_name(job.runtime), console)
    return 0


def _step_time_of(job, registry: Registry, run=None):
    """``(StepTime, None)``, or ``(None, why not)`` when the hardware or the runtime cannot price one."""
    if job.hardware is None:
        return None, None
    try:
        step = step_time_job(job, registry, run=run)
    except ConfigError as exc:
        return None, str(exc)
    return step, None
