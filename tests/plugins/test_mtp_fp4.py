"""Megatron-Core runs the MTP module in bf16 under FP4 ("currently ignoring FP4 in MTP layers",
multi_token_prediction.py at NVIDIA/Megatron-LM core_v0.16.0 lines 773-803: the FP8 context only where
config.fp8): the megatron runtime's Runtime.compute_dtype_kinds, docs/precision.md."""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import build_registry, model_from_preset
from hp_core.engine.precision import quantized_weight_elements
from hp_core.engine.prepare import prepare
from hp_core.specs import ParallelSpec

# DeepSeek-V3 (hidden 7168), one 4,096-token sequence, EP 32.
LAYOUT = ParallelSpec(dp=32, ep=32, seq_len=4096)
# eh_proj's input, the concatenation [4096, 2 * 7168]: 58,720,256 elements, 117,440,512 bytes in bf16; NVFP4 keeps
# 0.5 byte an element and an E4M3 scale per 16 (0.5625 bytes): 33,030,144.
EH_BF16, EH_NVFP4 = 117_440_512, 33_030_144
# The module's quantized GEMM weights on one EP-32 rank: eh_proj 2 * 7168 * 7168 = 102,760,448; MLA q_a 7168 * 1536,
# q_b 1536 * 128 * 192, kv_a 7168 * 576, kv_b 512 * 128 * 256, o 128 * 128 * 7168 (187,105,280 together); 8 of the
# 256 experts and the shared one, 3 * 7168 * 2048 each (396,361,728); the router's gate stays bf16.
MTP_WEIGHTS = 102_760_448 + 187_105_280 + 9 * 44_040_192


@pytest.fixture(scope="module")
def registry():
    return build_registry()


def _mtp(registry, runtime: str, recipe: str):
    model = model_from_preset("deepseek-v3", registry)
    precision = attrs.evolve(registry.runtime(runtime).precision, recipe=recipe)
    run = prepare(model, LAYOUT, registry=registry, runtime=runtime, precision=precision)
    index = next(i for i, group in enumerate(model.layers) if group.kind == "mtp")
    return run.costs[index], index, run


def test_megatron_keeps_the_mtp_module_in_bf16_under_nvfp4(registry):
    bf16, _, _ = _mtp(registry, "megatron", "bf16")
    cost, index, run = _mtp(registry, "megatron", "nvfp4")
    assert {t.op: t.bytes for t in cost.activations}["eh_proj_in"] == EH_BF16
    assert cost.activations == bf16.activations  # every kept tensor as in bf16
    assert quantized_weight_elements([(bf16, 1)]) == MTP_WEIGHTS
    assert quantized_weight_elements([(cost, 1)]) == 0  # no FP4 weight copy
    assert cost.work.quantized is False  # its GEMMs at the bf16 rate
    assert run.layers.exempt == frozenset({index})
    # The body's MLA-MoE layers stay in FP4: their linear inputs quantized.
    body = next(c for c, g in zip(run.costs, run.model.layers) if g.kind == "mla_moe")
    assert body.work.quantized is True


def test_fp8_and_other_runtimes_keep_the_module_as_the_body(registry):
    fp8, _, _ = _mtp(registry, "megatron", "fp8-current")
    assert {t.op: t.bytes for t in fp8.activations}["eh_proj_in"] == EH_BF16 // 2  # the FP8 context: 1 byte an element
    assert quantized_weight_elements([(fp8, 1)]) == MTP_WEIGHTS and fp8.work.quantized is True
    generic, _, run = _mtp(registry, "generic", "nvfp4")
    assert {t.op: t.bytes for t in generic.activations}["eh_proj_in"] == EH_NVFP4
    assert quantized_weight_elements([(generic, 1)]) == MTP_WEIGHTS and run.layers.exempt == frozenset()


def test_the_search_prices_the_module_as_prepare_does(registry):
    from hp_core.engine.prepare import model_kinds, resolve_runtime
    from hp_core.engine.search.prepared_costs import PreparedCosts

    model = model_from_preset("deepseek-v3", registry)
    _, index, _ = _mtp(registry, "megatron", "nvfp4")
    runtime, precision, _ = resolve_runtime(registry, "megatron", None, None)
    for recipe, exempt in (("nvfp4", {index}), ("fp8-current", set())):
        prepared = PreparedCosts(model, model_kinds(model, registry), attrs.evolve(precision, recipe=recipe),
                                 registry.precision_recipe(recipe), runtime)
        assert prepared.exempt == frozenset(exempt), recipe


def test_estimate_step_and_search_say_the_mtp_module_runs_in_the_compute_dtype(capsys):
    # hp says what it priced: the module's kind in the provenance (compute_dtype_kinds), a Kept layers line in the
    # text, and in the search's header and JSON; nothing under an FP8 recipe, where Megatron-Core quantizes it.
    import json

    from cli_run import run

    argv = ["--model", "deepseek-v3", "--num-layers", "4", "--devices", "64", "--ep", "8", "--hardware", "b200",
            "--runtime", "megatron"]
    status, out, _ = run(capsys, "estimate", *argv, "--precision", "nvfp4", "--json")
    doc = json.loads(out)
    assert status == 0
    assert doc["provenance"]["compute_dtype_kinds"] == ["mtp"] and doc["time"]["provenance"]["compute_dtype_kinds"] == ["mtp"]
    status, out, _ = run(capsys, "estimate", *argv, "--precision", "nvfp4")
    assert status == 0
    assert ("Kept layers: mtp layers wholly in the compute dtype under nvfp4 (the runtime's trainer quantizes none of "
            "them; docs/precision.md)") in " ".join(out.split())
    status, out, _ = run(capsys, "estimate", *argv, "--precision", "mxfp8", "--json")
    doc = json.loads(out)
    assert "compute_dtype_kinds" not in doc["provenance"] and "compute_dtype_kinds" not in doc["time"]["provenance"]
    search = ["search", *(a for a in argv if a not in ("--ep", "8")), "--precision", "nvfp4", "--top", "1"]
    status, out, _ = run(capsys, *search, "--json")
    assert status == 0 and json.loads(out)["compute_dtype_kinds"] == ["mtp"]
    status, out, _ = run(capsys, *search)
    assert status == 0
    assert "Kept layers: mtp layers wholly in the compute dtype in every layout" in " ".join(out.split())
    status, out, _ = run(capsys, *search[:-4], "--precision", "mxfp8", "--top", "1", "--json")
    assert status == 0 and json.loads(out)["compute_dtype_kinds"] == []
