"""``hp-cases/2``: cases that give some stages' peaks, reserved beside allocated, step times, tokens/s/GPU or MFU;
an error for each figure given, with hand-derived expected values."""

from __future__ import annotations

import json

import pytest
import yaml

from hp_core.api import estimate, model_from_preset, step_time
from hp_core.specs import ParallelSpec

from cli_run import run

PARALLEL = {"dp": 2, "tp": 2, "pp": 2, "seq_len": 1024, "global_batch_size": 8}
CONFIG = {"model": "llama3-8b", "num_layers": 4, "runtime": "megatron", "hardware": "h100-sxm", "parallel": PARALLEL}


def _write(tmp_path, cases):
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"format": "hp-cases/2", "cases": cases}))
    return path


@pytest.fixture
def truth(registry):
    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    parallel = ParallelSpec(**PARALLEL)
    hardware = registry.hardware_preset("h100-sxm").spec
    peaks = [s.peak_bytes for s in estimate(model, parallel, registry=registry, runtime="megatron").stages]
    step = step_time(model, parallel, registry=registry, runtime="megatron", hardware=hardware)
    return peaks, step


def test_errors_for_each_figure_given(capsys, tmp_path, truth):
    peaks, step = truth
    world = 2 * 2 * 2
    tokens_per_gpu = 8 * 1024 / step.step_seconds / world  # global batch * seq_len / seconds / devices
    measured = {
        "source": "a test",
        "stages": [{"stage": "last", "allocated_bytes": peaks[1] * 2, "reserved_bytes": peaks[1] * 4}],
        "steps": [
            {"micro_batches": 4, "seconds": step.step_seconds * 2},  # global batch 8 = 4 x micro-batch 1 x dp 2
            {"global_batch_size": 8, "tokens_per_second_per_gpu": tokens_per_gpu / 2},
            {"micro_batches": 4, "mfu": step.mfu * 4},
        ],
    }
    status, out, err = run(capsys, "validate", _write(tmp_path, [{"name": "c", "config": CONFIG, "measured": measured}]),
                           "--json")
    assert status == 0, err
    (case,) = json.loads(out)["cases"]
    assert [(s["index"], s["quantity"], s["estimated_peak_bytes"]) for s in case["stages"]] == [
        (1, "allocated", peaks[1]), (1, "reserved", peaks[1])]
    assert [s["error"] for s in case["stages"]] == pytest.approx([-0.5, -0.75])
    seconds, tokens, mfu = case["steps"]
    assert (seconds["metric"], seconds["error"]) == ("seconds", pytest.approx(-0.5))
    assert tokens["metric"] == "tokens_per_second_per_gpu" and tokens["error"] == pytest.approx(1.0)
    assert tokens["estimated_value"] == pytest.approx(tokens_per_gpu)
    assert tokens["measured_seconds"] == pytest.approx(step.step_seconds * 2)  # half the throughput: twice the time
    assert mfu["metric"] == "mfu" and mfu["error"] == pytest.approx(-0.75)
    status, out, _ = run(capsys, "validate", tmp_path / "runs.yaml")
    assert "1 (reserved)" in out and "MFU" in out


def test_a_step_alone_and_no_hardware(capsys, tmp_path):
    config = {k: v for k, v in CONFIG.items() if k != "hardware"}
    path = _write(tmp_path, [{"name": "c", "config": config,
                              "measured": {"source": "s", "steps": [{"micro_batches": 2, "seconds": 1.0}]}}])
    status, out, _ = run(capsys, "validate", path, "--json")
    (case,) = json.loads(out)["cases"]
    assert status == 0 and case["stages"] == [] and case["steps"] == []
    assert case["time_unavailable"].startswith("$.cases[0].config.hardware")


@pytest.mark.parametrize(("measured", "message"), [
    ({"source": "s"}, "$.cases[0].measured: a case measures something"),
    ({"source": "s", "stages": [{"stage": 0}]}, "$.cases[0].measured.stages[0]: state allocated_gib"),
    ({"source": "s", "stages": [{"stage": "first", "allocated_gib": 1}]}, "$.cases[0].measured.stages[0].stage: stage must be"),
    ({"source": "s", "stages": [{"stage": 0, "allocated_gib": 1, "allocated_bytes": 5}]}, "not both"),
    ({"source": "s", "stages": [{"stage": 0, "reserved_gib": -1}]}, "$.cases[0].measured.stages[0].reserved_gib"),
    ({"source": "s", "stages": [{"stage": 5, "allocated_gib": 1}]}, "$.cases[0].measured.stages[0].stage: stage 5 is beyond"),
    ({"source": "s", "steps": [{"seconds": 1}]}, "$.cases[0].measured.steps[0]: state the step's micro_batches"),
    ({"source": "s", "steps": [{"micro_batches": 2, "seconds": 1, "mfu": 0.4}]}, "state exactly one of"),
    ({"source": "s", "steps": [{"global_batch_size": 7, "seconds": 1}]}, "$.cases[0].measured.steps[0]: global batch 7"),
    ({"source": "s", "steps": [{"micro_batches": 2, "tflops": 1}]}, "$.cases[0].measured.steps[0]: unknown keys ['tflops']"),
])
def test_bad_cases_name_the_field(capsys, tmp_path, measured, message):
    path = _write(tmp_path, [{"name": "c", "config": CONFIG, "measured": measured}])
    status, out, err = run(capsys, "validate", path)
    assert status == 2 and out == "" and err.count("\n") == 1
    assert message in err


@pytest.mark.parametrize(("measured", "message"), [
    # Not finite: a traceback (allocated) or an invalid JSON document (seconds) before.
    ({"source": "s", "stages": [{"stage": 0, "allocated_gib": float("inf")}]},
     "$.cases[0].measured.stages[0].allocated_gib: allocated_gib must be a positive finite number"),
    ({"source": "s", "steps": [{"micro_batches": 2, "seconds": float("inf")}]},
     "$.cases[0].measured.steps[0].seconds: seconds must be a positive finite number"),
    ({"source": "s", "stages": [{"stage": 0, "allocated_bytes": 10**30}]}, "allocated_bytes must be at most"),
    ({"source": "s", "steps": [{"micro_batches": 2, "mfu": 7}]}, "mfu must be at most 1.0 (a fraction"),
])
def test_figures_no_run_could_give_are_refused(capsys, tmp_path, measured, message):
    path = _write(tmp_path, [{"name": "c", "config": CONFIG, "measured": measured}])
    status, out, err = run(capsys, "validate", path)
    assert status == 2 and out == "" and err.count("\n") == 1 and message in err, err


def test_the_case_list_names_and_config_errors(capsys, tmp_path):
    measured = {"source": "s", "stages": [{"stage": 0, "allocated_gib": 40}]}
    status, _, err = run(capsys, "validate", _write(tmp_path, []))
    assert status == 2 and "$.cases: cases must list at least one measured case" in err
    twice = [{"name": "c", "config": CONFIG, "measured": measured}] * 2
    status, _, err = run(capsys, "validate", _write(tmp_path, twice))
    assert status == 2 and "$.cases[1].name: case name 'c' is also case 0's" in err
    # A config's refusal is said at its path inside the cases file.
    mx = dict(CONFIG, precision={"recipe": "mxfp8"})
    status, _, err = run(capsys, "validate", _write(tmp_path, [{"name": "c", "config": CONFIG, "measured": measured},
                                                               {"name": "d", "config": mx, "measured": measured}]))
    assert status == 2 and err.count("\n") == 1
    assert "$.cases[1].config.precision.recipe: precision recipe mxfp8 runs on blackwell devices only" in err


def test_the_recipe_is_reported_and_a_step_it_cannot_price_keeps_the_memory_rows(capsys, tmp_path):
    # fp8-blockwise has no measured Blackwell speedup: the step is not priced, said at the recipe's path; memory is.
    blockwise = dict(CONFIG, hardware="b200", precision={"recipe": "fp8-blockwise"})
    measured = {"source": "s", "stages": [{"stage": 0, "allocated_gib": 10}], "steps": [{"micro_batches": 2, "seconds": 1}]}
    status, out, err = run(capsys, "validate", _write(tmp_path, [{"name": "c", "config": blockwise, "measured": measured}]),
                           "--json")
    assert status == 0, err
    (case,) = json.loads(out)["cases"]
    assert case["precision_recipe"] == "fp8-blockwise" and len(case["stages"]) == 1 and case["steps"] == []
    assert case["time_unavailable"].startswith("$.cases[0].config.precision.recipe: ")
    status, out, _ = run(capsys, "validate", _write(tmp_path, [{"name": "c", "config": blockwise, "measured": measured}]))
    assert status == 0 and "fp8-blockwise" in out and "Recipe" in out
