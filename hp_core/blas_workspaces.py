"""PyTorch's own cuBLAS workspaces: what a rank holds for the GEMMs it issues through torch.

A GEMM that runs through PyTorch (``torch.mm``, ``F.linear``, ``torch._scaled_mm``) takes the cuBLAS workspace
PyTorch keeps per issuing thread, device and stream: made on the first GEMM through the CUDA caching allocator (so
``torch.cuda.max_memory_allocated`` counts it) and held for the life of the process; cuBLASLt shares it unless
``TORCH_CUBLASLT_UNIFIED_WORKSPACE=0`` (``aten/src/ATen/cuda/CublasHandlePool.cpp`` at PyTorch main, 2026:
``setCublasWorkspace``, ``getNewWorkspace``, ``getCUDABlasLtWorkspace``; older releases keyed the workspace by
handle and stream, one handle per thread, and gave cuBLASLt a 1 MiB workspace of its own, not priced). Its size is
``CUBLAS_WORKSPACE_CONFIG``'s sum of ``:SIZE_KiB:COUNT`` pairs, else 32 MiB (``:4096:8``) on compute capability 9.x,
10.x and 12.x and 8 MiB + 128 KiB (``:4096:2:16:8``) before (``parseChosenWorkspaceSize``; releases before
Blackwell's support gave the 32 MiB to 9.0 alone). A training step issues GEMMs from two threads: the forward from
the Python thread, the backward from autograd's worker thread for the device (``torch/csrc/autograd/engine.cpp``),
so a rank holds two.

Measured: the H200 FSDP2 steps of ``tests/plugins/data/h200_fsdp2_steps.json`` hold 64 MiB beyond their
parameters and AdamW moments at a step's start (docs/runtimes.md), and Megatron-LM's CI runs, under
``CUBLAS_WORKSPACE_CONFIG=:4096:8``, hold a 66-67 MiB base beyond Transformer Engine's workspaces on their last
pipeline rank, which runs the output layer's GEMMs through torch (docs/megatron_ci.md).

Which GEMMs run through torch is the trainer's: every one under FSDP2 / torchtitan (``every``); under
Megatron-Core with Transformer Engine only those outside TE's modules, the output layer
(``tensor_parallel.ColumnParallelLinear``) and the MoE router's gate (``router_gating_linear``), which are the
GEMMs the layers keep in the compute dtype (``compute_dtype``: :attr:`LayerWork.high_precision_gemms
<hp_core.costs.LayerWork.high_precision_gemms>`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

__all__ = ["BLAS_GEMMS", "DEFAULT_WORKSPACE_BYTES", "BlasWorkspaces", "stage_blas_bytes"]

BLAS_GEMMS = ("every", "compute_dtype")
DEFAULT_WORKSPACE_BYTES = 4096 * 1024 * 8  # :4096:8, compute capability 9.x, 10.x, 12.x
_PRE_HOPPER_BYTES = 4096 * 1024 * 2 + 16 * 1024 * 8  # :4096:2:16:8, before 9.0
_BY_ARCHITECTURE = {"ampere": _PRE_HOPPER_BYTES, "hopper": DEFAULT_WORKSPACE_BYTES,
                    "blackwell": DEFAULT_WORKSPACE_BYTES}


def _positive(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"BlasWorkspaces.{attribute.name} must be a positive int, got {value!r}")


@attrs.frozen
class BlasWorkspaces:
    """A runtime's PyTorch cuBLAS workspaces (module docstring).

    Attributes:
        gemms: Which GEMMs run through torch: ``every`` (every rank holds the workspaces) or ``compute_dtype`` (a
            rank holding a GEMM a layer keeps in the compute dtype).
        threads: Threads issuing them, one workspace each (2: forward and autograd).
        workspace_bytes: One workspace where :attr:`by_architecture` does not name the device's architecture (or
            the run states no device).
        by_architecture: One workspace per :attr:`HardwareSpec.architecture
            <hp_core.specs.hardware.HardwareSpec.architecture>`: PyTorch's default for that compute capability.
    """

    gemms: str = attrs.field(validator=attrs.validators.in_(BLAS_GEMMS))
    threads: int = attrs.field(default=2, validator=_positive)
    workspace_bytes: int = attrs.field(default=DEFAULT_WORKSPACE_BYTES, validator=_positive)
    by_architecture: Mapping[str, int] = attrs.field(factory=lambda: dict(_BY_ARCHITECTURE))

    def on(self, architecture: str | None) -> tuple[str, int]:
        """``(gemms, bytes)`` a rank holds on a device of *architecture* (``None``: not known)."""
        size = self.by_architecture.get(architecture, self.workspace_bytes) if architecture else self.workspace_bytes
        return self.gemms, self.threads * size

    def sized(self, workspace_bytes: int) -> BlasWorkspaces:
        """The same with every workspace *workspace_bytes* (``CUBLAS_WORKSPACE_CONFIG`` stated: it sizes every
        device alike)."""
        return attrs.evolve(self, workspace_bytes=workspace_bytes, by_architecture={})


def stage_blas_bytes(blas: tuple[str, int] | None, works: Iterable[Any]) -> int:
    """The workspace bytes a stage holds (*blas*: :meth:`BlasWorkspaces.on`, ``None`` where the runtime states
    none): all of them under ``every``; under ``compute_dtype`` where one of its layers' work (``LayerWork``, ``None``
    where a kind states none) lists a GEMM it keeps in the compute dtype, else 0."""
    if blas is None:
        return 0
    gemms, size = blas
    if gemms == "every" or any(work is not None and work.high_precision_gemms for work in works):
        return size
    return 0
