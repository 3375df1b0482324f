"""The FSDP2 step measured by PyTorch's FSDPMemTracker: the request a config maps to, the cases format, the cache,
and (with the census extra) a tiny model's step whose static categories are derived by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hp_core.errors import ConfigError
from hp_core.io.validate import load_cases, validate_case
from hp_plugins.cases import fsdp2_measured
from hp_plugins.cases.fsdp2_measured import measure_request, read_measure_cases, request_of

DATA = Path(__file__).parent / "data" / "fsdp2_tracker_cases.json"

# A tiny Llama: every dimension a multiple of the world size 4, so FSDP2 pads nothing.
TINY = {"model_type": "llama", "vocab_size": 1024, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
        "hidden_act": "silu", "tie_word_embeddings": False}
EMBED = 1024 * 64
# q 64x64, k and v 32x64 (2 kv heads of 16), o 64x64, gate/up/down 128x64, two norms of 64.
LAYER = 64 * 64 * 2 + 32 * 64 * 2 + 128 * 64 * 3 + 2 * 64
TOTAL = 2 * EMBED + 64 + 2 * LAYER
TENSORS = 2 + 1 + 2 * 9  # embedding, head, final norm; 9 per layer


def _config(**parallel) -> dict:
    return {"model": "llama3-8b", "num_layers": 4, "runtime": "fsdp2",
            "parallel": {"dp": 8, "seq_len": 4096, **parallel}}


def test_request_of_a_config(registry):
    request = request_of(_config(), registry)
    assert (request["world"], request["tp"], request["num_layers"], request["seq_len"]) == (8, 1, 4, 4096)
    assert request["activation_checkpointing"] == "none" and request["reshard_after_forward"] is True
    assert request["hf"]["hidden_size"] == 4096
    full = request_of({**_config(dp=4, tp=2), "recompute": "full",
                       "runtime": {"name": "fsdp2", "options": {"tp_head_plan": "replicated"}}}, registry)
    assert (full["world"], full["tp"], full["activation_checkpointing"], full["head_plan"]) == (8, 2, "full", "replicated")
    vocab = request_of({**_config(dp=4, tp=2), "runtime": {"name": "fsdp2", "options": {"loss_parallel": False}}}, registry)
    assert vocab["head_plan"] == "vocab"


def test_request_of_torchtitan_checkpointing(registry):
    """Per-op SAC (the runtime's op_sac switches) and every 2nd layer full (selective_ac_option 2) map per layer."""
    op = request_of({**_config(), "recompute": {"default": ["normOp", "ffAct"]}}, registry)
    assert op["activation_checkpointing"] == "op_sac"
    every2 = request_of({**_config(), "recompute": {"default": "none", "layers": {"1": "full", "3": "full"}}}, registry)
    assert every2["activation_checkpointing"] == ["none", "full", "none", "full"]
    mixed = request_of({**_config(), "recompute": {"default": "full", "layers": {"0": ["ffAct", "normOp"]}}}, registry)
    assert mixed["activation_checkpointing"] == ["op_sac", "full", "full", "full"]
    for plan, head in (("vocab_gathered", "vocab"), ("replicated_head", "replicated")):
        request = request_of({**_config(dp=4, tp=2), "runtime": {"name": "fsdp2", "options": {"tp_plan": plan}}}, registry)
        assert request["head_plan"] == head


@pytest.mark.parametrize("change, path", [
    ({"recompute": {"default": ["ffAct"]}}, "$.config.recompute"),
    ({"recompute": {"default": {"mode": "full", "offload": 0.5}}}, "$.config.recompute"),
    ({"runtime": {"name": "fsdp2", "options": {"tp_plan": "torchtitan_llama3"}}}, "$.config.runtime.options.tp_plan"),
    ({"runtime": "megatron"}, "$.config.runtime"),
    ({"parallel": {"dp": 4, "pp": 2, "seq_len": 4096}}, "$.config.parallel.pp"),
    ({"recompute": "selective"}, "$.config.recompute"),
    ({"runtime": {"name": "fsdp2", "options": {"norm_implementation": "fused"}}}, "$.config.runtime.options.norm_implementation"),
    ({"parallel": {"dp": 4, "tp": 2, "seq_len": 4096}}, "$.config.runtime.options.loss_parallel"),
    # The tracker runs bf16 mixed precision: a recipe's quantized GEMMs and copies are not what it measures.
    ({"precision": {"recipe": "torchao-float8-tensorwise"}}, "$.config.precision.recipe"),
])
def test_request_refuses_what_the_tracker_cannot_run(registry, change, path):
    with pytest.raises(ConfigError) as err:
        request_of({**_config(), **change}, registry)
    assert err.value.path == path


def test_unknown_measure_key_refused(registry):
    with pytest.raises(ConfigError) as err:
        request_of(_config(), registry, measure={"head_plan": "vocab"})
    assert err.value.path == "$.measure"


def test_recorded_cases_are_read_as_hp_validate_cases(registry):
    document = json.loads(DATA.read_text())
    cases = load_cases(DATA, registry)
    assert [c.name for c in cases] == [c["name"] for c in document["cases"]]
    for case, raw in zip(cases, document["cases"]):
        assert case.stage_peak_bytes == (raw["measured"]["peak_bytes"],)
        assert "FSDPMemTracker" in case.source and raw["measured"]["versions"]["torch"] in case.source
        assert raw["measured"]["command"].startswith("python benchmarks/record_fsdp2_cases.py --case ")
        phases = raw["measured"]["phases"]
        assert raw["measured"]["peak_bytes"] == max(p["total"] for p in phases.values())


def test_recorded_static_categories_match_the_parameter_count(registry):
    """Sharded parameters are the rank's fp32 shard exactly: hp's parameter count * 4 / dp (no padding at these widths)."""
    from hp_core.api import estimate
    from hp_core.io.job import resolve_job
    from hp_core.io.convert import ConfigFile, structure

    for raw in json.loads(DATA.read_text())["cases"]:
        if raw["config"]["parallel"]["tp"] != 1:
            continue
        job = resolve_job(structure(raw["config"], ConfigFile, registry), registry)
        result = estimate(job.model, job.parallel, runtime="fsdp2", registry=registry)
        assert raw["measured"]["phases"]["forward"]["sharded_param"] == result.stages[0].memory.parameters_bytes, raw["name"]


def test_a_case_without_measured_is_measured_now(registry, monkeypatch):
    seen = []
    monkeypatch.setattr(fsdp2_measured, "measure_config",
                        lambda config, registry, measure=None: seen.append(config) or {"peak_bytes": 5 * 2**30})
    document = {"format": "hp-measure/1", "cases": [{"name": "a", "config": _config()}]}
    (case,) = read_measure_cases(document, registry)
    assert seen == [_config()] and case.stage_peak_bytes == (5 * 2**30,)
    assert validate_case(case, registry).stages[0].measured_bytes == 5 * 2**30


def test_bad_documents_refused(registry):
    with pytest.raises(ConfigError) as err:
        read_measure_cases({"format": "hp-measure/1", "cases": [{"name": "a", "config": _config(), "extra": 1}]}, registry)
    assert err.value.path == "$.cases[0]"
    with pytest.raises(ConfigError) as err:
        read_measure_cases({"format": "hp-measure/1", "cases": [{"name": "a", "config": _config(), "measured": {}}]}, registry)
    assert err.value.path == "$.cases[0].measured.peak_bytes"


def _tiny_request(**change) -> dict:
    return {"model": "tiny", "hf": TINY, "num_layers": 2, "seq_len": 32, "micro_batch_size": 1, "world": 4, "tp": 1,
            "head_plan": "vocab", "activation_checkpointing": "none", "reshard_after_forward": True, "optimizer": "foreach",
            **change}


def test_tiny_step_static_categories_by_hand(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    monkeypatch.setenv("HP_MEASURE_CACHE", str(tmp_path))
    result = measure_request(_tiny_request())
    forward = result["phases"]["forward"]
    assert forward["sharded_param"] == TOTAL * 4 // 4  # fp32 shards of a world of 4
    assert forward["sharded_grad"] == 0  # zero_grad(set_to_none=True) freed them
    # Two fp32 AdamW moments of the shard and one fp32 step count per parameter tensor.
    assert forward["optimizer_state"] == 2 * TOTAL + 4 * TENSORS
    # The root unit (embedding, final norm, head) stays gathered in bf16; one block's all-gather output is alive.
    assert forward["unsharded_param"] == (2 * EMBED + 64) * 2
    assert forward["all_gather"] == LAYER * 2
    assert result["peak_bytes"] == max(p["total"] for p in result["phases"].values())
    optimizer = result["phases"]["optimizer"]
    assert optimizer["sharded_grad"] == TOTAL  # fp32 gradients of the shard, reduce-scattered in fp32
    assert [row["module"].split(".", 1)[-1] for row in result["modules"][1:]] == ["model.layers.0", "model.layers.1"]
    # Cached: measured again from the file, not run.
    assert len(list(tmp_path.glob("fsdp2-*.json"))) == 1
    monkeypatch.setattr("hp_plugins.census.fsdp_step.run_step", lambda **kw: pytest.fail("not cached"))
    assert measure_request(_tiny_request()) == result


def test_tiny_step_activation_checkpointing_and_tp(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    monkeypatch.setenv("HP_MEASURE_CACHE", str(tmp_path))
    plain = measure_request(_tiny_request())
    ac = measure_request(_tiny_request(activation_checkpointing="full"))
    assert ac["phases"]["forward"]["activation"] < plain["phases"]["forward"]["activation"]
    # torchtitan's per-op policy keeps per layer and token, beyond the layer input full keeps: q (64 wide), v (32),
    # the SDPA output (64) in bf16 and its fp32 log-sum-exp (4 heads), the gate (128) and down (64) outputs in bf16.
    op = measure_request(_tiny_request(activation_checkpointing="op_sac"))
    assert op["phases"]["forward"]["activation"] - ac["phases"]["forward"]["activation"] == 2 * 32 * (
        2 * 64 + 2 * 32 + 2 * 64 + 4 * 4 + 2 * 128 + 2 * 64)
    every2 = measure_request(_tiny_request(activation_checkpointing=["none", "full"]))
    assert ac["phases"]["forward"]["activation"] < every2["phases"]["forward"]["activation"] < plain["phases"]["forward"]["activation"]
    tp = measure_request(_tiny_request(tp=2, seq_len=32))
    # dp=2 x tp=2: every TP-split weight halves, then FSDP halves it again: the replicated norms are sharded over dp only.
    norms = 64 * 5
    assert tp["phases"]["forward"]["sharded_param"] == ((TOTAL - norms) // 2 + norms) * 4 // 2


def test_hp_validate_reads_the_recorded_cases(capsys):
    """``hp validate`` on the recorded file: a row per case, the runtime named with the options its TP plan sets."""
    from hp_core.cli import main

    assert main(["validate", str(DATA), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    by_name = {case["name"]: case for case in document["cases"]}
    assert len(by_name) == len(json.loads(DATA.read_text())["cases"])
    assert by_name["llama3-8b-4l-w8-tp1-acop"]["runtime"] == "fsdp2"
    assert by_name["llama3-8b-4l-w8-tp2-vocab-acop"]["runtime"] == "fsdp2 (tp_plan=vocab_gathered)"
    (stage,) = by_name["llama3-8b-4l-w8-tp1-acop"]["stages"]
    assert abs(stage["error"]) < 0.001
    assert main(["validate", str(DATA)]) == 0  # the table renders (it did not with a runtime carrying options)
