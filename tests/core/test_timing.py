"""Step time: hand-derived numbers for each part of the model (hp_core/engine/timing/).

A toy layer kind with stated FLOPs and parameters, a toy device (peak 1e15
FLOP/s, 1e12 B/s memory, 100e9 B/s links, 10 us latency) and a toy timing
profile whose figures are round numbers let every expected value below be
worked out by hand in its comment.
"""

from __future__ import annotations

import math

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hp_core.api import build_registry
from hp_core.errors import ConfigError
from hp_core.markers import hookimpl
from hp_core.specs import HardwareSpec, LayerGroup, ModelSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_core.specs.timing import CommOverlap, DeviceEfficiency, Sourced, TimingProfile
from hp_core.api import step_time
from hp_core.engine.timing import collective_seconds, compute_dtype, pipeline_seconds
from hp_core.costs import ActivationTerm, Flops, LayerContext, LayerCost, LayerWork, ParamCount
from hp_core.types import LayerKind, Runtime
from hp_plugins.kinds.dense import DenseConfig
from hp_plugins.runtimes.timing_profiles import GENERIC, MEGATRON_LM_2022, MEGATRON_TE, PROFILES

# ----------------------------------------------------------------------------- collectives and pipelines


def test_ring_all_reduce_by_hand():
    # 2 (n-1)/n S/B + 2 (n-1) a = 2 * 3/4 * 1e9 / 1e11 + 6 * 1e-5 = 0.015 + 0.00006
    assert collective_seconds("all_reduce", 1e9, 4, 100e9, 1e-5) == pytest.approx(0.01506)


def test_tree_all_reduce_pays_log_latency():
    # 2 * 3/4 * 1e9 / 1e11 + 2 * log2(4) * 1e-5 = 0.015 + 0.00004
    assert collective_seconds("all_reduce", 1e9, 4, 100e9, 1e-5, "tree") == pytest.approx(0.01504)


def test_all_gather_reduce_scatter_all_to_all_and_send_by_hand():
    # (n-1)/n S/B + (n-1) a = 7/8 * 8e9 / 1e11 + 7e-5 = 0.07 + 0.00007
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert collective_seconds(op, 8e9, 8, 100e9, 1e-5) == pytest.approx(0.07007)
    # S/B + a
    assert collective_seconds("p2p", 1e9, 2, 100e9, 1e-5) == pytest.approx(0.01001)


def test_no_traffic_within_one_rank():
    assert collective_seconds("all_reduce", 1e9, 1, 100e9, 1e-5) == 0.0
    assert collective_seconds("all_gather", 0, 8, 100e9, 1e-5) == 0.0


def test_two_stage_1f1b_bubble_by_hand():
    # Two stages of 1 s per micro-batch, 4 micro-batches: (m + p - 1) t = 5 s, of which 1 s bubble.
    assert pipeline_seconds([1.0, 1.0], 4) == pytest.approx(5.0)
    # Unequal stages 1 s and 2 s, 3 micro-batches: the slow stage 3 times, the fast one fills once.
    assert pipeline_seconds([1.0, 2.0], 3) == pytest.approx(7.0)


def test_interleaved_bubble_shrinks_by_the_chunks():
    # p = 4 stages of 1 s, v = 2 chunks, m = 8: 8 + (p - 1) / v = 9.5 (bubble (p-1)/(v m) = 3/16 of 8 s).
    assert pipeline_seconds([1.0] * 4, 8, 2) == pytest.approx(9.5)


# ----------------------------------------------------------------------------- a toy world

PEAK = 1e15
MEMORY_BW = 1e12
LINK = 100e9
LATENCY = 1e-5


def _figure(value: float) -> Sourced:
    return Sourced(value, "a round number for a hand-worked test")


TOY_DEVICE = DeviceEfficiency(
    architecture="toy",
    matmul=_figure(0.5), attention_forward=_figure(0.25), attention_backward=_figure(0.125),
    attention_forward_overhead_seconds=_figure(0.0), attention_backward_overhead_seconds=_figure(0.0),
    grouped_matmul=_figure(0.5), grouped_half_rows=_figure(100), memory_bandwidth=_figure(0.5),
    intra_node_bus=_figure(0.5), inter_node_bus=_figure(0.25), all_to_all_bus=_figure(0.5),
    collective_overhead_seconds=_figure(0.0),
)
_NONE = _figure(0.0)
TOY_PROFILE = TimingProfile(
    name="toy",
    description="round numbers",
    devices=(TOY_DEVICE,),
    overlap=CommOverlap(tensor_parallel=_NONE, context_parallel=_NONE, expert_parallel=_NONE, data_parallel=_NONE, pipeline=_NONE),
    matmul_backward_factor=_figure(2.0),
    attention_backward_factor=_figure(2.5),
    flash_causal_fraction=_figure(0.5),
    elementwise_accesses_per_flop=_figure(0.5),
    elementwise_backward_factor=_figure(2.0),
    moe_permute_passes=_figure(0),
    optimizer_grad_passes=_figure(0),
    grad_buffer_passes=_figure(0),
    grad_scale_passes=_figure(0),
    algorithm_source="a hand-worked test",
)
TOY_DEVICE_SPEC = HardwareSpec(
    name="Toy device", memory_bytes=2**36, peak_flops={"bf16": PEAK}, devices_per_node=8, architecture="toy",
    memory_bandwidth_bytes_per_second=MEMORY_BW, intra_node_bandwidth_bytes_per_second=LINK,
    inter_node_bandwidth_bytes_per_second=LINK / 4, intra_node_latency_seconds=LATENCY, inter_node_latency_seconds=LATENCY,
)

MATMUL = 1e12  # forward matmul FLOPs of one toy layer per micro-batch
ATTENTION = 4e11  # forward attention-core FLOPs
ELEMENTWISE = 1e9  # forward elementwise FLOPs
PARAMS = 1_000_000  # parameter elements of one toy layer


@attrs.frozen
class ToyConfig:
    """A layer with stated FLOPs whose work states no collectives (so no TP/CP/EP traffic)."""

    matmul: float = MATMUL
    attention: float = 0.0
    elementwise: float = 0.0
    params: int = PARAMS


def _evaluate_toy(c: ToyConfig, x: LayerContext) -> LayerCost:
    return LayerCost(
        params=(ParamCount("w", "dense", c.params, False),),
        activations=(ActivationTerm("kept", 1000), ActivationTerm("norm_out", 4000, "normOp")),
        input_bytes=100,
        working_bytes=0,
        forward=Flops(matmul_flops=c.matmul, attention_flops=c.attention, elementwise_flops=c.elementwise),
        # Parameters and no matmul: it states itself a lookup table (an embedding's work).
        work=LayerWork(table_elements=0 if c.matmul else c.params),
    )


class _ToyPlugin:
    @hookimpl
    def hp_layer_kinds(self):
        yield LayerKind(name="toy", config_type=ToyConfig, evaluate=_evaluate_toy, switches=("normOp",))

    @hookimpl
    def hp_runtimes(self):
        yield Runtime(name="toy-runtime", precision=PrecisionSpec(), attention="flash", zero=0, timing=TOY_PROFILE)
        yield Runtime(name="untimed", precision=PrecisionSpec(), attention="flash")


@pytest.fixture
def toy_registry():
    return build_registry([_ToyPlugin()], use_env=False)


def _model(layers: int, config: ToyConfig | None = None) -> ModelSpec:
    return ModelSpec(name="toy", layers=(LayerGroup(kind="toy", config=config or ToyConfig(), count=layers),), source="test")


def _time(registry, model, parallel, **kw):
    return step_time(model, parallel, registry=registry, hardware=TOY_DEVICE_SPEC, runtime="toy-runtime", **kw)


# Per toy layer and micro-batch: forward matmul 1e12 / (1e15 * 0.5) = 2 ms, backward 4 ms.
LAYER_FORWARD = MATMUL / (PEAK * 0.5)
# Optimizer, ZeRO-0, no clipping passes: Adam reads and writes fp32 master (8) and moments (16),
# reads the fp32 gradient (4), casts master to bf16 (4 + 2): 34 bytes per element at 1e12 * 0.5 B/s.
OPTIMIZER_PER_PARAM = 34 / (MEMORY_BW * 0.5)


def test_single_stage_step_by_hand(toy_registry):
    # 4 layers, 3 micro-batches, one rank: 3 * 4 * (2 + 4) ms + optimizer of 4e6 elements.
    t = _time(toy_registry, _model(4), ParallelSpec(seq_len=16, global_batch_size=3))
    assert t.micro_batches == 3
    assert t.compute_seconds == pytest.approx(3 * 4 * 3 * LAYER_FORWARD)
    assert t.bubble_seconds == pytest.approx(0.0)
    assert t.optimizer_seconds == pytest.approx(4 * PARAMS * OPTIMIZER_PER_PARAM)
    assert t.step_seconds == pytest.approx(0.072 + 4 * PARAMS * OPTIMIZER_PER_PARAM)


def test_a_single_stage_bubble_is_zero_not_the_subtractions_rounding():
    # pipe - m * micro_batch - own left -4.8e-18 s on this MXFP8 job (printed as "bubble -0.000"): exactly none.
    from hp_core.api import model_from_preset

    registry = build_registry()
    t = step_time(model_from_preset("llama3-8b", registry=registry), ParallelSpec(dp=4, tp=2, sp=True, seq_len=4096),
                  registry=registry, hardware="b200", runtime="megatron", precision=PrecisionSpec(recipe="mxfp8"))
    assert t.bubble_seconds == 0.0


def test_two_stage_1f1b_step_by_hand(toy_registry):
    # 2 stages of 2 layers (12 ms per micro-batch each), 4 micro-batches: (4 + 1) * 12 ms,
    # the bubble one stage time; each stage's optimizer step covers its 2e6 elements.
    t = _time(toy_registry, _model(4), ParallelSpec(pp=2, seq_len=16, global_batch_size=4))
    stage = 2 * 3 * LAYER_FORWARD
    assert [s.micro_batch_seconds for s in t.stages] == pytest.approx([stage, stage])
    assert t.bubble_seconds == pytest.approx(stage)
    assert t.step_seconds == pytest.approx(5 * stage + 2 * PARAMS * OPTIMIZER_PER_PARAM)
    assert sum(t.breakdown_seconds.values()) == pytest.approx(t.step_seconds)


def test_interleaved_bubble_by_hand(toy_registry):
    # 2 stages x 2 chunks of 1 layer: 6 ms per micro-batch per stage; m = 4:
    # 4 * 6 + (2 - 1) * 6 / 2 = 27 ms.
    t = _time(toy_registry, _model(4), ParallelSpec(pp=2, vpp=2, seq_len=16, global_batch_size=4))
    stage = 2 * 3 * LAYER_FORWARD
    assert t.bubble_seconds == pytest.approx(stage / 2)
    assert t.step_seconds - t.optimizer_seconds == pytest.approx(4 * stage + stage / 2)


def test_full_recompute_reruns_the_forward(toy_registry):
    # 2 + 4 + 2 ms per layer: the recomputed forward.
    t = _time(toy_registry, _model(1), ParallelSpec(seq_len=16), recompute=RecomputeSpec(default=Setting.parse("full")))
    assert t.recompute_seconds == pytest.approx(LAYER_FORWARD)
    assert t.compute_seconds == pytest.approx(3 * LAYER_FORWARD)
    # Hardware FLOPs count the recomputed forward, model FLOPs do not: 4/3.
    assert t.hfu / t.mfu == pytest.approx(4 / 3)


def test_selective_recompute_rewrites_what_it_drops(toy_registry):
    # normOp drops 4000 bytes; rebuilding them reads the input and writes the output: 8000 B at 5e11 B/s.
    t = _time(toy_registry, _model(1), ParallelSpec(seq_len=16), recompute=RecomputeSpec(default=Setting.parse(["normOp"])))
    assert t.recompute_seconds == pytest.approx(8000 / (MEMORY_BW * 0.5))


def test_flash_attention_skips_the_masked_half(toy_registry):
    # Forward: 4e11 * 0.5 causal / (1e15 * 0.25) = 0.8 ms; backward 2.5x the executed FLOPs at 0.125: 4 ms.
    model = _model(1, ToyConfig(matmul=0.0, attention=ATTENTION, params=0))
    t = _time(toy_registry, model, ParallelSpec(seq_len=16))
    assert t.stages[0].forward_seconds == pytest.approx(0.8e-3)
    assert t.stages[0].backward_seconds == pytest.approx(4e-3)
    # Eager attention computes the whole score matrix with GEMMs at the matmul efficiency:
    # 4e11 / 5e14 = 0.8 ms forward, twice that backward.
    eager = _time(toy_registry, model, ParallelSpec(seq_len=16), attention="eager")
    assert eager.stages[0].forward_seconds == pytest.approx(0.8e-3)
    assert eager.stages[0].backward_seconds == pytest.approx(1.6e-3)


def test_elementwise_ops_are_memory_bound(toy_registry):
    # 1e9 FLOPs * 0.5 accesses * 2 bytes / (1e12 * 0.5) = 2 ms forward, twice backward.
    t = _time(toy_registry, _model(1, ToyConfig(matmul=0.0, elementwise=ELEMENTWISE, params=0)), ParallelSpec(seq_len=16))
    assert t.stages[0].forward_seconds == pytest.approx(2e-3)
    assert t.stages[0].backward_seconds == pytest.approx(4e-3)


def test_a_lookup_table_writes_a_dense_gradient(toy_registry):
    # Parameters and no matmul, stated as a lookup table (an embedding): backward writes and reads a bf16 dense gradient of the
    # 1e6 elements and reads and writes the fp32 buffer: 1e6 * 2 * (2 + 4) B / 5e11 B/s = 24 us.
    t = _time(toy_registry, _model(1, ToyConfig(matmul=0.0)), ParallelSpec(seq_len=16))
    assert t.stages[0].forward_seconds == 0.0
    assert t.stages[0].backward_seconds == pytest.approx(24e-6)


def test_zero1_data_parallel_by_hand(toy_registry):
    # dp = 4 within a node: reduce-scatter fp32 gradients and all-gather bf16 parameters of 2e6 elements
    # at 100e9 * 0.5 B/s: 3/4 * 8e6 / 5e10 + 3/4 * 4e6 / 5e10 + 6 * 10 us.
    t = _time(toy_registry, _model(2), ParallelSpec(dp=4, zero=1, seq_len=16, global_batch_size=4))
    assert t.data_parallel_seconds == pytest.approx(0.75 * 8e6 / 5e10 + 0.75 * 4e6 / 5e10 + 6e-5)
    # The optimizer step covers a quarter of the elements.
    assert t.optimizer_seconds == pytest.approx(2 * PARAMS / 4 * OPTIMIZER_PER_PARAM)


def test_zero0_all_reduces_gradients(toy_registry):
    t = _time(toy_registry, _model(2), ParallelSpec(dp=2, zero=0, seq_len=16, global_batch_size=2))
    # Ring all-reduce of 8e6 bytes over 2 ranks: 2 * 1/2 * 8e6 / 5e10 + 2 * 10 us.
    assert t.data_parallel_seconds == pytest.approx(8e6 / 5e10 + 2e-5)


def test_megatron_grad_reduce_in_bf16_halves_the_data_parallel_reduction_by_hand(toy_registry):
    # The megatron runtime's grad_reduce_in_fp32 option on the toy runtime: false reduces the gradient buffer in
    # the parameters' dtype (bf16, Megatron-Core distributed_data_parallel.py grad_dtype = param.dtype).
    from hp_core.api import apply_options

    option = next(o for o in build_registry(use_env=False).runtime("megatron").options if o.name == "grad_reduce_in_fp32")
    toy = attrs.evolve(toy_registry.runtime("toy-runtime"), options=(option,))

    def timed(value, **layout):
        runtime = apply_options(toy, {"grad_reduce_in_fp32": value})
        return step_time(_model(2), ParallelSpec(seq_len=16, **layout), registry=toy_registry, hardware=TOY_DEVICE_SPEC,
                         runtime=runtime)

    zero1 = {"dp": 4, "zero": 1, "global_batch_size": 4}
    # dp = 4, ZeRO-1, 2e6 elements: reduce-scatter 2e6 * 4 (true) or 2e6 * 2 (false) bytes, then the bf16
    # all-gather of 4e6 bytes, at 100e9 * 0.5 B/s: 3/4 * S / 5e10 each, 6 * 10 us of latency.
    assert timed(True, **zero1).data_parallel_seconds == pytest.approx(0.75 * 8e6 / 5e10 + 0.75 * 4e6 / 5e10 + 6e-5)
    assert timed(False, **zero1).data_parallel_seconds == pytest.approx(0.75 * 4e6 / 5e10 + 0.75 * 4e6 / 5e10 + 6e-5)
    # The optimizer reads the bf16 gradient: 2 bytes less per element than the fp32 one (34 -> 32) of a quarter.
    assert timed(False, **zero1).optimizer_seconds == pytest.approx(2 * PARAMS / 4 * 32 / (MEMORY_BW * 0.5))
    # ZeRO-0 all-reduces the buffer: ring over 2 ranks, 2 * 1/2 * 4e6 / 5e10 + 2 * 10 us (8e6 bytes in fp32).
    zero0 = {"dp": 2, "zero": 0, "global_batch_size": 2}
    assert timed(True, **zero0).data_parallel_seconds == pytest.approx(8e6 / 5e10 + 2e-5)
    assert timed(False, **zero0).data_parallel_seconds == pytest.approx(4e6 / 5e10 + 2e-5)


def test_fp32_main_gradients_copy_a_bf16_buffer_at_the_step_by_hand(toy_registry):
    # TimingProfile.optimizer_grad_bytes 4 (Megatron's fp32 main gradients: distrib_optimizer.py
    # shard_main_param.grad = shard_model_grad.float()): with a bf16 buffer (grad_reduce_in_fp32 false) the step first
    # copies the buffer's shard into fp32 (2 read + 4 written per element) and its update reads the fp32 copy (34
    # bytes per element, as with an fp32 buffer): 40 bytes per element of the ZeRO-1 shard, 2e6 / 4 elements.
    from hp_core.api import apply_options

    option = next(o for o in build_registry(use_env=False).runtime("megatron").options if o.name == "grad_reduce_in_fp32")
    toy = toy_registry.runtime("toy-runtime")
    toy = attrs.evolve(toy, options=(option,), timing=attrs.evolve(toy.timing, optimizer_grad_bytes=_figure(4)))

    def optimizer(value):
        return step_time(_model(2), ParallelSpec(seq_len=16, dp=4, zero=1, global_batch_size=4), registry=toy_registry,
                         hardware=TOY_DEVICE_SPEC, runtime=apply_options(toy, {"grad_reduce_in_fp32": value})).optimizer_seconds
    assert optimizer(False) == pytest.approx(2 * PARAMS / 4 * 40 / (MEMORY_BW * 0.5))
    # An fp32 buffer is the main gradient itself (.float() returns it): no copy, 34 bytes per element.
    assert optimizer(True) == pytest.approx(2 * PARAMS / 4 * OPTIMIZER_PER_PARAM)


@pytest.mark.parametrize("reduce_bytes", [None, 2])
def test_a_reduce_dtype_prices_the_reduction_alone_by_hand(toy_registry, reduce_bytes):
    # PrecisionSpec.reduce_bytes (FSDP's reduce_dtype): the reduction in that width, the gradients (and the optimizer,
    # which reads them: 34 bytes per element) in grad_bytes, 4. None: the reduction in grad_bytes.
    toy = toy_registry.runtime("toy-runtime")
    runtime = attrs.evolve(toy, precision=attrs.evolve(toy.precision, reduce_bytes=reduce_bytes))
    width = reduce_bytes or 4

    def timed(zero):
        return step_time(_model(2), ParallelSpec(dp=4, zero=zero, seq_len=16, global_batch_size=4), registry=toy_registry,
                         hardware=TOY_DEVICE_SPEC, runtime=runtime)

    # ZeRO-1, 2e6 elements: reduce-scatter 2e6 * width bytes, all-gather 2e6 * 2, 3/4 * S / 5e10 each, 6 * 10 us.
    zero1 = timed(1)
    assert zero1.data_parallel_seconds == pytest.approx(0.75 * 2e6 * width / 5e10 + 0.75 * 4e6 / 5e10 + 6e-5)
    assert zero1.optimizer_seconds == pytest.approx(2 * PARAMS / 4 * OPTIMIZER_PER_PARAM)
    # FSDP (ZeRO-3), per layer and micro-batch, nothing overlapped: the bf16 all-gather of 1e6 elements forward and
    # again backward, 3/4 * 2e6 / 5e10 + 3 * 10 us each, and the reduce-scatter, 3/4 * 1e6 * width / 5e10 + 3 * 10 us.
    ((group, total, exposed),) = timed(3).stages[0].communication_by_group
    per_layer = 2 * (0.75 * 2e6 / 5e10 + 3e-5) + 0.75 * 1e6 * width / 5e10 + 3e-5
    assert group == "fsdp" and total == pytest.approx(2 * per_layer) and exposed == pytest.approx(total)
    # Memory follows the same width: ZeRO-3 holds one layer's reduce-scatter input (1e6 elements) in the reduce dtype.
    from hp_core.api import estimate

    (stage,) = estimate(_model(2), ParallelSpec(dp=4, zero=3, seq_len=16, global_batch_size=4), registry=toy_registry,
                        runtime=runtime).stages
    (fp32,) = estimate(_model(2), ParallelSpec(dp=4, zero=3, seq_len=16, global_batch_size=4), registry=toy_registry,
                       runtime=attrs.evolve(toy, precision=attrs.evolve(toy.precision, reduce_bytes=4))).stages
    assert fp32.memory.communication_buffers_bytes - stage.memory.communication_buffers_bytes == PARAMS * (4 - width)


def test_hsdp_all_reduces_each_layer_shard_across_the_replicate_group_by_hand(toy_registry):
    # HSDP (OverlapSchedule.fsdp_replicate, the fsdp2 runtime's hsdp_replicate): dp = 16 split into 2 replicas of
    # 8-rank shard groups. torchtitan's mesh puts dp_replicate outside dp_shard, so with 8 devices per node a shard
    # group is one node (ranks 0-7) and a replicate group one rank on each of 2 nodes (ranks 0 and 8).
    from hp_core.specs.overlap import OverlapSchedule

    toy = toy_registry.runtime("toy-runtime")
    hsdp = attrs.evolve(toy, timing=attrs.evolve(TOY_PROFILE, schedule=OverlapSchedule(fsdp_replicate=2)))
    layout = ParallelSpec(dp=16, zero=3, seq_len=16, global_batch_size=16)
    t = step_time(_model(2), layout, registry=toy_registry, hardware=TOY_DEVICE_SPEC, runtime=hsdp)
    groups = {g: (total, exposed) for g, total, exposed in t.stages[0].communication_by_group}
    # Per layer and micro-batch, nothing overlapped, within the 8-rank shard group at 100e9 * 0.5 B/s: the bf16
    # all-gather of 1e6 elements forward and again backward, 7/8 * 2e6 / 5e10 + 7 * 10 us each, and the fp32
    # reduce-scatter, 7/8 * 4e6 / 5e10 + 7 * 10 us (not over all 16 ranks).
    fsdp = 2 * (7 / 8 * 2e6 / 5e10 + 7e-5) + 7 / 8 * 4e6 / 5e10 + 7e-5
    assert groups["fsdp"] == pytest.approx((2 * fsdp, 2 * fsdp))
    # Then the reduce-scatter's output, 1e6 * 4 / 8 = 5e5 bytes, ring all-reduced over the 2 replicas, one per node:
    # each ring pass 1/2 * 5e5 bytes over one adapter, 25e9 * 0.25 B/s (inter_node_bus), and 2 * 10 us of latency
    # (hp_core/collectives.py _ring_pass); two passes.
    replica = 2 * (0.5 * 5e5 / (25e9 * 0.25) + 2e-5)
    assert groups["hsdp"] == pytest.approx((2 * replica, 2 * replica))
    assert t.communication_seconds == pytest.approx(2 * fsdp + 2 * replica)
    # The optimizer steps on the shard of the 8-rank group: an eighth of the 2e6 elements.
    assert t.optimizer_seconds == pytest.approx(2 * PARAMS / 8 * OPTIMIZER_PER_PARAM)
    # Plain FSDP over the same 16 ranks: gathers and reduce-scatters span both nodes, no replicate all-reduce.
    plain = step_time(_model(2), layout, registry=toy_registry, hardware=TOY_DEVICE_SPEC, runtime=toy)
    assert {g for g, _, _ in plain.stages[0].communication_by_group} == {"fsdp"}
    # A replicate degree that does not divide dp, or a run that does not shard with FSDP, is refused in one line.
    for bad, message in ((ParallelSpec(dp=9, zero=3, seq_len=16, global_batch_size=9), "must divide parallel.dp 9"),
                         (ParallelSpec(dp=16, zero=1, seq_len=16, global_batch_size=16), "needs parallel.zero 3")):
        with pytest.raises(ConfigError, match=message) as err:
            step_time(_model(2), bad, registry=toy_registry, hardware=TOY_DEVICE_SPEC, runtime=hsdp)
        assert err.value.path == "$.runtime.options.hsdp_replicate"


def test_tensor_parallel_all_reduces_by_hand(registry):
    # A dense layer, tp = 2 without SP: two all-reduces forward and two backward of the
    # T x h activation: T = 1024 tokens, h = 512, 2 bytes: 1 MiB each.
    layer = DenseConfig(hidden_size=512, num_attention_heads=8, num_key_value_heads=8, intermediate_size=1024)
    model = ModelSpec(name="one", layers=(LayerGroup(kind="dense", config=layer),), source="test")
    base = dict(registry=registry, hardware=TOY_DEVICE_SPEC, profile=TOY_PROFILE)
    t = step_time(model, ParallelSpec(tp=2, seq_len=1024), **base)
    one = collective_seconds("all_reduce", 1024 * 512 * 2, 2, LINK * 0.5, LATENCY)
    assert t.communication_seconds == pytest.approx(4 * one)
    # With sequence parallelism: an all-gather and a reduce-scatter per block each way, half the cost each.
    sp = step_time(model, ParallelSpec(tp=2, sp=True, seq_len=1024), **base)
    ag = collective_seconds("all_gather", 1024 * 512 * 2, 2, LINK * 0.5, LATENCY)
    assert sp.communication_seconds == pytest.approx(8 * ag)
    # Recomputing the gather (Megatron-LM re-gathers in backward) adds two all-gathers.
    regather = step_time(model, ParallelSpec(tp=2, sp=True, seq_len=1024), recompute=RecomputeSpec(default=Setting.parse(["gather"])), **base)
    assert regather.communication_seconds == pytest.approx(10 * ag)


def test_op_level_policy_re_gathers_what_its_save_list_drops(registry):
    # torchtitan's op SAC (the profile's alternate_matmul_recompute) saves no all-gather output
    # (alternate_policy_recomputes {gather}): recomputing normOp and ffAct under it issues each block's
    # all-gather again in backward, 8 -> 10 all-gathers of the dense layer above; one switch alone runs
    # no policy, and a profile stating nothing the policy drops besides re-gathers nothing.
    layer = DenseConfig(hidden_size=512, num_attention_heads=8, num_key_value_heads=8, intermediate_size=1024)
    model = ModelSpec(name="one", layers=(LayerGroup(kind="dense", config=layer),), source="test")
    layout = ParallelSpec(tp=2, sp=True, seq_len=1024)
    ag = collective_seconds("all_gather", 1024 * 512 * 2, 2, LINK * 0.5, LATENCY)
    policy = attrs.evolve(TOY_PROFILE, alternate_matmul_recompute={"normOp", "ffAct"}, alternate_policy_recomputes={"gather"})
    silent = attrs.evolve(policy, alternate_policy_recomputes=frozenset())

    def comm(profile, switches):
        return step_time(model, layout, registry=registry, hardware=TOY_DEVICE_SPEC, profile=profile,
                         recompute=RecomputeSpec(default=Setting.parse(switches))).communication_seconds

    assert comm(policy, ["normOp", "ffAct"]) == pytest.approx(10 * ag)
    assert comm(policy, ["normOp"]) == pytest.approx(8 * ag)
    assert comm(silent, ["normOp", "ffAct"]) == pytest.approx(8 * ag)
    with pytest.raises(Exception, match="alternate_policy_recomputes"):
        attrs.evolve(policy, alternate_policy_recomputes={"not a switch"})


def test_groups_spanning_whole_nodes_use_every_members_adapter(toy_registry):
    # dp = 16 over two 8-device nodes: NCCL's rings cross the node boundary on all 8 adapters at once, so each
    # member sends 1/8 of its ring traffic over its own adapter (25e9 * 0.25 B/s) and 7/8 over NVLink (100e9 * 0.5):
    # 15/16 * S * max(7/8 / 50e9, 1/8 / 6.25e9) = 15/16 * S / 50e9 per pass; latency 14 NVLink and 2 network steps.
    # The reduce-scatter of 4-byte gradients and the all-gather of 2-byte parameters move 12e6 bytes together.
    t = _time(toy_registry, _model(2), ParallelSpec(dp=16, zero=1, seq_len=16, global_batch_size=16))
    assert t.data_parallel_seconds == pytest.approx(15 / 16 * 12e6 / 50e9 + 2 * (14 + 2) * LATENCY)


def test_a_group_with_one_member_per_node_is_limited_to_one_adapter(toy_registry):
    # tp = 8 fills each node, so the dp = 2 group has one member on each of two nodes: one adapter, 1/2 * S / 6.25e9.
    t = _time(toy_registry, _model(2), ParallelSpec(dp=2, tp=8, zero=1, seq_len=16, global_batch_size=2))
    assert t.data_parallel_seconds == pytest.approx(1 / 2 * 12e6 / (LINK / 4 * 0.25) + 2 * 2 * LATENCY)


def test_rank_order_places_the_groups(toy_registry):
    # With dp fastest (dp-tp-cp-ep-pp) the dp = 2 group sits on consecutive ranks of one node: NVLink at 50e9.
    t = _time(toy_registry, _model(2), ParallelSpec(dp=2, tp=8, zero=1, seq_len=16, global_batch_size=2, rank_order="dp-tp-cp-ep-pp"))
    assert t.data_parallel_seconds == pytest.approx(1 / 2 * 12e6 / (LINK * 0.5) + 2 * LATENCY)


def test_throughput_and_mfu(toy_registry):
    # One layer, one micro-batch of 16 tokens: model FLOPs 3e12 over (6 ms + optimizer) on one device.
    t = _time(toy_registry, _model(1), ParallelSpec(seq_len=16))
    step = 3 * LAYER_FORWARD + PARAMS * OPTIMIZER_PER_PARAM
    assert t.step_seconds == pytest.approx(step)
    assert t.model_flops == pytest.approx(3 * MATMUL)
    assert t.mfu == pytest.approx(3 * MATMUL / (step * PEAK))
    assert t.tokens_per_second == pytest.approx(16 / step)


def test_more_micro_batches_cost_one_stage_time_each(toy_registry):
    # Adding 4 micro-batches to a 2-stage pipeline adds 4 stage times, nothing else.
    a = _time(toy_registry, _model(4), ParallelSpec(pp=2, seq_len=16, global_batch_size=4))
    b = _time(toy_registry, _model(4), ParallelSpec(pp=2, seq_len=16, global_batch_size=8))
    assert b.step_seconds - a.step_seconds == pytest.approx(4 * 2 * 3 * LAYER_FORWARD)


# ----------------------------------------------------------------------------- refusals


def test_runtime_without_timing_is_refused(toy_registry):
    with pytest.raises(ConfigError, match=r"\$\.runtime: runtime 'untimed' states no timing profile"):
        step_time(_model(1), ParallelSpec(seq_len=16), registry=toy_registry, hardware=TOY_DEVICE_SPEC, runtime="untimed")


def test_missing_hardware_is_refused(toy_registry):
    with pytest.raises(ConfigError, match=r"^\$\.hardware: "):
        step_time(_model(1), ParallelSpec(seq_len=16), registry=toy_registry, hardware=None, runtime="toy-runtime")


def test_unstated_hardware_field_is_refused_with_its_path(toy_registry):
    bare = attrs.evolve(TOY_DEVICE_SPEC, memory_bandwidth_bytes_per_second=None)
    with pytest.raises(ConfigError, match=r"\$\.hardware\.memory_bandwidth_bytes_per_second"):
        step_time(_model(1), ParallelSpec(seq_len=16), registry=toy_registry, hardware=bare, runtime="toy-runtime")
    no_peak = attrs.evolve(TOY_DEVICE_SPEC, peak_flops={"fp8": PEAK})
    with pytest.raises(ConfigError, match=r"\$\.hardware\.peak_flops"):
        compute_dtype(PrecisionSpec(), no_peak)


def test_unknown_architecture_without_fallback_is_refused():
    with pytest.raises(ConfigError, match=r"\$\.hardware\.architecture: timing profile toy has no efficiencies for architecture 'other'"):
        TOY_PROFILE.device("other")


def test_profile_figures_need_a_source_and_a_sane_value():
    with pytest.raises(ValueError, match="source"):
        Sourced(0.5, " ")
    with pytest.raises(ValueError, match="fraction"):
        attrs.evolve(TOY_DEVICE, matmul=_figure(1.5))
    with pytest.raises(ValueError, match="twice"):
        attrs.evolve(TOY_PROFILE, devices=(TOY_DEVICE, TOY_DEVICE))


# ----------------------------------------------------------------------------- built-in data


def test_every_preset_is_priced_by_every_built_in_profile(registry, llama8b):
    parallel = ParallelSpec(dp=4, tp=2, sp=True, seq_len=8192, global_batch_size=64)
    for preset in registry.hardware:
        spec = preset.spec
        assert spec.architecture and spec.memory_bandwidth_bytes_per_second and spec.intra_node_bandwidth_bytes_per_second
        for profile in PROFILES.values():
            t = step_time(llama8b, parallel, registry=registry, hardware=spec, profile=profile)
            assert 0 < t.mfu < 1, (preset.name, profile.name)


def test_the_generic_runtime_states_the_generic_profile(registry):
    assert registry.runtime("generic").timing is GENERIC


def test_megatron_profile_prices_faster_hardware_faster(registry, llama8b):
    parallel = ParallelSpec(dp=8, seq_len=4096, global_batch_size=32)
    times = {
        name: step_time(llama8b, parallel, registry=registry, hardware=registry.hardware_preset(name).spec, profile=MEGATRON_TE).step_seconds
        for name in ("a100-80gb", "h100-sxm", "b200")
    }
    assert times["a100-80gb"] > times["h100-sxm"] > times["b200"]


def test_scatter_gather_shrinks_pipeline_sends(registry):
    # 22B-like layer on a 2-stage pipeline across nodes (tp = 8 fills a node): sends carry 1/8 of the activation.
    layer = DenseConfig(hidden_size=1024, num_attention_heads=8, num_key_value_heads=8, intermediate_size=4096)
    model = ModelSpec(name="two", layers=(LayerGroup(kind="dense", config=layer, count=2),), source="test")
    parallel = ParallelSpec(tp=8, pp=2, seq_len=2048, global_batch_size=2)
    spec = registry.hardware_preset("a100-80gb").spec
    plain = step_time(model, parallel, registry=registry, hardware=spec, profile=MEGATRON_TE)
    split = step_time(model, parallel, registry=registry, hardware=spec, profile=MEGATRON_LM_2022)
    assert split.communication_seconds < plain.communication_seconds
    send = collective_seconds("p2p", 2048 * 1024 * 2, 2, 25e9 * 0.96, 3.58e-6)
    split_send = collective_seconds("p2p", 2048 * 1024 * 2 / 8, 2, 25e9 * 0.96, 3.58e-6) + collective_seconds(
        "all_gather", 2048 * 1024 * 2, 8, 300e9 * 0.773, 8e-6
    )
    # Each stage sends once per micro-batch (forward or backward), 2 micro-batches.
    assert plain.communication_seconds - split.communication_seconds == pytest.approx(2 * (send - split_send))


def test_the_default_estimate_runs_in_well_under_a_millisecond_per_layer(registry, llama8b):
    # Not a benchmark: a guard that step_time does not evaluate layers per body layer.
    import time

    parallel = ParallelSpec(dp=4, tp=2, sp=True, seq_len=8192, global_batch_size=64)
    spec = registry.hardware_preset("h100-sxm").spec
    step_time(llama8b, parallel, registry=registry, hardware=spec)
    start = time.perf_counter()
    for _ in range(20):
        step_time(llama8b, parallel, registry=registry, hardware=spec)
    assert (time.perf_counter() - start) / 20 < 0.02
    assert math.isfinite(step_time(llama8b, parallel, registry=registry, hardware=spec).step_seconds)


# ----------------------------------------------------------------------------- the command line


def _run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    from hp_core.cli import main

    status = main(argv)
    out = capsys.readouterr()
    return status, out.out, out.err


def test_cli_json_carries_the_time_in_seconds(capsys):
    import json

    status, out, _ = _run_cli(["estimate", "--json"], capsys)
    assert status == 0
    time = json.loads(out)["time"]
    assert time["step_seconds"] == pytest.approx(sum(time["breakdown"].values()))
    assert all(key.endswith("_seconds") for key in time["breakdown"])
    assert all(key.endswith("_seconds") for stage in time["stages"] for key in stage if key not in ("index", "communication_by_group"))
    # Per group: its name, whether per micro-batch or per step, and durations in seconds (tp 2 here: tp and dp).
    entries = [e for stage in time["stages"] for e in stage["communication_by_group"]]
    assert entries and all(set(e) == {"group", "per", "seconds", "exposed_seconds", "hidden_seconds"} for e in entries)
    assert all(e["seconds"] == pytest.approx(e["exposed_seconds"] + e["hidden_seconds"]) for e in entries)
    assert 0 < time["mfu"] <= time["hfu"] < 1
    assert time["provenance"]["device_efficiency"] == "hopper"


def test_cli_table_shows_step_time_beside_memory(capsys):
    status, out, _ = _run_cli(["estimate"], capsys)
    assert status == 0
    assert "Step time by stage" in out and "Step time: " in out and "MFU " in out and "Peak: " in out


def test_cli_memory_overrides_the_hardware(capsys):
    import json

    status, out, _ = _run_cli(["estimate", "--json", "--memory", "40GiB"], capsys)
    doc = json.loads(out)
    assert status == 0 and doc["device_memory_bytes"] == 40 * 2**30 and doc["fits"] is False
    status, out, _ = _run_cli(["estimate", "--json", "--memory", "81920MiB"], capsys)
    assert json.loads(out)["device_memory_bytes"] == 81920 * 2**20
    with pytest.raises(SystemExit) as exit_info:
        _run_cli(["estimate", "--memory", "80XB"], capsys)
    assert exit_info.value.code == 2
    assert "expected a size" in capsys.readouterr().err


def test_cli_says_why_no_time_is_priced(tmp_path, capsys):
    import json

    config = tmp_path / "job.json"
    config.write_text(json.dumps({
        "model": "llama3-8b",
        "parallel": {"dp": 2, "seq_len": 4096},
        "hardware": {"name": "Bare", "memory_bytes": 2**36, "peak_flops": {"bf16": 1e15}},
    }))
    status, out, _ = _run_cli(["estimate", str(config), "--json"], capsys)
    doc = json.loads(out)
    assert status == 0 and doc["time"] is None
    assert doc["time_unavailable"].startswith("$.hardware.memory_bandwidth_bytes_per_second: ")


def test_docs_list_every_built_in_figure_with_its_source():
    """docs/time.md states each figure of the built-in profiles, its value and its source, as the code has them."""
    from pathlib import Path

    from hp_plugins.runtimes.timing_profiles import PROFILES

    text = (Path(__file__).resolve().parents[2] / "docs" / "time.md").read_text(encoding="utf-8")
    devices = {device for profile in PROFILES.values() for device in profile.devices}
    # blackwell (and megatron-te's, with its sustained slowdown, and fsdp2's, without FP8 attention speedups), hopper and
    # ampere (and fsdp2's, with their fitted matmul and SDPA's attention on Hopper), *
    assert len(devices) == 8
    from hp_plugins.runtimes.timing_profiles import HOPPER_CUDNN, TRITON_FLASH

    devices.add(HOPPER_CUDNN)  # fsdp2's attention_kernel=cudnn
    for device in devices:
        for name, figure in device.figures().items():
            assert f"- `{name}` = {figure.value:.6g}: {figure.source}" in text, (device.architecture, name)
    from hp_plugins.runtimes.flex_attention import FLEX, FLEX_BLOCK_TOKENS

    for kernel in (TRITON_FLASH, FLEX):  # fsdp2's attention_kernel=triton_flash and =flex
        for architecture, (forward, backward) in kernel.items():
            for name, figure in (("attention_forward", forward), ("attention_backward", backward)):
                assert f"- `{name}` = {figure.value:.6g}: {figure.source}" in text, (architecture, name)
    assert f"- `attention_block_tokens` = {FLEX_BLOCK_TOKENS.value:.6g}: {FLEX_BLOCK_TOKENS.source}" in text
    for profile in (GENERIC, MEGATRON_TE):
        for name, figure in {**profile.figures(), **profile.overlap.figures()}.items():
            assert f"`{name}` = {figure.value:.4g}: {figure.source}" in text, (profile.name, name)


# ----------------------------------------------------------------------------- MLA and MoE kernel figures


def _toy_rates(device=TOY_DEVICE, passes=0):
    from hp_core.engine.timing.rates import _rates

    profile = attrs.evolve(TOY_PROFILE, devices=(device,), moe_permute_passes=_figure(passes))
    return _rates(ParallelSpec(dp=1, seq_len=1024, micro_batch_size=1), TOY_DEVICE_SPEC, profile, PrecisionSpec(), "flash")


def test_mla_attention_takes_its_own_figures_where_the_device_states_them():
    from hp_core.engine.timing.layer import _layer_time
    from hp_core.costs import LayerWork
    from hp_core.costs import Flops, LayerCost

    cost = LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0, forward=Flops(attention_flops=ATTENTION))
    mla_device = attrs.evolve(
        TOY_DEVICE, mla_attention_forward=_figure(0.2), mla_attention_backward=_figure(0.1),
        mla_attention_forward_overhead_seconds=_figure(1e-3), mla_attention_backward_overhead_seconds=_figure(2e-3),
    )
    executed = ATTENTION * 0.5  # flash_causal_fraction
    general = _layer_time(cost, LayerWork(attention_calls=1, wide_qk_attention=True), False, frozenset(), _toy_rates())
    assert general.forward_seconds == pytest.approx(executed / (PEAK * 0.25))  # no MLA figure stated: the general one
    own = _layer_time(cost, LayerWork(attention_calls=1, wide_qk_attention=True), False, frozenset(), _toy_rates(mla_device))
    assert own.forward_seconds == pytest.approx(1e-3 + executed / (PEAK * 0.2))
    assert own.backward_seconds == pytest.approx(2e-3 + 2.5 * executed / (PEAK * 0.1))
    plain = _layer_time(cost, LayerWork(attention_calls=1), False, frozenset(), _toy_rates(mla_device))
    assert plain.forward_seconds == pytest.approx(general.forward_seconds)  # equal head dims keep the general figures
    assert "mla_attention_forward" not in TOY_DEVICE.figures() and "mla_attention_forward" in mla_device.figures()


def test_moe_permutation_traffic_reads_and_writes_the_layers_own_tokens_at_the_ends():
    from hp_core.engine.timing.layer import _layer_time
    from hp_core.costs import LayerWork
    from hp_core.costs import LayerCost

    cost = LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0)
    shape = LayerWork(permute_bytes=6e6, permute_input_bytes=1e6)
    memory = MEMORY_BW * 0.5
    # Four passes: permute (read 1, write 6), sort (6 + 6), unsort (6 + 6), unpermute (6 + 1) = 38 MB.
    four = _layer_time(cost, shape, False, frozenset(), _toy_rates(passes=4))
    assert four.forward_seconds == pytest.approx(38e6 / memory) and four.backward_seconds == pytest.approx(four.forward_seconds)
    # Two passes: a gather (1 + 6) and a scatter (6 + 1) = 14 MB.
    assert _layer_time(cost, shape, False, frozenset(), _toy_rates(passes=2)).forward_seconds == pytest.approx(14e6 / memory)
    measured = attrs.evolve(TOY_DEVICE, moe_permute_bandwidth=_figure(0.25), moe_permute_overhead_seconds=_figure(1e-4))
    timed = _layer_time(cost, shape, False, frozenset(), _toy_rates(measured, passes=4))
    assert timed.forward_seconds == pytest.approx(1e-4 + 38e6 / (MEMORY_BW * 0.25))


def test_a_received_token_side_reads_and_writes_the_tokens_a_de_duplicating_dispatch_delivers():
    from hp_core.collectives import Routing
    from hp_core.costs import Collective, LayerCost, LayerWork
    from hp_core.engine.timing.elementwise import received_copies
    from hp_core.engine.timing.rates import _rates
    from hp_core.errors import ConfigError

    cost = LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0)
    routing = Routing(experts=16, top_k=2)
    a2a = Collective("ep", "all_to_all", 2e6, 2, 2, routing=routing)
    shape = LayerWork(permute_bytes=2e6, permute_input_bytes=1e6, collectives=(a2a,))
    profile = attrs.evolve(TOY_PROFILE, moe_permute_passes=_figure(2), moe_permute_tokens="received")
    rates = _rates(ParallelSpec(dp=4, ep=4, seq_len=1024, micro_batch_size=1), TOY_DEVICE_SPEC, profile, PrecisionSpec(), "flash")
    # 16 experts over 4 ranks, top-2: a rank's 4 experts both missed with probability C(12,2)/C(16,2) = 66/120, so a
    # token reaches 4 * 54/120 = 1.8 ranks; the rank receives 1.8 MB of tokens.
    assert received_copies(shape, rates) == pytest.approx(1.8)
    memory = MEMORY_BW * 0.5
    from hp_core.engine.timing.layer import _layer_time
    # Permute: read the 1.8 MB received, write the 2 MB of routed rows; unpermute: read 2, write 1.8 = 7.6 MB.
    flex = _layer_time(cost, shape, False, frozenset(), rates)
    assert flex.forward_seconds == pytest.approx(7.6e6 / memory) and flex.backward_seconds == pytest.approx(flex.forward_seconds)
    # The layer's own tokens (the default token side): 1 + 2 + 2 + 1 = 6 MB.
    own = _rates(ParallelSpec(dp=4, ep=4, seq_len=1024, micro_batch_size=1), TOY_DEVICE_SPEC,
                 attrs.evolve(profile, moe_permute_tokens="own"), PrecisionSpec(), "flash")
    assert _layer_time(cost, shape, False, frozenset(), own).forward_seconds == pytest.approx(6e6 / memory)
    # Without expert parallelism a rank receives its own tokens.
    alone = _rates(ParallelSpec(dp=4, seq_len=1024, micro_batch_size=1), TOY_DEVICE_SPEC, profile, PrecisionSpec(), "flash")
    assert received_copies(shape, alone) == 1.0
    # An expert all-to-all stating no routing: the copies are unknown, refused rather than taken as one.
    blind = attrs.evolve(shape, collectives=(attrs.evolve(a2a, routing=None),))
    with pytest.raises(ConfigError, match="states no token routing"):
        received_copies(blind, rates)
    with pytest.raises(ValueError):
        attrs.evolve(profile, moe_permute_tokens="sent")


def test_received_tokens_count_the_expert_tp_group_and_refuse_what_is_unstated():
    from hp_core.collectives import Routing
    from hp_core.costs import Collective, LayerCost, LayerWork
    from hp_core.engine.timing.elementwise import permute_seconds, received_bytes
    from hp_core.engine.timing.rates import _rates
    from hp_core.errors import ConfigError
    from hp_core.specs.timing import MoePermutation

    profile = attrs.evolve(TOY_PROFILE, moe_permute_passes=_figure(2), moe_permute_tokens="received")
    rates = _rates(ParallelSpec(dp=4, ep=4, seq_len=1024, micro_batch_size=1), TOY_DEVICE_SPEC, profile, PrecisionSpec(), "flash")
    routing = Routing(experts=16, top_k=2)
    # Expert TP 2: the rank's experts process the expert-TP group's rows, 2 x (1 MB x top-2) = 4 MB, so it receives
    # one copy of the group's tokens, 2 MB, per EP rank a token reaches (1.8): 3.6 MB, not the own 1 MB x 1.8.
    a2a = Collective("ep", "all_to_all", 2e6, 2, 2, routing=routing)
    etp2 = LayerWork(permute_bytes=4e6, permute_input_bytes=1e6, collectives=(a2a,), routed_experts=16)
    assert received_bytes(etp2, rates) == pytest.approx(3.6e6)
    # Capacity padding is not received: a padded layer's rows over top-k and its padding.
    padded = attrs.evolve(etp2, permute_bytes=4e6 * 1.25,
                          collectives=(attrs.evolve(a2a, routing=Routing(experts=16, top_k=2, padding=1.25)),))
    assert received_bytes(padded, rates) == pytest.approx(3.6e6)
    # Under EP a layer stating no expert all-to-all: refused, not taken as its own tokens.
    with pytest.raises(ConfigError, match="states no expert all-to-all"):
        permute_seconds(attrs.evolve(etp2, collectives=()), rates)
    # A counted permutation (the trainer's own dispatcher) under a de-duplicating dispatch: refused.
    counted = MoePermutation(name="toy", forward_accesses_per_row_element=3, forward_accesses_per_token_element=2,
                             backward_accesses_per_row_element=5, backward_accesses_per_token_element=1, source="toy")
    both = _rates(ParallelSpec(dp=4, ep=4, seq_len=1024, micro_batch_size=1), TOY_DEVICE_SPEC,
                  attrs.evolve(profile, moe_permutation=counted, eager_elementwise=True), PrecisionSpec(), "flash")
    with pytest.raises(ConfigError, match="moe_permutation gather_scatter"):
        permute_seconds(etp2, both)
    # Sort passes stated and the layer's routed experts not: refused.
    sorted_profile = attrs.evolve(TOY_PROFILE, moe_permute_passes=_figure(4), moe_local_sort_passes=_figure(2))
    sort_rates = _rates(ParallelSpec(dp=4, ep=4, seq_len=1024, micro_batch_size=1), TOY_DEVICE_SPEC, sorted_profile,
                        PrecisionSpec(), "flash")
    with pytest.raises(ConfigError, match="routed experts"):
        permute_seconds(attrs.evolve(etp2, routed_experts=0), sort_rates)


def test_the_local_sort_passes_run_only_with_more_than_one_local_expert():
    from hp_core.costs import LayerCost, LayerWork
    from hp_core.engine.timing.layer import _layer_time
    from hp_core.engine.timing.rates import _rates
    from hp_core.errors import ConfigError

    cost = LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0)
    profile = attrs.evolve(TOY_PROFILE, moe_permute_passes=_figure(4), moe_local_sort_passes=_figure(2))
    rates = _rates(ParallelSpec(dp=8, ep=8, seq_len=1024, micro_batch_size=1), TOY_DEVICE_SPEC, profile, PrecisionSpec(), "flash")
    memory = MEMORY_BW * 0.5
    # 16 experts over EP 8, two a rank: all four passes, 1 + 6 + 6 + 6 + 6 + 6 + 6 + 1 = 38 MB.
    two = LayerWork(permute_bytes=6e6, permute_input_bytes=1e6, routed_experts=16)
    assert _layer_time(cost, two, False, frozenset(), rates).forward_seconds == pytest.approx(38e6 / memory)
    # 8 experts over EP 8, one a rank: no sort, permute and unpermute alone, 1 + 6 + 6 + 1 = 14 MB.
    one = attrs.evolve(two, routed_experts=8)
    assert _layer_time(cost, one, False, frozenset(), rates).forward_seconds == pytest.approx(14e6 / memory)
    # More local-sort passes than passes: refused, naming the field.
    with pytest.raises(ConfigError, match="moe_local_sort_passes"):
        _rates(ParallelSpec(dp=8, ep=8, seq_len=1024, micro_batch_size=1), TOY_DEVICE_SPEC,
               attrs.evolve(profile, moe_local_sort_passes=_figure(6)), PrecisionSpec(), "flash")


def test_a_counted_moe_permutation_prices_each_direction_at_the_memory_bandwidth():
    from hp_core.costs import LayerCost, LayerWork
    from hp_core.engine.timing.layer import _layer_time
    from hp_core.engine.timing.rates import _rates
    from hp_core.errors import SpecError
    from hp_core.specs.timing import MoePermutation

    counted = MoePermutation(name="toy", forward_accesses_per_row_element=3, forward_accesses_per_token_element=2,
                             backward_accesses_per_row_element=5, backward_accesses_per_token_element=1,
                             source="a hand-worked test")
    # A device stating a permute bandwidth and fixed time: the counted ops take the memory bandwidth and no fixed time.
    measured = attrs.evolve(TOY_DEVICE, moe_permute_bandwidth=_figure(0.25), moe_permute_overhead_seconds=_figure(1e-4))
    profile = attrs.evolve(TOY_PROFILE, devices=(measured,), moe_permute_passes=_figure(4), moe_permutation=counted,
                           eager_elementwise=True, alternate_matmul_recompute=frozenset({"ffAct"}))
    layout = ParallelSpec(dp=1, seq_len=1024, micro_batch_size=1)
    rates = _rates(layout, TOY_DEVICE_SPEC, profile, PrecisionSpec(), "flash")
    cost = LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0)
    shape = LayerWork(permute_bytes=6e6, permute_input_bytes=1e6)  # 6 MB of routed rows, 1 MB of the layer's tokens
    memory = MEMORY_BW * 0.5
    layer = _layer_time(cost, shape, False, frozenset(), rates)
    assert layer.forward_seconds == pytest.approx((3 * 6e6 + 2 * 1e6) / memory)  # 20 MB
    assert layer.backward_seconds == pytest.approx((5 * 6e6 + 1 * 1e6) / memory)  # 31 MB
    assert layer.recompute_seconds == 0.0
    # The op-level policy (every switch of alternate_matmul_recompute recomputed) re-runs the forward's ops.
    policy = _layer_time(cost, shape, False, frozenset({"ffAct"}), rates)
    assert policy.recompute_seconds == pytest.approx(20e6 / memory)
    # A full recompute re-runs the forward, as before.
    assert _layer_time(cost, shape, True, frozenset(), rates).recompute_seconds == pytest.approx(20e6 / memory)
    # Counted for eager kernels: a profile fusing its elementwise ops refuses it for a layer with a permutation,
    # naming the option; a layer without one (a dense layer) is priced, as without the statement.
    fused = _rates(layout, TOY_DEVICE_SPEC, attrs.evolve(profile, eager_elementwise=False), PrecisionSpec(), "flash")
    with pytest.raises(ConfigError, match="moe_permutation=toy: counted for the kernels") as refused:
        _layer_time(cost, shape, False, frozenset(), fused)
    assert refused.value.path == "$.runtime.options.moe_permutation"
    dense = LayerWork(gemms=((1024, 64, 64),))
    unstated = _rates(layout, TOY_DEVICE_SPEC, attrs.evolve(profile, eager_elementwise=False, moe_permutation=None),
                      PrecisionSpec(), "flash")
    assert _layer_time(cost, dense, False, frozenset(), fused) == _layer_time(cost, dense, False, frozenset(), unstated)
    # Unset, the profile's passes price it (four: 38 MB at the permute bandwidth plus its fixed time), re-run too.
    passes = _rates(layout, TOY_DEVICE_SPEC, attrs.evolve(profile, moe_permutation=None), PrecisionSpec(), "flash")
    four = 1e-4 + 38e6 / (MEMORY_BW * 0.25)
    assert _layer_time(cost, shape, False, frozenset({"ffAct"}), passes).recompute_seconds == pytest.approx(four)
    with pytest.raises(SpecError):
        MoePermutation(name="toy", forward_accesses_per_row_element=-1, forward_accesses_per_token_element=0,
                       backward_accesses_per_row_element=0, backward_accesses_per_token_element=0,
                       source="negative")


def test_moe_router_kernels_scale_with_routed_tokens_times_experts():
    from hp_core.specs.timing import ROUTER_REFERENCE_ELEMENTS
    from hp_core.engine.timing.layer import _layer_time
    from hp_core.costs import LayerWork
    from hp_core.costs import LayerCost

    cost = LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0)
    shape = LayerWork(router_elements=2 * ROUTER_REFERENCE_ELEMENTS)
    unpriced = _layer_time(cost, shape, False, frozenset(), _toy_rates())
    assert (unpriced.forward_seconds, unpriced.backward_seconds) == (0.0, 0.0)  # no figure: not priced
    measured = attrs.evolve(TOY_DEVICE, moe_router_forward_seconds=_figure(3e-4), moe_router_backward_seconds=_figure(5e-5))
    layer = _layer_time(cost, shape, False, frozenset(), _toy_rates(measured))
    forward, backward = layer.forward_seconds, layer.backward_seconds
    assert forward == pytest.approx(6e-4) and backward == pytest.approx(1e-4)


def test_a_rotary_embedding_run_eager_alone_moves_its_counted_bytes_in_place_of_the_fused_figure():
    """TimingProfile.eager_rotary (fsdp2's rope_kernels=eager): the rest of the layer's elementwise ops as before."""
    from hp_core.costs import Flops, LayerCost, LayerWork
    from hp_core.engine.timing.layer import _layer_time

    # 10 M elementwise ops, 4 M of them a rotary embedding (1 M rotated elements, 4 ops each) whose eager kernels move
    # 18 MB forward and 20 MB backward. The toy profile: 0.5 accesses of 2 bytes per op, a backward factor of 2,
    # HBM at 1e12 x 0.5 = 5e11 B/s.
    cost = LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0, forward=Flops(elementwise_flops=10e6))
    work = LayerWork(rotary_flops=4e6, rotary_eager_bytes=(18e6, 20e6))
    fused = _layer_time(cost, work, False, frozenset(), _toy_rates())
    # Fused: 10 MB forward; backward 2 x 6 MB for the other ops and the inverse rotation's 4 MB once.
    assert fused.forward_seconds == pytest.approx(10e6 / 5e11) and fused.backward_seconds == pytest.approx(16e6 / 5e11)
    eager = _layer_time(cost, work, False, frozenset(), attrs.evolve(_toy_rates(), eager_rotary=True))
    # The rotation alone eager: 6 MB + 18 MB forward; 2 x 6 MB + 20 MB backward.
    assert eager.forward_seconds == pytest.approx(24e6 / 5e11) and eager.backward_seconds == pytest.approx(32e6 / 5e11)
    # A layer with no rotation is priced alike either way.
    plain = LayerWork()
    assert _layer_time(cost, plain, False, frozenset(), attrs.evolve(_toy_rates(), eager_rotary=True)) == \
        _layer_time(cost, plain, False, frozenset(), _toy_rates())
    # A layer stating the rotation's ops but not its eager bytes cannot be priced eager: refused, not priced at zero.
    with pytest.raises(ConfigError, match=r"\$\.runtime\.options\.rope_kernels: .*rotary_eager_bytes"):
        _layer_time(cost, LayerWork(rotary_flops=4e6), False, frozenset(), attrs.evolve(_toy_rates(), eager_rotary=True))


# ----------------------------------------------------------------------------- GEMM efficiency by shape


def _table(**kw):
    from hp_core.specs.timing import GemmTable

    dense = [("forward", 1000, 2000, 4000, 0.4), ("input_gradient", 1000, 2000, 4000, 0.2), ("weight_gradient", 1000, 2000, 4000, 0.1),
             ("forward", 1000, 100, 4000, 0.8)]  # a second shape, forward only
    grouped = [(p, 8, 500, 2000, 4000, e) for p, e in (("forward", 0.5), ("input_gradient", 0.25), ("weight_gradient", 0.125))]
    return GemmTable(source="a hand-made table", dense=dense, grouped=grouped, **kw)


def test_gemm_table_takes_the_nearest_measured_shape_within_its_tolerance():
    table = _table()
    assert table.efficiency("forward", 1000, 2000, 4000) == 0.4
    assert table.efficiency("forward", 1040, 1950, 4100) == 0.4  # every dimension within 5%
    assert table.efficiency("forward", 1100, 2000, 4000) is None  # 10% off in one: not measured
    assert table.efficiency("input_gradient", 1000, 100, 4000) is None  # that shape's other passes are not in it
    assert table.efficiency("forward", 500, 2000, 4000, experts=8) == 0.5
    assert table.efficiency("forward", 500, 2000, 4000, experts=16) is None  # grouped shapes are keyed by the experts too
    assert _table(tolerance=1.25).efficiency("forward", 1100, 2000, 4000) == 0.4
    with pytest.raises(ValueError, match="pass"):
        attrs.evolve(table, dense=[("backward", 1, 1, 1, 0.5)])
    with pytest.raises(ValueError, match="tolerance"):
        _table(tolerance=0.9)


def test_gemm_table_prices_each_pass_of_a_measured_shape_and_the_rest_at_the_single_figure():
    from hp_core.engine.timing.layer import _layer_time
    from hp_core.costs import LayerWork
    from hp_core.costs import LayerCost

    measured = 2 * 1000 * 2000 * 4000  # 16 GFLOP in the table
    other = 4e9  # the second, unmeasured GEMM (0.8 GFLOP) and GEMMs of unknown shape
    cost = LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0, forward=Flops(matmul_flops=measured + other))
    shape = LayerWork(gemms=((1000, 2000, 4000), (1000, 100, 4000)))  # the second lacks its backward passes: unpriced
    device = attrs.evolve(TOY_DEVICE, gemm_table=_table())
    layer = _layer_time(cost, shape, False, frozenset(), _toy_rates(device))
    forward, backward = layer.forward_seconds, layer.backward_seconds
    rest = other  # priced at matmul 0.5, backward twice that
    assert forward == pytest.approx((measured / 0.4 + rest / 0.5) / PEAK)
    # Backward: the input-gradient and weight-gradient GEMMs at their own efficiencies.
    assert backward == pytest.approx((measured / 0.2 + measured / 0.1 + 2 * rest / 0.5) / PEAK)
    # No table: everything at matmul, as before.
    plain = _layer_time(cost, shape, False, frozenset(), _toy_rates())
    assert (plain.forward_seconds, plain.backward_seconds) == pytest.approx(((measured + other) / 0.5 / PEAK, 2 * (measured + other) / 0.5 / PEAK))
    # Shapes claiming more FLOPs than the layer counts are not its GEMMs: the table is not used.
    small = attrs.evolve(cost, forward=Flops(matmul_flops=1e9))
    assert _layer_time(small, shape, False, frozenset(), _toy_rates(device)).forward_seconds == pytest.approx(1e9 / 0.5 / PEAK)


def test_gemm_table_prices_measured_grouped_gemms_and_fits_the_rest():
    from hp_core.engine.timing.layer import _layer_time
    from hp_core.costs import LayerWork
    from hp_core.costs import LayerCost

    one = 2 * 8 * 500 * 2000 * 4000  # the measured grouped GEMM over its 8 experts
    cost = LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0, forward=Flops(matmul_flops=2 * one))
    shape = LayerWork(grouped_flops=2 * one, expert_rows=500, expert_gemms=((8, 500, 2000, 4000), (8, 500, 4000, 2000)))
    device = attrs.evolve(TOY_DEVICE, gemm_table=_table())
    layer = _layer_time(cost, shape, False, frozenset(), _toy_rates(device))
    forward, backward = layer.forward_seconds, layer.backward_seconds
    fitted = 0.5 * 500 / (500 + 100)  # grouped_matmul * rows / (rows + half_rows) for the unmeasured one
    assert forward == pytest.approx((one / 0.5 + one / fitted) / PEAK)
    assert backward == pytest.approx((one / 0.25 + one / 0.125 + 2 * one / fitted) / PEAK)


def test_sequential_experts_price_each_local_expert_as_dense_gemms():
    """Megatron-Core's SequentialMLP (LayerWork.sequential_experts): each local expert's linears are dense GEMMs of its
    own rows, priced at the table's dense efficiencies where it holds the shape, else at matmul; never at the grouped
    figures."""
    from hp_core.engine.timing.layer import _layer_time
    from hp_core.costs import LayerWork
    from hp_core.costs import LayerCost

    # 8 local experts of 1,000 rows: FC1 (2000 out, 4000 in) is the table's dense shape, FC2 (4000 out, 2000 in) is not.
    one = 2 * 8 * 1000 * 2000 * 4000  # 128 GFLOP each
    cost = LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0, forward=Flops(matmul_flops=2 * one))
    shape = LayerWork(grouped_flops=2 * one, expert_rows=1000, expert_gemms=((8, 1000, 2000, 4000), (8, 1000, 4000, 2000)),
                      sequential_experts=True)
    device = attrs.evolve(TOY_DEVICE, gemm_table=_table())
    layer = _layer_time(cost, shape, False, frozenset(), _toy_rates(device))
    # FC1 at the table's 0.4 / 0.2 / 0.1 per pass; FC2 at matmul 0.5, backward twice the forward.
    assert layer.forward_seconds == pytest.approx((one / 0.4 + one / 0.5) / PEAK, rel=1e-12)
    assert layer.backward_seconds == pytest.approx((one / 0.2 + one / 0.1 + 2 * one / 0.5) / PEAK, rel=1e-12)
    # No table: every expert GEMM at matmul (0.5), where the grouped figure is 0.5 x 1000 / (1000 + 100).
    plain = _layer_time(cost, shape, False, frozenset(), _toy_rates())
    assert plain.forward_seconds == pytest.approx(2 * one / 0.5 / PEAK, rel=1e-12)
    grouped = _layer_time(cost, attrs.evolve(shape, sequential_experts=False), False, frozenset(), _toy_rates())
    assert grouped.forward_seconds == pytest.approx(2 * one / (0.5 * 1000 / 1100) / PEAK, rel=1e-12)
    # The layer's count of the routed FLOPs rules (tokens padded to capacity the shapes do not carry): half the FLOPs
    # the shapes list, half the time.
    half = attrs.evolve(cost, forward=Flops(matmul_flops=one))
    assert _layer_time(half, attrs.evolve(shape, grouped_flops=one), False, frozenset(), _toy_rates(device)).forward_seconds \
        == pytest.approx(layer.forward_seconds / 2, rel=1e-12)


def test_b200_table_maps_te_gemm_layouts_to_passes():
    """SimuMax keys TE's GEMMs by cuBLAS m, k, n: forward TN (T, in, out), dgrad NN (T, out, in), wgrad NT (out, T, in)."""
    from hp_plugins.runtimes.timing_profiles import B200_GEMMS, BLACKWELL

    assert BLACKWELL.gemm_table is B200_GEMMS and "gemm_table" not in BLACKWELL.figures()
    # Llama-3-70B's QKV projection at TP 1: 8192 inputs, 10240 outputs, 4096 tokens.
    assert B200_GEMMS.efficiency("forward", 4096, 10240, 8192) == pytest.approx(0.64516, abs=1e-5)  # m=4096 k=8192 n=10240 TN
    assert B200_GEMMS.efficiency("input_gradient", 4096, 10240, 8192) == pytest.approx(0.49804, abs=1e-5)  # m=4096 k=10240 n=8192 NN
    # m=10240 k=4096 n=8192 NT, the fp32-accumulating row (gradient accumulation fusion) rather than bf16.
    assert B200_GEMMS.efficiency("weight_gradient", 4096, 10240, 8192) == pytest.approx(0.59795, abs=1e-5)
    # DeepSeek-V2's experts at EP 8: 20 per rank, 1232 rows each, gate and up projection.
    assert B200_GEMMS.efficiency("weight_gradient", 1232, 3072, 5120, experts=20) == pytest.approx(0.32760, abs=1e-5)


@settings(max_examples=300, deadline=None)
@given(
    index=st.integers(0, 10_000),
    scale=st.tuples(*[st.floats(0.9, 1.1)] * 4),
    grouped=st.booleans(),
)
def test_the_bucketed_gemm_lookup_finds_the_nearest_measured_shape_a_full_scan_finds(index, scale, grouped):
    # The table's index only narrows which rows are compared; the answer is the scan's (ties to the later row).
    from hp_plugins.runtimes.timing_profiles import B200_GEMMS

    rows = B200_GEMMS.grouped if grouped else B200_GEMMS.dense
    row = rows[index % len(rows)]
    dims = [max(1, round(d * f)) for d, f in zip(row[1:-1], scale)]
    point = [math.log(d) for d in dims]
    limit = math.log(B200_GEMMS.tolerance) + 1e-12
    best, expected = limit, None
    for other in rows:
        if other[0] != row[0]:
            continue
        distance = max(abs(math.log(d) - p) for d, p in zip(other[1:-1], point))
        if distance <= best:
            best, expected = distance, other[-1]
    if grouped:
        experts, per_expert, fan_out, fan_in = dims
        found = B200_GEMMS.efficiency(row[0], per_expert, fan_out, fan_in, experts=experts)
    else:
        found = B200_GEMMS.efficiency(row[0], *dims)
    assert found == expected


# ----------------------------------------------------------------------------- sustained slowdown


def test_sustained_slowdown_multiplies_every_gpu_time_but_not_host_link_copies(toy_registry):
    """A toy device stating sustained_slowdown 1.5: every part of the step 1.5 times the unslowed one."""
    slow = attrs.evolve(TOY_PROFILE, devices=(attrs.evolve(TOY_DEVICE, sustained_slowdown=_figure(1.5)),))
    parallel = ParallelSpec(dp=4, pp=2, zero=1, seq_len=16, global_batch_size=16)
    model = _model(4, ToyConfig(elementwise=1e10))
    base = _time(toy_registry, model, parallel)
    slowed = _time(toy_registry, model, parallel, profile=slow)
    for name, value in base.breakdown_seconds.items():
        assert slowed.breakdown_seconds[name] == pytest.approx(1.5 * value), name
    assert base.data_parallel_seconds > 0 and base.bubble_seconds > 0 and base.optimizer_seconds > 0
    assert slowed.mfu == pytest.approx(base.mfu / 1.5)
    assert slowed.model_flops == base.model_flops

    # Offload: the host-link copy is not slowed, only the layer time it hides behind.
    from hp_core.engine.timing import offload_seconds
    from hp_core.engine.timing.layer import _layer_time
    from hp_core.engine.timing.rates import _rates

    cost = _evaluate_toy(ToyConfig(), None)
    fast_rates = _rates(ParallelSpec(seq_len=16), TOY_DEVICE_SPEC, TOY_PROFILE, PrecisionSpec(), "flash")
    slow_rates = _rates(ParallelSpec(seq_len=16), TOY_DEVICE_SPEC, slow, PrecisionSpec(), "flash")
    shape = cost.work
    fast = _layer_time(cost, shape, False, frozenset(), fast_rates)
    slowed_layer = _layer_time(cost, shape, False, frozenset(), slow_rates)
    times = ("forward_seconds", "backward_seconds", "recompute_seconds", "communication_seconds")
    assert tuple(getattr(slowed_layer, n) for n in times) == pytest.approx(tuple(1.5 * getattr(fast, n) for n in times))
    assert (slowed_layer.flops, slowed_layer.recomputed_flops) == (fast.flops, fast.recomputed_flops)  # FLOPs do not change
    moved = 3 * fast.forward_seconds * 1e9  # a copy three forwards long at 1 GB/s
    assert offload_seconds(moved, 1e9, slowed_layer.forward_seconds, slowed_layer.backward_seconds) == pytest.approx(
        3 * fast.forward_seconds - 1.5 * fast.forward_seconds)


def test_sustained_slowdown_slows_tp_pp_and_dp_communication_alike(registry, llama8b):
    from hp_plugins.runtimes.timing_profiles import GENERIC

    hardware = registry.hardware_preset("h100-sxm").spec
    slow = attrs.evolve(GENERIC, devices=tuple(
        attrs.evolve(d, sustained_slowdown=_figure(1.25)) if d.architecture == "hopper" else d for d in GENERIC.devices
    ))
    parallel = ParallelSpec(dp=2, tp=2, pp=2, sp=True, seq_len=4096, global_batch_size=8)
    base = step_time(llama8b, parallel, registry=registry, hardware=hardware, profile=GENERIC)
    slowed = step_time(llama8b, parallel, registry=registry, hardware=hardware, profile=slow)
    assert base.communication_seconds > 0 and base.data_parallel_seconds > 0
    assert slowed.step_seconds == pytest.approx(1.25 * base.step_seconds)
    for fast_stage, slow_stage in zip(base.stages, slowed.stages):
        assert slow_stage.communication_seconds == pytest.approx(1.25 * fast_stage.communication_seconds)
        assert slow_stage.data_parallel_seconds == pytest.approx(1.25 * fast_stage.data_parallel_seconds)


def test_sustained_slowdown_below_one_is_refused():
    with pytest.raises(ValueError, match="sustained_slowdown must be at least 1, got 0.9"):
        attrs.evolve(TOY_DEVICE, sustained_slowdown=_figure(0.9))


def test_only_megatron_te_on_blackwell_states_a_sustained_slowdown():
    from hp_plugins.runtimes.timing_profiles import BLACKWELL, BLACKWELL_MEGATRON, GENERIC, MEGATRON_LM_2022, MEGATRON_TE

    assert MEGATRON_TE.device("blackwell") is BLACKWELL_MEGATRON
    assert attrs.evolve(BLACKWELL_MEGATRON, sustained_slowdown=None) == BLACKWELL
    assert GENERIC.device("blackwell") is BLACKWELL and MEGATRON_LM_2022.device("blackwell") is BLACKWELL
    for profile in (GENERIC, MEGATRON_TE, MEGATRON_LM_2022):
        for device in profile.devices:
            if device is not BLACKWELL_MEGATRON:
                assert device.sustained_slowdown is None, (profile.name, device.architecture)


def test_a_kind_that_states_no_work_is_refused_a_step_time(toy_registry):
    """Absent is not zero: without LayerWork its collectives are unknown, so no step time is made up."""

    def evaluate(c: ToyConfig, x: LayerContext) -> LayerCost:
        return attrs.evolve(_evaluate_toy(c, x), work=None)

    class Silent:
        @hookimpl
        def hp_layer_kinds(self):
            yield LayerKind(name="silent", config_type=ToyConfig, evaluate=evaluate, switches=("normOp",))

    registry = build_registry([_ToyPlugin(), Silent()], use_env=False)
    model = ModelSpec(name="silent", layers=(LayerGroup(kind="silent", config=ToyConfig(), count=2),), source="test")
    with pytest.raises(ConfigError, match=r"layer kind 'silent' states no work \(LayerCost.work"):
        _time(registry, model, ParallelSpec(seq_len=16))


def test_a_kind_names_its_own_switches_and_states_what_they_rerun(toy_registry):
    """A switch the built-ins do not have: its terms are dropped, and its recompute re-runs what the kind states."""
    from hp_core.api import estimate
    from hp_core.costs import Rerun

    def evaluate(c: ToyConfig, x: LayerContext) -> LayerCost:
        cost = _evaluate_toy(c, x)
        terms = (*cost.activations, ActivationTerm("state_up", 6000, "stateUp"))
        # Rebuilding the 6,000 bytes runs 1e6 matmul FLOPs per byte: 6e9 FLOPs at 1e15 * 0.5 = 12 us.
        return attrs.evolve(cost, activations=terms, work=LayerWork(reruns=(("stateUp", Rerun(1e6, 0.0)),)))

    class Own:
        @hookimpl
        def hp_layer_kinds(self):
            yield LayerKind(name="own", config_type=ToyConfig, evaluate=evaluate, switches=("normOp", "stateUp"))

    registry = build_registry([_ToyPlugin(), Own()], use_env=False)
    model = ModelSpec(name="own", layers=(LayerGroup(kind="own", config=ToyConfig(), count=1),), source="test")
    plan = RecomputeSpec(default=Setting.parse(["stateUp"]))
    plain = estimate(model, ParallelSpec(seq_len=16), registry=registry, runtime="toy-runtime")
    dropped = estimate(model, ParallelSpec(seq_len=16), registry=registry, runtime="toy-runtime", recompute=plan)
    assert plain.stages[0].memory.activations_bytes - dropped.stages[0].memory.activations_bytes == 6000
    t = _time(registry, model, ParallelSpec(seq_len=16), recompute=plan)
    assert t.recompute_seconds == pytest.approx(6000 * 1e6 / (PEAK * 0.5))
    with pytest.raises(ValueError, match="switch names are letters"):
        LayerKind(name="bad", config_type=ToyConfig, evaluate=evaluate, switches=("state up",))
