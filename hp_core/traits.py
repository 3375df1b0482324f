"""Runtime traits: how a trainer implements ops, where that changes what a layer keeps or moves.

A runtime profile states the traits its trainer has (:attr:`hp_core.types.Runtime.traits`); the
built-in kinds read them from :attr:`hp_core.costs.LayerContext.traits`. Re-exported by :mod:`hp_core.costs`.
"""

from __future__ import annotations

__all__ = ["TRAITS"]

# How a trainer implements ops, where that changes what a layer keeps. A runtime
# profile states the traits its trainer has; the built-in kinds read them.
TRAITS = {
    "fused_swiglu": (
        "the gated MLP's activation keeps only its input, the FC1 output; its product is the FC2 input "
        "(Megatron-LM bias_swiglu_impl / Transformer Engine)"
    ),
    "fp8_activation_input_store": (
        "a fused gated activation (the fused_swiglu trait's kernel) keeps its input, the FC1 output, cast to "
        "float8_e4m3fn (1 byte an element, no scale) and casts it back in backward: two eager casts, each reading "
        "one width and writing the other (Megatron-LM --activation-func-fp8-input-store, TransformerConfig."
        "activation_func_fp8_input_store; megatron/core/fusions/fused_bias_swiglu.py BiasSwiGLUFunction, "
        "SwiGLUFunction and WeightedSwiGLUFunction, fused_bias_geglu.py WeightedQuickGeGLUFunction)"
    ),
    "fused_cross_entropy": (
        "the loss keeps the logits in the compute dtype, overwritten with their gradient in forward, "
        "instead of an fp32 softmax (Transformer Engine parallel_cross_entropy; Megatron-LM --cross-entropy-loss-fusion)"
    ),
    "mla_contiguous_qkv": (
        "MLA's up-projected q, k and v are made contiguous copies, so v keeps no k_nope alive "
        "(Megatron-Core multi_latent_attention.py qkv_up_proj_and_rope_apply)"
    ),
    "moe_probs_in_activation": (
        "routing probabilities are applied in the experts' SwiGLU, which keeps them (fp32 per dispatched token), "
        "so the combine keeps no expert outputs (Megatron-Core WeightedSwiGLUFunction)"
    ),
    "torchtitan_moe_expert_parallel": (
        "torchtitan's eager MoE of 2025-10 (torchtitan/models/moe.py MoE.forward, ExpertParallel at 82a9530f6): "
        "the router's gate runs in the compute dtype (no fp32 input copy), the combine's fp32 score multiply keeps "
        "the routed output in fp32 (4 h a routed row) and 32 bytes of indices and scores a routed row; under "
        "torchtitan's op-level SAC an MLA MoE layer keeps what its deepseek_v3 save list saves"
    ),
    "torchtitan_moe_all_to_all": (
        "torchtitan's eager MoE of 2026-06 (torchtitan/models/common/moe.py, AllToAllTokenDispatcher at 6b9602339): "
        "the router's gate runs under fp32 autocast (its fp32 input kept), the combine's fp32 score multiply keeps "
        "the routed output in fp32 (4 h a routed row) and 36 bytes of indices and scores a routed row (its op-level "
        "SAC, a different save list, is not stated)"
    ),
    "fp32_norm_copy": (
        "an RMSNorm upcasts its input to fp32 and keeps that copy and the fp32 inverse root per row, "
        "4 w + 4 bytes per row of width w beyond a fused norm (transformers LlamaRMSNorm and its copies; "
        "measured by the torch census)"
    ),
    "upcast_cross_entropy": (
        "the loss upcasts the logits to fp32 before cross_entropy: its forward holds the logits in the compute "
        "dtype and in fp32 beside the fp32 log-softmax it keeps, and it keeps the int64 targets "
        "(transformers ForCausalLMLoss; torchtitan cross_entropy_loss)"
    ),
    "compiled_cross_entropy": (
        "the loss is torch.compile'd (logits.float() then cross_entropy through Inductor): it keeps the logits in the "
        "compute dtype (the head's output itself), two fp32 per-row statistics and the int64 targets, no fp32 copy; "
        "its backward writes the logits' gradient in the compute dtype beside them (measured: "
        "benchmarks/count_compiled_loss.py, torch 2.13 AOTAutograd and Inductor)"
    ),
    "chunked_cross_entropy": (
        "the head and the loss run chunk by chunk along the sequence, each chunk's backward at once (torchtitan "
        "ChunkedCELoss, torchtitan/components/loss.py at 6b9602339, num_chunks 8): no logits are kept for backward, "
        "only the hidden states' gradient in the compute dtype; the forward holds one chunk's logits in bf16 and its "
        "fp32 log-softmax and gradients, an fp32 buffer of the hidden states' gradient and the head's whole gradient"
    ),
    "replicated_vocab": (
        "the embedding and the head are whole on every TP rank (not vocabulary-parallel): a TP plan that leaves "
        "them out (torchtitan-style plans without tok_embeddings/output entries)"
    ),
    "gathered_logits": (
        "a vocabulary-parallel head's logits are all-gathered over TP before the loss (no loss parallelism: "
        "torchtitan ColwiseParallel(output_layouts=Replicate()) on the output), so the loss sees the whole vocabulary"
    ),
    "moe_tp_without_sp": (
        "a mixture-of-experts layer runs under TP without sequence parallelism: every TP rank routes all its tokens "
        "through experts TP leaves whole (a PyTorch-native plan that parallelizes only the attention)"
    ),
    "torchtitan_op_sac": (
        "a dense layer's normOp+ffAct keep what torchtitan's per-op SAC saves, and with torchtitan_moe_expert_parallel "
        "an MLA MoE layer's what its deepseek_v3 save list saves at TP 1 (hp_plugins/kit/op_sac.py; elsewhere the "
        "switches' terms, named by the estimate: LayerCost.assumed)"
    ),
    "moe_expert_tp_dispatch": (
        "the token dispatcher all-gathers the dispatched tokens over the expert-TP group and reduce-scatters the "
        "experts' output back, and the routed experts have no dense-MLP TP gather of their own: the MoE layer "
        "routes its sequence-parallel shard (Megatron-Core MoEAlltoAllTokenDispatcher, moe_layer.py)"
    ),
    "dense_mlp_checkpoint": (
        "a dense MLP's recompute checkpoints the MLP as a unit: recomputing its FC1 outputs (ffFc1) re-runs its whole "
        "forward, FC2 included (Megatron-Core transformer_layer.py: the mlp recompute module's tensor_parallel.checkpoint)"
    ),
    "megatron_layernorm_recompute": (
        "normOp drops and re-runs only the block pre-norms built as norm modules of their own, as Megatron-Core's "
        "layernorm recompute module runs (transformer_layer.py at NVIDIA/Megatron-LM@d98e8a6: input_layernorm and "
        "pre_mlp_layernorm wherever they are not IdentityOp, each under CheckpointWithoutOutput): an MoE block's "
        "pre-norm and MLA's input norm (TENorm in the Transformer Engine specs; the kinds mark them, "
        "LayerBuilder.pre_norm own_module); a norm fused into the linear after it (TELayerNormColumnParallelLinear: "
        "attention's linear_qkv, a dense MLP's linear_fc1, Mamba's and GDN's in_proj, MLA's latent norms in the up "
        "projections), whose output that linear keeps for its weight gradient, and a QK-norm, which no module "
        "recomputes, keep their outputs under no switch"
    ),
    "moe_eager_expert_bias": (
        "the routed experts' FC2 bias is added outside the grouped GEMM, weighted by each token's routing "
        "probability, one expert at a time in eager PyTorch and concatenated (Megatron-Core TEGroupedMLP._apply_bias: "
        "torch.cat of t + b * p over torch.split by tokens per expert): memory-bound passes over the experts' output "
        "in forward and backward"
    ),
    "linear_proj_original_input": (
        "the attention output projection (Megatron-Core linear_proj) keeps its compute-dtype input for its weight "
        "gradient, not a quantized copy, under a recipe that can quantize it again in backward (all but delayed "
        "scaling), and its backward quantizes it again: Megatron-Core attention.py and multi_latent_attention.py call "
        "set_save_original_input(linear_proj) under fp8 with fp8_recipe other than delayed (TE >= 2.6) or under fp4 "
        "(TE >= 2.7), since core_v0.14.0 (NVIDIA/Megatron-LM 781e765); Transformer Engine Linear save_original_input"
    ),
    "moe_sequential_experts": (
        "the routed experts run one local expert after another, each expert an MLP whose FC1 and FC2 are plain "
        "Transformer Engine linears over that expert's tokens (Megatron-Core SequentialMLP, "
        "megatron/core/transformer/moe/experts.py, which transformer_engine_spec_provider.py grouped_mlp_modules "
        "builds where moe_grouped_gemm is false, TransformerConfig's default, at NVIDIA/Megatron-LM@d98e8a6): dense "
        "GEMMs of each expert's rows, not one grouped GEMM"
    ),
    "moe_fused_grouped_mlp": (
        "the routed experts' FC1, activation and FC2 run as Transformer Engine's fused grouped MLP (its operation "
        "fuser's CuTe DSL kernels, NVTE_CUTEDSL_FUSED_GROUPED_MLP: transformer_engine/pytorch/ops/fused/grouped_mlp.py "
        "at NVIDIA/TransformerEngine@d0067d0): the activation runs in FC1's epilogue and its gradient in FC2's "
        "input-gradient epilogue where the recipe is MXFP8 or NVFP4 on compute capability 10 (fuse_grouped_mlp_ops, "
        "is_supported), and under MXFP8 the quantization of FC2's input and of FC1's output gradient with them (under "
        "NVFP4 a grouped quantize kernel of its own follows each); elsewhere TE runs them unfused"
    ),
    "moe_fused_permute": (
        "the fused token permutation keeps an int32 row map of [tokens, 2 * experts + 1] "
        "(Transformer Engine permutation.py moe_permute)"
    ),
    "rope_rotate_half": (
        "the rotary embedding runs as transformers' rotate_half form (models/llama/modeling_llama.py "
        "apply_rotary_pos_emb: q * cos + rotate_half(q) * sin), not torchtitan's complex multiply: as eager kernels "
        "its backward moves 30 bytes per rotated element to the complex form's 20 (hp_plugins/kit/eager.py)"
    ),
    "rope_chunk_cat": (
        "the rotary embedding runs as NeMo AutoModel's chunk-and-concatenate form (nemo_automodel/components/models/"
        "gpt_oss/layers.py _apply_rotary_emb: q split into halves x1, x2, then cat(x1 cos - x2 sin, x2 cos + x1 sin)), "
        "not torchtitan's complex multiply: as eager kernels 18 bytes per rotated element forward and 20 backward "
        "(hp_plugins/kit/eager.py)"
    ),
    "moe_fake_balanced_gate": (
        "no learned router runs: each token's k routing weights are 1/k and its experts the k consecutive ones "
        "(t k + j) mod E after the t-th token's, so no gating GEMM, no router kernels, no router parameter, and an "
        "all-to-all that sends a token once per rank reaches the ranks of consecutive experts only (NeMo AutoModel "
        "FakeBalancedGate, nemo_automodel/components/moe/layers.py; BackendConfig.fake_balanced_gate)"
    ),
}
