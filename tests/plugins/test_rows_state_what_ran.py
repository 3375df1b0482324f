"""The measured rows state the optimizer widths and bf16 layers their runs set (each row's ``precision``, the dgxc
BF16 twins' ``bf16.precision``, the scale rows' ``precision_fields``), and the benchmarks price them: Megatron-Bridge's
DeepSeek-V3 recipes' bf16 Adam moments (``deepseek_v3.py``: exp_avg_dtype and exp_avg_sq_dtype bf16), NeMo 25.04 and
25.07's ``first_last_layers_bf16`` (one layer at each end), NeMo 1.0's Apex DistributedFusedAdam widths (Nemotron-4
340B: ``optim.dtype`` bf16, no main weights but a bf16 copy under fp8_params; 15B: bf16 parameters plus 16-bit
remainders)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import attrs
import pytest

from repo_script import load_script  # tests/repo_script.py

import scale_cases as sc  # the same directory

ROOT = Path(__file__).resolve().parents[2]
DATA = json.loads((ROOT / "tests" / "plugins" / "data" / "fp8_measured_runs.json").read_text(encoding="utf-8"))


def test_row_precision_keeps_the_optimizer_widths_under_every_recipe():
    runs = load_script("benchmarks/fp8_runs.py")
    row = {"recipe": "mxfp8", "precision": {"moment_bytes": 2, "high_precision_layers_at_end": 1}}
    assert runs.row_precision(row) == {"moment_bytes": 2, "high_precision_layers_at_end": 1}
    assert runs.row_precision(row, "mxfp8") == {"moment_bytes": 2, "high_precision_layers_at_end": 1}
    # A bf16 comparison: the same optimizer ran; the layers kept in bf16 quantize nothing there.
    assert runs.row_precision(row, "bf16") == {"moment_bytes": 2}
    assert runs.row_precision({"recipe": "mxfp8"}, "bf16") == {}


def test_the_rows_state_what_their_runs_set():
    dsv3 = [r for key in ("moe_rows", "moe_fi_rows") for r in DATA[key] if r["model"] == "deepseek-v3"]
    stated = [r for r in dsv3 if "precision" in r]
    assert len(stated) == 25 and all(r["precision"] == {"moment_bytes": 2} for r in stated)
    assert all("bf16 main gradients and Adam moments" in r["recipe_settings"] for r in stated)
    kept = [r for r in DATA["nemo_rows"] if "precision" in r]
    assert len(kept) == 9 and {r["collection"] for r in kept} == {"nemo-25.04-summary", "nemo-25.07-summary"}
    assert all(r["precision"] == {"high_precision_layers_at_start": 1, "high_precision_layers_at_end": 1} for r in kept)
    nemotron = {r["id"]: r for r in DATA["dgxc_rows"] if r["id"].startswith("dgxc24.09-h100-nemotron4-")}
    assert len(nemotron) == 13
    for rid, r in nemotron.items():
        if "-340b-" in rid:
            assert r["precision"] == {"moment_bytes": 2, "master_param_bytes": 2}
            assert r["bf16"]["precision"] == {"moment_bytes": 2, "master_param_bytes": 0}
        else:
            assert "precision" not in r and r["bf16"]["precision"] == {"master_param_bytes": 2}
    scale = {r["id"]: r["precision_fields"] for r in sc.MBRIDGE_ROWS if "precision_fields" in r}
    assert len(scale) == 13 and all(rid.startswith("dgxc24.09-h100-nemotron4-") for rid in scale)
    assert all(f == ({"moment_bytes": 2, "master_param_bytes": 0} if "-340b-" in rid else {"master_param_bytes": 2})
               for rid, f in scale.items())


def test_the_widths_move_the_optimizer_step_alone(registry):
    """NeMo 24.09's 340B BF16 twin on 128 GPUs: bf16 moments and no main copy change the optimizer step and nothing
    else; hp's fused update moves 2 * 2 + 2 + 2 * (2 * 2) = 14 bytes an element against the runtime's
    2 * 4 + 2 + 2 * (2 * 4) + (4 + 2) = 32 (hp_plugins/optimizers/update.py, grad_reduce_in_fp32 off: 2-byte
    gradients)."""
    row = next(r for r in sc.MBRIDGE_ROWS if r["id"] == "dgxc24.09-h100-nemotron4-340b-128gpu")
    stated = sc.estimated(row, registry)
    plain = sc.estimated({k: v for k, v in row.items() if k != "precision_fields"}, registry)
    assert stated.compute_seconds == plain.compute_seconds and stated.communication_seconds == plain.communication_seconds
    assert stated.optimizer_seconds < plain.optimizer_seconds
    assert stated.step_seconds - plain.step_seconds == pytest.approx(stated.optimizer_seconds - plain.optimizer_seconds)
    from hp_plugins.optimizers.update import update_bytes

    runtime = sc.runtime(row, registry)
    assert update_bytes(runtime.precision, 2 * runtime.precision.moment_bytes) == 32
    narrowed = attrs.evolve(runtime.precision, **row["precision_fields"])
    assert update_bytes(narrowed, 2 * narrowed.moment_bytes) == 14


def test_mxfp8_rows_state_their_bf16_parameter_gather():
    """Every Megatron-Bridge MXFP8 row (bf16_with_mxfp8_mixed: fp8_param_gather and reuse_grad_buf_for_mxfp8_param_ag
    true) is priced as it ran: its release's Megatron-Core gathers the MXFP8 weights in bf16 through the gradient
    buffer (param_and_grad_buffer.py, each tag's 3rdparty/Megatron-LM), which mxfp8-param-gather prices (param_gather
    gradient_buffer: the weights in MXFP8, the gather in the buffer's dtype); the row states it and says so, citing the
    tag its config names."""
    rows = [r for key in ("rows", "moe_rows", "moe_fi_rows", "nemotron_rows", "nemotron_super_rows") for r in DATA[key]
            if "mxfp8_param_gather_verified" in r]
    assert len(rows) == 124
    assert {r["recipe"] for r in rows} == {"mxfp8-param-gather", "mxfp8-param-gather-fp8-attention"}
    for r in rows:
        # The two DGX-B200 rows of the 25.11 summary state no config; the 25.11 rows that do name v0.2.0.
        config = r.get("config") or ("at v0.2.0" if r["source"] == "megatron-bridge-25.11" else "")
        tag = re.search(r" ?at (v\d+\.\d+\.\d+)", config).group(1)
        assert r["mxfp8_param_gather_verified"].startswith(f"NVIDIA-NeMo/Megatron-Bridge {tag}: "), r["id"]
        entry = [x for x in r["not_priced"] if x.startswith("MXFP8 parameter all-gather")]
        assert len(entry) == 1 and "gathers these weights in bf16, not in MXFP8" in entry[0], r["id"]
    assert not any("no MXFP8 param-gather recipe" in x for key in ("rows", "moe_rows", "moe_fi_rows", "nemotron_rows",
                                                                   "nemotron_super_rows")
                   for r in DATA[key] for x in r.get("not_priced", []))
