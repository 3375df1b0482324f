"""The ``megatron`` runtime's options for how Megatron-Core runs a layer's routed experts: ``moe_grouped_gemm``
(TEGroupedMLP or SequentialMLP, docs/time.md "Sequential experts") and ``moe_fused_grouped_mlp`` (Transformer Engine's
fused grouped MLP, docs/time.md "Fused grouped MLP"), which cannot both turn away from the grouped linears."""

from __future__ import annotations

from typing import Any

import attrs

from hp_core.runtime_options import RuntimeOption, trait_setter
from hp_core.types import Runtime

__all__ = ["MOE_EXPERT_OPTIONS"]

_ARGS = "Megatron-LM megatron/training/arguments.py"


@attrs.frozen
class _TraitUnless:
    """An option's ``apply`` turning *trait* on where its value is *when* (:func:`trait_setter`), refused with
    *message* where the runtime already has *conflict* on: two options whose settings cannot both hold."""

    trait: str
    when: Any
    conflict: str
    message: str

    def __call__(self, runtime: Runtime, value: Any) -> Runtime:
        if value == self.when and self.conflict in runtime.traits:
            raise ValueError(self.message)
        return trait_setter(self.trait, self.when)(runtime, value)


# TE's fused grouped MLP replaces the GroupedLinear ops of Megatron-Core's TEGroupedMLP (transformer/moe/experts.py,
# its use_transformer_engine_op_fuser path); SequentialMLP builds none, so the two settings cannot both hold.
_FUSED_NEEDS_GROUPED = ("Transformer Engine's fused grouped MLP replaces the grouped linears of Megatron-Core's "
                        "TEGroupedMLP, which SequentialMLP (moe_grouped_gemm false) does not build")


MOE_EXPERT_OPTIONS = (
    RuntimeOption(
        "moe_grouped_gemm", "bool", True,
        "--moe-grouped-gemm: each layer's local experts run as Transformer Engine grouped GEMMs (TEGroupedMLP), "
        "priced at the device's grouped-GEMM figures; false: Megatron-Core's SequentialMLP, each local expert an MLP "
        "of its own whose two linears are dense GEMMs over that expert's tokens, one after another, priced at the "
        "dense GEMM rates and counted per expert in the host floor (trait moe_sequential_experts). TransformerConfig's "
        "own default is false; hp's is true, the setting of the MoE performance recipes (Megatron-Bridge, NeMo), and the "
        "megatron importer states false where a GPT model's arguments leave the flag out (a hybrid model's MoE layers are "
        "grouped whatever the flag: hybrid_layer_specs.py)",
        f"{_ARGS} --moe-grouped-gemm; megatron/core/transformer/transformer_config.py moe_grouped_gemm (default False); "
        "megatron/core/extensions/transformer_engine_spec_provider.py grouped_mlp_modules; "
        "megatron/core/transformer/moe/experts.py SequentialMLP (NVIDIA/Megatron-LM@d98e8a6)",
        _TraitUnless("moe_sequential_experts", False, "moe_fused_grouped_mlp",
                     f"false cannot hold with moe_fused_grouped_mlp true: {_FUSED_NEEDS_GROUPED}; state "
                     "moe_grouped_gemm: true or drop moe_fused_grouped_mlp"),
    ),
    RuntimeOption(
        "moe_fused_grouped_mlp", "bool", False,
        "Transformer Engine's fused grouped MLP for the routed experts (Megatron-Core "
        "TransformerConfig.use_transformer_engine_op_fuser with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1; Megatron-Bridge's "
        "cutedsl_fused_grouped_mlp): under an MXFP8 or NVFP4 recipe on Blackwell the experts' activation runs in FC1's "
        "epilogue and its gradient in FC2's, so hp prices no activation pass, and under MXFP8 (whose epilogues also "
        "quantize them; NVFP4 runs a grouped quantize kernel apart) no quantization of FC2's input or FC1's output "
        "gradient; elsewhere, and on a layer kept in bf16, TE runs them unfused and so does hp; memory "
        "as unfused; needs moe_grouped_gemm true (refused with false: SequentialMLP builds no grouped linears to fuse) and "
        "etp 1 (refused above: Megatron-Core's experts.py _is_fused_impl_supported, asserted, supports no expert TP) "
        "and experts whose activation that check accepts (a gated SiLU or quick-GELU, an ungated squared ReLU; any other "
        "refused)",
        "NVIDIA/TransformerEngine@d0067d0 transformer_engine/pytorch/ops/fused/grouped_mlp.py (fuse_grouped_mlp_ops: "
        "GroupedLinear, ScaledSwiGLU or ScaledClampedQGeGLU, GroupedLinear under recipe.mxfp8() or nvfp4(); "
        "is_supported: NVTE_CUTEDSL_FUSED_GROUPED_MLP and compute capability 10); NVIDIA/Megatron-LM@d98e8a6 "
        "megatron/core/transformer/moe/experts.py TEGroupedMLP._is_fused_impl_supported (no expert TP)",
        _TraitUnless("moe_fused_grouped_mlp", True, "moe_sequential_experts",
                     f"true needs moe_grouped_gemm true: {_FUSED_NEEDS_GROUPED}; state moe_grouped_gemm: true or drop "
                     "moe_fused_grouped_mlp"),
    ),
)
