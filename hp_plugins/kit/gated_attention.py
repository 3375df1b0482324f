"""Grouped-query attention with an output gate (Qwen3-Next's full-attention layers).

transformers' ``Qwen3NextAttention`` (``modeling_qwen3_next.py``) makes ``q_proj``
twice as wide: half of its output is the query, half a per-head gate, and the
attention output is multiplied by ``sigmoid(gate)`` before ``o_proj``
(Megatron-Core's ``--attention-output-gate``). Beyond the kit's
:func:`~hp_plugins.kit.gqa_attention` this adds, per rank with ``a`` heads of
width ``d``:

* parameters ``h a d`` (and ``a d`` biases where ``attention_bias``), split over
  TP with the query heads;
* kept tensors: the sigmoid's output (its backward and the product's) and the
  gated product (``o_proj``'s input), ``2 T a d / t`` each; the attention output
  the product also keeps is the kernel's output the flash block already counts
  (eager: the transposed copy, which takes the place of ``o_proj``'s input);
* FLOPs: the gate's projection ``2 T h a d / t`` and the sigmoid and product
  (5 elementwise operations per element).
"""

from __future__ import annotations

from hp_plugins.kit.attention import GQAFields, gqa_attention
from hp_plugins.kit.builder import LayerBuilder

__all__ = ["gated_gqa_attention"]

# Elementwise operations per gated element: the sigmoid (negate, exp, add, divide) and the product.
_GATE_OPS = 5


def gated_gqa_attention(b: LayerBuilder, c: GQAFields) -> None:
    """Grouped-query attention whose output is gated by ``sigmoid`` of a second query-wide projection."""
    x, t = b.x, b.x.tp
    T, h, width = x.tokens, c.hidden_size, c.num_attention_heads * c.head_width
    gqa_attention(b, c)
    b.param("attn_output_gate", h * width + width * c.attention_bias, True, matrices=((1, width // t, h),))
    b.keep("attn_gate_sigmoid", T * width * b.act // t, None, True)
    b.keep("attn_gated_out", T * width * b.act // t, None, True)
    # Megatron-Core widens linear_qkv by the gate (attention_output_gate: linear_qkv_out_dim, attention.py at
    # NVIDIA/Megatron-LM@d98e8a6), so a format of linear_qkv's own is the gate's too.
    # The attention norm's output, as qkv's; part of linear_qkv, so a userbuffers GEMM with it.
    b.linear(T, h, width // t, shares_input=True, module="attention_qkv", ub="qkv")
    b.linear_module("attention_qkv", ("attn_output_gate",))
    b.elementwise += _GATE_OPS * T * width // t
