"""The step: :func:`time_run` prices one training step of a prepared run.

Per stage it sums the per-micro-batch layer times (:mod:`.layer`) of its
chunks and the pipeline sends, adds the step-end data-parallel
communication and optimizer step, and runs the stages through the pipeline
(:func:`~hp_core.engine.timing.collectives.pipeline_seconds`); the model and
its sources are in :mod:`hp_core.engine.timing`.
"""

from __future__ import annotations

import attrs

from hp_core.engine.optimizer import OptimizerLoad, add_loads, foreach_form, layer_load, shard_update_bytes
from hp_core.engine.timing.placed import placed_time
from hp_core.engine.prepare import PreparedRun
from hp_core.engine.precision import gathered_param_bytes, optimizer_gather_bytes
from hp_core.engine.stage import offloaded_bytes
from hp_core.engine.schedule import pipeline_seconds, rank_order
from hp_core.engine.timing.fsdp_pipeline import fill_delay, stage_fsdp
from hp_core.engine.timing.overlap import bucketed, fsdp_layers, hidden_send, lone_seconds
from hp_core.engine.precision import check_fp8_attention_device, compute_dtype_kinds, recipe_prices_on
from hp_core.engine.timing.attention_speedup import fp8_attention_provenance
from hp_core.engine.timing.layer import ALTERNATE_MATMUL_DEFAULT_FRACTION, _layer_time, _LayerTime, offload_seconds, work_of
from hp_core.engine.timing.rates import _rates, _require
from hp_core.engine.timing.results import StageTime, StepTime
from hp_core.engine.timing.stage_weights import cast_in_optimizer_step, stage_quantized_elements, stage_weight_seconds
from hp_core.engine.timing.tied_weights import with_tied_sync

from hp_core.errors import ConfigError
from hp_core.specs import HardwareSpec, ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_core.specs.overlap import check_fsdp_pipeline, check_fsdp_replicate
from hp_core.specs.timing import TimingProfile
from hp_core.costs import LayerCost
from hp_core.schedules import StagePasses
from hp_core.types import Optimizer

__all__ = ["time_run"]


def _runs(layers: list) -> list[tuple[object, int]]:
    """Maximal runs of the same object in *layers*, ``(object, length)``."""
    runs: list[list] = []
    for layer in layers:
        if runs and runs[-1][0] is layer:
            runs[-1][1] += 1
        else:
            runs.append([layer, 1])
    return [(layer, n) for layer, n in runs]


def _stage_elements(held: dict[int, int], costs: tuple[LayerCost, ...], names: list[str], parallel: ParallelSpec,
                    cache: dict, optimizer: Optimizer, precision: PrecisionSpec) -> tuple[int, int, OptimizerLoad, OptimizerLoad]:
    """Dense and routed-expert parameter elements one rank of a stage holds (before ZeRO sharding), and the optimizer's load of each.

    Counted as the memory estimate counts them (:func:`hp_core.engine.stage.layer_elements`, through
    :func:`hp_core.engine.optimizer.layer_load`):
    TP-split tensors over ``tp``, routed experts over ``ep * etp``; a tied
    weight whose owner sits on the stage once. *held* counts the stage's
    layers by group; *cache* keeps each group's count and load per set of
    kinds on a stage. The loads (:func:`hp_core.engine.optimizer.layer_load`)
    are the dense and shared-expert groups' together, and the routed experts'.
    """
    owners = frozenset(names[group] for group in held)
    dense = experts = 0
    dense_loads: list[OptimizerLoad] = []
    expert_loads: list[OptimizerLoad] = []
    for group, count in held.items():
        key = (group, owners)
        loads = cache.get(key)
        if loads is None:
            loads = cache[key] = layer_load(costs[group], names[group], parallel.tp, parallel.ep, parallel.etp, owners,
                                            optimizer, precision)
        for kind, load in loads.items():
            if kind == "routed_expert":
                experts += count * load.elements
                expert_loads.append(load.times(count))
            else:
                dense += count * load.elements
                dense_loads.append(load.times(count))
    return dense, experts, add_loads(dense_loads), add_loads(expert_loads)


def _forward_share(stage: StageTime) -> float:
    """A stage's forward pass per micro-batch: its forward compute and that share of its exposed communication."""
    compute = stage.forward_seconds + stage.backward_seconds + stage.recompute_seconds
    if compute <= 0:
        return 0.0
    return stage.forward_seconds * (1 + stage.communication_seconds / compute)


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
            setting its kind cannot run, or an FP8-attention recipe on a device whose family runs no FP8 kernel
            for a core of the model (on Hopper, a head dim other than 128; one line, with the field path).
    """
    rt = run.runtime
    timing = profile if profile is not None else rt.timing
    if timing is None:
        raise ConfigError("$.runtime", f"runtime {rt.name!r} states no timing profile, so it cannot price a step time; use a runtime that states one (see 'hp plugins') or pass a profile")
    if hardware is None:
        raise ConfigError("$.hardware", "a step time needs a device: name a hardware preset (--hardware, see 'hp plugins') or state one")
    model, parallel, precision, attention, zero = run.model, run.parallel, run.precision, run.attention, run.zero
    settings = run.settings(recompute)
    replicate = timing.schedule.fsdp_replicate  # HSDP (OverlapSchedule.fsdp_replicate)
    if replicate > 1:
        check_fsdp_replicate(replicate, zero, parallel, timing.schedule.fsdp_pipeline_step_reduce)

    recipe = run.stage_inputs.recipe
    collectives = run.registry.collective_model(timing.collective_model) if timing.collective_model else None
    rates = _rates(parallel, hardware, timing, precision, attention, recipe, collectives, zero=zero)
    # An FP8 attention core the device's family runs no kernel for (on Hopper, a head dim other than 128) is refused,
    # as the estimate refuses it.
    check_fp8_attention_device(recipe, (cost.work for cost in run.costs), hardware.architecture, hardware.name,
                               recipe_prices_on(run.registry, hardware, timing))
    dtype, peak, links, memory, ov = rates.dtype, rates.peak, rates.links, rates.memory, timing.overlap
    dev = timing.device(hardware.architecture)
    cp_algorithm = parallel.cp_kind  # the layout states it (``--cp-kind``)

    kinds, costs, context, micro_batches = run.kinds, run.costs, run.context, run.micro_batches
    works = [work_of(cost, kind.name) for kind, cost in zip(kinds, costs)]

    defaulted: set[str] = set()  # kinds whose op-SAC re-run matmuls are priced at the default (layer.alternate_matmul_flops)

    def price(group: int, setting: Setting, full: bool, switches: frozenset[str]) -> _LayerTime:
        layer_time = run.timed_layer(hardware, timing, (group, full, switches),  # a body layer: one FSDP unit
                                     lambda: _layer_time(costs[group], works[group], full, switches, rates, unit=True))
        if (not full and works[group].alternate_matmul_flops is None and costs[group].forward.matmul_flops
                and rates.alternate_mm_switches and rates.alternate_mm_switches <= switches):
            defaulted.add(kinds[group].name)
        if setting.offload:
            # Offload's exposed copies count as communication (offload_seconds).
            kept = costs[group].input_bytes if full else costs[group].kept_under(switches)
            link = _require(hardware, "host_link_bandwidth_bytes_per_second", "offload")
            exposed = offload_seconds(offloaded_bytes(kept, setting.offload), link, layer_time.forward_seconds,
                                      layer_time.backward_seconds + layer_time.recompute_seconds)
            layer_time = attrs.evolve(layer_time, communication_seconds=layer_time.communication_seconds + exposed)
        return layer_time

    body: list[_LayerTime] = run.per_body_layer(settings, price)

    def placed(where: str) -> tuple[list[_LayerTime], list[int]]:
        groups = run.placed_groups(where)
        # A placed layer recomputes nothing, unless the runtime's recompute reaches it (the MTP's: timing.placed).
        times = {i: placed_time(run, i, settings, works[i], rates) for i in set(groups)}
        return [times[i] for i in groups], groups

    first_times, first_groups = placed("first")
    last_times, last_groups = placed("last")
    names = [kind.name for kind in kinds]
    elements_cache: dict = {}
    stage_cache: dict = {}
    quantized_cache: dict = {}
    body_groups = run.layers.body_groups
    sched = timing.schedule
    layer_cache: dict = {}

    def layer_elements(group: int, owners: frozenset[str]) -> tuple[int, int]:
        """Dense and routed-expert parameter elements of one layer of *group* on a rank (before sharding)."""
        key = (group, owners)
        found = layer_cache.get(key)
        if found is None:
            loads = layer_load(costs[group], names[group], parallel.tp, parallel.ep, parallel.etp, owners, run.optimizer, precision)
            found = layer_cache[key] = (sum(v.elements for k, v in loads.items() if k != "routed_expert"),
                                        sum(v.elements for k, v in loads.items() if k == "routed_expert"))
        return found

    # Pipeline sends: the activation per chunk boundary, each way: split over TP under SP
    # (Megatron-Core get_tensor_shapes) or with the scatter/gather optimisation.
    # The activation a body layer hands to the next, as the first body group states it (LayerWork.boundary_bytes).
    split = parallel.tp if (parallel.sp or timing.pp_scatter_gather) else 1
    send_bytes = works[body_groups[0]].boundary_bytes / split
    send = 0.0
    if parallel.pp > 1:
        send = links.seconds("pp", "p2p", send_bytes)
        if timing.pp_scatter_gather and not parallel.sp and parallel.tp > 1:
            send += links.seconds("tp", "all_gather", send_bytes * parallel.tp)
        send *= (1 - ov.pipeline.value) * rates.slowdown

    # Per stage: per-micro-batch sums over its chunks, then DP and optimizer.
    grad_bytes, param_bytes = precision.grad_bytes, precision.param_bytes
    # The gradient the optimizer step reads and clips (TimingProfile.optimizer_grad_bytes: Megatron's fp32 main
    # gradients), and the precision its update is priced in: a narrower buffer is first copied into it.
    main_grad_bytes = grad_bytes if timing.optimizer_grad_bytes is None else timing.optimizer_grad_bytes.value
    step_precision = precision if main_grad_bytes == grad_bytes else attrs.evolve(precision, grad_bytes=main_grad_bytes)
    # The data-parallel reduction runs in the reduce dtype where the precision states one (FSDP's reduce_dtype:
    # the reduce-scatter input is cast to it, PrecisionSpec.reduce_bytes), else in the gradients' own.
    reduce_bytes = precision.reduction_bytes
    # FSDP gathers parameters in the compute dtype (FSDP2 MixedPrecisionPolicy.param_dtype: torch.distributed.fsdp
    # fully_shard casts the sharded parameters before the all-gather), at most the stored width.
    gather_bytes = min(param_bytes, precision.activation_bytes)
    # The groups ZeRO shards over; under HSDP the shard groups, dp * cp (expert dp) over the replicate degree.
    dense_group = parallel.dp * parallel.cp // replicate
    expert_group = parallel.expert_dp // replicate
    grad_passes = timing.optimizer_grad_passes.value
    chunks = parallel.chunks
    stages: list[StageTime] = []
    recomputed_flops_per_stage: list[float] = []
    unpaired_per_stage: list[float] = []  # per stage, the expert all-to-alls a lone pass of each chunk exposes (mean chunk)
    weights_per_stage: list[float] = []  # per stage, its cached weights' quantization once a step (stage_weights)
    weight_cast_cache: dict = {}
    in_step = cast_in_optimizer_step(recipe, sched.overlap_param_gather)  # else on the first micro-batch's forward
    passes: list[StagePasses] = []  # each stage as the schedule prices its pipeline
    bounds = run.chunk_bounds
    schedule = run.schedule
    # A chunk sends to its neighbour chunks where they run on another stage (DualPipeV's
    # turn at the last stage sends nothing); under model copies a micro-batch runs one of
    # a stage's copies, so its time per micro-batch is the mean over them.
    copies = schedule.model_copies
    runs_on = [set() for _ in range(chunks)]
    for stage in range(parallel.pp):
        for c in run.stage_chunks(stage):
            runs_on[c].add(stage)
    # Stages running the same layer objects in the same chunk roles, with the same neighbours on other stages (a
    # pipeline's middle stages), are priced once: every sum below runs in the same order, so each figure is the
    # one pricing them again would give; only the index differs. What depends on a stage's position enters the key.
    priced: dict = {}
    # FSDP under PP (OverlapSchedule.fsdp_pipeline_step_reduce): each stage's exposed gathers on the pipeline's fill,
    # its first forward's (head) or under a multi-stage schedule (vpp > 1) its first UNSHARD's (first; fsdp_pipeline).
    heads: list[tuple[float, tuple[float, float]]] = []  # per stage (head, first)
    step_reduce = zero >= 3 and parallel.pp > 1 and sched.fsdp_pipeline_step_reduce
    multi_stage = step_reduce and parallel.vpp > 1
    if step_reduce:
        check_fsdp_pipeline(zero, parallel, multi_stage=True)  # a schedule whose FSDP under PP hp prices (with an order)
    for stage in range(parallel.pp):
        key = tuple((c == 0, c == chunks - 1, c != chunks - 1 and stage not in runs_on[c + 1], c != 0 and stage not in runs_on[c - 1],
                     run.body_group[bounds[c][0]:bounds[c][1]], tuple(map(id, body[bounds[c][0]:bounds[c][1]])))
                    for c in run.stage_chunks(stage))
        order = rank_order(schedule, run.stage_inputs.layout, stage, len(run.stage_chunks(stage))) if multi_stage else None
        key += (order and tuple((kind, c) for kind, c, _ in order),)  # a rank's gathers follow its own order (warm-up)
        same = priced.get(key)
        if same is not None:
            stages.append(StageTime(stage, *same[0]))
            recomputed_flops_per_stage.append(same[1])
            passes.append(same[2])
            heads.append(same[3])
            unpaired_per_stage.append(same[4])
            weights_per_stage.append(same[5])
            continue
        fwd = bwd = rec = comm = flops = rflops = wgrad = head = unpaired = 0.0
        first = (0.0, 0.0)  # under a multi-stage schedule: stage_fsdp
        held: dict[int, int] = {}
        by_group: dict[str, list[float]] = {}
        ordered: list[_LayerTime] = []
        ordered_groups: list[int] = []
        chunk_sizes: list[int] = []  # layers of each chunk in ordered
        sends = 0
        for c in run.stage_chunks(stage):
            lo, hi = bounds[c]
            layers = body[lo:hi]
            groups = run.body_group[lo:hi]
            if c == 0:
                layers = first_times + layers
                groups = tuple(first_groups) + groups
            if c == chunks - 1:
                layers = layers + last_times
                groups = groups + tuple(last_groups)
            for group in groups:
                held[group] = held.get(group, 0) + 1
            if zero >= 3:
                ordered += layers
                ordered_groups += groups
                chunk_sizes.append(len(layers))
            # Runs of the same layer (one _LayerTime per group and setting) added once, times their length.
            for t, n in _runs(layers):
                fwd += n * t.forward_seconds
                bwd += n * t.backward_seconds
                rec += n * t.recompute_seconds
                comm += n * t.communication_seconds
                flops += n * t.flops
                rflops += n * (t.recomputed_flops + t.core_backward_flops)  # HFU's: recompute and a fused core's re-run scores
                wgrad += n * t.weight_gradient_seconds
                unpaired += n * t.unpaired_seconds
                for g, total, exposed in t.communication_by_group:
                    sums = by_group.setdefault(g, [0.0, 0.0])
                    sums[0] += n * total
                    sums[1] += n * exposed
            sends += (c != chunks - 1 and stage not in runs_on[c + 1]) + (c != 0 and stage not in runs_on[c - 1])
        if sends:
            # A send hides behind a chunk's compute where the schedule overlaps them (--overlap-p2p-communication).
            window = (fwd + bwd + rec) / (2 * max(1, chunks // parallel.pp))
            exposed = hidden_send(send, window, sched.overlap_p2p)
            comm += sends * exposed
            by_group["pp"] = [sends * send, sends * exposed]
        if copies > 1:
            fwd, bwd, rec, comm, flops, rflops, wgrad, unpaired = (x / copies for x in (fwd, bwd, rec, comm, flops, rflops, wgrad, unpaired))
            by_group = {g: [t / copies, e / copies] for g, (t, e) in by_group.items()}
        # Stages holding the same layers (the middle stages of a pipeline) count them once.
        composition = tuple(sorted(held.items()))
        cached = stage_weight_seconds(held, costs, works, rates, weight_cast_cache) / copies  # once a step (stage_weights)
        found = stage_cache.get(composition)
        if found is None:
            found = stage_cache[composition] = _stage_elements(held, costs, names, parallel, elements_cache,
                                                               foreach_form(run.optimizer, timing.optimizer_foreach), step_precision)
        dense, experts, dense_load, expert_load = found
        # Parameters a recipe gathers in its weights' format (docs/precision.md): the quantized GEMM weights.
        q_dense = q_experts = 0
        if recipe.low_precision and recipe.param_gather != "none":
            q_dense, q_experts = stage_quantized_elements(held, costs, quantized_cache)
        if zero >= 3:
            # FSDP: each layer's parameters gathered forward and again backward, its gradients reduce-scattered,
            # every micro-batch; what the schedule's streams hide behind the neighbouring layers' compute is not exposed.
            # A recipe gathering quantized weights scales each layer's gathered bytes as it does the stage's.
            owners = frozenset(names[g] for g in held)
            shares = [gathered_param_bytes(n, q, recipe, gather_bytes) / (n * gather_bytes) if n else 1.0
                      for n, q in ((dense, q_dense), (experts, q_experts))]
            per_layer, replicated = [], []
            for t, group in zip(ordered, ordered_groups):
                d, e = layer_elements(group, owners)
                gather = (links.seconds("dp", "all_gather", d * gather_bytes * shares[0])
                          + links.seconds("edp", "all_gather", e * gather_bytes * shares[1]))
                reduce = (links.seconds("dp", "reduce_scatter", d * reduce_bytes)
                          + links.seconds("edp", "reduce_scatter", e * reduce_bytes))
                per_layer.append((gather, reduce, t.forward_seconds / rates.slowdown,
                                  (t.backward_seconds + t.recompute_seconds) / rates.slowdown))
                if replicate > 1:
                    # HSDP: the reduce-scatter's output (the layer's gradient shard, in the reduce dtype) all-reduced
                    # across the replicate group once it is done (torch 2.13 foreach_reduce: on all_reduce_stream,
                    # which waits for the reduce-scatter stream).
                    replicated.append(links.seconds("hsdp", "all_reduce", d * reduce_bytes / dense_group)
                                      + links.seconds("ehsdp", "all_reduce", e * reduce_bytes / expert_group))

            def streams(layers: list) -> tuple[float, float]:
                total, exposed = fsdp_layers(layers, reshard=parallel.reshard_after_forward, prefetch=sched.fsdp_prefetch,
                                             reduce_overlap=sched.fsdp_reduce_scatter_overlap)
                return total * rates.slowdown, exposed * (1 - ov.data_parallel.value) * rates.slowdown

            if step_reduce:  # fsdp_pipeline.stage_fsdp: single-stage schedules (order None) or the rank's order
                priced_fsdp = stage_fsdp(per_layer, replicated, [g in body_groups for g in ordered_groups], chunk_sizes,
                                         order, reshard=parallel.reshard_after_forward, prefetch=sched.fsdp_prefetch,
                                         keep=(1 - ov.data_parallel.value) * rates.slowdown, slowdown=rates.slowdown,
                                         micro_batches=micro_batches)
                by_group.update(priced_fsdp.groups)
                comm, head, dp, first = comm + priced_fsdp.comm, priced_fsdp.head, priced_fsdp.dp, priced_fsdp.first
            else:
                total, exposed = streams(per_layer)
                by_group["fsdp"] = [total, exposed]
                if replicated:
                    # Serialised behind its reduce-scatter, a conservative reading: torch runs it on its own stream,
                    # which the next unit's reduce-scatter does not wait for, so where the shard and replicate groups
                    # use different links the two could overlap. What it adds to the exposed time is its share
                    # (docs/time.md, "Overlap and host time").
                    both = streams([(g, r + a, f, b) for (g, r, f, b), a in zip(per_layer, replicated)])
                    by_group["hsdp"] = [both[0] - total, both[1] - exposed]
                    exposed = both[1]
                comm += exposed
                dp = 0.0
        else:
            reduce = gather = 0.0
            for n, q, group in ((dense, q_dense, "dp"), (experts, q_experts, "edp")):
                if zero == 0:
                    reduce += links.seconds(group, "all_reduce", n * reduce_bytes)
                else:
                    reduce += links.seconds(group, "reduce_scatter", n * reduce_bytes)
                    # Megatron-LM --fp8-param-gather gathers the parameters in FP8 ("stored"), MXFP8 ones through the
                    # gradient buffer in its dtype ("gradient_buffer"): precision.optimizer_gather_bytes.
                    gather += links.seconds(group, "all_gather", optimizer_gather_bytes(n, q, recipe, param_bytes, reduce_bytes))
            bucket = sched.bucket(dense_group)
            reduce_bucket = links.seconds("dp", "all_reduce" if zero == 0 else "reduce_scatter", min(bucket, dense + experts) * reduce_bytes)
            last = optimizer_gather_bytes(min(bucket, dense + experts), 0, recipe, param_bytes, reduce_bytes)  # none quantized
            gather_bucket = links.seconds("dp", "all_gather", last) if zero else 0.0
            exposed = (bucketed(reduce, reduce_bucket, (bwd + rec) / rates.slowdown, sched.overlap_grad_reduce)
                       + bucketed(gather, gather_bucket, fwd / rates.slowdown, sched.overlap_param_gather))
            dp = exposed * (1 - ov.data_parallel.value) * rates.slowdown
            by_group["dp"] = [(reduce + gather) * rates.slowdown, dp]
        if zero >= 1 and (dense_load.gather_bytes or expert_load.gather_bytes):
            # States the optimizer needs whole, gathered over the group ZeRO shards them over once
            # per step, in the optimizer step: nothing left to overlap it with.
            gather = 0.0
            for nbytes, group in ((dense_load.gather_bytes, "dp"), (expert_load.gather_bytes, "edp")):
                if nbytes:
                    gather += links.seconds(group, "all_gather", nbytes)
            dp += gather * rates.slowdown
        sync = schedule.gradient_sync
        if sync is not None and parallel.pp > 1:
            # The schedule's collective over each rank's whole gradient once per step, after the pipeline and
            # before the data-parallel reduction (DualPipe: the two model copies' gradients summed, Schedule.gradient_sync).
            mirror = links.subgroup_seconds("pp", sync.op, sync.ranks, (dense + experts) * grad_bytes) * rates.slowdown
            dp += mirror
            by_group["mirror"] = [mirror, mirror]
        # Megatron-Core scales the dense and the expert gradient buffers alike by 1/(dp*cp)
        # before the reduction (distributed_data_parallel.py: expert_gradient_scaling_factor
        # = 1 / dp_cp size), whatever the expert data-parallel group's size.
        reduced = (dense + experts) * (parallel.dp * parallel.cp > 1)
        buffer_passes = timing.grad_buffer_passes.value * (dense + experts) + timing.grad_scale_passes.value * reduced
        # A narrower buffer is copied into the main gradients first: its read and their write, per shard element.
        copy = grad_bytes + main_grad_bytes if main_grad_bytes != grad_bytes else 0
        moved = shard_update_bytes(dense_load, expert_load, dense_group, expert_group, zero, grad_passes, main_grad_bytes, copy)
        opt = (moved + buffer_passes * grad_bytes) / memory * rates.slowdown + (cached if in_step else 0.0)
        matmul = dense_load.matmul_flops + expert_load.matmul_flops
        elementwise = dense_load.elementwise_flops + expert_load.elementwise_flops
        if matmul or elementwise:
            # What the optimizer computes beyond its update (Muon's Newton-Schulz products), on every rank.
            opt += (matmul / (peak * rates.matmul) + elementwise * rates.el_bytes_per_flop / memory) * rates.slowdown
        stages.append(StageTime(stage, fwd, bwd, rec, comm, fwd + bwd + rec + comm, dp, opt, flops,
                                tuple((g, t, e) for g, (t, e) in by_group.items())))
        recomputed_flops_per_stage.append(rflops)
        passes.append(StagePasses(stages[-1].micro_batch_seconds, wgrad, _forward_share(stages[-1])))
        heads.append((head, first))
        unpaired_per_stage.append(unpaired / len(run.stage_chunks(stage)))
        weights_per_stage.append(0.0 if in_step else cached)
        priced[key] = (attrs.astuple(stages[-1], recurse=False)[1:], rflops, passes[-1], heads[-1], unpaired_per_stage[-1],
                       weights_per_stage[-1])

    # Under FSDP x PP each stage's first forward gathers on the pipeline's fill: its exposed part delays it (bubble).
    pipe = pipeline_seconds(schedule, run.stage_inputs.layout, tuple(passes)) + sum(head for head, _ in heads)
    if multi_stage:
        pipe += fill_delay(stages, [first for _, first in heads])  # a multi-stage schedule's first gathers on the fill
    pipe += (lone := lone_seconds(schedule.name, parallel.pp, parallel.vpp, micro_batches, unpaired_per_stage))
    pipe += (weights := sum(weights_per_stage))  # each stage's in turn, on the first micro-batch's forward
    stages = with_tied_sync(stages, run, links, grad_bytes, rates.slowdown)  # a weight tied across stages (tied_weights)
    slow = max(stages, key=lambda s: s.micro_batch_seconds)
    own = weights_per_stage[slow.index]  # the slowest stage's own cast is compute, the others' delay it (bubble)
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
        "whole_run_matmul_factor": dev.matmul_whole_run_factor.value if dev.matmul_whole_run_factor else 1.0,
        "precision_recipe": recipe.name,
        "gemm_dtype": recipe.gemm_dtype, "gemm_speedup_forward": rates.gemm_speedup, "gemm_speedup_backward": rates.gemm_speedup_backward,
        "attention_format": recipe.attention_format,  # other than bf16: at the measured speedups (rates._attention_speedups)
        **fp8_attention_provenance(recipe, rates, works),
        "schedule": schedule.name, **({"ep_overlap_unpaired_seconds": lone} if lone else {}),
        **({"cached_weight_quantize_seconds": weights} if weights else {}),
        **({"gemm_rate_scale": hardware.gemm_rate_scale} if hardware.gemm_rate_scale else {}),
        **({"attention_rate_scale": hardware.attention_rate_scale} if hardware.attention_rate_scale else {}),
        **({"mla_attention_rate_scale": hardware.mla_attention_rate_scale} if hardware.mla_attention_rate_scale else {}),
        **({"large_gemm_speedup": hardware.large_gemm_speedup, "large_gemm_flops": hardware.large_gemm_flops}
           if hardware.large_gemm_speedup else {}),  # the machine's GEMMs against its family's figures (rates._gemm_table)
    }
    kept_kinds = compute_dtype_kinds(model, recipe, rt)  # run wholly at the compute dtype's rates (MTP under FP4)
    if kept_kinds:
        provenance["compute_dtype_kinds"] = kept_kinds
    if timing.fsdp1_units:
        # FSDP1's per-unit time (DeviceEfficiency.fsdp1_unit_seconds): per unit and micro-batch, the slowest stage's units
        # (its body layers; a mean over model copies), and what they add to the step's compute.
        units = sum(bounds[c][1] - bounds[c][0] for c in run.stage_chunks(slow.index)) / copies
        per_unit = rates.unit_fwd + rates.unit_bwd
        provenance.update(fsdp1_unit_seconds=per_unit, fsdp1_units=units, fsdp1_unit_step_seconds=m * units * per_unit)
    if defaulted:
        provenance["alternate_matmul_default"] = (
            f"{', '.join(sorted(defaulted))}: the order of the matmuls op-level SAC re-runs is not stated; priced at "
            f"{ALTERNATE_MATMUL_DEFAULT_FRACTION:g} of the layer's forward matmul FLOPs (docs/time.md)")
    # MFU as the field reports it (against the compute dtype's dense peak) and against the recipe's GEMM peak.
    recipe_peak = hardware.peak_flops.get(recipe.gemm_dtype, peak) if recipe.low_precision else peak
    bubble = pipe - m * slow.micro_batch_seconds - own
    bubble = 0.0 if abs(bubble) <= 1e-12 * pipe else bubble  # none but the subtraction's rounding (-4.8e-18 s seen)
    return StepTime(
        step_seconds=step,
        compute_seconds=m * (slow.forward_seconds + slow.backward_seconds) + own,
        recompute_seconds=m * slow.recompute_seconds,
        communication_seconds=m * slow.communication_seconds,
        bubble_seconds=bubble,
        data_parallel_seconds=tail.data_parallel_seconds,
        optimizer_seconds=tail.optimizer_seconds,
        micro_batches=m,
        tokens_per_second=tokens / step,
        model_flops=model_flops,
        mfu=model_flops / (step * world * peak),
        mfu_recipe_peak=model_flops / (step * world * recipe_peak),
        recipe_peak_flops_per_second=recipe_peak,
        hfu=hardware_flops / (step * world * peak),
        peak_flops_per_second=peak,
        stages=tuple(stages),
        provenance=provenance,
    )
