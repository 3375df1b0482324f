"""The 26.08 container's rows of models hp has no preset for (Megatron-Bridge docs/performance-summary.md at
067f987df, '## 26.08 NeMo Container'): Nemotron_3_Ultra on 256 DGX-GB300 and DGX-GB200 GPUs and DeepSeekV4 Flash on
128 of each are left out, each in rows_skipped_gb300 / rows_skipped_gb200 with its printed row, its line, the v0.6.0
function it ran and its reason; docs/precision.md says so."""

from __future__ import annotations

from mbridge_rows import ARCHIVE, ROOT
from mbridge_rows import cells as _cells
from mbridge_rows import fp8_data as _data
from mbridge_rows import precision_prose as _prose

# The printed rows (docs/performance-summary.md at 067f987df, lines 52, 53, 101 and 102), copied by hand: system,
# GPUs, precision, GBS, MBS, sequence, TP, PP, CP, VP, EP, tokens / sec / GPU, model TFLOP / sec / GPU.
PRINTED = {
    ("Nemotron_3_Ultra", "DGX-GB300"): (101, "DGX-GB300 256 MXFP8 256 1 8192 1 1 1 n/a 64 3552 1281"),
    ("Nemotron_3_Ultra", "DGX-GB200"): (102, "DGX-GB200 256 MXFP8 256 1 8192 2 1 1 n/a 64 2528 923"),
    ("DeepSeekV4 Flash", "DGX-GB300"): (52, "DGX-GB300 128 MXFP8 2048 1 4096 1 1 1 n/a 64 8224 748"),
    ("DeepSeekV4 Flash", "DGX-GB200"): (53, "DGX-GB200 128 MXFP8 2048 1 4096 1 1 1 n/a 64 7776 706"),
}


def _entries() -> dict:
    data = _data()
    found = {}
    for key in ("rows_skipped_gb300", "rows_skipped_gb200"):
        for s in data[key]:
            if s["row"].startswith("26.08 NeMo Container, "):
                model, row = s["row"][len("26.08 NeMo Container, "):].split(": ", 1)
                found[(model, _cells(row)[0])] = (key, s, row)
    return found


def test_each_row_is_left_out_once_with_its_printed_cells_and_source():
    found = _entries()
    assert set(PRINTED) <= set(found)
    for (model, system), (line, printed) in PRINTED.items():
        key, entry, row = found[(model, system)]
        assert key == ("rows_skipped_gb300" if system == "DGX-GB300" else "rows_skipped_gb200")
        assert " ".join(_cells(row)) == printed
        assert f"at {ARCHIVE}" in entry["source"] and f"line {line};" in entry["source"]
        assert "v0.6.0 (51885cf132b2814188b6855c25a8588254274c2a" in entry["source"]
        assert f"'#### Model: {model}'" in entry["source"]


def test_the_reasons_name_what_hp_cannot_state():
    found = _entries()
    for system in ("DGX-GB300", "DGX-GB200"):
        ultra = found[("Nemotron_3_Ultra", system)][1]
        assert "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16" in ultra["why"] and "no stored copy" in ultra["why"]
        assert "fine_grained_activation_offloading" in ultra["why"] and "offload_modules ['fused_group_mlp']" in ultra["why"]
        assert "which hp's megatron runtime does not price" in ultra["why"]
        assert "4 optimizer instances" in ultra["why"]
        assert f"nemotron_3_ultra_pretrain_256gpu_{system[4:].lower()}_fp8mx_config" in ultra["source"]
        dsv4 = found[("DeepSeekV4 Flash", system)][1]
        for mechanism in ("hyper-connections", "compressed sparse attention", "heavily compressed attention",
                          "token hash"):
            assert mechanism in dsv4["why"], mechanism
        assert f"deepseek_v4_flash_pretrain_128gpu_{system[4:].lower()}_fp8mx_config" in dsv4["source"]
    # Each system's offload threshold as its function sets it.
    assert "min_offloaded_tensor_size 500,000,000" in found[("Nemotron_3_Ultra", "DGX-GB300")][1]["why"]
    assert "min_offloaded_tensor_size 350,000,000" in found[("Nemotron_3_Ultra", "DGX-GB200")][1]["why"]


def test_hp_has_no_preset_for_them_and_the_page_says_why():
    presets = {p.stem for p in (ROOT / "hp_plugins" / "models" / "presets").glob("*.json")}
    assert not any("ultra" in p or "deepseek-v4" in p for p in presets)
    prose = _prose()
    assert "#### 26.08's Nemotron 3 Ultra and DeepSeek-V4 Flash rows: left out, each with its reason" in prose
    assert "no layer kind for the model's hyper-connections" in prose
    assert "fine-grained activation offloading of the expert MLP's activation input" in prose
