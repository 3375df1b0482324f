"""What a stream hides behind which compute: the exposed part of FSDP's per-layer gathers and reduce-scatters,
of bucketed data-parallel reductions and of pipeline sends, and what the expert all-to-all overlap's lone passes
expose (docs/time.md, "Overlap and host time").

Each function takes the communication and the compute it may run beside, both
in seconds, and returns ``(total, exposed)``; which overlap a trainer runs is
its timing profile's :class:`~hp_core.specs.overlap.OverlapSchedule`
(runtime options set it per run).
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["UNSHARD_WINDOW_STAGES", "bucketed", "fsdp_layers", "fsdp_layers_pipelined", "fsdp_multi_stage", "gathered_chunks",
           "hidden_send", "lone_seconds", "unpaired_passes", "unshards"]

# torch 2.13 torch/distributed/pipelining/schedules.py _add_unshard_reshard(max_active_stages=3), as
# _PipelineScheduleRuntime._prepare_schedule_with_comms calls it: at most three stages (chunks) gathered at once.
UNSHARD_WINDOW_STAGES = 3


def fsdp_layers(layers: Sequence[tuple[float, float, float, float]], *, reshard: bool, prefetch: bool,
                reduce_overlap: bool) -> tuple[float, float]:
    """One micro-batch of FSDP's per-layer collectives on a stage: ``(total, exposed)`` seconds.

    *layers* in forward order, each ``(gather, reduce_scatter, forward, backward)``
    seconds (backward with its recompute). Forward: layer ``i``'s all-gather is
    issued while layer ``i-1`` computes (FSDP2's implicit prefetch: the CPU
    runs ahead and the gather runs on its own stream), so ``max(0, gather_i -
    forward_{i-1})`` is exposed and the first gather whole. Backward (reverse
    order): while layer ``j`` computes its gradients, the next layer's
    re-gather (``reshard_after_forward``) and layer ``j+1``'s reduce-scatter
    share the network, ``max(0, gather_{j-1} + reduce_scatter_{j+1} - backward_j)``
    exposed; the first re-gather and the last reduce-scatter whole. Without
    prefetch (respectively reduce-scatter overlap) that traffic is exposed
    whole (PyTorch FSDP2 ``fully_shard``; Zhao et al. 2023, "PyTorch FSDP",
    Section 3.4).
    """
    n = len(layers)
    gathers = [g for g, _, _, _ in layers]
    back_gathers = gathers if reshard else [0.0] * n
    reduces = [r for _, r, _, _ in layers]
    total = sum(gathers) + sum(back_gathers) + sum(reduces)
    if not n:
        return 0.0, 0.0
    if prefetch:
        forward = gathers[0] + sum(max(0.0, gathers[i] - layers[i - 1][2]) for i in range(1, n))
    else:
        forward = sum(gathers)
    # Backward from the last layer to the first: index i runs layer i's gradients.
    exposed_back = back_gathers[n - 1] if prefetch else sum(back_gathers)
    for i in range(n - 1, -1, -1):
        behind = 0.0
        if prefetch and i > 0:
            behind += back_gathers[i - 1]
        if reduce_overlap and i < n - 1:
            behind += reduces[i + 1]
        exposed_back += max(0.0, behind - layers[i][3])
    exposed_back += reduces[0] if reduce_overlap else sum(reduces)
    return total, forward + exposed_back


def fsdp_layers_pipelined(layers: Sequence[tuple[float, float, float, float]], all_reduces: Sequence[float],
                          body: Sequence[bool], *, reshard: bool,
                          prefetch: bool) -> tuple[tuple[float, float], tuple[float, float], float, float]:
    """FSDP2's collectives on a pipeline stage as ``torch.distributed.pipelining`` runs it (torch 2.13).

    *layers* as :func:`fsdp_layers` takes them, *all_reduces* HSDP's per-layer
    replicate all-reduce seconds (empty without HSDP), *body* whether each
    layer is a body layer (its own FSDP unit) rather than one of the root's
    (embedding, final norm, head). Returns ``((total,
    exposed)`` of one gather pass per micro-batch, ``(total, exposed)`` of the
    stage's first-forward gathers once per step, the reduce-scatters' seconds
    and the all-reduces' seconds, both once per step and exposed whole)``.

    * Every backward runs with ``set_requires_gradient_sync(False)`` and
      ``set_reshard_after_backward(False)`` (``pipelining/stage.py``
      ``_PipelineStageBase.backward_maybe_with_nosync``): no reduce-scatter,
      the gradients accumulate unsharded, the parameters stay gathered.
    * ``perform_reduce_grad`` (the schedule's ``REDUCE_GRAD`` action after the
      stage's last backward, ``schedules.py`` ``_add_reduce_grad``; the
      single-stage schedules call it after their loop) runs every unit's
      ``FSDPParamGroup.post_backward`` with sync on, one reduce-scatter each
      (HSDP: its all-reduce after it), then
      ``_root_post_backward_final_callback`` makes the compute stream wait on
      them (``_fsdp_state.py``): nothing computes beside them.
    * ``FSDPParamGroup.unshard`` is a no-op on gathered parameters
      (``_fsdp_param_group.py``). Without ``reshard_after_forward`` a stage
      gathers once per step, in its first forward; with it, the forward frees
      the body layers again, so the op after each forward gathers them (a
      forward or a backward) and the first op gathers every unit: ``m``
      passes of the body layers per step for ``m`` micro-batches on torch's
      single-stage schedules (GPipe ``F^m B^m``, 1F1B ``F^w (B F)^(m-w) B^w``,
      :func:`hp_core.specs.overlap.check_fsdp_pipeline`) and one of every
      unit. The root is never resharded before ``perform_reduce_grad``
      (``_fsdp_state.py`` ``_lazy_init`` clears its
      ``post_forward_mesh_info``; the backward does not reshard): it is
      gathered once per step. Each pass is priced as a forward's gathers
      (prefetched behind the previous layer's forward, :func:`fsdp_layers`;
      the root's forward, gathered, is a window too), the backward's longer
      compute not credited.
    """
    gathers = [(g, 0.0, f, b) for g, _, f, b in layers]
    one_pass = fsdp_layers(gathers, reshard=False, prefetch=prefetch, reduce_overlap=False)
    again = [(g if is_body else 0.0, 0.0, f, b) for (g, _, f, b), is_body in zip(layers, body)]
    per_micro_batch = fsdp_layers(again, reshard=False, prefetch=prefetch, reduce_overlap=False) if reshard else (0.0, 0.0)
    return per_micro_batch, one_pass, sum(r for _, r, _, _ in layers), sum(all_reduces)


def unshards(chunks: Sequence[int], window: int = UNSHARD_WINDOW_STAGES) -> tuple[tuple[int, int, int], ...]:
    """The UNSHARD actions torch's multi-stage runtime inserts in a rank's compute order: ``(chunk, issued, used)``.

    *chunks*: the chunk of each compute action of the rank, in order (idle slots left out). The rule of torch 2.13
    ``torch/distributed/pipelining/schedules.py`` ``_add_unshard_reshard``: before action ``i``, the next *window*
    distinct chunks from action ``i`` on are wanted; every gathered chunk not wanted is resharded (no
    communication) and every wanted chunk not gathered is unsharded, in the order first needed. An UNSHARD issued
    before action ``i`` is *used* at the first action ``>= i`` on its chunk (``_assert_unsharded`` waits on it).
    """
    return tuple((c, i, used) for i, (_, fetched) in enumerate(_unshard_windows(chunks, window)) for c, used in fetched)


def gathered_chunks(chunks: Sequence[int], window: int = UNSHARD_WINDOW_STAGES) -> tuple[frozenset[int], ...]:
    """Per compute action of *chunks* (as :func:`unshards` takes them), the chunks the schedule counts gathered while
    it runs: those UNSHARDed and not RESHARDed after the RESHARD and UNSHARD actions inserted before it (the same
    rule, ``_add_unshard_reshard``), at most *window*."""
    return tuple(active for active, _ in _unshard_windows(chunks, window))


def _unshard_windows(chunks: Sequence[int], window: int) -> list[tuple[frozenset[int], list[tuple[int, int]]]]:
    """``_add_unshard_reshard``'s rule (:func:`unshards`), per compute action: ``(the chunks gathered once its RESHARD
    and UNSHARD actions ran, the chunks it UNSHARDs as (chunk, the action that first uses it))``."""
    n = len(chunks)
    found: list[tuple[frozenset[int], list[tuple[int, int]]]] = []
    active: set[int] = set()
    for i in range(n):
        wanted: list[int] = []
        first: dict[int, int] = {}
        for j in range(i, n):
            c = chunks[j]
            if c not in first:
                first[c] = j
                wanted.append(c)
                if len(wanted) == window:
                    break
        active &= set(wanted)
        fetched = [(c, first[c]) for c in wanted if c not in active]
        active.update(c for c, _ in fetched)
        found.append((frozenset(active), fetched))
    return found


def fsdp_multi_stage(order: Sequence[tuple[str, int]], forward: Sequence[float], backward: Sequence[float],
                     gather: Sequence[float], regather: Sequence[tuple[float, float]] | None = None
                     ) -> tuple[float, float, float]:
    """A rank's FSDP2 gathers under a multi-stage schedule as torch 2.13's ``_PipelineScheduleRuntime`` runs them:
    ``(first, stalls, total)`` seconds.

    *order*: the rank's compute actions ``(pass, chunk)`` (``"F"`` or ``"B"``), in the schedule's order;
    *forward*, *backward*: per chunk one micro-batch's compute seconds (backward with recompute); *gather*: per
    chunk its whole gather (every FSDP unit of the chunk: UNSHARD calls ``unshard(async_op=True)`` on each
    ``FSDPModule`` of the stage's module); *regather*: under ``reshard_after_forward``, per chunk ``(total,
    exposed)`` of one prefetched pass over its body layers' gathers, which an action runs where the previous
    action on its chunk since its UNSHARD was a forward (the forward resharded them, the schedule still counts the
    chunk gathered, so each layer's pre-hook gathers it again); ``None``: no reshard after forward.

    Each UNSHARD (:func:`unshards`) is issued on the compute stream just before its action (its copy-in follows
    the compute enqueued before it) and runs on the process group's one communication stream, after the gathers
    issued before it; the action using it waits for it. The actions run back to back (the idle slots of the
    pipeline, which would hide more, are not credited). *first*: the first action's wait for its chunk's gather,
    the whole of it (on the pipeline's fill, :func:`hp_core.engine.timing.step` credits the wait for the previous
    stages' first forward); *stalls*: the later actions' waits and the exposed re-gathers; *total*: every gather's
    seconds.
    """
    chunks = [c for _, c in order]
    issued: dict[int, list[int]] = {}
    for c, i, _ in unshards(chunks):
        issued.setdefault(i, []).append(c)
    ready: dict[int, float] = {}
    last: dict[int, str] = {}
    stream = now = first = stalls = total = 0.0
    for i, (kind, c) in enumerate(order):
        for x in issued.get(i, ()):
            start = max(now, stream)
            stream = start + gather[x]
            ready[x] = stream
            total += gather[x]
            last.pop(x, None)
        start = max(now, ready[c])
        if i == 0:
            first = start
        else:
            stalls += start - now
        seconds = forward[c] if kind == "F" else backward[c]
        if regather is not None and last.get(c) == "F":
            total += regather[c][0]
            stalls += regather[c][1]
            seconds += regather[c][1]
        last[c] = kind
        now = start + seconds
    return first, stalls, total


def bucketed(total: float, bucket: float, window: float, overlapped: bool) -> float:
    """Exposed seconds of a bucketed reduction or gather of *total* seconds beside *window* seconds of compute.

    Megatron-Core issues each bucket as soon as its gradients are ready
    (``--overlap-grad-reduce``) or gathers them ahead of the first forward
    (``--overlap-param-gather``): what does not fit in the window is exposed,
    and at least the one bucket that has nothing left to run beside.
    """
    if not overlapped:
        return total
    return min(total, max(bucket, total - window))


def hidden_send(send: float, window: float, overlapped: bool) -> float:
    """A pipeline send's exposed seconds: ``max(0, send - window)`` when it runs beside a chunk's compute."""
    return max(0.0, send - window) if overlapped else send


def unpaired_passes(schedule: str, pp: int, vpp: int, stage: int, micro_batches: int) -> int:
    """Chunk passes a stage runs forward alone, and as many backward alone, under Megatron-Core's expert all-to-all
    overlap (``--overlap-moe-expert-parallel-comm``), which pairs one micro-batch's forward with another's backward.

    Megatron-Core core_v0.16.0 (NVIDIA/Megatron-LM): without a pipeline,
    ``pipeline_parallel/combined_1f1b.py`` ``combined_1f1b_schedule_for_no_pipelining`` runs the first
    forward and the last backward alone (1); with one, the interleaved schedule
    (``pipeline_parallel/schedules.py``, ``get_pp_rank_microbatches``) runs its
    ``(pp - stage - 1) * 2 + (vpp - 1) * pp + 1`` warm-up forwards (the group of micro-batches per virtual
    stage at its default, ``pp``; one more with the overlap) alone and as many cool-down backwards, at most
    every pass (``micro_batches * vpp``). A lone pass runs its layers as
    ``models/common/model_chunk_schedule_plan.py`` ``TransformerLayerSchedulePlan.run`` with one side
    ``None``: each layer's all-to-alls wait on its own compute. Megatron-Core refuses the overlap under a pipeline
    without a virtual pipeline (``transformer/transformer_config.py``), so any other schedule at ``pp > 1`` gets 0.
    """
    if pp == 1:
        return 1
    if schedule != "interleaved_1f1b":
        return 0
    return min(micro_batches * vpp, (pp - stage - 1) * 2 + (vpp - 1) * pp + 1)


def lone_seconds(schedule: str, pp: int, vpp: int, micro_batches: int, per_chunk: list[float]) -> float:
    """What the expert all-to-all overlap's lone passes add to a step: per stage its :func:`unpaired_passes` times
    *per_chunk* (its mean chunk's lone forward and backward beyond their overlapped time,
    ``_LayerTime.unpaired_seconds`` summed), the largest over the stages, once (the first stage's warm-up is the
    longest; docs/time.md, "The expert all-to-all overlap's lone passes"). Part of the pipeline's fill and drain."""
    return max((unpaired_passes(schedule, pp, vpp, i, micro_batches) * u for i, u in enumerate(per_chunk)), default=0.0)
