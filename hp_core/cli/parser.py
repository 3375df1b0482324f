"""The ``hp`` grammar: every command's flags, their argument types and the parser that errs in one line.

All of it is declared here, so that ``import hp_core.cli`` and ``hp --help``
load no engine and no rich: the module that runs a command (``hp_core.cli.<command>``)
is imported only when that command runs. docs/cli.md is generated from
:func:`build_parser` (docs/_tools/gen_cli.py) and checked against it.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from hp_core import __version__
from hp_core.bounds import (
    MAX_BATCH, MAX_DEVICES, MAX_INT, MAX_LAYERS, MAX_MEMORY_BYTES, MAX_SEQ_LEN, MAX_WORKERS, short_repr,
)
from hp_core.manager import BLOCK_ENV

__all__ = ["DEFAULT_CONFIG", "FLAG_DEFAULTS", "build_parser"]


# What ``hp estimate`` runs with no config file and no flag describing a job (model, layout, batch):
# the demo job, Llama-3-8B on 8 devices (tensor parallel 2 with sequence parallelism, data parallel
# 4), 8k tokens, on an H100.
DEFAULT_CONFIG: dict[str, Any] = {
    "model": "llama3-8b",
    "parallel": {"dp": 4, "tp": 2, "sp": True, "seq_len": 8192, "micro_batch_size": 1, "global_batch_size": 64},
    "hardware": "h100-sxm",
}

# What a job described by flags alone (no config file) states beyond its flags: the demo's model and
# sequence length; everything else is a config file's default (dp 1, or --devices over cp*tp*pp;
# every other degree 1, no sequence parallelism, the default global batch, no hardware).
FLAG_DEFAULTS: dict[str, Any] = {"model": "llama3-8b", "parallel": {"seq_len": 8192}}


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(2)

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        # argparse reads "--" as the end of options even inside "--opt=--" and hands the option an empty list (CPython
        # argparse, _get_values drops "--" before the type runs): refuse it as a missing value, by the option's name.
        for token in sys.argv[1:] if args is None else args:
            if isinstance(token, str) and token.startswith("--") and token.endswith("=--") and len(token) > 4:
                self.error(f"argument {token[:-3]}: expected one value")
        return super().parse_known_args(args, namespace)


def _bounded(high: int, bound: str, low: int = 1) -> Any:
    """An argument type: an integer in ``[low, high]`` (*bound* names the limit, docs/cli.md lists it)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # not an integer, or more digits than Python converts
            raise argparse.ArgumentTypeError(f"expected {'a positive' if low == 1 else 'a non-negative'} integer, "
                                             f"got {short_repr(text)}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {'a positive' if low == 1 else 'a non-negative'} integer, "
                                             f"got {short_repr(value)}")
        if value > high:
            raise argparse.ArgumentTypeError(f"expected at most {high:,} ({bound}), got {short_repr(value)}")
        return value

    parse.__name__ = "integer"  # argparse names the type in its own messages
    return parse


_positive = _bounded(MAX_INT, "MAX_INT")
_degree = _bounded(MAX_DEVICES, "MAX_DEVICES")
_batch = _bounded(MAX_BATCH, "MAX_BATCH")
_seq_len = _bounded(MAX_SEQ_LEN, "MAX_SEQ_LEN")
_layers = _bounded(MAX_LAYERS, "MAX_LAYERS")
_workers = _bounded(MAX_WORKERS, "MAX_WORKERS")
_kept_layers = _bounded(MAX_LAYERS, "MAX_LAYERS", low=0)
_steps_bound = _bounded(MAX_LAYERS, "MAX_LAYERS", low=-MAX_INT)  # a negative count is refused by the command, by name


def _steps(text: str) -> int:
    return _steps_bound(text)


_steps.__name__ = "integer"


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _memory(text: str) -> int:
    """A size with an optional unit: ``80GiB``, ``80GB``, ``81920MiB``, ``85899345920``."""
    match = re.fullmatch(r"\s*([0-9]{1,30}(?:\.[0-9]{1,30})?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"expected a size such as 80GiB, 80GB or 81920MiB (at most 30 digits), "
                                         f"got {short_repr(text)}")
    value = float(match.group(1)) * _UNITS[unit]
    if value > MAX_MEMORY_BYTES:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_MEMORY_BYTES:,} bytes (1 PiB, MAX_MEMORY_BYTES), "
                                         f"got {short_repr(text)}")
    if round(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive size, got {short_repr(text)}")
    return round(value)


def _counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated layer counts, got {short_repr(text)}") from None
    if any(c < 0 for c in counts):
        raise argparse.ArgumentTypeError("layer counts must be non-negative")
    if len(counts) > MAX_DEVICES or any(c > MAX_LAYERS for c in counts):
        raise argparse.ArgumentTypeError(f"expected at most {MAX_DEVICES:,} counts of at most {MAX_LAYERS:,} layers "
                                         "(MAX_DEVICES, MAX_LAYERS)")
    return counts


def _share_list(text: str) -> tuple[float, ...]:
    """Comma-separated offload shares, each above 0 and at most 1: ``0.25,0.5``."""
    try:
        shares = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated shares such as 0.25,0.5, got {short_repr(text)}") from None
    if any(not 0 < share <= 1 for share in shares):
        raise argparse.ArgumentTypeError(f"offload shares lie in (0, 1], got {short_repr(text)}")
    return _once(shares, text)


def _once(items: tuple, text: str) -> tuple:
    """*items* of a comma-separated list, refused where one stands twice (``1f1b,1f1b``, ``0.5,0.50``)."""
    seen: set = set()
    for item in items:
        if item in seen:
            raise argparse.ArgumentTypeError(f"{item!r} is listed twice in {short_repr(text)}; list each once")
        seen.add(item)
    return items


def _reserve(text: str) -> int:
    """A size as ``--memory`` takes it, or ``0``."""
    return 0 if text.strip() in ("0", "0B", "0b") else _memory(text)


_RESERVE_HELP = ("memory to keep free on every device beside the peak (default: the runtime's reserve, the CUDA "
                 "context, docs/runtimes.md; 0 to opt out)")


def _executor(text: str) -> tuple[str, str | None]:
    """``process``, ``dask`` or ``dask=ADDRESS``: where ``hp search`` runs its tasks."""
    kind, sep, address = text.strip().partition("=")
    if kind == "process" and not sep:
        return "process", None
    if kind == "dask" and (not sep or address.strip()):
        return "dask", address.strip() or None
    raise argparse.ArgumentTypeError(f"expected process, dask or dask=SCHEDULER_ADDRESS, got {text!r}")


def _fix(text: str) -> tuple[str, int]:
    """``tp=8``: a degree held fixed by ``hp search``."""
    from hp_core.engine.search import FIXABLE

    name, _, value = text.partition("=")
    name = name.strip().replace("-", "_")
    if name == "mbs":
        name = "micro_batch_size"
    # ZeRO's levels are 0 (Megatron's default, no distributed optimizer) to 3; a degree or micro-batch from 1.
    least, most = (0, 3) if name == "zero" else (1, MAX_DEVICES)
    if name not in FIXABLE or not value.strip().isdigit() or len(value.strip()) > 10 or not least <= int(value) <= most:
        raise argparse.ArgumentTypeError(f"expected NAME=N with NAME one of {', '.join(FIXABLE)} (or mbs) and N from 1 "
                                         f"to {MAX_DEVICES:,} (MAX_DEVICES; zero: 0 to 3), got {short_repr(text)}")
    return name, int(value)


def _add_job_arguments(parser: argparse.ArgumentParser, hardware_help: str) -> None:
    """The config file and the model, layout, runtime and hardware flags every job command takes."""
    parser.add_argument("config", nargs="?", help="a YAML, JSON or TOML config file (see docs/config.md); with --from, "
                                                  "the trainer's file or (megatron-args) its arguments")
    parser.add_argument("--from", dest="source_format", metavar="TRAINER",
                        help="read the config as TRAINER states it: megatron (a launch script), megatron-args (the "
                             "arguments as text), torchtitan (a job TOML), accelerate-fsdp (an Accelerate FSDP config "
                             "YAML, with --model); see 'hp plugins' and docs/importers.md")
    parser.add_argument("--model", help="a preset name (see 'hp models') or a Hugging Face config.json / folder")
    parser.add_argument("--num-layers", type=_layers, help="keep the first N body layers, as truncated benchmark runs do")
    parser.add_argument("--devices", type=_degree, help="device count: dp is devices / (cp * tp * pp) unless --dp states it")
    for name, what in (("dp", "data"), ("tp", "tensor"), ("pp", "pipeline"), ("vpp", "virtual pipeline (chunks per stage)"),
                       ("cp", "context"), ("ep", "expert"), ("etp", "expert tensor")):
        parser.add_argument(f"--{name}", type=_degree, help=f"{what}-parallel degree")
    parser.add_argument("--cp-kind", choices=("p2p", "a2a"), help="context-parallel exchange: ring (p2p, default) or all-to-all")
    parser.add_argument("--sp", action=argparse.BooleanOptionalAction, default=None, help="sequence parallelism over the TP group")
    parser.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="sharding level over DP*CP (default: the runtime's)")
    parser.add_argument("--reshard-after-forward", action=argparse.BooleanOptionalAction, default=None,
                        help="under zero 3, free each layer's gathered parameters after forward; left out, the "
                             "runtime's default: fsdp2 on at pp 1 and off under pp > 1, as torchtitan; the others on")
    parser.add_argument("--micro-batch-size", type=_batch, help="sequences per micro-batch")
    parser.add_argument("--global-batch-size", type=_batch,
                        help="default: micro-batch size * dp * the schedule's default micro-batches (pp for 1f1b, "
                             "2 * pp interleaved): the fewest at which every stage holds its full in-flight count; "
                             "printed in the header")
    parser.add_argument("--seq-len", type=_seq_len, help="tokens per sequence")
    parser.add_argument("--schedule", metavar="NAME", help="pipeline schedule: 1f1b, interleaved_1f1b, gpipe, ... (see 'hp plugins'; default: 1f1b, or interleaved_1f1b with --vpp > 1)")
    parser.add_argument("--layers-per-stage", type=_counts, metavar="N,N,...", help="body layers per pipeline chunk, chunk order")
    parser.add_argument("--runtime", help="runtime profile (see 'hp plugins'); default generic")
    _add_runtime_option(parser)
    parser.add_argument("--census", help="census source (see 'hp plugins') or a census file (.yaml/.json, see docs/census.md); "
                                         "default formulas")
    parser.add_argument("--attention", choices=("flash", "eager"), help="attention implementation (default: the runtime's)")
    parser.add_argument("--optimizer", help="optimizer (see 'hp plugins'; sets precision.optimizer); default: the runtime's (adamw)")
    parser.add_argument("--precision", metavar="RECIPE",
                        help="low-precision GEMM recipe (bf16, fp8-delayed, fp8-current, fp8-blockwise, mxfp8, nvfp4, ...; "
                             "see 'hp plugins' and docs/precision.md; sets precision.recipe); default: the runtime's (bf16)")
    parser.add_argument("--hardware", help=hardware_help)


def _add_runtime_option(parser: argparse.ArgumentParser, *, config: bool = True) -> None:
    over = "over the config file's runtime.options; " if config else ""  # hp search reads no config file
    parser.add_argument("--runtime-option", action="append", default=[], metavar="NAME=VALUE",
                        help="set one of the runtime's options, e.g. cross_entropy_fusion=false (repeatable; "
                             f"{over}each runtime's options: docs/runtimes.md)")


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
                         description="Per-stage peak memory of one rank of every pipeline stage. Flags override the config file "
                                     "field by field; flags alone describe a job with a config file's defaults (model "
                                     "llama3-8b and seq 8192 unless stated, dp 1 or --devices over cp*tp*pp); with "
                                     "neither, the demo: Llama-3-8B on 8 devices (dp=4 tp=2 sp, seq 8192) on an H100.")
    _add_job_arguments(est, "hardware preset (see 'hp plugins')")
    est.add_argument("--memory", type=_memory, metavar="SIZE", help="device memory, overriding the hardware's (80GiB, 80GB, 81920MiB or bytes)")
    est.add_argument("--reserve", type=_reserve, metavar="SIZE", help=_RESERVE_HELP)
    est.add_argument("--recompute", help="every body layer's setting: none, full, selective or switches joined by '+'")
    est.add_argument("--json", action="store_true", help="print the stable JSON document instead of the table")
    est.add_argument("--export", metavar="TRAINER", help="also write the recompute plan as TRAINER runs it: megatron, "
                                                         "hyperparallel, torchtitan (see docs/trainer_plans.md)")

    _add_potentials_parser(sub)
    _add_recompute_parser(sub)
    _add_search_parser(sub)

    plugins = sub.add_parser("plugins", help="list plugins, layer kinds, census sources, runtimes, hardware, models, exporters, optimizers, layer aspects, "
                                               "model and case formats, precision recipes, schedules, collective models",
                             description="Plugins and what each provides, with the distribution and version.")
    plugins.add_argument("--json", action="store_true", help="print JSON")

    validate = sub.add_parser(
        "validate", help="compare estimates with measured runs",
        description="Estimate every measured run of a cases file with the runtime it names and print estimated and "
                    "measured peak per stage, and estimated and measured step time where the case states them, with "
                    "the signed error (see docs/validate.md for the format; megatron_measured.json is read as published).",
    )
    validate.add_argument("cases", help="a cases file (format hp-cases/1 or hp-cases/2, YAML/JSON/TOML) or megatron_measured.json")
    validate.add_argument("--json", action="store_true", help="print JSON")
    validate.add_argument("--measure", action="store_true",
                          help="CASES is an estimate config: measure its step now with the case format that reads "
                               "hp-measure/1 (the fsdp2 runtime: PyTorch's FSDPMemTracker on CPU, census extra) and compare")

    census = sub.add_parser(
        "census", help="measure (or compute) what each layer kind keeps per token",
        description="Per layer kind of a model, the bytes per token it keeps between forward and backward (saved, and "
                    "saved_tp: the part TP splits) and its backward's peak beyond that (working, working_tp), beside "
                    "what the formulas state. --out writes a census file that 'hp estimate --census FILE' uses "
                    "(see docs/census.md).",
    )
    census.add_argument("config", nargs="?", help="a YAML, JSON or TOML config file (see docs/config.md): its model, "
                                                  "and its sequence length unless --seq-len is given")
    census.add_argument("--model", help="a preset name (see 'hp models') or a Hugging Face config.json / folder "
                                        "(instead of, or over, the config file's)")
    census.add_argument("--source", default="torch", help="torch (measure transformers' layers; extra 'census'), formulas, "
                                                          "or another census source; default torch")
    census.add_argument("--seq-len", type=_seq_len, help="tokens per sequence (default: the config file's, else 4096)")
    census.add_argument("--attn", choices=("eager", "sdpa"), default="eager", help="attention implementation (default eager)")
    census.add_argument("--tp", type=_degree, default=2, help="measure at TP 1 and at this degree to split saved "
                                                               "from saved_tp (default 2; 1: no split)")
    census.add_argument("--out", metavar="FILE", help="write the records as a census file (.yaml/.yml/.json)")
    census.add_argument("--json", action="store_true", help="print JSON")

    models = sub.add_parser("models", help="list model presets", description="Model presets shipped as data.")
    models.add_argument("--json", action="store_true", help="print JSON")
    return parser


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
    pot.add_argument("--steps", type=_steps, metavar="N", help="at most N further layers (default: until every layer is full)")
    pot.add_argument("--csv", metavar="FILE", help="write the sequence as CSV (columns: docs/recompute_potentials.md)")
    pot.add_argument("--plot", metavar="FILE.png", help="plot peak memory against step time (extra 'plots': matplotlib)")
    pot.add_argument("--export", metavar="TRAINER", help="show each plan as TRAINER runs it: megatron, hyperparallel, torchtitan")
    pot.add_argument("--json", action="store_true", help="print JSON instead of the table")


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
    rec.add_argument("--reserve", type=_reserve, metavar="SIZE", help=_RESERVE_HELP)
    rec.add_argument("--unrestricted", action="store_true", help="also plan over settings the runtime's trainer does not run, and show both")
    rec.add_argument("--offload", type=_share_list, default=(), metavar="S,S,...", help="offload shares a setting may add (needs the device's host link)")
    rec.add_argument("--export", metavar="TRAINER",
                     help="also plan within what TRAINER's configuration expresses (megatron, torchtitan, "
                          "hyperparallel: see 'hp plugins') and print that plan as TRAINER reads it")
    rec.add_argument("--json", action="store_true", help="print JSON instead of the table")
    rec.set_defaults(recompute=None)


def _names(text: str) -> tuple[str, ...]:
    """``1f1b,zb_h1``: comma-separated names."""
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"name each schedule between the commas, e.g. 1f1b,zb_h1; got {short_repr(text)}")
    return _once(names, text)


def _add_search_parser(sub: Any) -> None:
    """``hp search``: every layout of a device count, planned and ranked by step time."""
    search = sub.add_parser(
        "search", help="every parallel layout of a device count, recompute planned, ranked by step time",
        description="Enumerate every dp cp tp pp vpp ep etp layout multiplying to --devices, every micro-batch size and "
                    "ZeRO level the runtime runs; reject those that cannot work (counted by reason), plan recompute for "
                    "the rest and rank them by step time (see docs/search.md).",
    )
    search.add_argument("--model", required=True, help="a preset name (see 'hp models') or a Hugging Face config.json / folder")
    search.add_argument("--num-layers", type=_layers, help="keep the first N body layers")
    search.add_argument("--devices", type=_degree, required=True, help="the device count every layout multiplies to")
    search.add_argument("--hardware", required=True, help="hardware preset: its memory bounds the plans, its rates price them")
    search.add_argument("--global-batch-size", type=_batch, default=1024, help="sequences per step (default 1024)")
    search.add_argument("--seq-len", type=_seq_len, default=4096, help="tokens per sequence (default 4096)")
    search.add_argument("--runtime", default="generic", help="runtime profile (see 'hp plugins'); default generic")
    _add_runtime_option(search, config=False)
    search.add_argument("--optimizer", help="optimizer (see 'hp plugins'); default: the runtime's (adamw)")
    search.add_argument("--precision", metavar="RECIPE[,RECIPE...]",
                        help="low-precision GEMM recipe (see docs/precision.md); several, comma-separated, make the "
                             "recipe a search dimension: each is searched and the best layouts of all are ranked together; "
                             "default: the runtime's (bf16)")
    for where, flag in (("first", "start"), ("last", "end")):
        search.add_argument(f"--high-precision-layers-at-{flag}", type=_kept_layers, default=None, metavar="N",
                            help=f"under a low-precision recipe, keep the {where} N body layers' GEMMs in the compute "
                                 f"dtype (precision.high_precision_layers_at_{flag}; Megatron-LM --first-last-layers-bf16 "
                                 f"--num-layers-at-{flag}-in-bf16 N): fixed in every layout, not searched; a pipeline "
                                 "whose stages hold fewer body layers is rejected (docs/precision.md); default 0")
    search.add_argument("--top", type=_positive, default=10, help="how many of the fastest layouts to show (default 10)")
    search.add_argument("--fix", type=_fix, action="append", default=[], metavar="NAME=N",
                        help="hold a degree fixed: dp, cp, tp, pp, vpp, ep, etp, zero, mbs (repeatable)")
    search.add_argument("--reserve", type=_reserve, metavar="SIZE", help=_RESERVE_HELP)
    search.add_argument("--schedules", type=_names, metavar="NAME,NAME,...",
                        help="pipeline schedules to search, a dimension of the search (see 'hp plugins'); default: "
                             "1f1b, or interleaved_1f1b with vpp > 1")
    search.add_argument("--workers", type=_workers, default=1,
                        help="processes bounding, refining and planning candidates (default 1: in this process; at most the "
                             "CPUs there are); "
                             "with --executor dask, the local cluster's worker processes")
    search.add_argument("--executor", type=_executor, default="process", metavar="KIND",
                        help="where the tasks run: process (a process pool of --workers; the default), dask (a local "
                             "Dask cluster of --workers processes) or dask=SCHEDULER_ADDRESS (a running Dask "
                             "cluster, e.g. dask=tcp://10.0.0.1:8786); dask needs the extra 'dask'")
    search.add_argument("--json", action="store_true", help="print JSON instead of the table (no progress bar)")
    search.add_argument("--csv", metavar="FILE", help="write the top K as CSV, one row per layout (columns: docs/search.md)")
    search.add_argument("--plot", metavar="FILE.png", help="plot the top K's step time against peak memory (extra 'plots': matplotlib)")
