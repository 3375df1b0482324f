"""The ``hybridep`` collective model: MoE dispatch and combine on NVIDIA's HybridEP kernels, everything else as NCCL.

HybridEP (DeepEP's ``hybrid-ep`` branch, ``deep_ep.HybridEPBuffer``; the
backend Megatron-Core's flex dispatcher runs under
``moe_flex_dispatcher_backend: hybridep``) forwards tokens over RDMA to the
peer GPU of the same local rank on each node they reach, then over NVLink to
the ranks there, a token sent once per node and once per rank.

What its figures count
----------------------
``docs/README_Hybrid-EP.md`` (deepseek-ai/DeepEP@41cad94, read 2026-12-01)
publishes "algorithm bandwidth" at 4096 tokens a rank, hidden 7168, top-8 of 8
local experts a rank, uniform random routing. The benchmark that prints them,
``tests/test_hybrid_ep.py`` (the H100 table entered the README with
deepseek-ai/DeepEP@1dddd19, "Add RDMA support for hybrid-EP", whose test and
``tests/utils.py`` define the bytes as 41cad94's still do), divides by the
call's time:

* NVLink ("NVL"): ``dispatched_hidden.numel() * 2``, the tokens a rank
  receives, each once however many of its experts it reaches, the rank's own
  included (``TorchRef._select_local_tokens``: ``routing_map[:, local
  experts].any(dim=1)``); combine the same bytes;
* network ("IB"): ``count_rdma_send_from_routing_map(...) * HIDDEN_DIM * 2``,
  the rank's tokens times the distinct nodes each reaches, **its own node
  included** (the helper keeps the local node "to align with the
  implementation in the DeepEP"); combine the same bytes;
* FP8 dispatch: those bytes times ``(1 + 4/128) / 2``.

These are DeepEP's own definitions (:mod:`hp_plugins.collectives.deepep`), so
the figures carry to other links as efficiencies on the same de-duplicated
bytes, priced by :func:`~hp_plugins.collectives.deepep.forwarded_seconds`.
Counting the sender's own node is why H100 figures exceed one 400 Gb/s
adapter's 50 GB/s (76.80 GB/s kernel-only at 16 ranks): across 2 nodes about
half the counted copies never leave the node, so the "efficiency" on counted
bytes can exceed 1.

Which entries
-------------
* **Torch API**, not "Kernel Only": a trainer calls the Torch API
  (``buffer.dispatch``/``combine``: the kernel, a device-to-device copy and
  synchronisation, as the test prints).
* **BF16 dispatch**: Megatron-Core's HybridEP path refuses FP8 dispatch
  (``megatron/core/transformer/moe/fused_a2a.py``, ``assert not fp8_dispatch``,
  NVIDIA/Megatron-LM@d98e8a6), and hp states the exchange in the activation
  dtype.
* **The lower of BF16 dispatch and combine**, one figure for both directions,
  as the ``deepep`` model takes.
* **16 SMs**: the published SM count nearest what the trainers configure:
  Megatron-Bridge's performance recipes set ``moe_hybridep_num_sms = 32`` for
  every HybridEP config (``scripts/performance/utils/overrides.py``
  ``_set_common_perf_overrides``, NVIDIA-NeMo/Megatron-Bridge v0.3.0 to
  v0.5.0, e.g. @0fbfe7d v0.4.0), NeMo AutoModel defaults to 24
  (``nemo_automodel/components/moe/megatron/token_dispatcher.py``
  ``MoEConfig.moe_hybridep_num_sms``, NVIDIA-NeMo/Automodel@3746a1a); the H100
  table stops at 16 and the B200 table has only 16.
* **NVLink**: the B200 table (8 ranks, one node): 530.86 GB/s combine (dispatch
  BF16 535.94) over the B200's 900 GB/s NVLink per direction (NVLink 5's 1.8 TB/s
  per GPU both ways, NVIDIA Blackwell datasheet; hp's ``b200`` preset): **0.590**. The
  GB200 table's 8-rank, 16-SM entry (538.44 GB/s combine, 550.10 dispatch)
  agrees. It prices the NVLink leg on every device, the forwarding leg of a
  cross-node exchange included (the H100 table states no NVLink figure).
* **Network**: the H100 table at the group's rank count, or the published
  count (16, 32, 64) nearest it by ratio (the larger on a tie): 53.35 GB/s
  (16 ranks, combine; dispatch 54.47), 47.36 (32, dispatch; combine 52.53),
  41.24 (64, dispatch; combine 46.57), over one 400 Gb/s adapter per GPU
  (50 GB/s). The README states no adapter; one 400 Gb/s ConnectX-7 per GPU is
  the DGX H100's compute fabric (NVIDIA DGX H100 datasheet) and the adapter
  DeepEP's own H800 figures state. The figures fall a fifth from 16 to 64 ranks,
  so one figure for every size would misprice the others.

No fixed time per call is published; none is priced. Every other collective,
an all-to-all on a fabric that does not state its raw link bandwidths (as
``deepep``), and every all-to-all of a run priced with this model (Ulysses CP's
too) follow the ``deepep`` model's conventions with these efficiencies.
"""

from __future__ import annotations

from hp_core.collectives import CollectiveCall, CollectiveModel
from hp_core.markers import hookimpl
from hp_core.specs.timing import Sourced
from hp_plugins.collectives.deepep import forwarded_seconds

__all__ = ["HYBRIDEP", "NVLINK_EFFICIENCY", "RDMA_EFFICIENCY", "hybridep_seconds", "hp_collective_models",
           "rdma_efficiency"]

_README = "DeepEP docs/README_Hybrid-EP.md (deepseek-ai/DeepEP@41cad94), Torch API, 16 SMs, BF16"
# B200, 8 ranks: dispatch (BF16) 535.94 GB/s, combine 530.86 GB/s; the lower over 900 GB/s NVLink per direction.
NVLINK_EFFICIENCY = Sourced(530.86 / 900, f"{_README}, B200 8 ranks: 530.86 GB/s combine (dispatch 535.94) over "
                                          "the B200's 900 GB/s NVLink per direction (NVIDIA Blackwell datasheet: NVLink 5, 1.8 TB/s both ways)")
# H100 "IB Bandwidth", the lower of dispatch (BF16) and combine at each published rank count, over 50 GB/s.
_H100_IB_GB_PER_S = {16: min(54.47, 53.35), 32: min(47.36, 52.53), 64: min(41.24, 46.57)}
RDMA_EFFICIENCY = {
    ranks: Sourced(gb / 50, f"{_README}, H100 {ranks} ranks, IB: {gb} GB/s (the lower of dispatch and combine) over "
                            "one 400 Gb/s adapter per GPU (50 GB/s; DGX H100's ConnectX-7, not stated by the README)")
    for ranks, gb in _H100_IB_GB_PER_S.items()
}


def rdma_efficiency(ranks: int) -> Sourced:
    """The network efficiency at the published rank count nearest *ranks* by ratio (the larger on a tie)."""
    return min(RDMA_EFFICIENCY.items(), key=lambda kv: (max(kv[0] / ranks, ranks / kv[0]), -kv[0]))[1]


def hybridep_seconds(call: CollectiveCall) -> float:
    """An all-to-all on HybridEP's kernels; any other call as NCCL's (:mod:`hp_plugins.collectives.hybridep`)."""
    return forwarded_seconds(call, NVLINK_EFFICIENCY.value, rdma_efficiency(call.group.ranks).value)


HYBRIDEP = CollectiveModel(
    name="hybridep",
    seconds=hybridep_seconds,
    description="NVIDIA HybridEP's dispatch/combine kernels for all-to-alls (RDMA then NVLink forwarding, Torch API, "
                "16 SMs); other collectives as nccl",
    source=f"{NVLINK_EFFICIENCY.source}; " + "; ".join(e.source for e in RDMA_EFFICIENCY.values()),
)


@hookimpl
def hp_collective_models():
    yield HYBRIDEP
