"""benchmarks/device_hopper_kernels.py: the shapes it times, hand-derived, and its smoke run (PyTorch on the CPU)."""

from __future__ import annotations

import json

import pytest

from repo_script import load_script  # tests/repo_script.py

SCRIPT = load_script("benchmarks/device_hopper_kernels.py")


def test_a_layer_s_linears_split_as_megatron_splits_them():
    # Llama-3-8B: hidden 4,096, 32 heads of 128, 8 KV heads (1,024 wide), FFN 14,336 gated.
    assert SCRIPT.layer_gemms(4096, 4096, 1024, 14336, 1) == [
        ("qkv", 6144, 4096), ("proj", 4096, 4096), ("fc1", 28672, 4096), ("fc2", 4096, 14336)]
    # TP 4: QKV and FC1 split by output, the projection and FC2 by input.
    assert SCRIPT.layer_gemms(4096, 4096, 1024, 14336, 4) == [
        ("qkv", 1536, 4096), ("proj", 4096, 1024), ("fc1", 7168, 4096), ("fc2", 4096, 3584)]


def test_each_pass_has_the_shape_of_its_gemm():
    # A linear of fan_in 4,096 and fan_out 6,144 over 8,192 tokens: 2 * 8192 * 6144 * 4096 FLOPs in every pass.
    shapes = {p: SCRIPT.pass_shape(p, 8192, 6144, 4096) for p in ("fprop", "dgrad", "wgrad")}
    assert shapes == {"fprop": (8192, 6144, 4096), "dgrad": (8192, 4096, 6144), "wgrad": (6144, 4096, 8192)}
    assert {m * n * k for m, n, k in shapes.values()} == {8192 * 6144 * 4096}


def test_the_smoke_run_writes_every_record(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "kernels.json"
    assert SCRIPT.main(["--smoke", "--out", str(out)]) == 0
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["smoke"] is True and document["facts"]["device"] == "cpu"
    # 2 models x 4 TP degrees x 4 linears x 3 passes, each shape timed once and its repeats recorded as such.
    assert len(document["dense"]) == 2 * 4 * 4 * 3
    timed = [r for r in document["dense"] if r["kind"] == "dense"]
    assert timed and all(r["bf16_seconds"] > 0 and r["fp8_tensorwise_fast_accum_seconds"] > 0 for r in timed)
    assert all(r["flops"] == 2.0 * r["m"] * r["n"] * r["k"] for r in timed)
    # 3 expert models x FC1 and FC2 x the smoke run's 2 expert counts x 1 row count.
    grouped = document["grouped"]
    assert len(grouped) == 3 * 2 * 2 and all(r["per_expert_mm_seconds"] > 0 for r in grouped)
    assert all(r["flops"] == 2.0 * r["experts"] * r["rows_per_expert"] * r["fan_out"] * r["fan_in"] for r in grouped)
    assert document["host"][0]["seconds_per_launch"] > 0
    assert not list(tmp_path.glob(".kernels.json.*"))  # written atomically: no temporary file left


def test_without_a_gpu_the_full_run_is_refused_one_line(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the full run would start")
    assert SCRIPT.main(["--out", str(tmp_path / "kernels.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no CUDA device" in err
    assert not (tmp_path / "kernels.json").exists()
