"""The ``deepep`` collective model: MoE dispatch and combine on DeepEP's normal kernels, everything else as NCCL.

DeepEP (github.com/deepseek-ai/DeepEP) replaces the expert-parallel all-to-all
with its own kernels, which forward tokens from the network domain into the
NVLink domain and reach most of either link's bandwidth. Its published figures
(V1, ``docs/legacy.md`` "Normal kernels with NVLink and RDMA forwarding", at
deepseek-ai/DeepEP@0297fc8, read 2026-12-01) are bottleneck bandwidths on
H800s with one 400 Gb/s CX7 adapter per GPU, at DeepSeek-V3's pre-training
shape (4096 tokens, hidden 7168, top-8): within a node (EP 8) 153 GB/s
dispatch and 158 GB/s combine over NVLink; across nodes 43 GB/s (EP 16),
58 GB/s (EP 32), 51 GB/s (EP 64) dispatch over RDMA.

Those figures are defined on de-duplicated bytes: DeepEP sends a token once
to each rank it reaches (``is_token_in_rank``) and, across nodes, once to
each node (``num_tokens_per_rdma_rank``), and its benchmarks divide exactly
those bytes by the time: ``recv_x.numel() * 2`` over NVLink (every token a
rank receives, its own included) and ``num_rdma_token_sent * hidden * 2``
over RDMA (tokens times the distinct nodes they reach, the sender's own
included; ``tests/legacy/test_intranode.py`` and ``test_internode.py`` at
deepseek-ai/DeepEP@dd758ca). So they are priced here as efficiencies of the
links the hardware states applied to the same bytes (:data:`NVLINK_EFFICIENCY`,
:data:`RDMA_EFFICIENCY`), and carry to another device; on Blackwell the NVLink
figure is DeepEP's own on B200 (:data:`NVLINK_EFFICIENCY_BLACKWELL`, the HybridEP
README's DeepEP rows), the device's architecture being the fabric's. With ``u`` the bytes
of one copy of the rank's tokens (the stated send buffer over ``top_k``, and over
the capacity factor where the layer pads to capacity: DeepEP sends no padding) and
the layer's routing (:class:`hp_core.collectives.Routing`: each token to
``top_k`` of ``E`` experts, balanced, within ``groups_per_token`` of ``groups`` expert
groups where the router is group-limited):

* within a node: ``u D_rank / (B_nvlink * e_nvl)``, ``D_rank`` the distinct
  ranks of the group a token reaches;
* across nodes: ``u D_node / (B_nic * e_rdma)`` over the member's own adapter
  and ``u D_rank / (B_nvlink * e_nvl)`` forwarded over NVLink; the slower link
  sets the pace.

An all-to-all that states no routing (Ulysses context parallelism's) is a
plain exchange: every byte of its send buffer lands on one rank, so ``u
D_rank`` is the buffer itself and ``u D_node`` is too.

No fixed time per call is published for the normal kernels; none is priced.
Every other collective (and an all-to-all on a fabric that does not state its
raw link bandwidths) is priced by :func:`hp_core.collectives.nccl_seconds`.
Every all-to-all of a run priced with this model is taken as DeepEP's: a run
with Ulysses context parallelism (``cp_kind: a2a``) gets its CP all-to-alls
priced so too.
"""

from __future__ import annotations

from hp_core.collectives import CollectiveCall, CollectiveModel, nccl_seconds
from hp_core.markers import hookimpl
from hp_core.specs.timing import Sourced

__all__ = ["DEEPEP", "NVLINK_EFFICIENCY", "NVLINK_EFFICIENCY_BLACKWELL", "RDMA_EFFICIENCY", "deepep_seconds",
           "forwarded_seconds", "hp_collective_models", "nvlink_efficiency"]

_LEGACY = "DeepEP docs/legacy.md, 'Normal kernels with NVLink and RDMA forwarding' (deepseek-ai/DeepEP@0297fc8)"
# 153 GB/s (intranode dispatch, EP 8; combine 158 GB/s, the lower is taken) over the H800's NVLink: 400 GB/s
# both directions on its datasheet, 200 GB/s each way -- the per-direction figure a hardware spec states here.
NVLINK_EFFICIENCY = Sourced(153 / 200, f"{_LEGACY}: 153 GB/s intranode dispatch (EP 8) over the H800's 200 GB/s NVLink per direction (NVIDIA H800 datasheet: 400 GB/s)")
# 43 GB/s (internode dispatch and combine, EP 16, the lowest of EP 16/32/64) over one CX7 400 Gb/s adapter (50 GB/s).
RDMA_EFFICIENCY = Sourced(43 / 50, f"{_LEGACY}: 43 GB/s internode dispatch and combine (EP 16; 58 and 51 GB/s at EP 32 and 64) over a 400 Gb/s CX7 adapter (50 GB/s)")


# Blackwell: the HybridEP README's DeepEP rows on 8 B200s (deepseek-ai/DeepEP@41cad94 docs/README_Hybrid-EP.md, B200
# platform, DeepEP, Torch API, same shape and byte definition): BF16 dispatch 348 and combine 302 GB/s at 16 SMs, 494
# and 420 at 24; at Megatron-Core's default --moe-deepep-num-sms 20 (megatron/training/arguments.py, core_v0.14.0)
# linearly between them, the lower (combine) 361 GB/s, over NVLink 5's 900 GB/s per direction. DeepEP's H800 figure
# carried to NVLink 5 would price it above HybridEP's measured 530.86 on the same B200s, the README's ordering reversed.
NVLINK_EFFICIENCY_BLACKWELL = Sourced(
    (302 + 420) / 2 / 900,
    "DeepEP docs/README_Hybrid-EP.md (deepseek-ai/DeepEP@41cad94), B200, DeepEP Torch API: combine 302 GB/s at 16 SMs and "
    "420 at 24 (dispatch 348 and 494), linear at Megatron-Core's default 20 SMs (--moe-deepep-num-sms, arguments.py "
    "core_v0.14.0): 361 GB/s over NVLink 5's 900 GB/s per direction",
)


def nvlink_efficiency(architecture: str | None) -> Sourced:
    """DeepEP's NVLink efficiency on a device of *architecture*: measured on B200 for ``blackwell``, else the H800's."""
    return NVLINK_EFFICIENCY_BLACKWELL if architecture == "blackwell" else NVLINK_EFFICIENCY


def deepep_seconds(call: CollectiveCall) -> float:
    """An all-to-all on DeepEP's normal kernels; any other call as NCCL's (:mod:`hp_plugins.collectives.deepep`)."""
    return forwarded_seconds(call, nvlink_efficiency(call.fabric.architecture).value, RDMA_EFFICIENCY.value)


def forwarded_seconds(call: CollectiveCall, e_nvlink: float, e_rdma: float) -> float:
    """An all-to-all forwarding tokens from the network into the NVLink domain, a token sent once per rank and per
    node it reaches, at efficiencies *e_nvlink* and *e_rdma* of the links the fabric states; any other call, or one on a fabric that
    does not state the links it needs, as NCCL's (the model of this module's docstring; HybridEP's shares it)."""
    f, n, g, k, nbytes = call.fabric, call.group.ranks, call.group.per_node, call.group.nodes, call.nbytes
    if call.op != "all_to_all" or n <= 1 or nbytes <= 0 or f.intra_link_bandwidth is None and g > 1:
        return nccl_seconds(call)
    if k > 1 and f.nic_link_bandwidth is None:
        return nccl_seconds(call)
    routing = call.routing
    # The bytes DeepEP's figures count: a copy per distinct rank (NVLink) and per distinct node (RDMA) reached.
    per_rank = nbytes if routing is None else routing.token_bytes(nbytes) * routing.distinct(n)
    intra = per_rank / (f.intra_link_bandwidth * e_nvlink) if g > 1 else 0.0
    if k <= 1:
        return intra
    per_node = nbytes if routing is None else routing.token_bytes(nbytes) * routing.distinct(k)
    inter = per_node / (f.nic_link_bandwidth * e_rdma)
    return max(inter, intra)


DEEPEP = CollectiveModel(
    name="deepep",
    seconds=deepep_seconds,
    description="DeepEP's normal dispatch/combine kernels for all-to-alls (NVLink and RDMA forwarding); other collectives as nccl",
    source=f"{NVLINK_EFFICIENCY.source}; Blackwell: {NVLINK_EFFICIENCY_BLACKWELL.source}; {RDMA_EFFICIENCY.source}",
)


@hookimpl
def hp_collective_models():
    yield DEEPEP
