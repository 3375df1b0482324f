"""The fsdp2 runtime's cached bytes (docs/runtimes.md, Cached): FSDP2's stream pools and an upcast loss's logits block
beside the allocated peak, derived by hand from Llama-3-8B's shapes; and a measured ``reserved`` figure compared with
the peak plus them."""

from __future__ import annotations

import json

import attrs
import pytest
import yaml

from hp_core.api import estimate, model_from_preset
from hp_core.runtime_options import apply_options
from hp_core.specs import ParallelSpec
from cli_run import run  # tests/cli_run.py

T, V, H = 4096, 128256, 4096
LAYER = 4096 * (4096 * 2 + 1024 * 2) + 3 * 4096 * 14336 + 2 * 4096  # one decoder layer's elements
ROOT = 2 * V * H + H  # the root unit: embedding, head, final norm
TOTAL = ROOT + 4 * LAYER


def _stage(registry, options=None, dp=8):
    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    runtime = apply_options(registry.runtime("fsdp2"), options) if options else "fsdp2"
    (stage,) = estimate(model, ParallelSpec(seq_len=T, dp=dp), runtime=runtime, registry=registry).stages
    return stage


def test_cached_bytes_by_hand(registry):
    """Binding at the loss's backward, 8 ranks: the previous step's sharded fp32 gradients in the reduce-scatter
    pool, the all-gather pool less the one layer's output the point holds, and the bf16 logits' freed block. The
    all-gather pool: the root's input (its shard cast to bf16, ROOT * 2 / 8) gets a segment, then its output; the first
    layer's input takes the root input's freed block, and its output (LAYER * 2) exceeds that block's rest
    (ROOT * 2 / 8 - LAYER * 2 / 8): a third segment. Later units reuse those three blocks."""
    stage = _stage(registry)
    assert stage.binding_point == "backward" and stage.memory.working_set_bytes == 2 * T * V * 4  # the loss's backward
    reduce_pool = TOTAL * 4 // 8
    assert LAYER * 2 > (ROOT - LAYER) * 2 // 8
    gather_idle = ROOT * 2 // 8 + (ROOT + LAYER) * 2 - LAYER * 2
    assert stage.cached_bytes == reduce_pool + gather_idle + T * V * 2
    assert stage.reserved_bytes == stage.peak_bytes + stage.cached_bytes


def test_cached_bytes_follow_the_options(registry):
    base = _stage(registry)
    # A fused loss keeps its bf16 logits (overwritten by their gradient): no freed block. It binds in a layer's
    # backward below the head, whose point holds the root's unsharded bf16 gradients (default stream) and no sharded
    # one yet beside the binding layer's: the reduce-scatter pool is idle but for those.
    fused = _stage(registry, {"loss_implementation": "fused"})
    root_grads = (V * H + H) * 2  # the head's and the final norm's, whose backward ran (the embedding's runs last)
    assert fused.binding_point == "backward" and fused.memory.gradients_bytes >= root_grads
    held = fused.memory.gradients_bytes - root_grads  # the body layers' sharded gradients above the binding one
    assert held in (0, LAYER * 4 // 8, 2 * LAYER * 4 // 8, 3 * LAYER * 4 // 8)
    assert fused.cached_bytes == TOTAL * 4 // 8 - held + ROOT * 2 // 8 + ROOT * 2
    # bf16 reduce dtype: one unit's reduce-scatter output in bf16 beside the fp32 gradients, the root's the largest.
    bf16 = _stage(registry, {"reduce_dtype": "bf16"})
    assert bf16.cached_bytes - base.cached_bytes == ROOT * 2 // 8
    # CPU offload: each unit's sharded gradient goes to the host, so the pool holds the largest one at a time.
    offload = _stage(registry, {"cpu_offload": True})
    assert offload.cached_bytes - base.cached_bytes == ROOT * 4 // 8 - TOTAL * 4 // 8
    # Gradients held through the step (set_to_none false) are allocated, not cached; but each unit's reduce allocates a
    # new output in the reduce-scatter stream and adds it into the existing .grad: the largest (the root's) idles there.
    kept = _stage(registry, {"zero_grad_set_to_none": False})
    assert kept.memory.gradients_bytes == TOTAL * 4 // 8
    assert kept.cached_bytes == base.cached_bytes - TOTAL * 4 // 8 + ROOT * 4 // 8


def test_no_loss_hole_when_the_logits_are_already_fp32(registry, monkeypatch):
    """fp32 activations: the loss's .float() returns the logits themselves, so no compute-dtype block is freed beside
    the fp32 gradients (0 bytes); bf16 activations: the hole is the bf16 logits, T * V * 2 bytes."""
    from hp_core.specs import PrecisionSpec
    from hp_plugins.runtimes import fsdp2_points

    views = []
    asked = fsdp2_points.Fsdp2Points.cached_bytes
    monkeypatch.setattr(fsdp2_points.Fsdp2Points, "cached_bytes",
                        lambda self, view, name, point: views.append(view) or asked(self, view, name, point))
    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    holes = []
    for activation_bytes in (2, 4):
        precision = PrecisionSpec(param_bytes=2, grad_bytes=4, master_param_bytes=4, moment_bytes=4,
                                  activation_bytes=activation_bytes)
        estimate(model, ParallelSpec(seq_len=T, dp=8), runtime="fsdp2", precision=precision, registry=registry)
        holes.append(fsdp2_points.loss_hole_bytes(views[-1]))
    assert holes == [T * V * 2, 0]


def test_one_rank_binds_at_the_step(registry):
    """dp 1: no all-gather output (FSDP2 copies the parameters), and the optimizer step binds (AdamW's temporary
    beside the whole fp32 state), where the gradients are allocated and nothing is cached. Reserved memory is a
    high-water over the step: at the loss's backward the previous step's fp32 gradients idle in the reduce-scatter
    stream's pool (torch 2.13 ``foreach_reduce`` allocates the output there at world size 1 too, copying the input)
    beside the bf16 logits' freed block, and that sum passes the optimizer's peak."""
    stage = _stage(registry, dp=1)
    assert stage.binding_point == "optimizer" and stage.memory.gradients_bytes == TOTAL * 4
    backward_reserved = stage.peak_points["backward"] + TOTAL * 4 + T * V * 2
    assert backward_reserved > stage.peak_bytes
    assert stage.cached_bytes == backward_reserved - stage.peak_bytes
    assert stage.reserved_bytes == backward_reserved


def test_runtimes_without_pools_cache_nothing(registry):
    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    for runtime in ("megatron", "generic"):
        assert all(s.cached_bytes == 0 for s in estimate(model, ParallelSpec(seq_len=T, dp=8), runtime=runtime,
                                                          registry=registry).stages)


def test_a_reserved_figure_is_compared_with_the_peak_plus_cached(capsys, tmp_path, registry):
    stage = _stage(registry)
    config = {"model": "llama3-8b", "num_layers": 4, "runtime": "fsdp2", "parallel": {"dp": 8, "seq_len": T}}
    measured = {"source": "a test", "stages": [{"stage": 0, "allocated_bytes": stage.peak_bytes,
                                                "reserved_bytes": 2 * stage.reserved_bytes}]}
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"format": "hp-cases/2", "cases": [{"name": "c", "config": config, "measured": measured}]}))
    status, out, err = run(capsys, "validate", path, "--json")
    assert status == 0, err
    (case,) = json.loads(out)["cases"]
    assert [(s["quantity"], s["estimated_peak_bytes"]) for s in case["stages"]] == [
        ("allocated", stage.peak_bytes), ("reserved", stage.peak_bytes + stage.cached_bytes)]
    assert [s["error"] for s in case["stages"]] == pytest.approx([0.0, -0.5])


def test_the_estimate_json_states_cached_bytes(capsys):
    status, out, err = run(capsys, "estimate", "--model", "llama3-8b", "--runtime", "fsdp2", "--dp", "8",
                           "--seq-len", str(T), "--json")
    assert status == 0, err
    (stage,) = json.loads(out)["stages"]
    # 32 layers, 8 ranks: the sharded fp32 gradients, the root's all-gather input and output, the bf16 logits block.
    total = ROOT + 32 * LAYER
    assert stage["cached_bytes"] == total * 4 // 8 + ROOT * 2 // 8 + ROOT * 2 + T * V * 2


def test_the_last_layer_kept_gathered(registry):
    """reshard_last_layer_after_forward false (torchtitan's apply_fsdp at 9dec370): at the loss's backward the last
    layer's bf16 parameters (LAYER * 2) stand where the prefetched layer's all-gather output stood, so the peak is the
    same, and the all-gather pool is wholly idle there: LAYER * 2 more cached. At the loss's forward they stand beside
    the all-gather output: LAYER * 2 more allocated. Under PP: refused."""
    from hp_core.errors import ConfigError

    base, kept = _stage(registry), _stage(registry, {"reshard_last_layer_after_forward": False})
    assert kept.binding_point == base.binding_point == "backward"
    assert kept.memory == base.memory
    assert kept.cached_bytes - base.cached_bytes == LAYER * 2
    assert kept.peak_points["forward"] - base.peak_points["forward"] == LAYER * 2
    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    runtime = apply_options(registry.runtime("fsdp2"), {"reshard_last_layer_after_forward": False})
    with pytest.raises(ConfigError, match="reshard_last_layer_after_forward"):
        estimate(model, ParallelSpec(seq_len=T, dp=4, pp=2, micro_batch_size=1, global_batch_size=8), runtime=runtime,
                 registry=registry)


def test_best_fit_blocks_by_hand():
    """The caching allocator's best fit (CUDACachingAllocator.cpp): the smallest free block at least the request, split
    where more than 1 MiB stays; a freed block merges with its free neighbours; none fits: a new segment."""
    from hp_plugins.runtimes.fsdp2_points import best_fit_reserved_bytes

    mib = 1 << 20
    # 100 MiB freed, then 30 and 60: both split it (30 + 60 <= 100): nothing new.
    assert best_fit_reserved_bytes([("alloc", "a", 100 * mib), ("free", "a", 0), ("alloc", "b", 30 * mib),
                                    ("alloc", "c", 60 * mib)]) == 100 * mib
    # 30 then 80: 80 exceeds the 70 left: a second segment.
    assert best_fit_reserved_bytes([("alloc", "a", 100 * mib), ("free", "a", 0), ("alloc", "b", 30 * mib),
                                    ("alloc", "c", 80 * mib)]) == 180 * mib
    # Two free blocks of 50 and 200 MiB: 40 takes the 50 (best fit), so 150 still fits in the 200.
    assert best_fit_reserved_bytes([("alloc", "a", 50 * mib), ("alloc", "b", 200 * mib), ("free", "a", 0),
                                    ("free", "b", 0), ("alloc", "c", 40 * mib), ("alloc", "d", 150 * mib)]) == 250 * mib
    # Freed neighbours merge: 30 and 70 in one segment, both freed, then 100 fits.
    assert best_fit_reserved_bytes([("alloc", "a", 100 * mib), ("free", "a", 0), ("alloc", "b", 30 * mib),
                                    ("alloc", "c", 70 * mib), ("free", "b", 0), ("free", "c", 0),
                                    ("alloc", "d", 100 * mib)]) == 100 * mib
    # A request of at most 1 MiB never takes a block of the large pool.
    assert best_fit_reserved_bytes([("alloc", "a", 100 * mib), ("free", "a", 0), ("alloc", "b", mib)]) == 101 * mib


def test_a_float8_layer_output_fits_the_root_input_s_block(registry, monkeypatch):
    """torchao's float8 all-gather gathers a layer's GEMM weights in 1 byte: its input (LAYER_F8 / 8) and output
    (LAYER_F8) fit in the root input's block (ROOT * 2 / 8), so the all-gather pool is the root's input and output
    alone, against bf16's three blocks (the root's input and output and a layer's output)."""
    from hp_plugins.runtimes import fsdp2_points

    norms = 2 * 4096
    layer_f8 = LAYER - norms + norms * 2  # GEMM weights in 1 byte, the two norms' weights in bf16
    assert layer_f8 // 8 + layer_f8 <= ROOT * 2 // 8
    pools = []
    asked = fsdp2_points.stream_pool_bytes
    monkeypatch.setattr(fsdp2_points, "stream_pool_bytes", lambda view, points: pools.append(asked(view, points)) or pools[-1])
    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    runtime = registry.runtime("fsdp2")
    estimate(model, ParallelSpec(seq_len=T, dp=8), runtime=runtime, registry=registry,
             precision=attrs.evolve(runtime.precision, recipe="torchao-float8-tensorwise"))
    assert pools[-1][1] == ROOT * 2 // 8 + ROOT * 2


def test_a_backward_gather_after_resharding_to_n_copies_in_the_post_forward_shard():
    """reshard_after_forward=2 on 8 ranks, one decoder layer of 32 Mi elements (64 MiB gathered in bf16), no root.
    Forward: its input, the full shard cast to bf16 (64 / 8 = 8 MiB), a segment; its output (64 MiB) a second; both
    freed (the input after its copy-in, the output at the post-forward). Backward: the layer was left its post-forward
    shard (torch _fsdp_param.py to_sharded_post_forward: 64 / 2 = 32 MiB), which the all-gather copies in: too large
    for the 8 MiB block, it splits the 64 MiB one, so the output (64 MiB) needs a third segment. The second step fits
    in those three blocks: 8 + 64 + 64 MiB. (Copying in the full shard, 8 MiB, the pool would stay 8 + 64 MiB.)"""
    from hp_core.peak_points import StageLayer, StageView
    from hp_core.specs import PrecisionSpec
    from hp_plugins.runtimes.fsdp2_points import Fsdp2Points, stream_pool_bytes

    mib, elements = 1 << 20, 32 << 20
    layer = StageLayer("k", "body", 0, 0, 0, {"dense": elements}, 0)
    precision = PrecisionSpec(param_bytes=4, grad_bytes=4, master_param_bytes=0)
    params = elements * 4 // 8
    view = StageView(0, (layer,), (params, params, 0, 2 * params), {}, ParallelSpec(seq_len=16, dp=8, reshard_after_forward=True), precision, 3,
                     1, 0)
    assert precision.activation_bytes == 2 and view.parallel.reshard_after_forward
    assert stream_pool_bytes(view, Fsdp2Points(reshard_to=2)) == (params, (8 + 64 + 64) * mib)
    # Resharding to all 8 ranks (reshard_to 0, reshard_after_forward true): the backward copies in the 8 MiB shard.
    assert stream_pool_bytes(view, Fsdp2Points()) == (params, (8 + 64) * mib)
