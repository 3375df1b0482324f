"""hp against Megatron-LM's own CI measurements: per-rank memory and iteration time of its functional tests.

    python benchmarks/megatron_ci.py            # print the table (docs/megatron_ci.md)
    python benchmarks/megatron_ci.py --write    # rewrite the table in docs/megatron_ci.md

Each row of ``tests/plugins/data/megatron_ci_measured.json`` (``benchmarks/megatron_ci_extract.py`` copies them from
NVIDIA/Megatron-LM@d98e8a6) is one golden-values file of a functional test: the case's MODEL_ARGS, the GPU count of
its recipe, the platform, and what the run logged with ``--log-memory-to-tensorboard``
(``megatron/training/training.py`` ``training_log``, written by the last global rank only:
``megatron/training/global_vars.py``):

* ``mem-max-allocated-bytes``: ``torch.cuda.memory_stats()["allocated_bytes.all.peak"]``, the peak since the
  process started (never reset), on the last rank: the last pipeline stage. Compared with hp's peak of the last
  stage (``stages[-1].peak_bytes``, the CUDA context and allocator caching are outside both).
* ``mem-allocated-bytes``: ``allocated_bytes.all.current`` after the step's optimizer update, when no activation
  is held: compared with hp's static memory of the last stage, parameters + gradients + master parameters +
  optimizer states + the runtime's persistent workspaces (``runtime_overhead_bytes``).
* ``iteration-time``: seconds per iteration (the whole global batch); the median from the row's
  ``iteration_from_step``, compared with hp's step time.

Every row is priced through the product's own path: :func:`price_args` hands the MODEL_ARGS to the ``megatron``
importer (:func:`hp_plugins.importers.megatron.import_megatron_args`), which builds the model, layout, precision
and runtime options; nothing here is fitted, no engine constant is changed, every row is held out.
:func:`load_rows`, :func:`argv` and :func:`price_args` are general (any Megatron-LM case's MODEL_ARGS + GPU count
+ hardware preset): other row sets reuse them.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "benchmarks"):  # hp, and benchmarks/marked_section.py
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from hp_core.api import build_registry  # noqa: E402
from hp_core.io.convert import ConfigFile, structure  # noqa: E402
from hp_core.io.job import estimate_job, prepare_job, resolve_job, step_time_job  # noqa: E402
from hp_plugins.importers.megatron import import_megatron_args  # noqa: E402

DATA = ROOT / "tests" / "plugins" / "data" / "megatron_ci_measured.json"
DOC = ROOT / "docs" / "megatron_ci.md"
START, END = "<!-- megatron_ci table start -->", "<!-- megatron_ci table end -->"
GIB = 2**30
MEMORY_BAND, TIME_BAND = 0.03, 0.10  # the summary's "within" bands (relative error)
STATIC_FIELDS = ("parameters_bytes", "gradients_bytes", "master_parameters_bytes", "optimizer_states_bytes",
                 "runtime_overhead_bytes")


def load_rows(path: Path = DATA) -> dict[str, Any]:
    """The data file: ``what``, ``source``, ``units``, ``conventions``, ``rows`` and ``skipped``."""
    return json.loads(path.read_text(encoding="utf-8"))


def argv(model_args: dict[str, Any]) -> list[str]:
    """A ``model_config.yaml`` MODEL_ARGS mapping as Megatron-LM's command line: ``true`` a bare flag, ``false`` left
    out (the functional tests' launcher, ``tests/functional_tests/shell_test_utils/run_ci_test.sh``, passes them so)."""
    tokens: list[str] = []
    for flag, value in model_args.items():
        if value is True:
            tokens.append(flag)
        elif value is not False and value is not None:
            tokens += [flag, str(value)]
    return tokens


def resolve_args(tokens: list[str], gpus: int, hardware: str, registry, *, name: str = "megatron-ci",
                 env: dict[str, Any] | None = None):
    """``(imported job, its layout, resolved job)`` of a Megatron-LM command line on *gpus* devices of the *hardware*
    preset: the importer's document with dp = gpus / (tp * pp * cp) and the hardware set, resolved as ``hp estimate``
    does; the layout is the document's ``parallel`` mapping, dp included. *env*: the run's environment variables, which
    the importer reads as a launch script's (``CUBLAS_WORKSPACE_CONFIG``: the runtime option ``cublas_workspace_kib``)."""
    job = import_megatron_args(tokens, registry, devices=gpus, name=name,
                               env={key: str(value) for key, value in (env or {}).items()})
    document = copy.deepcopy(dict(job.document))
    parallel = document["parallel"]
    ranks = parallel["tp"] * parallel["pp"] * parallel.get("cp", 1)
    if gpus % ranks:
        raise ValueError(f"{name}: {gpus} GPUs are not a multiple of tp*pp*cp={ranks}")
    parallel["dp"] = gpus // ranks
    document["hardware"] = hardware
    return job, parallel, resolve_job(structure(document, ConfigFile, registry), registry)


def price_args(model_args: dict[str, Any], gpus: int, hardware: str, registry=None, *, name: str = "megatron-ci",
               extra_args: dict[str, Any] | None = None, env: dict[str, Any] | None = None) -> dict[str, Any]:
    """hp's estimate of a Megatron-LM job from its MODEL_ARGS on *gpus* devices of the *hardware* preset.

    *extra_args* are added to (or replace) MODEL_ARGS: a row's stated assumption (a tokenizer file's vocabulary);
    *env*: the run's environment variables (:func:`resolve_args`).
    Returns the importer's ``unmapped`` lines, the layout, every stage's memory breakdown (bytes), the last stage's
    peak and static bytes (:data:`STATIC_FIELDS`), the step time in seconds (``None`` where the runtime prices none)
    and the precision recipe the job runs (the imported one, else the runtime's).
    """
    registry = registry or build_registry()
    args = {**model_args, **(extra_args or {})}
    job, parallel, resolved = resolve_args(argv(args), gpus, hardware, registry, name=name, env=env)
    run = prepare_job(resolved, registry)
    estimate = estimate_job(resolved, registry, run)
    step = step_time_job(resolved, registry, run=run)
    stages = [{key: getattr(stage.memory, key) for key in (*STATIC_FIELDS, "activations_bytes", "communication_buffers_bytes",
                                                             "working_set_bytes", "peak_bytes")}
              for stage in estimate.stages]
    last = stages[-1]
    return {"unmapped": list(job.unmapped), "layout": parallel, "stages": stages, "peak_bytes": last["peak_bytes"],
            "static_bytes": sum(last[key] for key in STATIC_FIELDS), "step_seconds": step.step_seconds,
            "parameters": estimate.parameters.total, "recipe": (resolved.precision or resolved.runtime.precision).recipe}


def price_row(row: dict[str, Any], registry=None) -> dict[str, Any]:
    """One data row priced (:func:`price_args` with the row's GPU count, hardware and stated assumptions).

    A row whose run read a ``--tp-comm-overlap-cfg`` file (its ``tp_comm_overlap_cfg_file``: the path from Megatron-LM's
    root, where the run read it, and the content copied from there) is priced with that content written to a file of
    its own, which the importer reads in its place (JSON is YAML: ``yaml.safe_load`` reads it back the same)."""
    extra = dict(row.get("assumed_args") or {})
    with tempfile.TemporaryDirectory() as folder:
        copied = row.get("tp_comm_overlap_cfg_file")
        if copied is not None:
            path = Path(folder) / Path(copied["path"]).name
            path.write_text(json.dumps(copied["content"]), encoding="utf-8")
            extra["--tp-comm-overlap-cfg"] = str(path)
        return price_args(row["model_args"], row["gpus"], row["hardware"], registry, name=row["id"], extra_args=extra,
                          env=row.get("env_vars"))


def _error(estimated: float | None, measured: float | None) -> float | None:
    return None if estimated is None or measured is None else estimated / measured - 1


def results(data: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every row with hp's figures and the relative errors (estimate / measured - 1)."""
    data = data or load_rows()
    registry = build_registry()
    found = []
    for row in data["rows"]:
        priced = price_row(row, registry)
        measured = row["measured"]
        found.append({"row": row, "priced": priced, "recipe": priced["recipe"],
                      "peak_error": _error(priced["peak_bytes"], measured["peak_bytes"]),
                      "static_error": _error(priced["static_bytes"], measured["steady_allocated_bytes"]),
                      "time_error": _error(priced["step_seconds"], measured["iteration_seconds"])})
    return found


def _layout(layout: dict[str, Any]) -> str:
    parts = [f"{name}{layout[name]}" for name in ("dp", "tp", "pp", "cp") if layout.get(name, 1) > 1 or name == "dp"]
    if layout.get("vpp", 1) > 1:
        parts.append(f"vpp{layout['vpp']}")
    if layout.get("sp"):
        parts.append("sp")
    return " ".join(parts) + f", mbs {layout['micro_batch_size']}, gbs {layout['global_batch_size']}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _summary(found: list[dict[str, Any]], key: str, band: float) -> str:
    errors = [r[key] for r in found if r[key] is not None]
    within = sum(abs(e) <= band for e in errors)
    return (f"mean |error| {statistics.fmean(abs(e) for e in errors):.1%}, within {band:.0%}: {within} of {len(errors)}, "
            f"range {min(errors):+.1%} to {max(errors):+.1%}")


def section(found: list[dict[str, Any]]) -> str:
    """The markdown table and its summary lines, as docs/megatron_ci.md holds them."""
    lines = ["| run | platform | layout | measured peak GiB | hp peak GiB (last stage) | error | measured steady GiB "
             "| hp static GiB | error | measured iteration s | hp step s | error |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in found:
        row, priced, measured = r["row"], r["priced"], r["row"]["measured"]
        case = row["case"].rsplit("/", 1)[1]
        lines.append(
            f"| {case} ({row['environment']}) | {row['platform']} | {_layout(priced['layout'])} | "
            f"{measured['peak_bytes'] / GIB:.2f} | {priced['peak_bytes'] / GIB:.2f} | {_pct(r['peak_error'])} | "
            f"{measured['steady_allocated_bytes'] / GIB:.2f} | {priced['static_bytes'] / GIB:.2f} | "
            f"{_pct(r['static_error'])} | {measured['iteration_seconds']:.3f} | {priced['step_seconds']:.3f} | "
            f"{_pct(r['time_error'])} |")
    groups = (("all rows", found),
              ("7B rows (bf16)", [r for r in found if "_7b_" in r["row"]["case"]]),
              ("FP8 rows (hidden 512)", [r for r in found if "fp8" in r["row"]["case"]]))
    lines.append("")
    for title, rows in groups:
        lines.append(f"- {title}, {len(rows)} held out: peak {_summary(rows, 'peak_error', MEMORY_BAND)}; steady "
                     f"{_summary(rows, 'static_error', MEMORY_BAND)}; iteration time "
                     f"{_summary(rows, 'time_error', TIME_BAND)}.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the table in docs/megatron_ci.md")
    args = parser.parse_args()
    text = section(results())
    if args.write:  # atomically, between the page's markers
        from marked_section import write_section

        write_section(DOC, START, END, f"{START}\n{text}\n{END}")
    print(text)


if __name__ == "__main__":
    main()
