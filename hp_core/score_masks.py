"""Causal score masks: the (query, key) pairs a mask keeps, and the blocks a block-sparse kernel runs for it.

A causal attention core over ``s`` tokens scores ``s (s + 1) / 2`` pairs; a
sliding window ``w`` keeps the ``min(i + 1, w)`` keys ``i - w + 1 .. i`` of row
``i``; chunks of ``C`` keep the keys of a row's own chunk up to itself
(Hugging Face ``masking_utils`` ``sliding_window_overlay`` and
``chunked_overlay``; :mod:`hp_plugins.kit.local_attention` prices their FLOPs
as these exact pairs).

A block-sparse kernel does not run pairs: it cuts the score matrix into
``B x B`` blocks, skips the blocks its mask leaves wholly empty and computes
every other block whole, masking inside it (PyTorch FlexAttention's
``BlockMask``, ``torch/nn/attention/flex_attention.py``: ``kv_num_blocks`` and
``kv_indices`` list the blocks a query block visits; the Triton templates run
every ``BLOCK_N`` sub-tile of each listed block,
``torch/_inductor/kernel/flex/templates/flex_attention.py.jinja``
``kv_num_blocks * SPARSE_KV_MULTIPLE``, ``flex_backwards.py.jinja`` likewise).
So a 128-token window at blocks of 128 runs two blocks per query block (its
own, on the diagonal, and the one before it), about twice its exact pairs.
:func:`causal_block_pairs` counts those blocks; :class:`LocalMask` gives a
local layer's time its executed blocks over its exact pairs, each relative to
the full causal mask at the same length (the convention the fused kernels'
rates are measured in: :attr:`hp_core.specs.timing.TimingProfile.flash_causal_fraction`).
"""

from __future__ import annotations

from functools import lru_cache

import attrs

__all__ = ["LocalMask", "block_factor", "causal_block_pairs", "causal_score_pairs", "local_mask"]


def _check(window: int | None, chunk: int | None) -> None:
    if window is not None and chunk is not None:
        raise ValueError("a layer has a sliding window or attention chunks, not both")


def causal_score_pairs(seq_len: int, window: int | None = None, chunk: int | None = None) -> int:
    """The (query, key) pairs a causal mask keeps in one sequence of *seq_len* tokens.

    Full causal: ``s (s + 1) / 2``. A sliding window ``w``: the sum over rows of
    ``min(i + 1, w)``, i.e. ``w (w + 1) / 2 + (s - w) w`` when ``w < s``. Chunks of
    ``C``: each full chunk ``C (C + 1) / 2``, the last partial one ``r (r + 1) / 2``.
    """
    s = seq_len
    _check(window, chunk)
    if window is not None and window < s:
        return window * (window + 1) // 2 + (s - window) * window
    if chunk is not None and chunk < s:
        full, rest = divmod(s, chunk)
        return full * chunk * (chunk + 1) // 2 + rest * (rest + 1) // 2
    return s * (s + 1) // 2


@lru_cache(maxsize=256)
def causal_block_pairs(seq_len: int, block: int, window: int | None = None, chunk: int | None = None) -> int:
    """The ``block x block`` tiles of the score matrix a causal mask leaves not wholly empty (a last partial block counts whole).

    Query block ``i`` (rows ``i B .. min((i + 1) B, s) - 1``) needs the keys from
    the first one any of its rows keeps to its last row: ``0`` (full causal),
    ``max(0, i B - w + 1)`` (a window: its first row's oldest key; every key
    between is some row's), or the start of its first row's chunk (chunks: the
    keys from there to its last row each belong to some row's chunk at or
    before that row). It visits the key blocks from that key's block to its own.
    """
    _check(window, chunk)
    if block < 1:
        raise ValueError(f"a block holds at least one token, got {block}")
    total = 0
    for i in range(-(-seq_len // block)):
        first = i * block
        if window is not None:
            first = max(0, first - window + 1)
        elif chunk is not None:
            first = first // chunk * chunk
        else:
            first = 0
        total += i - first // block + 1
    return total


@attrs.frozen
class LocalMask:
    """The causal mask of a local attention core over the whole sequence: a sliding ``window`` or ``chunk`` size."""

    seq_len: int
    window: int | None = None
    chunk: int | None = None

    def __attrs_post_init__(self) -> None:
        _check(self.window, self.chunk)

    def executed_over_exact(self, block: int) -> float:
        """A block kernel's work on this mask over the exact pairs', each as a share of the full causal mask's.

        ``(blocks run / full causal blocks) / (pairs kept / full causal pairs)``: 1 for a mask
        that keeps everything causal; about 2 for a 128-token window at blocks of 128.
        """
        s, w, c = self.seq_len, self.window, self.chunk
        blocks = causal_block_pairs(s, block, w, c) / causal_block_pairs(s, block)
        return blocks / (causal_score_pairs(s, w, c) / causal_score_pairs(s))


def local_mask(seq_len: int, window: int | None = None, chunk: int | None = None) -> LocalMask | None:
    """The :class:`LocalMask` of a window or chunks over *seq_len* tokens; ``None`` where it keeps every causal pair."""
    if (window is not None and window < seq_len) or (chunk is not None and chunk < seq_len):
        return LocalMask(seq_len, window, chunk)
    _check(window, chunk)
    return None


def block_factor(mask: LocalMask | None, block: int | None) -> float:
    """What a local layer's attention time is multiplied by under a block-sparse kernel of *block* tokens.

    1.0 without a local mask or without a stated block size (a kernel priced on exact pairs).
    """
    return 1.0 if mask is None or block is None else mask.executed_over_exact(block)
