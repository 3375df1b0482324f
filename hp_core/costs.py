"""The cost vocabulary of a layer kind: what its evaluator returns and the context it is asked in.

A layer kind's evaluator (:class:`hp_core.types.LayerKind`) returns a :class:`LayerCost` for one layer under a
:class:`LayerContext`: its parameters by tensor family, the activations it keeps per op (each gated by a recompute
switch of :data:`SWITCHES`), its input, its backward's working set, its communication buffers, its forward FLOPs
and the weight shapes of its GEMMs. Units live in names: ``*_bytes`` are bytes, ``*_flops`` floating-point
operations. Every byte quantity a layer states is an ``int``.
"""

from __future__ import annotations

import numbers
import re
from typing import Any, Callable

import attrs

from hp_core.collectives import Routing
from hp_core.layer_context import LayerContext
from hp_core.linear_modules import LinearModule
from hp_core.reruns import Rerun, WholeCheckpoint, userbuffers_entries
from hp_core.score_masks import LocalMask
from hp_core.traits import TRAITS
from hp_core.validators import weight_gradient_part

__all__ = ["ATTENTION_IMPLS", "COLLECTIVE_GROUPS", "COLLECTIVE_OPS", "ActivationTerm", "Collective", "Flops", "LayerContext",
           "LayerCost", "LayerWork", "PARAM_GROUPS", "ParamCount", "Rerun", "SWITCHES", "TRAITS"]

# The built-in kinds' recompute switches (docs/recompute.md), in the order settings are listed; a
# kind declares the ones it has and may declare its own names (switch_name checks their form).
# HyperParallel's eight, then ``ffFc1`` (a dense MLP's FC1 outputs: hp_plugins/kit/feedforward.py) and ``moeLayer``
# (what a mixture-of-experts block keeps inside itself besides its activation: hp_plugins/kit/experts.py).
SWITCHES = ("attBMM", "headCast", "dropout", "softmax", "normOp", "gather", "ffAct", "attUp", "ffFc1", "moeLayer")
# Parameter groups, each sharded by its own degrees (docs/concepts.md).
PARAM_GROUPS = ("dense", "routed_expert", "shared_expert")

# Attention implementations a layer kind prices: ``eager`` keeps the score and
# probability tensors; ``flash`` (also SDPA's flash/efficient kernels) keeps q,
# k, v, the output and the fp32 log-sum-exp statistics, never the score matrix.
ATTENTION_IMPLS = ("eager", "flash")

_SWITCH = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")


def is_switch_name(value: Any) -> bool:
    """Whether *value* is a recompute switch's name: letters, digits, ``_``, ``-``, ``.``, starting with a letter."""
    return isinstance(value, str) and _SWITCH.match(value) is not None


def switch_name(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """An attrs validator: a recompute switch's name (:func:`is_switch_name`)."""
    if not is_switch_name(value):
        raise ValueError(f"{type(instance).__name__}.{attribute.name}: a switch name is letters, digits, '_', '-' "
                         f"or '.', starting with a letter; got {value!r}")


def _non_negative_int(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{type(instance).__name__}.{attribute.name} must be a non-negative int, got {value!r}")


def _positive_number(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"{type(instance).__name__}.{attribute.name} must be a positive number, got {value!r}")


def _head_dims(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if len(value) != 2 or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in value):
        raise ValueError(f"{type(instance).__name__}.{attribute.name} must be two positive ints, got {value!r}")


def _non_negative_number(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{type(instance).__name__}.{attribute.name} must be a non-negative number, got {value!r}")


# --------------------------------------------------------------------------- costs


def _matrices(value: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(matrix) for matrix in value)


@attrs.frozen
class ParamCount:
    """Elements of one parameter tensor family of a layer.

    Attributes:
        name: What the parameters are (``"q_proj"``, ``"norms"``, ...).
        group: One of :data:`PARAM_GROUPS`.
        elements: Elements in the model (what Hugging Face counts).
        tp_split: Whether tensor parallelism splits them (else every TP rank holds them whole).
        stored_elements: Elements the trainer allocates, padding included
            (e.g. a vocabulary padded to a multiple of ``128 * tp``); equal to ``elements`` when omitted.
        shared_with: The kind whose parameter this is, for a tied weight (the
            output head's weight tied to the embedding): counted once in the
            model's totals, held again by a stage that does not hold the owner.
        matrices: The family's 2-D weight matrices as one rank holds them,
            each ``(count, rows, columns)``: ``count`` matrices of ``rows x
            columns`` (a linear weight's ``(fan_out, fan_in)``, as
            :attr:`LayerCost.weight_shapes` states it), after TP splits them and,
            for routed experts, EP and ETP; the family's other elements on the
            rank are 1-D (biases, norm scales). An optimizer that treats
            matrices apart from vectors reads them (Muon orthogonalises each
            matrix, Adafactor factors its second moment); empty: the family
            states no matrix, and those optimizers treat it as 1-D.
        embedding_or_output: The family is the input embedding or the output
            head (Megatron-Core's ``is_embedding_or_output_parameter``): Muon
            leaves it to AdamW although it is a matrix.
        high_precision: Its matrices stay in the compute dtype under a
            low-precision recipe although they are not the embedding or the
            head (a router's gate); :mod:`hp_core.precision_recipes`.
        trainable: ``False`` for a frozen family (a LoRA base weight): it is
            held, but has no gradient, no master copy and no optimizer state.
        element_bytes: Bytes per stored element where the family is not held in
            the run's ``param_bytes`` (an exact fraction for a 4-bit base with its
            quantization constants); ``None``: the run's.
    """

    name: str
    group: str = attrs.field(validator=attrs.validators.in_(PARAM_GROUPS))
    elements: int = attrs.field(validator=_non_negative_int)
    tp_split: bool
    stored_elements: int = attrs.field(default=None, validator=attrs.validators.optional(_non_negative_int))
    shared_with: str | None = None
    matrices: tuple[tuple[int, int, int], ...] = attrs.field(default=(), converter=_matrices)
    embedding_or_output: bool = False
    high_precision: bool = False
    trainable: bool = True
    element_bytes: Any = attrs.field(default=None, validator=attrs.validators.optional(_positive_number))

    def __attrs_post_init__(self) -> None:
        if self.stored_elements is None:
            object.__setattr__(self, "stored_elements", self.elements)
        elif self.stored_elements < self.elements:
            raise ValueError(f"ParamCount {self.name}: stored_elements < elements")
        for matrix in self.matrices:
            if len(matrix) != 3 or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in matrix):
                raise ValueError(f"ParamCount {self.name}: matrices must be (count, rows, columns) positive ints, got {matrix!r}")

    @property
    def matrix_elements(self) -> int:
        """Elements of the stated matrices on one rank."""
        return sum(count * rows * columns for count, rows, columns in self.matrices)


@attrs.frozen
class ActivationTerm:
    """Bytes one rank keeps between forward and backward for one op of one micro-batch.

    Attributes:
        op: The tensor kept (``"attn_norm_out"``, ``"softmax_out"``, ...).
        bytes: Bytes on one rank for one micro-batch.
        switch: The recompute switch that drops it (``None``: kept unless the layer is recomputed fully).
        tp_split: Whether the bytes are already divided by ``tp`` (informative, used by census exports and tests).
        gemm_input: The tensor is a linear layer's input, kept for its weight
            gradient: ``"owned"`` when the linear layer is its only keeper (a
            low-precision recipe keeps its quantized copy instead), ``"shared"``
            when another op keeps it in the compute dtype too (the recipe's
            copy comes on top: the output projection's input, which a flash
            attention kernel keeps as its output); ``None``: not a GEMM input,
            kept as is by any recipe (:mod:`hp_core.precision_recipes`).
        sp_gathered: The tensor is a linear layer's sequence-parallel-gathered
            input, or its sequence shard (a block's pre-norm output and its
            gathered copy, which the all-gather marked ``Collective.gemm_input``
            makes): under TP > 1 with SP a recipe keeps it as its
            :attr:`~hp_core.precision_recipes.PrecisionRecipe.saved_input_under_tp` says.
        attention_saved: The tensor is one a fused (flash) attention kernel
            keeps for its backward: ``"qkv"`` (its q, k or v input),
            ``"out"`` (its output) or ``"qkv_view"`` (a wider tensor the
            kernel keeps whole only because one of its inputs is a view of
            it, read in place: MLA's ``kv_b_proj`` output, whose v slice is
            the kernel's v; the view's compute-dtype bytes are
            :attr:`attention_view_bytes`, and nothing else may keep the
            tensor); a recipe running FP8 attention keeps it as
            :attr:`~hp_core.precision_recipes.PrecisionRecipe.attention_format`
            says (:func:`hp_core.engine.precision.apply_recipe`): a
            ``qkv_view`` tensor is then freed, and only the kernel's quantized
            copy of the view is kept. ``None``: not one.
        attention_view_bytes: Of a ``"qkv_view"`` term, the compute-dtype bytes
            of the view the kernel reads (at most :attr:`bytes`); 0 otherwise.
        original_input: Of a :attr:`gemm_input` term, the trainer sets its linear
            layer to keep this compute-dtype tensor for the weight gradient instead of
            a quantized copy, and to quantize it again in backward, where the recipe
            can (:attr:`PrecisionRecipe.requantizes_original_input
            <hp_core.precision_recipes.PrecisionRecipe.requantizes_original_input>`):
            such a recipe keeps the term as it is; one that cannot (delayed scaling)
            as :attr:`gemm_input` says. Megatron-Core's attention output projection
            (``set_save_original_input``; the ``linear_proj_original_input`` trait).
        rerun_switch: A switch a recipe moved this term off that still regenerates its compute-dtype
            source (FP8 attention's q, k, v: Megatron-Core's ``mla_up_proj`` re-runs the up projections
            whatever Transformer Engine saved; set only where the layer's :attr:`LayerWork.reruns` names the
            switch): recomputing it saves none of these bytes but costs the
            re-run of :attr:`rerun_bytes`, the bytes it dropped before (:mod:`hp_core.engine.timing`).
    """

    op: str
    bytes: int = attrs.field(validator=_non_negative_int)
    switch: str | None = attrs.field(default=None, validator=attrs.validators.optional(switch_name))
    tp_split: bool = False
    gemm_input: str | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.in_(("owned", "shared"))))
    sp_gathered: bool = False
    attention_saved: str | None = attrs.field(default=None, validator=attrs.validators.optional(
        attrs.validators.in_(("qkv", "out", "qkv_view"))))
    attention_view_bytes: int = attrs.field(default=0, validator=_non_negative_int)
    original_input: bool = False
    rerun_switch: str | None = attrs.field(default=None, validator=attrs.validators.optional(switch_name))
    rerun_bytes: int = attrs.field(default=0, validator=_non_negative_int)

    def __attrs_post_init__(self) -> None:
        if (self.rerun_switch is None) != (self.rerun_bytes == 0) or (self.rerun_switch and self.switch):
            raise ValueError(f"ActivationTerm {self.op}: rerun_bytes ({self.rerun_bytes}) must be positive exactly where "
                             f"rerun_switch is set ({self.rerun_switch}), and only on a term under no switch ({self.switch})")
        if (self.attention_saved == "qkv_view") != (self.attention_view_bytes > 0) or self.attention_view_bytes > self.bytes:
            raise ValueError(f"ActivationTerm {self.op}: attention_view_bytes ({self.attention_view_bytes}) must be positive "
                             f"and at most bytes ({self.bytes}) exactly where attention_saved is 'qkv_view'")
        if self.original_input and self.gemm_input is None:
            raise ValueError(f"ActivationTerm {self.op}: original_input marks a linear layer's input; set gemm_input too")


@attrs.frozen
class Flops:
    """Forward floating-point operations of one layer for one micro-batch on one rank.

    Attributes:
        matmul_flops: Dense matrix multiplies (2 per multiply-add).
        attention_flops: The attention core (scores and the weighted sum of values).
        elementwise_flops: Norms, activations, softmax, residual adds.
    """

    matmul_flops: float = attrs.field(default=0.0, validator=_non_negative_number)
    attention_flops: float = attrs.field(default=0.0, validator=_non_negative_number)
    elementwise_flops: float = attrs.field(default=0.0, validator=_non_negative_number)

    @property
    def total_flops(self) -> float:
        return self.matmul_flops + self.attention_flops + self.elementwise_flops


# The groups a layer's own collectives run over, and the collective operations.
COLLECTIVE_GROUPS = ("tp", "cp", "ep", "etp")
COLLECTIVE_OPS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "p2p")


@attrs.frozen
class Collective:
    """One collective a layer issues per micro-batch, as the layer states it.

    The step time prices it on the group's links (intra- or inter-node from
    the layout) with the collective's cost model (docs/time.md), exposed by
    the runtime's overlap of that group unless the trainer cannot overlap it.

    Attributes:
        group: ``tp``, ``cp``, ``ep`` or ``etp`` (:data:`COLLECTIVE_GROUPS`):
            the layout's group it runs over; ``etp`` is the routed experts'
            tensor-parallel group (the expert dims' ``tp`` axis, ``etp`` ranks).
        op: ``all_gather``, ``reduce_scatter``, ``all_reduce``, ``all_to_all``
            or ``p2p`` (a send to one neighbour and a receive from the other).
        bytes: The buffer, NCCL's convention: all-gather's gathered output,
            reduce-scatter's input, all-reduce's buffer, all-to-all's send buffer, a send's message.
        forward_calls: Calls in the layer's forward.
        backward_calls: Calls in its backward.
        rerun_switch: A recompute switch whose recompute issues the forward
            calls again in backward (sequence parallelism's all-gathers
            re-gathered under ``gather``; an MoE block's dispatch and combine
            all-to-alls under ``moeLayer``, whose recompute re-runs the block); a
            fully recomputed layer issues every forward call again.
        overlappable: Whether the trainer may overlap it with compute (an
            all-to-all on attention's critical path cannot be).
        gemm_input: It moves linear layers' inputs or output gradients in
            the compute dtype (a sequence-parallel all-gather), which a
            recipe that gathers in low precision moves quantized
            (:attr:`PrecisionRecipe.tp_gather <hp_core.precision_recipes.PrecisionRecipe.tp_gather>`).
        routing: An ``ep`` all-to-all's token routing (experts, top-k;
            :class:`hp_core.collectives.Routing`): *bytes* count a copy per
            routed expert, and a collective model that sends a token once per
            rank or node it reaches (DeepEP) de-duplicates from it; ``None``
            for any other collective.
    """

    group: str = attrs.field(validator=attrs.validators.in_(COLLECTIVE_GROUPS))
    op: str = attrs.field(validator=attrs.validators.in_(COLLECTIVE_OPS))
    bytes: float = attrs.field(validator=_non_negative_number)
    forward_calls: int = attrs.field(default=0, validator=_non_negative_int)
    backward_calls: int = attrs.field(default=0, validator=_non_negative_int)
    rerun_switch: str | None = attrs.field(default=None, validator=attrs.validators.optional(switch_name))
    overlappable: bool = True
    gemm_input: bool = False
    routing: Routing | None = attrs.field(default=None)

    @routing.validator
    def _routing_on_all_to_all(self, attribute, value) -> None:
        if value is not None and not (self.op == "all_to_all" and self.group == "ep"):
            raise ValueError(f"routing is stated only on an ep all_to_all, not on a {self.group} {self.op}")


@attrs.frozen
class LayerWork:
    """The kernels and collectives of one layer per micro-batch on one rank: what its step time prices.

    A kind states it (:attr:`LayerCost.work`); the step time reads nothing else of the layer's architecture. FLOPs by
    class are in :attr:`LayerCost.forward`; this record gives their shapes and what runs besides.

    Attributes:
        collectives: Every collective the layer issues (:class:`Collective`).
        gemms: Dense GEMMs whose shapes are known, ``(rows, fan_out, fan_in)``; a device's measured GEMM table prices
            them, the rest of the matmul FLOPs runs at the fitted efficiency.
        grouped_flops: Forward FLOPs of grouped (expert) GEMMs, part of the matmul FLOPs.
        expert_rows: Tokens per local expert (the grouped GEMMs' rows).
        expert_gemms: The grouped GEMMs, ``(experts on the rank, rows per expert, fan_out, fan_in)``.
        sequential_experts: The routed experts run one local expert at a time (Megatron-Core ``SequentialMLP``): their
            :attr:`expert_gemms` priced as dense GEMMs, each expert's MLP one GEMM in the host floor; else grouped.
        epilogue_activation_flops: The routed experts' activation ops a fused grouped MLP runs in its GEMMs' epilogues
            (the ``moe_fused_grouped_mlp`` trait), with their quantization, where the recipe and device fuse them.
        attention_calls: Fused attention kernel calls (0: no attention core).
        wide_qk_attention: The attention core's query/key head dim exceeds its value head dim (MLA), priced with the device's figures for it.
        ssd_scan: The attention FLOPs are a Mamba-2 SSD scan (mamba_ssm's Triton kernels), priced at the device's ``ssd_scan_*`` figures where stated, else as attention.
        attention_head_dims: ``(query/key, value)`` head dims of the attention core (cuDNN runs FP8 attention on
            Hopper at 128 and 128 only); ``None``: not stated, FP8 attention refused there rather than priced.
        fused_softmax_flops: Elementwise FLOPs a fused attention kernel runs on
            chip (the softmax over the scores): no HBM traffic under flash.
        copy_bytes: Bytes memory-bound copies move each way (MLA's query/key assembly).
        backward_copy_bytes: Bytes those copies move in backward where that differs
            from forward (an eager op's gradient kernels); ``None``: ``copy_bytes``.
        permute_bytes: Dispatched tokens' bytes an MoE layer's permutation passes move.
        permute_input_bytes: The layer's own tokens' bytes (the first pass reads them, the last writes them).
        router_elements: Routed tokens times experts (a router's top-k and auxiliary-loss kernels scale with them).
        table_elements: Elements of a lookup table's shard (its backward writes a dense gradient).
        boundary_bytes: The activation the layer hands to the next, unsplit (a pipeline send carries it, split where the layout splits it).
        attention_core_switches: The switches whose recompute re-runs the attention core's forward (any of them: a
            trainer checkpoints the core as a unit, Megatron-LM ``CoreAttention``; Korthikanti et al. 2022, Section
            4.2), rewriting the score-sized tensors they drop.
        routed_experts: The experts the layer routes tokens over, which expert parallelism must divide (0: none); a
            layout search rejects an ``ep`` that does not divide them before evaluating anything.
        frozen_matmul_flops: The part of the forward matmul FLOPs whose weights are frozen (``ParamCount.trainable``
            false): their backward computes the input gradient only (:mod:`hp_core.engine.timing.gemm_seconds`).
        frozen_gemms: Those of :attr:`gemms` whose weights are frozen; frozen FLOPs beyond theirs are FLOPs the layer
            lists no shape for (grouped, unlisted dense), in proportion, an assumption (not sourced;
            :func:`~hp_core.engine.timing.gemm_seconds.frozen_share`).
        reruns: ``(switch, Rerun)`` pairs: what recomputing each switch re-runs (:class:`Rerun`), priced instead of
            rewriting what it drops; a switch not named re-runs nothing beyond rewriting what it drops (or, named by
            a collective's ``rerun_switch``, re-issuing that collective).
        high_precision_gemms: Those of :attr:`gemms` that stay in the compute dtype under a low-precision recipe (a
            router's gate, the output head); the rest of the matmul FLOPs, grouped ones included, run in the recipe's
            format (:mod:`hp_core.precision_recipes`).
        original_input_gemms: Those of :attr:`gemms` whose input the trainer keeps in
            the compute dtype and quantizes again in backward where the recipe can
            (the GEMM of an :attr:`ActivationTerm.original_input` term: Megatron-Core's
            attention output projection), priced so (:mod:`hp_core.engine.timing.gemm_seconds`).
        alternate_matmul_flops: Forward FLOPs of every second matmul in forward order, what torchtitan's op-level SAC
            re-runs; ``None``: not stated, priced at half the layer's matmul FLOPs and named in the provenance.
        eager_accesses_per_flop: bf16-element accesses per counted elementwise op when each op is its own eager
            kernel, counted from the layer's own ops and widths; ``None``: not counted, the profile's figure prices it.
        rotary_flops: The part of the forward elementwise FLOPs that is a rotary position embedding: its backward
            is the inverse rotation, the forward's traffic once, not ``elementwise_backward_factor`` times it.
        rotary_eager_bytes: ``(forward, backward)`` bytes that embedding moves as eager kernels, counted with
            :attr:`eager_accesses_per_flop` (its forward is part of that figure).
        local_mask: The attention core's sliding window or chunks (:class:`~hp_core.score_masks.LocalMask`), its
            FLOPs the exact pairs they keep; a block-sparse kernel runs whole blocks of it instead
            (:attr:`~hp_core.specs.timing.TimingProfile.attention_block_tokens`); ``None``: full causal.
        quantized: ``False`` for a layer whose GEMMs all stay in the compute dtype under any recipe (the first or
            last layers a run keeps in bf16, :attr:`PrecisionSpec.high_precision_layers_at_start
            <hp_core.specs.precision.PrecisionSpec.high_precision_layers_at_start>`): it takes no GEMM speedup,
            quantizes nothing and gathers its inputs in the compute dtype. Set by the engine, not by a kind.
        userbuffers_gemms: ``(tp_comm_buffer_name, gemm, passes)`` of :attr:`gemms` TE's userbuffers run, *passes* the
            ones of ``fprop``, ``dgrad``, ``wgrad`` they run (an SM margin slows; a pair: all three; docs/time.md).
        refused_userbuffers: Names of its TE linears Megatron-Core runs no userbuffers for (MLA's ``kv_down_proj``),
            which turn ``tp_comm_overlap`` off (:attr:`OverlapSchedule.userbuffers <hp_core.specs.overlap.OverlapSchedule.userbuffers>`).
        modules: Its named linear modules (:class:`~hp_core.linear_modules.LinearModule`), which a run may give a format
            of their own (``PrecisionSpec.module_formats``, :mod:`hp_core.engine.module_formats`).
    """

    collectives: tuple[Collective, ...] = attrs.field(default=(), converter=tuple)
    gemms: tuple[tuple[int, int, int], ...] = attrs.field(default=(), converter=tuple)
    grouped_flops: float = attrs.field(default=0.0, validator=_non_negative_number)
    expert_rows: float = attrs.field(default=0.0, validator=_non_negative_number)
    expert_gemms: tuple[tuple[int, float, int, int], ...] = attrs.field(default=(), converter=tuple)
    sequential_experts: bool = False
    epilogue_activation_flops: float = attrs.field(default=0.0, validator=_non_negative_number)
    attention_calls: int = attrs.field(default=0, validator=_non_negative_int)
    wide_qk_attention: bool = False
    ssd_scan: bool = False
    attention_head_dims: tuple[int, int] | None = attrs.field(default=None, converter=attrs.converters.optional(tuple),
                                                             validator=attrs.validators.optional(_head_dims))
    fused_softmax_flops: float = attrs.field(default=0.0, validator=_non_negative_number)
    copy_bytes: float = attrs.field(default=0.0, validator=_non_negative_number)
    backward_copy_bytes: float | None = attrs.field(default=None, validator=attrs.validators.optional(_non_negative_number))
    permute_bytes: float = attrs.field(default=0.0, validator=_non_negative_number)
    permute_input_bytes: float = attrs.field(default=0.0, validator=_non_negative_number)
    router_elements: float = attrs.field(default=0.0, validator=_non_negative_number)
    table_elements: float = attrs.field(default=0.0, validator=_non_negative_number)
    boundary_bytes: float = attrs.field(default=0.0, validator=_non_negative_number)
    attention_core_switches: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)
    routed_experts: int = attrs.field(default=0, validator=_non_negative_int)
    frozen_matmul_flops: float = attrs.field(default=0.0, validator=_non_negative_number)
    frozen_gemms: tuple[tuple[int, int, int], ...] = attrs.field(default=(), converter=tuple)
    reruns: tuple[tuple[str, Rerun], ...] = attrs.field(default=(), converter=tuple)
    high_precision_gemms: tuple[tuple[int, int, int], ...] = attrs.field(default=(), converter=tuple)
    original_input_gemms: tuple[tuple[int, int, int], ...] = attrs.field(default=(), converter=tuple)
    alternate_matmul_flops: float | None = attrs.field(default=None, validator=attrs.validators.optional(_non_negative_number))
    eager_accesses_per_flop: float | None = attrs.field(default=None, validator=attrs.validators.optional(_non_negative_number))
    rotary_flops: float = attrs.field(default=0.0, validator=_non_negative_number)
    rotary_eager_bytes: tuple[float, float] = attrs.field(default=(0.0, 0.0), converter=tuple)
    local_mask: LocalMask | None = None
    quantized: bool = True
    modules: tuple[LinearModule, ...] = attrs.field(default=(), converter=tuple)
    userbuffers_gemms: tuple[tuple[str, tuple[int, int, int], tuple[str, ...]], ...] = attrs.field(default=(), converter=userbuffers_entries)
    refused_userbuffers: tuple[str, ...] = attrs.field(default=(), converter=tuple)

    def rerun(self, switch: str) -> Rerun | None:
        """What recomputing *switch* re-runs, ``None`` when the layer names nothing for it."""
        for name, found in self.reruns:
            if name == switch:
                return found
        return None


@attrs.frozen
class LayerCost:
    """What one layer of a kind costs one rank, as its evaluator states it.

    Attributes:
        params: The layer's parameters by tensor family (whole-model element counts).
        activations: Kept bytes per op for one micro-batch (the plain layer: nothing recomputed).
        input_bytes: Bytes kept under full recompute: the layer's input.
        working_bytes: What the layer's backward holds at its peak beyond the
            activations it keeps (activation gradients, transient tensors),
            when nothing is recomputed.
        buffers_once_bytes: Communication buffers held once however many
            micro-batches are in flight (a reused all-gather buffer).
        buffers_per_micro_batch_bytes: Communication buffers held per micro-batch in flight.
        forward: Forward FLOPs.
        weight_shapes: The per-rank ``(rows, columns)`` of the layer's linear
            weights, for a runtime that allocates per weight shape
            (``Runtime.dummy_weight_gradients``).
        measured: Selective settings measured whole, each ``(recomputed
            switches, bytes kept for one micro-batch)``: they override the sum
            over :attr:`activations` (a census's named policies, docs/census.md).
        work: Its kernels and collectives per micro-batch (:class:`LayerWork`),
            what the step time prices; ``None``: the kind states none, and a
            step time of a model with it is refused rather than priced without
            its traffic.
        forward_working_bytes: What the layer's forward holds at its peak
            beyond what it keeps for backward (a loss's transient logits); a
            runtime that declares a forward peak point prices it there.
        weight_gradient_bytes: What one micro-batch keeps between its input-gradient pass and its deferred weight-
            gradient pass (zero bubble): each trained linear's input, as the forward keeps it, and its output gradient
            (``dW = dY^T X``; docs/schedules.md); ``None``: not stated, priced as a whole micro-batch.
        weight_gradient_quantized: Of :attr:`weight_gradient_bytes`, what a recipe keeping linear inputs quantized
            restates in its formats, ``(input bytes, input elements, output-gradient elements)`` of the linears it
            quantizes: the inputs' compute-dtype bytes (a shared input once) and elements (once per linear), and the
            output gradients' elements (:func:`hp_core.engine.precision.apply_recipe`; docs/hooks/hp_layer_kinds.md);
            ``None``: nothing restated (ignored where W is ``None``).
        assumed: Selective settings it prices from the switches' terms where the trainer runs a policy whose kept
            bytes it does not state, each ``(recomputed switches, why)``; unless :attr:`measured` states the setting,
            an estimate under it says so (provenance ``recompute_assumptions``) rather than fall back silently.
        inner_kinds: Of a layer placed first or last that runs body layers inside itself (the MTP's), their kinds:
            under :attr:`Runtime.inner_recompute <hp_core.types.Runtime.inner_recompute>` it recomputes what the run's
            body layers of these kinds recompute (:func:`~hp_core.engine.inner_layers.placed_recompute`); empty: none.
        checkpoint: Of such a layer, the part that runtime checkpoints whole where the body is fully recomputed
            (:class:`~hp_core.reruns.WholeCheckpoint`: the MTP's ``_proj_and_transformer_layer``); ``None``: none.
    """

    params: tuple[ParamCount, ...]
    activations: tuple[ActivationTerm, ...]
    input_bytes: int = attrs.field(validator=_non_negative_int)
    working_bytes: int = attrs.field(validator=_non_negative_int)
    buffers_once_bytes: int = attrs.field(default=0, validator=_non_negative_int)
    buffers_per_micro_batch_bytes: int = attrs.field(default=0, validator=_non_negative_int)
    forward: Flops = attrs.field(factory=Flops)
    weight_shapes: tuple[tuple[int, int], ...] = ()
    measured: tuple[tuple[frozenset[str], int], ...] = ()
    work: LayerWork | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.instance_of(LayerWork)))
    forward_working_bytes: int = attrs.field(default=0, validator=_non_negative_int)
    weight_gradient_bytes: int | None = attrs.field(default=None, validator=attrs.validators.optional(_non_negative_int))
    weight_gradient_quantized: tuple[int, int, int] | None = attrs.field(default=None, validator=weight_gradient_part)
    assumed: tuple[tuple[frozenset[str], str], ...] = ()
    inner_kinds: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)
    checkpoint: WholeCheckpoint | None = None

    @property
    def kept_bytes(self) -> int:
        """Bytes the plain layer keeps for one micro-batch."""
        return sum(term.bytes for term in self.activations)

    def kept_under(self, recomputed: frozenset[str]) -> int:
        """Bytes kept for one micro-batch when the switches in *recomputed* are recomputed.

        A setting measured whole (:attr:`measured`, a census's policy) keeps
        what was measured; any other keeps the terms its switches do not gate.
        """
        for switches, kept in self.measured:
            if switches == recomputed:
                return kept
        return sum(term.bytes for term in self.activations if term.switch is None or term.switch not in recomputed)

    def param_elements(self, group: str | None = None) -> int:
        """Whole-model parameter elements, of one group or of all."""
        return sum(p.elements for p in self.params if group is None or p.group == group)
