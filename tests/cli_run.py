"""``run(capsys, *argv)``: the ``hp`` command line in-process, for the CLI tests (tests/ is on the path: conftest.py);
``estimate_json(tmp_path, capsys, config)``: ``hp estimate <config> --json`` on a job written from a mapping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hp_core.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    """``main(argv)`` with argparse's SystemExit turned into the status: ``(status, stdout, stderr)``."""
    try:
        status = main([str(a) for a in argv])
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


def estimate_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], config: dict) -> tuple[int, dict]:
    """``hp estimate job.json --json`` on *config* written to *tmp_path*: ``(status, the parsed document)``."""
    job = tmp_path / "job.json"
    job.write_text(json.dumps(config), encoding="utf-8")
    status, out, _ = run(capsys, "estimate", job, "--json")
    return status, json.loads(out)
