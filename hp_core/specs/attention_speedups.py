"""Measured speedups of a fused attention kernel in FP8 over the same kernel in bf16
(:attr:`DeviceEfficiency.attention_speedups <hp_core.specs.timing.DeviceEfficiency.attention_speedups>`;
docs/precision.md, "FP8 attention").

A recipe running the attention core in FP8 (:attr:`PrecisionRecipe.attention_format
<hp_core.precision_recipes.PrecisionRecipe.attention_format>`) divides the layer's bf16 attention time, forward
and backward apart, by the speedup a device entry states for that format, that kind of attention and the
sequence length nearest the call's (by ratio). Each entry is a measurement: bf16 kernel time over FP8 kernel
time at one shape.
"""

from __future__ import annotations

import math

import attrs

from hp_core.errors import SpecError

__all__ = ["ATTENTION_KINDS", "AttentionSpeedup", "pick_attention_speedup"]

# ``full``: causal attention whose q/k and v head dims are equal (MHA, GQA, MQA); ``mla``: wider q/k than v
# (DeepSeek's multi-head latent attention, LayerWork.wide_qk_attention).
ATTENTION_KINDS = ("full", "mla")


def _positive(instance, attribute, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise SpecError(attribute.name, f"attention speedup {attribute.name} must be a positive number, got {value!r}")


def _band(instance, attribute, value) -> None:
    if value is None:
        return
    if (not isinstance(value, tuple) or len(value) != 2 or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value)
            or not 0 < value[0] <= value[1]):
        raise SpecError(attribute.name, f"peak_ratio must be None or (low, high) with 0 < low <= high, got {value!r}")


@attrs.frozen(kw_only=True)
class AttentionSpeedup:
    """One measured FP8 attention speedup.

    Attributes:
        format: The attention core's format (``e4m3``: per-tensor scaled FP8; ``mxfp8``).
        kind: :data:`ATTENTION_KINDS`.
        seq_len: The sequence length measured at (queries and keys alike, causal).
        forward: bf16 forward kernel time over the FP8 one.
        backward: The same for the backward kernel (a value below 1: slower than bf16).
        peak_ratio: The FP4:BF16 dense peak ratio range of the devices it carries to (the part measured and its
            siblings: ``(4.0, 4.0)`` B200 and GB200, ``(5.6, 6.22)`` Blackwell Ultra); ``None``: every device of
            the entry's architecture.
        source: Where it was measured (repository, commit, file, rows).
    """

    format: str = attrs.field(validator=attrs.validators.in_(("e4m3", "mxfp8")))
    kind: str = attrs.field(validator=attrs.validators.in_(ATTENTION_KINDS))
    seq_len: int = attrs.field(validator=[attrs.validators.instance_of(int), _positive])
    forward: float = attrs.field(validator=_positive)
    backward: float = attrs.field(validator=_positive)
    peak_ratio: tuple[float, float] | None = attrs.field(default=None, validator=_band)
    source: str = attrs.field(validator=attrs.validators.min_len(1))


def pick_attention_speedup(entries: tuple[AttentionSpeedup, ...], fmt: str, kind: str, seq_len: int,
                           peak_ratio: float | None) -> AttentionSpeedup | None:
    """The entry for *fmt* and *kind* whose band holds *peak_ratio* (an entry with none holds every ratio) at the
    sequence length nearest *seq_len* by ratio (the longer on a tie); ``None`` where no entry matches."""
    fits = [e for e in entries if e.format == fmt and e.kind == kind
            and (e.peak_ratio is None or (peak_ratio is not None and e.peak_ratio[0] - 1e-9 <= peak_ratio <= e.peak_ratio[1] + 1e-9))]
    if not fits:
        return None
    return min(fits, key=lambda e: (abs(math.log(e.seq_len / seq_len)), -e.seq_len))
