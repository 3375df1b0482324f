"""The ``fsdp2`` runtime: PyTorch FSDP2 (``fully_shard``) as torchtitan runs it, optionally with tensor parallel.

What it holds, and where that comes from (torchtitan ``parallelize_llama``,
PyTorch ``torch.distributed.fsdp.fully_shard``):

* Sharded parameters are fp32 (the optimizer updates them in place: no separate
  master copy); ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``
  all-gathers them to bf16 for compute and reduce-scatters fp32 gradients
  (the option ``reduce_dtype: bf16``: bf16 reduce-scatters, fp32 sharded gradients);
  AdamW keeps two fp32 moments, sharded like the parameters. So ``zero: 3``
  with 4-byte parameters, 4-byte gradients and no master copy.
* Its peak points (:mod:`hp_plugins.runtimes.fsdp2_points`): the forward at the
  loss, the backward walked from the top, the optimizer step; gathered
  parameters unit by unit in execution order (the root's held through the step,
  the running layer's and one all-gather output), gradients only where the
  trainer keeps them.
* Beside the peak (``StageEstimate.cached_bytes``, ``Fsdp2Points.cached_bytes``): the
  caching allocator's reduce-scatter and all-gather stream pools (the latter's
  all-gather inputs and outputs placed as the allocator's best fit places them)
  and an upcast loss's freed compute-dtype logits block, in reserved memory only.
* ``reshard_last_layer_after_forward: false``: the last decoder layer kept
  gathered from its forward to its backward (torchtitan's ``apply_fsdp`` until
  July 2025).
* ``embedding_unit: own``: the embedding an FSDP unit of its own with the
  layers' reshard rule (torchtitan's wrapping from July 2025, 83e6941): at pp 1
  freed after its forward and gathered again in backward.
* Kernels: SDPA flash attention (option ``attention_kernel``); an unfused SwiGLU (``F.silu(w1(x)) * w3(x)``);
  by default the modules of transformers (``norm_implementation: transformers``:
  RMSNorm upcasts to fp32 and keeps that copy) and a loss that upcasts the logits
  to fp32 before ``cross_entropy`` (``loss_implementation: upcast``).
"""

from __future__ import annotations

import attrs

from hp_core.blas_workspaces import BlasWorkspaces
from hp_core.markers import hookimpl
from hp_core.runtime_options import RuntimeOption, trait_setter
from hp_core.specs.overlap import SetSchedule, schedule_option
from hp_core.specs.precision import PrecisionSpec
from hp_core.types import Runtime
from hp_plugins.kinds.output import CHUNKED_LOSS_CHUNKS
from hp_plugins.kit.op_sac import OP_SAC_SWITCHES
from hp_plugins.runtimes.blas_option import cublas_workspace_option
from hp_plugins.runtimes.flex_attention import FLEX, FLEX_BLOCK_TOKENS
from hp_plugins.runtimes.fsdp2_points import Fsdp2Points
from hp_plugins.runtimes.reserve import CUDA_CONTEXT_BYTES
from hp_plugins.runtimes.time_options import (
    elementwise_kernels_option,
    ep_all_to_all_option,
    hybridep_num_sms_option,
    optimizer_implementation_option,
    rope_implementation_option,
    rope_kernels_option,
)
from hp_plugins.runtimes.attention_speedups import BLACKWELL_ATTENTION_SPEEDUPS, HOPPER_ATTENTION_SPEEDUPS
from hp_plugins.runtimes.torchtitan_moe import moe_permutation_option
from hp_plugins.runtimes.tp_plans import TP_PLANS
from hp_plugins.runtimes.timing_profiles import FSDP2, HOPPER_CUDNN, TRITON_FLASH


_TRITON_UNLISTED = (f"attention_kernel=triton_flash: FlashAttention in Triton has a rate fitted on "
                    f"{' and '.join(TRITON_FLASH)} devices only (docs/time.md, 'The fsdp2 fit')")
_FLEX_UNLISTED = (f"attention_kernel=flex: FlexAttention has a published rate on {' and '.join(FLEX)} devices only "
                  f"(docs/time.md, 'FlexAttention'); absent is not zero")
# cuDNN's measured FP8 attention speedups per architecture (hp_plugins/runtimes/attention_speedups.py).
CUDNN_ATTENTION_SPEEDUPS = {"blackwell": BLACKWELL_ATTENTION_SPEEDUPS, "hopper": HOPPER_ATTENTION_SPEEDUPS}
# The kernels priced on some devices only: their (forward, backward) rates per architecture, why another is refused.
_KERNELS = {"triton_flash": (TRITON_FLASH, _TRITON_UNLISTED), "flex": (FLEX, _FLEX_UNLISTED)}


def _attention_kernel(runtime: Runtime, value: str) -> Runtime:
    """The runtime's device entries with the attention kernel's rates; every other figure of each entry kept.

    ``sdpa``: FlashAttention-2 (each device's own entry of :data:`FSDP2`); ``cudnn``: cuDNN's measured rates on
    Hopper, the others as ``sdpa``; ``triton_flash``: :data:`TRITON_FLASH` on the devices it states, ``flex``:
    :data:`~hp_plugins.runtimes.flex_attention.FLEX` likewise, the others dropped so that pricing on them is refused
    (``TimingProfile.unlisted_reason``). ``flex`` also states FlexAttention's block size
    (``TimingProfile.attention_block_tokens``): a local layer runs whole blocks of its mask.
    """
    timing = runtime.timing
    current = {d.architecture: d for d in timing.devices}
    reference = {d.architecture: d for d in FSDP2.devices}  # the kernels' own rates: a value set twice starts from them
    # The profile's entries in its order (those an earlier triton_flash dropped come back), then any other entry
    # the runtime states (a runtime derived from fsdp2 may add devices), kept with its own rates.
    order = list(reference) + [a for a in current if a not in reference]
    devices = []
    for architecture in order:
        entry = current.get(architecture) or reference[architecture]
        base = reference.get(architecture, entry)
        if value in _KERNELS:
            if architecture not in _KERNELS[value][0]:
                continue
            forward, backward = _KERNELS[value][0][architecture]
        elif value == "cudnn" and architecture == "hopper":
            forward, backward = HOPPER_CUDNN.attention_forward, HOPPER_CUDNN.attention_backward
        else:
            forward, backward = base.attention_forward, base.attention_backward
        # Only cuDNN's fused attention runs FP8 (Transformer Engine's FP8 attention calls it): its measured FP8
        # speedups under cudnn, none under SDPA's FlashAttention-2, Triton or FlexAttention (docs/precision.md).
        speedups = CUDNN_ATTENTION_SPEEDUPS.get(architecture, ()) if value == "cudnn" else ()
        devices.append(attrs.evolve(entry, attention_forward=forward, attention_backward=backward, attention_speedups=speedups))
    reason = _KERNELS[value][1] if value in _KERNELS else None
    block = FLEX_BLOCK_TOKENS if value == "flex" else None
    return attrs.evolve(runtime, timing=attrs.evolve(timing, devices=tuple(devices), unlisted_reason=reason,
                                                     attention_block_tokens=block),
                        fp8_attention_refusal=fp8_attention_refusal(value))


def fp8_attention_refusal(kernel: str) -> tuple[str, str] | None:
    """``Runtime.fp8_attention_refusal`` under ``attention_kernel`` *kernel*: only cuDNN's fused attention runs FP8
    (Transformer Engine's FP8 attention calls it); SDPA's FlashAttention-2, FlexAttention and Triton run none, so an
    FP8-attention recipe is refused rather than priced with q, k, v the kernel does not quantize (docs/precision.md)."""
    if kernel == "cudnn":
        return None
    return ("$.runtime.options.attention_kernel",
            f"the fsdp2 runtime's attention_kernel={kernel} runs no FP8 attention (only cudnn, Transformer Engine's "
            "cuDNN fused attention, does); set attention_kernel=cudnn or choose a recipe without FP8 attention")


def _fsdp_implementation(runtime: Runtime, value: str) -> Runtime:
    """``fsdp_implementation``: ``fsdp1`` turns the profile's :attr:`~hp_core.specs.timing.TimingProfile.fsdp1_units` on
    (each body layer takes the device's fitted per-unit time once per micro-batch), ``fsdp2`` off."""
    return attrs.evolve(runtime, timing=attrs.evolve(runtime.timing, fsdp1_units=value == "fsdp1"))


@attrs.frozen
class _Overlap:
    """An FSDP overlap option: sets the timing profile's schedule field *schedule* (what the step time reads) and
    the :class:`Fsdp2Points` field *points*, which refuses a stated ``false`` where the step time does not read it
    (below zero 3; ``fsdp_reduce_scatter_overlap`` under PP, ``fsdp_prefetch`` under interleaved 1F1B)."""

    schedule: str
    points: str

    def __call__(self, runtime: Runtime, value: bool) -> Runtime:
        runtime = SetSchedule(self.schedule)(runtime, value)
        return attrs.evolve(runtime, peak_points=attrs.evolve(runtime.peak_points, **{self.points: value}))


_FULLY_SHARD = "torch/distributed/fsdp/_fully_shard (FSDP2)"
OPTIONS = (
    RuntimeOption(
        "attention_kernel", "choice", "sdpa",
        "the fused attention kernel: sdpa (PyTorch scaled_dot_product_attention, FlashAttention-2 on Hopper, as "
        "torchtitan runs it up to torch 2.10), cudnn (cuDNN's fused attention: Transformer Engine's, as NeMo "
        "AutoModel's TE backend, and what SDPA itself dispatches on Hopper and Blackwell from torch 2.11, whose "
        "bundled cuDNN passes the > 9.15 gate of sdp_utils.cpp check_prefer_cudnn_attention: state cudnn there), "
        "triton_flash (FlashAttention in Triton, llm-foundry's attn_impl: triton: FlashAttention-2's rates over "
        "a factor fitted on Hopper and Ampere; refused on other devices) or flex (PyTorch FlexAttention, compiled: "
        "FlashAttention-2's rates times PyTorch's published FlexAttention over FlashAttention-2 throughput, Hopper 1.25 "
        "forward and 1.03 backward, Ampere 0.90 and 0.85; a sliding-window or chunked layer runs every 128 x 128 "
        "block its mask does not wholly empty; refused on other devices). Only cudnn runs FP8 attention: a recipe "
        "running it is refused under the others",
        "torchtitan torchtitan/models/attention.py (F.scaled_dot_product_attention; attn_type flex: flex_attention); "
        "Transformer Engine DotProductAttention (FusedAttention, cuDNN); rates: Shah et al. 2024, FlashAttention-3, "
        "Figures 5-6; SDPA's dispatch on an H200 under torch 2.11: tests/plugins/data/h200_sdpa_attention.json "
        "(cuDNN's kernels, 542-641 TFLOP/s forward, 490-526 backward, against its flash backend's 252-338 and "
        "225-313); llm-foundry llmfoundry/models/layers/attention.py triton_flash_attn_fn and flash_attn_triton.py "
        "(mosaicml/llm-foundry@b2a43a14), rates fitted by benchmarks/fit_fsdp2_sustained.py; FlexAttention: PyTorch "
        "blogs of 2024-08-07 (flexattention, A100) and 2025-03-16 (pytorch-at-gtc, H100) and torch "
        "nn/attention/flex_attention.py _DEFAULT_SPARSE_BLOCK_SIZE (hp_plugins/runtimes/flex_attention.py)",
        _attention_kernel, choices=("sdpa", "cudnn", "triton_flash", "flex"),
    ),
    RuntimeOption(
        "fsdp_implementation", "choice", "fsdp2",
        "fsdp2 (fully_shard, as torchtitan runs it) or fsdp1 (torch FullyShardedDataParallel as Composer runs it: "
        "FlatParameter units, the limit_all_gathers rate limiter, backward_prefetch): each body layer (one FSDP unit) "
        "takes an empirical per-unit time once per micro-batch, 1/3 in forward and 2/3 in backward, not again for a "
        "recompute, fitted on Hopper and Ampere to llm-foundry's MPT rows (hooks, the rate limiter's CPU-GPU "
        "synchronisation, FlatParameter copies, the fp32 gradient cast and divide; not priced from sources); refused "
        "on other devices and below zero 3 (every row it is fitted to shards at zero 3). Memory is priced as fsdp2's either way",
        "torch/distributed/fsdp/fully_sharded_data_parallel.py (FSDP1: limit_all_gathers, backward_prefetch), "
        "_runtime_utils.py (pre- and post-forward and -backward hooks); Composer FSDPConfig (composer/utils/parallelism.py: "
        "limit_all_gathers True, backward_prefetch BACKWARD_POST); figure fitted by benchmarks/fit_fsdp2_sustained.py "
        "(docs/time.md 'The fsdp2 fit')",
        _fsdp_implementation, choices=("fsdp2", "fsdp1"),
    ),
    RuntimeOption(
        "fsdp_prefetch", "bool", True,
        "a layer's parameter all-gather runs while the previous layer computes (FSDP2's implicit prefetch by CPU "
        "run-ahead; set_modules_to_forward_prefetch); false: every gather exposed; refused below parallel.zero 3 (no "
        "layer gathers its parameters) and under interleaved 1F1B (vpp > 1: the multi-stage runtime gathers whole "
        "chunks where its UNSHARD actions put them), where it would change nothing",
        f"{_FULLY_SHARD}: all-gather stream, FSDPModule.set_modules_to_forward_prefetch",
        _Overlap("fsdp_prefetch", "prefetch"),
    ),
    RuntimeOption(
        "fsdp_reduce_scatter_overlap", "bool", True,
        "a layer's gradient reduce-scatter runs during the next layer's backward; false: exposed; refused below "
        "parallel.zero 3 (the data-parallel reduction is priced in buckets) and under pp > 1 (every unit "
        "reduce-scatters once after the stage's last backward, exposed whole), where it would change nothing",
        f"{_FULLY_SHARD}: reduce-scatter stream; torch/distributed/pipelining/stage.py perform_reduce_grad",
        _Overlap("fsdp_reduce_scatter_overlap", "reduce_scatter_overlap"),
    ),
    schedule_option(
        "async_tp", "tp_comm_overlap", default=False,
        description="torchtitan --parallelism.enable_async_tensor_parallel: TP all-gathers and reduce-scatters "
                    "micro-pipelined with their GEMMs (SymmetricMemory), exposed max(comm - GEMMs, comm / tp); a block's "
                    "backward reduce-scatter of its input gradient (a sum of matmuls) is not fused and stays exposed",
        source="torchtitan torchtitan/distributed/tensor_parallel.py maybe_enable_async_tp; "
               "torch/distributed/_symmetric_memory fused_all_gather_matmul, fused_matmul_reduce_scatter; "
               "torch/_inductor/fx_passes/micro_pipeline_tp.py fuse_matmul_reduce_scatter (a single matmul's output only)",
    ),
    elementwise_kernels_option(
        "eager", "torchtitan --compile (training.compile, off by default; torchtitan/train.py applies torch.compile per "
        "block); torch/_inductor fuses pointwise ops into one kernel; NeMo AutoModel's TE backend uses Transformer "
        "Engine's fused RMSNorm"),
    rope_implementation_option(
        "torchtitan/models/llama3/model/model.py apply_rotary_emb (pytorch/torchtitan@0cfbd0b3); transformers "
        "models/llama/modeling_llama.py apply_rotary_pos_emb and rotate_half (5.24.0); NeMo AutoModel "
        "nemo_automodel/components/models/gpt_oss/layers.py _apply_rotary_emb (NVIDIA-NeMo/Automodel@8d9bfb90e); "
        "counted in hp_plugins/kit/eager.py"),
    rope_kernels_option(
        "NeMo AutoModel at NVIDIA-NeMo/Automodel@8d9bfb90e: nemo_automodel/components/models/qwen3_moe/layers.py and "
        "gpt_oss/layers.py apply RoPE with _apply_rotary_emb (eager torch ops; BackendConfig in "
        "nemo_automodel/components/moe/utils.py has no RoPE fusion; BackendConfig.rope_fusion, Transformer Engine's "
        "fused RoPE, came with 3e2390474)"),
    RuntimeOption(
        "moe_gate", "choice", "learned",
        "the MoE router: learned (the model's gate: its gating GEMM and router kernels, tokens taken as routed "
        "uniformly) or fake_balanced (NeMo AutoModel's FakeBalancedGate, a benchmarking stand-in: no router parameter, "
        "GEMM or kernels; the t-th token of a rank's micro-batch goes to the consecutive experts (t k + j) mod E, so a "
        "dispatch sending a token once per rank (DeepEP) reaches only their ranks: Qwen3-30B-A3B over EP 8 one, not the "
        "uniform router's 5.3)",
        "NeMo AutoModel BackendConfig.fake_balanced_gate (nemo_automodel/components/models/common/utils.py) and "
        "FakeBalancedGate (nemo_automodel/components/moe/layers.py; NVIDIA-NeMo/Automodel@89e3a9f, @bb0c0bf, @e458120)",
        trait_setter("moe_fake_balanced_gate", "fake_balanced"), choices=("learned", "fake_balanced"),
    ),
    ep_all_to_all_option(
        "NeMo AutoModel moe dispatcher 'deepep' (examples/llm_benchmark/qwen/qwen3_moe_30b_te_deepep.yaml) or "
        "'hybridep' (nemo_automodel/components/moe/megatron/token_dispatcher.py, NVIDIA-NeMo/Automodel@3746a1a); DeepEP "
        "docs/legacy.md (deepseek-ai/DeepEP@0297fc8); DeepEP docs/README_Hybrid-EP.md (deepseek-ai/DeepEP@41cad94); the "
        "permutation's token side under either: AutoModel's token_dispatcher.py (Megatron-Core's MoEFlexTokenDispatcher, "
        "copied) and torchtitan's torchtitan/distributed/deepep (its _DeepepManager and MoEFlexTokenDispatcher, after "
        "Megatron-LM's) permute the tokens the rank receives after the de-duplicating dispatch",
        library_permutation=(("deepep", None, "received"), ("hybridep", None, "received")),
        permutation_note="under deepep or hybridep the permutation's passes read and write the tokens a rank receives "
                         "(each once per rank it reaches), not its own"),
    # torchtitan's setting (FSDP2's collective_sms); NeMo AutoModel's MoEConfig default is 24: such a run states it.
    hybridep_num_sms_option(FSDP2.collective_kernel_sms("hybridep"),
                            "torchtitan: 16, _NUM_SMS_DISPATCH and _NUM_SMS_COMBINE; NeMo AutoModel: "
                            "MoEConfig.moe_hybridep_num_sms"),
    moe_permutation_option(),
)

__all__ = ["hp_runtimes"]


_LOSS_TRAITS = {"upcast": "upcast_cross_entropy", "fused": "fused_cross_entropy", "chunked": "chunked_cross_entropy",
                "compiled": "compiled_cross_entropy"}


@attrs.frozen
class _Loss:
    """``loss_implementation``: ``upcast`` (logits.float() then cross_entropy), ``fused`` (one kernel keeping bf16
    logits), ``chunked`` (torchtitan's ChunkedCELoss: the head and the loss chunk by chunk, each chunk's backward at
    once) or ``compiled`` (upcast under torch.compile): the trait of that name, the others dropped."""

    def __call__(self, runtime: Runtime, value: str) -> Runtime:
        traits = runtime.traits - set(_LOSS_TRAITS.values())
        return attrs.evolve(runtime, traits=traits | {_LOSS_TRAITS[value]})


@attrs.frozen
class _ReduceDtype:
    """``reduce_dtype``: ``MixedPrecisionPolicy.reduce_dtype``. torch ``_fsdp_collectives.py`` ``foreach_reduce``
    allocates the reduce-scatter input in the reduce dtype, reduce-scatters it, and casts the output back to the
    sharded parameter's dtype (fp32): so bf16 halves the reduce-scatter's bytes and its input buffer
    (``PrecisionSpec.reduce_bytes``), and leaves the fp32 sharded gradients as they are (``grad_bytes``)."""

    def __call__(self, runtime: Runtime, value: str) -> Runtime:
        # Stated either way: fp32 reduces in 4 bytes even where the parameters are bf16 (FSDP2 drops the reduce
        # dtype only when it equals the parameters' compute dtype, _fsdp_param.py FSDPParam.init_dtype_attrs).
        reduce_bytes = 4 if value == "fp32" else 2
        return attrs.evolve(runtime, precision=attrs.evolve(runtime.precision, reduce_bytes=reduce_bytes))


@attrs.frozen
class _Points:
    """Sets one field of the runtime's :class:`Fsdp2Points`."""

    field: str
    true_value: str | None = None  # a choice option: the value that sets the field True

    def __call__(self, runtime: Runtime, value: object) -> Runtime:
        flag = value == self.true_value if self.true_value is not None else value
        return attrs.evolve(runtime, peak_points=attrs.evolve(runtime.peak_points, **{self.field: flag}))


def _replicate(runtime: Runtime, value: int) -> Runtime:
    """``hsdp_replicate``: the peak points shard over the shard group (:class:`Fsdp2Points` ``replicate``) and the
    step time runs the per-layer collectives within it and all-reduces each reduce-scatter's output across the
    replicate group (:attr:`~hp_core.specs.overlap.OverlapSchedule.fsdp_replicate`)."""
    runtime = attrs.evolve(runtime, peak_points=attrs.evolve(runtime.peak_points, replicate=value))
    timing = runtime.timing
    return attrs.evolve(runtime, timing=attrs.evolve(timing, schedule=attrs.evolve(timing.schedule, fsdp_replicate=value)))


def _tp_plan(runtime: Runtime, value: str) -> Runtime:
    """``tp_plan``: a named plan (:data:`~hp_plugins.runtimes.tp_plans.TP_PLANS`) sets the head's and the loss's traits
    and, through the peak points, which ``parallel.sp`` it runs; ``custom``: as ``tp_head_plan`` and ``loss_parallel`` say."""
    points = attrs.evolve(runtime.peak_points, tp_plan=value)
    if value == "custom":
        return attrs.evolve(runtime, peak_points=points)
    if {"replicated_vocab", "gathered_logits"} & runtime.traits:
        raise ValueError(f"the plan {value!r} states the head and the loss: leave tp_head_plan and loss_parallel unset")
    plan = TP_PLANS[value]
    traits = runtime.traits | {t for t, on in (("replicated_vocab", plan.replicated_vocab),
                                                ("gathered_logits", plan.gathered_logits)) if on}
    return attrs.evolve(runtime, traits=traits, peak_points=points)


_TT = "torchtitan/models/llama3/model/model.py; torchtitan/components/loss.py"
_MEMORY_OPTIONS = (
    RuntimeOption(
        "norm_implementation", "choice", "transformers",
        "transformers: RMSNorm upcasts its input to fp32 and keeps that copy and the inverse root (4h + 4 bytes per "
        "token per norm beyond a fused norm, q/k norms too; 6h + 4 where the family's norm scales by its weight in "
        "fp32, rmsnorm_fp32_weight; a transformers router's fp32 input copy); fused: one kernel keeping its input "
        "and output",
        "transformers models/llama/modeling_llama.py LlamaRMSNorm.forward (measured: torch census); "
        f"torch.nn.RMSNorm fused kernel ({_TT})",
        trait_setter("fp32_norm_copy", "transformers"),
        choices=("transformers", "fused"),
    ),
    RuntimeOption(
        "loss_implementation", "choice", "upcast",
        "upcast: logits.float() then cross_entropy (forward holds bf16 and fp32 logits beside the fp32 log-softmax); "
        "fused: a fused cross-entropy keeping the bf16 logits overwritten by their gradient; chunked: torchtitan's "
        f"ChunkedCELoss with its default num_chunks {CHUNKED_LOSS_CHUNKS}: the head's GEMM and the upcast loss run "
        "chunk by chunk along the sequence, each chunk's backward at once in the forward (no GEMM recomputed): nothing "
        "of the logits kept, only the hidden states' gradient in the compute dtype; the forward holds one chunk's "
        "bf16 logits, fp32 log-softmax and two fp32 gradients, an fp32 buffer of the hidden states' gradient and the "
        "head's whole gradient in the reduce dtype; time as upcast plus the loop's copies. Other num_chunks: not "
        "stated; compiled: upcast under torch.compile (compile.components ['loss'], torchtitan's default from "
        "08b8b244f; training.compile from bbb1b616e): keeps the bf16 logits, two fp32 per-row statistics and the "
        "targets, no fp32 copy, its backward the logits' bf16 gradient beside them (measured: "
        "benchmarks/count_compiled_loss.py); chunked under compile is priced as eager; chunked is refused under pp > 1 "
        "(the head's backward runs in the last stage's forward there, which hp's schedules do not price)",
        f"transformers loss/loss_utils.py ForCausalLMLoss; {_TT} cross_entropy_loss, ChunkedCELoss and "
        "GradAccumulator (pytorch/torchtitan@6b9602339); torch/distributed/fsdp/_fully_shard/_fsdp_param.py "
        "to_accumulated_grad_if_needed; torchtitan/components/loss.py build_cross_entropy_loss (torch.compile of the "
        "loss, at 08b8b244f); torch/_functorch/partitioners.py (what the compiled graph saves)",
        _Loss(), choices=("upcast", "fused", "chunked", "compiled"),
    ),
    optimizer_implementation_option(),
    RuntimeOption(
        "reduce_dtype", "choice", "fp32",
        "MixedPrecisionPolicy(reduce_dtype=...): the gradient reduce-scatter and its input buffer in fp32 (torchtitan's "
        "mixed_precision_reduce default, Composer's MP mode DEFAULT) or bf16 (Composer's PURE: reduce_dtype the "
        "parameters' bf16), half the bytes; the sharded gradients stay fp32 either way",
        "torch/distributed/fsdp/_fully_shard/_fsdp_api.py MixedPrecisionPolicy.reduce_dtype; _fsdp_collectives.py "
        "foreach_reduce (reduce_scatter_input in reduce_dtype, the output cast back to the parameter's dtype); "
        "torchtitan training.mixed_precision_reduce (default float32); Composer composer/distributed/mosaic_parallelism.py "
        "get_mixed_precision (mosaicml/composer@6405188)",
        _ReduceDtype(), choices=("fp32", "bf16"), precision_fields=("reduce_bytes",),
    ),
    RuntimeOption(
        "zero_grad_set_to_none", "bool", True,
        "optimizer.zero_grad(set_to_none=True) (PyTorch's default): no gradient is held in a step's first forward; "
        "false is refused below parallel.zero 3 (the planner's default points: it would change nothing)",
        "torch/optim/optimizer.py Optimizer.zero_grad",
        _Points("set_to_none"),
    ),
    RuntimeOption(
        "hsdp_replicate", "int", 1,
        "HSDP: fully_shard over a (replicate, shard) mesh (zero 3; dividing dp): parameters, gradients and optimizer "
        "states are sharded over dp * cp / hsdp_replicate ranks, which run the per-layer gathers and reduce-scatters; "
        "each layer's reduce-scatter output is then all-reduced across the hsdp_replicate ranks holding the same shard, "
        "in the reduce dtype, on its own stream after the reduce-scatter (time: group hsdp, serialised behind the "
        "reduce-scatter; under pp > 1 once per step, group hsdp_step; 1: plain FSDP)",
        "torch/distributed/fsdp/_fully_shard/_fully_shard.py fully_shard (2-D mesh); _fsdp_collectives.py foreach_reduce "
        "(all_reduce of the reduce-scatter output on the replicate group); torchtitan data_parallel_replicate_degree",
        _replicate, minimum=1,
    ),
    RuntimeOption(
        "cpu_offload", "bool", False,
        "offload_policy=CPUOffloadPolicy(): sharded parameters, gradients and optimizer states in host memory; the device "
        "holds the gathered parameters and activations; refused below parallel.zero 3 (no fully_shard unit is priced: "
        "it would change nothing); memory only: the step time prices neither the copies of the shards and gradients "
        "over the host link nor the optimizer step on the host",
        "torch/distributed/fsdp/_fully_shard/_fsdp_api.py CPUOffloadPolicy; torchtitan training.enable_cpu_offload",
        _Points("cpu_offload"),
    ),
    RuntimeOption(
        "reshard_after_forward_to", "int", 0,
        "fully_shard(reshard_after_forward=n): after forward each layer keeps its bf16 parameters sharded over n ranks "
        "until its backward (0: parallel.reshard_after_forward says, all freed or all kept; left out, freed at pp 1 and kept "
        "under pp > 1, torchtitan's default); n must be a factor of the FSDP shard group (dp * cp / hsdp_replicate), "
        "as torch requires, and n equal to it reshards fully, priced as 0 (torch takes it as True: no post-forward "
        "copy); below it refused with tp or ep > 1 and with a recipe that casts the all-gather, which torch cannot "
        "reshard so (the whole group under ep > 1 only where it is the experts' shard group too); refused where the "
        "layout does not reshard after forward, and where it would change nothing: below parallel.zero 3 (nothing "
        "gathered) and 1 (priced as 0; torch takes an int 1 as False: state parallel.reshard_after_forward false)",
        "torch/distributed/fsdp/_fully_shard/_fully_shard.py fully_shard (reshard_after_forward: bool | int); "
        "_fsdp_init.py _get_post_forward_mesh_info (a factor of the shard mesh size; 1 as False, the size as True); "
        "_fsdp_param.py to_sharded_post_forward, all_gather_inputs (NotImplementedError, torch 2.13)",
        _Points("reshard_to"), minimum=0,
    ),
    RuntimeOption(
        "reshard_last_layer_after_forward", "bool", True,
        "false: the last decoder layer keeps its gathered parameters from its forward to the end of its backward, the "
        "others resharding (torchtitan's default from April 2024 to July 2025, 'since FSDP would prefetch it "
        "immediately'); above it in backward (the head's and the loss's) no all-gather output is alive; refused under "
        "pp > 1, and where it would change nothing: below parallel.zero 3 (nothing gathered) and with "
        "parallel.reshard_after_forward false (every layer kept gathered); true: it reshards as "
        "parallel.reshard_after_forward and reshard_after_forward_to say",
        "torchtitan torchtitan/parallelisms/parallelize_llama.py apply_fsdp at 9dec370 (reshard_after_forward = "
        "int(layer_id) < len(model.layers) - 1; from c22d1a8, removed by 83e6941); torch/distributed/fsdp/_fully_shard/"
        "_fsdp_param_group.py FSDPParamGroup.unshard (nothing gathered for gathered parameters)",
        _Points("reshard_last_layer"),
    ),
    RuntimeOption(
        "embedding_unit", "choice", "root",
        "root: the embedding in the root unit, gathered from the forward to the end of backward (the tracker's cases, "
        "torchtitan before 83e6941); own: a unit of its own with the layers' reshard rule (torchtitan from 83e6941, "
        "2025-07-28): at pp 1 with reshard_after_forward its gathered copy is freed after its forward and gathered "
        "again in backward, prefetched during the lowest layer's (whose point holds its all-gather output in place "
        "of a layer's); without resharding (pp > 1) priced as root; refused beside reshard_after_forward_to > 1 below "
        "the shard group (equal to it, torch's True, is accepted), "
        "reshard_last_layer_after_forward false and below parallel.zero 3 (nothing gathered: it would change nothing). "
        "The final norm and head stay in the root (torchtitan's own unit for them, never resharded, is not followed); a "
        "head tied to the embedding (one unit with the norm and head in torchtitan, resharded only under the policy "
        "always: fsdp.py lines 177-189 at bcc09297a): state root",
        "torchtitan torchtitan/distributed/fsdp.py apply_fsdp_to_decoder lines 191-196 at bcc09297a "
        "(fully_shard(model.tok_embeddings, reshard_after_forward=reshard_after_forward), the policy's "
        "get_fsdp_reshard_after_forward_policy: not pp_enabled by default; from 83e6941, "
        "torchtitan/models/llama3/infra/parallelize.py apply_fsdp); torch/distributed/fsdp/_fully_shard/_fsdp_state.py "
        "_lazy_init (only the root kept gathered); _fsdp_param_group.py FSDPParamGroup.post_forward (reshard), "
        "pre_backward and _backward_prefetch (the unit before it in post_forward_order) at torch cf30153",
        _Points("embedding_unit"), choices=("root", "own"),
    ),
    RuntimeOption(
        "tp_head_plan", "choice", "vocab_parallel",
        "under TP, the embedding (RowwiseParallel) and the head (ColwiseParallel) split over the vocabulary; replicated: "
        "a plan without them, both whole on every TP rank",
        "torchtitan/models/llama3/infra/parallelize.py apply_tp (tok_embeddings, output)",
        trait_setter("replicated_vocab", "replicated"), choices=("vocab_parallel", "replicated"),
    ),
    RuntimeOption(
        "loss_parallel", "bool", True,
        "under TP with a vocabulary-parallel head, the loss runs on each rank's vocabulary shard (loss_parallel()); false: "
        "the logits are all-gathered first (ColwiseParallel(output_layouts=Replicate())) and the loss sees the whole vocabulary",
        "torchtitan parallelize.py apply_tp (enable_loss_parallel); torch/distributed/tensor/parallel/loss.py loss_parallel",
        trait_setter("gathered_logits", when=False),  # false: the logits gathered whole
    ),
    RuntimeOption(
        "tp_plan", "choice", "custom",
        "a named TP plan (docs/runtimes.md): torchtitan_llama3 (vocabulary-parallel embedding and head, loss parallel, "
        "sequence-parallel norms: needs parallel.sp true), vocab_gathered (logits all-gathered, no SP), replicated_head "
        "(embedding and head whole on every TP rank, no SP); custom: as tp_head_plan and loss_parallel say",
        "torchtitan/models/llama3/infra/parallelize.py apply_tp; hp_plugins/runtimes/tp_plans.py",
        _tp_plan, choices=("custom", *TP_PLANS),
    ),
)


@hookimpl
def hp_runtimes():
    yield Runtime(
        name="fsdp2",
        precision=PrecisionSpec(param_bytes=4, grad_bytes=4, master_param_bytes=0, optimizer="adamw", moment_bytes=4,
                                activation_bytes=2, softmax_bytes=4, logits_bytes=4, reduce_bytes=4),
        attention="flash",
        zero=3,
        vocab_pad_multiple=1,
        reserve_bytes=CUDA_CONTEXT_BYTES,  # the CUDA context (hp_plugins/runtimes/reserve.py)
        overhead_bytes=0,
        blas_workspaces=BlasWorkspaces("every"),  # every GEMM runs through torch (hp_core/blas_workspaces.py)
        timing=FSDP2,
        traits=frozenset({"fp32_norm_copy", "upcast_cross_entropy", "moe_tp_without_sp", "torchtitan_op_sac"}),
        # torchtitan activation checkpointing: mode "full" (whole blocks), "selective" every k-th block
        # (per-layer full), or op-level SAC, stated as these switches on every layer and priced for a dense
        # layer as the policy keeps (torchtitan_op_sac trait, hp_plugins/kit/op_sac.py).
        recompute_modules={"op_sac": OP_SAC_SWITCHES},
        description="PyTorch FSDP2 / torchtitan: fp32 sharded params, bf16 gathered compute, fp32 reduce, AdamW; "
                    "peak points at the loss's forward, in backward and at the step",
        zero_levels=(3,),  # fully_shard: parameters, gradients and optimizer states sharded
        # Where the layout states no parallel.reshard_after_forward: torchtitan's fsdp_reshard_after_forward
        # "default", reshard_after_forward = not pp_enabled ("for PP, by default do not reshard after forward to avoid
        # per-microbatch all-gathers": torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy at
        # b5bcd76c6; inline in torchtitan/parallelisms/parallelize_llama.py apply_fsdp at 9dec370).
        reshard_after_forward=True,
        pipeline_reshard_after_forward=False,
        peak_points=Fsdp2Points(),
        options=(*OPTIONS, *_MEMORY_OPTIONS, cublas_workspace_option()),
        fp8_attention_refusal=fp8_attention_refusal("sdpa"),  # the attention_kernel option's default
    )
