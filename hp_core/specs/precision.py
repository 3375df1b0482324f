"""Precision and optimizer: the byte widths every memory term multiplies by, and the optimizer's name."""

from __future__ import annotations

import attrs

from hp_core.errors import SpecError
from hp_core.linear_modules import LINEAR_MODULES
from hp_core.validators import name_matching, non_negative_int, optional, positive_int

__all__ = ["MODULE_FORMATS", "PrecisionSpec"]

# Names checked against the registry where a run is prepared; here only that they are names (any non-empty text).
_optimizer_name = name_matching(r"(?s).", "an optimizer's name (see 'hp plugins')")
_recipe_name = name_matching(r"(?s).", "a precision recipe's name (see 'hp plugins')")
# The formats a module may be given (PrecisionSpec.module_formats), and those priced so far.
MODULE_FORMATS = ("bf16", "mxfp8", "nvfp4")


def _module_pairs(value: object) -> tuple[tuple[str, str], ...]:
    """A mapping (or pairs) of module name to format, as sorted pairs (the spec stays hashable)."""
    if isinstance(value, tuple) and all(isinstance(p, tuple) for p in value):
        return tuple(sorted(value))
    if not isinstance(value, dict):
        raise SpecError("module_formats", f"module_formats must be a mapping of module name to format, got {value!r}")
    return tuple(sorted((str(k), v) for k, v in value.items()))


def _module_formats(instance: object, attribute: object, value: tuple[tuple[str, str], ...]) -> None:
    for name, fmt in value:
        if name not in LINEAR_MODULES:
            raise SpecError(f"module_formats.{name}", f"module_formats names {name!r}, not a linear module hp knows; "
                            f"name one of {sorted(LINEAR_MODULES)} (docs/precision.md)")
        if fmt not in MODULE_FORMATS:
            raise SpecError(f"module_formats.{name}", f"module_formats.{name} is {fmt!r}; a module's own format is "
                            f"priced for {list(MODULE_FORMATS)} only (docs/precision.md 'Modules in a format of their own')")


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
        reduce_bytes: The dtype the data-parallel gradient reduction (all-reduce,
            reduce-scatter) runs in, where it differs from ``grad_bytes``: FSDP's
            ``reduce_dtype`` (``MixedPrecision`` / ``MixedPrecisionPolicy``), whose
            reduce-scatter input is in that dtype while the sharded gradient is
            cast back to ``grad_bytes``. ``None``: ``grad_bytes``.
        master_param_bytes: The optimizer's master copy; 0 when the optimizer
            updates the parameters in place (pure fp32 or pure bf16 training).
        optimizer: The optimizer's name: an :class:`~hp_core.types.Optimizer`
            of the registry (``hp plugins``; hook ``hp_optimizers``), which
            states what it keeps and moves per parameter. Checked where a run
            is prepared, against the registry the run uses.
        moment_bytes: Each optimizer state tensor (an optimizer's states are
            in this width unless it states its own, as 8-bit Adam does).
        activation_bytes: Activations in the compute dtype.
        softmax_bytes: The attention probabilities of eager attention (4 where
            the softmax runs in fp32 and keeps its output so).
        dropout_mask_bytes: A dropout mask element (1: a byte-wide bool mask).
        lse_bytes: Flash attention's log-sum-exp statistics (fp32).
        logits_bytes: The dtype the loss computes its softmax over the vocabulary
            in (4: fp32, as Megatron-LM's ``vocab_parallel_cross_entropy`` and
            Hugging Face's ``logits.float()`` upcast do).
        recipe: The low-precision GEMM recipe's name: a
            :class:`~hp_core.precision_recipes.PrecisionRecipe` of the registry
            (``hp plugins``; hook ``hp_precision_recipes``; ``--precision``):
            which linear-layer GEMM operands run in FP8/FP4 and what that keeps
            and moves. ``bf16`` quantizes nothing. Checked where a run is
            prepared; the widths above stay those of the compute dtype.
        high_precision_layers_at_start: Under a low-precision recipe, how many of the model's first body
            (decoder) layers keep every GEMM in the compute dtype: no quantized weights, inputs or gathers
            (Megatron-LM ``--first-last-layers-bf16`` with ``--num-layers-at-start-in-bf16``; Megatron-Bridge's
            ``first_last_layers_bf16`` and ``num_layers_at_start_in_bf16``). 0: none. Ignored without a recipe.
        high_precision_layers_at_end: The same for the model's last body layers (``--num-layers-at-end-in-bf16``).
        module_formats: Under a low-precision recipe, named linear modules that run in a format of their own
            (:data:`~hp_core.linear_modules.LINEAR_MODULES` to a format of :data:`MODULE_FORMATS`): Megatron-Core's
            per-module quantization recipe (``quant_recipe``; :mod:`hp_core.linear_modules`). Written as a mapping
            (``{attention_qkv: bf16}``), held as sorted pairs. Empty: every module in the run's recipe. Ignored
            without a recipe (Megatron-Core's module configs override no disabled autocast).
    """

    param_bytes: int = attrs.field(default=2, validator=positive_int)
    grad_bytes: int = attrs.field(default=4, validator=positive_int)
    reduce_bytes: int | None = attrs.field(default=None, validator=optional(positive_int))
    master_param_bytes: int = attrs.field(default=4, validator=non_negative_int)
    optimizer: str = attrs.field(default="adamw", validator=_optimizer_name)
    moment_bytes: int = attrs.field(default=4, validator=positive_int)
    activation_bytes: int = attrs.field(default=2, validator=positive_int)
    softmax_bytes: int = attrs.field(default=2, validator=positive_int)
    dropout_mask_bytes: int = attrs.field(default=1, validator=positive_int)
    lse_bytes: int = attrs.field(default=4, validator=positive_int)
    logits_bytes: int = attrs.field(default=4, validator=positive_int)
    recipe: str = attrs.field(default="bf16", validator=_recipe_name)
    high_precision_layers_at_start: int = attrs.field(default=0, validator=non_negative_int)
    high_precision_layers_at_end: int = attrs.field(default=0, validator=non_negative_int)
    module_formats: tuple[tuple[str, str], ...] = attrs.field(factory=tuple, converter=_module_pairs,
                                                             validator=_module_formats)

    @property
    def reduction_bytes(self) -> int:
        """The width the data-parallel gradient reduction runs in: :attr:`reduce_bytes`, else :attr:`grad_bytes`."""
        return self.grad_bytes if self.reduce_bytes is None else self.reduce_bytes
