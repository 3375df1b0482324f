"""FSDP2 steps measured by PyTorch's own memory tracker, on CPU, or on a GPU, as ``hp validate`` cases.

A document in the format ``hp-measure/1`` lists runs, each an ``hp estimate``
config (runtime ``fsdp2``; dp and tp only) and, optionally, what the tracker
recorded for it::

    format: hp-measure/1
    cases:
      - name: llama3-8b-4l-w8
        config: {model: llama3-8b, num_layers: 4, runtime: fsdp2, parallel: {dp: 8, seq_len: 4096}}
        measure: {head_plan: vocab, optimizer: foreach}      # optional, these are the defaults
        measured: {peak_bytes: ..., phases: {...}, ...}      # optional: recorded; absent: measured now

A case whose ``measured`` states ``method: cuda`` was measured on a GPU
(:mod:`hp_plugins.census.cuda_step`, ``benchmarks/device_fsdp2_steps.py``):
``peak_bytes`` is ``torch.cuda.max_memory_allocated`` and ``seconds.step`` the
median step time, checked against the step-time estimate on the config's
``hardware``. A case the tracker measured is priced without PyTorch's cuBLAS
workspaces, which its fake tensors never allocate (:func:`as_tracker_sees`).

A case without ``measured`` is measured now (:func:`measure_config`, which runs
:func:`hp_plugins.census.fsdp_step.run_step`: the ``census`` extra) and the
result is cached on disk (``$HP_MEASURE_CACHE``, else ``~/.cache/hp-planner/measure``;
one JSON file per request and torch/transformers versions, written atomically).
``hp validate --measure CONFIG`` measures one estimate config this way.

What a config maps to: the world size ``dp * tp``, the TP degree, the body
layers of the (truncated) model, the sequence length and micro-batch size,
``reshard_after_forward`` (the runtime's default where the config states none), and activation checkpointing from ``recompute``,
per body layer: nothing, ``full`` (``checkpoint_wrapper``; on every k-th layer
it is torchtitan's ``selective_ac_option = k``) or the switches of the fsdp2
runtime's ``op_sac`` module (torchtitan's per-op policy). A layout with pp, cp
or ep above 1, another runtime or another recompute is refused naming the field.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping

import attrs

from hp_core.errors import ConfigError
from hp_core.io.files import atomic_write
from hp_core.markers import hookimpl
from hp_core.types import CaseFormat

__all__ = ["FORMAT", "as_tracker_sees", "estimated_categories", "hp_case_formats", "measure_config", "measure_request",
           "measured_categories", "read_measure_cases", "request_of"]

FORMAT = "hp-measure/1"
# Part of every cache key: raised whenever what run_step measures changes, so older entries are not read.
METHOD_VERSION = 1
_MEASURE_KEYS = {"optimizer": ("foreach", "for-loop", "fused")}
# The fsdp2 runtime options the tracker's run honours, and the values it runs (hp_plugins/runtimes/fsdp2.py).
_RUNS = {
    "norm_implementation": ("transformers",),
    "rope_implementation": ("rotate_half",),  # transformers' apply_rotary_pos_emb
    # SDPA's dispatch: on a GPU with torch 2.11's cuDNN (> 9.15) on Hopper and Blackwell it runs cuDNN's kernel
    # (tests/plugins/data/h200_sdpa_attention.json); its saved output and fp32 statistics are the flash kernel's.
    "attention_kernel": ("sdpa", "cudnn"),
    "loss_implementation": ("upcast",),
    "optimizer_implementation": ("foreach", "fused"),
    "zero_grad_set_to_none": (True,),
    "hsdp_replicate": (1,),
    "cpu_offload": (False,),
    "tp_head_plan": ("vocab_parallel", "replicated"),
    "loss_parallel": (False,),
    "tp_plan": ("custom", "vocab_gathered", "replicated_head"),
}


def _cache_dir() -> Path:
    found = os.environ.get("HP_MEASURE_CACHE")
    return Path(found) if found else Path.home() / ".cache" / "hp-planner" / "measure"


def request_of(config: Mapping[str, Any], registry: Any, where: str = "$", measure: Mapping[str, Any] | None = None) -> dict:
    """The tracker request of an ``hp estimate`` config (module docstring): a JSON-able mapping."""
    from hp_core.io.convert import ConfigFile, structure
    from hp_core.io.job import resolve_job
    from hp_core.models import preset_config

    from hp_core.runtime_options import runtime_name

    job = resolve_job(structure(dict(config), ConfigFile, registry), registry)
    if runtime_name(job.runtime) != "fsdp2":
        raise ConfigError(f"{where}.config.runtime", f"the tracker measures the fsdp2 runtime, not {runtime_name(job.runtime)!r}")
    options = dict(getattr(job.runtime, "option_values", {}) or {})
    for name, value in options.items():
        if name not in _RUNS or value not in _RUNS[name]:
            raise ConfigError(f"{where}.config.runtime.options.{name}",
                              f"the tracker runs transformers' modules with FSDP2 as {_RUNS.get(name, 'its defaults')}; "
                              f"{value!r} is not measured")
    recipe = job.precision.recipe if job.precision is not None else "bf16"
    if registry.precision_recipe(recipe).low_precision:  # the tracker runs MixedPrecisionPolicy(bf16, fp32): none of a
        # recipe's quantized GEMMs or copies
        raise ConfigError(f"{where}.config.precision.recipe", f"the tracker measures bf16 steps only, not {recipe!r}; "
                                                              "drop the recipe to measure")
    p = job.parallel
    for name in ("pp", "cp", "ep"):
        if getattr(p, name) != 1:
            raise ConfigError(f"{where}.config.parallel.{name}", "the tracker measures dp and tp layouts only; set it to 1")
    if p.sp:
        raise ConfigError(f"{where}.config.parallel.sp", "the tracker's TP plan has no sequence parallelism; set sp: false")
    hf = preset_config(job.model.name, registry)
    if hf is None:
        source = Path(str(job.model.source))
        if source.suffix != ".json" or not source.is_file():
            raise ConfigError(f"{where}.config.model", "the tracker builds the model from a preset or a config.json file")
        hf = json.loads(source.read_text(encoding="utf-8"))
    body = registry.kinds_placed("body")
    layers = sum(group.count for group in job.model.layers if group.kind in body)
    ac = _ac_of(job, registry.runtime("fsdp2"), layers, where)
    plan = options.get("tp_plan", "custom")
    replicated = options.get("tp_head_plan") == "replicated" or plan == "replicated_head"
    if p.tp > 1 and not replicated and plan != "vocab_gathered" and options.get("loss_parallel", True):
        raise ConfigError(f"{where}.config.runtime.options.loss_parallel",
                          "the tracker gathers the logits over TP (no loss parallelism): set loss_parallel: false "
                          "or tp_plan: vocab_gathered")
    extra = dict(measure or {})
    for key, value in extra.items():
        if key not in _MEASURE_KEYS:
            raise ConfigError(f"{where}.measure", f"unknown key {key!r}; known: {sorted(_MEASURE_KEYS)}")
        if value not in _MEASURE_KEYS[key]:
            raise ConfigError(f"{where}.measure.{key}", f"one of {list(_MEASURE_KEYS[key])}, not {value!r}")
    return {
        "model": job.model.name,
        "hf": dict(hf),
        "num_layers": layers,
        "seq_len": p.seq_len,
        "micro_batch_size": p.micro_batch_size,
        "world": p.dp * p.tp,
        "tp": p.tp,
        "head_plan": "replicated" if replicated else "vocab",
        "activation_checkpointing": ac,
        "reshard_after_forward": registry.runtime(job.runtime).reshards_after_forward(p.reshard_after_forward, p.pp),
        "optimizer": extra.get("optimizer", options.get("optimizer_implementation", "foreach")),
    }


def _ac_of(job: Any, runtime: Any, layers: int, where: str) -> str | list[str]:
    """Each body layer's checkpointing as the tracker runs it: ``none``, ``full``, or ``op_sac`` for the switches of
    the fsdp2 runtime's ``op_sac`` module (torchtitan's per-op policy); one string when every layer has the same."""
    recompute = job.recompute
    if recompute is None:
        return "none"
    op = frozenset((runtime.recompute_modules or {}).get("op_sac", ()))
    found = []
    for i in range(layers):
        setting = recompute.setting_of(i)
        if setting.offload:
            raise ConfigError(f"{where}.config.recompute", "the tracker runs no activation offload")
        if setting.mode in ("none", "full"):
            found.append(setting.mode)
        elif setting.mode == "switches" and setting.switches == op:
            found.append("op_sac")
        else:
            raise ConfigError(f"{where}.config.recompute", f"the tracker runs none, full or the op_sac switches "
                              f"{sorted(op)} (torchtitan's per-op policy) per layer, not {setting.describe()!r}")
    return found[0] if len(set(found)) == 1 else found


def measure_request(request: Mapping[str, Any], cache: bool = True) -> dict:
    """The tracker's result for *request* (:func:`request_of`), from the cache where it was measured before."""
    from hp_plugins.census.fsdp_step import _imports, run_step

    torch, transformers = _imports()
    versions = {"torch": str(torch.__version__), "transformers": str(transformers.__version__)}
    key = hashlib.sha256(json.dumps([dict(request), versions, METHOD_VERSION], sort_keys=True).encode()).hexdigest()[:24]
    path = _cache_dir() / f"fsdp2-{key}.json"
    if cache and path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            pass  # a damaged entry is measured again and replaced
    args = {k: v for k, v in request.items() if k not in ("model",)}
    result = run_step(**args)
    result["date"] = datetime.date.today().isoformat()
    if cache:
        text = json.dumps(result, indent=1, sort_keys=True)
        atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"), ".json", flag="$HP_MEASURE_CACHE")
    return result


def measure_config(config: Mapping[str, Any], registry: Any, measure: Mapping[str, Any] | None = None) -> dict:
    """Measure an ``hp estimate`` config's step with the tracker (cached)."""
    return measure_request(request_of(config, registry, measure=measure))


def _source(measured: Mapping[str, Any]) -> str:
    versions = measured.get("versions", {})
    if measured.get("method") == "cuda":
        return (f"torch.cuda.max_memory_allocated of real FSDP2 steps on {measured.get('device', 'a GPU')}, "
                f"torch {versions.get('torch', '?')}, transformers {versions.get('transformers', '?')}, "
                f"{measured.get('date', 'date unknown')}")
    return (f"FSDPMemTracker, fake process group, torch {versions.get('torch', '?')}, "
            f"transformers {versions.get('transformers', '?')}, {measured.get('date', 'date unknown')}")


def _steps(measured: Mapping[str, Any], where: str) -> tuple:
    """A GPU-measured case's step time (``method: cuda``, :mod:`hp_plugins.census.cuda_step`: the median of its
    timed steps, one micro-batch each); the tracker's cases time nothing."""
    from hp_core.io.validate import MeasuredStep

    if measured.get("method") != "cuda":
        return ()
    seconds = measured.get("seconds", {}).get("step") if isinstance(measured.get("seconds"), dict) else None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ConfigError(f"{where}.measured.seconds.step", "a GPU-measured case states its step's median seconds (a positive number)")
    return (MeasuredStep(micro_batches=1, seconds=float(seconds)),)


def is_measure_document(document: Any) -> bool:
    return isinstance(document, dict) and document.get("format") == FORMAT


def read_measure_cases(document: Mapping[str, Any], registry: Any) -> list:
    """The cases of an ``hp-measure/1`` document; those without ``measured`` are measured now."""
    from hp_core.io.convert import ConfigFile, structure
    from hp_core.io.job import resolve_job
    from hp_core.io.cases2 import in_case
    from hp_core.io.validate import MeasuredCase

    unknown = sorted(set(document) - {"format", "cases"})
    if unknown:
        raise ConfigError("$", f"unknown keys {unknown}")
    cases = document.get("cases")
    if not isinstance(cases, list) or not cases:
        raise ConfigError("$.cases", "list the cases (each: name, config, optional measure and measured)")
    found = []
    for i, case in enumerate(cases):
        where = f"$.cases[{i}]"
        if not isinstance(case, dict) or not isinstance(case.get("name"), str) or not isinstance(case.get("config"), dict):
            raise ConfigError(where, "a case states name and config (an hp estimate config)")
        stray = sorted(set(case) - {"name", "config", "measure", "measured"})
        if stray:
            raise ConfigError(where, f"unknown keys {stray}")
        measured = case.get("measured")
        if measured is None:
            measured = measure_config(case["config"], registry, case.get("measure"))
        elif not isinstance(measured.get("peak_bytes"), int) or measured["peak_bytes"] < 1:
            raise ConfigError(f"{where}.measured.peak_bytes", "a recorded case states its peak in bytes (a positive integer)")
        try:
            job = resolve_job(structure(dict(case["config"]), ConfigFile, registry, root=f"{where}.config"), registry)
        except ConfigError as exc:
            raise in_case(exc, where) if not exc.path.startswith(where) else exc from None
        if measured.get("method") != "cuda":  # a GPU-measured case holds the workspaces the tracker cannot see
            job = as_tracker_sees(job, registry)
        found.append(MeasuredCase(name=case["name"], model=job.model, parallel=job.parallel, runtime=job.runtime,
                                  stage_peak_bytes=(measured["peak_bytes"],), source=_source(measured), job=job, where=where,
                                  steps=_steps(measured, where), steps_where=f"{where}.measured.seconds.step",
                                  has_config=True))
    return found


def as_tracker_sees(job: Any, registry: Any) -> Any:
    """*job* (a resolved ``Job``) as the tracker measures it: the tracker runs on fake tensors, so no GEMM reaches
    cuBLAS and it sees none of PyTorch's cuBLAS workspaces (:mod:`hp_core.blas_workspaces`); the job's runtime
    without them."""
    runtime = registry.runtime(job.runtime) if isinstance(job.runtime, str) else job.runtime
    return attrs.evolve(job, runtime=attrs.evolve(runtime, blas_workspaces=None))


def measured_categories(phase: Mapping[str, int]) -> dict[str, int]:
    """One phase of the tracker's categories as hp's breakdown groups them (docs/runtimes.md, fsdp2)."""
    return {
        "parameters": phase["sharded_param"],
        "gradients": phase["sharded_grad"] + phase["unsharded_grad"],
        "optimizer_states": phase["optimizer_state"],
        "gathered": phase["unsharded_param"] + phase["all_gather"] + phase["reduce_scatter"],
        "activations": phase["activation"] + phase["temp"] + phase["inputs"] + phase["buffer"],
    }


def estimated_categories(memory: Any, point: str = "forward") -> dict[str, int]:
    """hp's breakdown (a stage's ``memory``) as the tracker's categories group it: at the optimizer step the
    tracker files every tensor allocated inside ``optimizer.step`` (foreach AdamW's temporary, hp's working set
    there) as OptState (torch/distributed/_tools/fsdp2_mem_tracker.py: allocations while ``_in_opt`` is set)."""
    step_temporary = memory.working_set_bytes if point == "optimizer" else 0
    return {
        "parameters": memory.parameters_bytes,
        "gradients": memory.gradients_bytes,
        "optimizer_states": memory.optimizer_states_bytes + memory.master_parameters_bytes + step_temporary,
        "gathered": memory.communication_buffers_bytes,
        "activations": memory.activations_bytes + memory.working_set_bytes - step_temporary,
    }


@hookimpl
def hp_case_formats():
    yield CaseFormat(name="fsdp2-tracker", accepts=is_measure_document, read=read_measure_cases,
                     description=f"{FORMAT}: FSDP2 steps measured by PyTorch's FSDPMemTracker on CPU (census extra)")
