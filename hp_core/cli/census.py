"""``hp census``: what each layer kind keeps per token, measured or computed, and the census file it writes."""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from hp_core.errors import ConfigError
from hp_core.registry import Registry

__all__ = ["DEFAULT_SEQ_LEN", "census_command"]

# Tokens per sequence when neither --seq-len nor a config file states them.
DEFAULT_SEQ_LEN = 4096


def census_command(args: argparse.Namespace, registry: Registry, console: Console) -> int:
    from hp_core.engine.census import run_census
    from hp_core.io.census_report import census_table, census_to_json

    if args.out is not None and not args.out.lower().endswith((".yaml", ".yml", ".json")):
        raise ConfigError("--out", f"a census file ends in .yaml, .yml or .json, got {args.out}")
    model, seq_len = args.model, args.seq_len
    if args.config is not None:
        from hp_core.io.convert import load_config
        from hp_core.io.job import resolve_model

        config = load_config(args.config, registry)
        if model is None:
            model = resolve_model(config, registry)  # a preset, a config.json or the file's inline stack
        if seq_len is None:
            seq_len = config.parallel.seq_len
    if model is None:
        raise ConfigError("--model", "name the model: --model PRESET or config.json, or a config file (hp census FILE)")
    run = run_census(registry, model, args.source, seq_len if seq_len is not None else DEFAULT_SEQ_LEN, args.attn, args.tp)
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
