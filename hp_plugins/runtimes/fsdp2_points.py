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
  its forward to its backward;
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
  ``_weight_grad_moments``), the largest of all binding;
* **the optimizer step**: the batch the loop holds (the input ids, on the
  first stage); ``foreach`` AdamW makes one fp32 temporary per
  element of the shard (``torch/optim/adamw.py`` ``_multi_tensor_adamw``:
  ``exp_avg_sq_sqrt``); the fused kernel none.

The points it returns: ``forward`` (at the loss), ``backward`` (the largest
over the walk) and ``optimizer``; they replace the planner's defaults.
"""

from __future__ import annotations

import math

import attrs

from hp_core.errors import ConfigError
from hp_core.peak_points import StageLayer, StageView
from hp_core.results import MemoryBreakdown
from hp_core.specs.overlap import check_fsdp_replicate
from hp_plugins.runtimes.tp_plans import TP_PLANS

__all__ = ["Fsdp2Points"]


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


def _weight_grad_moments(view: StageView, layer: StageLayer) -> list[tuple[int, int]]:
    """``(what the running layer's activations hold, working set)`` at the moments of a body layer's backward that
    hold its whole weight gradients, unsharded in the compute dtype (FSDP2 computes them on the bf16 unsharded
    parameters and reduce-scatters them once, at the unit's post-backward).

    * At the unit's ``post_backward`` (``_fsdp_param_group.py`` ``FSDPParamGroup.post_backward``, before
      ``foreach_reduce`` copies them into the fp32 reduce-scatter input): all its gradients and the gradient of its
      input; what it kept is freed, its parameters still gathered, and the reduce-scatter input of the unit above
      still held (post_backward pops ``comm_ctx.reduce_scatter_states`` only after resharding).
    * A MoE layer (a ``dispatched_tokens`` term: the routed experts' FC1 input, :mod:`hp_plugins.kit.experts`), at
      its routed experts' FC1 weight-gradient GEMM, the last expert GEMM of its backward: every routed expert's
      gradient, beside what the layer's ops up to the dispatch keep (kept or recomputed, their backward still to
      run), the gradient the layer received, and that GEMM's output and input gradients (the FC1 output's and the
      dispatched tokens' sizes). Measured: FSDPMemTracker's temporaries at Qwen3-30B-A3B's peak (docs/runtimes.md).
    """
    act = view.precision.activation_bytes
    moments = [(0, sum(layer.elements.values()) * act + layer.input_bytes)]
    ops = [term.op for term in layer.terms]
    if "dispatched_tokens" in ops:
        upto = ops.index("dispatched_tokens") + 1
        alive = sum(term.bytes for term in layer.terms[:upto])
        flowing = layer.input_bytes + layer.terms[upto - 1].bytes + sum(
            term.bytes for term in layer.terms[upto:] if term.op in ("expert_gate_out", "expert_up_out"))
        moments.append((alive, layer.elements.get("routed_expert", 0) * act + flowing))
    return moments


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
            freed, False: all kept).
        tp_plan: The named TP plan (``tp_plan`` option,
            :mod:`hp_plugins.runtimes.tp_plans`): under TP, ``parallel.sp`` must be
            what it runs; ``custom``: any.
    """

    set_to_none: bool = True
    foreach_optimizer: bool = True
    replicate: int = 1
    cpu_offload: bool = False
    reshard_to: int = 0
    tp_plan: str = "custom"

    def __call__(self, view: StageView) -> dict[str, MemoryBreakdown]:
        plan = TP_PLANS.get(self.tp_plan)
        if plan is not None and view.parallel.tp > 1 and view.parallel.sp != plan.sequence_parallel:
            raise ConfigError("$.parallel.sp", f"the TP plan {plan.name} runs {'' if plan.sequence_parallel else 'no '}"
                                               f"sequence parallelism: set sp: {str(plan.sequence_parallel).lower()}")
        p = view.parallel
        if self.replicate > 1:
            check_fsdp_replicate(self.replicate, view.zero, p)
        if view.zero < 3:
            return dict(view.default_points)
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
        all_gather = max((_gathered(view, layer) for layer in body), default=0)
        reshard = view.parallel.reshard_after_forward
        kept = [layer.kept_bytes * max(layer.in_flight, 1) for layer in layers]
        held_grads = all_grads if (view.micro_batches > 1 or not self.set_to_none) else 0

        def point(grads: int, buffers: int, activations: int, working: int) -> MemoryBreakdown:
            return MemoryBreakdown(parameters_bytes=params, gradients_bytes=grads, master_parameters_bytes=master,
                                   optimizer_states_bytes=states, activations_bytes=activations,
                                   communication_buffers_bytes=buffers, working_set_bytes=working,
                                   runtime_overhead_bytes=view.overhead_bytes)

        # Without resharding after forward, every layer's gathered parameters stay until its backward is over;
        # resharding to n ranks, an n-th of them.
        keep_share = self.reshard_to if (reshard and self.reshard_to > 1) else (0 if reshard else 1)
        if keep_share > 1 and (p.dp * p.cp) % (keep_share * self.replicate):
            raise ConfigError("$.runtime.options.reshard_after_forward_to",
                              f"{keep_share} must divide the FSDP shard group of {p.dp * p.cp // self.replicate} ranks")
        stay = sum(_gathered(view, layer) for layer in body) // keep_share if keep_share else 0
        points = {"forward": point(held_grads, root_gathered + all_gather + stay, sum(kept), layers[-1].forward_working_bytes)}

        # Backward, from the top: the layers above the running one have freed what they kept and
        # reduce-scattered their gradients (a body layer) or left them unsharded in the root (the rest).
        # The last body layer's reduce-scatter input (its whole gradient in the reduce dtype: fp32, or
        # precision.reduce_bytes with reduce_dtype bf16; foreach_reduce allocates it in reduce_dtype) stays until the
        # next unit's post-backward waits on it (FSDP2 comm_ctx.reduce_scatter_state, _fsdp_param_group.post_backward).
        freed = finished = root_grads = reducing = held_all_reduce = 0
        best: MemoryBreakdown | None = None
        for index, layer, its_kept in zip(reversed(range(len(layers))), reversed(layers), reversed(kept)):
            body_layer = layer.placement == "body"
            running = _gathered(view, layer) - (_gathered(view, layer) // keep_share if keep_share else 0) if body_layer else 0
            gathered = stay + running
            grads = held_grads if held_grads else finished + root_grads
            candidate = point(grads, root_gathered + gathered + all_gather + reducing + held_all_reduce, sum(kept) - freed,
                              layer.backward_working_bytes)
            if best is None or candidate.peak_bytes > best.peak_bytes:
                best = candidate
            if body_layer and not held_grads:
                # The moments holding the running layer's whole unsharded gradients (_weight_grad_moments). The tracker
                # files unsharded gradients, the root's too, as temporaries until their unit's post-backward
                # (fsdp2_mem_tracker.py _fsdp_param_group_post_backward): here they are working set.
                # The lowest body layer prefetches nothing (the root's parameters stay gathered): no all-gather output.
                below = sum(kept) - freed - its_kept
                prefetched = all_gather if any(other.placement == "body" for other in layers[:index]) else 0
                for alive, working in _weight_grad_moments(view, layer):
                    moment = point(finished, root_gathered + gathered + prefetched + reducing + held_all_reduce,
                                   below + min(alive, its_kept), max(alive - its_kept, 0) + working + root_grads)
                    if moment.peak_bytes > best.peak_bytes:
                        best = moment
            freed += its_kept
            if body_layer:
                reducing = sum(layer.elements.values()) * view.precision.reduction_bytes
                if self.replicate > 1 and view.precision.reduction_bytes != view.precision.grad_bytes:
                    # HSDP: each unit's reduce-scatter output, all-reduced across the replicate group in the reduce
                    # dtype, stays allocated until the end of backward (torch 2.13 _fsdp_collectives.py foreach_reduce
                    # hands it to FSDPParamGroup._all_reduce_state, which only the same group's next post_backward or
                    # finalize_backward clears, so the caching allocator cannot hand the block to the next unit's
                    # reduce-scatter while its all-reduce runs); in the gradients' own dtype it is the sharded
                    # gradient itself (foreach_reduce views it out).
                    held_all_reduce += _sharded(view, layer, view.precision.reduction_bytes, self.replicate)
                finished += 0 if self.cpu_offload else _sharded(view, layer, view.precision.grad_bytes, self.replicate)
                stay -= _gathered(view, layer) // keep_share if keep_share else 0
            else:
                root_grads += _gathered(view, layer)
        if best is not None:
            points["backward"] = best
        temporary = params // view.precision.param_bytes * 4 if self.foreach_optimizer else 0
        # The training loop still holds its batch (the input ids the embedding keeps; the loss shifts the same tensor
        # for its labels) while the optimizer steps: measured, the tracker's Inputs at the step (8 bytes per token).
        batch = sum(layer.kept_bytes for layer in layers if layer.placement == "first")
        points["optimizer"] = point(all_grads, 0, batch, temporary)
        return points
