"""Contract tests every registered layer kind must pass.

Parametrised over the kinds a fresh registry holds, so a new kind is tested as
soon as it is registered -- and fails :func:`test_every_registered_kind_has_a_sample`
until it adds a small config to :data:`SAMPLES`. Each sample is sized so that
every degree used here (``tp`` 1, 2, 4; micro-batch 1, 2, 4) divides its shapes.
"""

from __future__ import annotations

import pytest

from hp_core.api import build_registry, with_sublayers
from hp_core.errors import ConfigError
from hp_core.specs import LayerGroup, PrecisionSpec
from hp_core.types import SWITCHES, LayerContext, LayerCost, LayerKind
from hp_plugins.dense import DenseConfig
from hp_plugins.embedding import EmbeddingConfig
from hp_plugins.mla import MLAConfig, MLAMoEConfig
from hp_plugins.moe import MoEConfig
from hp_plugins.mtp import MTPConfig
from hp_plugins.output import OutputConfig

_MLA = dict(hidden_size=256, num_attention_heads=8, kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32)
_MLA_MOE = MLAMoEConfig(**_MLA, q_lora_rank=64, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
                        shared_expert_intermediate_size=128)

# Small configs per kind name; several per kind cover its options.
SAMPLES: dict[str, list[object]] = {
    "dense": [
        DenseConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4, intermediate_size=512),
        DenseConfig(
            hidden_size=256,
            num_attention_heads=4,
            num_key_value_heads=4,
            intermediate_size=1024,
            gated_mlp=False,
            hidden_act="gelu",
            norm="layernorm",
            attention_dropout=0.1,
            hidden_dropout=0.1,
            attention_bias=True,
            attention_out_bias=True,
            mlp_bias=True,
        ),
        DenseConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4, head_dim=64, intermediate_size=768, qk_norm=True),
    ],
    "moe": [
        MoEConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4, num_experts=8, num_experts_per_tok=2,
                  moe_intermediate_size=128),
        MoEConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4, num_experts=8, num_experts_per_tok=2,
                  moe_intermediate_size=128, shared_expert_intermediate_size=256, shared_expert_gate=True,
                  capacity_factor=1.25, pad_to_capacity=True, attention_bias=True, qk_norm=True),
    ],
    "mla": [
        MLAConfig(**_MLA, q_lora_rank=64, intermediate_size=512),
        MLAConfig(**_MLA, intermediate_size=512, attention_dropout=0.1, hidden_dropout=0.1),
    ],
    "mla_moe": [_MLA_MOE],
    "mtp": [
        MTPConfig(vocab_size=1024, hidden_size=256, layer=LayerGroup("mla_moe", _MLA_MOE)),
        MTPConfig(vocab_size=1024, hidden_size=256, layer=LayerGroup("dense", DenseConfig(
            hidden_size=256, num_attention_heads=8, num_key_value_heads=4, intermediate_size=512))),
    ],
    "embedding": [
        EmbeddingConfig(vocab_size=1024, hidden_size=256),
        EmbeddingConfig(vocab_size=1024, hidden_size=256, dropout=0.1),
    ],
    "output": [
        OutputConfig(vocab_size=1024, hidden_size=256),
        OutputConfig(vocab_size=1024, hidden_size=256, tie_word_embeddings=True, norm="layernorm"),
    ],
}

SEQ_LEN = 64
# softmax in fp32 so that eager attention's cast terms exist
PRECISION = PrecisionSpec(softmax_bytes=4)
ATTENTIONS = ("eager", "flash")


def _kind_names() -> list[str]:
    return [kind.name for kind in build_registry(use_env=False).layer_kinds]


def pytest_generate_tests(metafunc):
    if "kind_name" in metafunc.fixturenames:
        metafunc.parametrize("kind_name", _kind_names())


_REGISTRY = build_registry(use_env=False)


def _context(*, tp: int = 1, sp: bool = False, b: int = 1, attention: str = "eager") -> LayerContext:
    context = LayerContext(
        tp=tp, cp=1, sp=sp, ep=1, etp=1, micro_batch_size=b, seq_len=SEQ_LEN, precision=PRECISION, attention=attention
    )
    return with_sublayers(context, _REGISTRY)  # composite kinds (mtp) evaluate their layer through it


def _samples(kind_name: str) -> list[object]:
    if kind_name not in SAMPLES:
        pytest.fail(f"layer kind {kind_name!r} is registered but has no sample config in SAMPLES; add one")
    return SAMPLES[kind_name]


def _evaluate(kind: LayerKind, config: object, context: LayerContext) -> LayerCost | None:
    """The kind's cost, or ``None`` where its validator (or a nested layer's) refuses the layout."""
    try:
        if kind.validate is not None:
            kind.validate(config, context)
        cost = kind.evaluate(config, context)
    except ConfigError:
        return None
    assert isinstance(cost, LayerCost)
    return cost


def _must(kind: LayerKind, config: object, context: LayerContext) -> LayerCost:
    cost = _evaluate(kind, config, context)
    assert cost is not None, f"{kind.name} refused a layout its sample is sized for: {context}"
    return cost


def _terms(cost: LayerCost) -> dict[str, int]:
    return {term.op: term.bytes for term in cost.activations}


def _is_byte_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


ALL_CONTEXTS = [
    dict(tp=tp, sp=sp, b=b, attention=attention)
    for tp in (1, 2, 4)
    for sp in (False, True)
    for b in (1, 2)
    for attention in ATTENTIONS
    if not (sp and tp == 1)
]


def test_every_registered_kind_has_a_sample(registry):
    missing = sorted(kind.name for kind in registry.layer_kinds if kind.name not in SAMPLES)
    assert not missing, f"registered layer kinds without a sample config in tests/plugins/test_contract.py: {missing}"
    assert {kind.name for kind in registry.layer_kinds} >= {"dense", "embedding", "output"}


def test_samples_are_configs_of_their_kind(registry, kind_name):
    kind = registry.layer_kind(kind_name)
    for config in _samples(kind_name):
        assert isinstance(config, kind.config_type)


def test_declared_switches(registry, kind_name):
    kind = registry.layer_kind(kind_name)
    assert set(kind.switches) <= set(SWITCHES)
    assert len(set(kind.switches)) == len(kind.switches)
    assert kind.selective <= set(kind.switches)


def test_terms_name_only_declared_switches(registry, kind_name):
    kind = registry.layer_kind(kind_name)
    for config in _samples(kind_name):
        for ctx in ALL_CONTEXTS:
            cost = _evaluate(kind, config, _context(**ctx))
            if cost is None:
                continue
            for term in cost.activations:
                assert term.switch is None or term.switch in kind.switches, (term, ctx)


def test_byte_fields_are_non_negative_ints(registry, kind_name):
    kind = registry.layer_kind(kind_name)
    for config in _samples(kind_name):
        for ctx in ALL_CONTEXTS:
            cost = _evaluate(kind, config, _context(**ctx))
            if cost is None:
                continue
            fields = {
                "input_bytes": cost.input_bytes,
                "working_bytes": cost.working_bytes,
                "buffers_once_bytes": cost.buffers_once_bytes,
                "buffers_per_micro_batch_bytes": cost.buffers_per_micro_batch_bytes,
                "kept_bytes": cost.kept_bytes,
                **{f"term {t.op}": t.bytes for t in cost.activations},
            }
            bad = {name: value for name, value in fields.items() if not _is_byte_count(value)}
            assert not bad, (bad, ctx)
            for p in cost.params:
                assert _is_byte_count(p.elements) and _is_byte_count(p.stored_elements)
                assert p.stored_elements >= p.elements
            ops = [t.op for t in cost.activations]
            assert len(ops) == len(set(ops)), f"duplicate op names {ops}"


def test_evaluation_is_deterministic(registry, kind_name):
    kind = registry.layer_kind(kind_name)
    for config in _samples(kind_name):
        for ctx in ALL_CONTEXTS:
            first = _evaluate(kind, config, _context(**ctx))
            assert first == _evaluate(kind, config, _context(**ctx))


def test_full_recompute_keeps_least(registry, kind_name):
    """Keeping only the input is never more than any switch setting keeps."""
    kind = registry.layer_kind(kind_name)
    every = frozenset(kind.switches)
    for config in _samples(kind_name):
        for ctx in ALL_CONTEXTS:
            cost = _evaluate(kind, config, _context(**ctx))
            if cost is None:
                continue
            assert cost.input_bytes <= cost.kept_under(every) <= cost.kept_under(kind.selective) <= cost.kept_bytes


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize(("tp", "sp"), [(1, False), (2, False), (2, True), (4, True)])
def test_linear_in_micro_batch_size(registry, kind_name, attention, tp, sp):
    kind = registry.layer_kind(kind_name)
    for config in _samples(kind_name):
        layout = _context(tp=tp, sp=sp, b=1, attention=attention)
        one = _must(kind, config, layout) if tp == 1 or sp else _evaluate(kind, config, layout)
        if one is None:  # a kind that needs sequence parallelism with tp > 1 (MoE)
            continue
        assert one.kept_bytes > 0
        for b in (2, 4):
            many = _must(kind, config, _context(tp=tp, sp=sp, b=b, attention=attention))
            assert _terms(many) == {op: b * n for op, n in _terms(one).items()}
            assert many.kept_bytes == b * one.kept_bytes
            assert many.input_bytes == b * one.input_bytes
            # The working set is affine in the batch: a weight gradient materialised in
            # backward (the embedding's dense table gradient) does not grow with it.
            fixed = 2 * one.working_bytes - _must(kind, config, _context(tp=tp, sp=sp, b=2, attention=attention)).working_bytes
            assert many.working_bytes == b * (one.working_bytes - fixed) + fixed
            assert many.buffers_per_micro_batch_bytes == b * one.buffers_per_micro_batch_bytes
            # Parameters do not depend on the batch.
            assert many.params == one.params


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("tp", [2, 4])
def test_tp_split_terms_divide_by_tp(registry, kind_name, attention, tp):
    """Without SP: terms marked ``tp_split`` shrink by ``tp``, the others do not change."""
    kind = registry.layer_kind(kind_name)
    for config in _samples(kind_name):
        whole = _must(kind, config, _context(tp=1, attention=attention))
        split = _evaluate(kind, config, _context(tp=tp, attention=attention))
        if split is None:
            continue
        flags = {t.op: t.tp_split for t in split.activations}
        assert flags == {t.op: t.tp_split for t in whole.activations}
        for op, n in _terms(split).items():
            if flags[op]:
                assert _terms(whole)[op] == tp * n, op
            else:
                assert _terms(whole)[op] == n, op


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("tp", [2, 4])
def test_sequence_parallel_leaves_tp_split_terms_alone(registry, kind_name, attention, tp):
    """SP splits only the regions TP does not (a census's ``saved_tp`` is divided by tp alone)."""
    kind = registry.layer_kind(kind_name)
    for config in _samples(kind_name):
        plain = _evaluate(kind, config, _context(tp=tp, attention=attention))
        if plain is None:
            continue
        seq = _must(kind, config, _context(tp=tp, sp=True, attention=attention))
        assert {t.op: t.bytes for t in seq.activations if t.tp_split} == {t.op: t.bytes for t in plain.activations if t.tp_split}
        # and never keeps more than without SP
        assert seq.kept_under(frozenset(kind.switches)) <= plain.kept_under(frozenset(kind.switches))


@pytest.mark.parametrize("tp", [2, 4])
def test_tp_shards_add_up_to_the_unsharded_parameters(registry, kind_name, tp):
    kind = registry.layer_kind(kind_name)
    for config in _samples(kind_name):
        whole = _must(kind, config, _context(tp=1))
        split = _must(kind, config, _context(tp=tp, sp=True))
        whole_params = {p.name: p for p in whole.params}
        # Whole-model element counts do not depend on the layout.
        assert {p.name: (p.elements, p.group, p.tp_split, p.shared_with) for p in split.params} == {
            p.name: (p.elements, p.group, p.tp_split, p.shared_with) for p in whole.params
        }
        for p in split.params:
            if p.group == "routed_expert":
                continue  # split over ep * etp, not tp: tests/plugins/test_moe.py
            if p.tp_split:
                shard = -(-p.stored_elements // tp)  # what one rank allocates
                assert shard * tp == p.stored_elements, f"{p.name}: uneven split over tp={tp}"
                # The samples are sized so that no padding is needed.
                assert sum(shard for _ in range(tp)) == whole_params[p.name].elements
            else:
                assert p.stored_elements == whole_params[p.name].stored_elements
