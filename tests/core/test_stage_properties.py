"""Properties of the stage planner over random valid dense layouts (docs/concepts.md, docs/recompute.md).

Small models (widths 64..512, 1..16 layers) under small degrees; each example
runs a handful of estimates, so the budget of examples stays modest.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hp_core.api import build_registry, estimate, layer_context
from hp_core.results import CATEGORIES, MemoryBreakdown
from hp_core.specs import LayerGroup, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_plugins.kinds.dense import DenseConfig, evaluate_dense
from hp_plugins.kinds.embedding import EmbeddingConfig, evaluate_embedding
from hp_plugins.kinds.output import OutputConfig, evaluate_output

# The registry fixture is frozen and never mutated, so sharing it across the
# examples of one test is safe.
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

DENSE_SWITCHES = ("attBMM", "headCast", "dropout", "softmax", "normOp", "gather", "ffAct")


@attrs.frozen
class Case:
    model: ModelSpec
    parallel: ParallelSpec
    precision: PrecisionSpec
    attention: str
    micro_batches: int

    def run(self, registry, **overrides):
        parallel = attrs.evolve(self.parallel, **overrides.pop("parallel", {}))
        return estimate(
            self.model,
            parallel,
            registry=registry,
            precision=self.precision,
            attention=self.attention,
            **overrides,
        )


@st.composite
def cases(draw, *, schedule: str | None = None):
    hidden = 64 * draw(st.integers(1, 8))
    heads = draw(st.sampled_from([a for a in (1, 2, 4, 8, 16) if hidden % a == 0]))
    kv_heads = draw(st.sampled_from([g for g in (1, 2, 4, 8, 16) if heads % g == 0]))
    intermediate = 64 * draw(st.integers(1, 16))
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if kv_heads % t == 0 and intermediate % t == 0]))
    # (pp, vpp) first, then a layer count the pp * vpp chunks split evenly (at most 16)
    shapes = [(p, v) for p in (1, 2, 3, 4) for v in (1, 2, 3) if v == 1 or p > 1]
    if schedule == "1f1b":
        shapes = [(p, v) for p, v in shapes if v == 1]
    elif schedule == "interleaved_1f1b":
        shapes = [(p, v) for p, v in shapes if v > 1]
    pp, vpp = draw(st.sampled_from(shapes))
    layers = pp * vpp * draw(st.integers(1, 16 // (pp * vpp)))
    cp = draw(st.sampled_from([1, 2, 4]))
    seq_len = draw(st.sampled_from([64, 128, 256]))
    sp = draw(st.booleans()) if tp > 1 else False
    dp = draw(st.sampled_from([1, 2, 3, 4]))
    micro_batch_size = draw(st.integers(1, 2))
    if vpp > 1:
        micro_batches = pp * draw(st.integers(1, 3))
    else:
        micro_batches = draw(st.integers(1, 2 * pp + 1))
    vocab = 64 * draw(st.integers(1, 32)) + draw(st.sampled_from([0, 0, 3]))  # sometimes not a tp multiple
    dense = DenseConfig(
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=intermediate,
        gated_mlp=draw(st.booleans()),
        hidden_act="silu",
        norm=draw(st.sampled_from(["rmsnorm", "layernorm"])),
        qk_norm=draw(st.booleans()),
        attention_dropout=draw(st.sampled_from([0.0, 0.1])),
        hidden_dropout=draw(st.sampled_from([0.0, 0.1])),
    )
    model = ModelSpec(
        name="random-dense",
        layers=(
            LayerGroup("embedding", EmbeddingConfig(vocab_size=vocab, hidden_size=hidden)),
            LayerGroup("dense", dense, layers),
            LayerGroup("output", OutputConfig(vocab_size=vocab, hidden_size=hidden, tie_word_embeddings=draw(st.booleans()))),
        ),
    )
    parallel = ParallelSpec(
        dp=dp,
        tp=tp,
        pp=pp,
        vpp=vpp,
        cp=cp,
        sp=sp,
        zero=draw(st.integers(0, 3)),
        reshard_after_forward=draw(st.booleans()),
        micro_batch_size=micro_batch_size,
        global_batch_size=micro_batches * micro_batch_size * dp,
        seq_len=seq_len,
    )
    precision = PrecisionSpec(softmax_bytes=draw(st.sampled_from([2, 4])))
    return Case(model, parallel, precision, draw(st.sampled_from(["eager", "flash"])), micro_batches)


# --------------------------------------------------------------------------- (1) breakdown


def test_categories_cover_every_byte_field():
    fields = {f.name for f in attrs.fields(MemoryBreakdown)}
    assert fields == {f"{name}_bytes" for name in CATEGORIES}


@PROPERTY
@given(case=cases())
def test_categories_add_up_to_the_peak(registry, case):
    result = case.run(registry)
    assert len(result.stages) == case.parallel.pp
    assert result.micro_batches == case.micro_batches
    for stage in result.stages:
        values = {f.name: getattr(stage.memory, f.name) for f in attrs.fields(MemoryBreakdown)}
        assert all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values.values()), values
        assert stage.peak_bytes == stage.memory.peak_bytes == sum(values.values())
        assert stage.memory.static_bytes == (
            values["parameters_bytes"] + values["gradients_bytes"]
            + values["master_parameters_bytes"] + values["optimizer_states_bytes"]
        )
    assert result.peak_bytes == max(stage.peak_bytes for stage in result.stages)
    # every body layer sits on exactly one stage
    body = sorted(i for stage in result.stages for i in stage.layers)
    assert body == list(range(case.model.layers[1].count))


# --------------------------------------------------------------------------- (2) recompute


@PROPERTY
@given(case=cases(), data=st.data())
def test_recomputing_more_never_keeps_more(registry, case, data):
    smaller = frozenset(data.draw(st.sets(st.sampled_from(DENSE_SWITCHES)), label="smaller"))
    larger = smaller | data.draw(st.sets(st.sampled_from(DENSE_SWITCHES)), label="extra")

    def activations(setting: Setting) -> list[int]:
        result = case.run(registry, recompute=RecomputeSpec(default=setting))
        return [stage.memory.activations_bytes for stage in result.stages]

    none = activations(Setting())
    selective = activations(Setting(mode="selective"))
    full = activations(Setting(mode="full"))
    small = activations(Setting(mode="switches", switches=smaller))
    large = activations(Setting(mode="switches", switches=larger))
    every = activations(Setting(mode="switches", switches=frozenset(DENSE_SWITCHES)))
    for i in range(case.parallel.pp):
        assert none[i] >= selective[i] >= full[i]
        assert none[i] >= small[i] >= large[i] >= every[i] >= full[i]


# --------------------------------------------------------------------------- (3) determinism


@PROPERTY
@given(case=cases())
def test_same_inputs_same_estimate(registry, case):
    first = case.run(registry, recompute=RecomputeSpec.uniform("selective"))
    again = case.run(registry, recompute=RecomputeSpec.uniform("selective"))
    fresh = case.run(build_registry(use_env=False), recompute=RecomputeSpec.uniform("selective"))
    assert first == again == fresh


# --------------------------------------------------------------------------- (4) ZeRO


@PROPERTY
@given(case=cases())
def test_zero_sharding_conserves_totals(registry, case):
    d = case.parallel.dp * case.parallel.cp
    by_zero = {z: case.run(registry, parallel={"zero": z}).stages for z in (0, 1, 2, 3)}
    # category -> the ZeRO level from which it is sharded over dp*cp
    sharded_from = {
        "optimizer_states_bytes": 1,
        "master_parameters_bytes": 1,
        "gradients_bytes": 2,
        "parameters_bytes": 3,
    }
    for i, plain in enumerate(by_zero[0]):
        for category, level in sharded_from.items():
            whole = getattr(plain.memory, category)
            for z in (1, 2, 3):
                got = getattr(by_zero[z][i].memory, category)
                if z >= level:
                    # one parameter group (dense): one ceiling, so within d bytes
                    assert whole <= got * d < whole + d, (category, z)
                else:
                    assert got == whole, (category, z)
        for z in (1, 2, 3):
            assert by_zero[z][i].memory.activations_bytes == plain.memory.activations_bytes


# --------------------------------------------------------------------------- (5) in flight


def _kept_per_layer(case: Case) -> tuple[int, int, int]:
    context = layer_context(case.parallel, case.precision, case.attention)
    emb, dense, out = (g.config for g in case.model.layers)
    return (
        evaluate_embedding(emb, context).kept_bytes,
        evaluate_dense(dense, context).kept_bytes,
        evaluate_output(out, context).kept_bytes,
    )


@PROPERTY
@given(case=cases(schedule="1f1b"))
def test_1f1b_stage_holds_min_of_stages_left_and_micro_batches(registry, case):
    result = case.run(registry)
    pp, m = case.parallel.pp, case.micro_batches
    emb, dense, out = _kept_per_layer(case)
    per_stage = case.model.layers[1].count // pp
    for i, stage in enumerate(result.stages):
        held = min(pp - i, m)
        assert stage.micro_batches_in_flight == held
        assert [c.micro_batches_in_flight for c in stage.chunks] == [held]
        kept = per_stage * dense + (emb if i == 0 else 0) + (out if i == pp - 1 else 0)
        assert stage.memory.activations_bytes == held * kept


@PROPERTY
@given(case=cases(schedule="interleaved_1f1b"))
def test_interleaved_in_flight(registry, case):
    result = case.run(registry)
    p, v, m = case.parallel.pp, case.parallel.vpp, case.micro_batches
    layers = case.model.layers[1].count
    for i, stage in enumerate(result.stages):
        expected = min((p - i - 1) * 2 + (v - 1) * p + 1, m * v)
        assert stage.micro_batches_in_flight == expected
        assert sum(c.micro_batches_in_flight for c in stage.chunks) == expected
        assert [c.index for c in stage.chunks] == [i + k * p for k in range(v)]
    first = result.stages[0]
    if m * v >= p * v + p - 1:  # m >= 2p: the first stage reaches its full warm-up
        assert first.micro_batches_in_flight == p * v + p - 1
        # warm-up runs p forwards per chunk in turn, then p - 1 more of chunk 0
        assert [c.micro_batches_in_flight for c in first.chunks] == [2 * p - 1] + [p] * (v - 1)
        # L * (1 + (p - 1) / (p * v)) layers' worth (Korthikanti et al. 2022)
        held = sum(c.micro_batches_in_flight * len(c.layers) for c in first.chunks)
        assert held * p * v == layers * (p * v + p - 1)
    else:  # m == p: every chunk holds its m micro-batches
        assert [c.micro_batches_in_flight for c in first.chunks] == [m] * v


@pytest.mark.parametrize(
    ("pp", "vpp", "m", "expected"),
    [
        # stage 0 of p=4, v=2, m=8: (4-1)*2 + (2-1)*4 + 1 = 11 = p*v + p - 1
        (4, 2, 8, [11, 9, 7, 5]),
        # m*v caps it: p=4, v=2, m=4 -> 8 for every stage that would hold more
        (4, 2, 4, [8, 8, 7, 5]),
        # p=2, v=3, m=4: stage 0 (2-1)*2 + 2*2 + 1 = 7, stage 1 0 + 4 + 1 = 5
        (2, 3, 4, [7, 5]),
    ],
)
def test_interleaved_in_flight_by_hand(registry, pp, vpp, m, expected):
    layers = pp * vpp
    dense = DenseConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, intermediate_size=128)
    model = ModelSpec(name="tiny", layers=(LayerGroup("dense", dense, layers),))
    parallel = ParallelSpec(pp=pp, vpp=vpp, seq_len=64, global_batch_size=m)
    result = estimate(model, parallel, registry=registry)
    assert [s.micro_batches_in_flight for s in result.stages] == expected


def test_default_global_batch_reaches_full_interleaved_warm_up(registry):
    dense = DenseConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, intermediate_size=128)
    model = ModelSpec(name="tiny", layers=(LayerGroup("dense", dense, 8),))
    result = estimate(model, ParallelSpec(pp=4, vpp=2, seq_len=64), registry=registry)
    # p=4, v=2: the full warm-up of stage 0 is 4*2 + 4 - 1 = 11 chunk-micro-batches (docs/concepts.md, in flight)
    assert result.stages[0].micro_batches_in_flight == 11


def test_default_global_batch_is_pp_micro_batches_for_1f1b(registry):
    dense = DenseConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, intermediate_size=128)
    model = ModelSpec(name="tiny", layers=(LayerGroup("dense", dense, 8),))
    result = estimate(model, ParallelSpec(dp=2, pp=4, micro_batch_size=2, seq_len=64), registry=registry)
    assert result.micro_batches == 4
    assert result.layout["global_batch_size"] == 2 * 2 * 4
    assert [s.micro_batches_in_flight for s in result.stages] == [4, 3, 2, 1]
