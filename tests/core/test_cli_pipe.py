"""A reader that goes away (``hp plugins | head -1``) ends ``hp`` quietly, not as a plugin's failure."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("command", [["plugins"], ["models"], ["estimate"]])
def test_a_closed_pipe_ends_quietly(command):
    # The read end is closed before hp writes, so its first write to stdout meets EPIPE.
    # rich's Console answers that with SystemExit(1), which hp used to report as a plugin's
    # sys.exit ("a plugin called sys.exit(1) while the command ran") with status 2.
    code = f"import sys; from hp_core.cli import main; sys.exit(main({command!r}))"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 1
    assert stderr == ""
