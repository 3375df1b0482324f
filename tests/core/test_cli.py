"""The ``hp`` command line, run in-process (``main(argv)``) and once as a subprocess.

A user error exits with status 2 and exactly one line on standard error, never a
traceback; ``--json`` prints the stable document of ``docs/json.md``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli_run import run
from hp_core.api import build_registry
from hp_core.cli import main
from hp_core.manager import BLOCK_ENV
from hp_core.results import CATEGORIES

LLAMA3_8B_PARAMETERS = 8030261248


def assert_one_line_error(status: int, out: str, err: str) -> str:
    assert status == 2, (out, err)
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert out == ""
    return err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    status, out, err = run(capsys, *argv, "--json")
    assert status == 0, err
    assert err == ""
    return json.loads(out)


def stage_rows(table: str) -> list[int]:
    """Stage indices of the table rows: an index, then 8 categories, the peak and the reserve in GiB."""
    rows = []
    for line in table.splitlines():
        tokens = line.split()
        if tokens and tokens[0].isdigit() and sum(re.fullmatch(r"\d+\.\d\d", t) is not None for t in tokens) == 10:
            rows.append(int(tokens[0]))
    return rows


def llama_hf_config() -> dict:
    return dict(build_registry(use_env=False).model("llama3-8b").hf_config)


# ----------------------------------------------------------------------------- estimate


def test_estimate_without_arguments_prints_one_row_per_stage(capsys):
    status, out, err = run(capsys, "estimate")
    assert status == 0, err
    assert err == ""
    assert "llama3-8b" in out
    assert stage_rows(out) == [0]
    assert "8,030,261,248" in out
    assert "Peak:" in out


@pytest.mark.parametrize(("argv", "stages"), [(("--pp", "4"), 4), (("--pp", "2", "--vpp", "2"), 2), (("--pp", "8", "--dp", "1", "--tp", "1"), 8)])
def test_estimate_table_rows_follow_pp(capsys, argv, stages):
    status, out, err = run(capsys, "estimate", *argv)
    assert status == 0, err
    assert stage_rows(out) == list(range(stages))


@pytest.mark.parametrize(
    "layout",
    [
        ("--tp", "2", "--dp", "4"),
        ("--tp", "2", "--dp", "2", "--pp", "4"),
        ("--tp", "1", "--dp", "2", "--pp", "4", "--vpp", "2", "--recompute", "selective"),
    ],
)
def test_estimate_json_adds_up(capsys, layout):
    doc = run_json(capsys, "estimate", "--model", "llama3-8b", *layout)
    assert doc["parameters"]["total"] == LLAMA3_8B_PARAMETERS
    pp = int(layout[layout.index("--pp") + 1]) if "--pp" in layout else 1
    assert [stage["index"] for stage in doc["stages"]] == list(range(pp))
    for stage in doc["stages"]:
        memory = stage["memory"]
        categories = {key: value for key, value in memory.items() if key.endswith("_bytes") and key != "peak_bytes"}
        assert set(categories) == {f"{name}_bytes" for name in CATEGORIES}
        assert all(isinstance(v, int) and v >= 0 for v in categories.values())
        assert sum(categories.values()) == memory["peak_bytes"]
        assert memory["activations_bytes"] > 0
        assert {"layers", "micro_batches_in_flight", "binding_point"} <= set(stage)
    assert doc["peak_bytes"] == max(stage["memory"]["peak_bytes"] for stage in doc["stages"])
    assert doc["layout"]["tp"] == int(layout[1])
    assert "provenance" in doc


def test_estimate_json_is_reproducible(capsys):
    first = run(capsys, "estimate", "--json")
    second = run(capsys, "estimate", "--json")
    assert first[0] == 0
    assert first == second


@pytest.mark.parametrize(
    ("argv", "mentions"),
    [
        (("--model", "llama3-8b", "--tp", "3"), "tp"),
        (("--pp", "64"), "pp"),
        (("--pp", "64", "--dp", "1", "--tp", "1"), "pp"),
        (("--tp", "0"), "--tp"),
        (("--seq-len", "-8"), "--seq-len"),
        (("--vpp", "2"), "pp"),
        (("--dp", "3", "--global-batch-size", "64"), "global_batch_size"),
        (("--hardware", "tpu-v9"), "tpu-v9"),
        (("--runtime", "megatron-9000"), "megatron-9000"),
        (("--recompute", "bogus"), "bogus"),
        (("--model", "no-such-model"), "no-such-model"),
        (("--bogus-flag",), "--bogus-flag"),
    ],
)
def test_estimate_user_errors_are_one_line(capsys, argv, mentions):
    err = assert_one_line_error(*run(capsys, "estimate", *argv))
    assert mentions in err


def test_tp_not_dividing_heads_names_the_field(capsys):
    err = assert_one_line_error(*run(capsys, "estimate", "--model", "llama3-8b", "--tp", "3"))
    assert "$.parallel.tp" in err
    assert err.startswith("hp estimate: error:")


def test_pp_beyond_layers_names_the_field(capsys):
    err = assert_one_line_error(*run(capsys, "estimate", "--pp", "64"))
    assert "$.parallel.pp" in err
    assert "32" in err


def test_no_command_is_an_argparse_error(capsys):
    assert_one_line_error(*run(capsys))


# ----------------------------------------------------------------------------- config files


def test_config_file_with_flags_overriding(capsys, tmp_path: Path):
    config = tmp_path / "run.yaml"
    config.write_text(
        "model: llama3-8b\n"
        "num_layers: 8\n"
        "parallel: {dp: 2, tp: 4, sp: true, seq_len: 4096, micro_batch_size: 1, global_batch_size: 16}\n"
        "recompute: full\n",
        encoding="utf-8",
    )
    from_file = run_json(capsys, "estimate", config)
    assert from_file["layout"]["tp"] == 4
    assert from_file["layout"]["dp"] == 2
    assert from_file["layout"]["seq_len"] == 4096
    assert from_file["stages"][0]["recompute"] == ["full"] * 8

    overridden = run_json(capsys, "estimate", config, "--tp", "2", "--seq-len", "2048", "--recompute", "none")
    assert overridden["layout"]["tp"] == 2  # the flag
    assert overridden["layout"]["seq_len"] == 2048  # the flag
    assert overridden["layout"]["dp"] == 2  # the file
    assert overridden["layout"]["global_batch_size"] == 16  # the file
    assert overridden["layout"]["sp"] is True  # the file
    assert overridden["stages"][0]["recompute"] == ["none"] * 8
    assert overridden["stages"][0]["layers"] == list(range(8))  # num_layers from the file


def test_config_file_model_overridden_by_flag(capsys, tmp_path: Path):
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"model": "qwen2.5-7b", "parallel": {"seq_len": 1024}}), encoding="utf-8")
    assert run_json(capsys, "estimate", config)["model"] == "qwen2.5-7b"
    doc = run_json(capsys, "estimate", config, "--model", "llama3-8b")
    assert doc["model"] == "llama3-8b"
    assert doc["parameters"]["total"] == LLAMA3_8B_PARAMETERS


def test_config_file_error_is_one_line(capsys, tmp_path: Path):
    config = tmp_path / "run.yaml"
    config.write_text("model: llama3-8b\nparallel: {tq: 2, seq_len: 8}\n", encoding="utf-8")
    err = assert_one_line_error(*run(capsys, "estimate", config))
    assert "$.parallel" in err and "tq" in err


def test_flag_fixes_a_layout_the_file_gets_wrong(capsys, tmp_path: Path):
    config = tmp_path / "run.yaml"
    config.write_text("model: llama3-8b\nparallel: {tp: 3, seq_len: 1024}\n", encoding="utf-8")
    assert_one_line_error(*run(capsys, "estimate", config))
    assert run_json(capsys, "estimate", config, "--tp", "4")["layout"]["tp"] == 4


# ----------------------------------------------------------------------------- Hugging Face configs


def test_model_from_a_config_json_file(capsys, tmp_path: Path):
    path = tmp_path / "llama" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(llama_hf_config()), encoding="utf-8")
    doc = run_json(capsys, "estimate", "--model", path, "--tp", "2", "--dp", "4")
    assert doc["parameters"]["total"] == LLAMA3_8B_PARAMETERS
    assert str(path) in doc["provenance"]["model_source"]
    preset = run_json(capsys, "estimate", "--model", "llama3-8b", "--tp", "2", "--dp", "4")
    assert [s["memory"] for s in doc["stages"]] == [s["memory"] for s in preset["stages"]]


def test_model_from_a_folder_holding_config_json(capsys, tmp_path: Path):
    folder = tmp_path / "Meta-Llama-3-8B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**llama_hf_config(), "num_hidden_layers": 16}), encoding="utf-8")
    doc = run_json(capsys, "estimate", "--model", folder)
    assert len(doc["stages"][0]["layers"]) == 16
    assert doc["parameters"]["total"] < LLAMA3_8B_PARAMETERS
    assert str(folder / "config.json") in doc["provenance"]["model_source"]


def test_config_json_path_inside_a_config_file(capsys, tmp_path: Path):
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps(llama_hf_config()), encoding="utf-8")
    config = tmp_path / "run.yaml"
    config.write_text(f"model: {json.dumps(str(hf))}\nparallel: {{seq_len: 1024}}\n", encoding="utf-8")
    assert run_json(capsys, "estimate", config)["parameters"]["total"] == LLAMA3_8B_PARAMETERS


def test_unknown_model_type_refused(capsys, tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**llama_hf_config(), "model_type": "gpt9"}), encoding="utf-8")
    err = assert_one_line_error(*run(capsys, "estimate", "--model", path))
    assert "model_type" in err
    assert "gpt9" in err


def test_missing_field_in_config_json_refused(capsys, tmp_path: Path):
    config = llama_hf_config()
    del config["hidden_size"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    err = assert_one_line_error(*run(capsys, "estimate", "--model", path))
    assert "hidden_size" in err


def test_config_json_that_is_not_json(capsys, tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text("{not json", encoding="utf-8")
    err = assert_one_line_error(*run(capsys, "estimate", "--model", path))
    assert "config.json" in err


def test_folder_without_config_json(capsys, tmp_path: Path):
    assert_one_line_error(*run(capsys, "estimate", "--model", tmp_path))


def test_unhashable_model_type_refused(capsys, tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**llama_hf_config(), "model_type": ["llama"]}), encoding="utf-8")
    err = assert_one_line_error(*run(capsys, "estimate", "--model", path))
    assert "model_type" in err


def test_invalid_hidden_act_message_is_readable(capsys, tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**llama_hf_config(), "hidden_act": "swoosh"}), encoding="utf-8")
    err = assert_one_line_error(*run(capsys, "estimate", "--model", path))
    assert "hidden_act" in err
    assert "Attribute(" not in err


def test_invalid_optimizer_message_is_readable(capsys, tmp_path: Path):
    config = tmp_path / "run.yaml"
    config.write_text("model: llama3-8b\nparallel: {seq_len: 1024}\nprecision: {optimizer: zz}\n", encoding="utf-8")
    err = assert_one_line_error(*run(capsys, "estimate", config))
    assert "optimizer" in err
    assert "Attribute(" not in err


# ----------------------------------------------------------------------------- listings


def test_plugins_lists_kinds_runtimes_and_models(capsys):
    status, out, err = run(capsys, "plugins")
    assert status == 0, err
    for name in ("dense", "generic", "llama3-8b", "formulas", "h100-sxm", "hp_plugins.kinds.dense", "hp-planner"):
        assert name in out


def test_plugins_json(capsys):
    doc = run_json(capsys, "plugins")
    assert "dense" in [k["name"] for k in doc["layer_kinds"]]
    assert "generic" in [r["name"] for r in doc["runtimes"]]
    assert "llama3-8b" in [m["name"] for m in doc["models"]]
    dense = next(k for k in doc["layer_kinds"] if k["name"] == "dense")
    assert dense["plugin"] == "hp_plugins.kinds.dense"
    assert dense["distribution"] == "hp-planner"
    assert "hp_plugins.models.presets" in [p["name"] for p in doc["plugins"]]


def test_models_lists_presets(capsys):
    status, out, err = run(capsys, "models")
    assert status == 0, err
    assert "llama3-8b" in out
    assert "8,030,261,248" in out


def test_models_json(capsys):
    doc = run_json(capsys, "models")
    by_name = {m["name"]: m for m in doc["models"]}
    assert "llama3-8b" in by_name
    assert by_name["llama3-8b"]["parameters"] == LLAMA3_8B_PARAMETERS
    assert by_name["llama3-8b"]["layers"] == 32
    assert by_name["llama3-8b"]["model_type"] == "llama"


# ----------------------------------------------------------------------------- blocking


def test_block_plugin_presets_makes_default_estimate_fail(capsys):
    err = assert_one_line_error(*run(capsys, "--block-plugin", "hp_plugins.models.presets", "estimate"))
    assert "llama3-8b" in err


def test_block_plugin_presets_empties_models(capsys):
    assert run_json(capsys, "--block-plugin", "hp_plugins.models.presets", "models") == {"models": []}


def test_blocked_plugin_is_not_listed(capsys):
    doc = run_json(capsys, "--block-plugin", "hp_plugins.models.presets", "plugins")
    assert "hp_plugins.models.presets" not in [p["name"] for p in doc["plugins"]]
    assert "hp_plugins.kinds.dense" in [p["name"] for p in doc["plugins"]]
    assert doc["models"] == []


def test_block_env_variable_reaches_the_cli(capsys, monkeypatch):
    monkeypatch.setenv(BLOCK_ENV, "hp_plugins.kinds.dense")
    err = assert_one_line_error(*run(capsys, "estimate"))
    assert "dense" in err


# ----------------------------------------------------------------------------- a real process


def test_installed_cli_exits_2_with_one_line():
    env = {key: value for key, value in os.environ.items() if key != BLOCK_ENV}
    proc = subprocess.run(
        [sys.executable, "-m", "hp_core.cli", "estimate", "--model", "llama3-8b", "--tp", "3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "$.parallel.tp" in proc.stderr
    assert proc.stdout == ""


def test_num_layers_truncates_the_body_and_refuses_more_than_the_model_has(capsys):
    # Llama-3-70B: 80 layers of 855,654,400 parameters; embedding and head 128256*8192 each, final norm 8192.
    assert main(["estimate", "--model", "llama3-70b", "--num-layers", "12", "--tp", "4", "--dp", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["parameters"]["total"] == 2 * 128256 * 8192 + 8192 + 12 * 855654400
    assert doc["stages"][0]["layers"] == list(range(12))
    assert main(["estimate", "--model", "llama3-70b", "--num-layers", "81"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["hp estimate: error: $.num_layers: num_layers=81 exceeds the model's 80 layers"]


@pytest.mark.parametrize(("argv", "option"), [
    (("search", "--model", "llama3-8b", "--devices", "8", "--hardware", "h100-sxm", "--workers=--"), "--workers"),
    (("search", "--model", "llama3-8b", "--devices=--", "--hardware", "h100-sxm"), "--devices"),
    (("estimate", "--model", "llama3-8b", "--tp=--"), "--tp"),
])
def test_an_option_given_a_bare_double_dash_is_refused_by_name(capsys, argv, option):
    # argparse reads "--opt=--" as the option with no value (an empty list reached the command: a TypeError in
    # hp search's worker count); it is one line naming the option, status 2.
    err = assert_one_line_error(*run(capsys, *argv))
    assert f"argument {option}: expected one value" in err
