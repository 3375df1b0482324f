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
``tests/test_hybrid_ep.py`` (the H100 table entered the repository with
deepseek-ai/DeepEP@1dddd19, "Add RDMA support for hybrid-EP", in the root
``Hybrid-EP_Implementation.md`` that 7febc6e renamed to ``docs/README_Hybrid-EP.md``;
the B200 figures came with 6ad6896's ``tests/test_mnnvlink_hybridep.py``, on the
same bytes; the test and ``tests/utils.py`` define the bytes as 41cad94's still do,
41cad94 averaging the time over ranks where 1dddd19 printed each rank's), divides by the
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
adapter's 50 GB/s (54.47 and 53.35 GB/s through the Torch API at 16 ranks and
16 SMs): across 2 nodes about half the counted copies never leave the node, so
the "efficiency" on counted bytes can exceed 1.

Which entries
-------------
* **NVLink: "Kernel Only"**, not "Torch API". The Torch API rows time
  ``buffer.dispatch``/``combine``: the kernel, then a device-to-device copy of the
  received tokens out of HybridEP's registered NVLink buffer (into it, for combine), and
  synchronisation (``Executor::dispatch_postprocess`` / ``combine_preprocess`` in
  ``csrc/hybrid_ep/executor/executor.cu``, deepseek-ai/DeepEP@9aff4c1, the commit that
  added the GB200 table, and 41cad94). The trainers call ``dispatch_with_permute`` /
  ``combine_with_unpermute`` instead (``megatron/core/transformer/moe/fused_a2a.py``,
  NVIDIA/Megatron-LM core_v0.16.0 to d98e8a6; ``nemo_automodel/components/moe/megatron/fused_a2a.py``,
  NVIDIA-NeMo/Automodel@3746a1a), whose permute kernel reads the NVLink buffer directly in
  place of that copy (the same ``dispatch_postprocess``, its ``enable_permute`` branch) and whose
  unpermute writes into it (``combine_preprocess``); hp prices that permute as its own passes over the tokens the rank
  receives (``TimingProfile.moe_permute_tokens: received``), so the Torch API figure would count
  the copy twice. NVIDIA's DeepSeek-V3 GB200 write-up puts the copy at 10-20% of the
  communication time and states it fused into the permute
  (``docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-optimization.md``
  section 2.5, NVIDIA/Megatron-LM@1d9edcf); its figure ``images/image6.png`` ("GB200 NVL36",
  top-8, 32 CUDA blocks) shows 714.66 GB/s dispatch and 657.72 GB/s combine "algorithm
  bandwidth (uni-direction)", above even the Kernel Only row at 36 ranks (632.31, 596.99), where
  the Torch API row reads 479.02 and 447.89. Left unpriced, as no published figure times them
  alone: the routing-map all-gather and metadata preprocessing a forward dispatch runs (its
  handle is built there; every other call reuses it) and a blocking dispatch's host
  synchronisation.
* **Network: "Torch API"**. Across nodes HybridEP also copies the rank's tokens into its
  registered RDMA buffer and the combined tokens out of it (``dispatch_preprocess`` /
  ``combine_postprocess`` with ``num_of_nodes > 1``, the same file), which the trainers' calls
  run too; the published rows do not separate those copies from the one the permute replaces,
  so the network figure stays the Torch API's (at most that one copy slow).
* **BF16 dispatch**: Megatron-Core's HybridEP path refuses FP8 dispatch
  (``megatron/core/transformer/moe/fused_a2a.py``, ``assert not fp8_dispatch``,
  NVIDIA/Megatron-LM@d98e8a6), and hp states the exchange in the activation
  dtype.
* **The lower of BF16 dispatch and combine**, one figure for both directions,
  as the ``deepep`` model takes.
* **The SMs the trainer gives the kernels** (:attr:`hp_core.collectives.CollectiveCall.sms`, from the
  timing profile's ``collective_sms["hybridep"]``, set per run by the runtime option ``hybridep_num_sms``):
  the README publishes the GB200 table at 16 and 32 SMs and the H100 one at 4, 8 and 16, and each leg takes
  its table's published count nearest the call's by ratio, the larger on a tie (24 SMs: the 32-SM figures,
  32/24 = 1.33 against 24/16 = 1.5); beyond a table's counts its nearest end (an extrapolation), the chosen
  count named in the efficiency's source. What the trainers set: Megatron-Bridge's performance recipes
  ``moe_hybridep_num_sms = 32`` (``scripts/performance/utils/overrides.py`` ``_set_common_perf_overrides``,
  NVIDIA-NeMo/Megatron-Bridge v0.3.0 to v0.4.0, e.g. @0fbfe7d; a few model configs set their own); torchtitan
  16 for dispatch and combine (``torchtitan/distributed/deepep/hybridep.py`` ``_NUM_SMS_DISPATCH`` and
  ``_NUM_SMS_COMBINE``, passed to ``HybridEPBuffer`` in ``get_buffer``, pytorch/torchtitan@b5bcd76, since
  156db2e); NeMo AutoModel 24 by default (``nemo_automodel/components/moe/megatron/token_dispatcher.py``
  ``MoEConfig.moe_hybridep_num_sms``, NVIDIA-NeMo/Automodel@3746a1a). A run stating no SM count is refused.
* **NVLink**, by the ranks of the group within one NVLink domain: the GB200 table's Kernel Only
  columns, the lower of BF16 dispatch and combine (combine at every size and SM count) over NVLink 5's
  900 GB/s per direction (NVIDIA Blackwell datasheet: 1.8 TB/s per GPU both ways). At 32 SMs 737.13 GB/s
  at 8 ranks (**0.819**), 666.26 at 16, 639.80 at 24, 605.15 at 32, 596.99 at 36; at 16 SMs 684.27 at 8
  (**0.760**; the B200 table's only Kernel Only entry, 8 ranks at 16 SMs, combine 673.84, is within 2% of
  it), 600.75 at 16, 565.53 at 24, 547.25 at 32, 543.27 at 36. A domain of fewer ranks takes the 8-rank
  figure, one of more than 36 (which the README does not publish) the 36-rank figure, stated as an
  extrapolation. It prices the NVLink leg on every device, the forwarding leg of a cross-node exchange
  included (the H100 table states no NVLink figure).
* **Network**, by the nodes the group spans: the H100 table ran 8 ranks a node, so its 16, 32 and 64
  ranks are 2, 4 and 8 nodes, and the share of counted copies that stay on the sender's node (about
  one over the nodes) is what changes with it. At 16 SMs: 53.35 GB/s at 2 nodes (16 ranks, combine;
  dispatch 54.47), 47.36 at 4 (32 ranks, dispatch; combine 52.53), 41.24 at 8 (64 ranks, dispatch;
  combine 46.57); at 8 SMs 56.96, 46.54 and 41.46; at 4 SMs 37.08, 43.60 and 40.63 (each the lower of
  BF16 dispatch and combine); over one 400 Gb/s adapter per GPU (50 GB/s). The README states no adapter; one 400 Gb/s
  ConnectX-7 per GPU is the DGX H100's compute fabric (NVIDIA DGX H100 datasheet) and the adapter
  DeepEP's own H800 figures state. A group spanning more than 8 nodes takes the 8-node figure (an
  extrapolation: its own-node share, 1/8 there, only shrinks); the nearest published node count by
  ratio otherwise (the larger on a tie). Keyed by ranks instead, an EP-32 group of 4 ranks a node
  over 8 nodes would take the 4-node figure and run 15% faster on the wire than the 8-node
  measurement.

No fixed time per call is published; none is priced. Every other collective,
an all-to-all on a fabric that does not state its raw link bandwidths (as
``deepep``), and every all-to-all of a run priced with this model (Ulysses CP's
too) follow the ``deepep`` model's conventions with these efficiencies.
"""

from __future__ import annotations

from hp_core.collectives import CollectiveCall, CollectiveModel, nccl_seconds
from hp_core.errors import ConfigError
from hp_core.markers import hookimpl
from hp_core.specs.timing import Sourced
from hp_plugins.collectives.deepep import forwarded_seconds

__all__ = ["HYBRIDEP", "NVLINK_EFFICIENCY", "RDMA_EFFICIENCY", "hybridep_seconds", "hp_collective_models",
           "nvlink_efficiency", "rdma_efficiency"]

_README = "DeepEP docs/README_Hybrid-EP.md (deepseek-ai/DeepEP@41cad94), BF16"
# GB200 table, Kernel Only (the trainers' dispatch_with_permute/combine_with_unpermute make no D2D copy out of the
# NVLink buffer; hp prices their permute on its own: the module docstring), by SMs and then ranks: the lower of
# dispatch (BF16) and combine at each published domain size, over 900 GB/s.
_GB200_NVL_GB_PER_S = {
    16: {8: min(750.15, 684.27), 16: min(661.93, 600.75), 24: min(637.80, 565.53), 32: min(629.79, 547.25),
         36: min(612.85, 543.27)},
    32: {8: min(764.03, 737.13), 16: min(706.95, 666.26), 24: min(665.97, 639.80), 32: min(642.23, 605.15),
         36: min(632.31, 596.99)},
}
NVLINK_EFFICIENCY = {
    sms: {ranks: Sourced(gb / 900, f"{_README}, GB200 {ranks} ranks, {sms} SMs, Kernel Only: {gb} GB/s (the lower of "
                                   "dispatch and combine) over NVLink 5's 900 GB/s per direction (NVIDIA Blackwell "
                                   "datasheet: 1.8 TB/s both ways); Kernel Only as the trainers' dispatch_with_permute "
                                   "permutes straight from HybridEP's buffer, no D2D copy (csrc/hybrid_ep/executor/"
                                   "executor.cu dispatch_postprocess, deepseek-ai/DeepEP@9aff4c1), its permute priced "
                                   "by hp apart")
          for ranks, gb in table.items()}
    for sms, table in _GB200_NVL_GB_PER_S.items()
}
# H100 "IB Bandwidth", Torch API, by SMs and then nodes: the lower of dispatch (BF16) and combine, at 8 ranks a node
# (16, 32, 64 ranks are 2, 4, 8 nodes); over 50 GB/s.
_H100_IB_GB_PER_S = {
    4: {2: min(37.08, 42.47), 4: min(44.88, 43.60), 8: min(40.63, 41.00)},
    8: {2: min(57.74, 56.96), 4: min(46.54, 50.68), 8: min(41.46, 47.68)},
    16: {2: min(54.47, 53.35), 4: min(47.36, 52.53), 8: min(41.24, 46.57)},
}
RDMA_EFFICIENCY = {
    sms: {nodes: Sourced(gb / 50, f"{_README}, H100 {8 * nodes} ranks over {nodes} nodes, {sms} SMs, Torch API, IB: {gb} "
                                  "GB/s (the lower of dispatch and combine) over one 400 Gb/s adapter per GPU (50 GB/s; "
                                  "DGX H100's ConnectX-7, not stated by the README)")
          for nodes, gb in table.items()}
    for sms, table in _H100_IB_GB_PER_S.items()
}


def _nearest_key(sizes, size: int) -> int:
    """The published size nearest *size* by ratio (the larger on a tie): below the sizes their smallest, above
    them their largest (an extrapolation)."""
    return min(sizes, key=lambda s: (max(s / size, size / s), -s))


def _at_sms(tables: dict[int, dict[int, Sourced]], sms: int, size: int, leg: str) -> Sourced:
    """The entry for *size* of the table at the published SM count nearest *sms*, its source naming that count
    where it is not *sms* itself."""
    published = _nearest_key(tables, sms)
    entry = tables[published][_nearest_key(tables[published], size)]
    if published == sms:
        return entry
    ordered = [str(c) for c in sorted(tables)]
    counts = ordered[0] if len(ordered) == 1 else f"{', '.join(ordered[:-1])} and {ordered[-1]}"
    how = "beyond the published counts, an extrapolation" if not min(tables) < sms < max(tables) else \
        "the published count nearest by ratio"
    return Sourced(entry.value, f"{entry.source}; {sms} SMs priced at the {published}-SM {leg} figure ({how}; the "
                                f"README publishes {counts})")


def nvlink_efficiency(ranks: int, sms: int) -> Sourced:
    """The NVLink efficiency for a group of *ranks* within one NVLink domain whose kernels run on *sms* SMs: the
    GB200 table at the published SM count nearest *sms*, its entry nearest that size (8 ranks for fewer, 36 for
    more)."""
    return _at_sms(NVLINK_EFFICIENCY, sms, ranks, "NVLink")


def rdma_efficiency(nodes: int, sms: int) -> Sourced:
    """The network efficiency for a group spanning *nodes* whose kernels run on *sms* SMs: the H100 table at the
    published SM count nearest *sms*, its node count nearest *nodes* (2 for one, 8 for more than 8)."""
    return _at_sms(RDMA_EFFICIENCY, sms, nodes, "network")


def hybridep_seconds(call: CollectiveCall) -> float:
    """An all-to-all on HybridEP's kernels at the call's SMs; any other call as NCCL's
    (:mod:`hp_plugins.collectives.hybridep`).

    Raises:
        ConfigError: An all-to-all whose call states no SM count (:attr:`~hp_core.collectives.CollectiveCall.sms`).
    """
    if call.op != "all_to_all":
        return nccl_seconds(call)
    if call.sms is None:
        raise ConfigError("$.runtime.timing.collective_sms",
                          "the hybridep collective model prices HybridEP's published bandwidths at the SMs its kernels "
                          "run on, and the runtime's timing profile states none (collective_sms['hybridep']): a runtime "
                          "choosing hybridep states it, as megatron and fsdp2 do (their option hybridep_num_sms)")
    return forwarded_seconds(call, nvlink_efficiency(call.group.per_node, call.sms).value,
                             rdma_efficiency(call.group.nodes, call.sms).value)


HYBRIDEP = CollectiveModel(
    name="hybridep",
    seconds=hybridep_seconds,
    description="NVIDIA HybridEP's dispatch/combine kernels for all-to-alls (RDMA then NVLink forwarding; published "
                "bandwidths by SM count, NVLink-domain size (kernel only) and node count (Torch API)); other "
                "collectives as nccl",
    source="; ".join(e.source for table in (*NVLINK_EFFICIENCY.values(), *RDMA_EFFICIENCY.values())
                     for e in table.values()),
)


@hookimpl
def hp_collective_models():
    yield HYBRIDEP
