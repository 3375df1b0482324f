"""``hp search --csv`` and ``--plot`` (hp_core.io.search_output): the rows read back, atomic writes, one-line errors."""

from __future__ import annotations

import csv
import json
import os
import sys

import attrs
import pytest

from cli_run import run
from hp_core.api import build_registry, model_from_preset
from hp_core.errors import ConfigError
from hp_core.engine.search import search
from hp_core.io.search_output import CSV_COLUMNS, check_plot, plot_search, search_rows, search_to_json, write_search_csv

REGISTRY = build_registry(use_env=False)
# Three layers over two stages: an uneven split (2, 1) and two stage peaks per row.
MODEL = model_from_preset("llama3-8b", REGISTRY).with_body_layers(3, REGISTRY.kinds_placed("body"))
H100 = REGISTRY.hardware_preset("h100-sxm").spec
CLI = ("search", "--model", "llama3-8b", "--num-layers", "3", "--devices", "8", "--hardware", "h100-sxm",
       "--global-batch-size", "16", "--seq-len", "4096", "--runtime", "megatron", "--fix", "pp=2", "--top", "4")


@pytest.fixture(scope="module")
def result():
    return search(MODEL, registry=REGISTRY, devices=8, hardware=H100, global_batch_size=16, seq_len=4096,
                  runtime="megatron", fixed={"pp": 2}, top=6)


def _read(path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def test_the_csv_holds_every_candidate_of_the_top_as_the_result_states_it(result, tmp_path):
    path = tmp_path / "new" / "top.csv"  # the folder is created
    write_search_csv(result, path)
    header, rows = _read(path)
    assert header == list(CSV_COLUMNS)
    assert len(rows) == len(result.top) == 6
    assert result.top[0].layout.layers_per_stage == (2, 1)
    for rank, (row, c) in enumerate(zip(rows, result.top), 1):
        layout = c.layout
        assert int(row["rank"]) == rank
        assert [int(row[name]) for name in ("dp", "cp", "tp", "pp", "vpp", "ep", "etp", "zero", "micro_batch_size")] == [
            layout.dp, layout.cp, layout.tp, layout.pp, layout.vpp, layout.ep, layout.etp, layout.zero, layout.micro_batch_size]
        assert json.loads(row["sp"]) is (layout.tp > 1)
        assert row["schedule"] == layout.schedule
        assert json.loads(row["layers_per_stage"]) == list(layout.layers_per_stage)
        # Floats are written in full (repr), so they read back exactly.
        assert float(row["step_seconds"]) == c.step_seconds
        assert float(row["mfu"]) == c.mfu
        assert int(row["peak_bytes"]) == c.peak_bytes
        assert json.loads(row["stage_peaks_bytes"]) == list(c.stage_peaks_bytes)
        assert len(c.stage_peaks_bytes) == 2 and max(c.stage_peaks_bytes) == c.peak_bytes
        assert row["plan"] == c.plan_summary
        assert (row["model"], row["runtime"], row["hardware"]) == (result.model, result.runtime, result.hardware)
        assert (int(row["devices"]), int(row["global_batch_size"]), int(row["seq_len"])) == (8, 16, 4096)
    steps = [float(row["step_seconds"]) for row in rows]
    assert steps == sorted(steps)
    # The recompute columns are the JSON document's plan.
    for row, entry in zip(rows, search_to_json(result)["top"]):
        assert row["recompute_default"] == entry["recompute"]["default"]
        assert json.loads(row["recompute_layers"]) == entry["recompute"]["layers"]


def test_nothing_fits_writes_the_header_only(result, tmp_path):
    empty = attrs.evolve(result, top=(), fitting=0)
    path = tmp_path / "empty.csv"
    write_search_csv(empty, path)
    header, rows = _read(path)
    assert header == list(CSV_COLUMNS) and rows == []
    assert list(search_rows(empty)) == []


def test_the_csv_replaces_the_file_whole_or_not_at_all(result, tmp_path, monkeypatch):
    path = tmp_path / "top.csv"
    path.write_text("old\n", encoding="utf-8")
    write_search_csv(result, path)
    assert len(_read(path)[1]) == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["top.csv"]  # no temporary file left
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask  # as open() would make it, not mkstemp's 0600

    def broken(_result):
        yield from ()
        raise RuntimeError("disk on fire")

    before = path.read_bytes()
    monkeypatch.setattr("hp_core.io.search_output.search_rows", broken)
    with pytest.raises(RuntimeError, match="disk on fire"):
        write_search_csv(result, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["top.csv"]


def test_an_unwritable_path_is_a_config_error(result, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^--csv: cannot write .*a-file/top.csv"):
        write_search_csv(result, blocker / "top.csv")
    with pytest.raises(ConfigError, match=r"^--csv: cannot write"):
        write_search_csv(result, tmp_path)  # a folder, not a file


def test_cli_csv_matches_the_json_of_the_same_run(capsys, tmp_path):
    path = tmp_path / "s.csv"
    status, out, err = run(capsys, *CLI, "--json", "--csv", path)
    assert status == 0, err
    doc = json.loads(out)  # --json prints the document only
    _, rows = _read(path)
    assert len(rows) == len(doc["top"]) == 4
    for row, entry in zip(rows, doc["top"]):
        assert int(row["rank"]) == entry["rank"]
        assert float(row["step_seconds"]) == entry["step_seconds"]
        assert int(row["peak_bytes"]) == entry["peak_bytes"]
        assert json.loads(row["stage_peaks_bytes"]) == entry["stage_peaks_bytes"]
        assert row["plan"] == entry["plan"]


def test_cli_bad_csv_path_is_one_line_and_exit_2(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    status, out, err = run(capsys, *CLI, "--csv", blocker / "s.csv")
    assert status == 2
    assert err.startswith("hp search: error: --csv: cannot write ")
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--plot", "p.jpg"), "--plot: the plot is a PNG file ending in .png, got p.jpg"),
        (("--plot", "p.png"), "--plot: a plot needs matplotlib: pip install 'hp-planner[plots]'"),
    ],
)
def test_cli_plot_errors_are_one_line_before_searching(capsys, monkeypatch, tmp_path, argv, message):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the 'plots' extra were not installed
    monkeypatch.setattr("hp_core.engine.search.search", lambda *a, **k: pytest.fail("searched before refusing the plot"))
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, *CLI, *argv)
    assert status == 2
    assert err == f"hp search: error: {message}\n"
    assert list(tmp_path.iterdir()) == []


def test_check_plot_without_matplotlib(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ConfigError, match=r"pip install 'hp-planner\[plots\]'"):
        check_plot(tmp_path / "p.png")


def test_plot_writes_a_png(result, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "top.png"
    plot_search(result, path, memory_bytes=H100.memory_bytes, reserve_bytes=2**30)
    assert path.read_bytes().startswith(b"\x89PNG")
    plot_search(attrs.evolve(result, top=(), fitting=0), path)  # nothing fits: an empty plot, no error
    assert path.read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["top.png"]


def test_cli_plot(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "s.png"
    status, out, err = run(capsys, *CLI, "--plot", path)
    assert status == 0, err
    assert path.read_bytes().startswith(b"\x89PNG")
    assert f"Wrote plot {path}" in out.replace("\n", "")
