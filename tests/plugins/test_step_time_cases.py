"""Golden tests: step time against measured training runs.

Two sources in ``data/`` (provenance: ``data/README.md``):

* ``megatron_measured.json`` -- four Megatron-LM runs on one 8x B200 node
  (Megatron-Core 0.14, Transformer Engine 2.11), each timed at several
  micro-batch counts. Each case's model and layout are built from the case
  itself: Llama-3-70B truncated to the layers run (the preset through
  ``ModelSpec.with_body_layers``), DeepSeek-V2 from its ``training_config``;
  the vocabulary is ``--vocab-size + 1`` (Megatron's NullTokenizer adds EOD),
  which the ``megatron`` runtime pads to a multiple of ``128 * tp``; degrees,
  micro-batch size, global batch and sequence length come from the JSON. Priced
  with the ``megatron`` runtime and :data:`~hp_plugins.runtimes.timing_profiles.MEGATRON_TE`
  (``cp_kind`` as the case ran ``--cp-comm-type``).
  Tolerance 10% (the issue's bar). These rows are held out of the fit of the
  Blackwell ``sustained_slowdown`` (``test_simumax_runs.py``).
* ``korthikanti.json`` -- Table 5 of Korthikanti et al. 2022: 22B, 175B, 530B
  and 1T GPT models on A100 with full recompute versus sequence parallelism plus
  selective recompute, written down below (:data:`KORTHIKANTI_LAYOUTS`).
  Priced with :data:`~hp_plugins.runtimes.timing_profiles.MEGATRON_LM_2022` and eager
  attention, as the paper ran. Tolerance 10%.
"""

from __future__ import annotations

import json

import pytest

from hp_core.specs import LayerGroup, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_core.api import step_time
from hp_plugins.kinds.dense import DenseConfig
from hp_plugins.kinds.embedding import EmbeddingConfig
from hp_plugins.kinds.output import OutputConfig
from hp_plugins.runtimes.timing_profiles import MEGATRON_LM_2022, MEGATRON_TE
from measured_cases import CASES, MEGATRON_FILE
from measured_cases import megatron_layout as _megatron_layout
from measured_cases import megatron_model as _megatron_model

KORTHIKANTI_FILE = CASES / "korthikanti.json"

MEGATRON = json.loads(MEGATRON_FILE.read_text(encoding="utf-8"))["cases"]
KORTHIKANTI = json.loads(KORTHIKANTI_FILE.read_text(encoding="utf-8"))

TOLERANCE = 0.10
# Since the Blackwell ``sustained_slowdown`` of MEGATRON_TE (fitted to the other
# 33 SimuMax B200 runs, these rows held out: test_simumax_runs.py) every row is
# within 6.2% (DeepSeek-V2 at 32 micro-batches); without it they were 3.0% to
# 11.9% below the measured time.


def _megatron_seconds(case: dict, row: dict, registry) -> float:
    result = step_time(
        _megatron_model(case, registry),
        _megatron_layout(case, row),
        registry=registry,
        hardware=registry.hardware_preset("b200-simumax").spec,
        runtime="megatron",
        profile=MEGATRON_TE,
    )
    assert result.micro_batches == row["micro_batch_count"]
    return result.step_seconds


def _rows():
    for case in MEGATRON:
        for row in case["measured"]["timing_by_mbc"]:
            yield pytest.param(case, row, id=f"{case['case_id']}-mbc{row['micro_batch_count']}")


@pytest.mark.parametrize("case, row", list(_rows()))
def test_megatron_step_time_within_10_percent(case, row, megatron_registry):
    estimated = _megatron_seconds(case, row, megatron_registry)
    measured = row["real_ms"] / 1e3
    assert abs(estimated - measured) / measured <= TOLERANCE, f"estimated {estimated * 1e3:.1f} ms, measured {row['real_ms']} ms"


def test_layouts_of_one_model_rank_as_measured(megatron_registry):
    """Where cases share a model and sequence length, the time per sequence ranks them as measured."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for case in MEGATRON:
        key = (case["model"], case["training_config"]["batch"]["seq_length"])
        groups.setdefault(key, []).append(case)
    compared = 0
    for cases in groups.values():
        counts = set.intersection(*({r["micro_batch_count"] for r in c["measured"]["timing_by_mbc"]} for c in cases))
        for count in sorted(counts):
            if len(cases) < 2:
                continue
            measured, estimated = {}, {}
            for case in cases:
                row = next(r for r in case["measured"]["timing_by_mbc"] if r["micro_batch_count"] == count)
                measured[case["case_id"]] = row["real_ms"] / row["global_batch_size"]
                estimated[case["case_id"]] = _megatron_seconds(case, row, megatron_registry) / row["global_batch_size"]
            assert sorted(measured, key=measured.get) == sorted(estimated, key=estimated.get), (count, measured, estimated)
            compared += 1
    assert compared >= 3  # Llama-3-70B tp1/pp2/dp4 against tp4/dp2 at 4, 8 and 32 micro-batches


# ----------------------------------------------------------------------------- Korthikanti et al. 2022, Table 5

# The paper's Table 3 layouts for Table 5: (pipeline stages, interleaved chunks per stage,
# global batch); tensor parallel 8, data parallel 1, micro-batch and sequence from the case file.
KORTHIKANTI_LAYOUTS = {"22B": (1, 1, 4), "175B": (8, 3, 64), "530B": (35, 3, 280), "1T": (64, 1, 512)}
# Table 5's two columns: the baseline (TP without SP, full recompute) and the paper's method:
# SP with the attention core recomputed (the dense kind's selective set) and, as Megatron-LM
# does, the SP all-gather re-run in backward (the ``gather`` switch; paper Section 4.2.2).
KORTHIKANTI_RUNS = {
    "full_recompute": (False, "full"),
    "sequence_parallel_plus_selective_recompute": (True, ["attBMM", "headCast", "dropout", "softmax", "gather"]),
}


def _gpt(name: str) -> tuple[ModelSpec, dict]:
    """The paper's GPT: MHA, GeLU MLP of width 4h, LayerNorm, biases, dropout 0.1, tied 51200-token vocabulary, no rotary embedding."""
    c = KORTHIKANTI["models"][name]["config"]
    h = c["hidden_size"]
    layer = DenseConfig(
        hidden_size=h, num_attention_heads=c["num_attention_heads"], num_key_value_heads=c["num_attention_heads"],
        intermediate_size=4 * h, gated_mlp=False, hidden_act="gelu", norm="layernorm", attention_bias=True,
        attention_out_bias=True, mlp_bias=True, attention_dropout=0.1, hidden_dropout=0.1,
        partial_rotary_factor=0.0,  # Megatron-LM's GPT of 2022: learned absolute positions, no rotary embedding
    )
    model = ModelSpec(
        name=f"gpt-{name}",
        layers=(
            LayerGroup(kind="embedding", config=EmbeddingConfig(vocab_size=c["vocab_size"], hidden_size=h)),
            LayerGroup(kind="dense", config=layer, count=c["num_layers"]),
            LayerGroup(kind="output", config=OutputConfig(vocab_size=c["vocab_size"], hidden_size=h, tie_word_embeddings=True, norm="layernorm")),
        ),
        source="Korthikanti et al. 2022, Table 3",
    )
    return model, c


@pytest.mark.parametrize("name", list(KORTHIKANTI_LAYOUTS))
@pytest.mark.parametrize("run", list(KORTHIKANTI_RUNS))
def test_korthikanti_table5_within_10_percent(name, run, registry):
    model, c = _gpt(name)
    pp, vpp, gbs = KORTHIKANTI_LAYOUTS[name]
    sp, setting = KORTHIKANTI_RUNS[run]
    parallel = ParallelSpec(
        tp=c["tensor_parallel"], pp=pp, vpp=vpp, dp=1, sp=sp, zero=0,
        micro_batch_size=c["micro_batch_size"], global_batch_size=gbs, seq_len=c["seq_length"],
    )
    assert (pp, vpp) == (c["pipeline_parallel"], c["virtual_pipeline_chunks"])
    result = step_time(
        model, parallel, registry=registry, hardware=registry.hardware_preset("a100-80gb").spec,
        profile=MEGATRON_LM_2022, attention="eager", precision=PrecisionSpec(softmax_bytes=2),
        recompute=RecomputeSpec(default=Setting.parse(setting)),
    )
    measured = KORTHIKANTI["measured_step_seconds"][run][name]
    assert abs(result.step_seconds - measured) / measured <= TOLERANCE, f"estimated {result.step_seconds:.2f} s, measured {measured} s"
