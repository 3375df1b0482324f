"""MLPerf Training v5.1's Llama 2 70B LoRA rows (tests/plugins/data/mlperf_measured.json ``llama2_70b_lora_rows``):
docs/precision.md's table is what ``benchmarks/mlperf_runs.py`` prints today, every result directory of the round is
a row, a skipped or a not-collected entry, the block-averaged step time is read as mlperf-common logs it, and the rows'
model, adapters and batch arithmetic are what the implementation states."""

from __future__ import annotations

import statistics

import pytest

from mlperf_rows import mllog_line as _line, mlperf_data as _data, precision_page
from repo_script import load_script  # tests/repo_script.py

# git ls-tree of mlcommons/training_results_v5.1@441d65f: 63 <submitter>/results/<system>/llama2_70b_lora directories,
# 6 of them NVIDIA's; 19 on AMD Instinct systems (MI300X, MI325X, MI350X, MI355X).
ROWS = {"tyche_ngpu72_ngc25.09_nemo", "tyche_ngpu512_ngc25.09_nemo", "theia_ngpu72_ngc25.09_nemo",
        "theia_ngpu512_ngc25.09_nemo", "gb300_n18_ngc25.04_nemo", "ARS-121GL-NB3"}
# Wiwynn's two, which run NVIDIA's v5.0 implementation (priced as the v5.0 rows: tests/plugins/test_mlperf_lora_v50.py).
WIWYNN = {"1xKinabalux18x4GB200", "8xKinabalux18x4GB200"}
# (GPUs, DP, global batch, device) by hand: DGXNNODES x DGXNGPU 4, DP = GPUs / (TP 1 x PP 1 x CP 8), GBS = MINIBS 1 x DP.
HAND_LAYOUTS = {"tyche_ngpu72_ngc25.09_nemo": (72, 9, 9, "gb200"), "tyche_ngpu512_ngc25.09_nemo": (512, 64, 64, "gb200"),
                "theia_ngpu72_ngc25.09_nemo": (72, 9, 9, "gb300"), "theia_ngpu512_ngc25.09_nemo": (512, 64, 64, "gb300"),
                "gb300_n18_ngc25.04_nemo": (72, 9, 9, "gb300"), "ARS-121GL-NB3": (72, 9, 9, "gb300")}


def test_precision_page_lora_table_is_current():
    assert load_script("benchmarks/mlperf_runs.py").lora_section() in precision_page(), \
        "regenerate with: python benchmarks/mlperf_runs.py"


def test_every_lora_result_directory_is_a_row_skipped_or_not_collected():
    data = _data()
    # The v5.1 round's (v5.0's: tests/plugins/test_mlperf_lora_v50.py).
    rows = [r for r in data["llama2_70b_lora_rows"] if r["round"] == "v5.1"]
    skipped = [s for s in data["llama2_70b_lora_skipped"] if s["round"] == "v5.1"]
    not_collected = data["llama2_70b_lora_not_collected"]
    assert {r["system"] for r in rows} == ROWS | WIWYNN and len(rows) == 8
    assert len(rows) + len(skipped) + len(not_collected) == 63
    assert len({(e["submitter"], e["system"]) for e in skipped + not_collected}) == 55
    # A directory is in one list only: the rows' systems are in neither of the others.
    assert not (ROWS | WIWYNN) & {e["system"] for e in skipped + not_collected}
    nvidia = {s["system"]: s["reason"] for s in skipped if s["submitter"] == "NVIDIA"}
    assert set(nvidia) == {"tyche_ngpu8_ngc25.09_nemo", "theia_ngpu8_ngc25.09_nemo"}
    assert all("HEALING_ITER=350" in reason for reason in nvidia.values())
    amd = [s for s in skipped if "AMD Instinct" in s["reason"]]
    assert len(amd) == 19 and not any(s["submitter"] in ("NVIDIA", "Wiwynn") for s in amd)
    # Partner configs matched by node count whose TP > 1 the lora kind refuses: Krai's 2, 4 and 8 H200 nodes (TP 2, 4,
    # 4) and Cisco's 8 and 16 H100 nodes (TP 4, CP 2); their logs state throughput, not train_step_time, besides.
    tp = {s["system"]: s["reason"] for s in skipped if "lora kind refuses" in s["reason"]}
    assert set(tp) == {"Cray-XD670-H200-SXM5-141GB_n2_v5.0", "Cray-XD670-H200-SXM5-141GB_n4_v5.0",
                       "Cray-XD670-H200-SXM5-141GB_n8_v5.0", "hpf_n8", "hpf_n16"}
    assert "runs TP=2" in tp["Cray-XD670-H200-SXM5-141GB_n2_v5.0"] and "runs TP=4" in tp["hpf_n16"]
    assert len(skipped) == 19 + 2 + 5
    assert not any(e["submitter"] in ("NVIDIA", "Lambda", "Wiwynn") for e in not_collected) and len(not_collected) == 29


def test_block_facts_is_the_step_weighted_mean_after_the_first_block():
    """mlperf-common logs one train_step_time a block (the block's mean step): the first block is left out and the
    rest are weighted by their steps (samples_count / global batch)."""
    logs = load_script("benchmarks/mlperf_logs.py")
    text = "\n".join([
        _line("submission_platform", "2xNVIDIA GB200"), _line("global_batch_size", 8),
        _line("tracked_stats", {"train_loss": 1.2}, step=10, samples_count=80),
        _line("tracked_stats", {"train_step_time": 1.0}, samples_count=1536),  # 192 steps, left out
        _line("tracked_stats", {"validation_time": 6.6}, step=192),
        _line("tracked_stats", {"train_step_time": 0.5}, samples_count=384),  # 48 steps
        _line("tracked_stats", {"train_step_time": 0.8}, samples_count=192),  # 24 steps
        _line("run_stop", None, status="success"),
    ])
    facts = logs.block_facts(text)
    # By hand: (0.5 x 48 + 0.8 x 24) / 72 = 43.2 / 72 = 0.6.
    assert facts["block_mean_step_seconds"] == pytest.approx(0.6)
    assert facts["block_steps"] == [192, 48, 24] and facts["status"] == "success"
    # The per-step reading does not apply: three step-time records, none past the five it skips.
    with pytest.raises(ValueError, match="none past"):
        logs.run_facts(text)
    with pytest.raises(ValueError, match="whole number"):
        logs.block_facts(text.replace('"samples_count": 192}', '"samples_count": 190}'))


def test_a_logs_figure_is_its_blocks_after_the_first():
    rows = {r["system"]: r for r in _data()["llama2_70b_lora_rows"]}  # both rounds: ten logs each
    tyche = rows["tyche_ngpu72_ngc25.09_nemo"]
    # Copied from NVIDIA/results/tyche_ngpu72_ngc25.09_nemo/llama2_70b_lora/result_0.txt: six train_step_time records,
    # samples_count 1548 (172 steps of 9) then 387 (43 steps) each; the five after the first weigh alike.
    later = [0.1993456170230909, 0.19990511297662525, 0.19927819500011285, 0.19996690134880632, 0.19975916041822042]
    assert tyche["logs"][0].endswith("tyche_ngpu72_ngc25.09_nemo/llama2_70b_lora/result_0.txt")
    assert tyche["log_block_mean_step_seconds"][0] == pytest.approx(sum(later) / 5, abs=1e-6)
    assert tyche["log_blocks"][0] == 6
    runs = load_script("benchmarks/mlperf_runs.py")
    for row in rows.values():
        assert len(row["log_block_mean_step_seconds"]) == len(row["logs"]) == 10
        assert runs.measured_seconds(row) == statistics.median(row["log_block_mean_step_seconds"])
    assert runs.measured_seconds(tyche) == pytest.approx(0.1996, abs=1e-4)


@pytest.mark.parametrize("system", sorted(ROWS))
def test_lora_batch_arithmetic_and_settings(system):
    row = next(r for r in _data()["llama2_70b_lora_rows"] if r["system"] == system)
    gpus, dp, gbs, device = HAND_LAYOUTS[system]
    assert (row["gpus"], row["dp"], row["global_batch_size"], row["hardware"]) == (gpus, dp, gbs, device)
    assert (row["tp"], row["pp"], row["cp"], row["cp_kind"], row["micro_batch_size"], row["seq_len"]) == (1, 1, 8, "a2a", 1, 8192)
    assert row["log_facts"]["global_batch_size"] == gbs and row["log_facts"]["gradient_accumulation_steps"] == 1
    # FP8 parameters: custom_llama.py builds the model under te.fp8_model_init when FP8 is set (recipe_source).
    assert row["recipe"] == "fp8-delayed-param-gather-fp8-attention" and row["split"] == "held_out"
    assert "te.fp8_model_init" in row["recipe_source"] and "custom_llama.py lines 89-101" in row["recipe_source"]
    assert row["runtime_options"]["cuda_graphs"] == "full_iteration"
    # Supermicro's config carries its system's name; its content is NVIDIA's config_GB300_18x4x1xtp1pp1cp8.sh.
    name = "ARS-121GL-NB3" if row["submitter"] == "Supermicro" else device.upper()
    assert row["config"].endswith(f"config_{name}_{gpus // 4}x4x1xtp1pp1cp8.sh")
    assert "linear_qkv" in row["not_priced"][0]
    # Lambda's submission has no train.py or conf/: NVIDIA's are assumed, and the row says so.
    assert ("assumptions" in row) == (row["submitter"] == "Lambda")


def test_lora_model_is_llama2_70b_with_rank16_attention_adapters():
    """The row's model: 80 frozen decoder layers with adapters on q, k, v, o; 819,200 adapter weights a layer."""
    from hp_core import api
    from hp_plugins.kinds.lora import adapter_shapes

    fp8_runs = load_script("benchmarks/fp8_runs.py")
    row = _data()["llama2_70b_lora_rows"][0]
    registry = api.build_registry()
    model = fp8_runs.row_model(row, registry)
    assert [(g.kind, g.count) for g in model.layers] == [("lora_first", 1), ("lora", 80), ("lora_last", 1)]
    body = model.layers[1].config
    assert (body.rank, body.target_modules, body.dropout) == (16, ("q_proj", "k_proj", "v_proj", "o_proj"), 0.1)
    # By hand, r (in + out) per target: q and o 16 x (8192 + 8192), k and v 16 x (8192 + 8 x 128).
    shapes = adapter_shapes(body.layer.config, body.target_modules)
    assert sum(16 * (fan_in + fan_out) for _, fan_in, fan_out in shapes) == 2 * 262_144 + 2 * 147_456 == 819_200
    assert fp8_runs._decoder_layers(model) == 80
    assert fp8_runs.layout(row, 80).cp_kind == "a2a"


def test_supermicro_row_is_its_logs_median():
    """Supermicro's 72 GB300s: a log's figure from its copied block records, the row's the median of the ten."""
    row = next(r for r in _data()["llama2_70b_lora_rows"] if r["system"] == "ARS-121GL-NB3")
    # Copied from Supermicro/results/ARS-121GL-NB3/llama2_70b_lora/result_01.txt: five train_step_time records,
    # samples_count 1548 (172 steps of 9) then 387 (43 steps) each; the four after the first weigh alike.
    later = [0.17924929830228076, 0.17917329190687417, 0.1788152389070642, 0.17934932283716015]
    assert row["logs"][0].endswith("ARS-121GL-NB3/llama2_70b_lora/result_01.txt") and row["log_blocks"][0] == 5
    # By hand: 0.71658715 / 4 = 0.17914679.
    assert row["log_block_mean_step_seconds"][0] == pytest.approx(0.17914679, abs=1e-6)
    # By hand: the ten figures sorted, the 5th and 6th are 0.178964 and 0.178998: median 0.178981.
    assert sorted(row["log_block_mean_step_seconds"])[4:6] == [0.178964, 0.178998]
    assert load_script("benchmarks/mlperf_runs.py").measured_seconds(row) == pytest.approx(0.178981, abs=1e-9)
    assert sum(later) / 4 == pytest.approx(row["log_block_mean_step_seconds"][0], abs=1e-6)
    assert "assumptions" not in row and "21c5a29b" in row["matched_by"]
