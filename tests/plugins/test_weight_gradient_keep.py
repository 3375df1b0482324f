"""What a micro-batch awaiting its weight-gradient pass keeps (``LayerCost.weight_gradient_bytes``).

Zero-bubble schedules split the backward into an input-gradient pass B and a
weight-gradient pass W; between them a micro-batch keeps what W reads: each
trained linear's input ``X`` and output gradient ``dY`` (``dW = dY^T X``;
sail-sg/zero-bubble-pipeline-parallelism ``WeightGradStore.put(total_input,
grad_output, weight, func)``; deepseek-ai/DualPipe ``examples/example_dualpipe.py``
``LinearFunc.backward``). The numbers here are derived by hand from the layer shapes.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hp_core.api import build_registry, estimate, model_from_preset, with_sublayers
from hp_core.costs import TRAITS, LayerContext
from hp_core.errors import ConfigError
from hp_core.markers import hookimpl
from hp_core.schedules import ScheduleLayout
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_core.types import LayerKind
from hp_plugins.kinds.dense import DenseConfig, evaluate_dense
from test_contract import SAMPLES, TP_DEGREES

REGISTRY = build_registry(use_env=False)
PRECISION = PrecisionSpec()  # 2-byte activations
LLAMA3_8B = DenseConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336)
GiB = 1 << 30


def _context(tp: int, sp: bool, b: int = 1, seq_len: int = 8192, attention: str = "flash",
             traits: frozenset[str] = frozenset()) -> LayerContext:
    context = LayerContext(tp=tp, cp=1, sp=sp, ep=1, etp=1, micro_batch_size=b, seq_len=seq_len, precision=PRECISION,
                           attention=attention, traits=traits)
    return with_sublayers(context, REGISTRY)


# Llama-3-8B's dense layer per token, in elements on one TP rank: (input, output gradient) of each linear.
# h = 4096, 32 query heads and 8 KV heads of 128, I = 14336. The column-parallel linears (qkv, the gate and up
# FC1) read the whole h-wide input (all-gathered over TP under SP) and make a 1/t share of their outputs; the
# row-parallel ones (o, FC2) read a 1/t share and their output gradient is h wide (all-gathered under SP).
_BY_HAND = {
    1: [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096)],
    2: [(4096, 3072), (2048, 4096), (4096, 14336), (7168, 4096)],
    4: [(4096, 1536), (1024, 4096), (4096, 7168), (3584, 4096)],
    8: [(4096, 768), (512, 4096), (4096, 3584), (1792, 4096)],
}


@pytest.mark.parametrize("tp", sorted(_BY_HAND))
@pytest.mark.parametrize("sp", [False, True])
def test_llama3_8b_dense_layer_by_hand(tp, sp):
    if sp and tp == 1:
        pytest.skip("sequence parallelism needs tp > 1")
    per_token = 2 * sum(x + dy for x, dy in _BY_HAND[tp])
    assert per_token == {1: 139264, 2: 86016, 4: 59392, 8: 46080}[tp]
    for b in (1, 2):
        cost = evaluate_dense(LLAMA3_8B, _context(tp, sp, b))
        assert cost.weight_gradient_bytes == b * 8192 * per_token
        if tp == 1:
            assert cost.kept_bytes == b * 8192 * 168064  # W keeps 83% of it
        if not sp:
            # W keeps less than the plain layer keeps for its backward (its norms, q, k, v, the SwiGLU's
            # gate, up and activation outputs and the flash statistics are freed by B).
            assert cost.weight_gradient_bytes < cost.kept_bytes
    if sp and tp >= 4:
        # Under SP the row-parallel linears' output gradients are all-gathered (t times the residual
        # stream's shard the forward keeps): W keeps more than a whole micro-batch from tp = 4 on.
        cost = evaluate_dense(LLAMA3_8B, _context(tp, sp))
        assert cost.weight_gradient_bytes > cost.kept_bytes


def test_gpt_layer_keeps_32_sbh_for_w():
    """Korthikanti et al.'s GPT layer (MHA, FC1 of 4h, tp = 1): W reads the inputs of qkv, o, FC1 (h each)
    and FC2 (4h), 7h, and the output gradients 3h, h, 4h and h, 9h: 16 h elements, 32 s b h bytes."""
    h = 1024
    config = DenseConfig(hidden_size=h, num_attention_heads=16, num_key_value_heads=16, intermediate_size=4 * h,
                         gated_mlp=False, hidden_act="gelu", norm="layernorm", attention_bias=True, mlp_bias=True)
    cost = evaluate_dense(config, _context(1, False, 2, 2048, attention="eager"))
    assert cost.weight_gradient_bytes == 32 * 2048 * 2 * h


def test_ends_and_composites_state_their_w():
    """The head's W reads the final norm's output and the logits' gradient; the embedding defers nothing;
    the MTP module adds its projection and its head to its layer's; LoRA states nothing (absent)."""
    model = model_from_preset("llama3-8b", REGISTRY)
    groups = {group.kind: group.config for group in model.layers}
    x = _context(1, False)
    T = 8192
    head = REGISTRY.layer_kind("output").evaluate(groups["output"], x)
    assert head.weight_gradient_bytes == T * 4096 * 2 + T * 128256 * 2
    assert REGISTRY.layer_kind("embedding").evaluate(groups["embedding"], x).weight_gradient_bytes == 0
    for sample in SAMPLES["mtp"]:
        cost = REGISTRY.layer_kind("mtp").evaluate(sample, _context(2, True, seq_len=1024))
        # A depth of several layers: each layer's, added (hp_plugins/kit/merge.py).
        inner = sum(REGISTRY.layer_kind(g.kind).evaluate(g.config, _context(2, True, seq_len=1024)).weight_gradient_bytes
                    for g in sample.depth)
        T, h = 1024, 256
        # eh_proj: its 2h input as kept (SP shard), its h/t output gradient; the head: its input, its logits' gradient.
        assert cost.weight_gradient_bytes == inner + 2 * T * h + T * h // 2 * 2 + T * h + T * 512 * 2
    for name in ("lora", "lora_first", "lora_last"):
        for sample in SAMPLES[name]:
            assert REGISTRY.layer_kind(name).evaluate(sample, _context(1, False, seq_len=1024)).weight_gradient_bytes is None


_STATED = sorted(name for name in SAMPLES if not name.startswith("lora"))


@st.composite
def _kind_layouts(draw):
    name = draw(st.sampled_from(_STATED))
    sample = draw(st.sampled_from(SAMPLES[name]))
    tp = draw(st.sampled_from(TP_DEGREES.get(name, (1, 2, 4))))
    sp = tp > 1 and draw(st.booleans())
    traits = draw(st.frozensets(st.sampled_from(sorted(set(TRAITS) - {"moe_probs_in_activation", "fp8_activation_input_store"}))))
    context = _context(tp, sp, draw(st.sampled_from((1, 2))), 1024, draw(st.sampled_from(("flash", "eager"))), traits)
    return name, sample, context


def _cost(name, sample, context):
    kind = REGISTRY.layer_kind(name)
    if kind.validate is not None:
        kind.validate(sample, context)
    return kind.evaluate(sample, context)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_kind_layouts())
def test_w_keeps_at_most_what_the_plain_layer_keeps_without_sp(case):
    """Every built-in kind (LoRA aside: it states nothing) states W's tensors, and without sequence
    parallelism they are at most what the plain layer keeps for its backward: W reads GEMM inputs the
    forward keeps and output gradients smaller than the tensors B frees (at every TP degree, attention
    implementation and set of runtime traits but two). Under SP, W's tensors are those of the same layout
    without SP or fewer (the head's input stays sharded), but the forward keeps the residual stream in 1/t
    shards while W keeps the row-parallel linears' all-gathered output gradients: from tp = 4 on W may keep
    more than a whole micro-batch. The trait left out, ``moe_probs_in_activation``, keeps no expert
    outputs, so the experts' FC2 output gradients W keeps can exceed what B frees
    (:func:`test_where_w_keeps_more_than_a_whole_micro_batch`; docs/schedules.md); ``fp8_activation_input_store`` keeps
    the SwiGLU's input in one byte an element where W holds that linear's output gradient in the compute dtype."""
    name, sample, context = case
    plain = attrs.evolve(context, sp=False)
    try:
        cost, unsplit = _cost(name, sample, context), _cost(name, sample, plain)
    except ConfigError:  # an MoE layer under TP needs SP
        try:
            cost = _cost(name, sample, context)
        except ConfigError:
            return
        assert cost.weight_gradient_bytes is not None and cost.weight_gradient_bytes >= 0, name
        return
    assert cost.weight_gradient_bytes is not None and unsplit.weight_gradient_bytes is not None, name
    # A latent MoE layer (Nemotron-H moe_latent_size) adds two linears whose W reads gradients no forward tensor
    # matches: fc1_latent's L-wide and fc2_latent's h-wide output gradients; on a small layer W can exceed what
    # it keeps by up to those (tests/plugins/samples_ssm.py's latent sample: by 112 bytes a token of 3,216).
    latent = getattr(sample, "moe_latent_size", None)
    slack = context.tokens * (latent + sample.hidden_size) * PRECISION.activation_bytes if latent else 0
    assert 0 <= cost.weight_gradient_bytes <= unsplit.weight_gradient_bytes <= unsplit.kept_bytes + slack, \
        (name, context, cost.weight_gradient_bytes, unsplit.weight_gradient_bytes, unsplit.kept_bytes)


def _stages(schedule: str, model=None, registry=REGISTRY, gbs: int = 8, recompute=None, dp: int = 1):
    """Llama-3-8B at pp = 4, 8192 tokens a sequence: m = gbs / dp micro-batches (dp = 2 at ZeRO-1 is what
    ``hp estimate --model llama3-8b --devices 8 --pp 4`` runs)."""
    model = model or model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(pp=4, dp=dp, zero=1 if dp > 1 else None, seq_len=8192, global_batch_size=gbs, schedule=schedule)
    return estimate(model, layout, registry=registry, recompute=recompute).stages


def test_zb_h1_keeps_1f1b_first_stage_peak_on_the_body_and_its_last_stage_adds_the_heads_w():
    """ZB-H1 at p = 4, m = 8 (Qi et al. 2023, Section 2.1: its peak memory is 1F1B's, ``p M_B``).

    Stage ``i`` keeps ``p - i`` whole micro-batches and ``i`` awaiting W: ``(p - i) M_B + i M_W <= p M_B``,
    equal on stage 0, which is 1F1B's peak stage. The decoder layers' activations on every stage are at
    most 1F1B's stage 0; the whole stage peaks are equal on stage 0 but not on the last stage, which also
    holds the output head: its three micro-batches awaiting W keep the head's input and the gradient of
    its logits (128256 wide: 1.96 GiB each at 8192 tokens), which the paper's per-layer memory leaves out.
    """
    one, zb = _stages("1f1b"), _stages("zb_h1")
    per_layer = one[0].activations_by_kind["dense"] // (8 * 4)  # stage 0: 8 layers, 4 whole micro-batches
    w_layer = 8192 * 139264
    assert per_layer * 8 * 4 == one[0].activations_by_kind["dense"]
    for i, stage in enumerate(zb):
        assert [c.awaiting_weight_gradient for c in stage.chunks] == [i]
        assert stage.activations_by_kind["dense"] == 8 * ((4 - i) * per_layer + i * w_layer)
        assert stage.activations_by_kind["dense"] <= one[0].activations_by_kind["dense"]
    assert zb[0].memory.peak_bytes == one[0].memory.peak_bytes
    head_w = 8192 * (4096 + 128256) * 2
    assert zb[3].activations_by_kind["output"] == one[3].activations_by_kind["output"] + 3 * head_w
    assert zb[3].memory.peak_bytes - one[3].memory.peak_bytes == 3 * (8 * w_layer + head_w)
    # The CLI's run (dp = 2, m = 4): ZB-H1 peaks at 73.31 GiB on stage 3 (84.64, GPipe's, when every micro-batch
    # awaiting W was priced whole), 1F1B at 67.18 GiB on stage 0.
    cli = {name: [round(s.memory.peak_bytes / GiB, 2) for s in _stages(name, dp=2)] for name in ("zb_h1", "1f1b", "gpipe")}
    assert cli == {"zb_h1": [67.18, 59.62, 57.86, 73.31], "1f1b": [67.18, 51.12, 40.86, 41.75],
                   "gpipe": [67.18, 61.38, 61.38, 84.64]}


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved_1f1b"])
def test_schedules_without_a_split_backward_are_unchanged(schedule):
    """No micro-batch awaits W, so every stage keeps in-flight x whole, whatever the kinds state."""
    opaque = _opaque_registry()
    vpp = 2 if schedule == "interleaved_1f1b" else 1
    model = model_from_preset("llama3-8b", REGISTRY)
    for registry, layers in ((REGISTRY, model), (opaque, _opaque_model(model))):
        layout = ParallelSpec(pp=4, vpp=vpp, seq_len=8192, global_batch_size=8, schedule=schedule)
        stages = estimate(layers, layout, registry=registry).stages
        found = [s.memory.activations_bytes for s in stages]
        if registry is REGISTRY:
            plain = found
        else:
            assert found == plain


def _opaque_model(model):
    return attrs.evolve(model, layers=tuple(attrs.evolve(g, kind="opaque_dense") if g.kind == "dense" else g
                                            for g in model.layers))


class _OpaquePlugin:
    """A third-party dense kind that states nothing about W."""

    @hookimpl
    def hp_layer_kinds(self):
        dense = REGISTRY.layer_kind("dense")
        yield attrs.evolve(dense, name="opaque_dense",
                           evaluate=lambda c, x: attrs.evolve(evaluate_dense(c, x), weight_gradient_bytes=None))


def _opaque_registry():
    return build_registry(plugins=[_OpaquePlugin()], use_env=False)


def test_a_kind_that_states_no_w_is_priced_as_a_whole_micro_batch():
    """Absent is not zero: under ZB-H1 a kind without ``weight_gradient_bytes`` keeps its whole micro-batch
    for every micro-batch in flight, as GPipe keeps them (the upper bound hp priced before)."""
    registry = _opaque_registry()
    model = _opaque_model(model_from_preset("llama3-8b", registry))
    zb = _stages("zb_h1", model, registry)
    gpipe = _stages("gpipe", model, registry, gbs=4)  # 4 micro-batches: every stage keeps 4, as ZB-H1's p = 4
    assert [s.activations_by_kind["opaque_dense"] for s in zb] == [s.activations_by_kind["opaque_dense"] for s in gpipe]
    stated = _stages("zb_h1")
    assert all(a.activations_by_kind["dense"] <= b.activations_by_kind["opaque_dense"] for a, b in zip(stated, zb))
    assert stated[3].activations_by_kind["dense"] < zb[3].activations_by_kind["opaque_dense"]


def test_full_recompute_prices_w_at_its_recomputed_tensors():
    """Under full recompute a whole micro-batch keeps each layer's input, and B recomputes the forward, so a
    micro-batch awaiting W keeps W's tensors as they are rebuilt: every linear's input and output gradient.
    Those outweigh a whole micro-batch, so the moment after the peak's next B binds (``awaiting_w``): one
    more of the four awaits W, and no backward runs."""
    stages = _stages("zb_h1", recompute="full")
    kept_input = 8192 * 4096 * 2
    for i, stage in enumerate(stages):
        assert stage.binding_point == "awaiting_w"
        assert [(c.micro_batches_in_flight, c.awaiting_weight_gradient) for c in stage.chunks] == [(4, i + 1)]
        assert stage.activations_by_kind["dense"] == 8 * ((3 - i) * kept_input + (i + 1) * 8192 * 139264)
        assert stage.memory.working_set_bytes == 0
        assert stage.peak_points["awaiting_w"] > stage.peak_points["warmup_end"]
    cli = {name: round(max(s.memory.peak_bytes for s in _stages(name, recompute="full", dp=2)) / GiB, 2)
           for name in ("zb_h1", "1f1b")}
    assert cli == {"zb_h1": 67.51, "1f1b": 31.99}


def test_where_w_keeps_more_than_a_whole_micro_batch():
    """The two cases docs/schedules.md names: SP from tp = 4 on (Llama-3-8B's layer: 59392 bytes a token for W
    against 54304 kept), and routed experts whose combine keeps no outputs (moe_probs_in_activation)."""
    dense = evaluate_dense(LLAMA3_8B, _context(4, True))
    assert (dense.weight_gradient_bytes // 8192, dense.kept_bytes // 8192) == (59392, 54304)
    sample = SAMPLES["mla_moe"][0]
    x = _context(1, False, 1, 1024, traits=frozenset({"fused_swiglu", "moe_probs_in_activation"}))
    cost = _cost("mla_moe", sample, x)
    assert cost.weight_gradient_bytes > cost.kept_bytes
    without = _cost("mla_moe", sample, attrs.evolve(x, traits=frozenset({"fused_swiglu"})))
    assert without.weight_gradient_bytes == cost.weight_gradient_bytes <= without.kept_bytes


def _moments(order, paths, chunks):
    """Every moment of a rank's order: per chunk, (micro-batches kept, those of them past their B)."""
    position = {c: i for i, c in enumerate(chunks)}
    kept, waiting = [0] * len(chunks), [0] * len(chunks)
    for op in order:
        for kind, d, _, s in op:
            if kind == "F":
                kept[position[paths[d][s][1]]] += 1
        yield tuple(kept), tuple(waiting)
        for kind, d, _, s in op:
            c = position[paths[d][s][1]]
            if kind == "B":
                waiting[c] += 1
                yield tuple(kept), tuple(waiting)
            elif kind in ("W", "BW"):
                kept[c] -= 1
                waiting[c] -= kind == "W"


@pytest.mark.parametrize("name", ["zb_h1", "zb_h2", "zb_v", "dualpipe", "dualpipev"])
def test_the_peak_and_the_stated_moments_bind_whatever_w_weighs(name):
    """The declared peak keeps the most micro-batches and the most whole ones (pipeline_sim), so it binds
    where W's tensors weigh at most a whole micro-batch's (W <= A). Where they weigh more (sequence
    parallelism from tp = 4, recompute), a moment between a B and its W may keep more: the schedule states
    those (``weight_gradient_moments``), and the most any simulated moment keeps is the most of the peak
    and the stated moments, for every layout the simulation runs (``pp <= 8``, ``m <= 32``) and weights."""
    import pipeline_sim as sim

    schedule = REGISTRY.schedule(name)
    order_of = {"zb_h1": sim.zb_h1, "zb_h2": sim.zb_h2, "zb_v": sim.zb_v, "dualpipe": sim.dualpipe,
                "dualpipev": sim.dualpipev}[name]
    vpp = 2 if name in ("zb_v", "dualpipev") else 1
    checked = 0
    for p in range(2, 9):
        for m in range(1, 33):
            layout = ScheduleLayout(p, vpp, m)
            try:
                schedule.check(layout)
            except ConfigError:
                continue
            orders, paths, chunks = order_of(p, m)
            for i in range(p):
                n = tuple(schedule.in_flight(layout, i))
                k = tuple(schedule.awaiting_weight_gradient(layout, i)) if schedule.awaiting_weight_gradient else (0,) * len(n)
                stated = ((n, k),) + tuple(schedule.weight_gradient_moments(layout, i))
                simulated = set(_moments(orders[i], paths, chunks[i]))
                for a, w in ((1.0, 0.5), (1.0, 1.0), (1.0, 1.3), (1.0, 2.0), (0.1, 1.0), (0.0, 1.0)):
                    def value(moment):
                        return sum((kept - waiting) * a + waiting * w for kept, waiting in zip(*moment))
                    assert max(map(value, simulated)) == pytest.approx(max(map(value, stated))), (p, m, i, a, w)
            checked += 1
    assert checked >= 20


# Under a recipe that keeps linear inputs quantized, W holds each linear's input and output gradient as Transformer
# Engine's deferred weight gradient does: the input's quantized copy (fp8-blockwise: one byte an element and an fp32
# scale per 128), the output gradient quantized in both usages (2 x (1 + 4/128) bytes an element).
def test_a_quantizing_recipe_keeps_the_inputs_w_reads_in_its_format():
    from hp_core.engine.precision import apply_recipe, resolve_recipe

    cost = evaluate_dense(LLAMA3_8B, _context(2, True))
    T = 8192
    # The inputs of qkv, o, FC1 and FC2 at t = 2 (_BY_HAND): 4096 + 2048 + 4096 + 7168 elements a token.
    inputs = T * (4096 + 2048 + 4096 + 7168)
    gradients = T * (3072 + 4096 + 14336 + 4096)  # their output gradients, the rest of _BY_HAND's 86016 bytes a token
    assert cost.weight_gradient_quantized == (2 * inputs, inputs, gradients)
    assert cost.weight_gradient_bytes == 2 * (inputs + gradients)
    blockwise = resolve_recipe(REGISTRY, PrecisionSpec(recipe="fp8-blockwise"))
    quantized = apply_recipe(cost, blockwise, 2, tp_sp=True)
    assert quantized.weight_gradient_bytes == inputs * 132 // 128 + 2 * gradients * 132 // 128 == T * 70752 == 579_600_384
    assert quantized.weight_gradient_quantized is None  # restated once: applying the recipe again changes nothing
    assert apply_recipe(quantized, blockwise, 2, tp_sp=True).weight_gradient_bytes == quantized.weight_gradient_bytes
    # NVFP4: 4-bit values and an FP8 scale per 16, 9/16 of a byte, inputs once and output gradients twice; per-tensor
    # FP8 (delayed scaling, E4M3 inputs and E5M2 gradients): one byte, the gradients' two usages as many bytes as bf16.
    nvfp4 = apply_recipe(cost, resolve_recipe(REGISTRY, PrecisionSpec(recipe="nvfp4")), 2, tp_sp=True)
    assert nvfp4.weight_gradient_bytes == inputs * 9 // 16 + 2 * gradients * 9 // 16 == T * 38592
    delayed = apply_recipe(cost, resolve_recipe(REGISTRY, PrecisionSpec(recipe="fp8-delayed")), 2, tp_sp=True)
    assert delayed.weight_gradient_bytes == inputs + 2 * gradients == T * 68608
    # torchao's float8 keeps the compute-dtype input (saved_input compute): W as stated.
    torchao = resolve_recipe(REGISTRY, PrecisionSpec(recipe="torchao-float8-rowwise"))
    assert apply_recipe(cost, torchao, 2, tp_sp=True).weight_gradient_bytes == cost.weight_gradient_bytes


def test_the_shared_input_is_counted_once_in_bf16_and_once_per_linear_quantized():
    # MLA's q_a and kv_a read one norm output: W counts its compute-dtype bytes once, and under a recipe each of the
    # two TE linears holds a quantized copy of its own (hp_plugins/kit/builder.py LayerBuilder.linear shares_input).
    from hp_plugins.kit.builder import LayerBuilder

    b = LayerBuilder(_context(1, False, seq_len=1024), 512)
    b.linear(1024, 512, 64)
    b.linear(1024, 512, 32, shares_input=True)
    assert b.weight_gradient == 1024 * (512 + 64 + 32) * 2
    assert (b.weight_gradient_input_bytes, b.weight_gradient_input_elements) == (1024 * 512 * 2, 2 * 1024 * 512)
    assert b.weight_gradient_dy_elements == 1024 * (64 + 32)  # each linear's own output gradient
    b.linear(1024, 512, 512, weight=False)  # a router's gate: no W, nothing to restate
    assert b.weight_gradient_input_elements == 2 * 1024 * 512


def test_a_restated_part_must_be_part_of_a_stated_w():
    with pytest.raises(ValueError, match="must be part of weight_gradient_bytes"):
        attrs.evolve(evaluate_dense(LLAMA3_8B, _context(1, False)), weight_gradient_bytes=10)
    with pytest.raises(ValueError, match="three non-negative integers"):
        attrs.evolve(evaluate_dense(LLAMA3_8B, _context(1, False)), weight_gradient_quantized=(1, 1, -1))
