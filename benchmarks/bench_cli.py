"""Time the command line's start-up: the whole ``hp estimate`` process and the import of ``hp_core.cli``.

Run: ``python benchmarks/bench_cli.py [--runs N] [--top K]``. Every figure is
taken over N fresh processes of this interpreter (median and fastest), after
one warm-up run of each; ``PYTHONDONTWRITEBYTECODE`` is dropped from their
environment so that the warm-up writes the bytecode caches an installed copy
has. The rows:

- ``python -c pass``: the interpreter's own start-up, the floor under the rest;
- ``import hp_core.cli``: the import alone, timed inside the process;
- ``hp estimate``: the default job (Llama-3-8B on 8 devices) as a user runs it,
  through the ``hp`` script beside this interpreter (or the same call of
  ``hp_core.cli.main`` where there is none), output discarded.

``--top K`` adds the K slowest imports of ``hp estimate`` at the first two
levels, from ``python -X importtime`` (cumulative, one run). Results go into
docs/performance.md by hand, with the machine they were taken on.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

IMPORT_CLI = "import time; t = time.perf_counter(); import hp_core.cli; print(time.perf_counter() - t)"
MAIN = "import sys; from hp_core.cli import main; sys.exit(main())"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _hp_command() -> tuple[list[str], str]:
    """The ``hp`` script of this interpreter's environment, run by this interpreter; else the same call."""
    script = Path(sys.executable).parent / "hp"
    if script.is_file():
        return [sys.executable, str(script)], "hp estimate"
    found = shutil.which("hp")
    if found is not None and Path(found).parent == Path(sys.executable).parent:
        return [sys.executable, found], "hp estimate"
    return [sys.executable, "-c", MAIN], "hp_core.cli.main() estimate"


def _wall(command: list[str], runs: int, env: dict[str, str]) -> list[float]:
    """Seconds per whole process, after one warm-up run."""
    subprocess.run(command, stdout=subprocess.DEVNULL, env=env, check=True)
    timings = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, env=env, check=True)
        timings.append(time.perf_counter() - start)
    return timings


def _import_cli(runs: int, env: dict[str, str]) -> list[float]:
    """Seconds to import hp_core.cli, measured inside each process."""
    command = [sys.executable, "-c", IMPORT_CLI]
    subprocess.run(command, stdout=subprocess.DEVNULL, env=env, check=True)
    return [float(subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout)
            for _ in range(runs)]


def _top_imports(command: list[str], top: int, env: dict[str, str]) -> list[tuple[int, str]]:
    """The *top* slowest imports of one run at the first two levels: (cumulative microseconds, module).

    A second-level module (one the first level imported, such as what
    ``hp_core.cli`` pulls in) keeps its indentation.
    """
    done = subprocess.run([command[0], "-X", "importtime", *command[1:]], capture_output=True, text=True, env=env,
                          check=True)
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        _, cumulative, name = line.split("|")
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2  # one space, then two per level
        if cumulative.strip().isdigit() and depth <= 1:
            rows.append((int(cumulative), "  " * depth + name.strip()))
    return sorted(rows, reverse=True)[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=21, help="processes per row (default 21)")
    parser.add_argument("--top", type=int, default=0, help="also list the K slowest imports (first two levels)")
    args = parser.parse_args()
    env = _env()
    hp, label = _hp_command()
    estimate = [*hp, "estimate"]
    rows = [
        ("python -c pass", _wall([sys.executable, "-c", "pass"], args.runs, env)),
        ("import hp_core.cli", _import_cli(args.runs, env)),
        (label, _wall(estimate, args.runs, env)),
    ]
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
          f"{args.runs} processes per row after one warm-up")
    print(f"{'what':<30}{'median ms':>10}{'min ms':>8}")
    for what, timings in rows:
        print(f"{what:<30}{statistics.median(timings) * 1e3:>10.0f}{min(timings) * 1e3:>8.0f}")
    if args.top:
        print(f"\nslowest imports of {label}, first two levels (python -X importtime, one run)")
        print(f"{'module':<40}{'cumulative ms':>14}")
        for micros, name in _top_imports(estimate, args.top, env):
            print(f"{name:<40}{micros / 1e3:>14.1f}")


if __name__ == "__main__":
    main()
