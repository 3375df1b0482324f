"""What a trainer achieves on a device: the timing profile a runtime states.

A :class:`TimingProfile` turns the FLOPs and bytes a step moves into seconds. Every figure is a :class:`Sourced`
value: the number and where it comes from (a paper, a vendor or third-party benchmark, a trainer's source file, or a
measurement -- said so when it was derived from the very runs it is checked against). Nothing in
:mod:`hp_core.engine.timing` is a hidden constant: what is not here is a formula with its citation.

The profile has three parts:

* per device architecture (:class:`DeviceEfficiency`): the achieved fraction
  of the device's peak for each op class -- dense GEMMs, the attention core
  forward and backward, grouped (expert) GEMMs, memory-bound elementwise
  kernels -- and of its link bandwidth for collectives (NCCL "bus bandwidth");
* the overlap the trainer achieves per communication class
  (:class:`CommOverlap`): the fraction hidden behind compute;
* trainer behaviour: backward/forward cost ratios, the attention causal-mask
  saving, the collective algorithms, the MoE token permutation passes and the
  optimizer step's memory passes.

:class:`Sourced` lives in :mod:`hp_core.specs.sourced` and :class:`DeviceEfficiency` in
:mod:`hp_core.specs.device_efficiency`; this module re-exports both (and the GEMM tables of :mod:`hp_core.specs.gemms`).
"""

from __future__ import annotations

from typing import Any

import attrs

from hp_core.costs import is_switch_name
from hp_core.errors import ConfigError, SpecError
from hp_core.specs.device_efficiency import ROUTER_REFERENCE_ELEMENTS, DeviceEfficiency
from hp_core.specs.gemms import GEMM_PASSES, GemmShapeScale, GemmTable, SpeedupCurve
from hp_core.specs.overlap import HostOverhead, OverlapSchedule
from hp_core.specs.sourced import Sourced, _at_least_one, _fraction, _number, _overlap, _positive, _sourced, _text

__all__ = ["ALL_REDUCE_ALGORITHMS", "CommOverlap", "DeviceEfficiency", "GEMM_PASSES", "GemmShapeScale", "GemmTable", "SpeedupCurve",
           "MOE_PERMUTE_TOKENS", "MoePermutation", "ROUTER_REFERENCE_ELEMENTS", "Sourced", "TimingProfile"]

# NCCL's all-reduce algorithms (hp_core.collectives): ``ring`` (bandwidth-optimal,
# latency grows with n), ``tree`` (double binary tree, latency grows with log n),
# ``hierarchical`` (within the node, across nodes, within again), ``nvls`` (NVLink SHARP
# where the hardware states it) and ``auto`` (the fastest of them, as NCCL's tuner picks).
ALL_REDUCE_ALGORITHMS = ("ring", "tree", "hierarchical", "nvls", "auto")
# TimingProfile.moe_permute_tokens: the layer's own tokens, or those a de-duplicating dispatch delivers.
MOE_PERMUTE_TOKENS = ("own", "received")


@attrs.frozen(kw_only=True)
class CommOverlap:
    """Fractions of each communication class the trainer hides behind compute (0: none, 1: all).

    Attributes:
        tensor_parallel: TP/SP all-gathers, reduce-scatters and all-reduces.
        context_parallel: CP K/V exchanges or all-to-alls.
        expert_parallel: EP dispatch and combine all-to-alls.
        data_parallel: DP/ZeRO gradient reduce-scatters (all-reduces) and
            parameter all-gathers (hidden behind backward and the next forward).
        pipeline: PP sends and receives of activations and their gradients.
    """

    tensor_parallel: Sourced = attrs.field(validator=_overlap)
    context_parallel: Sourced = attrs.field(validator=_overlap)
    expert_parallel: Sourced = attrs.field(validator=_overlap)
    data_parallel: Sourced = attrs.field(validator=_overlap)
    pipeline: Sourced = attrs.field(validator=_overlap)

    def figures(self) -> dict[str, Sourced]:
        return {a.name: getattr(self, a.name) for a in attrs.fields(type(self))}


@attrs.frozen(kw_only=True)
class MoePermutation:
    """An MoE layer's token permutation and combine as a trainer's kernels move them, counted op by op.

    In place of :attr:`TimingProfile.moe_permute_passes`: accesses of one element of the dispatched width (the
    layer's ``permute_bytes`` per routed row over the rows, ``permute_input_bytes`` per token over the tokens), at
    the activation's size, an fp32 temporary of a bf16 activation counting two; per routed row (a token's copy for
    one of its experts, sent and received alike under balanced routing) and per token of the layer, each way. Priced
    at the device's ``memory_bandwidth``, with no fixed time (docs/time.md, "torchtitan's MoE token routing").

    Attributes:
        name: The trainer's dispatcher it counts (``"torchtitan_all_to_all"``).
        forward_accesses_per_row_element, forward_accesses_per_token_element: Forward accesses (each of one
            element at the activation's size) per element of the width, per routed row and per token: a count, not
            bytes (times the activation's bytes per element, bytes).
        backward_accesses_per_row_element, backward_accesses_per_token_element: The same in backward.
        eager: Counted for eager kernels (one kernel per ATen op): a profile fusing its elementwise ops
            (``eager_elementwise`` false) refuses it for a layer with a token permutation, its traffic unstated.
        source: The code counted (repository, commit, file, function) and how.
    """

    name: str = attrs.field(validator=_text)
    forward_accesses_per_row_element: float = attrs.field(validator=_number)
    forward_accesses_per_token_element: float = attrs.field(validator=_number)
    backward_accesses_per_row_element: float = attrs.field(validator=_number)
    backward_accesses_per_token_element: float = attrs.field(validator=_number)
    eager: bool = True
    source: str = attrs.field(validator=_text)


def _named_sms(value: Any) -> tuple[tuple[str, Sourced], ...]:
    """:attr:`TimingProfile.collective_sms` as sorted ``(model, Sourced)`` pairs, each a whole number of SMs, at least 1."""
    pairs = tuple(sorted((value.items() if isinstance(value, dict) else value), key=lambda kv: kv[0]))
    for name, sms in pairs:
        if not isinstance(name, str) or not isinstance(sms, Sourced):
            raise SpecError("collective_sms", f"collective_sms maps a collective model's name to a Sourced SM count, got {name!r}: {sms!r}")
        if sms.value < 1 or sms.value != int(sms.value):
            raise SpecError("collective_sms", f"collective_sms[{name!r}] must be a whole number of SMs, at least 1, got {sms.value!r}")
    return pairs


def _switch_names(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    stray = sorted(str(v) for v in value if not is_switch_name(v))
    if stray:
        raise SpecError(attribute.name, f"{attribute.name}: {stray} are not recompute switch names (letters, digits, "
                                        "'_', '-' or '.', starting with a letter)")


@attrs.frozen(kw_only=True)
class TimingProfile:
    """How fast one trainer runs: efficiencies, overlaps, algorithms, each figure sourced.

    Attributes:
        name: A short name (``"megatron-te"``).
        description: One line: the trainer and versions the figures describe.
        devices: Efficiencies per device architecture; ``"*"`` is the fallback.
        overlap: Communication hidden behind compute, per class.
        matmul_backward_factor: Backward FLOPs of a matmul over its forward (2: input and weight gradients).
        attention_backward_factor: Backward FLOPs of the fused attention core over its forward (2.5: five matmuls
            against two, FlashAttention-2).
        flash_causal_fraction: The share of the score matrix a fused attention kernel computes under a causal mask.
        elementwise_accesses_per_flop: Elements an elementwise kernel reads or writes per counted elementwise op.
        elementwise_backward_factor: Memory traffic of an elementwise op's backward over its forward.
        moe_permute_passes: Passes over the dispatched tokens (each a read and a write) per direction of an MoE layer.
        moe_local_sort_passes: Of those, the ones run only with more than one local expert (None: none).
        moe_permutation: The MoE layer's permutation counted op by op (:class:`MoePermutation`), in place of
            ``moe_permute_passes``; ``None``: the passes price it.
        moe_permute_tokens: The passes' token side: ``own`` or ``received`` (``elementwise.received_copies``).
        optimizer_grad_passes: Passes over the gradient shard beyond the
            optimizer's own read (the global-norm read, the clip's read and write).
        optimizer_grad_bytes: The gradient width the step reads and clips (Megatron's fp32 main gradients), the shard
            copied into it first where ``grad_bytes`` differs; ``None``: ``grad_bytes``.
        grad_buffer_passes: Accesses of the whole local gradient buffer per
            step besides the optimizer (zeroing it, a NaN check of it).
        grad_scale_passes: Accesses of the local gradient buffers when there
            is more than one data-parallel replica (``dp * cp > 1``): scaling
            them by ``1 / (dp * cp)`` before the reduction -- the routed
            experts' buffer too, even where its own reduction group is one rank.
        all_reduce_algorithm: One of :data:`ALL_REDUCE_ALGORITHMS`.
        pp_scatter_gather: Pipeline sends carry ``1/tp`` of the activation
            each, all-gathered over the TP group on arrival (Narayanan et al.
            2021, Section 4.1); else the whole activation (split only by SP).
        algorithm_source: Where the algorithm choices come from.
        schedule: What the trainer overlaps, each priced as what a stream
            hides behind which compute (:class:`~hp_core.specs.overlap.OverlapSchedule`;
            runtime options set it per run).
        host: The trainer's host time per kernel, a floor under each layer's
            GPU time (:class:`~hp_core.specs.overlap.HostOverhead`); ``None``: not priced.
        collective_model: The collective library's pricing, by name in the registry (hook
            ``hp_collective_models``); ``None``: the built-in ``nccl`` (:data:`hp_core.collectives.NCCL`).
        collective_sms: The streaming multiprocessors the trainer gives a collective library's kernels, by the
            collective model's name (``{"hybridep": Sourced(32, ...)}``; a mapping, kept as sorted pairs): the step
            passes the entry of the model it prices with to every call (:attr:`hp_core.collectives.CollectiveCall.sms`),
            none where the profile states none for it. Set per run by the runtime options that mirror the trainer's
            setting (``hybridep_num_sms``).
        alternate_matmul_recompute: The selective switches under which the
            trainer's op-level checkpointing also re-runs every second matmul
            of a block (torchtitan's op SAC): a layer recomputing all of them
            re-runs its :attr:`~hp_core.costs.LayerWork.alternate_matmul_flops`.
        alternate_policy_recomputes: Switches that same op-level policy recomputes
            besides them, tensors no op of its save list outputs (torchtitan's
            keeps no all-gather's): a layer's collectives re-issued under one of
            these (:attr:`~hp_core.costs.Collective.rerun_switch`) are issued again
            in its backward whenever the policy runs.
        eager_elementwise: Each elementwise op is its own kernel (eager PyTorch): a layer that counts its own
            :attr:`~hp_core.costs.LayerWork.eager_accesses_per_flop` is priced at it, the rest at the profile's figure.
        eager_rotary: The rotary position embedding runs as eager kernels whatever the other elementwise ops do (a
            trainer whose other elementwise ops are fused applies RoPE with eager PyTorch ops): every layer's
            rotation is priced at its counted :attr:`~hp_core.costs.LayerWork.rotary_eager_bytes`.
        optimizer_foreach: The optimizer's update runs as PyTorch's multi-tensor (``foreach``) kernels, one pass
            over HBM per op: priced at :attr:`~hp_core.types.Optimizer.foreach_step_bytes` where the optimizer states it.
        fsdp1_units: The trainer runs torch FSDP1, each body layer a unit taking the device's
            :attr:`DeviceEfficiency.fsdp1_unit_seconds` once per micro-batch (a device stating none is refused).
        unlisted_reason: Why :attr:`devices` lists only some architectures and no ``"*"`` (a runtime option whose
            figures exist for those alone), said by :meth:`device` when another is asked for; ``None``: not said.
        attention_block_tokens: The fused attention kernel computes the score matrix in square blocks of this
            many tokens a side, skipping only the blocks its mask leaves wholly empty (a block-sparse kernel,
            FlexAttention): a local layer's attention is priced on the blocks it runs
            (:class:`~hp_core.score_masks.LocalMask`); ``None``: on the exact pairs its mask keeps.
    """

    name: str
    description: str
    devices: tuple[DeviceEfficiency, ...] = attrs.field(converter=tuple)
    overlap: CommOverlap
    matmul_backward_factor: Sourced = attrs.field(validator=_positive)
    attention_backward_factor: Sourced = attrs.field(validator=_positive)
    flash_causal_fraction: Sourced = attrs.field(validator=_fraction)
    elementwise_accesses_per_flop: Sourced = attrs.field(validator=_positive)
    elementwise_backward_factor: Sourced = attrs.field(validator=_positive)
    moe_permute_passes: Sourced = attrs.field(validator=_sourced)
    optimizer_grad_passes: Sourced = attrs.field(validator=_sourced)
    grad_buffer_passes: Sourced = attrs.field(validator=_sourced)
    grad_scale_passes: Sourced = attrs.field(validator=_sourced)
    all_reduce_algorithm: str = attrs.field(default="ring", validator=attrs.validators.in_(ALL_REDUCE_ALGORITHMS))
    pp_scatter_gather: bool = False
    algorithm_source: str = attrs.field(default="", validator=_text)
    collective_model: str | None = None
    collective_sms: tuple[tuple[str, Sourced], ...] = attrs.field(default=(), converter=_named_sms)
    schedule: OverlapSchedule = attrs.field(factory=OverlapSchedule)
    host: HostOverhead | None = None
    alternate_matmul_recompute: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset, validator=_switch_names)
    alternate_policy_recomputes: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset, validator=_switch_names)
    eager_elementwise: bool = False
    eager_rotary: bool = False
    optimizer_foreach: bool = False
    fsdp1_units: bool = False
    optimizer_grad_bytes: Sourced | None = None
    unlisted_reason: str | None = None
    attention_block_tokens: Sourced | None = attrs.field(default=None, validator=attrs.validators.optional(_at_least_one))
    moe_permutation: MoePermutation | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(MoePermutation)))
    moe_permute_tokens: str = attrs.field(default="own", validator=attrs.validators.in_(MOE_PERMUTE_TOKENS))
    moe_local_sort_passes: Sourced | None = attrs.field(default=None, validator=attrs.validators.optional(_sourced))

    def __attrs_post_init__(self) -> None:
        if not self.devices:
            raise SpecError("devices", f"timing profile {self.name}: states no device efficiencies")
        seen = [d.architecture for d in self.devices]
        if len(set(seen)) != len(seen):
            raise SpecError("devices", f"timing profile {self.name}: an architecture appears twice in devices")

    def device(self, architecture: str | None, path: str = "$.hardware.architecture") -> DeviceEfficiency:
        """The efficiencies for *architecture*, else the ``"*"`` entry.

        Raises:
            ConfigError: Neither the architecture nor a ``"*"`` entry is stated.
        """
        fallback = None
        for entry in self.devices:
            if entry.architecture == architecture:
                return entry
            if entry.architecture == "*":
                fallback = entry
        if fallback is None:
            known = ", ".join(d.architecture for d in self.devices)
            why = f" ({self.unlisted_reason})" if self.unlisted_reason else ""
            raise ConfigError(path, f"timing profile {self.name} has no efficiencies for architecture {architecture!r}{why}; it has {known}")
        return fallback

    def collective_kernel_sms(self, model: str) -> Sourced | None:
        """The SMs stated for collective model *model*'s kernels (:attr:`collective_sms`), ``None`` where none is."""
        return dict(self.collective_sms).get(model)

    def figures(self) -> dict[str, Sourced]:
        """Every trainer-level figure by field name (device and overlap figures excluded)."""
        return {a.name: getattr(self, a.name) for a in attrs.fields(type(self)) if isinstance(getattr(self, a.name), Sourced)}
