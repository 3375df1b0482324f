"""Optimizers are plugins (hook ``hp_optimizers``): what each keeps and moves, checked by hand.

Memory is checked on Llama-3-8B at ``tp = dp = pp = 1`` and ZeRO-0, where one
rank holds every parameter: ``h = 4096``, 32 layers, each with a fused QKV of
``(32 + 2 * 8) * 128 = 6144 x 4096``, an output projection ``4096 x 4096``, a fused
gate/up ``28672 x 4096``, a down projection ``4096 x 14336`` and two RMSNorm
scales; the embedding and the untied head ``128256 x 4096``; the final norm.
Step time is checked in a toy world of round numbers.
"""

from __future__ import annotations

import json
import math
import pickle
from fractions import Fraction

import attrs
import pytest

from cli_run import run
from hp_core.api import build_registry, estimate, model_from_preset, step_time
from hp_core.costs import ActivationTerm, Flops, LayerContext, LayerCost, LayerWork, ParamCount
from hp_core.engine.timing.collectives import collective_seconds
from hp_core.errors import ConfigError, PluginError
from hp_core.markers import hookimpl
from hp_core.specs import HardwareSpec, LayerGroup, ModelSpec, ParallelSpec, PrecisionSpec
from hp_core.specs.timing import CommOverlap, DeviceEfficiency, Sourced, TimingProfile
from hp_core.types import LayerKind, Optimizer, ParamSlice, Runtime
from hp_plugins.optimizers.muon import NS_STEPS, newton_schulz_flops
from hp_plugins.optimizers.update import update_bytes
from hp_plugins.runtimes.timing_profiles import H100_GEMM_SHAPE

H, LAYERS, VOCAB = 4096, 32, 128256
LAYER_MATRICES = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
LAYER_VECTORS = 2 * H  # the two RMSNorm scales
HEADS = ((VOCAB, H), (VOCAB, H))  # the embedding and the untied output head
FINAL_NORM = H
MATRIX_ELEMENTS = LAYERS * sum(r * c for r, c in LAYER_MATRICES)
N = MATRIX_ELEMENTS + LAYERS * LAYER_VECTORS + sum(r * c for r, c in HEADS) + FINAL_NORM
ONE_RANK = ParallelSpec(seq_len=1024, zero=0)


@pytest.fixture(scope="module")
def registry():
    return build_registry(use_env=False)


@pytest.fixture(scope="module")
def llama(registry):
    return model_from_preset("llama3-8b", registry)


def _states(registry, model, optimizer: str, parallel: ParallelSpec = ONE_RANK, **precision) -> int:
    result = estimate(model, parallel, registry=registry, precision=PrecisionSpec(optimizer=optimizer, **precision))
    return result.stages[0].memory.optimizer_states_bytes


def test_the_hand_count_is_the_model():
    assert N == 8_030_261_248


# ----------------------------------------------------------------------------- memory by hand


def test_adamw_and_adam_keep_two_moments(registry, llama):
    assert _states(registry, llama, "adamw") == _states(registry, llama, "adam") == 2 * 4 * N
    assert _states(registry, llama, "adamw", moment_bytes=2) == 2 * 2 * N


def test_adamw_is_what_it_was_before_optimizers_were_plugins(registry, llama):
    # `hp estimate`'s default (dp=4 tp=2 sp, seq 8192, generic, ZeRO-1) on an H100, as commit 46e99aa priced it but
    # for the Hopper collective figures taken from published nccl-tests since (docs/time.md): the step-end reduce-scatter
    # of the 16.06 GB fp32 gradient and all-gather of the 8.03 GB bf16 parameters over 4 ranks of a node move 3/4 of each
    # (40.15 ms at 450 GB/s, 66.92 ms at 0.6 of it before), now at 0.805 of it, plus 2 x 3 steps of 1.27 us (8 us before);
    # and for Hopper's whole-run GEMM factor since (every GEMM at 0.70 / 1.235 of peak, docs/time.md "The fsdp2 fit"):
    # a rank's GEMMs do 6 x 7,504,658,432 matmul weights (32 x (2 h^2 + 2 h kv + 3 h I) + h V) x 131,072 tokens / tp 2
    # FLOPs, which took 4.2608 s at 0.70 of 989.4 TFLOP/s and take 1.235 times that: 1.0013 s more; and for Hopper's
    # GEMMs by shape since (docs/time.md "Hopper GEMMs by shape"): each pass's FLOPs over its shape's factor; and for
    # rotary embeddings since (docs/time.md "Rotary position embedding"): each of 32 layers rotates q's and k's
    # (32 + 8) / tp 2 heads of 128 on 131,072 tokens, fused, a read and a write of 2 bytes each way, at 0.85 of 3.35 TB/s.
    h100 = registry.hardware_preset("h100-sxm").spec
    layout = ParallelSpec(dp=4, tp=2, sp=True, seq_len=8192, global_batch_size=64)
    stage = estimate(llama, layout, registry=registry, hardware=h100).stages[0]
    assert stage.memory.optimizer_states_bytes == 8_030_527_488
    assert stage.memory.master_parameters_bytes == 4_015_263_744
    assert stage.peak_bytes == 63_666_753_536
    t = step_time(llama, layout, registry=registry, hardware=h100)
    generic = registry.runtime("generic")
    flat = attrs.evolve(generic, timing=attrs.evolve(generic.timing, devices=tuple(
        attrs.evolve(d, gemm_shape=None) for d in generic.timing.devices)))
    t_flat = step_time(llama, layout, registry=registry, hardware=h100, runtime=flat)
    gemm_seconds = 6 * 7_504_658_432 * 131_072 / 2 / (989.4e12 * 0.70)
    rope_seconds = 32 * 131_072 * 20 * 128 * (4 + 4) / (3.35e12 * 0.85)
    assert t_flat.step_seconds - 5.902052169796209 == pytest.approx((1.235 - 1) * gemm_seconds + rope_seconds, rel=1e-9)
    # By shape: 16 micro-batches of 8,192 tokens; per layer q, k, v (3,072 per rank), o (from 2,048), gate and up
    # (14,336), down (from 7,168); the head (64,128 of the 128,256 vocabulary). Each pass at 0.70 / 1.235 times its factor.
    h, tokens = 4096, 8192
    _, fwd, bwd = H100_GEMM_SHAPE.price(((tokens, 3072, h), (tokens, h, 2048), (tokens, 14336, h), (tokens, h, 7168)))
    _, head_fwd, head_bwd = H100_GEMM_SHAPE.price(((tokens, 64128, h),))
    shaped = 16 * (32 * (fwd + bwd) + head_fwd + head_bwd) / (989.4e12 * 0.70 / 1.235)
    flat_gemms = 6 * 7_504_658_432 * 131_072 / 2 / (989.4e12 * 0.70 / 1.235)
    assert t.step_seconds - t_flat.step_seconds == pytest.approx(shaped - flat_gemms, rel=1e-9)
    assert (t.step_seconds, t.optimizer_seconds) == (6.901664210418466, 0.01198586192238806)
    assert t.data_parallel_seconds == pytest.approx(0.04015263744 / 0.805 + 6 * 1.27e-6, rel=1e-12)


def test_sgd_momentum_keeps_half_of_adamws_states_and_sgd_none(registry, llama):
    assert _states(registry, llama, "sgd_momentum") * 2 == _states(registry, llama, "adamw")
    assert _states(registry, llama, "sgd") == 0


def test_adam8bit_keeps_two_bytes_and_two_block_scales_per_element(registry, llama):
    record = registry.optimizer("adam8bit")
    any_slice = ParamSlice(ParamCount("w", "dense", 10, False), 10)
    assert record.state_bytes(any_slice, PrecisionSpec()) == 2 + 2 * 4 / 2048 == 2.00390625
    assert _states(registry, llama, "adam8bit") == N * Fraction(2 * 2048 + 2 * 4, 2048) == 16_091_890_704
    # moment_bytes does not apply: its states are 8-bit by definition. ZeRO-1 over 4 ranks shards them.
    assert _states(registry, llama, "adam8bit", moment_bytes=2) == 16_091_890_704
    assert _states(registry, llama, "adam8bit", ParallelSpec(dp=4, seq_len=1024, zero=1)) == math.ceil(16_091_890_704 / 4)


def test_adafactor_keeps_a_row_and_a_column_per_matrix_and_a_full_second_moment_per_vector(registry, llama):
    factored = (LAYERS * (sum(r + c for r, c in LAYER_MATRICES) + LAYER_VECTORS)
                + sum(r + c for r, c in HEADS) + FINAL_NORM)
    assert factored == 2_759_168
    assert _states(registry, llama, "adafactor") == 4 * factored


def test_adafactor_factors_each_tensor_parallel_shard(registry, llama):
    # tp=2: QKV and gate/up split by rows, the output and down projections by columns, the
    # embedding and head by vocabulary rows; the norms are whole on each rank.
    shards = ((3072, 4096), (4096, 2048), (14336, 4096), (4096, 7168))
    factored = LAYERS * (sum(r + c for r, c in shards) + LAYER_VECTORS) + 2 * (VOCAB // 2 + H) + FINAL_NORM
    assert _states(registry, llama, "adafactor", ParallelSpec(tp=2, seq_len=1024, zero=0)) == 4 * factored


def test_muon_keeps_one_buffer_for_hidden_matrices_and_adamw_moments_for_the_rest(registry, llama):
    rest = N - MATRIX_ELEMENTS  # embedding, head, norms
    assert rest == 2 * VOCAB * H + LAYERS * LAYER_VECTORS + FINAL_NORM
    assert _states(registry, llama, "muon") == 4 * MATRIX_ELEMENTS + 2 * 4 * rest == 36_324_802_560
    # ZeRO-1 over 4 ranks shards them as any optimizer's.
    assert _states(registry, llama, "muon", ParallelSpec(dp=4, seq_len=1024, zero=1)) == 36_324_802_560 // 4


def test_master_copies_follow_the_precision(registry, llama):
    for name in ("adamw", "sgd", "adam8bit", "adafactor", "muon"):
        result = estimate(llama, ONE_RANK, registry=registry, precision=PrecisionSpec(optimizer=name))
        assert result.stages[0].memory.master_parameters_bytes == 4 * N


def test_every_built_in_kind_states_its_matrices(registry):
    # What is not in a stated matrix is a bias or a norm scale: a small share of any preset.
    from hp_core.engine.prepare import prepare
    from hp_core.engine.optimizer import rank_params

    for preset in registry.models:
        model = model_from_preset(preset.name, registry)
        run_ = prepare(model, ParallelSpec(seq_len=1024), registry=registry)
        total = vectors = 0
        for group, cost in zip(model.layers, run_.costs):
            for param, n in rank_params(cost, 1, 1, 1, frozenset()):
                total += group.count * n
                vectors += group.count * (n - param.matrix_elements)
        assert vectors / total < 1e-3, preset.name


# ----------------------------------------------------------------------------- Newton-Schulz FLOPs


class _Counted:
    """A matrix of zeros that counts the FLOPs done with it, as the reference does them."""

    flops = {"matmul": 0, "elementwise": 0}

    def __init__(self, rows: int, columns: int) -> None:
        self.rows, self.columns = rows, columns

    @property
    def mT(self) -> "_Counted":
        return _Counted(self.columns, self.rows)

    def __matmul__(self, other: "_Counted") -> "_Counted":
        assert self.columns == other.rows
        _Counted.flops["matmul"] += 2 * self.rows * self.columns * other.columns
        return _Counted(self.rows, other.columns)

    def _elementwise(self, other: object = None) -> "_Counted":
        _Counted.flops["elementwise"] += self.rows * self.columns
        return _Counted(self.rows, self.columns)

    __mul__ = __rmul__ = __add__ = __radd__ = __truediv__ = _elementwise

    def norm(self) -> float:
        _Counted.flops["elementwise"] += 2 * self.rows * self.columns  # square and add each element
        return 1.0


def _reference_flops(rows: int, columns: int, steps: int) -> dict[str, int]:
    """``zeropower_via_newtonschulz5`` of KellerJordan/Muon, step for step, then muon_update's scale."""
    _Counted.flops = {"matmul": 0, "elementwise": 0}
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = _Counted(rows, columns)
    if rows > columns:
        X = X.mT
    X = X / (X.norm() + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * (A @ A)
        X = a * X + B @ X
    if rows > columns:
        X = X.mT
    X = X * max(1, rows / columns) ** 0.5
    return dict(_Counted.flops)


@pytest.mark.parametrize("rows,columns", [(2, 3), (3, 2), (4096, 4096), (6144, 4096), (4096, 14336), (1, 4096)])
def test_newton_schulz_flops_are_the_reference_implementations(rows, columns):
    found = newton_schulz_flops(rows, columns)
    counted = _reference_flops(rows, columns, NS_STEPS)
    assert (found.matmul_flops, found.elementwise_flops) == (counted["matmul"], counted["elementwise"])
    m, n = min(rows, columns), max(rows, columns)
    assert found.matmul_flops == 5 * (4 * m * m * n + 2 * m ** 3)


# ----------------------------------------------------------------------------- a toy world: step time by hand


def _figure(value: float) -> Sourced:
    return Sourced(value, "a round number for a hand-worked test")


PEAK, MEMORY_BW, LINK, LATENCY = 1e15, 1e12, 100e9, 1e-5
_NONE = _figure(0.0)
TOY_PROFILE = TimingProfile(
    name="toy", description="round numbers",
    devices=(DeviceEfficiency(
        architecture="toy", matmul=_figure(0.5), attention_forward=_figure(0.25), attention_backward=_figure(0.125),
        attention_forward_overhead_seconds=_NONE, attention_backward_overhead_seconds=_NONE,
        grouped_matmul=_figure(0.5), grouped_half_rows=_figure(100), memory_bandwidth=_figure(0.5),
        intra_node_bus=_figure(0.5), inter_node_bus=_figure(0.25), all_to_all_bus=_figure(0.5),
        collective_overhead_seconds=_NONE),),
    overlap=CommOverlap(tensor_parallel=_NONE, context_parallel=_NONE, expert_parallel=_NONE, data_parallel=_NONE, pipeline=_NONE),
    matmul_backward_factor=_figure(2.0), attention_backward_factor=_figure(2.5), flash_causal_fraction=_figure(0.5),
    elementwise_accesses_per_flop=_figure(0.5), elementwise_backward_factor=_figure(2.0), moe_permute_passes=_NONE,
    optimizer_grad_passes=_NONE, grad_buffer_passes=_NONE, grad_scale_passes=_NONE, algorithm_source="a hand-worked test",
)
TOY_DEVICE = HardwareSpec(
    name="Toy device", memory_bytes=2**36, peak_flops={"bf16": PEAK}, devices_per_node=8, architecture="toy",
    memory_bandwidth_bytes_per_second=MEMORY_BW, intra_node_bandwidth_bytes_per_second=LINK,
    inter_node_bandwidth_bytes_per_second=LINK / 4, intra_node_latency_seconds=LATENCY, inter_node_latency_seconds=LATENCY,
)
SIDE, BIAS = 1000, 1000  # one toy layer: a 1000 x 1000 weight and a bias of 1000


@attrs.frozen
class MatrixConfig:
    """A layer of one square weight and its bias; its work states nothing to communicate."""


def _evaluate_matrix(c: MatrixConfig, x: LayerContext) -> LayerCost:
    return LayerCost(
        params=(ParamCount("w", "dense", SIDE * SIDE + BIAS, False, matrices=((1, SIDE, SIDE),)),),
        activations=(ActivationTerm("kept", 1000),), input_bytes=100, working_bytes=0,
        forward=Flops(matmul_flops=1e9), work=LayerWork(),
    )


def _without(record: Optimizer, **changes) -> Optimizer:
    return attrs.evolve(record, name=f"{record.name}-without", **changes)


class _ToyWorld:
    """A toy layer kind and runtime, and a third-party optimizer stating round figures."""

    @hookimpl
    def hp_layer_kinds(self):
        yield LayerKind(name="square", config_type=MatrixConfig, evaluate=_evaluate_matrix)

    @hookimpl
    def hp_runtimes(self):
        yield Runtime(name="toy-runtime", precision=PrecisionSpec(), attention="flash", zero=0, timing=TOY_PROFILE)

    @hookimpl
    def hp_optimizers(self):
        # Three bytes of state per element, no master copy, ten bytes moved per element.
        yield Optimizer(name="three-bytes", state_bytes=lambda s, p: 3, step_bytes=lambda s, p: 10, master_copy=False,
                        description="a third-party optimizer with round figures")


@pytest.fixture(scope="module")
def toy():
    base = build_registry([_ToyWorld()], use_env=False)
    muon = base.optimizer("muon")

    class _Variants:
        @hookimpl
        def hp_optimizers(self):
            yield _without(muon, step_flops=None)
            yield attrs.evolve(muon, name="muon-no-gather", gather_bytes=None)

    return build_registry([_ToyWorld(), _Variants()], use_env=False)


def _toy_model(layers: int = 4) -> ModelSpec:
    return ModelSpec(name="toy", layers=(LayerGroup(kind="square", config=MatrixConfig(), count=layers),), source="test")


def _toy_time(registry, optimizer: str, parallel: ParallelSpec):
    return step_time(_toy_model(), parallel, registry=registry, hardware=TOY_DEVICE, runtime="toy-runtime",
                     precision=PrecisionSpec(optimizer=optimizer))


def test_a_third_party_optimizer_changes_the_estimate_as_it_states(toy):
    elements = 4 * (SIDE * SIDE + BIAS)
    layout = ParallelSpec(seq_len=16, global_batch_size=1)
    memory = estimate(_toy_model(), layout, registry=toy, runtime="toy-runtime",
                      precision=PrecisionSpec(optimizer="three-bytes")).stages[0].memory
    assert (memory.optimizer_states_bytes, memory.master_parameters_bytes) == (3 * elements, 0)
    # Ten bytes per element at 1e12 * 0.5 B/s; the toy profile adds no gradient passes.
    assert _toy_time(toy, "three-bytes", layout).optimizer_seconds == pytest.approx(elements * 10 / (MEMORY_BW * 0.5))
    # AdamW on the same model: 2 * 4 + 4 + 2 * 8 + (4 + 2) = 34 bytes per element.
    assert _toy_time(toy, "adamw", layout).optimizer_seconds == pytest.approx(elements * 34 / (MEMORY_BW * 0.5))


def test_muon_prices_its_update_and_its_newton_schulz_iterations_by_hand(toy):
    layout = ParallelSpec(seq_len=16, global_batch_size=1)
    muon, plain = _toy_time(toy, "muon", layout), _toy_time(toy, "muon-without", layout)
    # Update: the matrix with one momentum buffer (26 bytes an element), the bias with AdamW's two (34).
    assert update_bytes(PrecisionSpec(), 4) == 26
    assert plain.optimizer_seconds == pytest.approx(4 * (SIDE * SIDE * 26 + BIAS * 34) / (MEMORY_BW * 0.5))
    # Newton-Schulz, 5 steps on a 1000 x 1000 matrix: 5 * (4 + 2) * 1e9 matmul FLOPs at 1e15 * 0.5;
    # 5 * (3 + 2) * 1e6 + 4e6 elementwise FLOPs, each moving 0.5 * 2 bytes at 1e12 * 0.5 B/s.
    matmul, elementwise = 5 * 6 * SIDE ** 3, 5 * 5 * SIDE ** 2 + 4 * SIDE ** 2
    assert newton_schulz_flops(SIDE, SIDE) == Flops(matmul_flops=matmul, elementwise_flops=elementwise)
    ns = 4 * (matmul / (PEAK * 0.5) + elementwise * 0.5 * 2 / (MEMORY_BW * 0.5))
    assert muon.optimizer_seconds - plain.optimizer_seconds == pytest.approx(ns)
    # Model FLOPs (and MFU) do not count the optimizer's.
    assert muon.model_flops == plain.model_flops


def test_muon_gathers_its_sharded_momentum_over_the_data_parallel_group(toy):
    sharded = ParallelSpec(dp=2, seq_len=16, zero=1)
    with_gather, without = _toy_time(toy, "muon", sharded), _toy_time(toy, "muon-no-gather", sharded)
    # 4 matrices' fp32 momentum, all-gathered over 2 ranks on the node's links (bus 0.5), not overlapped.
    gathered = 4 * SIDE * SIDE * 4
    expected = (2 - 1) / 2 * gathered / (LINK * 0.5) + (2 - 1) * LATENCY  # (n - 1)/n S/B + (n - 1) a
    assert collective_seconds("all_gather", gathered, 2, LINK * 0.5, LATENCY) == pytest.approx(expected)
    assert with_gather.data_parallel_seconds - without.data_parallel_seconds == pytest.approx(expected)
    # Without ZeRO every rank holds the whole momentum: nothing to gather.
    whole = ParallelSpec(dp=2, seq_len=16, zero=0)
    assert _toy_time(toy, "muon", whole).data_parallel_seconds == _toy_time(toy, "muon-no-gather", whole).data_parallel_seconds


# ----------------------------------------------------------------------------- names, errors, listings


def test_an_unknown_optimizer_is_refused_naming_the_field(registry, llama):
    with pytest.raises(ConfigError) as caught:
        estimate(llama, ONE_RANK, registry=registry, precision=PrecisionSpec(optimizer="lamb"))
    assert caught.value.path == "$.precision.optimizer"
    assert "known: adafactor, adam, adam8bit, adamw, muon, sgd, sgd_momentum" in str(caught.value)


def test_the_command_line_refuses_an_unknown_optimizer_in_one_line(capsys):
    status, out, err = run(capsys, "estimate", "--optimizer", "lamb")
    assert status == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("hp estimate: error: $.precision.optimizer: unknown optimizer 'lamb'; known: adafactor, adam,")


def test_the_command_line_selects_an_optimizer_by_flag_or_config(capsys, tmp_path):
    status, out, err = run(capsys, "estimate", "--optimizer", "muon", "--json")
    assert status == 0, err
    by_flag = json.loads(out)["stages"][0]["memory"]["optimizer_states_bytes"]
    config = tmp_path / "run.yaml"
    config.write_text("model: llama3-8b\nparallel: {dp: 4, tp: 2, sp: true, seq_len: 8192}\nprecision: {optimizer: muon}\n"
                      "hardware: h100-sxm\n", encoding="utf-8")
    status, out, err = run(capsys, "estimate", config, "--json")
    assert status == 0, err
    assert json.loads(out)["stages"][0]["memory"]["optimizer_states_bytes"] == by_flag
    status, out, err = run(capsys, "estimate", "--json")
    assert by_flag < json.loads(out)["stages"][0]["memory"]["optimizer_states_bytes"]


def test_plugins_json_lists_the_optimizers(capsys):
    status, out, err = run(capsys, "plugins", "--json")
    assert status == 0, err
    found = {o["name"]: o["plugin"] for o in json.loads(out)["optimizers"]}
    assert found == {
        "adafactor": "hp_plugins.optimizers.adafactor", "adam": "hp_plugins.optimizers.adam",
        "adam8bit": "hp_plugins.optimizers.adam", "adamw": "hp_plugins.optimizers.adam",
        "muon": "hp_plugins.optimizers.muon", "sgd": "hp_plugins.optimizers.sgd",
        "sgd_momentum": "hp_plugins.optimizers.sgd",
    }


def test_search_takes_an_optimizer(capsys):
    args = ("search", "--model", "llama3-8b", "--num-layers", "4", "--devices", "4", "--hardware", "h100-sxm",
            "--global-batch-size", "8", "--seq-len", "2048", "--fix", "tp=2", "--top", "1", "--json")
    status, out, err = run(capsys, *args, "--optimizer", "adam8bit")
    assert status == 0, err
    status, out, err = run(capsys, *args, "--optimizer", "lamb")
    assert status == 2 and "--optimizer: unknown optimizer 'lamb'" in err


def test_the_built_in_optimizers_pickle_and_compare_equal(registry):
    # A search's process pool pickles the registry; two builds are equal.
    assert pickle.loads(pickle.dumps(registry.optimizers)) == registry.optimizers
    assert build_registry(use_env=False).optimizers == registry.optimizers


def test_a_family_stating_more_matrix_elements_than_it_holds_is_refused(toy):
    def evaluate(c, x):
        return LayerCost(params=(ParamCount("w", "dense", 10, False, matrices=((1, 4, 4),)),), activations=(),
                         input_bytes=1, working_bytes=0, work=LayerWork())

    class _Bad:
        @hookimpl
        def hp_layer_kinds(self):
            yield LayerKind(name="bad", config_type=MatrixConfig, evaluate=evaluate)

    registry = build_registry([_Bad()], use_env=False)
    model = ModelSpec(name="bad", layers=(LayerGroup(kind="bad", config=MatrixConfig(), count=2),), source="test")
    with pytest.raises(PluginError, match="bad: parameter family w states 16 matrix elements"):
        estimate(model, ParallelSpec(seq_len=16), registry=registry)


def test_an_optimizer_returning_a_negative_figure_is_refused(toy, llama):
    class _Negative:
        @hookimpl
        def hp_optimizers(self):
            yield Optimizer(name="negative", state_bytes=lambda s, p: -1, step_bytes=lambda s, p: 1)

    registry = build_registry([_Negative()], use_env=False)
    with pytest.raises(PluginError, match="state_bytes must return a non-negative number"):
        estimate(llama, ONE_RANK, registry=registry, precision=PrecisionSpec(optimizer="negative"))
