"""The full-iteration MoE rows of tests/plugins/data/fp8_measured_runs.json (``moe_fi_rows``): Megatron-Bridge's Qwen3,
DeepSeek-V3 and GPT-OSS 120B MXFP8 rows of the 26.06, 26.06.01 and 26.08 containers, whose configs capture the full iteration in CUDA graphs with
FP8 attention, a static per-rank token budget and the paged stash. Each states its summary row, its release's config
and layout, the runtime options as run and what hp does not price; held out; docs/precision.md's table and prose are
today's."""

from __future__ import annotations

import pytest

from mbridge_rows import ARCHIVE, ROOT  # tests/plugins/mbridge_rows.py
from mbridge_rows import cells as _cells
from mbridge_rows import fp8_data as _data
from mbridge_rows import fp8_runs as _module
from mbridge_rows import precision_prose as _prose

CONTAINERS = {"26.06": "v0.5.0", "26.06.01": "v0.5.1", "26.08": "v0.6.0"}
SYSTEM = {"gb200": "DGX-GB200", "gb300": "DGX-GB300", "b300": "DGX-B300"}


def _rows() -> dict:
    return {r["id"]: r for r in _data()["moe_fi_rows"]}


def test_the_rows_state_their_summary_row_release_and_options():
    rows = _rows()
    expected = [f"mb{c}-{hw}-{model}-mxfp8" for c in CONTAINERS for hw in ("gb200", "gb300")
                for model in ("qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3")]
    expected += ["mb26.06-b300-qwen3-30b-a3b-mxfp8", "mb26.06-gb300-deepseek-v3-mxfp8-gbs15360"]
    # GPT-OSS: 26.06 and 26.08 (26.06.01's rows are footnoted as a cuDNN front-end regression and left out).
    expected += [f"mb{c}-{hw}-gpt-oss-120b-mxfp8" for c in ("26.06", "26.08") for hw in ("gb200", "gb300")]
    assert sorted(rows) == sorted(expected)
    data = _data()
    runs = _module()
    for rid, row in rows.items():
        container = rid[2:].split("-")[0]
        source = data["sources"][row["source"]]
        family = {"deepseek-v3": "dsv3", "gpt-oss-120b": "gpt-oss"}.get(row["model"], "moe")
        assert row["source"] == row["runtime_options_source"] == f"megatron-bridge-{family}-fi-{container}", rid
        assert ARCHIVE in source and CONTAINERS[container] in source and "d0b3b775498a8ae6870075f1a5fc32bc260aa1b3" in source
        # 26.08's rows are in docs/performance-summary.md, the others in the archive.
        line_key = "summary_line" if container == "26.08" else "archive_line"
        assert isinstance(row[line_key], int) and ("performance-summary.md" in source) == (container == "26.08"), rid
        assert row["split"] == "held_out" and row["class"] in runs.MOE_FI_CLASSES and row["class"].endswith(
            row["hardware"].upper()), rid
        # DeepSeek-V3's GB200 configs set no fp8_dot_product_attention; every other row's does.
        attention = not (row["model"] == "deepseek-v3" and row["hardware"] == "gb200")
        assert row["recipe"] == ("mxfp8-param-gather-fp8-attention" if attention else "mxfp8-param-gather"), rid
        assert CONTAINERS[container] in row["config"], rid
        # System, #-GPUs, precision, GBS, MBS, sequence length, TP, PP, CP, VP, EP, tokens/s/GPU, TFLOP/s/GPU.
        cells = _cells(row["row"])
        assert cells[0] == SYSTEM[row["hardware"]] and cells[2] == "MXFP8" and len(cells) == 13, rid
        assert [int(c) for c in cells[1:2] + cells[3:6]] == [row["gpus"], row["global_batch_size"],
                                                              row["micro_batch_size"], row["seq_len"]], rid
        assert [1 if c == "n/a" else int(c) for c in cells[6:11]] == [row["tp"], row["pp"], row["cp"], row["vpp"],
                                                                      row["ep"]], rid
        assert int(cells[11]) == row["tokens_per_second_per_gpu"], rid
        # The layouts of the releases' configs: 30B-A3B on 8 GPUs at EP 8 (micro-batch 4 on GB200, 8 elsewhere);
        # 235B-A22B on 256 at EP 32, PP 8 VP 3 micro-batch 1 on GB200, PP 4 VP 12 micro-batch 2 on GB300.
        if "30b" in rid:
            assert (row["gpus"], row["ep"], row["pp"], row["micro_batch_size"]) == (
                8, 8, 1, 4 if row["hardware"] == "gb200" else 8), rid
        elif row["model"] == "gpt-oss-120b":
            # 64 GPUs, EP 64 on GB200 and 16 on GB300, micro-batch 4, GBS 1,280; no recompute; the MXFP8 output layer.
            assert (row["gpus"], row["ep"], row["pp"], row["micro_batch_size"], row["global_batch_size"]) == (
                64, 64 if row["hardware"] == "gb200" else 16, 1, 4, 1280), rid
            assert "recompute_modules" not in row and "fp8_output_proj true" in row["recipe_settings"], rid
            assert "^" not in row["row"], rid  # no footnoted figure
        elif row["model"] == "deepseek-v3":
            # PP 4 VP 4 EP 64 on GB200, PP 2 VP 8 EP 32 on GB300; micro-batch 1; the layout Et*4|(t*4|)*14tmL.
            assert (row["gpus"], row["ep"], row["pp"], row["vpp"], row["micro_batch_size"]) == (
                (256, 64, 4, 4, 1) if row["hardware"] == "gb200" else (256, 32, 2, 8, 1)), rid
            assert row["pipeline_layout"] == "Et*4|(t*4|)*14tmL" and row["layers_per_stage"] == [4] * 15 + [1], rid
            assert row.get("recompute_modules", []) == (["mla_up_proj"] if row["hardware"] == "gb200" else []), rid
            assert "fp8_output_proj true" in row["recipe_settings"], rid
            assert any("fp8_output_proj" in item for item in row["not_priced"]), rid
        else:
            assert (row["gpus"], row["ep"], row["pp"], row["vpp"], row["micro_batch_size"]) == (
                (256, 32, 8, 3, 1) if row["hardware"] == "gb200" else (256, 32, 4, 12, 2)), rid
        options = {"overlap_grad_reduce": True, "overlap_param_gather": True, "grad_reduce_in_fp32": False,
                   "ep_all_to_all": "hybridep", "cuda_graphs": "full_iteration",
                   "overlap_moe_expert_parallel_comm": True, "delay_wgrad_compute": True,
                   # cutedsl_fused_grouped_mlp (set_workload_base_configs): TE's fused grouped MLP.
                   "moe_fused_grouped_mlp": True}
        if row["pp"] > 1 and row["vpp"] > 1:  # comm_overlap.py: overlap_p2p_comm where PP > 1 and VP > 1
            options["overlap_p2p_communication"] = True
        assert row["runtime_options"] == options, rid
        for setting in ("moe_expert_rank_capacity_factor 1.5", "moe_paged_stash",
                        "moe_pad_experts_for_cuda_graph_inference"):
            assert setting in row["recipe_settings"], (rid, setting)
        assert ("fp8_dot_product_attention true" in row["recipe_settings"]) == attention, rid
        if row["model"].startswith("qwen3"):
            assert "recompute_granularity None" in row["recipe_settings"] and "recompute_modules" not in row, rid


def test_each_row_names_the_budget_and_the_stash_as_not_priced():
    """The budget by hand: the rank's local tokens (micro-batch x 4,096) x top-k x 1.5, already a multiple of 256;
    the received tokens under forced balance local x top-k; an expert's local x top-k x EP / the experts (Qwen3 128
    experts, top-8; DeepSeek-V3 256, top-8; GPT-OSS 120B 128, top-4)."""
    by_mbs = {1: ("49,152", "32,768"), 2: ("98,304", "65,536"), 4: ("196,608", "131,072"), 8: ("393,216", "262,144")}
    for rid, row in _rows().items():
        joined = " ".join(row["not_priced"])
        topk = 4 if row["model"] == "gpt-oss-120b" else 8
        # At top-4 a micro-batch of 4 has the budget of a micro-batch of 2 at top-8.
        budget, received = by_mbs[row["micro_batch_size"] * topk // 8]
        assert f"top-k {topk} x 1.5" in joined, rid
        assert f"are {budget} rows" in joined and f"received tokens {received} on average" in joined, rid
        per_expert = row["micro_batch_size"] * 4096 * topk * row["ep"] // (256 if row["model"] == "deepseek-v3" else 128)
        assert f"beside the {per_expert:,} an expert receives" in joined, rid
        for item in ("paged stash", "overflow fallback", "CuTe DSL fused grouped MLP", "MXFP8 parameter all-gather",
                     "FP8 grouped (expert) GEMMs"):
            assert item in joined, (rid, item)
        assert ("FP8 attention's quantization" in joined) == row["recipe"].endswith("-fp8-attention"), rid
    assert by_mbs[4][0] == f"{4 * 4096 * 8 * 3 // 2:,}" and 4 * 4096 * 8 * 3 // 2 % 256 == 0


def test_step_times_by_hand_and_the_pipeline_split():
    runs = _module()
    rows = _rows()
    # 512 x 4,096 / (40,706 x 8) = 6.440 s; 8,192 x 4,096 / (7,376 x 256) = 17.770 s; / (8,816 x 256) = 14.868 s.
    assert runs.measured_seconds(rows["mb26.06-gb200-qwen3-30b-a3b-mxfp8"]) == pytest.approx(6.440, abs=5e-4)
    assert runs.measured_seconds(rows["mb26.06-gb200-qwen3-235b-a22b-mxfp8"]) == pytest.approx(17.770, abs=5e-4)
    assert runs.measured_seconds(rows["mb26.08-gb300-qwen3-235b-a22b-mxfp8"]) == pytest.approx(14.868, abs=5e-4)
    # DeepSeek-V3: 4,096 x 4,096 / (4,969 x 256) = 13.189 s; 15,360 x 4,096 / (6,422 x 256) = 38.268 s.
    assert runs.measured_seconds(rows["mb26.06-gb200-deepseek-v3-mxfp8"]) == pytest.approx(13.189, abs=5e-4)
    assert runs.measured_seconds(rows["mb26.06-gb300-deepseek-v3-mxfp8-gbs15360"]) == pytest.approx(38.268, abs=5e-4)
    # GPT-OSS: 1,280 x 4,096 / (28,947 x 64) = 2.830 s.
    assert runs.measured_seconds(rows["mb26.06-gb200-gpt-oss-120b-mxfp8"]) == pytest.approx(2.830, abs=5e-4)
    # (94 + 2) / 24 = 4 a chunk at PP 8 VP 3 (3 first and last); (94 + 2) / 48 = 2 at PP 4 VP 12 (1 first and last).
    assert runs.layout(rows["mb26.06-gb200-qwen3-235b-a22b-mxfp8"], 94).layers_per_stage == (3,) + (4,) * 22 + (3,)
    assert runs.layout(rows["mb26.06-gb300-qwen3-235b-a22b-mxfp8"], 94).layers_per_stage == (1,) + (2,) * 46 + (1,)


def test_the_priced_rows_left_the_skipped_lists_and_the_others_say_why():
    data = _data()
    for key in ("rows_skipped_gb200", "rows_skipped_gb300"):
        assert not any(("Qwen3" in s["row"] or "DeepSeekV3" in s["row"]) and "26.06" in s["row"] for s in data[key]), key
    left = [s for key in ("rows_skipped_gb200", "rows_skipped_gb300") for s in data[key] if "GPT OSS" in s["row"]]
    # 26.06.01's GPT-OSS rows, which the summary footnotes ([^gpt-oss-note]: a cuDNN front-end regression), and
    # 26.06's B300 GPT-OSS row (TE graphs, no full-iteration graph).
    assert len(left) == 2 and all("26.06.01" in s["row"] and "[^gpt-oss-note]" in s["row"] for s in left)
    for s in left:
        assert "cudnn-frontend#256" in s["why"] and "moe_fi_rows" in s["why"] and "not for an error" in s["why"], s["row"]
    assert "DGX-B300" in left[1]["row"] + left[0]["row"]
    # 25.11's GB200 DeepSeek-V3 row stays left out: its release's config disagrees.
    dsv3 = [s for s in data["rows_skipped_gb200"] if "DeepSeekV3" in s["row"]]
    assert len(dsv3) == 1 and dsv3[0]["row"].startswith("25.11") and "the row and the release disagree" in dsv3[0]["why"]
    assert "moe_fi_rows" in data["moe_rows_note_gb300"] and "held out" in data["moe_fi_rows_note"]


def test_the_page_table_is_current_and_its_prose_states_its_figures():
    runs = _module()
    found = runs.moe_fi_results()
    section = runs.moe_fi_section(found)
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    assert section in page, "regenerate with: python benchmarks/fp8_runs.py"
    prose = _prose()
    mae = {}
    for cls in runs.MOE_FI_CLASSES:
        errors = [abs(r["error"]) for r in found if r["class"] == cls]
        mae[cls.rsplit(", ", 1)[1]] = f"{sum(errors) / len(errors):.1%}"
    assert (f"The held-out error is {mae['GB200']} on GB200, {mae['GB300']} on GB300 and {mae['B300']} on B300's one "
            "row, hp slower than measured on every GB200 and B300 Qwen3 row and every DeepSeek-V3 row, faster on every "
            "GPT-OSS row and on GB300's 235B-A22B rows") in prose
    # (Slower on every Qwen3 row before the fused grouped MLP was priced, 2026-12-03.)
    assert all((r["error"] < 0) == ("gpt-oss" in r["id"] or "-gb300-qwen3-235b" in r["id"]) for r in found)
    old = {r["id"]: r for r in runs.moe_results()}
    by_id = {r["id"]: r for r in found}

    def ratio(hw, model, key):
        return f"{old[f'mb26.04.01-{hw}-{model}-mxfp8'][key] / by_id[f'mb26.06-{hw}-{model}-mxfp8'][key]:.2f}"

    ran = [ratio(hw, "qwen3-30b-a3b", "measured_seconds") for hw in ("gb200", "gb300", "b300")]
    priced = [ratio(hw, "qwen3-30b-a3b", "estimated_seconds") for hw in ("gb200", "gb300", "b300")]
    assert (f"30B-A3B ran {ran[0]} times faster on GB200, {ran[1]} on GB300 and {ran[2]} on B300, where hp prices "
            f"{priced[0]}, {priced[1]} and {priced[2]} times faster") in prose
    ran = [ratio(hw, "qwen3-235b-a22b", "measured_seconds") for hw in ("gb200", "gb300")]
    priced = [ratio(hw, "qwen3-235b-a22b", "estimated_seconds") for hw in ("gb200", "gb300")]
    assert f"235B-A22B ran {ran[0]} times faster on GB200 and {ran[1]} on GB300, priced {priced[0]} and {priced[1]}" in prose
    from hp_core import api

    registry = api.build_registry()
    row = by_id["mb26.06-gb200-qwen3-30b-a3b-mxfp8"]
    compute = runs.price_moe(row["layout"], registry).compute_seconds
    assert compute > row["measured_seconds"]
    assert f"({compute:.3f} s against {row['measured_seconds']:.3f} s on GB200 in 26.06" in prose
    qwen3 = [r for r in found if r["layout"]["model"].startswith("qwen3")]
    bare = [1 - runs.price_moe(r["layout"], registry, "mxfp8").step_seconds / r["estimated_seconds"] for r in qwen3]
    assert f"under `mxfp8` they are {min(bare):.1%} to {max(bare):.1%} faster" in prose
    mla = by_id["mb26.06-gb300-deepseek-v3-mxfp8"]
    unfp8 = runs.price_moe(mla["layout"], registry, "mxfp8").step_seconds
    assert unfp8 > mla["estimated_seconds"]
    assert f"would be {unfp8:.3f} s under `mxfp8` against {mla['estimated_seconds']:.3f} s" in prose
    dsv3 = [ratio(hw, "deepseek-v3", key) for key in ("measured_seconds", "estimated_seconds") for hw in ("gb200", "gb300")]
    assert f"ran {dsv3[0]} times faster on GB200 and {dsv3[1]} on GB300, priced {dsv3[2]} and {dsv3[3]}. On 30B-A3B" in prose
    ranges = {}
    for model, hw in (("qwen3", "gb200"), ("qwen3", "gb300"), ("deepseek", "gb200"), ("deepseek", "gb300"),
                      ("gpt-oss", "gb200"), ("gpt-oss", "gb300")):
        errors = [r["error"] for r in found if model in r["id"] and f"-{hw}-" in r["id"]]
        ranges[model, hw] = f"{min(errors):+.1%} to {max(errors):+.1%}"
    assert (f"Qwen3 {ranges['qwen3', 'gb200']} on GB200 and {ranges['qwen3', 'gb300']} on GB300, DeepSeek-V3 "
            f"{ranges['deepseek', 'gb200']} on GB200 and {ranges['deepseek', 'gb300']} on GB300") in prose
    assert f"(GPT-OSS {ranges['gpt-oss', 'gb200']} on GB200 and {ranges['gpt-oss', 'gb300']} on GB300)" in prose
