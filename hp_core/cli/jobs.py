"""What the job commands share: the config their flags and config file make, and a plan as a trainer runs it.

``hp estimate``, ``hp recompute`` and ``hp potentials`` read a config file (or
:data:`~hp_core.cli.parser.DEFAULT_CONFIG`) and let the flags override it;
``--export TRAINER`` shows a recompute plan in the trainer's own terms.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import copy
import json
import sys
from typing import Any

from rich.console import Console

from hp_core.cli.parser import DEFAULT_CONFIG, FLAG_DEFAULTS
from hp_core.bounds import short_repr
from hp_core.errors import ConfigError, call_plugin
from hp_core.io.convert import ConfigFile, read_document, structure
from hp_core.registry import Registry
from hp_core.runtime_options import parse_assignments

__all__ = ["config_from_args", "export_of", "export_text", "print_export"]


# The command-line flags that describe the job itself (model, layout, batch): with none of them and
# no config file, ``hp estimate`` runs the demo job (DEFAULT_CONFIG); with any, the flags describe
# the job and what they leave unstated takes FLAG_DEFAULTS, then a config file's own defaults.
_PARALLEL_FLAGS = ("dp", "tp", "pp", "vpp", "cp", "cp_kind", "ep", "etp", "sp", "zero", "reshard_after_forward",
                   "micro_batch_size", "global_batch_size", "seq_len", "schedule", "layers_per_stage")
_JOB_FLAGS = ("model", "num_layers", "devices", *_PARALLEL_FLAGS)


def config_from_args(args: argparse.Namespace, registry: Registry) -> ConfigFile:
    """The config the flags and the config file (if any) state, flags overriding the file field by field.

    The flags are merged into the file's document before it is structured, so
    a file may leave out what the flags give (a file without ``parallel:``
    plus ``--seq-len``) and every error names the field the way the file reads.
    """
    document, devices = _document(args, registry)
    parallel = document.get("parallel", {})
    if isinstance(parallel, dict):
        parallel = dict(parallel)
        for name in _PARALLEL_FLAGS:
            value = getattr(args, name, None)
            if value is not None:
                parallel[name] = list(value) if name == "layers_per_stage" else value
        if getattr(args, "devices", None) is not None:
            parallel["dp"] = _dp_of_devices(args.devices, parallel, "dp" in parallel)
        elif devices is not None and "dp" not in parallel:
            parallel["dp"] = _dp_of_devices(devices, parallel, False)
        document["parallel"] = parallel
    for name in ("model", "num_layers", "census", "attention", "hardware"):
        if getattr(args, name) is not None:
            document[name] = getattr(args, name)
    runtime = document.get("runtime", "generic")
    cli_options = parse_assignments(args.runtime_option)
    if args.runtime is not None or cli_options:
        name = args.runtime if args.runtime is not None else runtime.get("name") if isinstance(runtime, dict) else runtime
        options = {**((runtime.get("options") or {}) if isinstance(runtime, dict) else {}), **cli_options}
        document["runtime"] = {"name": name, "options": options} if options else name
    if args.optimizer is not None:
        precision = document.get("precision") or {}
        document["precision"] = {**precision, "optimizer": args.optimizer} if isinstance(precision, dict) else precision
    if getattr(args, "precision", None) is not None:
        registry.precision_recipe(args.precision, "--precision")
        precision = document.get("precision") or {}
        document["precision"] = {**precision, "recipe": args.precision} if isinstance(precision, dict) else precision
    if getattr(args, "recompute", None) is not None:
        text = args.recompute
        document["recompute"] = text if text in ("none", "full", "selective") else text.split("+")
    return structure(document, ConfigFile, registry)


def _document(args: argparse.Namespace, registry: Registry) -> tuple[dict[str, Any], int | None]:
    """The config file's document (read by an importer with ``--from``) and the device count it states;
    without one, the demo job or, when the flags describe a job, FLAG_DEFAULTS."""
    trainer = getattr(args, "source_format", None)
    if trainer is not None:
        importer = registry.importer(trainer)
        if not args.config:
            raise ConfigError("--from", f"give what to read: hp {args.command} --from {trainer} SOURCE")
        flags = {name: getattr(args, name, None) for name in importer.flags}
        imported = importer.read(args.config, registry=registry, **flags)
        for line in imported.unmapped:
            sys.stderr.write(f"hp {args.command}: warning: {line}\n")
        return copy.deepcopy(dict(imported.document)), imported.devices
    return _plain_document(args), None


def _plain_document(args: argparse.Namespace) -> dict[str, Any]:
    if args.config:
        if not Path(args.config).exists():
            raise ConfigError("config", f"no such config file: {short_repr(str(args.config))} (the argument after the "
                                        "command is read as a config file; a flag such as --sp or --json takes no value)")
        document = read_document(args.config)
        if not isinstance(document, dict):
            raise ConfigError("$", f"{args.config} must hold a mapping at the top level")
        return dict(document)
    if any(getattr(args, name, None) is not None for name in _JOB_FLAGS):
        return copy.deepcopy(FLAG_DEFAULTS)
    return copy.deepcopy(DEFAULT_CONFIG)


def _dp_of_devices(devices: int, parallel: dict[str, Any], dp_stated: bool) -> int:
    """``--devices``: dp is the device count over ``cp * tp * pp`` (checked against a stated dp)."""
    ranks = 1
    for name in ("cp", "tp", "pp"):
        value = parallel.get(name, 1)
        ranks *= value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1
    if devices % ranks:
        raise ConfigError("--devices", f"devices={devices} is not a multiple of cp*tp*pp={ranks}; choose a multiple of {ranks}")
    if dp_stated and parallel["dp"] * ranks != devices:
        raise ConfigError("--devices", f"dp*cp*tp*pp={parallel['dp'] * ranks} differs from devices={devices}; "
                                       "state one of --dp and --devices, or make them agree")
    return devices // ranks


def export_of(trainer: str | None, job, registry: Registry) -> dict[str, Any] | None:
    """The job's recompute plan as *trainer* runs it: ``{"trainer", "runtime", "plan"}``; ``None`` when not asked."""
    if trainer is None:
        return None
    from hp_core.specs import RecomputeSpec

    exporter = registry.exporter(trainer)
    plan = job.recompute if job.recompute is not None else RecomputeSpec()
    text = call_plugin(exporter.name, "exporter", exporter.export, plan, job.model, job.parallel, registry=registry)
    return {"trainer": exporter.name, "runtime": exporter.runtime, "plan": text,
            **precision_export(exporter.name, job, registry)}


def _precision_of(job, registry: Registry) -> tuple[Any, Any]:
    """``(precision, recipe)`` a resolved job is priced under: its precision over its runtime's, as a run resolves
    them (``resolve_runtime``, ``resolve_recipe``)."""
    from hp_core.engine.precision import resolve_recipe
    from hp_core.engine.prepare import resolve_runtime

    _, precision, _ = resolve_runtime(registry, job.runtime, job.precision, job.attention)
    return precision, resolve_recipe(registry, precision)


def precision_export(trainer: str, job, registry: Registry) -> dict[str, Any]:
    """The job's precision recipe as *trainer* selects it (:func:`_precision_export`: ``precision_flags`` and a
    ``precision_note``); ``{}`` where the recipe quantizes nothing."""
    precision, recipe = _precision_of(job, registry)
    return _precision_export(trainer, recipe, precision, registry) if recipe.low_precision else {}


def print_precision_export(exported: dict[str, Any], trainer: str, console: Console) -> None:
    """The recipe's flags for *trainer* (:func:`precision_export`) as the text output prints them; nothing under bf16."""
    if "precision_flags" not in exported:
        return
    flags = exported["precision_flags"]
    if exported.get("precision_note"):
        console.print(f"Note: {exported['precision_note']}", markup=False, highlight=False, soft_wrap=True)
    console.print("Precision recipe flags:" if flags is not None else
                  f"Precision recipe: {trainer} has no flags for it (docs/precision.md lists each recipe's trainer)")
    if flags is not None:
        console.print(flags, markup=False, highlight=False, soft_wrap=True)


def _precision_export(trainer: str, recipe, precision, registry: Registry) -> dict[str, Any]:
    """The trainer's flags that select the recipe (``PrecisionRecipe.flags``; docs/precision.md), ``None`` where it
    states none, and a note naming what the flags do not set that hp priced (``precision_note``, where any)."""
    flags, notes = recipe.flags.get(trainer), []
    base = registry.precision_recipe(recipe.bf16_attention_recipe) if recipe.bf16_attention_recipe else None
    if flags is None and base is not None and base.flags.get(trainer) is not None:
        # FP8 attention has no command-line flag (Megatron-LM: TransformerConfig.fp8_dot_product_attention is among
        # the fields arguments.py generates no flag for, at NVIDIA/Megatron-LM@d98e8a6): the linears' flags, said so.
        flags = base.flags[trainer]
        where = ("Megatron-Core's TransformerConfig.fp8_dot_product_attention" if trainer == "megatron"
                 else "the trainer's own config")
        notes.append(f"{trainer} has no command-line flag for {recipe.name}'s FP8 attention; the flags below are "
                     f"{base.name}'s (set the attention's FP8 in {where})")
    start, end = precision.high_precision_layers_at_start, precision.high_precision_layers_at_end
    if flags is not None and (start or end) and trainer == "megatron":
        # Megatron-LM's layers kept in bf16 (megatron/core/fp8_utils.py is_first_last_bf16_layer at
        # NVIDIA/Megatron-LM@d98e8a6; PrecisionSpec.high_precision_layers_at_start / _at_end).
        flags = (*flags, "--first-last-layers-bf16", "--num-layers-at-start-in-bf16", str(start),
                 "--num-layers-at-end-in-bf16", str(end))
    elif (start or end) and flags is not None:  # another trainer states no flag that keeps layers in bf16
        notes.append(f"{trainer} has no flag keeping the first {start} and last {end} body layers in bf16; the flags "
                     "below quantize every layer")
    if precision.module_formats and flags is not None:
        # Megatron-Core sets a module's own format through a per-module recipe file (--te-precision-config-file,
        # the config's quant_recipe); no flag states one, so the flags below leave every module in the recipe's.
        stated = ", ".join(f"{name}: {fmt}" for name, fmt in precision.module_formats)
        how = (" (Megatron-Core reads them from a per-module recipe file, --te-precision-config-file)"
               if trainer == "megatron" else "")
        notes.append(f"the run gives modules formats of their own ({stated}), which no {trainer} flag states{how}; "
                     "the flags below run every module in the recipe's format")
    found: dict[str, Any] = {"precision_flags": " ".join(flags) if flags is not None else None}
    if notes:
        found["precision_note"] = "; ".join(notes)
    return found


def job_precision(job, registry: Registry) -> dict[str, Any]:
    """The precision a resolved job is priced under, as an answer's provenance records it (the recipe, kept layers
    and module formats: :func:`hp_core.engine.estimate.precision_provenance`)."""
    from hp_core.engine.estimate import precision_provenance

    return precision_provenance(*_precision_of(job, registry))


def precision_label(provenance: dict[str, Any]) -> str:
    """``", precision <recipe>"`` (with its kept layers and module formats) for a title, ``""`` under bf16: the recipe
    an answer was priced under, as its provenance records it (:func:`hp_core.engine.estimate.precision_provenance`)."""
    recipe = provenance.get("precision_recipe", "bf16")
    if recipe == "bf16":
        return ""
    kept = provenance.get("high_precision_layers")
    formats = provenance.get("module_formats")
    return (f", precision {recipe}"
            + (f" (first {kept['at_start']} and last {kept['at_end']} body layers in the compute dtype)" if kept else "")
            + (" (" + ", ".join(f"{name} {fmt}" for name, fmt in formats.items()) + ")" if formats else ""))


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
    print_precision_export(exported, exported["trainer"], console)
