"""Norms: the two types the built-in kinds accept, their parameters and their elementwise work.

A block's pre-norm (its input and output kept, its parameters, its FLOPs) is
:meth:`hp_plugins.kit.builder.LayerBuilder.pre_norm`; these are what it and a
kind's own norms (a final norm, QK-norm, MTP's ``enorm``/``hnorm``) count with.
"""

from __future__ import annotations

__all__ = ["NORMS", "NORM_OPS_PER_ELEMENT", "fp32_norm_bytes", "norm_params", "post_norm"]

# Norm types: RMSNorm has a scale vector; LayerNorm a scale and a bias.
NORMS = ("rmsnorm", "layernorm")

# Elementwise operations per element of a norm's input: RMSNorm squares, averages,
# scales by the reciprocal root and by the weight (4); LayerNorm also subtracts the
# mean and adds the bias (6). Counted by hand from the definitions (Zhang & Sennrich
# 2019; Ba et al. 2016).
NORM_OPS_PER_ELEMENT = {"rmsnorm": 4, "layernorm": 6}


def norm_params(norm: str, width: int) -> int:
    """Parameters of one norm over *width* features."""
    return width * (2 if norm == "layernorm" else 1)


def fp32_norm_bytes(rows: int, width: int, norm: str, traits: frozenset[str]) -> int:
    """What an unfused RMSNorm keeps beyond a fused one over *rows* rows of *width*, under the ``fp32_norm_copy`` trait.

    transformers' ``LlamaRMSNorm.forward`` (and the models' copies of it) runs
    ``x.to(float32)``, ``pow(2).mean(-1)``, ``rsqrt`` and ``x * rsqrt`` in fp32,
    then casts back and scales by the weight: autograd keeps the fp32 copy
    (4 bytes per element) and the fp32 inverse root (4 bytes per row) besides the
    bf16 normalised input a fused norm keeps too (measured by the torch census:
    +4h + 4 bytes per token per norm of a Llama decoder layer). 0 without the
    trait or for LayerNorm (``nn.LayerNorm`` is one fused op).
    """
    if "fp32_norm_copy" not in traits or norm != "rmsnorm":
        return 0
    return rows * (4 * width + 4)


def post_norm(b, prefix: str, norm: str) -> None:
    """A norm on a block's output before the residual add (Gemma 2/3's ``post_attention_layernorm``
    and ``post_feedforward_layernorm``), appended to a :class:`~hp_plugins.kit.LayerBuilder` *b*.

    It keeps its input, the block's output projection's (reduce-scattered under
    sequence parallelism), which nothing else keeps; its output feeds the
    residual add, which keeps nothing. Its scale is ``hidden_size`` wide.
    """
    b.keep(f"{prefix}_post_norm_in", b.hidden)
    b.param(f"{prefix}_post_norm", norm_params(norm, b.h), False)
    b.elementwise += NORM_OPS_PER_ELEMENT[norm] * b.x.tokens * b.h // b.x.sp_degree
