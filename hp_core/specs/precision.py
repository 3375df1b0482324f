"""Precision and optimizer: the byte widths every memory term multiplies by."""

from __future__ import annotations

import attrs

from hp_core.validators import non_negative_int, positive_int

__all__ = ["OPTIMIZER_MOMENTS", "PrecisionSpec"]

# Optimizer state tensors per parameter: Adam/AdamW keep the first and second
# moments (Kingma & Ba 2015); Muon keeps one momentum buffer (Jordan et al.
# 2024); SGD with momentum one buffer, plain SGD none.
OPTIMIZER_MOMENTS = {"adamw": 2, "adam": 2, "muon": 1, "sgd_momentum": 1, "sgd": 0}


@attrs.frozen(kw_only=True)
class PrecisionSpec:
    """Bytes per element of each kind of tensor a training step holds.

    The defaults are mixed-precision bf16 training with fp32 gradients, fp32
    master parameters and fp32 AdamW moments: 2 + 4 + 4 + 2*4 = 18 bytes per
    parameter, the figure of Megatron-LM's ``theoretical_memory_usage.py``
    (``18`` without the distributed optimizer, ``6 + 12/dp`` with it).

    Attributes:
        param_bytes: The model parameters as the forward reads them.
        grad_bytes: The gradient (accumulation) buffer.
        master_param_bytes: The optimizer's master copy; 0 when the optimizer
            updates the parameters in place (pure fp32 or pure bf16 training).
        optimizer: One of :data:`OPTIMIZER_MOMENTS`.
        moment_bytes: Each optimizer state tensor.
        activation_bytes: Activations in the compute dtype.
        softmax_bytes: The attention probabilities of eager attention (4 where
            the softmax runs in fp32 and keeps its output so).
        dropout_mask_bytes: A dropout mask element (1: a byte-wide bool mask).
        lse_bytes: Flash attention's log-sum-exp statistics (fp32).
        logits_bytes: The dtype the loss computes its softmax over the vocabulary
            in (4: fp32, as Megatron-LM's ``vocab_parallel_cross_entropy`` and
            Hugging Face's ``logits.float()`` upcast do).
    """

    param_bytes: int = attrs.field(default=2, validator=positive_int)
    grad_bytes: int = attrs.field(default=4, validator=positive_int)
    master_param_bytes: int = attrs.field(default=4, validator=non_negative_int)
    optimizer: str = attrs.field(default="adamw", validator=attrs.validators.in_(tuple(OPTIMIZER_MOMENTS)))
    moment_bytes: int = attrs.field(default=4, validator=positive_int)
    activation_bytes: int = attrs.field(default=2, validator=positive_int)
    softmax_bytes: int = attrs.field(default=2, validator=positive_int)
    dropout_mask_bytes: int = attrs.field(default=1, validator=positive_int)
    lse_bytes: int = attrs.field(default=4, validator=positive_int)
    logits_bytes: int = attrs.field(default=4, validator=positive_int)

    @property
    def optimizer_moments(self) -> int:
        return OPTIMIZER_MOMENTS[self.optimizer]

    @property
    def optimizer_state_bytes(self) -> int:
        """Optimizer state bytes per parameter (moments only; master copy separate)."""
        return self.optimizer_moments * self.moment_bytes
