"""The per-call constants every layer's time is priced with: dtype, peak, efficiencies and links.

:func:`_rates` resolves, once per layout and device, the figures of the
runtime's :class:`~hp_core.specs.timing.TimingProfile` (each sourced there)
and the device's :class:`~hp_core.specs.HardwareSpec`; :func:`_links` places
each parallel group intra- or inter-node (Megatron-Core's rank order tp, cp,
ep, dp, pp).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Mapping

import attrs

from hp_core.collectives import NCCL, CollectiveCall, CollectiveModel, Fabric, GroupPlacement, Routing, place_group
from hp_core.engine.timing.attention_speedup import attention_speedups as _attention_speedups
from hp_core.engine.timing.recipe_rates import _recipe_rates
from hp_core.errors import ConfigError
from hp_core.precision_recipes import PrecisionRecipe
from hp_core.specs import HardwareSpec, ParallelSpec, PrecisionSpec
from hp_core.specs.overlap import HostOverhead, replicate_split_error
from hp_core.specs.gemms import MachineGemms, ShapedGemms
from hp_core.specs.timing import ROUTER_REFERENCE_ELEMENTS, DeviceEfficiency, GemmTable, TimingProfile

__all__ = ["FSDP1_UNIT_FORWARD_SHARE", "RECIPE_FIELDS", "compute_dtype", "compute_dtype_rates"]

# The compute dtype by activation width; FP8 and FP4 GEMMs come from a precision recipe (docs/precision.md).
_DTYPES = {2: ("bf16", "fp16"), 4: ("fp32", "tf32")}


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
class _Links:
    """Each group's placement on the cluster, the fabric and the collective model, resolved once per call.

    :meth:`seconds` prices one call of a group's collective (:mod:`hp_core.collectives`).
    """

    fabric: Fabric
    groups: Mapping[str, GroupPlacement]
    model: CollectiveModel
    algorithm: str
    sms: int | None = None  # the SMs of the model's kernels (TimingProfile.collective_kernel_sms), on every call
    # Prices already asked for in this call, by (group, op, bytes): a step asks the same ones of every stage
    # holding the same layers. The model is a function of the call alone (CollectiveModel), so a price kept
    # is the price it would give again.
    _prices: dict[tuple[str, str, float, Routing | None], float] = attrs.field(
        factory=dict, init=False, eq=False, repr=False)

    def seconds(self, group: str, op: str, nbytes: float, routing: Routing | None = None) -> float:
        key = (group, op, nbytes, routing)
        found = self._prices.get(key)
        if found is None:
            found = self._prices[key] = self._price(group, op, nbytes, routing)
        return found

    def _price(self, group: str, op: str, nbytes: float, routing: Routing | None) -> float:
        placement = self.groups[group]
        if op == "p2p":
            placement = GroupPlacement(2, 2 if placement.per_node > 1 else 1, 1 if placement.per_node > 1 else 2)
        elif placement.ranks <= 1:
            return 0.0
        return self.model.seconds(CollectiveCall(op, nbytes, placement, self.fabric, self.algorithm, routing, self.sms))

    def subgroup_seconds(self, group: str, op: str, ranks: int, nbytes: float) -> float:
        """One call over *ranks* members of *group* (a schedule's gradient sync between mirrored pipeline
        ranks): on one node where the whole group is, else one member per node (the conservative case)."""
        inside = self.groups[group].intra_node
        placement = GroupPlacement(ranks, ranks if inside else 1, 1 if inside else ranks)
        return self.model.seconds(CollectiveCall(op, nbytes, placement, self.fabric, self.algorithm, sms=self.sms))


def _links(hardware: HardwareSpec, parallel: ParallelSpec, dev: DeviceEfficiency, timing: TimingProfile,
           model: CollectiveModel) -> _Links:
    """Every group placed by the layout's rank order (Megatron-Core's ``tp-cp-ep-dp-pp`` by default) on nodes of
    ``devices_per_node`` devices, and the links they run on (:mod:`hp_core.collectives`)."""
    p = parallel
    order = tuple(p.rank_order.split("-"))
    dense = {"tp": p.tp, "cp": p.cp, "ep": 1, "dp": p.dp, "pp": p.pp}
    expert = {"tp": p.etp, "cp": 1, "ep": p.ep, "dp": p.expert_dp, "pp": p.pp}
    replicate = timing.schedule.fsdp_replicate
    split = replicate_split_error(replicate, p.dp, p.ep, p.expert_dp) if replicate > 1 else None
    if split is not None:
        raise ConfigError("$.runtime.options.hsdp_replicate", split)
    if replicate > 1:
        # HSDP: the data-parallel dimension is torchtitan's dp_replicate * dp_shard, the replicate part the slower
        # (parallel_dims.py builds the mesh [pp, dp_replicate, dp_shard, cp, tp]): "dp" and "edp" are then the shard
        # groups FSDP gathers and reduce-scatters over, "hsdp" and "ehsdp" the replicate groups its all-reduce spans.
        at = order.index("dp") + 1
        order = order[:at] + ("dp_replicate",) + order[at:]
        dense = {**dense, "dp": p.dp // replicate, "dp_replicate": replicate}
        expert = {**expert, "dp": p.expert_dp // replicate, "dp_replicate": replicate}
    wanted = {"tp": (dense, ("tp",)), "cp": (dense, ("cp",)), "dp": (dense, ("cp", "dp")), "ep": (expert, ("ep",)),
              "etp": (expert, ("tp",)), "edp": (expert, ("dp",)), "pp": (dense, ("pp",))}
    if replicate > 1:
        wanted.update(hsdp=(dense, ("dp_replicate",)), ehsdp=(expert, ("dp_replicate",)))
    sizes = {name: math.prod(s[d] for d in dims) for name, (s, dims) in wanted.items()}
    node = hardware.devices_per_node
    if node is None:
        if any(n > 1 for n in sizes.values()):
            group = next(name for name, n in sizes.items() if n > 1)
            raise ConfigError("$.hardware.devices_per_node",
                              f"{hardware.name} does not state devices_per_node, which placing the {group} group of {sizes[group]} ranks needs")
        node = 1
    groups = {name: place_group(s, order, dims, node) for name, (s, dims) in wanted.items()}
    intra = any(g.ranks > 1 and g.per_node > 1 for g in groups.values())
    inter = any(g.nodes > 1 for g in groups.values())
    intra_bw = _require(hardware, "intra_node_bandwidth_bytes_per_second", "intra-node communication") if intra else 1.0
    intra_lat = _require(hardware, "intra_node_latency_seconds", "intra-node communication") if intra else 0.0
    nic = inter_lat = nic_raw = nic_a2a = inter_a2a_lat = None
    if inter:
        _require(hardware, "inter_node_bandwidth_bytes_per_second" if hardware.nic_bandwidth_bytes_per_second is None
                 else "nic_bandwidth_bytes_per_second", "inter-node communication")
        nic_raw = hardware.nic_share_bytes_per_second()
        nic = nic_raw * dev.inter_node_bus.value
        if dev.inter_node_all_to_all_bus is not None:
            nic_a2a = nic_raw * dev.inter_node_all_to_all_bus.value
        inter_lat = _require(hardware, "inter_node_latency_seconds", "inter-node communication")
        inter_a2a_lat = hardware.inter_node_all_to_all_latency_seconds
    nvls = hardware.nvls_bandwidth_bytes_per_second
    fabric = Fabric(
        intra_bandwidth=intra_bw * dev.intra_node_bus.value, intra_a2a_bandwidth=intra_bw * dev.all_to_all_bus.value,
        intra_latency=intra_lat, nic_bandwidth=nic, inter_latency=inter_lat, nvls_bandwidth=nvls,
        overhead=dev.collective_overhead_seconds.value,
        intra_link_bandwidth=intra_bw if intra else None, nic_link_bandwidth=nic_raw, nic_a2a_bandwidth=nic_a2a,
        inter_a2a_latency=inter_a2a_lat, architecture=hardware.architecture,
    )
    sms = timing.collective_kernel_sms(model.name)
    return _Links(fabric, groups, model, timing.all_reduce_algorithm, None if sms is None else int(sms.value))


@attrs.frozen
class _Rates:
    """The per-call constants every layer's time is priced with."""

    dtype: str
    peak: float
    matmul: float
    gemm_table: GemmTable | ShapedGemms | MachineGemms | None  # per-shape GEMM pricing (_gemm_table)
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
    tp_comm_overlap: bool = False
    tp_overlap_bwd_rs: bool = True  # OverlapSchedule.tp_overlap_input_grad_reduce_scatter
    # OverlapSchedule.userbuffers_sm_margins where tp_comm_overlap runs (tp > 1), else (); HardwareSpec.sm_count.
    ub_margins: tuple[tuple[str, int], ...] = ()
    # OverlapSchedule.userbuffers where tp_comm_overlap runs: a layer refusing its userbuffers runs no TP overlap.
    userbuffers: bool = False
    sm_count: int | None = None
    ep_comm_overlap: bool = False
    delay_wgrad: bool = False  # OverlapSchedule.delay_wgrad
    host: HostOverhead | None = None
    alternate_mm_switches: frozenset[str] = frozenset()  # TimingProfile.alternate_matmul_recompute
    alternate_also: frozenset[str] = frozenset()  # TimingProfile.alternate_policy_recomputes
    eager_elementwise: bool = False  # TimingProfile.eager_elementwise
    eager_rotary: bool = False  # TimingProfile.eager_rotary
    block_tokens: int | None = None  # TimingProfile.attention_block_tokens: a block-sparse attention kernel's block
    ssd_fwd: float | None = None  # DeviceEfficiency.ssd_scan_forward: a Mamba-2 SSD scan's rate (LayerWork.ssd_scan)
    ssd_bwd: float | None = None  # its ssd_scan_backward; None (either): the scan is priced as fused attention
    # TimingProfile.moe_permutation: (forward per row, forward per token, backward per row, backward per token)
    # accesses per element of the dispatched width, in place of permute_passes; None: the passes.
    permute_counted: tuple[float, float, float, float] | None = None
    # Why that counted permutation cannot be priced here (its kernels fused away); raised by an MoE layer's pricing
    # only (elementwise.permute_seconds), so a model without one is priced. None: it can be.
    permute_refusal: str | None = None
    permute_tokens: str = "own"  # TimingProfile.moe_permute_tokens: the passes' token side, own or received
    permute_sort_passes: float = 0.0  # TimingProfile.moe_local_sort_passes: passes only with > 1 local expert
    # FSDP1's per-unit serial time (DeviceEfficiency.fsdp1_unit_seconds) in a body layer's forward and backward,
    # once per micro-batch; 0 where the profile does not run FSDP1 (TimingProfile.fsdp1_units).
    unit_fwd: float = 0.0
    unit_bwd: float = 0.0
    # A low-precision recipe (hp_core.precision_recipes; docs/precision.md): its GEMM kernel's measured speedup
    # over bf16, the HBM bytes quantizing one element of an input or output gradient moves, forward and
    # backward, and of a weight per micro-batch (0 where the copies are cached: not under ZeRO-3), and the share of
    # a compute-dtype GEMM input's bytes a sequence-parallel gather moves.
    low_precision: bool = False
    gemm_speedup: float = 1.0  # the forward GEMMs' (fprop)
    gemm_speedup_backward: float = 1.0  # the backward GEMMs' (dgrad and wgrad, half the backward FLOPs each)
    # The three passes' single figures (fprop, dgrad, wgrad) the two above are made of; empty: (forward, backward,
    # backward). What a pass without a curve takes in speedup_shapes.
    gemm_pass_speedups: tuple[float, ...] = ()
    # The speedups by GEMM size of the three passes (fprop, dgrad, wgrad; DeviceEfficiency.pass_curves), empty where
    # none is stated: each layer's two figures above are made of them (speedup_shapes.shape_speedup_rates).
    gemm_speedup_curves: tuple[Any, ...] = ()
    quant_input_fwd: float = 0.0
    quant_input_bwd: float = 0.0
    quant_grad: float = 0.0
    quant_weight: float = 0.0
    # ... and of a weight once a step where the copies are cached (stage_weights.cached_weight_seconds).
    quant_weight_step: float = 0.0
    # The recipe holds its weights in their GEMM format (PrecisionRecipe.stores_weights: Transformer Engine's FP8
    # parameters, Megatron-Core's fp8_param): a frozen weight, which no optimizer step updates or casts again, is
    # quantized once, when it is built or loaded, never in a step (stage_weights).
    weights_stored_quantized: bool = False
    # The same, forward and backward, for the input of a GEMM its trainer keeps in the compute dtype and quantizes again
    # in backward (LayerWork.original_input_gemms) where the recipe can (PrecisionRecipe.requantizes_original_input).
    quant_original_fwd: float = 0.0
    quant_original_bwd: float = 0.0
    # HBM bytes per output element of a fprop, dgrad and wgrad GEMM whose output a separate pass rescales
    # (PrecisionRecipe.rescaled_outputs: a read and a write in the compute dtype), 0 for a pass that is not.
    rescale: tuple[float, float, float] = (0.0, 0.0, 0.0)
    gather_share: float = 1.0
    gemm_scope: str = "all"  # PrecisionRecipe.gemms: the GEMMs the recipe quantizes
    # FP8 attention (PrecisionRecipe.attention_format): the measured (forward, backward) speedups over bf16 of the
    # full-width and the MLA attention kernel at the call's sequence length (_attention_speedups); 1.0 where none.
    attn_speedup: tuple[float, float] = (1.0, 1.0)
    mla_attn_speedup: tuple[float, float] = (1.0, 1.0)
    # FP8 attention on Blackwell: a windowed core's backward runs the full causal triangle at the full-width FP8 rate
    # (hp_core.engine.timing.attention_speedup.WINDOWED_FP8_BACKWARD_SOURCE; docs/precision.md, "FP8 attention").
    windowed_fp8_full_backward: bool = False
    # Modules in a quantized format of their own (PrecisionRecipe.module_recipes): (format, that recipe's figures above).
    module_rates: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    # Transformer Engine fuses a grouped MLP's activation into its GEMMs' epilogues (LayerWork.epilogue_activation_flops)
    # only under an MXFP8 or NVFP4 recipe on compute capability 10 (ops/fused/grouped_mlp.py fuse_grouped_mlp_ops,
    # is_supported): the Blackwell family here.
    epilogue_activation: bool = False
    # ... and quantizes FC2's input and FC1's output gradient in those epilogues under MXFP8 only: under NVFP4 its FC1
    # and FC2-dgrad kernels write them in bf16 and a grouped quantize kernel follows (grouped_mlp.py at TE@d0067d0,
    # fuser_forward use_nvfp4: fc2_in = d_tensor, _group_quantize_for_grouped_mlp; fuser_backward: fc1_dy_bf16).
    epilogue_quantization: bool = False


# The fields above a low-precision recipe sets (recipe_rates._recipe_rates, attention_speedup._attention_speedups and
# the epilogue flags): a layer its recipe keeps in the compute dtype takes _Rates' own defaults for them.
RECIPE_FIELDS = ("low_precision", "gemm_speedup", "gemm_speedup_backward", "gemm_pass_speedups", "gemm_speedup_curves", "quant_input_fwd", "quant_input_bwd",
                 "quant_grad", "quant_weight", "quant_weight_step", "weights_stored_quantized", "quant_original_fwd", "quant_original_bwd", "rescale", "gather_share", "gemm_scope",
                 "attn_speedup", "mla_attn_speedup", "windowed_fp8_full_backward", "module_rates", "epilogue_activation",
                 "epilogue_quantization")


def compute_dtype_rates(r: _Rates) -> _Rates:
    """*r* for a layer whose GEMMs all stay in the compute dtype under the run's recipe (:attr:`LayerWork.quantized
    <hp_core.costs.LayerWork.quantized>` false: a first or last layer kept in bf16): every figure the recipe sets
    (:data:`RECIPE_FIELDS`) at :class:`_Rates`' default, which is the compute dtype's (the rates made without a
    recipe: tests/core/test_compute_dtype_rates.py). Transformer Engine's fuser fuses no grouped MLP outside an FP8
    autocast (``ops/fuser.py``: recipe ``None``), so the epilogue flags go too."""
    defaults = {f.name: f.default for f in attrs.fields(_Rates) if f.name in RECIPE_FIELDS}
    return attrs.evolve(r, **defaults)


# The share of FSDP1's per-unit time charged to the forward; the rest to the backward. Stated, not fitted (only the
# sum is): a unit's forward runs its pre-forward hook (the rate limiter's wait, the unshard and its FlatParameter
# copy) and the post-forward reshard, its backward those again (pre-backward unshard, post-backward reshard) and the
# gradient hooks (the fp32 cast, the divide by the world size, the reduce-scatter's issue and FlatParameter copy)
# (torch/distributed/fsdp/_runtime_utils.py _pre_forward, _post_forward, _pre_backward_hook, _post_backward_hook):
# more than the forward, taken as twice it, the split of the GEMMs' work. A convention, not a measurement; it moves
# only what depends on forward against backward: the windows the layer's collectives hide behind, a pipeline
# schedule's passes.
FSDP1_UNIT_FORWARD_SHARE = 1 / 3


def _unit_seconds(timing: TimingProfile, dev: DeviceEfficiency, zero: int | None) -> dict[str, float]:
    """FSDP1's per-unit time, forward and backward (:attr:`TimingProfile.fsdp1_units`), ``{}`` where not run.

    Raises:
        ConfigError: The profile runs FSDP1 on a device whose entry states no fitted per-unit time, or below zero 3.
    """
    if not timing.fsdp1_units:
        return {}
    if zero is not None and zero < 3:  # every row the figure is fitted to shards at zero 3 (FULL_SHARD, SHARD_GRAD_OP)
        raise ConfigError("$.runtime.options.fsdp_implementation",
                          f"fsdp_implementation=fsdp1 needs zero 3 (got zero {zero}): the per-unit time is fitted to "
                          "Composer FSDP1 runs that all shard at zero 3 (FULL_SHARD, or SHARD_GRAD_OP as "
                          "reshard_after_forward false), so nothing fitted describes FSDP1 below it")
    figure = dev.fsdp1_unit_seconds
    if figure is None:
        raise ConfigError("$.runtime.options.fsdp_implementation",
                          f"fsdp_implementation=fsdp1: timing profile {timing.name} states no fitted FSDP1 per-unit time for "
                          f"{dev.architecture!r} devices (fitted on hopper and ampere only, docs/time.md 'The fsdp2 fit'); "
                          "absent is not zero, so the step time is not priced")
    return dict(unit_fwd=FSDP1_UNIT_FORWARD_SHARE * figure.value, unit_bwd=(1 - FSDP1_UNIT_FORWARD_SHARE) * figure.value)


def _delay_wgrad(timing: TimingProfile) -> bool:
    """The schedule's ``delay_wgrad`` (:class:`~hp_core.specs.overlap.OverlapSchedule`).

    Raises:
        ConfigError: It is set without ``ep_comm_overlap``, which Megatron-Core refuses (core_v0.16.0
            ``transformer/transformer_config.py``: 'overlap_moe_expert_parallel_comm must be enabled when enabling
            delay_wgrad_compute').
    """
    if timing.schedule.delay_wgrad and not timing.schedule.ep_comm_overlap:
        raise ConfigError("$.runtime.options.delay_wgrad_compute",
                          "delay_wgrad_compute needs overlap_moe_expert_parallel_comm (Megatron-Core refuses it without: "
                          "transformer_config.py); set both or neither")
    return timing.schedule.delay_wgrad


def _gemm_table(dev: DeviceEfficiency, dtype: str, hardware: HardwareSpec | None = None
                ) -> GemmTable | ShapedGemms | MachineGemms | None:
    """The device's per-shape GEMM pricing for *dtype*: its measured table, else its shape scale at its ``matmul``;
    on a machine whose GEMMs run at another rate than the family's figures (*hardware*'s ``gemm_rate_scale``,
    ``large_gemm_speedup``), those scaled (:class:`~hp_core.specs.gemms.MachineGemms`)."""
    base = None
    if dev.gemm_table is not None:
        base = dev.gemm_table if dev.gemm_table.dtype == dtype else None
    elif dev.gemm_shape is not None and dev.gemm_shape.dtype == dtype:
        base = dev.gemm_shape.bind(dev.matmul.value)
    if hardware is None or (hardware.gemm_rate_scale is None and hardware.large_gemm_speedup is None):
        return base
    return _machine_gemms(base, dev.matmul.value, hardware.gemm_rate_scale or 1.0, hardware.large_gemm_speedup or 1.0,
                          hardware.large_gemm_flops or math.inf, dev.grouped_matmul.value, dev.grouped_half_rows.value)


@functools.lru_cache(maxsize=256)
def _machine_gemms(base: GemmTable | ShapedGemms | None, matmul: float, rate: float, speedup: float,
                   flops: float, grouped: float, half_rows: float) -> MachineGemms:
    """One :class:`~hp_core.specs.gemms.MachineGemms` per machine and device entry, kept (its prices are cached)."""
    return MachineGemms(base, matmul, rate=rate, large_speedup=speedup, large_flops=flops, grouped=grouped,
                        half_rows=half_rows)


def _permute_counted(timing: TimingProfile) -> dict[str, Any]:
    """The profile's counted MoE permutation (:class:`~hp_core.specs.timing.MoePermutation`) as accesses per element
    (``permute_counted``), and, where it is counted for eager kernels and the profile fuses its elementwise ops, why
    it cannot be priced (``permute_refusal``: an MoE layer's pricing refuses it, a model without one is unaffected);
    ``{}`` where none is counted.
    """
    counted = timing.moe_permutation
    if counted is None:
        return {}
    refusal = None
    if counted.eager and not timing.eager_elementwise:
        refusal = (f"moe_permutation={counted.name}: counted for the kernels torchtitan's eager model runs, and timing "
                   f"profile {timing.name} fuses its elementwise ops (elementwise_kernels=fused: torch.compile would fuse "
                   "some of them); what they move then is not stated, so the step time is not priced")
    forward = (counted.forward_accesses_per_row_element, counted.forward_accesses_per_token_element)
    backward = (counted.backward_accesses_per_row_element, counted.backward_accesses_per_token_element)
    return dict(permute_counted=forward + backward, permute_refusal=refusal)


def _local_sort_passes(timing: TimingProfile) -> float:
    """The profile's ``moe_local_sort_passes`` (0 where it states none), refused above its ``moe_permute_passes``."""
    sort = timing.moe_local_sort_passes
    if sort is None:
        return 0.0
    if sort.value > timing.moe_permute_passes.value:
        raise ConfigError("$.runtime.timing.moe_local_sort_passes", f"timing profile {timing.name}: "
                          f"{sort.value:g} passes run only with more than one local expert, more than its "
                          f"{timing.moe_permute_passes.value:g} moe_permute_passes")
    return sort.value


def _rates(
    parallel: ParallelSpec, hardware: HardwareSpec, timing: TimingProfile, precision: PrecisionSpec, attention: str,
    recipe: PrecisionRecipe | None = None,
    collectives: CollectiveModel | None = None,
    zero: int | None = None,
) -> _Rates:
    """The per-call constants of one layout on one device, as *timing* says its trainer runs (:mod:`hp_core.engine.timing`);
    *zero* the resolved ZeRO level where the layout states none (``parallel.zero`` otherwise)."""
    dtype = compute_dtype(precision, hardware)
    peak = hardware.peak_flops[dtype]
    bandwidth = _require(hardware, "memory_bandwidth_bytes_per_second", "pricing memory-bound kernels and the optimizer step")
    dev = timing.device(hardware.architecture)
    links = _links(hardware, parallel, dev, timing, collectives or NCCL)
    ov = timing.overlap
    cp_algorithm = parallel.cp_kind  # the layout states it (``--cp-kind``)
    memory = bandwidth * dev.memory_bandwidth.value

    def _or(figure: Any, fallback: float) -> float:
        return fallback if figure is None else figure.value

    rate = hardware.gemm_rate_scale or 1.0  # the machine's GEMMs against the family's figures (None: as stated)
    # The machine's fused attention against the family's figures, forward and backward (None: as stated).
    attn_scale, mla_scale = hardware.attention_rate_scale or (1.0, 1.0), hardware.mla_attention_rate_scale or (1.0, 1.0)
    return _Rates(
        dtype=dtype, peak=peak, matmul=min(1.0, dev.matmul.value * rate),
        gemm_table=_gemm_table(dev, dtype, hardware),
        grouped=min(1.0, dev.grouped_matmul.value * rate), half_rows=dev.grouped_half_rows.value,
        attn_fwd=min(1.0, dev.attention_forward.value * attn_scale[0]), attn_bwd=min(1.0, dev.attention_backward.value * attn_scale[1]),
        attn_fwd_overhead=dev.attention_forward_overhead_seconds.value,
        attn_bwd_overhead=dev.attention_backward_overhead_seconds.value,
        mla_attn_fwd=min(1.0, _or(dev.mla_attention_forward, dev.attention_forward.value) * mla_scale[0]),
        mla_attn_bwd=min(1.0, _or(dev.mla_attention_backward, dev.attention_backward.value) * mla_scale[1]),
        mla_attn_fwd_overhead=_or(dev.mla_attention_forward_overhead_seconds, dev.attention_forward_overhead_seconds.value),
        mla_attn_bwd_overhead=_or(dev.mla_attention_backward_overhead_seconds, dev.attention_backward_overhead_seconds.value),
        memory=memory, permute_memory=bandwidth * _or(dev.moe_permute_bandwidth, dev.memory_bandwidth.value),
        permute_overhead=_or(dev.moe_permute_overhead_seconds, 0.0),
        router_fwd=_or(dev.moe_router_forward_seconds, 0.0) / ROUTER_REFERENCE_ELEMENTS,
        router_bwd=_or(dev.moe_router_backward_seconds, 0.0) / ROUTER_REFERENCE_ELEMENTS, flash=attention == "flash", causal=timing.flash_causal_fraction.value,
        attn_backward=timing.attention_backward_factor.value, mm_backward=timing.matmul_backward_factor.value,
        el_bytes_per_flop=timing.elementwise_accesses_per_flop.value * precision.activation_bytes,
        el_backward=timing.elementwise_backward_factor.value, permute_passes=timing.moe_permute_passes.value, permute_tokens=timing.moe_permute_tokens,
        permute_sort_passes=_local_sort_passes(timing),
        act_bytes=precision.activation_bytes, grad_bytes=precision.grad_bytes, cp=parallel.cp, cp_algorithm=cp_algorithm, tp=parallel.tp,
        sp=parallel.sp, ep=parallel.ep, algorithm=timing.all_reduce_algorithm, links=links,
        expose_tp=1 - ov.tensor_parallel.value, expose_cp=1 - ov.context_parallel.value,
        expose_ep=1 - ov.expert_parallel.value,
        slowdown=_or(dev.sustained_slowdown, 1.0),
        tp_comm_overlap=timing.schedule.tp_comm_overlap,
        ub_margins=timing.schedule.userbuffers_sm_margins if timing.schedule.tp_comm_overlap and parallel.tp > 1 else (),
        sm_count=hardware.sm_count,
        userbuffers=timing.schedule.tp_comm_overlap and timing.schedule.userbuffers,
        tp_overlap_bwd_rs=timing.schedule.tp_overlap_input_grad_reduce_scatter, ep_comm_overlap=timing.schedule.ep_comm_overlap,
        delay_wgrad=_delay_wgrad(timing), host=timing.host, alternate_mm_switches=timing.alternate_matmul_recompute,
        alternate_also=timing.alternate_policy_recomputes, eager_elementwise=timing.eager_elementwise,
        eager_rotary=timing.eager_rotary, ssd_fwd=_or(dev.ssd_scan_forward, None), ssd_bwd=_or(dev.ssd_scan_backward, None),
        block_tokens=None if timing.attention_block_tokens is None else int(timing.attention_block_tokens.value),
        **_permute_counted(timing),
        **_recipe_rates(recipe, dev, timing, hardware, precision.activation_bytes, parallel.tp > 1 and parallel.sp,
                        parallel.zero if parallel.zero is not None else zero),
        **_attention_speedups(recipe, dev, hardware, parallel),
        **_unit_seconds(timing, dev, parallel.zero),
        **_epilogue_fusion(recipe, hardware),
    )


def _epilogue_fusion(recipe: PrecisionRecipe | None, hardware: HardwareSpec) -> dict[str, bool]:
    """``_Rates.epilogue_activation`` and ``epilogue_quantization``: what TE's fused grouped MLP runs in its GEMM
    epilogues under *recipe* on *hardware* (the activation under MXFP8 or NVFP4, the quantizations under MXFP8)."""
    fused = (hardware.architecture == "blackwell" and recipe is not None
             and recipe.activations.format in ("mxfp8", "nvfp4") and recipe.gemms != "linears")
    return {"epilogue_activation": fused, "epilogue_quantization": fused and recipe.activations.format == "mxfp8"}
