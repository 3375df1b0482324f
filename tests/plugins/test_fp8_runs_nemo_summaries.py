"""NeMo 2.0's performance summaries (``nemo_rows`` of collections nemo-25.02-summary, nemo-25.04-summary and
nemo-25.07-summary; benchmarks/fp8_nemo.py): the printed rows, NeMo's FLOPs count, the recipe and options, the table
docs/precision.md shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ("nemo-25.02-summary", "nemo-25.04-summary", "nemo-25.07-summary")
URL = "https://docs.nvidia.com/nemo-framework/user-guide/latest/performance/"
PAGES = {"nemo-25.02-summary": URL + "performance_summary.html", "nemo-25.04-summary": URL + "performance_summary.html",
         "nemo-25.07-summary": URL + "performance-summary.html"}
# The rows whose FSDP cell is 1 (Megatron-FSDP), and those the container's scripts run with CUDA graphs.
FSDP = ("nemo25.04-summary-gb200-llama3-70b-fp8", "nemo25.07-summary-gb200-llama3-70b-fp8", "nemo25.07-summary-gb200-llama3-405b-fp8")
GRAPHS = ("nemo25.02-summary-b200-nemotron4-15b-fp8", "nemo25.04-summary-gb200-gpt3-175b-fp8", "nemo25.04-summary-gb200-llama3-8b-fp8",
          "nemo25.04-summary-gb200-nemotron4-15b-fp8", "nemo25.04-summary-gb200-nemotron4-340b-fp8", "nemo25.07-summary-gb200-llama3-8b-fp8")


def _nemo():
    return load_script("benchmarks/fp8_nemo.py")


def _data() -> dict:
    return json.loads((ROOT / "tests" / "plugins" / "data" / "fp8_measured_runs.json").read_text(encoding="utf-8"))


def _rows() -> dict:
    return {r["id"]: r for r in _data()["nemo_rows"] if r["collection"] in COLLECTIONS}


def _first(cell: str) -> int:
    """A cell's figure outside the parentheses (the 25.07 page prints "4066 (2605)")."""
    return int(cell.split(" (")[0])


def test_rows_are_their_printed_rows_with_provenance():
    data = _data()
    rows = _rows()
    assert [sum(r["collection"] == c for r in rows.values()) for c in COLLECTIONS] == [7, 6, 3]
    assert sorted((r["collection"], r["hardware"]) for r in rows.values()).count(("nemo-25.02-summary", "b200")) == 6
    for row in rows.values():
        assert row["split"] == "held_out" and row["url"] == PAGES[row["collection"]], row["id"]
        for key in ("source", "recipe_source", "runtime_options_source", "flops_source"):
            assert row[key] in data["sources"], (row["id"], key)
        assert row["assumptions"] and row["not_priced"]
        cells = [c.strip() for c in row["row"].strip().strip("|").split("|")]
        # 25.02: Model, #-GPUs, GBS, MBS, Sequence Length, TP, PP, CP, VP, EP, GA, Tokens / sec / GPU, Model TFLOP / sec / GPU;
        # from 25.04 an FSDP column after Sequence Length.
        if row["collection"] == "nemo-25.02-summary":
            cells.insert(5, "0")
        name, numbers = cells[0], [_first(c) for c in cells[1:]]
        gpus, gbs, mbs, seq, fsdp, tp, pp, cp, vp, ep, ga, tokens, tflops = numbers
        assert [gpus, gbs, mbs, seq, tp, pp, cp, vp, ep, tokens, tflops] == [
            row[k] for k in ("gpus", "global_batch_size", "micro_batch_size", "seq_len", "tp", "pp", "cp", "vpp", "ep",
                             "tokens_per_second_per_gpu", "model_tflops_per_gpu")], row["id"]
        assert (fsdp == 1) == (row.get("zero") == 3) == (row["id"] in FSDP)
        assert gbs == gpus // (tp * pp * cp) * mbs * ga, row["id"]  # the printed GA is the layout's
        assert name.lower().replace("3.1", "3").replace("nemotron-", "nemotron-4-") == row["model"], row["id"]
    # Every left-out row says why: the 25.07 figures in parentheses, the tables not reached, 24.09 / 24.12, the MoE rows.
    skipped = data["nemo_rows_skipped"][4:]
    assert len(skipped) == 4 and all(s["why"] for s in skipped) and "31737 (30341)" in skipped[0]["row"]


def test_nemo_flops_count_gives_the_printed_tflops(registry):
    """NeMo's count with the model's shape turns the printed tokens/s/GPU into the printed TFLOP/s/GPU within 1, but
    for LLAMA3-405B in 25.02 and 25.04, where it comes 1.0% below the printed figure."""
    nemo = _nemo()
    runs = load_script("benchmarks/fp8_runs.py")
    for row in _rows().values():
        counted = row["tokens_per_second_per_gpu"] * nemo.nemo_model_flops(row) / (row["global_batch_size"] * row["seq_len"]) / 1e12
        if row["id"] in ("nemo25.02-summary-b200-llama3-405b-fp8", "nemo25.04-summary-gb200-llama3-405b-fp8"):
            assert counted / row["model_tflops_per_gpu"] == pytest.approx(0.990, abs=0.001), row["id"]
        else:
            assert abs(counted - row["model_tflops_per_gpu"]) < 1.0, row["id"]
        # nemo_flops states the model hp prices.
        model = runs.row_model(row, registry)
        body = [g for g in model.layers if g.kind == "dense"]
        config, flops = body[0].config, row["nemo_flops"]
        assert [sum(g.count for g in body), config.hidden_size, config.intermediate_size, config.num_attention_heads,
                config.num_key_value_heads] == [flops[k] for k in ("layers", "hs", "ffn_hs", "attention_heads", "query_groups")]


def test_measured_seconds_and_flops_by_hand():
    nemo = _nemo()
    rows = _rows()
    # GBS x sequence / (tokens/s/GPU x GPUs): 128 x 8,192 / (26,006 x 8) = 5.0401 s (Llama 3 8B, B200, 25.02).
    eight = rows["nemo25.02-summary-b200-llama3-8b-fp8"]
    assert nemo.nemo_measured_seconds(eight) == pytest.approx(5.0401, abs=5e-5)
    # NeMo's llama3 count a token: 32 x 4096^2 x (12 + 12 x 8 / 32 + 18 x 14336 / 4096 + 12 x 8192 / 4096 + 6 x 128256 / (32 x 4096))
    # = 32 x 4096^2 x 107.8711 = 5.7912e10 FLOPs; x 26,006 tokens/s = 1,506.1 TFLOP/s (printed 1506).
    per_token = 32 * 4096**2 * (12 + 3 + 63 + 24 + 6 * 128256 / (32 * 4096))
    assert nemo.nemo_model_flops(eight) == pytest.approx(128 * 8192 * per_token, rel=1e-12)
    assert 26006 * per_token / 1e12 == pytest.approx(1506.1, abs=0.05)
    # 64 GPUs, 128 x 8,192 / (4,035 x 64) = 4.0605 s (Llama 3 70B, Megatron-FSDP, GB200, 25.04).
    assert nemo.nemo_measured_seconds(rows["nemo25.04-summary-gb200-llama3-70b-fp8"]) == pytest.approx(4.0605, abs=5e-5)
    # 64 x 8,192 / (706 x 128) = 5.8017 s (Llama 3.1 405B, TP 2, Megatron-FSDP, GB200, 25.07).
    assert nemo.nemo_measured_seconds(rows["nemo25.07-summary-gb200-llama3-405b-fp8"]) == pytest.approx(5.8017, abs=5e-5)
    # GPT-3 175B on 512 H100s (25.02): 2,048 x 2,048 / (866 x 512) = 9.4596 s; NeMo's gpt3 count (24 B s h^2 + 4 B s^2 h) x 3 L
    # + 6 B s h V = 4.5146e18 FLOPs, / 9.4596 s / 512 = 932.1 TFLOP/s a GPU (printed 932).
    gpt = rows["nemo25.02-summary-h100-sxm-gpt3-175b-fp8"]
    assert nemo.nemo_measured_seconds(gpt) == pytest.approx(9.4596, abs=5e-5)
    flops = (24 * 2048 * 2048 * 12288**2 + 4 * 2048 * 2048**2 * 12288) * 288 + 6 * 2048 * 2048 * 12288 * 51200
    assert nemo.nemo_model_flops(gpt) == flops and flops / 9.4596 / 512 / 1e12 == pytest.approx(932.1, abs=0.1)
    # Nemotron-15B on 64 B200s: 256 x 4,096 / (14,760 x 64) = 1.1100 s; NeMo's nemotron count (an ungated MLP, 12 f / h,
    # vocabulary 256,000): 32 x 6144^2 x (12 + 2 + 48 + 8 + 6 x 256000 / (32 x 6144)) a token, x 14,760 = 1,387.4 (printed 1387).
    fifteen = rows["nemo25.02-summary-b200-nemotron4-15b-fp8"]
    assert nemo.nemo_measured_seconds(fifteen) == pytest.approx(1.1100, abs=5e-5)
    assert 14760 * 32 * 6144**2 * (12 + 2 + 48 + 8 + 6 * 256000 / (32 * 6144)) / 1e12 == pytest.approx(1387.4, abs=0.05)


def test_recipe_and_options_follow_each_container_s_scripts(registry):
    runs = load_script("benchmarks/fp8_runs.py")
    rows = _rows()
    for row in rows.values():
        # 25.02 (v2.2.0): bf16_with_fp8_mixed, delayed scaling with FP8 parameters; 25.04 and 25.07 (v2.3.0, v2.4.0): the page's
        # per-tensor current scaling, bf16_with_fp8_current_scaling_mixed, FP8 parameters but under v2.3.0's Megatron-FSDP.
        expected = {"nemo-25.02-summary": "fp8-delayed-param-gather", "nemo-25.04-summary": "fp8-megatron-param-gather",
                    "nemo-25.07-summary": "fp8-megatron-param-gather"}[row["collection"]]
        if row["id"] == "nemo25.04-summary-gb200-llama3-70b-fp8":
            expected = "fp8-current"
        assert row["recipe"] == expected, row["id"]
        options = row["runtime_options"]
        assert options["overlap_grad_reduce"] is options["overlap_param_gather"] is True and options["grad_reduce_in_fp32"] is False
        assert options.get("tp_comm_overlap", False) == (row["tp"] > 1), row["id"]
        assert options.get("overlap_p2p_communication", False) == (row["pp"] > 1 and row["vpp"] > 1), row["id"]
        assert (options.get("cuda_graphs") == "layers") == (row["id"] in GRAPHS), row["id"]
        # The FSDP rows reach hp's layout as ZeRO-3; the others keep the runtime's distributed optimizer.
        model = runs.row_model(row, registry)
        assert runs.layout(row, runs._decoder_layers(model)).zero == (3 if row["id"] in FSDP else None), row["id"]
    # The three recipes' scaling and parameter gather: current scaling (tensorwise) gathered in FP8, delayed gathered in FP8,
    # current gathered in bf16.
    recipes = {name: registry.precision_recipe(name) for name in ("fp8-delayed-param-gather", "fp8-megatron-param-gather", "fp8-current")}
    assert recipes["fp8-megatron-param-gather"].param_gather == recipes["fp8-delayed-param-gather"].param_gather == "stored"
    assert recipes["fp8-current"].param_gather != "stored"
    assert [recipes[n].gradients.scaling for n in recipes] == ["tensor_delayed", "tensor_current", "tensor_current"]


def test_precision_page_table_is_current_and_its_prose_states_its_figures(registry):
    nemo = _nemo()
    runs = load_script("benchmarks/fp8_runs.py")
    found = nemo.nemo_results(registry)
    section = nemo.nemo_summary_section(found)
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    assert section in page, "regenerate with: python benchmarks/fp8_runs.py"
    prose = " ".join(" ".join(line for line in page.splitlines() if not line.startswith("|")).split())
    chosen = [r for r in found if r["collection"] in COLLECTIONS]
    ran = [r["as_run_error"] for r in chosen]
    base = [r["error"] for r in chosen]
    assert (f"As run, {sum(abs(e) <= 0.10 for e in ran)} of the {len(ran)} rows are within 10%, mean absolute error "
            f"{sum(map(abs, ran)) / len(ran):.1%} (with the defaults {sum(map(abs, base)) / len(base):.1%})") in prose
    fsdp = [r for r in chosen if r["id"] in FSDP]
    assert (f"+{min(r['error'] for r in fsdp):.1%} to +{max(r['error'] for r in fsdp):.1%}: without the prefetch" in prose
            and f"they come to {min(r['as_run_error'] for r in fsdp):+.1%} to {max(r['as_run_error'] for r in fsdp):+.1%}" in prose)
    gpt = [r["as_run_error"] for r in chosen if r["layout"]["model"] == "gpt3-175b"]
    assert sorted(gpt)[1] > 0 and abs(min(gpt)) < 0.005 and f"{min(gpt):+.1%} to {max(gpt):+.1%} as run" in prose
    by_id = {r["id"]: r for r in chosen}
    b200, gb200 = by_id["nemo25.02-summary-b200-llama3-8b-fp8"], by_id["nemo25.04-summary-gb200-llama3-8b-fp8"]
    assert (f"({b200['as_run_seconds']:.3f} and {gb200['as_run_seconds']:.3f} s as run) where the pages measure "
            f"{b200['measured_seconds']:.3f} s (25.02) and {gb200['measured_seconds']:.3f} s (25.04), {b200['as_run_error']:+.1%} and "
            f"{gb200['as_run_error']:+.1%}") in prose
    rows = _rows()
    fifteen = rows["nemo25.02-summary-b200-nemotron4-15b-fp8"]
    priced = runs.price(fifteen, registry, as_run=True)
    assert (f"hp's compute alone is {priced.breakdown_seconds['compute']:.3f} s against a measured "
            f"{by_id[fifteen['id']]['measured_seconds']:.3f} s ({by_id[fifteen['id']]['as_run_error']:+.1%} as run), its 25.04 GB200 twin "
            f"{by_id['nemo25.04-summary-gb200-nemotron4-15b-fp8']['as_run_error']:+.1%}") in prose
    # The CUDA graphs move none of hp's figures on these rows.
    for key in GRAPHS:
        row = rows[key]
        without = dict(row, runtime_options={k: v for k, v in row["runtime_options"].items() if k != "cuda_graphs"})
        assert runs.price(without, registry, as_run=True).step_seconds == by_id[key]["as_run_seconds"], key
    assert "16 rows in three collections" in prose and "25.02 on DGX-B200 (6 rows)" in prose
