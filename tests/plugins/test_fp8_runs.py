"""docs/precision.md's table of measured FP8 runs is what ``benchmarks/fp8_runs.py`` prints today, and its data file is complete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hp_plugins.importers.megatron_options import parse_layout
from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[2]


def _module():
    return load_script("benchmarks/fp8_runs.py")


def _data() -> dict:
    return json.loads((ROOT / "tests" / "plugins" / "data" / "fp8_measured_runs.json").read_text(encoding="utf-8"))


def _page() -> str:
    return (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")


def _current(section: str) -> str:
    """docs/precision.md, checked to hold *section* (a table as ``benchmarks/fp8_runs.py`` prints it today)."""
    page = _page()
    assert section in page, "regenerate with: python benchmarks/fp8_runs.py"
    return page


def test_every_run_states_its_layout_and_provenance():
    data = _data()
    for row in data["rows"]:
        if "runtime_options" in row:
            assert row["runtime_options_source"] in data["sources"], row["id"]
        assert row["source"] in data["sources"], row["id"]
        assert row["split"] == "held_out", row["id"]  # nothing is fitted to these runs
        assert row["gpus"] % (row["tp"] * row["pp"] * row["cp"]) == 0, row["id"]
        for key in ("model", "hardware", "recipe", "global_batch_size", "micro_batch_size", "seq_len", "tokens_per_second_per_gpu"):
            assert key in row, (row["id"], key)


def _prose(page: str) -> str:
    """The page's prose (its tables taken out) as one line, so a figure is found across a line break."""
    return " ".join(" ".join(line for line in page.splitlines() if not line.startswith("|")).split())


def test_precision_page_table_is_current():
    runs = _module()
    found = runs.results()
    page = _current(runs.section(found))
    for r in found:
        assert (r["as_run_seconds"] is None) == r["id"].startswith("nemo"), r["id"]  # only NeMo 24.07 states no overlaps


def test_precision_page_prose_states_the_table_s_figures():
    """Pins of the page's prose to today's figures (the table itself is checked exactly above): each range or
    bound the prose states is the rounded extreme of the rows it names, so a change that moves them fails here
    until the prose is rewritten."""
    # The GB200 rows: their own test below; the GB300 rows: tests/plugins/test_fp8_runs_gb300.py.
    found = [r for r in _module().results() if r["hardware"] not in ("gb200", "gb300")]
    prose = _prose(_page())
    speedups = [round(r["bf16_seconds"] / r["estimated_seconds"], 2) for r in found]
    assert f"is {min(speedups):.2f}-{max(speedups):.2f} (above 1.5 on three rows," in prose
    assert sum(s > 1.5 for s in speedups) == 3
    h100 = [r for r in found if r["id"].startswith("mb") and r["hardware"] == "h100-sxm"]
    b200 = [r for r in found if r["hardware"] == "b200"]
    nemo70 = next(r for r in found if r["id"] == "nemo24.07-h100-llama3-70b-fp8")
    assert (f"H100 rows of Megatron-Bridge within {max(abs(r['error']) for r in h100):.1%} and NeMo 24.07's "
            f"Llama-3-70B row within {abs(nemo70['error']):.1%}") in prose
    h100_as_run = [r["as_run_error"] for r in h100]
    slow = [r["as_run_error"] for r in b200]
    assert (f"same H100 rows come out {min(h100_as_run):+.1%} to {max(h100_as_run):+.1%} and the B200 rows "
            f"{min(slow):+.1%} to {max(slow):+.1%}") in prose
    assert all(r["as_run_seconds"] < r["estimated_seconds"] for r in b200 + h100)  # "hide": overlaps only lower a step


def test_gb200_rows_state_their_release_config_and_the_page_states_their_figures():
    """The DGX-GB200 Llama rows: each the exact summary row of the archive line it names, the layout its V2 config
    sets, held out; the page's GB200 bullet pinned to today's figures. The NVFP4 rows (added later) have their own
    test below."""
    data = _data()
    # The 70B FP8 rows of Megatron-FSDP with CPU offloading have their own test (tests/plugins/test_fp8_runs_fsdp_offload.py).
    rows = [r for r in data["rows"] if r["hardware"] == "gb200" and "cpu_offloading_num_layers" not in r]
    assert len(rows) == 24 and all(r["split"] == "held_out" and r["source"] in data["sources"] for r in rows)
    tflops = []  # each FP8-CS and MXFP8 row's reported model TFLOP/s per GPU
    for row in rows:
        head, table = row["row"].split(": ", 1)
        cells = [c.strip() for c in table.strip("|").split("|")]
        if row["id"].startswith("mb25.11-"):
            # 25.11's per-system table: Model, #-GPUs, Precision, GBS, MBS, Sequence Length, FSDP, TP, PP, CP, VP, EP, GA,
            # tokens/s/GPU, TFLOP/s/GPU; FP8-CS with the FP8-MX figure in parentheses.
            assert "DGX-GB200" in head and cells[0] == "LLAMA3_8B" and len(cells) == 15 and cells[2] == "FP8-CS (FP8-MX)"
            cs, mx = (int(c) for c in cells[13].replace("(", "").replace(")", "").split())
            tokens = mx if row["recipe"] == "mxfp8-param-gather" else cs
            assert row["runtime_options"]["cuda_graphs"] == "full_iteration", row["id"]
            cells = cells[:12] + cells[13:]
        else:
            # System, #-GPUs, Precision, GBS, MBS, Sequence Length, FSDP, TP, PP, CP, VP, EP, tokens/s/GPU, TFLOP/s/GPU;
            # 26.06's section states no FSDP column.
            assert len(cells) == (13 if row["id"].startswith("mb26.06-") else 14), row["id"]
            assert cells[0] == "DGX-GB200" and cells[2] == {"mxfp8-param-gather": "MXFP8", "fp8-megatron-param-gather": "FP8",
                                                             "nvfp4": "NVFP4"}[row["recipe"]]
            tokens = int(cells[-2])
        assert int(cells[1]) == row["gpus"] and int(cells[3]) == row["global_batch_size"]
        assert int(cells[4]) == row["micro_batch_size"] and int(cells[5]) == row["seq_len"]
        assert len(cells) == 13 or cells[6] == "0", row["id"]
        layout = [1 if c == "n/a" else int(c) for c in cells[-7:-3]]
        assert layout == [row["tp"], row["pp"], row["cp"], row["vpp"]], row["id"]
        assert tokens == row["tokens_per_second_per_gpu"], row["id"]
        if row["recipe"] != "nvfp4":
            tflops.append(int(cells[-1].split()[1].strip("()")) if row["recipe"] == "mxfp8-param-gather" and "(" in cells[-1] else int(cells[-1].split()[0]))
        assert row["config"].split(" ")[0] in data["sources"][row["source"]] and row["not_priced"]
    by_id = {r["id"]: r for r in rows}
    # GBS * seq / (tokens/s/GPU * GPUs): 1,536 x 8,192 / (864 x 256) = 56.889 s.
    assert _module().measured_seconds(by_id["mb26.04.01-gb200-llama31-405b-fp8"]) == pytest.approx(56.889, abs=5e-4)
    # 26.06: 1,536 x 8,192 / (843 x 256) = 58.306 s and / (783 x 256) = 62.774 s.
    assert _module().measured_seconds(by_id["mb26.06-gb200-llama31-405b-fp8"]) == pytest.approx(58.306, abs=5e-4)
    assert _module().measured_seconds(by_id["mb26.06-gb200-llama31-405b-mxfp8"]) == pytest.approx(62.774, abs=5e-4)
    # 25.11's 8B: 128 x 8,192 / (31,508 x 8) = 4.160 s and / (29,789 x 8) = 4.400 s.
    assert _module().measured_seconds(by_id["mb25.11-gb200-llama3-8b-fp8cs"]) == pytest.approx(4.160, abs=5e-4)
    assert _module().measured_seconds(by_id["mb25.11-gb200-llama3-8b-mxfp8"]) == pytest.approx(4.400, abs=5e-4)
    assert by_id["mb26.06-gb200-llama31-405b-fp8"]["config"].endswith(" at v0.5.0")
    assert not any(s["row"].startswith("26.06 NeMo Container, LLAMA3.1_405B") for s in data["rows_skipped_gb200"])
    page = _prose(_page())
    assert (f"the rows report {min(tflops):,}-{max(tflops):,} model TFLOP/s per GPU, {100 * min(tflops) / 2500:.0f}-{100 * max(tflops) / 2500:.0f}% "
            "of the 2,500 TFLOP/s bf16 dense peak") in page
    # 25.11's 8B rows state their full-iteration CUDA graphs; the floor does not bind, so the option moves nothing.
    from hp_core import api

    registry = api.build_registry()
    eight = [by_id[f"mb25.11-gb200-llama3-8b-{r}"] for r in ("fp8cs", "mxfp8")]
    graphed = [_module().price(r, registry, as_run=True).step_seconds for r in eight]
    eager = [_module().price(dict(r, runtime_options={k: v for k, v in r["runtime_options"].items() if k != "cuda_graphs"}),
                             registry, as_run=True).step_seconds for r in eight]
    assert graphed == pytest.approx(eager, rel=1e-9)
    assert f"state it from their config ({graphed[0]:.3f} s and {graphed[1]:.3f} s as run either way)" in \
        " ".join((ROOT / "docs" / "time.md").read_text(encoding="utf-8").split())
    # 9 since the 26.06 to 26.08 GB200 Qwen3 rows moved to moe_fi_rows (tests/plugins/test_fp8_runs_moe_fi.py); 11 with
    # 26.08's Nemotron_3_Ultra and DeepSeekV4 Flash rows (tests/plugins/test_fp8_runs_2608_skipped.py); 10 since the 70B
    # FP8 rows of 26.02 to 26.04.01 (Megatron-FSDP, CPU offloading) joined rows.
    assert len(data["rows_skipped_gb200"]) == 10 and all(r["why"] for r in data["rows_skipped_gb200"])
    kept = {r["id"] for r in rows}
    found = [r for r in _module().results() if r["id"] in kept]
    ran = [r["as_run_error"] for r in found]
    prose = _prose(_page())
    assert f"**GB200 (as run {min(ran):+.1%} to {max(ran):+.1%}, {len(found)} rows, held out).**" in prose
    assert all(r["as_run_seconds"] < r["estimated_seconds"] for r in found)
    new = {r["id"]: r["as_run_error"] for r in found if r["id"].startswith(("mb26.06-", "mb25.11-"))}
    assert (f"held out like the rest: {new['mb26.06-gb200-llama31-405b-fp8']:+.1%} and "
            f"{new['mb26.06-gb200-llama31-405b-mxfp8']:+.1%} as run") in prose
    # The class as it grew: 12 rows, then 16 with 26.06's and 25.11's FP8-CS and MXFP8 rows, then 24 with the NVFP4 rows.
    sixteen = [r for r in found if r["recipe"] != "nvfp4"]
    before = [r for r in sixteen if not r["id"].startswith(("mb26.06-", "mb25.11-"))]
    mae = lambda rows, key: sum(abs(r[key]) for r in rows) / len(rows)  # noqa: E731
    assert len(before) == 12 and len(sixteen) == 16 and len(found) == 24
    assert (f"the class moved from {len(before)} rows, defaults {mae(before, 'error'):.1%}, as run {mae(before, 'as_run_error'):.1%} "
            f"mean absolute error, to {len(sixteen)} rows, {mae(sixteen, 'error'):.1%} and {mae(sixteen, 'as_run_error'):.1%}; "
            f"with the eight NVFP4 rows below, to {len(found)} rows, {mae(found, 'error'):.1%} and {mae(found, 'as_run_error'):.1%})") in prose
    assert (f"held out: {new['mb25.11-gb200-llama3-8b-fp8cs']:+.1%} and {new['mb25.11-gb200-llama3-8b-mxfp8']:+.1%} as run; "
            f"with those four the class moved") in prose
    fp8 = [r["as_run_error"] for r in found if "405b-fp8" in r["id"] and not r["id"].startswith("mb26.06-")]
    assert f"its error as run grows with the container ({min(fp8):+.1%} to {max(fp8):+.1%}), and is 58.31 s " \
           f"({new['mb26.06-gb200-llama31-405b-fp8']:+.1%}) in 26.06" in prose


def test_memory_rows_state_their_provenance_and_baselines():
    data = _data()
    ids = {row["id"]: row for row in data["memory_rows"]}
    for row in data["memory_rows"]:
        assert row["source"] in data["sources"], row["id"]
        assert row["split"] == "held_out", row["id"]
        assert row["check"] in ("absolute", "baseline", "recipe_effect"), row["id"]
        if row["check"] == "absolute":
            assert not row["compile"], row["id"]  # torch.compile is not priced: only eager rows are absolute
        if row["check"] == "recipe_effect":
            base = ids[row["baseline"]]
            assert base["recipe"] == "bf16" and base["compile"] == row["compile"], row["id"]
            assert (base["gpus"], base["local_batch_size"]) == (row["gpus"], row["local_batch_size"]), row["id"]


def test_precision_page_memory_table_is_current():
    runs = _module()
    found = runs.memory_results()
    page = _current(runs.memory_section(found))
    by_id = {r["id"]: r for r in found}
    for name in ("tt2412-8b-8gpu-float8-compile", "tt2412-8b-128gpu-float8-compile", "tt-h100-llama3-8b-tensorwise"):
        assert by_id[name]["effect"] < 1.0, name  # the float8 all-gather lowers the peak (the page's prose)


def test_precision_page_memory_prose_states_the_table_s_figures():
    """Pins of the memory section's prose to today's figures (the table is checked exactly above)."""
    found = {r["id"]: r for r in _module().memory_results()}
    prose = _prose(_page())
    tensorwise = [r for r in found.values() if r["recipe"] == "torchao-float8-tensorwise"]
    assert len(tensorwise) == 6
    assert f"within {max(abs(r['error']) for r in tensorwise):.1%} on all six rows" in prose
    rowwise = [r for k, r in found.items() if k.startswith("ao-") and not k.startswith("ao-tut-")
               and r["recipe"] == "torchao-float8-rowwise"]
    assert len(rowwise) == 3
    assert f"within {max(abs(r['error']) for r in rowwise):.1%} on torchao's three rows" in prose
    assert f"misses it by {found['tt-h100-llama3-8b-rowwise']['error']:.1%}" in prose
    # The eager bf16 rows are max reserved GiB; hp prices allocated bytes, so both sit below (docs/precision.md).
    eight, many = found["tt2412-8b-8gpu-bf16"]["error"], found["tt2412-8b-128gpu-bf16"]["error"]
    assert f"bf16, 8 and 128 GPUs ({eight:.1%}, {many:.1%})" in prose


def test_torchao_tutorial_memory_rows_state_their_logs_and_the_page_states_their_figures(registry):
    """torchao's float8 pretraining tutorial (ao-tut-*): three compiled torchtitan runs of llama3_8b.toml at 775a486 on 8
    GPUs (batch 1, seq 8192, per-op SAC), written before they were priced, held out. Each row is its last logged line as
    printed; the device is 95.0 GiB (30.89 GiB at 32.51%). hp moves neither FP8 row (rowwise keeps the bf16 input; the
    tensorwise run gathered bf16, as the toml's enable_fsdp_float8_all_gather false leaves it: gathers_as_run), so each
    estimate is the measured bf16 row's 30.89 GiB: rowwise 30.89 / 30.99 - 1 = -0.32%, tensorwise 30.89 / 30.91 - 1 =
    -0.06%. hp's recipe itself (a float8 all-gather) would price the tensorwise row at 0.9877 of bf16."""
    data = _data()
    rows = {row["id"]: row for row in data["memory_rows"] if row["id"].startswith("ao-tut-")}
    assert set(rows) == {"ao-tut-h100-llama3-8b-bf16", "ao-tut-h100-llama3-8b-rowwise", "ao-tut-h100-llama3-8b-tensorwise"}
    printed = {"bf16": ("30.89GiB(32.51%)", 6291, "step: 40"), "rowwise": ("30.99GiB(32.62%)", 7014, "step: 30"),
               "tensorwise": ("30.91GiB(32.53%)", 7637, "step: 40")}
    for name, (memory, tps, step) in printed.items():
        row = rows[f"ao-tut-h100-llama3-8b-{name}"]
        assert row["source"] == "torchao-pretraining-tutorial" and row["split"] == "held_out"
        assert (row["gpus"], row["local_batch_size"], row["compile"]) == (8, 1, True)
        assert f"memory: {memory}" in row["row"] and f"tps: {tps:,}" in row["row"] and step in row["row"]
        assert row["memory_gib"] == float(memory.split("GiB")[0]) and row["tokens_per_second_per_gpu"] == tps
    assert round(30.89 / 0.3251, 1) == 95.0  # the device's capacity from the log's percentage: the 96 GB H100
    assert rows["ao-tut-h100-llama3-8b-bf16"]["check"] == "baseline"
    assert rows["ao-tut-h100-llama3-8b-tensorwise"]["gathers_as_run"] == {"param_gather": "none"}
    assert "gathers_as_run" not in rows["ao-tut-h100-llama3-8b-rowwise"]
    assert "775a486edd173ceb9be1c9b1b30af6ca2d4b4fa0" in data["sources"]["torchao-pretraining-tutorial"]
    found = {r["id"]: r for r in _module().memory_results(registry)}
    rowwise, tensorwise = found["ao-tut-h100-llama3-8b-rowwise"], found["ao-tut-h100-llama3-8b-tensorwise"]
    assert rowwise["effect"] == 1.0 and tensorwise["effect"] == 1.0
    assert rowwise["estimated_gib"] == tensorwise["estimated_gib"] == 30.89
    assert rowwise["error"] == pytest.approx(30.89 / 30.99 - 1, rel=1e-12) and round(rowwise["error"], 4) == -0.0032
    assert tensorwise["error"] == pytest.approx(30.89 / 30.91 - 1, rel=1e-12) and round(tensorwise["error"], 4) == -0.0006
    assert tensorwise["recipe"] == "torchao-float8-tensorwise, gathers as run"
    runs = _module()
    plain = {k: v for k, v in rows["ao-tut-h100-llama3-8b-tensorwise"].items() if k != "gathers_as_run"}
    bf16 = runs._torchtitan_peak_gib(plain, "bf16", registry)
    effect = runs._torchtitan_peak_gib(plain, "torchao-float8-tensorwise", registry) / bf16
    prose = _prose(_page())
    assert (f"rowwise {rowwise['error']:.1%}, tensorwise {tensorwise['error']:.1%} (measured +0.10 and +0.02 GiB over the "
            "compiled bf16 run, hp 1.0000 on both)") in prose
    assert f"would price it at {effect:.4f} of bf16, {30.89 * effect / 30.91 - 1:.1%}" in prose
    assert f"30.89 GiB, where hp's eager figure of the layout is {bf16:.2f} GiB" in prose
    # With the loss compiled (loss_implementation compiled) and the model's elementwise chains fused, as
    # --training.compile runs them at 775a486: hp's figure of the same layout (775a486 predates 83e6941: the embedding
    # in the root unit, the last layer kept gathered).
    from hp_core.io.convert import ConfigFile, structure
    from hp_core.io.job import estimate_job, resolve_job
    from hp_plugins.importers.torchtitan import import_torchtitan

    doc = import_torchtitan({"model": {"name": "llama3", "flavor": "8B"}, "optimizer": {"name": "AdamW"},
                             "training": {"local_batch_size": 1, "seq_len": 8192},
                             "parallelism": {"data_parallel_shard_degree": -1},
                             "activation_checkpoint": {"mode": "selective", "selective_ac_option": "op"}},
                            registry, devices=8).document
    doc["runtime"].setdefault("options", {}).update(reshard_last_layer_after_forward=False, loss_implementation="compiled",
                                                    elementwise_kernels="fused", embedding_unit="root")
    job = resolve_job(structure(doc, ConfigFile, registry), registry)
    compiled = max(stage.reserved_bytes for stage in estimate_job(job, registry).stages) / 2**30
    assert f"({compiled:.2f} with the loss compiled" in prose
    assert any("ao-tut-*" in e["row"] and "95.0 GiB" in e["why"] for e in data["torchtitan_rows_left_out"])


def test_memory_sources_read_and_not_used_say_why():
    skipped = _data()["memory_sources_skipped"]
    assert len(skipped) == 9 and all(s["source"] and s["why"] for s in skipped)
    nocompile, ep_tutorial, issue = skipped[:3]
    assert "float8nocompile" in nocompile["source"] and "4 H100s" in nocompile["why"] and "no hp recipe" in nocompile["why"]
    # 48.91 GiB at 51.52% is a 94.9 GiB device: an H100's capacity, not a B200's.
    assert "48.91GiB(51.52%)" in ep_tutorial["source"] and round(48.91 / 0.5152, 1) == 94.9 and "94.9 GiB" in ep_tutorial["why"]
    assert "#4101" in issue["source"] and "no layout" in issue["why"]
    # The NVFP4 log line's bytes: 140,129,599,488 reserved, 107,693,703,168 allocated (130.51 and 100.30 GiB), from a
    # run with Megatron-Core CUDA graphs, whose memory hp does not price.
    nemo_nvfp4 = next(s for s in skipped if s["source"].startswith("vuiseng9/nemo-perf-nvfp4"))
    assert "140129599488" in nemo_nvfp4["source"] and "CUDA graphs" in nemo_nvfp4["why"]
    assert round(140_129_599_488 / 2**30, 2) == 130.51 and round(107_693_703_168 / 2**30, 2) == 100.3


def test_torchao_mxfp8_memory_rows_move_nothing_and_the_page_states_them():
    """torchao's B200 MX rows (mxfp8_cublas, mxfp8_cublas_rceil): mx_mm saves the bf16 input and weight and FSDP2
    gathers bf16, so hp's peak is its bf16 peak (effect exactly 1) and the estimate the measured bf16 row's 33.71 GiB,
    against the measured 33.88: -0.5%. Both are held out, priced through torchtitan's MX converter, and their step
    times left out with the power limit's reason."""
    data = _data()
    rows = {row["id"]: row for row in data["memory_rows"]}
    found = {r["id"]: r for r in _module().memory_results()}
    for name, recipe in (("ao-b200-llama3-8b-mxfp8-cublas", "mxfp8_cublas"),
                         ("ao-b200-llama3-8b-mxfp8-cublas-rceil", "mxfp8_cublas_rceil")):
        row = rows[name]
        assert (row["recipe"], row["mx_recipe_name"], row["baseline"], row["split"]) == (
            "torchao-mxfp8", recipe, "ao-b200-llama3-8b-bf16", "held_out")
        assert f"|  {recipe} " in row["row"] and f"| {recipe} " in row["also_printed"]
        assert found[name]["effect"] == 1.0 and found[name]["estimated_gib"] == 33.71
        assert round(found[name]["error"], 4) == round(33.71 / 33.88 - 1, 4) == -0.005
    assert "mxfp8" not in data["memory_rows_left_out"]
    assert any("torchao-mxfp8" in e["why"] and "power limit" in e["why"] for e in data["torchtitan_rows_left_out"])
    assert "-0.5% on both rows. hp moves nothing (1.0000)" in _prose(_page())


def test_torchao_moe_rows_state_their_provenance_and_the_page_table_is_current():
    """torchao's Llama4 MXFP8 rows (torchao_moe_rows): every row held out with its printed row and source; the measured
    step time is a rank's 8 x 8,192 tokens over the printed per-GPU rate (bf16: 65,536 / 49,381 = 1.3272 s); the model
    is torchtitan's 17bx16e with 2 layers (5,120 wide, 16 experts of 8,192, top-1, 202,048 entries); the MX rows'
    memory is the measured bf16 row's (hp moves nothing: effect 1); the page's table is today's and its prose pins."""
    data = _data()
    rows = data["torchao_moe_rows"]
    assert [r["recipe"] for r in rows] == ["bf16", "torchao-mxfp8", "torchao-mxfp8-experts", "torchao-mxfp8-linears-experts"]
    for row in rows:
        assert row["source"] in data["sources"] and row["split"] == "held_out" and row["hardware"] == "b200", row["id"]
        assert f"{row['measured']['tps_per_gpu']:.1f}" in row["row"] and f"{row['measured']['memory_gib']:.2f}" in row["row"]
        assert row["layout"] == {"dp": 4, "ep": 4, "seq_len": 8192, "micro_batch_size": 8, "global_batch_size": 32}
        hf = row["model"]["hf"]
        assert (hf["num_hidden_layers"], hf["hidden_size"], hf["num_local_experts"], hf["intermediate_size"],
                hf["num_experts_per_tok"], hf["vocab_size"], hf["attention_chunk_size"]) == (2, 5120, 16, 8192, 1, 202048, None)
    runs = _module()
    found = runs.torchao_moe_results()
    page = _current(runs.torchao_moe_section(found))
    by_id = {r["id"]: r for r in found}
    assert by_id["ao-moe-b200-llama4-2l-bf16"]["measured_seconds"] == pytest.approx(8 * 8192 / 49381.0, rel=1e-12)
    for row in found[1:]:
        assert row["effect"] == 1.0 and row["estimated_gib"] == 145.55, row["id"]
    linears = by_id["ao-moe-b200-llama4-2l-mxfp8-linears"]
    assert linears["measured_speedup"] == pytest.approx(52038.0 / 49381.0)
    prose = _prose(page)
    assert (f"the linears' speedup hp prices within {linears['estimated_speedup'] / linears['measured_speedup'] - 1:.1%} "
            f"({linears['estimated_speedup']:.3f} against {linears['measured_speedup']:.3f}") in prose
    bf16 = by_id["ao-moe-b200-llama4-2l-bf16"]
    assert f"The bf16 row is where hp misses**: {bf16['error']:+.1%} in step time, {bf16['memory_error']:+.1%} in memory" in prose
    assert len(data["torchao_moe_rows_left_out"]) == 1 and "512" in data["torchao_moe_rows_left_out"][0]["row"]


def test_torchao_moe_prose_states_hp_s_bf16_gemm_seconds_and_memory(registry, monkeypatch):
    """The page's account of the Llama4 bf16 row: the seconds hp gives the GEMMs in each MX recipe's scope (the bf16
    step less the step with those GEMMs infinitely fast and their casts free: 0.092 s the routed experts', 0.135 s the
    linears'), the measured saving under MXFP8 grouped GEMMs (1.3272 - 0.9450 = 0.382 s, over four times the former),
    and hp's peak's saved activations and working set (58.7 and 25.3 GiB, the compiled loss)."""
    from hp_core.engine.timing import rates

    runs = _module()
    rows = _data()["torchao_moe_rows"]
    bf16, stage = runs._torchao_moe_priced(rows[0], registry, "bf16")
    original = rates._recipe_rates

    def free(*args, **kwargs):
        found = original(*args, **kwargs)
        found.update(gemm_speedup=1e30, gemm_speedup_backward=1e30, quant_input_fwd=0.0, quant_input_bwd=0.0,
                     quant_grad=0.0, quant_weight=0.0)
        return found

    monkeypatch.setattr(rates, "_recipe_rates", free)
    seconds = {r: bf16.step_seconds - runs._torchao_moe_priced(rows[0], registry, r)[0].step_seconds
               for r in ("torchao-mxfp8-experts", "torchao-mxfp8")}
    monkeypatch.undo()
    prose = _prose(_page())
    saving = 8 * 8192 / 49381.0 - 8 * 8192 / 69350.0
    assert f"{saving:.3f}" == "0.382" and saving > 4 * seconds["torchao-mxfp8-experts"]
    assert (f"hp prices the routed experts' bf16 grouped GEMMs at {seconds['torchao-mxfp8-experts']:.3f} s a step" in prose
            and f"the measured step fell by {saving:.3f} s" in prose)
    assert f"hp prices their bf16 GEMMs at {seconds['torchao-mxfp8']:.3f} s a step" in prose
    memory = stage.memory
    assert (f"holds {memory.activations_bytes / 2**30:.1f} GiB of saved activations and a "
            f"{memory.working_set_bytes / 2**30:.1f} GiB working set") in prose


def test_torchao_moe_kernel_rows_bound_the_bf16_experts_and_the_page_states_them(registry):
    """The README's own kernel rows (torchao_moe_kernels): bf16 torch._grouped_mm at 4 groups runs 6 x 128,000 x 8,192 x
    5,120 FLOPs forward and backward in 38,879.3 us, 828.5 TFLOP/s (0.368 of the B200's 2,250); at that rate the Llama4
    row's routed GEMMs (2 layers x 3 GEMMs x 6 x 65,536 x 5,120 x 8,192 FLOPs a rank) take 0.119 s and MXFP8 (24,508.5 us)
    saves 0.044 s of them, 0.177 s were all 4 ranks' tokens on one rank: each below the measured 0.382 s. The MoE layer
    row saved 82.85 ms where the 8-group kernel row gives 3 x 9,777 us x 131,072 / 128,000 = 30.0 ms."""
    from hp_plugins.runtimes.timing_profiles import BLACKWELL

    data = _data()
    kernels = data["torchao_moe_kernels"]
    assert "838dcebb13be7cd7b7ae5d1d8c4e674c89a5d7b8" in kernels["source"] and "2.10.0a0+gitf6de195" in kernels["source"]
    rows = {r["G"]: r for r in kernels["grouped_mm_rows"]}
    for row in rows.values():
        cells = [c.strip() for c in row["row"].strip(" |").split("|")]
        assert cells[0] == f"({row['M']}, {row['N']}, {row['K']}, {row['G']})"
        assert float(cells[1]) == row["bf16_fwd_bwd_us"] and float(cells[2]) == row["mxfp8_fwd_bwd_us"]
    four = rows[4]
    flops = 6 * four["M"] * four["N"] * four["K"]
    rate = flops / (four["bf16_fwd_bwd_us"] * 1e-6)
    assert rate == pytest.approx(828.5194e12, rel=1e-6)
    peak = registry.hardware_preset("b200").spec.peak_flops["bf16"]
    assert peak == 2250e12 and rate / peak == pytest.approx(0.3682, abs=5e-5)
    routed = 2 * 3 * 6 * 65536 * 5120 * 8192
    bf16_seconds = routed / rate
    saving = bf16_seconds - routed / (flops / (four["mxfp8_fwd_bwd_us"] * 1e-6))
    measured = 8 * 8192 / 49381.0 - 8 * 8192 / 69350.0
    assert (round(bf16_seconds, 3), round(saving, 3), round(4 * saving, 3), round(measured, 3)) == (0.119, 0.044, 0.177, 0.382)
    one = rows[1]
    g1_rate = 6 * one["M"] * one["N"] * one["K"] / (one["bf16_fwd_bwd_us"] * 1e-6)
    assert BLACKWELL.matmul.value == 0.4878  # the b200 preset's dense GEMM efficiency the page quotes
    cublas_ms = 6 * one["M"] * one["N"] * one["K"] / (BLACKWELL.matmul.value * peak) * 1e3
    assert f"{g1_rate / 1e12:.1f}" == "796.1" and f"{cublas_ms:.1f}" == "29.3" and cublas_ms < one["bf16_fwd_bwd_us"] / 1e3
    layer = kernels["moe_layer_row"]
    assert f"{layer['bf16_ms']:.3f}" in layer["row"] and f"{layer['mxfp8_ms']:.3f}" in layer["row"]
    layer_saving = layer["bf16_ms"] - layer["mxfp8_ms"]
    eight = rows[8]
    kernel_saving_ms = 3 * (eight["bf16_fwd_bwd_us"] - eight["mxfp8_fwd_bwd_us"]) / 1e3 * layer["tokens"] / eight["M"]
    assert f"{layer_saving:.2f}" == "82.85" and f"{kernel_saving_ms:.1f}" == "30.0"
    prose = _prose(_page())
    for stated in (f"in {four['bf16_fwd_bwd_us']:,.1f} us", f"= {rate / 1e12:.1f} TFLOP/s, {rate / peak:.3f} of the 2,250 peak",
                   f"G = 1: {g1_rate / 1e12:.1f} TFLOP/s", f"would take {cublas_ms:.1f} ms, not {one['bf16_fwd_bwd_us'] / 1e3:.1f}",
                   f"= {routed / 1e13:.2f}e13 FLOPs a rank) take {bf16_seconds:.3f} s",
                   f"(its TE grouped fit, {BLACKWELL.grouped_matmul.value * 16384 / (16384 + BLACKWELL.grouped_half_rows.value):.3f} "
                   "of peak at 16,384 rows an expert)",
                   f"MXFP8 time ({four['mxfp8_fwd_bwd_us']:,.1f} us, {four['bf16_fwd_bwd_us'] / four['mxfp8_fwd_bwd_us']:.3f}x) saves "
                   f"{saving:.3f} s", f"not the measured {measured:.3f} s", f"still {4 * saving:.3f} s",
                   f"saved {layer_saving:.2f} ms under MXFP8", f"G = 8 row gives {kernel_saving_ms:.1f} ms",
                   "at most 32 (128) rows over a rank's 65,536 a layer, 0.05% (0.20%)"):
        assert stated in prose, stated
    assert f"{4 * 8 / 65536:.2%}" == "0.05%" and f"{4 * 32 / 65536:.2%}" == "0.20%"


def test_mpt_fsdp_rows_state_their_provenance_and_the_page_table_is_current():
    data = _data()
    source = data["sources"]["llm-foundry-benchmarks"]
    assert "8c8dd48f72168c5d51e2f7b151595892a8fba43d" in source and "Format.HYBRID" in source
    for row in data["fsdp_rows"]:
        cells = [c.strip() for c in row["row"].strip(" |").split("|")]
        assert row["source"] == "llm-foundry-benchmarks" and row["split"] == "held_out" and cells[14] == "amp_fp8"
        assert row["recipe"] == "fp8-delayed" and row["gpus"] == int(cells[2]) and row["seq_len"] == int(cells[1])
        assert row["global_batch_tokens"] == int(cells[13]) and row["tokens_per_second"] == int(cells[11])
        assert row["runtime_options"]["fsdp_implementation"] == "fsdp1"  # Composer's FSDP1, as the bf16 MPT rows
    runs = _module()
    found = runs.fsdp_results()
    page = _current(runs.fsdp_section(found))
    errors = [r["error"] for r in found]
    assert f"They are priced within {100 * min(errors):+.1f}% to {100 * max(errors):+.1f}%" in _prose(page)


def _cells(row: dict) -> list[str]:
    """The summary row's cells after its first (the system, or the model in 25.11's per-system tables)."""
    text = row["row"].split(": ", 1)[1] if row["row"].startswith("DGX-") else row["row"]
    return [c.strip() for c in text.strip(" |").split("|")][1:]


def test_moe_rows_state_their_summary_row_and_release():
    data = _data()
    runs = _module()
    # 34 on H100, B200 and GB200; 28 on GB300 and B300 (tests/plugins/test_fp8_runs_gb300.py; Kimi K2's 4 among them).
    assert len(data["moe_rows"]) == 62 and len(data["moe_rows_skipped"]) == 5
    for row in data["moe_rows"]:
        source = data["sources"][row["source"]]
        assert "067f987df03b8355b03192d88d70f1709fedf51a" in source and row["source"] == row["runtime_options_source"], row["id"]
        # Held out, but the three rows the megatron runtime's host seconds per kernel is fitted to
        # (benchmarks/fit_host_seconds.py, tests/plugins/test_host_fit.py).
        calibration = row["id"] in ("mb26.04-h100-qwen3-30b-a3b-fp8cs", "mb26.04.01-h100-qwen3-30b-a3b-fp8cs",
                                    "mb26.06-h100-qwen3-30b-a3b-fp8cs")
        assert row["split"] == ("calibration" if calibration else "held_out") and row["class"] in runs.MOE_CLASSES, row["id"]
        # Cells: #-GPUs, precision, GBS, MBS, sequence length, [FSDP,] TP, PP, CP, VP, EP, [GA,] tokens/s/GPU, TFLOP/s/GPU.
        cells = _cells(row)
        assert int(cells[0]) == row["gpus"] and int(cells[2]) == row["global_batch_size"], row["id"]
        assert int(cells[3]) == row["micro_batch_size"] and int(cells[4]) == row["seq_len"], row["id"]
        assert ("MX" in cells[1]) == (row["recipe"] in ("mxfp8", "mxfp8-param-gather"))  # Kimi K2's: no parameter gather
        assert (row["hardware"] in ("b200", "gb200", "gb300", "b300")) == (row["recipe"] in ("mxfp8", "mxfp8-param-gather"))
        own = {"gb200": "Megatron-Core MoE, GB200", "gb300": "Megatron-Core MoE, GB300", "b300": "Megatron-Core MoE, B300"}
        assert row["class"] == own.get(row["hardware"], row["class"]) and (row["hardware"] in own) == (row["class"] in own.values()), row["id"]
        layout = cells[5:10] if len(cells) == 12 else cells[6:11]  # 26.06 states no FSDP column
        tp, pp, cp, vp, ep = (1 if c == "n/a" else int(c) for c in layout)
        assert (tp, pp, cp, vp, ep) == (row["tp"], row["pp"], row["cp"], row["vpp"], row["ep"]), row["id"]
        assert int(cells[-2]) == row["tokens_per_second_per_gpu"], row["id"]
        assert row["not_priced"], row["id"]  # at least the FP8 grouped GEMMs' dense speedup


def test_precision_page_moe_table_is_current_and_its_prose_states_its_figures():
    runs = _module()
    found = runs.moe_results()
    page = _current(runs.moe_section(found))
    prose = _prose(page)
    by_id = {r["id"]: r for r in found}
    for cls in runs.MOE_CLASSES:
        errors = [abs(r["error"]) for r in found if r["class"] == cls and r["split"] == "held_out"]
        assert f"{cls.rsplit(', ', 1)[1]} rows {sum(errors) / len(errors):.1%}" in prose, cls
    slow = [by_id[k]["error"] for k in ("mb25.11-b200-qwen3-30b-a3b-mxfp8", "mb26.02-b200-qwen3-30b-a3b-mxfp8")]
    assert f"micro-batch 1 are priced {-max(slow):.0%}-{-min(slow):.0%} too fast" in prose
    speedups = [r["bf16_seconds"] / r["estimated_seconds"] for r in found]
    assert f"FP8 speedup over bf16 on these rows is {min(speedups):.2f}-{max(speedups):.2f}" in prose
    hybrid = [by_id[f"mb{c}-b200-deepseek-v3-mxfp8"]["error"] for c in ("26.02", "26.02.01", "26.04")]
    assert f"26.02 to 26.04 (GBS 4,096, HybridEP) {min(hybrid):+.1%} to {max(hybrid):+.1%}" in prose
    assert f"DeepSeek-V3's three at EP 8 {min(hybrid):+.1%} to {max(hybrid):+.1%}" in prose
    assert f"25.11's row (GBS 2,048, NCCL all-to-all, the shared expert overlapped with it, `moe_shared_expert_overlap`) is " \
           f"{by_id['mb25.11-b200-deepseek-v3-mxfp8']['error']:+.1%}" in prose
    # The shortfall per layer and micro-batch: micro-batch 1 on H100 and B200 (less the PP 2 VP 12 DeepEP row and
    # DeepSeek-V3's PP 8 VP 2 DeepEP row, stated apart; the GB200 rows, priced slow, stated apart too) and 4.
    apart = ("mb26.02-h100-qwen3-30b-a3b-fp8cs", "mb26.04.01-b200-deepseek-v3-mxfp8")
    one = [r["shortfall_per_layer_seconds"] * 1e3 for r in found if r["layout"]["micro_batch_size"] == 1
           and r["split"] == "held_out" and r["id"] not in apart and r["layout"]["hardware"] in ("h100-sxm", "b200")]
    four = [r["shortfall_per_layer_seconds"] * 1e3 for r in found if r["layout"]["micro_batch_size"] == 4
            and r["layout"]["hardware"] in ("h100-sxm", "b200")]
    assert f"At micro-batch 1 it is {min(one):+.2f} to {max(one):+.2f} ms on {len(one)} held-out H100 and B200 rows (" \
           f"{by_id['mb26.02-h100-qwen3-30b-a3b-fp8cs']['shortfall_per_layer_seconds'] * 1e3:+.2f} ms" in prose
    # Micro-batch 4 straddled zero after the flex dispatcher's permutation (-0.69 to -0.90 ms before); above it since
    # HybridEP's NVLink leg took the Kernel Only figures (-0.14 to +0.07 ms before).
    assert f"at micro-batch 4, {min(four):+.2f} to {max(four):+.2f} ms" in prose and min(one) > 0 and min(four) > 0
    b200_mlp = by_id["mb26.04.01-b200-deepseek-v3-mxfp8"]
    assert f"{b200_mlp['shortfall_per_layer_seconds'] * 1e3:+.2f} ms DeepSeek-V3's B200 row of 26.04.01 at PP 8 VP 2" in prose
    every_gb200 = [r for r in found if r["class"] == "Megatron-Core MoE, GB200"]
    short = sorted(r["shortfall_per_layer_seconds"] * 1e3 for r in every_gb200 if r["layout"]["model"] == "deepseek-v3")
    assert len(short) == 4 and f"the four GB200 DeepSeek-V3 rows, priced slow, {short[0]:+.2f} to {short[-1]:+.2f} ms" in prose
    assert short[-1] < 0
    q235 = sorted(r["shortfall_per_layer_seconds"] * 1e3 for r in every_gb200 if r["layout"]["model"] == "qwen3-235b-a22b")
    q30 = sorted(r["shortfall_per_layer_seconds"] * 1e3 for r in every_gb200 if r["layout"]["model"] == "qwen3-30b-a3b")
    assert len(q235) == 4 and f"Qwen3-235B-A22B rows {q235[0]:+.2f} to {q235[-1]:+.2f} ms" in prose and q235[-1] < 0
    assert len(q30) == 5 and f"the five GB200 Qwen3-30B-A3B rows {q30[0]:+.2f} to {q30[-1]:+.2f} ms" in prose
    # The three rows recomputing mlp: their errors and step times as the prose states them.
    mlp_gb200 = [by_id[f"mb{c}-gb200-deepseek-v3-mxfp8"] for c in ("26.04", "26.04.01")]
    assert (f"+{b200_mlp['error']:.1%} ({b200_mlp['measured_seconds']:.3f} s measured, {b200_mlp['estimated_seconds']:.3f} s hp), "
            f"the GB200 rows of 26.04 and 26.04.01 +{mlp_gb200[0]['error']:.1%} and +{mlp_gb200[1]['error']:.1%} "
            f"({mlp_gb200[0]['measured_seconds']:.3f} and {mlp_gb200[1]['measured_seconds']:.3f} s measured, "
            f"{mlp_gb200[0]['estimated_seconds']:.3f} s hp") in prose
    assert f"and the two of 26.04 and 26.04.01, which joined later, {mlp_gb200[0]['error']:+.1%} and {mlp_gb200[1]['error']:+.1%}" in prose
    gb200 = [by_id[f"mb{c}-gb200-deepseek-v3-mxfp8"] for c in ("26.02", "26.02.01")]
    assert (f"its two GB200 rows at EP 64 within one NVLink domain (the GB200 table's 36-rank figure, extrapolated) "
            f"{gb200[0]['error']:+.1%} to {gb200[1]['error']:+.1%}") in prose
    assert f"only DeepSeek-V3 rows priced slow, {gb200[0]['error']:+.1%} and {gb200[1]['error']:+.1%}" in prose
    # A 1F1B slot of the run: the step over 64 micro-batches (4,096 / 64 data-parallel ranks) and the interleaved
    # bubble's (4 - 1) / 4: 16.570 / 64.75 = 0.256 s. hp's FP8 speedup 24.687 / 19.672 = 1.25.
    slots = [runs.measured_seconds(r["layout"]) / (64 + 3 / 4) for r in gb200]
    assert f"the runs take {slots[0]:.3f} and {slots[1]:.3f} s a 1F1B slot" in prose
    assert f"hp's FP8 speedup on them is {gb200[0]['bf16_seconds'] / gb200[0]['estimated_seconds']:.2f}" in prose
    b200 = [by_id[f"mb{c}-b200-deepseek-v3-mxfp8"] for c in ("26.02", "26.02.01")]
    ran = [b["measured_seconds"] / g["measured_seconds"] for b, g in zip(b200, gb200)]
    priced = b200[0]["estimated_seconds"] / gb200[0]["estimated_seconds"]
    assert (f"they ran {ran[0]:.2f} and {ran[1]:.2f} times faster than the B200 rows of the same containers, where hp "
            f"prices them {priced:.2f} times faster") in prose
    # hp's time per sequence, 25.11's row (GBS 2,048) over 26.02's (GBS 4,096): 1.06 as the prose states
    ratio = (by_id["mb25.11-b200-deepseek-v3-mxfp8"]["estimated_seconds"] / 2048) / (by_id["mb26.02-b200-deepseek-v3-mxfp8"]["estimated_seconds"] / 4096)
    assert f"hp prices it {ratio:.2f} times slower per sequence" in prose


def test_deepseek_v3_rows_state_their_pipeline_layout_as_layers_per_stage():
    """Each DeepSeek-V3 row's layout string, expanded as Megatron-LM parses it (the importer's parse_layout): 'Et*4|(t*4|)*14tmL' is 'Etttt', fourteen 'tttt', then
    'tmL': 16 chunks of 4, ..., 4, 1 decoder layers, the embedding only in the first, the MTP layer and the loss only in
    the last (where hp places them), 61 decoder layers in all, the preset's."""
    from hp_core import api

    data = _data()
    runs = _module()
    registry = api.build_registry()
    model = api.model_from_preset("deepseek-v3", registry=registry)
    rows = [r for r in data["moe_rows"] if r["model"] == "deepseek-v3" and r["hardware"] in ("b200", "gb200")]  # GB300, B300: apart
    assert [r["id"] for r in rows] == ([f"mb{c}-b200-deepseek-v3-mxfp8" for c in ("25.11", "26.02", "26.02.01", "26.04", "26.04.01")]
                                       + [f"mb{c}-gb200-deepseek-v3-mxfp8" for c in ("26.02", "26.02.01", "26.04", "26.04.01")])
    assert parse_layout("Et*4|(t*4|)*14tmL") == ["Etttt"] + ["tttt"] * 14 + ["tmL"]
    for row in rows:
        chunks = parse_layout(row["pipeline_layout"])
        assert len(chunks) == row["pp"] * row["vpp"] == 16, row["id"]
        assert row["layers_per_stage"] == [c.count("t") for c in chunks] == [4] * 15 + [1], row["id"]
        assert [i for i, c in enumerate(chunks) if "E" in c] == [0], row["id"]
        assert [i for i, c in enumerate(chunks) if "m" in c or "L" in c] == [15] and chunks[15].count("m") == 1, row["id"]
        assert sum(row["layers_per_stage"]) == runs._decoder_layers(model) == 61, row["id"]
        assert runs.layout(row, 61).layers_per_stage == (4,) * 15 + (1,), row["id"]
        # Step time by hand: 25.11 GBS 2,048 at 2,139 tokens/s/GPU: 2048 * 4096 / (2139 * 256) = 15.319 s
        # GB200 26.02: 4096 * 4096 / (3955 * 256) = 16.570 s; B200 26.04.01: 4096 * 4096 / (3328 * 256) = 19.692 s;
        # GB200 26.04 and 26.04.01: 4096 * 4096 / (4193 * 256) = 15.630 s and / (4256 * 256) = 15.398 s
        expected = {"mb25.11-b200": 15.319, "mb26.02-b200": 24.372, "mb26.02.01-b200": 23.490, "mb26.04-b200": 23.281,
                    "mb26.04.01-b200": 19.692, "mb26.02-gb200": 16.570, "mb26.02.01-gb200": 16.298,
                    "mb26.04-gb200": 15.630, "mb26.04.01-gb200": 15.398}[row["id"].rsplit("-deepseek", 1)[0]]
        assert runs.measured_seconds(row) == pytest.approx(expected, abs=5e-4), row["id"]
        # The GB200 rows' PP 4, VP 4: chunk i on rank i % 4 (Megatron-Core's layout), the last rank 4+4+4+1 = 13 layers;
        # B200 26.04.01's PP 8, VP 2: the last rank holds chunks 7 and 15, 4+1 = 5 layers, the others 8.
        spec = runs.layout(row, 61)
        per_rank = [sum(spec.layers_per_stage[rank::spec.pp]) for rank in range(spec.pp)]
        expected_ranks = {(4, 4): [16, 16, 16, 13], (8, 2): [8] * 7 + [5], (16, 1): [4] * 15 + [1]}[(row["pp"], row["vpp"])]
        assert per_rank == expected_ranks, row["id"]


def test_no_row_is_left_out_for_its_fp8_attention_alone():
    """hp states FP8 attention (the ``*-fp8-attention`` recipes), so a Megatron-Bridge row whose config sets
    fp8_dot_product_attention is left out only for what else its config does. Every such config of 26.06 to 26.08
    bounds the dropless experts by a per-rank token budget and pages their activations (set_full_iter_cg_configs at
    v0.5.0 / v0.5.1, the perf_recipes helpers at v0.6.0); read in Megatron-Core, the experts still compute only the
    received tokens, so the Qwen3, DeepSeek-V3 and GPT-OSS rows are priced (moe_fi_rows, the budget, the stash and
    the MXFP8 output layer named as not priced)."""
    data = _data()
    # No entry is left out for what its config sets any more: the Qwen3, DeepSeek-V3 and GPT-OSS rows of 26.06 to 26.08
    # are priced (moe_fi_rows); 26.06.01's GPT-OSS rows are left out for the summary's regression footnote.
    entries = [s for key in ("rows_skipped_gb200", "rows_skipped_gb300", "moe_rows_skipped")
               for s in data[key] if "fp8_dot_product_attention" in s["why"] or "moe_paged_stash" in s["why"]]
    assert not entries, [s["row"] for s in entries]
    # The held-out rows priced under an FP8-attention recipe are the full-iteration rows but DeepSeek-V3's GB200 ones,
    # whose configs set no fp8_dot_product_attention.
    assert len(data["moe_fi_rows"]) == 24
    priced = [r for key in ("rows", "moe_rows", "moe_fi_rows") for r in data[key]]
    assert sorted(r["id"] for r in priced if r["recipe"].endswith("-fp8-attention")) == \
        sorted(r["id"] for r in data["moe_fi_rows"] if not (r["model"] == "deepseek-v3" and r["hardware"] == "gb200"))


def test_qwen3_gb200_rows_state_their_layout_and_the_page_states_their_figures():
    """The DGX-GB200 Qwen3 rows: the GB200 config of their release (HybridEP, TE CUDA graphs named as not priced),
    held out; step times by hand; 235B-A22B's embedding and loss counted in the pipeline split; the 26.06 to 26.08
    rows apart, in moe_fi_rows (tests/plugins/test_fp8_runs_moe_fi.py); the page's paragraph pinned to today's
    figures."""
    data = _data()
    runs = _module()
    rows = {r["id"]: r for r in data["moe_rows"] if r["hardware"] == "gb200" and r["model"].startswith("qwen3")}
    assert sorted(rows) == sorted([f"mb{c}-gb200-qwen3-30b-a3b-mxfp8" for c in ("25.11", "26.02", "26.02.01", "26.04", "26.04.01")]
                                  + [f"mb{c}-gb200-qwen3-235b-a22b-mxfp8" for c in ("26.02", "26.02.01", "26.04", "26.04.01")])
    for row in rows.values():
        assert row["split"] == "held_out" and row["recipe"] == "mxfp8-param-gather" and row["runtime_options"]["ep_all_to_all"] == "hybridep"
        assert "GB200_FP8_MX" in row["config"] and any("CUDA graphs" in item for item in row["not_priced"]), row["id"]
        assert "recompute_modules" not in row, row["id"]
        # overlap_p2p_comm where PP > 1 and VP > 1 (comm_overlap.py): the 235B rows of 26.04 and 26.04.01, VP 3.
        assert row["runtime_options"].get("overlap_p2p_communication", False) == (row["pp"] > 1 and row["vpp"] > 1), row["id"]
    # 512 x 4,096 / (26,084 x 8) = 10.050 s; 8,192 x 4,096 / (5,448 x 256) = 24.059 s; / (5,680 x 256) = 23.076 s.
    assert runs.measured_seconds(rows["mb26.02-gb200-qwen3-30b-a3b-mxfp8"]) == pytest.approx(10.050, abs=5e-4)
    assert runs.measured_seconds(rows["mb26.02-gb200-qwen3-235b-a22b-mxfp8"]) == pytest.approx(24.059, abs=5e-4)
    assert runs.measured_seconds(rows["mb26.04.01-gb200-qwen3-235b-a22b-mxfp8"]) == pytest.approx(23.076, abs=5e-4)
    # (94 + 2) / 8 = 12 a stage at PP 8 (11 first and last); (94 + 2) / 24 = 4 a chunk at VP 3 (3 first and last).
    assert runs.layout(rows["mb26.02-gb200-qwen3-235b-a22b-mxfp8"], 94).layers_per_stage == (11,) + (12,) * 6 + (11,)
    assert runs.layout(rows["mb26.04-gb200-qwen3-235b-a22b-mxfp8"], 94).layers_per_stage == (3,) + (4,) * 22 + (3,)
    assert not [s for s in data["rows_skipped_gb200"] if "Qwen3" in s["row"]]
    assert len([r for r in data["moe_fi_rows"] if r["hardware"] == "gb200" and r["model"].startswith("qwen3")]) == 6
    found = {r["id"]: r for r in runs.moe_results()}
    prose = _prose(_page())
    q30 = [found[k]["error"] for k in rows if "30b" in k]
    later = [found[k]["error"] for k in rows if "30b" in k and not k.startswith("mb25.11")]
    assert f"The five 30B-A3B rows on 8 GPUs (one NVLink domain, EP 8, micro-batch 4, HybridEP) are {min(q30):+.1%} to {max(q30):+.1%}" in prose
    assert f"26.02 to 26.04.01 {min(later):+.1%} to {max(later):+.1%}" in prose
    assert f"25.11's row {found['mb25.11-gb200-qwen3-30b-a3b-mxfp8']['error']:+.1%}" in prose
    q235 = [found[k] for k in rows if "235b" in k]
    assert f"are priced slow, {min(r['error'] for r in q235):+.1%} to {max(r['error'] for r in q235):+.1%}, as DeepSeek-V3's" in prose
    gb = found["mb26.04.01-gb200-qwen3-235b-a22b-mxfp8"]
    assert len({round(r["estimated_seconds"], 6) for r in q235}) == 2  # one price per layout (VP 1, VP 3)
    from hp_core import api

    registry = api.build_registry()
    compute = runs.price_moe(rows["mb26.04.01-gb200-qwen3-235b-a22b-mxfp8"], registry).compute_seconds
    # More than every measured step until the flex dispatcher's permutation (2026-12-02); now among them.
    assert f"hp's compute alone, {compute:.3f} s, is as long as the measured steps" in prose
    assert min(r["measured_seconds"] for r in q235) < compute < max(r["measured_seconds"] for r in q235)
    # The host floor's share: the same rows with no floor at all (cuda_graphs full_iteration lifts it from every layer).
    eager = api.apply_options(registry.runtime("megatron"), {"cuda_graphs": "full_iteration"})
    floorless = {k: runs.price_moe(rows[k], registry, base_runtime=eager) for k in rows if "235b" in k}
    floor = compute - floorless["mb26.04.01-gb200-qwen3-235b-a22b-mxfp8"].compute_seconds
    assert f"{floor:.3f} s of it the host floor" in prose and floor == pytest.approx(4.053, abs=5e-4)
    bare = [floorless[k].step_seconds / found[k]["measured_seconds"] - 1 for k in floorless]
    assert f"with no floor at all they would be {min(bare):+.1%} to {max(bare):+.1%}" in prose
    assert f"{floor:.3f} s of their {min(r['estimated_seconds'] for r in q235):.3f}-{max(r['estimated_seconds'] for r in q235):.3f} s price" \
           in " ".join((ROOT / "docs" / "time.md").read_text(encoding="utf-8").split())
    b200 = [found[f"mb{c}-b200-qwen3-235b-a22b-mxfp8"] for c in ("26.02", "26.04.01")]
    gb200 = [found[f"mb{c}-gb200-qwen3-235b-a22b-mxfp8"] for c in ("26.02", "26.04.01")]
    ran = [b["measured_seconds"] / g["measured_seconds"] for b, g in zip(b200, gb200)]
    priced = [b["estimated_seconds"] / g["estimated_seconds"] for b, g in zip(b200, gb200)]
    assert f"They ran {ran[0]:.2f} and {ran[1]:.2f} times faster" in prose
    assert f"where hp prices them {priced[0]:.2f} and {priced[1]:.2f} times faster" in prose
    b30, g30 = found["mb26.02.01-b200-qwen3-30b-a3b-mxfp8"], found["mb26.02.01-gb200-qwen3-30b-a3b-mxfp8"]
    assert (f"({g30['measured_seconds']:.3f} s against {b30['measured_seconds']:.3f} s in 26.02.01), where hp prices the GB200 "
            f"{b30['estimated_seconds'] / g30['estimated_seconds']:.2f} times faster") in prose
    speedups = {round(found[k]["bf16_seconds"] / found[k]["estimated_seconds"], 2) for k in rows}
    assert speedups == {1.13} and "hp's FP8 speedup on the nine is 1.13" in prose
    assert gb["error"] > 0


def test_moe_recompute_maps_the_rows_modules_to_switches_and_refuses_an_unstated_one():
    """mla_up_proj is the megatron runtime's attUp on every MLA body layer (3 mla, then 58 mla_moe: layers 0-2 and 3-60);
    'mlp' (DeepSeek-V3's 26.04 and 26.04.01 configs) is ffFc1 and ffAct on the 3 dense layers only; the Qwen3 rows
    recompute nothing; a module the runtime does not state ('moe', 'shared_experts') is refused."""
    from hp_core import api

    runs = _module()
    registry = api.build_registry()
    runtime = registry.runtime("megatron")
    model = api.model_from_preset("deepseek-v3", registry=registry)
    plan = runs.moe_recompute({"id": "x", "recompute_modules": ["mla_up_proj"]}, model, registry, runtime)
    assert [(a, b, sorted(s.switches)) for a, b, s in plan.layers] == [(0, 2, ["attUp"]), (3, 60, ["attUp"])]
    assert runs.moe_recompute({"id": "x"}, model, registry, runtime) is None
    plan = runs.moe_recompute({"id": "x", "recompute_modules": ["mla_up_proj", "mlp"]}, model, registry, runtime)
    assert [(a, b, sorted(s.switches)) for a, b, s in plan.layers] == [(0, 2, ["attUp", "ffAct", "ffFc1"]), (3, 60, ["attUp"])]
    plan = runs.moe_recompute({"id": "x", "recompute_modules": ["mlp"]}, model, registry, runtime)
    assert [(a, b, sorted(s.switches)) for a, b, s in plan.layers] == [(0, 2, ["ffAct", "ffFc1"])]
    with pytest.raises(ValueError, match="shared_experts"):
        runs.moe_recompute({"id": "x", "recompute_modules": ["mlp", "shared_experts"]}, model, registry, runtime)
    assert not any(s["row"].startswith("26.04.01 NeMo Container, DeepSeekV3") for s in _data()["moe_rows_skipped"])


# torchtitan's and torchao's Float8 rows (torchtitan_rows): each step time by hand from the figure its source prints,
# tokens of one data-parallel rank per step over (TPS per GPU x the TP degree), torchtitan's TPS per GPU dividing a
# rank's tokens by the time and the non-data-parallel degree; the figure as the source row prints it.
TORCHAO_FLOAT8 = ("torchao-float8-tensorwise", "torchao-float8-rowwise")
TORCHTITAN_BY_HAND = {
    "tt-fp8-8b-fsdp8-compile": ("8,532", 2 * 8192 / 8532),  # local batch 2, FSDP only: 1.9203 s
    "tt-fp8-8b-fsdp128-compile": ("8,380", 2 * 8192 / 8380),  # 1.9551 s
    "tt-fp8-8b-fsdp8-lb1-2501": ("tps: 7,186", 1 * 8192 / 7186),  # local batch 1: 1.1400 s
    "ao-fp8-h100-8b-tensorwise": ("7689.5", 1 * 8192 / 7689.5),  # 1.0653 s
    "tt-fp8-8b-fsdp8-tp8": ("5078.1", 12 * 8192 / (5078.1 * 8)),  # local batch 12, TP 8: 2.4198 s
    "tt-fp8-8b-fsdp8-tp8-asynctp": ("5570.1", 12 * 8192 / (5570.1 * 8)),  # 2.2061 s
    "tt-fp8-70b-fsdp32-tp8": ("809.8", 16 * 8192 / (809.8 * 8)),  # local batch 16, TP 8: 20.232 s
    "tt-fp8-70b-fsdp32-tp8-asynctp": ("942.4", 16 * 8192 / (942.4 * 8)),  # 17.385 s
    "tt-fp8-405b-fsdp16-tp8-asynctp": ("| 185 |", 2 * 8192 / (185 * 8)),  # local batch 2, TP 8: 11.070 s
    # torchao's rowwise recipe, beside each tensorwise row its source prints one for.
    "tt-fp8-8b-fsdp8-lb1-2501-rowwise": ("tps: 6,424", 1 * 8192 / 6424),  # 1.2752 s
    "ao-fp8-h100-8b-rowwise": ("6768", 1 * 8192 / 6768),  # 1.2104 s
    "tt-fp8-rowwise-8b-fsdp8-tp8": ("3708.5", 12 * 8192 / (3708.5 * 8)),  # 3.3135 s
    "tt-fp8-rowwise-8b-fsdp8-tp8-asynctp": ("3914.9", 12 * 8192 / (3914.9 * 8)),  # 3.1388 s
    "tt-fp8-rowwise-70b-fsdp32-tp8": ("599.6", 16 * 8192 / (599.6 * 8)),  # 27.325 s
    "tt-fp8-rowwise-70b-fsdp32-tp8-asynctp": ("624.8", 16 * 8192 / (624.8 * 8)),  # 26.223 s
}


def test_torchtitan_rows_step_seconds_by_hand():
    import pytest

    data = _data()
    runs = _module()
    sc = runs._scale_cases()
    rows = {row["id"]: row for row in data["torchtitan_rows"]}
    assert set(rows) == set(TORCHTITAN_BY_HAND)
    for name, (printed, seconds) in TORCHTITAN_BY_HAND.items():
        row = rows[name]
        assert printed in row["row"], name  # the figure priced is the one the source row prints
        assert float(printed.strip("| ").removeprefix("tps: ").replace(",", "")) == row["measured"]["tps_per_gpu"], name
        assert sc.measured_seconds(row) == pytest.approx(seconds, rel=1e-12), name
    assert round(sc.measured_seconds(rows["tt-fp8-70b-fsdp32-tp8"]), 3) == 20.232
    assert round(sc.measured_seconds(rows["tt-fp8-405b-fsdp16-tp8-asynctp"]), 3) == 11.070
    # The bf16 baselines by the same formula: a memory row's TPS over the FP8 row's layout, or the scale row as priced.
    base, in_scale = runs.torchtitan_baseline(rows["ao-fp8-h100-8b-tensorwise"], data)
    assert not in_scale and sc.measured_seconds(base) == pytest.approx(8192 / 6150, rel=1e-12)
    base, in_scale = runs.torchtitan_baseline(rows["tt-fp8-70b-fsdp32-tp8"], data)
    assert in_scale and sc.measured_seconds(base) == pytest.approx(16 * 8192 / (597.3 * 8), rel=1e-12)


def test_torchtitan_rows_state_their_provenance_device_and_baseline(registry):
    import pytest

    from hp_core.errors import ConfigError

    data = _data()
    runs = _module()
    sc = runs._scale_cases()
    for row in data["torchtitan_rows"]:
        assert row["source"] in data["sources"] and row["split"] == "held_out", row["id"]  # nothing is fitted to them
        assert row["hardware"] == "h100-hbm2e" and row["recipe"] in TORCHAO_FLOAT8, row["id"]
        assert row["class"] in runs.TORCHTITAN_CLASSES and row["compile"] and row["not_priced"], row["id"]
        # hp's recipe gathers as the run did but for the June 2025 tensorwise rows' bf16 FSDP all-gather (the toml's
        # enable_fsdp_float8_all_gather = false); their float8 TP gathers are the recipe's own (tp_gather). The
        # rowwise recipe gathers bf16 as those runs did.
        if row["source"] == "torchtitan-asynctp-2506" and row["recipe"] == "torchao-float8-tensorwise":
            assert row["gathers_as_run"] == {"param_gather": "none"}, row["id"]
        else:
            assert "gathers_as_run" not in row, row["id"]
        base, in_scale = runs.torchtitan_baseline(row, data)
        if in_scale:  # the bf16 row of the same table: the same build but the options the row names
            assert base["split"] in ("calibration", "held-out") and base["compile"], row["id"]
            for key in ("model", "runtime", "hardware", "layout", "recompute"):
                assert base[key] == row[key], (row["id"], key)
            differ = set(row["baseline"].get("options_differ", []))
            assert {k for k in base["options"].keys() | row["options"].keys()
                    if base["options"].get(k) != row["options"].get(k)} == differ, row["id"]
        else:
            memory = next(r for r in data["memory_rows"] if r["id"] == row["baseline"]["id"])
            assert memory["recipe"] == "bf16" and memory["compile"] and memory["source"] == row["source"], row["id"]
            assert memory["local_batch_size"] == row["layout"]["micro_batch_size"] and memory["gpus"] == row["layout"]["dp"]
    # The Grand Teton device, not the SXM preset: the fitted bf16 peak and its fp8 peak by the same ratio.
    device = sc.hardware(data["torchtitan_rows"][0], registry)
    assert device.peak_flops["bf16"] == 835.5e12 and device.peak_flops["fp8"] == pytest.approx(1978.9e12 * 835.5 / 989.4)
    # Left out, each with its reason; the B200 rowwise row's is hp's own refusal (no fp8_rowwise figure on Blackwell).
    assert len(data["torchtitan_rows_left_out"]) == 5 and all(r["why"] for r in data["torchtitan_rows_left_out"])
    b200 = dict(data["torchtitan_rows"][0], id="rowwise", recipe="torchao-float8-rowwise", hardware="b200")
    with pytest.raises(ConfigError, match="no measured fp8_rowwise GEMM speedup for blackwell"):
        runs.price_torchtitan(b200, registry)


def test_precision_page_torchtitan_table_is_current_and_its_prose_states_its_figures():
    runs = _module()
    found = runs.torchtitan_results()
    page = _current(runs.torchtitan_section(found))
    prose = _prose(page)
    by_id = {r["id"]: r for r in found}
    assert len(found) == 15 and "all fifteen are held out" in prose
    tensorwise = [r for r in found if r["recipe"] == "torchao-float8-tensorwise"]
    rowwise = [r for r in found if r["recipe"] == "torchao-float8-rowwise"]
    assert len(tensorwise) == 9 and len(rowwise) == 6 and "Nine are priced under" in prose and "six, the runs" in prose
    gaps = [r["estimated_speedup"] / r["measured_speedup"] - 1 for r in tensorwise]
    assert f"within {min(gaps):+.1%} to {max(gaps):+.1%} of the measured one" in prose
    # The rowwise rows: every one too fast, as the page says, with its figures.
    errors = [r["error"] for r in rowwise]
    gaps = [r["estimated_speedup"] / r["measured_speedup"] - 1 for r in rowwise]
    assert max(errors) < -0.10
    assert (f"priced too fast on all six rows** ({max(errors):+.1%} to {min(errors):+.1%}; hp's speedup over bf16 "
            f"{min(gaps):+.1%} to {max(gaps):+.1%} over the measured one)") in prose
    tp = [by_id[k] for k in ("tt-fp8-rowwise-8b-fsdp8-tp8", "tt-fp8-rowwise-8b-fsdp8-tp8-asynctp",
                             "tt-fp8-rowwise-70b-fsdp32-tp8", "tt-fp8-rowwise-70b-fsdp32-tp8-asynctp")]
    assert (f"(measured speedups {tp[0]['measured_speedup']:.2f} and {tp[1]['measured_speedup']:.2f} at 8B, "
            f"{tp[2]['measured_speedup']:.2f} and {tp[3]['measured_speedup']:.2f} at 70B, against hp's "
            f"{tp[0]['estimated_speedup']:.2f} and {tp[2]['estimated_speedup']:.2f}-{tp[3]['estimated_speedup']:.2f})") in prose
    assert round(tp[0]["estimated_speedup"], 2) == round(tp[1]["estimated_speedup"], 2)
    one = [by_id[k] for k in ("tt-fp8-8b-fsdp8-lb1-2501-rowwise", "ao-fp8-h100-8b-rowwise")]
    assert (f"measure {one[0]['measured_speedup']:.2f} and {one[1]['measured_speedup']:.2f} times their bf16 baselines, "
            f"hp {one[0]['estimated_speedup']:.2f} and {one[1]['estimated_speedup']:.2f}") in prose
    tp8 = [by_id[k] for k in ("tt-fp8-8b-fsdp8-tp8", "tt-fp8-8b-fsdp8-tp8-asynctp")]
    assert (f"are {tp8[0]['error']:+.1%} and {tp8[1]['error']:+.1%} with their bf16 baselines at "
            f"{tp8[0]['bf16_error']:+.1%} and {tp8[1]['bf16_error']:+.1%}") in prose
    lb1 = [by_id[k] for k in ("tt-fp8-8b-fsdp8-lb1-2501", "ao-fp8-h100-8b-tensorwise")]
    assert (f"batch-1 single-node rows are {lb1[0]['error']:+.1%} and {lb1[1]['error']:+.1%}, their baselines "
            f"{lb1[0]['bf16_error']:+.1%} and {lb1[1]['bf16_error']:+.1%}") in prose
    assert f"differ by {6150 / 5760 - 1:.1%}" in prose
    # The FSDP gather as the June 2025 rows ran it (bf16): a little slower than hp's recipe, as the page states.
    ran = [r["as_run_seconds"] / r["estimated_seconds"] - 1 for r in found if r["as_run_error"] is not None]
    assert len(ran) == 4 and min(ran) > 0
    assert f"priced so (*FSDP gather as run*) they move by {max(ran):.1%} at most" in prose


def test_the_float8_tp_gathers_moved_only_the_tp_rows_as_the_page_states(registry):
    """torchao-float8-tensorwise gathers TP inputs in float8 (tp_gather): what that moved against the same recipe
    gathering them in bf16 (tp_gather false, as it stated before), row by row as docs/precision.md states it."""
    data = _data()
    runs = _module()
    assert registry.precision_recipe("torchao-float8-tensorwise").tp_gather
    found = {r["id"]: r for r in runs.torchtitan_results(registry) if r["recipe"] == "torchao-float8-tensorwise"}
    before, after = {}, {}
    for row in data["torchtitan_rows"]:
        if row["id"] not in found:  # the rowwise rows: their recipe gathers bf16 (no float8 TP plan)
            continue
        bf16_gathers = runs.price_torchtitan(dict(row, gathers_as_run={"tp_gather": False}), registry, gathers_as_run=True)
        before[row["id"]] = bf16_gathers.step_seconds / found[row["id"]]["measured_seconds"] - 1
        after[row["id"]] = found[row["id"]]["error"]
        step = found[row["id"]]["estimated_seconds"] / bf16_gathers.step_seconds - 1
        if "tp" in row["layout"]:
            assert step < 0, row["id"]  # half the bytes in every sequence-parallel all-gather
        else:
            assert step == 0, row["id"]  # no TP, no sequence-parallel gather: the FSDP-only rows do not move
        found[row["id"]]["step"] = step
        found[row["id"]]["gap_before"] = (found[row["id"]]["bf16_seconds"] / bf16_gathers.step_seconds
                                          / found[row["id"]]["measured_speedup"] - 1)
    prose = _prose(_page())
    ids = ("tt-fp8-8b-fsdp8-tp8", "tt-fp8-8b-fsdp8-tp8-asynctp", "tt-fp8-70b-fsdp32-tp8", "tt-fp8-70b-fsdp32-tp8-asynctp",
           "tt-fp8-405b-fsdp16-tp8-asynctp")
    e8, a8, e70, a70, a405 = ids
    step = {k: -found[k]["step"] for k in ids}
    assert f"steps fall by {step[e8]:.1%} (8B) and {step[e70]:.1%} (70B)" in prose
    assert f"({step[a8]:.1%}, {step[a70]:.1%}, {step[a405]:.1%} for 8B, 70B, 405B)" in prose
    assert f"8B TP rows went from {before[e8]:+.1%} to {after[e8]:+.1%} and from {before[a8]:+.1%} to {after[a8]:+.1%}" in prose
    assert (f"the 70B rows from {before[e70]:+.1%} to {after[e70]:+.1%} and from {before[a70]:+.1%} to {after[a70]:+.1%}, "
            f"the 405B row from {before[a405]:+.1%} to {after[a405]:+.1%}") in prose
    mean = lambda errors: sum(map(abs, errors)) / len(errors)
    assert (f"five TP rows' mean absolute error from {mean([before[k] for k in ids]):.1%} to "
            f"{mean([after[k] for k in ids]):.1%}") in prose
    gaps = [r["gap_before"] for r in found.values()]
    now = [r["estimated_speedup"] / r["measured_speedup"] - 1 for r in found.values()]
    assert (f"speedup over bf16 from {min(gaps):+.1%}..{max(gaps):+.1%} to {min(now):+.1%}..{max(now):+.1%} of the "
            "measured one") in prose
    multi = [k for k in found if found[k]["class"] == "multi-node FSDP"]
    assert (f"the multi-node class's from {mean([before[k] for k in multi]):.1%} to "
            f"{mean([after[k] for k in multi]):.1%}") in prose


def test_the_tp_rows_peak_is_the_same_with_float8_saved_inputs(registry):
    """docs/precision.md: under TP torchao keeps float8 linear inputs (hp keeps the gathered ones so, not wo's and
    w2's); the five TP rows recompute those inputs (per-op SAC, full AC), so their peak is the same with every
    linear input kept quantized."""
    import attrs

    from hp_core import api

    data = _data()
    sc = _module()._scale_cases()
    torchao = registry.precision_recipe("torchao-float8-tensorwise")
    variant = attrs.evolve(torchao, name="torchao-saved-float8", saved_input="quantized")
    real = attrs.evolve(registry, precision_recipes=registry.precision_recipes + (variant,))
    rows = [row for row in data["torchtitan_rows"] if "tp" in row["layout"] and row["recipe"] == torchao.name]
    assert len(rows) == 5
    for row in rows:
        runtime = sc.runtime(row, real)
        peaks = [max(s.peak_bytes for s in api.estimate(sc.model(row, real), sc.layout(row), registry=real, runtime=runtime,
                                                          recompute=sc.recompute(row, real),
                                                          precision=attrs.evolve(runtime.precision, recipe=name)).stages)
                 for name in (torchao.name, variant.name)]
        assert peaks[0] == peaks[1], row["id"]


# NVIDIA/dgxc-benchmarking's FP8 rows (dgxc_rows, benchmarks/fp8_dgxc.py).

def _dgxc():
    return load_script("benchmarks/fp8_dgxc.py")


def _step_cells(line: str) -> list[str]:
    """A README table line's cells after its label."""
    return [c.strip() for c in line.strip().strip("|").split("|")][1:]


def test_dgxc_rows_state_their_printed_figure_provenance_and_split():
    data = _data()
    dgxc = _dgxc()
    rows = data["dgxc_rows"]
    # One measurement each (a container, model and scale on one device).
    assert len(rows) == 121 and len({(r["container"], r["model"], r["gpus"], r["hardware"]) for r in rows}) == 121
    # The split rule, fixed before pricing: sorted by container, model, GPUs; alternately, the first calibration. The
    # Nemotron-4 rows and the Grok-1 rows, added later, follow it each among themselves (62 Llama 3.1 and GPT-3 rows,
    # then 35 of Nemotron-4, then 18 of Grok-1); the six DGX-GB200 rows, added last, are all held out.
    key = lambda r: (dgxc.CONTAINERS.index(r["container"]), list(dgxc.MODELS).index(r["model"]), r["gpus"])
    first, nemotron, grok, gb200 = rows[:62], rows[62:97], rows[97:115], rows[115:]
    assert all(r["hardware"] == "h100-sxm" for r in rows[:115]) and all(r["hardware"] == dgxc.GB200 for r in gb200)
    assert not any(r["model"] in dgxc.LATER for r in first) and all(r["model"] in dgxc.NEMOTRON for r in nemotron)
    assert all(r["model"] in dgxc.GROK for r in grok)
    assert sorted(first, key=key) == first and [r["split"] for r in first] == ["calibration", "held_out"] * 31
    assert sorted(nemotron, key=key) == nemotron and [r["split"] for r in nemotron] == ["calibration", "held_out"] * 17 + ["calibration"]
    assert sorted(grok, key=key) == grok and [r["split"] for r in grok] == ["calibration", "held_out"] * 9
    assert sorted(gb200, key=key) == gb200 and {r["split"] for r in gb200} == {"held_out"}
    tables = {}
    for r in rows:
        source = data["sources"][r["source"]]
        sha = r["url"].removeprefix("https://github.com/NVIDIA/dgxc-benchmarking/blob/").split("/")[0]
        assert len(sha) == 40 and sha in source["commit"] and sha in source["url"], r["id"]
        assert r["runtime_options_source"] == r["source"] and r["recipe_source"] in data["sources"], r["id"]
        # Every run gathered FP8 parameters (fp8_params or fp8_param_gather, as its settings state): the recipe as run.
        settings = r["recipe_settings"]
        assert ("fp8_params true" in settings or "fp8_param_gather true" in settings
                or "FP8 parameters gathered in FP8" in settings), r["id"]
        assert r["recipe"] == "fp8-delayed-param-gather" and "fp8-delayed-param-gather" in r["not_priced"][0], r["id"]
        assert not any("has no delayed-scaling recipe" in entry for entry in r["not_priced"]), r["id"]
        # The column's GPUs ('256x H100' or, in the Grok-1 tables from 256 GPUs, '256 H100'; '256x GB200 GPUs').
        device = "GB200" if r["hardware"] == dgxc.GB200 else "H100"
        assert f"{r['gpus']}x {device}" in r["column"] or f" {r['gpus']} {device}" in r["column"], r["id"]
        assert r["gpus"] % (r["tp"] * r["pp"] * r["cp"]) == 0, r["id"]
        tables.setdefault((r["source"], r["table"]), []).append(r)
    # Each figure is the printed cell of its table's row, the columns in ascending GPUs; the BF16 twin's too. One FP8
    # column is skipped (v25.02's Grok-1 FP8 on 1,024 GPUs, dgxc_rows_skipped): its row's later cells sit one further on.
    gap = {("dgxc-v25.02-grok1", "Grok 1 314b FP8"): 7}
    for name, chosen in tables.items():
        for k, r in enumerate(sorted(chosen, key=lambda r: r["gpus"])):
            column = k + (k >= gap[name] if name in gap else 0)
            for entry in (r, r["bf16"]):
                assert _step_cells(entry["row"])[column] == entry["printed"], r["id"]
                assert float(entry["printed"].replace(" ", "")) == entry["step_seconds"], r["id"]


# Hand-checked: the printed step time, and the README's tokens per second of the next line, GBS x sequence / step.
DGXC_BY_HAND = {
    "dgxc24.05-h100-gpt3-175b-fp8-1024g": ("6.72", 2048 * 2048, 624152),
    "dgxc24.09-h100-llama3.1-70b-fp8-64g": ("11.01", 128 * 8192, 95239),
    "dgxc24.12-h100-llama3.1-405b-fp8-96g": ("5.63", 126 * 8192, 183337),
    "dgxc25.02.01-h100-llama3.1-8b-fp8-8g": ("9.33", 128 * 8192, 112388),
    "dgxc25.02.01-h100-llama3.1-405b-fp8-64g": ("6.32", 64 * 8192, 82957),
    "dgxc25.04.01-h100-llama3.1-405b-fp8-512g": ("13.020", 256 * 8192, 161072),
    # Nemotron-4: GBS 4 x GPUs (15B) or GPUs / 4 (340B) of 4,096 tokens; 24.12's 2.12 s at 512 GPUs as 24.09's.
    "dgxc24.09-h100-nemotron4-15b-fp8-16g": ("2.08", 64 * 4096, 126031),
    "dgxc24.09-h100-nemotron4-340b-fp8-2048g": ("3.49", 512 * 4096, 600903),
    "dgxc24.12-h100-nemotron4-15b-fp8-512g": ("2.12", 2048 * 4096, 3956891),
    "dgxc25.02.01-h100-nemotron4-340b-fp8-256g": ("2.93", 64 * 4096, 89469),
    "dgxc25.04.00-h100-nemotron4-15b-fp8-16g": ("1.988", 64 * 4096, 131863),
}


def test_dgxc_rows_measured_seconds_by_hand():
    rows = {r["id"]: r for r in _data()["dgxc_rows"]}
    for name, (printed, tokens, tokens_per_second) in DGXC_BY_HAND.items():
        row = rows[name]
        assert row["printed"] == printed and row["step_seconds"] == float(printed), name
        assert row["global_batch_size"] * row["seq_len"] == tokens, name
        assert abs(tokens / row["step_seconds"] / tokens_per_second - 1) < 1e-4, name
    assert rows["dgxc24.09-h100-llama3.1-405b-fp8-96g"]["bf16"]["printed"] == "8.7  5"  # as printed: 126 x 8192 / 8.75 = 117,965


def test_dgxc_models_and_layer_splits(registry):
    from hp_core import api

    dgxc = _dgxc()
    rows = {r["id"]: r for r in dgxc.rows()}
    # GPT-3 175B by hand: 96 x (12 h^2 + 13 h) at h = 12,288, the 50,257 x h token and 2,048 x h position tables, the last LayerNorm.
    h = 12288
    gpt3 = api.count_parameters(dgxc.model(rows["dgxc24.12-h100-gpt3-175b-fp8-128g"], registry), registry)
    assert gpt3.total == 96 * (12 * h * h + 13 * h) + (50257 + 2048) * h + 2 * h == 174_604_259_328
    split = lambda name: dgxc.fp8_runs.layout(rows[name], dgxc.fp8_runs._decoder_layers(dgxc.model(rows[name], registry)))
    # NeMo 2.0's 405B: the embedding and the loss counted as a layer each; the 30-layer proxy's end chunks hold none.
    assert split("dgxc25.02.01-h100-llama3.1-405b-fp8-64g").layers_per_stage == (0,) + (1,) * 30 + (0,)
    assert split("dgxc25.02.01-h100-llama3.1-405b-fp8-512g").layers_per_stage == (1,) + (2,) * 62 + (1,)
    assert split("dgxc24.09-h100-llama3.1-405b-fp8-2304g").layers_per_stage is None  # NeMo 1.0: 126 over 63 chunks
    proxy = dgxc.model(rows["dgxc24.09-h100-llama3.1-405b-fp8-32g"], registry)
    assert dgxc.fp8_runs._decoder_layers(proxy) == 7 and proxy.layers[0].config.vocab_size == 50257


def _first_mlp_gemm(dgxc, name: str, registry) -> tuple[int, int, int, float]:
    """The largest GEMM of a rank of row *name* (the MLP's first projection) from its priced model and layout: the
    micro-batch's tokens on a rank (micro-batch x sequence / CP), the hidden size, the projection's width on a rank
    ((2 if gated) x FFN / TP), and its TFLOP (2 x tokens x hidden x width)."""
    row = next(r for r in dgxc.rows() if r["id"] == name)
    config = next(g.config for g in dgxc.model(row, registry).layers if g.kind == "dense")
    tokens = row["micro_batch_size"] * row["seq_len"] // row["cp"]
    width = (2 if config.gated_mlp else 1) * config.intermediate_size // row["tp"]
    return tokens, config.hidden_size, width, 2 * tokens * config.hidden_size * width / 1e12


def test_dgxc_model_refuses_an_override_its_preset_does_not_have(registry):
    """A row's ``model_overrides`` key the preset's config lacks (a typo) is refused, naming it, not silently ignored."""
    dgxc = _dgxc()
    row = next(r for r in dgxc.rows() if r["id"] == "dgxc24.09-h100-llama3.1-405b-fp8-32g")
    typo = dict(row, model_overrides=dict(row["model_overrides"], num_hiden_layers=7))
    with pytest.raises(ValueError, match="num_hiden_layers"):
        dgxc.model(typo, registry)
    assert dgxc.fp8_runs._decoder_layers(dgxc.model(row, registry)) == 7  # the row as stated builds


def test_precision_page_dgxc_tables_are_current_and_the_prose_states_their_figures(registry):
    dgxc = _dgxc()
    everything = dgxc.results(registry)
    prose = _prose(_current(dgxc.section(everything)))
    # The prose's first list is of the 62 Llama 3.1 and GPT-3 rows on H100; the Nemotron-4 and Grok-1 rows have their own
    # (below), and so have the DGX-GB200 rows (test_dgxc_gb200_rows_...).
    h100 = [r for r in everything if r["hardware"] != dgxc.GB200]
    found = [r for r in h100 if r["model"] not in dgxc.LATER]
    _grok_prose(prose, [r for r in h100 if r["model"] in dgxc.GROK])
    _nemotron_prose(prose, [r for r in everything if r["model"] in dgxc.NEMOTRON], found, dgxc, registry)
    by_id = {r["id"]: r for r in found}
    assert all(r["estimated_seconds"] <= r["bf16_gather_seconds"] for r in found)  # the FP8 gather moves half the bytes
    base = [abs(r["bf16_error"]) for r in found]
    assert f"within {max(base):.1%} (mean absolute error {sum(base) / len(base):.1%})" in prose
    within = sum(abs(r["error"]) <= 0.10 for r in found)
    assert f"{within} of the 62 FP8 rows are within 10%; the other {62 - within} are all priced too fast" in prose
    assert all(r["error"] < 0 for r in found if abs(r["error"]) > 0.10)
    big = [r for r in found if r["model"] == "llama3-405b" or (r["model"] == "llama3-70b" and r["row"]["cp"] == 1)]
    small = [r for r in found if r not in big]
    span = lambda rs, key, fmt: f"{min(r[key] for r in rs):{fmt}}-{max(r[key] for r in rs):{fmt}}"
    mae = lambda rs: sum(abs(r["error"]) for r in rs) / len(rs)
    assert (f"speedups of {span(big, 'measured_speedup', '.2f')} where hp prices {span(big, 'estimated_speedup', '.2f')}, and "
            f"their step times are within 10% on {sum(abs(r['error']) <= 0.1 for r in big)} of {len(big)} rows (mean absolute "
            f"error {mae(big):.1%}, {min(r['error'] for r in big):+.1%} to {max(r['error'] for r in big):+.1%})") in prose
    fast = sum(r["error"] < 0 for r in small)
    assert (f"measured {span(small, 'measured_speedup', '.2f')} where hp prices {span(small, 'estimated_speedup', '.2f')}: "
            f"{fast} of the {len(small)} are too fast ({min(r['error'] for r in small):+.1%} to {max(r['error'] for r in small):+.1%}, "
            f"mean absolute error {mae(small):.1%}, {sum(abs(r['error']) <= 0.1 for r in small)} within 10%)") in prose
    # All too fast but one within 0.2% (GPT-3 24.12 on 2,048 GPUs, +0.1% since the tied embedding's gradient all-reduce
    # across its pipeline's first and last stages was priced, 2026-12-04).
    assert fast >= len(small) - 1 and max(r["error"] for r in small) < 0.002
    # The largest GEMM of a rank (the MLP's first projection), from each group's model and layout, as the page states it;
    # and Transformer Engine's benchmark shape (15,872 tokens, 4,096 -> 16,384), the one its speedup was measured at.
    assert f"2 x 15,872 x 4,096 x 16,384 = {2 * 15872 * 4096 * 16384 / 1e12:.1f} TFLOP" in prose
    gemm = lambda name: _first_mlp_gemm(dgxc, name, registry)
    for name, (tp, cp) in {"dgxc25.02.01-h100-llama3.1-405b-fp8-512g": (8, 2), "dgxc25.02.01-h100-llama3.1-70b-fp8-64g": (4, 1)}.items():
        tokens, hidden, width, tflop = gemm(name)
        assert f"(TP {tp}, CP {cp}: " in prose and f"2 x {tokens:,} x {hidden:,} x {width:,} = {tflop:.2f} TFLOP)" in prose, name
    eight, seventy, gpt3 = (gemm(n) for n in ("dgxc24.09-h100-llama3.1-8b-fp8-8g", "dgxc24.12-h100-llama3.1-70b-fp8-64g",
                                              "dgxc24.12-h100-gpt3-175b-fp8-128g"))
    assert (f"8B (TP 1, CP 2: {eight[3]:.2f} TFLOP), 70B at CP 2 ({seventy[3]:.2f}) and GPT-3 ({gpt3[0]:,} tokens at TP 4: "
            f"{gpt3[3]:.2f})") in prose
    cp1 = [r for r in found if r["model"] == "llama3-70b" and r["container"] == "nemo:25.02.01"]
    cp2 = [r for r in found if r["model"] == "llama3-70b" and r["container"] == "nemo:24.12"]
    assert (f"measured {span(cp1, 'measured_seconds', '.2f')} s against 24.12's {span(cp2, 'measured_seconds', '.2f')} s (speedups "
            f"{span(cp1, 'measured_speedup', '.2f')} against {span(cp2, 'measured_speedup', '.2f')}), while hp prices CP 1 slower than "
            f"CP 2 ({span(cp1, 'estimated_seconds', '.2f')} s against {span(cp2, 'estimated_seconds', '.2f')} s)") in prose
    # hp prices each layout (one container, model and layer count) within 1% across its scales.
    groups = {}
    for r in found:
        layers = r["row"].get("model_overrides", {}).get("num_hidden_layers")
        groups.setdefault((r["container"], r["model"], r["row"]["pp"], layers), []).append(r)
    assert all(max(r["estimated_seconds"] for r in g) / min(r["estimated_seconds"] for r in g) < 1.01 for g in groups.values())
    worst = [by_id["dgxc24.05-h100-gpt3-175b-fp8-1024g"]["error"], by_id["dgxc24.09-h100-llama3.1-405b-fp8-2304g"]["error"]]
    assert worst[0] == min(r["error"] for r in found)
    assert worst[1] == min(r["error"] for r in found if r["model"] == "llama3-405b")
    assert f"those rows carry the largest errors of their models: {worst[0]:+.1%} and {worst[1]:+.1%}" in prose
    # What the FP8 gather moves: hp's figures as run against fp8-delayed's bf16 gather.
    moved = [r["estimated_seconds"] / r["bf16_gather_seconds"] - 1 for r in found]
    bf16_gathered = sum(abs(r["bf16_gather_error"]) for r in found) / len(found)
    # Since 2026-12-04 the FP8 parameters also save part of the weights' once-a-step cast (a transpose of the stored
    # FP8 copy on Hopper against quantizing the bf16 weight): every row a little faster, the 8B rows by that alone.
    assert (f"moves hp's figures by {max(moved):.1%} to {min(moved):.1%}" in prose and max(moved) < 0
            and f"mean absolute error is {mae(found):.1%} with it and {bf16_gathered:.1%} with a bf16 gather" in prose)
    # The published GEMM measurements the page names, by hand. Transformer Engine's H200 NVL figure read off its
    # pixels: the attention output projection's bars are 46 + 23 (BF16) and 25 + 11 (FP8) pixels high, each edge
    # within half a pixel. TileLang's H800 sweeps (tile-ai/tilelang@b2acfc3): FP16 and FP8 TFLOP/s at M = N = 8,192.
    assert f"1.92x over its three passes (2.67 ms BF16, 1.39 ms FP8; {67 / 38:.2f}-{71 / 34:.2f}" in prose
    assert round((46 + 23) / (25 + 11), 2) == 1.92
    fp16, fp8 = (386, 520, 628, 705, 736, 758, 766), (569, 858, 1129, 1343, 1467, 1507, 1541)
    ratios = [b / a for a, b in zip(fp16, fp8)]
    assert (f"FP8 over FP16 {ratios[0]:.2f}, {ratios[1]:.2f}, {ratios[2]:.2f}, {ratios[3]:.2f} and "
            f"{min(ratios[4:]):.2f}-{max(ratios[4:]):.2f} at K = 256") in prose
    eight = [r["error"] for r in found if r["model"] == "llama3-8b"]
    assert f"the 8B rows', all 4,096 or more, miss by {min(eight):+.1%} to {max(eight):+.1%}" in prose


def _nemotron_prose(prose: str, rows: list[dict], others: list[dict], dgxc, registry) -> None:
    """Pins of the Nemotron-4 list of docs/precision.md to the 35 rows' figures."""
    mae = lambda rs, key="error": sum(abs(r[key]) for r in rs) / len(rs)
    span = lambda rs, key, fmt: f"{min(r[key] for r in rs):{fmt}}-{max(r[key] for r in rs):{fmt}}"
    assert len(rows) == 35
    within = sum(abs(r["error"]) <= 0.10 for r in rows)
    assert (f"{within} of the 35 are within 10%** (mean absolute error {mae(rows):.1%}, {min(r['error'] for r in rows):+.1%} to "
            f"{max(r['error'] for r in rows):+.1%}) and the BF16 twins within {max(abs(r['bf16_error']) for r in rows):.1%} "
            f"(mean absolute error {mae(rows, 'bf16_error'):.1%})") in prose
    # Priced slow: NeMo 25.02.01's four 340B rows, whose BF16 twins are slow too, and NeMo 24.12's 15B on 16 GPUs (only
    # NeMo 25.02.01's 340B on 256 GPUs, at +0.2%, before the backward GEMMs took Hopper's split-accumulator rate,
    # docs/precision.md "Time"); hp's FP8 speedup above the measured one on every row.
    slow = [r for r in rows if r["error"] >= 0]
    fifteen_16 = "dgxc24.12-h100-nemotron4-15b-fp8-16g"
    nemo2_340 = [r for r in slow if r["id"] != fifteen_16]
    # NeMo 24.12's 15B on 16 GPUs was slow (+0.1%) until its MLP's two GEMMs of one per-rank shape (TP 4) were
    # each listed (2026-12-03); it is now priced fast.
    assert {r["id"] for r in slow} == {r["id"] for r in nemo2_340}
    fifteen = next(r for r in rows if r["id"] == fifteen_16)
    # NeMo 25.04.00's two rows run Transformer Engine 2.2's default userbuffers config (16-SM margins on six GEMM passes,
    # tp_comm_overlap_cfg te_default: NeMo's script names none and b4148d21 pins TE 2.2.0.dev0), which prices them slower.
    later = [r for r in rows if r["id"].startswith("dgxc25.04.00")]
    # Six slow -> three (the split-accumulation 1.8547 and the per-size Hopper FP8 speedups, 2026-12-04) -> six again (the
    # cached weights' once-a-step quantization, the same day): 25.02.01's four 340B rows and 25.04.00's two, each within
    # 2.3% over.
    four = [r for r in nemo2_340 if r["id"].startswith("dgxc25.02.01-h100-nemotron4-340b")]
    assert len(nemo2_340) == 6 and sorted(r["row"]["gpus"] for r in four) == [256, 512, 1024, 2048]
    assert sorted(r["id"] for r in later) == ["dgxc25.04.00-h100-nemotron4-15b-fp8-16g", "dgxc25.04.00-h100-nemotron4-340b-fp8-256g"]
    assert all(0 <= r["error"] < 0.025 for r in nemo2_340) and {r["id"] for r in later} <= {r["id"] for r in nemo2_340}
    f15, f340 = sorted(later, key=lambda r: r["id"])
    assert (f"29 rows are priced too fast and six slow: NeMo 25.02.01's four 340B rows "
            f"({min(r['error'] for r in four):+.1%} to {max(r['error'] for r in four):+.1%}, their BF16 twins "
            f"{min(r['bf16_error'] for r in four):+.1%} to {max(r['bf16_error'] for r in four):+.1%}) and NeMo 25.04.00's 15B "
            f"and 340B ({f15['error']:+.1%} and {f340['error']:+.1%}, their BF16 twins {f15['bf16_error']:+.1%} and "
            f"{f340['bf16_error']:+.1%}, under Transformer Engine 2.2's default userbuffers config)") in prose
    assert f"NeMo 24.12's 15B on 16 GPUs, slow until 2026-12-03, is {fifteen['error']:+.1%};" in prose
    assert all(r["speedup_gap"] > 0 for r in rows)
    assert (f"({span(rows, 'estimated_speedup', '.2f')} against {span(rows, 'measured_speedup', '.2f')})") in prose
    # The per-rank first MLP GEMM (ungated: h to FFN / TP) from each model and layout, as the page states it (15B the same
    # at TP 4 with micro-batch 4 and TP 2 with micro-batch 2); the error between the other rows' two groups.
    fifteen, fifteen_tp2, big_gemm = (_first_mlp_gemm(dgxc, n, registry) for n in (
        "dgxc24.09-h100-nemotron4-15b-fp8-16g", "dgxc25.02.01-h100-nemotron4-15b-fp8-16g", "dgxc25.02.01-h100-nemotron4-340b-fp8-256g"))
    assert fifteen[3] == fifteen_tp2[3]
    for (tokens, hidden, width, tflop), which in ((fifteen, "15B"), (big_gemm, "340B")):
        assert f"2 x {tokens:,} x {hidden:,} x {width:,} = {tflop:.2f} TFLOP for {which}" in prose, which
    big = [r for r in others if r["model"] == "llama3-405b" or (r["model"] == "llama3-70b" and r["row"]["cp"] == 1)]
    small = [r for r in others if r not in big]
    assert mae(big) < mae(rows) < mae(small)
    assert f"their mean absolute error, {mae(rows):.1%}, is between the larger GEMMs' {mae(big):.1%} and the smaller GEMMs' {mae(small):.1%}" in prose
    # NeMo 24.09's 340B: slower with scale than hp prices it; the largest error at 2,048 GPUs.
    by_gpus = {r["row"]["gpus"]: r for r in rows if r["container"] == "nemo:24.09" and r["model"] == "nemotron-4-340b"}
    a, b = by_gpus[128], by_gpus[2048]
    assert (f"{a['measured_seconds']:.2f} s at 128 GPUs to {b['measured_seconds']:.2f} s at 2,048 (BF16 {a['bf16_measured_seconds']:.2f} s to "
            f"{b['bf16_measured_seconds']:.2f} s), where hp prices {a['estimated_seconds']:.2f} s to {b['estimated_seconds']:.2f} s (BF16 "
            f"{a['bf16_seconds']:.2f} s to {b['bf16_seconds']:.2f} s); its largest error is there, {b['error']:+.1%} at 2,048 GPUs") in prose
    assert b is max(rows, key=lambda r: abs(r["error"]))
    nemo2 = [r for r in rows if r["container"] == "nemo:25.02.01" and r["model"] == "nemotron-4-340b"]
    assert (f"340B BF16 runs are priced {span(nemo2, 'bf16_error', '.1%').replace('%-', '-')} slow** and its FP8 runs "
            f"{min(r['error'] for r in nemo2):+.1%} to {max(r['error'] for r in nemo2):+.1%}") in prose
    near = [r for r in rows if r["model"] == "nemotron-4-340b" and r["container"] in ("nemo:25.02.01", "nemo:25.04.00")]
    rest = [r for r in rows if r not in near]
    # The smallest gap of any Nemotron-4 row is one of NeMo 2.0's 340B rows, though the two ranges overlap.
    assert min(r["speedup_gap"] for r in near) < min(r["speedup_gap"] for r in rest) < max(r["speedup_gap"] for r in near)
    assert (f"(hp's {min(r['speedup_gap'] for r in near):.1%} to {max(r['speedup_gap'] for r in near):.1%} above them, against "
            f"{min(r['speedup_gap'] for r in rest):.1%} to {max(r['speedup_gap'] for r in rest):.1%} on every other Nemotron-4 row)") in prose
    moved = {m: [r["estimated_seconds"] / r["bf16_gather_seconds"] - 1 for r in rows if r["model"] == m] for m in ("nemotron-4-15b", "nemotron-4-340b")}
    # The 15B's gather is hidden either way: what the FP8 parameters save there is the once-a-step cast of the weights
    # (a transpose of the stored FP8 copy on Hopper, 2 bytes an element, against quantizing the bf16 weight, 4).
    assert max(map(abs, moved["nemotron-4-15b"])) < 0.003
    assert (f"moves the 340B figures by up to {min(moved['nemotron-4-340b']):.1%} and the 15B ones by "
            f"{min(moved['nemotron-4-15b']):.1%} to {max(moved['nemotron-4-15b']):.1%}" in prose
            and f"with a bf16 gather the mean absolute error would be {mae(rows, 'bf16_gather_error'):.1%}" in prose)


def test_dgxc_nemotron_rows_recompute_and_reduce_as_their_configs(registry):
    from hp_core import api

    dgxc = _dgxc()
    rows = {r["id"]: r for r in dgxc.rows() if r["model"] in dgxc.NEMOTRON}
    # Only NeMo 24.09's 340B recomputes (activations_checkpoint_granularity selective); only NeMo 24.12's 15B reduces
    # gradients in fp32 (mcore_distributed_optim with no grad_sync_dtype).
    assert {i for i, r in rows.items() if "recompute" in r} == {i for i in rows if i.startswith("dgxc24.09-h100-nemotron4-340b")}
    assert {i for i, r in rows.items() if r["runtime_options"]["grad_reduce_in_fp32"]} == {
        i for i in rows if i.startswith("dgxc24.12-h100-nemotron4-15b")}
    # The recompute is priced: core attention again in backward makes the step longer than without it.
    row = rows["dgxc24.09-h100-nemotron4-340b-fp8-128g"]
    bare = {k: v for k, v in row.items() if k != "recompute"}
    assert dgxc.price(row, registry).step_seconds > dgxc.price(bare, registry).step_seconds
    # 96 layers over PP 8 x VP 12: one a chunk, Megatron-Core's even split (no account_for_* split in NeMo's nemotron trainer).
    built = dgxc.model(row, registry)
    assert dgxc.fp8_runs._decoder_layers(built) == 96 and dgxc.fp8_runs.layout(row, 96).layers_per_stage is None
    # The presets' sizes: untied 256,000-token embeddings and output, GQA with 8 of 48 (15B) or 96 (340B) heads.
    for name, (h, ffn, layers, heads) in {"dgxc24.09-h100-nemotron4-15b-fp8-16g": (6144, 24576, 32, 48),
                                          "dgxc24.09-h100-nemotron4-340b-fp8-128g": (18432, 73728, 96, 96)}.items():
        kv = 8 * h // heads
        per_layer = h * h + 2 * h * kv + h * h + 2 * h * ffn + 4 * h  # QKV, output, ungated MLP, two LayerNorms
        total = layers * per_layer + 2 * 256000 * h + 2 * h
        assert api.count_parameters(dgxc.model(rows[name], registry), registry).total == total, name



def test_dgxc_grok_rows_state_their_layout_model_and_skipped_cell(registry):
    from hp_core import api

    dgxc = _dgxc()
    data = _data()
    rows = {r["id"]: r for r in dgxc.rows() if r["model"] in dgxc.GROK and r["hardware"] != dgxc.GB200}
    # Nine columns of the nemo:dev image (v24.11.1), eight of 24.12 (v25.02; its 1,024-GPU FP8 cell skipped) and the
    # 512-GPU H100 column of 25.04.00 (v25.05.02).
    assert len(rows) == 18 and sum(r["container"] == "nemo:24.12" for r in rows.values()) == 8
    assert "dgxc24.12-h100-grok1-314b-fp8-1024g" not in rows
    skipped = next(s for s in data["dgxc_rows_skipped"] if "Throughput on 1024 H100 GPUs" in s["row"])
    # 17.01 s is printed, but the printed 981,295 tokens/s and 25.24% MFU both follow from 17.10 s.
    assert "17.01" in skipped["row"] and "981295" in skipped["row"]
    assert 8192 * 2048 / 17.01 == pytest.approx(986315, abs=1) and 8192 * 2048 / 981295 == pytest.approx(17.097, abs=1e-3)
    assert 2048 * 4.27e15 / 17.097 / 1024 / 1979e12 == pytest.approx(0.2524, abs=5e-5)
    for r in rows.values():
        # GPUs = TP x PP x CP x DP; the printed figure and its tokens per second (sequence x GBS / step, to the rounding).
        dp = r["gpus"] // (r["tp"] * r["pp"] * r["cp"])
        assert dp * r["tp"] * r["pp"] * r["cp"] == r["gpus"] and dp % r["ep"] == 0, r["id"]
        assert r["recipe_source"] == ("dgxc-nemo2-fp8" if r["container"] == "nemo:25.04.00" else "dgxc-nemo1-fp8")
        assert r["moe"] == {"expert_capacity_factor": 1.0, "pad_expert_input_to_capacity": True}
        assert r["etp"] == (1 if r["container"] == "nemo:25.04.00" else r["tp"]) and r["tp"] == 4  # NeMo 1.0: experts split over TP
        built = dgxc.model(r, registry)
        moe = next(g.config for g in built.layers if g.kind == "moe")
        assert (moe.capacity_factor, moe.pad_to_capacity) == (1.0, True)
        assert dgxc.fp8_runs.layout(r, dgxc.fp8_runs._decoder_layers(built)).etp == r["etp"]
    # Hand-checked: the printed step time and the README's tokens per second, sequence x GBS / step.
    for name, (printed, tokens, tokens_per_second) in {"dgxcdev-h100-grok1-314b-fp8-8g": ("19.89", 4096 * 1024, 210875),
                                                        "dgxc24.12-h100-grok1-314b-fp8-2048g": ("17.30", 8192 * 4096, 1939562),
                                                        "dgxc25.04.00-h100-grok1-314b-fp8-512g": ("13.433", 8192 * 1024, 624478)}.items():
        r = rows[name]
        assert r["printed"] == printed and r["global_batch_size"] * r["seq_len"] == tokens
        assert tokens / r["step_seconds"] == pytest.approx(tokens_per_second, rel=2e-4), name
    # The model as run: 64 layers of NeMo's Grok-1 (316,454,737,920 parameters, by hand in test_scale_cases.py), its
    # 2-layer proxy on 8 GPUs; SwiGLU experts under NeMo 2.0.
    full = api.count_parameters(dgxc.model(rows["dgxcdev-h100-grok1-314b-fp8-512g"], registry), registry).total
    assert full == 316_454_737_920
    assert dgxc.fp8_runs._decoder_layers(dgxc.model(rows["dgxcdev-h100-grok1-314b-fp8-8g"], registry)) == 2
    assert rows["dgxc25.04.00-h100-grok1-314b-fp8-512g"]["hf"]["hidden_act"] == "silu"


def _grok_prose(prose: str, rows: list[dict]) -> None:
    """Pins of the Grok-1 list of docs/precision.md to the 18 rows' figures."""
    mae = lambda rs, key="error": sum(abs(r[key]) for r in rs) / len(rs)
    assert len(rows) == 18 and all(r["error"] < 0 for r in rows)
    assert (f"All 18 are priced too fast, {sum(r['error'] < -0.10 for r in rows)} of them by more than 10%** (mean absolute "
            f"error {mae(rows):.1%}, "
            f"{min(r['error'] for r in rows):+.1%} to {max(r['error'] for r in rows):+.1%})") in prose
    nemo1 = [r for r in rows if r["container"] != "nemo:25.04.00"]
    span = lambda rs, key, fmt: f"{min(r[key] for r in rs):{fmt}}-{max(r[key] for r in rs):{fmt}}"
    assert (f"BF16 twins of the NeMo 1.0 rows are {min(r['bf16_error'] for r in nemo1):+.1%} to "
            f"{max(r['bf16_error'] for r in nemo1):+.1%}") in prose
    assert (f"hp's FP8 speedup is {span(nemo1, 'estimated_speedup', '.2f')} on the NeMo 1.0 rows, the measured one "
            f"{span(nemo1, 'measured_speedup', '.2f')} (hp's {min(r['speedup_gap'] for r in nemo1):.1%} to "
            f"{max(r['speedup_gap'] for r in nemo1):.1%} above it)") in prose
    worst = sorted(rows, key=lambda r: r["error"])[:2]
    # (The dev image's 2-layer proxy on 8 GPUs second before its one local expert was priced as the SequentialMLP it
    # ran, 2026-12-03; the two the other way round before one local expert's permutation skipped its sort, 2026-12-02.)
    assert [r["id"] for r in worst] == ["dgxc24.12-h100-grok1-314b-fp8-64g", "dgxc24.12-h100-grok1-314b-fp8-2048g"]
    assert (f"The largest errors, {worst[0]['error']:+.1%} and {worst[1]['error']:+.1%} (24.12 on 64 and on 2,048 GPUs), are on "
            f"rows whose BF16 twins are among the furthest too fast ({worst[0]['bf16_error']:+.1%} "
            f"and {worst[1]['bf16_error']:+.1%})") in prose
    # Those twins are among the four most negative of the 17 NeMo 1.0 twins (the first and the fourth).
    assert all(r["bf16_error"] in sorted(x["bf16_error"] for x in nemo1)[:4] for r in worst)
    nemo2 = next(r for r in rows if r["container"] == "nemo:25.04.00")
    assert (f"NeMo 2.0 on 512 GPUs: {nemo2['error']:+.1%} for FP8, {nemo2['bf16_error']:+.1%} for its BF16 twin.** Its measured "
            f"FP8 speedup is {nemo2['measured_speedup']:.2f} where hp prices {nemo2['estimated_speedup']:.2f} "
            f"({nemo2['speedup_gap']:.1%} above it)") in prose
    moved = [r["estimated_seconds"] / r["bf16_gather_seconds"] - 1 for r in rows]
    assert max(moved) <= 0 and (f"moves these figures by 0 to {min(moved):.1%}; with a bf16 gather the mean absolute error "
                                f"would be {mae(rows, 'bf16_gather_error'):.1%}") in prose


def test_dgxc_grok_speedups_are_the_lowest_and_the_prose_states_the_compute(registry):
    dgxc = _dgxc()
    found = dgxc.results(registry)
    grok = [r for r in found if r["model"] in dgxc.GROK and r["container"] != "nemo:25.04.00"]
    others = [r for r in found if r["model"] not in dgxc.GROK]
    assert max(r["measured_speedup"] for r in grok) < min(r["measured_speedup"] for r in others)
    # On 512 GPUs (the dev image): hp's compute in bf16 and in FP8, and the expert all-to-all it leaves exposed.
    row = next(r for r in dgxc.rows() if r["id"] == "dgxcdev-h100-grok1-314b-fp8-512g")
    fp8, bf16 = dgxc.price(row, registry), dgxc.price(row, registry, bf16=True)
    a2a = next(exposed for name, _, exposed in fp8.stages[0].communication_by_group if name == "ep")
    prose = _prose(_page())
    assert (f"on 512 GPUs hp's compute goes from {bf16.compute_seconds:.2f} s to {fp8.compute_seconds:.2f} s); the expert "
            f"all-to-all ({a2a * fp8.micro_batches:.2f} s a step exposed, unchanged)") in prose


def test_dgxc_gb200_rows_state_their_release_layout_and_the_page_states_their_figures(registry):
    """The DGX-GB200 rows (Llama 3.1 405B of v25.05, Grok-1 of v25.05.01): the printed cells, the layouts the README tables
    and launch.sh state, held out, priced on the gb200 preset; the page's GB200 list pinned to today's figures."""
    from unittest import mock

    import attrs

    from hp_core import api

    dgxc = _dgxc()
    data = _data()
    rows = {r["id"]: r for r in dgxc.rows() if r["hardware"] == dgxc.GB200}
    assert sorted(rows) == sorted([f"dgxc25.04.00-gb200-grok1-314b-fp8-{g}g" for g in (128, 256, 512)]
                                  + [f"dgxc25.04.01-gb200-llama3.1-405b-fp8-{g}g" for g in (128, 256, 512)])
    assert all(r["split"] == "held_out" for r in rows.values())
    # The skip entries the collection resolved are gone; none of the remaining ones names a GB200 table.
    assert not any("GB200" in s["row"] for s in data["dgxc_rows_skipped"])
    # Hand-checked against the README: the printed step time and, on the next line, tokens per second = GBS x 8,192 / step
    # (64, 128 and 256 sequences for the 405B; 256 and 512 for Grok-1 on 128 and 256 GPUs).
    by_hand = {"dgxc25.04.01-gb200-llama3.1-405b-fp8-128g": ("6.131", 64, 85514),
               "dgxc25.04.01-gb200-llama3.1-405b-fp8-256g": ("6.183", 128, 169590),
               "dgxc25.04.01-gb200-llama3.1-405b-fp8-512g": ("6.244", 256, 335867),
               "dgxc25.04.00-gb200-grok1-314b-fp8-128g": ("5.298", 256, 395838.43),
               "dgxc25.04.00-gb200-grok1-314b-fp8-256g": ("5.224", 512, 802891.27)}
    for name, (printed, gbs, tokens_per_second) in by_hand.items():
        r = rows[name]
        assert r["printed"] == printed and r["global_batch_size"] == gbs and r["seq_len"] == 8192, name
        assert gbs * 8192 / r["step_seconds"] == pytest.approx(tokens_per_second, rel=1e-5), name
    # Grok-1 on 512 GPUs: the printed 807,684 tokens/s is 512 sequences over the step, the 33.6% MFU 1,024 (the README's GBS).
    big = rows["dgxc25.04.00-gb200-grok1-314b-fp8-512g"]
    assert big["global_batch_size"] == 1024 and 512 * 8192 / 5.193 == pytest.approx(807684, abs=1)
    assert round(1024 * 4.27e15 / 5.193 / 512 / 4.9e15, 3) == 0.336 and "807,684" in data["sources"][big["source"]]["commit"]
    h100_grok = next(r for r in dgxc.rows() if r["id"] == "dgxc25.04.00-h100-grok1-314b-fp8-512g")
    for r in rows.values():
        dp = r["gpus"] // (r["tp"] * r["pp"] * r["cp"])
        if r["model"] == "llama3-405b":
            assert (r["tp"], r["pp"], r["cp"], r["vpp"], dp, r["global_batch_size"]) == (4, 8, 2, 8, r["gpus"] // 64, r["gpus"] // 2)
            assert "model_overrides" not in r  # the whole 126 layers at every scale
            split = dgxc.fp8_runs.layout(r, dgxc.fp8_runs._decoder_layers(dgxc.model(r, registry)))
            assert split.layers_per_stage == (1,) + (2,) * 62 + (1,)
        else:
            assert (r["tp"], r["pp"], r["cp"], r["vpp"], r["ep"], r["etp"]) == (4, 1, 1, 1, 8, 4) and dp % r["ep"] == 0
            assert r["global_batch_size"] == 2 * r["gpus"] and r["hf"] == h100_grok["hf"] and r["moe"] == h100_grok["moe"]
            assert "overlap_p2p_communication" not in r["runtime_options"]  # PP 1
            assert any("CUDA graphs" in entry for entry in r["not_priced"])
            # launch.sh ET: 8 at v25.05, 4 (the README's ETP) from v25.05.01, the row's source.
            assert "v25.05.01" in data["sources"][r["source"]]["commit"] and "ET=8" in data["sources"][r["source"]]["commit"]
    found = [r for r in dgxc.results(registry) if r["hardware"] == dgxc.GB200]
    # At the runs' 64 GPUs an NVLink domain (sbatch --segment 16) hp's figures are the preset's (72 a domain) to 0.001%.
    registry_class = type(registry)
    preset = registry_class.hardware_preset

    def segment(self, name):
        p = preset(self, name)
        return attrs.evolve(p, spec=attrs.evolve(p.spec, devices_per_node=64))

    with mock.patch.object(registry_class, "hardware_preset", segment):
        for r in found:
            assert dgxc.price(r["row"], registry).step_seconds == pytest.approx(r["estimated_seconds"], rel=1e-5), r["id"]
    prose = _prose(_page())
    llama = [r for r in found if r["model"] == "llama3-405b"]
    grok = [r for r in found if r["model"] == "grok1-314b"]
    span = lambda rs, key, fmt: f"{min(r[key] for r in rs):{fmt}} to {max(r[key] for r in rs):{fmt}}"
    assert (f"Llama 3.1 405B: {span(llama, 'error', '+.1%')} ({sum(abs(r['error']) <= 0.10 for r in llama)} within 10%), its BF16 "
            f"twins {span(llama, 'bf16_error', '+.1%')}.**") in prose
    assert (f"hp prices each scale at {min(r['estimated_seconds'] for r in llama):.2f}-{max(r['estimated_seconds'] for r in llama):.2f} s "
            f"against {min(r['measured_seconds'] for r in llama):.2f}-{max(r['measured_seconds'] for r in llama):.2f} s measured, and an FP8 "
            f"speedup of {llama[0]['estimated_speedup']:.2f} where the runs measured "
            f"{min(r['measured_speedup'] for r in llama):.2f}-{max(r['measured_speedup'] for r in llama):.2f} (hp's "
            f"{min(r['speedup_gap'] for r in llama):.1%} to {max(r['speedup_gap'] for r in llama):.1%} above it)") in prose
    assert len({round(r["estimated_speedup"], 2) for r in llama}) == 1
    # All within 10% since one local expert's permutation skips its sort (2026-12-02; +11.2% to +13.1% before).
    assert (f"Grok-1: {span(grok, 'error', '+.1%')} (all within 10%), its BF16 twins {span(grok, 'bf16_error', '+.1%')}.**" in prose
            and all(0 < r["error"] < 0.10 for r in grok))
    # Grok-1's host floor (SequentialMLP's two linears a layer since 2026-12-03) leaves its speedup 1.49-1.50 by scale.
    assert (f"hp's FP8 speedup is {span(grok, 'estimated_speedup', '.2f')} where the runs measured "
            f"{min(r['measured_speedup'] for r in grok):.2f}-{max(r['measured_speedup'] for r in grok):.2f} "
            f"({min(r['speedup_gap'] for r in grok):.1%} to {max(r['speedup_gap'] for r in grok):.1%} above it)") in prose
    # The same containers' H100 rows the page compares with.
    h100 = {r["id"]: r for r in dgxc.results(registry) if r["id"] in ("dgxc25.04.01-h100-llama3.1-405b-fp8-512g",
                                                                        "dgxc25.04.00-h100-grok1-314b-fp8-512g")}
    l_h100 = h100["dgxc25.04.01-h100-llama3.1-405b-fp8-512g"]
    assert f"25.04.01: {l_h100['error']:+.1%}, its BF16 twin {l_h100['bf16_error']:+.1%})" in prose
    assert f"H100 row's BF16 twin is ({h100['dgxc25.04.00-h100-grok1-314b-fp8-512g']['bf16_error']:+.1%})" in prose
    # On 128 GPUs: hp's compute alone and the communication it exposes, by group, as the page states them.
    for name, key in (("dgxc25.04.01-gb200-llama3.1-405b-fp8-128g", "405b"), ("dgxc25.04.00-gb200-grok1-314b-fp8-128g", "grok")):
        row = rows[name]
        fp8, bf16 = dgxc.price(row, registry), dgxc.price(row, registry, bf16=True)
        if key == "405b":
            assert (f"hp's bf16 compute alone is {bf16.compute_seconds:.2f} s against a measured {row['bf16']['step_seconds']:.2f} s step "
                    f"(its FP8 compute {fp8.compute_seconds:.2f} s against {row['step_seconds']:.2f} s)") in prose
            assert fp8.compute_seconds < bf16.compute_seconds < row["bf16"]["step_seconds"]
        else:
            exposed = {g: e * fp8.micro_batches for g, _, e in fp8.stages[0].communication_by_group}
            assert (f"compute alone is {fp8.compute_seconds:.2f} s (FP8) and {bf16.compute_seconds:.2f} s (BF16) against measured steps of "
                    f"{row['step_seconds']:.2f} s and {row['bf16']['step_seconds']:.2f} s, and it exposes "
                    f"{fp8.breakdown_seconds['communication']:.2f} s of communication") in prose
            assert (f"reduce-scatters ({exposed['etp']:.2f} s), the expert all-to-all ({exposed['ep']:.2f} s) and what the TP overlap "
                    f"leaves of the TP collectives ({exposed['tp']:.2f} s)") in prose
    moved = lambda rs: max(r["estimated_seconds"] for r in rs) / min(r["estimated_seconds"] for r in rs) - 1
    measured = lambda rs: max(r["measured_seconds"] for r in rs) / min(r["measured_seconds"] for r in rs) - 1
    assert (f"hp's figures move by {moved(llama):.1%} (405B) and {moved(grok):.1%} (Grok-1) from 128 to 512 GPUs, the measured ones by "
            f"{measured(llama):.1%} and {measured(grok):.1%}") in prose
    # The FP8 gather hidden on every row: the bf16 gather column differs by the once-a-step quantization of the
    # weights the FP8 parameters already hold (hp_core/engine/timing/stage_weights.py; per-tensor FP8 on Blackwell
    # keeps one copy, so the stored recipe quantizes nothing then).
    casts = [dgxc.price(rows[r["id"]], registry, recipe=dgxc.BF16_GATHER).provenance["cached_weight_quantize_seconds"]
             for r in found]
    assert all(r["bf16_gather_seconds"] - r["estimated_seconds"] == pytest.approx(c, rel=1e-9) for r, c in zip(found, casts))
    assert (f"the bf16 gather column is {min(casts):.3f} to {max(casts):.3f} s slower: the once-a-step quantization of the "
            "weights the FP8 parameters already hold") in prose


# NeMo's own performance pages (nemo_rows): the 24.07 summary on H100 and the 25.04 long-sequence rows on B200.
NEMO_SUMMARY_COMMITS = {"nemo-24.07-164b009": "164b0097f83a187ccfea1513ea5ef76679569dd9",
                        "nemo-24.07-ccef6aa": "ccef6aab5a09eef240cbb7f3c276753b8952079a",
                        "nemo-24.07-9c5c5e9": "9c5c5e9709407d3511005fc966e45374998bb478"}


def _nemo_cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_nemo_rows_state_their_printed_row_provenance_and_model(registry):
    """Each row is its commit's printed row (layout and figure), held out, its model the one NeMo's FLOPs count counted:
    that count with the row's shape turns the printed tokens/s/GPU into the printed model TFLOP/s/GPU."""
    runs = _module()
    data = _data()
    rows = [r for r in data["nemo_rows"] if r["collection"] in runs.NEMO_COLLECTIONS]  # the 25.x summaries: test_fp8_runs_nemo_summaries.py
    assert len(rows) == 39 and all(r["split"] == "held_out" and r["source"] in data["sources"] for r in rows)
    assert all(r["recipe_source"] in data["sources"] and r["assumptions"] and r["not_priced"] for r in rows)
    summary = [r for r in rows if r["collection"] == "nemo-24.07-summary"]
    long = [r for r in rows if r["collection"] == "nemo-25.04-long-sequence"]
    assert len(summary) == 31 and len(long) == 8
    assert [sum(r["source"] == s for r in summary) for s in NEMO_SUMMARY_COMMITS] == [10, 12, 9]
    for row in summary:
        commit = NEMO_SUMMARY_COMMITS[row["source"]]
        assert row["url"] == f"https://github.com/NVIDIA/NeMo/blob/{commit}/docs/source/performance/performance_summary.md"
        # Model, #-GPUs, GBS, MBS, Sequence Length, TP, PP, CP, VP, Tokens / sec / GPU, Model TFLOP / sec / GPU, days
        cells = _nemo_cells(row["row"])
        assert len(cells) == 12 and cells[0].lower().replace("-", "") in row["model"].replace("-", "").replace("nemotron4", "nemotron")
        layout = [int(c) for c in cells[1:10]]
        assert layout == [row[k] for k in ("gpus", "global_batch_size", "micro_batch_size", "seq_len", "tp", "pp", "cp", "vpp",
                                           "tokens_per_second_per_gpu")], row["id"]
        assert int(cells[10].split("]")[0].strip("[")) == row["model_tflops_per_gpu"], row["id"]
        assert row["hardware"] == "h100-sxm" and row["recipe"] == "fp8-delayed" and row["recipe_source"] == "nemo-24.07"
        # NeMo's count: tokens/s/GPU x FLOPs per token = the printed TFLOP/s/GPU (within 1: both are rounded).
        per_token = runs.nemo_model_flops(row) / (row["global_batch_size"] * row["seq_len"])
        assert abs(row["tokens_per_second_per_gpu"] * per_token / 1e12 - row["model_tflops_per_gpu"]) < 1.0, row["id"]
        assert all(c in NEMO_SUMMARY_COMMITS.values() and c != commit for c in row.get("printed_again_at", [])), row["id"]
    # The 164b0097f8 figures of LLAMA3-8B and 70B are rows' nemo24.07-h100-llama3-*-fp8, not repeated here.
    kept = {(r["gpus"], r["tokens_per_second_per_gpu"]) for r in data["rows"] if r["source"] == "nemo-24.07"}
    assert kept == {(8, 12036), (64, 1533)} and not kept & {(r["gpus"], r["tokens_per_second_per_gpu"]) for r in summary}
    # NeMo's count gives their printed 697 and 738 TFLOP/s too (Llama 3 8B and 70B: 32 and 80 layers, GQA of 8 groups).
    shapes = {8: (32, 4096, 14336, 32, 697), 64: (80, 8192, 28672, 64, 738)}
    for row in (r for r in data["rows"] if r["source"] == "nemo-24.07"):
        layers, hs, ffn, heads, printed = shapes[row["gpus"]]
        counted = dict(row, nemo_flops={"formula": "llama3", "layers": layers, "hs": hs, "ffn_hs": ffn, "attention_heads": heads,
                                        "query_groups": 8})
        per_token = runs.nemo_model_flops(counted) / (row["global_batch_size"] * row["seq_len"])
        assert abs(row["tokens_per_second_per_gpu"] * per_token / 1e12 - printed) < 1.0, row["id"]
    # One measurement a row: no two rows of a layout print the same figure.
    assert len({(r["model"], r["gpus"], r["tokens_per_second_per_gpu"]) for r in summary}) == 31
    for row in long:
        assert row["url"].startswith("https://github.com/NVIDIA/NeMo/blob/14d427f575ee0c3be2719ef7f7c4ecad1b6b45e5/")
        # SeqLen (K), # of GPUs, Batch Size, TP, CP, DP, TFLOPS / GPU at 14d427f575: the GPUs are TP x CP x DP.
        k, gpus, batch, tp, cp, dp, tflops = _nemo_cells(row["row"])
        assert [int(k) * 1024, int(gpus), int(batch), int(tp), int(cp)] == [row[x] for x in ("seq_len", "gpus", "global_batch_size", "tp", "cp")]
        assert int(gpus) == int(tp) * int(cp) * int(dp) and row["pp"] == 1 and int(tflops.replace(",", "")) == row["model_tflops_per_gpu"]
        # The later HTML row: the same layout and figure, four times the GPUs.
        later = row["row_later"].split(": ", 1)[1].split(" | ")
        assert later[0] == k and int(later[1]) == 4 * int(gpus) and later[2] == batch and later[4:8] == [tp, "1", dp, cp]
        assert later[8] == tflops and row["hardware"] == "b200" and row["recipe"] == "fp8-delayed-param-gather"
    for row in rows:
        # nemo_flops states the model hp prices: its decoder layers' count and shape.
        model = runs.row_model(row, registry)
        body = [g for g in model.layers if g.kind == "dense"]
        config, flops = body[0].config, row["nemo_flops"]
        assert [sum(g.count for g in body), config.hidden_size, config.intermediate_size, config.num_attention_heads,
                config.num_key_value_heads] == [flops[k] for k in ("layers", "hs", "ffn_hs", "attention_heads", "query_groups")], row["id"]
    assert len(data["nemo_rows_skipped"]) == 8 and all(s["why"] for s in data["nemo_rows_skipped"])


def test_nemo_measured_seconds_by_hand():
    runs = _module()
    rows = {r["id"]: r for r in _data()["nemo_rows"]}
    # GBS x sequence / (tokens/s/GPU x GPUs): 2,048 x 2,048 / (22,521 x 64) = 2.9100 s.
    assert runs.nemo_measured_seconds(rows["nemo24.07-164b009-h100-gpt3-5b-fp8"]) == pytest.approx(2.9100, abs=5e-5)
    # GPT-3 175B on 512 GPUs at ccef6aab5a: 2,048 x 2,048 / (832 x 512) = 9.8462 s; NeMo's count (24 B s h^2 + 4 B s^2 h)
    # x 3 L + 6 B s h V = (24 x 2048 x 2048 x 12288^2 + 4 x 2048 x 2048^2 x 12288) x 288 + 6 x 2048 x 2048 x 12288 x 51200
    # = 4.5146e18 FLOPs, / 9.8462 s / 512 = 895.5 TFLOP/s a GPU (printed 895).
    row = rows["nemo24.07-ccef6aa-h100-gpt3-175b-fp8-512g"]
    assert runs.nemo_measured_seconds(row) == pytest.approx(9.8462, abs=5e-5)
    assert runs.nemo_model_flops(row) == (24 * 2048 * 2048 * 12288**2 + 4 * 2048 * 2048**2 * 12288) * 288 + 6 * 2048 * 2048 * 12288 * 51200
    assert runs.nemo_model_flops(row) / 9.8462 / 512 / 1e12 == pytest.approx(895.5, abs=0.1)
    # Llama 3 8B at 8K on 2 B200s: B s L h^2 = 512 x 8192 x 32 x 4096^2 = 2.2518e15, times 12 + 12 x 8 / 32 + 18 x 14336
    # / 4096 + 12 x 8192 / 4096 + 6 x 128256 / (32 x 4096) = 107.8711: 2.4290e17 FLOPs / (1,671e12 x 2) = 72.682 s.
    eight = rows["nemo25.04-long-b200-llama3-8b-fp8-8k"]
    assert runs.nemo_model_flops(eight) == pytest.approx(512 * 8192 * 32 * 4096**2 * 107.87109375, rel=1e-12)
    assert runs.nemo_measured_seconds(eight) == pytest.approx(72.682, abs=5e-4)
    # At 1,024K the attention term is 12 x 1,048,576 / 4,096 = 3,072 of the bracket's 3,155.9 (NeMo counts it unmasked).
    top = rows["nemo25.04-long-b200-llama3-8b-fp8-1024k"]
    assert runs.nemo_model_flops(top) == pytest.approx(4 * 1048576 * 32 * 4096**2 * (12 + 3 + 63 + 3072 + 6 * 128256 / (32 * 4096)), rel=1e-12)


# The page's groups of the 24.07 rows (docs/precision.md, "What they show").
NEMO_NEAR = ("gpt3-5b", "llama2-7b", "llama2-13b", "nemotron-8b", "nemotron-22b", "llama3-70b")
NEMO_SLOW = ("gpt3-20b", "gpt3-175b", "llama2-70b", "nemotron-4-340b")


def test_precision_page_nemo_table_is_current_and_its_prose_states_its_figures(registry):
    import attrs

    from hp_core import api

    runs = _module()
    found = runs.nemo_results(registry)
    page = _current(runs.nemo_section(found))
    prose = _prose(page)
    summary = [r for r in found if r["collection"] == "nemo-24.07-summary"]
    long = [r for r in found if r["collection"] == "nemo-25.04-long-sequence"]
    assert {r["layout"]["model"] for r in summary} == set(NEMO_NEAR + NEMO_SLOW + ("llama3-8b",))
    near = [r["error"] for r in summary if r["layout"]["model"] in NEMO_NEAR]
    slow = [r["error"] for r in summary if r["layout"]["model"] in NEMO_SLOW]
    assert (f"come out {min(near):+.1%} to {max(near):+.1%}; GPT3-20B, GPT3-175B, LLAMA2-70B and Nemotron-340B "
            f"{min(slow):+.1%} to {max(slow):+.1%} slow") in prose
    assert max(map(abs, near)) <= 0.10 < min(slow)
    # The launcher yamls' options (launcher_options): the mean error falls, every model but the two whose yaml leaves
    # TE's TP overlap off comes out fast, and those two stay slow; with the TP overlap on as well (a diagnostic) they
    # come within 10%.
    rows = {r["id"]: r for r in _data()["nemo_rows"]}
    assert all((r["launcher_seconds"] is None) == (r["collection"] != "nemo-24.07-summary") for r in found)
    launched = [r["launcher_error"] for r in summary]
    mean = sum(map(abs, launched)) / len(launched)
    assert (f"the mean error falls from {sum(abs(r['error']) for r in summary) / len(summary):.1%} to {mean:.1%}, "
            f"{sum(abs(e) <= 0.10 for e in launched)} of the 31 rows within 10%") in prose
    off = ("gpt3-175b", "nemotron-4-340b")
    assert all(rows[r["id"]]["launcher_options"].get("tp_comm_overlap") is False for r in summary if r["layout"]["model"] in off)
    fast = [r["launcher_error"] for r in summary if r["layout"]["model"] not in off]
    slow_off = [r["launcher_error"] for r in summary if r["layout"]["model"] in off]
    assert max(fast) < 0 < min(slow_off)
    assert f"every model but two comes out fast, {min(fast):+.1%} to {max(fast):+.1%}" in prose
    assert f"which stay {min(slow_off):+.1%} to {max(slow_off):+.1%} slow" in prose

    def overlapped(r):
        # TE 1.x's default userbuffers config, as the other launcher rows state (a NeMo 24.07 container predates TE 2.0).
        row = dict(rows[r["id"]], runtime_options=dict(rows[r["id"]]["launcher_options"], tp_comm_overlap=True,
                                                       tp_comm_overlap_cfg="te_1x_default"))
        return runs.price(row, registry, as_run=True).step_seconds / r["measured_seconds"] - 1

    both = [overlapped(r) for r in summary if r["layout"]["model"] in off]
    assert f"they come to {min(both):+.1%} to {max(both):+.1%}" in prose and max(map(abs, both)) <= 0.10
    eight = [r["error"] for r in summary if r["layout"]["model"] == "llama3-8b"]
    first = next(r for r in _data()["rows"] if r["id"] == "nemo24.07-h100-llama3-8b-fp8")
    first_error = runs.price(first, registry).step_seconds / runs.measured_seconds(first) - 1
    assert (f"LLAMA3-8B figures of the later commits ({eight[0]:+.1%} and {eight[1]:+.1%}) as under the first "
            f"({first_error:+.1%}, the first table)") in prose
    groups = {}
    for r in summary:
        groups.setdefault((r["layout"]["model"], r["layout"]["gpus"]), []).append(r["measured_seconds"])
    spread = {k: max(v) / min(v) - 1 for k, v in groups.items()}
    assert max(spread, key=spread.get) == ("gpt3-175b", 512)
    assert f"The versions of one layout differ by up to {max(spread.values()):.1%} (GPT3-175B on 512 GPUs)" in prose
    errors = [r["error"] for r in long]
    speedups = [r["bf16_seconds"] / r["estimated_seconds"] for r in long]
    assert (f"long-sequence rows are all within 10% ({min(errors):+.1%} to {max(errors):+.1%})" in prose
            and max(map(abs, errors)) <= 0.10)
    assert speedups == sorted(speedups, reverse=True)  # falls with the sequence
    assert f"falls from {speedups[0]:.2f} to {speedups[-1]:.2f}" in prose
    # The no-recompute assumption fits: hp's peak of each long-sequence layout is within the b200 preset's memory.
    peaks = []
    for r in long:
        row = rows[r["id"]]
        model = runs.row_model(row, registry)
        runtime = registry.runtime("megatron")
        estimate = api.estimate(model, runs.layout(row, runs._decoder_layers(model)), registry=registry, runtime=runtime,
                                precision=attrs.evolve(runtime.precision, recipe=row["recipe"]), hardware=row["hardware"])
        assert estimate.fits, r["id"]
        peaks.append(max(s.peak_bytes for s in estimate.stages) / 2**30)
    assert f"hp's peak of each layout without recompute is {min(peaks):.0f}-{max(peaks):.0f} GiB" in prose
    # The counts the page states.
    assert "39 rows in two collections" in prose and "The 24.07 summary on DGX-H100 (31 rows)." in prose
    assert "That is 10 rows first printed at 164b0097f8 (its Llama 3 rows are the two above), 12 at ccef6aab5a and 9 at 9c5c5e9709." in prose
    assert "on all 36 pre-training rows of the three versions" in prose and "on DGX-B200 (8 rows)." in prose
