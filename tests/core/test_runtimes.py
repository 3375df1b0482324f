"""Runtime profiles: their stated defaults, executable recompute settings and peak points."""

from __future__ import annotations

import pytest

from hp_core.api import estimate, model_from_preset
from hp_core.specs import ParallelSpec


def test_megatron_executes_unions_of_its_recompute_modules(registry):
    megatron = registry.runtime("megatron")
    core_attn = frozenset({"attBMM", "headCast", "dropout", "softmax"})
    assert megatron.executes(core_attn)
    assert megatron.executes(core_attn | {"normOp", "ffAct"})
    assert megatron.executes(core_attn | {"gather"})  # it always re-gathers anyway
    assert not megatron.executes(frozenset({"softmax"}))  # core_attn is one unit
    assert megatron.executes(frozenset())


def test_per_op_trainers_execute_any_switches(registry):
    assert registry.runtime("hyperparallel").executes(frozenset({"softmax", "attUp"}))
    fsdp2 = registry.runtime("fsdp2")
    assert fsdp2.executes(frozenset({"normOp", "ffAct"}))
    assert not fsdp2.executes(frozenset({"normOp"}))


@pytest.mark.parametrize(("runtime", "zero", "grad", "master"), [("megatron", 1, 4, 4), ("fsdp2", 3, 4, 0), ("hyperparallel", 3, 4, 4)])
def test_runtimes_state_their_defaults(registry, runtime, zero, grad, master):
    profile = registry.runtime(runtime)
    assert (profile.zero, profile.precision.grad_bytes, profile.precision.master_param_bytes) == (zero, grad, master)
    assert profile.timing is not None


def test_deferred_gradient_reduction_adds_the_last_backward_point(registry):
    """HyperParallel at ZeRO-3: at the end of the last backward the whole gradient is unsharded."""
    model = model_from_preset("llama3-8b", registry).with_body_layers(2, registry.kinds_placed("body"))
    parallel = ParallelSpec(dp=8, seq_len=512)
    result = estimate(model, parallel, registry=registry, runtime="hyperparallel")
    (stage,) = result.stages
    assert set(stage.peak_points) == {"warmup_end", "last_backward"}
    assert stage.binding_point == "last_backward"  # short sequences: the fp32 gradient dominates
    # The gradient at that point: every parameter element of the rank in fp32, unsharded.
    elements = sum(stage.parameters_by_kind.values())
    assert stage.memory.gradients_bytes == elements * 4
    generic = estimate(model, ParallelSpec(dp=8, zero=3, seq_len=512), registry=registry)
    assert set(generic.stages[0].peak_points) == {"warmup_end"}


def test_megatron_moe_act_acts_only_on_layers_with_routed_experts(registry):
    megatron = registry.runtime("megatron")
    assert megatron.executes(frozenset({"ffAct"}), "moe")
    assert megatron.executes(frozenset({"ffAct"}), "mla_moe")
    assert not megatron.executes(frozenset({"ffAct"}), "dense")
    assert not megatron.executes(frozenset({"ffAct"}), "mla")
    assert megatron.executes(frozenset({"normOp"}), "dense")
