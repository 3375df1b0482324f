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


def test_precision_page_table_is_current():
    runs = _module()
    found = runs.results()
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    assert runs.section(found) in page, "regenerate with: python benchmarks/fp8_runs.py"
    # What the page says of them: the Megatron-Bridge H100 rows within 10%, the FP8 speedup over hp's own bf16 1.4-1.56 (1.55 shown).
    for r in found:
        assert 1.4 <= r["bf16_seconds"] / r["estimated_seconds"] <= 1.56, r["id"]
        if r["id"].startswith("mb") and r["hardware"] == "h100-sxm":
            assert abs(r["error"]) <= 0.10, r["id"]
            assert -0.21 <= r["as_run_error"] <= -0.10, r["id"]  # as run: the overlaps hide what filled the gap
        if r["hardware"] == "b200":
            assert 0.14 <= r["as_run_error"] <= 0.19, r["id"]
            assert r["as_run_seconds"] < r["estimated_seconds"], r["id"]
        assert (r["as_run_seconds"] is None) == r["id"].startswith("nemo"), r["id"]


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
    # What the page says of them: float8 tensorwise's effect within 0.5%; the eager bf16 rows below (reserve unpriced).
    for name in ("tt2412-8b-8gpu-float8-compile", "tt2412-8b-128gpu-float8-compile", "tt-h100-llama3-8b-tensorwise"):
        assert abs(by_id[name]["error"]) <= 0.005, name
        assert by_id[name]["effect"] < 1.0, name  # the float8 all-gather lowers the peak
    # The eager bf16 rows are max reserved GiB; hp prices allocated bytes (per-op SAC as the tracker measures it), so
    # both sit below, by a like share (docs/precision.md): -16.7% at 8 GPUs, -13.3% at 128.
    for name, low, high in (("tt2412-8b-8gpu-bf16", -0.18, -0.15), ("tt2412-8b-128gpu-bf16", -0.15, -0.12)):
        assert low < by_id[name]["error"] < high, name
