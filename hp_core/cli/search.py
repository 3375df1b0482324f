"""``hp search``: every parallel layout of a device count, recompute planned and ranked by step time."""

from __future__ import annotations

import argparse
import contextlib
import os
import json
import sys
from typing import Iterator

import attrs
from rich.console import Console
from rich.table import Table

from hp_core.cli.jobs import precision_label
from hp_core.cli.parser import DEFAULT_CONFIG
from hp_core.errors import ConfigError
from hp_core.io.convert import ConfigFile, structure
from hp_core.io.report import gib
from hp_core.registry import Registry

__all__ = ["search_command", "task_executor"]


@contextlib.contextmanager
def task_executor(kind: str, address: str | None, workers: int) -> Iterator[object]:
    """The executor ``hp search`` hands its tasks to, closed on exit; ``None``: serially in this process.

    ``process``: a process pool of *workers* (1: none). ``dask``: the
    executor of a Dask ``distributed`` client (``Client.get_executor``): of
    a local cluster of *workers* processes, or of the scheduler at *address*.
    The search merges answers in submission order, so every executor gives
    the same ranking (docs/search.md).

    Raises:
        ConfigError: Dask is not installed, or the scheduler cannot be reached.
    """
    if kind == "process":
        # No more processes than CPUs: more would only wait (the answers do not depend on the count).
        workers = max(1, min(workers, os.cpu_count() or 1))
        if workers == 1:
            yield None
            return
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=workers) as pool:
            yield pool
        return
    try:
        import distributed
    except ImportError:
        raise ConfigError("--executor", "the dask executor needs Dask: pip install 'hp-planner[dask]'") from None
    with contextlib.ExitStack() as stack:
        try:
            if address is None:
                cluster = stack.enter_context(distributed.LocalCluster(
                    n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None))
                client = stack.enter_context(distributed.Client(cluster))
            else:
                client = stack.enter_context(distributed.Client(address, timeout="20s"))
        except Exception as exc:  # noqa: BLE001 - whatever connecting raises (an endpoint that is no Dask scheduler
            # answers bytes distributed cannot read: a MemoryError seen) is the address's, said in one line
            where = address or "a local cluster"
            raise ConfigError("--executor", f"cannot reach the Dask scheduler at {where}: "
                                            f"{type(exc).__name__}: {exc}") from None
        yield client.get_executor()


def _recipes(args: argparse.Namespace, registry: Registry) -> list[str | None]:
    """The recipes ``--precision`` names (comma-separated), each checked; ``[None]``: the runtime's."""
    if args.precision is None:
        return [None]
    names = [name.strip() for name in args.precision.split(",")]
    if len(set(names)) != len(names) or not all(names):
        raise ConfigError("--precision", f"name each recipe once, comma-separated; got {args.precision!r}")
    for name in names:
        registry.precision_recipe(name, "--precision")
    return names


def _searched(model, kwargs: dict, recipe: str | None, quiet: bool, console: Console):
    """One recipe's search, with a progress bar on a terminal (not under ``--json``)."""
    from hp_core.engine.search import search

    if quiet or not sys.stdout.isatty():
        return search(model, **kwargs)
    from rich.progress import Progress

    with Progress(console=console, transient=True) as bar:
        job = bar.add_task(f"planning layouts{f' ({recipe})' if recipe else ''}", total=None)
        return search(model, progress=lambda done, total: bar.update(job, completed=done, total=total), **kwargs)


def _print_recipes(results: dict, args: argparse.Namespace, console: Console, refused: dict | None = None) -> int:
    """The recipe as a search dimension: each recipe's best layouts ranked together (docs/precision.md); the recipes
    the run refuses as a whole (*refused*: a recipe the device does not run), each with its one-line reason."""
    from hp_core.io.search_output import search_to_json

    refused = refused or {}
    ranked = sorted(((c.step_seconds, recipe, c) for recipe, r in results.items() for c in r.top), key=lambda t: (t[0], t[1]))
    if args.json:
        doc = {
            "precision_dimension": list(results) + list(refused),
            "ranked": [{"recipe": recipe, "layout": c.layout.describe(), "step_seconds": c.step_seconds, "mfu": c.mfu,
                        "peak_bytes": c.peak_bytes} for _, recipe, c in ranked],
            "results": {recipe: search_to_json(r) for recipe, r in results.items()},
            "refused": dict(refused),
        }
        print(json.dumps(doc, indent=2))
        return 0
    first = next(iter(results.values()))
    table = Table(title=f"Fastest layouts over recipes {', '.join(results)}: {first.model} on {first.devices} x {first.hardware}, "
                        f"global batch {first.global_batch_size} x {first.seq_len} tokens", title_justify="left")
    for column in ("#", "Recipe", "Layout", "Peak GiB", "Step s", f"MFU ({first.mfu_dtype} peak)", "Recompute plan"):
        table.add_column(column, justify="left" if column in ("Recipe", "Layout", "Recompute plan") else "right")
    for rank, (_, recipe, c) in enumerate(ranked[:args.top], 1):
        table.add_row(str(rank), recipe, c.layout.describe(), gib(c.peak_bytes), f"{c.step_seconds:.3f}", f"{c.mfu:.1%}",
                      c.plan_summary)
    console.print(table)
    for recipe, r in results.items():
        console.print(f"{recipe}: considered {r.considered:,} candidates; planned {r.planned:,}; {r.fitting:,} fit"
                      + (f"; kept layers: {_kept_text(r)}" if r.high_precision_layers != (0, 0) else "")
                      + (f"; {_kinds_text(r)}" if r.compute_dtype_kinds else "") + ".")
    for recipe, why in refused.items():
        console.print(f"{recipe}: not searched ({why})", markup=False, highlight=False, soft_wrap=True)
    return 0


def _kinds_text(result) -> str:
    """The kinds every layout of *result* runs wholly in the compute dtype (``Runtime.compute_dtype_kinds``), in words."""
    return (f"{', '.join(result.compute_dtype_kinds)} layers wholly in the compute dtype in every layout (the runtime's "
            "trainer quantizes none of them under this recipe)")


def _kept_text(result) -> str:
    """The layers every layout of *result* keeps in the compute dtype, in words."""
    start, end = result.high_precision_layers
    return f"the first {start} and the last {end} body layers in the compute dtype in every layout (fixed, not searched)"


def search_command(args: argparse.Namespace, registry: Registry, console: Console) -> int:
    from hp_core.io.job import resolve_model
    from hp_core.runtime_options import apply_options, option_summary, parse_assignments
    from hp_core.io.recompute_output import unproven_text
    from hp_core.io.search_output import check_plot, plot_search, search_to_json, write_search_csv

    if args.plot is not None:
        check_plot(args.plot)  # before a search that may take minutes
    base = structure(DEFAULT_CONFIG, ConfigFile, registry)
    model = resolve_model(attrs.evolve(base, model=args.model, num_layers=args.num_layers), registry, "--model")
    hardware = registry.hardware_preset(args.hardware, "--hardware").spec
    runtime = registry.runtime(args.runtime, "--runtime")
    runtime = apply_options(runtime, parse_assignments(args.runtime_option))
    reserve = args.reserve if args.reserve is not None else runtime.reserve_bytes
    precision = None
    if args.optimizer is not None:
        registry.optimizer(args.optimizer, "--optimizer")
        precision = attrs.evolve(runtime.precision, optimizer=args.optimizer)
    kept = {f"high_precision_layers_at_{flag}": value for flag, value in (("start", args.high_precision_layers_at_start),
                                                                          ("end", args.high_precision_layers_at_end))
            if value is not None}
    if kept:  # fixed in every layout, not searched (docs/search.md)
        precision = attrs.evolve(precision or runtime.precision, **kept)
    recipes = _recipes(args, registry)
    if len(recipes) > 1 and (args.csv is not None or args.plot is not None):
        raise ConfigError("--precision", "--csv and --plot take one recipe; search several recipes without them")
    fixed = dict(args.fix)
    kind, address = args.executor
    results, refused = {}, {}
    with task_executor(kind, address, args.workers) as executor:
        for recipe in recipes:
            chosen = precision if recipe is None else attrs.evolve(precision or runtime.precision, recipe=recipe)
            kwargs = dict(registry=registry, devices=args.devices, hardware=hardware, global_batch_size=args.global_batch_size,
                          seq_len=args.seq_len, runtime=runtime if runtime.option_values else args.runtime, fixed=fixed,
                          top=args.top, executor=executor, reserve_bytes=reserve, precision=chosen,
                          schedules=args.schedules)
            try:
                results[recipe] = _searched(model, kwargs, recipe, args.json, console)
            except ConfigError as exc:
                # Several recipes: one the whole run refuses (the device does not run it) is said, the others ranked.
                if len(recipes) == 1 or not exc.path.startswith("$.precision"):
                    raise
                refused[recipe] = str(exc)
    if len(recipes) > 1:
        if not results:  # none runs: the first recipe's refusal
            raise ConfigError("--precision", f"no recipe of {', '.join(recipes)} runs here: " + "; ".join(refused.values()))
        return _print_recipes(results, args, console, refused)
    result = next(iter(results.values()))
    if args.csv is not None:
        write_search_csv(result, args.csv)
    if args.plot is not None:
        plot_search(result, args.plot, memory_bytes=hardware.memory_bytes, reserve_bytes=reserve)
    if args.json:
        print(json.dumps(search_to_json(result), indent=2))
        return 0
    label = result.runtime + (f" ({option_summary(runtime)})" if runtime.option_values else "")
    table = Table(title=f"Fastest layouts: {result.model} on {result.devices} x {result.hardware}, runtime {label}"
                        f"{precision_label(dict(result.precision))}, global batch {result.global_batch_size} x "
                        f"{result.seq_len} tokens", title_justify="left")
    for column in ("#", "Layout", "Peak GiB", "Stage peaks GiB", "Step s", f"MFU ({result.mfu_dtype} peak)", "Recompute plan"):
        table.add_column(column, justify="left" if column in ("Layout", "Recompute plan") else "right")
    for rank, c in enumerate(result.top, 1):
        table.add_row(str(rank), c.layout.describe(), gib(c.peak_bytes), " ".join(gib(p) for p in c.stage_peaks_bytes),
                      f"{c.step_seconds:.3f}", f"{c.mfu:.1%}", c.plan_summary)
    console.print(table)
    for rank, c in enumerate(result.top, 1):
        if c.unproven:  # the MTP module's states a faster plan might reach (docs/recompute.md, 'Why it is exact')
            console.print(f"Note: #{rank}'s plan is not proven the fastest; a plan making the placed layers recompute "
                          f"{unproven_text(c.unproven)} may be faster (docs/recompute.md, 'Why it is exact')",
                          markup=False, highlight=False, soft_wrap=True)
    console.print(f"Considered {result.considered:,} candidates; planned {result.planned:,}; {result.fitting:,} fit.")
    if result.high_precision_layers != (0, 0) or result.compute_dtype_kinds:
        console.print("Kept layers: " + "; ".join(
            ([_kept_text(result)] if result.high_precision_layers != (0, 0) else [])
            + ([_kinds_text(result)] if result.compute_dtype_kinds else [])) + ".")
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
