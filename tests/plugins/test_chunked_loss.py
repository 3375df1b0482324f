"""torchtitan's ChunkedCELoss (the fsdp2 option ``loss_implementation: chunked``; docs/kinds.md, ``output``).

Numbers derived by hand from torchtitan/components/loss.py at pytorch/torchtitan@6b9602339 (``ChunkedCELoss``,
``GradAccumulator``, ``_DecoderOutputGradientBackProp``) and torch ``_fully_shard/_fsdp_param.py``
(``to_accumulated_grad_if_needed``): 8 chunks along the sequence, each chunk's backward in the forward."""

from __future__ import annotations

import pytest

import scale_cases as sc
from hp_core.runtime_options import apply_options
from hp_plugins.kinds.output import CHUNKED_LOSS_CHUNKS
from loss_cases import loss_cost as _cost

ROWS = {r["id"]: r for r in sc.ROWS}


def test_option_sets_its_trait_alone(registry):
    runtime = registry.runtime("fsdp2")
    chunked = apply_options(runtime, {"loss_implementation": "chunked"})
    assert chunked.traits == runtime.traits - {"upcast_cross_entropy"} | {"chunked_cross_entropy"}
    back = apply_options(chunked, {"loss_implementation": "upcast"})
    assert back.traits == runtime.traits
    assert CHUNKED_LOSS_CHUNKS == 8  # ChunkedCELoss.Config.num_chunks's default at 6b9602339


def test_chunked_keeps_the_hidden_gradient_and_holds_one_chunk(registry):
    # 2 sequences x 40 tokens (T 80), h 64, V 1000, bf16 activations, fp32 logits and reduce-scatter (fsdp2's defaults).
    cost = _cost(registry, "chunked")
    kept = {t.op: t.bytes for t in cost.activations}
    assert kept == {"final_norm_in": 80 * 64 * 2, "loss_hidden_grad": 80 * 64 * 2}  # 10,240 each; no logits, no targets
    # A chunk: 2 x ceil(40 / 8) = 10 tokens, 10,000 logits: bf16 logits 2 + fp32 log-softmax 4 + two fp32 gradients 8.
    chunk = 10 * 1000 * (2 + 4 + 4 + 4)
    assert chunk == 140_000
    # The chunk copies (bf16, 10,240), GradAccumulator's fp32 buffer (20,480), the head's fp32 accumulated gradient.
    assert cost.forward_working_bytes == 10_240 + 20_480 + chunk + 1000 * 64 * 4 == 426_720
    assert cost.working_bytes == 10_240  # the final norm's input gradient
    # The loop's copies, forward only: 28 bytes a hidden element (bf16), 7 accumulations of the head's gradient of
    # 10 bytes an element (fp32 read and written, bf16 read).
    assert cost.work.copy_bytes == 80 * 64 * 28 + 7 * 64_000 * 10 == 4_623_360
    assert cost.work.backward_copy_bytes == 0
    assert cost.weight_gradient_bytes == 0  # the head's weight gradient is made in the forward's loop


def test_bf16_reduce_keeps_the_head_gradient_in_bf16(registry):
    # reduce_dtype bf16 equals the compute dtype: FSDP2 drops it (FSDPParam.init_dtype_attrs), so
    # to_accumulated_grad_if_needed leaves the head's unsharded gradient on the parameter in bf16, and each chunk's
    # backward adds into it in place: 1000 x 64 x 2 bytes held through the loop (the fp32 case's 1000 x 64 x 4).
    cost = _cost(registry, "chunked", reduce_dtype="bf16")
    chunk = 10 * 1000 * (2 + 4 + 4 + 4)
    assert cost.forward_working_bytes == 10_240 + 20_480 + chunk + 1000 * 64 * 2 == 298_720
    # Time unchanged: the 7 in-place accumulations read and write the bf16 gradient and read the chunk's (2 + 2 + 2).
    assert cost.work.copy_bytes == 80 * 64 * 28 + 7 * 64_000 * 6


def test_upcast_for_comparison_and_the_same_flops(registry):
    upcast, chunked = _cost(registry, "upcast"), _cost(registry, "chunked")
    kept = {t.op: t.bytes for t in upcast.activations}
    assert kept["loss_softmax"] == 80 * 1000 * 4 and kept["loss_targets"] == 80 * 8
    assert upcast.forward_working_bytes == 80 * 1000 * 6 and upcast.working_bytes == 2 * 80 * 1000 * 4
    # The same GEMM and elementwise operations: the head runs once per token, nothing recomputed.
    assert chunked.forward == upcast.forward
    assert chunked.work.gemms == upcast.work.gemms == ((80, 1000, 64),)
    assert upcast.work.copy_bytes == 0


def test_uneven_chunks_and_sequence_parallel(registry):
    # torch.chunk: ceil(41 / 8) = 6 positions a chunk, 12 tokens of 2 sequences.
    cost = _cost(registry, "chunked", seq_len=41)
    T = 82
    assert cost.forward_working_bytes == T * 64 * 2 + T * 64 * 4 + 12 * 1000 * 14 + 1000 * 64 * 4
    # TP 2 with SP: the loss on the rank's vocabulary shard (500), the hidden states gathered whole (Replicate).
    cost = _cost(registry, "chunked", tp=2, sp=True)
    kept = {t.op: t.bytes for t in cost.activations}
    assert kept == {"final_norm_in": 80 * 64 * 2 // 2, "loss_hidden_grad": 80 * 64 * 2}
    assert cost.forward_working_bytes == (80 * 64 * 2 + 80 * 64 * 4 + 80 * 64 * 2 // 2  # the norm's shard beside
                                          + 10 * 500 * 14 + 500 * 64 * 4)


@pytest.mark.parametrize("row_id", ["tt-dsv3-16b-ep4-b16-full", "tt-dsv3-16b-ep4-b16-full-minimalep"])
def test_rows_run_chunked_loss_and_its_time(row_id, registry):
    row = ROWS[row_id]
    assert row["options"]["loss_implementation"] == "chunked"
    assert "ChunkedCELoss" in row["assumptions"] and "ChunkedCELoss" in sc.DATA["sources"][row["source"]]["config_note"]
    upcast = dict(row, options=dict(row["options"], loss_implementation="upcast"))
    a, b = sc.estimated(upcast, registry).stages[0], sc.estimated(row, registry).stages[0]
    # The forward adds the loop's copies at the device's memory rate: 65,536 tokens x 2,048 x 28 bytes and 7 x 102,400
    # x 2,048 x 10 bytes of the head's gradient; backward and recompute unchanged.
    copies = 65_536 * 2048 * 28 + 7 * 102_400 * 2048 * 10
    assert copies == 18_438_160_384
    hardware = sc.hardware(row, registry)
    dev = sc.runtime(row, registry).timing.device(hardware.architecture)
    slowdown = dev.sustained_slowdown.value if dev.sustained_slowdown is not None else 1.0
    rate = hardware.memory_bandwidth_bytes_per_second * dev.memory_bandwidth.value
    assert b.forward_seconds - a.forward_seconds == pytest.approx(slowdown * copies / rate, rel=1e-9)
    assert b.backward_seconds == pytest.approx(a.backward_seconds, rel=1e-12)
    assert b.recompute_seconds == pytest.approx(a.recompute_seconds, rel=1e-12)


def test_rows_memory_chunked(registry):
    G = 2**30
    full = sc.memory_estimated(ROWS["tt-dsv3-16b-ep4-b16-full"], registry)
    upcast = sc.memory_estimated(dict(ROWS["tt-dsv3-16b-ep4-b16-full"], options=dict(
        ROWS["tt-dsv3-16b-ep4-b16-full"]["options"], loss_implementation="upcast")), registry)
    # The forward at the loss: the upcast's kept log-softmax and targets (65,536 x 102,400 x 4 + 65,536 x 8) and its
    # logits in bf16 and fp32 (x 6) replaced by the hidden gradient kept (65,536 x 2,048 x 2) and the chunk's forward
    # working: 8,192 tokens x 102,400 x 14 + the chunk copies, the fp32 buffer (65,536 x 2,048 x 6) + the head's
    # fp32 gradient (102,400 x 2,048 x 4); the final norm's output is no longer kept (65,536 x 2,048 x 2).
    T, h, V = 65_536, 2048, 102_400
    removed = T * V * 4 + T * 8 + T * V * 6 + T * h * 2
    added = T * h * 2 + 8192 * V * 14 + T * h * 6 + V * h * 4
    assert upcast.peak_points["forward"] - full.peak_points["forward"] == removed - added
    # docs/time.md (51.79 and 50.57 before the embedding's own FSDP unit, 0.39 GiB freed after its forward; 51.67 and
    # 50.18 before PyTorch's two cuBLAS workspaces, 64 MiB, were priced)
    assert round(full.reserved_bytes / G, 2) == 51.73 and round(full.peak_bytes / G, 2) == 50.24
    assert full.binding_point == "backward"


_CHUNKED_PP = ("pp={pp}: the chunked loss (loss_implementation=chunked, torchtitan's ChunkedCELoss) is not priced under "
               "pipeline parallelism: torchtitan runs the head's input and weight gradients inside the loss, in the last "
               "stage's forward, and reduce-scatters the head's FSDP gradient every micro-batch, where hp's schedules "
               "price the head's backward in the backward (a zero-bubble schedule's W pass) and one reduction a step; "
               "use pp 1, or loss_implementation upcast or fused")


@pytest.mark.parametrize("layout", [
    ("--dp", 2, "--pp", 2),  # FSDP over dp 2, 1F1B
    ("--dp", 1, "--pp", 2, "--schedule", "zb_h1"),  # no FSDP (dp 1): a zero-bubble schedule splitting the W pass
    ("--dp", 1, "--pp", 4, "--schedule", "zb_v", "--vpp", 2),
])
def test_chunked_loss_under_pipeline_parallelism_is_refused_in_one_line(capsys, layout):
    from cli_run import run

    pp = layout[layout.index("--pp") + 1]
    status, out, err = run(capsys, "estimate", "--model", "llama3-8b", "--num-layers", 8, "--seq-len", 2048,
                           *layout, "--runtime", "fsdp2", "--runtime-option", "loss_implementation=chunked",
                           "--hardware", "h100-sxm")
    assert (status, out) == (2, "")
    assert err == f"hp estimate: error: $.parallel.pp: {_CHUNKED_PP.format(pp=pp)}\n"
    # The same layout with the default loss is priced (the refusal is the chunked loss's alone).
    status, _, err = run(capsys, "estimate", "--model", "llama3-8b", "--num-layers", 8, "--seq-len", 2048, *layout,
                         "--runtime", "fsdp2", "--hardware", "h100-sxm")
    assert (status, err) == (0, "")


def test_chunked_loss_at_pp_1_is_priced_and_a_search_names_its_refusal(capsys):
    from cli_run import run
    from hp_core.engine.layout_checks import PipelineTraitError, check_pipeline_traits
    from hp_core.engine.search.layouts import R_PIPELINE_TRAIT, _reason_of
    from hp_core.specs import ParallelSpec

    status, _, err = run(capsys, "estimate", "--model", "llama3-8b", "--num-layers", 8, "--seq-len", 2048, "--dp", 2,
                         "--runtime", "fsdp2", "--runtime-option", "loss_implementation=chunked", "--hardware", "h100-sxm")
    assert (status, err) == (0, "")
    check_pipeline_traits(ParallelSpec(seq_len=1024, dp=2, pp=1), {"chunked_cross_entropy"})
    check_pipeline_traits(ParallelSpec(seq_len=1024, dp=1, pp=2), {"upcast_cross_entropy", "torchtitan_op_sac"})
    with pytest.raises(PipelineTraitError) as refused:
        check_pipeline_traits(ParallelSpec(seq_len=1024, dp=1, pp=2), {"chunked_cross_entropy"})
    assert refused.value.path == "$.parallel.pp"
    assert _reason_of(refused.value) == R_PIPELINE_TRAIT
