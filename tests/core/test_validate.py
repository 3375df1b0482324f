"""``hp validate``: reading measured runs in both layouts and reporting per-stage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hp_core.api import estimate, model_from_preset
from hp_core.cli import main
from hp_core.errors import ConfigError
from hp_core.specs import ParallelSpec
from hp_core.io.validate import load_cases, validate_case

CASES = Path(__file__).resolve().parents[1] / "plugins" / "data" / "megatron_measured.json"
GIB = 2**30


def _own_file(tmp_path, measured: dict, name: str = "cases.yaml") -> Path:
    doc = {
        "format": "hp-cases/1",
        "cases": [
            {
                "name": "tiny",
                "config": {"model": "llama3-8b", "num_layers": 4, "runtime": "megatron",
                           "parallel": {"dp": 2, "tp": 2, "pp": 2, "sp": True, "seq_len": 2048}},
                "measured": measured,
            }
        ],
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc) if name.endswith(".yaml") else json.dumps(doc))
    return path


def test_own_format_reports_signed_errors(registry, tmp_path):
    path = _own_file(tmp_path, {"source": "made up for a test", "stage_peak_gib": [10.0, 12.5]})
    (case,) = load_cases(path, registry)
    assert case.stage_peak_bytes == (10 * GIB, round(12.5 * GIB))
    result = validate_case(case, registry)
    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    direct = estimate(model, ParallelSpec(dp=2, tp=2, pp=2, sp=True, seq_len=2048), registry=registry, runtime="megatron")
    assert [c.estimated_bytes for c in result.stages] == [s.peak_bytes for s in direct.stages]
    first = result.stages[0]
    assert first.error == (direct.stages[0].peak_bytes - 10 * GIB) / (10 * GIB)


def test_own_format_refuses_ambiguous_or_missing_measurements(registry, tmp_path):
    both = _own_file(tmp_path, {"source": "x", "stage_peak_gib": [1.0, 1.0], "stage_peak_bytes": [1, 1]})
    with pytest.raises(ConfigError) as error:
        load_cases(both, registry)
    assert error.value.path == "$.cases[0].measured"
    missing = _own_file(tmp_path, {"stage_peak_gib": [1.0, 1.0]}, "m.json")
    with pytest.raises(ConfigError) as error:
        load_cases(missing, registry)
    assert error.value.path == "$.cases[0].measured.source"
    wrong_count = _own_file(tmp_path, {"source": "x", "stage_peak_gib": [1.0]}, "w.yaml")
    (case,) = load_cases(wrong_count, registry)
    with pytest.raises(ConfigError, match="measured 1 stage peaks for a layout of 2 stages") as error:
        validate_case(case, registry)
    assert error.value.path == "$.cases[0].measured"


def test_a_megatron_measured_case_stating_fp8_is_refused_not_priced_bf16(registry, megatron_cases, tmp_path):
    # The layout states no recipe and its reader prices bf16 runs: an FP8 launch line is refused at its path.
    case = dict(megatron_cases["cases"][0], megatron_argv=megatron_cases["cases"][0]["megatron_argv"]
                + ["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"])
    path = tmp_path / "megatron_measured.json"
    path.write_text(json.dumps(dict(megatron_cases, cases=[case])), encoding="utf-8")
    with pytest.raises(ConfigError, match="states a low-precision run") as error:
        load_cases(path, registry)
    assert error.value.path == "$.cases[0].megatron_argv"
    # The layout's own record of it, training_config.precision.fp8, likewise.
    first = megatron_cases["cases"][0]
    marked = dict(first, training_config=dict(first["training_config"],
                                              precision=dict(first["training_config"]["precision"], fp8="hybrid")))
    path.write_text(json.dumps(dict(megatron_cases, cases=[marked])), encoding="utf-8")
    with pytest.raises(ConfigError, match="states a low-precision run") as error:
        load_cases(path, registry)
    assert error.value.path == "$.cases[0].training_config.precision.fp8"


def test_unknown_format_is_refused(registry, tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("cases: []\n")
    with pytest.raises(ConfigError) as error:
        load_cases(path, registry)
    assert error.value.path == "$.format"


@pytest.fixture(scope="module")
def megatron_cases():
    return json.loads(CASES.read_text())


def test_megatron_measured_is_read_field_by_field(registry, megatron_cases):
    cases = load_cases(CASES, registry)
    assert [c.name for c in cases] == [c["case_id"] for c in megatron_cases["cases"]]
    first, _, deepseek, long = cases
    assert (first.parallel.tp, first.parallel.pp, first.parallel.dp, first.parallel.zero) == (1, 2, 4, 1)
    assert first.stage_peak_bytes == (round(66.552 * GIB), round(62.9682 * GIB))
    assert first.parallel.sp is False and long.parallel.sp is True
    assert (long.parallel.cp, long.parallel.seq_len) == (4, 32768)
    # NullTokenizer: --vocab-size 128256 + its EOD token.
    (embedding,) = [g for g in first.model.layers if g.kind == "embedding"]
    assert embedding.config.vocab_size == 128257
    assert [(g.kind, g.count) for g in deepseek.model.layers] == [
        ("embedding", 1), ("mla", 1), ("mla_moe", 3), ("output", 1)
    ]
    moe = deepseek.model.layers[2].config
    assert (moe.capacity_factor, moe.pad_to_capacity, moe.shared_expert_intermediate_size) == (1.0, True, 3072)
    assert deepseek.parallel.ep == 8 and deepseek.parallel.expert_dp == 1
    assert [s.seconds for s in first.steps] == [0.843, 1.4768, 5.4365]


def test_cli_validate_json(megatron_cases, capsys):
    assert main(["validate", str(CASES), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["cases"]) == 4
    assert [len(c["stages"]) for c in doc["cases"]] == [2, 1, 1, 1]
    for case in doc["cases"]:
        for stage in case["stages"]:
            assert stage["error"] == (stage["estimated_peak_bytes"] - stage["measured_peak_bytes"]) / stage["measured_peak_bytes"]


def test_megatron_cases_within_two_percent_per_stage(registry, megatron_cases):
    """Issue target: every measured stage within 2% of torch.cuda.max_memory_allocated."""
    for case in load_cases(CASES, registry):
        for check in validate_case(case, registry).stages:
            assert abs(check.error) < 0.02, (case.name, check.stage, check.error)


def test_megatron_runtime_overheads_by_hand(registry, megatron_cases):
    """Case 1 (Llama-3-70B, 12 layers, TP1 PP2): TE keeps one bf16 dummy weight gradient per
    distinct weight shape (qkv 10240x8192, proj 8192x8192, fc1 57344x8192, fc2 8192x28672; the last
    stage also the output layer's 128384x8192) beside its 32 MiB + 1 KiB cuBLAS workspace; the last stage, whose output
    layer's GEMMs run through torch, also PyTorch's two 32 MiB cuBLAS workspaces (hp_core/blas_workspaces.py)."""
    first = load_cases(CASES, registry)[0]
    stages = validate_case(first, registry).estimate.stages
    layer_shapes = 10240 * 8192 + 8192 * 8192 + 57344 * 8192 + 8192 * 28672
    workspace = 32 * 2**20 + 1024
    assert stages[0].memory.runtime_overhead_bytes == 2 * layer_shapes + workspace
    assert stages[1].memory.runtime_overhead_bytes == 2 * (layer_shapes + 128384 * 8192) + workspace + 2 * 32 * 2**20
    # Pipeline: stage 0 holds the output gradient received from stage 1, stage 1 the input gradient it sent.
    assert stages[0].memory.communication_buffers_bytes == 4096 * 8192 * 2
    assert stages[1].memory.communication_buffers_bytes == 4096 * 8192 * 2


def test_measured_step_times_are_priced_at_their_micro_batch_counts(registry, tmp_path):
    """Own format: each measured step is priced on the config's hardware at its global batch."""
    from hp_core.api import step_time

    path = _own_file(tmp_path, {"source": "made up for a test", "stage_peak_gib": [10.0, 12.5],
                                "steps": [{"micro_batches": 4, "seconds": 2.0}, {"micro_batches": 8, "seconds": 3.0}]})
    doc = yaml.safe_load(path.read_text())
    doc["cases"][0]["config"]["hardware"] = "h100-sxm"
    path.write_text(yaml.safe_dump(doc))
    (case,) = load_cases(path, registry)
    result = validate_case(case, registry)
    assert result.time_unavailable is None
    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    for check, (mbc, measured) in zip(result.steps, [(4, 2.0), (8, 3.0)]):
        # dp 2, micro-batch 1: the global batch is 2 * mbc.
        direct = step_time(model, ParallelSpec(dp=2, tp=2, pp=2, sp=True, seq_len=2048, global_batch_size=2 * mbc),
                           registry=registry, hardware=registry.hardware_preset("h100-sxm").spec, runtime="megatron")
        assert (check.micro_batches, check.global_batch_size, check.measured_seconds) == (mbc, 2 * mbc, measured)
        assert check.estimated_seconds == direct.step_seconds
        assert check.error == (direct.step_seconds - measured) / measured


def test_measured_step_times_without_a_device_say_why(registry, tmp_path, capsys):
    path = _own_file(tmp_path, {"source": "x", "stage_peak_gib": [10.0, 12.5], "steps": [{"micro_batches": 4, "seconds": 2.0}]})
    (case,) = load_cases(path, registry)
    result = validate_case(case, registry)
    assert result.steps == () and result.time_unavailable.startswith("$.cases[0].config.hardware: ")
    assert main(["validate", str(path)]) == 0
    assert "tiny: step times not estimated ($.cases[0].config.hardware: " in capsys.readouterr().out


def test_a_step_whose_batch_is_another_micro_batch_count_is_refused(registry, tmp_path):
    path = _own_file(tmp_path, {"source": "x", "stage_peak_gib": [10.0, 12.5],
                                "steps": [{"micro_batches": 4, "global_batch_size": 16, "seconds": 2.0}]})
    doc = yaml.safe_load(path.read_text())
    doc["cases"][0]["config"]["hardware"] = "h100-sxm"
    path.write_text(yaml.safe_dump(doc))
    (case,) = load_cases(path, registry)
    with pytest.raises(ConfigError, match="global batch 16 is 8 micro-batches per replica on this layout, not the 4 measured; "
                                          "the entry's global_batch_size and micro_batches disagree") as error:
        validate_case(case, registry)
    assert error.value.path == "$.cases[0].measured.steps[0]"


@pytest.mark.parametrize("step, path, message", [
    ({"micro_batches": 0, "seconds": 2.0}, "micro_batches", "micro_batches must be a positive integer, got 0"),
    ({"micro_batches": 4, "seconds": 0}, "seconds", "seconds must be a positive number of seconds, got 0"),
    ({"micro_batches": 4, "seconds": -1.5}, "seconds", "seconds must be a positive number of seconds, got -1.5"),
    ({"micro_batches": 4, "seconds": 1.0, "global_batch_size": 0}, "global_batch_size", "global_batch_size must be a positive integer"),
])
def test_bad_step_entries_are_refused_with_their_path(registry, tmp_path, step, path, message):
    file = _own_file(tmp_path, {"source": "x", "stage_peak_gib": [10.0, 12.5], "steps": [{"micro_batches": 2, "seconds": 1.0}, step]})
    with pytest.raises(ConfigError, match=message) as error:
        load_cases(file, registry)
    assert error.value.path == f"$.cases[0].measured.steps[1].{path}"


def test_a_step_batch_the_layout_cannot_split_is_refused_with_its_path(registry, tmp_path, capsys):
    path = _own_file(tmp_path, {"source": "x", "stage_peak_gib": [10.0, 12.5],
                                "steps": [{"micro_batches": 4, "global_batch_size": 9, "seconds": 2.0}]})
    doc = yaml.safe_load(path.read_text())
    doc["cases"][0]["config"]["hardware"] = "h100-sxm"
    path.write_text(yaml.safe_dump(doc))
    (case,) = load_cases(path, registry)
    with pytest.raises(ConfigError, match="global batch 9 is not a multiple of micro_batch_size[*]dp=2 on this layout") as error:
        validate_case(case, registry)
    assert error.value.path == "$.cases[0].measured.steps[0].global_batch_size"
    assert main(["validate", str(path)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_megatron_measured_step_times_are_reported(megatron_cases, capsys):
    assert main(["validate", str(CASES), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    published = {c["case_id"]: c["measured"]["timing_by_mbc"] for c in megatron_cases["cases"]}
    for case in doc["cases"]:
        assert case["time_unavailable"] is None
        rows = published[case["name"]]
        assert [s["micro_batches"] for s in case["steps"]] == [r["micro_batch_count"] for r in rows]
        assert [s["measured_seconds"] for s in case["steps"]] == [r["real_ms"] / 1000 for r in rows]
        for step in case["steps"]:
            assert step["error"] == (step["estimated_seconds"] - step["measured_seconds"]) / step["measured_seconds"]
