"""Every test file that skips without an optional extra is run by .ci/run once that extra is installed.

A file calling ``pytest.importorskip`` skips in the plain ``pytest`` run (the test extra only);
unless .ci/run names it in a later step, after ``pip install -e '.[EXTRA]'``, CI never runs it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NEEDLE = "pytest.importorskip" + "("  # split so that this file does not match itself


def test_every_test_that_skips_without_an_extra_runs_in_ci():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    extra_steps = [line for line in ci.replace("\\\n", " ").splitlines() if re.search(r"pip install -e '\.\[\w+\]'", line)]
    skipping = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "tests").rglob("test_*.py")
                      if NEEDLE in path.read_text(encoding="utf-8"))
    assert "tests/plugins/test_census_torch.py" in skipping  # the scan finds what it looks for
    missing = [name for name in skipping if not any(name in step.split() for step in extra_steps)]
    assert missing == [], f"add these to the .ci/run step that installs their extra: {missing}"
