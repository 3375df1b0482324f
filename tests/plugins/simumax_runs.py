"""All 43 B200 rows of SimuMax v1.2's perf-vs-real table, built as each row ran.

``data/simumax_b200_runs.json`` holds the rows of SimuMax's
``docs/b200/b200_release_v1.2_summary.json`` (commit 4dcaae51, tag v1.2) with
the layout each ran and, per model, a Hugging Face style config as Megatron
ran it (derived from SimuMax's launchers; see the file's ``notes``). Models and
layouts are built as ``measured_cases.py`` builds the public cases: the config
through :func:`~hp_plugins.models.hf.model_from_hf_config` (vocabulary
``--vocab-size + 1``, which the ``megatron`` runtime pads to ``128 * tp``),
truncated to the layers run with ``ModelSpec.with_body_layers``, MoE capacity
padding and group-limited routing as the launcher passed them; degrees, micro-batch size, global batch and
sequence length from the row (``cp_kind`` as the row ran ``--cp-comm-type``).
The 10 rows whose layout is in ``data/megatron_measured.json`` build
the same model and layout as that file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import attrs

from hp_core.specs import ModelSpec, ParallelSpec
from hp_plugins.models.hf import model_from_hf_config
from measured_cases import with_megatron_capacity

SIMUMAX_FILE = Path(__file__).resolve().parent / "data" / "simumax_b200_runs.json"


def load() -> dict:
    """The whole data file."""
    return json.loads(SIMUMAX_FILE.read_text(encoding="utf-8"))


def simumax_model(key: str, entry: dict, layers: int, registry, router_groups: int | None = None) -> ModelSpec:
    """Model *key* as run: its config, truncated to *layers* body layers, MoE capacity as passed; a group-limited
    router (``topk_method: group_limited_greedy``) in the row's *router_groups* (``--moe-router-num-groups
    $EP_SIZE``), ``router_group_topk`` of them per token."""
    config = dict(entry["hf_config"])
    if config.get("topk_method") == "group_limited_greedy":
        config.update(n_group=router_groups, topk_group=entry["megatron_moe"]["router_group_topk"])
    model = model_from_hf_config(config, name=key, source=f"SimuMax v1.2 B200 {key}",
                                 where=f"{SIMUMAX_FILE.name} $.models.{key}.hf_config")
    model = model.with_body_layers(layers, registry.kinds_placed("body"))
    moe = entry.get("megatron_moe")
    return with_megatron_capacity(model, moe)


def simumax_layout(row: dict, has_experts: bool) -> ParallelSpec:
    """The row's layout. Expert TP is Megatron's (= TP) for MoE models, 1 (inert) for dense ones."""
    return ParallelSpec(
        dp=row["dp"],
        tp=row["tp"],
        pp=row["pp"],
        cp=row["cp"],
        cp_kind=row["cp_kind"],
        ep=row["ep"],
        etp=row["etp"] if has_experts else 1,
        sp=row["sp"],
        micro_batch_size=row["micro_batch_size"],
        global_batch_size=row["global_batch_size"],
        seq_len=row["seq_len"],
    )


def simumax_rows(registry) -> Iterator[tuple[dict, ModelSpec, ParallelSpec]]:
    """Each measured row with its model and layout, in the summary's order."""
    data = load()
    models = data["models"]
    for row in data["rows"]:
        entry = models[row["model"]]
        model = simumax_model(row["model"], entry, row["layers"], registry, row.get("moe_router_num_groups"))
        has_experts = any(hasattr(g.config, "capacity_factor") for g in model.layers)
        yield row, model, simumax_layout(row, has_experts)


def unslowed(profile):
    """*profile* with no device's ``sustained_slowdown``: every kernel as measured alone."""
    return attrs.evolve(profile, devices=tuple(attrs.evolve(d, sustained_slowdown=None) for d in profile.devices))


def fitted_slowdown(pairs) -> float:
    """The factor ``k`` minimising ``sum(((k * estimated - measured) / measured) ** 2)`` over ``(estimated, measured)`` pairs.

    Least squares in relative error: ``k = sum(e/m) / sum((e/m) ** 2)``.
    """
    ratios = [estimated / measured for estimated, measured in pairs]
    return sum(ratios) / sum(r * r for r in ratios)
