"""The ``fsdp2`` runtime's peak points under pipeline parallelism (:mod:`hp_plugins.runtimes.fsdp2_points`, "Under
PP"): a stage under torch's single-stage schedules (:func:`pipelined_points`), a rank under its multi-stage runtime
(:func:`multi_stage_points`), each walking its backwards (:class:`BackwardWalk`) and its once-per-step reduction
(:func:`reduce_point`); docs/runtimes.md, ``fsdp2``."""

from __future__ import annotations

from typing import Sequence

from hp_core.engine.timing.overlap import gathered_chunks, unshards
from hp_core.peak_points import StageView
from hp_core.results import MemoryBreakdown
from hp_plugins.runtimes.fsdp2_layers import all_reduce_output_bytes, largest_point, weight_grad_moments
from hp_plugins.runtimes.fsdp2_pools import gathered_bytes, sharded_bytes

__all__ = ["BackwardWalk", "multi_stage_points", "pipelined_points", "reduce_point"]


class BackwardWalk:
    """A backward under PP (:mod:`hp_plugins.runtimes.fsdp2_points`, "Under PP") walked from the top over some of a
    stage's layers: all of them on a single-stage schedule, one chunk's under a multi-stage one. *point* builds a point from ``(gradients,
    buffers, activations, working)``; *accumulator* per layer its unsharded gradient accumulator; *whole* per body
    layer its gathered parameters; *held_grads* the sharded gradients always held; *all_gather* one all-gather
    output."""

    def __init__(self, view: StageView, point, accumulator: list[int], whole: dict[int, int], held_grads: int,
                 all_gather: int) -> None:
        self.view, self.point, self.accumulator, self.whole = view, point, accumulator, whole
        self.held_grads, self.all_gather = held_grads, all_gather

    def walk(self, indices: Sequence[int], kept: Sequence[int], accumulating: bool, running: dict[int, int],
             gathered: int, gathers: bool, grads: int = 0, activations: int = 0) -> MemoryBreakdown:
        """The largest point of a backward over the layers *indices* (forward order) with *kept* per layer of the view.

        *accumulating*: every accumulator of *indices* alive (not their first backward), else those of the layers
        already run; *running*: per body layer what it gathers again as it runs (a forward left it its share);
        *gathered*: what is gathered as the walk starts; *gathers*: an all-gather runs, its output alive, the next
        layer prefetched; *grads*, *activations*: what else the rank holds (other chunks' gradients, and their
        micro-batches in flight).
        """
        view, point, whole = self.view, self.point, self.whole
        layers = view.layers
        same_dtype = view.precision.reduction_bytes == view.precision.activation_bytes
        accumulated = sum(self.accumulator[i] for i in indices) if accumulating else 0
        total_kept = activations + sum(kept[i] for i in indices)
        first_body = min((i for i in indices if i in whole), default=None)
        freed = root_grads = 0
        found: list[MemoryBreakdown] = []
        for index in reversed(indices):
            layer, its_kept = layers[index], kept[index]
            again = running.get(index, 0)
            found.append(point(self.held_grads + grads + accumulated + root_grads,
                               gathered + again + (self.all_gather if gathers else 0), total_kept - freed,
                               layer.backward_working_bytes))
            if index in whole:
                # The moments holding the running layer's whole unsharded gradients (weight_grad_moments), in
                # the compute dtype until its post-backward accumulates them; at that post-backward (the first
                # moment) a first backward casts them to the reduce dtype beside them
                # (to_accumulated_grad_if_needed): the fp32 accumulator does not exist before.
                below = total_kept - freed - its_kept
                prefetched = self.all_gather if gathers and index > first_body else 0
                for moment, (alive, working) in enumerate(weight_grad_moments(view, layer)):
                    cast = self.accumulator[index] if moment == 0 and not accumulating and not same_dtype else 0
                    found.append(point(self.held_grads + grads + accumulated + cast, gathered + again + prefetched,
                                       below + min(alive, its_kept), max(alive - its_kept, 0) + working + root_grads))
            freed += its_kept
            if index in whole:
                gathered += again  # left gathered after its backward (stage.py backward_maybe_with_nosync)
                accumulated += 0 if accumulating else self.accumulator[index]
            elif not (accumulating and same_dtype):
                # The root's new gradients in the compute dtype until its post-backward at the end of the
                # stage's backward (in param.grad itself where the reduce dtype is the compute dtype).
                root_grads += gathered_bytes(view, layer)
        return largest_point(found)


def pipelined_points(view: StageView, point, keep_share: int, held_grads: int, root_gathered: int, all_gather: int,
                     batch: int, *, replicate: int, cpu_offload: bool) -> dict[str, MemoryBreakdown]:
    """The ``forward``, ``backward`` and ``reduce`` points of a stage under PP (:mod:`hp_plugins.runtimes.fsdp2_points`,
    "Under PP"), for torch's single-stage schedules (``ScheduleGPipe``, ``Schedule1F1B``; ``check_fsdp_pipeline``):
    every op one whole forward or backward of the stage. With ``w`` micro-batches in flight at the end of warm-up and ``m``
    per step, a stage runs ``F^w (B F)^(m-w) B^w``: GPipe ``w = m``, 1F1B ``w = min(pp - stage, m)``.

    What a layer holds gathered follows what ran last: a backward leaves it whole
    (``set_reshard_after_backward(False)``), a forward keeps its share (none, ``1/n`` or all); an all-gather
    runs, and its output buffer is alive, only where a layer is not whole (``FSDPParamGroup.unshard`` is a
    no-op on gathered parameters). The root (embedding, final norm, head) is never resharded before
    ``perform_reduce_grad`` (``_lazy_init`` clears its ``post_forward_mesh_info``)."""
    layers = view.layers
    reduction = view.precision.reduction_bytes
    # Each layer's unsharded gradient accumulator: its elements on the rank in the reduce dtype
    # (_fsdp_param.py FSDPParam.to_accumulated_grad_if_needed casts the first to reduce_dtype; where that is the
    # compute dtype, init_dtype_attrs drops it and the gradient accumulates in param.grad itself).
    accumulator = [sum(layer.elements.values()) * reduction for layer in layers]
    every = sum(accumulator)
    in_flight = max(max(layer.in_flight, 1) for layer in layers)
    body = [i for i, layer in enumerate(layers) if layer.placement == "body"]
    whole = {i: gathered_bytes(view, layers[i]) for i in body}
    share = {i: whole[i] // keep_share if keep_share else 0 for i in body}  # what a forward leaves gathered
    stay = sum(share.values())
    resharded = keep_share != 1
    one = [layer.kept_bytes for layer in layers]
    kept = [k * in_flight for k in one]
    last = layers[-1].forward_working_bytes

    # Forward, at the loss of the w-th forward (the end of warm-up, no accumulator yet): it gathers, one
    # all-gather output alive, where the forward before it resharded or where it is the step's first; without
    # resharding only the step's first forward gathers, one micro-batch kept.
    gathers = resharded or in_flight == 1
    forward = [point(held_grads, root_gathered + stay + (all_gather if gathers else 0), sum(kept), last)]
    if not gathers:
        forward.append(point(held_grads, root_gathered + stay + all_gather, sum(one), last))
    if in_flight < view.micro_batches:
        # 1F1B's steady state: a forward after a backward, every accumulator alive, nothing gathered (the
        # backward left every layer whole). With resharding each layer frees its part in its post-forward: at
        # a body layer's forward the layers from it up are still whole, their activations of it not yet kept.
        grads = held_grads + every
        forward.append(point(grads, root_gathered + stay, sum(kept), last))
        if resharded:
            for i in body:
                gathered = sum(whole[j] if j >= i else share[j] for j in body)
                forward.append(point(grads, root_gathered + gathered, sum(kept) - sum(one[i:]),
                                     layers[i].forward_working_bytes))
    points = {"forward": largest_point(forward)}

    walker = BackwardWalk(view, point, accumulator, whole, held_grads, all_gather)

    def walk(kept: list[int], accumulating: bool, after_backward: bool) -> MemoryBreakdown:
        """A backward of the stage (:meth:`BackwardWalk.walk`); *after_backward*: it follows a backward, so every
        layer is still whole and nothing is gathered (no all-gather output), else a forward left each layer its
        share and each is gathered again (the next one prefetched) where that is not all of it."""
        gathers = resharded and not after_backward
        running = {i: whole[i] - share[i] for i in body} if gathers else {}
        return walker.walk(range(len(layers)), kept, accumulating, running, root_gathered
                           + (sum(whole.values()) if after_backward else stay), gathers)

    # The step's first backward (after a forward, no accumulator yet); 1F1B's steady-state backwards (after a
    # forward, every accumulator alive); a backward right after a backward (GPipe's second, 1F1B's second
    # cooldown one: every layer whole, every accumulator alive, one micro-batch fewer in flight).
    backward = [walk(kept, False, False)]
    if in_flight < view.micro_batches:
        backward.append(walk(kept, True, False))
    if in_flight > 1:
        backward.append(walk([k * (in_flight - 1) for k in one], True, True))
    points["backward"] = largest_point(backward)
    points["reduce"] = reduce_point(view, point, accumulator, held_grads, batch, root_gathered + sum(whole.values()),
                                    range(len(layers)), replicate=replicate, cpu_offload=cpu_offload)
    return points


def multi_stage_points(view: StageView, point, held_grads: int, batch: int, *, replicate: int, cpu_offload: bool,
                       sharded_held: dict[str, int] | None = None) -> dict[str, MemoryBreakdown]:
    """The ``forward``, ``backward`` and ``reduce`` points of a rank under torch's multi-stage runtime
    (``_PipelineScheduleRuntime``, interleaved 1F1B with ``vpp > 1``, without ``reshard_after_forward``:
    :func:`~hp_core.specs.overlap.check_fsdp_pipeline`), walked through the rank's compute order
    (:attr:`StageView.order`) with the actions torch 2.13 inserts in it (``pipelining/schedules.py``
    ``_PipelineScheduleRuntime._prepare_schedule_with_comms``; docs/runtimes.md, ``fsdp2``, "FSDP under
    interleaved pipeline stages"). At each action:

    * gathered: every chunk the schedule counts gathered (``_add_unshard_reshard(max_active_stages=3)``,
      :func:`~hp_core.engine.timing.overlap.gathered_chunks`: UNSHARDed, not yet RESHARDed, at most three),
      each whole, root included (UNSHARD calls ``unshard(async_op=True)`` on every ``FSDPModule`` of the
      chunk; without ``reshard_after_forward`` neither a forward nor a backward frees them: ``stage.py``
      ``backward_maybe_with_nosync``). A chunk issued and not yet used holds the all-gather outputs; the
      action that uses it waits (``_assert_unsharded``), and each unit's copy-out allocates its parameters
      before its output is freed (``FSDPParamGroup.wait_for_unshard`` outside forward): the chunk and its
      largest unit at once, before the action computes;
    * gradients: the unsharded accumulators (reduce dtype) of every chunk whose first backward ran and whose
      ``REDUCE_GRAD`` (``_add_reduce_grad``: right after its ``m``-th backward) has not; the sharded
      gradients of the chunks already reduced (``perform_reduce_grad``, held to the optimizer step);
    * activations: each chunk's micro-batches in flight (forwards run less backwards, the schedule's own
      order; at the first backward they are the schedule's ``in_flight``); the loop's batch where the chunk
      that keeps it has none;
    * a forward binds at its chunk's last layer (as on a single-stage schedule); a backward is walked over
      its chunk's layers (:class:`BackwardWalk`), the other chunks' bytes beside; ``REDUCE_GRAD`` of a
      chunk reshards and reduce-scatters its units in turn (:func:`reduce_point`).

    *sharded_held*, where given, is filled with the sharded gradients of the chunks reduced before the returned
    ``forward`` and ``backward`` points (held there, in the reduce-scatter pool: ``Fsdp2Points.cached_bytes``).
    """
    layers, order = view.layers, view.order
    chunks = max(layer.chunk for layer in layers) + 1
    members = [[i for i, layer in enumerate(layers) if layer.chunk == c] for c in range(chunks)]
    accumulator = [sum(layer.elements.values()) * view.precision.reduction_bytes for layer in layers]
    whole = {i: gathered_bytes(view, layer) for i, layer in enumerate(layers) if layer.placement == "body"}
    gathered = [sum(gathered_bytes(view, layers[i]) for i in m) for m in members]
    roots = [sum(gathered_bytes(view, layers[i]) for i in m if i not in whole) for m in members]
    largest_unit = [max([roots[c]] + [whole[i] for i in m if i in whole]) for c, m in enumerate(members)]
    accumulators = [sum(accumulator[i] for i in m) for m in members]
    sharded_grads = [0 if cpu_offload else sum(sharded_bytes(view, layers[i], view.precision.grad_bytes, replicate)
                                                    for i in m) for m in members]
    one = [sum(layers[i].kept_bytes for i in m) for m in members]
    keeper = next((layer.chunk for layer in layers if layer.placement == "first"), None)
    walker = BackwardWalk(view, point, accumulator, whole, held_grads, 0)
    computed = [c for _, c, _ in order]
    windows = gathered_chunks(computed)
    waits = {used: c for c, _, used in unshards(computed)}
    in_flight, backwards, done = [0] * chunks, [0] * chunks, 0
    found: dict[str, list[MemoryBreakdown]] = {"forward": [], "backward": [], "reduce": []}
    reduced_before: dict[int, int] = {}  # id of a forward or backward point -> the sharded gradients held there
    for i, (kind, c, _) in enumerate(order):
        on = sum(gathered[k] for k in windows[i])
        alive = [k for k in range(chunks) if 0 < backwards[k] < view.micro_batches]
        sharded = 0 if held_grads else done
        grads = held_grads + sharded + sum(accumulators[k] for k in alive)
        kept = sum(n * b for n, b in zip(in_flight, one))
        loose = batch if keeper is not None and in_flight[keeper] == 0 else 0  # the loop's batch, no micro-batch
        name = "forward" if kind == "F" else "backward"
        if waits.get(i) == c:
            found[name].append(point(grads, on + largest_unit[c], kept + loose, 0))
            reduced_before[id(found[name][-1])] = sharded
        if kind == "F":
            in_flight[c] += 1
            loose = 0 if c == keeper else loose
            last = layers[members[c][-1]].forward_working_bytes
            found["forward"].append(point(grads, on, kept + one[c] + loose, last))
            reduced_before[id(found["forward"][-1])] = sharded
            continue
        others = grads - held_grads - (accumulators[c] if c in alive else 0)
        per_layer = [layers[j].kept_bytes * in_flight[c] if layers[j].chunk == c else 0 for j in range(len(layers))]
        found["backward"].append(walker.walk(members[c], per_layer, backwards[c] > 0, {}, on, False, others,
                                             kept - in_flight[c] * one[c] + loose))
        reduced_before[id(found["backward"][-1])] = sharded
        in_flight[c] -= 1
        backwards[c] += 1
        if backwards[c] == view.micro_batches:  # REDUCE_GRAD, right after the chunk's last backward
            kept = sum(n * b for n, b in zip(in_flight, one))
            loose = batch if keeper is not None and in_flight[keeper] == 0 else 0
            others = sum(accumulators[k] for k in alive if k != c)
            found["reduce"].append(reduce_point(view, point, accumulator, held_grads, kept + loose, on, members[c],
                                                sharded, others, replicate=replicate, cpu_offload=cpu_offload))
            done += sharded_grads[c]
    chosen = {name: largest_point(points) for name, points in found.items()}
    if sharded_held is not None:
        sharded_held.update({name: reduced_before[id(chosen[name])] for name in ("forward", "backward")})
    return chosen


def reduce_point(view: StageView, point, accumulator: list[int], held_grads: int, activations: int, gathered: int,
                 indices: Sequence[int], done_sharded: int = 0, other_grads: int = 0, *, replicate: int,
                 cpu_offload: bool) -> MemoryBreakdown:
    """Under PP, the once-per-step reduction (pipelining/stage.py ``perform_reduce_grad``) of the layers *indices*
    (the stage's, or one chunk's under a multi-stage schedule), every layer gathered (*gathered*, with whatever
    else is) after their last backward: each unit's ``FSDPParamGroup.post_backward`` in turn, the root's first
    (``_state_ctx.all_states``, in module order), reshards it (``set_reshard_after_backward(True)``) and
    reduce-scatters its accumulated gradients: at a unit's ``foreach_reduce`` its accumulators and those of the
    units after it are alive beside its reduce-scatter input (the previous unit's is waited on first, one in
    flight: ``reduce_scatter_max_input_buffers`` 1), the sharded gradients of the units before it (and
    *done_sharded*, those reduced before), under HSDP with a reduce dtype other than the gradients' their
    all-reduce outputs (:func:`~hp_plugins.runtimes.fsdp2_layers.all_reduce_output_bytes`, held until
    ``_root_post_backward_final_callback`` runs
    ``finalize_backward``), and the gathered parameters of the units after it; *activations* (no activation
    but the loop's batch, on a single-stage schedule) and *other_grads* (other chunks' accumulators) beside."""
    layers = view.layers
    units = [[i for i in indices if layers[i].placement != "body"]]
    units += [[i] for i in indices if layers[i].placement == "body"]
    hsdp_held = replicate > 1 and view.precision.reduction_bytes != view.precision.grad_bytes
    found: list[MemoryBreakdown] = []
    held_all_reduce = 0
    for k, unit in enumerate(units):
        gathered -= sum(gathered_bytes(view, layers[i]) for i in unit)
        alive = sum(accumulator[i] for other in units[k:] for i in other)
        rs_input = sum(sum(layers[i].elements.values()) for i in unit) * view.precision.reduction_bytes
        found.append(point((held_grads or done_sharded) + other_grads + alive, gathered + rs_input + held_all_reduce,
                           activations, 0))
        if not cpu_offload:
            done_sharded += sum(sharded_bytes(view, layers[i], view.precision.grad_bytes, replicate) for i in unit)
        if hsdp_held:
            held_all_reduce += sum(all_reduce_output_bytes(view, layers[i], replicate) for i in unit)
    return largest_point(found)
