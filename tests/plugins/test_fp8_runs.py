"""docs/precision.md's table of measured FP8 runs is what ``benchmarks/fp8_runs.py`` prints today, and its data file is complete."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("fp8_runs", ROOT / "benchmarks" / "fp8_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_run_states_its_layout_and_provenance():
    data = json.loads((ROOT / "tests" / "plugins" / "data" / "fp8_measured_runs.json").read_text(encoding="utf-8"))
    for row in data["rows"]:
        if "runtime_options" in row:
            assert row["runtime_options_source"] in data["sources"], row["id"]
        assert row["source"] in data["sources"], row["id"]
        assert row["split"] == "held_out", row["id"]  # nothing is fitted to these runs
        assert row["gpus"] % (row["tp"] * row["pp"] * row["cp"]) == 0, row["id"]
        for key in ("model", "hardware", "recipe", "global_batch_size", "micro_batch_size", "seq_len", "tokens_per_second_per_gpu"):
            assert key in row, (row["id"], key)


def _prose(page: str) -> str:
    """The page's prose (its tables taken out) as one line, so a figure is found across a line break."""
    return " ".join(" ".join(line for line in page.splitlines() if not line.startswith("|")).split())


def test_precision_page_table_is_current():
    runs = _module()
    found = runs.results()
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    assert runs.section(found) in page, "regenerate with: python benchmarks/fp8_runs.py"
    for r in found:
        assert (r["as_run_seconds"] is None) == r["id"].startswith("nemo"), r["id"]  # only NeMo 24.07 states no overlaps


def test_precision_page_prose_states_the_table_s_figures():
    """Pins of the page's prose to today's figures (the table itself is checked exactly above): each range or
    bound the prose states is the rounded extreme of the rows it names, so a change that moves them fails here
    until the prose is rewritten."""
    found = _module().results()
    prose = _prose((ROOT / "docs" / "precision.md").read_text(encoding="utf-8"))
    speedups = [round(r["bf16_seconds"] / r["estimated_seconds"], 2) for r in found]
    assert f"is {min(speedups):.2f}-{max(speedups):.2f} (above 1.5 on five rows," in prose
    assert sum(s > 1.5 for s in speedups) == 5
    h100 = [r for r in found if r["id"].startswith("mb") and r["hardware"] == "h100-sxm"]
    b200 = [r for r in found if r["hardware"] == "b200"]
    nemo70 = next(r for r in found if r["id"] == "nemo24.07-h100-llama3-70b-fp8")
    assert (f"H100 rows of Megatron-Bridge within {max(abs(r['error']) for r in h100):.1%} and NeMo 24.07's "
            f"Llama-3-70B row within {abs(nemo70['error']):.1%}") in prose
    h100_as_run = [r["as_run_error"] for r in h100]
    slow = [r["as_run_error"] for r in b200]
    assert (f"same H100 rows come out {min(h100_as_run):+.1%} to {max(h100_as_run):+.1%} and the B200 rows "
            f"{min(slow):.1%}-{max(slow):.1%} slow").replace("%-", "-") in prose
    assert all(r["as_run_seconds"] < r["estimated_seconds"] for r in b200 + h100)  # "hide": overlaps only lower a step


def test_memory_rows_state_their_provenance_and_baselines():
    data = json.loads((ROOT / "tests" / "plugins" / "data" / "fp8_measured_runs.json").read_text(encoding="utf-8"))
    ids = {row["id"]: row for row in data["memory_rows"]}
    for row in data["memory_rows"]:
        assert row["source"] in data["sources"], row["id"]
        assert row["split"] == "held_out", row["id"]
        assert row["check"] in ("absolute", "baseline", "recipe_effect"), row["id"]
        if row["check"] == "absolute":
            assert not row["compile"], row["id"]  # torch.compile is not priced: only eager rows are absolute
        if row["check"] == "recipe_effect":
            base = ids[row["baseline"]]
            assert base["recipe"] == "bf16" and base["compile"] == row["compile"], row["id"]
            assert (base["gpus"], base["local_batch_size"]) == (row["gpus"], row["local_batch_size"]), row["id"]


def test_precision_page_memory_table_is_current():
    runs = _module()
    found = runs.memory_results()
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    assert runs.memory_section(found) in page, "regenerate with: python benchmarks/fp8_runs.py"
    by_id = {r["id"]: r for r in found}
    for name in ("tt2412-8b-8gpu-float8-compile", "tt2412-8b-128gpu-float8-compile", "tt-h100-llama3-8b-tensorwise"):
        assert by_id[name]["effect"] < 1.0, name  # the float8 all-gather lowers the peak (the page's prose)


def test_precision_page_memory_prose_states_the_table_s_figures():
    """Pins of the memory section's prose to today's figures (the table is checked exactly above)."""
    found = {r["id"]: r for r in _module().memory_results()}
    prose = _prose((ROOT / "docs" / "precision.md").read_text(encoding="utf-8"))
    tensorwise = [r for r in found.values() if r["recipe"] == "torchao-float8-tensorwise"]
    assert len(tensorwise) == 6
    assert f"within {max(abs(r['error']) for r in tensorwise):.1%} on all six rows" in prose
    rowwise = [r for k, r in found.items() if k.startswith("ao-") and r["recipe"] == "torchao-float8-rowwise"]
    assert f"within {max(abs(r['error']) for r in rowwise):.1%} on torchao's three rows" in prose
    assert f"misses it by {found['tt-h100-llama3-8b-rowwise']['error']:.1%}" in prose
    # The eager bf16 rows are max reserved GiB; hp prices allocated bytes, so both sit below (docs/precision.md).
    eight, many = found["tt2412-8b-8gpu-bf16"]["error"], found["tt2412-8b-128gpu-bf16"]["error"]
    assert f"bf16, 8 and 128 GPUs ({eight:.1%}, {many:.1%})" in prose


def test_mpt_fsdp_rows_state_their_provenance_and_the_page_table_is_current():
    data = json.loads((ROOT / "tests" / "plugins" / "data" / "fp8_measured_runs.json").read_text(encoding="utf-8"))
    source = data["sources"]["llm-foundry-benchmarks"]
    assert "8c8dd48f72168c5d51e2f7b151595892a8fba43d" in source and "Format.HYBRID" in source
    for row in data["fsdp_rows"]:
        cells = [c.strip() for c in row["row"].strip(" |").split("|")]
        assert row["source"] == "llm-foundry-benchmarks" and row["split"] == "held_out" and cells[14] == "amp_fp8"
        assert row["recipe"] == "fp8-delayed" and row["gpus"] == int(cells[2]) and row["seq_len"] == int(cells[1])
        assert row["global_batch_tokens"] == int(cells[13]) and row["tokens_per_second"] == int(cells[11])
        assert row["runtime_options"]["fsdp_implementation"] == "fsdp1"  # Composer's FSDP1, as the bf16 MPT rows
    runs = _module()
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    found = runs.fsdp_results()
    assert runs.fsdp_section(found) in page, "regenerate with: python benchmarks/fp8_runs.py"
    errors = [r["error"] for r in found]
    assert f"They are priced within {100 * min(errors):+.1f}% to {100 * max(errors):+.1f}%" in _prose(page)


def _cells(row: dict) -> list[str]:
    """The summary row's cells after its first (the system, or the model in 25.11's per-system tables)."""
    text = row["row"].split(": ", 1)[1] if row["row"].startswith("DGX-") else row["row"]
    return [c.strip() for c in text.strip(" |").split("|")][1:]


def test_moe_rows_state_their_summary_row_and_release():
    data = json.loads((ROOT / "tests" / "plugins" / "data" / "fp8_measured_runs.json").read_text(encoding="utf-8"))
    runs = _module()
    assert len(data["moe_rows"]) == 16 and len(data["moe_rows_skipped"]) == 6
    for row in data["moe_rows"]:
        source = data["sources"][row["source"]]
        assert "067f987df03b8355b03192d88d70f1709fedf51a" in source and row["source"] == row["runtime_options_source"], row["id"]
        assert row["split"] == "held_out" and row["class"] in runs.MOE_CLASSES, row["id"]
        # Cells: #-GPUs, precision, GBS, MBS, sequence length, [FSDP,] TP, PP, CP, VP, EP, [GA,] tokens/s/GPU, TFLOP/s/GPU.
        cells = _cells(row)
        assert int(cells[0]) == row["gpus"] and int(cells[2]) == row["global_batch_size"], row["id"]
        assert int(cells[3]) == row["micro_batch_size"] and int(cells[4]) == row["seq_len"], row["id"]
        assert ("MX" in cells[1]) == (row["recipe"] == "mxfp8") and (row["hardware"] == "b200") == (row["recipe"] == "mxfp8")
        layout = cells[5:10] if len(cells) == 12 else cells[6:11]  # 26.06 states no FSDP column
        tp, pp, cp, vp, ep = (1 if c == "n/a" else int(c) for c in layout)
        assert (tp, pp, cp, vp, ep) == (row["tp"], row["pp"], row["cp"], row["vpp"], row["ep"]), row["id"]
        assert int(cells[-2]) == row["tokens_per_second_per_gpu"], row["id"]
        assert row["not_priced"], row["id"]  # at least the FP8 grouped GEMMs' dense speedup


def test_precision_page_moe_table_is_current_and_its_prose_states_its_figures():
    runs = _module()
    found = runs.moe_results()
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    assert runs.moe_section(found) in page, "regenerate with: python benchmarks/fp8_runs.py"
    prose = _prose(page)
    by_id = {r["id"]: r for r in found}
    for cls in runs.MOE_CLASSES:
        errors = [abs(r["error"]) for r in found if r["class"] == cls]
        assert f"{cls.rsplit(', ', 1)[1]} rows {sum(errors) / len(errors):.1%}" in prose, cls
    slow = [by_id[k]["error"] for k in ("mb25.11-b200-qwen3-30b-a3b-mxfp8", "mb26.02-b200-qwen3-30b-a3b-mxfp8")]
    assert f"micro-batch 1 are priced {-max(slow):.0%}-{-min(slow):.0%} too fast" in prose
    speedups = [r["bf16_seconds"] / r["estimated_seconds"] for r in found]
    assert f"FP8 speedup over bf16 on these rows is {min(speedups):.2f}-{max(speedups):.2f}" in prose
