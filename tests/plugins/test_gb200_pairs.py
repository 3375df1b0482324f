"""docs/precision.md, "Why the GB200 rows are priced slow": the GB200 / B200 pairs and the Qwen3-235B-A22B floor
experiment, as the page states them, recomputed from the rows of tests/plugins/data/fp8_measured_runs.json."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scripts():
    return load_script("benchmarks/fp8_runs.py"), load_script("benchmarks/fp8_dgxc.py")


@pytest.fixture(scope="module")
def data() -> dict:
    return json.loads((ROOT / "tests" / "plugins" / "data" / "fp8_measured_runs.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def section() -> str:
    """The page's "what was examined" section as one line (a figure is found across a line break)."""
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    start = page.index("#### Why the GB200 rows are priced slow: what was examined")
    end = page.index("\n### ", start)
    return " ".join(page[start:end].split())


@pytest.fixture(scope="module")
def reg():
    from hp_core import api

    return api.build_registry(use_env=False)


def test_the_8b_pair_ran_one_config_and_the_page_states_its_ratios(scripts, data, section, reg):
    runs, _ = scripts
    rows = {r["id"]: r for r in data["rows"]}
    for recipe, measured_ratio, hp_ratio, b200_error, gb200_error in (("fp8cs", "1.029", "1.051", "+5.3%", "+3.0%"),
                                                                      ("mxfp8", "1.009", "1.052", "+2.8%", "-1.4%")):
        b200, gb200 = rows[f"mb25.11-b200-llama3-8b-{recipe}"], rows[f"mb25.11-gb200-llama3-8b-{recipe}"]
        # One layout and batch on both (v0.2.0's LLAMA3_8B_{B200,GB200}_FP8_CS_BASE_CONFIG are the same replace()).
        for key in ("model", "recipe", "gpus", "global_batch_size", "micro_batch_size", "seq_len", "tp", "pp", "cp", "vpp"):
            assert b200[key] == gb200[key], key
        # Throughput ratio from the rows' tokens/s a GPU: 31,508 / 30,624 = 1.0289 (FP8-CS), 29,789 / 29,520 = 1.0091.
        assert f"{gb200['tokens_per_second_per_gpu'] / b200['tokens_per_second_per_gpu']:.3f}" == measured_ratio
        priced = {r["id"]: runs.price(r, reg, as_run=True).step_seconds for r in (b200, gb200)}
        assert f"{priced[b200['id']] / priced[gb200['id']]:.3f}" == hp_ratio
        assert f"{priced[b200['id']] / runs.measured_seconds(b200) - 1:+.1%}" == b200_error
        assert f"{priced[gb200['id']] / runs.measured_seconds(gb200) - 1:+.1%}" == gb200_error
    assert ("the GB200 measured 1.029 (FP8-CS) and 1.009 (MXFP8) times the B200's throughput, where hp prices 1.051 and "
            "1.052 times (1.093 and 1.094, the peaks' 1.111") in section
    assert f"{2500 / 2250:.3f}" == "1.111"  # the gb200 and b200 presets' bf16 peaks
    assert "(the two 8B B200 rows +5.3% and +2.8% as run, their GB200 twins +3.0% and -1.4%;" in section
    # 1.051 / 1.029 = 1.021 and 1.052 / 1.009 = 1.043: "2% to 4%".
    assert "puts the GB200 2% to 4% further ahead of the B200" in section


def test_the_405b_pair_across_containers(scripts, data, section, reg):
    runs, dgxc = scripts
    b200 = next(r for r in data["rows"] if r["id"] == "mb25.11-b200-llama31-405b-fp8cs")
    gb200 = next(r for r in data["dgxc_rows"] if r["id"] == "dgxc25.04.01-gb200-llama3.1-405b-fp8-128g")
    for key in ("gpus", "global_batch_size", "micro_batch_size", "seq_len", "tp", "pp", "cp", "vpp"):
        assert b200[key] == gb200[key], key
    measured_b200 = runs.measured_seconds(b200)  # 64 x 8,192 / (661 tokens/s x 128) = 6.197 s
    assert (f"{gb200['step_seconds']:.3f}", f"{measured_b200:.3f}") == ("6.131", "6.197")
    ratio = runs.price(b200, reg, as_run=True).step_seconds / dgxc.price(gb200, reg).step_seconds
    assert f"{measured_b200 / gb200['step_seconds']:.3f}" == "1.011" and f"{ratio:.3f}" == "1.091"
    assert "in 6.131 s and 6.197 s, 1.011 times, where hp prices 1.091 times" in section


def test_the_twins_bullet_states_today_s_errors(scripts, data, section, reg):
    runs, _ = scripts
    rows = {r["id"]: r for r in data["rows"]}
    err = {i: runs.price(rows[i], reg, as_run=True).step_seconds / runs.measured_seconds(rows[i]) - 1
           for i in ("mb25.11-b200-llama31-405b-fp8cs", "mb26.02-gb200-llama31-405b-fp8", "mb26.04.01-gb200-llama31-405b-fp8")}
    assert (f"on 128 B200s (25.11) reads {err['mb25.11-b200-llama31-405b-fp8cs']:+.1%} as run, its 26.02 GB200 row "
            f"{err['mb26.02-gb200-llama31-405b-fp8']:+.1%}") in section
    assert (f"({err['mb26.02-gb200-llama31-405b-fp8']:+.1%} at 26.02 to {err['mb26.04.01-gb200-llama31-405b-fp8']:+.1%} "
            "at 26.04.01") in section
    moe = {r["id"]: r for r in data["moe_rows"]}
    b, g = moe["mb26.02-b200-deepseek-v3-mxfp8"], moe["mb26.02-gb200-deepseek-v3-mxfp8"]
    priced_b, priced_g = runs.price_moe(b, reg).step_seconds, runs.price_moe(g, reg).step_seconds
    mb, mg = runs.measured_seconds(b), runs.measured_seconds(g)
    assert (f"the GB200 {mb / mg:.2f} times the B200, where hp prices {priced_b / priced_g:.2f} times (B200 "
            f"{priced_b / mb - 1:+.1%}, GB200 {priced_g / mg - 1:+.1%})") in section


def test_qwen3_235b_floor_experiment(scripts, data, section, reg):
    runs, _ = scripts
    moe = {r["id"]: r for r in data["moe_rows"]}
    megatron = reg.runtime("megatron")
    # The router's kernels off the floor: what Transformer Engine's moe_router graph scope takes off the host.
    unrouted = attrs.evolve(megatron, timing=attrs.evolve(megatron.timing,
                                                          host=attrs.evolve(megatron.timing.host, router_kernels=(0, 0))))
    assert megatron.timing.host.router_kernels == (53, 26)
    q235 = [moe[f"mb{c}-gb200-qwen3-235b-a22b-mxfp8"] for c in ("26.02", "26.02.01", "26.04", "26.04.01")]
    as_priced = [runs.price_moe(r, reg).step_seconds / runs.measured_seconds(r) - 1 for r in q235]
    lifted = [runs.price_moe(r, reg, base_runtime=unrouted).step_seconds / runs.measured_seconds(r) - 1 for r in q235]
    assert f"are {min(as_priced):+.1%} to {max(as_priced):+.1%}; the B200 twin" in section
    assert f"moves the four rows to {min(lifted):+.1%} to {max(lifted):+.1%}, and no other GB200 row" in section
    for row in data["moe_rows"]:
        if row["hardware"] == "gb200" and row["model"] != "qwen3-235b-a22b":
            assert runs.price_moe(row, reg, base_runtime=unrouted).step_seconds == runs.price_moe(row, reg).step_seconds
    # The 26.02 GB200 row against its B200 twin, and hp's step broken down.
    g, b = moe["mb26.02-gb200-qwen3-235b-a22b-mxfp8"], moe["mb26.02-b200-qwen3-235b-a22b-mxfp8"]
    assert (g["ep"], b["ep"], 128 // g["ep"], 128 // b["ep"]) == (32, 8, 4, 16)  # 128 experts: 4 and 16 local
    priced_g, priced_b = runs.price_moe(g, reg), runs.price_moe(b, reg)
    mg, mb = runs.measured_seconds(g), runs.measured_seconds(b)
    assert f"the B200 twin of 26.02 (PP 8, EP 8 over NCCL, 16 local experts, no graphs) is {priced_b.step_seconds / mb - 1:+.1%}" \
        in section
    assert (f"The GB200 ran {mb / mg:.3f} times the B200's throughput, hp prices "
            f"{priced_b.step_seconds / priced_g.step_seconds:.3f} times") in section
    graphed = runs.price_moe(dict(g, runtime_options=dict(g["runtime_options"], cuda_graphs="full_iteration")), reg)
    floor = priced_g.compute_seconds - graphed.compute_seconds
    assert (f"({priced_g.step_seconds:.3f} s against {mg:.3f} s) is {priced_g.compute_seconds:.3f} s of compute, of which "
            f"{floor:.3f} s is the host floor of the forward") in section
    assert (f"{priced_g.communication_seconds:.3f} s of exposed communication, nearly all the HybridEP all-to-all, and "
            f"{priced_g.bubble_seconds:.3f} s of bubble") in section
    # The B200 Qwen3-30B-A3B rows at micro-batch 1 graph the router too (cuda_graph_scope moe_router, moe_preprocess).
    q30 = [moe[f"mb{c}-b200-qwen3-30b-a3b-mxfp8"] for c in ("25.11", "26.02")]
    assert all(r["micro_batch_size"] == 1 and 128 // r["ep"] == 16 for r in q30)
    before = [runs.price_moe(r, reg).step_seconds / runs.measured_seconds(r) - 1 for r in q30]
    after = [runs.price_moe(r, reg, base_runtime=unrouted).step_seconds / runs.measured_seconds(r) - 1 for r in q30]
    assert (f"from {before[0]:+.1%} and {before[1]:+.1%} to {after[0]:+.1%} and {after[1]:+.1%}. Those rows hold 16 local "
            "experts a rank") in section


def test_what_remains_states_the_ranges(scripts, data, section, reg):
    runs, dgxc = scripts
    moe = runs.moe_results(reg)
    dsv3 = [r["error"] for r in moe if r["class"] == "Megatron-Core MoE, GB200" and r["layout"]["model"] == "deepseek-v3"]
    q235 = [r["error"] for r in moe if r["class"] == "Megatron-Core MoE, GB200" and r["layout"]["model"] == "qwen3-235b-a22b"]
    grok = [r["error"] for r in dgxc.results(reg) if r["hardware"] == dgxc.GB200 and "grok" in r["id"]]
    dense = [r["as_run_error"] for r in runs.results(reg) if r["hardware"] == "gb200"]
    assert (f"hp prices the GB200 MoE rows {min(dsv3):+.1%} to {max(dsv3):+.1%} (DeepSeek-V3), {min(q235):+.1%} to "
            f"{max(q235):+.1%} (Qwen3-235B-A22B;") in section
    assert f"and {min(grok):+.1%} to {max(grok):+.1%} (Grok-1's FP8)" in section
    assert f"Megatron-Bridge's dense GB200 rows {min(dense):+.1%} to {max(dense):+.1%} as run" in section
    fp8 = [r["as_run_error"] for r in runs.results(reg) if r["hardware"] == "gb200" and r["recipe"] != "nvfp4"]
    assert f"(its FP8-CS and MXFP8 rows {min(fp8):+.1%} to {max(fp8):+.1%};" in section
    nvfp4 = [r["as_run_error"] for r in runs.results(reg) if r["hardware"] == "gb200" and r["recipe"] == "nvfp4"]
    assert max(map(abs, fp8)) <= 0.10 and "FP8-CS and MXFP8 rows are now within 10% as run" in section
    assert f"(the NVFP4 rows added since, {sum(abs(e) <= 0.10 for e in nvfp4)} of {len(nvfp4)}:" in section
