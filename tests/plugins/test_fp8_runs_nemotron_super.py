"""The Nemotron 3 Super rows of tests/plugins/data/fp8_measured_runs.json (``nemotron_super_rows``): Megatron-Bridge's
MXFP8 rows of the hybrid Mamba / latent-MoE model with its two-depth MTP block on 64 DGX-GB300, GB200, B300 and B200
GPUs, 26.04 to 26.08. Each states its summary row, its release's config and layout, the runtime options as run and
what hp does not price and the model it ran (the preset, its MTP module applied at two depths); held out; the NVFP4 rows
of the same sections with their precision (te_quant.cfg's module formats and 14 bf16 end layers); docs/precision.md's
table and prose are today's."""

from __future__ import annotations

import pytest

from mbridge_rows import ARCHIVE, ROOT
from mbridge_rows import cells as _cells
from mbridge_rows import fp8_data as _data
from mbridge_rows import fp8_runs as _module
from mbridge_rows import precision_prose as _prose

# The container and the Megatron-Bridge release it ships (docs/versions1.json at the archive's commit).
CONTAINERS = {"26.04": "v0.4.0", "26.04.01": "v0.4.2", "26.06": "v0.5.0", "26.06.01": "v0.5.1", "26.08": "v0.6.0"}
# The systems each container's Nemotron_3_Super section prints an MXFP8 row for (26.02.01 and earlier print none).
SYSTEMS = {"26.04": ("gb300", "gb200", "b300", "b200"), "26.04.01": ("gb300", "gb200", "b300", "b200"),
           "26.06": ("gb300", "gb200", "b300"), "26.06.01": ("gb300", "gb200"), "26.08": ("gb300", "gb200")}
SYSTEM = {"gb300": "DGX-GB300", "gb200": "DGX-GB200", "b300": "DGX-B300", "b200": "DGX-B200"}
# The configs' layout per system: (TP, EP); every one 64 GPUs, GBS 512, micro-batch 1, sequence 8,192, PP 1, CP 1.
LAYOUT = {"gb300": (1, 64), "gb200": (2, 64), "b300": (1, 8), "b200": (1, 64)}
# Every printed figure (tokens / sec / GPU) with its line: the archive's, 26.08's in docs/performance-summary.md.
FIGURES = {
    "mb26.04-gb300": (376, 9243), "mb26.04-gb200": (377, 6674), "mb26.04-b300": (378, 7009), "mb26.04-b200": (379, 6302),
    "mb26.04.01-gb300": (282, 9344), "mb26.04.01-gb200": (284, 6656), "mb26.04.01-b300": (286, 7296),
    "mb26.04.01-b200": (288, 6400), "mb26.06-gb300": (162, 9652), "mb26.06-gb200": (164, 6742),
    "mb26.06-b300": (166, 7867), "mb26.06.01-gb300": (85, 9728), "mb26.06.01-gb200": (87, 7040),
    "mb26.08-gb300": (92, 9856), "mb26.08-gb200": (94, 7040),
}


# The NVFP4 rows' figures (the same sections, systems and containers as the MXFP8 rows') with their lines.
NVFP4_FIGURES = {
    "mb26.04-gb300": (372, 9623), "mb26.04-gb200": (373, 6777), "mb26.04-b300": (374, 7047), "mb26.04-b200": (375, 5606),
    "mb26.04.01-gb300": (283, 9600), "mb26.04.01-gb200": (285, 6784), "mb26.04.01-b300": (287, 7424),
    "mb26.04.01-b200": (289, 5632), "mb26.06-gb300": (163, 9900), "mb26.06-gb200": (165, 6928),
    "mb26.06-b300": (167, 8131), "mb26.06.01-gb300": (86, 9984), "mb26.06.01-gb200": (88, 7040),
    "mb26.08-gb300": (93, 10240), "mb26.08-gb200": (95, 7168),
}
# The NVFP4 configs' layout per system: (TP, EP); B300's is its BF16 config, B200's TP 2 (its footnote's mapping).
NVFP4_LAYOUT = {"gb300": (1, 64), "gb200": (2, 64), "b300": (1, 8), "b200": (2, 64)}
# te_quant.cfg's per-module mix and the 14 bf16 end layers, as hp states them.
NVFP4_PRECISION = {"high_precision_layers_at_end": 14, "module_formats": {
    "attention_qkv": "bf16", "attention_proj": "bf16", "moe_latent_proj": "bf16", "mamba_out_proj": "mxfp8"}}


def _rows(recipe: str = "mxfp8-param-gather") -> dict:
    return {r["id"]: r for r in _data()["nemotron_super_rows"] if r["recipe"] == recipe}


def _check_summary_cells(row: dict, container: str, precision: str, figures: dict) -> None:
    """The row's summary cells against its fields: system, #-GPUs, precision, GBS, MBS, sequence length, [FSDP,] TP,
    PP, CP, VP, EP, tokens/s/GPU, TFLOP/s/GPU (26.04 and 26.04.01 print an FSDP column, 0, after the sequence
    length), and its tokens/s/GPU the figure *figures* holds for it."""
    rid = row["id"]
    cells = _cells(row["row"])
    if container in ("26.04", "26.04.01"):
        assert cells.pop(6) == "0", rid
    assert cells[0] == SYSTEM[row["hardware"]] and cells[2] == precision and len(cells) == 13, rid
    assert [int(c) for c in cells[1:2] + cells[3:6]] == [row["gpus"], row["global_batch_size"],
                                                          row["micro_batch_size"], row["seq_len"]], rid
    assert [1 if c == "n/a" else int(c) for c in cells[6:11]] == [row["tp"], row["pp"], row["cp"], row["vpp"],
                                                                  row["ep"]], rid
    assert int(cells[11]) == row["tokens_per_second_per_gpu"] == figures[rid.rsplit("-nemotron", 1)[0]][1], rid


def test_the_rows_state_their_summary_row_release_and_options():
    rows = _rows()
    assert sorted(rows) == sorted(f"mb{c}-{hw}-nemotron-3-super-mxfp8" for c, systems in SYSTEMS.items() for hw in systems)
    assert len(rows) == 15
    data = _data()
    for rid, row in rows.items():
        container = rid[2:].split("-")[0]
        tag = CONTAINERS[container]
        source = data["sources"][row["source"]]
        assert row["source"] == row["runtime_options_source"] == f"megatron-bridge-nemotron3-super-{container}", rid
        assert ARCHIVE in source and tag in source and "multi_token_prediction.py" in source, rid
        line_key = "summary_line" if container == "26.08" else "archive_line"
        assert row[line_key] == FIGURES[rid.rsplit("-nemotron", 1)[0]][0], rid
        assert ("docs/performance-summary.md" in source) == (container == "26.08"), rid
        assert row["split"] == "held_out", rid
        assert row["class"] == f"Megatron-Core hybrid Mamba-MoE with MTP, {row['hardware'].upper()}", rid
        assert row["model"] == "nemotron-3-super-120b-a12b" and row["recipe"] == "mxfp8-param-gather", rid
        assert f"at {tag}" in row["config"], rid
        assert ("fp8mx_config" if container == "26.08" else f"_{row['hardware'].upper()}_FP8_MX_V1") in row["config"], rid
        _check_summary_cells(row, container, "MXFP8", FIGURES)
        # The configs' layout: 64 GPUs, GBS 512, micro-batch 1, sequence 8,192, ETP 1; TP and EP per system.
        assert (row["gpus"], row["global_batch_size"], row["micro_batch_size"], row["seq_len"], row["etp"]) == (
            64, 512, 1, 8192, 1), rid
        assert (row["tp"], row["ep"]) == LAYOUT[row["hardware"]], rid
        assert f"TP {row['tp']}" in row["config"] and f"EP {row['ep']}" in row["config"], rid
        # HybridEP on 32 SMs (the recipe's backend is hybridep when the scripts' / _benchmark_common's 32 is set),
        # overlapped gradient reduce and parameter gather, bf16 reduction.
        options = {"overlap_grad_reduce": True, "overlap_param_gather": True, "grad_reduce_in_fp32": False,
                   "ep_all_to_all": "hybridep", "hybridep_num_sms": 32}
        assert row["runtime_options"] == options, rid
        assert "so HybridEP ran 32 SMs" in row["recipe_settings"], rid
        # B200 recomputes moe_act and layernorm and runs no graphs; the others recompute nothing and capture TE graphs.
        if row["hardware"] == "b200":
            assert row["recompute_modules"] == ["moe_act", "layernorm"], rid
            assert "no CUDA graphs (cuda_graph_impl none" in row["recipe_settings"], rid
            assert not any(item.startswith("CUDA graphs") for item in row["not_priced"]), rid
        else:
            assert "recompute_modules" not in row and "no activation recompute" in row["recipe_settings"], rid
            assert any(item.startswith("CUDA graphs (transformer_engine, scope attn, mamba, moe_router and moe_preprocess")
                       for item in row["not_priced"]), rid
        for setting in ("first_last_layers_bf16 false", "bf16_with_mxfp8_mixed", "no quant_recipe",
                        "keep_mtp_spec_in_bf16 true is a provider field that nothing reads",
                        "fp8_dot_product_attention not set", "moe_router_padding_for_quantization true",
                        "mtp_num_layers 2 with mtp_use_repeated_layer true"):
            assert setting in row["recipe_settings"], (rid, setting)
        assert ("TP 2 with sequence parallelism and no TP communication overlap" in row["recipe_settings"]) == (
            row["hardware"] == "gb200"), rid
        assert "one MTP block" in row["model_as_run"] and "131,072 as the preset states" in row["model_as_run"], rid
        # The run applies its one MTP module at two depths (mtp_num_layers 2 with mtp_use_repeated_layer).
        assert row["mtp_applications"] == 2 and "which the row applies twice" in row["model_as_run"], rid
        joined = " ".join(row["not_priced"])
        for item in ("MXFP8 parameter all-gather", "FP8 grouped (expert) GEMMs", "moe_router_padding_for_quantization"):
            assert item in joined, (rid, item)


def test_step_times_by_hand():
    runs = _module()
    rows = _rows()
    # 512 x 8,192 = 4,194,304 tokens a step over 64 GPUs: / (9,243 x 64) = 7.090 s; / (6,302 x 64) = 10.399 s;
    # / (7,040 x 64) = 9.309 s; / (7,867 x 64) = 8.330 s.
    assert runs.measured_seconds(rows["mb26.04-gb300-nemotron-3-super-mxfp8"]) == pytest.approx(7.090, abs=5e-4)
    assert runs.measured_seconds(rows["mb26.04-b200-nemotron-3-super-mxfp8"]) == pytest.approx(10.399, abs=5e-4)
    assert runs.measured_seconds(rows["mb26.08-gb200-nemotron-3-super-mxfp8"]) == pytest.approx(9.309, abs=5e-4)
    assert runs.measured_seconds(rows["mb26.06-b300-nemotron-3-super-mxfp8"]) == pytest.approx(8.330, abs=5e-4)
    # 88 decoder layers (40 Mamba-2, 40 latent MoE, 8 attention) on one stage; the preset's one MTP module, which the
    # row applies at two depths with its weights once: the preset's 123,611,012,096 parameters either way.
    from hp_core import api
    from hp_core.api import estimate
    from hp_core.specs import ParallelSpec

    registry = api.build_registry()
    preset = api.model_from_preset("nemotron-3-super-120b-a12b", registry=registry)
    model = runs.moe_row_model(rows["mb26.06-gb300-nemotron-3-super-mxfp8"], registry)
    assert runs._decoder_layers(model) == runs._decoder_layers(preset) == 88
    (mtp,) = [g for g in model.layers if g.kind == "mtp"]
    assert mtp.count == 1 and mtp.config.applications == 2
    assert [g.config.applications for g in preset.layers if g.kind == "mtp"] == [1]
    for m in (preset, model):
        assert estimate(m, ParallelSpec(seq_len=8192), registry=registry).parameters.total == 123_611_012_096
    # A row without mtp_applications is its preset.
    nano = {"id": "nano", "model": "nemotron-3-nano-30b-a3b"}
    assert runs.moe_row_model(nano, registry) == api.model_from_preset("nemotron-3-nano-30b-a3b", registry=registry)
    # Data-parallel 64 at TP 1 (32 at TP 2 on GB200), EP 64 (8 on B300), sequence parallel only at TP 2.
    spec = runs.layout(rows["mb26.06-gb200-nemotron-3-super-mxfp8"], 88)
    assert (spec.dp, spec.tp, spec.pp, spec.ep, spec.sp) == (32, 2, 1, 64, True)
    spec = runs.layout(rows["mb26.06-b300-nemotron-3-super-mxfp8"], 88)
    assert (spec.dp, spec.tp, spec.pp, spec.ep, spec.sp) == (64, 1, 1, 8, False)


def test_the_nvfp4_rows_state_their_row_config_and_module_formats():
    data = _data()
    assert "nemotron_super_rows_skipped" not in data
    rows = _rows("nvfp4")
    assert sorted(rows) == sorted(f"mb{c}-{hw}-nemotron-3-super-nvfp4" for c, systems in SYSTEMS.items() for hw in systems)
    mx = _rows()
    for rid, row in rows.items():
        container = rid[2:].split("-")[0]
        tag = CONTAINERS[container]
        sibling = mx[rid.replace("-nvfp4", "-mxfp8")]
        assert row["source"] == row["runtime_options_source"] == sibling["source"], rid
        line_key = "summary_line" if container == "26.08" else "archive_line"
        assert row[line_key] == NVFP4_FIGURES[rid.rsplit("-nemotron", 1)[0]][0], rid
        assert (row["split"], row["class"], row["model"], row["recipe"]) == (
            "held_out", sibling["class"], "nemotron-3-super-120b-a12b", "nvfp4"), rid
        assert row["precision"] == NVFP4_PRECISION, rid
        assert f"at {tag}" in row["config"], rid
        assert ("nvfp4_config" if container == "26.08" else f"_{row['hardware'].upper()}_NVFP4_V1") in row["config"], rid
        _check_summary_cells(row, container, "NVFP4", NVFP4_FIGURES)
        assert (row["tp"], row["ep"]) == NVFP4_LAYOUT[row["hardware"]], rid
        assert (row["gpus"], row["global_batch_size"], row["micro_batch_size"], row["seq_len"], row["etp"]) == (
            64, 512, 1, 8192, 1), rid
        assert row.get("recompute_modules") == (["moe_act", "layernorm"] if row["hardware"] == "b300" else None), rid
        assert row["runtime_options"] == sibling["runtime_options"] and row["mtp_applications"] == 2, rid
        for setting in ("num_layers_at_end_in_bf16 14", "te_quant.cfg", "linear_qkv and linear_proj",
                        "fc1_latent_proj and fc2_latent_proj", "out_proj in MXFP8", "get_quant_config_or_none",
                        f"as the MXFP8 row {sibling['id']}"):
            assert setting in row["recipe_settings"], (rid, setting)
        joined = " ".join(row["not_priced"])
        for item in ("CUDA graphs (transformer_engine", "NVFP4 grouped (expert) GEMMs", "moe_router_padding_for_quantization"):
            assert item in joined, (rid, item)
        assert ("could not fit for NVFP4" in joined) == ("nemotron-3-super-b200-nvfp4-note" in row["row"]), rid
    # The precision the rows state is priced under their own recipe only (a bf16 comparison quantizes nothing).
    runs = _module()
    from hp_core import api

    registry = api.build_registry()
    row = rows["mb26.06-gb300-nemotron-3-super-nvfp4"]
    plain = {**row, "precision": {}}
    assert runs.price_moe(row, registry).step_seconds > runs.price_moe(plain, registry).step_seconds
    assert runs.price_moe(row, registry, "bf16").step_seconds == runs.price_moe(plain, registry, "bf16").step_seconds
    # The other lists point here rather than call the rows unexamined.
    for key in ("rows_skipped_gb200", "rows_skipped_gb300", "moe_rows_skipped"):
        entries = [s for s in data[key] if "Nemotron_3_Super" in s["row"] or "Nemotron_3_Super" in s["why"]]
        assert len(entries) == 1 and "nemotron_super_rows" in entries[0]["why"], key
        assert "nemotron_rows_skipped" not in entries[0]["why"] and "_rows_skipped" not in entries[0]["why"].replace(
            "moe_rows_skipped", ""), key


def test_the_note_states_the_split_and_counts():
    note = _data()["nemotron_super_rows_note"]
    for fact in ("Every row is held out", "every field but mtp_applications", "nothing is fitted to them",
                 "no section prints a DGX-H100 Super row", "15 NVFP4 rows", "HybridEP on 32 SMs"):
        assert fact in note, fact


def test_the_page_table_is_current_and_its_prose_states_its_figures():
    runs = _module()
    from hp_core import api

    registry = api.build_registry()
    everything = runs.nemotron_super_results(registry)
    assert len(everything) == 30
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    assert runs.nemotron_super_section(everything) in page, "regenerate with: python benchmarks/fp8_runs.py"
    prose = _prose()
    for recipe, name in (("mxfp8-param-gather", "MXFP8"), ("nvfp4", "NVFP4")):
        found = [r for r in everything if r["recipe"] == recipe]
        errors = [r["error"] for r in found]
        mae = {}
        for cls in runs.NEMOTRON_SUPER_CLASSES:
            ours = [abs(r["error"]) for r in found if r["class"] == cls]
            mae[cls.rsplit(", ", 1)[1]] = f"{sum(ours) / len(ours):.1%}"
        within = sum(abs(e) <= 0.10 for e in errors)
        assert (f"On the {name} rows hp is within 10% on {within} of the 15 rows, {min(errors):+.1%} to "
                f"{max(errors):+.1%}: a mean absolute error of {mae['GB300']} on GB300, {mae['GB200']} on GB200, "
                f"{mae['B300']} on B300 and {mae['B200']} on B200") in prose
    by_id = {r["id"]: r for r in everything}
    # The NVFP4 rows against the MXFP8 ones, measured and as hp prices them; B200 NVFP4 host-bound at TP 2.
    pairs = [(by_id[i], by_id[i.replace("-mxfp8", "-nvfp4")]) for i in by_id if i.endswith("-mxfp8")]
    measured = [m["measured_seconds"] / n["measured_seconds"] - 1 for m, n in pairs if m["layout"]["hardware"] != "b200"]
    priced = [m["estimated_seconds"] / n["estimated_seconds"] - 1 for m, n in pairs if m["layout"]["hardware"] != "b200"]
    slower = [n["measured_seconds"] / m["measured_seconds"] - 1 for m, n in pairs if m["layout"]["hardware"] == "b200"]
    assert (f"Measured, NVFP4 runs {min(measured):.1%} to {max(measured):.1%} faster than MXFP8 on GB300, GB200 and B300 "
            f"(the B200 NVFP4 rows, at TP 2, {min(slower):.0%} to {max(slower):.0%} slower); hp prices NVFP4 "
            f"{min(priced):.1%} to {max(priced):.1%} faster there") in prose
    b200 = by_id["mb26.04-b200-nemotron-3-super-nvfp4"]
    b200_priced = runs.price_moe(b200["layout"], registry)
    mx_b200 = runs.price_moe(by_id["mb26.04-b200-nemotron-3-super-mxfp8"]["layout"], registry)
    graphs_b200 = {**b200["layout"], "runtime_options": {**b200["layout"]["runtime_options"], "cuda_graphs": "layers"}}
    assert (f"hp prices 26.04 at {b200['estimated_seconds']:.3f} s against {b200['measured_seconds']:.3f} s measured, its "
            f"compute {b200_priced.compute_seconds:.3f} s against {mx_b200.compute_seconds:.3f} s for the MXFP8 row at TP 1, "
            f"host-bound as GB200 is: with whole-layer graphs (`cuda_graphs` `layers`) it prices "
            f"{runs.price_moe(graphs_b200, registry).step_seconds:.3f} s") in prose
    found = [r for r in everything if r["recipe"] == "mxfp8-param-gather"]
    b300 = by_id["mb26.06-b300-nemotron-3-super-mxfp8"]
    priced = runs.price_moe(b300["layout"], registry)
    dp = {name: (total, exposed) for name, total, exposed in priced.stages[0].communication_by_group}["dp"]
    gb300 = by_id["mb26.06-gb300-nemotron-3-super-mxfp8"]
    assert (f"in 26.06 hp's compute is {priced.compute_seconds:.3f} s and its exposed communication (HybridEP's dispatch "
            f"and combine) {priced.communication_seconds:.3f} s, the data-parallel reduce and gather {dp[0]:.3f} s of which "
            f"{dp[1]:.3f} s is exposed, against {b300['measured_seconds']:.3f} s measured, where the same model at EP 64 on "
            f"GB300 prices {gb300['estimated_seconds']:.3f} s against {gb300['measured_seconds']:.3f} s") in prose
    gb200 = by_id["mb26.06-gb200-nemotron-3-super-mxfp8"]
    graphs = {**gb200["layout"], "runtime_options": {**gb200["layout"]["runtime_options"], "cuda_graphs": "layers"}}
    at_graphs = runs.price_moe(graphs, registry).step_seconds
    assert at_graphs < 0.85 * gb200["estimated_seconds"]
    assert (f"it prices the 26.06 row at {gb200['estimated_seconds']:.3f} s, with whole-layer graphs (`cuda_graphs` "
            f"`layers`) at {at_graphs:.3f} s") in prose
    # The printed Model TFLOP / sec / GPU x GPUs x step time against hp's model FLOPs per step.
    ratios = []
    for r in found:
        printed = int(_cells(r["layout"]["row"])[-1]) * 1e12 * r["layout"]["gpus"] * r["measured_seconds"]
        ratios.append(printed / runs.price_moe(r["layout"], registry).model_flops)
    flops = runs.price_moe(gb300["layout"], registry).model_flops
    assert (f"is {min(ratios):.1%} to {max(ratios):.1%} of hp's model FLOPs per step ({flops / 1e17:.3f}e17, the MTP "
            "module applied twice) on every MXFP8 row") in prose
    one = runs.price_moe({k: v for k, v in gb300["layout"].items() if k != "mtp_applications"}, registry).step_seconds
    assert one < gb300["estimated_seconds"]
    assert (f"applied once (the preset as it stands) the 26.06 GB300 row prices {one:.3f} s against "
            f"{gb300['estimated_seconds']:.3f} s") in prose
