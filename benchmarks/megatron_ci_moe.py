"""hp against Megatron-LM's own CI measurements of its MoE cases (tests/plugins/data/megatron_ci_moe_measured.json).

Run: ``python benchmarks/megatron_ci_moe.py`` (``--write``: also into docs/accuracy.md between its markers). Each row
is one MoE functional-test case of NVIDIA/Megatron-LM@d98e8a6 on one platform: its ``model_config.yaml`` MODEL_ARGS,
read by hp's ``megatron`` importer
(:func:`hp_plugins.importers.megatron.import_megatron_args`, the product's own path) with the row's ``extra_args`` (its
stated assumptions) appended, priced at the row's GPU count on the platform's hardware preset; against its golden
values: the peak allocated memory of the last global rank (hp's last pipeline stage), its steady allocated memory after
the optimizer step (hp's static memory: parameters, gradients, master parameters, optimizer states and the runtime's
persistent workspaces) and the iteration time (hp's step time). All rows are held out: nothing in hp is fitted to them.
Where the release recipe that sets the node count is not public the row's GPU count is inferred from its steady memory
(``gpus_inferred``, :func:`inferred_world`), and its steady column is then not a check; the summary says which.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from hp_core import api
from hp_plugins.importers.megatron import import_megatron_args

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import megatron_ci  # noqa: E402  (the MODEL_ARGS command line, its resolved job and the static-memory fields)

DATA = HERE.parent / "tests" / "plugins" / "data" / "megatron_ci_moe_measured.json"
GIB = 2**30


def load() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


def rows() -> list[dict]:
    return load()["rows"]


def argv(row: dict) -> list[str]:
    """MODEL_ARGS as Megatron-LM's CI passes them (:func:`megatron_ci.argv`), then the row's ``extra_args``."""
    return megatron_ci.argv(row["model_args"]) + list(row["extra_args"])


def imported(row: dict, registry):
    return import_megatron_args(argv(row), registry, devices=row["gpus"], name=row["id"])


def job(row: dict, registry, gpus: int | None = None):
    """The row's resolved job at *gpus* devices (the row's count when ``None``) on its hardware preset
    (:func:`megatron_ci.resolve_args`)."""
    return megatron_ci.resolve_args(argv(row), gpus or row["gpus"], row["hardware"], registry, name=row["id"])[2]


def least_world(row: dict, registry) -> int:
    """The fewest GPUs the row's layout runs on: a multiple of tp * pp * cp (the dense grid) and of pp * ep * etp
    (the expert grid, Megatron-Core megatron/core/parallel_state.py initialize_model_parallel)."""
    p = imported(row, registry).document["parallel"]
    return math.lcm(p["tp"] * p["pp"] * p["cp"], p["pp"] * p["ep"] * p["etp"])


def static_bytes(memory) -> int:
    """hp's memory that stays allocated across steps (:data:`megatron_ci.STATIC_FIELDS`): weights, gradients, master
    weights, optimizer states and the runtime's persistent workspaces (``runtime_overhead_bytes``)."""
    return sum(getattr(memory, field) for field in megatron_ci.STATIC_FIELDS)


def price(row: dict, registry, gpus: int | None = None) -> dict[str, Any]:
    """hp's last-stage peak, its static memory (and parts), the step time of *row* at *gpus* devices and the precision
    recipe it runs (the imported one, else the runtime's)."""
    j = job(row, registry, gpus)
    kwargs = dict(registry=registry, runtime=j.runtime, precision=j.precision, recompute=j.recompute)
    memory = api.estimate(j.model, j.parallel, hardware=j.hardware, **kwargs).stages[-1].memory
    step = api.step_time(j.model, j.parallel, hardware=j.hardware, **kwargs)
    return {"peak_bytes": memory.peak_bytes, "static_bytes": static_bytes(memory), "memory": memory,
            "step_seconds": step.step_seconds, "model_flops": step.model_flops,
            "peak_flops_per_second": step.peak_flops_per_second, "recipe": (j.precision or j.runtime.precision).recipe}


def model_state_bytes(memory) -> int:
    """Weights, gradients, master weights and optimizer states: what the distributed optimizer's shard sizes with the
    data-parallel degree, and a floor under any allocation after the optimizer step."""
    return memory.parameters_bytes + memory.gradients_bytes + memory.master_parameters_bytes + memory.optimizer_states_bytes


def world_candidates(row: dict, registry, doublings: int = 3) -> list[tuple[int, int]]:
    """``(gpus, hp's model-state bytes)`` from the layout's least world size, doubled *doublings* times."""
    least = least_world(row, registry)
    return [(least * 2**k, model_state_bytes(price(row, registry, least * 2**k)["memory"])) for k in range(doublings + 1)]


def inferred_world(row: dict, registry) -> int:
    """A ``gpus_inferred`` row's world size: the fewest GPUs whose model states fit under the measured steady
    allocation (which holds them and more: workspaces, buffers); every fewer count's states exceed it."""
    for gpus, states in world_candidates(row, registry):
        if states <= row["measured"]["steady_bytes"]:
            return gpus
    raise ValueError(f"{row['id']}: no candidate world size's model states fit under the measured steady memory")


def measured_mfu(row: dict, hp: dict) -> float:
    """The measured iteration's model FLOPs utilisation by hp's count of the model FLOPs (forward and backward, every
    device) over the row's GPUs at the hardware preset's dense peak: a timing above what the device can reach at the
    row's GPU count shows a file whose time is not of that device (``time_suspect``)."""
    return hp["model_flops"] / (row["measured"]["iteration_seconds"] * row["gpus"] * hp["peak_flops_per_second"])


def results(registry=None) -> list[dict]:
    registry = registry or api.build_registry()
    found = []
    for row in rows():
        m, hp = row["measured"], price(row, registry)
        found.append({"row": row, **hp,
                      "peak_error": hp["peak_bytes"] / m["peak_bytes"] - 1,
                      "static_error": hp["static_bytes"] / m["steady_bytes"] - 1,
                      "time_error": hp["step_seconds"] / m["iteration_seconds"] - 1,
                      "measured_mfu": measured_mfu(row, hp)})
    return found


def _layout(row: dict, registry=None) -> str:
    p = row["model_args"]
    degrees = [f"tp{p.get('--tensor-model-parallel-size', 1)}", f"pp{p.get('--pipeline-model-parallel-size', 1)}",
               f"ep{p.get('--expert-model-parallel-size', 1)}"]
    if "--expert-tensor-parallel-size" in p:
        degrees.append(f"etp{p['--expert-tensor-parallel-size']}")
    gpus = f"{row['gpus']}{'*' if row['gpus_inferred'] else ''}"
    return f"{gpus} GPUs {' '.join(degrees)}, mbs {p['--micro-batch-size']}, gbs {p['--global-batch-size']}"


def _summary(label: str, errors: list[float]) -> str:
    if not errors:
        return f"- {label}: no rows."
    return (f"- {label}: {len(errors)} rows, mean absolute error {sum(map(abs, errors)) / len(errors):.1%}, "
            f"{min(errors):+.1%} to {max(errors):+.1%}, {sum(abs(e) <= 0.10 for e in errors)} within 10%.")


def section(found: list[dict]) -> str:
    """The table docs/accuracy.md shows (tests/plugins/test_megatron_ci_moe.py checks it is current). A ``*`` on the
    GPU count: inferred from the steady memory; a ``†`` on the time: ``time_suspect`` (the row's reason)."""
    lines = ["| run | platform | layout | measured peak GiB | hp last-stage peak GiB | error | measured steady GiB "
             "| hp static GiB | error | measured iteration s | hp step s | error | measured MFU (hp's FLOPs) |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in found:
        row, m = r["row"], r["row"]["measured"]
        mark = "†" if row["time_suspect"] else ""
        lines.append(f"| `{row['id']}` | {row['platform']} | {_layout(row)} | {m['peak_bytes'] / GIB:.2f} "
                     f"| {r['peak_bytes'] / GIB:.2f} | {r['peak_error']:+.1%} | {m['steady_bytes'] / GIB:.2f} "
                     f"| {r['static_bytes'] / GIB:.2f} | {r['static_error']:+.1%} | {m['iteration_seconds']:.3f}{mark} "
                     f"| {r['step_seconds']:.3f} | {r['time_error']:+.1%} | {r['measured_mfu']:.1%} |")
    lines.append("")
    published = [r for r in found if not r["row"]["gpus_inferred"]]
    timed = [r for r in found if not r["row"]["time_suspect"]]
    lines.append(_summary("peak, all", [r["peak_error"] for r in found]))
    lines.append(_summary("peak, GPU count published", [r["peak_error"] for r in published]))
    lines.append(_summary("steady vs static, GPU count published (an inferred row's is no check)",
                          [r["static_error"] for r in published]))
    lines.append(_summary("iteration time, all but the † rows", [r["time_error"] for r in timed]))
    lines.append(_summary("iteration time, GPU count published, all but the † rows",
                          [r["time_error"] for r in timed if not r["row"]["gpus_inferred"]]))
    lines.append(f"- skipped: {', '.join(s['id'] for s in load()['skipped'])} (tests/plugins/data/"
                 "megatron_ci_moe_measured.json states why).")
    return "\n".join(lines) + "\n"


START, END = "<!-- megatron-ci-moe:start -->", "<!-- megatron-ci-moe:end -->"


def main() -> None:
    registry = api.build_registry()
    text = section(results(registry))
    if "--write" in sys.argv[1:]:  # docs/accuracy.md's section between the markers
        from marked_section import write_section

        write_section(HERE.parent / "docs" / "accuracy.md", START, END,
                      f"{START}\n\n{text}\n{END}")
    print(text, end="")
    print()
    print("World-size inference (gpus: hp's model states GiB; the measured steady GiB; the fewest GPUs whose states fit):")
    for row in rows():
        if row["gpus_inferred"]:
            shown = ", ".join(f"{g}: {s / GIB:.2f}" for g, s in world_candidates(row, registry))
            print(f"- {row['id']}: {shown}; measured {row['measured']['steady_bytes'] / GIB:.2f}, "
                  f"inferred {inferred_world(row, registry)}, priced at {row['gpus']}")


if __name__ == "__main__":
    main()
