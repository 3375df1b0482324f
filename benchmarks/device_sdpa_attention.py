"""Time PyTorch's scaled_dot_product_attention on one GPU, per backend, at a Llama-3-8B layer's attention.

Run on the device machine (a minute; PyTorch alone):

    PYTHONUNBUFFERED=1 python3 benchmarks/device_sdpa_attention.py --out "$OUT/sdpa.json"

and here, to check the script (tiny shapes on the CPU, the math backend only; its times mean nothing):

    python benchmarks/device_sdpa_attention.py --smoke --out /tmp/sdpa.json

What it times, with CUDA events after warm-up calls (the median of the timed calls): causal attention of one
sequence, 32 query heads and 8 key/value heads of 128 (Llama-3-8B's; ``enable_gqa=True``, the call transformers
makes on a GPU without a mask: ``integrations/sdpa_attention.py`` ``use_gqa_in_sdpa``), bf16, at 4,096 to 32,768
tokens, forward alone and forward with backward, under the default dispatch and under each backend forced
(``torch.nn.attention.sdpa_kernel``: flash, cuDNN, memory-efficient), and the kernels the default dispatch
launches (``torch.profiler``: which backend it chose). FLOPs are the causal half of the score square:
``2 * 2 * heads * head_dim * tokens^2 / 2`` forward (the model-FLOPs convention, docs/time.md), 2.5 times that
backward (FlashAttention-2's five matmuls against two). hp's fsdp2 runtime prices SDPA on Hopper at
FlashAttention-2's 333 and 318 TFLOP/s (``HOPPER_SDPA`` in hp_plugins/runtimes/timing_profiles.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from device_hopper_kernels import Timer, write_atomically  # benchmarks/: CUDA events after warm-ups, the median

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
TOKENS = (4096, 8192, 16384, 32768)


def _kernels(torch, call) -> list[str]:
    """Names of the GPU kernels one call launches, longest-running first."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    found = {}
    for event in prof.key_averages():
        total = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        if total:
            found[event.key] = total
    return [name[:160] for name, _ in sorted(found.items(), key=lambda kv: -kv[1])[:6]]


def measure(smoke: bool) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    device = "cpu" if smoke else "cuda"
    tokens_list = (64, 128) if smoke else TOKENS
    backends = {"default": None} if smoke else {"default": None, "flash": SDPBackend.FLASH_ATTENTION,
                                                "cudnn": SDPBackend.CUDNN_ATTENTION,
                                                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    dtype = torch.float32 if smoke else torch.bfloat16
    timer = Timer(torch, device, warmup=3, repeats=10)
    records = []
    for tokens in tokens_list:
        q = torch.randn(1, HEADS, tokens, HEAD_DIM, device=device, dtype=dtype, requires_grad=True)
        k = torch.randn(1, KV_HEADS, tokens, HEAD_DIM, device=device, dtype=dtype, requires_grad=True)
        v = torch.randn(1, KV_HEADS, tokens, HEAD_DIM, device=device, dtype=dtype, requires_grad=True)
        grad = torch.randn(1, HEADS, tokens, HEAD_DIM, device=device, dtype=dtype)
        forward_flops = 2.0 * 2 * HEADS * HEAD_DIM * tokens * tokens / 2
        for name, backend in backends.items():
            row = {"tokens": tokens, "backend": name, "forward_flops": forward_flops}

            def fwd():
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

            def fwd_bwd():
                out = fwd()
                out.backward(grad)
                q.grad = k.grad = v.grad = None

            try:
                if backend is None:
                    row["forward_seconds"] = timer(fwd)
                    row["forward_backward_seconds"] = timer(fwd_bwd)
                    if device == "cuda":
                        row["kernels"] = _kernels(torch, fwd_bwd)
                else:
                    with sdpa_kernel([backend]):
                        row["forward_seconds"] = timer(fwd)
                        row["forward_backward_seconds"] = timer(fwd_bwd)
                row["forward_tflops"] = round(forward_flops / row["forward_seconds"] / 1e12, 1)
                backward = row["forward_backward_seconds"] - row["forward_seconds"]
                row["backward_tflops"] = round(2.5 * forward_flops / backward / 1e12, 1) if backward > 0 else None
            except RuntimeError as error:  # a backend that cannot run this call (GQA, a build without it)
                row["error"] = str(error).strip().splitlines()[0][:200]
            records.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "kernels"}), flush=True)
    facts = {"torch": str(torch.__version__), "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
             "cuda": str(torch.version.cuda), "cudnn": torch.backends.cudnn.version() if device == "cuda" else None}
    return {"what": __doc__.splitlines()[0], "smoke": smoke, "facts": facts, "records": records}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU: checks the script, times nothing")
    args = parser.parse_args(argv)
    document = measure(args.smoke)
    write_atomically(args.out, document)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
