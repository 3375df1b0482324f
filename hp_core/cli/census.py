"""``hp census``: what each layer kind keeps per token, measured or computed, and the census file it writes."""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from hp_core.errors import ConfigError
from hp_core.registry import Registry

__all__ = ["census_command"]


def census_command(args: argparse.Namespace, registry: Registry, console: Console) -> int:
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
