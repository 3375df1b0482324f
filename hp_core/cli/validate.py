"""``hp validate``: estimates beside measured runs (the cases file is read by :mod:`hp_core.io.validate`)."""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from hp_core.io.report import validation_step_table, validation_table
from hp_core.registry import Registry

__all__ = ["validate_command"]


def validate_command(args: argparse.Namespace, registry: Registry, console: Console) -> int:
    from hp_core.io.validate import load_cases, measure_cases, validate_case

    cases = measure_cases(args.cases, registry) if args.measure else load_cases(args.cases, registry)
    results = [validate_case(case, registry) for case in cases]
    if args.json:
        doc = {
            "cases": [
                {
                    "name": result.name,
                    "runtime": result.runtime,
                    "precision_recipe": result.precision_recipe,
                    "stages": [
                        {"index": check.stage, "quantity": check.quantity, "estimated_peak_bytes": check.estimated_bytes,
                         "measured_peak_bytes": check.measured_bytes, "error": check.error}
                        for check in result.stages
                    ],
                    "steps": [
                        {"micro_batches": check.micro_batches, "global_batch_size": check.global_batch_size,
                         "estimated_seconds": check.estimated_seconds, "measured_seconds": check.measured_seconds,
                         "metric": check.metric, "estimated_value": check.estimated_value,
                         "measured_value": check.measured_value, "error": check.error}
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
