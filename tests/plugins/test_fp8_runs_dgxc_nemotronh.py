"""NVIDIA/dgxc-benchmarking's Nemotron-H 56B FP8 rows (``dgxc_nemotronh_rows``, benchmarks/fp8_dgxc.py ``nemotronh_*``):
the printed figures and layouts as the v25.05 README and launch.sh state them, the model as NeMo 7a8f1cc builds it, and
docs/precision.md's table and prose current."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hp_core import api
from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[2]
# nemotronh/README.md at v25.05 (68eaf7e), 'Nemotron-H 56b FP8': GPUs -> (training step time, tokens per second), as printed.
PRINTED = {32: ("15.119", 52016), 64: ("15.058", 104454), 128: ("15.496", 203003), 256: ("15.892", 395888),
           512: ("15.586", 807321), 1024: ("15.678", 1605168), 2048: ("15.723", 3201148)}


def _dgxc():
    return load_script("benchmarks/fp8_dgxc.py")


def _data() -> dict:
    return json.loads((ROOT / "tests" / "plugins" / "data" / "fp8_measured_runs.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def found():
    return _dgxc().nemotronh_results(api.build_registry(use_env=False))


def test_rows_state_the_printed_figures_layout_and_split():
    data = _data()
    rows = data["dgxc_nemotronh_rows"]
    assert [r["gpus"] for r in rows] == sorted(PRINTED)
    for r in rows:
        printed, tokens_per_second = PRINTED[r["gpus"]]
        assert r["printed"] == printed and r["step_seconds"] == float(printed)
        assert f"|{printed}|" in r["row"] and r["column"] == f"{r['gpus']}x H100 GPUs"
        # launch.sh: GBS = GPUs x 3, MBS 1, TP 8, PP 1, CP 1, VP 0, sequence 8192 (README's table); the README's
        # throughput is GBS x 8192 / step time, to the token: 768 x 8192 / 15.892 = 395,888.
        assert r["global_batch_size"] == 3 * r["gpus"] and r["micro_batch_size"] == 1 and r["seq_len"] == 8192
        assert (r["tp"], r["pp"], r["cp"], r["vpp"], r["ep"]) == (8, 1, 1, 1, 1)
        assert round(r["global_batch_size"] * 8192 / r["step_seconds"]) == pytest.approx(tokens_per_second, abs=1)
        assert r["split"] == "held_out" and r["hardware"] == "h100-sxm" and r["model"] == "nemotron-h-56b"
        assert r["container"] == "nemo:25.04.01" and r["recipe"] == "fp8-delayed-param-gather"
        assert r["runtime_options"] == {"overlap_grad_reduce": True, "overlap_param_gather": False,
                                        "grad_reduce_in_fp32": False, "attention_backend": "flash"}
        assert "recompute" not in r and "bf16" not in r
        assert r["source"] in data["sources"] and r["recipe_source"] in data["sources"]
        assert r["url"].startswith("https://github.com/NVIDIA/dgxc-benchmarking/blob/68eaf7e117bf16cb018861ce101e8f80925f74d8/")
        # The SSD scan is priced at Hopper's measured rate since 2026-12-03 (test_ssd_scan.py), no longer named unpriced.
        assert not any("SSD scan" in n for n in r["not_priced"])
    assert "all held out" in data["dgxc_nemotronh_split_rule"]
    # Kept apart: dgxc_rows (and so the dgxc fit and summaries) hold no Nemotron-H row.
    assert not any(r["model"] == "nemotron-h-56b" for r in data["dgxc_rows"])


def test_the_model_and_layout_as_run(registry):
    dgxc = _dgxc()
    row = dgxc.nemotronh_rows()[3]
    built = dgxc.model(row, registry)
    # By hand (NemotronHConfig56B, NeMo 7a8f1cc): embedding and untied output 131,072 x 8,192 each (+ the final norm);
    # 54 MLP layers 2 x 8,192 x 32,768 (+ norm); 10 attention layers 8,192 x (8,192 + 2 x 1,024) + 8,192 x 8,192 (+ norm);
    # 54 Mamba-2 layers: in_proj 8,192 x (2 x 16,384 + 2 x 8 x 256 + 256), conv1d 20,480 x 4 + 20,480, A, D, dt bias
    # 3 x 256, gated norm 16,384, out_proj 16,384 x 8,192, norm 8,192 = 438,432,512.
    assert api.count_parameters(built, registry).total == (2 * 131072 * 8192 + 8192 + 54 * (2 * 8192 * 32768 + 8192)
                                                          + 10 * (8192 * 10240 + 8192 * 8192 + 8192) + 54 * 438_432_512)
    layout = dgxc.fp8_runs.layout(row, dgxc.fp8_runs._decoder_layers(built))
    assert (layout.dp, layout.tp, layout.pp, layout.sp, layout.global_batch_size) == (32, 8, 1, True, 768)


def test_the_page_shows_the_table_and_its_figures(found):
    dgxc = _dgxc()
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    assert dgxc.nemotronh_section(found) in page, "regenerate with: python benchmarks/fp8_dgxc.py"
    errors = [r["error"] for r in found]
    # The figures moved with Hopper's split-accumulation 1.8547 and the per-size Hopper FP8 speedups (2026-12-04), and
    # by a few ms with the cached weights' once-a-step quantization (the same day).
    assert [round(e, 3) for e in errors] == [-0.006, -0.001, -0.029, -0.054, -0.035, -0.04, -0.043]
    assert round(sum(map(abs, errors)) / len(errors), 3) == 0.030 and sum(abs(e) <= 0.10 for e in errors) == 7
    gather = [r["bf16_gather_error"] for r in found]
    assert round(sum(map(abs, gather)) / len(gather), 3) == 0.024 and (round(min(gather), 3), round(max(gather), 3)) == (-0.045, 0.007)
    assert (round(found[0]["estimated_seconds"], 3), round(found[-1]["estimated_seconds"], 3)) == (15.034, 15.051)
    prose = page[page.index("#### The Nemotron-H rows"):]
    assert "-5.4% to -0.1% (mean absolute error 3.0%), since Hopper's" in prose
    assert "with a bf16 parameter gather 2.4% (-4.5% to +0.7%)" in prose
    assert "(15.034 s at 32 GPUs to 15.051 s at 2,048)" in prose
