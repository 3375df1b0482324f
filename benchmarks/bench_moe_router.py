"""GPU time of Megatron-Core 0.14's MoE router kernels at DeepSeek-V2's shape (the router figures
of ``hp_plugins/runtimes/timing_profiles.py``).

Runs the router path of ``megatron/core/transformer/moe/router.py`` ``TopKRouter.routing`` with
the functions of ``megatron/core/transformer/moe/moe_utils.py`` at Megatron-LM commit
``23e00ed0963c35382dfe8a5a94fb3cda4d21e133`` (core 0.14.0), as ``pretrain_deepseekv2.py`` runs
it for the measured case in ``tests/plugins/data/megatron_measured.json``: bf16 gating linear, pre-softmax
scores, 8 groups with group top-3, top-6 with scaling factor 16, token dropping at capacity factor
1 with padding to capacity, and the sequence auxiliary loss (coefficient 3e-3) attached with
``MoEAuxLossAutoScaler``; 4096 tokens, hidden 5120, 160 experts. It sums the kernel times
``torch.profiler`` records for one forward and one forward plus backward (GPU busy time: in a
training step the host runs ahead of these small kernels).

Usage: ``MEGATRON_MOE_UTILS=/path/to/moe_utils.py python benchmarks/bench_moe_router.py`` on a
machine with a CUDA GPU and PyTorch. ``moe_utils.py`` is loaded with stub ``megatron.core``
modules (its module-level imports of ``parallel_state`` and ``process_groups_config`` are unused
on this path; Transformer Engine is not needed: ``moe_router_fusion`` is off by default).

Measured on one H200 (torch 2.11.0+cu130): forward 53 kernels, 366.3 us, of which the gating
GEMM and its split-K reduce 21.9 us; forward plus backward 79 kernels, 488.3 us, of which the
gating GEMM's two gradient GEMMs 39.1 us and the accumulation into the benchmark's leaf input's
``.grad`` 30.6 us. Largest kernels: ``sbtopk::gatherTopK`` (the capacity top-k over the token
dimension, the group and expert top-k, the auxiliary loss's top-k) and ``bitonicSortKVInPlace``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import types

import torch
from torch.profiler import ProfilerActivity, profile

T, H, E, K = 4096, 5120, 160, 6


def _load_moe_utils(path: str):
    for name in ("megatron", "megatron.core"):
        sys.modules.setdefault(name, types.ModuleType(name))
    ps = types.ModuleType("megatron.core.parallel_state")
    pg = types.ModuleType("megatron.core.process_groups_config")
    pg.ModelCommProcessGroups = type("ModelCommProcessGroups", (), {})
    sys.modules["megatron.core.parallel_state"] = ps
    sys.modules["megatron.core.process_groups_config"] = pg
    sys.modules["megatron.core"].parallel_state = ps
    spec = importlib.util.spec_from_file_location("moe_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    mu = _load_moe_utils(os.environ["MEGATRON_MOE_UTILS"])
    torch.manual_seed(0)
    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    w = (torch.randn(E, H, device="cuda", dtype=torch.bfloat16) * 0.02).requires_grad_(True)
    tracker = torch.zeros(4, device="cuda")
    grad = torch.randn(T, E, device="cuda", dtype=torch.float32)

    def router():
        logits = torch.nn.functional.linear(x, w).view(-1, E)  # router_gating_linear, router dtype = input's
        probs, rmap = mu.topk_routing_with_score_function(
            logits, K, use_pre_softmax=True, num_groups=8, group_topk=3, scaling_factor=16.0,
            score_function="softmax", expert_bias=None, fused=False)
        probs, rmap = mu.apply_router_token_dropping(
            probs, rmap, router_topk=K, capacity_factor=1.0, drop_policy="probs", pad_to_capacity=True)
        rmap_aux, scores_aux = mu.compute_routing_scores_for_aux_loss(logits, K, "softmax", fused=False)
        tokens_per_expert = rmap_aux.reshape(T, -1).sum(dim=0)
        aux = mu.switch_load_balancing_loss_func(
            probs=scores_aux.reshape(T, -1), tokens_per_expert=tokens_per_expert, total_num_tokens=T,
            topk=K, num_experts=E, moe_aux_loss_coeff=3e-3, fused=False)
        tracker[1] += (aux / 3e-3).detach()  # save_to_aux_losses_tracker
        return mu.MoEAuxLossAutoScaler.apply(probs, aux)

    def forward_backward():
        router().backward(grad)

    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for name, fn in (("forward", router), ("forward_backward", forward_backward)):
        fn(), fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
        result[name] = {
            "kernels": len(kernels),
            "us": sum(e.device_time for e in kernels),
            "largest": sorted(((round(e.device_time, 1), e.name[:80]) for e in kernels), reverse=True)[:10],
        }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0],
                            epilog="Set MEGATRON_MOE_UTILS to the path of Megatron-LM's moe_utils.py; needs a CUDA GPU.").parse_args()
    if "MEGATRON_MOE_UTILS" not in os.environ:
        sys.exit("bench_moe_router.py: set MEGATRON_MOE_UTILS to the path of Megatron-LM's megatron/core/transformer/moe/moe_utils.py")
    main()
