"""The torchtitan and torchao rows of tests/plugins/data/fp8_measured_runs.json, priced for ``benchmarks/fp8_runs.py``
(which prints their tables and re-exports these names): the memory rows (``memory_rows``: torchtitan's and torchao's
Llama 3 8B peak memory under torchao's float8 and MX converters, priced through the torchtitan importer), torchao's Llama4
MXFP8 rows (``torchao_moe_rows``), the torchtitan / torchao Float8 step-time rows (``torchtitan_rows``) and the PyTorch /
Nebius DeepSeek-V3 671B rows on 256 B200s (``torchtitan_dsv3_rows``: bf16, DeepEP, MXFP8 grouped GEMMs) and DeepSeek-V3
671B on 64 GB300s (``torchtitan_gb300_rows``: the bf16 control of torchtitan's NVFP4 page, step time and memory) and
Llama 3 8B on 4 GB200s (``torchtitan_gb200_rows``: the BF16 and MXFP8 arms of that page's Llama runs, step time and
memory), each
built as tests/plugins/scale_cases.py builds those pages' bf16 rows. Nothing is fitted to them (docs/precision.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import attrs

from hp_core import api

DATA = Path(__file__).resolve().parents[1] / "tests" / "plugins" / "data" / "fp8_measured_runs.json"


def _scale_cases():
    """tests/plugins/scale_cases.py: the Grand Teton case device, the torchtitan step-time formula, the rows' builders."""
    plugins = str(Path(__file__).resolve().parents[1] / "tests" / "plugins")
    if plugins not in sys.path:
        sys.path.insert(0, plugins)
    import scale_cases

    return scale_cases


# The memory rows whose torchtitan kept the last decoder layer gathered after forward (apply_fsdp's default from
# c22d1a8, April 2024, until 83e6941, 2025-07-28: runtime option reshard_last_layer_after_forward false): torchtitan
# 9dec370 (torchtitan-202412), the January 2025 build of 7a04053 and torchtitan 0.0.2 (the version torchtitan's
# assets/version.txt states from December 2024 to June 2025; torchao's H100 rows). torchao's MI300x and B200 rows ran
# 2c8b594 and 6fc499f, both after 83e6941. torchao's pretraining tutorial's rows (ao-tut-*) link torchtitan 775a486
# (2025-06-03), before 83e6941 too.
_KEEPS_LAST_LAYER = ("tt2412-", "tt-h100-", "ao-h100-", "ao-tut-")


def _torchtitan_peak_gib(row: dict, recipe: str, registry) -> float:
    """hp's reserved GiB of a torchtitan memory row's layout (Llama 3 8B, FSDP over the row's GPUs, per-op SAC) under
    *recipe*: the peak and what the caching allocator keeps beside it (``StageEstimate.reserved_bytes``), as every row
    is torchtitan's logged max reserved memory."""
    from hp_core.io.convert import ConfigFile, structure
    from hp_core.io.job import estimate_job, resolve_job
    from hp_plugins.importers.torchtitan import import_torchtitan

    model = {"name": "llama3", "flavor": "8B"}
    data = {"model": model, "optimizer": {"name": "AdamW"},
            "training": {"local_batch_size": row["local_batch_size"], "seq_len": 8192},
            "parallelism": {"data_parallel_shard_degree": -1},
            "activation_checkpoint": {"mode": "selective", "selective_ac_option": "op"}}
    if recipe == "torchao-mxfp8":  # torchao's llama3.sh with MX_RECIPE at e4e681be6: --model.converters=mx --mx.recipe_name
        model["converters"] = ["mx"]
        data["mx"] = {"recipe_name": row["mx_recipe_name"]}
    elif recipe != "bf16":
        model["converters"] = ["float8"]
        data["float8"] = ({"enable_fsdp_float8_all_gather": True, "precompute_float8_dynamic_scale_for_fsdp": True}
                          if recipe == "torchao-float8-tensorwise" else {"recipe_name": "rowwise"})
    imported = import_torchtitan(data, registry, devices=row["gpus"])
    if row["id"].startswith(_KEEPS_LAST_LAYER):
        # ... and whose embedding was in the root unit (83e6941 gave it its own: the importer's embedding_unit own).
        imported.document["runtime"].setdefault("options", {}).update(reshard_last_layer_after_forward=False,
                                                                      embedding_unit="root")
    if recipe == row["recipe"] and row.get("gathers_as_run"):
        # The run gathered its FSDP parameters otherwise than hp's recipe says (torchao's tutorial's tensorwise run with
        # the toml's enable_fsdp_float8_all_gather false: bf16 gathers): the recipe with the row's gathers_as_run fields,
        # a variant made here as price_torchtitan makes it, not an hp recipe.
        variant = attrs.evolve(registry.precision_recipe(recipe), name=f"{recipe}-gathers-as-run", **row["gathers_as_run"])
        registry = attrs.evolve(registry, precision_recipes=registry.precision_recipes + (variant,))
        imported.document["precision"]["recipe"] = recipe = variant.name
    job = resolve_job(structure(imported.document, ConfigFile, registry), registry)
    assert job.precision.recipe == recipe, (row["id"], job.precision.recipe)
    return max(stage.reserved_bytes for stage in estimate_job(job, registry).stages) / 2**30


def memory_results(registry=None) -> list[dict]:
    """Each memory row priced: an ``absolute`` row's peak, a ``recipe_effect`` row's measured baseline times
    hp's FP8 peak over its bf16 peak (torch.compile is not priced, so compiled rows are compared so)."""
    registry = registry or api.build_registry()
    rows = json.loads(DATA.read_text())["memory_rows"]
    by_id = {row["id"]: row for row in rows}
    found = []
    for row in rows:
        if row["check"] == "baseline":
            continue
        hp = _torchtitan_peak_gib(row, row["recipe"], registry)
        if row["check"] == "recipe_effect":
            base = by_id[row["baseline"]]
            effect = hp / _torchtitan_peak_gib(row, "bf16", registry)
            estimated = base["memory_gib"] * effect
        else:
            effect, estimated = None, hp
        recipe = row["recipe"] + (", gathers as run" if row.get("gathers_as_run") else "")
        found.append({"id": row["id"], "split": row["split"], "recipe": recipe, "check": row["check"],
                      "measured_gib": row["memory_gib"], "estimated_gib": estimated, "effect": effect,
                      "not_priced": bool(row.get("not_priced")),
                      "error": (estimated - row["memory_gib"]) / row["memory_gib"]})
    return found


def memory_section(found: list[dict]) -> str:
    """The memory table docs/precision.md shows (tests/plugins/test_fp8_runs.py checks it is current)."""
    lines = ["| run | split | recipe | check | measured GiB | hp GiB | hp FP8 / bf16 | error |", "|---|---|---|---|---:|---:|---:|---:|"]
    for r in found:
        effect = "" if r["effect"] is None else f"{r['effect']:.4f}"
        lines.append(f"| `{r['id']}` | {r['split']} | {r['recipe']} | {r['check']} | {r['measured_gib']:.2f} | {r['estimated_gib']:.2f} "
                     f"| {effect} | {r['error']:+.1%} |")
    errors = [abs(r["error"]) for r in found]
    lines.append("")
    lines.append(f"Held-out memory rows: {len(errors)}; within 3%: {sum(e <= 0.03 for e in errors)}; largest {max(errors):.1%}.")
    priced = [abs(r["error"]) for r in found if not r["not_priced"]]
    if len(priced) < len(errors):
        # A row whose run held what hp's layout cannot state (its not_priced says what), reported apart.
        lines.append(f"Without the {len(errors) - len(priced)} whose run held what hp does not price (not_priced): "
                     f"within 3%: {sum(e <= 0.03 for e in priced)} of {len(priced)}; largest {max(priced):.1%}.")
    return "\n".join(lines) + "\n"


def _torchao_moe_priced(row: dict, registry, recipe: str):
    """hp's step time and stage-0 memory estimate of a ``torchao_moe_rows`` row under *recipe*, built as
    tests/plugins/scale_cases.py builds torchtitan's MoE rows (its model, layout, ``fsdp2`` options, recompute, device)."""
    sc = _scale_cases()
    runtime = sc.runtime(row, registry)
    kwargs = dict(registry=registry, hardware=sc.hardware(row, registry), runtime=runtime,
                  recompute=sc.recompute(row, registry), precision=attrs.evolve(runtime.precision, recipe=recipe))
    model, layout = sc.model(row, registry), sc.layout(row)
    return api.step_time(model, layout, **kwargs), api.estimate(model, layout, **kwargs).stages[0]


def _recipe_effect_results(rows: list[dict], priced) -> list[dict]:
    """*rows* priced with *priced* (``(row, recipe) -> (StepTime, reserved bytes)``): measured and hp step time and the
    error; the speedup over the row's bf16 ``baseline``, measured and hp's; the max reserved memory, a ``baseline``
    row's absolute, any other's through the recipe's effect (hp's reserved under the row's recipe over its bf16
    reserved of the same layout, times the measured bf16 row: the compiled rows' builds are not stated)."""
    sc = _scale_cases()
    by_id = {row["id"]: row for row in rows}
    found = []
    for row in rows:
        step, reserved = priced(row, row["recipe"])
        base = by_id.get(row.get("baseline"), row)
        base_step, base_reserved = priced(base, "bf16")
        measured, base_measured = sc.measured_seconds(row), sc.measured_seconds(base)
        measured_gib = row["measured"]["memory_gib"]
        effect = reserved / base_reserved
        estimated_gib = reserved / 2**30 if row["check"] == "baseline" else base["measured"]["memory_gib"] * effect
        found.append({"id": row["id"], "recipe": row["recipe"], "check": row["check"], "measured_seconds": measured,
                      "estimated_seconds": step.step_seconds, "error": step.step_seconds / measured - 1, "mfu": step.mfu,
                      "measured_speedup": base_measured / measured, "estimated_speedup": base_step.step_seconds / step.step_seconds,
                      "measured_gib": measured_gib, "estimated_gib": estimated_gib, "effect": effect,
                      "memory_error": estimated_gib / measured_gib - 1,
                      # A run whose reserved memory met the device (allocator retries): its figure is a lower bound.
                      "capacity_bound": bool(row.get("capacity_bound"))})
    return found


def torchao_moe_results(registry=None) -> list[dict]:
    """Each ``torchao_moe_rows`` row priced (:func:`_recipe_effect_results`): the bf16 row's reserved memory absolute
    (hp's first stage's ``reserved_bytes``), an MX row's through the recipe's effect."""
    registry = registry or api.build_registry()
    rows = json.loads(DATA.read_text(encoding="utf-8"))["torchao_moe_rows"]

    def priced(row, recipe):
        step, stage = _torchao_moe_priced(row, registry, recipe)
        return step, stage.reserved_bytes

    return _recipe_effect_results(rows, priced)


def torchao_moe_section(found: list[dict]) -> str:
    """The torchao Llama4 MXFP8 table docs/precision.md shows (tests/plugins/test_fp8_runs.py checks it is current)."""
    lines = ["| run | recipe | measured s | hp s | error | measured speedup | hp speedup | memory check | measured GiB "
             "| hp GiB | hp MX / bf16 | error |", "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in found:
        lines.append(f"| `{r['id']}` | {r['recipe']} | {r['measured_seconds']:.3f} | {r['estimated_seconds']:.3f} | {r['error']:+.1%} "
                     f"| {r['measured_speedup']:.3f} | {r['estimated_speedup']:.3f} | {r['check']} | {r['measured_gib']:.2f} "
                     f"| {r['estimated_gib']:.2f} | {r['effect']:.4f} | {r['memory_error']:+.1%} |")
    mx = [r for r in found if r["check"] != "baseline"]
    gaps = [r["estimated_speedup"] / r["measured_speedup"] - 1 for r in mx]
    lines.append("")
    lines.append(f"Held out: {len(found)} rows, step time mean absolute error {sum(abs(r['error']) for r in found) / len(found):.1%} "
                 f"(the bf16 row {found[0]['error']:+.1%}); the MX speedup over bf16, hp's over the measured {min(gaps):+.1%} to "
                 f"{max(gaps):+.1%}; memory within {max(abs(r['memory_error']) for r in mx):.1%} on the MX rows "
                 f"(the bf16 row {found[0]['memory_error']:+.1%}).")
    return "\n".join(lines) + "\n"

TORCHTITAN_CLASSES = ("single-node FSDP", "multi-node FSDP")
# The recipes torchtitan_rows run, each with its summary lines' label (torchao's tensorwise, then rowwise, scaling).
TORCHTITAN_RECIPES = (("torchao-float8-tensorwise", "Float8 tensorwise"), ("torchao-float8-rowwise", "Float8 rowwise"))


def price_torchtitan(row: dict, registry, recipe: str | None = None, gathers_as_run: bool = False):
    """hp's step time of a ``torchtitan_rows`` row under *recipe* (the row's when ``None``), built as
    ``scale_cases`` builds its torchtitan rows (``fsdp2`` with the row's options, its recompute, the Grand Teton
    device). *gathers_as_run*: the recipe with the row's ``gathers_as_run`` fields (how the run gathered its FSDP
    parameters where hp's recipe says otherwise: the June 2025 runs' bf16 FSDP all-gather): a variant made here, not an
    hp recipe."""
    sc = _scale_cases()
    name = recipe or row["recipe"]
    if gathers_as_run:
        variant = attrs.evolve(registry.precision_recipe(name), name=f"{name}-gathers-as-run", **row["gathers_as_run"])
        registry = attrs.evolve(registry, precision_recipes=registry.precision_recipes + (variant,))
        name = variant.name
    runtime = sc.runtime(row, registry)
    return api.step_time(sc.model(row, registry), sc.layout(row), registry=registry, hardware=sc.hardware(row, registry),
                         runtime=runtime, recompute=sc.recompute(row, registry),
                         precision=attrs.evolve(runtime.precision, recipe=name))


def torchtitan_baseline(row: dict, data: dict) -> tuple[dict, bool]:
    """The row's bf16 baseline as a ``scale_cases`` row, and whether it is a row of scale_measured.json (priced as
    that file prices it) or a memory row (the same layout as *row*, its measured TPS the memory row's)."""
    sc = _scale_cases()
    base = row["baseline"]
    if base["in"] == "scale_measured.json":
        return next(r for r in sc.ROWS if r["id"] == base["id"]), True
    memory = next(r for r in data["memory_rows"] if r["id"] == base["id"])
    return dict(row, id=memory["id"], recipe="bf16", measured={"tps_per_gpu": memory["tokens_per_second_per_gpu"]}), False


def torchtitan_results(registry=None) -> list[dict]:
    """Each ``torchtitan_rows`` row priced: measured and hp step time (hp's recipe; and with the run's FSDP gather where
    the row states it), its bf16 baseline measured and priced, and both FP8 speedups over that baseline."""
    sc = _scale_cases()
    registry = registry or api.build_registry()
    data = json.loads(DATA.read_text())
    found = []
    for row in data["torchtitan_rows"]:
        measured = sc.measured_seconds(row)
        estimated = price_torchtitan(row, registry).step_seconds
        as_run = price_torchtitan(row, registry, gathers_as_run=True).step_seconds if "gathers_as_run" in row else None
        base, in_scale = torchtitan_baseline(row, data)
        base_measured = sc.measured_seconds(base)
        bf16 = (sc.estimated(base, registry) if in_scale else price_torchtitan(base, registry)).step_seconds
        found.append({"id": row["id"], "class": row["class"], "split": row["split"], "layout": row["layout"],
                      "recipe": row["recipe"], "options": row["options"], "baseline": base["id"], "measured_seconds": measured,
                      "estimated_seconds": estimated, "error": estimated / measured - 1, "as_run_seconds": as_run,
                      "as_run_error": None if as_run is None else as_run / measured - 1,
                      "baseline_measured_seconds": base_measured, "bf16_seconds": bf16, "bf16_error": bf16 / base_measured - 1,
                      "measured_speedup": base_measured / measured, "estimated_speedup": bf16 / estimated})
    return found


def torchtitan_section(found: list[dict]) -> str:
    """The torchtitan / torchao Float8 table docs/precision.md shows (tests/plugins/test_fp8_runs.py checks it is current)."""
    lines = ["| run | class | layout | measured s | hp s | error | hp, FSDP gather as run s | error | bf16 baseline | measured s "
             "| hp s | error | measured FP8 speedup | hp FP8 speedup |",
             "|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in found:
        lay = r["layout"]
        degrees = " ".join(f"{k}{lay[k]}" for k in ("dp", "tp") if lay.get(k, 1) > 1)
        extra = " async TP" if r["options"].get("async_tp") else ""
        as_run = "| | " if r["as_run_seconds"] is None else f"| {r['as_run_seconds']:.3f} | {r['as_run_error']:+.1%} "
        lines.append(f"| `{r['id']}` | {r['class']} | {degrees}{extra}, mbs {lay['micro_batch_size']} | {r['measured_seconds']:.3f} "
                     f"| {r['estimated_seconds']:.3f} | {r['error']:+.1%} {as_run}| `{r['baseline']}` "
                     f"| {r['baseline_measured_seconds']:.3f} | {r['bf16_seconds']:.3f} | {r['bf16_error']:+.1%} "
                     f"| {r['measured_speedup']:.2f} | {r['estimated_speedup']:.2f} |")
    lines.append("")
    for recipe, label in TORCHTITAN_RECIPES:
        rows = [r for r in found if r["recipe"] == recipe]
        for cls in TORCHTITAN_CLASSES:
            chosen = [r for r in rows if r["class"] == cls]
            errors = [r["error"] for r in chosen]
            base = [r["bf16_error"] for r in chosen]
            lines.append(f"- {cls}, {label}, held out: {len(errors)} rows, mean absolute error "
                         f"{sum(map(abs, errors)) / len(errors):.1%}, {min(errors):+.1%} to {max(errors):+.1%}, "
                         f"{sum(abs(e) <= 0.10 for e in errors)} within 10% (their bf16 baselines: mean absolute error "
                         f"{sum(map(abs, base)) / len(base):.1%}).")
        errors = [abs(r["error"]) for r in rows]
        lines.append(f"- All {label}: {len(errors)} held-out rows, mean absolute error {sum(errors) / len(errors):.1%}, "
                     f"largest {max(errors):.1%}, {sum(e <= 0.10 for e in errors)} within 10%.")
        gaps = [r["estimated_speedup"] / r["measured_speedup"] - 1 for r in rows]
        lines.append(f"- {label} speedup over the bf16 baseline: hp's over the measured {min(gaps):+.1%} to "
                     f"{max(gaps):+.1%}, mean absolute {sum(map(abs, gaps)) / len(gaps):.1%}.")
    ran = [r for r in found if r["as_run_error"] is not None]
    lines.append(f"- FSDP gather as run (the {len(ran)} rows that gathered their parameters in bf16): mean absolute error "
                 f"{sum(abs(r['as_run_error']) for r in ran) / len(ran):.1%} against {sum(abs(r['error']) for r in ran) / len(ran):.1%} "
                 f"with hp's recipe.")
    return "\n".join(lines) + "\n"


def _substituted(row: dict, **options) -> dict:
    """*row* as hp prices it: its ``substitutions`` in place of the options they name (each states what ran, what hp
    prices and why; one whose ``ran`` is not the row's option is refused) and *options* over both (a variant made
    here, e.g. ``moe_gate="learned"``)."""
    for name, sub in row.get("substitutions", {}).items():
        if row["options"].get(name) != sub["ran"]:
            raise ValueError(f"{row['id']}: substitutions.{name}.ran {sub['ran']!r} is not the row's option {row['options'].get(name)!r}")
    return dict(row, options={**row["options"], **{k: s["priced"] for k, s in row.get("substitutions", {}).items()}, **options})


def _torchtitan_moe_kwargs(priced: dict, registry, recipe: str) -> dict:
    """The pricing arguments of a substituted torchtitan MoE row (:func:`_substituted`): ``scale_cases``' device,
    runtime with the row's options and recompute, and *recipe*."""
    sc = _scale_cases()
    runtime = sc.runtime(priced, registry)
    return dict(registry=registry, hardware=sc.hardware(priced, registry), runtime=runtime,
                recompute=sc.recompute(priced, registry), precision=attrs.evolve(runtime.precision, recipe=recipe))


def _torchtitan_dsv3_priced(row: dict, registry, recipe: str, **options):
    """hp's step time of a ``torchtitan_dsv3_rows`` (or ``torchtitan_gb300_rows``) row under *recipe*, built as
    ``scale_cases`` builds torchtitan's MoE rows, with the row's ``substitutions`` and *options* (:func:`_substituted`)."""
    sc = _scale_cases()
    priced = _substituted(row, **options)
    return api.step_time(sc.model(priced, registry), sc.layout(priced), **_torchtitan_moe_kwargs(priced, registry, recipe))


def torchtitan_dsv3_results(registry=None) -> list[dict]:
    """Each ``torchtitan_dsv3_rows`` row priced: measured and hp step time and the error; the speedup over the bf16
    standard-EP row, measured and hp's; and hp's time with a uniform router's reach (``moe_gate`` learned: each token
    reaching the ranks a uniform top-8 choice would, where the run's round robin reaches one), the routing the run
    did not have, to show what the forced balance moves in hp."""
    sc = _scale_cases()
    registry = registry or api.build_registry()
    rows = json.loads(DATA.read_text(encoding="utf-8"))["torchtitan_dsv3_rows"]
    by_id = {row["id"]: row for row in rows}
    found, priced = [], {}
    for row in rows:
        priced[row["id"]] = step = _torchtitan_dsv3_priced(row, registry, row["recipe"])
        uniform = _torchtitan_dsv3_priced(row, registry, row["recipe"], moe_gate="learned").step_seconds
        base = by_id.get(row.get("baseline"), row)
        base_step = priced[base["id"]]
        measured, base_measured = sc.measured_seconds(row), sc.measured_seconds(base)
        found.append({"id": row["id"], "recipe": row["recipe"], "dispatch": row["options"]["ep_all_to_all"],
                      "measured_seconds": measured, "estimated_seconds": step.step_seconds,
                      "error": step.step_seconds / measured - 1, "mfu": step.mfu,
                      "communication_seconds": step.communication_seconds, "compute_seconds": step.compute_seconds,
                      "recompute_seconds": step.recompute_seconds,
                      "measured_speedup": base_measured / measured, "estimated_speedup": base_step.step_seconds / step.step_seconds,
                      "uniform_seconds": uniform, "uniform_error": uniform / measured - 1})
    return found


def torchtitan_dsv3_section(found: list[dict]) -> str:
    """The PyTorch / Nebius DeepSeek-V3 671B table docs/precision.md shows (tests/plugins/test_fp8_runs_tt_dsv3.py checks
    it is current)."""
    lines = ["| run | recipe | EP dispatch | measured s | hp s | error | measured speedup | hp speedup | hp MFU "
             "| hp communication s | hp, uniform router reach s | error |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in found:
        dispatch = {"nccl": "standard (all_to_all_single)", "deepep": "DeepEP"}[r["dispatch"]]
        lines.append(f"| `{r['id']}` | {r['recipe']} | {dispatch} | {r['measured_seconds']:.2f} | {r['estimated_seconds']:.2f} "
                     f"| {r['error']:+.1%} | {r['measured_speedup']:.3f} | {r['estimated_speedup']:.3f} | {r['mfu']:.1%} "
                     f"| {r['communication_seconds']:.2f} | {r['uniform_seconds']:.2f} | {r['uniform_error']:+.1%} |")
    errors = [r["error"] for r in found]
    lines.append("")
    lines.append(f"Held out: {len(found)} rows, step time mean absolute error {sum(map(abs, errors)) / len(errors):.1%}, "
                 f"{min(errors):+.1%} to {max(errors):+.1%}; the speedup over the bf16 standard-EP row, hp's over the measured "
                 + ", ".join(f"{r['estimated_speedup'] / r['measured_speedup'] - 1:+.1%}" for r in found[1:]) + ".")
    # MXFP8's own step, both rows with DeepEP (the pages measured no MXFP8 row with the standard all-to-all).
    by = {(r["recipe"], r["dispatch"]): r for r in found}
    bf16, mx = by.get(("bf16", "deepep")), by.get(("torchao-mxfp8-experts", "deepep"))
    if bf16 and mx:
        lines.append(f"MXFP8 on the grouped GEMMs over bf16, both with DeepEP: measured "
                     f"{bf16['measured_seconds'] / mx['measured_seconds']:.3f}, hp {bf16['estimated_seconds'] / mx['estimated_seconds']:.3f}.")
    return "\n".join(lines) + "\n"


def torchtitan_gb300_results(registry=None) -> list[dict]:
    """Each ``torchtitan_gb300_rows`` row priced as :func:`_torchtitan_dsv3_priced` prices the B200 rows: measured and
    hp step time and the error, hp's MFU and communication; and its memory, the measured peak reserved (torchtitan's
    max reserved) against hp's ``reserved_bytes`` of the stage with the most, absolute (the rows are compiled, as
    every row priced so; nothing scaled by a baseline)."""
    sc = _scale_cases()
    registry = registry or api.build_registry()
    found = []
    for row in json.loads(DATA.read_text(encoding="utf-8"))["torchtitan_gb300_rows"]:
        step = _torchtitan_dsv3_priced(row, registry, row["recipe"])
        priced = _substituted(row)
        stages = api.estimate(sc.model(priced, registry), sc.layout(priced),
                              **_torchtitan_moe_kwargs(priced, registry, row["recipe"])).stages
        measured, measured_gib = sc.measured_seconds(row), row["measured"]["memory_gib"]
        estimated_gib = max(stage.reserved_bytes for stage in stages) / 2**30
        found.append({"id": row["id"], "recipe": row["recipe"], "dispatch": row["options"]["ep_all_to_all"], "gpus": row["gpus"],
                      "measured_seconds": measured, "estimated_seconds": step.step_seconds,
                      "error": step.step_seconds / measured - 1, "mfu": step.mfu,
                      "communication_seconds": step.communication_seconds, "compute_seconds": step.compute_seconds,
                      "recompute_seconds": step.recompute_seconds, "measured_gib": measured_gib,
                      "estimated_gib": estimated_gib, "memory_error": estimated_gib / measured_gib - 1})
    return found


def torchtitan_gb300_section(found: list[dict]) -> str:
    """The DeepSeek-V3 671B on GB300 table docs/precision.md shows (tests/plugins/test_fp8_runs_tt_gb300.py checks it is
    current)."""
    lines = ["| run | recipe | GPUs | EP dispatch | measured s | hp s | error | hp MFU | hp communication s "
             "| measured GiB | hp GiB | error |", "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in found:
        dispatch = {"nccl": "standard (all_to_all_single)", "deepep": "DeepEP", "hybridep": "HybridEP"}[r["dispatch"]]
        lines.append(f"| `{r['id']}` | {r['recipe']} | {r['gpus']} | {dispatch} | {r['measured_seconds']:.2f} "
                     f"| {r['estimated_seconds']:.2f} | {r['error']:+.1%} | {r['mfu']:.1%} | {r['communication_seconds']:.2f} "
                     f"| {r['measured_gib']:.2f} | {r['estimated_gib']:.2f} | {r['memory_error']:+.1%} |")
    lines.append("")
    lines.append(f"Held out: {len(found)} row{'s' if len(found) != 1 else ''}, step time "
                 + ", ".join(f"{r['error']:+.1%}" for r in found) + ", memory "
                 + ", ".join(f"{r['memory_error']:+.1%}" for r in found) + ".")
    return "\n".join(lines) + "\n"


def _torchtitan_gb200_priced(row: dict, registry, recipe: str):
    """hp's step time and the reserved bytes of the stage with the most, of a ``torchtitan_gb200_rows`` row under
    *recipe*: built as ``scale_cases`` builds torchtitan's rows, with the row's ``substitutions`` (:func:`_substituted`)."""
    sc = _scale_cases()
    priced = _substituted(row)
    kwargs = _torchtitan_moe_kwargs(priced, registry, recipe)
    model, layout = sc.model(priced, registry), sc.layout(priced)
    stages = api.estimate(model, layout, **kwargs).stages
    return api.step_time(model, layout, **kwargs), max(stage.reserved_bytes for stage in stages)


def torchtitan_gb200_results(registry=None) -> list[dict]:
    """Each ``torchtitan_gb200_rows`` row priced (Llama 3 8B on 4 GB200s, torchtitan's NVFP4 page's BF16 and MXFP8
    arms): measured and hp step time and the error; the speedup over the bf16 row, measured and hp's; the max
    reserved memory, the bf16 row's absolute (hp's ``reserved_bytes``), the MXFP8 row's through the recipe's effect
    (hp's MXFP8 reserved over its bf16 reserved of the same layout, times the measured bf16 row), as
    :func:`torchao_moe_results` checks torchao's Llama4 rows."""
    registry = registry or api.build_registry()
    rows = json.loads(DATA.read_text(encoding="utf-8"))["torchtitan_gb200_rows"]
    return _recipe_effect_results(rows, lambda row, recipe: _torchtitan_gb200_priced(row, registry, recipe))


def torchtitan_gb200_section(found: list[dict]) -> str:
    """The Llama 3 8B on 4 GB200s table docs/precision.md shows (tests/plugins/test_fp8_runs_tt_gb200.py checks it is
    current)."""
    lines = ["| run | recipe | measured s | hp s | error | hp MFU | measured speedup | hp speedup | memory check "
             "| measured GiB | hp GiB | hp MX / bf16 | error |", "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in found:
        check = r["check"] + (", capacity-bound" if r["capacity_bound"] else "")
        measured_gib = f"{r['measured_gib']:.2f}" + (" (at least)" if r["capacity_bound"] else "")
        lines.append(f"| `{r['id']}` | {r['recipe']} | {r['measured_seconds']:.3f} | {r['estimated_seconds']:.3f} | {r['error']:+.1%} "
                     f"| {r['mfu']:.1%} | {r['measured_speedup']:.3f} | {r['estimated_speedup']:.3f} | {check} "
                     f"| {measured_gib} | {r['estimated_gib']:.2f} | {r['effect']:.4f} | {r['memory_error']:+.1%} |")
    checked = [r for r in found if not r["capacity_bound"]]
    bound = [r for r in found if r["capacity_bound"]]
    lines.append("")
    lines.append(f"Held out: {len(found)} rows, step time " + ", ".join(f"{r['error']:+.1%}" for r in found)
                 + "; memory " + ", ".join(f"{r['memory_error']:+.1%}" for r in checked)
                 + "".join(f"; `{r['id']}` capacity-bound (allocator retries), hp at least {abs(r['memory_error']):.1%} low"
                           for r in bound) + ".")
    return "\n".join(lines) + "\n"
