"""The ``fsdp2`` runtime's fitted Hopper and Ampere figures, refitted from the data.

Shared by ``benchmarks/fit_fsdp2_sustained.py`` and ``tests/plugins/test_fsdp2_fit.py``.

Three figures per device class (``hopper``: the H100 rows; ``ampere``: the A100
80GB and 40GB rows together), fitted to the calibration rows of llm-foundry's
MPT tables (``data/scale_measured_mpt.json``; the split was fixed in the file
before anything was priced):

* ``m``: every GEMM's time, i.e. the device's ``matmul`` efficiency is the
  kernel figure (SimuMax's starter 0.70 on Hopper, its A100 median 0.7175 on
  Ampere) over ``m``;
* ``a``: the attention kernel's time on the rows that ran llm-foundry's Triton
  FlashAttention (``attention_kernel=triton_flash``): its forward and backward
  efficiencies are FlashAttention-2's on the device over ``a``;
* ``u``: FSDP1's per-unit serial time (``DeviceEfficiency.fsdp1_unit_seconds``) on the rows
  that ran torch FSDP1 (every MPT row: ``fsdp_implementation=fsdp1``): seconds each body layer
  (one FSDP unit) adds once per micro-batch. Stated as fitted with ``m`` and ``a`` held at
  their values (:func:`fitted`): a trainer-specific figure is fitted with the device-wide and
  profile-wide figures fitted before it held, a rule that reads no row's error; the joint fit of
  all three (:func:`joint`) is printed beside it, for information.

Each row is priced by the engine as it runs (the row's runtime, options,
hardware, recompute) with those figures replaced, and the figures fitted
minimise the sum of squared relative errors of the step time: Gauss-Newton with
the derivatives taken by re-pricing (the step time is linear in each figure
between the kinks where an overlapped collective starts or stops being hidden,
so a step of 1e-4 in m and a, 1e-6 s in u, is exact but at a kink). This is the exact form of
decomposing each row's step into matmul time M, attention time A, units times
micro-batches N and the rest R and solving ``measured ~ m M + a A + u N + R``: it is what the code prices with
the stated figures, so the fitted and the tabled errors agree.
"""

from __future__ import annotations

import json
import importlib.util
from pathlib import Path
from typing import Callable

import attrs

from hp_core.api import step_time
from hp_core.specs.timing import Sourced
from hp_plugins.runtimes.timing_profiles import AMPERE, HOPPER_KERNELS, HOPPER_SDPA
from scale_cases import MBRIDGE_ROWS, MPT_ROWS, ROWS, hardware, layout, measured_seconds, model, recompute, runtime, validated

# The kernel figures the factors divide: fsdp2's own Hopper entry (SDPA's FlashAttention-2) with the kernel matmul
# figure, as before the fit, and Ampere's.
KERNEL_FIGURES = {"hopper": attrs.evolve(HOPPER_SDPA, matmul=HOPPER_KERNELS.matmul), "ampere": AMPERE}
FP8_RUNS = Path(__file__).resolve().parents[2] / "benchmarks" / "fp8_runs.py"
_TRIAL = "a trial value of the fsdp2 fit (tests/plugins/fsdp2_fit.py)"
_STEP = 1e-4


def architecture(row: dict, registry) -> str:
    return hardware(row, registry).architecture


def size(row: dict) -> str:
    """The MPT model size of a row (``mpt-7b``), from its yaml."""
    return row["model"]["yaml"].rsplit("/", 1)[-1].removesuffix(".yaml")


def triton(row: dict) -> bool:
    return row.get("options", {}).get("attention_kernel") == "triton_flash"


def fsdp1(row: dict) -> bool:
    """The row ran torch FSDP1 (Composer): it takes the per-unit time ``u``."""
    return row.get("options", {}).get("fsdp_implementation") == "fsdp1"


@attrs.frozen
class Priced:
    """One row ready to price at any ``(m, a, u)``: ``seconds(m, a, u)`` is its step time (``u``: FSDP1's per-unit
    seconds, ``0`` by default; a row that does not run FSDP1 ignores it, as it ignores ``a`` without Triton attention)."""

    row: dict
    measured: float
    architecture: str
    seconds: Callable[..., float]

    def error(self, m: float, a: float, u: float = 0.0) -> float:
        return self.seconds(m, a, u) / self.measured - 1


def prepare(row: dict, registry) -> Priced:
    """*row* with its model, layout, hardware and runtime built once; the device entry's figures replaced per call."""
    arch = architecture(row, registry)
    spec, lay, hw, rc, rt = model(row, registry), layout(row), hardware(row, registry), recompute(row, registry), runtime(row, registry)
    base = KERNEL_FIGURES[arch]
    with_attention, with_units = triton(row), rt.timing.fsdp1_units

    def seconds(m: float, a: float, u: float = 0.0) -> float:
        changes = {"matmul": Sourced(base.matmul.value / m, _TRIAL)}
        if with_attention:
            changes["attention_forward"] = Sourced(base.attention_forward.value / a, _TRIAL)
            changes["attention_backward"] = Sourced(base.attention_backward.value / a, _TRIAL)
        if with_units:
            changes["fsdp1_unit_seconds"] = Sourced(u, _TRIAL)
        devices = tuple(attrs.evolve(d, **changes) if d.architecture == arch else d for d in rt.timing.devices)
        trial = attrs.evolve(rt, timing=attrs.evolve(rt.timing, devices=devices))
        return step_time(spec, lay, registry=registry, hardware=hw, runtime=trial, recompute=rc).step_seconds

    return Priced(row=row, measured=measured_seconds(row), architecture=arch, seconds=seconds)


def mpt_rows(registry) -> list[Priced]:
    """Every MPT row, prepared (all price on ``fsdp2``)."""
    return [prepare(row, registry) for row in MPT_ROWS]


# The classes of scale_measured.json added after the fit's report was stated (docs/time.md reports them beside the others).
LATER_CLASSES = ("multi-node MoE",)


def other_rows(registry) -> list[Priced]:
    """The rows of ``scale_measured.json`` priced on ``fsdp2`` (torchtitan, NeMo AutoModel): none is fitted to. The set
    fixed when the fit's report was stated: the classes added later (:data:`LATER_CLASSES`, NeMo AutoModel's multi-node
    MoE rows) are not in it; docs/time.md reports them (benchmarks/scale_validation.py)."""
    return [prepare(row, registry) for row in ROWS if row["runtime"] == "fsdp2" and row["split"] in ("calibration", "held-out")
            and row["class"] not in LATER_CLASSES]


def _with_matmul(rt, arch: str, value: float):
    """*rt* with its profile's *arch* entry's ``matmul`` replaced by *value*."""
    devices = tuple(attrs.evolve(d, matmul=Sourced(value, _TRIAL)) if d.architecture == arch else d for d in rt.timing.devices)
    return attrs.evolve(rt, timing=attrs.evolve(rt.timing, devices=devices))


def _fp8_runs():
    spec = importlib.util.spec_from_file_location("fp8_runs", FP8_RUNS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def megatron_hopper_rows(registry) -> list[Priced]:
    """The 14 Megatron-Core H100 rows, none fitted to, each as run where it states its trainer's runtime options:
    ``scale_measured.json``'s validated ``mlm-gpt`` rows, ``scale_measured_mbridge.json``'s H100 GPT-OSS rows and
    ``fp8_measured_runs.json``'s H100 rows (``benchmarks/fp8_runs.py`` prices them); the set fixed when Hopper's m was
    stated, so the rows of NVIDIA's DGX Cloud benchmarking recipes added to ``scale_measured_mbridge.json`` later
    (sources ``dgxc-*``: Llama 3.1 8B on one node, and the dense multi-node class) are not in it (docs/time.md reports them). ``seconds(m, a)`` prices the
    row with the Hopper entry's ``matmul`` at the kernel figure over ``m`` (``a`` is unused: no Triton attention)."""
    kernel = HOPPER_KERNELS.matmul.value
    found = []
    for row in validated(ROWS) + validated(MBRIDGE_ROWS):
        if row["runtime"] != "megatron" or row["hardware"] != "h100-sxm" or row["source"].startswith("dgxc-"):
            continue
        spec, lay, hw, rc, rt = model(row, registry), layout(row), hardware(row, registry), recompute(row, registry), runtime(row, registry)

        def seconds(m: float, a: float, u: float = 0.0, spec=spec, lay=lay, hw=hw, rc=rc, rt=rt) -> float:
            return step_time(spec, lay, registry=registry, hardware=hw, runtime=_with_matmul(rt, "hopper", kernel / m),
                             recompute=rc).step_seconds

        found.append(Priced(row=row, measured=measured_seconds(row), architecture="hopper", seconds=seconds))
    runs = _fp8_runs()
    for row in json.loads(runs.DATA.read_text(encoding="utf-8"))["rows"]:
        if row["hardware"] != "h100-sxm":
            continue

        def seconds(m: float, a: float, u: float = 0.0, row=row) -> float:
            trial = _with_matmul(registry.runtime("megatron"), "hopper", kernel / m)
            return runs.price(row, registry, as_run=bool(row.get("runtime_options")), runtime=trial).step_seconds

        found.append(Priced(row=row, measured=runs.measured_seconds(row), architecture="hopper", seconds=seconds))
    return found


def korthikanti_rows(registry) -> list[Priced]:
    """The 8 A100 Megatron-LM rows of Korthikanti et al. 2022 (``data/korthikanti.json``), none fitted to, priced as
    ``test_step_time_cases.py`` prices them (``megatron-lm-2022``, eager attention); ``seconds(m, a)`` prices the
    row with the Ampere entry's ``matmul`` at the kernel figure over ``m``."""
    import test_step_time_cases as cases  # the rows' models and layouts, as the golden test writes them down

    from hp_core.specs import ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
    from hp_plugins.runtimes.timing_profiles import MEGATRON_LM_2022

    hw, found = registry.hardware_preset("a100-80gb").spec, []
    for name, (pp, vpp, gbs) in cases.KORTHIKANTI_LAYOUTS.items():
        for run, (sp, setting) in cases.KORTHIKANTI_RUNS.items():
            spec, c = cases._gpt(name)
            lay = ParallelSpec(tp=c["tensor_parallel"], pp=pp, vpp=vpp, dp=1, sp=sp, zero=0, micro_batch_size=c["micro_batch_size"],
                               global_batch_size=gbs, seq_len=c["seq_length"])

            def seconds(m: float, a: float, u: float = 0.0, spec=spec, lay=lay, setting=setting) -> float:
                devices = tuple(attrs.evolve(d, matmul=Sourced(AMPERE.matmul.value / m, _TRIAL)) if d.architecture == "ampere"
                                else d for d in MEGATRON_LM_2022.devices)
                return step_time(spec, lay, registry=registry, hardware=hw, profile=attrs.evolve(MEGATRON_LM_2022, devices=devices),
                                 attention="eager", precision=PrecisionSpec(softmax_bytes=2),
                                 recompute=RecomputeSpec(default=Setting.parse(setting))).step_seconds

            row = {"id": f"korthikanti-{name}-{run.replace('_', '-')}"}
            found.append(Priced(row=row, measured=cases.KORTHIKANTI["measured_step_seconds"][run][name], architecture="ampere",
                                seconds=seconds))
    return found


# The finite-difference steps of the three figures: the step time is linear in each between kinks.
_STEPS = (_STEP, _STEP, 1e-6)
PARAMETERS = ("m", "a", "u")


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """*x* with ``a x = b`` (Gaussian elimination with partial pivoting; the normal equations of at most three figures)."""
    n = len(b)
    rows = [list(a[i]) + [b[i]] for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda i: abs(rows[i][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for i in range(col + 1, n):
            factor = rows[i][col] / rows[col][col]
            rows[i] = [v - factor * w for v, w in zip(rows[i], rows[col])]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (rows[i][n] - sum(rows[i][j] * x[j] for j in range(i + 1, n))) / rows[i][i]
    return x


def fit(rows: list[Priced], start: tuple[float, float, float] = (1.0, 1.0, 0.0),
        fixed: tuple[str, ...] = ()) -> tuple[float, float, float]:
    """``(m, a, u)`` minimising the sum of the rows' squared relative errors (Gauss-Newton, derivatives by re-pricing).

    The figures named in *fixed* (of ``"m"``, ``"a"``, ``"u"``) stay at *start*; ``a`` stays too where no row runs
    Triton attention, ``u`` where no row runs FSDP1.
    """
    x = list(start)
    free = [i for i, name in enumerate(PARAMETERS) if name not in fixed
            and (name != "a" or any(triton(p.row) for p in rows)) and (name != "u" or any(fsdp1(p.row) for p in rows))]
    if not free:
        return tuple(x)
    n = len(free)
    for _ in range(50):
        jtj = [[0.0] * n for _ in range(n)]
        jtr = [0.0] * n
        for p in rows:
            base = p.seconds(*x)
            r = base / p.measured - 1
            jac = []
            for i in free:
                moved = list(x)
                moved[i] += _STEPS[i]
                jac.append((p.seconds(*moved) - base) / _STEPS[i] / p.measured)
            for k in range(n):
                jtr[k] += jac[k] * r
                for l in range(n):
                    jtj[k][l] += jac[k] * jac[l]
        delta = [-d for d in _solve(jtj, jtr)]
        for i, d in zip(free, delta):
            x[i] += d
        if all(abs(d) < (1e-12 if free[k] == 2 else 1e-9) for k, d in enumerate(delta)):
            return tuple(x)
    raise RuntimeError(f"the fsdp2 fit did not converge (m, a, u = {x})")


def calibration(rows: list[Priced], arch: str) -> list[Priced]:
    return [p for p in rows if p.architecture == arch and p.row["split"] == "calibration"]


def fitted(registry, rows: list[Priced] | None = None,
           stated: dict[str, tuple[float, float]] | None = None) -> dict[str, tuple[float, float, float]]:
    """``{architecture: (m, a, u)}`` fitted to the MPT calibration rows of each class, as the profiles state them:
    ``m`` and ``a`` together with no per-unit time (``u = 0``: the fit before FSDP1 was priced), then ``u`` alone with
    ``m`` and ``a`` held at *stated* (their stated, rounded values; default: those of the fit itself)."""
    rows = rows if rows is not None else mpt_rows(registry)
    found = {}
    for arch in KERNEL_FIGURES:
        chosen = calibration(rows, arch)
        m, a, _ = fit(chosen, fixed=("u",))
        held = stated[arch] if stated is not None else (m, a)
        found[arch] = (m, a, fit(chosen, start=(*held, 0.0), fixed=("m", "a"))[2])
    return found


def joint(rows: list[Priced], arch: str) -> tuple[float, float, float]:
    """``(m, a, u)`` fitted together to the class's calibration rows: the alternative the profiles do not state."""
    return fit(calibration(rows, arch))
