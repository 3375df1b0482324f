"""hp's pricing of one torchao float8 linear (forward and backward) against pytorch/ao#2185's measurement of it.

Run: ``python benchmarks/torchao_linear_level.py`` (a second). pytorch/ao#2185 ("[Not for land] remove workaround for
slow rowwise cutlass gemm", 2025-05-08, read 2026-12-05) prints torchao's ``bench_linear_float8.py`` on one H100:
a compiled linear's forward and backward in bf16 (``ref_time_sec``) and under the rowwise recipe with its workaround
(``pt_fp8_time_sec``: the backward GEMMs on the per-tensor kernel at unit scales, then the rescale; the table headed
"tensorwise w/ rescale", ``use_fast_accum`` True), at Llama-3-70B's TP-8 linears with M = 16,384 tokens
(``ROWS``, copied from the pull request's description). It states no power limit or clocks.

hp prices the same linear as it prices a layer's (``hp_core.engine.timing.gemm_seconds``): each pass's bf16 GEMM
at the Hopper kernel figure times the OpenXLA shape scale (the kernel figure, before the whole-run factor), the FP8
GEMMs at the Hopper curves of the recipe's kernel (``hopper_fp8_curves.HOPPER_FP8_CURVES``), and the casts and
rescales at the bytes the recipe's rates state (``recipe_rates._recipe_rates``) over the ``h100-sxm`` preset's HBM
bandwidth at the Hopper efficiency. It prints both recipes' figures; the measurement is of the rowwise one.
"""

from __future__ import annotations

# (name, (M, K, N), ref_time_sec, pt_fp8_time_sec): pytorch/ao#2185, the first four rows ("tensorwise w/ rescale").
ROWS = (
    ("attn.wqkv", (16384, 8192, 1280), 0.001954, 0.001757),
    ("attn.w0", (16384, 1024, 8192), 0.001701, 0.001193),
    ("ffn.w13", (16384, 8192, 7168), 0.009871, 0.005707),
    ("ffn.w2", (16384, 3584, 8192), 0.005192, 0.003034),
)
RECIPES = (("torchao-float8-rowwise", "fp8_rowwise"), ("torchao-float8-tensorwise", "fp8_tensorwise"))


def priced(registry, recipe: str, kernel: str, m: int, k: int, n: int) -> tuple[float, float, float]:
    """``(bf16 seconds, FP8 GEMM seconds, cast and rescale seconds)`` of one linear's forward and backward."""
    from hp_core.engine.timing.recipe_rates import _recipe_rates
    from hp_plugins.runtimes.hopper_fp8_curves import HOPPER_FP8_CURVES
    from hp_plugins.runtimes.timing_profiles import H100_GEMM_SHAPE, HOPPER_KERNELS

    timing = registry.runtime("fsdp2").timing
    hardware = registry.hardware_preset("h100-sxm").spec
    device = timing.device("hopper")
    curves = dict(HOPPER_FP8_CURVES)
    rates = _recipe_rates(registry.precision_recipe(recipe), device, timing, hardware, 2)
    memory = hardware.memory_bandwidth_bytes_per_second * device.memory_bandwidth.value

    def bf16(rows: int, cols: int, inner: int) -> float:
        return 2 * rows * cols * inner / (hardware.peak_flops["bf16"] * HOPPER_KERNELS.matmul.value
                                          * H100_GEMM_SHAPE.factor(rows, cols, inner))

    flops = 2 * m * n * k
    fprop, dgrad, wgrad = bf16(m, n, k), bf16(m, k, n), bf16(n, k, m)
    split = curves[f"{kernel}:split_accumulator"].at(flops)
    fp8 = fprop / curves[kernel].at(flops) + (dgrad + wgrad) / split
    rescale = rates["rescale"]
    moved = (m * k * (rates["quant_input_fwd"] + rates["quant_input_bwd"]) + m * n * rates["quant_grad"]
             + n * k * rates["quant_weight"] + m * n * rescale[0] + m * k * rescale[1] + n * k * rescale[2])
    return fprop + dgrad + wgrad, fp8, moved / memory


def table(registry) -> list[dict]:
    """One row per measured linear and recipe: hp's seconds and speedup beside the measured ones."""
    found = []
    for name, (m, k, n), ref, fp8_measured in ROWS:
        for recipe, kernel in RECIPES:
            base, gemms, casts = priced(registry, recipe, kernel, m, k, n)
            found.append({"linear": name, "shape": (m, k, n), "recipe": recipe, "bf16_seconds": base,
                          "fp8_gemm_seconds": gemms, "cast_seconds": casts, "fp8_seconds": gemms + casts,
                          "speedup": base / (gemms + casts), "measured_bf16_seconds": ref,
                          "measured_fp8_seconds": fp8_measured, "measured_speedup": ref / fp8_measured})
    return found


def main() -> None:
    from hp_core import api

    print("| linear | (M, K, N) | recipe | hp bf16 ms | hp FP8 GEMMs ms | hp casts ms | hp FP8 ms | hp speedup | "
          "measured bf16 ms | measured FP8 ms | measured speedup |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in table(api.build_registry()):
        measured = (f"{r['measured_bf16_seconds'] * 1e3:.3f} | {r['measured_fp8_seconds'] * 1e3:.3f} | "
                    f"{r['measured_speedup']:.3f}" if r["recipe"] == "torchao-float8-rowwise" else "| |")
        print(f"| {r['linear']} | {r['shape']} | `{r['recipe']}` | {r['bf16_seconds'] * 1e3:.3f} | "
              f"{r['fp8_gemm_seconds'] * 1e3:.3f} | {r['cast_seconds'] * 1e3:.3f} | {r['fp8_seconds'] * 1e3:.3f} | "
              f"{r['speedup']:.3f} | {measured} |")


if __name__ == "__main__":
    main()
