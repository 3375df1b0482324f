"""The ``cublas_workspace_kib`` runtime option: the size of PyTorch's own cuBLAS workspaces (:mod:`hp_core.blas_workspaces`).

``CUBLAS_WORKSPACE_CONFIG`` sizes each workspace as the sum of its ``:SIZE_KiB:COUNT`` pairs (``:4096:8``: 32,768 KiB,
as Megatron-LM's CI runs state it), on every device alike; 0, the default, is PyTorch's own size for the device
(``aten/src/ATen/cuda/CublasHandlePool.cpp`` ``parseChosenWorkspaceSize``).
"""

from __future__ import annotations

import re

import attrs

from hp_core.errors import ConfigError
from hp_core.runtime_options import RuntimeOption
from hp_core.types import Runtime

__all__ = ["cublas_workspace_option", "workspace_config_kib"]


@attrs.frozen
class _WorkspaceSize:
    """Sets every workspace of the runtime's :class:`~hp_core.blas_workspaces.BlasWorkspaces` to *value* KiB (0: as
    the profile states them)."""

    def __call__(self, runtime: Runtime, value: int) -> Runtime:
        if not value:
            return runtime
        if runtime.blas_workspaces is None:  # a runtime offering the option without stating the workspaces
            raise ConfigError("$.runtime.options.cublas_workspace_kib",
                              f"runtime {runtime.name} states no PyTorch cuBLAS workspaces (Runtime.blas_workspaces), "
                              "so there is nothing to size; leave the option unset or state them in the runtime")
        return attrs.evolve(runtime, blas_workspaces=runtime.blas_workspaces.sized(value * 1024))


def cublas_workspace_option() -> RuntimeOption:
    """``cublas_workspace_kib``: one PyTorch cuBLAS workspace in KiB, as ``CUBLAS_WORKSPACE_CONFIG`` sizes it."""
    return RuntimeOption(
        "cublas_workspace_kib", "int", 0,
        "PyTorch's own cuBLAS workspace, one per thread issuing GEMMs through torch (forward and autograd: two a "
        "rank), in KiB: CUBLAS_WORKSPACE_CONFIG's sum of :SIZE:COUNT pairs (:4096:8 is 32768); 0: PyTorch's default, "
        "32 MiB from compute capability 9.0 and 8 MiB + 128 KiB before",
        "PyTorch aten/src/ATen/cuda/CublasHandlePool.cpp (parseChosenWorkspaceSize, setCublasWorkspace, "
        "getCUDABlasLtWorkspace); docs/runtimes.md 'PyTorch's cuBLAS workspaces'",
        _WorkspaceSize(), minimum=0,
    )


def workspace_config_kib(text: str) -> int:
    """KiB of one workspace under ``CUBLAS_WORKSPACE_CONFIG=`` *text*: the sum of its ``:SIZE:COUNT`` pairs (SIZE in
    KiB), as ``parseChosenWorkspaceSize`` reads it.

    Raises:
        ValueError: *text* holds no such pair (PyTorch then warns and keeps its default; hp asks for the value).
    """
    pairs = re.findall(r":([0-9]+):([0-9]+)", text)
    if not pairs:
        raise ValueError(f"CUBLAS_WORKSPACE_CONFIG {text!r} holds no :SIZE:COUNT pair; state it as :4096:8 (KiB, count)")
    return sum(int(size) * int(count) for size, count in pairs)
