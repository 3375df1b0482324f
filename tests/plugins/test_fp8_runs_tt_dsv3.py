"""The PyTorch / Nebius DeepSeek-V3 671B rows of tests/plugins/data/fp8_measured_runs.json (torchtitan_dsv3_rows): the
layout torchtitan at 1a36996b derives from the recipe's command line, the measured step times from torchtitan's per-device
tps, the one stated substitution (FlexAttention, which hp cannot price on Blackwell), and docs/precision.md's table and
prose as benchmarks/fp8_runs.py prints them today."""

from __future__ import annotations


import pytest

from hp_core.errors import ConfigError
from mbridge_rows import ROOT  # tests/plugins/mbridge_rows.py
from mbridge_rows import fp8_data as _data
from mbridge_rows import fp8_runs as _module
from mbridge_rows import precision_prose as _prose

IDS = ("tt-dsv3-671b-b200-bf16", "tt-dsv3-671b-b200-bf16-deepep", "tt-dsv3-671b-b200-mxfp8-experts-deepep")


def test_rows_state_the_layout_torchtitan_derives_and_their_provenance():
    data = _data()
    rows = data["torchtitan_dsv3_rows"]
    assert tuple(r["id"] for r in rows) == IDS
    assert [(r["recipe"], r["options"]["ep_all_to_all"], r["measured"]["tps_per_gpu"]) for r in rows] == [
        ("bf16", "nccl", 651), ("bf16", "deepep", 859), ("torchao-mxfp8-experts", "deepep", 918)]
    # generate_llm_fqn_per_model_part(4 stages, 61 layers, input 1, output 1) at 1a36996b: 63 effective layers, 63 // 4 = 15
    # with 63 % 4 = 3 stages one more: 16, 16, 16, 15; the first less the embedding, the last less the norm and head.
    split = [16 - 1, 16, 16, 15 - 1]
    for row in rows:
        assert row["source"] == "pytorch-nebius-dsv3-b200" and row["split"] == "held_out" and row["gpus"] == 256, row["id"]
        assert f"{row['measured']['tps_per_gpu']}" in row["row"] and "1a36996b8dffb464340c280d3f0a8139ca4c36b6" in row["config"]
        lay = row["layout"]
        # dp_shard -1 = 256 / (tp 2 x pp 2); expert FSDP = dp x tp / (etp x ep) = 64 x 2 / 32 = 4 (parallel_dims.py).
        assert (lay["dp"], lay["tp"], lay["pp"], lay["vpp"], lay["ep"], lay["etp"]) == (256 // (2 * 2), 2, 2, 2, 32, 1)
        assert lay["dp"] * lay["tp"] // (lay["etp"] * lay["ep"]) == 4
        assert lay["layers_per_stage"] == split and sum(split) == 61
        # Local batch 64 at micro-batch 1 (64 micro-batches, no accumulation) on 64 data-parallel ranks.
        assert (lay["micro_batch_size"], lay["global_batch_size"], lay["seq_len"]) == (1, 64 * 64, 8192)
        assert (lay["schedule"], lay["reshard_after_forward"], lay["sp"]) == ("interleaved_1f1b", False, True)
        assert row["recompute"] == "full" and row["options"]["moe_gate"] == "fake_balanced"
        assert row["model"]["overrides"] == {"num_nextn_predict_layers": 0}
        # The one substitution: what ran (flex, as the row's options say), what hp prices, and why.
        assert row["substitutions"] == {"attention_kernel": {"ran": "flex", "priced": "sdpa", "why": row["substitutions"]["attention_kernel"]["why"]}}
        assert row["options"]["attention_kernel"] == "flex" and "Blackwell" in row["substitutions"]["attention_kernel"]["why"]
        assert any("FlexAttention" in n and "block-causal" in n for n in row["not_priced"]), row["id"]
        assert any("gating GEMM" in n for n in row["not_priced"]), row["id"]
    assert [r.get("baseline") for r in rows] == [None, IDS[0], IDS[0]]
    skipped = data["torchtitan_dsv3_rows_skipped"]
    assert len(skipped) == 2 and "no throughput" in skipped[0]["why"] and "not measured" in skipped[1]["why"]


def test_measured_step_times_are_torchtitan_s_per_device_tps():
    """torchtitan's tps (components/metrics.py at 1a36996b): a rank's 64 x 8,192 tokens over the step and tp x pp = 4."""
    found = {r["id"]: r for r in _module().torchtitan_dsv3_results()}
    for rid, tps in zip(IDS, (651, 859, 918)):
        assert found[rid]["measured_seconds"] == pytest.approx(524288 / (tps * 4), rel=1e-12)
    assert found[IDS[0]]["measured_seconds"] == pytest.approx(201.3395, abs=1e-4)
    assert found[IDS[1]]["measured_speedup"] == pytest.approx(859 / 651) and found[IDS[2]]["measured_speedup"] == pytest.approx(918 / 651)


def test_flex_attention_is_refused_on_blackwell_and_a_wrong_substitution_is_refused(registry):
    """Why the rows carry a substitution: hp refuses FlexAttention on the b200 preset; and a substitution whose ``ran``
    is not the row's option is refused, not applied."""
    runs = _module()
    row = _data()["torchtitan_dsv3_rows"][0]
    with pytest.raises(ConfigError, match="attention_kernel=flex"):
        runs._torchtitan_dsv3_priced(dict(row, substitutions={}), registry, "bf16")
    bad = dict(row, substitutions={"attention_kernel": dict(row["substitutions"]["attention_kernel"], ran="sdpa")})
    with pytest.raises(ValueError, match="substitutions.attention_kernel.ran"):
        runs._torchtitan_dsv3_priced(bad, registry, "bf16")


def test_the_page_table_is_current_and_its_prose_states_its_figures():
    runs = _module()
    found = runs.torchtitan_dsv3_results()
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    assert runs.torchtitan_dsv3_section(found) in page, "regenerate with: python benchmarks/fp8_runs.py"
    std, deepep, mx = found
    prose = _prose()
    assert "64 x 8,192 / (651 x 4) = 201.34 s a step" in prose
    assert f"hp prices the standard all-to-all row {abs(std['error']):.1%} fast" in prose
    assert f"{std['communication_seconds']:.2f} s of its {std['estimated_seconds']:.2f} in communication" in prose
    assert f"it keeps {deepep['communication_seconds']:.2f} s" in prose
    saved_hp = std["estimated_seconds"] - deepep["estimated_seconds"]
    saved = 524288 / (651 * 4) - 524288 / (859 * 4)
    assert f"DeepEP saving {saved_hp:.2f} s a step where the run saved {saved:.2f} s" in prose and f"{saved:.2f}" == "48.75"
    assert f"hp's {deepep['estimated_speedup']:.3f} speedup against the measured {deepep['measured_speedup']:.3f}" in prose
    assert f"the DeepEP rows read {deepep['uniform_error']:+.1%} and {mx['uniform_error']:+.1%}" in prose
    assert (f"measured {918 / 859:.3f}, hp {deepep['estimated_seconds'] / mx['estimated_seconds']:.3f}; hp moves the routed "
            f"experts' GEMMs alone, so its compute falls from {deepep['compute_seconds']:.2f} s to {mx['compute_seconds']:.2f} s "
            f"and its recompute from {deepep['recompute_seconds']:.2f} s to {mx['recompute_seconds']:.2f} s") in prose
    # MXFP8 moves the GEMMs, not the exchange: the DeepEP rows' communication is the same.
    assert mx["communication_seconds"] == pytest.approx(deepep["communication_seconds"], rel=1e-12)


def test_the_run_s_round_robin_reaches_one_rank_where_a_uniform_router_reaches_more():
    """moe_gate fake_balanced (the run's --debug.moe_force_load_balance) against learned: the standard all-to-all sends a
    token once per expert either way (hp's two times within 2%: the router's GEMM and kernels, which fake_balanced leaves out), DeepEP once per rank reached, so only the DeepEP rows move."""
    runs = _module()
    found = runs.torchtitan_dsv3_results()
    assert abs(found[0]["uniform_seconds"] / found[0]["estimated_seconds"] - 1) < 0.02
    for r in found[1:]:
        assert r["uniform_seconds"] > 1.3 * r["estimated_seconds"], r["id"]
