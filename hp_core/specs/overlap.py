"""What a trainer overlaps, stated as options, and its host overhead: each priced as what a stream can hide
behind which compute (docs/time.md, "Overlap and host time"), never as a global discount."""

from __future__ import annotations

from typing import Any

import attrs

from hp_core.errors import ConfigError

__all__ = ["CUDA_GRAPH_SCOPES", "FSDP_MULTI_STAGE_SCHEDULES", "FSDP_PIPELINE_SCHEDULES", "FsdpPipelineError", "HostOverhead", "OverlapSchedule", "SetSchedule", "check_fsdp_pipeline", "check_fsdp_replicate",
           "replicate_split_error"]


@attrs.frozen(kw_only=True)
class OverlapSchedule:
    """Which communication the trainer issues on a side stream, and behind what.

    Attributes:
        fsdp_prefetch: ZeRO-3/FSDP: a layer's parameter all-gather is issued
            while the previous layer computes (FSDP2's implicit prefetch by
            CPU run-ahead; ``set_modules_to_forward_prefetch``): per layer
            ``max(0, gather - previous layer's compute)`` is exposed, the
            first gather whole; ``False``: every gather exposed.
        fsdp_reduce_scatter_overlap: ZeRO-3/FSDP: a layer's gradient
            reduce-scatter runs while the next layer's backward computes, on
            the same network as the backward's gathers (FSDP2's
            reduce-scatter stream); the last one is exposed.
        overlap_grad_reduce: ZeRO-0/1/2: the data-parallel gradient
            reduction runs in buckets during the last micro-batch's backward
            (Megatron-Core ``--overlap-grad-reduce``): ``max(last bucket,
            reduction - backward)`` is exposed.
        overlap_param_gather: ZeRO-1/2: the parameter all-gather of the
            distributed optimizer runs in buckets during the next step's first
            forward (``--overlap-param-gather``): ``max(first bucket, gather -
            forward)`` is exposed.
        tp_comm_overlap: TP all-gathers and reduce-scatters are split into
            ``tp`` chunks pipelined with the GEMMs they feed (Transformer
            Engine userbuffers, ``--tp-comm-overlap``; torchtitan async TP):
            per layer and direction ``max(tp comm - GEMMs, tp comm / tp)`` is exposed.
        tp_overlap_input_grad_reduce_scatter: With ``tp_comm_overlap``, the
            backward's reduce-scatters of a block's input gradient are hidden
            too (Megatron-Core's ``tp_comm_bulk_wgrad``: behind the weight
            gradient GEMM); ``False``: they stay exposed, as torch's
            micro-pipeline TP pass fuses a reduce-scatter only when its input
            is one matmul's output and a block's input gradient sums several
            (``torch/_inductor/fx_passes/micro_pipeline_tp.py``
            ``fuse_matmul_reduce_scatter``).
        userbuffers_sm_margins: With ``tp_comm_overlap``, ``(GEMM, SMs)`` of the
            userbuffers GEMMs (``qkv_fprop``, ``fc1_wgrad``, ...) that leave that
            many SMs to their communication kernel (Transformer Engine's
            ``set_sm_margin``): each runs at its time times ``sm_count / (sm_count -
            SMs)`` on a layer that marks it
            (:attr:`hp_core.costs.LayerWork.userbuffers_gemms`;
            :mod:`hp_plugins.runtimes.userbuffers`, docs/time.md); empty: none
            (torch's async TP launches no such kernel).
        userbuffers: ``tp_comm_overlap`` runs through Transformer Engine's
            userbuffers as Megatron-Core builds them (``--tp-comm-overlap``;
            not torch's async TP): it needs sequence parallelism at ``tp > 1``
            (:func:`hp_core.engine.layout_checks.check_userbuffers_layout`), and
            a layer one of whose Transformer Engine linears Megatron-Core runs no
            userbuffers for (:attr:`hp_core.costs.LayerWork.refused_userbuffers`:
            MLA's down projections, the MTP module's ``eh_proj``) is priced
            without the overlap and its SM margins, as Megatron-Core turns it off
            there (:mod:`hp_core.engine.timing.layer`).
        overlap_p2p: Pipeline sends and receives run during the stage's
            compute (Megatron-Core's interleaved schedule,
            ``--overlap-p2p-communication``): ``max(0, send - chunk compute)``.
        ep_comm_overlap: Expert-parallel all-to-alls of one micro-batch run
            during another's compute (``--overlap-moe-expert-parallel-comm``,
            DeepEP's hook-based overlap): per layer and direction
            ``max(0, all-to-all - the layer's compute)`` is exposed.
        delay_wgrad: With ``ep_comm_overlap``, the experts' weight-gradient
            GEMMs are split from their input-gradient ones and run beside the
            dispatch's backward all-to-all (``--delay-wgrad-compute``): in a
            backward pass no other micro-batch's forward pairs with (the
            pipeline's cool-down), ``min(half the backward all-to-all, expert
            weight gradients)`` is hidden. Megatron-Core refuses it without
            ``ep_comm_overlap``, and so does hp.
        fsdp_replicate: HSDP (FSDP over a 2-D ``(replicate, shard)`` mesh):
            ZeRO-3's per-layer gathers and reduce-scatters run within shard
            groups of ``dp * cp / fsdp_replicate`` ranks, and each layer's
            reduce-scatter output (its gradient shard, in the reduce dtype) is
            then all-reduced across the ``fsdp_replicate`` ranks holding the
            same shard, on its own stream once that reduce-scatter is done
            (torch 2.13 ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``
            ``foreach_reduce``); hp serialises it behind the reduce-scatter
            (docs/time.md); 1: plain FSDP. Refused with ``pp > 1`` unless
            ``fsdp_pipeline_step_reduce`` (then the all-reduce runs once per
            step, after the reduce-scatters).
        fsdp_pipeline_step_reduce: ZeRO-3/FSDP under ``pp > 1`` as
            ``torch.distributed.pipelining`` runs an FSDP2 stage (torch 2.13
            ``pipelining/stage.py``: ``backward_maybe_with_nosync`` turns
            gradient sync and resharding after backward off for every
            backward; ``perform_reduce_grad``, the schedule's ``REDUCE_GRAD``
            after the stage's last backward, reduce-scatters every unit once):
            the gradients accumulate unsharded across micro-batches and are
            reduce-scattered (and, under HSDP, all-reduced) once per step,
            exposed whole; the parameters stay gathered after each backward, so
            a stage gathers every unit once per step without
            ``reshard_after_forward`` and, with it, its body layers ``m``
            times more (the root never reshards); torch's single-stage
            schedules, and interleaved 1F1B, whose UNSHARD actions gather
            whole chunks (its memory without ``reshard_after_forward``:
            :func:`check_fsdp_pipeline`;
            docs/time.md, "FSDP under pipeline parallelism"). ``False``: the per-micro-batch
            pricing at any ``pp``.
        bucket_elements: Parameters per data-parallel bucket (Megatron-Core
            ``DistributedDataParallelConfig.bucket_size``: ``max(40e6, 1e6 * dp)``
            when ``None``).
        source: Where the trainer's choices come from.
    """

    fsdp_prefetch: bool = False
    fsdp_reduce_scatter_overlap: bool = False
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    tp_comm_overlap: bool = False
    tp_overlap_input_grad_reduce_scatter: bool = True
    userbuffers_sm_margins: tuple[tuple[str, int], ...] = attrs.field(default=(), converter=tuple)
    userbuffers: bool = False
    overlap_p2p: bool = False
    ep_comm_overlap: bool = False
    delay_wgrad: bool = False
    fsdp_replicate: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    fsdp_pipeline_step_reduce: bool = False
    bucket_elements: int | None = None
    source: str = "nothing overlapped"

    def bucket(self, dp: int) -> int:
        """Parameters per data-parallel bucket (Megatron-Core ``training.py``: ``max(40000000, 1000000 * dp)``)."""
        return self.bucket_elements if self.bucket_elements is not None else max(40_000_000, 1_000_000 * dp)


def replicate_split_error(replicate: int, dp: int, ep: int, expert_dp: int) -> str | None:
    """Why HSDP's *replicate* degree cannot split the data-parallel ranks into replicate x shard groups (it must divide
    *dp* and, under expert parallelism, *expert_dp*), or ``None``: the layout part of :func:`check_fsdp_replicate`,
    which the search applies to its candidates and the timing links to the layout they place."""
    if dp % replicate or (ep > 1 and expert_dp % replicate):
        expert = f" and the expert data-parallel degree {expert_dp}" if ep > 1 else ""
        return (f"{replicate} must divide parallel.dp {dp}{expert} (HSDP splits the data-parallel ranks into "
                f"replicate x shard groups)")
    return None


def check_fsdp_replicate(replicate: int, zero: int, p: Any, pipeline_step_reduce: bool = False) -> None:
    """:attr:`OverlapSchedule.fsdp_replicate` (the fsdp2 runtime's ``hsdp_replicate``) checked against the layout *p*:
    HSDP's ``(replicate, shard)`` mesh as torchtitan builds it (``dp_replicate * dp_shard`` the data-parallel
    degree, ``parallel_dims.py``): *replicate* must divide ``dp`` (and, under expert parallelism, the expert
    data-parallel degree), the run must shard with FSDP (zero 3), and pp must be 1 unless the trainer reduces
    once per step under PP as priced (*pipeline_step_reduce*, :attr:`OverlapSchedule.fsdp_pipeline_step_reduce`).

    Raises:
        ConfigError: At ``$.runtime.options.hsdp_replicate``, one line.
    """
    path = "$.runtime.options.hsdp_replicate"
    if p.pp > 1 and not pipeline_step_reduce:
        # torch.distributed.pipelining (torchtitan's PP) skips FSDP's gradient reduction on every backward and
        # reduces once per step (stage.py backward_maybe_with_nosync, perform_reduce_grad); a schedule that prices
        # FSDP's reductions per micro-batch would over-count the replicate all-reduce m times.
        raise ConfigError(path, f"HSDP under pipeline parallelism (pp {p.pp}) is not priced by this timing profile: "
                                f"torch's pipelining reduces gradients once per step, which only a profile with "
                                f"fsdp_pipeline_step_reduce models; use pp 1")
    if zero < 3:
        raise ConfigError(path, f"HSDP shards with FSDP: {replicate} needs parallel.zero 3, got zero {zero} (leave it 1)")
    split = replicate_split_error(replicate, p.dp, p.ep, p.expert_dp)
    if split is not None:
        raise ConfigError(path, split)


# The schedules whose FSDP under PP hp prices (OverlapSchedule.fsdp_pipeline_step_reduce): torch 2.13's single-stage
# ones, PipelineScheduleSingle subclasses (pipelining/schedules.py ScheduleGPipe, Schedule1F1B), whose every op is one
# whole forward or backward of the rank's one stage and which call perform_reduce_grad once after their loop; and
# interleaved 1F1B (ScheduleInterleaved1F1B, a _PipelineScheduleRuntime whose FSDP traffic and memory follow its
# UNSHARD, RESHARD and REDUCE_GRAD actions: hp_core.engine.timing.overlap.fsdp_multi_stage for the step time,
# hp_plugins.runtimes.fsdp2_points for the memory, the latter without reshard_after_forward).
FSDP_PIPELINE_SCHEDULES = ("gpipe", "1f1b")
FSDP_MULTI_STAGE_SCHEDULES = ("interleaved_1f1b",)


class FsdpPipelineError(ConfigError):
    """:func:`check_fsdp_pipeline`'s refusal (a search counts it under its own reason)."""


def check_fsdp_pipeline(zero: int, p: Any, multi_stage: bool = False) -> None:
    """FSDP (zero 3) under ``pp > 1`` as :attr:`OverlapSchedule.fsdp_pipeline_step_reduce` prices it: a single-stage
    schedule (:data:`FSDP_PIPELINE_SCHEDULES`) and, with ``vpp > 1``, interleaved 1F1B
    (:data:`FSDP_MULTI_STAGE_SCHEDULES`), whose torch runtime (``_PipelineScheduleRuntime``) inserts its own
    UNSHARD/RESHARD actions (``schedules.py`` ``_add_unshard_reshard(max_active_stages=3)``): whole chunks gathered,
    up to three at once, evicted and gathered again, which the step time and the memory estimate follow through the
    rank's order. *multi_stage* (the step time) also accepts ``reshard_after_forward`` there; the memory estimate
    refuses it (each layer's forward then frees what the chunk's UNSHARD gathered and the next action gathers it
    again layer by layer, which its walk does not follow; torchtitan's default under PP keeps the parameters,
    ``fsdp_reshard_after_forward: default``, and so does the ``fsdp2`` runtime where the layout states none).
    *p* is the layout as the run resolves it (:func:`hp_core.engine.prepare.prepare`: ``reshard_after_forward``
    stated, the runtime's default where the config left it out).

    A layout with no data or context parallelism shards nothing (torchtitan applies FSDP only with
    ``dp_shard`` or ``cp`` enabled): it is not refused.

    Raises:
        FsdpPipelineError: At ``$.parallel.schedule`` or (``vpp > 1`` with ``reshard_after_forward``, for the
            memory estimate) ``$.parallel.reshard_after_forward``, one line.
        ValueError: *p* is not resolved (``reshard_after_forward`` ``None``) where FSDP under PP applies.
    """
    if zero < 3 or p.pp == 1 or p.dp * p.cp == 1:
        return
    if p.reshard_after_forward is None:  # unresolved: None is no answer to whether each forward reshards
        raise ValueError("check_fsdp_pipeline needs the layout as the run resolves it (reshard_after_forward stated: "
                         "Runtime.reshards_after_forward), got reshard_after_forward None")
    allowed = FSDP_MULTI_STAGE_SCHEDULES if p.vpp > 1 else FSDP_PIPELINE_SCHEDULES
    if p.resolved_schedule not in allowed:
        raise FsdpPipelineError("$.parallel.schedule", f"FSDP (zero 3) under pipeline parallelism is priced for torch's "
                                                 f"{'multi' if p.vpp > 1 else 'single'}-stage schedules "
                                                 f"({', '.join(allowed)}), got {p.resolved_schedule}")
    if p.vpp > 1 and p.reshard_after_forward and not multi_stage:
        raise FsdpPipelineError("$.parallel.reshard_after_forward",
                                f"the memory of FSDP (zero 3) under interleaved pipeline stages (vpp={p.vpp}) is priced "
                                f"without reshard_after_forward (torchtitan's default under PP): with it each layer "
                                f"frees what its chunk's UNSHARD gathered and is gathered again, which hp's memory "
                                f"estimate does not follow; set reshard_after_forward: false (or leave it out where "
                                f"the runtime's default under PP is false, as fsdp2's) or use vpp 1")


def _non_negative(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative number, got {value!r}")


# HostOverhead.cuda_graphs: what a trainer replays from CUDA graphs (the megatron runtime option cuda_graphs).
CUDA_GRAPH_SCOPES = ("none", "layers", "full_iteration")


@attrs.frozen(kw_only=True)
class HostOverhead:
    """The CPU time a trainer spends issuing one layer's kernels, which the GPU cannot run ahead of.

    A layer's GPU time is at least its host time: per layer and direction
    ``kernels * seconds_per_kernel``, the kernels counted from the work the
    layer states (GEMMs, attention calls, collectives) times
    ``kernels_per_gemm`` for the elementwise kernels around each GEMM, plus
    a mixture-of-experts layer's router and token-permutation kernels.

    Attributes:
        seconds_per_kernel: Host time per launched kernel.
        kernels_per_gemm: Kernels issued per GEMM (the GEMM and the
            elementwise kernels between it and the next).
        source: Where the figures come from.
        router_kernels: ``(forward, backward)`` kernels of a router (a layer
            that states ``router_elements``): its top-k, scores and
            load-balancing loss, beside its gating GEMM.
        permute_kernels: Kernels per direction of a layer's token
            permutation (a layer that states ``permute_bytes``).
        cuda_graphs: What the trainer captures in CUDA graphs (:data:`CUDA_GRAPH_SCOPES`):
            ``none``, every kernel launched eagerly; ``layers``, each body
            layer's forward and backward replayed as one graph each, so the
            host issues no kernel of theirs one by one (Megatron-Core's
            ``enable_cuda_graph``); ``full_iteration``, every layer's.
    """

    seconds_per_kernel: float = attrs.field(validator=_non_negative)
    kernels_per_gemm: float = attrs.field(validator=_non_negative)
    source: str
    router_kernels: tuple[float, float] = attrs.field(converter=tuple)
    permute_kernels: float = attrs.field(validator=_non_negative)
    cuda_graphs: str = attrs.field(default="none", validator=attrs.validators.in_(CUDA_GRAPH_SCOPES))

    def floors(self, body: bool) -> bool:
        """Whether the floor applies to a layer: not to one its trainer replays from a CUDA graph (*body*: a body
        layer, which ``layers`` captures; ``full_iteration`` captures every layer)."""
        return self.cuda_graphs == "none" or (self.cuda_graphs == "layers" and not body)

    @router_kernels.validator
    def _check_router(self, attribute: attrs.Attribute, value: tuple) -> None:
        if len(value) != 2:
            raise ValueError(f"router_kernels must be (forward, backward), got {value!r}")
        for v in value:
            _non_negative(self, attribute, v)


@attrs.frozen
class SetSchedule:
    """``apply`` of :func:`schedule_option`: sets one field of the runtime's timing profile's schedule (picklable);
    also what an option that sets a schedule field beside other changes calls (the megatron runtime's
    ``tp_comm_overlap``)."""

    field: str | tuple[str, ...]

    def __call__(self, runtime: Any, value: Any) -> Any:
        timing = runtime.timing
        if timing is None:
            raise ValueError(f"runtime {runtime.name} states no timing profile, so it has no overlap schedule to set")
        fields = (self.field,) if isinstance(self.field, str) else self.field
        schedule = attrs.evolve(timing.schedule, **dict.fromkeys(fields, value))
        return attrs.evolve(runtime, timing=attrs.evolve(timing, schedule=schedule))


def schedule_option(name: str, field: str | tuple[str, ...], *, default: bool, description: str, source: str) -> Any:
    """A ``bool`` runtime option that sets :class:`OverlapSchedule` field *field* (or each of several) of the
    runtime's timing profile."""
    from hp_core.runtime_options import RuntimeOption

    return RuntimeOption(name, "bool", default, description, source, SetSchedule(field))

