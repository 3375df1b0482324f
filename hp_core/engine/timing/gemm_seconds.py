"""A layer's GEMM seconds: its dense and grouped GEMMs, under a low-precision recipe, and its frozen share's backward.

:func:`_matmul_seconds` prices a layer's GEMMs as :mod:`hp_core.engine.timing` says (a device's measured
:class:`~hp_core.specs.timing.GemmTable` or shape scale, the machine's GEMM rates, the grouped GEMMs' figures), the
weight-gradient GEMMs' part of the backward apart; :func:`_low_precision_seconds` their time under a low-precision
recipe (docs/precision.md); :func:`frozen_seconds` the weight-gradient GEMMs a layer's frozen weights do not run
(:attr:`LayerWork.frozen_matmul_flops <hp_core.costs.LayerWork.frozen_matmul_flops>`), priced through those two as
the layer's own GEMMs are.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import attrs

from hp_core.costs import LayerWork
from hp_core.engine.timing.rates import _Rates
from hp_core.errors import ConfigError
from hp_core.linear_modules import joining_kept

__all__ = ["backward_pass_speedups", "frozen_seconds", "frozen_share", "margin_factor", "userbuffers_block_seconds", "userbuffers_margin_seconds",
           "userbuffers_rates", "userbuffers_rerun_seconds", "weight_gradient_share"]


def _less(items: tuple, outside: tuple) -> tuple:
    """*items* less one listing of each of *outside* (a multiset difference, order kept)."""
    left = Counter(outside)
    kept = []
    for item in items:
        if left[item]:
            left[item] -= 1
        else:
            kept.append(item)
    return tuple(kept)


def _flops(gemms: tuple[tuple[int, int, int], ...]) -> float:
    return sum(2.0 * rows * out * inp for rows, out, inp in gemms)


def _passes(flops: float, gemms: tuple[tuple[Any, ...], ...], grouped: bool, efficiency: float, table: Any, r: _Rates,
            rescale: bool) -> tuple[float, float, float]:
    """``(forward, backward, weight-gradient)`` FLOPs over efficiency of *flops* of GEMMs (times ``1 / peak`` is
    seconds): those of *gemms* whose three passes the device's table holds at their measured efficiencies, the
    backward's two GEMMs scaled by ``matmul_backward_factor / 2``, the rest at *efficiency*, the backward
    ``matmul_backward_factor`` times the forward, half of it the weight gradient. With *rescale* the shapes' FLOPs are
    scaled to *flops* (the layer's count of the routed FLOPs rules); without it, shapes claiming more FLOPs than
    *flops* are not the layer's and the table is not used."""
    half = r.mm_backward / 2
    fwd = bwd = wgrad = 0.0
    left = flops
    if table is not None and gemms:
        listed, covered, f_eff, b_eff = table.price(gemms, grouped=grouped)
        if rescale or listed <= flops * (1 + 1e-9):
            scale = flops / listed if rescale and listed else 1.0
            left -= covered * scale
            fwd += f_eff * scale
            bwd += half * b_eff * scale
            wgrad += half * table.weight_gradient(gemms, grouped=grouped) * scale
    return fwd + left / efficiency, bwd + r.mm_backward * left / efficiency, wgrad + half * left / efficiency


def _matmul_seconds(dense: float, grouped: float, work: LayerWork, r: _Rates) -> tuple[float, float, float]:
    """Forward and backward seconds of a layer's dense and grouped GEMMs, and the weight-gradient GEMMs' part of
    that backward (:mod:`hp_core.engine.timing`).

    Without a measured table every dense GEMM runs at ``matmul`` and the
    grouped ones at the fitted ``grouped * rows / (rows + half_rows)`` (under
    ``sequential_experts`` each local expert's GEMMs as dense ones); the
    backward is ``matmul_backward_factor`` times the forward, half of it the
    weight gradient. A GEMM whose
    shape the device's :class:`~hp_core.specs.timing.GemmTable` holds takes the
    efficiency measured for each of its three passes, its backward being the
    input-gradient and weight-gradient GEMMs (scaled by
    ``matmul_backward_factor / 2``). Dense FLOPs the known shapes do not
    account for (a weight shape shared by two layers, a kind recording none)
    run at ``matmul``; if the known shapes claim more FLOPs than the layer
    counts, their token counts are not the layer's and the table is not used.
    """
    table = r.gemm_table
    parts = [_passes(dense, work.gemms, False, r.matmul, table, r, rescale=False)]
    if grouped and work.sequential_experts:
        # Megatron-Core's SequentialMLP (LayerWork.sequential_experts): each local expert's linears are their own
        # dense GEMMs over its rows, priced as the layer's dense GEMMs are (the table's shape, else ``matmul``).
        each = tuple((rows, fan_out, fan_in) for experts, rows, fan_out, fan_in in work.expert_gemms for _ in range(experts))
        parts.append(_passes(grouped, each, False, r.matmul, table, r, rescale=True))
    elif grouped:
        rows = work.expert_rows
        parts.append(_passes(grouped, work.expert_gemms, True, r.grouped * rows / (rows + r.half_rows), table, r, rescale=True))
    fwd, bwd, wgrad = (sum(p[i] for p in parts) for i in range(3))
    return fwd / r.peak, bwd / r.peak, wgrad / r.peak


def _kept_seconds(dense: float, grouped: float, work: LayerWork, r: _Rates,
                  total: tuple[float, ...]) -> tuple[float, ...]:
    """The part of *total* (:func:`_matmul_seconds`'s seconds of these GEMMs, any passes) a low-precision recipe leaves
    in the compute dtype: the GEMMs the layer keeps there (:attr:`LayerWork.high_precision_gemms
    <hp_core.costs.LayerWork.high_precision_gemms>`) and those outside the recipe's ``gemms`` (the grouped ones under
    ``linears``, the dense ones under ``experts``)."""
    n = len(total)
    high = tuple(work.high_precision_gemms)
    high_flops = min(_flops(high), dense)
    hp = _matmul_seconds(high_flops, 0.0, attrs.evolve(work, gemms=high, expert_gemms=()), r)[:n] if high_flops else (0.0,) * n
    grp = _matmul_seconds(0.0, grouped, work, r)[:n] if grouped and r.gemm_scope != "all" else (0.0,) * n
    if r.gemm_scope == "all":
        return hp
    if r.gemm_scope == "linears":
        return tuple(a + b for a, b in zip(hp, grp))
    return tuple(t - g for t, g in zip(total, grp))  # "experts": the dense GEMMs stay in the compute dtype


def _low_precision_seconds(dense: float, grouped: float, work: LayerWork, r: _Rates, mm_fwd: float,
                           mm_bwd: float) -> tuple[float, float, float, float]:
    """:func:`_recipe_seconds`, with the GEMMs of the modules in a quantized format of their own (``LinearModule.format``,
    ``_Rates.module_rates``: an MXFP8 ``out_proj`` in an NVFP4 run) priced at that format's figures.

    Such a module's GEMMs are first priced as the run's recipe prices those it keeps in the compute dtype (their bf16
    time, nothing quantized), then given their format's speedup on that time, forward and backward, and its
    quantization: per element of each GEMM's input and output gradient, and of its weight where the copies are not
    cached, the HBM bytes its recipe states (an input its trainer keeps in the compute dtype at the
    ``quant_original_*`` bytes), as :func:`_recipe_seconds` prices the recipe's own.
    """
    if not any(m.format for m in work.modules):
        return _recipe_seconds(dense, grouped, work, r, mm_fwd, mm_bwd)
    rates = dict(r.module_rates)
    missing = sorted({m.format for m in work.modules if m.format and m.format not in rates})
    if missing:  # a run's rates made without its module recipes: refused rather than priced as the run's recipe
        raise ConfigError("$.precision.module_formats", f"module formats {missing} have no rates on this device "
                          "(the run's recipe was not resolved with them: hp_core.engine.precision.resolve_recipe)")
    own = [(m, rates[m.format]) for m in work.modules if m.format]
    # Each module GEMM joins the kept list while the layer lists an instance of it not kept there already.
    moved = joining_kept((g for m, _ in own for g in m.gemms), work.gemms, work.high_precision_gemms)
    fwd, bwd, q_fwd, q_bwd = _recipe_seconds(dense, grouped, attrs.evolve(
        work, high_precision_gemms=work.high_precision_gemms + tuple(moved)), r, mm_fwd, mm_bwd)
    for module, figures in own:
        gemms = tuple(module.gemms)
        f, b, _ = _matmul_seconds(_flops(gemms), 0.0, attrs.evolve(work, gemms=gemms, expert_gemms=()), r)
        fwd -= f - f / figures["gemm_speedup"]
        bwd -= b - b / figures["gemm_speedup_backward"]
        # Its own GEMMs whose input is kept in the compute dtype (no other linear's of their shape), as the layer
        # still lists them (a recipe that cannot re-quantize leaves none).
        originals = _common(tuple(module.original_input_gemms), tuple(work.original_input_gemms))
        inputs = sum(rows * inp for rows, _, inp in gemms) - sum(rows * inp for rows, _, inp in originals)
        kept = sum(rows * inp for rows, _, inp in originals)
        grads = sum(rows * out for rows, out, _ in gemms)
        weights = sum(out * inp for _, out, inp in gemms)
        rescale = figures["rescale"]  # per output element of its fprop, dgrad and wgrad GEMMs (_Rates.rescale)
        q_fwd += (inputs * figures["quant_input_fwd"] + kept * figures["quant_original_fwd"]
                  + weights * figures["quant_weight"] / 2 + grads * rescale[0]) / r.memory
        q_bwd += (inputs * figures["quant_input_bwd"] + kept * figures["quant_original_bwd"] + grads * figures["quant_grad"]
                  + weights * figures["quant_weight"] / 2 + (inputs + kept) * rescale[1] + weights * rescale[2]) / r.memory
    return fwd, bwd, q_fwd, q_bwd


def _recipe_seconds(dense: float, grouped: float, work: LayerWork, r: _Rates, mm_fwd: float,
                    mm_bwd: float) -> tuple[float, float, float, float]:
    """A layer's GEMM seconds under a low-precision recipe, and its quantization's (docs/precision.md).

    The GEMMs the layer keeps in the compute dtype (:attr:`LayerWork.high_precision_gemms
    <hp_core.costs.LayerWork.high_precision_gemms>`: a router's gate, the output head), and those outside the recipe's
    ``gemms`` (the grouped GEMMs under ``linears``, the dense ones under ``experts``) take their bf16 time and quantize nothing; the others the bf16 time divided by the device's measured speedup of the
    recipe's kernel, the forward's and the backward's (:func:`~hp_core.engine.timing.rates._recipe_rates`). Quantizing is memory-bound: per element of each quantized GEMM's input
    and output gradient (and weight, where the copies are not cached) the HBM bytes the
    rates state, over the known shapes scaled to the layer's quantized FLOPs; the input of a GEMM its trainer keeps in
    the compute dtype (:attr:`LayerWork.original_input_gemms <hp_core.costs.LayerWork.original_input_gemms>`) at the
    rates' ``quant_original_*`` bytes, forward and backward.

    Returns:
        ``(matmul forward, matmul backward, quantize forward, quantize backward)`` seconds.
    """
    high = tuple(work.high_precision_gemms)
    high_flops = min(_flops(high), dense)
    keep = _kept_seconds(dense, grouped, work, r, (mm_fwd, mm_bwd))
    fwd, bwd = keep[0] + (mm_fwd - keep[0]) / r.gemm_speedup, keep[1] + (mm_bwd - keep[1]) / r.gemm_speedup_backward
    # Elements quantized: inputs, output gradients and weights of the known low-precision shapes; the inputs of
    # those the trainer keeps in the compute dtype (LayerWork.original_input_gemms) apart, at their own bytes.
    remaining, kept_whole = list(high), list(work.original_input_gemms)
    low: list[tuple[float, float, float, float]] = []  # (count, rows, fan_out, fan_in)
    whole: list[tuple[float, float, float, float]] = []
    for gemm in work.gemms:
        if gemm in remaining:
            remaining.remove(gemm)
        else:
            low.append((1.0, *gemm))
            if gemm in kept_whole:
                kept_whole.remove(gemm)
                whole.append((1.0, *gemm))
    inputs = originals = grads = weights = 0.0
    outputs = [0.0, 0.0, 0.0]  # output elements of the fprop, dgrad and wgrad GEMMs (a rescaled one's, _Rates.rescale)
    for parts, flops in ((low, (r.gemm_scope != "experts") * (dense - high_flops)), ([tuple(g) for g in work.expert_gemms], (r.gemm_scope != "linears") * grouped)):
        listed = sum(2.0 * n * rows * out * inp for n, rows, out, inp in parts)
        if not listed or not flops:
            continue
        scale = flops / listed  # the layer's count of the FLOPs rules
        if parts is low:
            originals = scale * sum(n * rows * inp for n, rows, out, inp in whole)
        # A fused grouped MLP quantizes FC2's input in FC1's epilogue and FC1's output gradient in FC2's
        # input-gradient epilogue (MXFP8 only: _Rates.epilogue_quantization): of each (FC1, FC2) pair of expert GEMMs
        # only FC1's input and FC2's output gradient are quantized apart.
        fused = parts is not low and r.epilogue_quantization and work.epilogue_activation_flops
        read, written = (parts[0::2], parts[1::2]) if fused else (parts, parts)
        inputs += scale * sum(n * rows * inp for n, rows, out, inp in read)
        grads += scale * sum(n * rows * out for n, rows, out, inp in written)
        weights += sum(n * out * inp for n, rows, out, inp in parts)
        outputs[0] += scale * sum(n * rows * out for n, rows, out, inp in parts)
        outputs[1] += scale * sum(n * rows * inp for n, rows, out, inp in parts)
        outputs[2] += sum(n * out * inp for n, rows, out, inp in parts)
    inputs -= originals
    kept_fwd, kept_bwd = (originals * r.quant_original_fwd, originals * r.quant_original_bwd) if originals else (0.0, 0.0)
    q_fwd = (inputs * r.quant_input_fwd + kept_fwd + weights * r.quant_weight / 2 + outputs[0] * r.rescale[0]) / r.memory
    q_bwd = (inputs * r.quant_input_bwd + kept_bwd + grads * r.quant_grad + weights * r.quant_weight / 2
             + outputs[1] * r.rescale[1] + outputs[2] * r.rescale[2]) / r.memory
    return fwd, bwd, q_fwd, q_bwd


def _common(gemms: tuple[tuple[int, int, int], ...], among: tuple[tuple[int, int, int], ...]) -> tuple[tuple[int, int, int], ...]:
    """Those of *gemms* that *among* also holds, each as often as both hold it."""
    left = list(among)
    found = []
    for gemm in gemms:
        if gemm in left:
            left.remove(gemm)
            found.append(gemm)
    return tuple(found)


def frozen_share(matmul_flops: float, grouped: float, work: LayerWork) -> tuple[float, float, LayerWork]:
    """``(dense, grouped, work)``: the forward FLOPs of a layer's frozen weights, dense and grouped, and its work
    with only their known shapes (:attr:`LayerWork.frozen_gemms <hp_core.costs.LayerWork.frozen_gemms>`).

    The frozen FLOPs (:attr:`~hp_core.costs.LayerWork.frozen_matmul_flops`) beyond those of the frozen GEMMs the
    layer lists are FLOPs it lists no shape for: its grouped (expert) GEMMs' and its dense FLOPs no listed GEMM
    accounts for. Assumption (no source): where they are fewer than both, they are split between the two in
    proportion to each's FLOPs, since the layer does not say which are frozen. The one user, a LoRA base, freezes
    all of both, where the split is exact.

    Raises:
        ConfigError: The frozen GEMMs are not among the layer's :attr:`~hp_core.costs.LayerWork.gemms`, or list more
            FLOPs than the frozen ones, or fewer than the frozen FLOPs less those the layer lists no shape for: which
            of its GEMMs are frozen is then not stated, and the weight-gradient time it skips cannot be priced.
    """
    frozen = min(work.frozen_matmul_flops, matmul_flops)
    dense = matmul_flops - grouped
    listed, stated = _flops(tuple(work.gemms)), _flops(tuple(work.frozen_gemms))
    unlisted = max(0.0, dense - listed)  # dense FLOPs no listed GEMM accounts for
    beyond = frozen - stated
    slack = 1e-9 * matmul_flops
    if len(_common(work.frozen_gemms, work.gemms)) != len(work.frozen_gemms) or not -slack <= beyond <= unlisted + grouped + slack:
        raise ConfigError(
            "$.model.layers",
            f"a layer states {frozen:.6g} frozen matmul FLOPs (LayerWork.frozen_matmul_flops) but its frozen GEMMs "
            f"(LayerWork.frozen_gemms, {stated:.6g} FLOPs) are not among its gemms or do not account for them beyond its "
            f"{unlisted + grouped:.6g} FLOPs of no listed shape; its plugin must state which of its GEMMs are frozen",
        )
    beyond = max(0.0, beyond)
    frozen_grouped = min(grouped, beyond * grouped / (unlisted + grouped)) if grouped else 0.0
    share = attrs.evolve(work, gemms=tuple(work.frozen_gemms),
                         high_precision_gemms=_common(work.high_precision_gemms, work.frozen_gemms))
    return frozen - frozen_grouped, frozen_grouped, share


def backward_pass_speedups(r: _Rates) -> tuple[float, float]:
    """``(input-gradient, weight-gradient)`` speedups of a layer's low-precision backward GEMMs: both the backward's
    (``gemm_speedup_backward``) unless the recipe states the two passes apart (``gemm_pass_speedups``: torchao's
    rowwise_with_gw_hp runs its weight gradient in the compute dtype, PrecisionRecipe.compute_dtype_passes). Then the
    weight gradient's is its figure and the input gradient's what keeps the layer's backward (the harmonic mean of the
    two over equal FLOPs) as priced."""
    passes = r.gemm_pass_speedups
    if not passes or passes[1] == passes[2]:
        return r.gemm_speedup_backward, r.gemm_speedup_backward
    return 1.0 / (2.0 / r.gemm_speedup_backward - 1.0 / passes[2]), passes[2]


def weight_gradient_share(r: _Rates) -> float:
    """The weight gradient's share of a layer's trained backward GEMM seconds: half (each pass the same FLOPs at the
    same speedup), or under a recipe running its two backward passes at different speedups (:func:`backward_pass_speedups`)
    each pass's time at its own: ``s_dgrad / (s_dgrad + s_wgrad)``."""
    if not r.low_precision:
        return 0.5
    dgrad_speedup, wgrad_speedup = backward_pass_speedups(r)
    return 0.5 if dgrad_speedup == wgrad_speedup else dgrad_speedup / (dgrad_speedup + wgrad_speedup)


def frozen_seconds(matmul_flops: float, grouped: float, work: LayerWork, r: _Rates) -> tuple[float, float, float]:
    """``(weight-gradient seconds, backward seconds, grouped FLOPs)`` of a layer's frozen share (:func:`frozen_share`),
    priced as the layer's GEMMs are: :func:`_matmul_seconds` (the table's per-shape efficiency, the machine's GEMM
    rates, the grouped figures), then under a low-precision recipe the backward's speedup for what it quantizes.

    A frozen weight's backward computes the input gradient only: PyTorch autograd runs an input's derivative formula
    only where that input requires grad (``tools/autograd/derivatives.yaml``, ``mm``: ``self``'s and ``mat2``'s
    formulas apart; on torch 2.13.0 a frozen ``nn.Linear``'s backward dispatches one ``aten.mm``, a trained one's two),
    and Transformer Engine's ``_Linear`` and ``_LayerNormLinear`` run their wgrad GEMM only under ``ctx.requires_wgrad
    = weight.requires_grad`` (``transformer_engine/pytorch/module/linear.py``, ``layernorm_linear.py``). The layer's
    backward so loses exactly these weight-gradient seconds, the time its pricing gave them.
    """
    dense, frozen_grouped, share = frozen_share(matmul_flops, grouped, work)
    seconds = _matmul_seconds(dense, frozen_grouped, share, r)
    _, bwd, wgrad = seconds
    if r.low_precision:  # the backward's speedup, on what the recipe quantizes (_low_precision_seconds)
        _, keep_bwd, keep_wgrad = _kept_seconds(dense, frozen_grouped, share, r, seconds)
        dgrad_speedup, wgrad_speedup = backward_pass_speedups(r)
        if dgrad_speedup == wgrad_speedup:
            bwd = keep_bwd + (bwd - keep_bwd) / r.gemm_speedup_backward
        else:  # each pass at its own speedup
            bwd = (keep_bwd + (bwd - wgrad - keep_bwd + keep_wgrad) / dgrad_speedup
                   + (wgrad - keep_wgrad) / wgrad_speedup)
        wgrad = keep_wgrad + (wgrad - keep_wgrad) / wgrad_speedup
    return wgrad, bwd, frozen_grouped


def margin_factor(sm_count: int, comm_sms: int, gemm: str = "") -> float:
    """A GEMM's time over its time on every SM when it leaves *comm_sms* of *sm_count* SMs to a communication kernel:
    ``sm_count / (sm_count - comm_sms)``, first-order, as if its time were inversely proportional to the SMs it is
    tiled for (wave quantisation and a GEMM's memory-bound share ignored; docs/time.md). *gemm*: its userbuffers
    name (``fc2_fprop``), for the message.

    Raises:
        ConfigError: *comm_sms* leaves the GEMM no SM (or is negative).
    """
    if not 0 <= comm_sms < sm_count:
        which = f"{gemm}'s num_sm {comm_sms}" if gemm else f"a userbuffers GEMM's num_sm {comm_sms}"
        raise ConfigError("$.runtime.options.tp_comm_overlap_cfg",
                          f"{which} leaves the GEMM none of the device's {sm_count} SMs (sm_count) to run on; "
                          f"state fewer than {sm_count}")
    return sm_count / (sm_count - comm_sms)


def _needs_sm_count(r: _Rates) -> int:
    """The device's SM count where a userbuffers margin applies.

    Raises:
        ConfigError: The hardware states none.
    """
    if r.sm_count is None:
        raise ConfigError("$.hardware.sm_count", "the userbuffers config leaves SMs of some GEMMs to their communication "
                                                 "(tp_comm_overlap_cfg) but the hardware states no sm_count; state it "
                                                 "or choose a config without an SM margin (te_1x_default)")
    return r.sm_count


def userbuffers_margin_seconds(work: LayerWork, r: _Rates) -> tuple[float, float, float]:
    """``(forward, backward, weight-gradient part of that backward)`` seconds a layer's userbuffers GEMMs
    (:attr:`LayerWork.userbuffers_gemms <hp_core.costs.LayerWork.userbuffers_gemms>`) add where their overlap leaves
    SMs to its communication kernel (``r.ub_margins``, :attr:`OverlapSchedule.userbuffers_sm_margins
    <hp_core.specs.overlap.OverlapSchedule.userbuffers_sm_margins>`).

    Transformer Engine tiles such a GEMM for ``sm_count - num_sm`` SMs (cuBLASLt's SM-count target,
    ``comm_gemm_overlap.cpp`` ``_math_sms`` at NVIDIA/TransformerEngine@d0067d0): hp prices each of its passes
    (``<block>_fprop``, ``_dgrad``, ``_wgrad``, those of them it runs through userbuffers) at its own time times
    :func:`margin_factor`. A pass's own time is
    :func:`_matmul_seconds` of that GEMM alone (its input-gradient pass the backward less the weight-gradient part), divided by the recipe's forward or backward speedup where the layer quantizes it
    (not one of its :attr:`~hp_core.costs.LayerWork.high_precision_gemms`; a module in a format of its own is priced
    at the recipe's speedup here); a frozen weight runs no weight-gradient pass.

    Raises:
        ConfigError: A margin applies and the hardware states no ``sm_count``.
    """
    margins = dict(r.ub_margins)
    if not margins or not work.userbuffers_gemms:
        return 0.0, 0.0, 0.0
    sm_count = _needs_sm_count(r)
    high, frozen = list(work.high_precision_gemms), list(work.frozen_gemms)
    quantized_scope = r.low_precision and r.gemm_scope != "experts"
    fwd = bwd = wgrad = 0.0
    for block, gemm, runs in work.userbuffers_gemms:
        passes = [margins.get(f"{block}_{p}", 0) if p in runs else 0 for p in ("fprop", "dgrad", "wgrad")]
        if not any(passes):
            continue
        f, b, w = _matmul_seconds(_flops((gemm,)), 0.0, attrs.evolve(work, gemms=(gemm,), expert_gemms=()), r)
        d = b - w
        if gemm in high:
            high.remove(gemm)
        elif quantized_scope:
            dgrad_speedup, wgrad_speedup = backward_pass_speedups(r)
            f, d, w = f / r.gemm_speedup, d / dgrad_speedup, w / wgrad_speedup
        if gemm in frozen:
            frozen.remove(gemm)
            w = 0.0
        extra = [t * (margin_factor(sm_count, n, f"{block}_{p}") - 1.0)
                 for t, n, p in zip((f, d, w), passes, ("fprop", "dgrad", "wgrad"))]
        fwd += extra[0]
        bwd += extra[1] + extra[2]
        wgrad += extra[2]
    return fwd, bwd, wgrad


def userbuffers_rerun_seconds(work: LayerWork, r: _Rates, linears: tuple[tuple[str, int], ...]) -> float:
    """Seconds a per-byte re-run (:attr:`Rerun.matmul_flops_per_byte <hp_core.costs.Rerun.matmul_flops_per_byte>`)
    adds where the userbuffers GEMMs it runs again (*linears*, ``(tp_comm_buffer_name, position in work.gemms)``:
    :attr:`Rerun.userbuffers_linears <hp_core.costs.Rerun.userbuffers_linears>`) run their forward with an SM margin
    (``<block>_fprop`` in ``r.ub_margins``): Transformer Engine re-runs a checkpointed module's forward through the
    same userbuffers (Megatron-Core's ``mlp`` module: ``fc2_fprop``, a ``pipeline`` with a margin in TE's default
    config). Each such GEMM at the rate the re-run prices its FLOPs (``peak * matmul``) times ``margin_factor - 1``.

    Raises:
        ConfigError: A margin applies and the hardware states no ``sm_count``, or a position is not the layer's.
    """
    margins = dict(r.ub_margins)
    named = [(block, p) for block, p in linears if margins.get(f"{block}_fprop", 0)]
    if not named:
        return 0.0
    sm_count = _needs_sm_count(r)
    if any(not 0 <= p < len(work.gemms) for _, p in named):
        raise ConfigError("$.model", f"a re-run's userbuffers GEMMs {named} are not at positions of the layer's "
                                     f"{len(work.gemms)} GEMMs")
    return sum(_flops((work.gemms[p],)) / (r.peak * r.matmul)
               * (margin_factor(sm_count, margins[f"{block}_fprop"], f"{block}_fprop") - 1.0) for block, p in named)


def userbuffers_block_seconds(block: LayerWork, work: LayerWork, linears: tuple[tuple[str, int], ...], r: _Rates) -> float:
    """Seconds a block's forward re-run (*block*, the layer's *work* cut to the block's GEMMs) adds where the userbuffers
    GEMMs it runs again (*linears*: :attr:`Rerun.userbuffers_linears <hp_core.costs.Rerun.userbuffers_linears>`, by
    position in *work*) run their forward with an SM margin (the ``moe`` module's shared expert's ``fc2_fprop``): their
    forward margins as :func:`userbuffers_margin_seconds` prices the layer's."""
    if not linears:
        return 0.0
    gemms = tuple((name, work.gemms[p], ("fprop",)) for name, p in linears)
    return userbuffers_margin_seconds(attrs.evolve(block, userbuffers_gemms=gemms), r)[0]


def userbuffers_rates(work: LayerWork, r: _Rates) -> _Rates:
    """*r* for a layer one of whose Transformer Engine linears Megatron-Core runs no userbuffers for
    (:attr:`LayerWork.refused_userbuffers <hp_core.costs.LayerWork.refused_userbuffers>`: MLA's ``q_down_proj`` and
    ``kv_down_proj``, the MTP module's ``eh_proj``) where the overlap runs through them (``r.userbuffers``):
    ``TELinear.__init__`` sets the shared config's ``tp_comm_overlap`` False
    (``megatron/core/extensions/transformer_engine.py`` lines 1176-1186 at NVIDIA/Megatron-LM@d98e8a6), so its TP
    collectives run unsplit and no GEMM leaves SMs to a userbuffers kernel; *r* itself for any other."""
    if not (r.userbuffers and work.refused_userbuffers):
        return r
    return attrs.evolve(r, tp_comm_overlap=False, ub_margins=(), userbuffers=False)
