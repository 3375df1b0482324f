"""The fsdp2 runtime under pipeline parallelism (torch 2.13 torch.distributed.pipelining with FSDP2 stages): its
peak points on stages built by hand, and its once-per-step collectives priced by hand (docs/time.md, "FSDP under
pipeline parallelism"; docs/runtimes.md, fsdp2)."""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import estimate, model_from_preset, step_time
from hp_core.blas_workspaces import DEFAULT_WORKSPACE_BYTES
from hp_core.costs import ActivationTerm
from hp_core.errors import ConfigError
from hp_core.peak_points import StageLayer, StageView
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.runtimes.fsdp2_points import Fsdp2Points

V, H = 128256, 4096
LAYER = 4096 * (4096 * 2 + 1024 * 2) + 3 * 4096 * 14336 + 2 * 4096  # a llama3-8b decoder layer's elements


def _stage(layers, *, micro_batches: int, schedule: str, dp: int = 2, replicate: int = 1, reduce_bytes=None,
           reshard: bool = True, vpp: int = 1) -> StageView:
    """Stage 0 of pp 2 holding *layers*, fp32 parameters and gradients, bf16 compute, fp32 AdamW moments; its
    static bytes the shard over dp / replicate ranks (no master copy)."""
    precision = PrecisionSpec(param_bytes=4, grad_bytes=4, reduce_bytes=reduce_bytes, master_param_bytes=0)
    shard = dp // replicate
    params = sum(-(-n * 4 // shard) for layer in layers for n in layer.elements.values())
    parallel = ParallelSpec(seq_len=16, dp=dp, pp=2, vpp=vpp, schedule=schedule, reshard_after_forward=reshard)
    return StageView(0, tuple(layers), (params, params, 0, 2 * params), {}, parallel, precision, 3, micro_batches, 0)


def _layer(placement: str, elements, kept: int, in_flight: int, **extra) -> StageLayer:
    return StageLayer("k", placement, kept, extra.pop("backward", 50), 0,
                      elements if isinstance(elements, dict) else {"dense": elements}, in_flight, **extra)


def _dense_stage(in_flight: int) -> list[StageLayer]:
    """The root's embedding (1,000 elements, 1 byte kept per micro-batch) and four body layers (2,000 elements,
    100 bytes kept, a 50-byte backward working set, a 1,000-byte input gradient)."""
    return [_layer("first", 1000, 1, in_flight)] + [_layer("body", 2000, 100, in_flight, input_bytes=1000)] * 4


def _parts(point):
    return (point.gradients_bytes, point.communication_buffers_bytes, point.activations_bytes, point.working_set_bytes)


# Each layer gathered in bf16: the root 2,000 bytes, a body layer G = 4,000; its fp32 accumulator 8,000 (the root's
# 4,000: 36,000 in all). Sharded over dp 2: parameters 9,000 x 4 / 2 = 18,000, AdamW moments 36,000.
STATIC = 18_000 + 36_000


@pytest.mark.parametrize("reshard", [True, False])
def test_gpipe_backward_after_a_backward_holds_every_layer_gathered_by_hand(reshard):
    """GPipe, 4 micro-batches (F^4 B^4): the second backward follows a backward, which left every layer gathered
    (set_reshard_after_backward(False)) whatever reshard_after_forward says, and gathers nothing (no all-gather
    output); every accumulator is alive and 3 micro-batches are in flight. It binds at the top layer's
    post-backward: the accumulators, the root and the four layers whole, the embedding's and three layers' 3
    micro-batches kept, the top layer's bf16 gradients (4,000) and its input gradient (1,000)."""
    points = Fsdp2Points()(_stage(_dense_stage(4), micro_batches=4, schedule="gpipe", reshard=reshard))
    backward = points["backward"]
    assert _parts(backward) == (36_000, 2000 + 4 * 4000, 3 * (1 + 3 * 100), 4000 + 1000)
    assert backward.peak_bytes == STATIC + 36_000 + 18_000 + 903 + 5000 == 113_903
    # The first backward (the lowest layer's post-backward: three accumulators, its own fp32 cast beside its bf16
    # gradient, everything gathered, the embedding's 4 micro-batches) stays below: 54,000 + 32,000 + 18,000 + 4 + 5,000.
    assert max(points.values(), key=lambda p: p.peak_bytes) is backward and backward.peak_bytes > 109_004


def test_1f1b_cooldown_backward_by_hand():
    """1F1B, stage 0 of pp 2 with 4 micro-batches (F^2 (B F)^2 B^2): its second cooldown backward follows a
    backward: every layer whole, every accumulator, one micro-batch in flight. It binds, 99 bytes above the
    steady-state backward's peak (at layer 2's post-backward: layers 2-4 whole, layer 1's all-gather output,
    54,000 + 36,000 + 18,000 + 2 x (1 + 100) + 5,000 = 113,202)."""
    points = Fsdp2Points()(_stage(_dense_stage(2), micro_batches=4, schedule="1f1b"))
    assert _parts(points["backward"]) == (36_000, 18_000, 1 + 3 * 100, 5000)
    assert points["backward"].peak_bytes == STATIC + 36_000 + 18_000 + 301 + 5000 == 113_301
    # Its forward after a backward gathers nothing: at layer 1's forward every layer is still whole, every
    # accumulator alive, what the embedding and the layers keep of 2 micro-batches less this one's of the layers.
    assert _parts(points["forward"]) == (36_000, 18_000, 2 * (1 + 4 * 100) - 4 * 100, 0)


def test_the_first_gradient_cast_runs_at_post_backward_only_by_hand():
    """A MoE layer's first backward (GPipe, 1 micro-batch): its routed-expert FC1 weight-gradient moment holds every
    routed expert's bf16 gradient (3,000 x 2), the dispatched tokens and the FC1 output gradient (3,000 + 1,000
    bytes) and what it keeps (13,000), but not the fp32 accumulator, which its post-backward creates later
    (to_accumulated_grad_if_needed)."""
    moe = _layer("body", {"dense": 100, "routed_expert": 3000}, 13_000, 1, terms=(
        ActivationTerm("attn_out", 10_000), ActivationTerm("dispatched_tokens", 3000), ActivationTerm("expert_gate_out", 1000)))
    points = Fsdp2Points()(_stage([_layer("first", 1000, 1, 1), moe], micro_batches=1, schedule="gpipe"))
    # Parameters 4,100 x 4 / 2, moments twice that; the root (2,000) and the MoE layer (6,200) gathered.
    assert _parts(points["backward"]) == (0, 2000 + 6200, 1 + 13_000, 3000 * 2 + 3000 + 1000)
    assert points["backward"].peak_bytes == 8200 + 16_400 + 8200 + 13_001 + 10_000 == 55_801
    # Its post-backward moment does cast: the accumulator (3,100 x 4) beside the bf16 gradients and no activation
    # but the embedding's; below the FC1 moment.
    assert 8200 + 16_400 + 12_400 + 8200 + 1 + 6200 < 55_801


def test_the_hsdp_reduction_holds_the_all_reduce_outputs_by_hand():
    """perform_reduce_grad under HSDP (dp 4 = 2 replicas x 2-rank shards) with a bf16 reduce dtype: each reduced unit's
    bf16 reduce-scatter output stays for its all-reduce until finalize_backward (FSDPParamGroup._all_reduce_state).
    Root (10 elements), then layers of 1,000 and 2,000 elements gathered in a 1-byte recipe format: at the last
    unit's foreach_reduce, the root's and layer 1's fp32 shards (20 + 2,000), layer 2's bf16 accumulator (4,000) and
    its bf16 reduce-scatter input (4,000), the root's and layer 1's all-reduce outputs (10 + 1,000)."""
    layers = [_layer("first", 10, 1, 2), _layer("body", 1000, 5, 2, gathered_bytes=1000),
              _layer("body", 2000, 5, 2, gathered_bytes=2000)]
    points = Fsdp2Points(replicate=2)(_stage(layers, micro_batches=2, schedule="gpipe", dp=4, replicate=2, reduce_bytes=2))
    assert _parts(points["reduce"]) == (20 + 2000 + 4000, 4000 + 10 + 1000, 1, 0)
    assert points["reduce"].peak_bytes == 6020 + 12_040 + 6020 + 5010 + 1


@pytest.mark.parametrize("vpp, schedule, path", [(2, "interleaved_1f1b", "$.parallel.reshard_after_forward"),
                                                 (1, "zb_h1", "$.parallel.schedule")])
def test_multi_stage_schedules_are_refused(vpp, schedule, path):
    """Interleaved 1F1B's memory with reshard_after_forward (the stage here reshards) and a schedule hp does not
    price FSDP under: refused, one line each."""
    with pytest.raises(ConfigError) as err:
        Fsdp2Points()(_stage(_dense_stage(2), micro_batches=4, schedule=schedule, vpp=vpp))
    assert err.value.path == path and "\n" not in str(err.value)


def _timed(registry, micro_batches: int, reshard: bool, step_reduce: bool = True, dp: int = 8, **options):
    """llama3-8b, 4 layers, pp 2 x dp on h100-sxm at micro-batch size 1, sequences of 1024: the step time, with the
    fsdp2 profile's fsdp_pipeline_step_reduce as *step_reduce*."""
    from hp_core.runtime_options import apply_options

    runtime = apply_options(registry.runtime("fsdp2"), options) if options else registry.runtime("fsdp2")
    runtime = attrs.evolve(runtime, timing=attrs.evolve(
        runtime.timing, schedule=attrs.evolve(runtime.timing.schedule, fsdp_pipeline_step_reduce=step_reduce)))
    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    parallel = ParallelSpec(seq_len=1024, dp=dp, pp=2, micro_batch_size=1, global_batch_size=dp * micro_batches,
                            reshard_after_forward=reshard)
    found = step_time(model, parallel, registry=registry, hardware=registry.hardware_preset("h100-sxm").spec,
                      runtime=runtime)
    assert found.provenance["sustained_slowdown"] == 1.0
    return found


def _groups(t, stage):
    return {g: (total, exposed) for g, total, exposed in t.stages[stage].communication_by_group}


def _ring(nbytes: float) -> float:
    """A ring pass over the 8 ranks of one h100-sxm node: 7/8 of the bytes at 450 GB/s NVLink x the fsdp2 profile's
    Hopper intra-node bus efficiency 0.805, and 7 steps of 1.27 us (hp_core/collectives.py _ring_pass)."""
    return 7 / 8 * nbytes / (450e9 * 0.805) + 7 * 1.27e-6


# Stage 0 holds the embedding (V x H) and two layers, stage 1 two layers and the head with the final norm (one unit).
ROOTS = (V * H, V * H + H)


def test_pipelined_fsdp_reduce_scatters_once_per_step(registry):
    """pp 2 x dp 8 (torch.distributed.pipelining: stage.py backward_maybe_with_nosync, perform_reduce_grad): each
    stage reduce-scatters its units' fp32 gradients once per step, exposed whole, whatever the micro-batch count;
    it gathers every unit in bf16 once per step (group fsdp_step, with the reduce-scatters) and, with
    reshard_after_forward, its two body layers again once per micro-batch (the root, never resharded, not)."""
    for m in (2, 8):
        kept, freed = _timed(registry, m, False), _timed(registry, m, True)
        for stage, root in enumerate(ROOTS):
            reduce = _ring(root * 4) + 2 * _ring(LAYER * 4)
            gathers = _ring(root * 2) + 2 * _ring(LAYER * 2)
            for t in (kept, freed):
                assert t.stages[stage].data_parallel_seconds == pytest.approx(reduce, rel=1e-12)
                assert _groups(t, stage)["fsdp_step"][0] == pytest.approx(gathers + reduce, rel=1e-12)
            assert "fsdp" not in _groups(kept, stage)
            total, exposed = _groups(freed, stage)["fsdp"]
            assert total == pytest.approx(2 * _ring(LAYER * 2), rel=1e-12) and 0 < exposed <= total


def test_hsdp_all_reduces_once_per_step_under_pp_by_hand(registry):
    """pp 2 x dp 16 with hsdp_replicate 2: each 8-rank shard group on one node, each replicate pair on two nodes.
    Once per step each unit's fp32 reduce-scatter output (its elements x 4 / 8) is ring all-reduced over the 2
    replicas: two passes of half of it over one 50 GB/s adapter at the profile's Hopper inter-node bus efficiency
    0.96, each with 2 x 3.58 us; exposed whole after the reduce-scatters (group hsdp_step, the stage's DP time)."""
    def all_reduce(elements):
        return 2 * (0.5 * elements * 4 / 8 / (50e9 * 0.96) + 2 * 3.58e-6)
    t = _timed(registry, 4, False, dp=16, hsdp_replicate=2)
    for stage, root in enumerate(ROOTS):
        groups = _groups(t, stage)
        replicated = all_reduce(root) + 2 * all_reduce(LAYER)
        assert groups["hsdp_step"][0] == pytest.approx(replicated, rel=1e-12) == groups["hsdp_step"][1]
        assert "hsdp" not in groups
        reduce = _ring(root * 4) + 2 * _ring(LAYER * 4)
        assert t.stages[stage].data_parallel_seconds == pytest.approx(reduce + replicated, rel=1e-12)


def test_the_pipeline_step_reduce_flag_leaves_pp1_alone(registry):
    """fsdp_pipeline_step_reduce acts under pp > 1 only: a pp 1 step is the same with it on or off."""
    runtime = registry.runtime("fsdp2")
    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    hardware = registry.hardware_preset("h100-sxm").spec
    for reshard in (True, False):
        parallel = ParallelSpec(seq_len=1024, dp=8, micro_batch_size=1, global_batch_size=32, reshard_after_forward=reshard)
        times = []
        for flag in (True, False):
            run = attrs.evolve(runtime, timing=attrs.evolve(
                runtime.timing, schedule=attrs.evolve(runtime.timing.schedule, fsdp_pipeline_step_reduce=flag)))
            times.append(step_time(model, parallel, registry=registry, hardware=hardware, runtime=run))
        assert times[0] == times[1]


def test_interleaved_fsdp_time_priced_and_its_memory_without_reshard_after_forward(registry):
    """Interleaved 1F1B under FSDP: the memory estimate prices vpp > 1 without reshard_after_forward (torchtitan's
    default under PP) and refuses it with; the step time prices torch's UNSHARD actions either way. llama3-8b's 4
    layers over pp 2 x vpp 2: each stage holds
    two one-layer chunks (stage 0: layers 0 and 2 and the embedding), which fit torch's window of three, so every
    chunk is gathered once a step: the same units' bytes as pp 2 with one chunk a stage (layers 0 and 1 and the
    embedding, identical layers), whose stage gathers every unit once in its first forward; the reduce-scatters are
    the same too. With reshard_after_forward every forward frees the chunk's body layer and the next action on it
    gathers it again, m passes a chunk a step, as the single-stage schedule's m passes of the stage's body layers."""
    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    hardware = registry.hardware_preset("h100-sxm").spec
    m = 32 // 8
    for reshard in (False, True):
        parallel = ParallelSpec(seq_len=1024, dp=8, pp=2, vpp=2, micro_batch_size=1, global_batch_size=32,
                                reshard_after_forward=reshard)
        if reshard:
            with pytest.raises(ConfigError) as err:
                estimate(model, parallel, runtime="fsdp2", registry=registry, hardware=hardware)
            assert err.value.path == "$.parallel.reshard_after_forward"
        else:
            # Both chunks of a stage gathered from the first UNSHARD to the last backward: stage 0's binding point
            # holds the embedding's and its two layers' parameters in bf16 and their fp32 accumulators.
            stage = estimate(model, parallel, runtime="fsdp2", registry=registry, hardware=hardware).stages[0]
            assert stage.memory.communication_buffers_bytes == (V * H + 2 * LAYER) * 2
            assert stage.memory.gradients_bytes == (V * H + 2 * LAYER) * 4
        multi = step_time(model, parallel, runtime="fsdp2", registry=registry, hardware=hardware)
        single = step_time(model, attrs.evolve(parallel, vpp=1, schedule="1f1b"), runtime="fsdp2", registry=registry,
                           hardware=hardware)
        g_multi = {g: (t, e) for g, t, e in multi.stages[0].communication_by_group}
        g_single = {g: (t, e) for g, t, e in single.stages[0].communication_by_group}
        reduce = multi.stages[0].data_parallel_seconds
        assert reduce == pytest.approx(single.stages[0].data_parallel_seconds) and g_multi["fsdp_step"][0] == pytest.approx(reduce)
        once = g_single["fsdp_step"][0] - reduce  # the single-stage stage's first-forward gather of every unit
        passes = m * g_single["fsdp"][0] if reshard else 0.0
        assert m * g_multi["fsdp"][0] == pytest.approx(once + passes)
    # ZeRO below 3 (no FSDP sharding) is not FSDP under PP: priced as before.
    step_time(model, attrs.evolve(parallel, zero=1), runtime="fsdp2", registry=registry, hardware=hardware)


def test_interleaved_fsdp_gathers_follow_each_rank_s_order(registry):
    """pp 4 x vpp 8 over llama3-8b's 32 identical layers (one a chunk), 8 micro-batches, reshard_after_forward false:
    ranks 1 and 2 run the same layers in the same roles, but their warm-ups differ, and torch's UNSHARD rule gathers
    their 8 chunks 27 and 25 times a step (tests/core/test_fsdp_multi_stage.py): their FSDP traffic is in that ratio."""
    model = model_from_preset("llama3-8b", registry)
    parallel = ParallelSpec(seq_len=1024, dp=8, pp=4, vpp=8, micro_batch_size=1, global_batch_size=64,
                            reshard_after_forward=False)
    t = step_time(model, parallel, runtime="fsdp2", registry=registry, hardware=registry.hardware_preset("h100-sxm").spec)
    fsdp = [{g: total for g, total, _ in s.communication_by_group}["fsdp"] for s in t.stages]
    assert fsdp[1] / fsdp[2] == pytest.approx(27 / 25)


def _llama(registry, **parallel):
    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    return estimate(model, ParallelSpec(seq_len=4096, **{"dp": 8, **parallel}), runtime="fsdp2", registry=registry)


def test_pipelined_fsdp_holds_the_unsharded_gradient_accumulators_by_hand(registry):
    """pp 2, 4 micro-batches of llama3-8b's 4 layers over dp 8, reshard_after_forward false (torchtitan's default
    under PP): stage 1 (two decoder layers, the final norm and the head) runs a forward after a backward, so every
    layer's unsharded fp32 gradient accumulator is alive at its forward peak (FSDPParam.unsharded_accumulated_grad,
    reduce_dtype fp32); no sharded gradient is held before the step's reduction."""
    T = 4096
    root = V * H + H  # the head and the final norm
    stage_elements = 2 * LAYER + root
    last = _llama(registry, pp=2, micro_batch_size=1, global_batch_size=32, reshard_after_forward=False).stages[1]
    params, states = stage_elements * 4 // 8, stage_elements * 8 // 8
    accumulators = stage_elements * 4
    kept_layer = 168064 + 2 * (4 * H + 4)
    kept_output = 2 * 2 * H + (4 * H + 4) + 4 * V + 8
    # Forward (at the loss): one micro-batch in flight; the root's and both layers' bf16 parameters, left whole by
    # the backward before it, so nothing is gathered (no all-gather output); the upcast loss's logits in bf16 and fp32.
    # Every point also holds PyTorch's two cuBLAS workspaces (hp_core/blas_workspaces.py).
    blas = 2 * DEFAULT_WORKSPACE_BYTES
    assert last.peak_points["forward"] == (params + states + accumulators + root * 2 + 2 * LAYER * 2
                                           + T * (2 * kept_layer + kept_output) + T * V * (2 + 4) + blas)
    # The once-per-step reduction, at the root's unit (perform_reduce_grad): every accumulator, the root's fp32
    # reduce-scatter input and both layers' parameters still gathered; nothing kept.
    assert last.peak_points["reduce"] == params + states + accumulators + root * 4 + 2 * LAYER * 2 + blas
    # The same layout at pp 1 holds no accumulator: its backward reduce-scatters every micro-batch (the sharded
    # fp32 gradients of the earlier micro-batches held instead).
    flat = _llama(registry, micro_batch_size=1, global_batch_size=32, reshard_after_forward=False).stages[0]
    assert "reduce" not in flat.peak_points


def test_gpipe_backward_of_llama_does_not_depend_on_resharding(registry):
    """llama3-8b, 16 layers, pp 2 x dp 8, GPipe, 8 micro-batches of 1024 tokens: stage 0's backward binds after a
    backward, every layer whole and no all-gather in flight, so reshard_after_forward does not change it; it holds
    the embedding's and the 8 layers' fp32 accumulators and their bf16 parameters, every one whole."""
    model = model_from_preset("llama3-8b", registry).with_body_layers(16, registry.kinds_placed("body"))
    found = []
    for reshard in (True, False):
        parallel = ParallelSpec(seq_len=1024, dp=8, pp=2, micro_batch_size=1, global_batch_size=64, schedule="gpipe",
                                reshard_after_forward=reshard)
        found.append(estimate(model, parallel, runtime="fsdp2", registry=registry).stages[0].peak_points["backward"])
    assert found[0] == found[1]
    stage = estimate(model, parallel, runtime="fsdp2", registry=registry).stages[0]
    assert stage.binding_point == "backward"
    assert stage.memory.gradients_bytes == (V * H + 8 * LAYER) * 4
    assert stage.memory.communication_buffers_bytes == (V * H + 8 * LAYER) * 2


def test_a_layout_that_shards_nothing_is_not_refused_and_the_search_names_the_fsdp_refusal(registry):
    from hp_core.engine.search.layouts import R_FSDP_PP, R_SCHEDULE, _reason_of
    from hp_core.specs.overlap import FsdpPipelineError, check_fsdp_pipeline

    # dp * cp == 1: torchtitan applies no FSDP, so no chunk is gathered or evicted: nothing to refuse.
    check_fsdp_pipeline(3, ParallelSpec(seq_len=1024, dp=1, pp=2, vpp=2, micro_batch_size=1, global_batch_size=4))
    with pytest.raises(FsdpPipelineError) as err:
        check_fsdp_pipeline(3, ParallelSpec(seq_len=1024, dp=2, pp=2, vpp=2, micro_batch_size=1, global_batch_size=4,
                                            reshard_after_forward=True))
    # A search counts it under its own reason, not the schedule's.
    assert _reason_of(err.value) == R_FSDP_PP
    assert _reason_of(ConfigError("$.parallel.vpp", "the interleaved_1f1b schedule needs vpp >= 2")) == R_SCHEDULE
