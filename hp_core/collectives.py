"""Collective pricing as a plugin point: where a group's ranks sit, the fabric, and a model that prices a call.

The step time places every parallel group on the cluster (:func:`place_group`:
the layout's rank order, the devices per node), so each collective knows how
many of its members share a node and how many nodes it spans, and prices it
with a :class:`CollectiveModel`. The built-in one, :data:`NCCL`, follows
NCCL's algorithms (docs/time.md, "Collectives on the cluster"); a plugin may
yield another through the hook ``hp_collective_models`` (HCCL, RCCL, a
DeepEP-style all-to-all) and a timing profile names it
(:attr:`~hp_core.specs.timing.TimingProfile.collective_model`).

Sources of the formulas: Thakur, Rabenseifner and Gropp 2005 (ring and tree
costs); NCCL's bus-bandwidth convention (nccl-tests ``doc/PERFORMANCE.md``);
NCCL's multi-rail rings, one channel per network adapter, and PXN (NCCL 2.12
release notes; Jeaugey, "Doubling all2all performance with NVIDIA Collective
Communication Library 2.12", NVIDIA technical blog 2022); NVLink SHARP
all-reduce (NCCL 2.17 release notes, ``NCCL_ALGO=NVLS``); an all-to-all's
peers progressed concurrently, one round per call (NVIDIA/nccl v2.26.2-1 and
5067397: ``src/include/device.h`` ``NCCL_MAX_DEV_WORK_P2P_PER_BATCH`` 8 sends
or receives run together on a channel, ``src/include/channel.h`` puts the peers
of different nodes on different channels, ``src/graph/paths.cc`` sizes the
channels per peer so every peer fits one round; docs/time.md).
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import attrs

__all__ = ["A2A_NVLINK_STEPS", "ALGORITHMS", "NCCL", "OPERATIONS", "CollectiveCall", "CollectiveModel", "Fabric", "GroupPlacement",
           "RANK_DIMENSIONS", "ROUTING_ASSIGNMENTS", "Routing", "nccl_seconds", "place_group"]

# Operations a layer or the step states (hp_core.costs.Collective.op) and all-reduce algorithms.
OPERATIONS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")
ALGORITHMS = ("ring", "tree", "hierarchical", "nvls", "auto")
# The dimensions of Megatron-Core's rank order (megatron/core/parallel_state.py RankGenerator, order "tp-cp-ep-dp-pp").
RANK_DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")
# How a router assigns a token's experts (Routing.assignment): a learned router taken as uniform, or round-robin.
ROUTING_ASSIGNMENTS = ("uniform", "round_robin")


@attrs.frozen
class GroupPlacement:
    """Where one group's ranks sit.

    Attributes:
        ranks: Members of the group.
        per_node: Most members on one node.
        nodes: Nodes the group spans.
    """

    ranks: int
    per_node: int
    nodes: int

    @property
    def intra_node(self) -> bool:
        return self.nodes <= 1


def place_group(sizes: dict[str, int], order: tuple[str, ...], dims: tuple[str, ...], devices_per_node: int) -> GroupPlacement:
    """The placement of the group varying *dims* (the one holding rank 0; every group of a dimension is alike).

    Ranks are numbered with the first dimension of *order* fastest (Megatron's
    ``RankGenerator``: ``tp-cp-ep-dp-pp`` puts a TP group on consecutive ranks);
    node ``r // devices_per_node`` holds rank ``r``.
    """
    return _placed(tuple(sizes.items()), tuple(order), tuple(dims), devices_per_node)


@functools.lru_cache(maxsize=4096)
def _placed(sizes_items: tuple[tuple[str, int], ...], order: tuple[str, ...], dims: tuple[str, ...],
            devices_per_node: int) -> GroupPlacement:
    """:func:`place_group` of hashable arguments, kept: a search places the same groups for many layouts (bounded)."""
    sizes = dict(sizes_items)
    stride, strides = 1, {}
    for d in order:
        strides[d] = stride
        stride *= sizes.get(d, 1)
    ranks = [0]
    for d in dims:
        ranks = [r + i * strides[d] for r in ranks for i in range(sizes.get(d, 1))]
    counts: dict[int, int] = {}
    for r in ranks:
        counts[r // devices_per_node] = counts.get(r // devices_per_node, 0) + 1
    return GroupPlacement(len(ranks), max(counts.values()), len(counts))


def _positive_int(instance, attribute, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


@attrs.frozen
class Routing:
    """How the tokens of an expert-parallel dispatch (or combine) all-to-all were routed.

    Each token goes to ``top_k`` distinct experts of ``experts``, the experts
    split evenly and in order over the group's ranks (Megatron-Core places
    local experts ``rank * E/ep ...``) and so over its nodes. An all-to-all
    that sends a permuted copy per expert (NCCL under Megatron-Core's
    ``alltoall`` dispatcher) moves ``top_k`` copies of each token, which is
    what the stated bytes count; a library that sends a token once to each
    rank (or node) it reaches (DeepEP's ``is_token_in_rank``,
    ``num_tokens_per_rdma_rank``) moves :meth:`distinct` copies.

    Attributes:
        experts: Routed experts of the layer.
        top_k: Experts each token is routed to.
        padding: The stated bytes over the routed copies' (a layer padding each expert's
            input to capacity states its capacity factor; 1.0 unpadded): a library that sends
            each token unpadded prices ``nbytes / (top_k * padding)`` per copy.
        groups: Routing groups ``R`` of a group-limited router: the experts split into ``R``
            equal, consecutive groups (Megatron-Core ``--moe-router-num-groups``, Hugging Face
            DeepSeek-V3 ``n_group``); 1: no groups.
        groups_per_token: Groups ``g`` each token selects before its ``top_k`` experts within
            them (``--moe-router-group-topk``, ``topk_group``); ``g == R`` is no limit (with
            ``R == 1``, the default 1 is).
        assignment: How a token's experts are chosen: ``uniform`` (a learned router, taken as
            balanced: each token draws its ``top_k`` uniformly), or ``round_robin`` (NeMo
            AutoModel's ``FakeBalancedGate``: the ``t``-th token of a rank's micro-batch goes to the
            consecutive experts ``(t k + j) mod E``, ``j < k``; ``nemo_automodel/components/moe/layers.py``
            at NVIDIA-NeMo/Automodel 89e3a9f, bb0c0bf and e458120), which :meth:`distinct` counts
            exactly. Round-robin routing has no routing groups (``groups`` and ``groups_per_token`` 1).
    """

    experts: int = attrs.field(validator=_positive_int)
    top_k: int = attrs.field(validator=_positive_int)
    padding: float = 1.0
    groups: int = attrs.field(default=1, validator=_positive_int)
    groups_per_token: int = attrs.field(default=1, validator=_positive_int)
    assignment: str = attrs.field(default="uniform", validator=attrs.validators.in_(ROUTING_ASSIGNMENTS))

    def __attrs_post_init__(self) -> None:
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) must not exceed experts ({self.experts})")
        if not (isinstance(self.padding, (int, float)) and self.padding > 0):
            raise ValueError(f"padding must be a positive number, got {self.padding!r}")
        if self.experts % self.groups:
            raise ValueError(f"groups ({self.groups}) must divide experts ({self.experts})")
        if self.groups_per_token > self.groups:
            raise ValueError(f"groups_per_token ({self.groups_per_token}) must not exceed groups ({self.groups})")
        if self.top_k > self.groups_per_token * self.experts // self.groups:
            raise ValueError(f"top_k ({self.top_k}) must not exceed the {self.groups_per_token * self.experts // self.groups} "
                             f"experts of groups_per_token ({self.groups_per_token}) groups")
        if self.assignment == "round_robin" and self.groups != 1:
            raise ValueError(f"round_robin routing has no routing groups (groups {self.groups}): the gate ignores them")

    def token_bytes(self, nbytes: float) -> float:
        """Bytes of one unpadded copy of the tokens whose routed (and padded) copies make *nbytes*."""
        return nbytes / (self.top_k * self.padding)

    def distinct(self, groups: int) -> float:
        """Expected number of the *groups* equal, consecutive expert groups one token reaches.

        Balanced routing (the assumption of DeepEP's own benchmark, ``tests/legacy/test_intranode.py``):
        a token draws its ``k = top_k`` experts uniformly without replacement. Unlimited
        (``groups_per_token == groups``, so also without routing groups), a placement group of
        ``m = E / G`` experts is missed with probability ``C(E - m, k) / C(E, k)``
        (hypergeometric), so ``G (1 - C(E - m, k) / C(E, k))`` are reached.

        Group-limited (Megatron-Core ``moe_utils.group_limited_topk``; transformers
        ``DeepseekV3TopkRouter``): the token's ``g`` routing groups are drawn uniformly among the
        ``R``, then its ``k`` experts uniformly among the ``p = g E / R`` experts of those groups.

        * ``G`` a multiple of ``R`` (placement groups nest in routing groups): a placement group is
          reached only if its routing group is chosen (``g / R``), then missed with probability
          ``C(p - m, k) / C(p, k)``: ``D = G (g / R) (1 - C(p - m, k) / C(p, k))``.
        * ``R`` a multiple of ``G`` (a placement group holds ``R / G`` routing groups): ``s`` of them
          are chosen with the hypergeometric probability ``P(s) = C(R/G, s) C(R - R/G, g - s) / C(R, g)``,
          and then all ``k`` experts fall outside with ``C((g - s) E / R, k) / C(p, k)``:
          ``D = G (1 - sum_s P(s) C((g - s) E / R, k) / C(p, k))``.
        * Neither: the unlimited formula, an upper bound (a limited router reaches no more groups).

        DeepSeek-V3 (``E`` 256, ``R`` 8, ``g`` 4, ``k`` 8) over 8 nodes reaches 3.63 nodes a token
        rather than the unlimited 5.29 (its report's node-limited routing: at most 4).

        Round-robin (``assignment``): token ``t`` reaches the groups of experts ``(t k + j) mod E``,
        expert ``e`` in group ``floor(e G / E)``; the pattern repeats every ``E / gcd(k, E)`` tokens,
        whose mean is the count (exact for a micro-batch of whole periods). Qwen3-30B-A3B (``E`` 128,
        ``k`` 8) over 8 ranks: every token's 8 experts are consecutive and start at a multiple of 8,
        inside one rank's 16, so 1 rank a token rather than the uniform 5.32.
        """
        if groups <= 1:
            return float(groups)
        if self.assignment == "round_robin":
            return _round_robin_distinct(self.experts, self.top_k, groups)
        nested = groups % self.groups == 0 or self.groups % groups == 0
        if self.groups_per_token != self.groups and nested:
            return _limited_distinct(self.experts, self.top_k, self.groups, self.groups_per_token, groups)
        return groups * (1.0 - _missed(self.experts, self.experts / groups, self.top_k))


@functools.lru_cache(maxsize=256)
def _round_robin_distinct(E: int, k: int, G: int) -> float:
    """:meth:`Routing.distinct` of round-robin routing: the mean over one period of tokens of the groups reached."""
    period = E // math.gcd(k, E)
    reached = sum(len({((t * k + j) % E) * G // E for j in range(k)}) for t in range(period))
    return reached / period


def _limited_distinct(E: int, k: int, R: int, g: int, G: int) -> float:
    """:meth:`Routing.distinct` of a router choosing *g* of *R* routing groups, over *G* placement groups, one of
    *G* and *R* a multiple of the other."""
    pool = g * E // R
    if G % R == 0:
        return G * (g / R) * (1.0 - _missed(pool, E / G, k))
    held = R // G
    missed = 0.0
    for s in range(max(0, g - (R - held)), min(g, held) + 1):
        chosen = math.comb(held, s) * math.comb(R - held, g - s) / math.comb(R, g)
        missed += chosen * _missed(pool, s * E / R, k)
    return G * (1.0 - missed)


def _missed(pool: float, m: float, k: int) -> float:
    """``C(pool - m, k) / C(pool, k)``: the chance that ``k`` of *pool* drawn without replacement miss *m* of them."""
    missed = 1.0
    for i in range(k):
        missed *= max(pool - m - i, 0.0) / (pool - i)
    return missed


@attrs.frozen
class Fabric:
    """The links a collective runs on, efficiencies applied (bytes per second per device and direction).

    Attributes:
        intra_bandwidth: NVLink/NVSwitch bus bandwidth of ring collectives within a node.
        intra_a2a_bandwidth: All-to-all bus bandwidth within a node.
        intra_latency: Seconds per step within a node.
        nic_bandwidth: One device's share of its node's network adapters, as NCCL achieves it.
        inter_latency: Seconds per step across nodes.
        nvls_bandwidth: NVLink SHARP all-reduce bus bandwidth within a node; ``None``: none.
        overhead: A fixed time per collective call (launch, synchronisation); not charged to sends.
        intra_link_bandwidth: The NVLink/NVSwitch bandwidth per device and direction as the hardware
            states it, no efficiency applied (a library with its own measured efficiency prices from
            it); ``None``: not known.
        nic_link_bandwidth: One device's share of its node's adapters as the hardware states it, no
            efficiency applied; ``None``: not known or not needed.
        nic_a2a_bandwidth: What an all-to-all's cross-node share reaches of the device's adapters;
            ``None``: :attr:`nic_bandwidth`.
        architecture: The device's architecture (:attr:`hp_core.specs.HardwareSpec.architecture`), so a
            collective library can state its measured figures per architecture; ``None``: not known.
        inter_a2a_latency: Seconds of one all-to-all call spanning nodes, its peers progressed
            concurrently (one round), its fixed time per call included, so :attr:`overhead` is not
            added to it (the call is charged at least :attr:`overhead` plus an :attr:`intra_latency` per
            local peer, what the same call costs within one node); ``None``: not stated, and such a call is charged :attr:`overhead`, an
            :attr:`intra_latency` per peer on its node and an :attr:`inter_latency` per peer
            across nodes (the per-peer series, an upper bound NCCL's concurrent peers do not reach).
    """

    intra_bandwidth: float
    intra_a2a_bandwidth: float
    intra_latency: float
    nic_bandwidth: float | None
    inter_latency: float | None
    nvls_bandwidth: float | None = None
    overhead: float = 0.0
    intra_link_bandwidth: float | None = None
    nic_link_bandwidth: float | None = None
    nic_a2a_bandwidth: float | None = None
    inter_a2a_latency: float | None = None
    architecture: str | None = None


@attrs.frozen
class CollectiveCall:
    """One collective call to price.

    Attributes:
        op: One of :data:`OPERATIONS`.
        nbytes: All-reduce's buffer, all-gather's gathered output, reduce-scatter's
            input, all-to-all's send buffer, a send's message.
        group: Where its ranks sit (a send: its two ends).
        fabric: The links.
        algorithm: One of :data:`ALGORITHMS` (all-reduce; ``auto``: the fastest).
        routing: An expert-parallel all-to-all's routing (:class:`Routing`), which a library
            that de-duplicates tokens per destination prices from; ``None``: not stated.
        sms: The streaming multiprocessors the trainer gives this collective library's kernels
            (:meth:`hp_core.specs.timing.TimingProfile.collective_kernel_sms` under the model's name; HybridEP's
            ``num_sms_dispatch_api`` and ``num_sms_combine_api``, the runtime option ``hybridep_num_sms``), which a
            library whose published figures depend on it prices from; ``None``: the run states none.
    """

    op: str
    nbytes: float
    group: GroupPlacement
    fabric: Fabric
    algorithm: str = "ring"
    routing: Routing | None = None
    sms: int | None = None


@attrs.frozen
class CollectiveModel:
    """A collective library's pricing: ``seconds(call) -> float`` (module-level, so it pickles).

    Attributes:
        name: The name a timing profile states (``collective_model``).
        seconds: Prices one :class:`CollectiveCall`.
        description: One line: the library and what it models.
        source: Where its figures and algorithms come from.
    """

    name: str
    seconds: Callable[[CollectiveCall], float]
    description: str = ""
    source: str = ""


def _ring_pass(n: int, nbytes: float, g: int, k: int, f: Fabric) -> float:
    """One ring pass (an all-gather's or a reduce-scatter's) over ``n`` ranks, ``g`` per node on ``k`` nodes.

    Within a node: ``(n-1)/n S / B + (n-1) a``. Across nodes NCCL runs one ring
    per channel and spreads its channels over the node's adapters, so a group
    with ``g`` members on a node crosses the node boundary on ``g`` adapters at
    once: each member sends ``1/g`` of its ring traffic over its own adapter
    and the rest over NVLink, concurrently; the slower of the two sets the
    pace. A group with one member per node is limited to one adapter.
    """
    share = (n - 1) / n * nbytes
    if k <= 1:
        return share / f.intra_bandwidth + (n - 1) * f.intra_latency
    bandwidth = share * max((g - 1) / (g * f.intra_bandwidth), 1 / (g * f.nic_bandwidth))
    return bandwidth + (n - k) * f.intra_latency + k * f.inter_latency


def _all_reduce(n: int, nbytes: float, g: int, k: int, f: Fabric, algorithm: str) -> float:
    ring = 2 * _ring_pass(n, nbytes, g, k, f)
    if algorithm == "ring":
        return ring
    if k <= 1:
        # Tree within a node: ring bandwidth, logarithmic latency (NCCL's double binary tree).
        tree = 2 * (n - 1) / n * nbytes / f.intra_bandwidth + 2 * math.log2(n) * f.intra_latency
        nvls = None if f.nvls_bandwidth is None else 2 * (n - 1) / n * nbytes / f.nvls_bandwidth + 2 * f.intra_latency
    else:
        # Double binary tree across nodes (chains within): the ring's bandwidth, latency log2 of the nodes.
        tree = ring - 2 * ((n - k) * f.intra_latency + k * f.inter_latency) \
            + 2 * ((g - 1) * f.intra_latency + math.log2(k) * f.inter_latency)
        nvls = None
        if f.nvls_bandwidth is not None:  # NVLS within the node, tree across (NCCL's NVLSTree)
            nvls = 2 * (g - 1) / g * nbytes / f.nvls_bandwidth + 2 * (k - 1) / k * nbytes / (g * f.nic_bandwidth) \
                + 2 * (f.intra_latency + math.log2(k) * f.inter_latency)
    # Hierarchical: reduce-scatter within the node, all-reduce of 1/g of the buffer across nodes on each
    # member's own adapter, all-gather within the node, one after the other.
    hier = ring if k <= 1 else 2 * _ring_pass(g, nbytes, g, 1, f) + 2 * _ring_pass(k, nbytes / g, 1, k, f)
    choices = {"tree": tree, "hierarchical": hier, "nvls": nvls if nvls is not None else ring}
    if algorithm in choices:
        return choices[algorithm]
    return min(ring, tree, hier, nvls if nvls is not None else ring)


def nccl_seconds(call: CollectiveCall) -> float:
    """NCCL's collectives on the placed group (:mod:`hp_core.collectives`).

    Within one node every formula is the one hp priced before topology
    (``(n-1)/n S/B + (n-1) a`` per ring pass, all-reduce two passes or a
    tree's ``2 log2 n`` steps); across nodes see :func:`_ring_pass`. An
    all-to-all sends ``(g-1)/n`` of its buffer over NVLink and ``(n-g)/n``
    over the member's own adapter (at :attr:`Fabric.nic_a2a_bandwidth` where
    stated), concurrently, and across nodes takes one round's latency
    (:attr:`Fabric.inter_a2a_latency`: NCCL progresses all its peers at once).
    A send crosses NVLink within a node, else one adapter.
    """
    f, n, g, k, nbytes = call.fabric, call.group.ranks, call.group.per_node, call.group.nodes, call.nbytes
    if nbytes <= 0:
        return 0.0
    if call.op == "p2p":
        if k <= 1:
            return nbytes / f.intra_bandwidth + f.intra_latency
        return nbytes / f.nic_bandwidth + f.inter_latency
    if n <= 1:
        return 0.0
    if call.op == "all_reduce":
        return f.overhead + _all_reduce(n, nbytes, g, k, f, call.algorithm)
    if call.op in ("all_gather", "reduce_scatter"):
        return f.overhead + _ring_pass(n, nbytes, g, k, f)
    if call.op == "all_to_all":
        # NVLink steps of an all-to-all's latency: one per local peer, at most A2A_NVLINK_STEPS (below).
        steps = min(g - 1, A2A_NVLINK_STEPS)
        if k <= 1:
            return f.overhead + (n - 1) / n * nbytes / f.intra_a2a_bandwidth + steps * f.intra_latency
        intra = (g - 1) / n * nbytes / f.intra_a2a_bandwidth
        inter = (n - g) / n * nbytes / (f.nic_bandwidth if f.nic_a2a_bandwidth is None else f.nic_a2a_bandwidth)
        if f.inter_a2a_latency is not None:
            # One round per call; never less than the same call's latency within one node (the fixed overhead and the
            # NVLink steps to the local peers), so spanning nodes cannot price below staying within one.
            return max(intra, inter) + max(f.inter_a2a_latency, f.overhead + steps * f.intra_latency)
        return f.overhead + max(intra, inter) + steps * f.intra_latency + (n - g) * f.inter_latency
    raise ValueError(f"unknown collective {call.op!r}")


# An all-to-all's NVLink latency steps are counted per local peer up to 7, the 8-GPU node the per-step figures
# were fitted on (SimuMax's NCCL fit on 8x B200; nccl-tests on 8x H100), and no further: NCCL progresses an
# all-to-all's peers together, up to 8 sends and receives per channel in one batch over several channels
# (NVIDIA/nccl src/include/device.h NCCL_MAX_DEV_WORK_P2P_PER_BATCH, docs/time.md "Latency across nodes"), so a
# larger NVLink domain (a 72-GPU NVL72 rack) is not charged one step per peer in series; what it does cost is
# unmeasured here, so the 8-GPU call's latency is taken.
A2A_NVLINK_STEPS = 7


NCCL = CollectiveModel(
    name="nccl",
    seconds=nccl_seconds,
    description="NCCL: ring, tree, hierarchical and NVLS collectives on NVLink within a node and multi-rail networks across nodes",
    source="Thakur et al. 2005; nccl-tests doc/PERFORMANCE.md (bus bandwidth); NCCL 2.12 (PXN, multi-rail) and 2.17 (NVLS) release notes",
)
