"""Real FSDP2 steps measured on an H200 (tests/plugins/data/h200_fsdp2_steps.json) against hp, AdamW's foreach
traffic by hand, and SDPA's dispatch on that GPU (tests/plugins/data/h200_sdpa_attention.json)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from repo_script import load_script  # tests/repo_script.py

from hp_core.api import build_registry
from hp_core.errors import ConfigError
from hp_core.io.convert import ConfigFile, structure
from hp_core.io.job import resolve_job, step_time_job
from hp_core.io.validate import validate_case
from hp_core.specs.precision import PrecisionSpec
from hp_plugins.cases.fsdp2_measured import read_measure_cases
from hp_plugins.optimizers.adam import adam_foreach_step_bytes, adam_step_bytes, adamw_foreach_step_bytes

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "plugins" / "data"
CASES = json.loads((DATA / "h200_fsdp2_steps.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def checked():
    registry = build_registry()
    return {case.name: validate_case(case, registry) for case in read_measure_cases(CASES, registry)}


def test_every_case_is_a_gpu_measurement_with_its_step(checked):
    assert len(checked) == 16
    registry = build_registry()
    for case in read_measure_cases(CASES, registry):
        assert case.source.startswith("torch.cuda.max_memory_allocated of real FSDP2 steps on NVIDIA H200")
        (step,) = case.steps
        assert step.micro_batches == 1 and 0.09 < step.seconds < 1.1


def test_memory_is_within_1_2_percent_of_the_allocator_on_every_case(checked):
    errors = {name: result.stages[0].error for name, result in checked.items()}
    assert max(abs(e) for e in errors.values()) < 0.012, errors
    # Where the optimizer step binds (parameters, AdamW's moments and gradients, the foreach temporary and PyTorch's
    # two cuBLAS workspaces, hp_core/blas_workspaces.py) to 0.05%: 64 MiB short (-0.17%) before the workspaces were priced.
    bound = {name: result.stages[0].error for name, result in checked.items()
             if result.estimate.stages[0].binding_point == "optimizer"}
    assert len(bound) == 8 and max(abs(e) for e in bound.values()) < 0.0005, bound
    # Activation-bound cases too: 12 Llama-3-8B layers at 16,384 tokens bind in backward at 103.8 GiB.
    deep = checked["llama3-8b-12l-s16384-mbs1-acnone"].stages[0]
    assert deep.measured_bytes == 111_433_095_680 and abs(deep.error) < 0.004


def test_the_foreach_optimizer_phase_is_priced_at_80_bytes_against_fused_28():
    """At one rank the optimizer step is the whole optimizer phase: foreach over fused is 80/28 exactly."""
    registry = build_registry()

    by_name = {c["name"]: c for c in CASES["cases"]}
    seconds = {}
    for name in ("llama3-8b-4l-s4096-mbs1-acnone", "llama3-8b-4l-s4096-mbs1-acnone-fused"):
        job = resolve_job(structure(by_name[name]["config"], ConfigFile, registry), registry)
        seconds[name] = step_time_job(job, registry).optimizer_seconds
    ratio = seconds["llama3-8b-4l-s4096-mbs1-acnone"] / seconds["llama3-8b-4l-s4096-mbs1-acnone-fused"]
    assert ratio == pytest.approx(80 / 28, rel=1e-9)
    # The measured foreach phase: 43.4 ms for 1.92e9 fp32 elements; hp prices 37.7 ms (-13%).
    measured = by_name["llama3-8b-4l-s4096-mbs1-acnone"]["measured"]["seconds"]["optimizer"]
    assert measured == pytest.approx(0.0434, abs=5e-4)
    assert seconds["llama3-8b-4l-s4096-mbs1-acnone"] == pytest.approx(0.0377, abs=5e-4)


def test_adam_foreach_bytes_by_hand():
    s = None  # the figures depend on the precision alone, not on the slice
    fp32 = PrecisionSpec(param_bytes=4, grad_bytes=4, master_param_bytes=0, moment_bytes=4)
    # AdamW: mul_ 8 + lerp_ 12 + mul_ 8 + addcmul_ 12 + sqrt 8 + div_ 8 + add_ 8 + addcdiv_ 16 = 80.
    assert adamw_foreach_step_bytes(s, fp32) == 80
    assert adam_foreach_step_bytes(s, fp32) == 72  # no weight-decay pass
    assert adam_step_bytes(s, fp32) == 28  # the fused kernel: p, g, m, v read; p, m, v written
    # bf16 parameters, fp32 master and moments, bf16 gradients: 4*4 + 2*2 + 14*4 + (4 + 2) = 82.
    mixed = PrecisionSpec(param_bytes=2, grad_bytes=2, master_param_bytes=4, moment_bytes=4)
    assert adamw_foreach_step_bytes(s, mixed) == 82


def test_a_gpu_case_without_its_step_seconds_is_refused():
    case = json.loads(json.dumps(CASES["cases"][0]))
    del case["measured"]["seconds"]["step"]
    with pytest.raises(ConfigError, match=r"\$\.cases\[0\]\.measured\.seconds\.step"):
        read_measure_cases({"format": "hp-measure/1", "cases": [case]}, build_registry())


def test_the_runtimes_page_table_is_the_recorded_gpu_cases():
    page = {}
    for line in (ROOT / "docs" / "runtimes.md").read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| `([^`]+)` \|", line)
        if match:
            page[match.group(1)] = line
    rows = load_script("benchmarks/device_fsdp2_steps.py").table_rows()
    assert len(rows) == 16
    for row in rows:
        name = re.match(r"\| `([^`]+)` \|", row).group(1)
        assert page.get(name) == row, "regenerate with: python benchmarks/device_fsdp2_steps.py --table"


def test_sdpa_dispatches_cudnn_on_the_h200():
    """torch 2.11 with its cuDNN 9.19 on an H200: the default dispatch launches cuDNN's kernels and runs at the
    forced cuDNN backend's speed, about twice the flash backend's (the state `attention_kernel: cudnn` prices)."""
    document = json.loads((DATA / "h200_sdpa_attention.json").read_text(encoding="utf-8"))
    assert document["facts"]["cudnn"] == 91900
    rows = {(r["tokens"], r["backend"]): r for r in document["records"]}
    for tokens in (4096, 8192, 16384, 32768):
        default, cudnn, flash = rows[tokens, "default"], rows[tokens, "cudnn"], rows[tokens, "flash"]
        assert all("cudnn" in name or "Memset" in name for name in default["kernels"])
        assert default["forward_backward_seconds"] == pytest.approx(cudnn["forward_backward_seconds"], rel=0.07)
        assert 1.5 < flash["forward_backward_seconds"] / default["forward_backward_seconds"] < 2.0
        assert "error" in rows[tokens, "efficient"]  # GQA: the memory-efficient kernel refuses it
