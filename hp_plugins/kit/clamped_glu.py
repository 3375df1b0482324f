"""GPT-OSS's clamped gated activation: what its experts keep and compute.

GPT-OSS's experts (Hugging Face ``GptOssExperts._apply_gate``; OpenAI's
reference ``gpt_oss/torch/model.py`` ``swiglu``) split the interleaved FC1
output into gate and up, clamp the gate above at ``limit`` and the up to
``[-limit, limit]``, and return ``(up + 1) * gate * sigmoid(alpha * gate)``.
"""

from __future__ import annotations

from hp_plugins.kit.builder import LayerBuilder
from hp_plugins.kit.feedforward import fused_activation_input

__all__ = ["CLAMPED_SWIGLU_OPS", "clamped_swiglu"]

# Per element of the expert width: two clamps, alpha * gate, the sigmoid (negate, exp, add,
# divide), gate * sigmoid, up + 1, the product: 10, counted from the definition above.
CLAMPED_SWIGLU_OPS = 10


def clamped_swiglu(b: LayerBuilder, prefix: str, tokens: int, width: int, tp_split: bool = False,
                   fc1_switch: str | None = None, fp8_store: bool = True) -> int:
    """Keep the clamped SwiGLU's tensors; return the bytes of one width-wide tensor.

    Unfused (Hugging Face), autograd keeps the FC1 output (the clamps' inputs
    are views of it), the clamped gate (the product's input), the sigmoid's
    output, ``up + 1`` and the gated value (the last product's inputs) and the
    product (FC2's input, ``gemm_input`` ``owned``): all but the FC1 output are rebuilt from it, so
    ``ffAct`` drops them. A fused kernel (the ``fused_swiglu`` trait,
    Megatron-LM ``bias_swiglu_impl`` with its clamp) keeps the FC1 output and
    the product only. The FC1 output is gated by *fc1_switch* (``None``: kept
    unless the layer is recomputed fully; the MoE block's ``moeLayer``). The fused kernel's input is kept as
    :func:`~hp_plugins.kit.feedforward.fused_activation_input` says (Megatron-LM's quick-GeGLU form takes
    ``--activation-func-fp8-input-store`` too; *fp8_store* as there).
    """
    wide = tokens * width * b.act
    fused = "fused_swiglu" in b.x.traits
    b.keep(f"{prefix}fc1_out", fused_activation_input(b, 2 * tokens * width, fp8_store) if fused else 2 * wide,
           fc1_switch, tp_split)
    if not fused:
        b.keep(f"{prefix}act_out", 4 * wide, "ffAct", tp_split)  # clamped gate, sigmoid, up + 1, gated value
    b.keep(f"{prefix}mul_out", wide, "ffAct", tp_split, "owned")  # FC2's input
    b.elementwise += CLAMPED_SWIGLU_OPS * tokens * width
    return wide
