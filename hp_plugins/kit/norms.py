"""Norms: the two types the built-in kinds accept, their parameters and their elementwise work.

A block's pre-norm (its input and output kept, its parameters, its FLOPs) is
:meth:`hp_plugins.kit.builder.LayerBuilder.pre_norm`; these are what it and a
kind's own norms (a final norm, QK-norm, MTP's ``enorm``/``hnorm``) count with.
"""

from __future__ import annotations

from hp_plugins.kit.eager import EAGER_NORM_BYTES

__all__ = ["NORMS", "NORM_OPS_PER_ELEMENT", "fp32_norm_bytes", "head_norm", "norm_params", "post_norm"]

# Norm types: RMSNorm has a scale vector; LayerNorm a scale and a bias. ``rmsnorm_fp32_weight`` is
# an RMSNorm whose transformers module scales by its weight in fp32 before casting back (Gemma 2/3's
# ``(1 + weight.float())``, GPT-OSS, Nemotron-H, Qwen3-Next): the same parameters and work, and
# what a fused norm keeps; it differs only under the ``fp32_norm_copy`` trait (fp32_norm_bytes).
NORMS = ("rmsnorm", "layernorm", "rmsnorm_fp32_weight")

# Elementwise operations per element of a norm's input: RMSNorm squares, averages,
# scales by the reciprocal root and by the weight (4); LayerNorm also subtracts the
# mean and adds the bias (6). Counted by hand from the definitions (Zhang & Sennrich
# 2019; Ba et al. 2016).
NORM_OPS_PER_ELEMENT = {"rmsnorm": 4, "layernorm": 6, "rmsnorm_fp32_weight": 4}


def norm_params(norm: str, width: int) -> int:
    """Parameters of one norm over *width* features."""
    return width * (2 if norm == "layernorm" else 1)


def fp32_norm_bytes(rows: int, width: int, norm: str, traits: frozenset[str], weight: bool = True) -> int:
    """What an unfused RMSNorm keeps beyond a fused one over *rows* rows of *width*, under the ``fp32_norm_copy`` trait.

    transformers' ``LlamaRMSNorm.forward`` (and the models' copies of it) runs
    ``x.to(float32)``, ``pow(2).mean(-1)``, ``rsqrt`` and ``x * rsqrt`` in fp32,
    then casts back and scales by the weight: autograd keeps the fp32 copy
    (4 bytes per element) and the fp32 inverse root (4 bytes per row) besides the
    bf16 normalised input a fused norm keeps too (measured by the torch census:
    +4h + 4 bytes per token per norm of a Llama decoder layer). 0 without the
    trait or for LayerNorm (``nn.LayerNorm`` is one fused op).

    ``rmsnorm_fp32_weight`` (``Gemma2RMSNorm``/``Gemma3RMSNorm``: ``x.float()``,
    normalised, times ``1 + weight.float()``; ``GptOssRMSNorm``,
    ``NemotronHRMSNorm``, ``Qwen3NextRMSNorm`` alike) keeps the fp32 normalised
    tensor (4 bytes per element) where Llama's keeps a bf16 one (2): 2 bytes
    more per element, ``6 width + 4`` per row in all (measured by the torch
    census, tests/plugins/test_census_hf_norms.py). Its fp32 copy of the weight
    (``4 width`` bytes per norm, whatever the tokens) is left out.

    A norm without a weight (*weight* false: Llama 4's ``L2Norm`` of q and k,
    ``x.float()`` normalised and cast back) keeps the fp32 copy and the root
    and no bf16 normalised tensor, and its fp32 copy stands in for the input
    a fused norm keeps (``2 width`` bytes): ``2 width + 4`` per row beyond it
    (measured by the torch census, tests/plugins/test_census_hf_norms.py).
    """
    if "fp32_norm_copy" not in traits or norm == "layernorm":
        return 0
    if not weight:
        return rows * (2 * width + 4)
    return rows * ((6 if norm == "rmsnorm_fp32_weight" else 4) * width + 4)


def head_norm(norm: str) -> str:
    """The type of a layer's per-head or latent RMSNorms (QK-norm, MLA's latent norms) for a layer of *norm*:
    its own RMSNorm type (the family's module), RMSNorm for a LayerNorm layer."""
    return "rmsnorm" if norm == "layernorm" else norm


def post_norm(b, prefix: str, norm: str) -> None:
    """A norm on a block's output before the residual add (Gemma 2/3's ``post_attention_layernorm``
    and ``post_feedforward_layernorm``), appended to a :class:`~hp_plugins.kit.LayerBuilder` *b*.

    It keeps its input, the block's output projection's (reduce-scattered under
    sequence parallelism), which nothing else keeps; its output feeds the
    residual add, which keeps nothing. Its scale is ``hidden_size`` wide.
    Under the ``fp32_norm_copy`` trait an unfused RMSNorm keeps its fp32
    copies too (:func:`fp32_norm_bytes`), under ``normOp`` (under no switch
    with ``megatron_layernorm_recompute``: not a pre-norm,
    :meth:`~hp_plugins.kit.builder.LayerBuilder.norm_switch`).
    """
    b.keep(f"{prefix}_post_norm_in", b.hidden)
    b.keep(f"{prefix}_post_norm_fp32", fp32_norm_bytes(b.x.tokens, b.h, norm, b.x.traits) // b.x.sp_degree, b.norm_switch())
    b.param(f"{prefix}_post_norm", norm_params(norm, b.h), False)
    ops = NORM_OPS_PER_ELEMENT[norm] * b.x.tokens * b.h // b.x.sp_degree
    b.elementwise += ops
    if norm in EAGER_NORM_BYTES:
        b.count_eager(ops, EAGER_NORM_BYTES[norm] / NORM_OPS_PER_ELEMENT[norm])
