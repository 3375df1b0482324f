"""Runtime options that change how a step is timed, shared by the built-in runtimes: how elementwise ops run
(eager kernels or fused), which eager form the rotary embedding takes and whether it runs eager where the rest is
fused, which library runs the expert-parallel all-to-all (NCCL, DeepEP or HybridEP) and what the trainer replays
from CUDA graphs (the host floor's scope).

Each is a :class:`~hp_core.runtime_options.RuntimeOption` whose ``apply`` changes the runtime's timing
profile or its traits (docs/time.md, "Eager kernels, op-level SAC and DeepEP").
"""

from __future__ import annotations

import attrs

from hp_core.runtime_options import RuntimeOption, trait_chooser
from hp_core.specs.overlap import CUDA_GRAPH_SCOPES
from hp_core.specs.timing import Sourced
from hp_core.types import Runtime
from hp_plugins.runtimes.timing_profiles import EAGER_ACCESSES, FUSED_ACCESSES

__all__ = ["cuda_graphs_option", "ddp_bucket_size_option", "ep_all_to_all_option", "elementwise_kernels_option", "hybridep_num_sms_option",
           "optimizer_implementation_option",
           "rope_implementation_option", "rope_kernels_option"]

@attrs.frozen
class _Elementwise:
    """``elementwise_kernels``: sets the timing profile's ``elementwise_accesses_per_flop``."""

    def __call__(self, runtime: Runtime, value: str) -> Runtime:
        figure = EAGER_ACCESSES if value == "eager" else FUSED_ACCESSES
        return attrs.evolve(runtime, timing=attrs.evolve(runtime.timing, elementwise_accesses_per_flop=figure,
                                                         eager_elementwise=value == "eager"))


def elementwise_kernels_option(default: str, source: str) -> RuntimeOption:
    """``elementwise_kernels``: ``eager`` (one kernel per op) or ``fused`` (torch.compile, fused modules)."""
    return RuntimeOption(
        "elementwise_kernels", "choice", default,
        "eager: every elementwise op (norm steps, residual adds, activation, gate product, rotary embedding) its own "
        "kernel reading and writing HBM, accesses per counted op counted per layer from its widths (2.0 for Llama 3 8B's "
        "block; 1.92 where a layer counts none) (torchtitan without torch.compile); fused: each chain one kernel, "
        "0.5 (torch.compile's inductor fuses pointwise chains; Transformer Engine's or Liger's fused modules)",
        source, _Elementwise(), choices=("eager", "fused"),
    )


def rope_implementation_option(source: str) -> RuntimeOption:
    """``rope_implementation``: the eager form of the rotary embedding, ``complex`` (the default), ``rotate_half`` or
    ``chunk_cat``."""
    return RuntimeOption(
        "rope_implementation", "choice", "complex",
        "the rotary embedding's eager kernels (elementwise_kernels=eager or rope_kernels=eager; fused kernels read and "
        "write each rotated q/k element once each way whichever): complex (torchtitan's apply_rotary_emb, an fp32 "
        "complex multiply: 20 bytes per rotated element forward, 20 backward), rotate_half (transformers' "
        "apply_rotary_pos_emb: 20 forward, 30 backward: the slices' gradients are zero-filled and the three gradients "
        "of q and k added) or chunk_cat (NeMo AutoModel's _apply_rotary_emb: halves multiplied, added and "
        "concatenated back in bf16: 18 forward, 20 backward)",
        source, trait_chooser({"rotate_half": "rope_rotate_half", "chunk_cat": "rope_chunk_cat"}),
        choices=("complex", "rotate_half", "chunk_cat"),
    )


@attrs.frozen
class _RopeKernels:
    """``rope_kernels``: sets the timing profile's ``eager_rotary``."""

    def __call__(self, runtime: Runtime, value: str) -> Runtime:
        return attrs.evolve(runtime, timing=attrs.evolve(runtime.timing, eager_rotary=value == "eager"))


def rope_kernels_option(source: str) -> RuntimeOption:
    """``rope_kernels``: ``as_elementwise`` (the default: as elementwise_kernels says) or ``eager``."""
    return RuntimeOption(
        "rope_kernels", "choice", "as_elementwise",
        "how the rotary embedding runs: as_elementwise (eager or fused as elementwise_kernels says) or eager (its own "
        "eager kernels in rope_implementation's form, the bytes that form counts each way, even where "
        "elementwise_kernels=fused: a trainer whose norms and other elementwise ops are fused but whose model applies "
        "RoPE with eager PyTorch ops, as NeMo AutoModel's MoE models did before its rope_fusion)",
        source, _RopeKernels(), choices=("as_elementwise", "eager"),
    )


# The ep_all_to_all choices that name a collective model of their own (hp_plugins/collectives).
_LIBRARY_MODELS = ("deepep", "hybridep")


@attrs.frozen
class _AllToAll:
    """``ep_all_to_all``: ``deepep`` and ``hybridep`` name the collective model of that name; ``nccl`` (the
    default) keeps the collective model the timing profile states (a third party's, or the built-in NCCL one where
    it states none), and only drops ``deepep`` or ``hybridep`` where the profile named it.

    *library_permutation*: where the trainer permutes tokens otherwise under a library's dispatch, the passes that
    library's dispatcher makes (``None``: the profile's) and their token side (``TimingProfile.moe_permute_passes``
    and ``moe_permute_tokens``); a library it does not name keeps the profile's."""

    library_permutation: tuple[tuple[str, Sourced | None, str], ...] = ()

    def __call__(self, runtime: Runtime, value: str) -> Runtime:
        stated = runtime.timing.collective_model
        model = value if value in _LIBRARY_MODELS else (None if stated in _LIBRARY_MODELS else stated)
        timing = runtime.timing
        if model != stated:
            timing = attrs.evolve(timing, collective_model=model)
        for library, passes, tokens in self.library_permutation:
            if library == value:  # stated passes: the library's dispatcher's own, with no local sort
                own = {} if passes is None else {"moe_permute_passes": passes, "moe_local_sort_passes": None}
                timing = attrs.evolve(timing, moe_permute_tokens=tokens, **own)
        return runtime if timing is runtime.timing else attrs.evolve(runtime, timing=timing)


def ep_all_to_all_option(source: str, library_permutation: tuple[tuple[str, Sourced | None, str], ...] = (),
                         permutation_note: str = "") -> RuntimeOption:
    """``ep_all_to_all``: ``nccl`` (the default), ``deepep`` or ``hybridep`` (the collective model of that name);
    *library_permutation* ``(library, passes, token side)``: the trainer's token permutation under that library
    (:class:`_AllToAll`), *permutation_note* what the option's description says of it."""
    return RuntimeOption(
        "ep_all_to_all", "choice", "nccl",
        "the library of the expert-parallel dispatch and combine: nccl (all_to_all_single), deepep (DeepEP's normal "
        "kernels at their published NVLink and RDMA bandwidths, collective model deepep) or hybridep (NVIDIA's "
        "HybridEP at its published bandwidths: kernel-only over NVLink, Torch API across nodes; collective model hybridep); deepep and hybridep price every "
        "all-to-all of the run" + (f"; {permutation_note}" if permutation_note else ""),
        source, _AllToAll(tuple(library_permutation)), choices=("nccl", "deepep", "hybridep"),
    )


@attrs.frozen
class _HybridepSms:
    """``hybridep_num_sms``: sets the timing profile's ``collective_sms["hybridep"]`` (the profile's own entry kept
    where the value is the one it states)."""

    def __call__(self, runtime: Runtime, value: int) -> Runtime:
        timing = runtime.timing
        stated = timing.collective_kernel_sms("hybridep")
        if stated is not None and stated.value == value:
            return runtime
        sms = Sourced(value, f"the run's hybridep_num_sms {value} (the trainer's HybridEP num_sms_dispatch_api and "
                             "num_sms_combine_api)")
        return attrs.evolve(runtime, timing=attrs.evolve(timing, collective_sms={**dict(timing.collective_sms),
                                                                                 "hybridep": sms}))


def hybridep_num_sms_option(default: Sourced, trainer: str) -> RuntimeOption:
    """``hybridep_num_sms``: the SMs HybridEP's dispatch and combine kernels run on, *default* the runtime's timing
    profile's (its source the option's), *trainer* the trainer setting it mirrors."""
    return RuntimeOption(
        "hybridep_num_sms", "int", int(default.value),
        f"the SMs HybridEP's dispatch and combine kernels run on ({trainer}), which the hybridep collective model "
        "(ep_all_to_all=hybridep) prices at: DeepEP's docs/README_Hybrid-EP.md publishes the GB200 NVLink figures at "
        "16 and 32 SMs and the H100 network ones at 4, 8 and 16, and each leg takes the published count nearest by "
        "ratio, the larger on a tie (24: the 32-SM figures), beyond them the nearest end (an extrapolation), the "
        "count priced named in the figure's source; NeMo AutoModel's default is 24; nothing else changes",
        f"{default.source}; DeepEP docs/README_Hybrid-EP.md (deepseek-ai/DeepEP@41cad94)", _HybridepSms(), minimum=1,
    )


@attrs.frozen
class _CudaGraphs:
    """``cuda_graphs``: sets the scope of the timing profile's host floor (``HostOverhead.cuda_graphs``)."""

    def __call__(self, runtime: Runtime, value: str) -> Runtime:
        host = runtime.timing.host
        if host is None and value == "none":
            return runtime  # nothing graphed, nothing floored: unchanged
        if host is None:
            raise ValueError(f"runtime {runtime.name}'s timing profile states no host time for cuda_graphs to change")
        return attrs.evolve(runtime, timing=attrs.evolve(runtime.timing, host=attrs.evolve(host, cuda_graphs=value)))


def cuda_graphs_option(source: str) -> RuntimeOption:
    """``cuda_graphs``: ``none`` (every kernel launched eagerly, the default), ``layers`` or ``full_iteration``."""
    return RuntimeOption(
        "cuda_graphs", "choice", "none",
        "what the trainer replays from CUDA graphs, which lifts the host floor (one graph launch in place of each "
        "kernel's): none; layers (each transformer layer's forward and backward, Megatron-Core's enable_cuda_graph: "
        "the embedding and output layers stay eager); full_iteration (the whole forward and backward); Transformer "
        "Engine's partial scopes (attn, mlp, moe_router, moe_preprocess) are priced as none; the graphs' memory (static "
        "buffers, private pools) is not priced",
        source, _CudaGraphs(), choices=CUDA_GRAPH_SCOPES,
    )


@attrs.frozen
class _BucketSize:
    """``ddp_bucket_size``: sets the overlap schedule's ``bucket_elements`` (0: ``None``, Megatron-LM's own default)."""

    def __call__(self, runtime: Runtime, value: int) -> Runtime:
        timing = runtime.timing
        schedule = attrs.evolve(timing.schedule, bucket_elements=value or None)
        return attrs.evolve(runtime, timing=attrs.evolve(timing, schedule=schedule))


def ddp_bucket_size_option(source: str) -> RuntimeOption:
    """``ddp_bucket_size``: parameters per data-parallel bucket; 0, the default, Megatron-LM's own size."""
    return RuntimeOption(
        "ddp_bucket_size", "int", 0,
        "--ddp-bucket-size: parameters per data-parallel gradient-reduction and parameter-gather bucket, which sets what "
        "overlap_grad_reduce leaves exposed after the last backward (its last bucket) and overlap_param_gather before "
        "the first forward (its first); 0 (the default, the flag unset): Megatron-LM's own, max(40e6, 1e6 x dp x cp) "
        "parameters; without the overlaps the reduction is one bucket either way",
        source, _BucketSize(), minimum=0,
    )


@attrs.frozen
class _OptimizerImplementation:
    """``optimizer_implementation``: foreach's temporary in the peak points (:class:`Fsdp2Points` ``foreach_optimizer``)
    and its per-op passes in the step time (:attr:`~hp_core.specs.timing.TimingProfile.optimizer_foreach`)."""

    def __call__(self, runtime: Runtime, value: object) -> Runtime:
        foreach = value == "foreach"
        return attrs.evolve(runtime, peak_points=attrs.evolve(runtime.peak_points, foreach_optimizer=foreach),
                            timing=attrs.evolve(runtime.timing, optimizer_foreach=foreach))


def optimizer_implementation_option() -> RuntimeOption:
    """``optimizer_implementation`` (the ``fsdp2`` runtime's): AdamW's ``foreach`` or ``fused`` implementation."""
    return RuntimeOption(
        "optimizer_implementation", "choice", "foreach",
        "AdamW's implementation: foreach (PyTorch's default on GPU: one fp32 temporary per element of the shard at the "
        "step, and an update of eight HBM passes, 80 bytes an fp32 element) or fused (torchtitan's default: no "
        "temporary, one pass, 28 bytes); below parallel.zero 3 the memory is the planner's default points, which "
        "price no optimizer step: there it changes the step time alone",
        "torch/optim/adam.py _multi_tensor_adam, _fused_adam; torchtitan/components/optimizer.py (implementation: fused); "
        "tests/plugins/data/h200_fsdp2_steps.json (43.4 ms foreach, 19.4 ms fused, 1.92e9 elements on an H200)",
        _OptimizerImplementation(), choices=("foreach", "fused"),
    )
