"""Count the HBM bytes torchtitan's eager MoE layer moves to route its tokens, per routed row and per token.

Run: ``python benchmarks/count_torchtitan_moe_bytes.py`` (needs ``torch``, the census extra; no GPU).

torchtitan is not a dependency of hp, so the op sequence of its MoE layer between the router and the layer's output
is restated here, op for op, from two commits (read, not copied):

- ``2510``: pytorch/torchtitan@82a9530f6 (2025-10-02), ``torchtitan/models/moe.py`` ``MoE.forward`` and
  ``TokenReorderer`` (``argsort`` of the expert ids, the scores gathered into expert order, ``torch.gather`` of the
  tokens, the score multiply in fp32 after the experts, ``scatter_add`` into the shared experts' output) with
  ``torchtitan/distributed/expert_parallel.py`` ``ExpertParallel`` (the dispatch and combine ``all_to_all_single``)
  and its ``expert_parallel`` wrapper of the grouped experts (``vstack`` of a zero row, the gather
  ``x[permuted_indices]`` into expert order padded to ``TOKEN_GROUP_ALIGN_SIZE_M`` = 8 rows per local expert, the
  scatter back ``out_unpermuted[permuted_indices] = out``, the zero row sliced off);
- ``2606``: pytorch/torchtitan@6b9602339 (2026-06-12), ``torchtitan/models/common/token_dispatcher.py``
  ``AllToAllTokenDispatcher`` (``_local_reorder``: ``x[token_indices]``; ``_permute``: the rank-major to
  expert-major gather, no padding; ``_unpermute``; ``combine``: a zero-filled output, the fp32 score multiply,
  ``torchtitan/ops/scatter_add.py`` ``deterministic_scatter_add``, whose backward is a ``torch.gather``) and
  ``torchtitan/models/common/moe.py`` ``MoE.forward`` (its routing map and the routed plus shared outputs' add).

Both as DeepSeek-V3 16B sets them: softmax scores, ``score_before_experts`` false, no route norm, expert bias
on. Left out, priced elsewhere: the router (its gating GEMM and the kernels over its ``tokens x experts`` scores,
the device's ``moe_router_*_seconds``), the two all-to-alls (collectives), and the experts (grouped GEMMs; their
SiLU and gate product are the layer's counted eager ops), each a stand-in here whose ops are not counted.

Every ATen operator the forward and the backward dispatch (``TorchDispatchMode`` on the CPU) is priced as CUDA runs
it, at the bytes of the elements it reads and writes, each access counted (the tensors routed, 64 MiB and more a
layer on the rows this serves, exceed an H100's 50 MB L2, and the gathers and atomics reach them in expert order,
scattered over tokens), a broadcast (stride-0) dimension once:

- ``gather`` and ``index``: read the gathered rows, write them; ``index_put_`` without accumulation: read the values,
  write them into the indexed rows;
- ``scatter_add`` (2510, no deterministic mode: ``gpuAtomicAdd``): read the source, and read and write the
  destination element of each source element; out of place it first copies its input (read and write);
- an accumulating ``index_put_`` (every accumulating index put on CUDA, ``_index_put_impl_`` ->
  ``index_put_with_sort_stub``, so the backward of ``x[idx]``) and ``scatter_add`` under deterministic algorithms
  (2606's ``deterministic_scatter_add``: ``_scatter_via_index_put``, since pytorch/pytorch#156744 (2025-06) an
  ``index_put_`` of the broadcast index): read the values, sort the indices (one read and write of int64 keys and
  positions), and read and write each destination row once (the sorted duplicates are summed back to back);
- autograd's ``gather_backward`` and ``index_backward`` fill a zero gradient and accumulate into it in place; under a
  dispatch mode they take their out-of-place branch (the mode makes tensors subclass-like), counted as the in-place
  kernel CUDA runs; ``slice_backward`` fills its whole output and copies the slice into it.

Reported per element of the width ``h``, bf16 activations: bytes per routed row and per token, and the alignment
padding's bytes per layer (2510), solved from three token counts and top-k values; apart, the narrow bytes (indices,
scores, the routing map: a few hundred bytes per routed row, not per element of ``h``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the shared counter helpers (aten_bytes.py), also when a test loads this file
    sys.path.insert(0, str(HERE))

from aten_bytes import NO_KERNEL, addressed as _addressed  # noqa: E402

# Operators that only write their output.
FILLS = frozenset({"zeros", "zeros_like", "new_zeros", "full", "full_like", "new_full", "ones", "ones_like", "arange",
                   "fill_", "zero_"})
HIDDEN, EXPERTS, EP = 40, 8, 2  # a width no other dimension takes; E experts over EP simulated ranks
ALIGN = 8  # TOKEN_GROUP_ALIGN_SIZE_M at 82a9530f6 (bf16)
# (tokens, top-k): three points to solve bytes = a * rows + b * tokens + c.
POINTS = ((64, 2), (128, 2), (128, 4))

_state = {"skip": False, "deterministic": False}


def _row_bytes(t: Any) -> int:
    return (t.numel() // t.shape[0]) * t.element_size() if t.dim() else t.element_size()


def _recorder(backward: bool):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    def wide(t) -> bool:
        return t.is_floating_point() and t.dim() >= 2 and t.shape[-1] == HIDDEN

    class Record(TorchDispatchMode):
        """Bytes per operator: ``wide`` those of tensors ``h`` wide (tokens, routed rows), ``narrow`` the rest."""

        def __init__(self) -> None:
            super().__init__()
            self.wide, self.narrow, self.ops = 0, 0, []

        def _add(self, t, nbytes: int) -> None:
            if wide(t):
                self.wide += nbytes
            else:
                self.narrow += nbytes

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = func.overloadpacket.__name__
            if _state["skip"] or name in NO_KERNEL:
                return out
            before = self.wide
            self._price(name, args, kwargs, out)
            self.ops.append((name, self.wide - before))
            return out

        def _price(self, name, args, kwargs, out) -> None:
            outputs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor)]
            if name in FILLS:
                for o in outputs:
                    self._add(o, _addressed(o))
            elif name == "copy_":
                self._add(args[1], _addressed(args[1]))
                self._add(args[0], _addressed(args[0]))
            elif name in ("gather", "index"):
                source = args[0]
                for i in tree_leaves(args[1:]):
                    if isinstance(i, torch.Tensor):
                        self._add(i, _addressed(i))
                for o in outputs:
                    self._add(source, o.numel() * source.element_size())  # the gathered elements, read
                    self._add(o, _addressed(o))
            elif name in ("index_put_", "index_put", "_index_put_impl_"):
                self_, indices, values = args[0], [i for i in args[1] if i is not None], args[2]
                accumulate = bool(args[3]) if len(args) > 3 else bool(kwargs.get("accumulate", False))
                for i in indices:
                    self._add(i, _addressed(i))
                self._add(values, _addressed(values))
                if name == "index_put" and not backward:  # out of place: a copy first
                    self._add(self_, 2 * _addressed(self_))
                if accumulate:  # CUDA: index_put_with_sort_stub
                    for i in indices:
                        self._add(i, 4 * i.numel() * 8)  # the sort: int64 keys and positions, read and written
                    rows = int(torch.unique(indices[0]).numel())
                    self._add(self_, 2 * rows * _row_bytes(self_))
                else:
                    self._add(self_, indices[0].numel() * _row_bytes(self_))
            elif name in ("scatter_add", "scatter_add_"):
                self_, index, src = args[0], args[2], args[3]
                self._add(index, _addressed(index))
                self._add(src, _addressed(src))
                if name == "scatter_add" and not backward:  # out of place: a copy first
                    self._add(self_, 2 * _addressed(self_))
                if _state["deterministic"]:  # _scatter_via_index_put -> a sorted accumulating index_put_
                    rows = int(torch.unique(index[:, 0]).numel())
                    self._add(index, 4 * index.shape[0] * 8)
                    self._add(self_, 2 * rows * _row_bytes(self_))
                else:  # gpuAtomicAdd: each source element reads and writes its destination element
                    self._add(self_, 2 * _addressed(src))
            elif name == "slice_backward":  # a fill of the whole output, then a copy of the slice into it
                for o in outputs:
                    self._add(o, _addressed(o))
                self._add(args[0], 2 * _addressed(args[0]))
            else:
                for a in tree_leaves((args, kwargs)):
                    if isinstance(a, torch.Tensor):
                        self._add(a, _addressed(a))
                for o in outputs:
                    self._add(o, _addressed(o))

    return Record


def _stand_ins():
    """The all-to-all and the experts: a copy each way whose ops are not counted (priced elsewhere)."""
    import torch

    def uncounted_clone(t):
        _state["skip"] = True
        try:
            return t.clone()
        finally:
            _state["skip"] = False

    class Uncounted(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return uncounted_clone(x)

        @staticmethod
        def backward(ctx, grad):
            return uncounted_clone(grad)

    class DeterministicScatterAdd(torch.autograd.Function):
        """torchtitan/ops/scatter_add.py at 6b9602339: scatter_add under deterministic algorithms; backward
        passes the output gradient through and gathers the source's."""

        @staticmethod
        def forward(ctx, out, index, src):
            ctx.save_for_backward(index)
            _state["deterministic"] = True
            try:
                return out.scatter_add(0, index, src)
            finally:
                _state["deterministic"] = False

        @staticmethod
        def backward(ctx, grad):
            (index,) = ctx.saved_tensors
            return grad, None, torch.gather(grad, 0, index)

    return Uncounted.apply, DeterministicScatterAdd.apply


def _permute_indices_2510(counts, experts_per_rank: int, ranks: int, max_len: int):
    """generate_permute_indices (torchtitan/experiments/kernels/moe/indices.py at 82a9530f6), a Triton kernel over
    the (ranks * experts,) counts: for each local expert, its rows from each rank in turn, each expert's group
    padded with -1 (the appended zero row) to a multiple of ALIGN rows."""
    import torch

    starts = torch.cumsum(counts, 0) - counts
    totals = counts.view(ranks, -1).sum(0).clamp_min(ALIGN)
    sizes = (totals + ALIGN - 1) // ALIGN * ALIGN
    offsets = torch.cumsum(sizes, 0) - sizes
    out = torch.full((max_len,), -1, dtype=torch.int64)
    for e in range(experts_per_rank):
        at = int(offsets[e])
        for r in range(ranks):
            i = r * experts_per_rank + e
            n = int(counts[i])
            out[at:at + n] = torch.arange(int(starts[i]), int(starts[i]) + n)
            at += n
    return out


def moe_2510(x, shared, scores, ids):
    """torchtitan's MoE at 82a9530f6 from the router's outputs to the layer's output (module docstring)."""
    import torch

    uncounted, _ = _stand_ins()
    T, h = x.shape
    k = ids.shape[1]
    counts = torch.histc(ids.view(-1).float(), bins=EXPERTS, min=0, max=EXPERTS)  # TokenReorderer
    order = torch.argsort(ids.view(-1), stable=True)
    scores_sorted = scores.view(-1)[order]
    index = (order // k).reshape(-1, 1).expand(-1, h)
    routed = torch.gather(x, dim=0, index=index)
    routed = uncounted(routed)  # ExpertParallel._token_dispatch: all_to_all_single
    local = EXPERTS // EP
    _state["skip"] = True  # generate_permute_indices: a Triton kernel on the counts, under no_grad
    max_len = (routed.shape[0] + local * ALIGN + ALIGN - 1) // ALIGN * ALIGN
    permuted = _permute_indices_2510(counts.long(), local, EP, max_len)
    _state["skip"] = False
    padded = torch.vstack((routed, routed.new_zeros((routed.shape[-1]))))
    shape = padded.shape
    padded = padded[permuted, :]
    out = uncounted(padded)  # the grouped experts
    unpermuted = out.new_empty(shape)
    unpermuted[permuted, :] = out
    out = unpermuted[:-1]
    out = uncounted(out)  # ExpertParallel._token_combine: all_to_all_single
    out = (out.to(torch.float32) * scores_sorted.reshape(-1, 1)).to(x.dtype)
    return shared.scatter_add(dim=0, index=index, src=out)


def moe_2606(x, shared, scores, ids):
    """torchtitan's MoE at 6b9602339 (AllToAllTokenDispatcher) from the router's outputs to the layer's output."""
    import torch

    uncounted, deterministic_scatter_add = _stand_ins()
    T, h = x.shape
    k = ids.shape[1]
    routing_map = torch.zeros((T, EXPERTS), dtype=torch.bool).scatter_(-1, ids, True)  # MoE.forward
    counts = routing_map.sum(dim=0)
    order = torch.argsort(ids.view(-1), stable=True)  # _local_reorder
    scores_sorted = scores.view(-1)[order]
    tokens = order // k
    routed = x[tokens]
    routed = uncounted(routed)  # all_to_all_single_autograd
    local = EXPERTS // EP  # _permute: rank-major to expert-major
    matrix = counts.view(EP, local)
    starts = (counts.cumsum(0) - counts).view(EP, local).t().reshape(-1)
    lengths = matrix.t().reshape(-1)
    segments = torch.arange(lengths.shape[0]).repeat_interleave(lengths, output_size=routed.shape[0])
    out_starts = lengths.cumsum(0) - lengths
    permuted = starts[segments] + torch.arange(segments.shape[0]) - out_starts[segments]
    shape = routed.shape
    routed = routed[permuted, :]
    out = uncounted(routed)  # the grouped experts
    unpermuted = out.new_empty(shape)  # _unpermute
    unpermuted[permuted, :] = out
    out = uncounted(unpermuted)  # all_to_all_single_autograd
    combined = torch.zeros(T, h, dtype=x.dtype)
    out = (out.to(torch.float32) * scores_sorted.reshape(-1, 1)).to(out.dtype)
    combined = deterministic_scatter_add(combined, tokens.reshape(-1, 1).expand(-1, h), out)
    return combined + shared  # MoE.forward: routed plus shared experts' output


def _measure(layer, tokens: int, top_k: int) -> tuple[int, int, int, int]:
    """(forward wide, backward wide, forward narrow, backward narrow) bytes of one layer, the second of two runs."""
    import torch

    generator = torch.Generator().manual_seed(tokens * 10 + top_k)
    ids = torch.stack([torch.randperm(EXPERTS, generator=generator)[:top_k] for _ in range(tokens)])
    x0 = torch.randn(tokens, HIDDEN, generator=generator).to(torch.bfloat16)
    shared0 = torch.randn(tokens, HIDDEN, generator=generator).to(torch.bfloat16)
    scores0 = torch.rand(tokens, top_k, generator=generator)
    record = _recorder(False), _recorder(True)
    for _ in range(2):
        # The shared experts' output takes the layer's output gradient as it is (scatter_add's and the add's
        # gradient for it is the output's, no kernel); a leaf here would copy it into .grad: not a leaf.
        x, scores = (t.detach().requires_grad_(True) for t in (x0, scores0))
        shared = shared0
        forward, backward = record[0](), record[1]()
        with forward:
            out = layer(x, shared, scores, ids)
        seed = torch.ones_like(out)
        with backward:
            torch.autograd.backward(out, seed)
    return forward.wide, backward.wide, forward.narrow, backward.narrow


def _solve(values: list[float]) -> tuple[float, float, float]:
    """(a, b, c) of ``a * rows + b * tokens + c`` through the three POINTS."""
    (t1, k1), (t2, k2), (t3, k3) = POINTS
    rows = [t * k for t, k in POINTS]
    # Two differences eliminate c: (rows, tokens) deltas against the first point.
    r2, n2, v2 = rows[1] - rows[0], t2 - t1, values[1] - values[0]
    r3, n3, v3 = rows[2] - rows[0], t3 - t1, values[2] - values[0]
    det = r2 * n3 - r3 * n2
    a = (v2 * n3 - v3 * n2) / det
    b = (r2 * v3 - r3 * v2) / det
    c = values[0] - a * rows[0] - b * t1
    return tuple(round(v, 9) + 0.0 for v in (a, b, c))  # exact in bytes; no "-0"


def count(form: str) -> dict[str, tuple[float, float, float]]:
    """Bytes per element of h: {'forward': (per routed row, per token, per layer), 'backward': ...}, and the
    narrow bytes per routed row and token (not per element)."""
    layer = {"2510": moe_2510, "2606": moe_2606}[form]
    measured = [_measure(layer, t, k) for t, k in POINTS]
    found = {}
    for i, key in enumerate(("forward", "backward")):
        a, b, c = _solve([m[i] for m in measured])
        found[key] = (a / HIDDEN, b / HIDDEN, c / HIDDEN)
    for i, key in enumerate(("forward_narrow", "backward_narrow")):
        found[key] = _solve([m[2 + i] for m in measured])
    return found


def main() -> int:
    try:
        import torch  # noqa: F401
    except ImportError as error:
        print(f"count_torchtitan_moe_bytes: {error.name or error} is not installed; see the module docstring",
              file=sys.stderr)
        return 2
    for form, commit in (("2510", "82a9530f6"), ("2606", "6b9602339")):
        found = count(form)
        for key in ("forward", "backward"):
            row, token, layer = found[key]
            narrow_row, narrow_token, _ = found[f"{key}_narrow"]
            print(f"torchtitan@{commit} {key}: {row:g} bytes per routed row, {token:g} per token, {layer:g} per layer "
                  f"(alignment padding), per element of h; besides, {narrow_row:g} narrow bytes per routed row and "
                  f"{narrow_token:g} per token (indices, scores, routing map)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
