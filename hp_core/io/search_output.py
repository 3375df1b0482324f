"""A layout search written out: its stable JSON document, ``hp search --csv`` and ``--plot``.

:func:`search_to_json` is the JSON document of a
:class:`~hp_core.engine.search.SearchResult` (docs/json.md).
:func:`write_search_csv` writes one row per ranked candidate (columns:
:data:`CSV_COLUMNS`, described in docs/search.md), with the values of
:func:`search_to_json`: bytes in ``_bytes``, times in
``_seconds``, lists and plans as JSON inside a cell. :func:`plot_search`
draws each candidate's step time against its peak memory, labelled with its
rank, with the spread of its stages' peaks and the device's memory, for
choosing between a fast layout and one with room to spare. Both files are
replaced atomically (:func:`hp_core.io.files.atomic_write`); the plot needs the
optional extra ``plots`` (matplotlib).
"""

from __future__ import annotations

import csv
import json
import os
from typing import Any, Iterator

from hp_core.engine.recompute.layout import range_key, setting_value
from hp_core.engine.search import Candidate, SearchResult
from hp_core.io.recompute_output import unproven_json
from hp_core.io.files import atomic_write, check_png, pyplot
from hp_core.specs import Setting

__all__ = ["CSV_COLUMNS", "check_plot", "plot_search", "search_rows", "search_to_json", "write_search_csv"]

# One row per ranked candidate, in this order (docs/search.md, "CSV and plot").
CSV_COLUMNS = (
    "rank", "dp", "cp", "tp", "pp", "vpp", "ep", "etp", "sp", "zero", "micro_batch_size", "schedule",
    "layers_per_stage", "step_seconds", "mfu", "peak_bytes", "stage_peaks_bytes", "recompute_default",
    "recompute_layers", "plan", "model", "runtime", "hardware", "devices", "global_batch_size", "seq_len",
    "precision_recipe", "mfu_dtype",
)
_GIB = 2**30
# The plot numbers every point by rank and lists this many layouts beside it.
_LISTED = 30


def search_to_json(result: SearchResult) -> dict[str, Any]:
    """The stable JSON document of a search: bytes in ``_bytes``, times in ``_seconds``."""
    return {
        "model": result.model,
        "runtime": result.runtime,
        "hardware": result.hardware,
        "devices": result.devices,
        "global_batch_size": result.global_batch_size,
        "seq_len": result.seq_len,
        "considered": result.considered,
        "planned": result.planned,
        "fitting": result.fitting,
        "rejected": dict(result.rejected),
        "high_precision_layers": {"at_start": result.high_precision_layers[0],
                                  "at_end": result.high_precision_layers[1]},
        "compute_dtype_kinds": list(result.compute_dtype_kinds),
        **dict(result.precision),
        "mfu_dtype": result.mfu_dtype,
        "top": [
            {
                "rank": rank,
                "layout": {
                    "dp": c.layout.dp, "cp": c.layout.cp, "tp": c.layout.tp, "pp": c.layout.pp, "vpp": c.layout.vpp,
                    "ep": c.layout.ep, "etp": c.layout.etp, "sp": c.layout.tp > 1, "zero": c.layout.zero,
                    "micro_batch_size": c.layout.micro_batch_size, "schedule": c.layout.schedule,
                    "layers_per_stage": list(c.layout.layers_per_stage) if c.layout.layers_per_stage else None,
                },
                "step_seconds": c.step_seconds,
                "mfu": c.mfu,
                "peak_bytes": c.peak_bytes,
                "stage_peaks_bytes": list(c.stage_peaks_bytes),
                "recompute": {
                    "default": setting_value(c.recompute.default),
                    "layers": {range_key(first, last): setting_value(s) for first, last, s in c.recompute.layers},
                },
                "plan": c.plan_summary,
                "unproven_states": unproven_json(c.unproven),
            }
            for rank, c in enumerate(result.top, 1)
        ],
    }


def search_rows(result: SearchResult) -> Iterator[dict[str, Any]]:
    """The CSV rows of *result*: one per candidate of its top K, fastest first."""
    doc = search_to_json(result)
    context = {name: doc[name] for name in ("model", "runtime", "hardware", "devices", "global_batch_size", "seq_len",
                                            "precision_recipe", "mfu_dtype")}
    for entry in doc["top"]:
        layout = entry["layout"]
        default = entry["recompute"]["default"]
        yield {
            "rank": entry["rank"],
            **{name: layout[name] for name in ("dp", "cp", "tp", "pp", "vpp", "ep", "etp")},
            "sp": json.dumps(layout["sp"]),
            "zero": layout["zero"],
            "micro_batch_size": layout["micro_batch_size"],
            "schedule": layout["schedule"],
            "layers_per_stage": "" if layout["layers_per_stage"] is None else json.dumps(layout["layers_per_stage"]),
            "step_seconds": entry["step_seconds"],
            "mfu": entry["mfu"],
            "peak_bytes": entry["peak_bytes"],
            "stage_peaks_bytes": json.dumps(entry["stage_peaks_bytes"]),
            "recompute_default": default if isinstance(default, str) else json.dumps(default),
            "recompute_layers": json.dumps(entry["recompute"]["layers"]),
            "plan": entry["plan"],
            **context,
        }


def _recomputes(candidate: Candidate) -> bool:
    """Whether the candidate's plan recomputes or offloads anything."""
    plan = candidate.recompute
    return any(s != Setting() for s in (plan.default, *(setting for _, _, setting in plan.layers)))


def write_search_csv(result: SearchResult, path: str | os.PathLike) -> None:
    """Replace *path* with *result*'s top K, one row per candidate (:data:`CSV_COLUMNS`); header only when nothing fits.

    Raises:
        ConfigError: *path* cannot be written (``--csv``).
    """

    def write(temporary: str) -> None:
        with open(temporary, "w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            writer.writerows(search_rows(result))

    atomic_write(path, write, ".csv", flag="--csv")


def check_plot(path: str | os.PathLike) -> None:
    """Refuse a plot before a search runs: *path* must end in ``.png`` and matplotlib must be installed.

    Raises:
        ConfigError: Either is not so (``--plot``).
    """
    check_png(path)
    pyplot()


def plot_search(result: SearchResult, path: str | os.PathLike, *, memory_bytes: int | None = None,
                reserve_bytes: int = 0, title: str = "") -> None:
    """Draw *result*'s top K as a PNG: step time against peak memory, one labelled point per candidate.

    Each point is a candidate's step time and its largest stage peak, with a
    vertical bar down to its smallest stage peak (the pipeline's imbalance),
    filled when its plan recomputes nothing, hollow when it recomputes (or
    offloads) some layers; the fastest is a star. Points are numbered by rank; beside the axes, the
    first 30 are listed with their layout, step time and peak. A horizontal
    line marks the device's memory (*memory_bytes*), a dashed one what the plans had to fit
    (memory less *reserve_bytes*) when a reserve was asked for.

    Raises:
        ConfigError: *path* does not end in ``.png``, matplotlib is not
            installed, or *path* cannot be written (``--plot``).
    """
    check_png(path)
    plt = pyplot()
    top = result.top
    listed = top[:_LISTED]
    figure = plt.figure(figsize=(12, 6), dpi=120)
    try:
        axes = figure.add_axes((0.07, 0.1, 0.55, 0.8))
        xs = [c.step_seconds for c in top]
        peaks = [c.peak_bytes / _GIB for c in top]
        lows = [min(c.stage_peaks_bytes, default=c.peak_bytes) / _GIB for c in top]
        if top:
            axes.vlines(xs, lows, peaks, colors="tab:blue", alpha=0.35, linewidth=2, label="stage peaks, lowest to highest")
            plain = [n for n in range(1, len(top)) if not _recomputes(top[n])]
            mixed = [n for n in range(1, len(top)) if _recomputes(top[n])]
            for shown, style in ((plain, dict(color="tab:blue", label="nothing recomputed")),
                                 (mixed, dict(facecolors="none", edgecolors="tab:blue", label="some layers recomputed"))):
                if shown:
                    axes.scatter([xs[n] for n in shown], [peaks[n] for n in shown], zorder=3, **style)
            axes.scatter(xs[:1], peaks[:1], color="tab:red", marker="*", s=160, zorder=4, label="fastest")
            for rank, (x, y) in enumerate(zip(xs, peaks), 1):
                axes.annotate(str(rank), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        else:
            axes.text(0.5, 0.5, "no layout fits", transform=axes.transAxes, ha="center", va="center")
        if memory_bytes is not None:
            axes.axhline(memory_bytes / _GIB, color="black", linewidth=1, label=f"device memory ({memory_bytes / _GIB:.1f} GiB)")
            if reserve_bytes:
                limit = (memory_bytes - reserve_bytes) / _GIB
                axes.axhline(limit, color="black", linewidth=1, linestyle="--", label=f"less the reserve ({limit:.1f} GiB)")
        axes.set_xlabel("step time (s, cost model, planned recompute)")
        axes.set_ylabel("peak memory (GiB)")
        figure.suptitle(title or f"{result.model}: fastest {len(top)} layouts on {result.devices} x {result.hardware}, "
                                 f"runtime {result.runtime}, global batch {result.global_batch_size} x {result.seq_len} tokens",
                        x=0.07, ha="left", fontsize=10)
        axes.grid(True, alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize=8, loc="best")
        width = max([len("layout")] + [len(c.layout.describe()) for c in listed])
        lines = [f"{'#':>3}  {'layout':<{width}}  {'step s':>7}  {'peak GiB':>8}"]
        lines += [f"{rank:>3}  {c.layout.describe():<{width}}  {c.step_seconds:>7.3f}  {c.peak_bytes / _GIB:>8.1f}"
                  for rank, c in enumerate(listed, 1)]
        if len(top) > len(listed):
            lines.append(f"  ... {len(top) - len(listed)} more in the CSV / JSON")
        figure.text(0.64, 0.9, "\n".join(lines), family="monospace", fontsize=7, va="top")
        atomic_write(path, lambda temporary: figure.savefig(temporary, format="png"), ".png", flag="--plot")
    finally:
        plt.close(figure)
