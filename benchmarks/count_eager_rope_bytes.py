"""Measure the HBM bytes eager PyTorch moves per rotated element of q and k for the rotary embedding.

Run: ``python benchmarks/count_eager_rope_bytes.py`` (needs ``torch`` and ``transformers``, the census extra; no GPU).

The counts :data:`hp_plugins.kit.eager.EAGER_ROPE_BYTES` states are read off the source; this script checks them
on the real operators. It records every ATen operator one rotary embedding's forward and backward dispatch
(``TorchDispatchMode``, the second of two steps) and adds, per operator that launches a kernel on a GPU, the
bytes of the elements its tensor arguments address (a broadcast dimension, stride 0, counted once) and of its
outputs. ``slice_backward`` is counted as CUDA runs it (``aten/src/ATen/native/TensorShape.cpp``: a zero-filled
gradient of the whole input, then a copy of the slice's gradient into it): a fill writing the output and a
copy reading and writing the slice. Reported per rotated element of q and k, and apart, the position tables'
reads (cos and sin, ``freqs_cis``), which scale with tokens, not with heads. A tensor computed from the tables
alone (a cast, a conjugate made real) is a table too, and is kept alive until the measurement ends, so that no
later tensor reusing its freed address is taken for one.

Three forms, on a bf16 q of ``A`` heads and k of ``G`` heads:

- transformers' ``apply_rotary_pos_emb`` (``models/llama/modeling_llama.py``, imported from the installed
  package: measured with 5.24.0), with the bf16 cos and sin ``LlamaRotaryEmbedding`` returns;
- torchtitan's complex multiply (``torchtitan/models/llama3/model/model.py`` ``apply_rotary_emb`` at
  pytorch/torchtitan@0cfbd0b3, not a dependency of hp, so restated here op for op: q and k cast to fp32,
  viewed as complex pairs, multiplied by the complex64 ``freqs_cis`` of each position, viewed back as real
  and cast to q's dtype);
- NeMo AutoModel's chunk-and-concatenate form (``nemo_automodel/components/models/gpt_oss/layers.py``
  ``_apply_rotary_emb`` at NVIDIA-NeMo/Automodel@8d9bfb90e, which its Qwen3 MoE model imports; not a dependency
  of hp, so restated here op for op: the fp32 cos and sin halves of ``freqs_cis`` cast to q's dtype, q chunked
  into its two halves ``x1`` and ``x2``, ``x1 cos - x2 sin`` and ``x2 cos + x1 sin``, each of two multiplies and
  an add, concatenated back).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the shared counter helpers (aten_bytes.py), also when a test loads this file
    sys.path.insert(0, str(HERE))

from aten_bytes import NO_KERNEL as _VIEWS, addressed as _addressed  # noqa: E402

# Operators that launch no kernel on a GPU (aten_bytes.NO_KERNEL; a conjugate view resolved later).
NO_KERNEL = _VIEWS | {"view_as_real", "view_as_complex", "conj", "_conj", "_neg_view", "resolve_neg"}
BATCH, SEQ, HEADS, KV_HEADS, HEAD_DIM = 2, 64, 8, 2, 32


def _recorder(table_ids: set[int], kept: list):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Record(TorchDispatchMode):
        """Bytes per operator: ``elements`` those of q and k's data, ``tables`` the position tables' reads."""

        def __init__(self) -> None:
            super().__init__()
            self.elements, self.tables = 0, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name in NO_KERNEL:
                return out
            inputs = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
            outputs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor)]
            if name == "slice_backward":  # a fill of the whole output, then a copy of the slice into it
                self.elements += sum(_addressed(o) for o in outputs) + 2 * sum(_addressed(a) for a in inputs)
                return out
            tables = [a for a in inputs if a.untyped_storage().data_ptr() in table_ids]
            self.tables += sum(_addressed(a) for a in tables)
            self.elements += sum(_addressed(a) for a in inputs if a.untyped_storage().data_ptr() not in table_ids)
            if inputs and len(tables) == len(inputs):  # computed from the tables alone (a conjugate made real): a table
                table_ids.update(o.untyped_storage().data_ptr() for o in outputs)
                kept.extend(outputs)  # alive until the measurement ends: no later tensor takes its address
                self.tables += sum(_addressed(o) for o in outputs)
            else:
                self.elements += sum(_addressed(o) for o in outputs)
            return out

    return Record


def _measure(rotate, q, k, tables) -> tuple[float, float, float, float]:
    """(forward, backward) bytes per rotated element, then the tables' (forward, backward), of the second of two steps."""
    import torch

    ids = {t.untyped_storage().data_ptr() for t in tables}
    kept: list = []
    record = _recorder(ids, kept)
    elements = q.numel() + k.numel()
    for _ in range(2):
        qq, kk = q.detach().requires_grad_(True), k.detach().requires_grad_(True)
        forward, backward = record(), record()
        with forward:
            out_q, out_k = rotate(qq, kk)
        seeds = (torch.ones_like(out_q), torch.ones_like(out_k))
        with backward:
            torch.autograd.backward((out_q, out_k), seeds)
    return (forward.elements / elements, backward.elements / elements, forward.tables / elements,
            backward.tables / elements)


def transformers_rotate_half() -> tuple[float, float, float, float]:
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = LlamaConfig(hidden_size=HEADS * HEAD_DIM, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS)
    x = torch.zeros(BATCH, SEQ, HEADS * HEAD_DIM, dtype=torch.bfloat16)
    cos, sin = (t.detach() for t in LlamaRotaryEmbedding(config)(x, torch.arange(SEQ)[None].expand(BATCH, SEQ)))
    q = torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, dtype=torch.bfloat16)
    k = torch.randn(BATCH, KV_HEADS, SEQ, HEAD_DIM, dtype=torch.bfloat16)
    return _measure(lambda a, b: apply_rotary_pos_emb(a, b, cos, sin), q, k, (cos, sin))


def torchtitan_complex() -> tuple[float, float, float, float]:
    import torch

    angles = torch.outer(torch.arange(SEQ).float(), 1.0 / 10000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
    freqs_cis = torch.polar(torch.ones_like(angles), angles)  # complex64, one row per position
    broadcast = freqs_cis.view(1, SEQ, 1, HEAD_DIM // 2)

    def rotate(a, b):
        pairs_a = torch.view_as_complex(a.float().reshape(*a.shape[:-1], -1, 2))
        pairs_b = torch.view_as_complex(b.float().reshape(*b.shape[:-1], -1, 2))
        out_a = torch.view_as_real(pairs_a * broadcast).flatten(3)
        out_b = torch.view_as_real(pairs_b * broadcast).flatten(3)
        return out_a.type_as(a), out_b.type_as(b)

    q = torch.randn(BATCH, SEQ, HEADS, HEAD_DIM, dtype=torch.bfloat16)
    k = torch.randn(BATCH, SEQ, KV_HEADS, HEAD_DIM, dtype=torch.bfloat16)
    return _measure(rotate, q, k, (freqs_cis,))


def automodel_chunk_cat() -> tuple[float, float, float, float]:
    import torch

    angles = torch.outer(torch.arange(SEQ).float(), 1.0 / 10000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
    # The model's table: fp32 [cos, sin] per position, (batch, sequence, head_dim), split into its halves per layer.
    freqs_cis = torch.cat([angles.cos(), angles.sin()], dim=-1)[None].expand(BATCH, SEQ, HEAD_DIM).contiguous()
    cos, sin = freqs_cis.split(HEAD_DIM // 2, dim=-1)

    def rotate_one(x):
        c, s = cos.unsqueeze(-2).to(x.dtype), sin.unsqueeze(-2).to(x.dtype)
        x1, x2 = torch.chunk(x, 2, dim=-1)
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)

    q = torch.randn(BATCH, SEQ, HEADS, HEAD_DIM, dtype=torch.bfloat16)
    k = torch.randn(BATCH, SEQ, KV_HEADS, HEAD_DIM, dtype=torch.bfloat16)
    return _measure(lambda a, b: (rotate_one(a), rotate_one(b)), q, k, (freqs_cis,))


def main() -> int:
    try:
        found = {"rotate_half": transformers_rotate_half(), "complex": torchtitan_complex(),
                 "chunk_cat": automodel_chunk_cat()}
    except ImportError as error:
        print(f"count_eager_rope_bytes: {error.name or error} is not installed; see the module docstring", file=sys.stderr)
        return 2
    for form, (fwd, bwd, table_fwd, table_bwd) in found.items():
        print(f"{form}: forward {fwd:g} bytes per rotated element, backward {bwd:g}; position tables besides: "
              f"forward {table_fwd:g}, backward {table_bwd:g} ({HEADS} + {KV_HEADS} heads of {HEAD_DIM}, batch {BATCH})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
