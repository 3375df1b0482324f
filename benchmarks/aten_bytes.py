"""What the ATen operator byte counters share (``count_eager_rope_bytes.py``, ``count_torchtitan_moe_bytes.py``).

Both record the operators a forward and backward dispatch (``TorchDispatchMode`` on the CPU) and price each as
CUDA runs it; these are the operators that launch no kernel and the bytes a tensor argument addresses.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NO_KERNEL", "addressed"]

# Operators that launch no kernel on a GPU: views, reshapes, metadata, allocations without a fill.
NO_KERNEL = frozenset({
    "view", "_unsafe_view", "transpose", "t", "expand", "slice", "select", "unsqueeze", "squeeze", "permute", "detach",
    "alias", "as_strided", "split", "split_with_sizes", "unbind", "empty", "empty_like", "empty_strided",
    "_reshape_alias", "lift_fresh", "new_empty", "new_empty_strided", "chunk", "reshape", "flatten", "narrow", "view_as",
    "unflatten", "movedim",
})


def addressed(t: Any) -> int:
    """Bytes of the elements a tensor addresses: a stride-0 (broadcast) dimension counted once."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride:
            n *= size
    return n * t.element_size()
