"""hp's step time against MLPerf Training's measured Llama 3.1 pretraining runs (tests/plugins/data/mlperf_measured.json).

Run: ``python benchmarks/mlperf_runs.py`` prints the table docs/precision.md shows ("MLPerf Training v5.0 and v5.1:
Llama 3.1 405B"): per result directory its round, device, recipe and layout, the measured step time (the median over
the directory's logs of each log's median ``train_step_time``), hp's step time as run, the error and the
difference in seconds, hp's bf16 time
of the same layout, hp's MFU (against the bf16 peak and the recipe's peak); then per class (device x recipe) the
held-out rows' mean absolute error, range and count within 10%; then the same table of the v5.1 Llama 3.1 8B rows
(``llama31_8b_rows``; the page's "MLPerf Training v5.1: Llama 3.1 8B").

Then the GPT-3 175B table ("MLPerf Training v3.1 and v4.1: GPT-3 175B", ``gpt3_175b_rows``: NeMo 1 runs of NVIDIA,
Oracle and Azure+NVIDIA on H100 and NVIDIA's B200 preview; the step time NeMo's ``train_step_timing``), its summary per
class and per device, the B200 preview apart (:func:`gpt3_totals`); each GPT-3 row's model is its ``model_config``
(:func:`fp8_runs.row_model`, as the DGX Cloud GPT-3 rows).

Then the Llama 2 70B LoRA table ("MLPerf Training v5.0 and v5.1: Llama 2 70B LoRA", ``llama2_70b_lora_rows``: v5.1's
NVIDIA FP8 runs on 72 and 512 GB200 and GB300 GPUs, Lambda's and Supermicro's of NVIDIA's config on 72 GB300s; v5.0's
runs of NVIDIA's v5.0 implementation on 4 to 512 B200 and GB200 GPUs by NVIDIA and six partners and Wiwynn's v5.1 runs of
it on 72 and 576 GB200s, the frozen base held in FP8, recipe fp8-delayed-param-gather-fp8-attention; the step time the step-weighted mean of each log's training blocks
after the first, mlperf_logs.block_facts; each row's model its ``hf`` config fine-tuned with its ``lora``,
:func:`fp8_runs.row_model`; per class (device x recipe x round, :func:`round_class`: the two rounds' rows apart) and over all rows).

Each row is priced as benchmarks/fp8_runs.py prices the Megatron-Bridge rows as run (:func:`fp8_runs.price` with
``as_run=True``): the ``megatron`` runtime with the row's ``runtime_options``, the row's recipe, its hardware preset,
and :func:`fp8_runs.layout` (the embedding and the loss counted in the pipeline split where ``layers_per_stage`` is
text: ASYM_PP_EMBED / ASYM_PP_LOSS). Nothing is fitted to these rows. :func:`price_row`, :func:`results` and
:func:`section` take any list of rows of the same shape (``llama31_8b_rows`` of the same file too).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import fp8_runs  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "plugins" / "data" / "mlperf_measured.json"
DEVICES = {"h100-sxm": "H100", "h200": "H200", "b200": "B200", "b300": "B300", "gb200": "GB200", "gb300": "GB300"}
GPT3_KEY = "gpt3_175b_rows"
LORA_KEY = "llama2_70b_lora_rows"
# The GPT-3 rows summarised per device, each apart: the H100 rows of both rounds and NVIDIA's v4.1 B200 preview (8 nodes,
# a preview submission).
GPT3_DEVICES = (("h100-sxm", "H100 (v3.1 and v4.1)"), ("b200", "B200 preview (v4.1, 64 GPUs; summarised apart)"))


def load(key: str = "llama31_405b_rows") -> list[dict]:
    """The rows of the data file under *key*."""
    return json.loads(DATA.read_text(encoding="utf-8"))[key]


def measured_seconds(row: dict) -> float:
    """The row's measured step time: the median of its logs' medians (``log_median_step_seconds``), or of its logs'
    block means where the logs state one step time a training block (``log_block_mean_step_seconds``: the LoRA rows,
    mlperf_logs.block_facts)."""
    return statistics.median(row.get("log_block_mean_step_seconds") or row["log_median_step_seconds"])


def row_class(row: dict) -> str:
    """The class a row is summarised in: its device and recipe."""
    return f"{DEVICES.get(row['hardware'], row['hardware'])}, {row['recipe']}"


def price_row(row: dict, registry, recipe: str | None = None):
    """hp's step estimate of *row* as run (its runtime options) under *recipe* (the row's when ``None``)."""
    return fp8_runs.price(row, registry, recipe, as_run=True)


def round_class(row: dict) -> str:
    """A row's class with its round (the LoRA table's: the v5.0 and v5.1 rows run different implementations of the
    same recipe on the same devices, summarised apart)."""
    return f"{row_class(row)}, {row['round']}"


def results(rows: list[dict] | None = None, registry=None, classify=None, price=None) -> list[dict]:
    """Each row priced as run, and in bf16 on the same layout and options: measured and hp step time, the error; its
    class *classify* (row -> text; :func:`row_class` where ``None``); *price* ((row, registry, recipe) -> step time;
    :func:`price_row` where ``None``, benchmarks/mlperf_v60.py's MoE rows :func:`fp8_runs.price_moe`)."""
    from hp_core import api

    registry = registry or api.build_registry()
    found = []
    for row in load() if rows is None else rows:
        measured = measured_seconds(row)
        estimated = (price or price_row)(row, registry, None)
        bf16 = (price or price_row)(row, registry, "bf16")
        found.append({"id": row["id"], "round": row["round"], "class": (classify or row_class)(row), "row": row,
                      "measured_seconds": measured, "estimated_seconds": estimated.step_seconds,
                      "error": (estimated.step_seconds - measured) / measured, "bf16_seconds": bf16.step_seconds,
                      "mfu": estimated.mfu, "mfu_recipe_peak": estimated.mfu_recipe_peak})
    return found


def _layout(row: dict) -> str:
    degrees = " ".join(f"{k}{row[k]}" for k in ("tp", "pp", "vpp", "cp") if row[k] > 1)
    micro_batches = row["global_batch_size"] // (row["dp"] * row["micro_batch_size"])
    return (f"{row['gpus']} GPUs {degrees + ' ' if degrees else ''}dp{row['dp']}, mbs {row['micro_batch_size']}, gbs {row['global_batch_size']} "
            f"({micro_batches} micro-batches a step)")


def gpt3_totals(found: list[dict]) -> list[str]:
    """The GPT-3 rows' summary lines per device (:data:`GPT3_DEVICES`), in place of one line over every row."""
    lines = []
    for hardware, label in GPT3_DEVICES:
        errors = [r["error"] for r in found if r["row"]["hardware"] == hardware]
        if errors:
            lines.append(f"- {label}, held out: {fp8_runs._summary(errors)}.")
    return lines


def section(found: list[dict], totals=None, layout=None) -> str:
    """The table and per-class summary docs/precision.md shows (tests/plugins/test_mlperf_runs.py checks it is current);
    *totals* (found -> lines) replaces the closing line over all rows (:func:`gpt3_totals`); *layout* (row -> text)
    the layout column's (:func:`_layout` where ``None``; benchmarks/mlperf_v60.py's MoE rows add their EP)."""
    layout = layout or _layout
    lines = ["| run | round | class | layout | measured s | hp as run s | error | measured - hp s | hp bf16 s "
             "| hp speedup over bf16 | hp MFU (bf16 peak / recipe peak) |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in found:
        lines.append(f"| `{r['id']}` | {r['round']} | {r['class']} | {layout(r['row'])} | {r['measured_seconds']:.3f} "
                     f"| {r['estimated_seconds']:.3f} | {r['error']:+.1%} | {r['measured_seconds'] - r['estimated_seconds']:+.3f} "
                     f"| {r['bf16_seconds']:.3f} "
                     f"| {r['bf16_seconds'] / r['estimated_seconds']:.2f} | {r['mfu']:.1%} / {r['mfu_recipe_peak']:.1%} |")
    lines.append("")
    for cls in dict.fromkeys(r["class"] for r in found):
        errors = [r["error"] for r in found if r["class"] == cls]
        lines.append(f"- {cls}: {fp8_runs._summary(errors)}.")
    if totals is None:
        lines.append(f"- all rows, held out: {fp8_runs._summary([r['error'] for r in found])}.")
    else:
        lines += totals(found)
    return "\n".join(lines) + "\n"


def gpt3_section(registry=None) -> str:
    """The GPT-3 175B table docs/precision.md shows."""
    return section(results(load(GPT3_KEY), registry), gpt3_totals)


def lora_section(registry=None) -> str:
    """The Llama 2 70B LoRA table docs/precision.md shows (``llama2_70b_lora_rows``)."""
    return section(results(load(LORA_KEY), registry, classify=round_class))


def main() -> None:
    from hp_core import api

    registry = api.build_registry()  # one for the four tables
    print(section(results(registry=registry)), end="")
    print()
    print(section(results(load("llama31_8b_rows"), registry)), end="")
    print()
    print(gpt3_section(registry), end="")
    print()
    print(lora_section(registry), end="")


if __name__ == "__main__":
    main()
