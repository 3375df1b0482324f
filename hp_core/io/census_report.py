"""Display of ``hp census``, separated from the data: its stable JSON and its table.

The JSON carries, per kind under ``kinds.<kind>``, the record's fields by
their names (``saved``, ``saved_tp``, ``working``, ``working_tp``: bytes per
token at micro-batch 1; ``per_op`` and ``policies`` where stated) and its
``provenance``; beside them, under ``formulas.<kind>``, what the formulas state
for the same kind configured as the measured implementation runs.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table

from hp_core.engine.census import CensusRun
from hp_core.types import CensusRecord

__all__ = ["census_table", "census_to_json", "record_to_json"]


def record_to_json(record: CensusRecord) -> dict[str, Any]:
    """A record's fields by their names."""
    doc: dict[str, Any] = {
        "saved": record.saved,
        "saved_tp": record.saved_tp,
        "working": record.working,
        "working_tp": record.working_tp,
        "per_op": {name: {"saved": p.saved, "saved_tp": p.saved_tp} for name, p in record.per_op.items()},
        "policies": {name: {"saved": p.saved, "saved_tp": p.saved_tp} for name, p in record.policies.items()},
        "provenance": dict(record.provenance),
    }
    return doc


def census_to_json(run: CensusRun) -> dict[str, Any]:
    """The stable JSON document of ``hp census``."""
    return {
        "model": run.model,
        "source": run.source,
        "seq_len": run.seq_len,
        "attention": run.attention,
        "tp_degrees": list(run.tp_degrees),
        "seconds": round(run.seconds, 3),
        "kinds": {kind: record_to_json(record) for kind, record in run.records.items()},
        "formulas": {kind: record_to_json(record) for kind, record in run.formulas.items()},
    }


def _bytes(value: float) -> str:
    return f"{value:,.0f}"


def census_table(run: CensusRun) -> Table:
    """Per kind: the record's four numbers, and its saved bytes at tp 1 beside the formulas'."""
    title = (
        f"{run.model}: census '{run.source}', seq {run.seq_len}, attention {run.attention}, "
        f"TP measured at {', '.join(map(str, run.tp_degrees))} ({run.seconds:.1f} s)"
    )
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("Kind", "saved", "saved_tp", "working", "working_tp", "formulas saved+tp", "census saved+tp", "diff"):
        table.add_column(column, justify="left" if column == "Kind" else "right")
    for kind in sorted(set(run.records) | set(run.formulas)):
        record, formulas = run.records.get(kind), run.formulas.get(kind)
        measured = record.saved + record.saved_tp if record is not None else None
        stated = formulas.saved + formulas.saved_tp if formulas is not None else None
        diff = f"{(stated - measured) / measured:+.2%}" if measured and stated is not None else "-"
        cells = [_bytes(getattr(record, f)) if record is not None else "-" for f in ("saved", "saved_tp", "working", "working_tp")]
        table.add_row(kind, *cells, _bytes(stated) if stated is not None else "-", _bytes(measured) if measured is not None else "-", diff)
    table.caption = "bytes per token at micro-batch 1; saved_tp and working_tp are stated at tp = 1; diff: formulas vs census"
    return table
