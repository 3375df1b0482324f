"""The ``megatron`` runtime's Transformer Engine cuBLAS workspaces follow the device's architecture (docs/runtimes.md).

Transformer Engine's ``get_cublas_workspace_size_bytes`` (NVIDIA/TransformerEngine@d0067d0,
``transformer_engine/pytorch/cpp_extensions/gemm.py``) sizes the workspace 32 MiB + 1 KiB where the device's compute
capability major is >= 9 and 4 MiB (4,194,304 B) below it; grouped GEMM takes one such workspace per compute stream,
4 (``common/util/multi_stream.cpp``). A device stating no architecture, or one the runtime does not list, keeps the
32 MiB + 1 KiB figure (the documented default, ``Runtime.overheads_on``).
"""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import apply_options, estimate, model_from_preset, plan_recompute
from hp_core.engine.precision import on_device
from hp_core.engine.prepare import prepare
from hp_core.specs import ParallelSpec
from hp_core.types import Runtime

HOPPER_WORKSPACE_BYTES = 32 * 1024 * 1024 + 1024  # 33,554,432 + 1,024
AMPERE_WORKSPACE_BYTES = 4 * 1024 * 1024
LAYOUT = ParallelSpec(tp=2, sp=True, dp=4, seq_len=4096)
EXPERT_LAYOUT = ParallelSpec(tp=1, dp=8, ep=8, seq_len=4096)
# llama3-8b's single stage on LAYOUT under the megatron profile as hp priced it before workspaces followed the device
# (c5dc9e5, every device alike): a regression pin, not a derivation.
PINNED_PEAK_BYTES = 46_675_596_288


def _megatron(registry, **options):
    """The megatron profile; without fused weight-gradient accumulation and PyTorch's own cuBLAS workspaces
    (tests/plugins/test_blas_workspaces.py) its overhead is TE's workspaces alone."""
    runtime = apply_options(registry.runtime("megatron"), {"gradient_accumulation_fusion": False, **options})
    return attrs.evolve(runtime, blas_workspaces=None)


def _memory(registry, model, layout, hardware, runtime=None):
    found = estimate(model, layout, registry=registry, runtime=runtime or _megatron(registry), hardware=hardware)
    return [stage.memory for stage in found.stages]


def test_the_hand_derived_workspace_sizes():
    assert HOPPER_WORKSPACE_BYTES == 33_555_456
    assert AMPERE_WORKSPACE_BYTES == 4_194_304
    assert HOPPER_WORKSPACE_BYTES - AMPERE_WORKSPACE_BYTES == 29_361_152  # the Megatron CI A100 rows' excess


@pytest.mark.parametrize(("hardware", "workspace"), [
    ("a100-80gb", AMPERE_WORKSPACE_BYTES),  # ampere, sm 8.0
    ("h100-sxm", HOPPER_WORKSPACE_BYTES),  # hopper, sm 9.0
    ("h200", HOPPER_WORKSPACE_BYTES),
    ("b200", HOPPER_WORKSPACE_BYTES),  # blackwell, sm 10.0
    ("gb300", HOPPER_WORKSPACE_BYTES),
    ("ascend-910b", HOPPER_WORKSPACE_BYTES),  # not a family the runtime lists: the default
    (None, HOPPER_WORKSPACE_BYTES),  # no device: the default
])
def test_a_dense_rank_holds_one_workspace_of_its_device(registry, hardware, workspace):
    model = model_from_preset("llama3-8b", registry)
    (memory,) = _memory(registry, model, LAYOUT, hardware)
    assert memory.runtime_overhead_bytes == workspace


def test_a_device_stating_no_architecture_keeps_the_default(registry):
    model = model_from_preset("llama3-8b", registry)
    unnamed = attrs.evolve(registry.hardware_preset("a100-80gb").spec, architecture=None)
    (memory,) = _memory(registry, model, LAYOUT, unnamed)
    assert memory.runtime_overhead_bytes == HOPPER_WORKSPACE_BYTES


def test_only_the_workspace_moves_on_ampere(registry):
    """The A100 stage is the H100 stage less 28 MiB - 1 KiB of workspace, every other figure the same; with fused
    weight-gradient accumulation (the default) the dummy weight gradients stay beside it."""
    model = model_from_preset("llama3-8b", registry)
    fused = attrs.evolve(registry.runtime("megatron"), blas_workspaces=None)  # TE's workspaces alone (_megatron)
    (a100,) = _memory(registry, model, LAYOUT, "a100-80gb", fused)
    (h100,) = _memory(registry, model, LAYOUT, "h100-sxm", fused)
    assert h100.runtime_overhead_bytes - a100.runtime_overhead_bytes == 29_361_152
    assert h100.peak_bytes - a100.peak_bytes == 29_361_152
    assert attrs.evolve(a100, runtime_overhead_bytes=0) == attrs.evolve(h100, runtime_overhead_bytes=0)


def test_an_expert_rank_holds_four_grouped_gemm_workspaces_more(registry):
    """A rank with routed experts: the workspace and one per TE compute stream (4), so 5 of its device's size."""
    model = model_from_preset("mixtral-8x7b", registry)
    (a100,) = _memory(registry, model, EXPERT_LAYOUT, "a100-80gb")
    (h100,) = _memory(registry, model, EXPERT_LAYOUT, "h100-sxm")
    (b200,) = _memory(registry, model, EXPERT_LAYOUT, "b200")
    assert a100.runtime_overhead_bytes == 5 * AMPERE_WORKSPACE_BYTES == 20_971_520
    assert h100.runtime_overhead_bytes == b200.runtime_overhead_bytes == 5 * HOPPER_WORKSPACE_BYTES == 167_777_280


def test_bf16_on_hopper_and_blackwell_is_unchanged(registry):
    """Hopper and Blackwell keep the figure every device had before workspaces followed the architecture: the stage
    is byte for byte the estimate without a device, and its peak the one priced before (hp at c5dc9e5)."""
    model = model_from_preset("llama3-8b", registry)
    fused = attrs.evolve(registry.runtime("megatron"), blas_workspaces=None)  # TE's workspaces alone (_megatron)
    unpriced = estimate(model, LAYOUT, registry=registry, runtime=fused).stages
    for hardware in ("h100-sxm", "h200", "b200", "gb200"):
        assert estimate(model, LAYOUT, registry=registry, runtime=fused, hardware=hardware).stages == unpriced
    assert unpriced[0].peak_bytes == PINNED_PEAK_BYTES
    # Its overhead: the workspace and one bf16 dummy weight gradient per distinct weight shape at tp 2: q/k/v
    # [3072, 4096], the output projection [4096, 2048], gate/up [14336, 4096], down [4096, 7168], the head [64128, 4096].
    shapes = 3072 * 4096 + 4096 * 2048 + 14336 * 4096 + 4096 * 7168 + 64128 * 4096
    assert unpriced[0].memory.runtime_overhead_bytes == HOPPER_WORKSPACE_BYTES + 2 * shapes == 776_995_840


def test_the_recompute_planner_prices_the_device_workspace(registry):
    model = model_from_preset("llama3-8b", registry)
    for hardware, workspace in (("a100-80gb", AMPERE_WORKSPACE_BYTES), ("h100-sxm", HOPPER_WORKSPACE_BYTES)):
        plan = plan_recompute(model, LAYOUT, registry=registry, runtime=_megatron(registry), hardware=hardware)
        assert plan.plan.estimate.stages[0].memory.runtime_overhead_bytes == workspace


def test_on_device_keeps_one_run_per_family(registry):
    model = model_from_preset("llama3-8b", registry)
    run = prepare(model, LAYOUT, registry=registry, runtime=_megatron(registry))
    a100 = registry.hardware_preset("a100-80gb").spec
    assert run.stage_inputs.overhead_bytes == HOPPER_WORKSPACE_BYTES  # prepared without a device: the default
    assert on_device(run, registry.hardware_preset("h100-sxm").spec) is run and on_device(run, None) is run
    once = on_device(run, a100)
    assert (once.stage_inputs.overhead_bytes, once.stage_inputs.expert_overhead_bytes) == (
        AMPERE_WORKSPACE_BYTES, 4 * AMPERE_WORKSPACE_BYTES)
    assert on_device(run, a100) is once and on_device(once, a100) is once


def test_the_runtime_contract(registry):
    megatron = registry.runtime("megatron")
    assert megatron.overheads_on("ampere") == (4_194_304, 16_777_216)
    assert megatron.overheads_on("hopper") == megatron.overheads_on("blackwell") == (33_555_456, 134_221_824)
    assert megatron.overheads_on(None) == megatron.overheads_on("ascend-910b") == (33_555_456, 134_221_824)
    plain = Runtime(name="plain", precision=megatron.precision, attention="flash", overhead_bytes=7,
                    expert_overhead_bytes=3)
    assert plain.overheads_on("ampere") == (7, 3)  # nothing listed: the two fields everywhere
    for bad in ({"ampere": (1, -1)}, {"ampere": (1,)}, {"ampere": (1.0, 2)}, {"ampere": (True, 2)}, {3: (1, 2)}):
        with pytest.raises(ValueError, match="overhead_by_architecture"):
            attrs.evolve(plain, overhead_by_architecture=bad)



@pytest.mark.parametrize(("hardware", "workspace"), [
    ("a100-80gb", AMPERE_WORKSPACE_BYTES), ("h100-sxm", HOPPER_WORKSPACE_BYTES), ("gb200", HOPPER_WORKSPACE_BYTES),
    (None, HOPPER_WORKSPACE_BYTES),
])
def test_tp_comm_overlap_adds_the_userbuffers_gemms_three_workspaces(registry, hardware, workspace):
    # get_cublas_workspace(device, ub=True, ...): _NUM_MAX_UB_STREAMS = 3 workspaces in one tensor beside the GEMMs' one
    # (TE cpp_extensions/gemm.py since e1edaae); nothing else of the stage moves, and the overlap schedule is set.
    model = model_from_preset("llama3-8b", registry)
    (plain,) = _memory(registry, model, LAYOUT, hardware)
    overlapped_runtime = _megatron(registry, tp_comm_overlap=True)
    assert overlapped_runtime.timing.schedule.tp_comm_overlap
    (overlapped,) = _memory(registry, model, LAYOUT, hardware, overlapped_runtime)
    assert overlapped.runtime_overhead_bytes == 4 * workspace
    assert overlapped.peak_bytes - plain.peak_bytes == 3 * workspace
    assert attrs.evolve(overlapped, runtime_overhead_bytes=0) == attrs.evolve(plain, runtime_overhead_bytes=0)
    # The option off is the profile as it was.
    off = _megatron(registry, tp_comm_overlap=False)
    assert attrs.evolve(off, option_values={}) == attrs.evolve(_megatron(registry), option_values={})
