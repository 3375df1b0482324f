"""torchtitan's eager MoE kept bytes (the fsdp2 option moe_permutation's traits) and the DeepSeek-V3 16B rows'
logged memory (docs/time.md, "torchtitan's MoE memory"). Numbers derived by hand from the source (the kit's
comments): per routed row the fp32 routed output 4 h, indices and scores 32 (82a9530f6) or 36 (6b9602339)."""

from __future__ import annotations

from pathlib import Path

import attrs

import scale_cases as sc
from hp_core.api import prepare

ROWS = {r["id"]: r for r in sc.ROWS}
MiB = 2**20


def _terms(row_id: str, registry, options: dict | None = None):
    row = ROWS[row_id]
    if options is not None:
        row = dict(row, options=options)
    run = prepare(sc.model(row, registry), sc.layout(row), registry=registry, runtime=sc.runtime(row, registry))
    cost = next(c for k, c in zip(run.layers.kinds, run.layers.costs) if k.name == "mla_moe")
    return cost, {t.op: t.bytes for t in cost.activations}


def test_expert_parallel_keeps_the_fp32_routed_output_indices_and_no_fp32_router_input(registry):
    cost, terms = _terms("tt-dsv3-16b-ep8-b4", registry)
    rows = 4 * 4096 * 6  # local batch 4 x 4096 tokens, top-6: 98,304 routed rows (EP 8, balanced)
    assert terms["expert_out_fp32"] == rows * 2048 * 4 == 805_306_368
    assert terms["routing_indices"] == rows * 32 == 3_145_728
    assert "expert_out" not in terms and "router_fp32_input" not in terms
    assert terms["router_probs"] == 4 * 4096 * 64 * 4  # the fp32 softmax over 64 experts


def test_all_to_all_keeps_the_gate_fp32_input_and_36_bytes_a_row(registry):
    _, terms = _terms("tt-dsv3-16b-ep4-b16-full", registry)
    rows = 16 * 4096 * 6
    assert terms["expert_out_fp32"] == rows * 2048 * 4
    assert terms["routing_indices"] == rows * 36 == 14_155_776
    assert terms["router_fp32_input"] == 16 * 4096 * 2048 * 4  # the gate under fp32 autocast


def test_minimal_async_ep_and_gather_scatter_keep_the_kits_bf16_output(registry):
    for options in ({"moe_permutation": "torchtitan_minimal_async_ep", "elementwise_kernels": "eager"}, {}):
        _, terms = _terms("tt-dsv3-16b-ep4-b16-full", registry, options)
        assert terms["expert_out"] == 16 * 4096 * 6 * 2048 * 2
        assert "expert_out_fp32" not in terms and "routing_indices" not in terms


def test_op_sac_keeps_82a9530f6_save_lists_outputs(registry):
    cost, _ = _terms("tt-dsv3-16b-ep8-b4", registry)
    T = 4 * 4096
    kept = (T * 2048 * 2  # the block's input
            + T * 16 * 192 * 2 + T * 16 * 256 * 2 + T * 64 * 2 + T * 2816 * 2  # wq, wkv_b, gate, shared w3 (odd mms)
            + T * 16 * 128 * 2 + T * 16 * 4  # flex_attention's output and log-sum-exp
            + 2 * T * 6 * 2048 * 2)  # the dispatch's and the combine's all_to_all_single outputs
    assert kept == 1_269_825_536
    assert cost.kept_under(frozenset({"normOp", "ffAct"})) == kept
    # Without the choice the generic switches keep more (2,135 MiB) and no measured policy is stated.
    plain, _ = _terms("tt-dsv3-16b-ep8-b4", registry, {"elementwise_kernels": "eager"})
    assert plain.measured == () and plain.kept_under(frozenset({"normOp", "ffAct"})) == 2135 * MiB


def test_rows_memory_as_logged_and_hp_figures(registry):
    assert [(r["id"], r["measured"]["memory_gib"]) for r in sc.memory_rows()] == [
        ("tt-dsv3-16b-ep8-b4", 73.32), ("tt-dsv3-16b-ep4-b16-full", 66.98), ("tt-dsv3-16b-ep4-b16-full-minimalep", 65.67)]
    assert all(r["split"] == "held-out" for r in sc.memory_rows())
    assert "73.32GiB(92.70%)" in ROWS["tt-dsv3-16b-ep8-b4"]["row"]
    assert "66.98 GiB (70.45%)" in ROWS["tt-dsv3-16b-ep4-b16-full"]["row"]
    assert "65.67 GiB (69.08%)" in ROWS["tt-dsv3-16b-ep4-b16-full-minimalep"]["measured"]["memory_row"]
    s = sc.memory_estimated(ROWS["tt-dsv3-16b-ep8-b4"], registry)
    # 26 MoE layers at 1,211 MiB under op-level SAC, where the generic switches kept 2,135 each; reserved 85.03 before
    # the all-gather pool held the root's all-gather input (0.10 GiB, docs/time.md), 85.13 and 73.84 before the
    # embedding's own FSDP unit (embedding_unit own: its bf16 copy, 102,400 x 2,048 x 2 bytes, freed after forward);
    # 84.87 and 73.45 before PyTorch's two cuBLAS workspaces (64 MiB, hp_core/blas_workspaces.py) were priced
    assert round(s.reserved_bytes / 2**30, 2) == 84.94 and round(s.peak_bytes / 2**30, 2) == 73.52
    root = sc.memory_estimated(dict(ROWS["tt-dsv3-16b-ep8-b4"], options=dict(
        ROWS["tt-dsv3-16b-ep8-b4"]["options"], embedding_unit="root")), registry)
    assert root.peak_bytes - s.peak_bytes == 102_400 * 2_048 * 2


def test_memory_table_is_current(registry):
    page = (Path(__file__).resolve().parents[2] / "docs" / "time.md").read_text(encoding="utf-8")
    shown = page.split("<!-- scale-memory:start -->", 1)[1].split("<!-- scale-memory:end -->", 1)[0]
    assert shown.strip() == sc.memory_report(registry).strip()


_OP_SAC = frozenset({"normOp", "ffAct"})
_UNSTATED = ("op-level SAC (normOp, ffAct) is priced as those switches drop the layer's terms, not as torchtitan's "
             "per-op policy saves: its deepseek_v3 save list is stated at tp 1 with moe_permutation "
             "torchtitan_expert_parallel only (here {here}); docs/time.md")
_ALL_TO_ALL = "moe_permutation torchtitan_all_to_all, whose 2026-06 policy also saves linear and topk"


def _cost_at(registry, options: dict, tp: int):
    row = dict(ROWS["tt-dsv3-16b-ep8-b4"], options=options)
    run = prepare(sc.model(row, registry), attrs.evolve(sc.layout(row), tp=tp), registry=registry,
                  runtime=sc.runtime(row, registry))
    return next(c for k, c in zip(run.layers.kinds, run.layers.costs) if k.name == "mla_moe")


def test_op_sac_where_the_save_list_is_not_stated_is_an_assumption_the_layer_names(registry):
    eager = {"elementwise_kernels": "eager"}
    # Stated (TP 1, 2025-10's MoE): measured whole, nothing assumed.
    stated = _cost_at(registry, dict(eager, moe_permutation="torchtitan_expert_parallel"), 1)
    assert [switches for switches, _ in stated.measured] == [_OP_SAC] and stated.assumed == ()
    # Not stated: TP > 1 (the same MoE code), 2026-06's MoE code (a save list with linear and topk), the kit's own.
    for options, tp, here in ((dict(eager, moe_permutation="torchtitan_expert_parallel"), 2, "tp 2"),
                              (dict(eager, moe_permutation="torchtitan_all_to_all"), 1, _ALL_TO_ALL),
                              (dict(eager, moe_permutation="torchtitan_all_to_all"), 2, f"tp 2 and {_ALL_TO_ALL}"),
                              (dict(eager, moe_permutation="torchtitan_minimal_async_ep"), 1, "another moe_permutation"),
                              (eager, 1, "another moe_permutation")):
        cost = _cost_at(registry, options, tp)
        assert cost.measured == (), (options, tp)
        assert cost.assumed == ((_OP_SAC, _UNSTATED.format(here=here)),), (options, tp)
    # Outside the fsdp2 runtime (no torchtitan_op_sac trait) nothing is assumed: its switches are what it runs.
    row = ROWS["tt-dsv3-16b-ep8-b4"]
    run = prepare(sc.model(row, registry), sc.layout(row), registry=registry, runtime="megatron")
    assert all(c.assumed == () for c in run.layers.costs)


def _estimate(capsys, tp: int, recompute: str, *options: str, json_doc: bool = True):
    import json

    from cli_run import run

    argv = ["estimate", "--model", "deepseek-v2", "--num-layers", 2, "--dp", 8, "--tp", tp, "--ep", 8,
            "--seq-len", 2048, "--runtime", "fsdp2", "--recompute", recompute]
    for option in options:
        argv += ["--runtime-option", option]
    status, out, err = run(capsys, *argv, *(["--json"] if json_doc else []))
    assert (status, err) == (0, ""), err
    return json.loads(out) if json_doc else out


def test_the_estimate_names_the_assumption_where_the_setting_runs(capsys):
    # deepseek-v2's first two layers: a dense MLA layer (its op-level SAC never stated) and an MLA MoE layer.
    dense = f"mla: {_DENSE_MLA}"
    tp2 = _estimate(capsys, 2, "normOp+ffAct", "moe_permutation=torchtitan_expert_parallel")
    assert tp2["provenance"]["recompute_assumptions"] == f"{dense}; mla_moe: " + _UNSTATED.format(here="tp 2")
    default = _estimate(capsys, 1, "normOp+ffAct")
    assert default["provenance"]["recompute_assumptions"] == f"{dense}; mla_moe: " + _UNSTATED.format(
        here="another moe_permutation")
    # Stated (TP 1, torchtitan_expert_parallel): only the dense MLA layer is named.
    stated = _estimate(capsys, 1, "normOp+ffAct", "moe_permutation=torchtitan_expert_parallel")
    assert stated["provenance"]["recompute_assumptions"] == dense
    # A setting that is not op-level SAC: no note.
    for setting in ("none", "full", "normOp"):
        assert "recompute_assumptions" not in _estimate(capsys, 2, setting)["provenance"], setting
    # The table says it in one line.
    text = _estimate(capsys, 2, "normOp+ffAct", "moe_permutation=torchtitan_expert_parallel", json_doc=False)
    note = f"Note (recompute): {dense}; mla_moe: " + _UNSTATED.format(here="tp 2")
    assert note in text.splitlines()


_DENSE_MLA = ("op-level SAC (normOp, ffAct) is priced as those switches drop the layer's terms, not as torchtitan's "
              "per-op policy saves: a dense MLA layer's save list is not stated (an MLA MoE layer's is, at tp 1); "
              "docs/time.md")


def test_a_dense_mla_layer_under_op_sac_is_named_too_and_a_plan_choosing_it_says_so(capsys, registry):
    from cli_run import run

    row = ROWS["tt-dsv3-16b-ep8-b4"]
    run_ = prepare(sc.model(row, registry), sc.layout(row), registry=registry, runtime=sc.runtime(row, registry))
    dense = next(c for k, c in zip(run_.layers.kinds, run_.layers.costs) if k.name == "mla")
    assert dense.measured == () and dense.assumed == ((_OP_SAC, _DENSE_MLA),)
    # The recompute planner picks op-level SAC for the dense MLA layer 0 of four at 52 GiB: its plan says so.
    status, out, err = run(capsys, "recompute", "--model", "deepseek-v2", "--num-layers", 4, "--dp", 8, "--tp", 2,
                           "--ep", 8, "--seq-len", 4096, "--micro-batch-size", 8, "--runtime", "fsdp2",
                           "--hardware", "h100-sxm", "--memory", "52GiB")
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert "Plan: default full; 0 ffAct+normOp, 3 none" in lines
    assert f"Note (recompute): mla: {_DENSE_MLA}" in lines
