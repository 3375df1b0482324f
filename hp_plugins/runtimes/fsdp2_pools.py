"""FSDP2's sharding arithmetic and what PyTorch's caching allocator keeps reserved beside the ``fsdp2`` runtime's peak
points (``Fsdp2Points.cached_bytes``, docs/runtimes.md "Cached"): the reduce-scatter and all-gather stream pools
(:func:`stream_pool_bytes`, the all-gather pool placed block by block: :func:`best_fit_reserved_bytes`) and an upcast
loss's freed logits block (:func:`loss_hole_bytes`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from hp_core.peak_points import StageLayer, StageView

if TYPE_CHECKING:
    from hp_plugins.runtimes.fsdp2_points import Fsdp2Points

__all__ = ["best_fit_reserved_bytes", "gathered_bytes", "loss_hole_bytes", "shard_ranks", "sharded_bytes",
           "stream_pool_bytes"]

_SMALL_BYTES = 1 << 20  # CUDACachingAllocator.cpp kSmallSize: the largest request of the small pool
_MIN_BLOCK_BYTES = 512  # kMinBlockSize


def _shard(view: StageView, group: str, replicate: int = 1) -> int:
    """What FSDP2 shards a group over: its mesh, dp * cp; routed experts over the expert data-parallel
    group only under expert parallelism (without it, a TP plan leaves them whole and FSDP shards them
    over the same mesh as the rest)."""
    p = view.parallel
    return (p.expert_dp if group == "routed_expert" and p.ep > 1 else p.dp * p.cp) // replicate


def _sharded(view: StageView, layer: StageLayer, nbytes: int, replicate: int = 1) -> int:
    return sum(math.ceil(n * nbytes / _shard(view, group, replicate)) for group, n in layer.elements.items())


def _gathered(view: StageView, layer: StageLayer) -> int:
    """A layer's gathered parameters: the compute dtype, or as a precision recipe gathers them (torchao's
    ``enable_fsdp_float8_all_gather``: the GEMM weights cast to float8 before the all-gather)."""
    if layer.gathered_bytes is not None:
        return layer.gathered_bytes
    return sum(layer.elements.values()) * view.precision.activation_bytes


def stream_pool_bytes(view: StageView, points: "Fsdp2Points") -> tuple[int, int]:
    """``(reduce-scatter pool, all-gather pool)``: the most FSDP2 allocates at once on its two streams that allocate,
    each a pool of PyTorch's caching allocator of its own (a block is reused only by allocations on the stream it
    was allocated on: ``c10/cuda/CUDACachingAllocator.cpp``, blocks keyed by stream).

    * The reduce-scatter stream allocates each unit's reduce-scatter output, viewed out as its sharded gradients
      (torch ``_fsdp_collectives.py`` ``foreach_reduce``: ``reduce_output`` under ``reduce_scatter_stream``; the input
      is allocated in the default stream since pytorch/pytorch#129721, whose description states the outputs stay in
      the reduce-scatter stream and are freed "altogether after optimizer"): every unit's sharded gradient (one unit's
      at a time with ``cpu_offload``, each copied to the host), and with a reduce dtype other than the gradients' one
      unit's output in the reduce dtype beside it until its cast; where a unit's ``.grad`` already exists at its
      reduce (gradient accumulation without PP, or ``zero_grad(set_to_none=False)``), ``foreach_reduce`` still
      allocates a new ``reduce_output`` there and adds it into ``.grad``: one unit's output beside every gradient.
    * The all-gather copy-in stream allocates each unit's all-gather input (its shard cast to the gathered format:
      ``_get_param_all_gather_inputs``' ``flat_foreach_copy_input``, or a recipe's ``fsdp_pre_all_gather`` output),
      then its output (``foreach_all_gather``), and frees the input once copied in; in forward a unit's output is
      freed at the next unit's copy-out (``FSDPParamGroup.wait_for_unshard``), after that unit's input and output are
      allocated, the last one at the root's post-forward (``_fsdp_state.py`` ``_post_forward``); in backward each
      output right after its copy-out, the root (never resharded after forward) and a last layer kept gathered
      (``reshard_last_layer`` False) gathering nothing; resharded to ``n`` ranks after forward
      (``reshard_after_forward=n``) a backward's input is the post-forward shard, an ``n``-th of the gathered
      parameters (``_fsdp_param.py`` ``to_sharded_post_forward``). The pool is what the caching allocator reserves over two
      steps of that sequence (:func:`best_fit_reserved_bytes`): for a root larger than a layer, the root's input and
      output and, where a layer's output does not fit beside its input in the root input's block, a layer's output.
      torch 2.6.0 (branched in December 2024) and torch 2.13 allocate these the same way. With ``cpu_offload`` the
      input is priced the same (the per-parameter host-to-device copy before the cast is not). Under a multi-stage
      schedule none: its UNSHARD actions gather on the current stream (``async_op=True``).
    """
    p = view.parallel
    replicate = points.replicate
    # torchtitan's wrapping from 83e6941 (embedding_unit own, resharding after forward): the embedding a unit of its
    # own, gathered first and again in backward after the lowest layer, and the final norm and head one unit gathered
    # after the layers and never resharded (torchtitan/distributed/fsdp.py apply_fsdp_to_decoder lines 191-204 at
    # bcc09297a: reshard_after_forward only under the policy "always"); the root (fully_shard(model)) holds nothing
    # else of a decoder's. Otherwise the root unit (the layers placed first and last) gathered before the layers.
    own = points._own_embedding_bytes(view) > 0
    body_units = [[layer] for layer in view.layers if layer.placement == "body"]
    if own:
        embedding = [layer for layer in view.layers if layer.placement == "first"]
        head = [layer for layer in view.layers if layer.placement == "last"]
        units = [embedding] + body_units + ([head] if head else [])
    else:
        root = [layer for layer in view.layers if layer.placement != "body"]
        units = ([root] if root else []) + body_units

    def sharded(unit: list[StageLayer], nbytes: int) -> int:
        return sum(_sharded(view, layer, nbytes, replicate) for layer in unit)

    precision = view.precision
    grads = [sharded(unit, precision.grad_bytes) for unit in units]
    outputs = [sharded(unit, precision.reduction_bytes) if precision.reduction_bytes != precision.grad_bytes else 0
               for unit in units]
    accumulated = not points.set_to_none or (view.micro_batches > 1 and p.pp == 1)
    if accumulated and precision.reduction_bytes == precision.grad_bytes:
        outputs = grads  # a new reduce-scatter output in the gradients' dtype, added into the existing .grad
    if points.cpu_offload:
        reduce_pool = max((g + o for g, o in zip(grads, outputs)), default=0)
    else:
        reduce_pool = sum(grads) + max(outputs, default=0)
    # Under a multi-stage schedule (StageView.order) every gather is an UNSHARD action's unshard(async_op=True), which
    # FSDPCommContext.get_all_gather_streams runs on the current stream: none allocates in the all-gather pool (a
    # unit's own pre-forward unshard is a no-op on its gathered chunk).
    if (p.dp * p.cp) // replicate <= 1 or (view.order is not None and p.pp > 1):
        return reduce_pool, 0
    gathers = [sum(_gathered(view, layer) for layer in unit) for unit in units]
    # Each unit's all-gather input: its shard in the gathered format, made in the same stream before the output is
    # allocated (_get_param_all_gather_inputs' flat_foreach_copy_input, or a recipe's fsdp_pre_all_gather output).
    inputs = [sum(math.ceil(_gathered(view, layer) * _sharded(view, layer, 1, replicate) / max(sum(layer.elements.values()), 1))
                  for layer in unit) for unit in units]
    # A backward's all-gather input after resharding to n ranks (reshard_after_forward=n): the post-forward shard, an
    # n-th of the gathered parameters in the compute dtype (_fsdp_param.py to_sharded_post_forward keeps
    # _sharded_post_forward_param_data, all_gather_output.numel() // n, which _get_param_all_gather_inputs copies in
    # while the parameter is SHARDED_POST_FORWARD), not the full shard the forward's gather copies in.
    keep_share = points._keep_share(view)
    if keep_share > 1:
        backward_inputs = [sum(_gathered(view, layer) // keep_share for layer in unit) for unit in units]
    else:
        backward_inputs = inputs
    # The units a backward gathers again: none without resharding after forward; the root (gathered once a step,
    # before the decoder layers, never resharded after forward) not, nor a last layer kept gathered; with the
    # embedding's own unit, the layers and then the embedding, not the head's unit.
    if own:
        regathered = list(range(len(units) - (1 if head else 0)))
    else:
        regathered = list(range(1 if root else 0, len(units))) if p.reshard_after_forward else []
    if not points.reshard_last_layer and regathered:
        regathered = regathered[:-1]
    events: list[tuple[str, str, int]] = []
    for _step in range(2):  # a second step starts from the first one's blocks: the pool's steady state
        for k in range(len(units)):  # forward: unit k's input and output, its input freed, then unit k-1's output
            events += [("alloc", f"in{k}", inputs[k]), ("alloc", f"out{k}", gathers[k]), ("free", f"in{k}", 0)]
            if k:
                events.append(("free", f"out{k - 1}", 0))
        events.append(("free", f"out{len(units) - 1}", 0))  # the root's post-forward frees the last one
        for k in reversed(regathered):  # backward: each output freed right after its copy-out
            events += [("alloc", f"in{k}", backward_inputs[k]), ("alloc", f"out{k}", gathers[k]), ("free", f"in{k}", 0),
                       ("free", f"out{k}", 0)]
    return reduce_pool, best_fit_reserved_bytes(events)


def best_fit_reserved_bytes(events: list[tuple[str, str, int]]) -> int:
    """The bytes one stream's pool of PyTorch's caching allocator reserves over *events* (``("alloc", key, nbytes)``,
    ``("free", key, 0)``), as ``c10/cuda/CUDACachingAllocator.cpp`` serves them without expandable segments: a request
    takes the smallest free block at least its size (blocks ordered by size, then address), split where the rest
    exceeds 1 MiB (``kSmallSize``; requests of at most 1 MiB use a pool of their own, split down to 512 bytes); none:
    a new segment; a freed block merges with its free neighbours in its segment, and no block moves or joins another
    segment. Sizes as requested: the 512-byte and 2 MiB roundings (``round_size``, ``get_allocation_size``) are not
    priced (a few MiB against GiB-sized outputs)."""
    segments: list[list[list]] = []  # each segment's blocks in address order: [bytes, key or None], None free
    small_pool: list[bool] = []
    where: dict[str, list] = {}
    for op, key, nbytes in events:
        if op == "free":
            block = where.pop(key, None)
            if block is None:
                continue
            block[1] = None
            for blocks in segments:  # merge free neighbours
                merged: list[list] = []
                for b in blocks:
                    if merged and merged[-1][1] is None and b[1] is None:
                        merged[-1][0] += b[0]
                    else:
                        merged.append(b)
                blocks[:] = merged
            continue
        if nbytes <= 0:
            continue
        small = nbytes <= _SMALL_BYTES
        best = None
        for s, blocks in enumerate(segments):
            if small_pool[s] != small:
                continue
            offset = 0
            for i, b in enumerate(blocks):
                if b[1] is None and b[0] >= nbytes and (best is None or (b[0], s, offset) < best[0]):
                    best = ((b[0], s, offset), s, i)
                offset += b[0]
        if best is None:
            segments.append([[nbytes, key]])
            small_pool.append(small)
            where[key] = segments[-1][0]
            continue
        _, s, i = best
        block = segments[s][i]
        rest = block[0] - nbytes
        if rest >= (_MIN_BLOCK_BYTES if small else _SMALL_BYTES + 1):
            block[0] = nbytes
            segments[s].insert(i + 1, [rest, None])
        block[1] = key
        where[key] = block
    return sum(b[0] for blocks in segments for b in blocks)


def loss_hole_bytes(view: StageView) -> int:
    """The free block an upcast loss (``logits.float()`` then ``cross_entropy``: the output kind's ``loss_softmax`` and
    ``loss_targets`` terms) leaves at its backward, where that backward binds: the logits in the compute dtype, freed
    before backward (torchtitan ``train.py`` ``del pred`` at 9dec370; the output object of ``model(batch).loss``), are
    smaller than the fp32 gradients that backward allocates (ATen ``nll_loss_backward`` a zeroed gradient of the fp32
    logits, ``_log_softmax_backward_data`` another, beside the kept log-softmax output). The caching allocator neither
    moves a block nor serves a request from a smaller one (``CUDACachingAllocator.cpp``), and the fp32 logits' freed
    block takes the first gradient, so the pool grows for the second and the compute-dtype block stays free beside
    it: reserved memory keeps it from the first step on (nothing returns it to the device without ``empty_cache``)."""
    terms = {term.op: term for term in view.layers[-1].terms}
    precision = view.precision
    if "loss_softmax" not in terms or "loss_targets" not in terms or precision.activation_bytes >= precision.logits_bytes:
        return 0  # no upcast loss, or logits already in the loss's dtype (.float() returns them: no block freed)
    return terms["loss_softmax"].bytes // precision.logits_bytes * precision.activation_bytes


shard_ranks, sharded_bytes, gathered_bytes = _shard, _sharded, _gathered
