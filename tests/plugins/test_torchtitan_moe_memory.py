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
    # 26 MoE layers at 1,211 MiB under op-level SAC, where the generic switches kept 2,135 each
    assert round(s.reserved_bytes / 2**30, 2) == 85.03 and round(s.peak_bytes / 2**30, 2) == 73.84


def test_memory_table_is_current(registry):
    page = (Path(__file__).resolve().parents[2] / "docs" / "time.md").read_text(encoding="utf-8")
    shown = page.split("<!-- scale-memory:start -->", 1)[1].split("<!-- scale-memory:end -->", 1)[0]
    assert shown.strip() == sc.memory_report(registry).strip()
