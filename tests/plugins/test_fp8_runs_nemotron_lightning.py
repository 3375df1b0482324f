"""The Nemotron 3.5 Lightning row of tests/plugins/data/fp8_measured_runs.json (``nemotron_lightning_rows``):
Megatron-Bridge's one 26.08 row (DGX-GB200, 8 GPUs, MXFP8), the Nano GB200 configuration with a '*E' MTP block applied
at two depths; its provenance, the preset's parameter count against the public verification card, held out, and
docs/precision.md's table and prose are today's."""

from __future__ import annotations

import pytest

from mbridge_rows import ARCHIVE, ROOT
from mbridge_rows import cells as _cells
from mbridge_rows import fp8_data as _data
from mbridge_rows import fp8_runs as _module
from mbridge_rows import precision_prose as _prose

RID = "mb26.08-gb200-nemotron-3.5-lightning-mxfp8"


def _row() -> dict:
    rows = _data()["nemotron_lightning_rows"]
    assert [r["id"] for r in rows] == [RID]
    return rows[0]


def test_the_row_states_its_printed_cells_source_and_config():
    data = _data()
    row = _row()
    # docs/performance-summary.md at 067f987df, line 86, copied by hand: system, GPUs, precision, GBS, MBS, sequence,
    # TP, PP, CP, VP, EP, tokens / sec / GPU, model TFLOP / sec / GPU.
    assert _cells(row["row"]) == ["DGX-GB200", "8", "MXFP8", "512", "2", "8192", "1", "1", "1", "n/a", "8", "28672", "807"]
    assert row["summary_line"] == 86 and row["split"] == "held_out"
    assert (row["hardware"], row["gpus"], row["global_batch_size"], row["micro_batch_size"], row["seq_len"]) == \
        ("gb200", 8, 512, 2, 8192)
    assert (row["tp"], row["pp"], row["cp"], row["vpp"], row["ep"], row["tokens_per_second_per_gpu"]) == (1, 1, 1, 1, 8, 28672)
    assert row["model"] == "nemotron-3.5-lightning-30b-a3b" and row["recipe"] == "mxfp8-param-gather"
    assert row["class"] == "Megatron-Core hybrid Mamba-MoE with MTP, GB200"
    source = data["sources"][row["source"]]
    assert f"at {ARCHIVE}" in source and "'#### Model: Nemotron_3_5_Lightning'" in source and "line 86" in source
    assert "v0.6.0 (51885cf132b2814188b6855c25a8588254274c2a" in source
    assert row["config"].startswith("nemotron_3_5_lightning_pretrain_8gpu_gb200_fp8mx_config at v0.6.0")
    for fact in ("nemotron_3_nano_pretrain_8gpu_gb200_fp8mx_config", "mtp_num_layers 2", "mtp_hybrid_override_pattern '*E'",
                 "mtp_use_repeated_layer true", "moe_hybridep_num_sms 16"):
        assert fact in row["config"], fact
    # The FSDP variant (GBS 384, micro-batch 3) is not the row's function.
    assert "GBS 384" in source and "not the row's layout" in source
    assert row["mtp_applications"] == 2 and "applied twice here (mtp_applications 2" in row["model_as_run"]
    assert row["runtime_options"] == {"overlap_grad_reduce": True, "overlap_param_gather": True,
                                      "grad_reduce_in_fp32": False, "ep_all_to_all": "hybridep", "hybridep_num_sms": 16}
    joined = " ".join(row["not_priced"])
    for item in ("MXFP8 parameter all-gather", "CUDA graphs (transformer_engine", "FP8 grouped (expert) GEMMs",
                 "the vocabulary"):
        assert item in joined, item
    note = data["nemotron_lightning_rows_note"]
    for fact in ("Held out", "written before the row was priced", "nothing is fitted to it", "in a list of its own"):
        assert fact in note, fact


def test_step_time_by_hand():
    # 512 x 8,192 = 4,194,304 tokens a step over 8 GPUs: / (28,672 x 8) = 18.286 s.
    assert _module().measured_seconds(_row()) == pytest.approx(18.286, abs=5e-4)


def test_the_preset_is_nano_plus_one_mtp_depth_and_matches_the_card():
    """The Nano preset's fields plus num_nextn_predict_layers 1 and the MTP pattern '*E'. The MTP depth by hand: enorm,
    hnorm (h each), eh_proj (2h x h), the attention layer (norm, q 32 x 128, k and v 2 x 128, o), the MoE layer (norm,
    router 128 x h, 128 ungated experts 2 x h x 1856, the shared 2 x h x 3712) and the final norm. Megatron-Bridge
    v0.6.0's examples/model_verification_cards/nemotron-3.5-lightning/card.yaml: 32,913,266,240 parameters in the pinned
    checkpoint = hp's total + 24 x 128 fp32 router expert biases (23 MoE layers and the depth's; buffers hp does not count,
    as for the Super preset)."""
    from hp_core.api import build_registry, count_parameters, model_from_preset

    registry = build_registry()
    nano = dict(registry.model("nemotron-3-nano-30b-a3b").hf_config)
    lightning = dict(registry.model("nemotron-3.5-lightning-30b-a3b").hf_config)
    assert lightning == {**nano, "num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*E"}
    h = 2688
    attention = h + h * (32 + 2 * 2) * 128 + 32 * 128 * h
    moe = h + 128 * h + 128 * 2 * h * 1856 + 2 * h * 3712
    mtp = 2 * h + 2 * h * h + attention + moe + h
    assert mtp == 1_335_325_824
    summary = count_parameters(model_from_preset("nemotron-3.5-lightning-30b-a3b", registry), registry)
    assert summary.by_kind["mtp"] == mtp
    assert summary.total == 31_577_937_344 + mtp == 32_913_263_168
    assert summary.total + 24 * 128 == 32_913_266_240


def test_the_page_table_is_current_and_its_prose_states_its_figures():
    runs = _module()
    from hp_core import api

    registry = api.build_registry()
    found = runs.nemotron_lightning_results(registry)
    assert [r["id"] for r in found] == [RID]
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    assert runs.nemotron_lightning_section(found) in page, "regenerate with: python benchmarks/fp8_runs.py"
    r = found[0]
    once = runs.price_moe({**_row(), "mtp_applications": 1}, registry).step_seconds
    nano = next(x for x in runs.nemotron_results(registry) if x["id"] == "mb26.06.01-gb200-nemotron-3-nano-mxfp8")
    prose = _prose()
    assert (f"hp prices it at {r['estimated_seconds']:.3f} s against {r['measured_seconds']:.3f} s measured "
            f"({r['error']:+.1%}); with the MTP block applied once it would price {once:.3f} s") in prose
    assert (f"measured {nano['measured_seconds']:.3f} s, priced {nano['estimated_seconds']:.3f} s: the two depths add "
            f"{r['measured_seconds'] / nano['measured_seconds'] - 1:.1%} to the measured step and "
            f"{r['estimated_seconds'] / nano['estimated_seconds'] - 1:.1%} to hp's") in prose
    assert "32,913,263,168 parameters, which with 24 x 128 fp32 router expert biases" in prose
