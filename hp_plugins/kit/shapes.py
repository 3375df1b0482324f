"""Shape helpers the built-in kinds share: divisibility checks and vocabulary padding."""

from __future__ import annotations

import math

from hp_core.errors import ConfigError

__all__ = ["check_divides", "padded_vocab"]


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
