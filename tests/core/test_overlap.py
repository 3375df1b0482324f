"""Overlap priced as what a stream hides behind which compute (hp_core.engine.timing.overlap), by hand."""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import build_registry
from hp_core.engine.timing.overlap import bucketed, fsdp_layers, hidden_send
from hp_core.runtime_options import apply_options


def test_fsdp_prefetch_hides_each_gather_behind_the_previous_layers_forward():
    # Three layers: gather 2, reduce-scatter 3, forward 1, backward 4 (seconds).
    layers = [(2.0, 3.0, 1.0, 4.0)] * 3
    total, exposed = fsdp_layers(layers, reshard=True, prefetch=True, reduce_overlap=True)
    assert total == 3 * (2 + 2 + 3)
    # Forward: the first gather, then max(0, 2 - 1) twice = 4. Backward from the last layer: its re-gather (2);
    # layer 2 hides the next re-gather (2), layer 1 the re-gather and layer 2's reduce-scatter (5 - 4 = 1),
    # layer 0 layer 1's reduce-scatter (3 - 4 < 0); the last reduce-scatter (3).
    assert exposed == pytest.approx(4 + 2 + 0 + 1 + 0 + 3)
    # Nothing overlapped: all of it exposed; no reshard: no backward gathers.
    assert fsdp_layers(layers, reshard=True, prefetch=False, reduce_overlap=False) == (21.0, 21.0)
    assert fsdp_layers(layers, reshard=False, prefetch=False, reduce_overlap=False) == (15.0, 15.0)


def test_bucketed_reduction_and_sends():
    assert bucketed(10.0, 1.0, 4.0, True) == 6.0  # what the window does not hold
    assert bucketed(10.0, 1.0, 40.0, True) == 1.0  # at least the last bucket
    assert bucketed(10.0, 1.0, 40.0, False) == 10.0
    assert bucketed(0.5, 1.0, 40.0, True) == 0.5  # never more than the whole
    assert hidden_send(2.0, 1.5, True) == 0.5 and hidden_send(2.0, 1.5, False) == 2.0


def test_overlap_options_set_the_runtimes_schedule():
    registry = build_registry(use_env=False)
    megatron = registry.runtime("megatron")
    assert not megatron.timing.schedule.overlap_grad_reduce
    changed = apply_options(megatron, {"overlap_grad_reduce": "true", "tp_comm_overlap": True})
    assert changed.timing.schedule.overlap_grad_reduce and changed.timing.schedule.tp_comm_overlap
    assert changed.option_values == {"overlap_grad_reduce": True, "tp_comm_overlap": True}
    fsdp2 = registry.runtime("fsdp2")
    assert fsdp2.timing.schedule.fsdp_prefetch and fsdp2.timing.schedule.fsdp_reduce_scatter_overlap
    assert not apply_options(fsdp2, {"fsdp_prefetch": False}).timing.schedule.fsdp_prefetch


def test_host_time_is_a_floor_under_each_direction():
    import types

    from hp_core.costs import Collective, LayerWork
    from hp_core.engine.timing.host_floor import _host_floor
    from hp_core.specs.overlap import HostOverhead

    work = LayerWork(gemms=((16, 32, 32), (16, 64, 32)), attention_calls=1,
                     collectives=(Collective("tp", "all_gather", 1e6, 2, 3),))
    rates = types.SimpleNamespace(host=HostOverhead(seconds_per_kernel=1e-5, kernels_per_gemm=4, source="round numbers",
                                                    router_kernels=(7, 5), permute_kernels=3))
    # Forward: 2 GEMMs x 4 kernels + 1 attention + 2 collective calls = 11 kernels; backward 2 x 8 + 1 + 3 = 20.
    assert _host_floor(work, 1e-6, 1e-6, rates) == pytest.approx((11e-5, 20e-5))
    # A frozen GEMM launches no weight-gradient GEMM (nor its kernels around it): backward (2 x 2 - 1) x 4 + 1 + 3 = 16.
    assert _host_floor(work, 1e-6, 1e-6, rates, frozen=1) == pytest.approx((11e-5, 16e-5))
    # A layer whose GPU time is longer keeps it.
    assert _host_floor(work, 1.0, 2.0, rates) == (1.0, 2.0)
    # A mixture-of-experts layer adds its router's and its permutation's kernels: a grouped GEMM counts as one GEMM,
    # so forward 3 x 4 + 1 + 2 + 7 + 3 = 25 kernels, backward 2 x 12 + 1 + 3 + 5 + 3 = 36.
    moe = attrs.evolve(work, grouped_flops=1e9, router_elements=4096 * 128, permute_bytes=1e6)
    assert _host_floor(moe, 1e-6, 1e-6, rates) == pytest.approx((25e-5, 36e-5))
    # Neither a router nor a permutation without the work stating them.
    assert _host_floor(attrs.evolve(moe, router_elements=0), 1e-6, 1e-6, rates) == pytest.approx((18e-5, 31e-5))
    # Megatron-Core's SequentialMLP (sequential_experts): each local expert's MLP (its FC1 and FC2 entries) counts as
    # one GEMM, 3 experts = 3 where the grouped GEMMs were one: forward 5 x 4 + 1 + 2 + 7 + 3 = 33 kernels, backward
    # 2 x 20 + 1 + 3 + 5 + 3 = 52.
    sequential = attrs.evolve(moe, expert_gemms=((3, 100.0, 64, 32), (3, 100.0, 32, 64)), sequential_experts=True)
    assert _host_floor(sequential, 1e-6, 1e-6, rates) == pytest.approx((33e-5, 52e-5))
    # One local expert a rank counts as the grouped GEMMs do.
    one = attrs.evolve(sequential, expert_gemms=((1, 100.0, 64, 32), (1, 100.0, 32, 64)))
    assert _host_floor(one, 1e-6, 1e-6, rates) == pytest.approx((25e-5, 36e-5))
    assert _host_floor(attrs.evolve(sequential, sequential_experts=False), 1e-6, 1e-6, rates) == pytest.approx((25e-5, 36e-5))
    with pytest.raises(ValueError, match="router_kernels"):
        HostOverhead(seconds_per_kernel=1e-5, kernels_per_gemm=4, source="x", router_kernels=(1,), permute_kernels=0)


def test_cuda_graphs_lift_the_host_floor_of_the_layers_they_capture():
    """``HostOverhead.cuda_graphs`` (the megatron option ``cuda_graphs``): a layer replayed from a CUDA graph takes no
    floor; ``layers`` captures the body (decoder) layers only, ``full_iteration`` every layer."""
    from hp_core.costs import LayerWork
    from hp_core.engine.timing.host_floor import _host_floor
    from hp_core.specs.overlap import HostOverhead

    host = HostOverhead(seconds_per_kernel=1e-5, kernels_per_gemm=4, source="round numbers", router_kernels=(7, 5),
                        permute_kernels=3)
    assert host.cuda_graphs == "none" and host.floors(True) and host.floors(False)
    layers = attrs.evolve(host, cuda_graphs="layers")
    assert not layers.floors(True) and layers.floors(False)  # the embedding and the output layer stay eager
    whole = attrs.evolve(host, cuda_graphs="full_iteration")
    assert not whole.floors(True) and not whole.floors(False)
    with pytest.raises(ValueError, match="cuda_graphs"):
        attrs.evolve(host, cuda_graphs="attn")
    # The floor itself is unchanged where it applies: 1 GEMM x 4 + 1 attention kernel forward, 2 x 4 + 1 backward.
    work = LayerWork(gemms=((16, 32, 32),), attention_calls=1)
    assert _host_floor(work, 1e-6, 1e-6, types_namespace(host=layers)) == pytest.approx((5e-5, 9e-5))

    registry = build_registry()
    megatron = registry.runtime("megatron")
    assert megatron.timing.host.cuda_graphs == "none"
    graphed = apply_options(megatron, {"cuda_graphs": "layers"})
    assert graphed.timing.host == attrs.evolve(megatron.timing.host, cuda_graphs="layers")
    assert graphed.option_values == {"cuda_graphs": "layers"}
    # A profile stating no host time: nothing to lift; the default leaves it as it is, a graphed scope is refused.
    from hp_core.errors import ConfigError

    bare = attrs.evolve(megatron, timing=attrs.evolve(megatron.timing, host=None))
    assert apply_options(bare, {"cuda_graphs": "none"}).timing.host is None
    with pytest.raises(ConfigError, match="cuda_graphs"):
        apply_options(bare, {"cuda_graphs": "layers"})


def test_a_graphed_moe_layer_at_micro_batch_1_is_priced_at_its_kernels():
    """A 4-layer Mixtral-shaped MoE at micro-batch 1 on a B200, EP 8: its body layers' forward is host-bound eager
    (the floor binds) and at its kernels under ``cuda_graphs: layers``, which leaves the embedding and output layers
    floored; ``full_iteration`` prices every layer as a profile without host time does."""
    from hp_core import api
    from hp_plugins.models.hf import model_from_hf_config

    registry = build_registry()
    config = {"model_type": "mixtral", "vocab_size": 32000, "hidden_size": 1024, "intermediate_size": 2048,
              "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "num_local_experts": 8,
              "num_experts_per_tok": 2, "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
              "rope_theta": 1e6, "sliding_window": None, "tie_word_embeddings": False}
    model = model_from_hf_config(config, name="small mixtral", source="test")
    layout = {"dp": 8, "ep": 8, "micro_batch_size": 1, "global_batch_size": 8, "seq_len": 1024}
    megatron = registry.runtime("megatron")

    def step(runtime):
        return api.step_time(model, layout, registry=registry, runtime=runtime, hardware="b200")

    eager = step(megatron)
    graphed = step(apply_options(megatron, {"cuda_graphs": "layers"}))
    whole = step(apply_options(megatron, {"cuda_graphs": "full_iteration"}))
    bare = step(attrs.evolve(megatron, timing=attrs.evolve(megatron.timing, host=None)))
    assert eager.step_seconds > graphed.step_seconds >= whole.step_seconds
    assert whole.step_seconds == pytest.approx(bare.step_seconds, rel=1e-12)
    # The floor binds on the body layers here: 4 layers of at least the eager floor's forward each.
    host = megatron.timing.host
    assert eager.stages[0].forward_seconds > 4 * 53 * host.seconds_per_kernel  # the router's 53 kernels alone


def types_namespace(**fields):
    import types

    return types.SimpleNamespace(**fields)
