"""The upper bounds every count, size and degree is checked against where it enters.

A value past its bound is refused with the one-line error naming its field
(exit status 2 on the command line), before any work starts. Each bound lies
far beyond any real training job and below the size at which the arithmetic
(an integer that no longer converts to a float, an overflow to infinity) or the
work (a loop per layer, a search over every layout) would fail or hang.
docs/cli.md lists them; ``tests/core/test_bad_input_examples.py`` and
``tests/core/test_fuzz_files.py`` check them where they enter.
"""

from __future__ import annotations

import math
from typing import Any

from hp_core.errors import ConfigError

__all__ = [
    "MAX_BATCH", "MAX_DEPTH", "MAX_DEVICES", "MAX_DOCUMENT_BYTES", "MAX_INT", "MAX_LAYERS", "MAX_MEMORY_BYTES",
    "MAX_NODES", "MAX_SEARCH_LAYOUTS", "MAX_SEQ_LEN", "MAX_VOCAB", "MAX_WORKERS", "BOUNDS", "check_float", "short_repr",
    "check_int",
]

# Devices: every parallel degree and their product (the world size). 2**20 is about ten
# times the largest job reported (about 100k accelerators).
MAX_DEVICES = 2**20
# Layers in one model stack, all groups together (the largest published models have
# a few hundred); the planner walks layers one by one.
MAX_LAYERS = 10_000
# Vocabulary entries (the largest published tokenizers have about 256k).
MAX_VOCAB = 2**24
# Tokens per sequence (16M; published context lengths reach 10M).
MAX_SEQ_LEN = 2**24
# Sequences per micro-batch and per step.
MAX_BATCH = 2**24
# Device memory, a memory reserve, a stated peak: 1 PiB.
MAX_MEMORY_BYTES = 2**50
# Worker processes of ``hp search``.
MAX_WORKERS = 256
# Any other integer of a spec or a layer config (a hidden size, a head count, an expert
# count): 2**53, the largest range in which every integer is exactly a float64.
MAX_INT = 2**53
# Candidate layouts ``hp search`` enumerates (counted before the search starts).
MAX_SEARCH_LAYOUTS = 5_000_000
# Config, census and case files: bytes read, nesting depth, and nodes an alias
# expansion may add (a YAML "billion laughs" file is refused before it is expanded).
MAX_DOCUMENT_BYTES = 64 * 2**20
MAX_DEPTH = 64
MAX_NODES = 100_000

# Name, bound, what it bounds: the table docs/cli.md shows (checked by tests/test_docs_cli.py).
BOUNDS: tuple[tuple[str, int, str], ...] = (
    ("MAX_DEVICES", MAX_DEVICES, "every parallel degree, their product, `hp search --devices` and `--fix` values, pipeline chunks"),
    ("MAX_LAYERS", MAX_LAYERS, "layers in one model stack (all groups, `count`, `num_hidden_layers`, `--num-layers`), `--steps`, "
                               "`hp search --high-precision-layers-at-start` and `--high-precision-layers-at-end`"),
    ("MAX_VOCAB", MAX_VOCAB, "vocabulary entries (`vocab_size`)"),
    ("MAX_SEQ_LEN", MAX_SEQ_LEN, "tokens per sequence (`--seq-len`, `seq_len`)"),
    ("MAX_BATCH", MAX_BATCH, "sequences per micro-batch and per step (`--micro-batch-size`, `--global-batch-size`)"),
    ("MAX_MEMORY_BYTES", MAX_MEMORY_BYTES, "device memory, `--memory`, `--reserve`, measured peaks, a census figure per token, in bytes (1 PiB)"),
    ("MAX_WORKERS", MAX_WORKERS, "`hp search --workers`"),
    ("MAX_INT", MAX_INT, "any other integer of a spec or layer config (hidden sizes, heads, experts, byte widths), a runtime option's number, `--top`"),
    ("MAX_SEARCH_LAYOUTS", MAX_SEARCH_LAYOUTS, "candidate layouts `hp search` enumerates, counted before it starts"),
    ("MAX_DOCUMENT_BYTES", MAX_DOCUMENT_BYTES, "bytes of a config, census, case or `config.json` file"),
    ("MAX_DEPTH", MAX_DEPTH, "nesting depth of a config, census, case or `config.json` file"),
    ("MAX_NODES", MAX_NODES, "values in such a file after YAML aliases are expanded"),
)


def check_int(value: Any, path: str, *, low: int = 1, high: int = MAX_INT, what: str = "") -> int:
    """*value* as an ``int`` in ``[low, high]`` (``bool`` refused), or a :class:`ConfigError` naming *path*."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(path, f"expected an integer, got {short_repr(value)}")
    if value < low or value > high:
        limit = f"at most {high:,}" + (f" ({what})" if what else "")
        raise ConfigError(path, f"must be at least {low} and {limit}, got {short_repr(value)}")
    return value


def check_float(value: Any, path: str, *, positive: bool = True, high: float | None = None) -> float:
    """*value* as a finite ``float`` (positive when asked, at most *high*), or a :class:`ConfigError` naming *path*."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(path, f"expected a number, got {short_repr(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ConfigError(path, f"must be a finite number, got {short_repr(value)}")
    if positive and not number > 0:
        raise ConfigError(path, f"must be a positive number, got {short_repr(value)}")
    if high is not None and number > high:
        raise ConfigError(path, f"must be at most {high:,}, got {short_repr(value)}")
    return number


def short_repr(value: Any, limit: int = 40) -> str:
    """*value*'s repr, cut to *limit* characters (a 400-digit number is not echoed whole)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        return f"an integer of about {int(abs(value).bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
