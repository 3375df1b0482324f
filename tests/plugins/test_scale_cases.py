"""Step time at scale against public measured runs (``data/scale_measured.json``, provenance in ``data/README.md``).

The rows' measured step times are derived from the published figures by
hand here; the validation table in docs/time.md is what
``benchmarks/scale_validation.py`` prints (refresh it with ``--write``); the
calibration / held-out split is the one fixed in the data file before any
fit. The errors are reported, not asserted within 10%: docs/time.md says
which classes miss it and why.
"""

from __future__ import annotations

import pytest

import scale_cases as sc
from scale_cases import DATA, ROWS, measured_seconds, report

ROOT = sc.SCALE_FILE.parents[3]


def _row(name: str) -> dict:
    return next(r for r in ROWS if r["id"] == name)


def test_measured_step_times_as_derived_from_the_published_figures():
    # torchtitan: local batch x sequence / (TPS per GPU x non-data-parallel degree).
    assert measured_seconds(_row("tt-8b-fsdp128")) == pytest.approx(2 * 8192 / 5605)
    assert measured_seconds(_row("tt-8b-fsdp8-tp8")) == pytest.approx(12 * 8192 / (4378 * 8))
    assert measured_seconds(_row("tt-70b-fsdp32-tp8-asynctp")) == pytest.approx(16 * 8192 / (652.4 * 8))
    # AutoModel prints the time per global step.
    assert measured_seconds(_row("am-70b-fsdp32-cp2")) == 18.90
    # Megatron-LM: 12 B s L h^2 (2 + s/h + 4 + V / (2 L h)) FLOPs over per-GPU TFLOP/s x GPUs.
    flops = 12 * 192 * 4096 * 24 * 2048**2 * (2 + 4096 / 2048 + 4 + 131072 / (2 * 24 * 2048))
    assert measured_seconds(_row("mlm-gpt-1.7b")) == pytest.approx(flops / (408.8e12 * 48))


def test_every_row_states_its_provenance_and_is_bf16():
    for row in ROWS:
        source = DATA["sources"][row["source"]]
        assert source["url"].startswith("https://github.com/") and source["commit"] and source["step_seconds_from"]
        assert row["row"] and row["class"] in sc.CLASSES
        assert row["split"] in ("calibration", "held-out", "not validated")
        assert "float8" not in row["row"].lower() and "fp8" not in row["row"].lower()
        assert (row["split"] == "not validated") == ("why_not_validated" in row)


def test_the_split_is_the_one_fixed_before_fitting():
    calibration = sorted(r["id"] for r in ROWS if r["split"] == "calibration")
    assert calibration == ["mlm-gpt-1.7b", "mlm-gpt-16b", "tt-8b-fsdp128", "tt-8b-fsdp8", "tt-8b-fsdp8-tp8"]
    assert sum(r["split"] == "held-out" for r in ROWS) == 9


def test_the_validation_table_in_time_md_is_what_the_script_prints(registry):
    page = (ROOT / "docs" / "time.md").read_text(encoding="utf-8")
    shown = page.split("<!-- scale-validation:start -->", 1)[1].split("<!-- scale-validation:end -->", 1)[0]
    assert shown.strip() == report(registry).strip(), "docs/time.md is stale: run python benchmarks/scale_validation.py --write"


def test_multi_node_fsdp_groups_use_every_adapter(registry):
    # Llama 3.1 70B on 64 H100s, FSDP over dp 32 x cp 2: each layer's gather and reduce-scatter cross the nodes on
    # all eight adapters, so the step's communication is a few seconds rather than the ~95 s priced at one adapter.
    t = sc.estimated(_row("am-70b-fsdp32-cp2"), registry)
    fsdp = dict((g, (total, exposed)) for g, total, exposed in t.stages[0].communication_by_group)["fsdp"]
    assert fsdp[0] * t.micro_batches < 10.0 and fsdp[1] < fsdp[0]
