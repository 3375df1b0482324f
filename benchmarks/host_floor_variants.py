"""What-if variants of the ``megatron`` runtime's host floor on Megatron-Bridge's MoE and hybrid rows: a diagnostic,
not a figure of hp (hp prices the ``stated`` variant alone).
Run: ``python benchmarks/host_floor_variants.py`` (a few seconds).

The floor (:func:`hp_core.engine.timing.host_floor._host_floor`; docs/time.md, "Overlap and host time") counts a
layer's kernels as its GEMMs (the routed experts' grouped GEMMs as one) with ``kernels_per_gemm`` each, its attention
calls, collective calls, the router's 53 forward and 26 backward kernels and the permutation's 4, at 42 us each, fitted
to three H100 rows (``benchmarks/fit_host_seconds.py``). Two things it does not count, tried here on every row of
``fp8_measured_runs.json``'s ``moe_rows``, ``moe_fi_rows``, ``nemotron_rows``, ``nemotron_super_rows`` and
``nemotron_lightning_rows``:

* ``graphs``: Transformer Engine's partial CUDA graphs (``--cuda-graph-impl transformer_engine`` with
  ``--cuda-graph-scope``), which the rows name in their ``not_priced`` note. What each scope captures is
  Megatron-Core's ``TransformerLayer._get_submodules_under_cudagraphs`` (megatron/core/transformer/transformer_layer.py
  at NVIDIA/Megatron-LM@d98e8a6): ``attn`` the input norm and self-attention (here: the layer's ``attention_qkv`` and
  ``attention_proj`` modules' GEMMs and its attention calls), ``moe_router`` the pre-MLP norm and the router (here: the
  router's kernels and its gating GEMM), ``mamba`` the Mamba mixer (its ``mamba_in_proj`` and ``mamba_out_proj``
  GEMMs and its SSD scan call); ``moe_preprocess`` (the flex dispatcher's routing metadata,
  ``MoEFlexTokenDispatcher.dispatch_preprocess`` in moe/token_dispatcher.py) takes nothing the floor counts. Each
  layer with a captured part launches one graph a direction in their place. Shared experts and TP collectives inside
  a captured scope stay counted (their kernels are not tagged by module).
* ``experts``: the per-expert launches of Transformer Engine's ``GroupedLinear`` on its split path, which every row's
  container runs (the grouped-tensor path is opt-in through v2.18, ``NVTE_GROUPED_LINEAR_USE_FUSED_GROUPED_GEMM``;
  the containers' Transformer Engine: 25.11 v2.9, 26.02 v2.12, 26.04 v2.14, 26.06 v2.16, 26.08 v2.17.1,
  NVIDIA-NeMo/Megatron-Bridge v0.6.0 docs/releases/software-versions.md and pyproject.toml). Per split (local
  expert) and ``GroupedLinear``, :data:`SPLIT_LAUNCHES`, read from NVIDIA/TransformerEngine v2.10 and v2.14 (not
  counted on a device): ``general_grouped_gemm`` issues one cuBLASLt GEMM a split (common/gemm/cublaslt_gemm.cu
  ``multi_stream_cublas_gemm``, lines 944-997 at v2.10), one forward and two backward (data and weight gradients);
  ``tex.split_quantize`` quantizes each split apart (pytorch/csrc/extensions/cast.cpp lines 146-148 at v2.10): MXFP8
  one kernel a split (quantizer.cpp lines 1091-1103), per-tensor current scaling four (zero amax, amax, scale, cast:
  quantizer.cpp lines 497-536), NVFP4 at v2.14 one grouped call for all splits (cast.cpp lines 1387-1463) but a
  global scale a GEMM (cublaslt_gemm.cu line 381); the input forward and the output gradient backward (weights are
  quantized on a step's first micro-batch only, base.py lines 1432-1450). A layer's two linears (FC1, FC2) double
  them. Each launch costs ``--launch-us`` (default 11.3: the lowest of NVIDIA's CPU-overhead microbenchmark figures
  per bare launch, NVIDIA/dgxc-benchmarking microbenchmarks/cpu_overhead at 841f546, on a platform its output does not
  name; ``kernel``: the fitted seconds per counted kernel), beside the grouped GEMM's one call the floor counts.
  ``--uniform F B`` gives every recipe ``F`` forward and ``B`` backward launches a local expert instead.

Each variant's seconds per counted kernel is fitted again to the same three calibration rows
(:func:`fit_host_seconds.fitted_seconds_per_kernel`); every other row is held out, and the held-out rows' mean
absolute error is printed per row class and over all of them. The ``stated`` variant must reproduce
``benchmarks/fp8_runs.py`` exactly (tests/plugins/test_host_floor_variants.py checks one row). The B200 ``sustained_slowdown``
was fitted with the stated floor in place (``benchmarks/fit_sustained_slowdown.py``) and is not refitted here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from pathlib import Path
from typing import Iterator

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fit_host_seconds  # noqa: E402
import fp8_runs  # noqa: E402
from hp_core import api  # noqa: E402
from hp_core.engine.timing import layer as layer_timing  # noqa: E402
from hp_core.engine.timing.host_floor import host_kernels  # noqa: E402

ROW_KEYS = ("moe_rows", "moe_fi_rows", "nemotron_rows", "nemotron_super_rows", "nemotron_lightning_rows")
SCOPES = ("attn", "mamba", "moe_router", "moe_preprocess")
VARIANTS = ("stated", "graphs", "experts", "experts+graphs")
# (forward, backward) launches per split of one GroupedLinear on its split path, by the scaling of the recipe's
# activations (the module docstring's sources): its GEMMs (one a split forward, two backward) and quantize kernels.
SPLIT_LAUNCHES = {
    "none": (1, 2),            # bf16: the GEMMs alone
    "mx_32": (2, 3),           # MXFP8: one quantize kernel a split, forward (input) and backward (output gradient)
    "tensor_current": (5, 6),  # FP8 per-tensor current scaling: four quantize kernels a split each way
    "nvfp4_16": (2, 4),        # NVFP4 (v2.14): the GEMMs and a global scale each, the splits quantized together
}


def graph_scopes(row: dict) -> frozenset[str]:
    """The partial CUDA-graph scopes a row's ``not_priced`` note names (empty: none, or full-iteration graphs, which
    the row states as its ``cuda_graphs`` option)."""
    note = " ".join(n for n in row.get("not_priced", []) if "CUDA graphs" in n)
    return frozenset(s for s in SCOPES if re.search(rf"\b{s}\b", note))


def variant_floor(work, forward: float, backward: float, r, frozen: int = 0, *, scopes: frozenset[str] = frozenset(),
                  per_expert: tuple[float, float] = (0.0, 0.0), launch_seconds: float | None = 0.0) -> tuple[float, float]:
    """The floor of :func:`~hp_core.engine.timing.host_floor._host_floor` with the layer's captured *scopes* off its
    count (:func:`~hp_core.engine.timing.host_floor.host_kernels`; one graph launch a direction in their place) and
    *per_expert* ``(forward, backward)`` launches per local expert at *launch_seconds* each (``None``: the seconds per
    counted kernel); with neither, the stated floor."""
    host = r.host
    if launch_seconds is None:
        launch_seconds = host.seconds_per_kernel
    kernels_fwd, kernels_bwd = host_kernels(work, r, frozen)
    off_gemms = off_attention = graphs = 0  # listed GEMMs and attention calls a captured scope takes off the count
    off_router = (0, 0)
    modules = {m.name: len(m.positions) for m in work.modules}
    if "attn" in scopes and not work.ssd_scan and (work.attention_calls or "attention_qkv" in modules):
        off_gemms += modules.get("attention_qkv", 0) + modules.get("attention_proj", 0)
        off_attention, graphs = work.attention_calls, 1
    if "mamba" in scopes and work.ssd_scan:
        off_gemms += modules.get("mamba_in_proj", 0) + modules.get("mamba_out_proj", 0)
        off_attention, graphs = work.attention_calls, 1
    if "moe_router" in scopes and work.router_elements:
        off_gemms += 1  # the router's gating GEMM, one of the layer's listed GEMMs
        off_router, graphs = host.router_kernels, 1
    local = 0
    if work.grouped_flops and not work.sequential_experts:
        local = max((experts for experts, *_ in work.expert_gemms), default=1)
    kernels_fwd += graphs - off_gemms * host.kernels_per_gemm - off_attention - off_router[0]
    kernels_bwd += graphs - 2 * off_gemms * host.kernels_per_gemm - off_attention - off_router[1]
    host_fwd = kernels_fwd * host.seconds_per_kernel + local * per_expert[0] * launch_seconds
    host_bwd = kernels_bwd * host.seconds_per_kernel + local * per_expert[1] * launch_seconds
    return max(forward, host_fwd), max(backward, host_bwd)


def expert_launches(row: dict, registry) -> tuple[float, float]:
    """``(forward, backward)`` launches per local expert and layer of *row*'s recipe: its two linears'
    :data:`SPLIT_LAUNCHES`."""
    scaling = registry.precision_recipe(row["recipe"]).activations.scaling
    if scaling not in SPLIT_LAUNCHES:
        raise ValueError(f"{row['id']}: no split-path launch count for activations scaled {scaling!r}")
    forward, backward = SPLIT_LAUNCHES[scaling]
    return 2.0 * forward, 2.0 * backward


@contextlib.contextmanager
def floor_of(variant: str, row: dict, per_expert: tuple[float, float], launch_seconds: float | None) -> Iterator[None]:
    """The engine's layer timing with *variant*'s floor for *row* while the block runs (*launch_seconds* ``None``: each
    per-expert launch at the seconds per counted kernel)."""
    scopes = graph_scopes(row) if "graphs" in variant else frozenset()
    experts = per_expert if "experts" in variant else (0.0, 0.0)
    stated = layer_timing._host_floor

    def floor(work, forward, backward, r, frozen=0):
        return variant_floor(work, forward, backward, r, frozen, scopes=scopes, per_expert=experts,
                             launch_seconds=launch_seconds)

    layer_timing._host_floor = floor
    try:
        yield
    finally:
        layer_timing._host_floor = stated


def rows() -> list[dict]:
    """Every row of :data:`ROW_KEYS`."""
    data = json.loads(fp8_runs.DATA.read_text())
    return [row for key in ROW_KEYS for row in data.get(key, [])]


def relative_error(variant: str, row: dict, registry, seconds_per_kernel: float, per_expert: tuple[float, float],
                   launch_seconds: float | None = 11.3e-6) -> float:
    """``(hp - measured) / measured`` of *row*'s step time under *variant*'s floor at *seconds_per_kernel*."""
    with floor_of(variant, row, per_expert, launch_seconds):
        return fit_host_seconds.relative_errors(seconds_per_kernel, [row], registry)[0]


def fitted(variant: str, registry, per_expert: tuple[float, float], launch_seconds: float | None = 11.3e-6) -> float:
    """The seconds per counted kernel fitted to the calibration rows under *variant*'s floor, *per_expert* their
    launches per local expert (none of them graphs a scope, and they share one recipe)."""
    calibration = fit_host_seconds.calibration_rows()
    if any(graph_scopes(row) for row in calibration) or len({row["recipe"] for row in calibration}) != 1:
        raise ValueError("the calibration rows graph a scope or differ in recipe: fit under each row's own floor")
    with floor_of(variant, calibration[0], per_expert, launch_seconds):
        return fit_host_seconds.fitted_seconds_per_kernel(registry)


def summary(errors: list[float]) -> str:
    mean = sum(abs(e) for e in errors) / len(errors)
    within = sum(abs(e) <= 0.10 for e in errors)
    return (f"{len(errors)} rows, mean absolute error {mean:.1%}, {min(errors):+.1%} to {max(errors):+.1%}, "
            f"{within} within 10%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launch-us", default="11.3",
                        help="host microseconds per per-expert launch, or 'kernel': the fitted seconds per counted kernel")
    parser.add_argument("--uniform", type=float, nargs=2, metavar=("F", "B"),
                        help="F forward and B backward launches per local expert for every recipe")
    args = parser.parse_args()
    registry = api.build_registry()
    launch = None if args.launch_us == "kernel" else float(args.launch_us) * 1e-6

    def counts(row: dict) -> tuple[float, float]:
        return tuple(args.uniform) if args.uniform else expert_launches(row, registry)

    held = [row for row in rows() if row["split"] == "held_out"]
    for variant in VARIANTS:
        spk = fitted(variant, registry, counts(fit_host_seconds.calibration_rows()[0]), launch)
        print(f"## {variant}: {spk * 1e6:.1f} us per counted kernel (fitted to the calibration rows)")
        by_class: dict[str, list[float]] = {}
        for row in held:
            by_class.setdefault(row["class"], []).append(relative_error(variant, row, registry, spk, counts(row), launch))
        for name, errors in by_class.items():
            print(f"- {name}: {summary(errors)}")
        print(f"- all held out: {summary([e for errors in by_class.values() for e in errors])}")


if __name__ == "__main__":
    main()
