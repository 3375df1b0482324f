"""MLPerf Training's Llama 3.1 405B rows and v5.1 Llama 3.1 8B rows (tests/plugins/data/mlperf_measured.json):
docs/precision.md's tables are what ``benchmarks/mlperf_runs.py`` prints today, every result directory collected is a
row or a skipped entry, and the rows' measured step times and batch arithmetic are what their logs and configs state."""

from __future__ import annotations

import statistics

import pytest

from mlperf_rows import mlperf_data as _data, mlperf_runs as _module, precision_page
from repo_script import load_script  # tests/repo_script.py

# Every llama31_405b result directory of NVIDIA (v5.0, v5.1) and IBM+CoreWeave+NVIDIA (v5.0) in
# mlcommons/training_results_v5.1@441d65f and training_results_v5.0@0fdc28f (git ls-tree of <submitter>/results/).
EXPECTED_DIRS = {
    ("v5.1", "NVIDIA", "hsg_ngpu2560_ngc25.09_nemo"), ("v5.1", "NVIDIA", "hsg_ngpu5120_ngc25.09_nemo"),
    ("v5.1", "NVIDIA", "theia_ngpu512_ngc25.09_nemo"), ("v5.1", "NVIDIA", "tyche_ngpu512_ngc25.09_nemo"),
    ("v5.0", "NVIDIA", "eos-dfw_n64_ngc25.01_nemo"), ("v5.0", "NVIDIA", "eos-dfw_n256_ngc25.01_nemo"),
    ("v5.0", "NVIDIA", "eos-dfw_n304_ngc25.01_nemo"), ("v5.0", "NVIDIA", "eos-dfw_n320_ngc25.01_nemo"),
    ("v5.0", "NVIDIA", "eos-dfw_n1024_ngc25.01_nemo"), ("v5.0", "NVIDIA", "tyche_ngpu256_ngc25.04_nemo"),
    ("v5.0", "NVIDIA", "tyche_ngpu512_ngc25.04_nemo"),
    ("v5.0", "IBM+CoreWeave+NVIDIA", "carina_ngpu512_ngc25.04_nemo"),
    ("v5.0", "IBM+CoreWeave+NVIDIA", "carina_ngpu1024_ngc25.04_nemo"),
    ("v5.0", "IBM+CoreWeave+NVIDIA", "carina_ngpu1536_ngc25.04_nemo"),
    ("v5.0", "IBM+CoreWeave+NVIDIA", "carina_ngpu2048_ngc25.04_nemo"),
    ("v5.0", "IBM+CoreWeave+NVIDIA", "carina_ngpu2496_ngc25.04_nemo"),
}

# Read by hand from each config (DGXNNODES x DGXNGPU, TENSOR/PIPELINE_MODEL_PARALLEL, CONTEXT_PARALLEL, MINIBS) and
# its logs (global_batch_size): (GPUs, TP, PP, CP, MINIBS, DP, global batch); GBS = MINIBS x DP, DP = GPUs / (TP PP CP).
HAND_LAYOUTS = {
    "v5.1-tyche_ngpu512_ngc25.09_nemo": (128 * 4, 4, 8, 2, 144, 8, 1152),
    "v5.1-theia_ngpu512_ngc25.09_nemo": (128 * 4, 2, 8, 2, 72, 16, 1152),
    "v5.1-hsg_ngpu2560_ngc25.09_nemo": (640 * 4, 4, 8, 2, 24, 40, 960),
    "v5.1-hsg_ngpu5120_ngc25.09_nemo": (1280 * 4, 4, 8, 2, 16, 80, 1280),
    "v5.0-eos-dfw_n64_ngc25.01_nemo": (64 * 8, 8, 8, 2, 288, 4, 1152),
    "v5.0-eos-dfw_n256_ngc25.01_nemo": (256 * 8, 8, 8, 2, 72, 16, 1152),
    "v5.0-eos-dfw_n304_ngc25.01_nemo": (304 * 8, 8, 8, 2, 64, 19, 1216),
    "v5.0-eos-dfw_n320_ngc25.01_nemo": (320 * 8, 8, 8, 2, 56, 20, 1120),
    "v5.0-eos-dfw_n1024_ngc25.01_nemo": (1024 * 8, 8, 8, 2, 24, 64, 1536),
    "v5.0-tyche_ngpu256_ngc25.04_nemo": (64 * 4, 4, 8, 2, 112, 4, 448),
    "v5.0-tyche_ngpu512_ngc25.04_nemo": (128 * 4, 4, 8, 2, 112, 8, 896),
    "v5.0-carina_ngpu512_ngc25.04_nemo": (128 * 4, 4, 8, 2, 112, 8, 896),
    "v5.0-carina_ngpu1024_ngc25.04_nemo": (256 * 4, 4, 8, 2, 48, 16, 768),
    "v5.0-carina_ngpu1536_ngc25.04_nemo": (384 * 4, 4, 8, 2, 48, 24, 1152),
    "v5.0-carina_ngpu2048_ngc25.04_nemo": (512 * 4, 4, 8, 2, 40, 32, 1280),
    "v5.0-carina_ngpu2496_ngc25.04_nemo": (624 * 4, 4, 8, 2, 32, 39, 1248),
}


def test_precision_page_table_is_current():
    runs = _module()
    table = runs.section(runs.results())
    assert table in precision_page(), \
        "regenerate with: python benchmarks/mlperf_runs.py"


def test_every_result_directory_is_a_row_or_skipped():
    data = _data()
    rows = data["llama31_405b_rows"]
    assert len(rows) == 16
    stated = [(r["round"], r["submitter"], r["system"]) for r in rows]
    stated += [(s["round"], s["submitter"], s["system"]) for s in data["skipped"]]
    assert sorted(stated) == sorted(EXPECTED_DIRS)
    assert len({r["id"] for r in rows}) == len(rows)


def test_measured_seconds_are_the_median_of_the_logs_medians():
    rows = {r["id"]: r for r in _data()["llama31_405b_rows"]}
    # By hand: result_0, _1, _2's medians as benchmarks/mlperf_extract.py printed them; the middle one is the row's.
    tyche = rows["v5.1-tyche_ngpu512_ngc25.09_nemo"]
    assert tyche["log_median_step_seconds"] == [17.237068, 17.372219, 17.259683]
    assert tyche["measured_step_seconds"] == 17.259683
    eos = rows["v5.0-eos-dfw_n64_ngc25.01_nemo"]
    assert eos["log_median_step_seconds"] == [55.102684, 55.164993, 55.143326]
    assert eos["measured_step_seconds"] == 55.143326
    runs = _module()
    for row in rows.values():
        assert len(row["logs"]) == len(row["log_median_step_seconds"]) == 3, row["id"]
        assert runs.measured_seconds(row) == row["measured_step_seconds"] == statistics.median(row["log_median_step_seconds"])


@pytest.mark.parametrize("row_id", sorted(HAND_LAYOUTS))
def test_batch_arithmetic_matches_the_config(row_id):
    row = next(r for r in _data()["llama31_405b_rows"] if r["id"] == row_id)
    gpus, tp, pp, cp, minibs, dp, gbs = HAND_LAYOUTS[row_id]
    assert (row["gpus"], row["tp"], row["pp"], row["cp"], row["minibs"], row["dp"], row["global_batch_size"]) == (
        gpus, tp, pp, cp, minibs, dp, gbs)
    assert gpus // (tp * pp * cp) == dp and minibs * dp == gbs
    assert row["micro_batch_size"] == 1 and row["vpp"] == 8 and row["seq_len"] == 8192
    # The log states the same batch, and MINIBS / micro-batch accumulation steps (pretrain.py).
    assert row["log_facts"]["global_batch_size"] == gbs
    assert row["log_facts"]["gradient_accumulation_steps"] == minibs
    assert row["log_facts"]["submission_platform"].startswith(f"{row['nodes']}xNVIDIA")


def test_rows_state_their_provenance_and_what_is_not_priced():
    data = _data()
    assert {"mlperf-training-v5.1", "mlperf-training-v5.0"} <= set(data["sources"])
    for row in data["llama31_405b_rows"]:
        impl = f"{row['submitter']}/benchmarks/llama31_405b/implementations/{row['system']}/config_"
        assert row["config"].startswith(impl), row["id"]
        assert all(log.startswith(f"{row['submitter']}/results/{row['system']}/llama31_405b/result_") for log in row["logs"])
        assert row["split"] == "held_out" and row["not_priced"], row["id"]
        assert row["recipe"] == ("nvfp4" if row["round"] == "v5.1" else "fp8-delayed-param-gather"), row["id"]
    theia = next(r for r in data["llama31_405b_rows"] if r["system"] == "theia_ngpu512_ngc25.09_nemo")
    assert theia["hardware"] == "gb300" and theia["config"].endswith("config_GB300_128x4x72xtp2pp8cp2_cg_fp4.sh")


def test_the_pipeline_split_counts_the_embedding_and_the_loss():
    """ASYM_PP_EMBED and ASYM_PP_LOSS: 126 layers + 2 over PP 8 x VP 8 = 64 chunks of 2, the first and last 1."""
    import fp8_runs  # benchmarks/ is on sys.path once mlperf_runs is loaded

    _module()
    row = _data()["llama31_405b_rows"][0]
    spec = fp8_runs.layout(row, 126)
    assert spec.layers_per_stage == (1,) + (2,) * 62 + (1,)


def test_the_tp_pp_dp_mapping_rows_are_priced_in_that_rank_order():
    # TP_PP_DP_MAPPING=True is set by the v5.1 config_common.sh (line 95) and by each v5.0 config_GB200_*.sh of 512
    # GPUs and more; not by NVIDIA's v5.0 H100 configs nor, in the files held, its 256-GPU GB200 one (read by hand).
    # NeMo then orders ranks tp-cp-ep-pp-dp (nemo/lightning/_strategy_lib.py at NVIDIA/NeMo@8cfedd7);
    # fp8_runs.layout hands the row's order to the layout.
    import fp8_runs  # benchmarks/ is on sys.path once mlperf_runs is loaded
    from hp_core.collectives import place_group

    _module()
    default = {"v5.0-tyche_ngpu256_ngc25.04_nemo"} | {f"v5.0-eos-dfw_n{n}_ngc25.01_nemo" for n in (64, 256, 304, 320, 1024)}
    rows = _data()["llama31_405b_rows"]
    for row in rows:
        spec = fp8_runs.layout(row, 126)
        expected = "tp-cp-ep-dp-pp" if row["id"] in default else "tp-cp-ep-pp-dp"
        assert spec.rank_order == expected, row["id"]
        assert not any("TP_PP_DP" in s for s in row["not_priced"]), row["id"]
    # Where it places the distributed optimizer's group (CP x DP, the group holding rank 0) on 72-GPU NVLink domains:
    # v5.1 Tyche (TP 4, PP 8, CP 2, DP 8, 512 GPUs) under the mapping has ranks 0, 4 and 64k, 64k + 4 for k < 8, the
    # last at 452, so 7 domains with at most 4 of its ranks in one; Megatron-Core's default order has ranks 0 to 60
    # step 4 (CP stride 4, DP stride 8), all in the first domain.
    sizes = {"tp": 4, "cp": 2, "ep": 1, "dp": 8, "pp": 8}
    mapped = place_group(sizes, tuple("tp-cp-ep-pp-dp".split("-")), ("cp", "dp"), 72)
    plain = place_group(sizes, tuple("tp-cp-ep-dp-pp".split("-")), ("cp", "dp"), 72)
    assert (mapped.ranks, mapped.nodes, mapped.per_node) == (16, 7, 4)
    assert (plain.ranks, plain.nodes, plain.per_node) == (16, 1, 16)


# Every llama31_8b result directory of mlcommons/training_results_v5.1@441d65f (git ls-tree of <submitter>/results/):
# 29 rows and 10 skipped (the six AMD Instinct directories, Lambda's, Nebius's n2 and n4, Oracle's 1-node).
EXPECTED_8B_DIRS = {
    ("NVIDIA", f"{name}_ngpu{gpus}_ngc25.09_nemo") for name in ("theia", "tyche") for gpus in (8, 72, 512)
} | {("University-of-Florida", f"hpg.dgxb200x8.n{n}") for n in (1, 2, 4, 8, 16, 32)} | {
    ("AMD", "MI350X_EPYC_9575F_pytorch"), ("AMD", "MI355X_EPYC_9575F_pytorch"),
    ("Cisco", "1xC885A_M8-8xMI350X-OAM-288GB"), ("Cisco", "hpf_n16"), ("Cisco", "hpf_n8"),
    ("Dell", "1xXE9680Lx8B200-SXM-180GB"), ("Dell", "1xXE9780x8B300-SXM-270GB"), ("Dell", "2xXE9680Lx8B200-SXM-180GB"),
    ("Dell", "2xXE9685Lx8B200-SXM-180GB"), ("Dell", "XE9785L_8xMI355X"), ("GigaComputing", "G893-ZX1-AAX4_pytorch"),
    ("HPE", "HPE-Cray-XD670-H200-SXM5-141GB_n8_25.09"), ("Lambda", "gb300_n18_ngc25.04_nemo"),
    ("Lenovo", "SR680aV3-8xB200_SXM_180GB"), ("Lenovo", "SR680aV4-8xB300_SXM"), ("Lenovo", "SR780aV3-8xB200_SXM_180GB"),
    ("Nebius", "nebius_b200_n1"), ("Nebius", "nebius_b200_n2"), ("Nebius", "nebius_b200_n4"), ("Nebius", "nebius_b300_n1"),
    ("Oracle", "1xBM.GPU.B200.8"), ("Oracle", "8xBM.GPU.B200.8"), ("Supermicro", "8xMI355X_2xEPYC_9575F"),
    ("Supermicro", "AS-4126GS-NBR-LCC"), ("Supermicro", "AS-8126GS-NB3RT"), ("Supermicro", "SYS-422GS-NBRT-LCC"),
    ("Verda", "b200_8x8_ngc25.09"),
}

# Read by hand from each config (DGXNNODES x DGXNGPU, TENSOR_MODEL_PARALLEL, CONTEXT_PARALLEL, MINIBS,
# MICRO_BATCH_SIZE) and its logs (global_batch_size, gradient_accumulation_steps):
# (GPUs, TP, CP, MINIBS, micro-batch, DP, global batch, accumulation steps); DP = GPUs / (TP CP), GBS = MINIBS x DP.
HAND_8B_LAYOUTS = {
    "v5.1-8b-theia_ngpu512_ngc25.09_nemo": (128 * 4, 2, 4, 1, 1, 64, 64, 1),
    "v5.1-8b-tyche_ngpu8_ngc25.09_nemo": (2 * 4, 1, 1, 2, 2, 8, 16, 1),
    "v5.1-8b-hpf_n16": (16 * 8, 2, 1, 1, 1, 64, 64, 1),
    "v5.1-8b-HPE-Cray-XD670-H200-SXM5-141GB_n8_25.09": (8 * 8, 1, 2, 1, 1, 32, 32, 1),
    "v5.1-8b-hpg.dgxb200x8.n32": (32 * 8, 1, 2, 1, 1, 128, 128, 1),
    "v5.1-8b-hpg.dgxb200x8.n4": (4 * 8, 1, 2, 1, 1, 16, 16, 1),
}


def test_8b_precision_page_table_is_current():
    runs = _module()
    table = runs.section(runs.results(runs.load("llama31_8b_rows")))
    page = precision_page()
    assert table in page, "regenerate with: python benchmarks/mlperf_runs.py"
    assert page.index("### MLPerf Training v5.0 and v5.1: Llama 3.1 405B") < page.index(
        "### MLPerf Training v5.1: Llama 3.1 8B") < page.index(table)


def test_every_8b_result_directory_is_a_row_or_skipped():
    data = _data()
    rows, skipped = data["llama31_8b_rows"], data["llama31_8b_skipped"]
    assert (len(rows), len(skipped)) == (29, 10)
    stated = [(r["submitter"], r["system"]) for r in rows] + [(s["submitter"], s["system"]) for s in skipped]
    assert sorted(stated) == sorted(EXPECTED_8B_DIRS)
    assert len({r["id"] for r in rows} | {r["id"] for r in data["llama31_405b_rows"]}) == len(rows) + 16
    for s in skipped:
        assert s["round"] == "v5.1" and s["results"] == f"{s['submitter']}/results/{s['system']}/llama31_8b", s
        assert len(s["reason"]) > 40, s["system"]
    amd = [s for s in skipped if "MI35" in s["system"] or s["submitter"] in ("AMD", "GigaComputing")]
    assert len(amd) == 6 and all("hp has no preset" in s["reason"] for s in amd)


def test_8b_measured_seconds_are_the_median_of_the_ten_logs():
    rows = {r["id"]: r for r in _data()["llama31_8b_rows"]}
    # By hand: Tyche's 8-GPU logs, result_0 to result_9 as benchmarks/mlperf_logs.py's run_facts gave them; sorted,
    # the fifth and sixth are 0.404975 and 0.40618, so the median is (0.404975 + 0.40618) / 2 = 0.4055775 s.
    tyche = rows["v5.1-8b-tyche_ngpu8_ngc25.09_nemo"]
    assert tyche["log_median_step_seconds"] == [0.404975, 0.409413, 0.40618, 0.409897, 0.421476, 0.407069, 0.404689,
                                                0.402236, 0.403718, 0.401518]
    assert tyche["measured_step_seconds"] == 0.4055775
    runs = _module()
    for row in rows.values():
        assert len(row["logs"]) == len(row["log_median_step_seconds"]) == 10, row["id"]
        assert runs.measured_seconds(row) == pytest.approx(row["measured_step_seconds"], abs=1e-9), row["id"]
        assert all(log.startswith(f"{row['submitter']}/results/{row['system']}/llama31_8b/result_") for log in row["logs"])


@pytest.mark.parametrize("row_id", sorted(HAND_8B_LAYOUTS))
def test_8b_batch_arithmetic_matches_the_config_and_logs(row_id):
    row = next(r for r in _data()["llama31_8b_rows"] if r["id"] == row_id)
    gpus, tp, cp, minibs, mbs, dp, gbs, steps = HAND_8B_LAYOUTS[row_id]
    assert (row["gpus"], row["tp"], row["cp"], row["minibs"], row["micro_batch_size"], row["dp"],
            row["global_batch_size"]) == (gpus, tp, cp, minibs, mbs, dp, gbs)
    assert gpus // (tp * cp) == dp and minibs * dp == gbs and minibs // mbs == steps
    assert (row["pp"], row["vpp"], row["seq_len"]) == (1, 1, 8192)
    assert row["log_facts"]["global_batch_size"] == gbs
    assert row["log_facts"]["gradient_accumulation_steps"] == steps


def test_8b_rows_state_their_provenance_and_settings():
    data = _data()
    assert {"mlperf-training-v5.1-llama31-8b", "transformer-engine-release-v2.8-dpa",
            "megatron-core-25.09-alpha.rc1-cuda-graphs"} <= set(data["sources"])
    rows = {r["system"]: r for r in data["llama31_8b_rows"]}
    for row in rows.values():
        assert row["config"].startswith(f"{row['submitter']}/benchmarks/"), row["id"]
        assert row["config"].rsplit("/", 1)[1] == row["config_files"][0], row["id"]
        assert row["split"] == "held_out" and row["not_priced"] and row["matched_by"], row["id"]
        assert row["model"] == "llama3-8b" and row["runtime_options"]["cuda_graphs"] in ("none", "layers", "full_iteration")
        # Megatron-Core 25.09-alpha.rc1 keeps the projection's quantized input under NVFP4 (source megatron-core-25.09-alpha.rc1).
        nvfp4 = row["recipe"].startswith("nvfp4")
        assert ("linear_proj_save_original_input" in row["runtime_options"]) == nvfp4, row["id"]
        if nvfp4:  # config_common_fp8attn.sh: FP8 attention beside the NVFP4 linears, NVTE_DPA_FP8_RECIPE current scaling
            assert row["runtime_options"]["linear_proj_save_original_input"] is False
            assert row["recipe"] == "nvfp4-fp8-attention" and "FP8_DPA=True" in row["recipe_source"], row["id"]
            assert "NVTE_DPA_FP8_RECIPE=Float8CurrentScaling" in row["recipe_source"], row["id"]
            assert any(n.startswith("FP8 attention's own costs") for n in row["not_priced"]), row["id"]
    # Read by hand from the configs: the device (system file), recipe and CUDA graphs of a few rows.
    assert (rows["theia_ngpu72_ngc25.09_nemo"]["hardware"], rows["theia_ngpu72_ngc25.09_nemo"]["recipe"]) == (
        "gb300", "fp8-megatron-param-gather")
    assert rows["HPE-Cray-XD670-H200-SXM5-141GB_n8_25.09"]["recipe"] == "fp8-megatron-param-gather-fp8-attention"
    assert rows["hpf_n8"]["recipe"] == "fp8-delayed-param-gather" and rows["hpf_n8"]["hardware"] == "h100-sxm"
    assert rows["SR680aV4-8xB300_SXM"]["hardware"] == "b300"
    assert rows["nebius_b300_n1"]["runtime_options"]["cuda_graphs"] == "full_iteration"  # config_common_fp4.sh last
    assert rows["tyche_ngpu8_ngc25.09_nemo"]["runtime_options"]["cuda_graphs"] == "layers"  # FULL_CUDA_GRAPH=0
    assert rows["AS-8126GS-NB3RT"]["runtime_options"]["cuda_graphs"] == "none"  # MCORE_CUDA_GRAPH=0
    assert rows["theia_ngpu512_ngc25.09_nemo"]["runtime_options"]["tp_comm_overlap"] is True
    # TP_PP_DP_MAPPING=True in every config but Cisco's (config_common.sh of each folder; Cisco's conf/custom.yaml
    # defaults use_tp_pp_dp_mapping to False): NeMo's order, as on the 405B rows.
    for row in rows.values():
        assert row.get("rank_order") == (None if row["submitter"] == "Cisco" else "tp-cp-ep-pp-dp"), row["id"]
        assert not any("TP_PP_DP" in n for n in row["not_priced"]), row["id"]
