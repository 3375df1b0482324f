"""The DGX-GB300 and DGX-B300 rows of tests/plugins/data/fp8_measured_runs.json (Megatron-Bridge's performance
summaries): each the exact summary row of the archive line it names, the layout the release's config sets, held out;
the rows left out each with a reason."""

from __future__ import annotations

import pytest

from hp_plugins.importers.megatron_options import parse_layout

from mbridge_rows import ARCHIVE, ROOT  # tests/plugins/mbridge_rows.py
from mbridge_rows import cells as _cells
from mbridge_rows import fp8_data as _data
from mbridge_rows import fp8_runs as _module
from mbridge_rows import precision_prose as _prose

CONTAINERS = ("26.02", "26.02.01", "26.04", "26.04.01", "26.06")


def test_the_gb300_llama_rows_state_their_release_config():
    data = _data()
    rows = {r["id"]: r for r in data["rows"] if r["hardware"] in ("gb300", "b300") and "cpu_offloading_num_layers" not in r}
    # No summary section prints a DGX-B300 Llama pre-training row; 26.02.01's 70B rows and FP8 405B row disagree
    # with the release (rows_skipped_gb300), the 70B FP8 rows run Megatron-FSDP with CPU offloading.
    kept = {"26.02": ("70b-mxfp8", "70b-nvfp4", "405b-fp8", "405b-mxfp8", "405b-nvfp4"),
            "26.02.01": ("405b-mxfp8", "405b-nvfp4"),
            "26.04": ("70b-mxfp8", "70b-nvfp4", "405b-fp8", "405b-mxfp8", "405b-nvfp4"),
            "26.04.01": ("70b-mxfp8", "70b-nvfp4", "405b-fp8", "405b-mxfp8", "405b-nvfp4"),
            "26.06": ("405b-fp8", "405b-mxfp8", "405b-nvfp4")}
    assert sorted(rows) == sorted(f"mb{c}-gb300-{'llama3-70b' if s.startswith('70b') else 'llama31-405b'}-{s.split('-')[1]}"
                                  for c, kinds in kept.items() for s in kinds)
    label = {"fp8-megatron-param-gather": "FP8", "mxfp8-param-gather": "MXFP8", "nvfp4": "NVFP4"}
    for row in rows.values():
        container = row["id"][2:].split("-", 1)[0]
        assert row["split"] == "held_out" and row["hardware"] == "gb300" and ARCHIVE in data["sources"][row["source"]]
        assert row["source"] == row["runtime_options_source"] == f"megatron-bridge-gb300-{container}"
        head, table = row["row"].split(": ", 1)
        assert head == f"{container} NeMo Container, {'LLAMA3_70B' if row['model'] == 'llama3-70b' else 'LLAMA3.1_405B'}"
        cells = _cells(table)
        # System, #-GPUs, Precision, GBS, MBS, Sequence Length, FSDP (not in 26.06), TP, PP, CP, VP, EP, tokens/s, TFLOP/s.
        assert len(cells) == (13 if container == "26.06" else 14) and (len(cells) == 13 or cells[6] == "0"), row["id"]
        assert cells[0] == "DGX-GB300" and cells[2] == label[row["recipe"]], row["id"]
        assert (int(cells[1]), int(cells[3]), int(cells[4]), int(cells[5])) == \
            (row["gpus"], row["global_batch_size"], row["micro_batch_size"], row["seq_len"]), row["id"]
        assert [1 if c == "n/a" else int(c) for c in cells[-7:-3]] == [row["tp"], row["pp"], row["cp"], row["vpp"]], row["id"]
        assert int(cells[-2]) == row["tokens_per_second_per_gpu"] and row["ep"] == 1, row["id"]
        # The V2 configs: 70B TP 1, PP 4, VP 5 on 64 GPUs; 405B TP 4, PP 8, VP 4 (MXFP8 TP 2, CP 2) on 256.
        expected = ((64, 1, 4, 1, 5) if row["model"] == "llama3-70b" else
                    (256, 2, 8, 2, 4) if row["recipe"] == "mxfp8-param-gather" else (256, 4, 8, 1, 4))
        assert (row["gpus"], row["tp"], row["pp"], row["cp"], row["vpp"]) == expected, row["id"]
        config = row["config"].split(" ")[0]
        assert config in data["sources"][row["source"]] and "_GB300_" in config and config.endswith("_V2"), row["id"]
        assert row["config"].endswith(" at " + {"26.02": "v0.3.0", "26.02.01": "v0.3.1", "26.04": "v0.4.0",
                                                 "26.04.01": "v0.4.2", "26.06": "v0.5.0"}[container]), row["id"]
        # The runtime options as the config sets them: TP overlap where TP > 1, off for NVFP4 (llama31_405b_pretrain_config_gb300);
        # overlapped pipeline sends at PP > 1 with VP > 1; bf16 gradient reduction.
        options = row["runtime_options"]
        assert ("tp_comm_overlap" in options) == (row["tp"] > 1) and options.get("tp_comm_overlap", False) == \
            (row["tp"] > 1 and row["recipe"] != "nvfp4"), row["id"]
        assert options["overlap_p2p_communication"] and not options["grad_reduce_in_fp32"], row["id"]
        assert options["overlap_grad_reduce"] and options["overlap_param_gather"], row["id"]
        joined = " ".join(row["not_priced"])
        if row["recipe"] == "nvfp4":
            assert "NVFP4BlockScaling" in row["recipe_source"] and "Hadamard" in joined and "stochastic rounding" in joined
            assert "2D block scaling" in joined and "NVTE_USE_FAST_MATH" in joined
            # bf16_with_nvfp4_mixed sets fp4_param_gather from v0.4.2 (26.04.01) on.
            assert ("NVFP4 parameters" in joined) == (container in ("26.04.01", "26.06")), row["id"]
        if row["recipe"] == "fp8-megatron-param-gather":
            assert "overlap_param_gather_with_optimizer_step" in joined and "fp8_param_gather" in joined
        if row["recipe"] == "mxfp8-param-gather":
            assert "MXFP8 parameter all-gather" in joined
    runs = _module()
    # GBS * seq / (tokens/s/GPU * GPUs): 256 x 8,192 / (6,798 x 64) = 4.820 s; 1,536 x 8,192 / (1,048 x 256) = 46.901 s
    # and / (1,413 x 256) = 34.786 s.
    assert runs.measured_seconds(rows["mb26.02-gb300-llama3-70b-nvfp4"]) == pytest.approx(4.820, abs=5e-4)
    assert runs.measured_seconds(rows["mb26.06-gb300-llama31-405b-fp8"]) == pytest.approx(46.901, abs=5e-4)
    assert runs.measured_seconds(rows["mb26.06-gb300-llama31-405b-nvfp4"]) == pytest.approx(34.786, abs=5e-4)
    # 405B's 126 layers with the embedding and the loss counted over 32 chunks: (126 + 2) / 32 = 4 a chunk, 3 first and
    # last; 70B's 80 over 20 chunks, 4 each, no split stated.
    assert runs.layout(rows["mb26.04-gb300-llama31-405b-nvfp4"], 126).layers_per_stage == (3,) + (4,) * 30 + (3,)
    assert "layers_per_stage" not in rows["mb26.04-gb300-llama3-70b-nvfp4"]


def test_the_gb300_and_b300_moe_rows_state_their_layout():
    data = _data()
    runs = _module()
    rows = {r["id"]: r for r in data["moe_rows"] if r["hardware"] in ("gb300", "b300")}
    expected = ([f"mb{c}-{h}-qwen3-30b-a3b-mxfp8" for h in ("gb300", "b300") for c in CONTAINERS[:4]]
                + [f"mb{c}-gb300-qwen3-235b-a22b-mxfp8" for c in CONTAINERS[:4]]
                + [f"mb{c}-b300-qwen3-235b-a22b-mxfp8" for c in ("26.02", "26.04", "26.04.01")]
                + [f"mb{c}-gb300-deepseek-v3-mxfp8" for c in CONTAINERS[:4]]
                + [f"mb{c}-gb300-kimi-k2-mxfp8" for c in CONTAINERS[1:]]
                + [f"mb{c}-b300-deepseek-v3-mxfp8" for c in CONTAINERS])
    assert list(rows) == expected
    for row in rows.values():
        # Kimi K2's configs turn the MXFP8 parameter gather off (kimi_llm_pretrain.py): mxfp8; the others gather.
        assert row["split"] == "held_out" and row["recipe"] == ("mxfp8" if "kimi" in row["id"] else "mxfp8-param-gather"), row["id"]
        assert row["class"] == {"gb300": "Megatron-Core MoE, GB300", "b300": "Megatron-Core MoE, B300"}[row["hardware"]]
        assert _cells(row["row"])[0] == {"gb300": "DGX-GB300", "b300": "DGX-B300"}[row["hardware"]]
        assert row["config"].split(" ")[0].startswith(("QWEN3_30B_A3B_PRETRAIN_CONFIG_" + row["hardware"].upper(),
                                                        "QWEN3_235B_A22B_PRETRAIN_CONFIG_" + row["hardware"].upper(),
                                                        "DEEPSEEK_V3_PRETRAIN_CONFIG_" + row["hardware"].upper(),
                                                        "KIMI_K2_PRETRAIN_CONFIG_" + row["hardware"].upper()))
        assert row["runtime_options"].get("overlap_p2p_communication", False) == (row["pp"] > 1 and row["vpp"] > 1), row["id"]
    # Qwen3 30B-A3B: one node (8 GPUs, EP 8, micro-batch 8), HybridEP, TE graphs of the router and preprocessing.
    for key in (k for k in rows if "30b" in k):
        row = rows[key]
        assert (row["gpus"], row["ep"], row["micro_batch_size"]) == (8, 8, 8) and row["runtime_options"]["ep_all_to_all"] == "hybridep"
    # 512 x 4,096 / (30,376 x 8) = 8.630 s; 8,192 x 4,096 / (6,583 x 256) = 19.911 s and / (2,691 x 256) = 48.708 s.
    assert runs.measured_seconds(rows["mb26.02-gb300-qwen3-30b-a3b-mxfp8"]) == pytest.approx(8.630, abs=5e-4)
    assert runs.measured_seconds(rows["mb26.02-gb300-qwen3-235b-a22b-mxfp8"]) == pytest.approx(19.911, abs=5e-4)
    assert runs.measured_seconds(rows["mb26.02-b300-qwen3-235b-a22b-mxfp8"]) == pytest.approx(48.708, abs=5e-4)
    # Qwen3 235B-A22B's (94 + 2) layers over the chunks, one fewer first and last: PP 4 (24 a stage), PP 4 VP 12 (2 a
    # chunk), PP 8 VP 4 (3), PP 8 (12).
    split = {("gb300", 4, 1): (23,) + (24,) * 2 + (23,), ("gb300", 4, 12): (1,) + (2,) * 46 + (1,),
             ("b300", 8, 4): (2,) + (3,) * 30 + (2,), ("b300", 8, 1): (11,) + (12,) * 6 + (11,)}
    for key in (k for k in rows if "235b" in k):
        row = rows[key]
        assert runs.layout(row, 94).layers_per_stage == split[(row["hardware"], row["pp"], row["vpp"])], key
    # B300 26.02: v0.3.0's config overlaps the expert all-to-all (moe_a2a_overlap), NCCL all-to-all; 26.04.01 HybridEP.
    assert rows["mb26.02-b300-qwen3-235b-a22b-mxfp8"]["runtime_options"] == {
        "overlap_grad_reduce": True, "overlap_param_gather": True, "grad_reduce_in_fp32": False,
        "overlap_moe_expert_parallel_comm": True, "delay_wgrad_compute": True, "overlap_p2p_communication": True}
    assert "ep_all_to_all" not in rows["mb26.04-b300-qwen3-235b-a22b-mxfp8"]["runtime_options"]
    assert rows["mb26.04.01-b300-qwen3-235b-a22b-mxfp8"]["runtime_options"]["ep_all_to_all"] == "hybridep"


def test_the_gb300_and_b300_deepseek_v3_rows_state_their_pipeline_layout():
    """GB300: the config's pp_layout 'Et*4|(t*4|)*14tmL' at PP 2, VP 8 (chunk i on rank i % 2: 32 and 29 decoder
    layers); B300: layout_map[(16, 1)] at PP 16 (26.02 to 26.04) and layout_map[(8, 1)], 'Et*8|(t*8|)*6t*5mL', at PP 8
    (26.04.01, 26.06)."""
    data = _data()
    runs = _module()
    rows = [r for r in data["moe_rows"] if r["model"] == "deepseek-v3" and r["hardware"] in ("gb300", "b300")]
    assert len(rows) == 9
    ranks = {(2, 8): [32, 29], (16, 1): [4] * 15 + [1], (8, 1): [8] * 7 + [5]}
    for row in rows:
        chunks = parse_layout(row["pipeline_layout"])
        assert len(chunks) == row["pp"] * row["vpp"] and row["layers_per_stage"] == [c.count("t") for c in chunks], row["id"]
        assert [i for i, c in enumerate(chunks) if "E" in c] == [0], row["id"]
        assert [i for i, c in enumerate(chunks) if "m" in c or "L" in c] == [len(chunks) - 1], row["id"]
        assert sum(row["layers_per_stage"]) == 61 and row["recompute_modules"] == ["mla_up_proj"], row["id"]
        spec = runs.layout(row, 61)
        assert [sum(spec.layers_per_stage[rank::spec.pp]) for rank in range(spec.pp)] == ranks[(row["pp"], row["vpp"])], row["id"]
        assert row["runtime_options"]["ep_all_to_all"] == "hybridep" and row["etp"] == 1, row["id"]
        graphed = any("TE CUDA graphs" in item for item in row["not_priced"])
        assert graphed == (row["hardware"] == "b300" and row["pp"] == 8), row["id"]
    # 4,096 x 4,096 / (4,612 x 256) = 14.210 s; / (3,541 x 256) = 18.508 s; / (2,983 x 256) = 21.970 s.
    by_id = {r["id"]: r for r in rows}
    assert runs.measured_seconds(by_id["mb26.02-gb300-deepseek-v3-mxfp8"]) == pytest.approx(14.210, abs=5e-4)
    assert runs.measured_seconds(by_id["mb26.06-b300-deepseek-v3-mxfp8"]) == pytest.approx(18.508, abs=5e-4)
    assert runs.measured_seconds(by_id["mb26.02-b300-deepseek-v3-mxfp8"]) == pytest.approx(21.970, abs=5e-4)


def test_the_rows_left_out_state_why():
    data = _data()
    skipped = data["rows_skipped_gb300"]
    # 12 since the 26.06 to 26.08 GB300 DeepSeek-V3 rows joined moe_fi_rows (tests/plugins/test_fp8_runs_moe_fi.py); the
    # Kimi K2 rows joined moe_rows with the kimi-k2 preset, their entry kept as the Nemotron rows' pointer; 14 with 26.08's
    # Nemotron_3_Ultra and DeepSeekV4 Flash rows (tests/plugins/test_fp8_runs_2608_skipped.py); 13 since the 70B FP8 rows of
    # 26.02 to 26.04.01 (Megatron-FSDP, CPU offloading) joined rows (tests/plugins/test_fp8_runs_fsdp_offload.py).
    assert len(skipped) == 13 and all(s["row"] and s["why"] for s in skipped)
    assert not any("Kimi" in s["row"] for s in skipped)
    assert "rows_skipped_gb300" in data["rows_note_gb300"] and "held out" in data["rows_note_gb300"]
    why = " ".join(s["why"] for s in skipped)
    for reason in ("cpu_offloading_num_layers 20", "[^gpt-oss-note]", "fine-tuning",
                   "the row and the release disagree", "no full-iteration graph"):
        assert reason in why, reason
    # The GB200 list no longer says GB300 / B300 lack a preset.
    assert not any("no GB300" in s["why"] for s in data["rows_skipped_gb200"])


def test_the_page_states_the_gb300_llama_rows_figures():
    """The page's GB300 bullet pinned to today's figures: each range the rounded extreme of the rows it names."""
    runs = _module()
    found = {r["id"]: r for r in runs.results()}
    offloading = {r["id"] for r in _data()["rows"] if "cpu_offloading_num_layers" in r}  # their own bullet and test
    gb300 = [r for r in found.values() if r["hardware"] == "gb300" and r["id"] not in offloading]
    ran = [r["as_run_error"] for r in gb300]
    prose = _prose()
    assert f"**GB300 (as run {min(ran):+.1%} to {max(ran):+.1%}, {len(gb300)} rows, held out).**" in prose
    assert all(r["as_run_seconds"] < r["estimated_seconds"] for r in gb300)  # the overlaps only lower a step
    parts = []
    for recipe, name in (("mxfp8-param-gather", "MXFP8"), ("nvfp4", "NVFP4"), ("fp8-megatron-param-gather", "FP8-CS")):
        errors = [r["as_run_error"] for r in gb300 if r["recipe"] == recipe]
        mae = sum(map(abs, errors)) / len(errors)
        parts.append((name, f"{min(errors):+.1%} to {max(errors):+.1%}", len(errors), f"{mae:.1%}"))
    (mx, mx_range, mx_n, mx_mae), (nv, nv_range, nv_n, nv_mae), (cs, cs_range, cs_n, cs_mae) = parts
    assert (f"MXFP8 {mx_range} as run ({mx_n} rows, {mx_mae} mean absolute error), NVFP4 {nv_range} ({nv_n} rows, {nv_mae}), "
            f"FP8-CS {cs_range} ({cs_n} rows, {cs_mae})") in prose
    defaults = sum(abs(r["error"]) for r in gb300) / len(gb300)
    assert f"{defaults:.1%} with the defaults" in prose
    # Against the GB200 row of the same container, model and recipe: measured and priced speed ratios.
    pairs = [(found[r["id"].replace("-gb300-", "-gb200-")], r) for r in gb300 if r["id"].replace("-gb300-", "-gb200-") in found]
    measured = [g["measured_seconds"] / r["measured_seconds"] for g, r in pairs]
    priced = [g["as_run_seconds"] / r["as_run_seconds"] for g, r in pairs]
    assert (f"The runs were {min(measured):.2f} to {max(measured):.2f} times faster than the GB200 rows of the same container, "
            f"model and recipe (each at its own layout: {len(pairs)} pairs), where hp prices them {min(priced):.2f} to "
            f"{max(priced):.2f} times faster") in prose
    # Those pairs before the GB200 NVFP4 rows joined, and the NVFP4 pairs by model.
    old = [(g, r) for g, r in pairs if r["recipe"] != "nvfp4"]
    ratio = lambda chosen, key: [g[key] / r[key] for g, r in chosen]  # noqa: E731
    assert (f"(Before the GB200 NVFP4 rows joined, {len(old)} pairs: {min(ratio(old, 'measured_seconds')):.2f} to "
            f"{max(ratio(old, 'measured_seconds')):.2f} measured, {min(ratio(old, 'as_run_seconds')):.2f} to "
            f"{max(ratio(old, 'as_run_seconds')):.2f} priced.") in prose
    nv = {size: [(g, r) for g, r in pairs if r["recipe"] == "nvfp4" and size in r["id"]] for size in ("-70b-", "-405b-")}
    assert len(nv["-70b-"]) + len(nv["-405b-"]) == len(pairs) - len(old) == 7
    span = lambda chosen, key: f"{min(ratio(chosen, key)):.2f} to {max(ratio(chosen, key)):.2f}"  # noqa: E731
    single = lambda chosen: {f"{x:.2f}" for x in ratio(chosen, "as_run_seconds")}  # noqa: E731
    assert len(single(nv["-70b-"])) == len(single(nv["-405b-"])) == 1
    assert (f"Their seven pairs are the 70B ones, {span(nv['-70b-'], 'measured_seconds')} times faster measured against "
            f"{single(nv['-70b-']).pop()} priced, and the 405B ones, {span(nv['-405b-'], 'measured_seconds')} against "
            f"{single(nv['-405b-']).pop()}") in prose
    # NVFP4 against MXFP8 in the same container and model.
    nv = [(found[r["id"].replace("-nvfp4", "-mxfp8")], r) for r in gb300 if r["recipe"] == "nvfp4"]
    ran_ratio = [m["measured_seconds"] / n["measured_seconds"] for m, n in nv]
    hp_ratio = [m["as_run_seconds"] / n["as_run_seconds"] for m, n in nv]
    assert (f"the runs were {min(ran_ratio):.2f} to {max(ran_ratio):.2f} times faster, hp {min(hp_ratio):.2f} to "
            f"{max(hp_ratio):.2f}") in prose
    speedup = {r["id"].split("-gb300-")[1].split("-")[1]: r["bf16_seconds"] / r["estimated_seconds"]
               for r in gb300 if r["recipe"] == "nvfp4" and r["id"].startswith("mb26.02-")}
    assert f"is {speedup['70b']:.2f} for 70B and {speedup['405b']:.2f} for 405B" in prose


def test_the_page_states_the_gb300_and_b300_moe_rows_figures():
    runs = _module()
    found = {r["id"]: r for r in runs.moe_results()}
    prose = _prose()

    def span(cls, model, where=lambda r: True):
        errors = [r["error"] for r in found.values() if r["class"] == cls and r["layout"]["model"] == model and where(r)]
        return f"{min(errors):+.1%} to {max(errors):+.1%}"

    gb300, b300 = "Megatron-Core MoE, GB300", "Megatron-Core MoE, B300"
    assert (f"Qwen3 30B-A3B {span(gb300, 'qwen3-30b-a3b')}, 235B-A22B {span(gb300, 'qwen3-235b-a22b')}, DeepSeek-V3 "
            f"{span(gb300, 'deepseek-v3')}") in prose
    # Every GB300 235B-A22B and DeepSeek-V3 row priced slow (the 30B-A3B rows too before the flex dispatcher's
    # permutation, 2026-12-02: +5.5% to +10.2%).
    assert all(r["error"] > 0 for r in found.values() if r["class"] == gb300 and r["layout"]["model"] != "qwen3-30b-a3b")
    pp16 = span(b300, "deepseek-v3", lambda r: r["layout"]["pp"] == 16)
    pp8 = [found[f"mb{c}-b300-deepseek-v3-mxfp8"]["error"] for c in ("26.04.01", "26.06")]
    assert (f"On B300: Qwen3 30B-A3B {span(b300, 'qwen3-30b-a3b')}; DeepSeek-V3 {pp16} at PP 16 (26.02 to 26.04) and "
            f"{pp8[0]:+.1%} and {pp8[1]:+.1%} at PP 8") in prose
    q235 = {c: found[f"mb{c}-b300-qwen3-235b-a22b-mxfp8"] for c in ("26.02", "26.04", "26.04.01")}
    assert (f"Qwen3 235B-A22B {q235['26.04']['error']:+.1%} (26.04), {q235['26.04.01']['error']:+.1%} (26.04.01, HybridEP) "
            f"and {q235['26.02']['error']:+.1%} (26.02: {q235['26.02']['measured_seconds']:.3f} s measured, 2,691 tokens/s/GPU, "
            f"against {q235['26.04']['measured_seconds']:.3f} and {q235['26.04.01']['measured_seconds']:.3f} s at micro-batch 2 "
            f"in the next two containers; hp {q235['26.02']['estimated_seconds']:.3f} s)") in prose
    # GB300 against GB200 in 26.02 (other layouts), B300 against B200 on the same layout (26.02 to 26.04).
    pair = {k: (found[f"mb26.02-gb200-{k}-mxfp8"], found[f"mb26.02-gb300-{k}-mxfp8"]) for k in ("qwen3-30b-a3b", "deepseek-v3")}
    ran = {k: g["measured_seconds"] / n["measured_seconds"] for k, (g, n) in pair.items()}
    priced = {k: g["estimated_seconds"] / n["estimated_seconds"] for k, (g, n) in pair.items()}
    assert (f"The runs were {ran['qwen3-30b-a3b']:.2f} and {ran['deepseek-v3']:.2f} times faster than the GB200 rows of 26.02 (Qwen3 30B-A3B, "
            f"{pair['qwen3-30b-a3b'][1]['measured_seconds']:.3f} s against {pair['qwen3-30b-a3b'][0]['measured_seconds']:.3f} s") in prose
    assert f"where hp prices them {priced['qwen3-30b-a3b']:.2f} and {priced['deepseek-v3']:.2f} times faster" in prose
    twins = [(found[f"mb{c}-b200-deepseek-v3-mxfp8"], found[f"mb{c}-b300-deepseek-v3-mxfp8"]) for c in ("26.02", "26.02.01", "26.04")]
    assert all((b["layout"]["pp"], b["layout"]["ep"], b["layout"]["micro_batch_size"]) == (16, 8, 1) for _, b in twins)
    ran_twins = {round(a["measured_seconds"] / b["measured_seconds"], 2) for a, b in twins}
    priced_twins = {round(a["estimated_seconds"] / b["estimated_seconds"], 2) for a, b in twins}
    assert len(ran_twins) == len(priced_twins) == 1
    assert f"{ran_twins.pop():.2f} times faster measured, {priced_twins.pop():.2f} times priced" in prose
    speedups = [r["bf16_seconds"] / r["estimated_seconds"] for r in found.values() if r["class"] in (gb300, b300)]
    assert f"hp's FP8 speedup over bf16 on these rows is {min(speedups):.2f} to {max(speedups):.2f}" in prose


def test_the_gb300_kimi_k2_rows_state_their_release_config():
    """Every Kimi_K2 row of the summaries (DGX-GB300 MXFP8, 26.02.01 to 26.06): KIMI_K2_PRETRAIN_CONFIG_GB300 of each
    release (256 GPUs, GBS 4,096, micro-batch 2, PP 4, VP 4, EP 64, HybridEP, recompute mla_up_proj), the layout
    _get_kimi_k2_pipeline_layout(4, 4) (chunk i on rank i % 4: 16, 16, 16 and 13 decoder layers), Muon without the
    distributed optimizer, held out."""
    data = _data()
    runs = _module()
    rows = {r["id"]: r for r in data["moe_rows"] if r["model"] == "kimi-k2"}
    tags = {"26.02.01": "v0.3.1", "26.04": "v0.4.0", "26.04.01": "v0.4.2", "26.06": "v0.5.0"}
    assert sorted(rows) == sorted(f"mb{c}-gb300-kimi-k2-mxfp8" for c in tags)
    for row in rows.values():
        container = row["id"][2:].split("-", 1)[0]
        assert row["split"] == "held_out" and row["class"] == "Megatron-Core MoE, GB300" and row["hardware"] == "gb300"
        assert row["source"] == row["runtime_options_source"] == f"megatron-bridge-kimi-gb300-{container}"
        source = data["sources"][row["source"]]
        assert ARCHIVE in source and f"'{container} NeMo Container'" in source and "'#### Model: Kimi_K2'" in source
        assert f"{tags[container]} (" in source and "Muon optimizer was used" in source
        assert row["config"].startswith("KIMI_K2_PRETRAIN_CONFIG_GB300_FP8_MX ") and row["config"].endswith(f" at {tags[container]}; every field equals the summary row's")
        cells = _cells(row["row"])
        # System, #-GPUs, Precision, GBS, MBS, Sequence Length, FSDP (not in 26.06), TP, PP, CP, VP, EP, tokens/s, TFLOP/s.
        assert len(cells) == (13 if container == "26.06" else 14) and (len(cells) == 13 or cells[6] == "0"), row["id"]
        assert cells[:6] == ["DGX-GB300", "256", "MXFP8", "4096", "2", "4096"], row["id"]
        assert [int(c) for c in cells[-7:-2]] == [1, 4, 1, 4, 64] and int(cells[-2]) == row["tokens_per_second_per_gpu"], row["id"]
        assert (row["gpus"], row["global_batch_size"], row["micro_batch_size"], row["seq_len"]) == (256, 4096, 2, 4096)
        assert (row["tp"], row["pp"], row["cp"], row["vpp"], row["ep"], row["etp"]) == (1, 4, 1, 4, 64, 1)
        assert row["recipe"] == "mxfp8" and row["recompute_modules"] == ["mla_up_proj"]
        # dist_muon: LayerWiseDistributedOptimizer with ddp.use_distributed_optimizer and overlap_param_gather false.
        assert row["optimizer"] == "muon" and row["zero"] == 0
        assert row["runtime_options"] == {"overlap_grad_reduce": True, "overlap_param_gather": False, "grad_reduce_in_fp32": False,
                                          "ep_all_to_all": "hybridep", "overlap_p2p_communication": True}
        assert any("LayerWiseDistributedOptimizer" in item for item in row["not_priced"])
        chunks = parse_layout(row["pipeline_layout"])
        assert len(chunks) == 16 and row["layers_per_stage"] == [c.count("t") for c in chunks] == [4] * 15 + [1]
        assert [i for i, c in enumerate(chunks) if "E" in c] == [0] and [i for i, c in enumerate(chunks) if "L" in c] == [15]
        assert not any("m" in c for c in chunks)  # no MTP layer: Kimi K2 has none
        spec = runs.layout(row, 61)
        assert [sum(spec.layers_per_stage[rank::spec.pp]) for rank in range(spec.pp)] == [16, 16, 16, 13]
        assert spec.dp == 64 and spec.zero == 0
    # 4,096 x 4,096 / (5,072 x 256) = 12.921 s; / (5,372 x 256) = 12.200 s.
    assert runs.measured_seconds(rows["mb26.02.01-gb300-kimi-k2-mxfp8"]) == pytest.approx(12.921, abs=5e-4)
    assert runs.measured_seconds(rows["mb26.06-gb300-kimi-k2-mxfp8"]) == pytest.approx(12.200, abs=5e-4)


def test_the_page_states_the_gb300_kimi_k2_figures():
    runs = _module()
    data = _data()
    found = {r["id"]: r for r in runs.moe_results() if r["layout"]["model"] == "kimi-k2"}
    errors = [r["error"] for r in found.values()]
    estimated = {f"{r['estimated_seconds']:.3f}" for r in found.values()}
    measured = sorted(r["measured_seconds"] for r in found.values())
    assert len(found) == 4 and len(estimated) == 1 and all(e > 0 for e in errors)
    first = found["mb26.02.01-gb300-kimi-k2-mxfp8"]
    assert first["measured_seconds"] == measured[-1]
    from hp_core import api

    registry = api.build_registry()
    row = next(r for r in data["moe_rows"] if r["id"] == "mb26.02.01-gb300-kimi-k2-mxfp8")
    muon = runs.price_moe(row, registry)
    adamw = runs.price_moe({k: v for k, v in row.items() if k != "optimizer"}, registry)
    assert adamw.step_seconds < muon.step_seconds
    assert (f"Kimi K2 {min(errors):+.1%} to {max(errors):+.1%} (hp {estimated.pop()} s on all four, whose configs agree, the runs "
            f"{measured[-1]:.3f} s in 26.02.01 and {measured[0]:.3f} to {measured[-2]:.3f} s after; the optimizer step "
            f"{muon.optimizer_seconds:.3f} s of it, Muon's Newton-Schulz products on every matrix a rank holds: {adamw.step_seconds:.3f} s "
            "with AdamW)") in _prose()
