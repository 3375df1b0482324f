"""PyTorch's own cuBLAS workspaces (hp_core/blas_workspaces.py, docs/runtimes.md 'PyTorch's cuBLAS workspaces').

Every figure by hand: one workspace is ``CUBLAS_WORKSPACE_CONFIG``'s sum of ``:SIZE_KiB:COUNT`` pairs, else
4,096 KiB x 8 = 33,554,432 B from compute capability 9.0 and 4,096 KiB x 2 + 16 KiB x 8 = 8,519,680 B before
(PyTorch ``aten/src/ATen/cuda/CublasHandlePool.cpp`` ``parseChosenWorkspaceSize``); a rank issuing GEMMs through torch
from the forward and the autograd thread holds two.
"""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import apply_options, estimate, model_from_preset
from hp_core.blas_workspaces import DEFAULT_WORKSPACE_BYTES, BlasWorkspaces, stage_blas_bytes
from hp_core.specs import ParallelSpec
from hp_plugins.runtimes.blas_option import workspace_config_kib

HOPPER = 33_554_432
AMPERE = 8_519_680


def test_the_sizes_by_hand():
    assert DEFAULT_WORKSPACE_BYTES == HOPPER == 4096 * 1024 * 8
    blas = BlasWorkspaces("every")
    assert blas.on("hopper") == blas.on("blackwell") == ("every", 2 * HOPPER) == ("every", 67_108_864)
    assert blas.on("ampere") == ("every", 2 * AMPERE) == ("every", 17_039_360)
    # No device, or a family PyTorch's table does not name: the documented default, 32 MiB.
    assert blas.on(None) == blas.on("ascend") == ("every", 2 * HOPPER)
    # CUBLAS_WORKSPACE_CONFIG sizes every device alike.
    sized = blas.sized(16 * 2**20)
    assert sized.on("ampere") == sized.on("hopper") == sized.on(None) == ("every", 2 * 16 * 2**20)


def test_the_workspace_config_is_read_as_pytorch_reads_it():
    assert workspace_config_kib(":4096:8") == 32_768
    assert workspace_config_kib(":4096:2:16:8") == 8_320 == AMPERE // 1024
    with pytest.raises(ValueError, match="CUBLAS_WORKSPACE_CONFIG"):
        workspace_config_kib("4096")


def test_a_record_refuses_what_is_not_a_size():
    with pytest.raises(ValueError):
        BlasWorkspaces("some")
    with pytest.raises(ValueError, match="threads"):
        BlasWorkspaces("every", threads=0)


def test_which_stages_hold_them():
    class Work:
        def __init__(self, high_precision_gemms=()):
            self.high_precision_gemms = high_precision_gemms

    size = 2 * HOPPER
    assert stage_blas_bytes(None, [Work(((1, 2, 3),))]) == 0
    assert stage_blas_bytes(("every", size), [Work()]) == size
    assert stage_blas_bytes(("compute_dtype", size), [Work(), None]) == 0
    assert stage_blas_bytes(("compute_dtype", size), [None, Work(((4096, 128256, 4096),))]) == size


def _overheads(registry, model, layout, runtime, hardware="h100-sxm"):
    found = estimate(model, layout, registry=registry, runtime=runtime, hardware=hardware)
    return [stage.memory.runtime_overhead_bytes for stage in found.stages]


def test_megatron_holds_them_where_the_head_or_a_router_runs(registry):
    """Megatron-Core runs its linears through Transformer Engine but the output layer and the router's gate through
    torch: a dense model's last stage holds two workspaces more than the same stage priced without them, its first
    stage none; every stage of an MoE model (each runs learned routers) holds them."""
    megatron = registry.runtime("megatron")
    without = attrs.evolve(megatron, blas_workspaces=None)
    dense = model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(tp=1, pp=2, dp=4, seq_len=4096)
    plain, priced = _overheads(registry, dense, layout, without), _overheads(registry, dense, layout, megatron)
    assert [b - a for a, b in zip(plain, priced)] == [0, 2 * HOPPER]
    on_a100 = _overheads(registry, dense, layout, megatron, "a100-80gb")
    assert on_a100[1] - _overheads(registry, dense, layout, without, "a100-80gb")[1] == 2 * AMPERE
    # CUBLAS_WORKSPACE_CONFIG=:4096:8 (Megatron-LM's CI): 32 MiB on the A100 too.
    ci = apply_options(megatron, {"cublas_workspace_kib": 32_768})
    assert _overheads(registry, dense, layout, ci, "a100-80gb")[1] - on_a100[1] == 2 * (HOPPER - AMPERE)
    moe = model_from_preset("mixtral-8x7b", registry)
    moe_layout = ParallelSpec(tp=1, pp=2, dp=8, ep=8, seq_len=4096)
    plain, priced = _overheads(registry, moe, moe_layout, without), _overheads(registry, moe, moe_layout, megatron)
    assert [b - a for a, b in zip(plain, priced)] == [2 * HOPPER, 2 * HOPPER]


def test_fsdp2_holds_them_on_every_rank_and_generic_states_none(registry):
    dense = model_from_preset("llama3-8b", registry)
    layout = ParallelSpec(tp=1, pp=2, dp=4, seq_len=4096, global_batch_size=32)
    fsdp2 = registry.runtime("fsdp2")
    plain = _overheads(registry, dense, layout, attrs.evolve(fsdp2, blas_workspaces=None))
    assert [b - a for a, b in zip(plain, _overheads(registry, dense, layout, fsdp2))] == [2 * HOPPER, 2 * HOPPER]
    assert registry.runtime("generic").blas_workspaces is None
    assert registry.runtime("hyperparallel").blas_workspaces is None


def test_the_option_at_zero_is_the_profile(registry):
    megatron = registry.runtime("megatron")
    assert apply_options(megatron, {"cublas_workspace_kib": 0}).blas_workspaces == megatron.blas_workspaces
    assert apply_options(megatron, {"cublas_workspace_kib": 1024}).blas_workspaces.on("ampere") == (
        "compute_dtype", 2 * 2**20)


def test_the_option_on_a_runtime_stating_none_is_refused_naming_it(registry):
    """A runtime that offers the option but states no workspaces (a third party's, say): a one-line error naming the
    option, not an AttributeError; at 0 the option changes nothing and is accepted."""
    from hp_core.errors import ConfigError

    bare = attrs.evolve(registry.runtime("fsdp2"), blas_workspaces=None)
    assert apply_options(bare, {"cublas_workspace_kib": 0}).blas_workspaces is None
    with pytest.raises(ConfigError, match=r"^\$\.runtime\.options\.cublas_workspace_kib: runtime fsdp2 states no PyTorch"):
        apply_options(bare, {"cublas_workspace_kib": 4096})


def test_a_tracker_case_is_priced_without_them_and_a_gpu_case_with_them(registry):
    """PyTorch's FSDP memory tracker runs on fake tensors (no GEMM reaches cuBLAS); a GPU-measured case
    (``method: cuda``) holds the workspaces, as its allocator's peak does."""
    from hp_core.io.job import estimate_job
    from hp_plugins.cases.fsdp2_measured import read_measure_cases

    config = {"model": "llama3-8b", "num_layers": 2, "runtime": "fsdp2", "hardware": "h200",
              "parallel": {"dp": 8, "seq_len": 4096}}
    tracker, gpu = read_measure_cases({"format": "hp-measure/1", "cases": [
        {"name": "tracker", "config": config, "measured": {"peak_bytes": 1}},
        {"name": "gpu", "config": config, "measured": {"method": "cuda", "peak_bytes": 1, "seconds": {"step": 1.0}}},
    ]}, registry)
    (seen,), (held,) = (estimate_job(case.job, registry).stages for case in (tracker, gpu))
    assert (seen.memory.runtime_overhead_bytes, held.memory.runtime_overhead_bytes) == (0, 2 * HOPPER)
    assert held.peak_bytes - seen.peak_bytes == 2 * HOPPER
