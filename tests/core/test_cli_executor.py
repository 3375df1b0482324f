"""``hp search --executor``: where the search's tasks run, and its bad inputs in one line."""

from __future__ import annotations

import json
import sys

from cli_run import run

SEARCH = ("search", "--model", "llama3-8b", "--num-layers", "4", "--devices", "8", "--hardware", "h100-sxm",
          "--global-batch-size", "16", "--seq-len", "2048", "--runtime", "megatron", "--top", "3", "--json")


def test_a_process_pool_ranks_as_the_serial_search(capsys):
    status, serial, _ = run(capsys, *SEARCH)
    assert status == 0
    status, pooled, _ = run(capsys, *SEARCH, "--executor", "process", "--workers", "2")
    assert status == 0
    assert json.loads(pooled) == json.loads(serial)
    assert len(json.loads(serial)["top"]) == 3


def test_an_unknown_executor_is_one_line_and_exit_2(capsys):
    status, out, err = run(capsys, *SEARCH, "--executor", "spark")
    assert (status, out) == (2, "")
    assert err.strip() == ("hp search: error: argument --executor: expected process, dask or dask=SCHEDULER_ADDRESS, "
                           "got 'spark' (see hp search --help)")
    status, _, err = run(capsys, *SEARCH, "--executor", "dask=")
    assert status == 2 and "got 'dask='" in err


def test_dask_without_the_extra_says_how_to_install_it(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed raises ImportError
    status, out, err = run(capsys, *SEARCH, "--executor", "dask")
    assert (status, out) == (2, "")
    assert err.strip() == "hp search: error: --executor: the dask executor needs Dask: pip install 'hp-planner[dask]'"
