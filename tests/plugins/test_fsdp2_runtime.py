"""The fsdp2 runtime against PyTorch's FSDPMemTracker (recorded cases) and its peak points derived by hand."""

from __future__ import annotations

import attrs

import json
from pathlib import Path

import pytest

from hp_core.api import estimate
from hp_core.blas_workspaces import DEFAULT_WORKSPACE_BYTES
from hp_core.io.convert import ConfigFile, structure
from hp_core.io.job import estimate_job, resolve_job
from hp_core.specs import ParallelSpec
from hp_plugins.cases.fsdp2_measured import as_tracker_sees, estimated_categories, measured_categories

DATA = Path(__file__).parent / "data" / "fsdp2_tracker_cases.json"
CASES = json.loads(DATA.read_text())["cases"]
T = 4096
V = 128256
H = 4096
BLAS = 2 * DEFAULT_WORKSPACE_BYTES  # PyTorch's two cuBLAS workspaces, on every fsdp2 rank (hp_core/blas_workspaces.py)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_within_two_percent_of_the_tracker(registry, case):
    """Every recorded case (FSDP alone and FSDP x TP with both head plans, with and without AC)."""
    job = as_tracker_sees(resolve_job(structure(case["config"], ConfigFile, registry), registry), registry)
    (stage,) = estimate_job(job, registry).stages
    measured = case["measured"]
    assert abs(stage.peak_bytes - measured["peak_bytes"]) <= 0.02 * measured["peak_bytes"], case["name"]
    # The same phase binds, and each category is within 2% of the tracker's at that phase.
    assert stage.binding_point == measured["peak_phase"]
    want = measured_categories(measured["phases"][measured["peak_phase"]])
    got = estimated_categories(stage.memory, stage.binding_point)
    for name, value in want.items():
        assert abs(got[name] - value) <= 0.02 * value, (case["name"], name, got[name], value)


def _llama(registry, runtime_options=None, **parallel):
    from hp_core.api import model_from_preset
    from hp_core.runtime_options import apply_options

    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    runtime = apply_options(registry.runtime("fsdp2"), runtime_options) if runtime_options else "fsdp2"
    return estimate(model, ParallelSpec(seq_len=T, **{"dp": 8, **parallel}), runtime=runtime, registry=registry)


def test_peak_points_by_hand(registry):
    """Llama-3-8B, 4 layers, 8 ranks, 4k tokens: each point's parts derived from the model's shapes."""
    (stage,) = _llama(registry).stages
    layer = 4096 * (4096 * 2 + 1024 * 2) + 3 * 4096 * 14336 + 2 * 4096  # one decoder layer's elements
    root = 2 * V * H + H  # embedding, head, final norm
    total = root + 4 * layer
    kept_layer = 168064 + 2 * (4 * H + 4)  # the formulas' fused layer + two transformers RMSNorms (torch census)
    kept_output = 2 * 2 * H + (4 * H + 4) + 4 * V + 8  # final norm in/out and fp32 copy, fp32 log-softmax, targets
    kept = T * (4 * kept_layer + 8 + kept_output)  # + the embedding's int64 ids
    forward = stage.peak_points
    params, states = total * 4 // 8, total * 8 // 8
    # Every point holds PyTorch's two cuBLAS workspaces (BLAS).
    assert forward["forward"] == params + states + (root + layer) * 2 + kept + T * V * (2 + 4) + BLAS
    assert forward["backward"] == params + states + (root + layer) * 2 + kept + 2 * T * V * 4 + BLAS
    # Sharded grads, the foreach temporary and the batch's int64 ids the loop holds.
    assert forward["optimizer"] == params + params + states + params + T * 8 + BLAS
    assert stage.binding_point == "backward" and stage.memory.gradients_bytes == 0


def test_options_change_what_they_say(registry):
    base = _llama(registry).stages[0]
    from hp_core.runtime_options import apply_options

    runtime = registry.runtime("fsdp2")
    assert apply_options(runtime, {"norm_implementation": "fused"}).traits == runtime.traits - {"fp32_norm_copy"}
    assert apply_options(runtime, {"loss_implementation": "fused"}).traits == (
        runtime.traits - {"upcast_cross_entropy"} | {"fused_cross_entropy"})
    fused_opt = apply_options(runtime, {"optimizer_implementation": "fused"})
    kept_grads = apply_options(runtime, {"zero_grad_set_to_none": False})
    from hp_core.api import model_from_preset

    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    parallel = ParallelSpec(seq_len=T, dp=8)
    fused = estimate(model, parallel, runtime=fused_opt, registry=registry).stages[0].peak_points
    params = base.memory.parameters_bytes
    assert base.peak_points["optimizer"] - fused["optimizer"] == params  # no fp32 temporary
    held = estimate(model, parallel, runtime=kept_grads, registry=registry).stages[0].peak_points
    assert held["forward"] - base.peak_points["forward"] == params  # fp32 grads of the shard, as big as its params
    unfused = estimate(model, parallel, runtime=apply_options(runtime, {"norm_implementation": "fused"}),
                       registry=registry).stages[0]
    # Nine RMSNorms (two per layer, the final one) without their fp32 copy and inverse root.
    assert base.memory.activations_bytes - unfused.memory.activations_bytes == 9 * T * (4 * H + 4)


def test_formulas_honour_the_norm_implementation(registry):
    """Per token, the fsdp2 runtime's dense layer keeps what the torch census measured of transformers' Llama layer."""
    from hp_core.api import model_from_preset, prepare

    model = model_from_preset("llama3-8b", registry).with_body_layers(1, registry.kinds_placed("body"))
    run = prepare(model, ParallelSpec(seq_len=T, dp=8), registry=registry, runtime="fsdp2")
    dense = [cost for kind, cost in zip(run.kinds, run.costs) if kind.name == "dense"][0]
    assert dense.kept_bytes == T * 200840  # hp census --model llama3-8b --attn sdpa --seq-len 4096 --tp 1 (torch 2.13)


def test_hsdp_and_cpu_offload(registry):
    from hp_core.api import model_from_preset
    from hp_core.errors import ConfigError
    from hp_core.runtime_options import apply_options

    runtime = registry.runtime("fsdp2")
    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    parallel = ParallelSpec(seq_len=T, dp=8)
    plain = estimate(model, parallel, runtime=runtime, registry=registry).stages[0]
    hsdp = estimate(model, parallel, runtime=apply_options(runtime, {"hsdp_replicate": 2}), registry=registry).stages[0]
    # Sharded over 4 ranks instead of 8: parameters and AdamW states double; gathered copies and activations do not change.
    assert hsdp.memory.parameters_bytes == 2 * plain.memory.parameters_bytes
    assert hsdp.memory.optimizer_states_bytes == 2 * plain.memory.optimizer_states_bytes
    assert hsdp.memory.communication_buffers_bytes == plain.memory.communication_buffers_bytes
    with pytest.raises(ConfigError) as err:
        estimate(model, parallel, runtime=apply_options(runtime, {"hsdp_replicate": 3}), registry=registry)
    assert err.value.path == "$.runtime.options.hsdp_replicate"
    # HSDP needs FSDP's sharding (zero 3): at zero 1 it would shard nothing, and is refused rather than dropped.
    with pytest.raises(ConfigError, match="needs parallel.zero 3") as err:
        estimate(model, attrs.evolve(parallel, zero=1), runtime=apply_options(runtime, {"hsdp_replicate": 2}),
                 registry=registry)
    assert err.value.path == "$.runtime.options.hsdp_replicate"
    offload = estimate(model, parallel, runtime=apply_options(runtime, {"cpu_offload": True}), registry=registry).stages[0]
    m = offload.memory
    assert (m.parameters_bytes, m.gradients_bytes, m.optimizer_states_bytes) == (0, 0, 0)
    assert offload.peak_bytes == plain.peak_bytes - plain.memory.parameters_bytes - plain.memory.optimizer_states_bytes


def test_hsdp_holds_the_bf16_all_reduce_buffer_and_times_the_replicate_all_reduce_by_hand(registry):
    from hp_core.api import model_from_preset, step_time
    from hp_core.runtime_options import apply_options

    runtime = registry.runtime("fsdp2")
    model = model_from_preset("llama3-8b", registry).with_body_layers(8, registry.kinds_placed("body"))
    # A llama3-8b decoder layer: q, o 4096^2 each, k, v 4096 x 1024 each, w1, w2, w3 4096 x 14336 each, two norms.
    layer = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert layer == 218_112_000

    def backward(**options):
        run = apply_options(runtime, {"hsdp_replicate": 2, **options})
        return estimate(model, ParallelSpec(seq_len=512, dp=8), runtime=run, registry=registry).stages[0].peak_points["backward"]
    # The backward peak (the embedding's backward, after every decoder unit's post-backward) holds the lowest unit's
    # reduce-scatter input (its whole gradient in the reduce dtype: 4 or 2 bytes per element) and, with a bf16 reduce
    # dtype under HSDP, every unit's reduce-scatter output, its shard over the 4-rank shard group in bf16, held for
    # the replicate all-reduce until the end of backward (torch 2.13 _fsdp_param_group.py _all_reduce_state, cleared
    # by finalize_backward): 4 E - (2 E + 8 x 2 E / 4) = -2 E, the bf16 run 2 E bytes higher.
    assert backward() - backward(reduce_dtype="bf16") == -2 * layer

    # Time, on h100-sxm (8 GPUs and 8 x 50 GB/s adapters per node, 3.58 us inter-node step latency; the fsdp2 profile's
    # Hopper inter-node bus efficiency 0.96, no sustained slowdown): dp = 16 with hsdp_replicate 2 puts each 8-rank
    # shard group on one node and each replicate group on two ranks of two nodes. Every FSDP unit's fp32
    # reduce-scatter output (its elements x 4 bytes / 8) is ring all-reduced over the 2 replicas: two ring passes
    # of 1/2 of it over one adapter at 50e9 * 0.96 B/s, each with 2 x 3.58 us (hp_core/collectives.py _ring_pass).
    hardware = registry.hardware_preset("h100-sxm").spec
    small = model_from_preset("llama3-8b", registry).with_body_layers(2, registry.kinds_placed("body"))
    t = step_time(small, ParallelSpec(seq_len=4096, dp=16), registry=registry, hardware=hardware,
                  runtime=apply_options(runtime, {"hsdp_replicate": 2}))
    assert t.provenance["sustained_slowdown"] == 1.0

    def all_reduce(elements):
        return 2 * (0.5 * elements * 4 / 8 / (50e9 * 0.96) + 2 * 3.58e-6)
    vocabulary = 128256 * 4096  # the embedding, and the head beside the final norm (4096)
    groups = {g: (total, exposed) for g, total, exposed in t.stages[0].communication_by_group}
    assert groups["hsdp"][0] == pytest.approx(2 * all_reduce(layer) + all_reduce(vocabulary) + all_reduce(vocabulary + 4096))
    # Serialised behind each reduce-scatter (torch runs it on its own stream after it; hp does not let it overlap the
    # next unit's reduce-scatter), it is partly hidden behind the backward, never more than whole.
    assert 0 < groups["hsdp"][1] <= groups["hsdp"][0]


def test_tp_head_plans(registry):
    """tp=2 on 8 ranks: a vocabulary-parallel head gathering its logits, or a head whole on every TP rank."""
    from hp_core.runtime_options import apply_options

    runtime = registry.runtime("fsdp2")
    vocab = _llama(registry, dp=4, tp=2, runtime_options={"loss_parallel": False})
    parallel_loss = _llama(registry, dp=4, tp=2, runtime_options={})
    replicated = _llama(registry, dp=4, tp=2, runtime_options={"tp_head_plan": "replicated"})
    assert apply_options(runtime, {"tp_head_plan": "replicated"}).traits == runtime.traits | {"replicated_vocab"}
    # The loss on the whole vocabulary instead of the shard: kept fp32 log-softmax 4V/2 more per token, and in the
    # backward two fp32 gradients of V/2 more each.
    diff = vocab.stages[0].peak_points["backward"] - parallel_loss.stages[0].peak_points["backward"]
    assert diff == T * (4 * V // 2 + 2 * 4 * V // 2)
    # A replicated head: the embedding and head shards are whole over TP (sharded over dp=4 only), gathered whole.
    assert replicated.stages[0].memory.parameters_bytes - vocab.stages[0].memory.parameters_bytes == 2 * V * H // 2 * 4 // 4


def test_moe_expert_weight_gradient_moment_by_hand(registry):
    """Qwen3-30B-A3B, 32 layers, 64 ranks (dp=32 x tp=2, vocabulary-parallel head, gathered logits), full AC: the
    backward binds at layer 1's routed-expert FC1 weight-gradient GEMM (the tracker's peak, docs/runtimes.md)."""
    from hp_core.api import model_from_preset
    from hp_core.runtime_options import apply_options

    h, v, k, width, experts, dp = 2048, 151936, 8, 768, 128, 32
    model = model_from_preset("qwen3-30b-a3b", registry).with_body_layers(32, registry.kinds_placed("body"))
    runtime = apply_options(registry.runtime("fsdp2"), {"loss_parallel": False})
    (stage,) = estimate(model, ParallelSpec(seq_len=T, dp=dp, tp=2), runtime=runtime, registry=registry,
                        recompute="full").stages
    m = stage.memory
    # One layer's elements on a TP rank: whole routed experts, q/o over 16 of 32 heads, k/v 2 of 4 KV heads of 128,
    # the router, two RMSNorms and the q/k norms.
    expert_elements = experts * 3 * h * width
    layer = expert_elements + 2 * h * 16 * 128 + 2 * h * 2 * 128 + experts * h + 2 * h + 2 * 128
    root = 2 * (v // 2) * h + h  # vocabulary-parallel embedding and head, the final norm
    assert stage.binding_point == "backward"
    # The 30 layers above reduce-scattered (fp32 shards of 1/32).
    assert m.gradients_bytes == 30 * layer * 4 // dp
    # Gathered: the root and the running layer in bf16, the next layer's all-gather output, the fp32 reduce-scatter
    # input of the layer above.
    assert m.communication_buffers_bytes == (root + layer + layer) * 2 + layer * 4
    # Kept: the input ids, the inputs of layers 0 and 1 (full AC).
    assert m.activations_bytes == T * 8 + 2 * T * 2 * h
    # Working: layer 1's ops up to the dispatch recomputed (beyond its kept input): the attention norm's output and
    # fp32 copy with its inverse root, the q/k norms' inputs, fp32 copies (18 heads' inverse roots) and outputs, v,
    # the fp32 log-sum-exp of 16 heads, the attention output, the MoE norm's input, output and fp32 copy, the
    # router's bf16 probabilities over 128 experts, the k dispatched copies of each token.
    recomputed = T * (2 * h + (4 * h + 4) + 4608 + (2 * 4608 + 18 * 4) + 4608 + 512 + 16 * 4 + 2 * h
                      + 2 * h + 2 * h + (4 * h + 4) + experts * 2 + k * h * 2)
    flowing = T * 2 * h + T * k * h * 2 + T * k * 2 * width * 2  # the layer's output, dispatch and FC1-output grads
    unsharded = expert_elements * 2 + ((v // 2) * h + h) * 2  # every routed expert's bf16 grads, the head's and norm's
    assert m.working_set_bytes == recomputed + flowing + unsharded
    assert m.runtime_overhead_bytes == BLAS
    assert stage.peak_bytes == (m.parameters_bytes + m.optimizer_states_bytes + m.gradients_bytes
                                + m.communication_buffers_bytes + m.activations_bytes + m.working_set_bytes + BLAS)


def test_without_resharding_after_forward_every_layer_stays_gathered(registry):
    layer = 4096 * (4096 * 2 + 1024 * 2) + 3 * 4096 * 14336 + 2 * 4096
    root = 2 * V * H + H
    plain = _llama(registry).stages[0]
    kept = _llama(registry, reshard_after_forward=False).stages[0]
    # Forward at the loss: the root, one all-gather output and all four layers' bf16 parameters.
    assert kept.peak_points["forward"] - plain.peak_points["forward"] == 4 * layer * 2
    assert kept.memory.communication_buffers_bytes == (root + layer + 4 * layer) * 2


def test_resharding_to_fewer_ranks_keeps_a_share(registry):
    layer = 4096 * (4096 * 2 + 1024 * 2) + 3 * 4096 * 14336 + 2 * 4096
    plain = _llama(registry).stages[0]
    to_two = _llama(registry, runtime_options={"reshard_after_forward_to": 2}).stages[0]
    # Each of the four layers keeps half its bf16 parameters (sharded over 2 ranks) from its forward on.
    assert to_two.peak_points["forward"] - plain.peak_points["forward"] == 4 * layer * 2 // 2
    from hp_core.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        _llama(registry, runtime_options={"reshard_after_forward_to": 3})
    assert err.value.path == "$.runtime.options.reshard_after_forward_to"
    # fully_shard(reshard_after_forward=n) reshards: a layout that does not (stated false, or fsdp2's default under
    # pp > 1) is refused in one line rather than the option left unpriced.
    for layout in ({"reshard_after_forward": False}, {"pp": 2}):
        with pytest.raises(ConfigError, match="which the layout does not") as err:
            _llama(registry, runtime_options={"reshard_after_forward_to": 2}, **layout)
        assert err.value.path == "$.runtime.options.reshard_after_forward_to" and "\n" not in str(err.value)


def test_what_torch_cannot_reshard_to_fewer_ranks_is_refused(registry):
    # torch 2.13 raises NotImplementedError for a DTensor (TP-sharded) parameter's to_sharded_post_forward, and for an
    # all_gather_inputs from the post-forward shard where a recipe casts the all-gather (fsdp_pre_all_gather).
    from hp_core.errors import ConfigError
    from hp_core.specs import PrecisionSpec

    with pytest.raises(ConfigError, match="DTensor") as err:
        _llama(registry, runtime_options={"reshard_after_forward_to": 2}, dp=4, tp=2)
    assert err.value.path == "$.runtime.options.reshard_after_forward_to"
    from hp_core.api import model_from_preset
    from hp_core.runtime_options import apply_options

    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    runtime = apply_options(registry.runtime("fsdp2"), {"reshard_after_forward_to": 2})
    precision = PrecisionSpec(recipe="torchao-float8-tensorwise")
    with pytest.raises(ConfigError, match="post-forward shard") as err:
        estimate(model, ParallelSpec(seq_len=T, dp=8), runtime=runtime, registry=registry, precision=precision)
    assert err.value.path == "$.runtime.options.reshard_after_forward_to"
    # Gathered in the compute dtype (rowwise: no float8 all-gather) it is priced.
    rowwise = PrecisionSpec(recipe="torchao-float8-rowwise")
    assert estimate(model, ParallelSpec(seq_len=T, dp=8), runtime=runtime, registry=registry, precision=rowwise).stages


def test_recompute_planner_checks_the_runtime_points(registry):
    """hp recompute under fsdp2 (its own peak points, no warm-up point): every plan it calls fitting fits them."""
    import attrs

    from hp_core.api import model_from_preset, plan_recompute
    h100 = registry.hardware_preset("h100-sxm").spec

    def plan_at(gib: int):
        return plan_recompute(model, parallel, hardware=attrs.evolve(h100, memory_bytes=gib * 2**30), runtime="fsdp2",
                              registry=registry).plan

    model = model_from_preset("llama3-8b", registry).with_body_layers(8, registry.kinds_placed("body"))
    parallel = ParallelSpec(seq_len=T, dp=8)
    full = estimate(model, parallel, runtime="fsdp2", registry=registry, recompute="full").stages[0]
    for limit_gib, fits in ((22, True), (16, True), (14, True), (12, False)):
        plan = plan_at(limit_gib)
        (stage,) = plan.stages
        assert stage.fits is fits and plan.fits is fits
        # The plan's own estimate is what the planner reports, at the runtime's points.
        again = estimate(model, parallel, runtime="fsdp2", registry=registry, recompute=plan.recompute).stages[0]
        assert again.peak_bytes == stage.peak_bytes and again.binding_point == stage.binding_point == "backward"
        if fits:
            assert stage.peak_bytes <= limit_gib * 2**30
        else:  # everything recomputed and still over: the shortfall is the all-full estimate's excess
            assert {s.describe() for s in stage.settings} == {"full"}
            assert stage.shortfall_bytes == full.peak_bytes - limit_gib * 2**30
    # 22 GiB: nothing recomputed; 16 GiB: three layers keep everything, the other five run torchtitan's op-SAC.
    # Which three is a tie (each op-SAC layer re-runs the same matmuls, and the binding peak is the same): the
    # planner's choice is as fast and as small as keeping the three lowest.
    assert {s.describe() for s in plan_at(22).stages[0].settings} == {"none"}
    chosen = plan_at(16)
    assert sorted(s.describe() for s in chosen.stages[0].settings) == ["ffAct+normOp"] * 5 + ["none"] * 3
    from hp_core.api import step_time
    from hp_core.specs import RecomputeSpec, Setting

    lowest = RecomputeSpec(default=Setting.parse("none"),
                           layers=((3, 7, Setting(mode="switches", switches=frozenset({"ffAct", "normOp"}))),))
    sixteen = attrs.evolve(h100, memory_bytes=16 * 2**30)
    assert chosen.stages[0].peak_bytes == estimate(model, parallel, runtime="fsdp2", registry=registry,
                                                   recompute=lowest, hardware=sixteen).stages[0].peak_bytes
    assert chosen.step_seconds == pytest.approx(step_time(model, parallel, runtime="fsdp2", registry=registry,
                                                          recompute=lowest, hardware=sixteen).step_seconds, rel=1e-12)


@pytest.mark.parametrize("tp, sp, per_token", [
    # input 2h, q 2h, v 2*1024, SDPA output 2h and fp32 lse of 32 heads, gate 2*14336, down 2h (whole under TP).
    (1, False, 2 * H + 2 * H + 2 * 1024 + 2 * H + 4 * 32 + 2 * 14336 + 2 * H),
    (2, False, 2 * H + (2 * H + 2 * 1024 + 2 * H + 4 * 32 + 2 * 14336) // 2 + 2 * H),
    # Sequence parallel: the input is split, and the two reduce-scatter outputs are saved.
    (2, True, (2 * H + 2 * 2 * H) // 2 + (2 * H + 2 * 1024 + 2 * H + 4 * 32 + 2 * 14336) // 2 + 2 * H),
])
def test_op_sac_keeps_what_torchtitan_saves(registry, tp, sp, per_token):
    """The op_sac switches under fsdp2 keep what torchtitan's per-op policy saves (hp_plugins/kit/op_sac.py)."""
    from hp_core.api import model_from_preset, prepare

    model = model_from_preset("llama3-8b", registry).with_body_layers(1, registry.kinds_placed("body"))
    run = prepare(model, ParallelSpec(seq_len=T, dp=8 // tp, tp=tp, sp=sp), registry=registry, runtime="fsdp2")
    (dense,) = [cost for kind, cost in zip(run.kinds, run.costs) if kind.name == "dense"]
    assert dense.kept_under(frozenset({"normOp", "ffAct"})) == T * per_token
    if tp == 1:
        assert per_token == 63616  # the tracker's llama3-8b-4l-*-acop cases, to the byte
    # Another runtime's same switches keep what their terms say: the policy is the fsdp2 runtime's.
    generic = prepare(model, ParallelSpec(seq_len=T, dp=8 // tp, tp=tp, sp=sp), registry=registry, runtime="generic")
    (plain,) = [cost for kind, cost in zip(generic.kinds, generic.costs) if kind.name == "dense"]
    assert plain.measured == ()


def test_tp_plan_presets(registry):
    from hp_core.errors import ConfigError
    from hp_core.runtime_options import apply_options

    runtime = registry.runtime("fsdp2")
    titan = _llama(registry, dp=4, tp=2, sp=True, runtime_options={"tp_plan": "torchtitan_llama3"}).stages[0]
    assert titan.peak_bytes == _llama(registry, dp=4, tp=2, sp=True).stages[0].peak_bytes  # the profile's own plan
    for plan, options in (("vocab_gathered", {"loss_parallel": False}), ("replicated_head", {"tp_head_plan": "replicated"})):
        assert apply_options(runtime, {"tp_plan": plan}).traits == apply_options(runtime, options).traits
        named = _llama(registry, dp=4, tp=2, runtime_options={"tp_plan": plan}).stages[0]
        assert named.peak_bytes == _llama(registry, dp=4, tp=2, runtime_options=options).stages[0].peak_bytes
    with pytest.raises(ConfigError) as err:
        _llama(registry, dp=4, tp=2, runtime_options={"tp_plan": "torchtitan_llama3"})
    assert err.value.path == "$.parallel.sp"
    with pytest.raises(ConfigError) as err:
        _llama(registry, dp=4, tp=2, sp=True, runtime_options={"tp_plan": "replicated_head"})
    assert err.value.path == "$.parallel.sp"
    with pytest.raises(ConfigError) as err:
        apply_options(runtime, {"tp_plan": "vocab_gathered", "tp_head_plan": "replicated"})
    assert err.value.path == "$.runtime.options.tp_plan"
    # Without TP a plan has nothing to split: any sp.
    assert _llama(registry, runtime_options={"tp_plan": "torchtitan_llama3"}).stages[0].peak_bytes == _llama(registry).stages[0].peak_bytes


def test_reduce_dtype_bf16_halves_the_reduce_scatter_input_by_hand(registry):
    """MixedPrecisionPolicy(reduce_dtype=bf16), Composer's PURE: foreach_reduce allocates the reduce-scatter input in the
    reduce dtype, so the layer above's input held at the backward point is 2 bytes per element of that layer instead
    of 4; the reduced shard is cast back to fp32, so the sharded gradients at the step do not change."""
    from hp_core.api import model_from_preset
    from hp_core.runtime_options import apply_options
    from hp_core.specs import RecomputeSpec, Setting

    model = model_from_preset("llama3-8b", registry)
    layer = 4096 * (4096 * 2 + 1024 * 2) + 3 * 4096 * 14336 + 2 * 4096  # one decoder layer's elements
    assert layer == 218_112_000
    found = {}
    for dtype in ("fp32", "bf16"):
        runtime = apply_options(registry.runtime("fsdp2"), {"loss_implementation": "fused", "reduce_dtype": dtype})
        (found[dtype],) = estimate(model, ParallelSpec(seq_len=T, dp=8), runtime=runtime, registry=registry,
                                   recompute=RecomputeSpec(default=Setting.parse("full"))).stages
    fp32, bf16 = found["fp32"], found["bf16"]
    # Full recompute with the fused loss binds below the top decoder layer, where the reduce-scatter input is held.
    assert fp32.binding_point == bf16.binding_point == "backward"
    assert fp32.memory.communication_buffers_bytes - bf16.memory.communication_buffers_bytes == layer * (4 - 2)
    assert fp32.memory.peak_bytes - bf16.memory.peak_bytes == layer * (4 - 2) == 436_224_000
    assert fp32.peak_points["optimizer"] == bf16.peak_points["optimizer"]
    assert registry.runtime("fsdp2").precision.reduce_bytes == 4  # the default, fp32, stated in bytes
    # Parameters and gradients in bf16 (torchtitan's training.dtype = "bfloat16"): reduce_dtype fp32 still reduces in
    # fp32 (FSDP2 drops the reduce dtype only when it equals the compute dtype), bf16 in half: the same 2 bytes a
    # layer element apart at the backward point.
    for dtype in ("fp32", "bf16"):
        runtime = apply_options(registry.runtime("fsdp2"), {"loss_implementation": "fused", "reduce_dtype": dtype})
        runtime = attrs.evolve(runtime, precision=attrs.evolve(runtime.precision, param_bytes=2, grad_bytes=2))
        (found[dtype],) = estimate(model, ParallelSpec(seq_len=T, dp=8), runtime=runtime, registry=registry,
                                   recompute=RecomputeSpec(default=Setting.parse("full"))).stages
    assert found["fp32"].memory.communication_buffers_bytes - found["bf16"].memory.communication_buffers_bytes == layer * 2
