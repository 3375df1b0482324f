"""Linear modules in a format of their own inside a low-precision run (``precision.module_formats``; docs/precision.md).

A module kept in ``bf16`` runs outside the quantization autocast (Megatron-Core's per-module ``quant_recipe``:
:mod:`hp_core.linear_modules`), so :func:`with_module_formats` prices it as a layer kept in the compute dtype prices
all its GEMMs (:func:`~hp_core.engine.precision.in_compute_dtype`), for that module only:

* time: its GEMMs join :attr:`LayerWork.high_precision_gemms <hp_core.costs.LayerWork.high_precision_gemms>` (the
  bf16 rate, no speedup, nothing quantized: :mod:`hp_core.engine.timing.gemm_seconds`) and leave
  :attr:`~hp_core.costs.LayerWork.original_input_gemms`; the calls of the layer's sequence-parallel all-gather that
  move its input or output gradient move them in the compute dtype (Transformer Engine gathers with the module's
  quantizer, none outside the autocast: ``module/layernorm_linear.py`` and ``module/linear.py``
  ``gather_along_first_dim(..., quantizer=...)`` at NVIDIA/TransformerEngine d0067d0);
* memory: its parameter families are ``high_precision`` (no quantized weight copy, no quantized parameter gather,
  no scaling state: Transformer Engine makes weight workspaces only under ``FP8GlobalStateManager.is_fp8_enabled()``,
  ``module/base.py`` ``get_weight_workspace``), and the kept tensors that are its input lose their ``gemm_input``
  mark: the linear saves its compute-dtype input (``module/linear.py`` ``_Linear.forward`` saves ``inputmat``
  unquantized where ``fp8`` is false).

A run without a low-precision recipe, and a layer already kept in the compute dtype, are left as they are (the module
config overrides no disabled autocast: ``TEQuantizationRecipe.override_nonquantized_autocast`` is false by default,
``megatron/core/extensions/transformer_engine.py`` at NVIDIA/Megatron-LM@d98e8a6).
"""

from __future__ import annotations

from typing import Iterable

import attrs

from hp_core.costs import Collective, LayerCost
from hp_core.errors import ConfigError

__all__ = ["check_module_formats", "modules_present", "with_module_formats"]


def _bf16_modules(formats: tuple[tuple[str, str], ...]) -> frozenset[str]:
    return frozenset(name for name, fmt in formats if fmt == "bf16")


def _split_gathers(collectives: tuple[Collective, ...], forward: int, backward: int) -> tuple[Collective, ...]:
    """*collectives* with *forward* and *backward* calls of the GEMM-input all-gather moved to a compute-dtype copy
    (``gemm_input`` false); none where the layer issues no such gather (no TP or no SP)."""
    found: list[Collective] = []
    for c in collectives:
        if (forward or backward) and c.gemm_input and c.group == "tp" and c.op == "all_gather":
            f, b = min(forward, c.forward_calls), min(backward, c.backward_calls)
            forward, backward = forward - f, backward - b
            rest = attrs.evolve(c, forward_calls=c.forward_calls - f, backward_calls=c.backward_calls - b)
            if rest.forward_calls or rest.backward_calls:
                found.append(rest)
            found.append(attrs.evolve(c, forward_calls=f, backward_calls=b, gemm_input=False))
        else:
            found.append(c)
    return tuple(found)


def with_module_formats(cost: LayerCost, formats: tuple[tuple[str, str], ...]) -> LayerCost:
    """*cost* with the modules *formats* keeps in ``bf16`` priced so (module docstring); the same object where it
    names none of the layer's modules or the layer is already kept in the compute dtype (``work.quantized`` false)."""
    names = _bf16_modules(formats)
    work = cost.work
    if not names or work is None or not work.quantized:
        return cost
    chosen = [m for m in work.modules if m.name in names]
    if not chosen:
        return cost
    params, terms = {p for m in chosen for p in m.params}, {t for m in chosen for t in m.terms}
    high, original = list(work.high_precision_gemms), list(work.original_input_gemms)
    collectives = work.collectives
    for module in chosen:
        for gemm in module.gemms:
            if gemm not in high:
                high.append(gemm)
            if gemm in original:
                original.remove(gemm)
        collectives = _split_gathers(collectives, *module.gathers)
    return attrs.evolve(
        cost,
        params=tuple(attrs.evolve(p, high_precision=True) if p.name in params and not p.high_precision else p
                     for p in cost.params),
        activations=tuple(attrs.evolve(t, gemm_input=None, original_input=False) if t.op in terms and t.gemm_input
                          else t for t in cost.activations),
        work=attrs.evolve(work, high_precision_gemms=tuple(high), original_input_gemms=tuple(original),
                          collectives=collectives),
    )


def modules_present(costs: Iterable[LayerCost]) -> frozenset[str]:
    """The module names the layers of *costs* mark (:attr:`LayerWork.modules <hp_core.costs.LayerWork.modules>`)."""
    return frozenset(m.name for cost in costs if cost.work is not None for m in cost.work.modules)


def check_module_formats(formats: tuple[tuple[str, str], ...], costs: Iterable[LayerCost]) -> None:
    """Refuse a module format naming a module no layer of the model marks: it would change nothing, silently.

    Raises:
        ConfigError: One line at ``$.precision.module_formats.<name>``, naming the modules the model has.
    """
    if not formats:
        return
    present = modules_present(costs)
    for name, _ in formats:
        if name not in present:
            raise ConfigError(f"$.precision.module_formats.{name}",
                              f"module {name} is in no layer of this model (its layers mark "
                              f"{sorted(present) or 'no named module'}); remove it or name a module the model has")
