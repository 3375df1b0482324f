"""``hp potentials``: the plans that each recompute one more layer fully, fastest first."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from hp_core.cli.jobs import (config_from_args, export_text, job_precision, precision_export, precision_label,
                              print_precision_export)
from hp_core.errors import ConfigError, call_plugin
from hp_core.io.job import resolve_job
from hp_core.io.report import gib
from hp_core.registry import Registry
from hp_core.runtime_options import runtime_label, runtime_name

__all__ = ["potentials_command"]


def potentials_command(args: argparse.Namespace, registry: Registry, console: Console) -> int:
    from rich.markup import escape

    from hp_core.errors import PlanNotExecutable
    from hp_core.engine.recompute.layout import compact, describe_plan, plan_layout, setting_value, settings_of
    from hp_core.engine.recompute.potential import recompute_potentials
    from hp_core.io.files import check_png, pyplot
    from hp_core.io.potentials_output import plot_potentials, potential_rows, write_potentials_csv

    if args.steps is not None and args.steps < 0:
        raise ConfigError("--steps", f"expected a non-negative number of steps, got {args.steps}")
    if args.plot is not None:
        check_png(args.plot)  # a PNG path and matplotlib, before the work and the CSV
        pyplot()
    exporter = registry.exporter(args.export) if args.export is not None else None
    config = config_from_args(args, registry)
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
            exports.append((call_plugin(exporter.name, "exporter", exporter.export, step.plan, job.model, job.parallel, registry=registry), None))
        except PlanNotExecutable as exc:
            exports.append((None, exc.message))
    if args.csv is not None:
        write_potentials_csv([sequence], kinds, args.csv)
    if args.plot is not None:
        plot_potentials([sequence], args.plot, title=f"{job.model.name}: recompute potentials ({runtime_label(job.runtime)})")
    if args.json:
        rows = list(potential_rows(sequence, kinds))
        doc: dict[str, Any] = {"model": job.model.name, "runtime": runtime_name(job.runtime), **job_precision(job, registry),
                               "degrees": dict(sequence.degrees), "steps": []}
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
        if exporter is not None:  # the recipe's flags for the trainer, the same for every step
            doc.update(precision_export(exporter.name, job, registry))
        print(json.dumps(doc, indent=2))
        return 0
    table = Table(title=f"Recompute potentials: {job.model.name}, runtime {runtime_label(job.runtime)}"
                        f"{precision_label(job_precision(job, registry))}, "
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
            shown = "(not runnable)" if refused is not None else "(no flags)" if plan == "" else " ".join(export_text(plan).split())
            cells.append(escape(shown))
        table.add_row(*cells)
    console.print(table)
    last = sequence.steps[-1]
    console.print(f"Start: {describe_plan(first.plan)}; last: {describe_plan(last.plan)}")
    if exporter is not None:
        print_precision_export(precision_export(exporter.name, job, registry), exporter.name, console)
    for what, path in (("CSV", args.csv), ("plot", args.plot)):
        if path is not None:
            console.print(f"Wrote {what} {path}")
    return 0
