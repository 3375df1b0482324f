"""Run real FSDP2 training steps of a truncated Hugging Face model on one CUDA GPU: the allocator's peaks and the times.

Optional, like :mod:`hp_plugins.census.fsdp_step` (whose model building, TP-free checkpointing and configuration
it shares): needs torch and transformers, and a CUDA device. What runs (:func:`run_cuda_step`):

* a process group of one rank (NCCL over a local TCP store) and a one-rank device mesh;
* the model: transformers' ``AutoModelForCausalLM.from_config`` of the request's ``config.json`` cut to its
  layers, built in fp32 directly on the GPU (``torch.device("cuda")``: real weights, transformers' own init);
* activation checkpointing per decoder layer as :func:`hp_plugins.census.fsdp_step._apply_ac` states it;
* ``fully_shard`` per decoder layer and on the root, ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``;
  AdamW (foreach or fused); SDPA attention (on an H100/H200, PyTorch's flash or cuDNN kernel);
* ``warmup`` steps, then one step per phase-peak reading (``torch.cuda.reset_peak_memory_stats`` before the
  forward, the backward and the optimizer step, ``torch.cuda.max_memory_allocated`` after each), then ``timed``
  steps whose phases are timed on the host clock around ``torch.cuda.synchronize``.

At one rank FSDP2 runs every copy its sharded path runs (the bf16 all-gather output, the fp32 reduce-scatter
input), with collectives that move nothing over a network: what is measured is a rank's memory and its compute,
not communication. The allocator's figures hold what the fake tracker (:mod:`~hp_plugins.census.fsdp_step`) cannot
see: the kernels' workspaces (cuBLAS's, the attention kernels'), the CUDA caching allocator's rounding (512-byte
blocks) and the real attention kernel's saved tensors.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Mapping

from hp_core.errors import ConfigError
from hp_plugins.census.fsdp_step import _apply_ac, _hf_config, _imports

__all__ = ["run_cuda_step"]

_GIB = 2**30
_PHASES = ("forward", "backward", "optimizer")


def _process_group(torch: Any, port: int) -> str:
    """Start a one-rank process group; returns its backend (NCCL, else the fake group: at one rank every
    collective's output is its input's shape, and the bytes are the same)."""
    import torch.distributed as dist

    try:
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                                device_id=torch.device("cuda", 0))
        return "nccl"
    except Exception:  # noqa: BLE001 - a sandbox without NCCL's transports: measured under the fake group instead
        from torch.testing._internal.distributed.fake_pg import FakeStore

        if dist.is_initialized():
            dist.destroy_process_group()
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
        return "fake"


def _profile_step(torch: Any, step: Any) -> dict[str, Any]:
    """One more step under ``torch.profiler``: its GPU kernels by name (calls, seconds), the 60 longest, and the
    step's kernel time in all against its wall time (what the host leaves idle)."""
    from torch.profiler import ProfilerActivity, profile

    seconds: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": [], "step": []}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(None, seconds)
    rows = []
    for event in prof.key_averages():
        total = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        if total:
            rows.append({"kernel": event.key[:200], "calls": int(event.count), "seconds": total / 1e6})
    rows.sort(key=lambda r: -r["seconds"])
    return {"kernel_seconds": sum(r["seconds"] for r in rows), "kernels_distinct": len(rows),
            "kernel_calls": sum(r["calls"] for r in rows), "wall_seconds": seconds["step"][0], "top": rows[:60]}


def run_cuda_step(
    hf: Mapping[str, Any],
    num_layers: int,
    seq_len: int,
    micro_batch_size: int = 1,
    activation_checkpointing: str | list[str] = "none",
    reshard_after_forward: bool | int = True,
    optimizer: str = "foreach",
    attention: str = "sdpa",
    warmup: int = 2,
    timed: int = 5,
    port: int = 29517,
    profile: bool = False,
) -> dict[str, Any]:
    """Measure one configuration on the first CUDA device; returns a JSON-able mapping (module docstring).

    Raises:
        ConfigError: torch or transformers missing, no CUDA device, or a process group already initialised.
    """
    torch, transformers = _imports()
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if not torch.cuda.is_available():
        raise ConfigError("$.measure", "measuring on the GPU needs a CUDA device; none is visible")
    if dist.is_initialized():
        raise ConfigError("$.measure", "a process group is already initialised in this process; measure in a fresh one")
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    backend = _process_group(torch, port)
    try:
        mesh = init_device_mesh("cuda", (1,), mesh_dim_names=("dp",))
        config = _hf_config(transformers, hf, num_layers, attention)
        with torch.device("cuda"):
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.train()
        _apply_ac(torch, model, activation_checkpointing)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
        fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=optimizer == "foreach",
                                fused=True if optimizer == "fused" else None)
        ids = torch.randint(0, hf["vocab_size"], (micro_batch_size, seq_len), device="cuda")
        parameters = sum(p.numel() for p in model.parameters())

        def step(peaks: dict[str, int] | None, seconds: dict[str, list[float]] | None) -> float:
            marks = [time.perf_counter()]
            loss, value = None, float("nan")
            for name in _PHASES:
                if peaks is not None:
                    torch.cuda.reset_peak_memory_stats()
                if name == "forward":
                    loss = model(input_ids=ids, labels=ids).loss
                elif name == "backward":
                    loss.backward()
                    value = float(loss.detach())  # after backward: the read's sync waits for backward, not forward
                    loss = None
                else:
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                torch.cuda.synchronize()
                marks.append(time.perf_counter())
                if peaks is not None:
                    peaks[name] = int(torch.cuda.max_memory_allocated())
            if seconds is not None:
                for i, name in enumerate(_PHASES):
                    seconds[name].append(marks[i + 1] - marks[i])
                seconds["step"].append(marks[-1] - marks[0])
            return value

        losses = [step(None, None) for _ in range(warmup)]
        torch.cuda.synchronize()
        start_bytes = int(torch.cuda.memory_allocated())
        peaks: dict[str, int] = {}
        losses.append(step(peaks, None))
        end_bytes = int(torch.cuda.memory_allocated())
        seconds: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": [], "step": []}
        for _ in range(timed):
            losses.append(step(None, seconds))
        kernels = _profile_step(torch, step) if profile else None
        stats = torch.cuda.memory_stats()
        peak_phase = max(peaks, key=peaks.get)
        result = {
            "backend": backend,
            "parameters": parameters,
            "peak_bytes": peaks[peak_phase],
            "peak_phase": peak_phase,
            "phase_peak_bytes": peaks,
            "step_start_bytes": start_bytes,
            "step_end_bytes": end_bytes,
            "reserved_peak_bytes": int(stats.get("reserved_bytes.all.peak", 0)),
            "seconds": {name: statistics.median(values) for name, values in seconds.items()},
            "seconds_all": {name: [round(v, 6) for v in values] for name, values in seconds.items()},
            "losses": [round(v, 4) for v in losses],
            "peak_gib": round(peaks[peak_phase] / _GIB, 3),
        }
        if kernels is not None:
            result["kernels"] = kernels
        return result
    finally:
        dist.destroy_process_group()
        torch.cuda.empty_cache()
