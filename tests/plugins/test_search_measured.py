"""The search ranks the measured Megatron-LM layouts in the order of their measured step times.

The runs of ``data/megatron_measured.json`` (8 B200s, Megatron-Core
0.14; models and layouts built as run by ``measured_cases.py``) are grouped by
what one search holds fixed: model, device count, sequence length and global
batch. Layouts are comparable only within a group: a run's step time is for
its own global batch, and the runs took their global batch from
``micro_batch_size * micro-batches * dp``, so the same micro-batch count is a
different global batch for different ``dp``. Of the Llama-3-70B runs at 4096
tokens (12 layers), only global batch 16 holds two layouts
(``tp1 pp2 dp4`` at 4 micro-batches, 843.0 ms, and ``tp4 dp2`` at 8,
765.6 ms); every other group holds one layout (the 32k-token Llama run with
``cp 4``, DeepSeek-V2 at global batch 32, 64 and 256, Llama at 8, 32, 64, 128),
where the check is that the search keeps the layout that ran: it fits and is
ranked.

Each group is searched over the whole space (every layout of 8 devices, every
micro-batch size, ZeRO 0 and 1) with the ``megatron`` runtime on ``b200``.
The search's top K is exact (the step-time bound never drops a candidate of
the true top K), so ``top`` grows until every measured layout of the group is
ranked or the ranking holds every fitting candidate; ranks are therefore ranks
among every fitting candidate. A measured layout is matched on its degrees,
``vpp`` 1 (no run interleaved), its micro-batch size and its ZeRO level as run
(``--use-distributed-optimizer``: 1); sequence parallelism is on exactly when
``tp > 1`` in the runs, as in the search. ``cp_kind`` is not searched: the
32k-token run's ``a2a`` is priced as the runtime's default ``p2p``.
"""

from __future__ import annotations

import json

import pytest

from hp_core.api import search
from measured_cases import MEGATRON_FILE, megatron_layout, megatron_model

MEGATRON = json.loads(MEGATRON_FILE.read_text(encoding="utf-8"))["cases"]
FIRST_TOP = 128


def _groups() -> dict[tuple[str, int, int, int], list[tuple[dict, dict]]]:
    """(model, devices, seq_len, global batch) to the measured (case, row) pairs run with them."""
    groups: dict[tuple[str, int, int, int], list[tuple[dict, dict]]] = {}
    for case in MEGATRON:
        devices = case["training_config"]["parallelism"]["world_size"]
        seq_len = case["training_config"]["batch"]["seq_length"]
        for row in case["measured"]["timing_by_mbc"]:
            key = (case["model"], devices, seq_len, row["global_batch_size"])
            groups.setdefault(key, []).append((case, row))
    return groups


GROUPS = _groups()


def _key(case: dict, row: dict) -> tuple[int, ...]:
    """The run's :attr:`hp_core.engine.search.Layout.key`: ``(dp, cp, tp, pp, vpp, ep, etp, mbs, zero)``."""
    parallel = megatron_layout(case, row)
    config = case["training_config"]
    assert parallel.sp == (parallel.tp > 1), "the search runs sequence parallelism exactly when tp > 1"
    vpp = config["parallelism"]["virtual_pipeline_size"] or 1
    zero = 1 if config["optimizer"]["distributed_optimizer"] else 0
    return (parallel.dp, parallel.cp, parallel.tp, parallel.pp, vpp, parallel.ep, parallel.etp,
            parallel.micro_batch_size, zero)


def test_some_group_ranks_two_layouts():
    assert max(len(runs) for runs in GROUPS.values()) >= 2


@pytest.mark.parametrize("group", list(GROUPS), ids=lambda g: f"{g[0]}-{g[1]}dev-seq{g[2]}-gbs{g[3]}")
def test_measured_layouts_rank_in_measured_order(group, megatron_registry):
    registry = megatron_registry
    runs = sorted(GROUPS[group], key=lambda run: run[1]["real_ms"])
    model_name, devices, seq_len, global_batch = group
    model = megatron_model(runs[0][0], registry)
    assert all(megatron_model(case, registry).layers == model.layers for case, _ in runs)
    keys = [_key(case, row) for case, row in runs]

    top = FIRST_TOP
    while True:
        result = search(model, registry=registry, devices=devices, hardware=registry.hardware_preset("b200-simumax").spec,
                        global_batch_size=global_batch, seq_len=seq_len, runtime="megatron", top=top)
        ranked = {c.layout.key: (rank, c) for rank, c in enumerate(result.top, 1)}
        if all(key in ranked for key in keys) or len(result.top) < top:
            break  # every run ranked, or every fitting candidate is
        top *= 2

    report = [
        f"{case['case_id']} mbc{row['micro_batch_count']}: measured {row['real_ms']} ms, "
        + (f"rank {ranked[key][0]} of {result.fitting} fitting, planned {ranked[key][1].step_seconds * 1e3:.1f} ms "
           f"({ranked[key][1].plan_summary})" if key in ranked else "not ranked")
        for (case, row), key in zip(runs, keys)
    ]
    assert all(key in ranked for key in keys), "; ".join(report) + f"; rejected {dict(result.rejected)}"
    ranks = [ranked[key][0] for key in keys]
    assert ranks == sorted(ranks), "; ".join(report)
