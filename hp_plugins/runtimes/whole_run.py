"""The whole-run factors fitted to llm-foundry's MPT rows (``benchmarks/fit_fsdp2_sustained.py``).

:mod:`hp_plugins.runtimes.timing_profiles` applies them: Hopper's GEMM factor to every profile's Hopper
entry, Ampere's to the ``fsdp2`` profile's Ampere entry alone, the Triton factors to ``fsdp2``'s
``attention_kernel=triton_flash`` option. Their sources are here, with the fit's held-out checks.
"""

from __future__ import annotations

import attrs

from hp_core.specs.timing import DeviceEfficiency, Sourced

__all__ = ["FSDP1_UNIT_SECONDS", "MPT_CALIBRATION", "TRITON_FLASH_FACTORS", "WHOLE_RUN_MATMUL_FACTORS", "fitted_matmul",
           "fsdp1_unit", "mpt_fit"]

# A whole training run's GEMM time over the kernel figure (m) and llm-foundry's Triton FlashAttention time over
# FlashAttention-2's (a), per device class, fitted together to the calibration rows of llm-foundry's MPT tables, the
# other rows held out (benchmarks/fit_fsdp2_sustained.py; tests/plugins/test_fsdp2_fit.py refits; docs/time.md
# "The fsdp2 fit"). Stated as efficiencies: a GEMM takes FLOPs / (peak * matmul), so m is exactly matmul / m.
# Hopper's m is the device's: every profile's Hopper entry (HOPPER) states the kernel figure over it, and the 14
# Megatron-Core H100 rows of the repo, none fitted to, check it (held out: mean absolute error 23.5% -> 16.0%).
# Ampere's m is the fsdp2 profile's alone (FSDP2_AMPERE): on the held-out A100 Megatron-LM rows of Korthikanti et al.
# 2022 it raises the mean absolute error from 3.7% to 5.4% (docs/time.md "The fsdp2 fit").
WHOLE_RUN_MATMUL_FACTORS = {"hopper": 1.235, "ampere": 1.057}
TRITON_FLASH_FACTORS = {"hopper": 1.869, "ampere": 2.180}
# FSDP1's per-unit serial time (DeviceEfficiency.fsdp1_unit_seconds, fsdp2's option fsdp_implementation=fsdp1): the
# seconds each body layer (one FSDP unit) adds once per micro-batch under torch FSDP1 as Composer runs it, per device
# class, fitted to the same calibration rows (every MPT row states fsdp_implementation: fsdp1) with the factors above
# held at their values: a trainer-specific figure is fitted with the device-wide and profile-wide figures fitted before
# it held, so adding it changes no figure any other row is priced with (a rule that consults no row's error;
# benchmarks/fit_fsdp2_sustained.py prints the joint three-figure fit beside it, for information). Empirical: what it holds -- FSDP1's pre/post-forward and -backward hooks, the limit_all_gathers rate
# limiter's CPU-GPU synchronisation, the FlatParameter copies, the fp32 gradient cast and divide passes -- is not
# priced from sources; FSDP2 (torchtitan) rows do not take it.
FSDP1_UNIT_SECONDS = {"hopper": 0.001761, "ampere": 0.002348}
MPT_CALIBRATION = {
    "hopper": "the 39 calibration rows of llm-foundry's H100 80GB BF16 MPT tables",
    "ampere": "the 74 calibration rows of llm-foundry's A100 80GB and A100 40GB MPT tables",
}


def mpt_fit(jointly_with: str, *, how: str | None = None) -> str:
    """What the MPT fit is, for a figure fitted jointly with *jointly_with* (the other factor), or as *how* says."""
    return ("(Composer FSDP, eager PyTorch, attn_impl triton; tests/plugins/data/scale_measured_mpt.json at "
            f"mosaicml/llm-foundry@8c8dd48, split fixed before pricing), {how or 'jointly with ' + jointly_with}; "
            "held out: the device's other MPT rows and the torchtitan and NeMo AutoModel rows of scale_measured.json")
_HELD_OUT = {
    "hopper": ("; a property of the device, not of the trainer: also held out, the 14 Megatron-Core H100 rows "
               "(scale_measured.json mlm-gpt, scale_measured_mbridge.json GPT-OSS, fp8_measured_runs.json H100), "
               "priced with it in every profile's Hopper entry (benchmarks/fit_fsdp2_sustained.py, docs/time.md "
               "'The fsdp2 fit')"),
    "ampere": ("; the fsdp2 profile's alone: on the held-out A100 Megatron-LM rows of Korthikanti et al. 2022 it "
               "worsens the error, so the other profiles keep the kernel figure (benchmarks/fit_fsdp2_sustained.py, "
               "docs/time.md 'The fsdp2 fit')"),
}


# What fitting m, a and u together would have moved, per class (a consequence, not the reason for holding m and a).
_JOINT = {
    "hopper": "fitting all three together would also move Hopper's GEMM factor, which every profile's Hopper entry shares",
    "ampere": "fitting all three together would also move the fsdp2 profile's Ampere GEMM factor, which its torchtitan "
              "A100 rows are priced with",
}


def fitted_matmul(entry: DeviceEfficiency) -> DeviceEfficiency:
    """*entry* with its ``matmul`` the kernel figure over its device class's whole-run GEMM factor, sourced,
    and the factor itself stated (``matmul_whole_run_factor``) so that reports say the GEMMs carry it."""
    factor = WHOLE_RUN_MATMUL_FACTORS[entry.architecture]
    fit = (f"the whole-run GEMM time factor fitted (least squares in relative error of the step time) to "
           f"{MPT_CALIBRATION[entry.architecture]} {mpt_fit('the Triton FlashAttention factor')}{_HELD_OUT[entry.architecture]}")
    return attrs.evolve(
        entry,
        matmul=Sourced(entry.matmul.value / factor, f"{entry.matmul.value:g} (the kernel figure: {entry.matmul.source}) / {factor:.3f}, {fit}"),
        matmul_whole_run_factor=Sourced(factor, fit),
    )


def fsdp1_unit(entry: DeviceEfficiency) -> DeviceEfficiency:
    """*entry* with its device class's fitted FSDP1 per-unit time (``fsdp1_unit_seconds``), sourced."""
    arch = entry.architecture
    value = FSDP1_UNIT_SECONDS[arch]
    how = (f"the whole-run GEMM factor {WHOLE_RUN_MATMUL_FACTORS[arch]:.3f} and the Triton factor "
           f"{TRITON_FLASH_FACTORS[arch]:.3f} held at their stated values (the rule, which consults no row's error: a "
           "trainer-specific figure is fitted with the device-wide and profile-wide figures fitted before it held, so "
           f"adding it changes no figure any other row is priced with; {_JOINT[arch]})")
    fit = (f"{value * 1e3:.3f} ms per FSDP unit (body layer) per micro-batch, 1/3 forward and 2/3 backward: an empirical "
           "serial time of torch FSDP1 as Composer runs it (its hooks, the limit_all_gathers rate limiter's CPU-GPU "
           "synchronisation, the FlatParameter copies, the fp32 gradient cast and divide passes), not priced from sources; "
           f"fitted (least squares in relative error of the step time) to {MPT_CALIBRATION[arch]} "
           f"{mpt_fit('', how=how)} (benchmarks/fit_fsdp2_sustained.py, docs/time.md 'The fsdp2 fit'); "
           "FSDP2 (torchtitan) rows do not take it")
    return attrs.evolve(entry, fsdp1_unit_seconds=Sourced(value, fit))
