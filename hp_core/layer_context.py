"""The context a layer kind's evaluator is asked in (:class:`LayerContext`), re-exported by :mod:`hp_core.costs`."""

from __future__ import annotations

from typing import Any, Callable

import attrs

from hp_core.specs.precision import PrecisionSpec

__all__ = ["LayerContext"]


@attrs.frozen
class LayerContext:
    """What one layer's evaluator may know of the run: degrees, shapes and dtypes.

    Attributes:
        tp: Tensor-parallel degree.
        cp: Context-parallel degree; a rank holds ``seq_len / cp`` tokens of each sequence.
        cp_kind: ``p2p`` (ring) or ``a2a`` (all-to-all over heads).
        sp: Whether sequence parallelism splits the non-TP regions over ``tp``.
        ep: Expert-parallel degree.
        etp: Expert tensor-parallel degree.
        micro_batch_size: Sequences per micro-batch.
        seq_len: Tokens per sequence.
        precision: Byte widths of parameters, gradients, activations, ...
        attention: ``"eager"`` or ``"flash"`` (see :data:`hp_core.costs.ATTENTION_IMPLS`).
        vocab_pad_multiple: The vocabulary is padded to a multiple of
            ``vocab_pad_multiple * tp`` where the runtime does so (1: no padding).
        traits: How the trainer implements ops, where that changes what a
            layer keeps (names from :data:`hp_core.traits.TRAITS`).
        sublayer: Evaluates another layer group in this context, for a kind
            made of other kinds' layers (the MTP module's transformer layer);
            set by the planner, ignored by equality.
    """

    tp: int
    cp: int
    sp: bool
    ep: int
    etp: int
    micro_batch_size: int
    seq_len: int
    precision: PrecisionSpec
    attention: str
    vocab_pad_multiple: int = 1
    cp_kind: str = "p2p"
    traits: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)
    sublayer: Callable[[Any], "LayerCost"] | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch on one context-parallel rank (before any SP split)."""
        return self.micro_batch_size * self.seq_len // self.cp

    @property
    def sp_degree(self) -> int:
        """The divisor sequence parallelism applies to the non-TP regions."""
        return self.tp if self.sp else 1
