"""Count the kernels an eager trainer launches per layer (docs/time.md, "Overlap and host time").

A host-time figure (``hp_core.specs.overlap.HostOverhead``) needs two numbers: the host seconds per
launched kernel and how many kernels a layer launches. This script measures the second on the CPU,
for the real modules, by recording every ATen operator a layer's forward and backward dispatch
(``TorchDispatchMode``) and dropping those that launch no kernel on a GPU (views, reshapes, empty
allocations, metadata). It needs no GPU; run it by hand:

- ``python benchmarks/count_eager_kernels.py llama`` (needs ``transformers``, the census extra):
  one ``LlamaDecoderLayer`` of transformers in bf16 with SDPA attention.
- ``python benchmarks/count_eager_kernels.py megatron-moe [--experts E] [--topk K]`` (needs
  ``megatron-core``, not a dependency of hp; measured with 0.15.3 on torch 2.13 CPU): Megatron-Core's
  ``MoELayer`` from ``get_gpt_layer_local_spec`` (router, the ``alltoall`` token dispatcher at expert
  parallelism 1, ``SequentialMLP``: one GEMM pair per local expert), ``E`` local experts. The CUDA
  stream and event objects the dispatcher creates are replaced by inert stand-ins (nothing runs on
  a GPU here) and Transformer Engine's router GEMM is switched off.

Each count is taken on the second step (the first allocates gradients, so its backward differs).
The counts are recorded in docs/time.md; no figure of hp is set from them yet.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import sys
from typing import Any

# ATen operators that launch no kernel on a GPU: views and reshapes of existing storage, empty
# allocations, metadata queries.
NO_KERNEL = frozenset({
    "view", "_unsafe_view", "transpose", "t", "expand", "slice", "select", "unsqueeze", "squeeze", "permute",
    "detach", "alias", "as_strided", "split", "split_with_sizes", "unbind", "empty", "empty_like",
    "empty_strided", "_reshape_alias", "lift_fresh", "new_empty", "new_empty_strided", "sym_size", "sym_stride",
    "sym_numel", "is_same_size", "chunk", "reshape", "flatten", "narrow", "view_as", "unflatten", "movedim",
    "resolve_conj", "resolve_neg", "set_",
})
# Operators that read a device value on the host: on a GPU, a device-to-host copy the host waits for. Counted apart.
HOST_SYNC = frozenset({"_local_scalar_dense", "item", "is_nonzero", "equal", "tolist"})


def _counter():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: collections.Counter = collections.Counter()
            self.syncs: collections.Counter = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name in HOST_SYNC:
                self.syncs[name] += 1
            elif name not in NO_KERNEL:
                self.ops[name] += 1
            return func(*args, **(kwargs or {}))

    return Count


def _count(run_forward) -> tuple[Any, Any]:
    """Forward and backward counters (``ops``: kernels, ``syncs``: host reads of device values) of the second of two steps."""
    import torch

    count = _counter()
    for _ in range(2):
        forward, backward = count(), count()
        with forward:
            out = run_forward()
        seed = torch.ones_like(out)
        with backward:
            out.backward(seed)
    return forward, backward


def llama() -> tuple[Any, Any]:
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    config = LlamaConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, intermediate_size=896,
                         num_hidden_layers=1, vocab_size=1000)
    config._attn_implementation = "sdpa"
    layer = LlamaDecoderLayer(config, 0).to(torch.bfloat16)
    x = torch.randn(1, 128, 256, dtype=torch.bfloat16, requires_grad=True)
    positions = torch.arange(128)[None]
    cos, sin = (t.detach() for t in LlamaRotaryEmbedding(config)(x, positions))

    def forward():
        out = layer(x, position_embeddings=(cos, sin), attention_mask=None, position_ids=positions)
        return out[0] if isinstance(out, tuple) else out

    return _count(forward)


class _Inert:
    """Stands in for ``torch.cuda.Stream`` and ``torch.cuda.Event`` on a machine without CUDA."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: _Inert()


def megatron_moe(experts: int, topk: int) -> tuple[Any, Any]:
    import torch

    torch.cuda.Stream = _Inert
    torch.cuda.Event = _Inert
    torch.cuda.current_stream = lambda *args, **kwargs: _Inert()
    torch.cuda.stream = lambda *args, **kwargs: contextlib.nullcontext()
    torch.cuda.current_device = lambda: "cpu"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state
    import megatron.core.transformer.moe.moe_utils as moe_utils

    moe_utils.te_general_gemm = None
    parallel_state.initialize_model_parallel(1, 1, expert_model_parallel_size=1)
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig

    config = TransformerConfig(
        num_layers=1, hidden_size=64, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=128,
        num_moe_experts=experts, moe_router_topk=min(topk, experts), moe_ffn_hidden_size=32,
        moe_token_dispatcher_type="alltoall", moe_grouped_gemm=False, gated_linear_unit=True,
        activation_func=torch.nn.functional.silu, add_bias_linear=False, normalization="RMSNorm",
        bf16=True, params_dtype=torch.bfloat16, use_cpu_initialization=True, perform_initialization=False,
        moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-3, moe_permute_fusion=False)
    spec = get_gpt_layer_local_spec(num_experts=experts, moe_grouped_gemm=False, normalization="RMSNorm")
    moe = build_module(spec, config=config, layer_number=1).to(torch.bfloat16).mlp
    for parameter in moe.parameters():
        torch.nn.init.normal_(parameter, std=0.02)
    x = torch.randn(64, 1, 64, dtype=torch.bfloat16)

    def forward():
        out = moe(x.detach().requires_grad_(True))
        return out[0] if isinstance(out, tuple) else out

    return _count(forward)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", choices=("llama", "megatron-moe"))
    parser.add_argument("--experts", type=int, default=16, help="local experts (megatron-moe)")
    parser.add_argument("--topk", type=int, default=8, help="experts per token (megatron-moe)")
    args = parser.parse_args(argv)
    try:
        forward, backward = llama() if args.module == "llama" else megatron_moe(args.experts, args.topk)
    except ImportError as error:
        print(f"count_eager_kernels: {error.name or error} is not installed; see the module docstring", file=sys.stderr)
        return 2
    for direction, counted in (("forward", forward), ("backward", backward)):
        ops, syncs = counted.ops, counted.syncs
        print(f"{direction}: {sum(ops.values())} kernels; GEMMs {ops['mm'] + ops['bmm'] + ops['addmm']}; "
              f"host reads of device values {sum(syncs.values())}; "
              + ", ".join(f"{name} {n}" for name, n in (ops + syncs).most_common()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
