"""One layer's time per micro-batch: compute, recompute, exposed communication and offload.

:func:`_layer_time` prices one layer under one recompute setting as the
model in :mod:`hp_core.engine.timing` says, returning a :class:`_LayerTime`;
:class:`LayerPricer` (built by :func:`layer_pricer`) prices single layers for
the recompute planner with the same rates, offload included.
"""

from __future__ import annotations

from typing import Any

import attrs

from hp_core.engine.timing.speedup_shapes import shape_speedup_rates
from hp_core.collectives import CollectiveModel
from hp_core.engine.timing.elementwise import elementwise_seconds, permute_seconds
from hp_core.engine.timing.host_floor import _expert_gemm_count, _host_floor
from hp_core.engine.timing.gemm_seconds import (_low_precision_seconds, _matmul_seconds, frozen_seconds, userbuffers_block_seconds,
                                                userbuffers_margin_seconds, userbuffers_rates, userbuffers_rerun_seconds, weight_gradient_share)
from hp_core.engine.timing.rates import _Rates, _rates, compute_dtype_rates
from hp_core.errors import ConfigError
from hp_core.specs import HardwareSpec, ParallelSpec, PrecisionSpec
from hp_core.specs.timing import TimingProfile
from hp_core.costs import LayerContext, LayerCost, LayerWork, Rerun
from hp_core.precision_recipes import PrecisionRecipe
from hp_core.score_masks import block_factor, causal_score_pairs
from hp_core.types import LayerKind

__all__ = ["ALTERNATE_MATMUL_DEFAULT_FRACTION", "LayerPricer", "alternate_matmul_flops", "LayerSeconds", "layer_pricer", "offload_seconds", "work_of"]


@attrs.frozen
class _LayerTime:
    """One layer's per-micro-batch times and FLOPs on one rank under one recompute setting (:func:`_layer_time`).

    The four times are multiplied by the device's ``sustained_slowdown``; the FLOPs are not.

    Attributes:
        forward_seconds: Forward compute.
        backward_seconds: Backward compute, recompute excluded.
        recompute_seconds: Recomputed forward compute.
        communication_seconds: Exposed TP/CP/EP communication, a recomputed
            forward's and a re-gather's included (:func:`time_run
            <hp_core.engine.timing.step.time_run>` adds offload's exposed copies).
        flops: Model FLOPs, forward and backward of the matmuls and the attention core as the layer counts them.
        recomputed_flops: The FLOPs its recompute re-runs.
        core_backward_flops: A fused attention core's backward beyond the convention's (its re-run scores): HFU's.
        weight_gradient_seconds: The part of ``backward_seconds`` that is
            weight-gradient GEMMs, half the GEMM backward (a matmul's
            weight-gradient GEMM has the FLOPs of its input-gradient one; Qi et
            al. 2023, "Zero Bubble Pipeline Parallelism", Section 2) of the
            trained weights (frozen ones run none): what a zero-bubble schedule's W pass runs.
        communication_by_group: ``(group, seconds, exposed seconds)`` of its
            TP/CP/EP collectives, the recomputed ones included.
        unpaired_seconds: Under ``ep_comm_overlap``, what a lone forward and backward (:func:`~hp_core.engine.timing.overlap.unpaired_passes`)
            add: the all-to-all the overlap hides, ``min(all-to-all, compute)`` each way, less ``delay_wgrad``'s (docs/time.md).
    """

    forward_seconds: float
    backward_seconds: float
    recompute_seconds: float
    communication_seconds: float
    flops: float
    recomputed_flops: float
    weight_gradient_seconds: float = 0.0
    communication_by_group: tuple[tuple[str, float, float], ...] = ()
    unpaired_seconds: float = 0.0
    core_backward_flops: float = 0.0


def work_of(cost: LayerCost, kind: str) -> LayerWork:
    """The work a layer states (:attr:`LayerCost.work`), what its time is priced from.

    Raises:
        ConfigError: The kind states none: its GEMMs and collectives are
            unknown, and a step time without them would be silently short.
    """
    if cost.work is None:
        raise ConfigError(
            "$.model.layers",
            f"layer kind {kind!r} states no work (LayerCost.work: its GEMM shapes and collectives), so a step time "
            "cannot be priced without its traffic; its plugin must state it (docs/hooks/hp_layer_kinds.md)",
        )
    return cost.work


def _exposed(key: str, seconds: float, gemm_seconds: float, compute_seconds: float, r: _Rates) -> float:
    """What the runtime leaves exposed of one direction's collectives of a group (``key``; ``"tp!"``: not overlappable).

    TP with ``tp_comm_overlap``: the collectives are split into ``tp`` chunks
    pipelined with the GEMMs they feed (TE userbuffers; async TP), so
    ``max(comm - GEMMs, comm / tp)``; EP (and the expert-TP collectives,
    ``etp``) with ``ep_comm_overlap``: one micro-batch's all-to-alls run behind another's compute, ``max(0, comm -
    compute)``; otherwise the profile's fraction (``1 - CommOverlap``).
    """
    if not seconds:
        return 0.0
    if key.endswith("!"):
        return seconds
    if key == "tp" and r.tp_comm_overlap:
        return max(seconds - gemm_seconds, seconds / r.tp)
    if key in ("ep", "etp") and r.ep_comm_overlap:
        return max(0.0, seconds - compute_seconds)
    return seconds * _GROUP_EXPOSED[key](r)


# Per group: the share of its time the runtime leaves exposed.
# The expert-TP gather and reduce-scatter run inside the token dispatcher with the all-to-alls, so they take
# expert parallelism's overlap (Megatron-Core MoEAlltoAllTokenDispatcher; docs/time.md).
_GROUP_EXPOSED = {"tp": lambda r: r.expose_tp, "cp": lambda r: r.expose_cp, "ep": lambda r: r.expose_ep,
                  "etp": lambda r: r.expose_ep}


# What an op-level SAC that re-runs "every second mm" (torchtitan/distributed/activation_checkpoint.py, _custom_policy)
# re-runs of a layer that does not state its matmuls' order (LayerWork.alternate_matmul_flops None): half its forward
# matmul FLOPs, exact for an even count of equal matmuls, a default otherwise (absent is not zero; docs/time.md).
ALTERNATE_MATMUL_DEFAULT_FRACTION = 0.5


def alternate_matmul_flops(work: LayerWork, matmul_flops: float) -> float:
    """The forward FLOPs an every-second-mm policy re-runs: the layer's statement, else the documented default."""
    stated = work.alternate_matmul_flops
    return ALTERNATE_MATMUL_DEFAULT_FRACTION * matmul_flops if stated is None else stated


def _layer_time(cost: LayerCost, work: LayerWork, full: bool, recomputed: frozenset[str], r: _Rates,
                unit: bool = False) -> _LayerTime:
    """One layer's per-micro-batch time under its recompute setting (:mod:`hp_core.engine.timing`).

    *unit*: the layer is a body layer, one FSDP unit: under FSDP1 its forward and backward take the
    per-unit time (``r.unit_fwd``, ``r.unit_bwd``) once, a full recompute not again (the checkpoint
    wrapper recomputes inside the unit's backward; FSDP1's hooks do not run again). Added after the
    sustained slowdown: a fitted wall-clock figure.
    """
    f = cost.forward
    if r.low_precision and not work.quantized:  # a layer kept in the compute dtype under the recipe (LayerWork.quantized)
        r = compute_dtype_rates(r)
    r = shape_speedup_rates(work, userbuffers_rates(work, r), min(work.grouped_flops, f.matmul_flops))  # no TP overlap on a layer refusing its userbuffers; speedups by GEMM size
    # Compute.
    grouped = min(work.grouped_flops, f.matmul_flops)
    mm_fwd, mm_bwd, _ = _matmul_seconds(f.matmul_flops - grouped, grouped, work, r)
    quant_fwd = quant_bwd = 0.0
    if r.low_precision:
        mm_fwd, mm_bwd, quant_fwd, quant_bwd = _low_precision_seconds(f.matmul_flops - grouped, grouped, work, r, mm_fwd, mm_bwd)
    # Frozen weights (LayerWork.frozen_matmul_flops) run no weight-gradient GEMM (autograd skips it where the weight
    # does not require grad): their share of it comes off at the rate it was priced (gemm_seconds.frozen_seconds);
    # a zero-bubble W pass runs the trained GEMMs' half of their backward alone.
    frozen_wgrad = frozen_bwd = frozen_grouped = 0.0
    # Weight-gradient GEMMs not launched: the frozen ones, and where every expert is frozen the experts' GEMMs as the
    # host floor counts them (the grouped as one, each local expert's MLP as one under sequential_experts).
    frozen_kernels = 0
    if work.frozen_matmul_flops:
        frozen_wgrad, frozen_bwd, frozen_grouped = frozen_seconds(f.matmul_flops, grouped, work, r)
        all_frozen = grouped and frozen_grouped >= grouped * (1 - 1e-9)
        frozen_kernels = len(work.frozen_gemms) + (_expert_gemm_count(work) if all_frozen else 0)
    wgrad = (mm_bwd - frozen_bwd) * weight_gradient_share(r)  # half, or each backward pass at its own speedup
    mm_bwd -= frozen_wgrad
    mm_fwd, mm_bwd, wgrad = (a + b for a, b in zip((mm_fwd, mm_bwd, wgrad), userbuffers_margin_seconds(work, r)))  # TE's SM margins
    if f.attention_flops and r.flash and work.ssd_scan and r.ssd_fwd is not None and r.ssd_bwd is not None:
        # A Mamba-2 SSD scan at the device's measured scan rates (DeviceEfficiency.ssd_scan_forward): its FLOPs as the
        # layer counts them (whole chunk tiles, no causal halving), no attention call's fixed time, no FP8 speedup
        # (mamba_ssm's Triton kernels run in the compute dtype); the backward on the attention backward factor.
        att_fwd = f.attention_flops / (r.peak * r.ssd_fwd)
        att_bwd = r.attn_backward * f.attention_flops / (r.peak * r.ssd_bwd)
    elif f.attention_flops and r.flash:
        calls = work.attention_calls * (r.cp if r.cp_algorithm == "p2p" else 1)
        executed = f.attention_flops * r.causal * block_factor(work.local_mask, r.block_tokens)  # hp_core.score_masks
        if work.wide_qk_attention:  # q/k head dim wider than v's: measured apart (MLA)
            fwd_eff, bwd_eff, fwd_fixed, bwd_fixed = r.mla_attn_fwd, r.mla_attn_bwd, r.mla_attn_fwd_overhead, r.mla_attn_bwd_overhead
        else:
            fwd_eff, bwd_eff, fwd_fixed, bwd_fixed = r.attn_fwd, r.attn_bwd, r.attn_fwd_overhead, r.attn_bwd_overhead
        att_fwd = executed / (r.peak * fwd_eff) + calls * fwd_fixed
        att_bwd = r.attn_backward * executed / (r.peak * bwd_eff) + calls * bwd_fixed
        # FP8 attention at its measured speedup (none measured for a windowed kernel). A chunked core too: Megatron-Bridge
        # folds the chunks into the batch, each a causal sequence of its own (llama4_utils.py chunkify at v0.4.0), the
        # kernel the figures time.
        if work.local_mask is None or work.local_mask.window is None:
            speedup = r.mla_attn_speedup if work.wide_qk_attention else r.attn_speedup
            att_fwd, att_bwd = att_fwd / speedup[0], att_bwd / speedup[1]
        elif r.windowed_fp8_full_backward and not work.wide_qk_attention:
            # cuDNN's FP8 backward with a sliding window runs the whole causal triangle (measured quadratic in the
            # sequence length where its bf16 backward and both forwards are linear: attention_speedup.py
            # WINDOWED_FP8_BACKWARD_SOURCE): the full causal core's FLOPs at the full-width FP8 backward rate; the
            # forward keeps the window's pairs at the bf16 rates (the same benchmark times its MXFP8 windowed forward
            # as its bf16 one: 0.210/0.210, 0.417/0.414, 0.826/0.822 ms on GB200 at 4,096 to 16,384 tokens).
            mask = work.local_mask
            whole = f.attention_flops * r.causal / (causal_score_pairs(mask.seq_len, mask.window)
                                                   / causal_score_pairs(mask.seq_len))
            att_bwd = (r.attn_backward * whole / (r.peak * bwd_eff) + calls * bwd_fixed) / r.attn_speedup[1]  # as a full core's
    else:
        # Eager: batched GEMMs over the whole score matrix; masking happens after QK^T.
        att_fwd = f.attention_flops / (r.peak * r.matmul)
        att_bwd = r.mm_backward * att_fwd
    elementwise = f.elementwise_flops - (min(work.fused_softmax_flops, f.elementwise_flops) if r.flash else 0.0)
    if r.epilogue_activation:  # a fused grouped MLP's activation, run in its GEMMs' epilogues (LayerWork.epilogue_activation_flops)
        elementwise -= min(work.epilogue_activation_flops, elementwise)
    # A rotary embedding's share (rot_fwd, part of el_fwd): its backward moves the forward's bytes, or its eager kernels'.
    el_fwd, rot_fwd, rot_bwd = elementwise_seconds(work, r, elementwise)
    mla_copy = work.copy_bytes / r.memory
    copy_bwd = (work.copy_bytes if work.backward_copy_bytes is None else work.backward_copy_bytes) / r.memory
    permute_fwd, permute_bwd = permute_seconds(work, r)  # an MoE layer's token permutation, each way
    router_fwd = work.router_elements * r.router_fwd
    forward = mm_fwd + att_fwd + el_fwd + permute_fwd + mla_copy + router_fwd + quant_fwd
    backward = (mm_bwd + att_bwd + r.el_backward * (el_fwd - rot_fwd) + rot_bwd + permute_bwd + copy_bwd
                + work.router_elements * r.router_bwd + quant_bwd)
    if work.table_elements:
        # A lookup table's backward writes a dense gradient of the rank's shard and reads it
        # into the gradient buffer (PyTorch embedding_dense_backward, then main_grad +=).
        backward += work.table_elements * 2 * (r.act_bytes + r.grad_bytes) / r.memory
    if r.host is not None and r.host.floors(unit):  # a layer replayed from a CUDA graph launches no kernel one by one
        forward, backward = _host_floor(work, forward, backward, r, frozen_kernels)

    # Communication: every collective the layer states (LayerWork.collectives), by group, then what the
    # runtime's schedule leaves exposed (:func:`_exposed`).
    by_group: dict[str, list[float]] = {}
    policy = bool(r.alternate_mm_switches) and r.alternate_mm_switches <= recomputed  # op-level SAC runs
    reissued = recomputed | r.alternate_also if policy else recomputed  # what that policy drops besides (its save list's gaps)
    for c in work.collectives:
        if c.gemm_input and r.gather_share != 1.0:  # a recipe gathering GEMM inputs quantized
            c = attrs.evolve(c, bytes=c.bytes * r.gather_share)
        seconds = r.links.seconds(c.group, c.op, c.bytes, c.routing)
        key = c.group if c.overlappable else f"{c.group}!"
        sums = by_group.setdefault(key, [0.0, 0.0])
        sums[0] += c.forward_calls * seconds
        if c.op == "reduce_scatter" and c.forward_calls and key == "tp" and r.tp_comm_overlap and not r.tp_overlap_bwd_rs:
            # A block's backward reduce-scatters of its input gradient, which the runtime's TP overlap cannot fuse
            # (a head's single-matmul one it can): exposed.
            by_group.setdefault("tp!", [0.0, 0.0])[1] += c.backward_calls * seconds
        else:
            sums[1] += c.backward_calls * seconds
        if c.rerun_switch is not None and c.rerun_switch in reissued and not full:
            sums[1] += c.forward_calls * seconds  # issued again for the recomputed tensors
        if full:
            sums[1] += c.forward_calls * seconds  # the recomputed forward's
    # What each direction's collectives may hide behind: its GEMMs and its whole compute (a full recompute's included).
    gemm_bwd, compute_bwd = mm_bwd + (mm_fwd if full else 0.0), backward + (forward if full else 0.0)
    groups, comm, unpaired, lone_bwd = [], 0.0, 0.0, 0.0
    for key, (fwd_s, bwd_s) in by_group.items():
        exposed = _exposed(key, fwd_s, mm_fwd, forward, r) + _exposed(key, bwd_s, gemm_bwd, compute_bwd, r)
        comm += exposed
        groups.append((key.rstrip("!"), fwd_s + bwd_s, exposed))
        if key in ("ep", "etp") and r.ep_comm_overlap:  # a lone pass waits on its own all-to-alls: what is hidden shows
            unpaired, lone_bwd = unpaired + fwd_s + bwd_s - exposed, lone_bwd + bwd_s
    if lone_bwd and r.delay_wgrad and grouped:  # the dispatch's backward (half) beside the trained experts' wgrad (half their bwd)
        # The experts' GEMMs at the recipe's backward speedup where it quantizes them (not under gemms "linears").
        quantized = r.low_precision and r.gemm_scope != "linears"
        expert_bwd = _matmul_seconds(0.0, grouped - frozen_grouped, work, r)[1] / (r.gemm_speedup_backward if quantized else 1.0)
        unpaired = max(0.0, unpaired - min(lone_bwd, expert_bwd) / 2)

    # Recompute.
    # FLOPs, rate-free: a frozen weight's backward counts its input-gradient GEMM's alone (half its backward FLOPs).
    # The attention core three times its forward (the model-FLOPs convention: Narayanan et al. 2021, Section 5.1;
    # Megatron-LM num_floating_point_operations); a fused core's backward beyond it (FlashAttention-2 re-runs the
    # scores: attention_backward_factor 2.5 against 2) is hardware FLOPs (core_backward_flops, HFU).
    model_flops = ((1 + r.mm_backward) * f.matmul_flops - r.mm_backward / 2 * min(work.frozen_matmul_flops, f.matmul_flops)
                   + 3 * f.attention_flops)
    core_again = (r.attn_backward - 2) * f.attention_flops if r.flash else 0.0
    if full:
        recompute = forward
        recomputed_flops = f.matmul_flops + f.attention_flops
    else:
        recompute = 0.0
        recomputed_flops = 0.0
        # The compute-dtype bytes each recomputed switch regenerates: those it drops, and those of a term a recipe
        # moved off it (ActivationTerm.rerun_bytes: FP8 attention's q, k, v), which it still rebuilds, saving nothing.
        dropped: dict[str, int] = {}
        for term in cost.activations:
            if term.switch is not None and term.switch in recomputed:
                dropped[term.switch] = dropped.get(term.switch, 0) + term.bytes
            if term.rerun_switch is not None and term.rerun_switch in recomputed:
                dropped[term.rerun_switch] = dropped.get(term.rerun_switch, 0) + term.rerun_bytes
        # What the layer states: the switches whose recompute re-runs its attention core, and those a
        # collective restores (sequence parallelism's re-gather) instead of a rewrite.
        core_switches = work.attention_core_switches
        restored = {c.rerun_switch for c in work.collectives if c.rerun_switch is not None}
        core = sum(dropped.get(s, 0) for s in core_switches)
        if recomputed & core_switches and f.attention_flops:
            recompute += att_fwd + 2 * core / r.memory
            recomputed_flops += f.attention_flops
        for switch, nbytes in dropped.items():
            rerun = work.rerun(switch)
            # A switch a collective restores is priced by that collective, unless the layer states its re-run (the
            # MoE block's moeLayer re-issues its all-to-alls and re-runs its forward: Rerun.forward).
            if switch in core_switches or (switch in restored and rerun is None):
                continue
            if rerun is not None:  # what the layer states its recompute re-runs (LayerWork.reruns)
                flops = rerun.matmul_flops_per_byte * nbytes
                recompute += flops / (r.peak * r.matmul) + rerun.copy_bytes / r.memory  # + its userbuffers margins (a block's below)
                recompute += 0.0 if rerun.forward else userbuffers_rerun_seconds(work, r, rerun.userbuffers_linears)
                recomputed_flops += flops
                if rerun.forward:
                    block_seconds, block_flops = _block_forward(switch, rerun, work, r, permute_fwd, router_fwd, unit)
                    recompute += block_seconds
                    recomputed_flops += block_flops
            else:
                recompute += 2 * nbytes / r.memory
        alternate = alternate_matmul_flops(work, f.matmul_flops)
        if alternate and policy:
            # An op-level policy re-running every second matmul of the block (TimingProfile.alternate_matmul_recompute).
            recompute += alternate / (r.peak * r.matmul) / (1.0 if r.gemm_scope == "experts" else r.gemm_speedup)  # dense
            recomputed_flops += alternate
        if policy:  # its save list holds no rotary op: the rotated q and k, the attention's inputs, are rebuilt
            # Nor any op of an MoE layer's token permutation (gathers, index puts, the score multiply,
            # scatter_add): its forward runs again, as the grouped GEMMs between them do (docs/time.md).
            recompute += rot_fwd + permute_fwd
    k = r.slowdown  # a whole run's time over its kernels' measured alone (DeviceEfficiency.sustained_slowdown)
    unit_fwd, unit_bwd = (r.unit_fwd, r.unit_bwd) if unit else (0.0, 0.0)  # FSDP1's per-unit time (rates._unit_seconds)
    return _LayerTime(
        forward_seconds=k * forward + unit_fwd, backward_seconds=k * backward + unit_bwd, recompute_seconds=k * recompute,
        communication_seconds=k * comm, flops=model_flops, recomputed_flops=recomputed_flops,
        weight_gradient_seconds=k * wgrad, unpaired_seconds=k * unpaired, core_backward_flops=core_again,
        communication_by_group=_merge(tuple((g, k * t, k * e) for g, t, e in groups)),
    )


def _block_forward(switch: str, rerun: Rerun, work: LayerWork, r: _Rates, permute_fwd: float, router_fwd: float,
                   unit: bool) -> tuple[float, float]:
    """``(seconds, FLOPs)`` of a block's forward that recomputing *switch* runs again (:attr:`Rerun.forward
    <hp_core.costs.Rerun.forward>`): its dense and grouped GEMMs priced as the layer's forward prices them
    (:func:`~.gemm_seconds._matmul_seconds` over those GEMMs alone, then a low-precision recipe's speedup and the
    quantization of their inputs: a checkpoint re-runs the forward in the recipe, Megatron-Core ``te_checkpoint``
    under fp8/fp4), with :attr:`~hp_core.costs.Rerun.permutation` the layer's router kernels and token permutation
    forward (*router_fwd*, *permute_fwd*); no shorter than the host time issuing those kernels and the collectives
    naming *switch* again (:func:`_host_floor`'s count) where the layer's launches are host-bound. The collectives
    themselves are priced with the layer's (their ``rerun_switch``)."""
    dense = sum(2.0 * rows * out * inp for rows, out, inp in rerun.gemms)
    grouped = rerun.grouped_flops
    # The block's GEMMs by their positions in the layer's (Rerun.positions), not by shape: a linear outside the block
    # of one of its shapes (an attention projection as wide as a shared expert's FC1) is none of its own.
    if any(p >= len(work.gemms) or work.gemms[p] != g for p, g in zip(rerun.positions, rerun.gemms)):
        raise ConfigError("$.model", f"the {switch} re-run's GEMMs {rerun.gemms} are not the layer's at their "
                                     f"positions {rerun.positions}")
    inside, original = set(rerun.positions), set(rerun.original_input_positions)

    def at(positions) -> tuple[tuple[int, int, int], ...]:
        return tuple(work.gemms[p] for p in positions)

    block = attrs.evolve(work, gemms=rerun.gemms, expert_gemms=work.expert_gemms if grouped else (),
                         high_precision_gemms=at(rerun.high_precision_positions),
                         original_input_gemms=at(rerun.original_input_positions),
                         # A module in a format of its own counts only with its GEMMs the block re-runs (an attention
                         # module's are not an MoE block's): gemm_seconds._low_precision_seconds reprices each.
                         modules=tuple(attrs.evolve(m, gemms=at(own), positions=own,
                                                    original_input_gemms=at(p for p in own if p in original))
                                       for m in work.modules if (own := tuple(p for p in m.positions if p in inside))))
    fwd, bwd, _ = _matmul_seconds(dense, grouped, block, r)
    quant = 0.0
    if r.low_precision:
        fwd, _, quant, _ = _low_precision_seconds(dense, grouped, block, r, fwd, bwd)
    fwd += userbuffers_block_seconds(block, work, rerun.userbuffers_linears, r)  # its userbuffers GEMMs' forward margins
    seconds = fwd + quant + ((router_fwd + permute_fwd) if rerun.permutation else 0.0)
    if r.host is not None and r.host.floors(unit):
        host = r.host
        kernels = (len(rerun.gemms) + (_expert_gemm_count(work) if grouped else 0)) * host.kernels_per_gemm
        kernels += sum(c.forward_calls for c in work.collectives if c.rerun_switch == switch)
        if rerun.permutation:
            kernels += (host.router_kernels[0] if work.router_elements else 0) + (host.permute_kernels if work.permute_bytes else 0)
        seconds = max(seconds, kernels * host.seconds_per_kernel)
    return seconds, dense + grouped


def _merge(groups: tuple[tuple[str, float, float], ...]) -> tuple[tuple[str, float, float], ...]:
    """``(group, total, exposed)`` seconds with a group's overlappable and other collectives added together."""
    merged: dict[str, list[float]] = {}
    for group, total, exposed in groups:
        sums = merged.setdefault(group, [0.0, 0.0])
        sums[0] += total
        sums[1] += exposed
    return tuple((g, t, e) for g, (t, e) in merged.items())


@attrs.frozen
class LayerSeconds:
    """One layer's time per micro-batch under one recompute setting (:func:`layer_pricer`).

    Attributes:
        forward_seconds: Forward compute.
        backward_seconds: Backward compute, recompute excluded.
        recompute_seconds: Recomputed forward compute.
        communication_seconds: Exposed TP/CP/EP communication, a recomputed forward's and a re-gather's included.
        offload_seconds: The exposed part of moving offloaded bytes to the
            host and back (:func:`offload_seconds`).
    """

    forward_seconds: float
    backward_seconds: float
    recompute_seconds: float
    communication_seconds: float
    offload_seconds: float = 0.0

    @property
    def micro_batch_seconds(self) -> float:
        """The layer's whole time per micro-batch: the five parts added."""
        return (self.forward_seconds + self.backward_seconds + self.recompute_seconds
                + self.communication_seconds + self.offload_seconds)

    @property
    def backward_with_recompute_seconds(self) -> float:
        """Backward compute plus what it recomputes."""
        return self.backward_seconds + self.recompute_seconds


def offload_seconds(moved_bytes: float, host_link_bandwidth: float, forward_seconds: float, backward_seconds: float) -> float:
    """The exposed time of offloading *moved_bytes* of one layer's kept activations.

    The copy to the host runs on a copy engine while the forward computes,
    and the copy back is prefetched while the backward computes (Rhu et al.
    2016, "vDNN", Section 3; Megatron-Core ``cpu_offload.py`` overlaps both
    on a side stream). Each direction takes ``moved / host_link_bandwidth``
    and hides behind the layer's own forward, respectively its backward with
    recompute; what does not fit in that window is exposed:
    ``max(0, moved/B - forward) + max(0, moved/B - backward)``.
    """
    if moved_bytes <= 0:
        return 0.0
    copy = moved_bytes / host_link_bandwidth
    return max(0.0, copy - forward_seconds) + max(0.0, copy - backward_seconds)


@attrs.frozen
class LayerPricer:
    """Prices single layers of one run under recompute settings, as :func:`~hp_core.engine.timing.step.time_run` prices them.

    Build with :func:`layer_pricer`. Time is priced per setting, not added
    up over switches: the attention-core switches are rebuilt by one
    re-run of the core, so their times do not add up.

    Attributes:
        hardware_name: The device's name (for error messages).
        host_link_bandwidth_bytes_per_second: The device's host link, ``None`` when unstated.
    """

    hardware_name: str
    host_link_bandwidth_bytes_per_second: float | None
    _rates: _Rates = attrs.field(repr=False, alias="rates")

    def price(
        self,
        cost: LayerCost,
        config: Any,
        kind: LayerKind,
        context: LayerContext,
        *,
        full: bool,
        recomputed: frozenset[str],
        offloaded_bytes: int = 0,
    ) -> LayerSeconds:
        """One layer's time per micro-batch, recomputing fully or the switches *recomputed*.

        Args:
            offloaded_bytes: Bytes it moves to the host and back (``0``: no offload).

        Raises:
            ConfigError: Offload asked of a device that states no host link bandwidth.
        """
        return self.layer(cost, config, kind, context)(full, recomputed, offloaded_bytes)

    def layer(self, cost: LayerCost, config: Any, kind: LayerKind, context: LayerContext) -> Any:
        """:meth:`price` for one layer, its shapes read once: ``seconds(full, recomputed, offloaded_bytes)``."""
        work = work_of(cost, kind.name)
        unit = kind.placement == "body"  # a body layer is one FSDP unit, as time_run prices it

        def seconds(full: bool, recomputed: frozenset[str], offloaded_bytes: int = 0) -> LayerSeconds:
            return self._seconds(cost, work, full, recomputed, offloaded_bytes, unit)

        return seconds

    def _seconds(self, cost: LayerCost, work: LayerWork, full: bool, recomputed: frozenset[str], offloaded_bytes: int,
                 unit: bool) -> LayerSeconds:
        t = _layer_time(cost, work, full, recomputed, self._rates, unit=unit)
        forward, backward, recompute, comm = t.forward_seconds, t.backward_seconds, t.recompute_seconds, t.communication_seconds
        moved = 0.0
        if offloaded_bytes:
            if self.host_link_bandwidth_bytes_per_second is None:
                raise ConfigError(
                    "$.hardware.host_link_bandwidth_bytes_per_second",
                    f"{self.hardware_name} does not state host_link_bandwidth_bytes_per_second, which offload needs",
                )
            moved = offload_seconds(offloaded_bytes, self.host_link_bandwidth_bytes_per_second, forward, backward + recompute)
        return LayerSeconds(forward, backward, recompute, comm, moved)


def layer_pricer(
    parallel: ParallelSpec,
    *,
    hardware: HardwareSpec,
    timing: TimingProfile,
    precision: PrecisionSpec,
    attention: str,
    recipe: PrecisionRecipe | None = None,
    collectives: CollectiveModel | None = None, zero: int | None = None,
) -> LayerPricer:
    """A :class:`LayerPricer` for one layout on one device, with the rates :func:`~hp_core.engine.timing.step.time_run` uses.

    Raises:
        ConfigError: A hardware field the timing model needs is unstated.
    """
    return LayerPricer(hardware.name, hardware.host_link_bandwidth_bytes_per_second,
                       rates=_rates(parallel, hardware, timing, precision, attention, recipe, collectives, zero))
