"""Fit the ``megatron-te`` profile's host seconds per kernel to measured Megatron-Core MoE step times.

Run: ``python benchmarks/fit_host_seconds.py``.

An eager Megatron-Core step issues every kernel from Python; where a layer's kernels are short (a
mixture-of-experts layer at micro-batch 1) the GPU waits on the host, and the layer takes the host's
time to issue them (:class:`hp_core.specs.overlap.HostOverhead`, a floor under each layer's forward and
backward; docs/time.md, "Overlap and host time"). The kernel counts are counted or measured
(:data:`hp_plugins.runtimes.timing_profiles.MEGATRON_HOST`); the host seconds per kernel is not
published for these trainers, so it is fitted here (least squares in relative error) to the
``calibration`` rows of ``fp8_measured_runs.json``'s ``moe_rows``: Megatron-Bridge's three Qwen3-30B-A3B
FP8 runs on 16 H100s at micro-batch 1 (EP 16, HybridEP, no CUDA graphs). Every other row (the B200,
GB200 and other H100 MoE rows, the dense and SimuMax rows) is held out. The H100 rows do not depend on
the B200 ``sustained_slowdown`` (fitted after this, with the floor in place:
``benchmarks/fit_sustained_slowdown.py``), so the two fits do not feed back into each other.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import fp8_runs  # noqa: E402

from hp_core import api  # noqa: E402


def calibration_rows() -> list[dict]:
    """The ``moe_rows`` the host figure is fitted to (split ``calibration``)."""
    return [row for row in json.loads(fp8_runs.DATA.read_text())["moe_rows"] if row["split"] == "calibration"]


def relative_errors(seconds_per_kernel: float, rows: list[dict], registry) -> list[float]:
    """Each row's ``(hp - measured) / measured`` with the megatron runtime's host seconds per kernel set to *seconds_per_kernel*."""
    runtime = registry.runtime("megatron")
    host = attrs.evolve(runtime.timing.host, seconds_per_kernel=seconds_per_kernel)
    varied = attrs.evolve(runtime, timing=attrs.evolve(runtime.timing, host=host))
    errors = []
    for row in rows:
        measured = fp8_runs.measured_seconds(row)
        errors.append((fp8_runs.price_moe(row, registry, base_runtime=varied).step_seconds - measured) / measured)
    return errors


def fitted_seconds_per_kernel(registry=None, low: float = 1e-6, high: float = 200e-6) -> float:
    """The host seconds per kernel minimising the calibration rows' summed squared relative error, rounded to 0.1 us.

    The step time is piecewise linear and non-decreasing in the figure (each layer's floor rises with it), so the
    summed squared error is unimodal: a golden-section search to 0.01 us, then rounded.
    """
    registry = registry or api.build_registry()
    rows = calibration_rows()

    def loss(x: float) -> float:
        return sum(e * e for e in relative_errors(x, rows, registry))

    ratio = (math.sqrt(5) - 1) / 2
    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = loss(c), loss(d)
    while b - a > 1e-8:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = loss(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = loss(d)
    return round((a + b) / 2 * 1e7) / 1e7


def main() -> None:
    registry = api.build_registry()
    fitted = fitted_seconds_per_kernel(registry)
    stated = registry.runtime("megatron").timing.host.seconds_per_kernel
    rows = calibration_rows()
    print(f"Fitted host seconds per kernel: {fitted * 1e6:.1f} us (stated {stated * 1e6:.1f} us), {len(rows)} calibration rows:")
    for row, error in zip(rows, relative_errors(fitted, rows, registry)):
        print(f"- {row['id']}: measured {fp8_runs.measured_seconds(row):.3f} s, error {error:+.1%}")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no stray arguments
    main()
