"""Step time at scale against public measured runs (``data/scale_measured.json``, ``scale_measured_mpt.json`` and
``scale_measured_mbridge.json``; provenance in ``data/README.md``).

The rows' measured step times are derived from the published figures by
hand here; the validation table in docs/time.md is what
``benchmarks/scale_validation.py`` prints (refresh it with ``--write``); the
calibration / held-out split is the one fixed in the data file before any
fit. The errors are reported, not asserted within 10%: docs/time.md says
which classes miss it and why.
"""

from __future__ import annotations

import pytest

import scale_cases as sc
from hp_core.api import estimate
from hp_core.specs import ParallelSpec, Setting
from scale_cases import DATA, ROWS, measured_seconds, report

ROOT = sc.SCALE_FILE.parents[3]


def _row(name: str) -> dict:
    return next(r for r in ROWS if r["id"] == name)


def test_measured_step_times_as_derived_from_the_published_figures():
    # torchtitan: local batch x sequence / (TPS per GPU x non-data-parallel degree).
    assert measured_seconds(_row("tt-8b-fsdp128")) == pytest.approx(2 * 8192 / 5605)
    assert measured_seconds(_row("tt-8b-fsdp8-tp8")) == pytest.approx(12 * 8192 / (4378 * 8))
    assert measured_seconds(_row("tt-70b-fsdp32-tp8-asynctp")) == pytest.approx(16 * 8192 / (652.4 * 8))
    # AutoModel prints the time per global step.
    assert measured_seconds(_row("am-70b-fsdp32-cp2")) == 18.90
    # Megatron-LM: 12 B s L h^2 (2 + s/h + 4 + V / (2 L h)) FLOPs over per-GPU TFLOP/s x GPUs.
    flops = 12 * 192 * 4096 * 24 * 2048**2 * (2 + 4096 / 2048 + 4 + 131072 / (2 * 24 * 2048))
    assert measured_seconds(_row("mlm-gpt-1.7b")) == pytest.approx(flops / (408.8e12 * 48))


def test_torchtitan_2024_step_times_as_derived_from_wps():
    # torchtitan 2024 (train.py wps: the rank's tokens / (time x tp x pp)): local batch x sequence / (WPS x tp).
    assert measured_seconds(_row("tt24-l3-8b-a100-fsdp64-opsac")) == pytest.approx(1 * 8192 / 2973)
    assert measured_seconds(_row("tt24-l3-70b-a100-fsdp64-full")) == pytest.approx(8192 / 331) == pytest.approx(24.749, abs=1e-3)
    assert measured_seconds(_row("tt24-l2-13b-a100-fsdp64-noac")) == pytest.approx(2 * 4096 / 2162)
    assert measured_seconds(_row("tt24-l2-70b-a100-fsdp64-opsac")) == pytest.approx(1 * 4096 / 355)
    # Llama 3.1 405B on 128 H100s: 16 FSDP ranks (the page's global batch 32 = 2 x 16), so TP 8.
    assert measured_seconds(_row("tt24-l31-405b-fsdp16-tp8")) == pytest.approx(2 * 8192 / (109 * 8)) == pytest.approx(18.789, abs=1e-3)


# torchtitan 2024: (params, layers, heads, head dim) of each model as torchtitan built it; parameters counted by hand
# (embedding and untied head V x h, per layer 4 projections + 3 h x I MLP + 2 norms, the final norm).
def _llama_params(h: int, layers: int, kv_heads: int, inter: int, vocab: int, head_dim: int = 128) -> int:
    attention = 2 * h * h + 2 * h * kv_heads * head_dim
    return 2 * vocab * h + layers * (attention + 3 * h * inter + 2 * h) + h


TT24_MODELS = {"8B": (_llama_params(4096, 32, 8, 14336, 128256), 32, 32), "70B3": (_llama_params(8192, 80, 8, 28672, 128256), 80, 64),
               "13B": (_llama_params(5120, 40, 40, 13824, 32000), 40, 40), "70B2": (_llama_params(8192, 80, 8, 28672, 32000), 80, 64),
               "405B": (_llama_params(16384, 126, 8, 53248, 128256), 126, 128)}


def test_torchtitan_2024_rows_are_the_models_and_sequences_the_printed_mfu_says(registry):
    # The page's MFU is torchtitan's (6 N + 12 L H Q T) x WPS over 312 TFLOP/s (A100) or 989 TFLOP/s (H100 SXM, at
    # 3faaa1a): with the row's model, sequence and WPS per GPU it reproduces every printed MFU to the rounding of both, which
    # checks the transcription, the sequence lengths and that WPS is per GPU (the 405B's divided by TP).
    assert TT24_MODELS["13B"][0] == 13_015_864_320 and TT24_MODELS["70B2"][0] == 68_976_648_192
    assert TT24_MODELS["8B"][0] == 8_030_261_248 and TT24_MODELS["405B"][0] == 405_853_388_800
    which = {"tt24-l3-8b": "8B", "tt24-l3-70b": "70B3", "tt24-l2-13b": "13B", "tt24-l2-70b": "70B2", "tt24-l31-405b": "405B"}
    rows = [r for r in ROWS if r["id"].startswith("tt24-")]
    assert len(rows) == 9
    for row in rows:
        params, layers, heads = TT24_MODELS[next(v for k, v in which.items() if row["id"].startswith(k + "-"))]
        seq, wps = row["layout"]["seq_len"], row["measured"]["tps_per_gpu"]
        peak = 989e12 if row["hardware"] == "h100-hbm2e" else 312e12
        printed = float(row["row"].split("|")[5].split("%")[0])
        # Both printed figures are rounded: WPS to the unit, MFU to its last digit (0.05 points).
        mfu = [100 * (6 * params + 12 * layers * heads * 128 * seq) * w / peak for w in (wps - 0.5, wps + 0.5)]
        assert mfu[0] - 0.05 <= printed <= mfu[1] + 0.05, (row["id"], mfu, printed)
        # hp builds the same model: its parameter count is torchtitan's.
        assert estimate(sc.model(row, registry), ParallelSpec(seq_len=seq), registry=registry).parameters.total == params


def test_selective_layer_checkpointing_is_every_kth_block_from_one(registry):
    # selective_ac_option = 2 on Llama 2 13B's 40 blocks: torchtitan's counter wraps blocks 2, 4, ..., 40 (from 1),
    # i.e. body indices 1, 3, ..., 39 in full, the other 20 with nothing recomputed.
    spec = sc.recompute(_row("tt24-l2-13b-a100-fsdp64-aclayer"), registry)
    assert spec.default == Setting() and [(a, b) for a, b, _ in spec.layers] == [(i, i) for i in range(1, 40, 2)]
    assert all(s == Setting("full") for _, _, s in spec.layers)
    assert "k = 2" in _row("tt24-l2-13b-a100-fsdp64-aclayer")["assumptions"]


def test_torchtitan_2024_skipped_rows_say_why():
    skipped = DATA["skipped"]
    assert [s["row"].split("| ")[-1] for s in skipped if "405B" in s["row"]] == ["None", "Float8", "Float8 + Async TP"]
    assert all(s["why"] for s in skipped)
    # The Float8 rows are left out for the reason the FP8 file gives for torchtitan's step times.
    assert all("torchtitan_note" in s["why"] for s in skipped if "Float8" in s["row"])


def test_every_row_states_its_provenance_and_is_bf16():
    for row in ROWS:
        source = DATA["sources"][row["source"]]
        assert source["url"].startswith("https://github.com/") and source["commit"] and source["step_seconds_from"]
        assert row["row"] and row["class"] in sc.CLASSES
        assert row["split"] in ("calibration", "held-out", "not validated")
        assert "float8" not in row["row"].lower() and "fp8" not in row["row"].lower()
        assert (row["split"] == "not validated") == ("why_not_validated" in row)


def test_the_split_is_the_one_fixed_before_fitting():
    calibration = sorted(r["id"] for r in ROWS if r["split"] == "calibration")
    assert calibration == ["mlm-gpt-1.7b", "mlm-gpt-16b", "tt-8b-fsdp128", "tt-8b-fsdp8", "tt-8b-fsdp8-tp8"]
    assert sum(r["split"] == "held-out" for r in ROWS) == 23
    # torchtitan's 2024 performance page, added after the fsdp2 fit: every row held out (split_rule).
    assert [r["split"] for r in ROWS if r["id"].startswith("tt24-")] == ["held-out"] * 9
    assert "tt24-*" in DATA["split_rule"] and "held out" in DATA["split_rule"]


# NeMo AutoModel's single-node MoE rows: the pre-training table's columns, as printed.
AM_COLUMNS = ("Model", "#GPUs", "GBS", "MBS", "LBS", "GA", "Seq Length", "TP", "PP", "CP", "EP", "VP", "FSDP",
              "Kernel Optimizations", "Time per Global Step (s)", "Model TFLOPs/sec/GPU", "Tokens/sec/GPU")
AM_SINGLE_NODE = ("am-qwen3-30b-a3b-ep8", "am-gpt-oss-20b-ep8", "am-nemotron-3-nano-30b-a3b-ep8")


def test_automodel_single_node_rows_are_their_table_rows_and_configs():
    for name in AM_SINGLE_NODE:
        row = _row(name)
        cells = dict(zip(AM_COLUMNS, (c.strip() for c in row["row"].split("|")), strict=True))
        lay = row["layout"]
        assert row["class"] == "single-node MoE" and row["split"] == "held-out" and row["hardware"] == "h100-sxm"
        # 8 GPUs, all FSDP; GBS = MBS x GA x GPUs; local batch = micro-batch; no TP / PP / CP.
        assert (int(cells["#GPUs"]), int(cells["FSDP"]), lay["dp"]) == (8, 8, 8)
        assert (lay["global_batch_size"], lay["micro_batch_size"], lay["seq_len"]) == \
            (int(cells["GBS"]), int(cells["MBS"]), int(cells["Seq Length"]))
        assert int(cells["GBS"]) == int(cells["MBS"]) * int(cells["GA"]) * 8 and cells["MBS"] == cells["LBS"]
        assert (cells["TP"], cells["PP"], cells["CP"]) == ("1", "1", "1") and not {"tp", "pp", "cp"} & set(lay)
        # Every config sets ep_size 8 and DeepEP; the GPT-OSS row prints EP '-' (its assumptions say so).
        assert lay["ep"] == 8 and "DeepEP" in cells["Kernel Optimizations"] and row["options"]["ep_all_to_all"] == "deepep"
        assert cells["EP"] == "8" or ("EP '-'" in row["assumptions"] and cells["EP"] == "-")
        assert row["recompute"] == "full" and row["compile"] is False
        # The step time as printed, and the printed tokens/s/GPU from it (GBS x sequence / (step x GPUs)).
        step = float(cells["Time per Global Step (s)"])
        assert measured_seconds(row) == step
        assert lay["global_batch_size"] * lay["seq_len"] / (step * 8) == pytest.approx(
            float(cells["Tokens/sec/GPU"].replace(",", "")), abs=4)
    # Nemotron's attention is torch SDPA (the row's TorchSDPA) and its MoE parallelizer keeps the parameters
    # gathered after forward (reshard_after_forward false at bb0c0bfb0); GPT-OSS's reshards (not pp_enabled at 89e3a9fdd).
    nano, oss = _row("am-nemotron-3-nano-30b-a3b-ep8"), _row("am-gpt-oss-20b-ep8")
    assert "TorchSDPA" in nano["row"] and nano["options"]["attention_kernel"] == "sdpa"
    assert nano["layout"]["reshard_after_forward"] is False and "reshard_after_forward" not in oss["layout"]
    assert "FlexAttn" in oss["row"] and "FlexAttention" in oss["assumptions"]
    for row in (nano, oss):
        assert row["split"] == "held-out" and row["id"] in DATA["split_rule"]
        assert DATA["sources"][row["source"]]["url"].endswith("/docs/performance-summary.md")


def test_automodel_single_node_models_are_the_published_sizes(registry):
    # OpenAI's gpt-oss model card (20.91B) and NVIDIA's Nemotron 3 Nano model card (31.6B): the presets' totals.
    totals = {name: estimate(sc.model(_row(name), registry), ParallelSpec(seq_len=4096), registry=registry).parameters.total
              for name in ("am-gpt-oss-20b-ep8", "am-nemotron-3-nano-30b-a3b-ep8")}
    assert totals == {"am-gpt-oss-20b-ep8": 20_914_757_184, "am-nemotron-3-nano-30b-a3b-ep8": 31_577_937_344}


TT_DSV3 = ("tt-dsv3-16b-ep8-b4", "tt-dsv3-16b-ep4-b16-full", "tt-dsv3-16b-ep4-b16-full-minimalep")


def test_torchtitan_dsv3_16b_step_times_as_derived_from_tps():
    # torchtitan's tps is per GPU (the rank's tokens over time and tp x pp x cp = 1): local batch x 4096 / TPS.
    issue, regular, minimal = (_row(name) for name in TT_DSV3)
    # Issue #1789: the mean of the three steady log intervals (steps 11-20, 21-30, 31-40), 11,515 TPS.
    assert (11758 + 11533 + 11254) / 3 == 11515 == issue["measured"]["tps_per_gpu"]
    assert measured_seconds(issue) == pytest.approx(4 * 4096 / 11515) == pytest.approx(1.42284, abs=1e-5)
    # The local batch the issue does not print is 4: its log stamps put steps 10 -> 40 at 20:24:06,144 -> 20:24:48,847,
    # 42.703 s for 30 steps, and 1.42343 s x 11,515 TPS is 16,391 tokens a GPU a step = 4 x 4096 to 0.04%.
    seconds_per_step = (48.847 - 6.144) / 30
    assert seconds_per_step * 11515 == pytest.approx(4 * 4096, rel=5e-4)
    # The printed lines are one run's: TFLOP/s over TPS is one FLOP count per token (17.43 GFLOP) at every step.
    for tps, tflops in ((11758, 204.90), (11533, 200.98), (11254, 196.11), (11636, 202.78)):
        assert f"tps: {tps:,}  tflops: {tflops:.2f}" in issue["row"]
        assert tflops * 1e12 / tps == pytest.approx(17.43e9, rel=1e-3)
    # The June 2026 page: Run 8 at step 10 (regular EP) and Runs 10' (MinimalAsyncEP, steps 20-50, profiler off).
    assert measured_seconds(regular) == pytest.approx(16 * 4096 / 10160) == pytest.approx(6.4504, abs=1e-4)
    assert measured_seconds(minimal) == pytest.approx(16 * 4096 / 12540) == pytest.approx(5.2262, abs=1e-4)
    # ... which is the page's profiler-off eager step, "5.64 -> 5.20 s".
    assert measured_seconds(minimal) == pytest.approx(5.20, abs=0.03)
    assert "| 10,160 |" in regular["row"] and "**12,540**" in minimal["row"]
    for row in (issue, regular, minimal):
        lay = row["layout"]
        assert row["class"] == "single-node MoE" and row["split"] == "held-out"
        # No accumulation: global batch = local batch x 8 FSDP ranks; EP within them.
        assert lay["global_batch_size"] == lay["micro_batch_size"] * lay["dp"] and lay["dp"] == 8 and lay["dp"] % lay["ep"] == 0
        assert row["compile"] is False and row["options"]["elementwise_kernels"] == "eager"
    assert (issue["hardware"], regular["hardware"], minimal["hardware"]) == ("h100-sxm", "h100-hbm2e", "h100-hbm2e")
    assert (issue["recompute"], regular["recompute"], minimal["recompute"]) == ("op_sac", "full", "full")
    assert "tt-dsv3-16b-*" in DATA["split_rule"] and "held out before any was priced" in DATA["split_rule"]


def test_torchtitan_dsv3_16b_is_the_size_the_page_prints(registry):
    # "deepseek_v3 16B - 15,706,484,224 total params" (dsv3_scaling_experiment_results.md, Run 1 setup).
    for name in TT_DSV3:
        assert estimate(sc.model(_row(name), registry), ParallelSpec(seq_len=4096), registry=registry).parameters.total == 15_706_484_224


def test_single_node_sources_scanned_and_left_out_say_why():
    skipped = {s["row"]: s["why"] for s in DATA["skipped"]}
    assert len(skipped) == 16 and all(skipped.values())
    # The superseded Qwen3 figure names the row kept in its place.
    old = next(w for r, w in skipped.items() if "| 22.14 |" in r)
    assert "am-qwen3-30b-a3b-ep8" in old and measured_seconds(_row("am-qwen3-30b-a3b-ep8")) == 21.773
    # LoRA rows: TP is refused for LoRA; the GPT-OSS 120B row's config disagrees with its table row.
    assert "refuses LoRA" in next(w for r, w in skipped.items() if "LoRA" in r)
    assert "ep_size 16" in next(w for r, w in skipped.items() if "GPT-OSS 120B" in r)


def test_the_validation_table_in_time_md_is_what_the_script_prints(registry):
    page = (ROOT / "docs" / "time.md").read_text(encoding="utf-8")
    shown = page.split("<!-- scale-validation:start -->", 1)[1].split("<!-- scale-validation:end -->", 1)[0]
    assert shown.strip() == report(registry).strip(), "docs/time.md is stale: run python benchmarks/scale_validation.py --write"


def test_multi_node_fsdp_groups_use_every_adapter(registry):
    # Llama 3.1 70B on 64 H100s, FSDP over dp 32 x cp 2: each layer's gather and reduce-scatter cross the nodes on
    # all eight adapters, so the step's communication is a few seconds rather than the ~95 s priced at one adapter.
    t = sc.estimated(_row("am-70b-fsdp32-cp2"), registry)
    fsdp = dict((g, (total, exposed)) for g, total, exposed in t.stages[0].communication_by_group)["fsdp"]
    assert fsdp[0] * t.micro_batches < 10.0 and fsdp[1] < fsdp[0]


def test_mpt_rows_state_their_provenance_and_are_bf16():
    source = sc.MPT_DATA["sources"]["llm-foundry-benchmarks"]
    assert source["url"].startswith("https://github.com/mosaicml/llm-foundry/") and "8c8dd48f" in source["commit"]
    assert source["step_seconds_from"] and sc.MPT_DATA["split_rule"]
    for row in sc.MPT_ROWS:
        cells = [c.strip() for c in row["row"].strip(" |").split("|")]
        assert row["source"] == "llm-foundry-benchmarks" and row["class"] in sc.MPT_CLASSES
        assert cells[14] in ("amp_bf16", "bf16") and row["split"] in ("calibration", "held-out")
        # The layout is the row's: GPUs, micro-batch, global batch (micro x accumulation x GPUs), sequence.
        lay = row["layout"]
        assert (lay["dp"], lay["micro_batch_size"], lay["global_batch_size"], lay["seq_len"]) == \
            (int(cells[2]), int(cells[7]), int(cells[9]), int(cells[1]))
        assert int(cells[9]) == int(cells[7]) * int(cells[8]) * int(cells[2])
        assert row["recompute"] == ("full" if cells[17] == "True" else "none")
        assert row["class"].startswith("MPT multi" if int(cells[2]) > 8 else "MPT single")
        # MP Mode (the table's column) as its runtime option: PURE reduces in bf16 (Composer get_mixed_precision).
        assert row["mp_mode"] == cells[15] in ("DEFAULT", "PURE")
        assert row["options"].get("reduce_dtype", "fp32") == ("bf16" if cells[15] == "PURE" else "fp32")
        # Composer runs torch FSDP1: every row takes the fitted per-unit time (docs/time.md, "The fsdp2 fit").
        assert row["options"]["fsdp_implementation"] == "fsdp1"
    assert "FSDP1's per-unit time" in sc.MPT_DATA["split_rule"]


def test_mpt_step_times_as_derived_from_the_published_figures():
    # GlobalBatchSize (T) / Throughput (T/s): MPT-70B on 512 H100s, 8,388,608 tokens at 515,636 tokens/s.
    row = next(r for r in sc.MPT_ROWS if r["id"] == "mpt-h100-large-70b-s2048-g512-mb8")
    assert measured_seconds(row) == pytest.approx(8388608 / 515636)
    assert len(sc.MPT_ROWS) == 209


def _mpt_size(row: dict) -> str:
    return row["row"].strip(" |").split("|")[0].strip()  # the table's Model cell


def test_the_mpt_split_alternates_per_model_sorted_by_gpus_and_sequence():
    # A stable sort: rows tied on (GPUs, sequence length) keep the table's row order (split_rule).
    for table in {r["table"] for r in sc.MPT_ROWS}:
        rows = [r for r in sc.MPT_ROWS if r["table"] == table]
        for size in {_mpt_size(r) for r in rows}:
            group = sorted((r for r in rows if _mpt_size(r) == size),
                           key=lambda r: (r["layout"]["dp"], r["layout"]["seq_len"]))
            assert [r["split"] for r in group] == [("calibration", "held-out")[i % 2] for i in range(len(group))]


def test_the_one_mpt_tie_keeps_the_table_order():
    # A100 80GB, MPT-125M, 8 GPUs, 2048 tokens: two rows (micro-batch 40, GBS 640; micro-batch 32, GBS 512), in
    # that order in the table, so the first is calibration and the second held-out; each id names its micro-batch.
    tied = [r for r in sc.MPT_ROWS if r["table"].startswith("A100 80GB") and _mpt_size(r) == "125m"
            and r["layout"]["dp"] == 8 and r["layout"]["seq_len"] == 2048]
    assert [(r["id"], r["layout"]["micro_batch_size"], r["layout"]["global_batch_size"], r["split"]) for r in tied] == [
        ("mpt-a100-80gb-125m-s2048-g8-mb40", 40, 640, "calibration"),
        ("mpt-a100-80gb-125m-s2048-g8-mb32", 32, 512, "held-out")]
    assert all(r["id"].endswith(f"-mb{r['layout']['micro_batch_size']}") for r in sc.MPT_ROWS)


def test_the_mpt_table_in_time_md_is_what_the_script_prints(registry):
    page = (ROOT / "docs" / "time.md").read_text(encoding="utf-8")
    shown = page.split("<!-- mpt-validation:start -->", 1)[1].split("<!-- mpt-validation:end -->", 1)[0]
    assert shown.strip() == sc.mpt_report(registry).strip(), "docs/time.md is stale: run python benchmarks/scale_validation.py --write"


# Megatron-Bridge's bf16 rows (data/scale_measured_mbridge.json).
MB_COLUMNS = ("System", "#-GPUs", "Precision", "GBS", "MBS", "Sequence Length", "FSDP", "TP", "PP", "CP", "VP", "EP",
              "Tokens / sec / GPU", "Model TFLOP / sec / GPU")


def _cells(row: dict) -> dict:
    return dict(zip(MB_COLUMNS, (c.strip() for c in row["row"].strip(" |").split("|")), strict=True))


def test_mbridge_rows_state_their_provenance_and_layout():
    assert sc.MBRIDGE_DATA["split_rule"] and sc.MBRIDGE_DATA["skipped"]
    for row in sc.MBRIDGE_ROWS:
        source = sc.MBRIDGE_DATA["sources"][row["source"]]
        assert source["url"].startswith("https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/067f987")
        assert "067f987df03b8355b03192d88d70f1709fedf51a" in source["commit"] and source["config_files"]
        assert source["step_seconds_from"] and row["config"] and row["recipe_settings"]
        assert row["class"] in sc.MBRIDGE_CLASSES and row["split"] in ("calibration", "held-out")
        cells, lay = _cells(row), row["layout"]
        assert cells["Precision"] == "BF16" and cells["System"] == {"h100-sxm": "DGX-H100", "b200": "DGX-B200"}[row["hardware"]]
        assert row["class"].endswith(cells["System"][4:]) and row["class"].startswith("multi" if row["gpus"] > 8 else "single")
        # The layout is the row's: GPUs, batches, sequence, TP / PP / CP / EP (no FSDP, no interleaving).
        assert (row["gpus"], lay["global_batch_size"], lay["micro_batch_size"], lay["seq_len"]) == \
            (int(cells["#-GPUs"]), int(cells["GBS"]), int(cells["MBS"]), int(cells["Sequence Length"]))
        assert (lay.get("tp", 1), lay.get("pp", 1), lay.get("cp", 1), lay["ep"]) == \
            (int(cells["TP"]), int(cells["PP"]), int(cells["CP"]), int(cells["EP"]))
        assert cells["FSDP"] == "0" and cells["VP"] == "n/a" and "vpp" not in lay
        assert lay["dp"] * lay.get("tp", 1) * lay.get("pp", 1) * lay.get("cp", 1) == row["gpus"]
        assert (row["measured"]["tokens_per_second_per_gpu"], row["measured"]["model_tflops_per_gpu"]) == \
            (int(cells["Tokens / sec / GPU"]), int(cells["Model TFLOP / sec / GPU"]))
        assert row["recompute"] == ["layernorm", "moe_act"]
        # The recipe's DDP settings, each stated as the runtime option it is (ddp.grad_reduce_in_fp32 false in
        # set_gpt_oss_common_configs).
        assert row["options"] == {"overlap_grad_reduce": True, "overlap_param_gather": True, "grad_reduce_in_fp32": False}
        assert "ddp.grad_reduce_in_fp32 false" in row["recipe_settings"]


def test_mbridge_step_times_as_derived_from_the_published_figures():
    # GBS x sequence / (tokens per second per GPU x GPUs): GPT-OSS 120B on 64 H100s, 1,280 x 4,096 tokens at 5,993.
    row = next(r for r in sc.MBRIDGE_ROWS if r["id"] == "mb26.02-h100-gpt-oss-120b")
    assert measured_seconds(row) == pytest.approx(1280 * 4096 / (5993 * 64)) == pytest.approx(13.6693, abs=1e-4)
    # Every row's two published figures come from one FLOP count per token (27.2 GFLOP, 3-digit TFLOP/s):
    # a row whose ratio differs was transcribed wrong or measured another model.
    for r in sc.MBRIDGE_ROWS:
        m = r["measured"]
        assert m["model_tflops_per_gpu"] * 1e12 / m["tokens_per_second_per_gpu"] == pytest.approx(27.2e9, rel=0.004)


def test_the_published_flops_count_the_gpt_oss_experts_ungated_and_hp_counts_them_gated(registry):
    # Per token, forward, GPT-OSS 120B at 4,096 tokens (docs/time.md, Megatron-Bridge's bf16 rows). Attention
    # projections q 64 x 64, k and v 8 x 64 each, out 4,096 -> 2,880; an expert's up GEMM 2,880 -> 2 x 2,880 (gated),
    # its down GEMM 2,880 -> 2,880; four routed; the head 2,880 -> 201,088.
    proj = 2 * 2880 * (4096 + 512 + 512) + 2 * 4096 * 2880
    experts_gated, experts_ungated = 4 * (2 * 2880 * 5760 + 2 * 2880 * 2880), 4 * 2 * (2 * 2880 * 2880)
    head = 2 * 2880 * 201088
    # Megatron-Bridge flop_utils.py (v0.3.0 to v0.4.2): the 3/2 gate multiplier only for activation_func F.silu (GPT-OSS
    # runs quick_gelu), every layer full causal attention (4 x 4,096 x 4,096 / 2 a token), 3 x forward.
    causal_core = 4 * 4096 * 4096 // 2
    mbridge = 3 * (36 * (proj + causal_core + experts_ungated) + head)
    assert mbridge == 27_164_491_776
    for r in sc.MBRIDGE_ROWS:
        published = r["measured"]["model_tflops_per_gpu"] * 1e12 / r["measured"]["tokens_per_second_per_gpu"]
        assert published == pytest.approx(mbridge, rel=0.004)
        assert published < 0.85 * 3 * (36 * (proj + causal_core + experts_gated) + head)  # 34.33 GFLOP with the gate
    # hp: the gated experts and the 128-way router, 3 x the GEMMs; attention as the full 4,096^2 square on the 18 full
    # layers and the square times the window's share of causal pairs on the 18 windowed ones (128 x 129 / 2 + 3,968 x 128
    # of 4,096 x 4,097 / 2), 1 + 2.5 (flash backward) times.
    router = 2 * 2880 * 128
    square = 4 * 4096 * 4096
    windowed = square * (128 * 129 // 2 + 3968 * 128) / (4096 * 4097 // 2)
    hp_per_token = 3 * (36 * (proj + experts_gated + router) + head) + 3.5 * 18 * (square + windowed)
    assert hp_per_token == pytest.approx(35.2745e9, rel=1e-5)
    row = next(r for r in sc.MBRIDGE_ROWS if r["id"] == "mb26.04-h100-gpt-oss-120b")
    assert sc.estimated(row, registry).model_flops / (1280 * 4096) == pytest.approx(hp_per_token, rel=1e-9)


def test_the_mbridge_split_alternates_per_device_by_container():
    order = ("26.02", "26.02.01", "26.04", "26.04.01")
    for cls in {r["class"] for r in sc.MBRIDGE_ROWS}:
        group = sorted((r for r in sc.MBRIDGE_ROWS if r["class"] == cls), key=lambda r: order.index(r["source"].split("-", 1)[1]))
        assert [r["split"] for r in group] == [("calibration", "held-out")[i % 2] for i in range(len(group))]
    assert sorted(r["id"] for r in sc.MBRIDGE_ROWS if r["split"] == "held-out") == [
        "mb26.02.01-h100-gpt-oss-120b", "mb26.04-b200-gpt-oss-120b", "mb26.04.01-h100-gpt-oss-120b"]


def test_mbridge_model_is_gpt_oss_120b_of_the_stated_size(registry):
    # OpenAI's gpt-oss model card: 116.83B parameters in total (the preset's provenance; transformers counts 116,829,156,672).
    row = sc.MBRIDGE_ROWS[0]
    params = estimate(sc.model(row, registry), ParallelSpec(seq_len=4096), registry=registry).parameters
    assert params.total == 116829156672


def test_mbridge_recompute_is_the_union_of_the_modules(registry):
    # recompute_modules [layernorm, moe_act]: Megatron's norms and the MoE activation, hp's normOp and ffAct switches.
    spec = sc.recompute(sc.MBRIDGE_ROWS[0], registry)
    assert spec.default == Setting.parse(["ffAct", "normOp"])


def test_the_mbridge_table_in_time_md_is_what_the_script_prints(registry):
    page = (ROOT / "docs" / "time.md").read_text(encoding="utf-8")
    shown = page.split("<!-- mbridge-validation:start -->", 1)[1].split("<!-- mbridge-validation:end -->", 1)[0]
    assert shown.strip() == sc.mbridge_report(registry).strip(), "docs/time.md is stale: run python benchmarks/scale_validation.py --write"


def test_grand_teton_peak_is_what_the_calibration_rows_pick_within_the_stated_interval(registry):
    # torchtitan states the 500 W HBM2e H100's peak lies between the NVL's 835.5 and the SXM's 989.4 TFLOP/s (bf16
    # dense); least squares over the three calibration rows on that device, searched over the interval, picks its NVL
    # end, because every one of them is priced too fast even there (the interval, not the rows, bounds the figure).
    best, tried = sc.grand_teton_peak_fit(registry)
    assert best == sc.GRAND_TETON_BF16_PEAK == sc.GRAND_TETON_BF16_INTERVAL[0] == 835.5e12
    assert tried[-1][0] == sc.GRAND_TETON_BF16_INTERVAL[1] == 989.4e12
    assert len(tried[0][1]) == 3 and all(error < 0 for error in tried[0][1])
    # More peak, faster priced: each row's error falls monotonically across the interval.
    for (_, slower), (_, faster) in zip(tried, tried[1:]):
        assert all(f <= s for s, f in zip(slower, faster))
    device = sc.hardware(_row("tt-8b-fsdp8"), registry)
    assert device.peak_flops["bf16"] == 835.5e12
    assert device.peak_flops["fp8"] == pytest.approx(1978.9e12 * 835.5 / 989.4)
    assert device.memory_bandwidth_bytes_per_second == 2.4e12
