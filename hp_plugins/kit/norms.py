"""Norms: the two types the built-in kinds accept, their parameters and their elementwise work.

A block's pre-norm (its input and output kept, its parameters, its FLOPs) is
:meth:`hp_plugins.kit.builder.LayerBuilder.pre_norm`; these are what it and a
kind's own norms (a final norm, QK-norm, MTP's ``enorm``/``hnorm``) count with.
"""

from __future__ import annotations

__all__ = ["NORMS", "NORM_OPS_PER_ELEMENT", "norm_params", "post_norm"]

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
