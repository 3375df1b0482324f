"""The device memory every built-in runtime reserves outside PyTorch's caching allocator.

``CUDA_CONTEXT_BYTES``: the CUDA context of a PyTorch process (driver state and
the kernels loaded into it), about 300 MB with lazy module loading (CUDA >= 11.7
loads a kernel when it first runs; before it, every library's kernels were
loaded at start, > 1000 MB): PyTorch maintainer's answer in pytorch/pytorch
issue 107667 (2023-08-28). It is not in ``torch.cuda.max_memory_allocated``
nor in ``memory_reserved``, yet takes device memory. Read as 300 MiB (what
``nvidia-smi`` counts). NCCL's communication buffers (cudaMalloc'd by NCCL per
communicator) are not counted: no figure per communicator is sourced here.
"""

from __future__ import annotations

__all__ = ["CUDA_CONTEXT_BYTES"]

CUDA_CONTEXT_BYTES = 300 * 2**20
