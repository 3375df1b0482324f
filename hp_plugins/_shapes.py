"""Helpers the built-in kinds share: norms, divisibility checks, vocabulary padding."""

from __future__ import annotations

import math

from hp_core.errors import ConfigError

__all__ = ["NORMS", "check_divides", "norm_params", "padded_vocab"]

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


def check_divides(divisor: int, value: int, path: str, what: str, hint: str) -> None:
    """Refuse unless *divisor* divides *value*."""
    if value % divisor:
        choices = [d for d in range(1, value + 1) if value % d == 0 and d <= 64]
        raise ConfigError(path, f"{what}={divisor} must divide {hint}={value}; choose one of {choices}")


def padded_vocab(vocab_size: int, pad_multiple: int, tp: int) -> int:
    """The vocabulary rounded up to a multiple of ``pad_multiple * tp`` (Megatron-LM
    ``_vocab_size_with_padding``); with ``pad_multiple == 1`` it is rounded only so that
    each TP rank holds an equal shard."""
    step = pad_multiple * tp
    return math.ceil(vocab_size / step) * step
