"""Adam, AdamW and 8-bit Adam: two states per parameter element.

``adamw`` (Loshchilov and Hutter 2019) and ``adam`` (Kingma and Ba 2015) keep
the first and second moments, each ``moment_bytes`` wide, and their fused
update moves ``2 * w + grad + 2 * 2 * moment_bytes + cast`` bytes per element
(:mod:`hp_plugins.optimizers.update`): the figures the planner used before
optimizers were plugins, unchanged.

Under PyTorch's multi-tensor (``foreach``) implementation, the default on a GPU
(torch/optim/adam.py ``_multi_tensor_adam``; AdamW is Adam with decoupled weight
decay there), the update is a chain of ``torch._foreach_*`` kernels, each one pass
over HBM (``capturable=False``, no amsgrad, as trainers run it). With ``w`` the
updated weights' width, ``g`` the gradient's, ``m`` the moments', per element:
``mul_`` of the weights by ``1 - lr * wd`` (2w; AdamW only: Adam's default weight
decay is 0), ``lerp_`` of the first moment toward the gradient (2m + g), ``mul_`` of
the second moment by beta2 (2m), ``addcmul_`` of the gradient's square into it
(2m + g; the gradient is read once, both operands one tensor), ``sqrt`` of it into
a new temporary of its dtype (2m), ``div_`` of that by the bias correction (2m),
``add_`` of eps (2m), and ``addcdiv_`` of the first moment over it into the weights
(2w + 2m): ``4w + 2g + 14m`` for AdamW, ``2w + 2g + 14m`` for Adam, plus the
master copy's cast. 80 bytes an fp32 element for AdamW, against the fused
update's 28. Measured on an H200 (tests/plugins/data/h200_fsdp2_steps.json): a
foreach AdamW step over 1.92e9 fp32 elements took 43.4 ms (3.55 TB/s on these
80 bytes), the fused step 19.4 ms.

``adam8bit`` is block-wise 8-bit Adam (Dettmers et al. 2022, "8-bit Optimizers
via Block-wise Quantization", ICLR; bitsandbytes ``bnb.optim.Adam8bit``:
``Optimizer2State`` with ``optim_bits=8``, ``block_wise=True``): each moment is
one byte per element, quantized in blocks of 2048 elements with one fp32
absolute maximum per block and moment, so ``2 * 1 + 2 * 4 / 2048`` bytes per
element whatever ``moment_bytes`` says. 2048 is the paper's block size and
bitsandbytes' before v0.44.0; since v0.44.0 (PR #1365) bitsandbytes quantizes
its 8-bit optimizer states in blocks of 256: ``2 + 2 * 4 / 256`` = 2.03125
bytes per element, an optimizer a plugin states in a few lines (the example of
docs/hooks/hp_optimizers.md). Not modelled: a tensor's last block is partial
(``ceil(n / block)`` scales, at most 8 bytes a tensor more), and bitsandbytes
keeps 32-bit states for tensors under ``min_8bit_size`` = 4096 elements (the
biases and norm scales of narrow models: a few thousand elements a layer). Its
update dequantizes, updates and requantizes the moments in one kernel: the
fused update's traffic with its states' bytes.
"""

from __future__ import annotations

from hp_core.markers import hookimpl
from hp_core.specs.precision import PrecisionSpec
from hp_core.types import Optimizer, ParamSlice
from hp_plugins.optimizers.update import update_bytes, weight_widths

__all__ = ["ADAM8BIT_BLOCK", "adam8bit_state_bytes", "adam_state_bytes", "hp_optimizers"]

# The block size of block-wise quantized optimizer states: Dettmers et al. 2022; bitsandbytes before v0.44.0.
ADAM8BIT_BLOCK = 2048
# Each block's scale: one fp32 absolute maximum per block and moment.
_ABSMAX_BYTES = 4


def adam_state_bytes(s: ParamSlice, p: PrecisionSpec) -> int:
    """The first and second moments, ``moment_bytes`` each."""
    return 2 * p.moment_bytes


def adam_step_bytes(s: ParamSlice, p: PrecisionSpec) -> float:
    return update_bytes(p, adam_state_bytes(s, p))


def _foreach_bytes(p: PrecisionSpec, weight_passes: int) -> float:
    """The foreach chain's bytes per element (module docstring): *weight_passes* reads and writes of the weights."""
    weights, cast = weight_widths(p)
    return weight_passes * weights + 2 * p.grad_bytes + 14 * p.moment_bytes + cast


def adamw_foreach_step_bytes(s: ParamSlice, p: PrecisionSpec) -> float:
    return _foreach_bytes(p, 4)


def adam_foreach_step_bytes(s: ParamSlice, p: PrecisionSpec) -> float:
    return _foreach_bytes(p, 2)


def adam8bit_state_bytes(s: ParamSlice, p: PrecisionSpec) -> float:
    """Two one-byte moments and, per moment, one fp32 scale per 2048-element block: ``2 + 2 * 4 / 2048``."""
    return 2 * 1 + 2 * _ABSMAX_BYTES / ADAM8BIT_BLOCK


def adam8bit_step_bytes(s: ParamSlice, p: PrecisionSpec) -> float:
    return update_bytes(p, adam8bit_state_bytes(s, p))


@hookimpl
def hp_optimizers():
    yield Optimizer(
        name="adamw", state_bytes=adam_state_bytes, step_bytes=adam_step_bytes, foreach_step_bytes=adamw_foreach_step_bytes,
        description="AdamW (Loshchilov and Hutter 2019): two moments of moment_bytes each, fused update "
                    "(PyTorch's foreach update: eight passes)",
    )
    yield Optimizer(
        name="adam", state_bytes=adam_state_bytes, step_bytes=adam_step_bytes, foreach_step_bytes=adam_foreach_step_bytes,
        description="Adam (Kingma and Ba 2015): two moments of moment_bytes each, fused update "
                    "(PyTorch's foreach update: seven passes)",
    )
    yield Optimizer(
        name="adam8bit", state_bytes=adam8bit_state_bytes, step_bytes=adam8bit_step_bytes,
        description="block-wise 8-bit Adam (Dettmers et al. 2022; bitsandbytes before 0.44): two 1-byte moments, "
                    "an fp32 scale per 2048-element block each",
    )
