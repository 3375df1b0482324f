"""Public GEMM throughput measurements on B200, GB200 and H100 against the efficiency hp prices the same GEMM at.

Run: ``python benchmarks/blackwell_gemm_level.py``. It prints a markdown table, one row per record of
``tests/plugins/data/blackwell_gemm_measurements.json`` (each record's provenance is there), then summaries.

hp's figure for a record is looked up as the ``megatron-te`` profile prices a GEMM
(:func:`hp_core.engine.timing.rates._gemm_table`, :meth:`hp_core.specs.gemms.GemmTable.efficiency`,
``hp_core/engine/timing/gemm_seconds.py`` ``_matmul_seconds``):

* Blackwell (``b200``, ``gb200``): SimuMax's per-shape B200 table (``hp_plugins/hardware/gemm_b200.py``) for the
  nearest measured shape with every dimension within the table's tolerance (1.05); off the table, the device's
  single ``matmul`` efficiency (0.4878). A plain ``C = A B`` is the forward GEMM of a linear layer
  (``rows = m``, ``fan_out = n``, ``fan_in = k``). A grouped record takes the table's grouped row, else the fitted
  ``grouped_matmul * rows / (rows + grouped_half_rows)``, ``rows`` the tokens per group (the record's tokens over its
  groups: equal groups assumed, the source stating only the total and the group count).
* Hopper (``h100-sxm``): ``matmul`` times the OpenXLA shape scale (``hp_plugins/hardware/gemm_h100.py``); ``matmul``
  is the kernel figure 0.70 over the whole-run GEMM factor 1.235 (``hp_plugins/runtimes/whole_run.py``). The kernel
  figure alone (``HOPPER_KERNELS``) is shown beside it.
* The efficiency multiplies the preset's dense bf16 peak (``hp_plugins/hardware/data/hardware.json``: B200 2250,
  GB200 2500, H100 SXM 989.4 TFLOP/s). fp16 records are priced as bf16 (the presets state the same fp16 and bf16
  peak; hp's B200 table is keyed to bf16, so hp itself would price an fp16 run at ``matmul``). FP8 / MXFP8 records
  are hp's bf16 figure times the device's measured speedup of the record's kernel (``gemm_speedups``,
  ``hp_plugins/runtimes/gemm_speedups.py``), as ``_recipe_rates`` applies it; the split-accumulator figure where the
  record's kernel runs without fast accumulation and the device states one (Hopper).

``measured/hp`` above 1 means the measurement is faster than hp's price. ``sustained_slowdown`` (1.0534 for
Blackwell under ``megatron-te``) is a whole-step factor and is not applied: these are kernels alone.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from hp_core.engine.timing.rates import _gemm_table
from hp_core.specs.gemms import GemmTable, ShapedGemms
from hp_plugins.hardware import gemm_h100
from hp_plugins.hardware.presets import PRESETS
from hp_plugins.runtimes.timing_profiles import HOPPER_KERNELS, MEGATRON_TE

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "tests" / "plugins" / "data" / "blackwell_gemm_measurements.json"
PROFILE = MEGATRON_TE
PASS_INDEX = {"forward": 0, "input_gradient": 1, "weight_gradient": 2}
# Records whose kernel accumulates FP8 products without fast accumulation (torch._scaled_mm's default
# use_fast_accum=False): priced at the split-accumulator speedup where the device states one.
SPLIT_ACCUMULATOR_SOURCES = ("mamf",)
# GEMM sizes (2 m n k, in TFLOP) for the efficiency-by-size summary.
BINS_TERAFLOP = ((0.0, 0.1), (0.1, 0.3), (0.3, 1.0), (1.0, 3.0), (3.0, 1e9))


def load() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


def _preset(name: str):
    for preset in PRESETS:
        if preset.name == name:
            return preset.spec
    raise KeyError(f"no hardware preset {name!r}")


def measured_flops_per_second(record: dict) -> float:
    """The record's throughput: as printed (TFLOP/s or FLOP/s), else its FLOPs over its printed time."""
    if "tflops" in record:
        return record["tflops"] * 1e12
    if "flops_per_second" in record:
        return float(record["flops_per_second"])
    return gemm_flops(record) / record["time_seconds"]


def gemm_flops(record: dict) -> float:
    if record.get("grouped"):
        return 2.0 * record["tokens"] * record["fan_out"] * record["fan_in"]
    return 2.0 * record["m"] * record["n"] * record["k"]


def hp_bf16_efficiency(dev, record: dict) -> tuple[float, str]:
    """hp's bf16 efficiency for the record's GEMM and where it comes from (the table, the shape scale, the fallback)."""
    table = _gemm_table(dev, "bf16")
    if record.get("grouped"):
        groups, rows = record["groups"], record["tokens"] / record["groups"]
        if isinstance(table, GemmTable):
            found = table.efficiency(record["gemm_pass"], rows, record["fan_out"], record["fan_in"], experts=groups)
            if found is not None:
                return found, "grouped table"
        fitted = dev.grouped_matmul.value * rows / (rows + dev.grouped_half_rows.value)
        return fitted, "grouped fit"
    m, n, k = record["m"], record["n"], record["k"]
    if isinstance(table, GemmTable):
        found = table.efficiency("forward", m, n, k)
        if found is not None:
            return found, "table"
        return dev.matmul.value, "off-table: matmul"
    if isinstance(table, ShapedGemms):
        return table.matmul * table.scale.factor(m, n, k), "matmul x shape scale"
    return dev.matmul.value, "matmul"


def _kernel_dtype(kernel: str) -> str:
    """The ``peak_flops`` key a low-precision kernel runs at (hp_core.precision_recipes.FORMATS)."""
    return "fp4" if kernel == "nvfp4" else "fp8"


def speedup(dev, record: dict) -> float:
    kernel = record.get("kernel")
    if kernel is None:
        return 1.0
    split = ("fprop", "dgrad", "wgrad") if record["source"] in SPLIT_ACCUMULATOR_SOURCES else ()
    peaks = _preset(record["hp_preset"]).peak_flops
    dtype = _kernel_dtype(kernel)  # the peak a banded figure is keyed by (DeviceEfficiency.banded_gemm_speedups)
    passes = dev.pass_speedups(kernel, split, peaks[dtype] / peaks["bf16"] if dtype in peaks else None)
    if passes is None:
        raise ValueError(f"{record['id']}: profile {PROFILE.name} states no {kernel} speedup for {dev.architecture}")
    return passes[PASS_INDEX[record.get("gemm_pass", "forward")]]


def nearest_table_row(record: dict) -> tuple[tuple, float] | None:
    """The B200 table's forward row nearest to a dense record at any distance (largest log ratio), for reading only."""
    table = _gemm_table(PROFILE.device("blackwell"), "bf16")
    if record.get("grouped") or not isinstance(table, GemmTable):
        return None
    point = (record["m"], record["n"], record["k"])
    best = None
    for row in table.dense:
        if row[0] != "forward":
            continue
        distance = max(abs(math.log(a / b)) for a, b in zip(row[1:4], point))
        if best is None or distance < best[1]:
            best = (row, distance)
    return best


def evaluate(record: dict) -> dict:
    spec = _preset(record["hp_preset"])
    dev = PROFILE.device(spec.architecture)
    efficiency, where = hp_bf16_efficiency(dev, record)
    factor = speedup(dev, record)
    hp = efficiency * spec.peak_flops["bf16"] * factor
    measured = measured_flops_per_second(record)
    result = dict(record=record, architecture=spec.architecture, hp_efficiency=efficiency, where=where, speedup=factor,
                  hp_flops_per_second=hp, measured_flops_per_second=measured, ratio=measured / hp,
                  measured_fraction_of_peak=measured / spec.peak_flops[_kernel_dtype(record["kernel"]) if record.get("kernel") else "bf16"])
    if spec.architecture == "hopper":
        kernel = HOPPER_KERNELS.matmul.value * _gemm_table(dev, "bf16").scale.factor(record["m"], record["n"], record["k"])
        result["ratio_to_kernel_figure"] = measured / (kernel * spec.peak_flops["bf16"] * factor)
    near = nearest_table_row(record)
    if near is not None:
        (_, m, n, k, eff), distance = near
        result["nearest"] = f"{m}x{n}x{k} ({eff:.3f}, x{math.exp(distance):.2f})"
    return result


# The B200 preset's large-GEMM rule (hp_plugins/hardware/data/hardware.json, b200 and gb200): from 1 TFLOP a GEMM
# (2 m n k), every independent B200 record runs faster than the family's figures price it; below, they straddle them.
LARGE_GEMM_FLOPS = 1e12


def large_gemm_speedup() -> tuple[float, list[dict]]:
    """The median over the independent B200 bf16/fp16 dense records of at least :data:`LARGE_GEMM_FLOPS` of measured
    over hp's family figure (SimuMax's table, else ``matmul``): the ``b200`` preset's ``large_gemm_speedup``; and
    those records' evaluations."""
    chosen = [x for x in (evaluate(r) for r in load()["records"])
              if x["record"]["hp_preset"] == "b200" and not x["record"].get("grouped") and not x["record"].get("kernel")
              and gemm_flops(x["record"]) >= LARGE_GEMM_FLOPS]
    return statistics.median(x["ratio"] for x in chosen), chosen


def gb200_rate_scale() -> float:
    """GB200's GEMM rate against the B200's in fractions of their peaks: MAMF's best bf16 rates (one script, one author)
    over the peaks' ratio, ``(1822.0 / 1745.0) / (2500 / 2250)``: the ``gb200`` preset's ``gemm_rate_scale``."""
    return _mamf_rate_scale("gb200")


def _mamf_rate_scale(name: str) -> float:
    """Preset *name*'s MAMF bf16 rate over the B200's, over their bf16 peaks' ratio."""
    found = {r["hp_preset"]: measured_flops_per_second(r) for r in load()["records"]
             if r["source"] == "mamf" and r["dtype"] == "bf16"}
    return (found[name] / found["b200"]) / (_preset(name).peak_flops["bf16"] / _preset("b200").peak_flops["bf16"])


# The sizes of Transformer Engine's per-layer GEMMs in its gemm_profiling tutorial (a 5B model, hidden 4096,
# intermediate 16384, 15,872 tokens): from the output projection, 2 * 15872 * 4096 * 4096 FLOPs, to the first MLP
# GEMM, 2 * 15872 * 4096 * 16384: the sizes its speedups (hp_plugins/runtimes/gemm_speedups.py) were measured at.
TE_TUTORIAL_GEMM_FLOPS = (2.0 * 15872 * 4096 * 4096, 2.0 * 15872 * 4096 * 16384)


def b200_nvfp4_speedup() -> tuple[float, list[str]]:
    """The B200's NVFP4 GEMM speedup over bf16 (the ``blackwell`` entry's banded ``nvfp4`` figure at a 4.0 FP4:BF16
    peak ratio): pytorch/ao#2427's bf16 over NVFP4 time, the median over its cubes within
    :data:`TE_TUTORIAL_GEMM_FLOPS`, and those cubes' record ids."""
    records = [r for r in load()["records"] if r["source"] == "torchao_2427"]
    bf16 = {r["m"]: r for r in records if r["dtype"] == "bf16"}
    low, high = TE_TUTORIAL_GEMM_FLOPS
    chosen = [r for r in records if r.get("kernel") == "nvfp4" and low <= gemm_flops(r) <= high]
    return statistics.median(bf16[r["m"]]["time_seconds"] / r["time_seconds"] for r in chosen), [r["id"] for r in chosen]


def b300_rate_scale() -> float:
    """The B300's GEMM rate against the B200's in fractions of their peaks, MAMF's best bf16 rates over the peaks'
    ratio, ``(1769.0 / 1745.0) / (2250 / 2250)``: the ``b300`` preset's ``gemm_rate_scale``."""
    return _mamf_rate_scale("b300")


def gb300_rate_scale() -> tuple[float, list[dict]]:
    """The ``gb300`` preset's ``gemm_rate_scale``: the median of measured over hp's blackwell figure at the GB300's peak
    over facebookexperimental/triton#740's six GB300 matmuls (8192 x 8192 x 512 to 16384; 1.31-1.49, no step with size,
    so the preset states no ``large_gemm_speedup``), and those records' evaluations."""
    chosen = [evaluate(r) for r in load()["records"] if r["hp_preset"] == "gb300" and r["source"] == "meta_tlx_740"]
    return statistics.median(x["ratio"] for x in chosen), chosen


def _shape(record: dict) -> str:
    if record.get("grouped"):
        return f"{record['groups']}x({record['tokens'] // record['groups']}x{record['fan_out']}x{record['fan_in']}) {record['gemm_pass']}"
    return f"{record['m']}x{record['n']}x{record['k']}"


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f}, n={len(values)})"


def main() -> None:
    results = [evaluate(r) for r in load()["records"]]
    print("| id | device | power | dtype | M x N x K | measured TFLOP/s | of peak | hp eff | hp from | hp TFLOP/s | measured/hp | nearest B200 table shape (eff, ratio) |")
    print("|---|---|---|---|---|---:|---:|---:|---|---:|---:|---|")
    for x in results:
        r = x["record"]
        power = f"{r['power_limit_w']} W" if r.get("power_limit_w") else "-"
        approx = "~" if r.get("approximate") else ""
        hp_from = x["where"] + (f" x {x['speedup']:.3f}" if r.get("kernel") else "")
        ratio = f"{x['ratio']:.3f}" + (f" (kernel fig. {x['ratio_to_kernel_figure']:.3f})" if "ratio_to_kernel_figure" in x else "")
        print(f"| {r['id']} | {r['hp_preset']} | {power} | {r['dtype']} | {_shape(r)} | {approx}{x['measured_flops_per_second'] / 1e12:.1f} | "
              f"{x['measured_fraction_of_peak']:.3f} | {x['hp_efficiency']:.4f} | {hp_from} | {x['hp_flops_per_second'] / 1e12:.1f} | "
              f"{ratio} | {x.get('nearest', '-')} |")

    print("\n## measured/hp by source, device and dtype (median (min-max, n))\n")
    print("| source | device | dtype | measured/hp | measured fraction of peak |")
    print("|---|---|---|---|---|")
    groups: dict[tuple, list[dict]] = {}
    for x in results:
        r = x["record"]
        groups.setdefault((r["source"], r["hp_preset"], r["dtype"]), []).append(x)
    for (source, preset, dtype), xs in groups.items():
        print(f"| {source} | {preset} | {dtype} | {_spread([x['ratio'] for x in xs])} | "
              f"{_spread([x['measured_fraction_of_peak'] for x in xs])} |")

    # The B200 and GB200 records (the B300's and GB300's have their own lines under "The presets' figures").
    blackwell_dense = [x for x in results if x["record"]["hp_preset"] in ("b200", "gb200") and not x["record"].get("grouped")
                       and not x["record"].get("kernel")]
    on_table = [x for x in blackwell_dense if x["where"] == "table"]
    off_table = [x for x in blackwell_dense if x["where"] != "table"]
    print("\n## Blackwell bf16/fp16 dense records (B200 and GB200)\n")
    print(f"- all: measured/hp {_spread([x['ratio'] for x in blackwell_dense])}")
    print(f"- shapes the B200 table holds (within its 1.05 tolerance; SimuMax's own measurement is hp's figure): "
          f"{_spread([x['ratio'] for x in on_table])}: " + ", ".join(f"{x['record']['id']} {x['ratio']:.3f}" for x in on_table))
    print(f"- off-table shapes (hp at matmul = {PROFILE.device('blackwell').matmul.value}): {_spread([x['ratio'] for x in off_table])}")
    for size in ((0, 4096), (4097, 10**9)):
        xs = [x for x in blackwell_dense if size[0] <= max(x["record"]["m"], x["record"]["n"], x["record"]["k"]) <= size[1]]
        print(f"- largest dimension {size[0]}-{size[1] if size[1] < 10**9 else 'up'}: {_spread([x['ratio'] for x in xs])}")
    by_power: dict[str, list[float]] = {}
    for x in blackwell_dense:
        key = f"{x['record']['power_limit_w']} W" if x["record"].get("power_limit_w") else "not stated"
        by_power.setdefault(key, []).append(x["ratio"])
    for key, values in by_power.items():
        print(f"- power limit {key}: {_spread(values)}")

    # Efficiency by GEMM size: SimuMax's B200 rows (all three passes, each a GEMM of 2 m n k FLOPs) beside the
    # independent B200 bf16/fp16 dense records, as fractions of the 2250 TFLOP/s peak. Sizes, not shapes: for reading.
    table = _gemm_table(PROFILE.device("blackwell"), "bf16")
    print("\n## B200 bf16 efficiency by GEMM size (fraction of 2250 TFLOP/s; median (min-max, n))\n")
    print("| GEMM TFLOP | SimuMax table (hp's figures) | independent records | independent / SimuMax (medians) | independent sources |")
    print("|---|---|---|---:|---|")
    independent = [x for x in blackwell_dense if x["record"]["hp_preset"] == "b200"]
    for low, high in BINS_TERAFLOP:
        simumax = [row[-1] for row in table.dense if low <= 2 * row[1] * row[2] * row[3] / 1e12 < high]
        in_bin = [x for x in independent if low <= gemm_flops(x["record"]) / 1e12 < high]
        others = [x["measured_fraction_of_peak"] for x in in_bin]
        both = f"{statistics.median(others) / statistics.median(simumax):.3f}" if simumax and others else "-"
        sources = sorted({x["record"]["source"] for x in in_bin})
        named = f"{len(sources)}: " + ", ".join(sources) if sources else "-"
        print(f"| {low:g}-{high:g} | {_spread(simumax)} | {_spread(others)} | {both} | {named} |")

    speedup, chosen = large_gemm_speedup()
    print(f"\n## The presets' figures\n\n- b200, gb200 and b300 `large_gemm_speedup`: {speedup:.3f}, the median of measured/hp over "
          f"the {len(chosen)} independent B200 dense records of at least {LARGE_GEMM_FLOPS / 1e12:g} TFLOP ("
          + ", ".join(f"{x['record']['id']} {x['ratio']:.3f}" for x in sorted(chosen, key=lambda x: x["ratio"])) + ")")
    print(f"- gb200 `gemm_rate_scale`: {gb200_rate_scale():.4f}, MAMF's GB200 over B200 bf16 rate over the peaks' ratio")
    print(f"- b300 `gemm_rate_scale`: {b300_rate_scale():.4f}, MAMF's B300 over B200 bf16 rate over the peaks' ratio")
    nvfp4, cubes = b200_nvfp4_speedup()
    print(f"- blackwell `nvfp4` speedup at a 4.0 FP4:BF16 peak ratio (B200, GB200): {nvfp4:.4f}, pytorch/ao#2427's bf16 "
          f"over NVFP4 time at the cubes within TE's tutorial GEMM sizes ({', '.join(cubes)})")
    gb300, records = gb300_rate_scale()
    print(f"- gb300 `gemm_rate_scale`: {gb300:.4f}, the median of measured over hp's blackwell figure over the "
          f"{len(records)} GB300 matmuls of facebookexperimental/triton#740 ({_spread([x['ratio'] for x in records])})")

    # Hopper cross-check: OpenXLA's sm_90 rates (the package data hp's Hopper shape scale is made of) at the shapes of
    # the sm_100 records, b = 1, and the B200/H100 ratio at equal shapes against the ratio of the bf16 peaks.
    h100 = {(m, n, k): rate for b, m, n, k, rate in gemm_h100.ROWS if b == 1}
    hopper, b200 = _preset("h100-sxm"), _preset("b200")
    hopper_dev = PROFILE.device("hopper")
    ratios, kernel_ratios, cross = [], [], []
    for x in results:
        r = x["record"]
        if r["source"] != "xla_sm100" or r["dtype"] != "bf16":
            continue
        rate = h100.get((r["m"], r["n"], r["k"]))
        if rate is None:
            continue
        factor = _gemm_table(hopper_dev, "bf16").scale.factor(r["m"], r["n"], r["k"])
        ratios.append(rate / (hopper_dev.matmul.value * factor * hopper.peak_flops["bf16"]))
        kernel_ratios.append(rate / (HOPPER_KERNELS.matmul.value * factor * hopper.peak_flops["bf16"]))
        cross.append(x["measured_flops_per_second"] / rate)
    print("\n## Hopper cross-check (OpenXLA sm_90 bf16, b = 1, the sm_100 records' shapes)\n")
    # hp's Hopper shape scale is this same table relative to its largest shape, so these two ratios are constants by
    # construction (the table's top rate over hp's figure there), not a check of the shape dependence.
    print(f"- H100 measured / hp Hopper (matmul {hopper_dev.matmul.value:.4f} x shape scale; constant by construction, "
          f"the scale being this table's): {_spread(ratios)}")
    print(f"- H100 measured / hp Hopper kernel figure ({HOPPER_KERNELS.matmul.value} x shape scale; likewise constant): "
          f"{_spread(kernel_ratios)}")
    print(f"- B200 / H100 (XLA, same shapes): {_spread(cross)}; bf16 peak ratio "
          f"{b200.peak_flops['bf16'] / hopper.peak_flops['bf16']:.3f}")


if __name__ == "__main__":
    main()
