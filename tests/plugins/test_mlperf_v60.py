"""MLPerf Training v6.0's rows (tests/plugins/data/mlperf_v60_measured.json): docs/mlperf_v60.md shows what
``benchmarks/mlperf_v60.py`` prints today, every row's measured step time is what its copied log records give, and
its layout is what its config and log state."""

from __future__ import annotations

import json
import statistics

import pytest

from mlperf_rows import ROOT
from repo_script import load_script  # tests/repo_script.py

DATA = ROOT / "tests" / "plugins" / "data"


@pytest.fixture(scope="module")
def v60():
    return load_script("benchmarks/mlperf_v60.py")


def _data() -> dict:
    return json.loads((DATA / "mlperf_v60_measured.json").read_text(encoding="utf-8"))


def _steps() -> dict:
    return json.loads((DATA / "mlperf_v60_step_records.json").read_text(encoding="utf-8"))


def _rows() -> list[dict]:
    data = _data()
    return data["deepseekv3_671b_rows"] + data["llama31_8b_rows"] + data["llama31_405b_rows"]


def test_page_tables_are_current(v60):
    page = (ROOT / "docs" / "mlperf_v60.md").read_text(encoding="utf-8")
    assert v60.sections() in page, "regenerate with: python benchmarks/mlperf_v60.py --write"


def test_every_log_a_row_uses_is_copied_and_nothing_else():
    steps = _steps()
    used = [log for row in _rows() for log in row["logs"]]
    assert sorted(used) == sorted(steps) and len(used) == len(set(used)) == 37
    for path, log in steps.items():
        assert log["run_stop_status"] == "success", path
        # Each record: lineno, samples_count, step, seconds, time_ms, whether the loss is beside it.
        assert all(len(r) == 6 and isinstance(r[3], float) and isinstance(r[5], bool) for r in log["records"]), path


@pytest.mark.parametrize("row_id", [r["id"] for r in _rows()])
def test_row_figures_are_its_logs_records(v60, row_id):
    row = next(r for r in _rows() if r["id"] == row_id)
    steps = _steps()
    figures = [v60.log_figures(steps[log]) for log in row["logs"]]
    assert row["log_median_step_seconds"] == [pytest.approx(m, abs=1e-6) for m, _ in figures]
    assert row["log_block_mean_seconds"] == [pytest.approx(b, abs=1e-6) for _, b in figures]
    assert row["measured_step_seconds"] == statistics.median(row["log_median_step_seconds"]) == \
        v60.mlperf_runs.measured_seconds(row)
    for log in row["logs"]:
        facts = steps[log]["facts"]
        assert facts["global_batch_size"] == row["global_batch_size"] == row["log_facts"]["global_batch_size"], row_id
        assert facts["max_sequence_length"] == row["seq_len"], row_id


def test_deepseek_v3_8192_gpu_figure_by_hand(v60):
    # NVIDIA/results/tyche-hsg_ngpu8192_ngc26.04_nemo/deepseekv3_671b/result_0.txt: 45 steps, each with one sampled
    # step (lineno 341, the loss beside it, samples_count cumulative in global batches of 16,384) and one block record
    # (lineno 299, a block of one step: samples_count 16,384); the median of the 40 sampled steps after the first five.
    log = _steps()["NVIDIA/results/tyche-hsg_ngpu8192_ngc26.04_nemo/deepseekv3_671b/result_0.txt"]
    sampled = [r for r in log["records"] if r[5]]
    blocks = [r for r in log["records"] if not r[5]]
    assert len(sampled) == len(blocks) == 45
    assert [r[1] for r in sampled] == [16384 * (i + 1) for i in range(45)]
    assert {r[0] for r in sampled} == {341} and {r[0] for r in blocks} == {299} and {r[1] for r in blocks} == {16384}
    by_hand = statistics.median(sorted(r[3] for r in sampled)[:0] + [r[3] for r in sampled[5:]])
    assert v60.log_figures(log)[0] == pytest.approx(by_hand) == pytest.approx(3.491405, abs=1e-6)


def test_deepseek_v3_layouts_are_their_configs():
    # By hand from each config's name (DGXNNODES x 4 x MINIBS, TP, PP, EP) and the logs: DP = GPUs / (TP x PP),
    # global batch = MINIBS x DP, gradient accumulation = MINIBS (micro-batch 1).
    hand = {"theia_ngpu256_ngc26.04_nemo": ("gb300", 256, 1, 240, 64, 15360, []),
            "theia_ngpu512_ngc26.04_nemo": ("gb300", 512, 1, 120, 128, 15360, []),
            "tyche-hsg_ngpu512_ngc26.04_nemo": ("gb200", 512, 2, 240, 64, 15360, ["mlp"]),
            "tyche-hsg_ngpu2048_ngc26.04_nemo": ("gb200", 2048, 2, 60, 256, 15360, ["mlp"]),
            "tyche-hsg_ngpu4096_ngc26.04_nemo": ("gb200", 4096, 2, 32, 512, 16384, ["mlp"]),
            "tyche-hsg_ngpu8192_ngc26.04_nemo": ("gb200", 8192, 2, 16, 1024, 16384, ["mlp"]),
            # Google's and CoreWeave's runs of NVIDIA's implementation (their configs' names and exports).
            "gb200_nvl72_n64_ngc26.04_nemo": ("gb200", 256, 2, 480, 32, 15360, ["mlp"]),
            "CoreWeave_GB300_512x4": ("gb300", 2048, 1, 32, 512, 16384, []),
            "CoreWeave_GB300_1024x4": ("gb300", 4096, 1, 16, 1024, 16384, []),
            "CoreWeave_GB300_2048x4": ("gb300", 8192, 1, 8, 2048, 16384, [])}
    rows = {r["system"]: r for r in _data()["deepseekv3_671b_rows"]}
    assert sorted(rows) == sorted(hand)
    for system, (hardware, gpus, tp, minibs, dp, gbs, recompute) in hand.items():
        row = rows[system]
        assert (row["hardware"], row["gpus"], row["tp"], row["minibs"], row["dp"], row["global_batch_size"]) == (
            hardware, gpus, tp, minibs, dp, gbs), system
        assert gpus // (tp * row["pp"] * row["cp"]) == dp and minibs * dp == gbs
        assert (row["pp"], row["vpp"], row["ep"], row["micro_batch_size"], row["seq_len"]) == (4, 4, 32, 1, 4096)
        assert row["log_facts"]["gradient_accumulation_steps"] == minibs
        assert row["recompute_modules"] == recompute and row["model"] == "deepseek-v3" and not row["model_differs"]
        # PIPELINE_LAYOUT 'Et*4|(t*4|)*14tmL': 15 chunks of 4 decoder layers and one of 1, 61 in all.
        assert row["layers_per_stage"] == [4] * 15 + [1] and sum(row["layers_per_stage"]) == 61
        assert row["config"].startswith(f"{row['submitter']}/benchmarks/deepseekv3_671b/implementations/")
        assert row["recipe"] == "mxfp8-param-gather-fp8-attention" and row["precision"] == {"moment_bytes": 2}
        assert row["runtime_options"]["cuda_graphs"] == "full_iteration"
        assert row["runtime_options"]["ep_all_to_all"] == "hybridep"


def test_llama_rows_batch_arithmetic_and_settings():
    data = _data()
    rows = {r["system"]: r for r in data["llama31_8b_rows"] + data["llama31_405b_rows"]}
    # By hand from each config or log dump: (submitter, device, GPUs, TP, PP, CP, DP, MINIBS, micro-batch, global batch).
    hand = {"2xC885A_M8-8xH200-SXM-141GB": ("Cisco", "h200", 16, 1, 1, 1, 16, 2, 1, 32),
            "2xC880A_M8-8xB300-SXM-288GB": ("Cisco", "b300", 16, 2, 1, 1, 8, 2, 2, 16),
            "HPE-Compute-XD690-B300-SXM6-288GB_n1_ngc26.04": ("HPE", "b300", 8, 1, 1, 1, 8, 2, 2, 16),
            "b200_n1_ngc25.09_nemo": ("Lambda", "b200", 8, 1, 1, 1, 8, 2, 2, 16),
            "nebius_gb300_n2": ("Nebius", "gb300", 8, 1, 1, 1, 8, 2, 2, 16),
            # Collected after nvfp4-fp8-attention was added (held out from it): HPE's 2 x 4 GB300s and GB200s, Nebius's
            # and Supermicro's 8 B300s, each a micro-batch of 2 a rank and one a step (the logs' gradient_accumulation_steps 1.0).
            "HPE-GB300-ngpu8_ngc26.04": ("HPE", "gb300", 8, 1, 1, 1, 8, 2, 2, 16),
            "nebius_b300_n1": ("Nebius", "b300", 8, 1, 1, 1, 8, 2, 2, 16),
            "AS-4126GS-NB3RT-LCC-8xB300_SXM": ("Supermicro", "b300", 8, 1, 1, 1, 8, 2, 2, 16),
            "HPE-GB200-ngpu8_ngc25.09": ("HPE", "gb200", 8, 1, 1, 1, 8, 2, 2, 16),
            # HPE's 18 x 4 GB300s at one micro-batch of 1 a rank (config_GB300_18x4x1xtp1pp1cp1_8b_fp4.sh, the log's
            # WORLD_SIZE 72, cp(1), dp(72)); Dell's 2 x 8 B300s at a global batch of 32.
            "HPE-GB300-ngpu72_ngc26.04": ("HPE", "gb300", 72, 1, 1, 1, 72, 1, 1, 72),
            "2xXE9780x8B300-SXM-270GB": ("Dell", "b300", 16, 1, 1, 1, 16, 2, 2, 32),
            # ASUSTeK's 8 B300s; Nebius's 64 B300s and Lambda's 18 x 4 GB300s at one micro-batch of 1 a rank.
            "XA_NB3I_E12": ("ASUSTeK", "b300", 8, 1, 1, 1, 8, 2, 2, 16),
            "nebius_b300_n8": ("Nebius", "b300", 64, 1, 1, 1, 64, 1, 1, 64),
            "gb300_n18_ngc25.09_nemo": ("Lambda", "gb300", 72, 1, 1, 1, 72, 1, 1, 72),
            # HPE's 8 x 4 GB200s and 4 and 8 x 4 GB300s, a micro-batch of 2 a rank (config_GB200_8x4x2..., GB300_4x4x2... and
            # GB300_8x4x2..., each named by its log's DLPAL line).
            "HPE-GB200-ngpu32_ngc25.09": ("HPE", "gb200", 32, 1, 1, 1, 32, 2, 2, 64),
            "HPE-GB300-ngpu16_ngc26.04": ("HPE", "gb300", 16, 1, 1, 1, 16, 2, 2, 32),
            "HPE-GB300-ngpu32_ngc26.04": ("HPE", "gb300", 32, 1, 1, 1, 32, 2, 2, 64),
            # HPE's 8 and 16 B200s; the 2-node run at a micro-batch of 1, two a step (the log's GBS 32 over 16 ranks).
            "HPE-Compute-XD685-B200-SXM5-192GB_n1_25.09": ("HPE", "b200", 8, 1, 1, 1, 8, 2, 2, 16),
            "HPE-Compute-XD685-B200-SXM5-192GB_n2_25.09": ("HPE", "b200", 16, 1, 1, 1, 16, 2, 1, 32),
            # Supermicro's two 8-B200 systems; Nebius's 18 x 4 GB300s (the config Lambda's folder holds under that name).
            "SYS-A22GA-NBRT-8xB200_SXM": ("Supermicro", "b200", 8, 1, 1, 1, 8, 2, 2, 16),
            "AS-4126GS-NBR-LCC": ("Supermicro", "b200", 8, 1, 1, 1, 8, 2, 2, 16),
            "nebius_gb300_n18": ("Nebius", "gb300", 72, 1, 1, 1, 72, 1, 1, 72),
            "HPE-GB200-ngpu16_ngc25.09": ("HPE", "gb200", 16, 1, 1, 1, 16, 2, 2, 32),
            "ARS-121GL-NB3": ("Supermicro", "gb300", 72, 1, 1, 1, 72, 1, 1, 72),
            "CoreWeave_GB300_1024x4_nccl2297": ("CoreWeave", "gb300", 4096, 2, 8, 2, 128, 8, 1, 1024)}
    assert sorted(rows) == sorted(hand)
    for system, (submitter, hardware, gpus, tp, pp, cp, dp, minibs, mbs, gbs) in hand.items():
        row = rows[system]
        assert (row["submitter"], row["hardware"], row["gpus"], row["tp"], row["pp"], row["cp"], row["dp"], row["minibs"],
                row["micro_batch_size"], row["global_batch_size"]) == (submitter, hardware, gpus, tp, pp, cp, dp, minibs,
                                                                       mbs, gbs), system
        assert gpus // (tp * pp * cp) == dp and minibs * dp == gbs == row["log_facts"]["global_batch_size"], system
        assert row["split"] == "held_out" and row["recipe_source"] and row["runtime_options_source"], system
        assert row["not_priced"] and row["model"] in ("llama3-8b", "llama3-405b"), system
    # Cisco's H200 config states one node (MINIBS 4, the log's gradient_accumulation_steps 4.0) but the run had two: the
    # log states 16 ranks and a constant 2 micro-batches, so MINIBS is 2 (the row's assumptions say so).
    assert rows["2xC885A_M8-8xH200-SXM-141GB"]["log_facts"]["gradient_accumulation_steps"] == 4.0
    # NVFP4 linears everywhere but on Cisco's H200s; FP8 attention beside them where the log prints
    # fp8_dot_product_attention=True or, where a log prints no configuration (Nebius's 8-GPU runs, ASUSTeK's), as assumed
    # from the config chain it sources; Lambda's B200 log prints it False, and Nebius's 64-GPU chain sources no such file.
    assert {s: r["recipe"] for s, r in rows.items() if s != "2xC885A_M8-8xH200-SXM-141GB"} == {
        "HPE-Compute-XD690-B300-SXM6-288GB_n1_ngc26.04": "nvfp4-fp8-attention",
        "2xC880A_M8-8xB300-SXM-288GB": "nvfp4-fp8-attention", "nebius_gb300_n2": "nvfp4-fp8-attention",
        "b200_n1_ngc25.09_nemo": "nvfp4", "CoreWeave_GB300_1024x4_nccl2297": "nvfp4",
        "HPE-GB300-ngpu8_ngc26.04": "nvfp4-fp8-attention", "nebius_b300_n1": "nvfp4-fp8-attention",
        "AS-4126GS-NB3RT-LCC-8xB300_SXM": "nvfp4-fp8-attention", "HPE-GB200-ngpu8_ngc25.09": "nvfp4-fp8-attention",
        "HPE-GB300-ngpu72_ngc26.04": "nvfp4-fp8-attention", "2xXE9780x8B300-SXM-270GB": "nvfp4-fp8-attention",
        "XA_NB3I_E12": "nvfp4-fp8-attention", "nebius_b300_n8": "nvfp4", "gb300_n18_ngc25.09_nemo": "nvfp4-fp8-attention",
        "HPE-GB200-ngpu32_ngc25.09": "nvfp4-fp8-attention", "HPE-GB300-ngpu16_ngc26.04": "nvfp4-fp8-attention",
        "HPE-GB300-ngpu32_ngc26.04": "nvfp4-fp8-attention",
        "HPE-Compute-XD685-B200-SXM5-192GB_n1_25.09": "nvfp4-fp8-attention",
        "HPE-Compute-XD685-B200-SXM5-192GB_n2_25.09": "nvfp4-fp8-attention",
        "SYS-A22GA-NBRT-8xB200_SXM": "nvfp4-fp8-attention", "AS-4126GS-NBR-LCC": "nvfp4-fp8-attention",
        "nebius_gb300_n18": "nvfp4-fp8-attention", "HPE-GB200-ngpu16_ngc25.09": "nvfp4-fp8-attention",
        "ARS-121GL-NB3": "nvfp4-fp8-attention"}
    # Nebius's 64-GPU config sources no config_common_fp8attn.sh (its 8-GPU ones do): bf16 attention.
    assert "NOT config_common_fp8attn.sh" in rows["nebius_b300_n8"]["recipe_source"]
    # Where the log prints its configuration, the FP8 attention is the log's; Nebius's B300 log prints none (assumed).
    for system in ("HPE-GB300-ngpu8_ngc26.04", "AS-4126GS-NB3RT-LCC-8xB300_SXM", "HPE-GB200-ngpu8_ngc25.09",
                   "HPE-GB300-ngpu72_ngc26.04", "2xXE9780x8B300-SXM-270GB", "gb300_n18_ngc25.09_nemo",
                   "HPE-GB200-ngpu32_ngc25.09", "HPE-GB300-ngpu16_ngc26.04", "HPE-GB300-ngpu32_ngc26.04",
                   "HPE-Compute-XD685-B200-SXM5-192GB_n1_25.09", "HPE-Compute-XD685-B200-SXM5-192GB_n2_25.09",
                   "SYS-A22GA-NBRT-8xB200_SXM", "AS-4126GS-NBR-LCC", "HPE-GB200-ngpu16_ngc25.09",
                   "ARS-121GL-NB3"):
        assert "fp8_dot_product_attention=True" in rows[system]["recipe_source"], system
    assert any("FP8 attention" in a for a in rows["nebius_b300_n1"]["assumptions"])
    assert "fp8_dot_product_attention=False" in rows["b200_n1_ngc25.09_nemo"]["recipe_source"]
    assert "fp8_dot_product_attention: true" in rows["HPE-Compute-XD690-B300-SXM6-288GB_n1_ngc26.04"]["recipe_source"]
    assert "fp8_dot_product_attention=True" in rows["2xC880A_M8-8xB300-SXM-288GB"]["recipe_source"]
    assert any("FP8 attention: config_common_fp8attn.sh" in a for a in rows["nebius_gb300_n2"]["assumptions"])
    # The 405B row's layers: 126 decoder layers with the embedding and the loss counted over 64 chunks (ASYM_PP_*).
    assert "ASYM_PP_EMBED" in rows["CoreWeave_GB300_1024x4_nccl2297"]["layers_per_stage"]


def test_every_nvidia_directory_of_these_benchmarks_is_a_row_or_skipped():
    data = _data()
    # NVIDIA/results/<system>/<benchmark> of the copy read (its listing): llama31_8b 4, llama31_405b 2,
    # llama2_70b_lora 3, deepseekv3_671b 6, gpt_oss_20b 5.
    expected = {("theia_ngpu8_ngc26.04_nemo", "llama31_8b"), ("theia_ngpu72_ngc26.04_nemo", "llama31_8b"),
                ("theia_ngpu512_ngc26.04_nemo", "llama31_8b"), ("tyche-hsg_ngpu1024_ngc26.04_nemo", "llama31_8b"),
                ("theia-cmh_ngpu512_ngc26.04_nemo", "llama31_405b"), ("theia-cmh_ngpu2048_ngc26.04_nemo", "llama31_405b"),
                ("theia_ngpu8_ngc26.04_nemo", "llama2_70b_lora"), ("theia_ngpu72_ngc26.04_nemo", "llama2_70b_lora"),
                ("theia_ngpu512_ngc26.04_nemo", "llama2_70b_lora")}
    nvidia = [r for r in data["deepseekv3_671b_rows"] if r["submitter"] == "NVIDIA"]
    assert len(nvidia) == 6
    expected |= {(r["system"], "deepseekv3_671b") for r in nvidia}
    stated = {(r["system"], "deepseekv3_671b") for r in nvidia}
    for s in data["skipped"]:
        assert len(s["reason"]) > 40, s
        if s.get("submitter") == "NVIDIA":
            for system in s["system"].split(", "):
                stated.add((system, s["benchmark"]))
    oss = {(s, "gpt_oss_20b") for s in ("theia_ngpu8_ngc26.04_nemo", "theia_ngpu72_ngc26.04_nemo",
                                        "theia_ngpu512_ngc26.04_nemo", "tyche-hsg_ngpu72_ngc26.04_nemo",
                                        "tyche-hsg_ngpu8_ngc26.04_nemo")}
    assert stated == expected | oss
    lora = [s for s in data["skipped"] if s["benchmark"] == "llama2_70b_lora" and "log_median_step_seconds" in s]
    assert len(lora) == 2 and all(len(s["log_median_step_seconds"]) == 3 for s in lora)


def test_sources_name_no_local_path():
    text = (DATA / "mlperf_v60_measured.json").read_text(encoding="utf-8")
    assert "mlperf-training-v6.0" in _data()["sources"]
    for word in ("/work", "/tmp", "/home"):
        assert word not in text
    # Files are cited by repository, commit and path, never by a reading tool's own handle for them.
    import re
    assert not re.search(r"\bid \d{9,}", text)


def test_a_moe_row_whose_model_is_not_the_preset_is_refused(v60):
    row = dict(_data()["deepseekv3_671b_rows"][0])
    with pytest.raises(ValueError, match="model_differs"):
        v60.moe_results([{**row, "model_differs": True}], None)
    with pytest.raises(ValueError, match="model_differs"):
        v60.moe_results([{k: v for k, v in row.items() if k != "model_differs"}], None)
