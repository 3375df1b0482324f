"""``run(capsys, *argv)``: the ``hp`` command line in-process, for the CLI tests (tests/ is on the path: conftest.py)."""

from __future__ import annotations

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
