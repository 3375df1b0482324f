"""Low-precision GEMM recipes: which GEMM operands a trainer quantizes, to what, and what that keeps.

A :class:`PrecisionRecipe` (hook ``hp_precision_recipes``) states, for the
GEMMs of linear layers, the format and scaling of each operand -- the weights,
the activations (the layer's input, forward and in the weight-gradient GEMM)
and the gradients (the output gradient, in both backward GEMMs) -- and what
the trainer keeps and moves because of it: the quantized copy of a linear
layer's input saved for its backward, the cached low-precision copies of the
weights, parameters all-gathered in the weights' format, sequence-parallel
all-gathers of linear inputs in the activations' format. A run names one
(``precision: {recipe: NAME}``, ``--precision NAME``); ``bf16`` quantizes
nothing and leaves every figure as it was. docs/precision.md lists the
built-in recipes and the source of every figure.

What stays in the compute dtype whatever the recipe: the attention core
(unless :attr:`PrecisionRecipe.attention_format` says otherwise), norms,
softmax, the router's gate, the embedding and the output head -- the ops a
layer kind marks as such (:attr:`hp_core.costs.ParamCount.high_precision`,
:attr:`hp_core.costs.LayerWork.high_precision_gemms`) or does not mark as a
linear input (:attr:`hp_core.costs.ActivationTerm.gemm_input`).
"""

from __future__ import annotations

from typing import Mapping

import attrs

from hp_core.errors import ConfigError
from hp_core.precision_recipe_checks import GEMM_PASS_NAMES, check_recipe
from hp_core.validators import non_empty_text, non_negative_int, one_of

__all__ = ["AUTOCAST", "FORMATS", "GEMM_KERNELS", "GEMM_PASS_NAMES", "GEMM_SCOPES", "GemmOperand", "PrecisionRecipe", "SCALINGS",
           "SPLIT_ACCUMULATOR"]

# Element formats: (bits per element, the HardwareSpec.peak_flops key a GEMM of them runs at).
# e4m3 / e5m2: OCP FP8 (Micikevicius et al. 2022, "FP8 Formats for Deep Learning"); mxfp8: FP8
# elements in 32-element blocks sharing an E8M0 scale (OCP Microscaling Formats MX v1.0); nvfp4:
# E2M1 elements in 16-element blocks sharing an E4M3 scale, plus an fp32 scale per tensor
# (Transformer Engine common/recipe/__init__.py NVFP4BlockScaling).
FORMATS: dict[str, tuple[int, str]] = {
    "bf16": (16, "bf16"),
    "e4m3": (8, "fp8"),
    "e5m2": (8, "fp8"),
    "mxfp8": (8, "fp8"),
    "nvfp4": (4, "fp4"),
}

# Scaling schemes: (elements per scale, bytes per scale), 0 elements for a scale per tensor or per
# row (a few bytes per tensor or row, not counted per element: below 0.1% for rows of 1,024 or more).
# tensor_delayed: TE DelayedScaling (scale from an amax history); tensor_current: TE
# Float8CurrentScaling / torchao tensorwise; rowwise: torchao axiswise (one fp32 scale per row);
# block_1x128 / block_128x128: TE Float8BlockScaling, DeepSeek-V3 (arXiv:2412.19437, Section 3.3.2)
# with fp32 scales; mx_32: MXFP8, one E8M0 byte per 32 elements; nvfp4_16: one E4M3 byte per 16.
SCALINGS: dict[str, tuple[int, int]] = {
    "none": (0, 0),
    "tensor_delayed": (0, 0),
    "tensor_current": (0, 0),
    "rowwise": (0, 0),
    "block_1x128": (128, 4),
    "block_128x128": (128 * 128, 4),
    "mx_32": (32, 1),
    "nvfp4_16": (16, 1),
}

# The block formats and the one scaling each runs with (OCP MX: 32 elements an E8M0 scale; NVFP4: 16 an E4M3 scale).
_BLOCK_FORMATS = {"mxfp8": "mx_32", "nvfp4": "nvfp4_16"}
SAVED_INPUTS = ("quantized", "compute")
# The scalings FP8 attention may state of its own beside NVFP4 linears (PrecisionRecipe.attention_scaling): Transformer
# Engine's NVTE_DPA_FP8_RECIPE takes DelayedScaling or Float8CurrentScaling there (dot_product_attention.py at
# NVIDIA/TransformerEngine@40c69e7, the linear/attention recipe table), both per tensor.
_ATTENTION_OWN_SCALINGS = ("tensor_delayed", "tensor_current")
# The GEMM kernel families (PrecisionRecipe.kernel): what a device's measured speedups are keyed by.
GEMM_KERNELS = ("bf16", "fp8_tensorwise", "fp8_rowwise", "fp8_blockwise", "mxfp8", "nvfp4")
# Suffix of a measured speedup whose timed region includes the quantization of the GEMM inputs (Transformer
# Engine's gemm_profiling "Autocast (includes quantization overhead)" mode), as opposed to the kernel alone.
AUTOCAST = ":autocast"
# Suffix of a measured speedup of FP8 GEMMs that promote their partial sums to FP32 at intervals (cuBLASLt
# CUBLASLT_MATMUL_DESC_FAST_ACCUM off: Transformer Engine's use_split_accumulator, torch._scaled_mm's
# use_fast_accum=False), the precise and slower mode on Hopper; the plain kernel name is the fast-accumulation rate.
SPLIT_ACCUMULATOR = ":split_accumulator"
PARAM_GATHERS = ("none", "stored", "cast", "gradient_buffer")
# Which GEMMs a recipe quantizes (PrecisionRecipe.gemms): every one a layer does not keep in the compute dtype, the
# linear layers' only (torchtitan's quantize.linear converters swap nn.Linear modules; a routed expert's grouped GEMM is
# no nn.Linear), or the routed experts' grouped GEMMs only (torchtitan's quantize.grouped_mm converters).
GEMM_SCOPES = ("all", "linears", "experts")


def _flags(value: Any) -> dict[str, tuple[str, ...]]:
    """``{exporter: (flag, ...)}``: each trainer's flags as separate words (a string would be split into characters)."""
    found = {}
    for trainer, stated in dict(value).items():
        words = (stated,) if isinstance(stated, str) else tuple(stated)
        if isinstance(stated, str) or not isinstance(trainer, str) or not all(isinstance(w, str) for w in words):
            raise ValueError(f"flags: {trainer!r} maps to {stated!r}; state each trainer's flags as a tuple of words")
        found[trainer] = words
    return found


@attrs.frozen
class GemmOperand:
    """One GEMM operand's element format and scaling.

    Attributes:
        format: One of :data:`FORMATS`.
        scaling: One of :data:`SCALINGS` (``none`` for ``bf16``).
    """

    format: str = attrs.field(validator=one_of(tuple(FORMATS)))
    scaling: str = attrs.field(default="none", validator=one_of(tuple(SCALINGS)))

    def __attrs_post_init__(self) -> None:
        if (self.format == "bf16") != (self.scaling == "none"):
            raise ValueError(f"GemmOperand: format {self.format!r} with scaling {self.scaling!r}; "
                             "bf16 takes scaling 'none' and a low-precision format a scaling scheme")
        if (self.format in _BLOCK_FORMATS or self.scaling in _BLOCK_FORMATS.values()) and _BLOCK_FORMATS.get(self.format) != self.scaling:
            raise ValueError(f"GemmOperand: format {self.format!r} with scaling {self.scaling!r}; mxfp8 runs with mx_32 "
                             "and nvfp4 with nvfp4_16 only (their block scales are part of the format), and no other "
                             "format with either")

    @property
    def bytes_per_element(self) -> float:
        """Bytes one element takes with its share of the block scales (per-tensor and per-row scales not counted)."""
        bits, _ = FORMATS[self.format]
        block, scale = SCALINGS[self.scaling]
        return bits / 8 + (scale / block if block else 0.0)

    @property
    def peak_dtype(self) -> str:
        """The ``peak_flops`` key its GEMMs run at."""
        return FORMATS[self.format][1]

    @property
    def low_precision(self) -> bool:
        return self.format != "bf16"


_BF16 = GemmOperand("bf16")


@attrs.frozen(kw_only=True)
class PrecisionRecipe:
    """How a trainer runs its linear layers' GEMMs in low precision, and what it keeps and moves for it.

    Attributes:
        name: Registry name (``"fp8-delayed"``): what ``precision.recipe`` and ``--precision`` name.
        description: One line.
        source: The trainer code and flags it describes.
        weights: The weights' operand (forward and input-gradient GEMMs).
        activations: The layer input's operand (forward and weight-gradient GEMMs).
        gradients: The output gradient's operand (both backward GEMMs).
        amax_history: Per-tensor delayed scaling's amax history length (0 otherwise).
        saved_input: What a linear layer keeps of its input for the weight
            gradient: ``quantized`` (one copy in the activations' format:
            Transformer Engine ``module/linear.py`` keeps only the column-wise
            usage of the quantized input) or ``compute`` (the compute-dtype
            input, re-quantized in backward: torchao ``float8_linear.py``
            without tensor parallelism).
        saved_input_under_tp: What a linear layer whose input is
            sequence-parallel-gathered (TP > 1 with SP; the terms marked
            :attr:`ActivationTerm.sp_gathered <hp_core.costs.ActivationTerm.sp_gathered>`)
            keeps of it, where it differs from :attr:`saved_input`; ``None``:
            the same. torchao under torchtitan's float8 TP plan: ``quantized``
            (``PrepareFloat8ModuleInput`` casts the sequence shard to float8
            before the all-gather and the linear layer saves the float8 input
            it is handed, so backward casts it no more: docs/precision.md).
        weight_copies: Low-precision copies of each GEMM weight held at once
            (row-wise and column-wise usage: 2 where the column-wise copy is a
            separate tensor, a transpose or its own block scales).
        cache_weights: The copies are kept across micro-batches (TE's weight
            workspace, reused while ``is_first_microbatch`` is false, as
            Megatron-Core calls it); else they are made per micro-batch and
            freed after its backward.
        param_gather: How parameters are gathered: ``none`` (in the
            compute dtype), ``stored`` (the model's parameters are kept in the
            weights' format and all-gathered so, the master copy and optimizer
            states unchanged: Megatron-LM ``--fp8-param-gather``), ``cast``
            (the sharded parameters stay as they are and are cast to the
            weights' format before each ZeRO-3/FSDP all-gather: torchao
            ``enable_fsdp_float8_all_gather``) or ``gradient_buffer`` (kept in
            the weights' format as ``stored``, but the distributed optimizer
            all-gathers them through the gradient buffer, in its dtype, and
            casts each gathered weight into its quantized storage: Megatron-Core
            ``reuse_grad_buf_for_mxfp8_param_ag``, ``param_and_grad_buffer.py``
            ``_post_param_sync`` at NVIDIA/Megatron-LM@d98e8a6; ZeRO 1 and 2
            only, :meth:`check_zero`).
        tp_gather: Sequence-parallel all-gathers of a linear layer's input
            (and output gradient) move the quantized tensor (TE
            ``gather_along_first_dim`` with the input quantizer; torchao's
            ``PrepareFloat8ModuleInput`` and ``Float8RowwiseParallel`` in
            torchtitan's float8 TP plan).
        quantize_passes: Reads of a compute-dtype tensor per quantization:
            1 where the scale is known before the cast (delayed scaling's amax
            history, a block's own scale computed in the cast kernel), 2 where
            a separate pass computes the tensor's amax first (current scaling,
            NVFP4's global scale); TE docs/examples/gemm_profiling: "the extra
            memory pass for per-tensor amax computation".
        attention_format: The attention core's format: ``bf16`` (the default),
            or FP8 attention (Transformer Engine ``fp8_dpa``: Megatron-LM
            ``--fp8-dot-product-attention``): ``e4m3`` on a per-tensor recipe
            (delayed or current scaling), ``mxfp8`` on the MXFP8 recipe, the
            format TE's attention quantizers take from the recipe
            (:meth:`attention_qkv_bytes_per_element`, :attr:`attention_out_fp8`);
            or the scaling :attr:`attention_scaling` states.
        attention_scaling: The per-tensor scaling FP8 attention runs with where
            it is not the recipe's own (``None``: the activations' scaling, as
            Transformer Engine's attention quantizers take it from the recipe):
            ``tensor_current`` or ``tensor_delayed``. Transformer Engine beside
            NVFP4 linears builds a recipe of its own for the attention,
            ``NVTE_DPA_FP8_RECIPE`` (``pytorch/attention/dot_product_attention/
            dot_product_attention.py``, the linear/attention recipe table, at
            NVIDIA/TransformerEngine@40c69e7, release_v2.8): ``Float8CurrentScaling``
            scales q, k, v, the output and their gradients per tensor, current.
        one_copy_architectures: Device families (``HardwareSpec.architecture``)
            on which one quantized tensor serves both GEMM usages, so the
            trainer keeps one weight copy and a quantization writes one
            tensor instead of a row-wise and a column-wise one (:meth:`on`).
            Transformer Engine's per-tensor FP8 on Blackwell: there
            ``nvte_is_non_tn_fp8_gemm_supported`` holds and ``csrc/quantizer.cpp``
            allocates no transpose; elsewhere, and for block scalings (their
            own scales per direction), two.
        split_accumulator: The GEMM passes (:data:`GEMM_PASS_NAMES`) the trainer runs
            with FP8 split accumulation (partial sums promoted to FP32 at
            intervals; fast accumulation in the others), which a device prices at
            its ``<kernel>:split_accumulator`` speedup where it states one
            (:meth:`DeviceEfficiency.pass_speedups
            <hp_core.specs.timing.DeviceEfficiency.pass_speedups>`). Transformer
            Engine: ``dgrad`` and ``wgrad`` (``pytorch/module/base.py``
            ``_2X_ACC_DGRAD``/``_2X_ACC_WGRAD``; ``Float8CurrentScaling``'s
            ``MMParams``), all three for ``Float8BlockScaling``; torchao:
            ``dgrad`` and ``wgrad`` (``Float8LinearConfig``'s GEMM configs).
        rescaled_outputs: The GEMM passes whose output a separate elementwise
            pass rescales: the trainer runs the GEMM with unit scales and
            multiplies its compute-dtype output by the outer product of the
            operands' scales, one read and one write of each output element
            (memory-bound, priced as quantization is). torchao: a row-wise GEMM
            without fast accumulation runs the per-tensor cuBLAS kernel so
            (``float8/float8_ops.py`` ``addmm_float8_unwrapped``,
            ``output *= post_inverse_scale``), its ``dgrad`` and ``wgrad``.
        compute_dtype_passes: The GEMM passes the trainer runs in the compute
            dtype, none of their operands quantized for them: their bf16 time,
            and no cast of their own. torchao's ``rowwise_with_gw_hp``:
            ``wgrad`` (``Float8LinearConfig.from_recipe_name``: the weight
            gradient's input and output-gradient casts ``ScalingType.DISABLED``,
            so neither the saved input nor the output gradient is cast for it).
            Only ``wgrad`` beside a saved compute-dtype input is priced.
        cast_per_usage: Each GEMM usage of a quantized tensor (the row-wise
            one of one GEMM, the column-wise one of another) is its own cast
            kernel that reads the compute-dtype tensor again, where ``False``
            has one kernel read it once and write both usages (Transformer
            Engine's quantizers). torchao's MX linear (``mx_formats/mx_linear.py``
            ``mx_mm``): ``MXTensor.to_mx`` along dim0 and a separate dim1 cast
            kernel (``mxfp8_quantize_cuda``) for the output gradient, one
            read each.
        gemms: Which GEMMs it quantizes (:data:`GEMM_SCOPES`): ``all`` (every
            GEMM a layer does not keep in the compute dtype: Transformer
            Engine quantizes the linear layers and the routed experts alike),
            ``linears`` (the dense linear layers', the routed experts' grouped
            GEMMs left in the compute dtype: torchtitan's
            ``quantize.linear.mx`` swaps ``nn.Linear`` modules only) or
            ``experts`` (the routed experts' grouped GEMMs only: torchtitan's
            ``quantize.grouped_mm.mx``). A scope other than ``all`` is priced
            in time only, so it needs a recipe that moves no memory
            (``saved_input`` ``compute``, no weight copies, no quantized
            gathers: torchao's).
        architectures: The device families (``HardwareSpec.architecture``)
            the trainer runs the recipe on; an estimate on another device is
            refused (:meth:`check_architecture`). Empty: any device (its peak
            and measured speedups permitting). torchtitan's MX converter
            asserts compute capability 10.0 ("MXFP8 is only supported on
            SM100"): ``blackwell``.
        flags: The trainer flags that select the recipe, per exporter name
            (``{"megatron": ("--fp8-format", "hybrid", ...)}``).
        bf16_attention_recipe: For a recipe running FP8 attention, the
            registered recipe that quantizes the same GEMMs with the attention
            core in the compute dtype (what a refusal of FP8 attention on a
            device suggests instead); ``None``: not stated, and nothing is
            suggested. Only a recipe whose ``attention_format`` is not
            ``bf16`` states one.
        module_recipes: ``(format, recipe)`` of the linear modules a run gives a quantized format of their own
            (``PrecisionSpec.module_formats``: an MXFP8 ``out_proj`` in an NVFP4 run); set where a run resolves its
            recipe (:func:`hp_core.engine.precision.resolve_recipe`), empty in a registered recipe.
    """

    name: str = attrs.field(validator=non_empty_text)
    description: str = attrs.field(validator=non_empty_text)
    source: str = attrs.field(validator=non_empty_text)
    weights: GemmOperand = _BF16
    activations: GemmOperand = _BF16
    gradients: GemmOperand = _BF16
    amax_history: int = attrs.field(default=0, validator=non_negative_int)
    saved_input: str = attrs.field(default="quantized", validator=one_of(tuple(SAVED_INPUTS)))
    saved_input_under_tp: str | None = attrs.field(default=None, validator=attrs.validators.optional(one_of(tuple(SAVED_INPUTS))))
    weight_copies: int = attrs.field(default=0, validator=non_negative_int)
    cache_weights: bool = False
    param_gather: str = attrs.field(default="none", validator=one_of(tuple(PARAM_GATHERS)))
    tp_gather: bool = False
    quantize_passes: int = attrs.field(default=1, validator=non_negative_int)
    attention_format: str = attrs.field(default="bf16", validator=one_of(tuple(FORMATS)))
    attention_scaling: str | None = attrs.field(default=None, validator=attrs.validators.optional(one_of(_ATTENTION_OWN_SCALINGS)))
    one_copy_architectures: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    split_accumulator: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    rescaled_outputs: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    compute_dtype_passes: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    cast_per_usage: bool = False
    gemms: str = attrs.field(default="all", validator=one_of(GEMM_SCOPES))
    architectures: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    flags: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict, converter=lambda v: _flags(v))
    bf16_attention_recipe: str | None = attrs.field(default=None, validator=attrs.validators.optional(non_empty_text))
    module_recipes: tuple[tuple[str, "PrecisionRecipe"], ...] = attrs.field(default=(), converter=tuple)

    def __attrs_post_init__(self) -> None:
        check_recipe(self)  # its fields against each other

    @property
    def attention_scaling_used(self) -> str:
        """The scaling FP8 attention's quantizers run with: :attr:`attention_scaling` where stated, else the
        activations' (Transformer Engine's attention quantizers follow the recipe's)."""
        return self.attention_scaling or self.activations.scaling

    @property
    def low_precision(self) -> bool:
        """Whether any GEMM operand is quantized."""
        return any(o.low_precision for o in (self.weights, self.activations, self.gradients))

    @property
    def stores_weights(self) -> bool:
        """Whether the model's parameters are kept in the weights' format (``param_gather`` ``stored`` or
        ``gradient_buffer``): no compute-dtype copy of a quantized weight, the row-wise usage the parameter itself."""
        return self.param_gather in ("stored", "gradient_buffer")

    def check_zero(self, zero: int) -> None:
        """Refuse a ZeRO level the recipe's parameter gather does not run at (one line, ``$.parallel.zero``): ZeRO 0 for
        one keeping the parameters in its format (``stored``, ``gradient_buffer``: Megatron-LM asserts
        ``--fp8-param-gather`` only with the distributed optimizer or FSDP, ``megatron/training/arguments.py`` at
        NVIDIA/Megatron-LM@d98e8a6), and ZeRO 3 for one gathering through the gradient buffer (Megatron-LM turns
        ``reuse_grad_buf_for_mxfp8_param_ag`` off under Megatron-FSDP, the same file; what it gathers there instead is
        not priced)."""
        if self.stores_weights and zero == 0:
            raise ConfigError("$.parallel.zero", f"precision recipe {self.name} keeps its parameters in "
                              f"{self.weights.format} and gathers them with the distributed optimizer, which zero 0 has "
                              "none of (Megatron-LM asserts --fp8-param-gather only with the distributed optimizer or "
                              "FSDP); use zero 1 or above, or a recipe without the parameter gather")
        if self.param_gather == "gradient_buffer" and zero >= 3:
            raise ConfigError("$.parallel.zero", f"precision recipe {self.name} gathers its parameters through the "
                              "gradient buffer, which Megatron-LM turns off under ZeRO 3 (Megatron-FSDP: arguments.py "
                              "sets reuse_grad_buf_for_mxfp8_param_ag false); use zero 1 or 2, or a recipe without it")

    @property
    def gemm_dtype(self) -> str:
        """The ``peak_flops`` key the linear layers' GEMMs run at (``bf16`` when nothing is quantized).

        Every quantized operand runs at one peak (checked when the recipe is
        made); a GEMM with a quantized operand runs at it.
        """
        for operand in (self.activations, self.weights, self.gradients):
            if operand.low_precision:
                return operand.peak_dtype
        return "bf16"

    @property
    def kernel(self) -> str:
        """The GEMM kernel family its GEMMs run (what a device's measured GEMM speedups are keyed by).

        ``bf16``, ``fp8_tensorwise`` (per-tensor scales), ``fp8_rowwise``,
        ``fp8_blockwise``, ``mxfp8`` or ``nvfp4``, from the activations' operand.
        """
        operand = self.activations if self.activations.low_precision else self.weights
        if operand.format in ("mxfp8", "nvfp4", "bf16"):
            return operand.format
        if operand.scaling.startswith("block"):
            return "fp8_blockwise"
        return "fp8_rowwise" if operand.scaling == "rowwise" else "fp8_tensorwise"

    def usages(self, architecture: str | None) -> int:
        """Tensors a quantization of one GEMM operand writes on *architecture*: its row-wise and column-wise
        usages (2), or 1 where one tensor serves both (:attr:`one_copy_architectures`; ``None``: 2)."""
        return 1 if architecture is not None and architecture in self.one_copy_architectures else 2

    def check_architecture(self, architecture: str | None, device: str) -> None:
        """Refuse a device of *architecture* (named *device*) the recipe does not run on (:attr:`architectures`).

        Raises:
            ConfigError: One line at ``$.precision.recipe``; nothing where :attr:`architectures` is empty or the
                device's family is unstated (``None``: an estimate without a device is not refused).
        """
        if self.architectures and architecture is not None and architecture not in self.architectures:
            article = "an" if architecture[:1] in tuple("aeiou") else "a"
            raise ConfigError("$.precision.recipe",
                              f"precision recipe {self.name} runs on {' or '.join(self.architectures)} devices only "
                              f"(docs/precision.md); {device} is {article} {architecture} device: "
                              "choose another recipe or device")

    def on(self, architecture: str | None) -> "PrecisionRecipe":
        """The recipe as a device of *architecture* runs it: at most :meth:`usages` cached weight copies.

        The same object where nothing changes (every recipe on an unnamed device).
        """
        copies = min(self.weight_copies, self.usages(architecture))
        modules = tuple((fmt, recipe.on(architecture)) for fmt, recipe in self.module_recipes)
        if copies == self.weight_copies and all(a[1] is b[1] for a, b in zip(modules, self.module_recipes)):
            return self
        return attrs.evolve(self, weight_copies=copies, module_recipes=modules)

    def attention_qkv_bytes_per_element(self, activation_bytes: int) -> float:
        """Bytes a fused attention kernel keeps per element of q, k and v for its backward.

        Transformer Engine at d0067d0 (``pytorch/attention/dot_product_attention/backends.py``
        ``FusedAttnFunc.forward``): with FP8 attention it saves ``q_fp8, k_fp8, v_fp8``, quantized by
        ``combine_and_quantize`` with the QKV quantizer, which ``utils.py`` ``get_attention_quantizers``
        sets row-wise only for per-tensor scaling (1 byte an element; the scale per tensor not counted)
        and row-wise and column-wise for MXFP8 (two E4M3 copies, each with an E8M0 byte per 32
        elements). bf16 attention: the compute-dtype tensors (*activation_bytes*).
        """
        if self.attention_format == "bf16":
            return float(activation_bytes)
        if self.attention_format == "mxfp8":
            return 2 * GemmOperand("mxfp8", "mx_32").bytes_per_element
        return 1.0

    @property
    def attention_out_fp8(self) -> bool:
        """The fused attention kernel keeps its output in FP8 (1 byte an element) instead of the compute dtype.

        Transformer Engine at d0067d0, ``FusedAttnFunc.forward``: ``out_fp8`` is saved under delayed
        scaling; under current scaling (``NVTE_DPA_FP8CS_O_in_F16`` defaults to 1) and MXFP8 the
        compute-dtype ``out_f16``.
        """
        return self.attention_format == "e4m3" and self.attention_scaling_used == "tensor_delayed"

    @property
    def requantizes_original_input(self) -> bool:
        """A linear layer its trainer sets to keep its compute-dtype input (:attr:`ActivationTerm.original_input
        <hp_core.costs.ActivationTerm.original_input>`) does so under this recipe, quantizing it again in backward.

        Every quantizing recipe but delayed scaling. Transformer Engine ``pytorch/module/linear.py`` (``Linear``'s
        ``save_original_input``, since v2.6, 07afda9): forward quantizes the input row-wise only and saves the
        compute-dtype tensor; backward quantizes it again column-wise for the weight gradient; a delayed-scaling
        quantizer (``Float8Quantizer``) is refused ("DelayedScaling recipe is not supported with
        save_original_input"; at d0067d0 lines 310-334 also any quantizer that cannot quantize the same input
        again to the same values, ``_common.py`` ``can_reconstruct_wgrad_input_from_original``: current
        scaling, 1x128 blocks, MXFP8 and NVFP4 without stochastic rounding can). Megatron-Core asks for it only
        where the recipe is not delayed (``attention.py`` at NVIDIA/Megatron-LM core_v0.16.0 lines 363-379).
        """
        return self.low_precision and self.activations.scaling != "tensor_delayed"

    def saved_input_as(self, gathered_under_tp: bool) -> str:
        """What a linear layer keeps of its input: :attr:`saved_input_under_tp` where the input is
        sequence-parallel-gathered under TP > 1 (*gathered_under_tp*) and the recipe states one, else :attr:`saved_input`."""
        if gathered_under_tp and self.saved_input_under_tp is not None:
            return self.saved_input_under_tp
        return self.saved_input

    def saved_input_bytes(self, elements: float, gathered_under_tp: bool = False) -> float:
        """Bytes a linear layer keeps of an input of *elements* elements for its backward (0 at ``compute``: unchanged)."""
        return elements * self.activations.bytes_per_element if self.saved_input_as(gathered_under_tp) == "quantized" else 0.0
