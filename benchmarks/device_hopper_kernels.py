"""Measure, on one Hopper GPU (an H200 or H100), the kernel figures hp states for Hopper without a measurement of its own.

Run on the device machine (about three minutes on an H200; PyTorch alone, nothing to install):

    PYTHONUNBUFFERED=1 python3 benchmarks/device_hopper_kernels.py --out "$OUT/hopper_kernels.json"

(``--backward`` and ``--torchao`` each write only their run's records, into the file ``--out`` names; ``--torchao``
has not run on a device yet: docs/precision.md says what its records would settle), and on any machine, to check the script itself (tiny shapes on the CPU; its times mean nothing):

    python benchmarks/device_hopper_kernels.py --smoke --out /tmp/hopper_kernels.json

What it times, each call with CUDA events after warm-up calls, the median of the timed calls:

* **Dense GEMMs, bf16 and FP8.** ``torch.mm`` in bf16 and ``torch._scaled_mm`` on e4m3 operands with per-tensor scales
  (``use_fast_accum`` on, as Transformer Engine runs the forward GEMM, and off, as it runs the two backward GEMMs:
  ``pytorch/module/base.py`` ``_2X_ACC_FPROP = False``, ``_2X_ACC_DGRAD = _2X_ACC_WGRAD = True``) and with row-wise
  scales (torchao's ``rowwise`` recipe), at the per-rank GEMMs of Llama-3-8B and Llama-3-70B layers (8,192 tokens;
  TP 1 to 8) in each pass's layout (fprop ``X W^T``, dgrad ``dY W``, wgrad ``dY^T X``; FP8 operands in the
  row-major by column-major form cuBLASLt takes them in on Hopper, so the timed call is the GEMM alone). hp prices a
  Hopper FP8 GEMM at its bf16 time over one speedup per pass (``hp_plugins/runtimes/gemm_speedups.py``: Transformer
  Engine's tutorial on an H200 NVL and stas00's MAMF sweep on an H100); these are the speedups at training shapes.
* **Grouped (expert) GEMMs in bf16.** ``torch._grouped_mm`` (CUTLASS's grouped kernel on sm90) and one ``torch.mm``
  per expert (the per-expert cuBLAS path Transformer Engine's ``GroupedLinear`` runs on Hopper), at the experts' FC1
  and FC2 of Qwen3-30B-A3B, GPT-OSS-120B and Mixtral-8x7B, 2 to 64 local experts of 512 to 16,384 rows: the figure
  hp's Hopper profile takes from SimuMax unmeasured (``grouped_matmul`` 0.60, ``timing_profiles.py``). The per-expert
  loop's host time per call is recorded beside its GPU time.
* **torchao's float8 pieces** (``--torchao``, a third run): torchtitan's separate q/k/v GEMMs and torchao's casts
  and rescale, timed eager and compiled (:func:`torchao_records`).
* **Host time per launch.** 2,000 launches of a small elementwise kernel, timed on the CPU clock without a
  synchronisation inside the loop (docs/time.md, "Overlap and host time").

The output is one JSON document: the device (its name, multiprocessors, memory, the clocks ``nvidia-smi`` reads
where it answers), the torch and CUDA versions, and one record per timed call (shape, seconds, FLOP/s). Nothing in hp
reads it yet: a session that runs it copies the file into ``tests/plugins/data/`` with its provenance and states what
it changes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# (name, hidden, attention width, key/value width, FFN width): Llama-3-8B and -70B (Meta's configs).
DENSE_MODELS = (("llama3-8b", 4096, 4096, 1024, 14336), ("llama3-70b", 8192, 8192, 1024, 28672))
TOKENS = 8192
TP_DEGREES = (1, 2, 4, 8)
# (name, hidden, expert width, gated): the routed experts of Qwen3-30B-A3B, GPT-OSS-120B and Mixtral-8x7B.
EXPERT_MODELS = (("qwen3-30b-a3b", 2048, 768, True), ("gpt-oss-120b", 2880, 2880, True), ("mixtral-8x7b", 4096, 14336, True))
LOCAL_EXPERTS = (2, 4, 8, 16, 32, 64)
ROWS_PER_EXPERT = (512, 2048, 8192, 16384)
# Grouped calls moving more than this many bytes of operands are skipped (a few GiB: well past the L2, inside memory).
GROUPED_BYTES_LIMIT = 6 * 2**30


def layer_gemms(hidden: int, attention: int, kv: int, ffn: int, tp: int) -> list[tuple[str, int, int]]:
    """``(linear, fan_out, fan_in)`` of one decoder layer's linears on a rank of *tp* (Megatron's split: QKV and FC1
    by output, the output projection and FC2 by input)."""
    return [("qkv", (attention + 2 * kv) // tp, hidden), ("proj", hidden, attention // tp),
            ("fc1", 2 * ffn // tp, hidden), ("fc2", hidden, ffn // tp)]


def pass_shape(pass_name: str, tokens: int, fan_out: int, fan_in: int) -> tuple[int, int, int]:
    """``(m, n, k)`` of a linear's GEMM in one pass: fprop ``X W^T`` (tokens x fan_out over fan_in), dgrad ``dY W``
    (tokens x fan_in over fan_out), wgrad ``dY^T X`` (fan_out x fan_in over tokens)."""
    return {"fprop": (tokens, fan_out, fan_in), "dgrad": (tokens, fan_in, fan_out),
            "wgrad": (fan_out, fan_in, tokens)}[pass_name]


class Timer:
    """Median seconds of a call: CUDA events on a GPU, the CPU clock otherwise (the smoke run)."""

    def __init__(self, torch, device: str, warmup: int, repeats: int) -> None:
        self.torch, self.device, self.warmup, self.repeats = torch, device, warmup, repeats

    def __call__(self, fn) -> float:
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        times = []
        for _ in range(self.repeats):
            if self.device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                begin = time.perf_counter()
                fn()
                times.append(time.perf_counter() - begin)
        return statistics.median(times)


def dense_records(torch, timer: Timer, device: str, smoke: bool) -> list[dict]:
    """bf16 and FP8 GEMMs of every pass of every linear of the dense models' layers, per TP degree."""
    e4m3 = torch.float8_e4m3fn
    records = []
    shapes = set()
    for model, hidden, attention, kv, ffn in DENSE_MODELS:
        for tp in TP_DEGREES:
            for linear, fan_out, fan_in in layer_gemms(hidden, attention, kv, ffn, tp):
                for pass_name in ("fprop", "dgrad", "wgrad"):
                    m, n, k = pass_shape(pass_name, TOKENS, fan_out, fan_in)
                    if smoke:
                        m, n, k = max(16, m // 256), max(16, n // 256), max(16, k // 256)
                    key = (m, n, k)
                    where = {"model": model, "tp": tp, "linear": linear, "pass": pass_name}
                    if key in shapes:  # measured already under another model or pass: recorded once per shape
                        records.append({"kind": "dense_same_shape", **where, "m": m, "n": n, "k": k})
                        continue
                    shapes.add(key)
                    a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
                    b = torch.randn(n, k, device=device, dtype=torch.bfloat16)  # (n, k) row-major: b.t() column-major
                    flops = 2.0 * m * n * k
                    row = {"kind": "dense", **where, "m": m, "n": n, "k": k, "flops": flops}
                    row["bf16_seconds"] = timer(lambda: torch.mm(a, b.t()))
                    a8, b8 = a.to(e4m3), b.to(e4m3)
                    one = torch.tensor(1.0, device=device)
                    for fast in (True, False):
                        row[f"fp8_tensorwise_{'fast' if fast else 'split'}_accum_seconds"] = timer(
                            lambda fast=fast: torch._scaled_mm(a8, b8.t(), one, one, out_dtype=torch.bfloat16,
                                                               use_fast_accum=fast))
                    scale_a = torch.ones(m, 1, device=device)
                    scale_b = torch.ones(1, n, device=device)
                    try:
                        row["fp8_rowwise_seconds"] = timer(
                            lambda: torch._scaled_mm(a8, b8.t(), scale_a, scale_b, out_dtype=torch.bfloat16))
                    except RuntimeError as error:  # a build without row-wise scaling on this device
                        row["fp8_rowwise_error"] = str(error).splitlines()[0][:200]
                    records.append(row)
                    del a, b, a8, b8
    return records


def expert_shapes(smoke: bool):
    """Each expert GEMM the grouped records time: ``(where, operand_bytes)``, *where* naming the model, the linear
    (FC1, FC2), the local experts, the rows per expert and the linear's fan-out and fan-in (tiny under *smoke*)."""
    experts_list = LOCAL_EXPERTS[:2] if smoke else LOCAL_EXPERTS
    rows_list = (32,) if smoke else ROWS_PER_EXPERT
    for model, hidden, width, gated in EXPERT_MODELS:
        if smoke:
            hidden, width = max(16, hidden // 128), max(16, width // 128)
        for linear, fan_out, fan_in in (("fc1", (2 if gated else 1) * width, hidden), ("fc2", hidden, width)):
            for experts in experts_list:
                for rows in rows_list:
                    operand_bytes = 2 * (experts * rows * (fan_in + fan_out) + experts * fan_out * fan_in)
                    yield ({"model": model, "linear": linear, "experts": experts, "rows_per_expert": rows,
                            "fan_out": fan_out, "fan_in": fan_in}, operand_bytes)


def grouped_records(torch, timer: Timer, device: str, smoke: bool) -> list[dict]:
    """bf16 grouped GEMMs of the experts' FC1 and FC2: torch._grouped_mm and one torch.mm per expert."""
    records = []
    for where, operand_bytes in expert_shapes(smoke):
        experts, rows, fan_out, fan_in = (where[k] for k in ("experts", "rows_per_expert", "fan_out", "fan_in"))
        if operand_bytes > GROUPED_BYTES_LIMIT:
            records.append({"kind": "grouped_skipped", **where, "operand_bytes": operand_bytes})
            continue
        x = torch.randn(experts * rows, fan_in, device=device, dtype=torch.bfloat16)
        w = torch.randn(experts, fan_out, fan_in, device=device, dtype=torch.bfloat16)
        offs = torch.arange(1, experts + 1, device=device, dtype=torch.int32) * rows
        flops = 2.0 * experts * rows * fan_out * fan_in
        row = {"kind": "grouped", **where, "flops": flops}
        wt = w.transpose(-2, -1)
        try:
            row["grouped_mm_seconds"] = timer(lambda: torch._grouped_mm(x, wt, offs=offs))
        except RuntimeError as error:
            row["grouped_mm_error"] = str(error).splitlines()[0][:200]
        chunks = x.split(rows)

        def loop():
            return [torch.mm(chunk, w[e].t()) for e, chunk in enumerate(chunks)]

        row["per_expert_mm_seconds"] = timer(loop)
        if device == "cuda":  # the loop's host time: its launches timed on the CPU clock, one sync after
            torch.cuda.synchronize()
            begin = time.perf_counter()
            for _ in range(5):
                loop()
            row["per_expert_mm_host_seconds"] = (time.perf_counter() - begin) / 5
            torch.cuda.synchronize()
        records.append(row)
        del x, w
    return records


def backward_records(torch, timer: Timer, device: str, smoke: bool) -> list[dict]:
    """The second run's additions (``--backward``): the experts' grouped GEMMs in their two backward passes
    (``torch._grouped_mm``: dgrad ``dY_e W_e`` per expert; wgrad ``dY_e^T X_e``, the groups along the reduced
    dimension), and row-wise FP8 with fast accumulation (torchao's forward) beside split accumulation, at the
    dense layers' forward shapes."""
    records = []
    for where, operand_bytes in expert_shapes(smoke):
        experts, rows, fan_out, fan_in = (where[k] for k in ("experts", "rows_per_expert", "fan_out", "fan_in"))
        if operand_bytes > GROUPED_BYTES_LIMIT:
            continue
        x = torch.randn(experts * rows, fan_in, device=device, dtype=torch.bfloat16)
        dy = torch.randn(experts * rows, fan_out, device=device, dtype=torch.bfloat16)
        w = torch.randn(experts, fan_out, fan_in, device=device, dtype=torch.bfloat16)
        offs = torch.arange(1, experts + 1, device=device, dtype=torch.int32) * rows
        row = {"kind": "grouped_backward", **where, "flops": 2.0 * experts * rows * fan_out * fan_in}
        try:
            row["dgrad_grouped_mm_seconds"] = timer(lambda: torch._grouped_mm(dy, w, offs=offs))
        except RuntimeError as error:
            row["dgrad_error"] = str(error).splitlines()[0][:200]
        # dY^T: the transposed view autograd hands it (column-major), else a row-major copy
        for form, dyt in (("view", dy.t()), ("contiguous", None)):
            try:
                dyt = dy.t().contiguous() if dyt is None else dyt
                row["wgrad_grouped_mm_seconds"] = timer(lambda: torch._grouped_mm(dyt, x, offs=offs))
                row["wgrad_operand"] = form
                row.pop("wgrad_error", None)
                break
            except RuntimeError as error:
                row["wgrad_error"] = str(error).splitlines()[0][:200]
        records.append(row)
        del x, dy, w, dyt
    e4m3 = torch.float8_e4m3fn
    shapes = set()
    for model, hidden, attention, kv, ffn in DENSE_MODELS:
        for tp in TP_DEGREES:
            for linear, fan_out, fan_in in layer_gemms(hidden, attention, kv, ffn, tp):
                m, n, k = pass_shape("fprop", TOKENS, fan_out, fan_in)
                if smoke:
                    m, n, k = max(16, m // 256), max(16, n // 256), max(16, k // 256)
                if (m, n, k) in shapes:
                    continue
                shapes.add((m, n, k))
                a8 = torch.randn(m, k, device=device).to(e4m3)
                b8 = torch.randn(n, k, device=device).to(e4m3)
                scale_a, scale_b = torch.ones(m, 1, device=device), torch.ones(1, n, device=device)
                row = {"kind": "rowwise_fast", "model": model, "tp": tp, "linear": linear, "m": m, "n": n, "k": k,
                       "flops": 2.0 * m * n * k}
                try:
                    row["fp8_rowwise_fast_accum_seconds"] = timer(lambda: torch._scaled_mm(
                        a8, b8.t(), scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=True))
                except RuntimeError as error:
                    row["error"] = str(error).splitlines()[0][:200]
                records.append(row)
                del a8, b8
    return records


# torchtitan's rows run micro-batches of 1 to 16 sequences of 8,192 tokens (docs/precision.md, torchtitan's Float8 rows).
TORCHAO_TOKENS = (8192, 131072)
# (rows, columns) of the bf16 tensors a float8 linear casts: Llama-3 layer inputs (hidden 4,096 and 8,192), the
# 8B's FFN width, and output gradients of a narrow projection (1,024: the key/value width at TP 1).
CAST_SHAPES = ((8192, 4096), (8192, 8192), (8192, 14336), (8192, 1024), (65536, 4096), (65536, 8192))


def separate_qkv_gemms(hidden: int, attention: int, kv: int, tp: int) -> list[tuple[str, int, int]]:
    """``(linear, fan_out, fan_in)`` of the attention's projections as torchtitan's Llama builds them: wq, wk, wv
    apart (torchtitan/models/llama3/model.py Attention), each column-parallel over *tp*."""
    return [("wq", attention // tp, hidden), ("wk", kv // tp, hidden), ("wv", kv // tp, hidden)]


def torchao_records(torch, timer: Timer, device: str, smoke: bool) -> list[dict]:
    """The third run's records (``--torchao``), what hp's torchao float8 pricing states without a measurement:

    * ``separate_qkv``: the GEMMs of torchtitan's separate wq / wk / wv at TP 1-8 and 8,192 or 131,072 tokens, every
      pass, in bf16, per-tensor FP8 (fast and split accumulation) and row-wise FP8 with fast accumulation: the
      narrow key and value projections (128 columns at TP 8) that torchtitan issue #1207 found slower in float8;
    * ``cast``: torchao's float8 casts as eager PyTorch ops (``float8_utils.tensor_to_amax`` / ``to_fp8_saturated``:
      the amax, the scale, the scaled and clamped cast to e4m3) and as one ``torch.compile``-d function, per tensor
      and row-wise along each axis, and the backward GEMMs' output rescale (``float8_ops.addmm_float8_unwrapped``:
      ``output *= a_scale * b_scale``), with the bytes a memory-bound pass would move (``bytes``: hp prices a cast
      as two reads of the bf16 tensor and a write of its float8 copy, a rescale as a read and a write);
      ``compiled_error`` where the build cannot compile.
    """
    e4m3 = torch.float8_e4m3fn
    records = []
    shapes = set()
    for model, hidden, attention, kv, _ in DENSE_MODELS:
        for tp in TP_DEGREES:
            for tokens in TORCHAO_TOKENS:
                for linear, fan_out, fan_in in separate_qkv_gemms(hidden, attention, kv, tp):
                    for pass_name in ("fprop", "dgrad", "wgrad"):
                        m, n, k = pass_shape(pass_name, tokens, fan_out, fan_in)
                        if smoke:
                            m, n, k = max(16, m // 256), max(16, n // 256), max(16, k // 256)
                        row = {"kind": "separate_qkv", "model": model, "tp": tp, "tokens": tokens, "linear": linear,
                               "pass": pass_name, "m": m, "n": n, "k": k, "flops": 2.0 * m * n * k}
                        if (m, n, k) in shapes:
                            row["kind"] = "separate_qkv_same_shape"
                            records.append(row)
                            continue
                        shapes.add((m, n, k))
                        a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
                        b = torch.randn(n, k, device=device, dtype=torch.bfloat16)
                        row["bf16_seconds"] = timer(lambda: torch.mm(a, b.t()))
                        a8, b8 = a.to(e4m3), b.to(e4m3)
                        one = torch.tensor(1.0, device=device)
                        try:
                            for fast in (True, False):
                                row[f"fp8_tensorwise_{'fast' if fast else 'split'}_accum_seconds"] = timer(
                                    lambda fast=fast: torch._scaled_mm(a8, b8.t(), one, one, out_dtype=torch.bfloat16,
                                                                       use_fast_accum=fast))
                            scale_a, scale_b = torch.ones(m, 1, device=device), torch.ones(1, n, device=device)
                            row["fp8_rowwise_fast_accum_seconds"] = timer(lambda: torch._scaled_mm(
                                a8, b8.t(), scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=True))
                        except RuntimeError as error:
                            row["fp8_error"] = str(error).splitlines()[0][:200]
                        records.append(row)
                        del a, b, a8, b8
    finfo = torch.finfo(e4m3).max

    def cast(x, dim):
        amax = x.abs().amax() if dim is None else x.abs().amax(dim=dim, keepdim=True)
        scale = finfo / amax.float().clamp(min=1e-12)
        return (x.float() * scale).clamp(-finfo, finfo).to(e4m3), scale

    def rescale(out, a_scale, b_scale):
        out *= a_scale * b_scale
        return out

    # One static graph per shape and axis, none falling back to eager at dynamo's recompile limit.
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 256)
    try:
        compiled_cast, compiled_rescale = torch.compile(cast, dynamic=False), torch.compile(rescale, dynamic=False)
    except Exception as error:  # a build without a working compiler
        compiled_cast = compiled_rescale = None
        compile_error = str(error).splitlines()[0][:200]
    for rows, cols in CAST_SHAPES:
        if smoke:
            rows, cols = max(16, rows // 256), max(16, cols // 256)
        x = torch.randn(rows, cols, device=device, dtype=torch.bfloat16)
        for scaling, dim in (("tensorwise", None), ("rowwise_dim_last", -1), ("rowwise_dim0", 0)):
            row = {"kind": "cast", "scaling": scaling, "rows": rows, "cols": cols, "bytes": rows * cols * (2 + 2 + 1)}
            row["eager_seconds"] = timer(lambda dim=dim: cast(x, dim))
            if compiled_cast is None:
                row["compiled_error"] = compile_error
            else:
                try:
                    row["compiled_seconds"] = timer(lambda dim=dim: compiled_cast(x, dim))
                except Exception as error:
                    row["compiled_error"] = str(error).splitlines()[0][:200]
            records.append(row)
        # Unit scales: the pass moves the same bytes, and the tensor rescaled in place again and again stays finite.
        a_scale = torch.ones(rows, 1, device=device)
        b_scale = torch.ones(1, cols, device=device)
        row = {"kind": "rescale", "rows": rows, "cols": cols, "bytes": rows * cols * (2 + 2)}
        row["eager_seconds"] = timer(lambda: rescale(x, a_scale, b_scale))
        if compiled_rescale is None:
            row["compiled_error"] = compile_error
        else:
            try:
                row["compiled_seconds"] = timer(lambda: compiled_rescale(x, a_scale, b_scale))
            except Exception as error:
                row["compiled_error"] = str(error).splitlines()[0][:200]
        records.append(row)
        del x
    return records


def host_records(torch, device: str, smoke: bool) -> list[dict]:
    """CPU time per launch of a small elementwise kernel (no synchronisation inside the timed loop)."""
    x = torch.ones(1024, device=device)
    launches = 200 if smoke else 2000
    for _ in range(100):
        x.add_(1.0)
    if device == "cuda":
        torch.cuda.synchronize()
    begin = time.perf_counter()
    for _ in range(launches):
        x.add_(1.0)
    host = (time.perf_counter() - begin) / launches
    if device == "cuda":
        torch.cuda.synchronize()
    return [{"kind": "host_launch", "op": "add_ on 1,024 fp32 elements", "launches": launches, "seconds_per_launch": host}]


def device_facts(torch, device: str) -> dict:
    """What the run ran on: the device, the versions, the clocks nvidia-smi reads (where it answers)."""
    facts = {"torch": torch.__version__, "python": platform.python_version(), "device": device}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        facts.update(name=props.name, multiprocessors=props.multi_processor_count, memory_bytes=props.total_memory,
                     capability=f"{props.major}.{props.minor}", cuda=torch.version.cuda)
        if shutil.which("nvidia-smi"):
            query = "clocks.sm,clocks.max.sm,clocks.mem,power.limit,driver_version"
            done = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                                  capture_output=True, text=True, check=False)
            facts["nvidia_smi"] = {"query": query, "answer": done.stdout.strip() or done.stderr.strip()}
    return facts


def write_atomically(path: Path, document: dict) -> None:
    """The JSON document at *path*, written to a temporary file beside it first: nothing half-written is left."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump(document, out, indent=1)
        out.write("\n")
    os.replace(temporary, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU: checks the script, times nothing")
    parser.add_argument("--backward", action="store_true",
                        help="the second run's records only: grouped GEMMs' backward passes, row-wise FP8 fast accumulation")
    parser.add_argument("--torchao", action="store_true",
                        help="the third run's records only: torchtitan's separate q/k/v GEMMs, torchao's float8 casts "
                             "and rescale (torchao_records)")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("device_hopper_kernels.py: needs PyTorch (the census extra, or the device machine's python3)",
              file=sys.stderr)
        return 2
    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("device_hopper_kernels.py: no CUDA device; run on the device machine, or --smoke here", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    timer = Timer(torch, device, warmup=1 if args.smoke else 3, repeats=2 if args.smoke else 10)
    begin = time.perf_counter()
    document = {"what": __doc__.splitlines()[0], "smoke": args.smoke, "facts": device_facts(torch, device)}
    for name, wanted, records in (("torchao", args.torchao, torchao_records), ("backward", args.backward, backward_records)):
        if wanted:  # a single run of its own records
            document[name] = records(torch, timer, device, args.smoke)
            document["seconds"] = time.perf_counter() - begin
            write_atomically(args.out, document)
            print(f"{name}: {len(document[name])} records; wrote {args.out} in {document['seconds']:.0f} s", flush=True)
            return 0
    document["dense"] = dense_records(torch, timer, device, args.smoke)
    print(f"dense: {len(document['dense'])} records, {time.perf_counter() - begin:.0f} s", flush=True)
    write_atomically(args.out, document)  # what is done so far survives a run cut short
    document["grouped"] = grouped_records(torch, timer, device, args.smoke)
    print(f"grouped: {len(document['grouped'])} records, {time.perf_counter() - begin:.0f} s", flush=True)
    document["host"] = host_records(torch, device, args.smoke)
    document["seconds"] = time.perf_counter() - begin
    write_atomically(args.out, document)
    print(f"wrote {args.out} in {document['seconds']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
