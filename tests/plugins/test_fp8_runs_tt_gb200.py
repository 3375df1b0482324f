"""Llama 3 8B on 4 GB200s in tests/plugins/data/fp8_measured_runs.json (torchtitan_gb200_rows): the BF16 and MXFP8 arms of
torchtitan's NVFP4 page's Llama 3 8B runs with the layout its commit message states, checked by hand; the step time from
torchtitan's per-device tps, the BF16 memory absolute and the MXFP8 memory through the recipe's effect; the arms left out;
and docs/precision.md's table and prose as benchmarks/fp8_runs.py prints them today."""

from __future__ import annotations

import pytest

from hp_core.errors import ConfigError
from mbridge_rows import ROOT  # tests/plugins/mbridge_rows.py
from mbridge_rows import fp8_data as _data
from mbridge_rows import fp8_runs as _module
from mbridge_rows import precision_prose as _prose

BF16, MXFP8 = "tt-llama3-8b-gb200-bf16", "tt-llama3-8b-gb200-mxfp8"


def test_the_rows_state_the_page_s_figures_and_the_commit_s_layout():
    data = _data()
    rows = {row["id"]: row for row in data["torchtitan_gb200_rows"]}
    assert list(rows) == [BF16, MXFP8]
    source = data["sources"]["torchtitan-nvfp4-md-llama3-8b"]
    assert "bcc09297a1d892e0ccf6a41fc367e76aab02475b" in source and "4x NVIDIA GB200, 184.3 GiB" in source
    printed = {BF16: ("bf16", 21919, 174.49, "| BF16 | 1.2738 | 21,919 | 174.49 GiB (94.7%) |"),
               MXFP8: ("torchao-mxfp8", 28084, 179.94, "| MXFP8 | 1.2671 | 28,084 | 179.94 GiB (97.6%) |")}
    for rid, (recipe, tps, gib, line) in printed.items():
        row = rows[rid]
        assert row["source"] == "torchtitan-nvfp4-md-llama3-8b" and row["split"] == "held_out"
        assert row["recipe"] == recipe and row["measured"] == {"tps_per_gpu": tps, "memory_gib": gib}
        assert row["row"].startswith(line) and f"| {tps:,} |" in row["row_commit_message"]
        assert f"| {gib} GiB" in row["row_commit_message"]
        assert (row["hardware"], row["runtime"], row["gpus"], row["compile"]) == ("gb200", "fsdp2", 4, True)
        lay = row["layout"]
        # FSDP 4, TP 1: local batch 32 of 2,048, global 128 = 32 x 4 (accumulation 1).
        assert (lay["dp"], lay["tp"], lay["pp"], lay["cp"]) == (4, 1, 1, 1)
        assert (lay["micro_batch_size"], lay["seq_len"], lay["global_batch_size"]) == (32, 2048, 32 * 4)
        assert row["recompute"] == "op_sac" and row["model"]["preset"] == "llama3-8b"
        assert row["options"] == {"norm_implementation": "fused", "elementwise_kernels": "fused",
                                  "loss_implementation": "chunked", "attention_kernel": "flex",
                                  "optimizer_implementation": "fused",  # the harness log: AdamW {'fused': True}
                                  # torchtitan's wrapping since 83e6941 (fsdp.py lines 191-196 at bcc09297a)
                                  "embedding_unit": "own"}
        # The harness's raw log of the run: its step-760 line carries the page's figures.
        assert row["run_log"]["source"] == "rdspring1-nvfp4-harness-llama3"
        assert f"memory: {gib}GiB" in row["run_log"]["line"] and f"tps: {tps:,}" in row["run_log"]["line"]
        assert "step: 760" in row["run_log"]["line"]
        assert row["substitutions"]["attention_kernel"]["ran"] == "flex"
        assert row["substitutions"]["attention_kernel"]["priced"] == "sdpa"
        # The fused wqkv under the per-op policy: the input, wqkv's q, k, v, w1, w2 and the attention's output and fp32
        # log-sum-exp, where hp's separate projections keep q and v (not k): k's 2 x 1,024 bytes a token more.
        fused = 2 * (4096 + (4096 + 2 * 1024) + 14336 + 4096 + 4096) + 4 * 32
        separate = 2 * (4096 + 4096 + 1024 + 14336 + 4096 + 4096) + 4 * 32
        assert (fused, separate, fused - separate) == (65_664, 63_616, 2_048)
        assert (fused - separate) * 32 * 2048 * 32 == 4 * 2**30
        # torchtitan's fused projection (fuse_qkv True at bcc09297a) is stated on the model and priced.
        assert row["model"]["qkv_projection"] == "torchtitan_fused" and "FusedQKVLinear" in row["model"]["source"]
        assert not any("wqkv" in n for n in row["not_priced"])
    assert rows[MXFP8]["baseline"] == BF16 and rows[MXFP8]["check"] == "recipe_effect"
    # The MXFP8 run met the device: 1,517 allocator retries by step 760, most a request for one loss chunk's fp32
    # logits, 8,192 tokens (65,536 / 8 chunks) x 128,256 x 4 bytes; the BF16 run logged none.
    assert (rows[BF16]["run_log"]["retries"], rows[MXFP8]["run_log"]["retries"]) == (0, 1517)
    assert "1517 CUDA memory allocation retries." in rows[MXFP8]["run_log"]["line"]
    assert 65_536 // 8 * 128_256 * 4 == 4_202_692_608 and "4,202,692,608" in rows[MXFP8]["capacity_bound"]
    assert "capacity_bound" not in rows[BF16]
    harness = _data()["sources"]["rdspring1-nvfp4-harness-llama3"]
    assert "--config llama3_8b --parallelism" in harness and "--compile.components model" in harness
    assert "08657eff8c80bb75fd2c907b9a920add045fde0e" in harness and "3038e2d992d2e3ee7e72287a069851ae738f05f0" in harness
    assert rows[BF16]["check"] == "baseline" and rows[BF16]["memory_check"].startswith("absolute")
    assert any("lm_head" in n for n in rows[MXFP8]["not_priced"])


def test_every_arm_left_out_says_why():
    skipped = _data()["torchtitan_gb200_rows_skipped"]
    assert len(skipped) == 2 and all(s["row"] and s["why"] for s in skipped)
    nvfp4, qwen = skipped
    assert "110.95 GiB" in nvfp4["row"] and "103.00 GiB" in nvfp4["row"] and "no hp recipe" in nvfp4["why"]
    assert "112.88 GiB" in qwen["row"] and "112.63 GiB" in qwen["row"] and "not stated" in qwen["why"]


def test_step_time_is_torchtitan_s_tps_and_memory_is_checked_as_torchao_s_llama4_rows(registry):
    """tps: a rank's 32 x 2,048 = 65,536 tokens over the step (tp = pp = cp = 1): 2.98992 s BF16, 2.33357 s MXFP8. The
    BF16 memory is hp's reserved bytes; the MXFP8 memory is the measured BF16 174.49 GiB times hp's MXFP8 over BF16,
    exactly 1 (mx_mm keeps the bf16 operands, FSDP2 gathers bf16): 174.49 / 179.94 - 1 = -3.03%."""
    runs = _module()
    found = {r["id"]: r for r in runs.torchtitan_gb200_results(registry)}
    assert found[BF16]["measured_seconds"] == pytest.approx(32 * 2048 / 21919, rel=1e-12)
    assert round(found[BF16]["measured_seconds"], 5) == 2.98992
    assert round(found[MXFP8]["measured_seconds"], 5) == 2.33357
    assert found[MXFP8]["measured_speedup"] == pytest.approx(28084 / 21919, rel=1e-12)
    data = _data()
    for row in data["torchtitan_gb200_rows"]:
        r = found[row["id"]]
        step, reserved = runs._torchtitan_gb200_priced(row, registry, row["recipe"])
        assert r["estimated_seconds"] == step.step_seconds
        assert r["error"] == pytest.approx(r["estimated_seconds"] / r["measured_seconds"] - 1, rel=1e-12)
    bf16_row = data["torchtitan_gb200_rows"][0]
    sc = runs._scale_cases()
    stage = sc.memory_estimated(runs._substituted(bf16_row), registry)
    assert found[BF16]["estimated_gib"] == pytest.approx(stage.reserved_bytes / 2**30, rel=1e-12)
    # Every layer keeps the fused projection's 65,664 bytes a token under the per-op policy: 32 x 65,536 tokens.
    assert stage.activations_by_kind["dense"] == 32 * 65_536 * 65_664
    # The embedding's own FSDP unit, resharded after its forward: at the loss (the binding point) its bf16 copy,
    # 128,256 x 4,096 x 2 bytes, is no longer held; the all-gather pool in torchtitan's order (the embedding, the
    # layers, the head and norm; 4 ranks: inputs a 4th) holds e + E + Y + R where the root's held its input and output
    # and a layer's output, (E + R) / 4 + (E + R) + Y: 262,670,336 bytes less (the head's input, r = e + 2,048, no
    # longer fits the embedding input's block).
    root = sc.memory_estimated(runs._substituted(bf16_row, embedding_unit="root"), registry)
    E, R, Y = 128_256 * 4_096 * 2, (128_256 * 4_096 + 4_096) * 2, 2 * (4096 * (6144 + 4096) + 3 * 4096 * 14336 + 2 * 4096)
    assert stage.binding_point == root.binding_point == "forward" and root.peak_bytes - stage.peak_bytes == E
    assert root.cached_bytes - stage.cached_bytes == ((E + R) // 4 + (E + R) + Y) - (E // 4 + E + Y + R) == 262_670_336
    # (181.13 and 179.91 before PyTorch's two cuBLAS workspaces, 64 MiB, hp_core/blas_workspaces.py, were priced)
    assert (round(root.reserved_bytes / 2**30, 2), round(stage.reserved_bytes / 2**30, 2)) == (181.19, 179.97)
    assert found[MXFP8]["effect"] == 1.0 and found[MXFP8]["estimated_gib"] == 174.49
    assert round(found[MXFP8]["memory_error"], 4) == round(174.49 / 179.94 - 1, 4) == -0.0303
    assert found[MXFP8]["capacity_bound"] and not found[BF16]["capacity_bound"]
    # FlexAttention is refused on the gb200 preset: the reason the rows carry a substitution.
    with pytest.raises(ConfigError, match="attention_kernel=flex"):
        runs._torchtitan_gb200_priced(dict(bf16_row, substitutions={}), registry, "bf16")


def test_the_page_table_is_current_and_its_prose_states_its_figures():
    runs = _module()
    found = runs.torchtitan_gb200_results()
    by_id = {r["id"]: r for r in found}
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    assert runs.torchtitan_gb200_section(found) in page, "regenerate with: python benchmarks/fp8_runs.py"
    prose = _prose()
    bf16, mx = by_id[BF16], by_id[MXFP8]
    assert "32 x 2,048 = 65,536 tokens a rank over the step (2.990 s BF16, 2.334 s MXFP8)" in prose
    assert f"**BF16: step {bf16['error']:+.1%}, memory {bf16['memory_error']:+.1%}.**" in prose
    assert f"1,057.59 TFLOP/s a GPU by torchtitan's count, {1057.59 / 2500:.1%} of the preset's 2,500" in prose
    # The embedding's gathered bf16 copy (128,256 x 4,096 x 2 bytes), which torchtitan's own FSDP unit reshards after
    # forward: priced (embedding_unit own), the figures before and after stated.
    embedding_gib = 128_256 * 4_096 * 2 / 2**30
    assert f"1.05 GB ({embedding_gib:.2f} GiB)" in prose
    assert f"priced 2026-12-03, when the row read +3.8%" in prose
    assert f"181.19 -> {bf16['estimated_gib']:.2f} GiB" in prose and "(cached 9.93 -> 9.68 GiB)" in prose
    assert f"Before hp priced it (2026-12-03) the row read +1.5% and -6.3%" in prose
    assert f"**MXFP8: step {mx['error']:+.1%}; memory bound by the device.**" in prose
    assert "1,517 CUDA memory allocation retries by step 760" in prose
    assert f"hp's {mx['estimated_gib']:.2f} GiB (1.0000 of bf16" in prose
    assert f"is at least {abs(mx['memory_error']):.1%} low" in prose
    assert (f"hp prices MXFP8 {mx['estimated_speedup']:.3f} times faster than BF16 where the runs measured "
            f"{mx['measured_speedup']:.3f}") in prose
    assert f"So {179.94:.2f} GiB (97.6% of the device)" in prose
