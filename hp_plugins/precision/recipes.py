"""The recipes Transformer Engine / Megatron-Core and torchao / torchtitan offer (docs/precision.md).

Sources, read at the commits docs/precision.md names:

* Transformer Engine ``transformer_engine/common/recipe/__init__.py``: ``DelayedScaling``
  (``fp8_format`` HYBRID = E4M3 forward, E5M2 gradients; ``amax_history_len``),
  ``Float8CurrentScaling``, ``Float8BlockScaling`` (1x128 activations and gradients, 128x128
  weights, fp32 scales), ``MXFP8BlockScaling`` (E4M3, 32-element blocks, E8M0 scales),
  ``NVFP4BlockScaling`` (E2M1, 16-element blocks, E4M3 block scales and an fp32 tensor scale).
* TE ``transformer_engine/pytorch/module/linear.py`` ``_Linear.forward``: the quantized input
  is what the layer saves for backward, its row-wise data discarded ("not needed in backward
  pass"), one copy; a sequence-parallel input is quantized before ``gather_along_first_dim``
  (the all-gather moves FP8); the FP8 weight is kept in the module's ``_fp8_workspaces`` and
  re-quantized only when ``is_first_microbatch`` is true (Megatron-Core passes it), so the
  quantized weight is cached across micro-batches. Its row-wise and column-wise usages are
  two tensors on Hopper and for block scalings, one on Blackwell for per-tensor FP8:
  ``common/transformer_engine.cpp`` ``nvte_is_non_tn_fp8_gemm_supported`` holds for compute
  capability 10.x-11.x and 13.0+ (B200, B300), and ``pytorch/csrc/quantizer.cpp``
  ``Float8Quantizer::create_tensor`` / ``Float8CurrentScalingQuantizer::create_tensor`` then
  keep the data for the column-wise usage too and allocate no transpose
  (``with_transpose = columnwise_usage && !is_non_tn_fp8_gemm_supported``);
  ``Float8BlockQuantizer``, ``MXFP8Quantizer`` and ``NVFP4Quantizer`` allocate row-wise and
  column-wise data with their own scales on every device.
* Megatron-LM ``megatron/training/arguments.py`` ``_add_transformer_engine_args``:
  ``--fp8-format {e4m3,hybrid}``, ``--fp8-recipe {tensorwise,delayed,mxfp8,blockwise}``,
  ``--fp8-amax-history-len`` (default 1), ``--fp8-amax-compute-algo``, ``--fp8-param-gather``
  ("keep the compute param in fp8 ... perform the param all-gather in fp8"),
  ``--fp4-format e2m1 --fp4-recipe nvfp4``.
* torchao ``torchao/float8/float8_linear.py`` (``matmul_with_hp_or_float8_args``: the
  compute-dtype input and weight are saved and re-cast in backward) and torchtitan
  ``docs/float8.md``: ``--model.converters quantize.linear.float8``, tensorwise with
  ``enable_fsdp_float8_all_gather`` (weights cast to float8 before the FSDP all-gather),
  ``recipe_name rowwise`` (no float8 all-gather).
* torchao's rowwise casts, read at pytorch/ao@36027d8 (2026-08-21). ``float8/config.py``
  ``Float8LinearConfig.from_recipe_name`` (lines 334-352): ``rowwise`` gives the input, the weight and the output
  gradient ``CastConfig(scaling_granularity=ScalingGranularity.AXISWISE, target_dtype=e4m3_dtype)`` and
  ``round_scales_to_power_of_2=True``, the per-GEMM defaults kept (``gemm_config_output`` fast accumulation, the
  two backward GEMMs not). ``float8/float8_linear.py`` ``matmul_with_hp_or_float8_args`` runs six casts per linear
  layer and step, each ``hp_tensor_to_float8_dynamic`` with its own axis (``get_maybe_axiswise_dim``): forward
  the input along dim -1 (line 56) and the weight along dim 0 (line 73); backward the output gradient along dim
  -1 for the input gradient (line 113), the weight along dim -1 (line 131), the output gradient again along dim 0
  for the weight gradient (line 167) and the saved compute-dtype input along dim 0 (line 185). Each cast first
  computes its scales (``float8_scaling_utils.py`` ``tensor_to_scale``; ``float8_utils.py`` line 69
  ``torch.amax(torch.abs(x), dim=axiswise_dim, keepdim=True)``) and then scales and casts: two reads of the
  compute-dtype tensor (``quantize_passes`` 2, as tensorwise). Under tensorwise the output gradient's two casts
  are the same computation (one scale, ``axiswise_dim`` None), one cast under torch.compile; under rowwise they
  reduce along different axes, two casts, each its own read (``cast_per_usage``). The input's and the weight's
  two casts are one in forward and one in backward, as ``saved_input`` ``compute`` prices them already.
  ``float8/float8_ops.py`` ``addmm_float8_unwrapped`` (lines 53-59, 84-85): row-wise scales without fast
  accumulation (the two backward GEMMs) run the per-tensor kernel with unit scales and then
  ``output *= post_inverse_scale`` ("hoping Inductor will be able to fuse it"), an elementwise pass over the
  input gradient and the weight gradient in bf16; no recipe field states a pass over a GEMM's output, so hp
  does not price it.
* Tensor parallelism under torchao float8 (pytorch/torchtitan
  ``torchtitan/models/llama3/parallelize_llama.py`` at 820504e, ``parallelize_llama`` and
  ``apply_tp``; pytorch/ao ``torchao/float8/float8_tensor_parallel.py`` at 6243040):
  ``enable_float8_tensorwise_tp = enable_float8_linear and not float8_is_rowwise``, and then the
  TP plan is ``PrepareFloat8ModuleInput`` for the attention and feed-forward inputs (the
  sequence-sharded norm output cast to float8 e4m3 and then redistributed ``Shard(1)`` to
  ``Replicate()``: the forward all-gather moves float8), ``Float8ColwiseParallel`` for wq, wk,
  wv, w1, w3 and ``Float8RowwiseParallel`` for wo and w2, whose output is reduce-scattered in
  bf16 and then passed through ``NoopFwToFloat8BwDynamic`` (a no-op forward; backward casts the
  gradient to float8 e5m2 before the reduce-scatter's backward all-gather: the backward all-gather
  moves float8). The input gradient's reduce-scatter stays bf16. Rowwise recipes get the plain
  ``ColwiseParallel`` / ``RowwiseParallel`` plan: bf16 gathers. (``float8_ops.py``
  ``allgather_fp8`` gathers a float8 tensor's data with its tensorwise scale.)
* What torchao saves for backward under that TP plan: ``matmul_with_hp_or_float8_args`` saves its
  input as it arrives (``ctx.save_for_backward(input_hp, weight_hp_t)``; backward uses a
  float8 input as is, ``tensor_already_casted_to_fp8``). Under float8 TP every linear layer's
  input arrives as a float8 tensor (gathered by ``PrepareFloat8ModuleInput``, cast by
  ``Float8RowwiseParallel._prepare_input_fn``), so the float8 input is what is saved; without TP
  (FSDP only) it arrives in bf16 and the bf16 input is saved. ``saved_input`` is one value per
  recipe, so ``torchao-float8-tensorwise`` states ``compute``, true without TP (the FSDP-only
  runs and their measured memory); under TP it over-states the saved inputs (docs/precision.md).
* torchao's MX training, read at pytorch/ao e4e681be6 (the build of torchao's B200 table, docs/precision.md):
  ``torchao/prototype/mx_formats/config.py`` ``MXLinearConfig.from_recipe_name``: ``mxfp8_cublas`` and
  ``mxfp8_cublas_rceil`` are E4M3 elements for the input, the weight and the output gradient alike, 32-element
  blocks, the cuBLAS GEMM and the CUDA dim1 cast kernel; they differ only in how a block's E8M0 scale is rounded
  (``ScaleCalculationMode`` FLOOR or RCEIL), which hp does not price. ``mx_formats/mx_linear.py`` ``mx_mm``: forward
  saves the compute-dtype input and weight (``ctx.save_for_backward(input_hp, weight_hp)``) and casts both along
  dim0 (``MXTensor.to_mx``); backward casts the output gradient along dim0 and, with a separate kernel
  (``mxfp8_quantize_cuda(..., rowwise=False, colwise=True)``), along dim1, and the weight and the saved input along
  dim1: six casts per linear layer and step, each its own read of the compute-dtype tensor, the weight's two made
  per forward and backward (nothing cached). ``mx_ops.py``: the GEMMs are ``torch._scaled_mm`` with
  ``float8_e8m0fnu`` block scales, cuBLAS's MXFP8 block-scaled GEMM (what Transformer Engine's MXFP8 GEMMs run).
  torchtitan ``torchtitan/components/quantization/mx.py`` at 6fc499f (the table's build): the ``mx`` converter
  asserts compute capability 10.0 ("MXFP8 is only supported on SM100"), swaps every ``nn.Linear`` whose dimensions
  are multiples of 16 and whose name matches no ``filter_fqns`` entry (``config/job_config.py`` ``MX.filter_fqns``
  default ``["output"]``: the output head stays bf16, as hp keeps it); FSDP2 gathers the bf16 weights (no MX
  all-gather). The linear converter swaps ``nn.Linear`` modules only, so a routed expert's grouped GEMM stays bf16
  under it (``gemms`` ``linears``).
* torchao's MXFP8 grouped GEMM for MoE experts, read at pytorch/ao 838dceb (the commit whose
  ``prototype/moe_training/README.md`` printed the Llama4 rows, docs/precision.md):
  ``moe_training/scaled_grouped_mm.py`` ``_MXFP8GroupedMM`` saves the bf16 token rows and expert weights
  (``ctx.save_for_backward(A, B_t, offs, ...)``) and runs the same six casts as ``mx_mm``: forward the rows and
  the weights along the contraction dim (``to_mx``), backward the output gradient along dim0 (``to_mx``) and dim1
  (the CUDA dim1 kernel), the weights along the other dim (``mxfp8_quantize_cuda_3d``) and the saved rows along
  dim1; its GEMMs are ``torch._scaled_grouped_mm`` with E8M0 scales. torchtitan ``components/quantization/mx.py``
  at d880de2 (2025-10-12): ``MXGroupedMMConverter`` (``quantize.grouped_mm.mx``) converts the expert parameters
  whose names match ``quantize.grouped_mm.mx.fqns`` (default none; the llama4 ``debug_model.toml``
  states ``["experts"]``), aligns each expert's token group to 32 rows (``set_token_group_alignment_size_m``) and
  asserts compute capability 10.0 too.
"""

from __future__ import annotations

import attrs

from hp_core.markers import hookimpl
from hp_core.precision_recipes import GemmOperand, PrecisionRecipe

__all__ = ["RECIPES", "hp_precision_recipes"]

_TE = "Transformer Engine 2.x (common/recipe/__init__.py, pytorch/module/linear.py) under Megatron-LM"
# Transformer Engine's GEMMs accumulate FP8 partial sums with split accumulation in the input- and weight-gradient
# GEMMs, fast in the forward: pytorch/module/base.py _2X_ACC_FPROP = False, _2X_ACC_DGRAD = _2X_ACC_WGRAD = True (since
# 2022), which module/linear.py overrides only by a recipe's fp8_gemm_* MMParams (Float8CurrentScaling: False, True,
# True; Float8BlockScaling: True in all three, asserted). torchao's Float8LinearConfig likewise for both recipes
# (torchao/float8/config.py: gemm_config_output use_fast_accum=True, gemm_config_grad_input and gemm_config_grad_weight
# the default False).
_BACKWARD_SPLIT = ("dgrad", "wgrad")
# torchtitan's float8 converter leaves only the linears filter_fqns names in bf16, none by default (config/job_config.py
# Float8Linear at pytorch/torchtitan@e347b1e5e: filter_fqns default_factory=list; its llama3 tomls set ["output"]); hp
# prices the output head in bf16 under every recipe, so the exported flags keep it there.
_HEAD_FILTER = ("--quantize.linear.float8.filter_fqns", "output")
_TE_MEMORY = dict(saved_input="quantized", weight_copies=2, cache_weights=True, tp_gather=True,
                  split_accumulator=_BACKWARD_SPLIT)
# Per-tensor FP8 under TE: one tensor serves both usages where FP8 GEMMs run in any layout (module docstring).
_TE_PER_TENSOR = dict(_TE_MEMORY, one_copy_architectures=("blackwell",))
# Transformer Engine runs MXFP8 and NVFP4 from compute capability 10.0 only (check_mxfp8_support, "Device compute
# capability 10.0 or higher required for MXFP8 execution", and _compute_nvfp4_support, transformer_engine/pytorch/
# quantization.py): a Hopper or Ampere device is refused, not priced.
_TE_BLACKWELL = ("blackwell",)


def _same(fmt: str, scaling: str) -> dict[str, GemmOperand]:
    operand = GemmOperand(fmt, scaling)
    return {"weights": operand, "activations": operand, "gradients": operand}


RECIPES = (
    PrecisionRecipe(
        name="bf16", description="no quantized GEMM: every GEMM and tensor in the compute dtype",
        source="bf16 mixed precision (Megatron-LM --bf16, FSDP2 MixedPrecisionPolicy param_dtype=bfloat16)",
    ),
    PrecisionRecipe(
        name="fp8-delayed",
        description="FP8 per-tensor delayed scaling, E4M3 forward / E5M2 gradients, amax history 1024",
        source=f"{_TE}: DelayedScaling(fp8_format=HYBRID, amax_history_len=1024); --fp8-format hybrid --fp8-recipe delayed",
        weights=GemmOperand("e4m3", "tensor_delayed"), activations=GemmOperand("e4m3", "tensor_delayed"),
        gradients=GemmOperand("e5m2", "tensor_delayed"), amax_history=1024, quantize_passes=1, **_TE_PER_TENSOR,
        flags={"megatron": ("--fp8-format", "hybrid", "--fp8-recipe", "delayed", "--fp8-amax-history-len", "1024",
                            "--fp8-amax-compute-algo", "max")},
    ),
    PrecisionRecipe(
        name="fp8-current",
        description="FP8 per-tensor current scaling, E4M3 forward / E5M2 gradients",
        source=f"{_TE}: Float8CurrentScaling(fp8_format=HYBRID); --fp8-format hybrid --fp8-recipe tensorwise",
        weights=GemmOperand("e4m3", "tensor_current"), activations=GemmOperand("e4m3", "tensor_current"),
        gradients=GemmOperand("e5m2", "tensor_current"), quantize_passes=2, **_TE_PER_TENSOR,
        flags={"megatron": ("--fp8-format", "hybrid", "--fp8-recipe", "tensorwise")},
    ),
    PrecisionRecipe(
        name="fp8-blockwise",
        description="FP8 blockwise scaling (DeepSeek-V3): 1x128 activations and gradients, 128x128 weights, fp32 scales",
        source=f"{_TE}: Float8BlockScaling(fp8_format=E4M3); --fp8-format e4m3 --fp8-recipe blockwise",
        weights=GemmOperand("e4m3", "block_128x128"), activations=GemmOperand("e4m3", "block_1x128"),
        gradients=GemmOperand("e4m3", "block_1x128"), quantize_passes=1,
        **dict(_TE_MEMORY, split_accumulator=("fprop", "dgrad", "wgrad")),
        flags={"megatron": ("--fp8-format", "e4m3", "--fp8-recipe", "blockwise")},
    ),
    PrecisionRecipe(
        name="mxfp8",
        description="MXFP8 (Blackwell): E4M3 in 32-element blocks with E8M0 scales, every operand",
        source=f"{_TE}: MXFP8BlockScaling(fp8_format=E4M3); --fp8-format e4m3 --fp8-recipe mxfp8",
        **_same("mxfp8", "mx_32"), quantize_passes=1, **_TE_MEMORY, architectures=_TE_BLACKWELL,
        flags={"megatron": ("--fp8-format", "e4m3", "--fp8-recipe", "mxfp8")},
    ),
    PrecisionRecipe(
        name="nvfp4",
        description="NVFP4 (Blackwell): E2M1 in 16-element blocks with E4M3 scales and an fp32 tensor scale",
        source=f"{_TE}: NVFP4BlockScaling; --fp4-format e2m1 --fp4-recipe nvfp4",
        **_same("nvfp4", "nvfp4_16"), quantize_passes=2, **_TE_MEMORY, architectures=_TE_BLACKWELL,
        flags={"megatron": ("--fp4-format", "e2m1", "--fp4-recipe", "nvfp4")},
    ),
    PrecisionRecipe(
        name="fp8-megatron-param-gather",
        description="fp8-current with FP8 parameters: the parameter all-gather and the compute weights in FP8",
        source=f"{_TE}: Float8CurrentScaling; --fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather",
        weights=GemmOperand("e4m3", "tensor_current"), activations=GemmOperand("e4m3", "tensor_current"),
        gradients=GemmOperand("e5m2", "tensor_current"), param_gather="stored", quantize_passes=2, **_TE_PER_TENSOR,
        flags={"megatron": ("--fp8-format", "hybrid", "--fp8-recipe", "tensorwise", "--fp8-param-gather")},
    ),
    PrecisionRecipe(
        name="fp8-delayed-param-gather",
        description="fp8-delayed with FP8 parameters: the parameter all-gather and the compute weights in FP8",
        # NeMo's fp8_params (NeMo 1.0 and 2.0 under Megatron-Core's distributed optimizer) sets Megatron-Core's
        # fp8_param_gather with TE's DelayedScaling, as NVIDIA's DGX Cloud recipes ran (docs/precision.md).
        source=f"{_TE}: DelayedScaling(fp8_format=HYBRID, amax_history_len=1024); --fp8-format hybrid --fp8-recipe delayed "
               "--fp8-param-gather",
        weights=GemmOperand("e4m3", "tensor_delayed"), activations=GemmOperand("e4m3", "tensor_delayed"),
        gradients=GemmOperand("e5m2", "tensor_delayed"), amax_history=1024, param_gather="stored", quantize_passes=1,
        **_TE_PER_TENSOR,
        flags={"megatron": ("--fp8-format", "hybrid", "--fp8-recipe", "delayed", "--fp8-amax-history-len", "1024",
                            "--fp8-amax-compute-algo", "max", "--fp8-param-gather")},
    ),
    PrecisionRecipe(
        name="mxfp8-param-gather",
        description="mxfp8 with MXFP8 parameters, all-gathered through the gradient buffer in its dtype",
        # Megatron-Bridge's bf16_with_mxfp8_mixed (src/megatron/bridge/training/mixed_precision.py at v0.3.0 to v0.6.0:
        # fp8_param_gather and reuse_grad_buf_for_mxfp8_param_ag true). Megatron-Core keeps each quantized weight as a
        # TE MXFP8 tensor (no bf16 model weight), and its distributed optimizer gathers the weights through the gradient
        # buffer, in that buffer's dtype, then casts each gathered weight into its MXFP8 storage and zeroes the buffer
        # (distributed/param_and_grad_buffer.py _post_param_sync, optimizer/distrib_optimizer.py
        # _copy_main_params_to_param_buffer at NVIDIA/Megatron-LM@d98e8a6): param_gather "gradient_buffer".
        source=f"{_TE}: MXFP8BlockScaling(fp8_format=E4M3); --fp8-format e4m3 --fp8-recipe mxfp8 --fp8-param-gather "
               "--reuse-grad-buf-for-mxfp8-param-ag",
        **_same("mxfp8", "mx_32"), param_gather="gradient_buffer", quantize_passes=1, **_TE_MEMORY, architectures=_TE_BLACKWELL,
        flags={"megatron": ("--fp8-format", "e4m3", "--fp8-recipe", "mxfp8", "--fp8-param-gather",
                            "--reuse-grad-buf-for-mxfp8-param-ag")},
    ),
    PrecisionRecipe(
        name="torchao-float8-tensorwise",
        description="torchao float8 tensorwise (torchtitan): E4M3 forward / E5M2 gradients, float8 FSDP and TP all-gathers",
        source=("torchao float8/float8_linear.py, float8/float8_tensor_parallel.py and torchtitan docs/float8.md, "
                "models/llama3/parallelize_llama.py: --model.converters quantize.linear.float8 "
                "--quantize.linear.float8.enable_fsdp_float8_all_gather; under TP the float8 TP plan"),
        weights=GemmOperand("e4m3", "tensor_current"), activations=GemmOperand("e4m3", "tensor_current"),
        # tp_gather: torchtitan's float8 TP plan all-gathers the sequence-parallel inputs in e4m3 and the output
        # gradients in e5m2 (module docstring). saved_input "compute": what torchao saves without TP (float8_linear.py
        # matmul_with_hp_or_float8_args saves its input as it arrives); under TP with SP PrepareFloat8ModuleInput
        # hands the gathered linear layers a float8 input, which torchao keeps: saved_input_under_tp "quantized".
        gradients=GemmOperand("e5m2", "tensor_current"), saved_input="compute", saved_input_under_tp="quantized",
        param_gather="cast", tp_gather=True,
        quantize_passes=2, split_accumulator=_BACKWARD_SPLIT,
        flags={"torchtitan": ("--model.converters", "quantize.linear.float8",
                              "--quantize.linear.float8.enable_fsdp_float8_all_gather",
                              "--quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp",
                              *_HEAD_FILTER)},
    ),
    PrecisionRecipe(
        name="torchao-float8-rowwise",
        description="torchao float8 rowwise (torchtitan): E4M3 with one fp32 scale per row, no float8 all-gather",
        # No float8 TP gather: torchtitan applies its plain TP plan to rowwise recipes (module docstring). Its casts
        # (module docstring, torchao's rowwise casts): each an amax along one axis before the cast, two reads
        # (quantize_passes 2, as tensorwise); the output gradient cast twice, along each axis (cast_per_usage). The
        # forward GEMM runs the row-wise CUTLASS kernel with fast accumulation (gemm_config_output); the backward ones,
        # without it, the per-tensor cuBLAS kernel at unit scales, then `output *= post_inverse_scale`
        # (float8_ops.py addmm_float8_unwrapped): split accumulation and a rescale pass over their outputs.
        source=("torchao float8/config.py Float8LinearConfig.from_recipe_name('rowwise'), float8/float8_linear.py "
                "matmul_with_hp_or_float8_args, float8/float8_ops.py addmm_float8_unwrapped, float8/float8_utils.py "
                "tensor_to_amax (pytorch/ao@36027d8) and torchtitan "
                "docs/float8.md: --quantize.linear.float8.recipe_name rowwise"),
        **_same("e4m3", "rowwise"), saved_input="compute", quantize_passes=2, cast_per_usage=True,
        split_accumulator=_BACKWARD_SPLIT, rescaled_outputs=_BACKWARD_SPLIT,
        flags={"torchtitan": ("--model.converters", "quantize.linear.float8", "--quantize.linear.float8.recipe_name",
                              "rowwise", *_HEAD_FILTER)},
    ),
    PrecisionRecipe(
        name="torchao-float8-rowwise-gw-hp",
        description="torchao float8 rowwise_with_gw_hp (torchtitan): rowwise E4M3 forward and input gradient, the "
                    "weight gradient in bf16",
        # Float8LinearConfig.from_recipe_name('rowwise_with_gw_hp') at pytorch/ao@36027d8: output = input (row-wise,
        # dim 0) @ weight (row-wise): the row-wise kernel with fast accumulation; grad_input = grad_output (row-wise)
        # @ weight (per-tensor): the per-tensor kernel at unit scales then the rescale (addmm_float8_unwrapped, no
        # fast accumulation); grad_weight = input_t @ grad_output in bf16 (both casts ScalingType.DISABLED). So: the
        # input cast once, the output gradient once, the weight twice (row-wise, then per-tensor), none for the weight
        # gradient (compute_dtype_passes). The weights' operand states the forward's row-wise scaling.
        source=("torchao float8/config.py Float8LinearConfig.from_recipe_name('rowwise_with_gw_hp'), "
                "float8/float8_linear.py matmul_with_hp_or_float8_args, float8/float8_ops.py addmm_float8_unwrapped "
                "(pytorch/ao@36027d8) and torchtitan: --quantize.linear.float8.recipe_name rowwise_with_gw_hp"),
        **_same("e4m3", "rowwise"), saved_input="compute", quantize_passes=2, cast_per_usage=True,
        split_accumulator=("dgrad",), rescaled_outputs=("dgrad",), compute_dtype_passes=("wgrad",),
        flags={"torchtitan": ("--model.converters", "quantize.linear.float8", "--quantize.linear.float8.recipe_name",
                              "rowwise_with_gw_hp", *_HEAD_FILTER)},
    ),
    PrecisionRecipe(
        name="torchao-mxfp8",
        description="torchao MXFP8 linear training (torchtitan, Blackwell): E4M3 in 32-element blocks with E8M0 scales, "
                    "every operand, cast per GEMM",
        source=("torchao prototype/mx_formats (config.py mxfp8_cublas / mxfp8_cublas_rceil, mx_linear.py mx_mm, "
                "mx_ops.py) and torchtitan components/quantization/mx.py: --model.converters quantize.linear.mx "
                "--quantize.linear.mx.recipe_name mxfp8_cublas (at 6fc499f: --model.converters mx --mx.recipe_name)"),
        # saved_input "compute": mx_mm saves the bf16 input and weight; each usage its own cast (dim0 to_mx, dim1 CUDA
        # kernel); a block's scale computed in its cast kernel: one read per cast. cuBLAS's MX GEMM has no fast-
        # accumulation mode and torchao sets none: no split_accumulator passes (module docstring).
        **_same("mxfp8", "mx_32"), saved_input="compute", quantize_passes=1, cast_per_usage=True, gemms="linears",
        architectures=("blackwell",),
        flags={"torchtitan": ("--model.converters", "quantize.linear.mx", "--quantize.linear.mx.recipe_name",
                              "mxfp8_cublas")},
    ),
)
# torchao's MXFP8 grouped GEMMs for the routed experts (torchtitan quantize.grouped_mm.mx), alone and with the linears'.
_MX_GROUPED = ("torchao prototype/moe_training/scaled_grouped_mm.py _MXFP8GroupedMM (torch._scaled_grouped_mm) and "
               "torchtitan components/quantization/mx.py MXGroupedMMConverter: --model.converters quantize.grouped_mm.mx "
               "--quantize.grouped_mm.mx.fqns experts")
_TORCHAO_MX = next(r for r in RECIPES if r.name == "torchao-mxfp8")
RECIPES += (
    attrs.evolve(_TORCHAO_MX, name="torchao-mxfp8-experts", gemms="experts", source=_MX_GROUPED,
                 description="torchao MXFP8 grouped GEMMs for the routed experts only (torchtitan, Blackwell), cast per GEMM",
                 flags={"torchtitan": ("--model.converters", "quantize.grouped_mm.mx", "--quantize.grouped_mm.mx.fqns",
                                       "experts")}),
    attrs.evolve(_TORCHAO_MX, name="torchao-mxfp8-linears-experts", gemms="all", source=f"{_TORCHAO_MX.source}; {_MX_GROUPED}",
                 description="torchao MXFP8 for the linear layers and the routed experts' grouped GEMMs (torchtitan, Blackwell)",
                 flags={"torchtitan": ("--model.converters", "quantize.linear.mx,quantize.grouped_mm.mx",
                                       "--quantize.grouped_mm.mx.fqns", "experts")}),
)


# FP8 attention on top of the TE recipes that run it (Megatron-Core TransformerConfig.fp8_dot_product_attention, passed to
# TE as the recipe's fp8_dpa: megatron/core/fp8_utils.py at NVIDIA/Megatron-LM d98e8a6; Megatron-Bridge
# mixed_precision.fp8_dot_product_attention). Megatron-LM's command line has no flag for it (arguments.py at d98e8a6 leaves
# the field out of its TransformerConfig arguments; core_v0.14.0 and core_v0.15.0 have none), so these state no flags.
_FP8_DPA_SOURCE = ("; with fp8_dpa (Megatron-Core TransformerConfig.fp8_dot_product_attention, Megatron-Bridge "
                   "mixed_precision.fp8_dot_product_attention: no Megatron-LM command-line flag)")


# Beside NVFP4 linears Transformer Engine runs FP8 attention under a recipe of its own, NVTE_DPA_FP8_RECIPE
# (dot_product_attention.py's linear/attention recipe table at NVIDIA/TransformerEngine@40c69e7, release_v2.8):
# "Float8CurrentScaling" scales q, k, v, the output and their gradients per tensor, current (S and dP delayed), its
# output kept in the compute dtype (NVTE_DPA_FP8CS_O_in_F16 defaults to 1). NVIDIA's MLPerf Training v5.1 and v6.0
# Llama 3.1 8B NVFP4 configs set it with FP8_DPA (config_common_fp4.sh, config_common_fp8attn.sh). The TE recipe
# each stated attention scaling (PrecisionRecipe.attention_scaling) names.
_DPA_RECIPES = {"tensor_current": "Float8CurrentScaling", "tensor_delayed": "DelayedScaling"}


def _with_fp8_attention(base: PrecisionRecipe, fmt: str, scaling: str | None = None) -> PrecisionRecipe:
    own, source = "", base.source + _FP8_DPA_SOURCE
    if scaling:  # the attention's own TE recipe, beside NVFP4 linears
        setting = f"NVTE_DPA_FP8_RECIPE={_DPA_RECIPES[scaling]}"
        own = f", {scaling.replace('_', ' ')} scaling: {setting}"
        source += (f"; {setting} (Transformer Engine dot_product_attention.py, the linear/attention recipe table, "
                   "NVIDIA/TransformerEngine@40c69e7)")
    return attrs.evolve(base, name=f"{base.name}-fp8-attention", attention_format=fmt, attention_scaling=scaling,
                        flags={}, bf16_attention_recipe=base.name, source=source,
                        description=f"{base.name} with FP8 attention ({fmt}{own}): q, k, v kept in {fmt} by the fused kernel")


_BY_NAME = {r.name: r for r in RECIPES}
RECIPES += tuple(_with_fp8_attention(_BY_NAME[name], fmt, *scaling)
                 for name, fmt, *scaling in (("fp8-delayed", "e4m3"), ("fp8-current", "e4m3"), ("mxfp8", "mxfp8"),
                                             ("fp8-delayed-param-gather", "e4m3"), ("mxfp8-param-gather", "mxfp8"),
                                             ("fp8-megatron-param-gather", "e4m3"), ("nvfp4", "e4m3", "tensor_current")))


@hookimpl
def hp_precision_recipes():
    yield from RECIPES
