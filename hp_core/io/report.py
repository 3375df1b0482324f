"""Display, separated from the data: the stable JSON of an estimate and its rich tables.

The JSON (DESIGN section 9) is stable: byte quantities end in ``_bytes``;
per stage ``index``, ``layers``, ``micro_batches_in_flight``, ``memory`` (one
``*_bytes`` per category and ``peak_bytes``), ``binding_point``, ``cached_bytes``; top level
``peak_bytes``, ``parameters``, ``provenance``.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs
from rich import box
from rich.table import Table

from hp_core.results import CATEGORIES, Estimate, StageEstimate

# Communication groups priced once per step (StageTime.communication_by_group); the others per micro-batch.
PER_STEP_GROUPS = ("dp", "mirror", "embedding", "fsdp_step", "hsdp_step")

__all__ = [
    "estimate_to_json",
    "estimate_table",
    "gib",
    "kinds_table",
    "stage_to_json",
    "communication_table",
    "time_summary",
    "time_table",
    "time_to_json",
    "validation_table",
]

_GIB = 2**30


def gib(nbytes: int | float) -> str:
    """Bytes as GiB with two decimals."""
    return f"{nbytes / _GIB:.2f}"


def stage_to_json(stage: StageEstimate) -> dict[str, Any]:
    memory = {f"{name}_bytes": getattr(stage.memory, f"{name}_bytes") for name in CATEGORIES}
    memory["peak_bytes"] = stage.memory.peak_bytes
    return {
        "index": stage.index,
        "layers": list(stage.layers),
        "kinds": dict(stage.kinds),
        "chunks": [attrs.asdict(chunk, recurse=True, value_serializer=lambda _i, _a, v: list(v) if isinstance(v, tuple) else v) for chunk in stage.chunks],
        "micro_batches_in_flight": stage.micro_batches_in_flight,
        "memory": memory,
        "binding_point": stage.binding_point,
        "recompute": list(stage.settings),
        "activations_by_kind_bytes": dict(stage.activations_by_kind),
        "peak_points_bytes": dict(stage.peak_points),
        "cached_bytes": stage.cached_bytes,
        "parameters_by_kind": dict(stage.parameters_by_kind),
    }


def estimate_to_json(result: Estimate) -> dict[str, Any]:
    """The stable JSON document of an estimate."""
    return {
        "model": result.model,
        "world_size": result.world_size,
        "layout": dict(result.layout),
        "micro_batches": result.micro_batches,
        "parameters": {
            "total": result.parameters.total,
            "by_kind": dict(result.parameters.by_kind),
            "by_group": dict(result.parameters.by_group),
        },
        "stages": [stage_to_json(stage) for stage in result.stages],
        "peak_bytes": result.peak_bytes,
        "device_memory_bytes": result.device_memory_bytes,
        "reserve_bytes": result.reserve_bytes,
        "fits": result.fits,
        "provenance": dict(result.provenance),
    }


_HEADERS = {
    "parameters": "Params",
    "gradients": "Grads",
    "master_parameters": "Master",
    "optimizer_states": "Optim",
    "activations": "Activ",
    "communication_buffers": "Buffers",
    "working_set": "Working",
    "runtime_overhead": "Overhd",
}


def _layers_text(stage: StageEstimate) -> str:
    """Body layer ranges per chunk."""
    ranges = [
        f"{chunk.layers[0]}-{chunk.layers[-1]}" if len(chunk.layers) > 1 else str(chunk.layers[0])
        for chunk in stage.chunks
        if chunk.layers
    ]
    if len(ranges) > 2:
        return f"{ranges[0]},{ranges[1]},… ({len(ranges)} chunks)"
    return ",".join(ranges) or "-"


def estimate_table(result: Estimate) -> Table:
    """One row per stage, one column per memory category (GiB), the peak and the binding point."""
    layout = result.layout
    title = (
        f"{result.model} on {result.world_size} devices: dp={layout['dp']} tp={layout['tp']} pp={layout['pp']} "
        f"vpp={layout['vpp']} cp={layout['cp']} ep={layout['ep']} sp={'on' if layout['sp'] else 'off'} "
        f"zero={layout['zero']}, seq {layout['seq_len']}, micro-batch {layout['micro_batch_size']}, "
        f"global batch {layout['global_batch_size']}, {result.micro_batches} micro-batches/step ({layout['schedule']})"
    )
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), caption="GiB per rank; MB: micro-batches in flight; Reserve: kept free beside the peak (CUDA context)",
                  caption_justify="left")
    table.add_column("Stage", justify="right")
    table.add_column("Layers")
    table.add_column("MB", justify="right")
    for name in CATEGORIES:
        table.add_column(_HEADERS[name], justify="right")
    table.add_column("Peak", justify="right", style="bold")
    table.add_column("Reserve", justify="right")
    table.add_column("Binds")
    for stage in result.stages:
        table.add_row(
            str(stage.index),
            _layers_text(stage),
            str(stage.micro_batches_in_flight),
            *(gib(getattr(stage.memory, f"{name}_bytes")) for name in CATEGORIES),
            gib(stage.peak_bytes),
            gib(result.reserve_bytes),
            stage.binding_point,
        )
    return table


def kinds_table(result: Estimate) -> Table:
    """One row per stage: its layers of each kind, and the activations each kind keeps (GiB)."""
    kinds = list(dict.fromkeys(kind for stage in result.stages for kind in stage.kinds))
    table = Table(title="Layers and activations by kind", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1),
                  caption="count x kind: activations GiB per rank", caption_justify="left")
    table.add_column("Stage", justify="right")
    for kind in kinds:
        table.add_column(kind, justify="right")
    for stage in result.stages:
        cells = [
            f"{stage.kinds[kind]} x {gib(stage.activations_by_kind.get(kind, 0))}" if kind in stage.kinds else "-"
            for kind in kinds
        ]
        table.add_row(str(stage.index), *cells)
    return table


def _validation_table(title: str, columns: tuple[str, ...], rows) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD,
                  padding=(0, 1), caption="error = (estimated - measured) / measured", caption_justify="left")
    for column in columns:
        table.add_column(column, justify="left" if column in ("Case", "Runtime", "Recipe") else "right")
    for row in rows:
        table.add_row(*row)
    return table


def validation_table(results) -> Table:
    """One row per case and stage: estimated and measured peak (GiB) and the signed error."""
    return _validation_table(
        "Estimated against measured peak memory", ("Case", "Runtime", "Recipe", "Stage", "Estimated GiB", "Measured GiB", "Error"),
        ((result.name, result.runtime, result.precision_recipe, str(check.stage) + ("" if check.quantity == "allocated" else f" ({check.quantity})"),
          gib(check.estimated_bytes), gib(check.measured_bytes), f"{check.error * 100:+.2f}%")
         for result in results for check in result.stages),
    )


def _metric_note(check) -> str:
    """For a step measured as tokens/s/GPU or MFU: the error is in that metric, with both values."""
    if check.metric == "seconds":
        return ""
    name = {"tokens_per_second_per_gpu": "tokens/s/GPU", "mfu": "MFU"}.get(check.metric, check.metric)
    return f" ({name} {check.estimated_value:.4g} vs {check.measured_value:.4g})"


def validation_step_table(results) -> Table:
    """One row per case and measured step: micro-batches, estimated and measured seconds and the signed error."""
    return _validation_table(
        "Estimated against measured step time", ("Case", "Runtime", "Recipe", "Micro-batches", "Estimated s", "Measured s", "Error"),
        ((result.name, result.runtime, result.precision_recipe, str(check.micro_batches), f"{check.estimated_seconds:.4f}",
          f"{check.measured_seconds:.4f}", f"{check.error * 100:+.2f}%" + _metric_note(check))
         for result in results for check in result.steps),
    )


# ----------------------------------------------------------------------------- step time


def time_to_json(step) -> dict[str, Any]:
    """The ``"time"`` object of ``hp estimate --json``: durations in ``*_seconds``.

    Args:
        step: A :class:`hp_core.engine.timing.StepTime`.
    """
    return {
        "step_seconds": step.step_seconds,
        "breakdown": {f"{name}_seconds": value for name, value in step.breakdown_seconds.items()},
        "micro_batches": step.micro_batches,
        "tokens_per_second": step.tokens_per_second,
        "model_flops": step.model_flops,
        "mfu": step.mfu,
        "hfu": step.hfu,
        "peak_flops_per_second": step.peak_flops_per_second,
        "mfu_recipe_peak": step.mfu_recipe_peak,
        "recipe_peak_flops_per_second": step.recipe_peak_flops_per_second,
        "stages": [
            {
                "index": s.index,
                "forward_seconds": s.forward_seconds,
                "backward_seconds": s.backward_seconds,
                "recompute_seconds": s.recompute_seconds,
                "communication_seconds": s.communication_seconds,
                "micro_batch_seconds": s.micro_batch_seconds,
                "data_parallel_seconds": s.data_parallel_seconds,
                "optimizer_seconds": s.optimizer_seconds,
                "communication_by_group": [
                    {"group": group, "per": "step" if group in PER_STEP_GROUPS else "micro-batch", "seconds": total,
                     "exposed_seconds": exposed, "hidden_seconds": total - exposed}
                    for group, total, exposed in s.communication_by_group
                ],
            }
            for s in step.stages
        ],
        "provenance": dict(step.provenance),
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def time_table(step) -> Table:
    """One row per stage: its time per micro-batch by part (ms) and its step-end DP and optimizer time."""
    table = Table(title="Step time by stage", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1),
                  caption="ms per micro-batch on one rank, DP and optimizer once per step", caption_justify="left")
    for column in ("Stage", "Fwd", "Bwd", "Recomp", "Comm", "Per MB", "DP", "Optim"):
        table.add_column(column, justify="right")
    for s in step.stages:
        table.add_row(str(s.index), _ms(s.forward_seconds), _ms(s.backward_seconds), _ms(s.recompute_seconds),
                      _ms(s.communication_seconds), _ms(s.micro_batch_seconds), _ms(s.data_parallel_seconds),
                      _ms(s.optimizer_seconds))
    return table


def communication_table(step) -> Table:
    """One row per stage and group: its communication, what is exposed and what the overlap schedule hides (ms)."""
    table = Table(title="Communication by stage and group", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1),
                  caption="ms on one rank: dp once per step, the others per micro-batch; hidden = behind compute",
                  caption_justify="left")
    for column in ("Stage", "Group", "Per", "Comm", "Exposed", "Hidden"):
        table.add_column(column, justify="right")
    for s in step.stages:
        for group, total, exposed in s.communication_by_group:
            if total:
                table.add_row(str(s.index), group, "step" if group in PER_STEP_GROUPS else "MB", _ms(total), _ms(exposed),
                              _ms(total - exposed))
    return table


def time_summary(step) -> str:
    """Three lines: the step time, throughput and MFU; its six parts; the timing provenance."""
    parts = ", ".join(f"{name.replace('_', ' ')} {value:.3f}" for name, value in step.breakdown_seconds.items())
    prov = step.provenance
    slowdown = prov.get("sustained_slowdown", 1.0)
    gemm_factor = prov.get("whole_run_matmul_factor", 1.0)
    whole_run = f", whole-run slowdown {slowdown:g}" if slowdown != 1.0 else ", kernels as measured alone"
    if gemm_factor != 1.0:  # folded into the matmul efficiency (DeviceEfficiency.matmul_whole_run_factor)
        whole_run = f", dense GEMMs at a fitted whole-run factor {gemm_factor:g}" + (
            f", whole-run slowdown {slowdown:g}" if slowdown != 1.0 else ", other kernels as measured alone")
    if "fsdp1_unit_seconds" in prov:  # FSDP1's fitted per-unit time, inside the compute (DeviceEfficiency.fsdp1_unit_seconds)
        whole_run += (f"; FSDP1 per-unit time {prov['fsdp1_unit_seconds'] * 1e3:.2f} ms x {prov['fsdp1_units']:g} units x "
                      f"{step.micro_batches} micro-batch{'' if step.micro_batches == 1 else 'es'} = "
                      f"{prov['fsdp1_unit_step_seconds']:.3f} s of the compute")
    if "gemm_rate_scale" in prov or "large_gemm_speedup" in prov:  # the machine's GEMMs (HardwareSpec, rates._gemm_table)
        whole_run += "; this machine's GEMMs at" + (f" {prov['gemm_rate_scale']:g}x" if "gemm_rate_scale" in prov else "") + (
            f"{',' if 'gemm_rate_scale' in prov else ''} {prov['large_gemm_speedup']:g}x from {prov['large_gemm_flops'] / 1e12:g} TFLOP"
            if "large_gemm_speedup" in prov else "") + " of its family's figures"
    if "attention_rate_scale" in prov:  # the machine's fused attention (HardwareSpec.attention_rate_scale)
        fwd, bwd = prov["attention_rate_scale"]
        whole_run += f"; this machine's attention at {fwd:g}x forward, {bwd:g}x backward of its family's figures"
    if prov.get("attention_format", "bf16") != "bf16":  # measured speedups, or the bf16 rates where none (docs/precision.md)
        kinds = []  # the kinds of attention the model runs (step.py states a speedup per kind present)
        for label, key in (("attention", "attention_speedup"), ("MLA attention", "mla_attention_speedup")):
            if key in prov:
                fwd, bwd = prov[key]
                kinds.append(f"{label} at the {prov['dtype']} rates (no measured {prov['attention_format']} figure here)"
                             if (fwd, bwd) == (1.0, 1.0) else f"{label} {fwd:.2f}x forward, {bwd:.2f}x backward of bf16")
        if kinds:
            whole_run += f"; {prov['attention_format']} " + ", ".join(kinds)
        if prov.get("windowed_fp8_backward_full_causal"):  # Blackwell: cuDNN's measured FP8 windowed backward (precision.md)
            whole_run += (f"; windowed {prov['attention_format']} attention forward at the {prov['dtype']} rates, its "
                          f"backward over the whole causal triangle at the {prov['attention_format']} rate")
        elif prov.get("windowed_attention_bf16"):
            whole_run += f"; windowed {prov['attention_format']} attention at the {prov['dtype']} rates (no measured figure)"
    recipe = prov.get("precision_recipe", "bf16")
    mfu = f"MFU {step.mfu * 100:.1f}%"
    speedups = prov.get("gemm_speedup_forward", 1.0), prov.get("gemm_speedup_backward", 1.0)  # rates._recipe_rates
    if speedups != (1.0, 1.0):
        whole_run += (f"; {prov.get('gemm_dtype', '?')} GEMMs {speedups[0]:.4g}x the {prov['dtype']} speed forward, "
                      f"{speedups[1]:.4g}x backward")
    if "cached_weight_quantize_seconds" in prov:  # the cached weights' quantization, once a step (timing.stage_weights)
        whole_run += f"; {prov['cached_weight_quantize_seconds']:.3f} s of the step quantizes the cached weights, once"
    if recipe != "bf16":
        mfu = (f"MFU {step.mfu * 100:.1f}% of the {prov['dtype']} peak, {step.mfu_recipe_peak * 100:.1f}% of the "
               f"{prov.get('gemm_dtype', '?')} peak ({recipe})")
    kept = compute_dtype_kinds_text(prov, recipe)
    return (
        f"Step time: {step.step_seconds:.3f} s, {step.tokens_per_second:,.0f} tokens/s, {mfu}\n"
        f"  seconds: {parts}\n"
        f"  timing profile {prov['timing_profile']}, {prov['device_efficiency']} efficiencies, {prov['dtype']}{whole_run}"
        + (f"\n  {kept}" if kept else "")
    )


def compute_dtype_kinds_text(provenance: Mapping[str, Any], recipe: str) -> str:
    """One short line naming the layer kinds the runtime keeps wholly in the compute dtype under *recipe*
    (``provenance["compute_dtype_kinds"]``, Megatron-Core's MTP module under FP4), or ``""`` where none."""
    kinds = provenance.get("compute_dtype_kinds")
    if not kinds:
        return ""
    return (f"Kept layers: {', '.join(kinds)} layers wholly in the compute dtype under {recipe} (the runtime's trainer "
            f"quantizes none of them; docs/precision.md)")
