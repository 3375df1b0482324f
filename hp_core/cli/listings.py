"""``hp plugins`` and ``hp models``: what the loaded plugins provide, and the model presets."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from hp_core.api import count_parameters, model_from_preset
from hp_core.io.report import gib
from hp_core.registry import Registry

__all__ = ["models_command", "plugins_command"]


def plugins_command(args: argparse.Namespace, registry: Registry, console: Console) -> int:
    sections = (
        ("layer kinds", "hp_layer_kinds", registry.layer_kinds, lambda k: f"{k.placement}; {k.description}"),
        ("census sources", "hp_census_sources", registry.census_sources, lambda c: c.description),
        ("runtimes", "hp_runtimes", registry.runtimes, lambda r: r.description),
        ("hardware", "hp_hardware", registry.hardware, lambda h: f"{h.spec.name}, {gib(h.spec.memory_bytes)} GiB"),
        ("models", "hp_models", registry.models, lambda m: m.description),
        ("exporters", "hp_exporters", registry.exporters, lambda e: f"runtime {e.runtime}; {e.description}"),
        ("optimizers", "hp_optimizers", registry.optimizers, lambda o: o.description),
        ("layer aspects", "hp_layer_aspects", registry.layer_aspects, lambda a: f"{a.kind}.{a.aspect}; {a.description}"),
        ("model formats", "hp_model_formats", registry.model_formats, lambda f: f.description),
        ("case formats", "hp_case_formats", registry.case_formats, lambda f: f.description),
        ("precision recipes", "hp_precision_recipes", registry.precision_recipes, _recipe_summary),
        ("schedules", "hp_schedules", registry.schedules, _schedule_summary),
        ("collective models", "hp_collective_models", registry.collective_models, lambda c: c.description),
        ("importers", "hp_importers", registry.importers, lambda i: i.description),
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
        doc["broken"] = [{"plugin": b.plugin, "error": b.error} for b in registry.broken]
        print(json.dumps(doc, indent=2))
        return 0
    if registry.broken:
        table = Table(title="Broken plugins (left out; HP_BLOCK_PLUGINS=NAME silences one)", title_justify="left")
        for column in ("Plugin", "Error"):
            table.add_column(column)
        for b in registry.broken:
            table.add_row(b.plugin, b.error)
        console.print(table)
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


def _recipe_summary(recipe: Any) -> str:
    """Its description and the flags each trainer selects it by (what the importers match, ``PrecisionRecipe.flags``)."""
    return recipe.description + "".join(f"; {trainer} flags: {' '.join(words)}" for trainer, words in sorted(recipe.flags.items()))


def _schedule_summary(schedule: Any) -> str:
    """Its passes, its model copies where more than one, its gradient sync where any, and its description."""
    passes = "/".join(p.name for p in schedule.passes)
    copies = f"; {schedule.model_copies} model copies" if schedule.model_copies > 1 else ""
    sync = schedule.gradient_sync
    synced = f"; {sync.op} over {sync.ranks} mirrored ranks per step" if sync is not None else ""
    return f"{passes}{copies}{synced}; {schedule.description}"


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


def models_command(args: argparse.Namespace, registry: Registry, console: Console) -> int:
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
