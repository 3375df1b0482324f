"""``hp recompute``: per stage, the fastest recompute plan whose peak fits the device."""

from __future__ import annotations

import argparse
import json
from typing import Any

import attrs
from rich.console import Console
from rich.table import Table

from hp_core.cli.jobs import config_from_args, precision_export, precision_label, print_precision_export
from hp_core.errors import ConfigError
from hp_core.io.job import resolve_job
from hp_core.io.report import gib
from hp_core.registry import Registry

__all__ = ["recompute_command"]


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


def recompute_command(args: argparse.Namespace, registry: Registry, console: Console) -> int:
    from hp_core.api import plan_recompute
    from hp_core.io.recompute_output import describe_ranges, recompute_plan_to_json, unproven_text

    config = config_from_args(args, registry)
    job = resolve_job(config, registry)
    if job.hardware is None:
        raise ConfigError("--hardware", "a recompute plan is ranked by step time and bounded by device memory: name a hardware preset (see 'hp plugins')")
    hardware = job.hardware if args.memory is None else attrs.evolve(job.hardware, memory_bytes=args.memory)
    reserve = args.reserve if args.reserve is not None else registry.runtime(job.runtime).reserve_bytes
    plan = plan_recompute(
        job.model, job.parallel, registry=registry, hardware=hardware, runtime=job.runtime, reserve_bytes=reserve,
        precision=job.precision, census=job.census, attention=job.attention, unrestricted=args.unrestricted,
        offload=args.offload,
    )
    trainer = None
    if args.export is not None:
        from hp_core.engine.recompute.trainer import plan_for_trainer

        trainer = plan_for_trainer(
            job.model, job.parallel, registry=registry, hardware=hardware, trainer=args.export,
            reserve_bytes=reserve, precision=job.precision, census=job.census, attention=job.attention,
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
                **precision_export(trainer.trainer, job, registry),
            }
        print(json.dumps(doc, indent=2))
        return 0
    results = [("the runtime runs", plan.plan)] + ([("unrestricted", plan.unrestricted)] if plan.unrestricted else [])
    for what, result in results:
        console.print(_plan_table(result, f"Recompute plan ({what}): {plan.model}, runtime {plan.runtime}"
                                          f"{precision_label(plan.provenance)}, {gib(plan.memory_bytes)} GiB less "
                                          f"{gib(plan.reserve_bytes)} GiB reserve"))
        verdict = "every stage fits" if result.fits else "does NOT fit: " + "; ".join(
            f"stage {s.index} short by {gib(s.shortfall_bytes)} GiB" for s in result.stages if not s.fits)
        console.print(f"Step time {result.step_seconds:.4f} s; peak {gib(result.peak_bytes)} GiB; {verdict}")
        spec = result.recompute
        console.print(f"Plan: {describe_ranges(spec.layers, spec.default)}", markup=False, highlight=False)
        if result.unproven:  # the MTP module's states a faster plan might reach (docs/recompute.md, 'Why it is exact')
            states = unproven_text(result.unproven)
            console.print(f"Note: not proven the fastest; a plan making the placed layers recompute {states} may be "
                          "faster (docs/recompute.md, 'Why it is exact')", markup=False, highlight=False, soft_wrap=True)
        if "recompute_assumptions" in result.estimate.provenance:  # a chosen setting priced by a stated assumption
            console.print(f"Note (recompute): {result.estimate.provenance['recompute_assumptions']}", markup=False,
                          highlight=False, soft_wrap=True)
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
        print_precision_export(precision_export(trainer.trainer, job, registry), trainer.trainer, console)
    return 0
