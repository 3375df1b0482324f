"""The ``megatron`` runtime: Megatron-Core with Transformer Engine, as Megatron-LM's ``pretrain_gpt.py`` runs it.

What it holds, and where that comes from (Megatron-LM at core 0.14, Transformer Engine 2.x):

* Precision: bf16 parameters and compute (``--bf16``); fp32 gradients in the
  DDP gradient buffer (``--accumulate-allreduce-grads-in-fp32``, on by default
  with ``--bf16``: ``megatron/training/arguments.py``), reduced in fp32; the
  option ``grad_reduce_in_fp32: false`` (``--grad-reduce-in-bf16``,
  Megatron-Core ``DistributedDataParallelConfig.grad_reduce_in_fp32``) makes
  the buffer and its reduction bf16; fp32 master parameters
  and two fp32 Adam moments (``megatron/core/optimizer``).
* Sharding: the distributed optimizer (``--use-distributed-optimizer``, ZeRO-1:
  master parameters and Adam states sharded over the data-parallel times
  context-parallel group, expert parameters' over the expert data-parallel
  group) is this profile's default ``zero: 1``; ``--zero 0`` prices Megatron
  without it. Megatron-FSDP (``--use-megatron-fsdp``, ZeRO 0 to 3 by its
  ``--data-parallel-sharding-strategy``) is priced by hp's generic per-layer
  sharding at that level, not by its own buffer layout (the importer says so in
  a warning line); at ``zero: 3`` the overlap options set its prefetch and
  reduce-scatter overlap.
* Vocabulary padded to a multiple of ``128 * tp`` (``--make-vocab-size-divisible-by``
  default 128; ``megatron/training/tokenizer/tokenizer.py`` ``_vocab_size_with_padding``).
  A tokenizer that adds tokens (the NullTokenizer's EOD) is stated in the
  model's ``vocab_size``.
* Kernels (traits): TE fused attention keeps q, k, v, the output and fp32
  softmax statistics; the fused SwiGLU (``megatron/core/fusions/fused_bias_swiglu.py``)
  keeps only its input; the fused cross-entropy (``--cross-entropy-loss-fusion
  --cross-entropy-fusion-impl te``, ``transformer_engine/pytorch/cross_entropy.py``)
  keeps the bf16 logits and computes their gradient in place; sequence
  parallelism re-gathers its inputs in backward (``gather`` always recomputed);
  TE's fused weight-gradient accumulation keeps one bf16 dummy weight gradient
  per distinct weight shape (``module/base.py`` ``get_dummy_wgrad``, also used by
  Megatron's output layer); MLA makes its up-projected q, k, v contiguous
  (``multi_latent_attention.py``); MoE applies the routing probabilities in the
  experts' weighted SwiGLU and permutes tokens with TE's fused ``moe_permute``
  (an int32 row map), as ``--moe-permute-fusion`` runs; the ``mlp`` recompute
  module checkpoints a dense MLP as a unit, so its recompute re-runs FC2 too
  (``transformer_layer.py``); under a low-precision recipe other than delayed
  scaling the attention output projection keeps its bf16 input, which the
  fused kernel keeps as its output, and no quantized copy, quantizing it again
  in backward (``set_save_original_input``, core_v0.14.0 on; the option
  ``linear_proj_save_original_input``).
* Workspaces: TE's cuBLAS workspace, 32 MiB + 1 KiB from compute capability 9.0
  (Hopper, Blackwell) and 4 MiB before it (Ampere), four more on a rank with
  grouped-GEMM experts (one per compute stream); a device stating no architecture,
  or one not listed, is priced at 32 MiB + 1 KiB (``overhead_by_architecture``); three more
  under ``tp_comm_overlap``, the userbuffers GEMMs' (:class:`_TpCommOverlap`); PyTorch's own cuBLAS
  workspaces, two, on a rank running the output layer or an MoE router's gate, whose GEMMs run through torch
  (:mod:`hp_core.blas_workspaces`; the option ``cublas_workspace_kib``).
* Userbuffers SM margins: under ``tp_comm_overlap`` the GEMMs Transformer Engine's userbuffers config runs with
  ``set_sm_margin`` are tiled for the device's SMs less their communication kernel's, priced at their time times
  ``sm_count / (sm_count - num_sm)``; the config is the option ``tp_comm_overlap_cfg``, TE's default where none is
  stated, a named one or a custom mapping (``--tp-comm-overlap-cfg``'s file) laid over TE's default
  (:mod:`hp_plugins.runtimes.userbuffers`).
* Pipeline: a stage holds the output gradient it received through its backward
  and the input gradient it sent until the next one (``schedules.py``).
"""

from __future__ import annotations

import attrs

from hp_core.blas_workspaces import BlasWorkspaces
from hp_core.markers import hookimpl
from hp_core.peak_points import StageView
from hp_core.results import MemoryBreakdown
from hp_core.runtime_options import RuntimeOption, field_option, trait_option
from hp_core.specs.overlap import SetSchedule, schedule_option
from hp_core.specs.precision import PrecisionSpec
from hp_core.specs.timing import Sourced
from hp_core.types import Runtime
from hp_plugins.runtimes.blas_option import cublas_workspace_option
from hp_plugins.runtimes.moe_expert_options import MOE_EXPERT_OPTIONS
from hp_plugins.runtimes.reserve import CUDA_CONTEXT_BYTES
from hp_plugins.runtimes.time_options import (
    cuda_graphs_option, ddp_bucket_size_option, ep_all_to_all_option, hybridep_num_sms_option, rope_kernels_option,
)
from hp_plugins.runtimes.timing_profiles import MEGATRON_TE
from hp_plugins.runtimes.userbuffers import (
    CONFIGS as _UB_CONFIGS, SOURCE as _UB_SOURCE, TE_DEFAULT, UserbuffersConfig, read_custom,
)

__all__ = ["MegatronPoints", "hp_runtimes"]

# Transformer Engine's cuBLAS workspace, get_cublas_workspace_size_bytes (NVIDIA/TransformerEngine@d0067d0
# transformer_engine/pytorch/cpp_extensions/gemm.py; module/base.py until e1edaae, v2.11): 32 MiB + 1 KiB where the
# device's compute capability major is >= 9 (the 1 KiB since aee5a82, v2.9; 32 MiB exactly before), 4 MiB below
# (since TE's first commit, 996ea16). Grouped GEMM takes one workspace of that size per compute stream
# (get_cublas_workspace(..., grouped_gemm=True), get_multi_stream_cublas_workspace before e1edaae), 4 streams
# (transformer_engine/common/util/multi_stream.cpp get_num_compute_streams).
_TE_WORKSPACE_BYTES = 32 * 2**20 + 1024  # sm >= 9.0; also the default where the device's architecture is not known
_TE_PRE_HOPPER_WORKSPACE_BYTES = 4 * 2**20  # sm < 9.0
_TE_COMPUTE_STREAMS = 4
_TE_WORKSPACES = {  # HardwareSpec.architecture -> (every rank's, a grouped-GEMM expert rank's further) workspace bytes
    "ampere": (_TE_PRE_HOPPER_WORKSPACE_BYTES, _TE_COMPUTE_STREAMS * _TE_PRE_HOPPER_WORKSPACE_BYTES),  # sm 8.0 (A100), 8.6
    "hopper": (_TE_WORKSPACE_BYTES, _TE_COMPUTE_STREAMS * _TE_WORKSPACE_BYTES),  # sm 9.0
    "blackwell": (_TE_WORKSPACE_BYTES, _TE_COMPUTE_STREAMS * _TE_WORKSPACE_BYTES),  # sm 10.0, 10.3
}


_ARGS = "Megatron-LM megatron/training/arguments.py"
# Megatron-Core's flex dispatcher permutes after the de-duplicating dispatch and unpermutes before the combine, one
# pass each way over the tokens the rank received (docs/time.md, "The model"): in place of the alltoall dispatcher's
# four passes (the profile's moe_permute_passes).
_FLEX_PERMUTATION = (
    "megatron/core/transformer/moe/token_dispatcher.py MoEFlexTokenDispatcher (NVIDIA/Megatron-LM core_v0.16.0 to "
    "d98e8a6): under DeepEP _DeepepManager.get_permuted_hidden_states_by_experts permutes the received tokens into "
    "expert order (permute, one pass) and get_restored_hidden_states_by_experts unpermutes them (one pass); under "
    "HybridEP (_HybridEPManager, since 3df2009, 2025-11-18) fused_a2a.py HybridEPDispatch runs "
    "HybridEPBuffer.dispatch_with_permute and combine_with_unpermute, the permute HybridEP's own pass over the "
    "received buffer (fused into the dispatch kernel only under --moe-permute-fusion-into-hybridep, 8c5cf05, "
    "2026-04-28, off by default, not priced); no sort_chunks_by_idxs pass on either"
)
_FLEX_PASSES = Sourced(2, "the flex dispatcher's permute and unpermute, one pass each over the tokens the rank "
                          "receives: " + _FLEX_PERMUTATION)


def _attention_backend(runtime: Runtime, value: str) -> Runtime:
    """``--attention-backend``: flash, fused and auto run a flash-style kernel (the ``flash`` attention
    implementation); ``unfused`` runs Transformer Engine's ``UnfusedDotProductAttention``, which keeps the
    scores' softmax in the compute dtype (bf16) and repeats the key and value heads to every query head
    (``eager`` with 2-byte probabilities)."""
    if value == "unfused":
        return attrs.evolve(runtime, attention="eager", precision=attrs.evolve(runtime.precision, softmax_bytes=2),
                            fp8_attention_refusal=None)  # eager: the layers' own refusal (no fused kernel's tensors)
    return attrs.evolve(runtime, attention="flash", fp8_attention_refusal=_FLASH_FP8 if value == "flash" else None)


# --attention-backend flash sets NVTE_FUSED_ATTN=0 (Megatron-Core megatron/core/models/common/language_module/
# language_module.py LanguageModule._set_attention_backend), turning cuDNN's fused attention off, and Transformer
# Engine runs FP8 attention in training on no other backend (transformer_engine/pytorch/attention/dot_product_attention/
# utils.py get_attention_backend, 'Filter: Execution type', NVIDIA/TransformerEngine@a0b36d0: FlashAttention 2 and
# unfused disabled for FP8 attention, FlashAttention 3 for FP8 training).
_FLASH_FP8 = ("$.runtime.options.attention_backend",
              "megatron's --attention-backend flash turns Transformer Engine's fused (cuDNN) attention off, the only "
              "backend it runs FP8 attention on in training; set attention_backend=auto or fused")


@attrs.frozen
class _GradReduceDtype:
    """``grad_reduce_in_fp32``: the DDP gradient buffer's dtype, which is also the dtype of its data-parallel
    reduce-scatter (all-reduce without the distributed optimizer). Megatron-Core at 23e00ed0,
    ``megatron/core/distributed/distributed_data_parallel.py`` ``DistributedDataParallel.__init__``:
    ``grad_dtype = torch.float if ddp_config.grad_reduce_in_fp32 else param.dtype``; the buffer
    (``param_and_grad_buffer.py`` ``_ParamAndGradBuffer.__init__``: ``grad_data = torch.zeros(numel,
    dtype=self.grad_dtype)``) is what ``start_grad_sync`` reduce-scatters (or all-reduces) in place. So
    true: 4 bytes per element for both; false: the parameters' bytes (bf16: 2)."""

    def __call__(self, runtime: Runtime, value: bool) -> Runtime:
        grad_bytes = 4 if value else runtime.precision.param_bytes
        return attrs.evolve(runtime, precision=attrs.evolve(runtime.precision, grad_bytes=grad_bytes))


# Under --tp-comm-overlap Transformer Engine's userbuffers GEMMs take a cuBLAS workspace of their own, three
# workspaces in one tensor made with torch.empty (get_cublas_workspace(device, ub=True, grouped_gemm=False),
# _NUM_MAX_UB_STREAMS = 3, NVIDIA/TransformerEngine@d0067d0 transformer_engine/pytorch/cpp_extensions/gemm.py, since
# e1edaae, v2.11), beside the one every other GEMM takes. Before e1edaae, initialize_ub replaced that one workspace
# by the tripled one (module/base.py: _cublas_workspace = get_workspace().repeat(_NUM_MAX_UB_STREAMS)): two more, not
# three; hp prices the current form (docs/runtimes.md).
_UB_STREAMS = 3


@attrs.frozen
class _TpCommOverlap:
    """``tp_comm_overlap``: the overlap schedule's flag, and where it is on the userbuffers GEMMs' cuBLAS workspaces,
    three of the device's workspace size (``overhead_by_architecture``; the default size where no architecture is
    stated) on every rank."""

    def __call__(self, runtime: Runtime, value: bool) -> Runtime:
        # The flag, and that the overlap runs through TE's userbuffers as Megatron-Core builds them.
        runtime = SetSchedule(("tp_comm_overlap", "userbuffers"))(runtime, value)
        if not value:
            return runtime
        by_architecture = {name: (every + _UB_STREAMS * _TE_WORKSPACES[name][0], expert)
                           for name, (every, expert) in runtime.overhead_by_architecture.items()}
        return attrs.evolve(runtime, overhead_bytes=runtime.overhead_bytes + _UB_STREAMS * _TE_WORKSPACE_BYTES,
                            overhead_by_architecture=by_architecture)


@attrs.frozen
class MegatronPoints:
    """The megatron runtime's peak points: the planner's (the end of warm-up, ...) and the optimizer step.

    Megatron-LM at 23e00ed0, unchanged at core_v0.18.0 (ba7b5ebc). At the step (``megatron/core/optimizer/optimizer.py`` ``MixedPrecisionOptimizer.prepare_grads`` calling
    ``_copy_model_grads_to_main_grads``) each fp32 main parameter gets an fp32 ``.grad`` from its gradient
    buffer: ``.float()`` of the bf16 buffer's view (the distributed optimizer, ``distrib_optimizer.py``: of the
    rank's shard, ``shard_main_param.grad = shard_model_grad.float()``; without it, ``optimizer.py``
    ``Float16OptimizerWithFloat16Params``: of the whole gradient, ``main_param.grad = model_param.main_grad.float()``),
    a new fp32 tensor where the buffer is not fp32 (``grad_reduce_in_fp32: false``) and the buffer itself where it
    is. They are freed by the next step's ``optimizer.zero_grad()`` (``megatron/training/training.py`` ``train_step``,
    before its forward), so they are held at the step alone, while the schedule holds no micro-batch: 4 bytes per
    element of every master parameter the rank keeps (the master copy's own elements, sharded as it is).
    """

    def __call__(self, view: StageView) -> dict[str, MemoryBreakdown]:
        params, grads, master, states = view.static
        precision = view.precision
        copies = master // precision.master_param_bytes * 4 if precision.master_param_bytes and precision.grad_bytes != 4 else 0
        step = MemoryBreakdown(parameters_bytes=params, gradients_bytes=grads, master_parameters_bytes=master,
                               optimizer_states_bytes=states, activations_bytes=0, communication_buffers_bytes=0,
                               working_set_bytes=copies, runtime_overhead_bytes=view.overhead_bytes)
        return {**view.default_points, "optimizer": step}


OPTIONS = (
    trait_option(
        "cross_entropy_fusion", "fused_cross_entropy", default=True,
        description="--cross-entropy-loss-fusion (--cross-entropy-fusion-impl te): the loss keeps the bf16 logits, "
                    "overwritten by their gradient; false: Megatron's vocab_parallel_cross_entropy keeps an fp32 softmax",
        source=f"{_ARGS} --cross-entropy-loss-fusion; transformer_engine/pytorch/cross_entropy.py; "
               "megatron/core/tensor_parallel/cross_entropy.py",
    ),
    RuntimeOption(
        "attention_backend", "choice", "auto",
        "--attention-backend: auto, flash and fused keep q, k, v, the output and fp32 softmax statistics; unfused keeps "
        "the bf16 probabilities of every head (key and value heads repeated to the query heads); FP8 attention runs "
        "under auto and fused only (flash turns cuDNN's fused attention off: refused)",
        f"{_ARGS} --attention-backend (megatron/core/transformer/enums.py AttnBackend); Transformer Engine "
        "attention/dot_product_attention/backends.py UnfusedDotProductAttention.forward",
        _attention_backend, choices=("auto", "flash", "fused", "unfused"),
    ),
    trait_option(
        "swiglu_fusion", "fused_swiglu", default=True,
        description="--bias-swiglu-fusion (default on; --no-bias-swiglu-fusion turns it off): the SwiGLU keeps only its "
                    "input; false: it keeps the gate and up outputs, the activation's output and the product",
        source=f"{_ARGS} --no-bias-swiglu-fusion; megatron/core/fusions/fused_bias_swiglu.py",
    ),
    trait_option(
        "activation_func_fp8_input_store", "fp8_activation_input_store", default=False,
        description="--activation-func-fp8-input-store: the fused SwiGLU (dense MLP, shared and routed experts; "
                    "GPT-OSS's quick-GeGLU) keeps its input, the FC1 output, as float8_e4m3fn, one byte an element, "
                    "and casts it back in backward (two eager casts of act + 1 bytes an element, timed as copies); "
                    "no effect where the activation is unfused (swiglu_fusion false) or in Transformer Engine's "
                    "fused grouped MLP (moe_fused_grouped_mlp); false: the compute dtype",
        source=f"{_ARGS} --activation-func-fp8-input-store; megatron/core/transformer/transformer_config.py "
               "activation_func_fp8_input_store; megatron/core/fusions/fused_bias_swiglu.py (BiasSwiGLUFunction, "
               "SwiGLUFunction, WeightedSwiGLUFunction: input.to(torch.float8_e4m3fn) saved, cast back in backward) "
               "and fused_bias_geglu.py (WeightedQuickGeGLUFunction); megatron/core/transformer/mlp.py and "
               "moe/experts.py pass it to bias_swiglu_impl and weighted_bias_swiglu_impl",
    ),
    trait_option(
        "linear_proj_save_original_input", "linear_proj_original_input", default=True,
        description="Megatron-Core from core_v0.14.0 with Transformer Engine 2.6 (FP8) / 2.7 (FP4): under a recipe "
                    "other than delayed scaling the attention output projection keeps its bf16 input (the fused "
                    "kernel's output, which the kernel keeps anyway) and no quantized copy, and its backward quantizes "
                    "that input again; no command-line flag (set where the recipe is not delayed); false: an older "
                    "Megatron-Core, which keeps the quantized copy",
        source="megatron/core/transformer/attention.py lines 363-379 and multi_latent_attention.py lines 183-199 at "
               "core_v0.16.0 (set_save_original_input(self.linear_proj) where fp8 and fp8_recipe != 'delayed', or fp4; "
               "NVIDIA/Megatron-LM 781e765, 2025-08-19, first in core_v0.14.0); megatron/core/extensions/"
               "transformer_engine.py set_save_original_input; transformer_engine/pytorch/module/linear.py "
               "save_original_input (NVIDIA/TransformerEngine 07afda9, v2.6)",
    ),
    *MOE_EXPERT_OPTIONS,
    trait_option(
        "moe_permute_fusion", "moe_fused_permute", default=True,
        description="--moe-permute-fusion: TE's fused moe_permute keeps an int32 row map of [tokens, 2 * experts + 1]; "
                    "false: Megatron's unfused permute, priced as keeping no row map",
        source=f"{_ARGS} --moe-permute-fusion; transformer_engine/pytorch/permutation.py moe_permute",
    ),
    field_option(
        "gradient_accumulation_fusion", "dummy_weight_gradients", "bool", default=True,
        description="gradient accumulation fusion (on unless --no-gradient-accumulation-fusion): TE accumulates weight "
                    "gradients into the fp32 buffer and keeps one bf16 dummy weight gradient per distinct weight shape",
        source=f"{_ARGS} --no-gradient-accumulation-fusion; transformer_engine/pytorch/module/base.py get_dummy_wgrad",
    ),
    field_option(
        "make_vocab_size_divisible_by", "vocab_pad_multiple", "int", default=128, minimum=1,
        description="--make-vocab-size-divisible-by: the vocabulary is padded to a multiple of this times tp",
        source=f"{_ARGS} --make-vocab-size-divisible-by; megatron/training/tokenizer/tokenizer.py _vocab_size_with_padding",
    ),
    RuntimeOption(
        "grad_reduce_in_fp32", "bool", True,
        "fp32 gradient buffer and data-parallel reduction (--accumulate-allreduce-grads-in-fp32, on with --bf16); "
        "false (--grad-reduce-in-bf16; Megatron-Core DistributedDataParallelConfig.grad_reduce_in_fp32 false): the "
        "gradient buffer and its reduce-scatter (all-reduce at zero 0) in the parameters' dtype (bf16, half the "
        "bytes; a stated precision.param_bytes is followed); at the optimizer step the optimizer copies them to fp32 (.float()), 4 bytes per element of the shard "
        "under the distributed optimizer, of every gradient at zero 0 (which there outweighs the 2 saved), held at "
        "the step (peak point optimizer) and its read and write timed there",
        f"{_ARGS} --grad-reduce-in-bf16, --accumulate-allreduce-grads-in-fp32 (at 23e00ed0); megatron/core/distributed/"
        "distributed_data_parallel_config.py grad_reduce_in_fp32; distributed_data_parallel.py (grad_dtype = fp32 if "
        "grad_reduce_in_fp32 else param.dtype); param_and_grad_buffer.py (grad_data in grad_dtype, reduced in place); "
        "megatron/core/optimizer/distrib_optimizer.py and optimizer.py _copy_model_grads_to_main_grads (at 23e00ed0 and "
        "core_v0.18.0)",
        _GradReduceDtype(), precision_fields=("grad_bytes",),
    ),
    schedule_option(
        "overlap_grad_reduce", ("overlap_grad_reduce", "fsdp_reduce_scatter_overlap"), default=False,
        description="--overlap-grad-reduce: the data-parallel gradient reduction runs in buckets during the last "
                    "micro-batch's backward; exposed max(last bucket, reduction - backward); under Megatron-FSDP "
                    "(zero 3) each layer's reduce-scatter during the next layer's backward",
        source=f"{_ARGS} --overlap-grad-reduce; megatron/core/distributed/param_and_grad_buffer.py (buckets of "
               "max(40e6, 1e6 * dp) parameters, megatron/training/training.py get_model)",
    ),
    schedule_option(
        "overlap_param_gather", ("overlap_param_gather", "fsdp_prefetch"), default=False,
        description="--overlap-param-gather: the distributed optimizer's parameter all-gather runs in buckets during "
                    "the next step's first forward; exposed max(first bucket, gather - forward); under Megatron-FSDP "
                    "(zero 3) each layer's all-gather prefetched behind the previous layer's compute",
        source=f"{_ARGS} --overlap-param-gather; megatron/core/distributed/distributed_data_parallel.py; "
               "megatron/core/distributed/fsdp/src/README.md (Megatron-FSDP: the two overlap flags prefetch its "
               "all-gathers and overlap its reduce-scatters)",
    ),
    ddp_bucket_size_option(f"{_ARGS} --ddp-bucket-size (default None); megatron/training/training.py get_model "
                           "(bucket_size max(40000000, 1000000 * dp_cp) where None, one bucket without overlap_grad_reduce); "
                           "megatron/core/distributed/distributed_data_parallel_config.py bucket_size"),
    RuntimeOption(
        "tp_comm_overlap", "bool", False,
        "--tp-comm-overlap: TE userbuffers split TP all-gathers and reduce-scatters into tp chunks pipelined with "
        "their GEMMs; exposed max(comm - GEMMs, comm / tp) per layer and direction; their GEMMs' cuBLAS workspace, "
        "three of the device's workspace size, on every rank; needs parallel.sp at tp > 1 (Megatron-LM asserts it); "
        "a layer with a TE linear Megatron-Core runs no userbuffers for (MLA, the MTP module) runs without it",
        f"{_ARGS} --tp-comm-overlap; transformer_engine/pytorch/module/base.py initialize_ub; Wang et al. 2023 "
        "(ASPLOS, 'Overlap communication with dependent computation via decomposition'); the workspace: "
        "NVIDIA/TransformerEngine@d0067d0 transformer_engine/pytorch/cpp_extensions/gemm.py get_cublas_workspace "
        "(ub=True, _NUM_MAX_UB_STREAMS = 3, since e1edaae); the SP assertion: megatron/training/arguments.py lines 1441-1442 "
        "at NVIDIA/Megatron-LM@d98e8a6; the turning off: megatron/core/extensions/transformer_engine.py lines 1176-1186",
        _TpCommOverlap(),
    ),
    RuntimeOption(
        "tp_comm_overlap_cfg", "choice", TE_DEFAULT,
        "with tp_comm_overlap, the userbuffers config Transformer Engine runs (--tp-comm-overlap-cfg; Megatron-Bridge's "
        "and NeMo 2.0's tp_comm_overlap_cfg): a GEMM it runs with an SM margin (set_sm_margin) is tiled for the device's "
        "SMs less its communication kernel's (num_sm) and priced at its time times sm_count / (sm_count - num_sm), "
        "first-order; te_default: Megatron-LM without --tp-comm-overlap-cfg on Transformer Engine 2.0 on (the "
        "pipeline proj and fc2 forward GEMMs and the bulk qkv and fc1 dgrad and wgrad GEMMs at 16 SMs); "
        "te_1x_default: Transformer Engine before 2.0 (no margin); the others Megatron-Bridge's named configs; or a "
        "mapping, a custom config as a --tp-comm-overlap-cfg file states it (GEMM name -> method, num_sm, "
        "set_sm_margin and initialize_ub's other fields), laid over TE's default per GEMM as initialize_ub does "
        "(docs/runtimes.md)",
        f"{_UB_SOURCE}; Megatron-LM megatron/training/initialize.py _initialize_tp_communicators (ub_cfgs = {{}} "
        "without --tp-comm-overlap-cfg, the file's yaml.safe_load with it, NVIDIA/Megatron-LM@d98e8a6); the overlay: "
        "base.py initialize_ub lines 516-569",
        UserbuffersConfig(), choices=tuple(_UB_CONFIGS), mapping=read_custom,
    ),
    schedule_option(
        "overlap_p2p_communication", "overlap_p2p", default=False,
        description="--overlap-p2p-communication (interleaved schedule): pipeline sends run beside a chunk's "
                    "compute; exposed max(0, send - chunk compute)",
        source=f"{_ARGS} --overlap-p2p-communication; megatron/core/pipeline_parallel/schedules.py",
    ),
    schedule_option(
        "overlap_moe_expert_parallel_comm", "ep_comm_overlap", default=False,
        description="--overlap-moe-expert-parallel-comm: one micro-batch's expert all-to-alls run beside another's "
                    "compute; exposed max(0, all-to-all - the layer's compute); the pipeline's warm-up forwards and "
                    "cool-down backwards, which run alone, expose what it hides",
        source=f"{_ARGS} --overlap-moe-expert-parallel-comm; megatron/core/pipeline_parallel/combined_1f1b.py and "
               "schedules.py (get_pp_rank_microbatches), megatron/core/models/common/model_chunk_schedule_plan.py "
               "(TransformerLayerSchedulePlan.run) at core_v0.16.0",
    ),
    schedule_option(
        "delay_wgrad_compute", "delay_wgrad", default=False,
        description="--delay-wgrad-compute (needs overlap_moe_expert_parallel_comm): the experts' weight-gradient "
                    "GEMMs run beside the dispatch's backward all-to-all; in a lone backward pass (the cool-down) "
                    "min(half the backward all-to-all, expert weight gradients) is hidden",
        source="megatron/core/models/common/model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run (mlp.backward_dw "
               "beside moe_dispatch.backward) and transformer/transformer_config.py at core_v0.16.0",
    ),
    ep_all_to_all_option(f"{_ARGS} --moe-token-dispatcher-type flex --moe-enable-deepep, or --moe-flex-dispatcher-backend "
                         "hybridep (megatron/core/transformer/moe/fused_a2a.py); DeepEP docs/legacy.md "
                         "(deepseek-ai/DeepEP@0297fc8); DeepEP docs/README_Hybrid-EP.md (deepseek-ai/DeepEP@41cad94); "
                         + _FLEX_PERMUTATION,
                         library_permutation=(("deepep", _FLEX_PASSES, "received"), ("hybridep", _FLEX_PASSES, "received")),
                         permutation_note="under deepep or hybridep the flex dispatcher permutes the tokens a rank "
                                          "receives once each way (2 passes; the alltoall dispatcher's 4 under nccl)"),
    hybridep_num_sms_option(MEGATRON_TE.collective_kernel_sms("hybridep"),
                            "--moe-hybridep-num-sms; 32: Megatron-Bridge's performance recipes; Megatron-Core's own "
                            "default 16 at core_v0.16.0 and core_v0.17.0"),
    rope_kernels_option(
        f"{_ARGS} --no-rope-fusion (dest apply_rope_fusion, on by default; NVIDIA/Megatron-LM@d98e8a6): off, "
        "megatron/core/models/common/embeddings/rope_utils.py apply_rotary_pos_emb runs _apply_rotary_pos_emb_bshd, "
        "t * cos + _rotate_half(t) * sin with _rotate_half = torch.cat((-x2, x1)) in eager torch ops (the "
        "rope_rotate_half form the runtime's traits state); on, Transformer Engine's fused_apply_rotary_pos_emb"),
    cuda_graphs_option(
        "Megatron-Core core_v0.12.0 (NVIDIA/Megatron-LM@d580efc): TransformerConfig.enable_cuda_graph makes "
        "TransformerLayer.__call__ run through CudaGraphManager (transformer/transformer_layer.py), which captures the "
        "layer's forward and backward once and replays them (transformer/cuda_graphs.py, _CudagraphReplayNode: "
        "fwd_graph.replay(), bwd_graph.replay()); --cuda-graph-scope full_iteration (megatron/training/arguments.py at "
        "core_v0.14.0) captures the whole forward and backward; a replayed graph's kernels are launched by one "
        "cudaGraphLaunch (CUDA C++ Programming Guide, 'CUDA Graphs')"),
)


@hookimpl
def hp_runtimes():
    yield Runtime(
        name="megatron",
        precision=PrecisionSpec(param_bytes=2, grad_bytes=4, master_param_bytes=4, optimizer="adam", moment_bytes=4,
                                activation_bytes=2, softmax_bytes=4, logits_bytes=4),
        attention="flash",
        zero=1,
        vocab_pad_multiple=128,
        reserve_bytes=CUDA_CONTEXT_BYTES,  # the CUDA context (hp_plugins/runtimes/reserve.py)
        # Transformer Engine's cuBLAS workspace and, on a rank with grouped-GEMM experts, one per compute stream
        # (_TE_WORKSPACES above): by the device's architecture, the sm >= 9.0 figures where it is not known.
        overhead_bytes=_TE_WORKSPACE_BYTES,
        expert_overhead_bytes=_TE_COMPUTE_STREAMS * _TE_WORKSPACE_BYTES,
        overhead_by_architecture=_TE_WORKSPACES,
        # PyTorch's cuBLAS workspaces where a rank runs a GEMM outside TE's modules: the output layer
        # (tensor_parallel.ColumnParallelLinear) and the router's gate (router_gating_linear), the GEMMs the layers
        # keep in the compute dtype (hp_core/blas_workspaces.py).
        blas_workspaces=BlasWorkspaces("compute_dtype"),
        traits=frozenset({
            "fused_swiglu", "fused_cross_entropy", "mla_contiguous_qkv", "moe_probs_in_activation", "moe_fused_permute",
            "moe_expert_tp_dispatch", "moe_eager_expert_bias", "dense_mlp_checkpoint", "linear_proj_original_input",
            # The unfused RoPE's form (--no-rope-fusion; rope_utils.py _apply_rotary_pos_emb_bshd and _rotate_half at
            # NVIDIA/Megatron-LM@d98e8a6): read only where the rotation runs eager (rope_kernels=eager).
            "rope_rotate_half",
            # Its layernorm recompute module re-runs only the pre-norms built as modules of their own (the MoE
            # block's, MLA's input norm): the kinds keep the others' outputs under no switch (hp_core/traits.py).
            "megatron_layernorm_recompute",
        }),
        dummy_weight_gradients=True,
        implicit_recompute=frozenset({"gather"}),
        timing=MEGATRON_TE,
        # --recompute-granularity selective --recompute-modules (megatron/training/arguments.py,
        # core 0.14): each module recomputes these switches' tensors; any union of them runs.
        # mlp (NVIDIA/Megatron-LM megatron/core/transformer/transformer_layer.py and transformer_config.py at
        # 2edffadb528ea07e261b0c02cdc42a7bb9c3197a, unchanged at d98e8a64ddf34856e74b24714e3bedb2f5a39553):
        # TransformerLayer.__init__ sets recompute_mlp only where the layer is not an MoE layer, and
        # _forward_mlp then checkpoints the whole MLP
        # (tensor_parallel.checkpoint, te_checkpoint under fp8/fp4), keeping its input (the pre-MLP norm's
        # output) and re-running FC1, the activation and FC2 in backward: the MLP's FC1 outputs (ffFc1) and
        # activation outputs (ffAct), the whole forward re-run (trait dense_mlp_checkpoint).
        # moe (megatron/core/transformer/moe/moe_layer.py at NVIDIA/Megatron-LM@d98e8a6; the choice listed in
        # transformer_config.py's recompute_modules, "normal checkpointing"): MoELayer.__init__ sets
        # moe_layer_recompute where the granularity is selective, "moe" is among the modules and cuda_graph_impl is
        # not "local" (there MoETransformerLayer recomputes instead, transformer_layer.py), and MoELayer.forward then
        # checkpoints its whole forward, custom_forward (tensor_parallel.checkpoint; te_checkpoint under fp8/fp4,
        # which re-runs it in the recipe): the shared experts, the router, the dispatch preprocessing, the
        # dispatch, the routed experts, the combine and the postprocessing (latent projection, shared experts'
        # output added). The checkpoint keeps its input only, the pre-MLP norm's output (kept under normOp, which
        # layernorm's output-discarding checkpoint drops and rebuilds), and re-runs all of it in backward, the
        # expert-parallel dispatch and combine (all-to-all or DeepEP/HybridEP) included: every tensor the MoE block
        # keeps inside itself, moeLayer (hp_plugins/kit/builder.py) and the experts' activations ffAct, with the
        # block's forward re-run (its Rerun and its collectives' rerun_switch: hp_plugins/kit/work.py).
        # layernorm (transformer_layer.py at NVIDIA/Megatron-LM@d98e8a6, TransformerLayer.__init__ and
        # _run_input_layernorm / _forward_pre_mlp_layernorm): recompute_input_layernorm where input_layernorm is not
        # IdentityOp, recompute_pre_mlp_layernorm where pre_mlp_layernorm is not (nor the MoE router's CUDA-graph
        # exceptions, can_recompute_pre_mlp_layernorm_for_cudagraph, which hp does not price); each norm runs under
        # CheckpointWithoutOutput (tensor_parallel/random.py), which keeps its input (the residual stream, kept
        # anyway: {prefix}_norm_in) and discards its output after the block, re-running the norm in backward. In the
        # Transformer Engine specs only an MoE layer's pre-MLP norm and MLA's input norm are TENorm modules; the
        # others are fused into the next linear (TELayerNormColumnParallelLinear), which keeps the norm's output
        # for its weight gradient: normOp drops only the former's outputs (trait megatron_layernorm_recompute).
        # Under fp8/fp4 the next linear keeps the norm's output itself, not a quantized copy, so the discarded
        # tensor is the only one (set_for_recompute_input_layernorm: set_save_original_input on MLA's down
        # projections; set_for_recompute_pre_mlp_layernorm: on the shared experts' linear_fc1, moe_layer.py); a
        # latent MoE's fc1_latent_proj keeps its quantized copy still (priced by no term, with or without it).
        recompute_modules={
            "core_attn": frozenset({"attBMM", "headCast", "dropout", "softmax"}),
            "layernorm": frozenset({"normOp"}),
            "moe_act": frozenset({"ffAct"}),
            "mla_up_proj": frozenset({"attUp"}),
            "mlp": frozenset({"ffFc1", "ffAct"}),
            "moe": frozenset({"moeLayer", "ffAct"}),
        },
        # moe_act recomputes the routed experts' activation only (megatron/core/transformer/moe/experts.py), so it
        # acts on every built-in kind with routed experts; mlp acts only on layers with a dense MLP
        # (transformer_layer.py: recompute_mlp where not is_moe_layer; an MoE layer's shared experts have their
        # own module, shared_experts: moe/moe_layer.py shared_experts_compute, not stated here); moe acts on the
        # layers whose MLP is an MoELayer, every built-in kind with routed experts. The megatron
        # exporter reads the same statement (tests/plugins/test_megatron_module_kinds.py checks it against the
        # presets' configs).
        module_kinds={"moe_act": frozenset({"moe", "mla_moe", "gdn_moe", "gated_attention_moe", "moe_only"}),
                      "mlp": frozenset({"dense", "mla", "mlp", "gdn", "gated_attention"}),
                      "moe": frozenset({"moe", "mla_moe", "gdn_moe", "gated_attention_moe", "moe_only"})},
        description=(
            "Megatron-Core + Transformer Engine: bf16, fp32 grad buffer, distributed optimizer, TE fused "
            "attention/SwiGLU/cross-entropy, vocab padded to 128*tp"
        ),
        zero_levels=(0, 1),  # without and with --use-distributed-optimizer
        options=(*OPTIONS, cublas_workspace_option()),
        peak_points=MegatronPoints(),
        # The MTP module runs in bf16 under FP4 ("currently ignoring FP4 in MTP layers": _proj_and_transformer_layer
        # enters get_fp8_context only where config.fp8, multi_token_prediction.py at NVIDIA/Megatron-LM core_v0.16.0
        # lines 773-803): its GEMMs at the bf16 rate, its inputs kept in bf16, no FP4 weight copy (docs/precision.md).
        compute_dtype_kinds={"fp4": frozenset({"mtp"})},
        # Its recompute modules act inside the MTP module's layers too: GPTModel and HybridModel build the
        # MultiTokenPredictionBlock with the model's one TransformerConfig (models/gpt/gpt_model.py lines 245-246,
        # models/hybrid/hybrid_model.py 302-303 at NVIDIA/Megatron-LM@d98e8a6), which passes it to each
        # MultiTokenPredictionLayer (transformer/multi_token_prediction.py lines 1929-1936, 1946-1955), which passes
        # it to its TransformerLayer (lines 1220-1228) or HybridStack (lines 1203-1214); each module reads
        # recompute_granularity / recompute_modules from it in its own __init__ (transformer_layer.py lines 473-539,
        # attention.py 392-395, multi_latent_attention.py 171-174, moe/moe_layer.py 247-255, moe/experts.py
        # 269-272), is_mtp_layer changing none of it: the mtp kind recomputes its layers' switches as the body
        # layers of their kinds recompute them (hp_plugins/kinds/mtp.py, 'Recompute'). Under full recompute of every
        # body layer (uniform, 1 layer) the MTP layer checkpoints _proj_and_transformer_layer whole
        # (multi_token_prediction.py lines 1492-1653, 1705-1720; block: skipped), priced by hp_core.engine.inner_layers.
        inner_recompute=True,
        # No reduce dtype of its own: start_grad_sync reduces the gradient buffer in place, in its grad_dtype
        # (_GradReduceDtype), so precision.reduce_bytes other than grad_bytes is refused (docs/precision.md).
        reduce_width_setting="the runtime option grad_reduce_in_fp32 (true: fp32, 4 bytes; false: the parameters' "
                             "dtype, bf16) or precision.grad_bytes, the gradient buffer's width",
    )
