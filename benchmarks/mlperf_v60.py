"""hp's step time against MLPerf Training v6.0's measured runs (tests/plugins/data/mlperf_v60_measured.json).

Run: ``python benchmarks/mlperf_v60.py`` (``--write``: also into docs/mlperf_v60.md between its markers). Every row is
held out: its rows were collected on 2026-12-04, after hp's figures were set (their layout, recipe and options read
from each submission's config or log before any was priced), and no figure of hp was fitted to them (the recipe
``nvfp4-fp8-attention`` was added for what three 8B rows ran; the rows collected after it are held out from it too,
docs/mlperf_v60.md).

The dense rows (``llama31_8b_rows``, ``llama31_405b_rows``, ``llama2_70b_lora_rows``) have the shape of
tests/plugins/data/mlperf_measured.json's v5.x rows and are priced as benchmarks/mlperf_runs.py prices those
(:func:`mlperf_runs.results`: the ``megatron`` runtime with the row's options and recipe, as run). The MoE rows
(``deepseekv3_671b_rows``, ``gpt_oss_20b_rows``) have the shape of the Megatron-Bridge MoE rows of
tests/plugins/data/fp8_measured_runs.json and are priced as benchmarks/fp8_runs.py prices those
(:func:`fp8_runs.price_moe`: the model preset, the recompute modules and the options each row states). A MoE row
whose benchmark model differs from hp's preset (``model_differs``: GPT-OSS 20B's vocabulary, say) is refused, not
priced as the preset. The measured step time of a row is the median over its logs of each log's median sampled step
(:func:`mlperf_runs.measured_seconds`; benchmarks/mlperf_logs.py ``run_facts``: v6.0's per-step records, every ``log_every_n_steps`` steps, after the first
five); each log's block mean (``block_facts``) is kept beside it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import fp8_runs  # noqa: E402
import mlperf_logs  # noqa: E402
import mlperf_runs  # noqa: E402

DATA = HERE.parent / "tests" / "plugins" / "data" / "mlperf_v60_measured.json"
STEPS = HERE.parent / "tests" / "plugins" / "data" / "mlperf_v60_step_records.json"
PAGE = HERE.parent / "docs" / "mlperf_v60.md"
DENSE = (("llama31_8b_rows", "Llama 3.1 8B"), ("llama31_405b_rows", "Llama 3.1 405B"),
         ("llama2_70b_lora_rows", "Llama 2 70B LoRA"))
MOE = (("deepseekv3_671b_rows", "DeepSeek-V3 671B"), ("gpt_oss_20b_rows", "GPT-OSS 20B"))
START, END = "<!-- mlperf-v60:start -->", "<!-- mlperf-v60:end -->"


def load() -> dict:
    """The data file."""
    return json.loads(DATA.read_text(encoding="utf-8"))


def log_text(log: dict) -> str:
    """One log of the step-record file (``STEPS``: its run facts and every ``train_step_time`` record as
    ``[lineno, samples_count, step, seconds, time_ms, loss beside]``) as the ``:::MLLOG`` lines it copies, for
    benchmarks/mlperf_logs.py to read as it reads a whole log."""
    lines = [{"key": key, "value": value, "metadata": {}} for key, value in log["facts"].items()]
    for lineno, samples, step, seconds, stamp, loss in log["records"]:
        value = {"train_step_time": seconds, **({mlperf_logs.LOSS_KEY: None} if loss else {})}
        metadata = {"lineno": lineno, **({"samples_count": samples} if samples is not None else {}),
                    **({"step": step} if step is not None else {})}
        lines.append({"key": "tracked_stats", "value": value, "metadata": metadata, "time_ms": stamp})
    return "\n".join(mlperf_logs.PREFIX + json.dumps({"namespace": "", "event_type": "POINT_IN_TIME", **line})
                     for line in lines)


def log_figures(log: dict) -> tuple[float, float]:
    """A log's median sampled step after the first five and its block mean after the first block (seconds)."""
    text = log_text(log)
    return mlperf_logs.run_facts(text)["median_step_seconds"], mlperf_logs.block_facts(text)["block_mean_step_seconds"]


def moe_results(rows: list[dict], registry) -> list[dict]:
    """Each MoE row priced as run and in bf16 on the same layout (:func:`mlperf_runs.results` through
    :func:`fp8_runs.price_moe`); a row not stated to be its preset's model is refused."""
    for row in rows:
        if row.get("model_differs", True):  # absent is not "the same": a row states that its model is the preset's
            raise ValueError(f"{row['id']}: the benchmark's model is not stated to be the {row['model']} preset "
                             "(model_differs); state the difference to hp or leave the row out")
    return mlperf_runs.results(rows, registry, price=fp8_runs.price_moe)


def _moe_layout(row: dict) -> str:
    """A MoE row's layout: :func:`mlperf_runs._layout` with its expert-parallel degree."""
    return mlperf_runs._layout(row).replace(f" dp{row['dp']},", f" ep{row['ep']} dp{row['dp']},")


def tables(registry) -> list[tuple[str, list[dict], Callable[[dict], str]]]:
    """``(title, priced rows, layout column)`` of every table of docs/mlperf_v60.md that holds rows, in its order."""
    data = load()
    found = [(title, mlperf_runs.results, mlperf_runs._layout, data.get(key) or []) for key, title in DENSE]
    found += [(title, moe_results, _moe_layout, data.get(key) or []) for key, title in MOE]
    return [(title, priced(rows, registry), layout) for title, priced, layout, rows in found if rows]


def sections(registry=None) -> str:
    """Every table of docs/mlperf_v60.md with its heading, then the summary over all rows."""
    from hp_core import api

    parts, errors = [START, ""], []
    for title, found, layout in tables(registry or api.build_registry()):
        errors += [r["error"] for r in found]
        parts += [f"#### {title}", "", mlperf_runs.section(found, layout=layout)]
    parts += [f"All v6.0 rows, held out: {fp8_runs._summary(errors)}.", "", END]
    return "\n".join(parts) + "\n"


def main() -> None:
    text = sections()
    print(text, end="")
    if "--write" in sys.argv[1:]:
        from marked_section import write_section

        write_section(PAGE, START, END, text.rstrip("\n"))  # the page keeps its own line break after the end marker


if __name__ == "__main__":
    main()
