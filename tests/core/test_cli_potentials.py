"""``hp potentials`` and ``--export TRAINER``, run in-process.

User errors exit 2 with one line on standard error.
"""

from __future__ import annotations

import csv
import json
import sys

import pytest

from cli_run import run

# Llama-3-8B, 32 layers over pp=4 (stages of 8), priced as Megatron-LM runs it.
LAYOUT = ("--model", "llama3-8b", "--dp", "1", "--tp", "2", "--pp", "4", "--sp", "--seq-len", "4096",
          "--global-batch-size", "8", "--runtime", "megatron", "--hardware", "h100-sxm")


def test_potentials_json_csv_and_export(capsys, tmp_path):
    path = tmp_path / "p.csv"
    status, out, err = run(capsys, "potentials", *LAYOUT, "--steps", "3", "--csv", path, "--export", "megatron", "--json")
    assert status == 0, err
    doc = json.loads(out)
    assert doc["model"] == "llama3-8b" and doc["runtime"] == "megatron"
    assert doc["degrees"]["pp"] == 4
    steps = doc["steps"]
    assert [s["step"] for s in steps] == [0, 1, 2, 3]
    assert [s["full_layers"] for s in steps] == [0, 1, 2, 3]
    assert all(a["step_seconds"] <= b["step_seconds"] for a, b in zip(steps, steps[1:]))
    assert steps[0]["export"] == {"trainer": "megatron", "plan": "", "refused": None}
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4 and rows[3]["full_layers"] == "3"


def test_potentials_table(capsys):
    status, out, err = run(capsys, "potentials", *LAYOUT, "--steps", "2", "--export", "torchtitan")
    assert status == 0, err
    assert "Recompute potentials: llama3-8b, runtime megatron" in out
    assert 'mode = "none"' in out
    assert "Start: none on every layer" in out


def test_potentials_plot(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "p.png"
    status, out, err = run(capsys, "potentials", *LAYOUT, "--steps", "2", "--plot", path)
    assert status == 0, err
    assert path.read_bytes().startswith(b"\x89PNG")
    assert f"Wrote plot {path}" in out.replace("\n", "")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--plot", "p.jpg"), "--plot: the plot is a PNG file ending in .png"),
        (("--steps", "-1"), "--steps: expected a non-negative number of steps"),
        (("--export", "nope"), "unknown trainer plan exporter 'nope'"),
    ],
)
def test_potentials_errors_are_one_line(capsys, argv, message):
    status, out, err = run(capsys, "potentials", *LAYOUT, *argv)
    assert status == 2
    assert message in err
    assert err.count("\n") == 1


def test_potentials_refuses_a_plot_without_matplotlib_before_writing_the_csv(capsys, monkeypatch, tmp_path):
    # As hp search does: a --plot that cannot be drawn is refused before any work, and the CSV asked
    # for beside it is not left behind by a command that exits 2.
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the 'plots' extra were not installed
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, "potentials", *LAYOUT, "--steps", "1", "--csv", "p.csv", "--plot", "p.png")
    assert status == 2
    assert err == "hp potentials: error: --plot: a plot needs matplotlib: pip install 'hp-planner[plots]'\n"
    assert list(tmp_path.iterdir()) == []


def test_estimate_export_writes_the_plan(capsys):
    status, out, err = run(capsys, "estimate", *LAYOUT, "--recompute", "full", "--export", "megatron")
    assert status == 0, err
    assert "Recompute plan for megatron:" in out
    assert "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1" in out
    status, out, err = run(capsys, "estimate", *LAYOUT, "--recompute", "selective", "--export", "hyperparallel", "--json")
    assert status == 0, err
    assert json.loads(out)["export"] == {
        "trainer": "hyperparallel", "runtime": "hyperparallel", "plan": {"activation_checkpoint": {"mode": "selective"}},
    }


def test_estimate_export_refuses_what_the_trainer_cannot_run(capsys):
    status, out, err = run(capsys, "estimate", *LAYOUT, "--recompute", "softmax", "--export", "megatron")
    assert status == 2
    assert out == ""
    assert err.startswith("hp estimate: error: $.recompute: megatron cannot run this plan: layer 0 recomputes softmax")
    assert "Closest plan it runs: --recompute-granularity selective --recompute-modules core_attn" in err
    assert err.count("\n") == 1


def test_plugins_lists_the_exporters(capsys):
    status, out, err = run(capsys, "plugins", "--json")
    assert status == 0, err
    found = {e["name"]: e for e in json.loads(out)["exporters"]}
    assert set(found) == {"hyperparallel", "megatron", "torchtitan"}
    assert found["torchtitan"]["description"].startswith("runtime fsdp2; ")
    assert found["megatron"]["plugin"] == "hp_plugins.exporters.megatron"
