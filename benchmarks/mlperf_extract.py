"""Print the measured facts of MLPerf Training result directories, for the rows of tests/plugins/data/mlperf_measured.json.

Run: ``python benchmarks/mlperf_extract.py SNAPSHOT [SNAPSHOT ...] [--benchmark llama31_405b] [--submitter NVIDIA ...]``
where each SNAPSHOT is a git checkout (bare or not) of an mlcommons/training_results_v* repository. For every
``<submitter>/results/<system>/<benchmark>/`` directory it prints one JSON line: the repository's commit, the
submitter and system, each ``result_*.txt``'s facts (:func:`mlperf_logs.run_facts`: platform, global batch,
gradient accumulation steps, sequence length, the median ``train_step_time`` after the first steps), the median of
those per-log medians over the logs that state a step time (:func:`median_of_logs`: over how many of how many
logs, and the logs left out, also said on stderr), the system description (``<submitter>/systems/<system>.json``:
nodes, accelerators per node, the accelerator's name, the framework; a log that states no step time gives its error and no median) and the launch config the submission's README names
(``<submitter>/benchmarks/<benchmark>/implementations/<system>/README-<system>.md``: "source config_....sh") with
the ``export NAME=VALUE`` settings of it and of the files it sources, in sourcing order (a later export wins; a
sourced file the submission does not hold is listed under ``missing``).

The repository keeps only what this prints (in the data file, with the commit and paths); the tests cannot read
the snapshots.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from mlperf_logs import run_facts  # noqa: E402

_EXPORT = re.compile(r"^\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=(.*?)\s*(#.*)?$")
_SOURCE = re.compile(r"^\s*source\s+\$\(dirname \$\{BASH_SOURCE\[0\]\}\)/(\S+)\s*$")
_README_CONFIG = re.compile(r"^source\s+(config_\S+\.sh)\s*$", re.M)


def _git(snapshot: str, *args: str) -> str:
    return subprocess.run(["git", "-C", snapshot, *args], check=True, capture_output=True, text=True).stdout


def _show(snapshot: str, path: str) -> str | None:
    done = subprocess.run(["git", "-C", snapshot, "show", f"HEAD:{path}"], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def config_settings(snapshot: str, folder: str, name: str) -> dict:
    """The ``export`` settings of config *name* in *folder* and of the files it sources, in sourcing order (later
    exports win, as bash runs them); the sourced files the snapshot does not hold are listed under ``missing``."""
    settings: dict = {}
    missing: list[str] = []
    files: list[str] = []

    def read(file: str) -> None:
        text = _show(snapshot, f"{folder}/{file}")
        if text is None:
            missing.append(file)
            return
        files.append(file)
        for line in text.splitlines():
            source = _SOURCE.match(line)
            if source:
                read(source.group(1))
                continue
            export = _EXPORT.match(line)
            if export:
                settings[export.group(1)] = export.group(2).strip().strip('"')

    read(name)
    return {"files": files, "missing": missing, "settings": settings}


def result_dirs(snapshot: str, benchmark: str, submitters: list[str] | None) -> dict:
    """``(submitter, system) -> [result log paths]`` of *benchmark* in *snapshot*."""
    found: dict = {}
    for path in _git(snapshot, "ls-tree", "-r", "--name-only", "HEAD").split("\n"):
        parts = path.split("/")
        if (len(parts) == 5 and parts[1] == "results" and parts[3] == benchmark and parts[4].startswith("result_")
                and parts[4].endswith(".txt") and (not submitters or parts[0] in submitters)):
            found.setdefault((parts[0], parts[2]), []).append(path)
    return {key: sorted(paths) for key, paths in sorted(found.items())}


def _log_facts(snapshot: str, log: str) -> dict:
    """One log's :func:`run_facts`, or, where it states no step time (a run that logged none, e.g. MLPerf v4.0's
    GPT-3 logs), its error."""
    try:
        return dict(run_facts(_show(snapshot, log)), log=log)
    except ValueError as error:
        return {"log": log, "error": str(error)}


def median_of_logs(facts: list[dict]) -> dict:
    """The median of the per-log medians of one directory's *facts*, over the logs that state a step time only, and
    which logs those are: ``median_of_log_medians_seconds`` (None where no log states one), ``logs_in_median`` (how
    many logs it is taken over, of ``log_count``) and ``logs_left_out`` (the logs without a median, each with its
    error), so a median over fewer logs than the directory holds says so."""
    medians = [f["median_step_seconds"] for f in facts if "median_step_seconds" in f]
    return {"median_of_log_medians_seconds": statistics.median(medians) if medians else None,
            "logs_in_median": len(medians), "log_count": len(facts),
            "logs_left_out": [{"log": f["log"], "error": f.get("error")}
                              for f in facts if "median_step_seconds" not in f]}


def extract(snapshot: str, benchmark: str, submitters: list[str] | None = None):
    """One dict per result directory of *benchmark* in *snapshot* (module docstring)."""
    commit = _git(snapshot, "rev-parse", "HEAD").strip()
    for (submitter, system), logs in result_dirs(snapshot, benchmark, submitters).items():
        facts = [_log_facts(snapshot, log) for log in logs]
        folder = f"{submitter}/benchmarks/{benchmark}/implementations/{system}"
        readme = _show(snapshot, f"{folder}/README-{system}.md") or ""
        named = _README_CONFIG.findall(readme)
        system_json = json.loads(_show(snapshot, f"{submitter}/systems/{system}.json") or "{}")
        yield {
            "commit": commit, "submitter": submitter, "system": system,
            "system_description": {k: system_json.get(k) for k in ("system_name", "number_of_nodes", "accelerators_per_node",
                                                                   "accelerator_model_name", "framework")},
            "logs": facts, **median_of_logs(facts),
            "readme_config": named, "config_folder": folder,
            "config": config_settings(snapshot, folder, named[0]) if len(named) == 1 else None,
        }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("snapshots", nargs="+")
    parser.add_argument("--benchmark", default="llama31_405b")
    parser.add_argument("--submitter", action="append", help="only these submitters (repeatable; default all)")
    args = parser.parse_args(argv)
    for snapshot in args.snapshots:
        for found in extract(snapshot, args.benchmark, args.submitter):
            print(json.dumps(found))
            if found["logs_left_out"] and found["logs_in_median"]:
                print(f"{found['submitter']}/{found['system']}: median of {found['logs_in_median']} of "
                      f"{found['log_count']} logs ({len(found['logs_left_out'])} state no step time: logs_left_out)",
                      file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
