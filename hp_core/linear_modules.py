"""Named linear modules of a layer, which a run may price in a format of their own (``precision.module_formats``).

A low-precision recipe quantizes every GEMM of a layer it does not keep in the
compute dtype. Megatron-Core can set the format per module instead: a
quantization recipe (``TransformerConfig.quant_recipe``, a
``megatron.core.quantization.quant_config.RecipeConfig`` read from a YAML file
by ``load_quantization_recipe``) matches each module's path (``decoder.layers.3.self_attention.linear_qkv``)
against glob patterns, and the model hands each module its match
(``get_quant_config_or_none(name, config.quant_recipe)`` on every module with a
``finish_init``: ``megatron/core/models/hybrid/hybrid_model.py`` and
``gpt/gpt_model.py`` at NVIDIA/Megatron-LM@d98e8a6; ``TELinear``,
``TELayerNormColumnParallelLinear`` and the grouped linear call it in their
constructors, ``megatron/core/extensions/transformer_engine.py``). A module
matched to a config whose ``training_recipe`` names no FP8 or FP4 recipe runs
its forward under a disabled quantization autocast (``TEQuantizationRecipe``:
"If no FP8 or FP4 quantization is configured, the recipe is execution in
high-precision (BF16)"; ``_get_fp8_autocast_for_quant_params``), so its GEMMs,
its saved input and its weight are the compute dtype's. A config only
overrides an autocast that is on (``override_nonquantized_autocast`` defaults
to false): a layer kept in bf16 whole stays so.

Megatron-Bridge's Nemotron 3 Super recipes state one such file
(``perf_recipes/nemotronh/te_quant.cfg`` at NVIDIA-NeMo/Megatron-Bridge v0.6.0,
``scripts/performance/configs/nemotronh/te_quant.cfg`` at v0.4.0/v0.5.0):
``*.linear_qkv``, ``*.linear_proj``, ``*mlp.fc[12]_latent_proj`` and ``mtp.*``
bf16, ``*mixer.out_proj`` MXFP8.

The names below are hp's, one per module a layer kind marks
(:class:`LinearModule`); each says the Megatron-Core module it is.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

import attrs

__all__ = ["LINEAR_MODULES", "LinearModule", "joining_kept"]

# hp's module names, and the Megatron-Core modules they are (module paths at NVIDIA/Megatron-LM@d98e8a6).
LINEAR_MODULES: dict[str, str] = {
    "attention_qkv": "self_attention.linear_qkv (the fused query/key/value projection of grouped-query attention)",
    "attention_proj": "self_attention.linear_proj (attention's output projection)",
    "moe_latent_proj": "mlp.fc1_latent_proj and mlp.fc2_latent_proj (a latent MoE's projections into and out of "
                       "the experts' width)",
    "mamba_in_proj": "mixer.in_proj (a Mamba-2 mixer's input projection)",
    "mamba_out_proj": "mixer.out_proj (a Mamba-2 mixer's output projection)",
}


def _tuple(value: object) -> tuple:
    return tuple(value)  # type: ignore[arg-type]


@attrs.frozen
class LinearModule:
    """One named linear module of a layer: what a format of its own changes in the layer's cost.

    Attributes:
        name: One of :data:`LINEAR_MODULES`.
        gemms: Its entries of :attr:`LayerWork.gemms <hp_core.costs.LayerWork.gemms>` (``(rows, fan_out, fan_in)``),
            one per linear of the module: its own, whatever other linear of the layer has the same shape.
        params: The names of its parameter families (:attr:`ParamCount.name <hp_core.costs.ParamCount.name>`).
        terms: The ops of the kept tensors that are its input, kept for its weight gradient
            (:attr:`ActivationTerm.op <hp_core.costs.ActivationTerm.op>`, marked ``gemm_input``), and that no
            linear of another format reads.
        gathers: ``(forward, backward)`` calls of the layer's sequence-parallel all-gather of GEMM inputs
            (:attr:`Collective.gemm_input <hp_core.costs.Collective.gemm_input>`) that move its input (forward) or its
            output gradient (backward); a calls count above the layer's is none there (no TP or no SP).
        original_input_gemms: Those of :attr:`gemms` whose input its trainer keeps in the compute dtype (their entries
            of :attr:`LayerWork.original_input_gemms <hp_core.costs.LayerWork.original_input_gemms>`): what a format
            of its own takes out of that list, and no other linear's entry of the same shape.
        format: The quantized format a run gives it apart from its recipe's (a registered recipe's name, ``mxfp8``),
            set by the engine (:func:`hp_core.engine.module_formats.with_module_formats`); ``None``: the run's.
        positions: The positions of :attr:`gemms` in :attr:`LayerWork.gemms <hp_core.costs.LayerWork.gemms>`, one
            per entry in order: what a block's re-run (:attr:`Rerun.positions <hp_core.costs.Rerun.positions>`) takes
            of the module, by place, not by shape (an attention projection as wide as a shared expert's).
    """

    name: str
    gemms: tuple[tuple[int, int, int], ...] = attrs.field(default=(), converter=_tuple)
    params: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    terms: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    gathers: tuple[int, int] = attrs.field(default=(0, 0), converter=_tuple)
    original_input_gemms: tuple[tuple[int, int, int], ...] = attrs.field(default=(), converter=_tuple)
    format: str | None = None
    positions: tuple[int, ...] = attrs.field(default=(), converter=_tuple)

    def __attrs_post_init__(self) -> None:
        if self.name not in LINEAR_MODULES:
            raise ValueError(f"LinearModule {self.name!r}: not one of {sorted(LINEAR_MODULES)}")
        if len(self.positions) != len(self.gemms):
            raise ValueError(f"LinearModule {self.name!r}: {len(self.gemms)} GEMMs but {len(self.positions)} positions")

    def renamed(self, prefix: str, offset: int = 0) -> "LinearModule":
        """The module with its parameter families' names and kept terms' ops prefixed as a merge renames them
        (``layers.0.``: :func:`hp_plugins.kit.merge.merge_costs`), its GEMMs' positions moved on by *offset* (the
        merged layer's GEMMs listed before its layer's)."""
        return attrs.evolve(self, params=tuple(prefix + n for n in self.params), terms=tuple(prefix + op for op in self.terms),
                            positions=tuple(offset + p for p in self.positions))


def joining_kept(gemms: Iterable[tuple[int, int, int]], listed: Iterable[tuple[int, int, int]],
                 kept: Iterable[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Of *gemms* (modules' GEMMs to keep in a format of their own), those that join the layer's *kept* list: each while
    the layer lists (*listed*) an instance of its value not kept already. Entries of one value price alike, so the
    lists are multisets (a merged depth or a repeated MTP module lists a shape once per layer; another linear of its
    shape may be kept: an MTP head as wide as a qkv projection, a gate projection as wide as a bf16 ``linear_proj``)."""
    free = Counter(listed) - Counter(kept)
    joining = []
    for gemm in gemms:
        if free[gemm] > 0:
            free[gemm] -= 1
            joining.append(gemm)
    return joining
