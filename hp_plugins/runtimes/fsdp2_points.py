"""What an FSDP2 training step holds at its peak points (``Runtime.peak_points`` of the ``fsdp2`` runtime).

The step (``loss = model(batch).loss; loss.backward(); opt.step();
opt.zero_grad(set_to_none=True)``) with ``fully_shard`` on every decoder
layer and on the root, which then holds the layers placed first and last (the
embedding, the final norm and the head), as PyTorch's
``torch.distributed.fsdp.fully_shard`` runs it (torch 2.13,
``_fully_shard/_fsdp_state.py``, ``_fsdp_param_group.py``) and its own memory
tracker (``torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker``) sees it
(recorded cases: ``tests/plugins/data/fsdp2_tracker_cases.json``):

* **always**: the fp32 sharded parameters and the AdamW states of the shard;
* **gathered parameters** (compute dtype, ``MixedPrecisionPolicy.param_dtype``):
  the root unit's, from its pre-forward to the end of backward (FSDP2 never
  reshards the root after forward, ``_lazy_init`` clears its
  ``post_forward_mesh_info``); the running layer's; and one all-gather output
  the size of a layer's gathered parameters, alive until the next all-gather
  is copied out (the next unit in execution order is prefetched: FSDP2 keeps
  the last all-gather's result in ``comm_ctx.all_gather_state``); in backward,
  below the topmost layer, the reduce-scatter input of the layer above (its
  whole gradient in fp32, the reduce dtype), held until the next unit's
  post-backward waits on it (``comm_ctx.reduce_scatter_state``). With
  ``reshard_after_forward: false`` every layer's gathered parameters stay from
  its forward to its backward; with ``reshard_last_layer`` False the last
  layer's do (torchtitan's ``apply_fsdp`` until July 2025), and above it in
  backward no all-gather output is alive (nothing is gathered for it); with
  ``embedding_unit`` own (torchtitan from July 2025) the embedding's are freed
  after its forward and gathered again after the lowest layer's backward;
* **gradients**: none in the forward of a step's only micro-batch
  (``zero_grad(set_to_none=True)`` freed them; with gradient accumulation the
  sharded fp32 gradients of the earlier micro-batches are held); in backward, the
  sharded gradients of the layers already reduce-scattered and the root's
  unsharded gradients in the compute dtype once its last layers' backward ran
  (the root reduce-scatters once, at the end of backward); all of them at the
  optimizer step;
* **activations**: what every layer keeps; at the **forward peak** (the loss)
  also the last layer's forward transients (``LayerCost.forward_working_bytes``:
  an upcast loss's logits in bf16 and fp32); in **backward**, walking the layers
  from the top, what the layers below keep and the running layer's working set,
  and the moments a body layer holds its whole unsharded gradients (its
  post-backward entry; a MoE layer's routed-expert FC1 weight-gradient GEMM:
  ``weight_grad_moments``), the largest of all binding;
* **the optimizer step**: the batch the loop holds (the input ids, on the
  first stage); ``foreach`` AdamW makes one fp32 temporary per
  element of the shard (``torch/optim/adamw.py`` ``_multi_tensor_adamw``:
  ``exp_avg_sq_sqrt``); the fused kernel none.

**Under PP** (``pp > 1``, torch 2.13 ``torch.distributed.pipelining``, its
single-stage schedules GPipe and 1F1B: ``check_fsdp_pipeline``): every
backward runs with gradient sync and resharding after backward off
(``pipelining/stage.py`` ``_PipelineStageBase.backward_maybe_with_nosync``) and
``perform_reduce_grad`` reduce-scatters each unit once after the stage's last
backward. So each layer's unsharded gradient accumulates in the reduce dtype
(``_fsdp_param.py`` ``FSDPParam.to_accumulated_grad_if_needed``,
``accumulate_unsharded_grad_if_needed``), alive at every point after the layer's
first backward; a backward leaves every layer whole, a forward its share, and
an all-gather (with its output buffer) runs only where a layer is not whole; a
backward right after a backward (GPipe's later ones, 1F1B's cooldown) starts
with every layer whole; no sharded gradient or reduce-scatter input is held
before the reduction; and a ``reduce`` point prices ``perform_reduce_grad``
itself (``fsdp2_pipeline.pipelined_points``; docs/runtimes.md, ``fsdp2``). Under interleaved 1F1B (``vpp > 1``,
torch's multi-stage runtime, without ``reshard_after_forward``) the same points are walked through the rank's order
with the UNSHARD, RESHARD and REDUCE_GRAD actions torch inserts in it (``fsdp2_pipeline.multi_stage_points``).

The points it returns: ``forward`` (at the loss; under PP with
``reshard_after_forward`` also at each layer's forward after a backward),
``backward`` (the largest over the walk, under PP over the walks), ``optimizer``
and, under PP, ``reduce``; they replace the planner's defaults.
"""

from __future__ import annotations

import attrs

from hp_core.engine.layout_checks import PipelineTraitError
from hp_core.errors import ConfigError
from hp_core.peak_points import StageView
from hp_core.results import MemoryBreakdown
from hp_core.specs.overlap import check_fsdp_pipeline, check_fsdp_replicate
from hp_plugins.runtimes.fsdp2_layers import all_reduce_output_bytes, weight_grad_moments
from hp_plugins.runtimes.fsdp2_pipeline import multi_stage_points, pipelined_points
from hp_plugins.runtimes.fsdp2_pools import best_fit_reserved_bytes, loss_hole_bytes, stream_pool_bytes
from hp_plugins.runtimes.fsdp2_pools import gathered_bytes as _gathered
from hp_plugins.runtimes.fsdp2_pools import sharded_bytes as _sharded
from hp_plugins.runtimes.fsdp2_reshard import check_reshard_to, shard_group
from hp_plugins.runtimes.fsdp2_reshard import keep_share as _keep_share_of
from hp_plugins.runtimes.tp_plans import TP_PLANS

__all__ = ["Fsdp2Points", "best_fit_reserved_bytes", "loss_hole_bytes", "stream_pool_bytes"]

# The options that only shape fully_shard's units: below parallel.zero 3 the runtime prices the planner's default
# points and no stream pool (Fsdp2Points._points, cached_bytes) and the step time reads fsdp_prefetch and
# fsdp_reduce_scatter_overlap only at zero 3 (hp_core/engine/timing/step.py: the zero >= 3 branch; below it the
# data-parallel reduction in buckets), so each changes no figure there and a stated value other than its default is
# refused. Per option: (Fsdp2Points field, its default, the option, what the value means, why it is inert, what to do).
_DEFAULT_POINTS = "the memory is the planner's default points (no fully_shard unit), which it does not enter"
_ZERO_3_ONLY = (
    ("prefetch", True, "fsdp_prefetch", "false (each layer's parameter all-gather exposed, not prefetched during the "
     "previous layer's compute)", "no layer gathers its parameters before its forward", "use true"),
    ("reduce_scatter_overlap", True, "fsdp_reduce_scatter_overlap", "false (each layer's gradient reduce-scatter "
     "exposed, not overlapped with the next layer's backward)", "no layer reduce-scatters its own gradients (the "
     "data-parallel reduction is priced in buckets)", "use true"),
    ("set_to_none", True, "zero_grad_set_to_none", "false (the sharded gradients held through a step's forward)",
     _DEFAULT_POINTS, "use true"),
    ("cpu_offload", False, "cpu_offload", "true (sharded parameters, gradients and optimizer states in host memory)",
     _DEFAULT_POINTS, "use false"),
    ("reshard_to", 0, "reshard_after_forward_to", "{value} (each layer's parameters kept sharded over {value} ranks "
     "from its forward to its backward)", "no parameter is gathered", "use 0"),
    ("reshard_last_layer", True, "reshard_last_layer_after_forward", "false (the last decoder layer kept gathered "
     "from its forward to its backward)", "no parameter is gathered", "use true"),
    ("embedding_unit", "root", "embedding_unit", "own (the embedding an FSDP unit of its own, resharded after forward)",
     "no parameter is gathered", "use root"),
)


@attrs.frozen
class Fsdp2Points:
    """The fsdp2 runtime's peak points (module docstring); picklable and equal by value.

    Attributes:
        set_to_none: ``zero_grad(set_to_none=True)``: no gradient is held in a
            step's first forward (False: the sharded gradients always are).
        foreach_optimizer: AdamW's ``foreach`` implementation (one fp32
            temporary per element of the shard at the step); False: ``fused``.
        replicate: HSDP (``fully_shard`` over a 2-D ``(replicate, shard)``
            mesh): parameters, gradients and optimizer states are sharded over
            the data-parallel degree divided by this, and replicated this many
            times (``torch.distributed.fsdp.fully_shard`` with a 2-D mesh).
        cpu_offload: ``offload_policy=CPUOffloadPolicy()``: the sharded
            parameters, their gradients and the optimizer states live in host
            memory; the device holds the gathered copies only (FSDP2
            ``_fsdp_api.py`` ``CPUOffloadPolicy``).
        reshard_to: ``fully_shard(reshard_after_forward=n)``: after forward a
            layer keeps its parameters in the compute dtype sharded over ``n``
            ranks (``n`` dividing the shard group) until its backward gathers
            them again; 0: ``parallel.reshard_after_forward`` says (True: all
            freed, False: all kept); ``n`` equal to the shard group reshards
            fully, torch's True (:mod:`hp_plugins.runtimes.fsdp2_reshard`).
        tp_plan: The named TP plan (``tp_plan`` option,
            :mod:`hp_plugins.runtimes.tp_plans`): under TP, ``parallel.sp`` must be
            what it runs; ``custom``: any.
        reshard_last_layer: False: the last decoder layer is wrapped with
            ``fully_shard(reshard_after_forward=False)`` while the others reshard
            (torchtitan's ``apply_fsdp`` from c22d1a8, April 2024, to 83e6941, July
            2025: "do not reshard after forward for the last transformer block
            since FSDP would prefetch it immediately"): its gathered parameters stay
            from its forward to the end of its backward, which gathers nothing for
            it (``FSDPParamGroup.unshard`` returns on gathered parameters), so above
            it in backward (the head's and the loss's) no all-gather output is
            alive; True: it reshards as the others (``parallel.reshard_after_forward``
            and ``reshard_to`` say). Refused under PP (torchtitan then reshards no layer).
        embedding_unit: ``root``: the layers placed first (the embedding) are in the root unit, gathered from its
            pre-forward to the end of backward; ``own``: ``fully_shard(model.tok_embeddings,
            reshard_after_forward=...)``, a unit of its own with the layers' reshard rule, as torchtitan wraps it
            from pytorch/torchtitan@83e6941 (2025-07-28; ``torchtitan/distributed/fsdp.py`` ``apply_fsdp_to_decoder``
            lines 191-196 at bcc09297a). At ``pp`` 1 with ``reshard_after_forward`` its gathered parameters are freed
            after its forward (torch cf30153 ``_fsdp_param_group.py`` ``FSDPParamGroup.post_forward``, lines
            557-566: ``reshard()``; only the root's ``post_forward_mesh_info`` is cleared, ``_fsdp_state.py``
            ``_lazy_init``), so no point above it holds them; its backward gathers them again, prefetched during the
            lowest body layer's backward (``FSDPParamGroup.pre_backward`` then ``_backward_prefetch``, lines 576-585
            and 795ff: the unit before it in ``post_forward_order``; with EP torchtitan sets it explicitly,
            ``set_modules_to_backward_prefetch([model.tok_embeddings])``), whose point then holds the embedding's
            all-gather output in place of a layer's. Without resharding (``pp > 1``, or a stated ``false``) it stays
            gathered as in the root: priced as ``root``. Refused beside ``reshard_to`` below the shard group and a
            last layer kept gathered (torchtitan never ran either with it), and below ``zero`` 3, where no parameter
            is gathered and it would change nothing.
        prefetch: The ``fsdp_prefetch`` option, as the timing profile's schedule states it (the points do not
            depend on it): kept here so that a stated ``false`` where no layer is gathered is refused
            (:data:`_ZERO_3_ONLY`; under interleaved 1F1B, :meth:`_refuse_inert_in_pipeline`).
        reduce_scatter_overlap: The ``fsdp_reduce_scatter_overlap`` option, likewise (refused below ``zero`` 3 and
            under PP, where every unit reduce-scatters once after the stage's last backward).
    """

    set_to_none: bool = True
    foreach_optimizer: bool = True
    replicate: int = 1
    cpu_offload: bool = False
    reshard_to: int = 0
    tp_plan: str = "custom"
    reshard_last_layer: bool = True
    embedding_unit: str = "root"
    prefetch: bool = True
    reduce_scatter_overlap: bool = True

    def __call__(self, view: StageView) -> dict[str, MemoryBreakdown]:
        return dict(self._walked(view)[0])

    def _walked(self, view: StageView) -> tuple[dict[str, MemoryBreakdown], dict[str, int]]:
        """The points of *view* and, under a multi-stage schedule, the sharded gradients its ``forward`` and
        ``backward`` points hold (:meth:`_points`' *sharded_held*), walked once per view: kept in
        :attr:`StageView.memo` under this object, where :meth:`cached_bytes` finds them."""
        found = view.memo.get(self)
        if found is None:
            sharded_held: dict[str, int] = {}
            found = view.memo[self] = (self._points(view, sharded_held), sharded_held)
        return found

    def _points(self, view: StageView, sharded_held: dict[str, int] | None = None) -> dict[str, MemoryBreakdown]:
        """The points (``__call__``); under a multi-stage schedule *sharded_held*, where given, is filled with the
        sharded gradients the ``forward`` and ``backward`` points hold (:func:`multi_stage_points`)."""
        plan = TP_PLANS.get(self.tp_plan)
        if plan is not None and view.parallel.tp > 1 and view.parallel.sp != plan.sequence_parallel:
            raise ConfigError("$.parallel.sp", f"the TP plan {plan.name} runs {'' if plan.sequence_parallel else 'no '}"
                                               f"sequence parallelism: set sp: {str(plan.sequence_parallel).lower()}")
        p = view.parallel
        pipelined = p.pp > 1  # torch.distributed.pipelining runs each stage (module docstring, "Under PP")
        if self.replicate > 1:
            check_fsdp_replicate(self.replicate, view.zero, p, pipeline_step_reduce=True)
        if view.zero < 3:
            # Below zero 3 no unit gathers, reshards or reduce-scatters anything (the default points, no stream pools;
            # the step time prices the FSDP overlaps only at zero 3): an option that only shapes fully_shard's units
            # changes no figure, so a stated value other than its default is refused rather than ignored.
            for field, default, option, meaning, why, fix in _ZERO_3_ONLY:
                value = getattr(self, field)
                if value != default:
                    raise ConfigError(f"$.runtime.options.{option}",
                                      f"{meaning.format(value=value)} needs parallel.zero 3, got zero {view.zero}: "
                                      f"below it {why}, so it changes nothing; {fix}")
            return dict(view.default_points)
        check_fsdp_pipeline(view.zero, p)  # a single-stage schedule, or interleaved 1F1B without reshard_after_forward
        params, all_grads, master, states = view.static
        sharded = sum(_sharded(view, layer, view.precision.param_bytes, self.replicate) for layer in view.layers)
        if sharded != params and params:
            # HSDP, or routed experts on FSDP2's own mesh: the shard the planner priced, rescaled (exact for an
            # optimizer that keeps the same bytes per element of every group, AdamW's two moments).
            all_grads = sum(_sharded(view, layer, view.precision.grad_bytes, self.replicate) for layer in view.layers)
            states, master = states * sharded // params, master * sharded // params
            params = sharded
        if self.cpu_offload:
            params = all_grads = master = states = 0
        layers = view.layers
        body = [layer for layer in layers if layer.placement == "body"]
        root_gathered = sum(_gathered(view, layer) for layer in layers if layer.placement != "body")
        # The embedding in a unit of its own, freed after its forward (embedding_unit own): out of the root's bytes
        # at every point above it; its backward gathers it again (the lowest body layer prefetches it).
        embedding_bytes = self._own_embedding_bytes(view)
        root_gathered -= embedding_bytes
        all_gather = max((_gathered(view, layer) for layer in body), default=0)
        kept = [layer.kept_bytes * max(layer.in_flight, 1) for layer in layers]
        # Sharded gradients in a step's forward and backward: kept by zero_grad(set_to_none=False), or from the
        # earlier micro-batches' reduce-scatters; under PP nothing is reduce-scattered before the step's end.
        held_grads = all_grads if (not self.set_to_none or (view.micro_batches > 1 and not pipelined)) else 0

        def point(grads: int, buffers: int, activations: int, working: int) -> MemoryBreakdown:
            return MemoryBreakdown(parameters_bytes=params, gradients_bytes=grads, master_parameters_bytes=master,
                                   optimizer_states_bytes=states, activations_bytes=activations,
                                   communication_buffers_bytes=buffers, working_set_bytes=working,
                                   runtime_overhead_bytes=view.overhead_bytes)

        # Without resharding after forward, every layer's gathered parameters stay until its backward is over;
        # resharding to n ranks, an n-th of them.
        keep_share = self._keep_share(view)
        check_reshard_to(view, self.reshard_to, self.replicate)
        # The training loop still holds its batch (the input ids the embedding keeps; the loss shifts the same tensor
        # for its labels) while the optimizer steps: measured, the tracker's Inputs at the step (8 bytes per token).
        batch = sum(layer.kept_bytes for layer in layers if layer.placement == "first")
        temporary = params // view.precision.param_bytes * 4 if self.foreach_optimizer else 0
        if pipelined:
            if not self.reshard_last_layer:
                raise ConfigError("$.runtime.options.reshard_last_layer_after_forward",
                                  "false is not priced under pp > 1 (torchtitan then reshards no layer after forward)")
            self._refuse_inert_in_pipeline(p)
            if view.order is not None and p.dp * p.cp > 1:
                points = multi_stage_points(view, point, held_grads, batch, replicate=self.replicate,
                                            cpu_offload=self.cpu_offload, sharded_held=sharded_held)
            else:
                points = pipelined_points(view, point, keep_share, held_grads, root_gathered, all_gather, batch,
                                          replicate=self.replicate, cpu_offload=self.cpu_offload)
            points["optimizer"] = point(all_grads, 0, batch, temporary)
            return points
        if not self.reshard_last_layer and not p.reshard_after_forward:
            # Every layer keeps its gathered parameters to its backward already (keep_share 1: _kept_last 0, and the
            # all-gather pool regathers nothing): the last one kept so too changes no figure.
            raise ConfigError("$.runtime.options.reshard_last_layer_after_forward",
                              "false (the last decoder layer kept gathered from its forward to its backward) changes "
                              "nothing where no layer reshards after forward (parallel.reshard_after_forward false): "
                              "every layer is kept gathered so; use true, or state parallel.reshard_after_forward: true")
        stay = sum(_gathered(view, layer) for layer in body) // keep_share if keep_share else 0
        kept_last = self._kept_last(view, keep_share)
        points = {"forward": point(held_grads, root_gathered + all_gather + stay + kept_last, sum(kept),
                                   layers[-1].forward_working_bytes)}

        # Backward, from the top: the layers above the running one have freed what they kept and
        # reduce-scattered their gradients (a body layer) or left them unsharded in the root (the rest).
        # The last body layer's reduce-scatter input (its whole gradient in the reduce dtype: fp32, or
        # precision.reduce_bytes with reduce_dtype bf16; foreach_reduce allocates it in reduce_dtype) stays until the
        # next unit's post-backward waits on it (FSDP2 comm_ctx.reduce_scatter_state, _fsdp_param_group.post_backward).
        freed = finished = root_grads = reducing = held_all_reduce = 0
        best: MemoryBreakdown | None = None
        best_in_flight = 0  # the all-gather output the best backward point holds (cached_bytes, embedding_unit own)
        above_last = bool(kept_last)  # above a last body layer kept gathered: it stays, nothing is prefetched
        for index, layer, its_kept in zip(reversed(range(len(layers))), reversed(layers), reversed(kept)):
            body_layer = layer.placement == "body"
            above_last = above_last and not body_layer
            running = _gathered(view, layer) - (_gathered(view, layer) // keep_share if keep_share else 0) if body_layer else 0
            gathered = stay + running + (kept_last if above_last else 0)
            grads = held_grads if held_grads else finished + root_grads
            lowest_body = body_layer and not any(other.placement == "body" for other in layers[:index])
            in_flight = all_gather
            if embedding_bytes and lowest_body:
                in_flight = embedding_bytes  # the embedding's all-gather output, prefetched in this layer's backward
            elif embedding_bytes and layer.placement == "first":
                gathered, in_flight = embedding_bytes, 0  # its own gathered parameters; nothing is left to prefetch
            candidate = point(grads, root_gathered + gathered + (0 if above_last else in_flight) + reducing
                              + held_all_reduce, sum(kept) - freed, layer.backward_working_bytes)
            if best is None or candidate.peak_bytes > best.peak_bytes:
                best, best_in_flight = candidate, (0 if above_last else in_flight)
            if body_layer and not held_grads:
                # The moments holding the running layer's whole unsharded gradients (weight_grad_moments). The tracker
                # files unsharded gradients, the root's too, as temporaries until their unit's post-backward
                # (fsdp2_mem_tracker.py _fsdp_param_group_post_backward): here they are working set.
                # The lowest body layer prefetches nothing (the root's parameters stay gathered): no all-gather output;
                # with the embedding in a unit of its own, the embedding's.
                below = sum(kept) - freed - its_kept
                prefetched = embedding_bytes if lowest_body else all_gather
                for alive, working in weight_grad_moments(view, layer):
                    moment = point(finished, root_gathered + gathered + prefetched + reducing + held_all_reduce,
                                   below + min(alive, its_kept), max(alive - its_kept, 0) + working + root_grads)
                    if moment.peak_bytes > best.peak_bytes:
                        best, best_in_flight = moment, prefetched
            freed += its_kept
            if body_layer:
                reducing = sum(layer.elements.values()) * view.precision.reduction_bytes
                if self.replicate > 1 and view.precision.reduction_bytes != view.precision.grad_bytes:
                    held_all_reduce += all_reduce_output_bytes(view, layer, self.replicate)
                finished += 0 if self.cpu_offload else _sharded(view, layer, view.precision.grad_bytes, self.replicate)
                stay -= _gathered(view, layer) // keep_share if keep_share else 0
            else:
                root_grads += _gathered(view, layer)
        if best is not None:
            points["backward"] = best
            if embedding_bytes:
                view.memo[(self, "backward_in_flight")] = best_in_flight
        points["optimizer"] = point(all_grads, 0, batch, temporary)
        return points

    def _refuse_inert_in_pipeline(self, p) -> None:
        """Refuse, under PP (``pp > 1``, zero 3), an overlap option the step time does not read there (one line at
        its ``$.runtime.options`` field). ``fsdp_reduce_scatter_overlap: false``: torch's pipelining reduce-scatters
        every unit once after the stage's last backward (``pipelining/stage.py`` ``perform_reduce_grad``), which
        ``hp_core.engine.timing.fsdp_pipeline.stage_fsdp`` prices exposed whole either way. ``fsdp_prefetch: false``
        under interleaved 1F1B (``vpp > 1``): the multi-stage runtime gathers whole chunks where its UNSHARD actions
        put them (``fsdp_multi_stage`` takes no prefetch; a backward's per-layer regather, the only pass that does, needs
        ``reshard_after_forward``, which ``check_fsdp_pipeline`` refuses there)."""
        # PipelineTraitError: a search counts the pp > 1 layouts it refuses under their own reason (R_PIPELINE_TRAIT).
        if not self.reduce_scatter_overlap:
            raise PipelineTraitError("$.runtime.options.fsdp_reduce_scatter_overlap",
                                     f"false (each layer's gradient reduce-scatter exposed, not overlapped with the "
                                     f"next layer's backward) changes nothing under pp > 1 (pp {p.pp}): torch's "
                                     f"pipelining reduce-scatters every unit once after the stage's last backward "
                                     f"(perform_reduce_grad), exposed whole either way; use true")
        if not self.prefetch and p.vpp > 1:
            raise PipelineTraitError("$.runtime.options.fsdp_prefetch",
                                     f"false (each layer's parameter all-gather exposed, not prefetched during the "
                                     f"previous layer's compute) changes nothing under interleaved 1F1B (vpp {p.vpp}): "
                                     f"torch's multi-stage runtime gathers whole chunks where its UNSHARD actions put "
                                     f"them, not layer by layer; use true")

    def _own_embedding_bytes(self, view: StageView) -> int:
        """The gathered parameters of the layers placed first where they form a unit of their own that reshards after
        forward (``embedding_unit`` own, ``pp`` 1, ``reshard_after_forward``); 0 where they stay gathered as in the
        root (``root``; ``own`` without resharding, which keeps them so)."""
        if self.embedding_unit == "root":
            return 0
        to_fewer = 1 < self.reshard_to != shard_group(view, self.replicate)  # the whole group: torch's True
        if to_fewer or not self.reshard_last_layer:
            option = "reshard_after_forward_to" if to_fewer else "reshard_last_layer_after_forward"
            raise ConfigError(f"$.runtime.options.{option}",
                              "embedding_unit own is torchtitan's wrapping from 83e6941 on, which resharded every "
                              "layer after forward as a bool: not priced beside it (use embedding_unit root)")
        p = view.parallel
        if p.pp > 1 and p.reshard_after_forward:
            raise ConfigError("$.runtime.options.embedding_unit",
                              "own with reshard_after_forward under pp > 1 is not priced (torchtitan's default "
                              "there reshards nothing); use root")
        if p.pp > 1 or not p.reshard_after_forward:
            return 0
        return sum(_gathered(view, layer) for layer in view.layers if layer.placement == "first")

    def _kept_last(self, view: StageView, keep_share: int) -> int:
        """What the last body layer keeps gathered after its forward beyond the share the others keep
        (``reshard_last_layer`` False; 0 where every layer keeps all of it or it reshards)."""
        body = [layer for layer in view.layers if layer.placement == "body"]
        if self.reshard_last_layer or not body or keep_share == 1:
            return 0
        whole = _gathered(view, body[-1])
        return whole - (whole // keep_share if keep_share else 0)

    def _keep_share(self, view: StageView) -> int:
        """What a layer keeps gathered after forward: 0 none, 1 all, ``n`` an n-th (``__call__``'s ``keep_share``;
        the whole shard group is 0, torch's ``True``: :func:`~hp_plugins.runtimes.fsdp2_reshard.keep_share`)."""
        return _keep_share_of(view, self.reshard_to, self.replicate)

    def cached_bytes(self, view: StageView, name: str, point: MemoryBreakdown) -> int:
        """What FSDP2's stream pools (:func:`stream_pool_bytes`) keep reserved beside the binding point *name* and
        not allocated there (``StageEstimate.cached_bytes``): the reduce-scatter pool less the gradients the point
        holds (a step's forward and backward after ``zero_grad(set_to_none=True)``: the previous step's sharded
        gradients, freed into that pool), the all-gather pool less the one all-gather output a forward or backward
        point holds (none at the optimizer step, nor in backward above a last body layer kept gathered,
        ``reshard_last_layer``); and where the point is the backward of an upcast loss
        (:func:`loss_hole_bytes`), the block of the logits in the compute dtype, free and too small for it."""
        if view.zero < 3:
            return 0
        reduce_pool, gather_pool = stream_pool_bytes(view, self)
        body = [_gathered(view, layer) for layer in view.layers if layer.placement == "body"]
        in_flight = max(body, default=0) if name in ("forward", "backward") else 0
        if name == "backward" and self._above_kept_last(view, point):
            in_flight = 0
        if name == "backward" and self._own_embedding_bytes(view):
            # The walk's own record: at the lowest layer the embedding's output in flight, at the embedding's backward
            # none (embedding_unit own).
            points, _ = self._walked(view)
            if points.get(name) == point:
                in_flight = view.memo.get((self, "backward_in_flight"), in_flight)
        last = view.layers[-1]
        hole = loss_hole_bytes(view) if name == "backward" and point.working_set_bytes == last.backward_working_bytes else 0
        return max(reduce_pool - self._sharded_grads_held(view, name, point), 0) + max(gather_pool - in_flight, 0) + hole

    def _above_kept_last(self, view: StageView, point: MemoryBreakdown) -> bool:
        """Whether the backward *point* is one of the walk's above a last body layer kept gathered
        (``reshard_last_layer`` False, not under PP): its buffers are the root's and that layer's gathered parameters
        alone (no all-gather output, reduce-scatter input or all-reduce output yet) and its working set a layer's
        above it."""
        if view.parallel.pp > 1:
            return False
        kept_last = self._kept_last(view, self._keep_share(view))
        placements = [layer.placement for layer in view.layers]
        if not kept_last or "body" not in placements:
            return False
        top = view.layers[len(placements) - placements[::-1].index("body"):]
        root_gathered = sum(_gathered(view, layer) for layer in view.layers if layer.placement != "body")
        stay = sum(_gathered(view, layer) for layer in view.layers if layer.placement == "body")
        keep_share = self._keep_share(view)
        stay = stay // keep_share if keep_share else 0
        return (point.communication_buffers_bytes == root_gathered + stay + kept_last
                and any(point.working_set_bytes == layer.backward_working_bytes for layer in top))

    def _sharded_grads_held(self, view: StageView, name: str, point: MemoryBreakdown) -> int:
        """The sharded gradients *point* holds (in the reduce-scatter pool). A backward point of the plain walk holds
        the sharded gradients of the body layers above the running one and, in its gradients, the root's unsharded
        ones in the compute dtype (default stream): the walk position is the one whose sum is the point's. Under
        a single-stage PP schedule nothing is reduce-scattered before the step's end; under a multi-stage one
        (``StageView.order``) the chunks whose ``REDUCE_GRAD`` ran before the point hold their sharded gradients
        there (:func:`multi_stage_points`, the walk's reduced shards); elsewhere (forward, optimizer, reduce) all
        the point's gradients are counted (an upper bound at ``reduce``, whose accumulators are unsharded)."""
        held = point.gradients_bytes
        if name not in ("forward", "backward"):
            return held
        p = view.parallel
        if p.pp > 1 and self.set_to_none and view.order is not None and p.dp * p.cp > 1:
            points, sharded_held = self._walked(view)  # the walk that found the points, not a second one
            return sharded_held.get(name, 0) if points.get(name) == point else 0
        if p.pp > 1:  # the points' gradients there are the unsharded accumulators, beside any kept ones
            kept = 0 if self.cpu_offload else sum(_sharded(view, layer, view.precision.grad_bytes, self.replicate)
                                                  for layer in view.layers)
            return 0 if self.set_to_none else min(held, kept)
        if name == "forward" or not self.set_to_none or view.micro_batches > 1:
            return held  # every sharded gradient kept (or none): the points hold exactly those
        finished = root = 0
        for layer in reversed(view.layers):
            if held in (finished, finished + root):
                return finished
            if layer.placement == "body":
                finished += 0 if self.cpu_offload else _sharded(view, layer, view.precision.grad_bytes, self.replicate)
            else:
                root += _gathered(view, layer)
        return min(held, finished)
