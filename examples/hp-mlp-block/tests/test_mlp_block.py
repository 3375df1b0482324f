"""The MLP block's parameters, and its step time at tp = 2 carrying the collectives it states.

Model: h = 1024, I = 4096 (SwiGLU), 4 blocks, vocabulary 32,000, sequences of 2,048 tokens, one
per micro-batch, on H100s under the ``generic`` runtime.
"""

from __future__ import annotations

import pytest

import hp_mlp_block
from hp_core.api import build_registry, count_parameters, layer_context, model_from_config, step_time
from hp_core.costs import Collective
from hp_core.errors import ConfigError
from hp_core.specs import ParallelSpec
from hp_plugins.runtimes.timing_profiles import GENERIC

CONFIG = {"model_type": "mlp_stack", "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 4,
          "vocab_size": 32000}
T, H, BLOCKS = 2048, 1024, 4


@pytest.fixture(scope="module")
def registry():
    return build_registry([hp_mlp_block], use_env=False)


@pytest.fixture(scope="module")
def model(registry):
    return model_from_config(CONFIG, registry, name="mlp-stack", source="test")


def test_parameters_by_hand(registry, model):
    # Per block: RMSNorm 1,024 + gate/up 1,024 x 8,192 + down 4,096 x 1,024 = 12,583,936.
    block = 1024 + 1024 * 8192 + 4096 * 1024
    counts = count_parameters(model, registry)
    assert counts.by_kind == {"embedding": 32000 * 1024, "mlp_block": 4 * block, "output": 1024 + 32000 * 1024}
    assert counts.total == 2 * 32000 * 1024 + 1024 + 4 * block == 115_872_768


def test_a_bad_config_names_its_field(registry):
    with pytest.raises(ConfigError, match=r"config.json \$.num_hidden_layers: must be a positive integer, got 0"):
        model_from_config({**CONFIG, "num_hidden_layers": 0}, registry, name="m", source="test")


def test_at_tp2_the_step_time_carries_the_stated_collectives(registry, model):
    hardware = registry.hardware_preset("h100-sxm").spec
    device = GENERIC.device(hardware.architecture)
    parallel = ParallelSpec(dp=1, tp=2, sp=True, seq_len=T, global_batch_size=1)
    time = step_time(model, parallel, registry=registry, hardware=hardware, runtime="generic")
    # Each block states an all-gather and a reduce-scatter of the full 2,048 x 1,024 x 2-byte activation,
    # forward and backward; the embedding a reduce-scatter forward and an all-gather backward, the head
    # the reverse: 4 x 4 + 2 + 2 = 20 collectives over 2 ranks on NVLink.
    context = layer_context(parallel, registry.runtime("generic").precision, "flash")
    work = registry.layer_kind("mlp_block").evaluate(model.layers[1].config, context).work
    full = T * H * 2
    # The all-gather moves the block's GEMM input (a low-precision recipe gathers it quantized).
    assert work.collectives == (Collective("tp", "all_gather", full, 1, 1, rerun_switch="gather", gemm_input=True),
                                Collective("tp", "reduce_scatter", full, 1, 1))
    bandwidth = hardware.intra_node_bandwidth_bytes_per_second * device.intra_node_bus.value
    one = device.collective_overhead_seconds.value + full / 2 / bandwidth + hardware.intra_node_latency_seconds
    exposed = 1 - GENERIC.overlap.tensor_parallel.value
    slowdown = device.sustained_slowdown.value if device.sustained_slowdown is not None else 1.0
    (stage,) = time.stages
    assert stage.communication_seconds == pytest.approx((4 * BLOCKS + 4) * one * exposed * slowdown, rel=1e-12)
    assert stage.communication_seconds > 0
    # At tp = 1 nothing is exchanged.
    single = step_time(model, ParallelSpec(dp=1, seq_len=T, global_batch_size=1), registry=registry, hardware=hardware,
                       runtime="generic")
    assert single.stages[0].communication_seconds == 0.0
