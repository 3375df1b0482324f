"""What the job commands share: the config their flags and config file make, and a plan as a trainer runs it.

``hp estimate``, ``hp recompute`` and ``hp potentials`` read a config file (or
:data:`~hp_core.cli.parser.DEFAULT_CONFIG`) and let the flags override it;
``--export TRAINER`` shows a recompute plan in the trainer's own terms.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import attrs
from rich.console import Console

from hp_core.cli.parser import DEFAULT_CONFIG
from hp_core.errors import ConfigError, describe
from hp_core.io.convert import ConfigFile, RuntimeRef, load_config, structure
from hp_core.registry import Registry
from hp_core.runtime_options import parse_assignments
from hp_core.specs import RecomputeSpec, Setting

__all__ = ["config_from_args", "export_of", "export_text", "print_export"]


def config_from_args(args: argparse.Namespace, registry: Registry) -> ConfigFile:
    base = load_config(args.config, registry) if args.config else structure(DEFAULT_CONFIG, ConfigFile, registry)
    overrides = {
        name: getattr(args, name)
        for name in ("dp", "tp", "pp", "vpp", "cp", "cp_kind", "ep", "etp", "sp", "zero", "micro_batch_size",
                     "global_batch_size", "seq_len", "schedule", "layers_per_stage")
        if getattr(args, name) is not None
    }
    if "layers_per_stage" in overrides:
        overrides["layers_per_stage"] = tuple(overrides["layers_per_stage"])
    try:
        parallel = attrs.evolve(base.parallel, **overrides)
    except (TypeError, ValueError) as exc:
        raise ConfigError("command line", describe(exc)) from None
    changes: dict[str, Any] = {"parallel": parallel}
    if args.model is not None:
        changes["model"] = args.model
    if args.num_layers is not None:
        changes["num_layers"] = args.num_layers
    for name in ("census", "attention", "hardware"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    # The runtime: --runtime over the file's name, --runtime-option over the file's options, name by name.
    runtime = args.runtime if args.runtime is not None else base.runtime_name
    options = {**base.runtime_options, **parse_assignments(args.runtime_option)}
    changes["runtime"] = RuntimeRef(name=runtime, options=options) if options else runtime
    if args.optimizer is not None:
        changes["precision"] = {**(base.precision or {}), "optimizer": args.optimizer}
    if args.recompute is not None:
        text = args.recompute
        value: Any = text if text in ("none", "full", "selective") else text.split("+")
        changes["recompute"] = RecomputeSpec(default=Setting.parse(value))
    return attrs.evolve(base, **changes)


def export_of(trainer: str | None, job, registry: Registry) -> dict[str, Any] | None:
    """The job's recompute plan as *trainer* runs it: ``{"trainer", "runtime", "plan"}``; ``None`` when not asked."""
    if trainer is None:
        return None
    from hp_core.specs import RecomputeSpec

    exporter = registry.exporter(trainer)
    plan = job.recompute if job.recompute is not None else RecomputeSpec()
    text = exporter.export(plan, job.model, job.parallel, registry=registry)
    return {"trainer": exporter.name, "runtime": exporter.runtime, "plan": text}


def export_text(plan: Any) -> str:
    if isinstance(plan, str):
        return plan.rstrip("\n") or "(nothing to set: the trainer recomputes nothing by default)"
    return json.dumps(plan)


def print_export(exported: dict[str, Any], runtime: str, console: Console) -> None:
    note = "" if exported["runtime"] == runtime else (
        f" (priced above as runtime {runtime}; --runtime {exported['runtime']} prices it as {exported['trainer']} runs it)"
    )
    console.print(f"Recompute plan for {exported['trainer']}{note}:")
    console.print(export_text(exported["plan"]), markup=False, highlight=False, soft_wrap=True)
