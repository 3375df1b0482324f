"""A device architecture's achieved efficiencies under one trainer's kernels (:class:`DeviceEfficiency`).

A :class:`~hp_core.specs.timing.TimingProfile` states one entry per architecture (``"*"``: any other); each figure
is a :class:`~hp_core.specs.sourced.Sourced` value. :mod:`hp_core.specs.timing` re-exports this module's names.
"""

from __future__ import annotations

from typing import Any

import attrs

from hp_core.precision_recipes import AUTOCAST, GEMM_KERNELS, GEMM_PASS_NAMES, SPLIT_ACCUMULATOR
from hp_core.specs.attention_speedups import AttentionSpeedup
from hp_core.specs.gemms import GemmShapeScale, GemmTable, SpeedupCurve
from hp_core.specs.sourced import Sourced, _at_least_one, _fraction, _sourced

__all__ = ["DeviceEfficiency", "ROUTER_REFERENCE_ELEMENTS"]

# The routed tokens times experts of one micro-batch at which the router figures are
# measured (DeepSeek-V2: 4096 tokens, 160 experts); a layer's router time scales with its own.
ROUTER_REFERENCE_ELEMENTS = 4096 * 160


def _speedups(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    for row in value:
        name = row[0] if len(row) == 2 and isinstance(row[0], str) else None
        kernel = name.removesuffix(AUTOCAST).removesuffix(SPLIT_ACCUMULATOR) if name is not None else None
        if (len(row) != 2 or kernel not in GEMM_KERNELS or kernel == "bf16" or not isinstance(row[1], Sourced)
                or not row[1].value > 0):
            raise ValueError(f"{attribute.name}: a row must be (kernel, Sourced speedup > 0) with a kernel of "
                             f"{GEMM_KERNELS[1:]} (or one with '{AUTOCAST}' or '{SPLIT_ACCUMULATOR}'); got {row!r}")
    kernels = [row[0] for row in value]
    if len(set(kernels)) != len(kernels):
        raise ValueError(f"{attribute.name}: a kernel appears twice")
    for name in kernels:  # the split-accumulator rate prices the backward passes beside the kernel's own in forward
        if name.endswith(SPLIT_ACCUMULATOR) and name.removesuffix(SPLIT_ACCUMULATOR) not in kernels:
            raise ValueError(f"{attribute.name}: {name} needs the kernel's own (fast-accumulation) figure "
                             f"{name.removesuffix(SPLIT_ACCUMULATOR)!r} beside it")


@attrs.frozen(kw_only=True)
class DeviceEfficiency:
    """Achieved fractions of one device architecture's peaks, under one trainer's kernels.

    Time of an op class is ``work / (peak * fraction)``; see :mod:`hp_core.engine.timing`.

    Attributes:
        architecture: The :attr:`HardwareSpec.architecture <hp_core.specs.hardware.HardwareSpec.architecture>`
            this entry is for (``"blackwell"``, ``"hopper"``, ...); ``"*"`` matches any.
        matmul: Dense GEMMs, of the dense peak in the compute dtype.
        attention_forward: The fused attention kernel's forward, of the dense peak, on the FLOPs it executes (half
            the score matrix under a causal mask; see :attr:`TimingProfile.flash_causal_fraction
            <hp_core.specs.timing.TimingProfile.flash_causal_fraction>`).
        attention_backward: Its backward, likewise.
        attention_forward_overhead_seconds: A fixed time per forward attention kernel call (launch, the tail of the
            last wave, the causal triangle's uneven work): it takes ``overhead + flops / (peak * fraction)``.
        attention_backward_overhead_seconds: Likewise for the backward kernel.
        grouped_matmul: Grouped (expert) GEMMs with many rows per expert, of the dense peak.
        grouped_half_rows: Rows (tokens) per expert at which a grouped GEMM
            reaches half of :attr:`grouped_matmul`: its efficiency is
            ``grouped_matmul * rows / (rows + half_rows)`` (reading an
            expert's weights costs as much as ``half_rows`` rows of FLOPs).
        memory_bandwidth: Of the HBM bandwidth, reached by memory-bound kernels
            (elementwise ops, the optimizer step, token permutation).
        intra_node_bus: NCCL bus bandwidth of all-gather, reduce-scatter and all-reduce within a node, of the link bandwidth.
        inter_node_bus: The same across nodes, of the per-device network bandwidth.
        all_to_all_bus: NCCL all-to-all bus bandwidth within a node, of the link bandwidth.
        inter_node_all_to_all_bus: Of the network bandwidth, an all-to-all's cross-node share; ``None``: :attr:`inter_node_bus`.
        collective_overhead_seconds: A fixed time per collective call (launch, synchronisation) beyond its steps and bytes.
        mla_attention_forward: The fused attention forward when the query/key
            head dim exceeds the value head dim (multi-head latent attention:
            192 against 128), measured apart; ``None``: :attr:`attention_forward`.
        mla_attention_backward: Its backward; ``None``: :attr:`attention_backward`.
        mla_attention_forward_overhead_seconds: Its fixed time per forward
            call; ``None``: :attr:`attention_forward_overhead_seconds`.
        mla_attention_backward_overhead_seconds: Likewise backward; ``None``:
            :attr:`attention_backward_overhead_seconds`.
        moe_permute_bandwidth: Of the HBM bandwidth, reached by the MoE token
            permutation kernels (permute, unpermute, chunk sort); ``None``:
            :attr:`memory_bandwidth`.
        moe_permute_overhead_seconds: A fixed time per direction (forward or
            backward) of one MoE layer's permutation kernels (their launches);
            ``None``: none.
        moe_router_forward_seconds: The MoE router's kernels other than its gating GEMM (score function, group and
            expert top-k, capacity top-k, auxiliary loss) in one layer's forward, measured at
            :data:`ROUTER_REFERENCE_ELEMENTS` routed tokens times experts and scaled by the layer's; ``None``: not priced.
        moe_router_backward_seconds: Likewise in the backward.
        ssd_scan_forward: Of the dense peak, the rate of a Mamba-2 layer's chunked SSD scan forward (mamba_ssm's
            Triton kernels, :attr:`LayerWork.ssd_scan <hp_core.costs.LayerWork.ssd_scan>`) on the FLOPs the layer
            counts for it (whole chunk tiles, no causal halving); ``None``: priced as fused attention (its rates, the
            causal fraction and the FP8 attention speedup), as before these figures.
        ssd_scan_backward: Likewise its backward, on the attention backward factor times those FLOPs; ``None``:
            as fused attention, :attr:`ssd_scan_forward` stated or not.
        gemm_table: Measured GEMM efficiencies by shape (:class:`GemmTable`): a dense or grouped GEMM whose shape
            it holds takes its own efficiency per pass; any other takes :attr:`matmul`, respectively the grouped fit.
            ``None``: every GEMM takes the single figures.
        gemm_shape: The device's dense GEMM efficiency by shape relative to its largest measured shape
            (:class:`~hp_core.specs.gemms.GemmShapeScale`): where no :attr:`gemm_table` is stated, a dense GEMM of known
            shape takes :attr:`matmul` times its factor per pass. ``None``: no shape dependence.
        sustained_slowdown: A whole training step's time over the sum of its kernels' and collectives' times as
            the figures above price them (each measured alone): what a full run adds -- clocks under sustained load,
            caches other kernels have evicted, launch gaps and host work between kernels. It multiplies every priced
            GPU time (compute, communication, the step-end reduction and optimizer step; not offload's host-link
            copies). ``None``: 1, the kernels as measured alone.
        fsdp1_unit_seconds: An empirical serial time per FSDP1 unit per micro-batch: what torch FSDP1 as Composer
            runs it (FlatParameter units, the ``limit_all_gathers`` rate limiter) adds to each body layer (one unit)
            beyond its kernels -- its hooks, the rate limiter's CPU-GPU synchronisation, the FlatParameter copies, the
            fp32 gradient cast and divide passes -- fitted to measured step times, not priced from sources. Charged only
            under :attr:`TimingProfile.fsdp1_units`; ``None``: none fitted for the device, which such a profile refuses.
        matmul_whole_run_factor: A whole run's GEMM time over the kernel figure, already folded into
            :attr:`matmul` (which is the kernel figure over it); report-only (the rates read :attr:`matmul`). ``None``: 1.
        gemm_speedups: ``(kernel, Sourced)`` pairs: a low-precision GEMM
            kernel family's (:attr:`PrecisionRecipe.kernel
            <hp_core.precision_recipes.PrecisionRecipe.kernel>`) measured time
            speedup over bf16 on the same shapes, inputs already quantized (the
            kernel alone: quantization is priced apart as memory-bound work).
            A recipe's GEMMs take the bf16 time as priced above divided by it;
            a kernel not listed cannot be priced on the device. A kernel
            named ``<kernel>:autocast`` was measured with its inputs quantized
            in the timed region (quantization included, so none is priced
            apart), used only where the kernel alone was not measured. A kernel
            named ``<kernel>:split_accumulator`` is its rate with FP8 split
            accumulation (:data:`~hp_core.precision_recipes.SPLIT_ACCUMULATOR`),
            which the passes a recipe runs so take (:meth:`pass_speedups`); it
            needs the kernel's own figure beside it.
        banded_gemm_speedups: ``(kernel, low, high, Sourced)`` rows: a kernel's speedup over bf16 measured on a
            device whose dense peak in the kernel's dtype is ``low``-``high`` times its bf16 one. A speedup over bf16
            carries only to a device whose peaks stand in the same ratio (FP4 runs 4 times BF16 on a B200, about 6
            times on a B300), so a kernel stated here (and not in :attr:`gemm_speedups`) takes the row whose range
            holds the hardware's ratio, and a recipe of it is refused on hardware no row holds. Ranges of one kernel
            do not overlap. A banded kernel states no ``<kernel>:autocast`` figure in :attr:`gemm_speedups` (unbanded,
            it would price every device outside the bands) and so none with ``:split_accumulator`` (which needs the
            kernel's own figure there).
        gemm_speedup_curves: ``(kernel, SpeedupCurve)`` pairs: a kernel of :attr:`gemm_speedups` (the name as stated
            there, ``:split_accumulator`` included) measured by GEMM size; a pass taking that figure
            (:meth:`pass_speedups`) takes the curve at each of a layer's dense GEMMs instead
            (:mod:`hp_core.engine.timing.speedup_shapes`); the single figure still prices the rest (grouped GEMMs).
        attention_speedups: FP8 attention kernels' measured speedups over bf16 (:mod:`hp_core.specs.attention_speedups`).
    """

    architecture: str
    matmul: Sourced = attrs.field(validator=_fraction)
    attention_forward: Sourced = attrs.field(validator=_fraction)
    attention_backward: Sourced = attrs.field(validator=_fraction)
    attention_forward_overhead_seconds: Sourced = attrs.field(validator=_sourced)
    attention_backward_overhead_seconds: Sourced = attrs.field(validator=_sourced)
    grouped_matmul: Sourced = attrs.field(validator=_fraction)
    grouped_half_rows: Sourced = attrs.field(validator=_sourced)
    memory_bandwidth: Sourced = attrs.field(validator=_fraction)
    intra_node_bus: Sourced = attrs.field(validator=_fraction)
    inter_node_bus: Sourced = attrs.field(validator=_fraction)
    all_to_all_bus: Sourced = attrs.field(validator=_fraction)
    collective_overhead_seconds: Sourced = attrs.field(validator=_sourced)
    mla_attention_forward: Sourced | None = attrs.field(default=None, validator=attrs.validators.optional(_fraction))
    mla_attention_backward: Sourced | None = attrs.field(default=None, validator=attrs.validators.optional(_fraction))
    mla_attention_forward_overhead_seconds: Sourced | None = attrs.field(default=None, validator=attrs.validators.optional(_sourced))
    mla_attention_backward_overhead_seconds: Sourced | None = attrs.field(default=None, validator=attrs.validators.optional(_sourced))
    inter_node_all_to_all_bus: Sourced | None = attrs.field(default=None, validator=attrs.validators.optional(_fraction))
    moe_permute_bandwidth: Sourced | None = attrs.field(default=None, validator=attrs.validators.optional(_fraction))
    moe_permute_overhead_seconds: Sourced | None = attrs.field(default=None, validator=attrs.validators.optional(_sourced))
    moe_router_forward_seconds: Sourced | None = attrs.field(default=None, validator=attrs.validators.optional(_sourced))
    moe_router_backward_seconds: Sourced | None = attrs.field(default=None, validator=attrs.validators.optional(_sourced))
    ssd_scan_forward: Sourced | None = attrs.field(default=None, validator=attrs.validators.optional(_fraction))
    ssd_scan_backward: Sourced | None = attrs.field(default=None, validator=attrs.validators.optional(_fraction))
    gemm_table: GemmTable | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.instance_of(GemmTable)))
    gemm_shape: GemmShapeScale | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.instance_of(GemmShapeScale)))
    sustained_slowdown: Sourced | None = attrs.field(default=None, validator=attrs.validators.optional(_at_least_one))
    matmul_whole_run_factor: Sourced | None = attrs.field(default=None, validator=attrs.validators.optional(_at_least_one))
    fsdp1_unit_seconds: Sourced | None = attrs.field(default=None, validator=attrs.validators.optional(_sourced))
    gemm_speedups: tuple[tuple[str, Sourced], ...] = attrs.field(default=(), converter=tuple, validator=_speedups)
    banded_gemm_speedups: tuple[tuple[str, float, float, Sourced], ...] = attrs.field(default=(), converter=tuple)
    attention_speedups: tuple[AttentionSpeedup, ...] = attrs.field(default=(), converter=tuple)
    gemm_speedup_curves: tuple[tuple[str, SpeedupCurve], ...] = attrs.field(default=(), converter=tuple)

    @gemm_speedup_curves.validator
    def _check_curves(self, attribute: attrs.Attribute, value: tuple) -> None:
        plain = [row[0] for row in self.gemm_speedups]
        names = [row[0] if isinstance(row, (tuple, list)) and row else None for row in value]
        for row in value:
            if (not isinstance(row, (tuple, list)) or len(row) != 2 or row[0] not in plain
                    or not isinstance(row[1], SpeedupCurve) or names.count(row[0]) > 1):
                raise ValueError(f"{attribute.name}: a row must be (kernel stated in gemm_speedups, SpeedupCurve), "
                                 f"one per kernel; got {row!r}")

    @banded_gemm_speedups.validator
    def _check_bands(self, attribute: attrs.Attribute, value: tuple) -> None:
        plain = {row[0] for row in self.gemm_speedups}
        for row in value:
            if (not isinstance(row, (tuple, list)) or len(row) != 4 or not isinstance(row[0], str)
                    or row[0] not in GEMM_KERNELS or row[0] in ("bf16", *plain)
                    or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in row[1:3])
                    or not 0 < row[1] <= row[2] < float("inf") or not isinstance(row[3], Sourced) or not row[3].value > 0):
                raise ValueError(f"{attribute.name}: a row must be (kernel of {GEMM_KERNELS[1:]} not in gemm_speedups, "
                                 f"low, high, Sourced speedup > 0) with 0 < low <= high; got {row!r}")
            if row[0] + AUTOCAST in plain:  # it would price any device outside every band (autocast_speedup)
                raise ValueError(f"{attribute.name}: {row[0]} is banded, so gemm_speedups may not state "
                                 f"{row[0] + AUTOCAST!r}: a speedup over bf16 carries only at the peak ratio it was "
                                 f"measured at; state it as a banded row or not at all")
        for kernel in {row[0] for row in value}:
            bands = sorted((row[1], row[2]) for row in value if row[0] == kernel)
            if any(later[0] <= earlier[1] for earlier, later in zip(bands, bands[1:])):
                raise ValueError(f"{attribute.name}: {kernel}'s peak-ratio ranges overlap: {bands}")

    def figures(self) -> dict[str, Sourced]:
        """Every figure the entry states, by field name (optional figures left unstated and the GEMM table are
        omitted; a GEMM speedup as ``gemm_speedup_<kernel>``)."""
        found = {
            a.name: getattr(self, a.name)
            for a in attrs.fields(type(self))
            if isinstance(getattr(self, a.name), Sourced)
        }
        found.update({f"gemm_speedup_{kernel}": figure for kernel, figure in self.gemm_speedups})
        found.update({f"gemm_speedup_{kernel}@{low:.2f}-{high:.2f}": figure for kernel, low, high, figure in self.banded_gemm_speedups})
        return found

    def gemm_speedup(self, kernel: str, peak_ratio: float | None = None) -> float | None:
        """The measured speedup of *kernel* over bf16 (1 for ``bf16``), ``None`` where the entry states none; a
        kernel of :attr:`banded_gemm_speedups` takes the row whose range holds *peak_ratio* (the hardware's dense peak
        in the kernel's dtype over its bf16 one), ``None`` where none does or no ratio is given."""
        if kernel == "bf16":
            return 1.0
        for name, figure in self.gemm_speedups:
            if name == kernel:
                return figure.value
        if peak_ratio is not None:
            for name, low, high, figure in self.banded_gemm_speedups:
                if name == kernel and low * (1 - 1e-9) <= peak_ratio <= high * (1 + 1e-9):
                    return figure.value
        return None

    def speedup_bands(self, kernel: str) -> tuple[tuple[float, float], ...]:
        """The peak-ratio ranges :attr:`banded_gemm_speedups` states *kernel*'s speedup at, lowest first (empty: none)."""
        return tuple(sorted((low, high) for name, low, high, _ in self.banded_gemm_speedups if name == kernel))

    def autocast_speedup(self, kernel: str) -> float | None:
        """The speedup of *kernel* measured with its quantization included (``<kernel>:autocast``), ``None`` if not stated."""
        return self.gemm_speedup(kernel + AUTOCAST)

    def pass_speedups(self, kernel: str, split_passes: tuple[str, ...] = (),
                      peak_ratio: float | None = None) -> tuple[float, float, float] | None:
        """*kernel*'s speedup in each GEMM pass (:data:`~hp_core.precision_recipes.GEMM_PASS_NAMES`: fprop, dgrad,
        wgrad), ``None`` where the entry states no figure of the kernel alone.

        A pass in *split_passes* (:attr:`PrecisionRecipe.split_accumulator
        <hp_core.precision_recipes.PrecisionRecipe.split_accumulator>`) takes the
        ``<kernel>:split_accumulator`` figure where the entry states one, the
        kernel's own (fast-accumulation) figure otherwise: an entry with no
        separate figure prices the two modes alike (docs/precision.md, "Time").
        *peak_ratio* picks a banded figure (:meth:`gemm_speedup`).
        """
        fast = self.gemm_speedup(kernel, peak_ratio)
        if fast is None:
            return None
        split = self.gemm_speedup(kernel + SPLIT_ACCUMULATOR) or fast
        return tuple(split if name in split_passes else fast for name in GEMM_PASS_NAMES)

    def pass_curves(self, kernel: str, split_passes: tuple[str, ...] = ()) -> tuple[SpeedupCurve | None, ...]:
        """The curve (:attr:`gemm_speedup_curves`) of the figure each pass takes in :meth:`pass_speedups`, ``None``
        for a pass whose figure has none (it keeps the single figure)."""
        curves = dict(self.gemm_speedup_curves)
        split = kernel + SPLIT_ACCUMULATOR if self.gemm_speedup(kernel + SPLIT_ACCUMULATOR) else kernel
        return tuple(curves.get(split if name in split_passes else kernel) for name in GEMM_PASS_NAMES)
