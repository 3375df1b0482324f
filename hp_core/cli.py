"""The ``hp`` command line.

Every user error prints one line (``hp: error: <path>: <what to do>``) to
standard error and exits with status 2; no traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any, Sequence

import attrs
from rich.console import Console
from rich.table import Table

from hp_core import __version__
from hp_core.api import build_registry, count_parameters, model_from_preset
from hp_core.io.convert import ConfigFile, load_config, structure
from hp_core.errors import ConfigError, HPError, describe
from hp_core.io.job import estimate_job, prepare_job, resolve_job, step_time_job
from hp_core.manager import BLOCK_ENV
from hp_core.registry import Registry
from hp_core.io.report import estimate_table, estimate_to_json, gib, kinds_table, time_summary, time_table, time_to_json, validation_step_table, validation_table
from hp_core.specs import HardwareSpec, RecomputeSpec, Setting

__all__ = ["DEFAULT_CONFIG", "build_parser", "main"]

# What ``hp estimate`` runs with no config file: Llama-3-8B on 8 devices
# (tensor parallel 2 with sequence parallelism, data parallel 4), 8k tokens.
DEFAULT_CONFIG: dict[str, Any] = {
    "model": "llama3-8b",
    "parallel": {"dp": 4, "tp": 2, "sp": True, "seq_len": 8192, "micro_batch_size": 1, "global_batch_size": 64},
    "hardware": "h100-sxm",
}


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(2)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _memory(text: str) -> int:
    """A size with an optional unit: ``80GiB``, ``80GB``, ``81920MiB``, ``85899345920``."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"expected a size such as 80GiB, 80GB or 81920MiB, got {text!r}")
    value = round(float(match.group(1)) * _UNITS[unit])
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive size, got {text!r}")
    return value


def _counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated layer counts, got {text!r}") from None
    if any(c < 0 for c in counts):
        raise argparse.ArgumentTypeError("layer counts must be non-negative")
    return counts


def _add_job_arguments(parser: argparse.ArgumentParser, hardware_help: str) -> None:
    """The config file and the model, layout, runtime and hardware flags every job command takes."""
    parser.add_argument("config", nargs="?", help="a YAML, JSON or TOML config file (see docs/config.md)")
    parser.add_argument("--model", help="a preset name (see 'hp models') or a Hugging Face config.json / folder")
    parser.add_argument("--num-layers", type=_positive, help="keep the first N body layers, as truncated benchmark runs do")
    for name, what in (("dp", "data"), ("tp", "tensor"), ("pp", "pipeline"), ("vpp", "virtual pipeline (chunks per stage)"),
                       ("cp", "context"), ("ep", "expert"), ("etp", "expert tensor")):
        parser.add_argument(f"--{name}", type=_positive, help=f"{what}-parallel degree")
    parser.add_argument("--cp-kind", choices=("p2p", "a2a"), help="context-parallel exchange: ring (p2p, default) or all-to-all")
    parser.add_argument("--sp", action=argparse.BooleanOptionalAction, default=None, help="sequence parallelism over the TP group")
    parser.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="sharding level over DP*CP (default: the runtime's)")
    parser.add_argument("--micro-batch-size", type=_positive, help="sequences per micro-batch")
    parser.add_argument("--global-batch-size", type=_positive,
                        help="default: micro-batch size * dp * pp (2 * pp interleaved): the fewest at which every stage "
                             "holds its full in-flight count")
    parser.add_argument("--seq-len", type=_positive, help="tokens per sequence")
    parser.add_argument("--schedule", choices=("1f1b", "interleaved_1f1b"), help="pipeline schedule (default: from --vpp)")
    parser.add_argument("--layers-per-stage", type=_counts, metavar="N,N,...", help="body layers per pipeline chunk, chunk order")
    parser.add_argument("--runtime", help="runtime profile (see 'hp plugins'); default generic")
    parser.add_argument("--census", help="census source (see 'hp plugins') or a census file (.yaml/.json, see docs/census.md); "
                                         "default formulas")
    parser.add_argument("--attention", choices=("flash", "eager"), help="attention implementation (default: the runtime's)")
    parser.add_argument("--hardware", help=hardware_help)


def build_parser() -> argparse.ArgumentParser:
    """The ``hp`` parser (the CLI reference in docs/cli.md is checked against it)."""
    parser = _Parser(
        prog="hp",
        description="Per-stage memory, step time, recompute plans and layout search for N-D parallel LLM training, before launch.",
    )
    parser.add_argument("--version", action="version", version=f"hp-planner {__version__}")
    parser.add_argument(
        "--block-plugin", action="append", default=[], metavar="NAME",
        help=f"do not load the plugin NAME (repeatable; also the comma-separated {BLOCK_ENV} variable)",
    )
    parser.add_argument("--no-entry-points", action="store_true", help="do not load third-party plugins of the 'hp' entry-point group")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")

    est = sub.add_parser("estimate", help="per-stage peak memory of a model on a parallel layout",
                         description="Per-stage peak memory of one rank of every pipeline stage. Flags override the config file; "
                                     "with neither, Llama-3-8B on 8 devices (dp=4 tp=2 sp, seq 8192) on an H100.")
    _add_job_arguments(est, "hardware preset (see 'hp plugins')")
    est.add_argument("--memory", type=_memory, metavar="SIZE", help="device memory, overriding the hardware's (80GiB, 80GB, 81920MiB or bytes)")
    est.add_argument("--recompute", help="every body layer's setting: none, full, selective or switches joined by '+'")
    est.add_argument("--json", action="store_true", help="print the stable JSON document instead of the table")
    est.add_argument("--export", metavar="TRAINER", help="also write the recompute plan as TRAINER runs it: megatron, "
                                                         "hyperparallel, torchtitan (see docs/trainer_plans.md)")

    _add_potentials_parser(sub)
    _add_recompute_parser(sub)
    _add_search_parser(sub)

    plugins = sub.add_parser("plugins", help="list plugins, layer kinds, census sources, runtimes and hardware",
                             description="Plugins and what each provides, with the distribution and version.")
    plugins.add_argument("--json", action="store_true", help="print JSON")

    validate = sub.add_parser(
        "validate", help="compare estimates with measured runs",
        description="Estimate every measured run of a cases file with the runtime it names and print estimated and "
                    "measured peak per stage, and estimated and measured step time where the case states them, with "
                    "the signed error (see docs/validate.md for the format; megatron_measured.json is read as published).",
    )
    validate.add_argument("cases", help="a cases file (format hp-cases/1, YAML/JSON/TOML) or megatron_measured.json")
    validate.add_argument("--json", action="store_true", help="print JSON")

    census = sub.add_parser(
        "census", help="measure (or compute) what each layer kind keeps per token",
        description="Per layer kind of a model, the bytes per token it keeps between forward and backward (saved, and "
                    "saved_tp: the part TP splits) and its backward's peak beyond that (working, working_tp), beside "
                    "what the formulas state. --out writes a census file that 'hp estimate --census FILE' uses "
                    "(see docs/census.md).",
    )
    census.add_argument("--model", required=True, help="a preset name (see 'hp models') or a Hugging Face config.json / folder")
    census.add_argument("--source", default="torch", help="torch (measure transformers' layers; extra 'census'), formulas, "
                                                          "or another census source; default torch")
    census.add_argument("--seq-len", type=_positive, default=4096, help="tokens per sequence (default 4096)")
    census.add_argument("--attn", choices=("eager", "sdpa"), default="eager", help="attention implementation (default eager)")
    census.add_argument("--tp", type=_positive, default=2, help="measure at TP 1 and at this degree to split saved "
                                                               "from saved_tp (default 2; 1: no split)")
    census.add_argument("--out", metavar="FILE", help="write the records as a census file (.yaml/.yml/.json)")
    census.add_argument("--json", action="store_true", help="print JSON")

    models = sub.add_parser("models", help="list model presets", description="Model presets shipped as data.")
    models.add_argument("--json", action="store_true", help="print JSON")
    return parser


# ----------------------------------------------------------------------------- estimate


def _config_from_args(args: argparse.Namespace, registry: Registry) -> ConfigFile:
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
    for name in ("runtime", "census", "attention", "hardware"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    if args.recompute is not None:
        text = args.recompute
        value: Any = text if text in ("none", "full", "selective") else text.split("+")
        changes["recompute"] = RecomputeSpec(default=Setting.parse(value))
    return attrs.evolve(base, **changes)


def _run_estimate(args: argparse.Namespace, registry: Registry, console: Console) -> int:
    config = _config_from_args(args, registry)
    job = resolve_job(config, registry)
    priced = job.hardware is not None  # a device stated only by --memory has no peaks to price a step with
    if args.memory is not None:
        hardware = job.hardware or HardwareSpec(name="device", memory_bytes=args.memory)
        job = attrs.evolve(job, hardware=attrs.evolve(hardware, memory_bytes=args.memory))
    run = prepare_job(job, registry)
    result = estimate_job(job, registry, run)
    exported = _export_of(args.export, job, registry)
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
    if result.device_memory_bytes is not None:
        verdict = "fits" if result.fits else "does NOT fit"
        line += f"; device {gib(result.device_memory_bytes)} GiB: {verdict}"
    console.print(line)
    if step is not None:
        console.print(time_table(step))
        console.print(time_summary(step))
    elif unavailable is not None:
        console.print(f"Step time: not estimated ({unavailable})")
    prov = result.provenance
    console.print(f"Provenance: runtime {prov['runtime']}, census {prov['census']}, attention {prov['attention']}, model {prov['model_source']}")
    if exported is not None:
        _print_export(exported, job.runtime, console)
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


# ----------------------------------------------------------------------------- listings


def _run_plugins(args: argparse.Namespace, registry: Registry, console: Console) -> int:
    sections = (
        ("layer kinds", "hp_layer_kinds", registry.layer_kinds, lambda k: f"{k.placement}; {k.description}"),
        ("census sources", "hp_census_sources", registry.census_sources, lambda c: c.description),
        ("runtimes", "hp_runtimes", registry.runtimes, lambda r: r.description),
        ("hardware", "hp_hardware", registry.hardware, lambda h: f"{h.spec.name}, {gib(h.spec.memory_bytes)} GiB"),
        ("models", "hp_models", registry.models, lambda m: m.description),
        ("exporters", "hp_exporters", registry.exporters, lambda e: f"runtime {e.runtime}; {e.description}"),
    )
    if args.json:
        doc: dict[str, Any] = {
            "plugins": [{"name": p.plugin, "distribution": p.distribution, "version": p.version} for p in registry.plugins]
        }
        for title, hook, items, summary in sections:
            doc[title.replace(" ", "_")] = [
                {
                    "name": item.name,
                    "description": summary(item),
                    "plugin": registry.provider(hook, item.name).plugin,
                    "distribution": registry.provider(hook, item.name).distribution,
                    "version": registry.provider(hook, item.name).version,
                }
                for item in items
            ]
        print(json.dumps(doc, indent=2))
        return 0
    table = Table(title="Plugins", title_justify="left")
    for column in ("Plugin", "Distribution", "Version"):
        table.add_column(column)
    for p in registry.plugins:
        table.add_row(p.plugin, p.distribution, p.version)
    console.print(table)
    for title, hook, items, summary in sections:
        table = Table(title=title.capitalize(), title_justify="left")
        for column in ("Name", "Description", "Plugin", "Distribution"):
            table.add_column(column)
        for item in items:
            who = registry.provider(hook, item.name)
            table.add_row(item.name, summary(item), who.plugin, f"{who.distribution} {who.version}".strip())
        console.print(table)
    return 0


def _model_row(preset, registry: Registry) -> dict[str, Any]:
    model = model_from_preset(preset.name, registry)
    body = registry.kinds_placed("body")
    return {
        "name": preset.name,
        "description": preset.description,
        "model_type": preset.hf_config.get("model_type"),
        "layers": sum(group.count for group in model.layers if group.kind in body),
        "parameters": count_parameters(model, registry).total,
        "provenance": preset.provenance,
    }


def _run_models(args: argparse.Namespace, registry: Registry, console: Console) -> int:
    rows = [_model_row(preset, registry) for preset in registry.models]
    if args.json:
        print(json.dumps({"models": rows}, indent=2))
        return 0
    table = Table(title="Model presets", title_justify="left")
    for column in ("Name", "Type", "Layers", "Parameters", "Description"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["name"], str(row["model_type"]), str(row["layers"]), f"{row['parameters']:,}", row["description"])
    console.print(table)
    return 0


def _run_validate(args: argparse.Namespace, registry: Registry, console: Console) -> int:
    from hp_core.io.validate import load_cases, validate_case

    results = [validate_case(case, registry) for case in load_cases(args.cases, registry)]
    if args.json:
        doc = {
            "cases": [
                {
                    "name": result.name,
                    "runtime": result.runtime,
                    "stages": [
                        {"index": check.stage, "estimated_peak_bytes": check.estimated_bytes,
                         "measured_peak_bytes": check.measured_bytes, "error": check.error}
                        for check in result.stages
                    ],
                    "steps": [
                        {"micro_batches": check.micro_batches, "global_batch_size": check.global_batch_size,
                         "estimated_seconds": check.estimated_seconds, "measured_seconds": check.measured_seconds,
                         "error": check.error}
                        for check in result.steps
                    ],
                    "time_unavailable": result.time_unavailable,
                }
                for result in results
            ]
        }
        print(json.dumps(doc, indent=2))
        return 0
    console.print(validation_table(results))
    if any(result.steps for result in results):
        console.print(validation_step_table(results))
    for result in results:
        if result.time_unavailable is not None:
            console.print(f"{result.name}: step times not estimated ({result.time_unavailable})")
    return 0


def _run_census(args: argparse.Namespace, registry: Registry, console: Console) -> int:
    from hp_core.engine.census import run_census
    from hp_core.io.census_report import census_table, census_to_json

    if args.out is not None and not args.out.lower().endswith((".yaml", ".yml", ".json")):
        raise ConfigError("--out", f"a census file ends in .yaml, .yml or .json, got {args.out}")
    run = run_census(registry, args.model, args.source, args.seq_len, args.attn, args.tp)
    if args.out is not None:
        from hp_core.engine.census import FILE_SOURCE

        writer = registry.census_source(FILE_SOURCE, "--out").write
        if writer is None:
            raise ConfigError("--out", f"the {FILE_SOURCE!r} census source states no writer, so a census file cannot be written")
        writer(args.out, run.records, run.model)
    if args.json:
        print(json.dumps(census_to_json(run), indent=2))
        return 0
    console.print(census_table(run))
    if args.out is not None:
        console.print(f"Wrote {args.out}: use it with 'hp estimate --census {args.out}'")
    return 0


# ----------------------------------------------------------------------------- trainer plans and potentials


def _add_potentials_parser(sub: Any) -> None:
    """``hp potentials``: the model and layout flags of ``hp estimate``, then the sequence's own."""
    pot = sub.add_parser(
        "potentials", help="the plans that each recompute one more layer fully, fastest first",
        description="At the layout's fixed degrees, from the starting plan (--recompute or the config's; nothing "
                    "recomputed by default), fully recompute one more body layer per step, each time the one the cost "
                    "model's step time rises least for (ties: lower peak). Prints peak memory and step time per step; "
                    "writes a CSV and a PNG plot on request (see docs/recompute_potentials.md).",
    )
    _add_job_arguments(pot, "hardware preset the step time is priced on (see 'hp plugins')")
    pot.add_argument("--recompute", help="the starting plan for every body layer: none, full, selective or switches joined by '+'")
    pot.add_argument("--steps", type=int, metavar="N", help="at most N further layers (default: until every layer is full)")
    pot.add_argument("--csv", metavar="FILE", help="write the sequence as CSV (columns: docs/recompute_potentials.md)")
    pot.add_argument("--plot", metavar="FILE.png", help="plot peak memory against step time (extra 'plots': matplotlib)")
    pot.add_argument("--export", metavar="TRAINER", help="show each plan as TRAINER runs it: megatron, hyperparallel, torchtitan")
    pot.add_argument("--json", action="store_true", help="print JSON instead of the table")


def _export_of(trainer: str | None, job, registry: Registry) -> dict[str, Any] | None:
    """The job's recompute plan as *trainer* runs it: ``{"trainer", "runtime", "plan"}``; ``None`` when not asked."""
    if trainer is None:
        return None
    from hp_core.specs import RecomputeSpec

    exporter = registry.exporter(trainer)
    plan = job.recompute if job.recompute is not None else RecomputeSpec()
    text = exporter.export(plan, job.model, job.parallel, registry=registry)
    return {"trainer": exporter.name, "runtime": exporter.runtime, "plan": text}


def _export_text(plan: Any) -> str:
    if isinstance(plan, str):
        return plan.rstrip("\n") or "(nothing to set: the trainer recomputes nothing by default)"
    return json.dumps(plan)


def _print_export(exported: dict[str, Any], runtime: str, console: Console) -> None:
    note = "" if exported["runtime"] == runtime else (
        f" (priced above as runtime {runtime}; --runtime {exported['runtime']} prices it as {exported['trainer']} runs it)"
    )
    console.print(f"Recompute plan for {exported['trainer']}{note}:")
    console.print(_export_text(exported["plan"]), markup=False, highlight=False, soft_wrap=True)


def _run_potentials(args: argparse.Namespace, registry: Registry, console: Console) -> int:
    from rich.markup import escape

    from hp_core.errors import PlanNotExecutable
    from hp_core.engine.recompute.layout import compact, describe_plan, plan_layout, setting_value, settings_of
    from hp_core.engine.recompute.potential import recompute_potentials
    from hp_core.io.potentials_output import plot_potentials, potential_rows, write_potentials_csv

    if args.steps is not None and args.steps < 0:
        raise ConfigError("--steps", f"expected a non-negative number of steps, got {args.steps}")
    if args.plot is not None and not args.plot.lower().endswith(".png"):
        raise ConfigError("--plot", f"the plot is a PNG file ending in .png, got {args.plot}")
    exporter = registry.exporter(args.export) if args.export is not None else None
    config = _config_from_args(args, registry)
    job = resolve_job(config, registry)
    if job.hardware is None:
        raise ConfigError("--hardware", "potentials are ranked by step time, which needs a device: name a hardware preset (see 'hp plugins')")
    sequence = recompute_potentials(
        job.model, job.parallel, registry=registry, hardware=job.hardware, runtime=job.runtime,
        precision=job.precision, attention=job.attention, census=job.census, start=job.recompute, steps=args.steps,
    )
    kinds = [kind.name for kind in plan_layout(job.model, job.parallel, registry).kinds]

    exports: list[tuple[Any, str | None]] = []
    for step in sequence.steps:
        if exporter is None:
            exports.append((None, None))
            continue
        try:
            exports.append((exporter.export(step.plan, job.model, job.parallel, registry=registry), None))
        except PlanNotExecutable as exc:
            exports.append((None, exc.message))
    if args.csv is not None:
        write_potentials_csv([sequence], kinds, args.csv)
    if args.plot is not None:
        plot_potentials([sequence], args.plot, title=f"{job.model.name}: recompute potentials ({job.runtime})")
    if args.json:
        rows = list(potential_rows(sequence, kinds))
        doc: dict[str, Any] = {"model": job.model.name, "runtime": job.runtime, "degrees": dict(sequence.degrees), "steps": []}
        for step, row, (plan, refused) in zip(sequence.steps, rows, exports):
            entry = {
                "step": step.step, "changed_layer": step.changed_layer, "full_layers": step.full_layers,
                "step_seconds": step.step_seconds, "peak_bytes": step.peak_bytes,
                "stage_peak_bytes": list(step.stage_peak_bytes), "stage_savings_bytes": list(step.stage_savings_bytes),
                "recompute_mode": setting_value(compact(settings_of(step.plan, len(kinds))).default),
                "recompute_layers": json.loads(row["recompute_layers"]),
                "plan_scope": row["plan_scope"],
            }
            if exporter is not None:
                entry["export"] = {"trainer": exporter.name, "plan": plan, "refused": refused}
            doc["steps"].append(entry)
        print(json.dumps(doc, indent=2))
        return 0
    table = Table(title=f"Recompute potentials: {job.model.name}, runtime {job.runtime}, "
                        + " ".join(f"{k}={v}" for k, v in sequence.degrees.items()), title_justify="left")
    for column in ("Step", "Full layer", "Full", "Peak GiB", "Saved GiB", "Step s", "+ s"):
        table.add_column(column, justify="right")
    if exporter is not None:
        table.add_column(exporter.name)
    first = sequence.steps[0]
    for step, (plan, refused) in zip(sequence.steps, exports):
        cells = [
            str(step.step), "" if step.changed_layer is None else str(step.changed_layer), str(step.full_layers),
            gib(step.peak_bytes), gib(first.peak_bytes - step.peak_bytes), f"{step.step_seconds:.4f}",
            f"{step.step_seconds - first.step_seconds:+.4f}",
        ]
        if exporter is not None:
            shown = "(not runnable)" if refused is not None else "(no flags)" if plan == "" else " ".join(_export_text(plan).split())
            cells.append(escape(shown))
        table.add_row(*cells)
    console.print(table)
    last = sequence.steps[-1]
    console.print(f"Start: {describe_plan(first.plan)}; last: {describe_plan(last.plan)}")
    for what, path in (("CSV", args.csv), ("plot", args.plot)):
        if path is not None:
            console.print(f"Wrote {what} {path}")
    return 0


# ----------------------------------------------------------------------------- recompute plans


def _share_list(text: str) -> tuple[float, ...]:
    """Comma-separated offload shares, each above 0 and at most 1: ``0.25,0.5``."""
    try:
        shares = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated shares such as 0.25,0.5, got {text!r}") from None
    if any(not 0 < share <= 1 for share in shares):
        raise argparse.ArgumentTypeError(f"offload shares lie in (0, 1], got {text!r}")
    return shares


def _reserve(text: str) -> int:
    """A size as ``--memory`` takes it, or ``0``."""
    return 0 if text.strip() in ("0", "0B", "0b") else _memory(text)


def _add_recompute_parser(sub: Any) -> None:
    """``hp recompute``: the model and layout flags of ``hp estimate``, then the planner's own."""
    rec = sub.add_parser(
        "recompute", help="per stage, the fastest recompute plan whose peak fits the device",
        description="Per pipeline stage, the fastest recompute setting of every body layer such that every peak point "
                    "of the stage fits the device memory less the reserve; exact (see docs/recompute.md). Flags "
                    "override the config file.",
    )
    _add_job_arguments(rec, "hardware preset: its memory bounds the plan, its rates price it (see 'hp plugins')")
    rec.add_argument("--memory", type=_memory, metavar="SIZE", help="device memory, overriding the hardware's (80GiB, 80GB, 81920MiB or bytes)")
    rec.add_argument("--reserve", type=_reserve, default=0, metavar="SIZE", help="memory to keep free on every device (default 0)")
    rec.add_argument("--unrestricted", action="store_true", help="also plan over settings the runtime's trainer does not run, and show both")
    rec.add_argument("--offload", type=_share_list, default=(), metavar="S,S,...", help="offload shares a setting may add (needs the device's host link)")
    rec.add_argument("--export", metavar="TRAINER",
                     help="also plan within what TRAINER's configuration expresses (megatron, torchtitan, "
                          "hyperparallel: see 'hp plugins') and print that plan as TRAINER reads it")
    rec.add_argument("--json", action="store_true", help="print JSON instead of the table")
    rec.set_defaults(recompute=None)


def _plan_table(result: Any, title: str) -> Table:
    from hp_core.io.recompute_output import describe_ranges

    table = Table(title=title, title_justify="left")
    for column in ("Stage", "Settings (body layers)", "Peak GiB", "Limit GiB", "Fits", "Binds", "s / micro-batch"):
        table.add_column(column, justify="left" if column.startswith("Settings") else "right")
    for stage in result.stages:
        table.add_row(str(stage.index), describe_ranges(stage.ranges), gib(stage.peak_bytes), gib(stage.limit_bytes),
                      "yes" if stage.fits else f"NO (short {gib(stage.shortfall_bytes)})", stage.binding_point,
                      f"{stage.micro_batch_seconds:.4f}")
    return table


def _run_recompute(args: argparse.Namespace, registry: Registry, console: Console) -> int:
    from hp_core.api import plan_recompute
    from hp_core.io.recompute_output import describe_ranges, recompute_plan_to_json

    config = _config_from_args(args, registry)
    job = resolve_job(config, registry)
    if job.hardware is None:
        raise ConfigError("--hardware", "a recompute plan is ranked by step time and bounded by device memory: name a hardware preset (see 'hp plugins')")
    hardware = job.hardware if args.memory is None else attrs.evolve(job.hardware, memory_bytes=args.memory)
    plan = plan_recompute(
        job.model, job.parallel, registry=registry, hardware=hardware, runtime=job.runtime, reserve_bytes=args.reserve,
        precision=job.precision, census=job.census, attention=job.attention, unrestricted=args.unrestricted,
        offload=args.offload,
    )
    trainer = None
    if args.export is not None:
        from hp_core.engine.recompute.trainer import plan_for_trainer

        trainer = plan_for_trainer(
            job.model, job.parallel, registry=registry, hardware=hardware, trainer=args.export,
            reserve_bytes=args.reserve, precision=job.precision, census=job.census, attention=job.attention,
        )
    if args.json:
        doc = recompute_plan_to_json(plan)
        if trainer is not None:
            doc["trainer_plan"] = {
                "trainer": trainer.trainer,
                "plan": trainer.written,
                "fits": trainer.fits,
                "shortfall_bytes": trainer.shortfall_bytes,
                "peak_bytes": trainer.estimate.peak_bytes,
                "step_seconds": trainer.time.step_seconds,
                "candidates": trainer.candidates,
            }
        print(json.dumps(doc, indent=2))
        return 0
    results = [("the runtime runs", plan.plan)] + ([("unrestricted", plan.unrestricted)] if plan.unrestricted else [])
    for what, result in results:
        console.print(_plan_table(result, f"Recompute plan ({what}): {plan.model}, runtime {plan.runtime}, "
                                          f"{gib(plan.memory_bytes)} GiB less {gib(plan.reserve_bytes)} GiB reserve"))
        verdict = "every stage fits" if result.fits else "does NOT fit: " + "; ".join(
            f"stage {s.index} short by {gib(s.shortfall_bytes)} GiB" for s in result.stages if not s.fits)
        console.print(f"Step time {result.step_seconds:.4f} s; peak {gib(result.peak_bytes)} GiB; {verdict}")
        spec = result.recompute
        console.print(f"Plan: {describe_ranges(spec.layers, spec.default)}", markup=False, highlight=False)
        for stage in result.stages:
            console.print(f"  stage {stage.index}: {stage.reason}", markup=False, highlight=False)
    if trainer is not None:
        verdict = "every stage fits" if trainer.fits else f"does NOT fit: short by {gib(trainer.shortfall_bytes)} GiB"
        console.print(
            f"Fastest plan {trainer.trainer} expresses ({trainer.candidates} priced): step time "
            f"{trainer.time.step_seconds:.4f} s; peak {gib(trainer.estimate.peak_bytes)} GiB; {verdict}",
            markup=False, highlight=False,
        )
        written = trainer.written if isinstance(trainer.written, str) else json.dumps(trainer.written)
        console.print(written or "(no recompute flags)", markup=False, highlight=False)
    return 0


# ----------------------------------------------------------------------------- layout search


def _fix(text: str) -> tuple[str, int]:
    """``tp=8``: a degree held fixed by ``hp search``."""
    from hp_core.engine.search import FIXABLE

    name, _, value = text.partition("=")
    name = name.strip().replace("-", "_")
    if name == "mbs":
        name = "micro_batch_size"
    if name not in FIXABLE or not value.strip().isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected NAME=N with NAME one of {', '.join(FIXABLE)} (or mbs), got {text!r}")
    return name, int(value)


def _add_search_parser(sub: Any) -> None:
    """``hp search``: every layout of a device count, planned and ranked by step time."""
    search = sub.add_parser(
        "search", help="every parallel layout of a device count, recompute planned, ranked by step time",
        description="Enumerate every dp cp tp pp vpp ep etp layout multiplying to --devices, every micro-batch size and "
                    "ZeRO level the runtime runs; reject those that cannot work (counted by reason), plan recompute for "
                    "the rest and rank them by step time (see docs/search.md).",
    )
    search.add_argument("--model", required=True, help="a preset name (see 'hp models') or a Hugging Face config.json / folder")
    search.add_argument("--num-layers", type=_positive, help="keep the first N body layers")
    search.add_argument("--devices", type=_positive, required=True, help="the device count every layout multiplies to")
    search.add_argument("--hardware", required=True, help="hardware preset: its memory bounds the plans, its rates price them")
    search.add_argument("--global-batch-size", type=_positive, default=1024, help="sequences per step (default 1024)")
    search.add_argument("--seq-len", type=_positive, default=4096, help="tokens per sequence (default 4096)")
    search.add_argument("--runtime", default="generic", help="runtime profile (see 'hp plugins'); default generic")
    search.add_argument("--top", type=_positive, default=10, help="how many of the fastest layouts to show (default 10)")
    search.add_argument("--fix", type=_fix, action="append", default=[], metavar="NAME=N",
                        help="hold a degree fixed: dp, cp, tp, pp, vpp, ep, etp, zero, mbs (repeatable)")
    search.add_argument("--reserve", type=_reserve, default=0, metavar="SIZE", help="memory to keep free on every device (default 0)")
    search.add_argument("--workers", type=_positive, default=1,
                        help="processes bounding, refining and planning candidates (default 1: in this process)")
    search.add_argument("--json", action="store_true", help="print JSON instead of the table (no progress bar)")
    search.add_argument("--csv", metavar="FILE", help="write the top K as CSV, one row per layout (columns: docs/search.md)")
    search.add_argument("--plot", metavar="FILE.png", help="plot the top K's step time against peak memory (extra 'plots': matplotlib)")


def _run_search(args: argparse.Namespace, registry: Registry, console: Console) -> int:
    from concurrent.futures import ProcessPoolExecutor

    from hp_core.io.job import resolve_model
    from hp_core.engine.search import search
    from hp_core.io.search_output import check_plot, plot_search, search_to_json, write_search_csv

    if args.plot is not None:
        check_plot(args.plot)  # before a search that may take minutes
    base = structure(DEFAULT_CONFIG, ConfigFile, registry)
    model = resolve_model(attrs.evolve(base, model=args.model, num_layers=args.num_layers), registry)
    hardware = registry.hardware_preset(args.hardware, "--hardware").spec
    fixed = dict(args.fix)
    executor = ProcessPoolExecutor(max_workers=args.workers) if args.workers > 1 else None
    kwargs = dict(registry=registry, devices=args.devices, hardware=hardware, global_batch_size=args.global_batch_size,
                  seq_len=args.seq_len, runtime=args.runtime, fixed=fixed, top=args.top, executor=executor,
                  reserve_bytes=args.reserve)
    try:
        if args.json or not sys.stdout.isatty():
            result = search(model, **kwargs)
        else:
            from rich.progress import Progress

            with Progress(console=console, transient=True) as bar:
                job = bar.add_task("planning layouts", total=None)
                result = search(model, progress=lambda done, total: bar.update(job, completed=done, total=total), **kwargs)
    finally:
        if executor is not None:
            executor.shutdown()
    if args.csv is not None:
        write_search_csv(result, args.csv)
    if args.plot is not None:
        plot_search(result, args.plot, memory_bytes=hardware.memory_bytes, reserve_bytes=args.reserve)
    if args.json:
        print(json.dumps(search_to_json(result), indent=2))
        return 0
    table = Table(title=f"Fastest layouts: {result.model} on {result.devices} x {result.hardware}, runtime {result.runtime}, "
                        f"global batch {result.global_batch_size} x {result.seq_len} tokens", title_justify="left")
    for column in ("#", "Layout", "Peak GiB", "Stage peaks GiB", "Step s", "MFU", "Recompute plan"):
        table.add_column(column, justify="left" if column in ("Layout", "Recompute plan") else "right")
    for rank, c in enumerate(result.top, 1):
        table.add_row(str(rank), c.layout.describe(), gib(c.peak_bytes), " ".join(gib(p) for p in c.stage_peaks_bytes),
                      f"{c.step_seconds:.3f}", f"{c.mfu:.1%}", c.plan_summary)
    console.print(table)
    console.print(f"Considered {result.considered:,} candidates; planned {result.planned:,}; {result.fitting:,} fit.")
    rejected = Table(title="Rejected", title_justify="left")
    rejected.add_column("Reason")
    rejected.add_column("Candidates", justify="right")
    for reason, count in result.rejected.items():
        rejected.add_row(reason, f"{count:,}")
    console.print(rejected)
    if not result.top:
        console.print("No layout fits.")
    for what, path in (("CSV", args.csv), ("plot", args.plot)):
        if path is not None:
            console.print(f"Wrote {what} {path}")
    return 0


_COMMANDS = {"estimate": _run_estimate, "plugins": _run_plugins, "models": _run_models, "validate": _run_validate,
             "census": _run_census, "potentials": _run_potentials,
             "recompute": _run_recompute, "search": _run_search}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``hp``; returns the exit status (0 ok, 2 user error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console() if sys.stdout.isatty() else Console(width=132)
    try:
        registry = build_registry(entry_points=not args.no_entry_points, blocked=args.block_plugin)
        return _COMMANDS[args.command](args, registry, console)
    except HPError as exc:
        sys.stderr.write(f"hp {args.command}: error: {exc}\n")
        return 2
    except BrokenPipeError:
        # The reader went away (``hp ... --json | head``): stop quietly, as Python's docs advise.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
