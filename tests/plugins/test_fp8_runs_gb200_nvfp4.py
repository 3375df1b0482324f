"""The DGX-GB200 NVFP4 rows of tests/plugins/data/fp8_measured_runs.json (Megatron-Bridge's Llama 3 70B and Llama 3.1
405B NVFP4 pre-training rows, added once hp priced ``nvfp4`` on the ``gb200`` preset): each the exact summary row of the
archive line it names, the layout and options its release's V2 config sets, the GB300 NVFP4 rows' recipe source and
not_priced list for the same release, held out; the rows left out each with a reason; the page's figures."""

from __future__ import annotations

import pytest

from mbridge_rows import ARCHIVE, ROOT  # tests/plugins/mbridge_rows.py
from mbridge_rows import cells as _cells
from mbridge_rows import fp8_data as _data
from mbridge_rows import fp8_runs as _module
from mbridge_rows import precision_prose as _prose

RELEASE = {"26.02": "v0.3.0", "26.02.01": "v0.3.1", "26.04": "v0.4.0", "26.04.01": "v0.4.2", "26.06": "v0.5.0"}
KEPT = ["mb26.02-gb200-llama3-70b-nvfp4", "mb26.02-gb200-llama31-405b-nvfp4", "mb26.02.01-gb200-llama3-70b-nvfp4",
        "mb26.04-gb200-llama3-70b-nvfp4", "mb26.04-gb200-llama31-405b-nvfp4", "mb26.04.01-gb200-llama3-70b-nvfp4",
        "mb26.04.01-gb200-llama31-405b-nvfp4", "mb26.06-gb200-llama31-405b-nvfp4"]


def _container(row: dict) -> str:
    return row["id"][2:].split("-", 1)[0]


def test_the_gb200_nvfp4_rows_state_their_release_config():
    data = _data()
    rows = {r["id"]: r for r in data["rows"] if r["hardware"] == "gb200" and r["recipe"] == "nvfp4"}
    assert list(rows) == KEPT
    gb300 = {r["id"]: r for r in data["rows"] if r["hardware"] == "gb300" and r["recipe"] == "nvfp4"}
    lines = {}
    for row in rows.values():
        container, seventy = _container(row), row["model"] == "llama3-70b"
        assert row["split"] == "held_out" and ARCHIVE in data["sources"][row["source"]], row["id"]
        assert row["source"] == row["runtime_options_source"] == f"megatron-bridge-gb200-nvfp4-{container}", row["id"]
        head, table = row["row"].split(": ", 1)
        assert head == f"{container} NeMo Container, {'LLAMA3_70B' if seventy else 'LLAMA3.1_405B'}", row["id"]
        cells = _cells(table)
        # System, #-GPUs, Precision, GBS, MBS, Sequence Length, FSDP (not in 26.06), TP, PP, CP, VP, EP, tokens/s, TFLOP/s.
        assert len(cells) == (13 if container == "26.06" else 14) and (len(cells) == 13 or cells[6] == "0"), row["id"]
        assert cells[0] == "DGX-GB200" and cells[2] == "NVFP4" and cells[-3] == "n/a", row["id"]
        assert (int(cells[1]), int(cells[3]), int(cells[4]), int(cells[5])) == \
            (row["gpus"], row["global_batch_size"], row["micro_batch_size"], row["seq_len"]), row["id"]
        assert [int(c) for c in cells[-7:-3]] == [row["tp"], row["pp"], row["cp"], row["vpp"]], row["id"]
        assert int(cells[-2]) == row["tokens_per_second_per_gpu"] and row["ep"] == 1, row["id"]
        # The V2 configs: 70B TP 2, PP 4, VP 5 on 64 GPUs, GBS 256; 405B TP 4, PP 16, VP 8 on 256, GBS 1536; micro-batch 1.
        assert (row["gpus"], row["tp"], row["pp"], row["cp"], row["vpp"], row["global_batch_size"], row["micro_batch_size"]) == \
            ((64, 2, 4, 1, 5, 256, 1) if seventy else (256, 4, 16, 1, 8, 1536, 1)), row["id"]
        config = row["config"].split(" ")[0]
        assert config == ("LLAMA3_70B" if seventy else "LLAMA31_405B") + "_PRETRAIN_CONFIG_GB200_NVFP4_V2", row["id"]
        assert config in data["sources"][row["source"]] and row["config"].endswith(f" at {RELEASE[container]}"), row["id"]
        # The options the config sets: TP overlap off for NVFP4 (llama3_70b / llama31_405b_pretrain_config_gb200); from
        # v0.4.2 the 405B function also turns the parameter-gather overlap off (disable_param_gather_overlap).
        gather_off = not seventy and container in ("26.04.01", "26.06")
        assert row["runtime_options"] == {"overlap_grad_reduce": True, "overlap_param_gather": not gather_off,
                                          "tp_comm_overlap": False, "overlap_p2p_communication": True,
                                          "grad_reduce_in_fp32": False}, row["id"]
        assert ("disable_param_gather_overlap" in data["sources"][row["source"]]) == (container in ("26.04.01", "26.06"))
        # The same release-level recipe source and not_priced list as the GB300 NVFP4 row of the container.
        twin = gb300[f"mb{container}-gb300-llama31-405b-nvfp4"]
        assert row["recipe_source"] == twin["recipe_source"] and row["not_priced"] == twin["not_priced"], row["id"]
        assert f"bf16_with_nvfp4_mixed() at {RELEASE[container]}:" in row["recipe_source"]
        assert ("NVFP4 parameters" in " ".join(row["not_priced"])) == (container in ("26.04.01", "26.06")), row["id"]
        lines[(container, seventy)] = row["archive_line"]
    # The archive prints the newest container first, and in each section the 70B model before the 405B.
    order = [lines[(c, s)] for c in reversed(RELEASE) for s in (True, False) if (c, s) in lines]
    assert order == sorted(order)
    runs = _module()
    # GBS * seq / (tokens/s/GPU * GPUs): 256 x 8,192 / (4,458 x 64) = 7.350 s; 1,536 x 8,192 / (1,076 x 256) = 45.680 s
    # and / (1,184 x 256) = 41.514 s.
    assert runs.measured_seconds(rows["mb26.02-gb200-llama3-70b-nvfp4"]) == pytest.approx(7.350, abs=5e-4)
    assert runs.measured_seconds(rows["mb26.02-gb200-llama31-405b-nvfp4"]) == pytest.approx(45.680, abs=5e-4)
    assert runs.measured_seconds(rows["mb26.04.01-gb200-llama31-405b-nvfp4"]) == pytest.approx(41.514, abs=5e-4)
    # 405B's 126 layers with the embedding and the loss counted over 128 chunks: 1 a chunk, none on the first and last.
    assert runs.layout(rows["mb26.06-gb200-llama31-405b-nvfp4"], 126).layers_per_stage == (0,) + (1,) * 126 + (0,)


def test_the_gb200_nvfp4_rows_left_out_state_why():
    data = _data()
    skipped = data["rows_skipped_gb200"]
    assert not any(s["row"].startswith("every DGX-GB200 NVFP4 row") for s in skipped)
    vp4 = next(s for s in skipped if s["row"].startswith("26.02.01 NeMo Container, LLAMA3.1_405B: | DGX-GB200 | 256 | NVFP4"))
    assert [int(c) for c in _cells(vp4["row"].split(": ", 1)[1])[-7:-3]] == [4, 16, 1, 4]
    assert "the row and the release disagree" in vp4["why"] and "sets VP 8" in vp4["why"]
    nemotron = next(s for s in skipped if s["row"].startswith("Nemotron_3_Super NVFP4"))
    assert "DGX-GB200" in nemotron["row"] and "DGX-B200" in nemotron["row"]
    # Priced with their configs in nemotron_super_rows (tests/plugins/test_fp8_runs_nemotron_super.py), once
    # precision.module_formats states the Super NVFP4 recipe's per-module precision mix.
    assert "priced in nemotron_super_rows" in nemotron["why"] and "precision.module_formats" in nemotron["why"]
    note = data["rows_note_gb200"]
    assert "NVFP4 rows" in note and "nothing was fitted to them" in note and "rows_skipped_gb200" in note


def test_the_page_states_the_gb200_nvfp4_rows_figures():
    """The page's paragraph on the GB200 NVFP4 rows pinned to today's figures."""
    from hp_core import api

    runs = _module()
    found = runs.results()
    rows = {r["id"]: r for r in found if r["hardware"] == "gb200" and r["recipe"] == "nvfp4"}
    ran = [r["as_run_error"] for r in rows.values()]
    prose = _prose()
    assert f"**The NVFP4 rows (as run {min(ran):+.1%} to {max(ran):+.1%}, {len(rows)} rows, held out)**" in prose
    seventy = [r for r in rows.values() if r["model"] == "llama3-70b"]
    big = [r for r in rows.values() if r["model"] == "llama3-405b"]
    mae = lambda key: sum(abs(r[key]) for r in rows.values()) / len(rows)  # noqa: E731
    assert (f"70B {seventy[0]['as_run_error']:+.1%}, {seventy[1]['as_run_error']:+.1%}, {seventy[2]['as_run_error']:+.1%} and "
            f"{seventy[3]['as_run_error']:+.1%} as run (26.02 to 26.04.01), 405B {big[0]['as_run_error']:+.1%}, "
            f"{big[1]['as_run_error']:+.1%}, {big[2]['as_run_error']:+.1%} and {big[3]['as_run_error']:+.1%} (26.02, 26.04, "
            f"26.04.01, 26.06); {mae('as_run_error'):.1%} mean absolute error as run, {mae('error'):.1%} with the defaults") in prose
    assert all(r["as_run_error"] < 0 for r in seventy) and all(r["as_run_error"] > 0 for r in big)  # "70B fast, 405B slow"
    # One price per layout (the 405B one a little higher with the gather overlap off); the measured steps shorten.
    assert len({round(r["as_run_seconds"], 3) for r in seventy}) == 1
    assert [round(r["as_run_seconds"], 3) for r in big][:2] == [round(big[0]["as_run_seconds"], 3)] * 2
    assert big[2]["as_run_seconds"] > big[1]["as_run_seconds"] and round(big[2]["as_run_seconds"], 3) == round(big[3]["as_run_seconds"], 3)
    assert (f"({seventy[0]['as_run_seconds']:.3f} s for 70B; {big[0]['as_run_seconds']:.3f} s for 405B, "
            f"{big[2]['as_run_seconds']:.3f} s with the gather overlap off)") in prose
    steps = lambda group: ", ".join(f"{r['measured_seconds']:.3f}" for r in group[:3]) + f" and {group[3]['measured_seconds']:.3f} s"  # noqa: E731
    assert f"the measured steps shorten: 70B {steps(seventy)}, 405B {steps(big)}." in prose
    assert all(r["measured_seconds"] < group[0]["measured_seconds"] for group in (seventy, big) for r in group[1:])
    # NVFP4 against the MXFP8 row of the same container and layout, measured and priced as run.
    pairs = runs.nvfp4_pairs([r for r in found if r["hardware"] == "gb200"])
    assert [n["id"] for _, n in pairs] == list(rows)
    ratio = {n["id"]: (m["measured_seconds"] / n["measured_seconds"], m["as_run_seconds"] / n["as_run_seconds"]) for m, n in pairs}
    ran70 = [ratio[r["id"]][0] for r in seventy]
    ran405 = [ratio[r["id"]][0] for r in big]
    hp70 = {f"{ratio[r['id']][1]:.2f}" for r in seventy}
    hp405 = {f"{ratio[r['id']][1]:.2f}" for r in big}
    assert len(hp70) == len(hp405) == 1
    assert (f"the runs were {min(ran70):.2f} to {max(ran70):.2f} times faster at 70B and {min(ran405):.2f} to {max(ran405):.2f} "
            f"at 405B, where hp prices {hp70.pop()} and {hp405.pop()}") in prose
    assert (f"(70B {', '.join(f'{x:.2f}' for x in ran70)}; 405B {', '.join(f'{x:.2f}' for x in ran405)})") in prose
    assert max(ran70) < min(ratio[r["id"]][1] for r in seventy)  # "at 70B hp's is larger than any measured"
    speedup = {r["model"]: f"{r['bf16_seconds'] / r['estimated_seconds']:.2f}" for r in rows.values()}
    assert f"is {speedup['llama3-70b']} for 70B and {speedup['llama3-405b']} for 405B; the rows report" in prose
    # The rows' reported model TFLOP/s per GPU against the gb200 preset's bf16 and FP4 dense peaks.
    tflops = [int(_cells(r["row"].split(": ", 1)[1])[-1]) for r in _data()["rows"] if r["id"] in rows]
    peaks = api.build_registry().hardware_preset("gb200").spec.peak_flops
    bf16, fp4 = peaks["bf16"] / 1e12, peaks["fp4"] / 1e12
    assert (f"{min(tflops):,}-{max(tflops):,} model TFLOP/s per GPU, {100 * min(tflops) / bf16:.0f}-{100 * max(tflops) / bf16:.0f}% "
            f"of the {bf16:,.0f} TFLOP/s bf16 dense peak ({100 * min(tflops) / fp4:.0f}-{100 * max(tflops) / fp4:.0f}% of the "
            f"{fp4:,.0f} TFLOP/s FP4 peak the preset states)") in prose
