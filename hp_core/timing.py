"""Step time: compute, communication, pipeline bubble and optimizer step (DESIGN section 8).

:func:`step_time` prices one training step of one layout on one device type,
as the runtime's :class:`~hp_core.specs.timing.TimingProfile` says its trainer
runs. It reuses the layer kinds' per-op FLOPs (``LayerCost.forward``) and
evaluates each layer group once; a stage then sums precomputed per-layer
times, so a layout search can ask it many times.

The model, with its sources (figures come from the profile, each sourced there):

* **Compute** per layer and micro-batch. Dense matmuls take
  ``flops / (peak * matmul)``; their backward ``matmul_backward_factor`` (2)
  times that (Narayanan et al. 2021, Section 5.1). Where the device states a
  measured :class:`~hp_core.specs.timing.GemmTable`, each GEMM whose shape it
  holds (a recorded weight over the micro-batch's tokens, a router's gating
  GEMM, the routed experts' grouped GEMMs) takes the efficiency measured for
  its forward, input-gradient and weight-gradient passes instead, the backward
  being the two gradient GEMMs (:func:`_matmul_seconds`). Grouped (expert) GEMMs --
  the routed experts' FLOPs over the tokens a rank's experts process -- run at
  ``grouped_matmul * rows / (rows + grouped_half_rows)`` with ``rows`` the
  tokens per local expert (a roofline: reading an expert's weights costs
  ``half_rows`` rows of FLOPs). The fused attention core executes
  ``flash_causal_fraction`` (1/2) of its FLOPs under the causal mask (Dao
  2023, Section 3.1.1) and takes ``overhead + flops / (peak * efficiency)``
  per kernel call, its backward ``attention_backward_factor`` (2.5) times the
  forward FLOPs (Dao 2023, Section 4.1); a core whose query/key head dim
  exceeds its value head dim (MLA) takes the device's ``mla_attention_*``
  figures where stated, and MLA's query/key assembly (rotary part, query and
  key concatenation, contiguous value: Megatron-Core
  ``MLASelfAttention.get_query_key_value_tensors``) moves its bytes through
  HBM each way. Eager attention computes the whole
  score matrix with batched GEMMs (masking after ``QK^T``) at the matmul
  efficiency. Elementwise ops are memory-bound: ``flops *
  elementwise_accesses_per_flop * activation_bytes / (HBM bandwidth * memory
  efficiency)``, their backward ``elementwise_backward_factor`` times that;
  an MoE layer also makes ``moe_permute_passes`` passes over its dispatched
  tokens each way (read and write; the first reads and the last writes the
  layer's own tokens), at the device's ``moe_permute_bandwidth`` plus
  ``moe_permute_overhead_seconds`` where stated, and its router's kernels
  besides the gating GEMM take the device's ``moe_router_*_seconds`` (measured
  at 4096 tokens x 160 experts) scaled by its routed tokens times experts.
* **Recompute**: full recompute re-runs the layer's forward, its
  communication included (Korthikanti et al. 2022, Section 5). A selective
  setting re-runs what its switches drop: any attention-core switch re-runs
  the attention core forward (Megatron-LM checkpoints ``core_attention`` as a
  unit), plus rewriting the dropped score-sized tensors; ``attUp`` re-runs the
  MLA up-projections (``2 * kv_lora_rank`` FLOPs per rebuilt element);
  ``gather`` re-runs the SP all-gathers in backward; other switches rewrite
  what they drop (a read and a write of its bytes).
* **Offload** (``Setting.offload``): the offloaded bytes go to the host over
  the device's host link during the layer's forward and come back during its
  backward; what the layer's own forward, respectively backward with
  recompute, does not hide is exposed and counted as communication
  (:func:`offload_seconds`; Rhu et al. 2016, "vDNN", Section 3).
* **Communication** per collective (Thakur, Rabenseifner and Gropp 2005;
  NCCL's ``busbw`` convention, nccl-tests ``doc/PERFORMANCE.md``), over ``n``
  ranks, ``S`` bytes, bus bandwidth ``B`` (link bandwidth times the profile's
  bus efficiency) and per-step latency ``a``: ring all-reduce
  ``2 (n-1)/n S/B + 2 (n-1) a``; tree all-reduce ``2 (n-1)/n S/B + 2 log2(n) a``;
  all-gather, reduce-scatter and all-to-all ``(n-1)/n S/B + (n-1) a``;
  point-to-point ``S/B + a``; each collective call (not a send) also costs
  the device's fixed ``collective_overhead_seconds`` (launch and
  synchronisation, fitted by SimuMax on B200). A group is intra-node when the ranks it spans
  (Megatron-Core's rank order tp, cp, ep, dp, pp) fit in one node, else it
  runs at the inter-node bandwidth. Per layer: TP with SP runs an all-gather
  and a reduce-scatter per block (attention, MLP) forward and backward, plus
  the backward re-gathers when ``gather`` is recomputed; TP without SP an
  all-reduce per block each way (Shoeybi et al. 2019, Section 3;
  Korthikanti et al. 2022, Section 4.2.2). As the layout's ``cp_kind`` says,
  CP ring attention passes K/V
  around the ring ``cp - 1`` times forward and K/V and their gradients
  backward (Liu et al. 2023); CP all-to-all (Jacobs et al. 2023, Ulysses)
  exchanges q, k, v and the output each way. EP dispatches and combines the
  routed tokens (an all-to-all each) each way. PP sends each micro-batch's
  activation forward and its gradient back per chunk boundary. Each class is
  exposed by ``1 - overlap``.
* **Pipeline**: with per-micro-batch stage times ``t_s``, ``m`` micro-batches
  and ``v`` chunks per stage, ``T = m max(t_s) + (sum(t_s) - max(t_s)) / v``:
  for equal stages, ``(m + (p - 1)/v) t``, the bubble fraction
  ``(p - 1)/m`` of 1F1B and ``(p - 1)/(v m)`` of interleaved 1F1B (Narayanan
  et al. 2021, Section 2.2).
* **Data parallelism and the optimizer** after the last backward: gradients
  reduce-scattered (ZeRO >= 1; all-reduced at ZeRO-0) over the DP*CP group
  (the expert DP group for routed experts) and parameters all-gathered back
  (Rajbhandari et al. 2020); under ZeRO-3 parameters are gathered forward and
  backward and gradients reduce-scattered every micro-batch. The optimizer
  step is memory-bound: Adam reads and writes the master parameters and both
  moments and reads the gradient (Kingma and Ba 2015), the master copy is
  cast to the model parameters, gradient clipping passes over the gradient
  ``optimizer_grad_passes`` times (all over the rank's shard), and the
  whole local gradient buffer is accessed ``grad_buffer_passes`` times
  (zeroing, a NaN check) plus ``grad_scale_passes`` times where there is more
  than one data-parallel replica (scaling by ``1/(DP*CP)``, the routed
  experts' buffer included: Megatron-Core ``distributed_data_parallel.py``). The step is the
  pipeline plus the slowest stage's DP communication and optimizer step.
* **A whole run** against its kernels measured alone: where the profile's
  device entry states ``sustained_slowdown``, every GPU time above (compute,
  recompute, communication, pipeline sends, the DP reduction and the optimizer
  step; not offload's host-link copies) is multiplied by it. The figures
  above are kernel and NCCL microbenchmarks; a training run adds clock and
  cache effects, launch gaps and host work between kernels. The
  ``megatron-te`` Blackwell figure is fitted to measured Megatron-LM step
  times on B200 (``hp_plugins/timing_profiles.py``).

Known limitations: routing is balanced (no straggler expert); kernels other
than those above (rotary embedding, router top-k, loss) are priced by their
counted elementwise FLOPs; GEMMs of shapes no table holds run at the one
``matmul`` efficiency; host overheads (Python, launch gaps, logging) are
priced only as part of a device's ``sustained_slowdown``, one factor for all
layouts; gradient reduction of a tied embedding between the first and
last stage is not priced; communication shapes are read from the layer
configs' Hugging Face field names (``hidden_size``, ``num_attention_heads``,
``num_key_value_heads``, ``head_dim``, MLA and MoE fields), so a third-party
kind without them is priced without TP/CP/EP traffic.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from hp_core.errors import ConfigError
from hp_core.engine.prepare import PreparedRun
from hp_core.engine.stage import layer_elements, offloaded_bytes
from hp_core.specs import HardwareSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_core.specs.timing import ROUTER_REFERENCE_ELEMENTS, DeviceEfficiency, GemmTable, TimingProfile
from hp_core.types import LayerContext, LayerCost, LayerKind

__all__ = [
    "ATTENTION_CORE_SWITCHES",
    "LayerPricer",
    "LayerSeconds",
    "SOFTMAX_OPS_PER_SCORE",
    "StageTime",
    "StepTime",
    "collective_seconds",
    "compute_dtype",
    "layer_pricer",
    "offload_seconds",
    "pipeline_seconds",
    "time_run",
]

# Elementwise ops the kinds count per attention score for the softmax (max, subtract,
# exp, sum, divide: hp_plugins/_blocks.py). A fused (flash) kernel runs them on chip,
# so they move no HBM traffic there (Dao 2023, Section 3.1).
SOFTMAX_OPS_PER_SCORE = 5
# The switches of the attention core: recomputing any re-runs the core (Megatron-LM
# checkpoints CoreAttention as a unit; Korthikanti et al. 2022, Section 4.2).
ATTENTION_CORE_SWITCHES = frozenset({"attBMM", "headCast", "dropout", "softmax"})
_DTYPES = {2: ("bf16", "fp16"), 4: ("fp32", "tf32"), 1: ("fp8",)}


# ----------------------------------------------------------------------------- results


@attrs.frozen
class StageTime:
    """One pipeline stage's time (one rank of it).

    Attributes:
        index: Stage index.
        forward_seconds: Forward compute per micro-batch (all its chunks).
        backward_seconds: Backward compute per micro-batch, recompute excluded.
        recompute_seconds: Recomputed forward compute per micro-batch.
        communication_seconds: Exposed TP/CP/EP/PP communication per micro-batch
            (the recomputed forward's included).
        micro_batch_seconds: The sum of the four above: the stage's time per micro-batch.
        data_parallel_seconds: Exposed gradient and parameter communication per step.
        optimizer_seconds: The optimizer step.
        flops: Model FLOPs per micro-batch on one rank (forward and backward,
            matmuls and attention as the layers count them; no recompute).
    """

    index: int
    forward_seconds: float
    backward_seconds: float
    recompute_seconds: float
    communication_seconds: float
    micro_batch_seconds: float
    data_parallel_seconds: float
    optimizer_seconds: float
    flops: float


@attrs.frozen
class StepTime:
    """The time of one training step and its breakdown.

    ``step_seconds`` is the sum of the six ``*_seconds`` parts: the slowest
    stage's compute, recompute and exposed communication over all
    micro-batches, the pipeline bubble, and the slowest stage's exposed
    data-parallel communication and optimizer step.

    Attributes:
        step_seconds: One optimizer step.
        compute_seconds: Forward and backward compute of the slowest stage, all micro-batches.
        recompute_seconds: Its recomputation.
        communication_seconds: Its exposed TP/CP/EP/PP communication.
        bubble_seconds: Pipeline fill and drain.
        data_parallel_seconds: Exposed DP/ZeRO communication after the last backward.
        optimizer_seconds: The optimizer step.
        micro_batches: Micro-batches per step per data-parallel rank.
        tokens_per_second: Global batch tokens over the step time.
        model_flops: Model FLOPs of the step over all devices (forward and
            backward of every matmul and attention core as the layers count
            them, the full score matrix included; no recompute).
        mfu: Model FLOPs utilisation: ``model_flops / (step * devices * peak)``.
        hfu: Hardware FLOPs utilisation: recomputed FLOPs included.
        peak_flops_per_second: The device's dense peak in the compute dtype.
        stages: Per-stage times.
        provenance: The timing profile, device entry, dtype and algorithms used.
    """

    step_seconds: float
    compute_seconds: float
    recompute_seconds: float
    communication_seconds: float
    bubble_seconds: float
    data_parallel_seconds: float
    optimizer_seconds: float
    micro_batches: int
    tokens_per_second: float
    model_flops: float
    mfu: float
    hfu: float
    peak_flops_per_second: float
    stages: tuple[StageTime, ...]
    provenance: Mapping[str, Any]

    @property
    def breakdown_seconds(self) -> dict[str, float]:
        """The six parts of the step, by name (they add up to ``step_seconds``)."""
        return {
            "compute": self.compute_seconds,
            "recompute": self.recompute_seconds,
            "communication": self.communication_seconds,
            "bubble": self.bubble_seconds,
            "data_parallel": self.data_parallel_seconds,
            "optimizer": self.optimizer_seconds,
        }


# ----------------------------------------------------------------------------- building blocks


def collective_seconds(
    op: str, nbytes: float, ranks: int, bandwidth: float, latency: float, algorithm: str = "ring", overhead: float = 0.0
) -> float:
    """Time of one collective (module docstring: Thakur et al. 2005, NCCL ``busbw``).

    Args:
        op: ``"all_reduce"``, ``"all_gather"``, ``"reduce_scatter"``,
            ``"all_to_all"`` or ``"p2p"``.
        nbytes: The buffer: all-reduce's buffer, all-gather's gathered output,
            reduce-scatter's input, all-to-all's send buffer, the message of a send.
        ranks: Ranks in the group.
        bandwidth: Bus bandwidth in bytes per second.
        latency: Latency of one step in seconds.
        algorithm: ``"ring"`` or ``"tree"`` (all-reduce only).
        overhead: A fixed time per collective call (launch and synchronisation);
            not charged to point-to-point sends.
    """
    if nbytes <= 0:
        return 0.0
    if op == "p2p":
        return nbytes / bandwidth + latency
    if ranks <= 1:
        return 0.0
    share = (ranks - 1) / ranks * nbytes / bandwidth
    if op == "all_reduce":
        steps = 2 * math.log2(ranks) if algorithm == "tree" else 2 * (ranks - 1)
        return overhead + 2 * share + steps * latency
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return overhead + share + (ranks - 1) * latency
    raise ValueError(f"unknown collective {op!r}")


def pipeline_seconds(stage_seconds: list[float] | tuple[float, ...], micro_batches: int, chunks_per_stage: int = 1) -> float:
    """``m * max(t) + (sum(t) - max(t)) / v`` (Narayanan et al. 2021, Section 2.2).

    For ``p`` equal stages of time ``t`` that is ``(m + (p - 1) / v) * t``:
    1F1B's bubble ``(p - 1) t`` and interleaved 1F1B's ``(p - 1) t / v``.
    """
    slowest = max(stage_seconds)
    return micro_batches * slowest + (sum(stage_seconds) - slowest) / chunks_per_stage


def compute_dtype(precision: PrecisionSpec, hardware: HardwareSpec) -> str:
    """The name of the compute dtype in ``hardware.peak_flops`` (``bf16`` before ``fp16`` for 2 bytes).

    Raises:
        ConfigError: The hardware states no peak for the activations' width.
    """
    names = _DTYPES.get(precision.activation_bytes, ())
    for name in names:
        if name in hardware.peak_flops:
            return name
    raise ConfigError(
        "$.hardware.peak_flops",
        f"{hardware.name} states no peak FLOP/s for {precision.activation_bytes}-byte activations "
        f"(one of {list(names) or ['?']}); it has {sorted(hardware.peak_flops) or 'none'}",
    )


def _require(hardware: HardwareSpec, field: str, why: str) -> float:
    value = getattr(hardware, field)
    if value is None:
        raise ConfigError(f"$.hardware.{field}", f"{hardware.name} does not state {field}, which {why} needs")
    return value


@attrs.frozen
class _Shape:
    """What a layer's communication and grouped GEMMs need, read once per layer group.

    Attributes (per micro-batch on one rank):
        blocks: TP collectives per direction (2 for a decoder layer: attention and FFN).
        vocab: ``"embedding"``, ``"head"`` or ``""`` (vocabulary-parallel op pattern).
        tp_bytes: Bytes of one TP collective (the full ``T x h`` activation).
        kv_bytes: K and V of the rank's chunk (a CP ring step).
        qkvo_bytes: q, k, v and the output heads (a CP all-to-all each way).
        attention_calls: Whether the layer has an attention core.
        ep_bytes: Routed tokens' bytes one all-to-all sends (EP dispatch or combine).
        grouped_flops: Forward FLOPs of the routed experts (part of the matmul FLOPs).
        expert_rows: Tokens per local expert.
        permute_bytes: Bytes of the dispatched tokens (MoE permutation passes).
        permute_input_bytes: Bytes of the tokens entering the MoE layer on the
            rank (the first permutation reads them, the last writes them back).
        mla: Whether the attention core's query/key head dim exceeds its value
            head dim (MLA), priced with the device's MLA attention figures.
        router_elements: Routed tokens times experts of an MoE layer's router
            (its top-k and auxiliary-loss kernels scale with them).
        mla_copy_bytes: HBM bytes MLA's query/key assembly moves each way
            (rotary part rotated, query and key concatenated, value made
            contiguous; backward the split gradients concatenated back).
        latent_rank: MLA's KV latent rank (``attUp`` recompute), 0 if none.
        score_flops: The softmax's elementwise FLOPs over the score matrix.
        table_elements: Elements of a lookup table's shard (a layer with
            parameters and no matmul: the embedding).
        gemms: The dense GEMMs whose shapes are known, ``(rows, fan_out,
            fan_in)``: each linear weight the kind records
            (``LayerCost.weight_shapes``) over the micro-batch's tokens, the
            routed experts' excluded, and an MoE router's gating GEMM.
        expert_gemms: The routed experts' grouped GEMMs, ``(experts on the
            rank, rows per expert, fan_out, fan_in)``: SwiGLU's gate and up
            projection, then the down projection.
    """

    blocks: int = 0
    vocab: str = ""
    tp_bytes: float = 0.0
    kv_bytes: float = 0.0
    qkvo_bytes: float = 0.0
    attention_calls: int = 0
    ep_bytes: float = 0.0
    grouped_flops: float = 0.0
    expert_rows: float = 0.0
    permute_bytes: float = 0.0
    permute_input_bytes: float = 0.0
    mla: bool = False
    mla_copy_bytes: float = 0.0
    router_elements: float = 0.0
    latent_rank: int = 0
    score_flops: float = 0.0
    table_elements: float = 0.0
    gemms: tuple[tuple[int, int, int], ...] = ()
    expert_gemms: tuple[tuple[int, float, int, int], ...] = ()


def _shape(config: Any, kind: LayerKind, x: LayerContext, cost: LayerCost) -> _Shape:
    """Read a layer config's Hugging Face fields (module docstring: known limitations)."""
    inner = getattr(config, "layer", None)
    if inner is not None and hasattr(inner, "config"):
        # A module wrapping another kind's layer (the MTP module): its layer's traffic and its own head.
        base = _shape(inner.config, kind, x, cost)
        return attrs.evolve(base, vocab="head", table_elements=0.0)
    table = 0.0
    if cost.params and not cost.forward.matmul_flops:
        table = sum(p.stored_elements / x.tp if p.tp_split else p.stored_elements for p in cost.params if p.shared_with is None)
    h = getattr(config, "hidden_size", None)
    if not isinstance(h, int):
        return _Shape(table_elements=table)
    act = x.precision.activation_bytes
    T = x.tokens
    tp = x.tp
    vocab = ""
    if getattr(config, "vocab_size", None) is not None:
        vocab = "embedding" if kind.placement == "first" else "head"
    heads = getattr(config, "num_attention_heads", None)
    blocks = 2 if heads is not None else 0
    kv_bytes = qkvo_bytes = scores = 0.0
    latent = 0
    mla = False
    mla_copy = 0.0
    if heads is not None:
        scores = SOFTMAX_OPS_PER_SCORE * x.micro_batch_size * (heads // tp) * (x.seq_len // x.cp) * x.seq_len
        if getattr(config, "kv_lora_rank", None) is not None:
            # MLA: the up-projected per-head keys (nope + rope) and values are exchanged.
            qk = config.qk_nope_head_dim + config.qk_rope_head_dim
            kv_bytes = T * heads / tp * (qk + config.v_head_dim) * act
            qkvo_bytes = T * heads / tp * (2 * qk + 2 * config.v_head_dim) * act
            latent = config.kv_lora_rank
            mla = qk > config.v_head_dim
            # Megatron-Core MLASelfAttention.get_query_key_value_tensors (and HF
            # DeepseekV2Attention likewise): q_pos_emb rotated (read + write), query =
            # cat(q_no_pe, q_pos_emb) (read + write), key = cat(k_no_pe, expanded
            # k_pos_emb) (read the no-rope part, write the key), value.contiguous()
            # where the runtime copies it (read + write). Backward moves the same: the
            # split backwards concatenate q's and kv's gradients, the rotary backward,
            # the expand backward's sum over heads.
            per_head = 2 * config.qk_rope_head_dim + 2 * qk + config.qk_nope_head_dim + qk
            if "mla_contiguous_qkv" in x.traits:
                per_head += 2 * config.v_head_dim
            mla_copy = T * heads / tp * per_head * act
        else:
            groups = getattr(config, "num_key_value_heads", None) or heads
            d = getattr(config, "head_dim", None) or h // heads
            kv_heads = max(groups / tp, 1)  # KV heads are replicated when tp > groups
            kv_bytes = T * kv_heads * 2 * d * act
            qkvo_bytes = T * (2 * heads / tp + 2 * kv_heads) * d * act
    ep_bytes = grouped = rows = permute = permute_input = router = 0.0
    routed_shapes: set[tuple[int, int]] = set()
    gemms: list[tuple[int, int, int]] = []
    expert_gemms: tuple[tuple[int, float, int, int], ...] = ()
    experts = getattr(config, "num_experts", None)
    if experts is not None and getattr(config, "num_experts_per_tok", None) is not None:
        # Tokens a rank's experts process (hp_plugins._blocks.moe_tokens): k * T / sp,
        # gathered over etp, padded to capacity when stated.
        routed = T / x.sp_degree * config.num_experts_per_tok
        if getattr(config, "pad_to_capacity", False) and getattr(config, "capacity_factor", None):
            routed *= config.capacity_factor
        processed = routed * x.etp
        ep_bytes = routed * h * act
        width = config.moe_intermediate_size // x.etp
        grouped = 2 * processed * h * 3 * width  # gate, up and down projections of SwiGLU experts
        rows = processed / max(experts // x.ep, 1)
        permute = processed * h * act
        permute_input = T / x.sp_degree * h * act
        router = T / x.sp_degree * experts
        local = max(experts // x.ep, 1)
        expert_gemms = ((local, rows, 2 * width, h), (local, rows, h, width))
        routed_shapes = {(2 * width, h), (h, width)}
        gemms.append((T // x.sp_degree, experts, h))  # the router's gating GEMM (not a recorded weight)
    # Every other linear runs over the micro-batch's tokens (SP-gathered under TP).
    gemms += [(T, fan_out, fan_in) for fan_out, fan_in in cost.weight_shapes if (fan_out, fan_in) not in routed_shapes]
    return _Shape(
        blocks=blocks, vocab=vocab, tp_bytes=T * h * act, kv_bytes=kv_bytes, qkvo_bytes=qkvo_bytes,
        attention_calls=1 if heads is not None else 0, ep_bytes=ep_bytes, grouped_flops=grouped, expert_rows=rows,
        permute_bytes=permute, permute_input_bytes=permute_input, mla=mla, mla_copy_bytes=mla_copy, router_elements=router, latent_rank=latent, score_flops=scores, table_elements=table,
        gemms=tuple(gemms), expert_gemms=expert_gemms,
    )


@attrs.frozen
class _Links:
    """Per group: (bus bandwidth, latency per step, fixed time per call), resolved once per call."""

    tp: tuple[float, float, float]
    cp: tuple[float, float, float]
    cp_a2a: tuple[float, float, float]
    ep: tuple[float, float, float]
    dp: tuple[float, float, float]
    pp: tuple[float, float, float]


def _links(hardware: HardwareSpec, parallel: ParallelSpec, dev: DeviceEfficiency) -> _Links:
    """Bus bandwidth and latency of each group (Megatron-Core rank order tp, cp, ep, dp, pp)."""
    node = hardware.devices_per_node

    fixed = dev.collective_overhead_seconds.value

    def level(span: int, group: int, a2a: bool = False) -> tuple[float, float, float]:
        if group <= 1:
            return (1.0, 0.0, 0.0)  # no traffic: any positive bandwidth
        if node is None:
            raise ConfigError("$.hardware.devices_per_node", f"{hardware.name} does not state devices_per_node, which placing a group of {group} ranks needs")
        if span <= node:
            bw = _require(hardware, "intra_node_bandwidth_bytes_per_second", "intra-node communication")
            eff = dev.all_to_all_bus.value if a2a else dev.intra_node_bus.value
            return (bw * eff, _require(hardware, "intra_node_latency_seconds", "intra-node communication"), fixed)
        bw = _require(hardware, "inter_node_bandwidth_bytes_per_second", "inter-node communication")
        return (bw * dev.inter_node_bus.value, _require(hardware, "inter_node_latency_seconds", "inter-node communication"), fixed)

    p = parallel
    dense_dp = p.dp * p.cp
    pp_level = (1.0, 0.0, 0.0)
    if p.pp > 1:
        stride = p.tp * p.cp * p.dp
        if node is None:
            raise ConfigError("$.hardware.devices_per_node", f"{hardware.name} does not state devices_per_node, which pipeline sends need")
        if stride < node:
            pp_level = (_require(hardware, "intra_node_bandwidth_bytes_per_second", "pipeline sends") * dev.intra_node_bus.value,
                        _require(hardware, "intra_node_latency_seconds", "pipeline sends"), 0.0)
        else:
            pp_level = (_require(hardware, "inter_node_bandwidth_bytes_per_second", "pipeline sends") * dev.inter_node_bus.value,
                        _require(hardware, "inter_node_latency_seconds", "pipeline sends"), 0.0)
    return _Links(
        tp=level(p.tp, p.tp),
        cp=level(p.tp * p.cp, p.cp),
        cp_a2a=level(p.tp * p.cp, p.cp, a2a=True),
        ep=level(p.ep * p.etp, p.ep, a2a=True),
        dp=level(p.tp * dense_dp, max(dense_dp, p.expert_dp)),
        pp=pp_level,
    )


@attrs.frozen
class _Rates:
    """The per-call constants every layer's time is priced with."""

    dtype: str
    peak: float
    matmul: float
    gemm_table: GemmTable | None
    grouped: float
    half_rows: float
    attn_fwd: float
    attn_bwd: float
    attn_fwd_overhead: float
    attn_bwd_overhead: float
    mla_attn_fwd: float
    mla_attn_bwd: float
    mla_attn_fwd_overhead: float
    mla_attn_bwd_overhead: float
    memory: float
    permute_memory: float
    permute_overhead: float
    router_fwd: float
    router_bwd: float
    flash: bool
    causal: float
    attn_backward: float
    mm_backward: float
    el_bytes_per_flop: float
    el_backward: float
    permute_passes: float
    act_bytes: int
    grad_bytes: int
    cp: int
    cp_algorithm: str
    tp: int
    sp: bool
    ep: int
    algorithm: str
    links: _Links
    expose_tp: float
    expose_cp: float
    expose_ep: float
    slowdown: float


def _rates(
    parallel: ParallelSpec, hardware: HardwareSpec, timing: TimingProfile, precision: PrecisionSpec, attention: str
) -> _Rates:
    """The per-call constants of one layout on one device, as *timing* says its trainer runs (module docstring)."""
    dtype = compute_dtype(precision, hardware)
    peak = hardware.peak_flops[dtype]
    bandwidth = _require(hardware, "memory_bandwidth_bytes_per_second", "pricing memory-bound kernels and the optimizer step")
    dev = timing.device(hardware.architecture)
    links = _links(hardware, parallel, dev)
    ov = timing.overlap
    cp_algorithm = parallel.cp_kind  # the layout states it (``--cp-kind``)
    memory = bandwidth * dev.memory_bandwidth.value

    def _or(figure: Any, fallback: float) -> float:
        return fallback if figure is None else figure.value

    return _Rates(
        dtype=dtype, peak=peak, matmul=dev.matmul.value,
        gemm_table=dev.gemm_table if dev.gemm_table is not None and dev.gemm_table.dtype == dtype else None,
        grouped=dev.grouped_matmul.value, half_rows=dev.grouped_half_rows.value,
        attn_fwd=dev.attention_forward.value, attn_bwd=dev.attention_backward.value,
        attn_fwd_overhead=dev.attention_forward_overhead_seconds.value,
        attn_bwd_overhead=dev.attention_backward_overhead_seconds.value,
        mla_attn_fwd=_or(dev.mla_attention_forward, dev.attention_forward.value),
        mla_attn_bwd=_or(dev.mla_attention_backward, dev.attention_backward.value),
        mla_attn_fwd_overhead=_or(dev.mla_attention_forward_overhead_seconds, dev.attention_forward_overhead_seconds.value),
        mla_attn_bwd_overhead=_or(dev.mla_attention_backward_overhead_seconds, dev.attention_backward_overhead_seconds.value),
        memory=memory, permute_memory=bandwidth * _or(dev.moe_permute_bandwidth, dev.memory_bandwidth.value),
        permute_overhead=_or(dev.moe_permute_overhead_seconds, 0.0),
        router_fwd=_or(dev.moe_router_forward_seconds, 0.0) / ROUTER_REFERENCE_ELEMENTS,
        router_bwd=_or(dev.moe_router_backward_seconds, 0.0) / ROUTER_REFERENCE_ELEMENTS, flash=attention == "flash", causal=timing.flash_causal_fraction.value,
        attn_backward=timing.attention_backward_factor.value, mm_backward=timing.matmul_backward_factor.value,
        el_bytes_per_flop=timing.elementwise_accesses_per_flop.value * precision.activation_bytes,
        el_backward=timing.elementwise_backward_factor.value, permute_passes=timing.moe_permute_passes.value,
        act_bytes=precision.activation_bytes, grad_bytes=precision.grad_bytes, cp=parallel.cp, cp_algorithm=cp_algorithm, tp=parallel.tp,
        sp=parallel.sp, ep=parallel.ep, algorithm=timing.all_reduce_algorithm, links=links,
        expose_tp=1 - ov.tensor_parallel.value, expose_cp=1 - ov.context_parallel.value,
        expose_ep=1 - ov.expert_parallel.value,
        slowdown=_or(dev.sustained_slowdown, 1.0),
    )


# A layer's per-micro-batch times and FLOPs:
# (forward, backward, recompute, communication, model flops, recomputed flops)
_LayerTime = tuple[float, float, float, float, float, float]


def _layer_time(cost: LayerCost, shape: _Shape, full: bool, recomputed: frozenset[str], r: _Rates) -> _LayerTime:
    """One layer's per-micro-batch time under its recompute setting (module docstring)."""
    f = cost.forward
    # Compute.
    grouped = min(shape.grouped_flops, f.matmul_flops)
    mm_fwd, mm_bwd = _matmul_seconds(f.matmul_flops - grouped, grouped, shape, r)
    if f.attention_flops and r.flash:
        calls = shape.attention_calls * (r.cp if r.cp_algorithm == "p2p" else 1)
        executed = f.attention_flops * r.causal
        if shape.mla:  # q/k head dim wider than v's: measured apart (MLA)
            fwd_eff, bwd_eff, fwd_fixed, bwd_fixed = r.mla_attn_fwd, r.mla_attn_bwd, r.mla_attn_fwd_overhead, r.mla_attn_bwd_overhead
        else:
            fwd_eff, bwd_eff, fwd_fixed, bwd_fixed = r.attn_fwd, r.attn_bwd, r.attn_fwd_overhead, r.attn_bwd_overhead
        att_fwd = executed / (r.peak * fwd_eff) + calls * fwd_fixed
        att_bwd = r.attn_backward * executed / (r.peak * bwd_eff) + calls * bwd_fixed
    else:
        # Eager: batched GEMMs over the whole score matrix; masking happens after QK^T.
        att_fwd = f.attention_flops / (r.peak * r.matmul)
        att_bwd = r.mm_backward * att_fwd
    elementwise = f.elementwise_flops - (min(shape.score_flops, f.elementwise_flops) if r.flash else 0.0)
    el_fwd = elementwise * r.el_bytes_per_flop / r.memory
    mla_copy = shape.mla_copy_bytes / r.memory
    permute = 0.0
    if shape.permute_bytes and r.permute_passes:
        # Each pass reads and writes the dispatched tokens, except that the first
        # (permute) reads and the last (unpermute) writes the layer's own tokens.
        traffic = r.permute_passes * 2 * shape.permute_bytes + min(r.permute_passes, 2) * (shape.permute_input_bytes - shape.permute_bytes)
        permute = traffic / r.permute_memory + r.permute_overhead
    router_fwd = shape.router_elements * r.router_fwd
    forward = mm_fwd + att_fwd + el_fwd + permute + mla_copy + router_fwd
    backward = mm_bwd + att_bwd + r.el_backward * el_fwd + permute + mla_copy + shape.router_elements * r.router_bwd
    if shape.table_elements:
        # A lookup table's backward writes a dense gradient of the rank's shard and reads it
        # into the gradient buffer (PyTorch embedding_dense_backward, then main_grad +=).
        backward += shape.table_elements * 2 * (r.act_bytes + r.grad_bytes) / r.memory

    # Communication, exposed.
    tp_fwd = tp_bwd = 0.0
    if r.tp > 1 and (shape.blocks or shape.vocab):
        bw, lat, fixed = r.links.tp
        if r.sp:
            ag = collective_seconds("all_gather", shape.tp_bytes, r.tp, bw, lat, overhead=fixed)
            rs = collective_seconds("reduce_scatter", shape.tp_bytes, r.tp, bw, lat, overhead=fixed)
            tp_fwd = shape.blocks * (ag + rs)
            tp_bwd = shape.blocks * (ag + rs)
            if shape.vocab == "embedding":  # reduce-scatter forward, all-gather backward
                tp_fwd += rs
                tp_bwd += ag
            elif shape.vocab == "head":  # all-gather forward, reduce-scatter backward
                tp_fwd += ag
                tp_bwd += rs
            regather = shape.blocks * ag if "gather" in recomputed and not full else 0.0
        else:
            ar = collective_seconds("all_reduce", shape.tp_bytes, r.tp, bw, lat, r.algorithm, fixed)
            tp_fwd = (shape.blocks + (shape.vocab == "embedding")) * ar
            tp_bwd = (shape.blocks + (shape.vocab == "head")) * ar
            regather = 0.0
        tp_fwd *= r.expose_tp
        tp_bwd = (tp_bwd + regather) * r.expose_tp
    cp_fwd = cp_bwd = 0.0
    if r.cp > 1 and shape.attention_calls:
        if r.cp_algorithm == "p2p":
            bw, lat, _ = r.links.cp
            step = collective_seconds("p2p", shape.kv_bytes, 2, bw, lat)
            cp_fwd = (r.cp - 1) * step * r.expose_cp
            cp_bwd = (r.cp - 1) * collective_seconds("p2p", 2 * shape.kv_bytes, 2, bw, lat) * r.expose_cp
        else:
            bw, lat, fixed = r.links.cp_a2a
            # All-to-all is on the critical path of attention: never overlapped.
            cp_fwd = cp_bwd = collective_seconds("all_to_all", shape.qkvo_bytes, r.cp, bw, lat, overhead=fixed)
    ep_fwd = ep_bwd = 0.0
    if r.ep > 1 and shape.ep_bytes:
        bw, lat, fixed = r.links.ep
        ep_fwd = ep_bwd = 2 * collective_seconds("all_to_all", shape.ep_bytes, r.ep, bw, lat, overhead=fixed) * r.expose_ep
    comm_fwd = tp_fwd + cp_fwd + ep_fwd
    comm = comm_fwd + tp_bwd + cp_bwd + ep_bwd

    # Recompute.
    model_flops = (1 + r.mm_backward) * f.matmul_flops + (1 + r.attn_backward) * f.attention_flops
    if full:
        recompute = forward
        comm += comm_fwd
        recomputed_flops = f.matmul_flops + f.attention_flops
    else:
        recompute = 0.0
        recomputed_flops = 0.0
        dropped: dict[str, int] = {}
        for term in cost.activations:
            if term.switch is not None and term.switch in recomputed:
                dropped[term.switch] = dropped.get(term.switch, 0) + term.bytes
        core = sum(dropped.get(s, 0) for s in ATTENTION_CORE_SWITCHES)
        if recomputed & ATTENTION_CORE_SWITCHES and f.attention_flops:
            recompute += att_fwd + 2 * core / r.memory
            recomputed_flops += f.attention_flops
        for switch, nbytes in dropped.items():
            if switch in ATTENTION_CORE_SWITCHES or switch == "gather":
                continue
            if switch == "attUp" and shape.latent_rank:
                flops = 2 * shape.latent_rank * nbytes / r.act_bytes
                recompute += flops / (r.peak * r.matmul) + mla_copy
                recomputed_flops += flops
            else:
                recompute += 2 * nbytes / r.memory
    k = r.slowdown  # a whole run's time over its kernels' measured alone (DeviceEfficiency.sustained_slowdown)
    return (k * forward, k * backward, k * recompute, k * comm, model_flops, recomputed_flops)


def _matmul_seconds(dense: float, grouped: float, shape: _Shape, r: _Rates) -> tuple[float, float]:
    """Forward and backward seconds of a layer's dense and grouped GEMMs (module docstring).

    Without a measured table every dense GEMM runs at ``matmul`` and the
    grouped ones at the fitted ``grouped * rows / (rows + half_rows)``; the
    backward is ``matmul_backward_factor`` times the forward. A GEMM whose
    shape the device's :class:`~hp_core.specs.timing.GemmTable` holds takes the
    efficiency measured for each of its three passes, its backward being the
    input-gradient and weight-gradient GEMMs (scaled by
    ``matmul_backward_factor / 2``). Dense FLOPs the known shapes do not
    account for (a weight shape shared by two layers, a kind recording none)
    run at ``matmul``; if the known shapes claim more FLOPs than the layer
    counts, their token counts are not the layer's and the table is not used.
    """
    table = r.gemm_table
    fwd = bwd = 0.0  # FLOPs over efficiency
    rest = dense
    if table is not None and shape.gemms:
        listed, covered, f_eff, b_eff = table.price(shape.gemms)
        if listed <= dense * (1 + 1e-9):
            rest -= covered
            fwd += f_eff
            bwd += r.mm_backward / 2 * b_eff
    fwd += rest / r.matmul
    bwd += r.mm_backward * rest / r.matmul
    if grouped:
        rows = shape.expert_rows
        fitted = r.grouped * rows / (rows + r.half_rows)
        left = grouped
        if table is not None and shape.expert_gemms:
            listed, covered, f_eff, b_eff = table.price(shape.expert_gemms, grouped=True)
            scale = grouped / listed  # the layer's count of the routed FLOPs rules
            left -= covered * scale
            fwd += f_eff * scale
            bwd += r.mm_backward / 2 * b_eff * scale
        fwd += left / fitted
        bwd += r.mm_backward * left / fitted
    return fwd / r.peak, bwd / r.peak


@attrs.frozen
class LayerSeconds:
    """One layer's time per micro-batch under one recompute setting (:func:`layer_pricer`).

    Attributes:
        forward_seconds: Forward compute.
        backward_seconds: Backward compute, recompute excluded.
        recompute_seconds: Recomputed forward compute.
        communication_seconds: Exposed TP/CP/EP communication, a recomputed
            forward's and a re-gather's included.
        offload_seconds: The exposed part of moving offloaded bytes to the
            host and back (:func:`offload_seconds`).
    """

    forward_seconds: float
    backward_seconds: float
    recompute_seconds: float
    communication_seconds: float
    offload_seconds: float = 0.0

    @property
    def micro_batch_seconds(self) -> float:
        """The layer's whole time per micro-batch: the five parts added."""
        return (self.forward_seconds + self.backward_seconds + self.recompute_seconds
                + self.communication_seconds + self.offload_seconds)

    @property
    def backward_with_recompute_seconds(self) -> float:
        """Backward compute plus what it recomputes."""
        return self.backward_seconds + self.recompute_seconds


def offload_seconds(moved_bytes: float, host_link_bandwidth: float, forward_seconds: float, backward_seconds: float) -> float:
    """The exposed time of offloading *moved_bytes* of one layer's kept activations.

    The copy to the host runs on a copy engine while the forward computes,
    and the copy back is prefetched while the backward computes (Rhu et al.
    2016, "vDNN", Section 3; Megatron-Core ``cpu_offload.py`` overlaps both
    on a side stream). Each direction takes ``moved / host_link_bandwidth``
    and hides behind the layer's own forward, respectively its backward with
    recompute; what does not fit in that window is exposed:
    ``max(0, moved/B - forward) + max(0, moved/B - backward)``.
    """
    if moved_bytes <= 0:
        return 0.0
    copy = moved_bytes / host_link_bandwidth
    return max(0.0, copy - forward_seconds) + max(0.0, copy - backward_seconds)


@attrs.frozen
class LayerPricer:
    """Prices single layers of one run under recompute settings, as :func:`step_time` prices them.

    Build with :func:`layer_pricer`. Time is priced per setting, not added
    up over switches: the attention-core switches are rebuilt by one
    re-run of the core, so their times do not add up.

    Attributes:
        hardware_name: The device's name (for error messages).
        host_link_bandwidth_bytes_per_second: The device's host link, ``None`` when unstated.
    """

    hardware_name: str
    host_link_bandwidth_bytes_per_second: float | None
    _rates: _Rates = attrs.field(repr=False, alias="rates")

    def price(
        self,
        cost: LayerCost,
        config: Any,
        kind: LayerKind,
        context: LayerContext,
        *,
        full: bool,
        recomputed: frozenset[str],
        offloaded_bytes: int = 0,
    ) -> LayerSeconds:
        """One layer's time per micro-batch, recomputing fully or the switches *recomputed*.

        Args:
            offloaded_bytes: Bytes it moves to the host and back (``0``: no offload).

        Raises:
            ConfigError: Offload asked of a device that states no host link bandwidth.
        """
        return self.layer(cost, config, kind, context)(full, recomputed, offloaded_bytes)

    def layer(self, cost: LayerCost, config: Any, kind: LayerKind, context: LayerContext) -> Any:
        """:meth:`price` for one layer, its shapes read once: ``seconds(full, recomputed, offloaded_bytes)``."""
        shape = _shape(config, kind, context, cost)

        def seconds(full: bool, recomputed: frozenset[str], offloaded_bytes: int = 0) -> LayerSeconds:
            return self._seconds(cost, shape, full, recomputed, offloaded_bytes)

        return seconds

    def _seconds(self, cost: LayerCost, shape: _Shape, full: bool, recomputed: frozenset[str], offloaded_bytes: int) -> LayerSeconds:
        forward, backward, recompute, comm, _, _ = _layer_time(cost, shape, full, recomputed, self._rates)
        moved = 0.0
        if offloaded_bytes:
            if self.host_link_bandwidth_bytes_per_second is None:
                raise ConfigError(
                    "$.hardware.host_link_bandwidth_bytes_per_second",
                    f"{self.hardware_name} does not state host_link_bandwidth_bytes_per_second, which offload needs",
                )
            moved = offload_seconds(offloaded_bytes, self.host_link_bandwidth_bytes_per_second, forward, backward + recompute)
        return LayerSeconds(forward, backward, recompute, comm, moved)


def layer_pricer(
    parallel: ParallelSpec,
    *,
    hardware: HardwareSpec,
    timing: TimingProfile,
    precision: PrecisionSpec,
    attention: str,
) -> LayerPricer:
    """A :class:`LayerPricer` for one layout on one device, with the rates :func:`step_time` uses.

    Raises:
        ConfigError: A hardware field the timing model needs is unstated.
    """
    return LayerPricer(hardware.name, hardware.host_link_bandwidth_bytes_per_second, rates=_rates(parallel, hardware, timing, precision, attention))


def _stage_elements(layers: list[tuple[str, LayerCost]], parallel: ParallelSpec) -> tuple[int, int]:
    """Dense and routed-expert parameter elements one rank of a stage holds (before ZeRO sharding).

    Counted as the memory estimate counts them (:func:`hp_core.engine.stage.layer_elements`):
    TP-split tensors over ``tp``, routed experts over ``ep * etp``; a tied
    weight whose owner sits on the stage once.
    """
    owners = {kind for kind, _ in layers}
    dense = experts = 0
    for _, cost in layers:
        for group, n in layer_elements(cost, parallel.tp, parallel.ep, parallel.etp, owners).items():
            if group == "routed_expert":
                experts += n
            else:
                dense += n
    return dense, experts


def _optimizer_bytes_per_element(precision: PrecisionSpec, profile: TimingProfile) -> float:
    """HBM bytes the optimizer step moves per sharded parameter element (module docstring).

    Adam (Kingma and Ba 2015) reads the gradient and reads and writes the
    master parameters and each moment; the master copy is then read and cast
    into the model parameters; clipping passes over the gradient.
    """
    p = precision
    master = p.master_param_bytes or p.param_bytes
    moments = p.optimizer_moments * p.moment_bytes
    cast = (p.master_param_bytes + p.param_bytes) if p.master_param_bytes else 0
    return 2 * master + p.grad_bytes + 2 * moments + cast + profile.optimizer_grad_passes.value * p.grad_bytes


# ----------------------------------------------------------------------------- the step


def time_run(
    run: PreparedRun,
    hardware: HardwareSpec | None,
    recompute: RecomputeSpec | None = None,
    profile: TimingProfile | None = None,
) -> StepTime:
    """The time of one training step of a prepared run, as its runtime's trainer runs it.

    Layers are priced with the run's costs, the census's activations
    included, so what a recompute setting re-runs is priced from the same
    bytes the memory estimate and the recompute planner use.

    Args:
        run: The prepared run (:func:`hp_core.engine.prepare.prepare`).
        hardware: The device: peak FLOP/s, memory and link bandwidths, latencies,
            devices per node and ``architecture``.
        recompute: Per-layer recompute settings; nothing recomputed when ``None``.
        profile: A timing profile to use instead of the runtime's.

    Raises:
        ConfigError: No hardware, a runtime without a timing profile, a
            hardware field the step needs left unstated, or a recompute
            setting its kind cannot run (one line, with the field path).
    """
    rt = run.runtime
    timing = profile if profile is not None else rt.timing
    if timing is None:
        raise ConfigError("$.runtime", f"runtime {rt.name!r} states no timing profile, so it cannot price a step time; use a runtime that states one (see 'hp plugins') or pass a profile")
    if hardware is None:
        raise ConfigError("$.hardware", "a step time needs a device: name a hardware preset (--hardware, see 'hp plugins') or state one")
    model, parallel, precision, attention, zero = run.model, run.parallel, run.precision, run.attention, run.zero
    settings = run.settings(recompute)

    rates = _rates(parallel, hardware, timing, precision, attention)
    dtype, peak, links, memory, ov = rates.dtype, rates.peak, rates.links, rates.memory, timing.overlap
    dev = timing.device(hardware.architecture)
    cp_algorithm = parallel.cp_kind  # the layout states it (``--cp-kind``)

    kinds, costs, context, micro_batches = run.kinds, run.costs, run.context, run.micro_batches
    shapes = [_shape(group.config, kind, context, cost) for kind, group, cost in zip(kinds, model.layers, costs)]

    cache: dict[tuple[int, Setting], _LayerTime] = {}
    body: list[_LayerTime] = []
    for group, setting in zip(run.body_group, settings):
        key = (group, setting)
        if key not in cache:
            full, switches = run.resolve(group, setting)
            layer_time = _layer_time(costs[group], shapes[group], full, switches, rates)
            if setting.offload:
                # Offload's exposed copies count as communication (offload_seconds).
                kept = costs[group].input_bytes if full else costs[group].kept_under(switches)
                link = _require(hardware, "host_link_bandwidth_bytes_per_second", "offload")
                exposed = offload_seconds(offloaded_bytes(kept, setting.offload), link, layer_time[0], layer_time[1] + layer_time[2])
                layer_time = layer_time[:3] + (layer_time[3] + exposed,) + layer_time[4:]
            cache[key] = layer_time
        body.append(cache[key])
    body_costs = [(kinds[group].name, costs[group]) for group in run.body_group]

    def placed(where: str) -> tuple[list[_LayerTime], list[tuple[str, LayerCost]]]:
        groups = run.placed_groups(where)
        times = {i: _layer_time(costs[i], shapes[i], False, frozenset(), rates) for i in set(groups)}
        return [times[i] for i in groups], [(kinds[i].name, costs[i]) for i in groups]

    first_times, first_costs = placed("first")
    last_times, last_costs = placed("last")
    body_groups = run.layers.body_groups

    # Pipeline sends: the activation per chunk boundary, each way: split over TP under SP
    # (Megatron-Core get_tensor_shapes) or with the scatter/gather optimisation.
    hidden = next((getattr(model.layers[i].config, "hidden_size", 0) for i in body_groups), 0)
    split = parallel.tp if (parallel.sp or timing.pp_scatter_gather) else 1
    send_bytes = context.tokens * hidden * precision.activation_bytes / split
    send = 0.0
    if parallel.pp > 1:
        send = collective_seconds("p2p", send_bytes, 2, links.pp[0], links.pp[1])
        if timing.pp_scatter_gather and not parallel.sp and parallel.tp > 1:
            tp_bw, tp_lat, tp_fixed = links.tp
            send += collective_seconds("all_gather", send_bytes * parallel.tp, parallel.tp, tp_bw, tp_lat, overhead=tp_fixed)
        send *= (1 - ov.pipeline.value) * rates.slowdown

    # Per stage: per-micro-batch sums over its chunks, then DP and optimizer.
    grad_bytes, param_bytes = precision.grad_bytes, precision.param_bytes
    dense_group = parallel.dp * parallel.cp
    expert_group = parallel.expert_dp
    dp_bw, dp_lat, dp_fixed = links.dp
    opt_bytes = _optimizer_bytes_per_element(precision, timing)
    chunks = parallel.chunks
    stages: list[StageTime] = []
    recomputed_flops_per_stage: list[float] = []
    bounds = run.chunk_bounds
    for stage in range(parallel.pp):
        fwd = bwd = rec = comm = flops = rflops = 0.0
        stage_costs: list[tuple[str, LayerCost]] = []
        sends = 0
        for c in range(stage, chunks, parallel.pp):
            lo, hi = bounds[c]
            layers = body[lo:hi]
            stage_costs += body_costs[lo:hi]
            if c == 0:
                layers = first_times + layers
                stage_costs += first_costs
            if c == chunks - 1:
                layers = layers + last_times
                stage_costs += last_costs
            for t in layers:
                fwd += t[0]
                bwd += t[1]
                rec += t[2]
                comm += t[3]
                flops += t[4]
                rflops += t[5]
            sends += (c != chunks - 1) + (c != 0)
        comm += sends * send
        dense, experts = _stage_elements(stage_costs, parallel)
        if zero >= 3:
            # FSDP: gather parameters forward and again backward, reduce-scatter gradients, every micro-batch.
            per_mb = 0.0
            for n, group in ((dense, dense_group), (experts, expert_group)):
                gather = collective_seconds("all_gather", n * param_bytes, group, dp_bw, dp_lat, overhead=dp_fixed)
                per_mb += (2 if parallel.reshard_after_forward else 1) * gather
                per_mb += collective_seconds("reduce_scatter", n * grad_bytes, group, dp_bw, dp_lat, overhead=dp_fixed)
            comm += per_mb * (1 - ov.data_parallel.value) * rates.slowdown
            dp = 0.0
        else:
            dp = 0.0
            for n, group in ((dense, dense_group), (experts, expert_group)):
                if zero == 0:
                    dp += collective_seconds("all_reduce", n * grad_bytes, group, dp_bw, dp_lat, timing.all_reduce_algorithm, dp_fixed)
                else:
                    dp += collective_seconds("reduce_scatter", n * grad_bytes, group, dp_bw, dp_lat, overhead=dp_fixed)
                    dp += collective_seconds("all_gather", n * param_bytes, group, dp_bw, dp_lat, overhead=dp_fixed)
            dp *= (1 - ov.data_parallel.value) * rates.slowdown
        shard = (dense / dense_group + experts / expert_group) if zero >= 1 else dense + experts
        # Megatron-Core scales the dense and the expert gradient buffers alike by 1/(dp*cp)
        # before the reduction (distributed_data_parallel.py: expert_gradient_scaling_factor
        # = 1 / dp_cp size), whatever the expert data-parallel group's size.
        reduced = (dense + experts) * (dense_group > 1)
        buffer_passes = timing.grad_buffer_passes.value * (dense + experts) + timing.grad_scale_passes.value * reduced
        opt = (shard * opt_bytes + buffer_passes * grad_bytes) / memory * rates.slowdown
        stages.append(StageTime(stage, fwd, bwd, rec, comm, fwd + bwd + rec + comm, dp, opt, flops))
        recomputed_flops_per_stage.append(rflops)

    per_mb = [s.micro_batch_seconds for s in stages]
    pipe = pipeline_seconds(per_mb, micro_batches, parallel.vpp)
    slow = max(stages, key=lambda s: s.micro_batch_seconds)
    tail = max(stages, key=lambda s: s.data_parallel_seconds + s.optimizer_seconds)
    step = pipe + tail.data_parallel_seconds + tail.optimizer_seconds
    m = micro_batches
    world = parallel.world_size
    replicas = world // parallel.pp
    model_flops = m * replicas * sum(s.flops for s in stages)
    hardware_flops = model_flops + m * replicas * sum(recomputed_flops_per_stage)
    tokens = parallel.resolved_global_batch_size * parallel.seq_len
    provenance = {
        "timing_profile": timing.name,
        "runtime": rt.name,
        "device_efficiency": dev.architecture,
        "hardware": hardware.name,
        "dtype": dtype,
        "attention": attention,
        "all_reduce_algorithm": timing.all_reduce_algorithm,
        "cp_kind": cp_algorithm,
        "sustained_slowdown": rates.slowdown,
    }
    return StepTime(
        step_seconds=step,
        compute_seconds=m * (slow.forward_seconds + slow.backward_seconds),
        recompute_seconds=m * slow.recompute_seconds,
        communication_seconds=m * slow.communication_seconds,
        bubble_seconds=pipe - m * slow.micro_batch_seconds,
        data_parallel_seconds=tail.data_parallel_seconds,
        optimizer_seconds=tail.optimizer_seconds,
        micro_batches=m,
        tokens_per_second=tokens / step,
        model_flops=model_flops,
        mfu=model_flops / (step * world * peak),
        hfu=hardware_flops / (step * world * peak),
        peak_flops_per_second=peak,
        stages=tuple(stages),
        provenance=provenance,
    )
