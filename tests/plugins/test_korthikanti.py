"""Golden test: the dense kind reproduces Korthikanti et al. 2022 exactly.

The closed forms and the values of the paper's Figure 1 / Table 2 are in
``data/korthikanti.json``. The dense kind is configured as the paper's
GPT layer (MHA, GeLU MLP of width 4h, LayerNorm, dropout on the attention
probabilities and after both output projections, 16-bit activations, 1-byte
dropout masks, eager attention). Tolerance: none -- every value is an exact
integer number of bytes.

Mapping of the paper's cases to the kind's recompute settings:

* ``no_parallelism``: ``tp = 1``, nothing recomputed;
* ``tensor_parallel``: ``tp = t``, no SP, nothing recomputed;
* ``tensor_sequence_parallel``: ``tp = t``, SP, ``{"gather"}`` recomputed --
  Megatron-LM re-gathers the SP all-gather output in backward instead of keeping
  it, which the paper's ``34/t`` assumes; the plain dense layer keeps it;
* ``*_selective_recompute``: the above plus the kind's ``selective`` set, the
  attention core ``{"attBMM", "headCast", "dropout", "softmax"}``;
* ``full_recompute_*``: the layer input only (``LayerCost.input_bytes``).
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from hp_core.api import estimate, layer_context
from hp_core.specs import LayerGroup, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_plugins.kinds.dense import DenseConfig, evaluate_dense

CASE_FILE = Path(__file__).resolve().parent / "data" / "korthikanti.json"

DATA = json.loads(CASE_FILE.read_text(encoding="utf-8"))
MODELS = DATA["models"]

PRECISION = PrecisionSpec(activation_bytes=2, softmax_bytes=2, dropout_mask_bytes=1)
ATTENTION_CORE = frozenset({"attBMM", "headCast", "dropout", "softmax"})

# case -> (tensor parallel?, sequence parallel?, recomputed switches, or "full")
CASES_MAP: dict[str, tuple[bool, bool, frozenset[str] | str]] = {
    "no_parallelism": (False, False, frozenset()),
    "tensor_parallel": (True, False, frozenset()),
    "tensor_sequence_parallel": (True, True, frozenset({"gather"})),
    "tensor_parallel_selective_recompute": (True, False, ATTENTION_CORE),
    "tensor_sequence_parallel_selective_recompute": (True, True, ATTENTION_CORE | {"gather"}),
    "full_recompute_tensor_parallel_layer_input": (True, False, "full"),
    "full_recompute_tensor_sequence_parallel_layer_input": (True, True, "full"),
}
FIRST_STAGE_CASES = [
    "no_parallelism",
    "tensor_parallel",
    "tensor_sequence_parallel",
    "tensor_parallel_selective_recompute",
    "tensor_sequence_parallel_selective_recompute",
]


def _gpt_layer(cfg: dict) -> DenseConfig:
    h, a = cfg["hidden_size"], cfg["num_attention_heads"]
    return DenseConfig(
        hidden_size=h,
        num_attention_heads=a,
        num_key_value_heads=a,
        intermediate_size=4 * h,
        gated_mlp=False,
        hidden_act="gelu",
        norm="layernorm",
        attention_dropout=0.1,
        hidden_dropout=0.1,
        attention_bias=True,
        attention_out_bias=True,
        mlp_bias=True,
    )


def _parallel(cfg: dict, case: str, *, pipeline: bool = False) -> ParallelSpec:
    tensor, sequence, _ = CASES_MAP[case]
    pp = cfg["pipeline_parallel"] if pipeline else 1
    vpp = cfg["virtual_pipeline_chunks"] if pipeline else 1
    # Interleaved 1F1B needs micro-batches in multiples of pp, and at least
    # 2 * pp of them for the first stage to reach its full warm-up count
    # (p*v + p - 1 <= m*v); plain 1F1B needs pp.
    micro_batches = 2 * pp if vpp > 1 else pp
    return ParallelSpec(
        tp=cfg["tensor_parallel"] if tensor else 1,
        pp=pp,
        vpp=vpp,
        sp=sequence,
        seq_len=cfg["seq_length"],
        micro_batch_size=cfg["micro_batch_size"],
        global_batch_size=micro_batches * cfg["micro_batch_size"],
    )


def _closed_form(case: str, cfg: dict) -> Fraction:
    """The paper's formula for *case*, in exact arithmetic."""
    s, b, h, a, t = (Fraction(cfg[k]) for k in ("seq_length", "micro_batch_size", "hidden_size", "num_attention_heads", "tensor_parallel"))
    sbh = s * b * h
    return {
        "no_parallelism": sbh * (34 + 5 * a * s / h),
        "tensor_parallel": sbh * (10 + 24 / t + 5 * a * s / (h * t)),
        "tensor_sequence_parallel": sbh * (34 / t + 5 * a * s / (h * t)),
        "tensor_parallel_selective_recompute": sbh * (10 + 24 / t),
        "tensor_sequence_parallel_selective_recompute": sbh * 34 / t,
        "full_recompute_tensor_parallel_layer_input": 2 * sbh,
        "full_recompute_tensor_sequence_parallel_layer_input": 2 * sbh / t,
    }[case]


PER_LAYER = [(model, case) for model in MODELS for case in MODELS[model]["activation_bytes_per_layer"]]
FIRST_STAGE = [(model, case) for model in MODELS for case in FIRST_STAGE_CASES]


def test_every_case_is_mapped():
    for model in MODELS.values():
        assert set(model["activation_bytes_per_layer"]) == set(CASES_MAP)
        assert set(model["first_stage_activation_bytes"]) == set(FIRST_STAGE_CASES)


def test_dense_selective_set_is_the_attention_core(registry):
    assert registry.layer_kind("dense").selective == ATTENTION_CORE


@pytest.mark.parametrize(("model", "case"), PER_LAYER)
def test_case_file_values_match_their_closed_forms(model, case):
    """Guards the golden data itself: each value is the paper's formula evaluated."""
    cfg = MODELS[model]["config"]
    assert _closed_form(case, cfg) == Fraction(MODELS[model]["activation_bytes_per_layer"][case])


@pytest.mark.parametrize(("model", "case"), PER_LAYER)
def test_activation_bytes_per_layer(model, case):
    cfg = MODELS[model]["config"]
    expected = MODELS[model]["activation_bytes_per_layer"][case]
    _, _, recomputed = CASES_MAP[case]
    cost = evaluate_dense(_gpt_layer(cfg), layer_context(_parallel(cfg, case), PRECISION, "eager"))
    got = cost.input_bytes if recomputed == "full" else cost.kept_under(recomputed)
    assert isinstance(got, int)
    assert got == expected


@pytest.mark.parametrize(("model", "case"), FIRST_STAGE)
def test_first_stage_activation_bytes(registry, model, case):
    cfg = MODELS[model]["config"]
    layers = cfg["num_layers"]
    _, _, recomputed = CASES_MAP[case]
    spec = ModelSpec(name=f"gpt-{model}", layers=(LayerGroup("dense", _gpt_layer(cfg), layers),))
    parallel = _parallel(cfg, case, pipeline=True)
    result = estimate(
        spec,
        parallel,
        registry=registry,
        runtime="generic",
        precision=PRECISION,
        attention="eager",
        recompute=RecomputeSpec(default=Setting(mode="switches", switches=recomputed) if recomputed else Setting()),
    )
    first = result.stages[0]
    held = sum(chunk.micro_batches_in_flight * len(chunk.layers) for chunk in first.chunks)
    assert held == MODELS[model]["first_stage_layer_equivalents_held"]
    assert first.memory.activations_bytes == MODELS[model]["first_stage_activation_bytes"][case]


@pytest.mark.parametrize("model", list(MODELS))
def test_kind_selective_setting_prices_the_paper_selective_case(registry, model):
    """``Setting("selective")`` (no SP) gives the paper's selective-recompute first stage."""
    cfg = MODELS[model]["config"]
    case = "tensor_parallel_selective_recompute"
    spec = ModelSpec(name=f"gpt-{model}", layers=(LayerGroup("dense", _gpt_layer(cfg), cfg["num_layers"]),))
    result = estimate(
        spec,
        _parallel(cfg, case, pipeline=True),
        registry=registry,
        precision=PRECISION,
        attention="eager",
        recompute=RecomputeSpec.uniform("selective"),
    )
    assert result.stages[0].memory.activations_bytes == MODELS[model]["first_stage_activation_bytes"][case]


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("sequence", [False, True], ids=["tp", "tp_sp"])
def test_first_stage_under_full_recompute(registry, model, sequence):
    """Full recompute keeps the layer input: per-layer input times the layer-equivalents held."""
    cfg = MODELS[model]["config"]
    case = "full_recompute_tensor_sequence_parallel_layer_input" if sequence else "full_recompute_tensor_parallel_layer_input"
    spec = ModelSpec(name=f"gpt-{model}", layers=(LayerGroup("dense", _gpt_layer(cfg), cfg["num_layers"]),))
    result = estimate(
        spec,
        _parallel(cfg, case, pipeline=True),
        registry=registry,
        precision=PRECISION,
        attention="eager",
        recompute=RecomputeSpec.uniform("full"),
    )
    model_data = MODELS[model]
    expected = Fraction(model_data["activation_bytes_per_layer"][case]) * Fraction(model_data["first_stage_layer_equivalents_held"])
    assert result.stages[0].memory.activations_bytes == expected
