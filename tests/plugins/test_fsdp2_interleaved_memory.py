"""The fsdp2 runtime's memory under interleaved 1F1B with vpp > 1 (torch 2.13's multi-stage runtime,
``_PipelineScheduleRuntime``, FSDP2 chunks without reshard_after_forward): each point of the rank's order holds the
chunks torch's UNSHARD/RESHARD actions keep gathered, the accumulators of the chunks between their first backward
and their REDUCE_GRAD, the sharded gradients of the chunks reduced, and each chunk's micro-batches in flight
(docs/runtimes.md, fsdp2, "FSDP under interleaved pipeline stages"). Stages built by hand, figures derived by hand."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hp_core.engine.timing.overlap import gathered_chunks
from hp_core.peak_points import StageLayer, StageView
from hp_core.schedules import ScheduleLayout
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.runtimes.fsdp2_points import Fsdp2Points
from hp_plugins.schedules.classic import interleaved_in_flight, interleaved_order


def _layer(placement: str, elements: int, kept: int, chunk: int) -> StageLayer:
    """A layer keeping *kept* bytes a micro-batch, a 50-byte backward working set, a 1,000-byte input gradient."""
    return StageLayer("k", placement, kept, 50, 0, {"dense": elements}, 0, chunk=chunk, input_bytes=1000)


def _view(layers, *, pp: int, vpp: int, micro_batches: int, stage: int = 0, dp: int = 2) -> StageView:
    """Stage *stage* of an interleaved pipeline holding *layers*: fp32 parameters, gradients and reduce dtype, bf16
    compute, fp32 AdamW moments, sharded over dp (no master copy); its order the schedule's."""
    precision = PrecisionSpec(param_bytes=4, grad_bytes=4, master_param_bytes=0)
    params = sum(-(-n * 4 // dp) for layer in layers for n in layer.elements.values())
    parallel = ParallelSpec(seq_len=16, dp=dp, pp=pp, vpp=vpp, schedule="interleaved_1f1b", reshard_after_forward=False)
    order = interleaved_order(ScheduleLayout(pp, vpp, micro_batches), stage)
    return StageView(stage, tuple(layers), (params, params, 0, 2 * params), {}, parallel, precision, 3, micro_batches,
                     0, order=order)


def _parts(point):
    return (point.gradients_bytes, point.communication_buffers_bytes, point.activations_bytes, point.working_set_bytes)


# Stage 0 of pp 2 x vpp 2: chunk 0 the embedding (1,000 elements, 1 byte kept) and a layer of 2,000 elements, chunk 1
# a layer of 2,000; each layer keeps 100 bytes a micro-batch. Gathered in bf16: chunk 0 2,000 + 4,000 = 6,000,
# chunk 1 4,000. fp32 accumulators: chunk 0 4,000 + 8,000 = 12,000, chunk 1 8,000. Sharded over dp 2: parameters
# 5,000 x 4 / 2 = 10,000, AdamW moments 20,000.
TWO_CHUNKS = [_layer("first", 1000, 1, 0), _layer("body", 2000, 100, 0), _layer("body", 2000, 100, 1)]
STATIC = 10_000 + 20_000


def test_two_chunks_four_micro_batches_by_hand():
    """pp 2, vpp 2, 4 micro-batches, stage 0: 4 warm-up forwards ((2 - 0 - 1) * 2 + (2 - 1) * 2), so the rank runs
    F0 F0 F1 F1 F0 B1 F0 B1 F1 B0 F1 B0 B1 B1 B0 B0 (chunk of each action). Two chunks fit torch's window of three:
    both are UNSHARDed before the first action and stay gathered (6,000 + 4,000) until their last backward.

    * Forward: binds at the forward of chunk 1's fourth micro-batch (11th action): chunk 0's first backward ran,
      chunk 1's two, so both accumulators are alive (12,000 + 8,000); chunk 0 keeps 3 micro-batches (3 x 101),
      chunk 1 one and the one running (2 x 100): 503.
    * Backward: binds at chunk 0's second backward (12th action), in its layer's post-backward moment: both
      accumulators (20,000), both chunks gathered (10,000), what stays kept below the layer, chunk 1's 2 micro-batches
      and chunk 0's 3 embeddings (200 + 3), and the layer's bf16 gradients with its input gradient (4,000 + 1,000).
    * Reduce: chunk 1's REDUCE_GRAD after its fourth backward (14th action): at its layer's reduce-scatter, chunk 0's
      accumulator (12,000) and its own (8,000), chunk 0 gathered (6,000) and its fp32 reduce-scatter input (8,000),
      chunk 0's 2 micro-batches in flight (202).
    * Optimizer: the sharded fp32 gradients (10,000), the loop's batch (1), foreach AdamW's temporary (10,000).
    """
    view = _view(TWO_CHUNKS, pp=2, vpp=2, micro_batches=4)
    points = Fsdp2Points()(view)
    assert _parts(points["forward"]) == (12_000 + 8000, 6000 + 4000, 3 * 101 + 2 * 100, 0)
    assert points["forward"].peak_bytes == STATIC + 20_000 + 10_000 + 503 == 60_503
    assert _parts(points["backward"]) == (12_000 + 8000, 6000 + 4000, 2 * 100 + 3 * 1, 4000 + 1000)
    assert points["backward"].peak_bytes == STATIC + 20_000 + 10_000 + 203 + 5000 == 65_203
    assert _parts(points["reduce"]) == (12_000 + 8000, 6000 + 8000, 2 * 101, 0)
    assert points["reduce"].peak_bytes == STATIC + 20_000 + 14_000 + 202 == 64_202
    assert _parts(points["optimizer"]) == (10_000, 0, 1, 10_000)
    # The stage binds in backward, above each of the others.
    assert max(points.values(), key=lambda p: p.peak_bytes) is points["backward"]
    # Reserved beside it: the reduce-scatter pool, every unit's fp32 sharded gradient (2,000 + 4,000 + 4,000), freed
    # there by zero_grad; no all-gather pool (UNSHARD's gathers run on the current stream).
    assert Fsdp2Points().cached_bytes(view, "backward", points["backward"]) == 2000 + 4000 + 4000


def test_a_chunk_reduced_before_the_binding_backward_holds_its_part_of_the_reduce_scatter_pool():
    """pp 2, vpp 2, 2 micro-batches, stage 0: 4 warm-up forwards (every one), so the rank runs F0 F0 F1 F1 B1 B1 B0 B0.
    Chunk 1's REDUCE_GRAD, right after its second backward, reshards it and reduce-scatters its layer: its sharded fp32
    gradients (2,000 x 4 / 2 = 4,000) are allocated in the reduce-scatter stream from there to the optimizer step.

    * Backward: binds at chunk 0's second backward (the last action), in its layer's post-backward moment: chunk 0's
      accumulator (12,000) and chunk 1's sharded gradients (4,000), chunk 0 gathered (6,000; chunk 1 no longer), the
      embedding of the one micro-batch in flight below the layer (1), the layer's bf16 gradients and input gradient
      (4,000 + 1,000): 30,000 + 16,000 + 6,000 + 1 + 5,000 = 57,001.
    * Cached beside it: the reduce-scatter pool (every unit's fp32 sharded gradient, 2,000 + 4,000 + 4,000, freed into
      it by the previous step's zero_grad) less chunk 1's 4,000 the point holds: 6,000. The forward (chunk 1's UNSHARD
      wait: both chunks gathered and its unit again, 6,000 + 4,000 + 4,000; two micro-batches of chunk 0 kept, 202)
      holds no sharded gradient: 44,202 + 10,000 = 54,202, below the backward's 57,001 + 6,000.
    """
    from hp_core.peak_points import reserved_over_peak

    view = _view(TWO_CHUNKS, pp=2, vpp=2, micro_batches=2)
    runtime = Fsdp2Points()
    points = runtime(view)
    assert _parts(points["backward"]) == (12_000 + 4000, 6000, 1, 4000 + 1000)
    assert points["backward"].peak_bytes == 57_001
    assert runtime.cached_bytes(view, "backward", points["backward"]) == 10_000 - 4000
    assert _parts(points["forward"]) == (0, 6000 + 4000 + 4000, 202, 0)
    assert runtime.cached_bytes(view, "forward", points["forward"]) == 10_000
    assert reserved_over_peak(runtime.cached_bytes, view, points, 57_001) == 6000


def test_the_multi_stage_walk_runs_once_per_stage(registry, monkeypatch):
    """The points' walk through the rank's order (multi_stage_points) runs once per stage and view: cached_bytes,
    asked at every point, reads what that walk found (which reduced chunks' sharded gradients the chosen forward and
    backward points hold) from StageView.memo instead of walking again, whichever is asked first. Before, each
    cached_bytes of a forward or backward point walked again: three walks a stage."""
    from hp_core.api import estimate, model_from_preset
    from hp_core.peak_points import reserved_over_peak
    from hp_plugins.runtimes import fsdp2_points

    walks: list[int] = []
    walk = fsdp2_points.multi_stage_points
    monkeypatch.setattr(fsdp2_points, "multi_stage_points",
                        lambda view, *args, **kwargs: walks.append(view.index) or walk(view, *args, **kwargs))
    # By hand (the stage of the test above): the figures as before, one walk for the points and both cached asks.
    view = _view(TWO_CHUNKS, pp=2, vpp=2, micro_batches=2)
    runtime = Fsdp2Points()
    points = runtime(view)
    assert (runtime.cached_bytes(view, "backward", points["backward"]),
            runtime.cached_bytes(view, "forward", points["forward"])) == (10_000 - 4000, 10_000)
    assert reserved_over_peak(runtime.cached_bytes, view, points, 57_001) == 6000
    assert walks == [0]
    # cached_bytes asked first (on another view of the same stage): it walks, and the points then reuse that walk.
    other = _view(TWO_CHUNKS, pp=2, vpp=2, micro_batches=2)
    backward = Fsdp2Points()(_view(TWO_CHUNKS, pp=2, vpp=2, micro_batches=2))["backward"]
    assert runtime.cached_bytes(other, "backward", backward) == 6000 and runtime(other)["backward"] == backward
    assert walks == [0, 0, 0]  # one for the view asked for points only, one for `other`
    # An estimate: llama3-8b's 4 layers over pp 2 x vpp 2 x dp 4 (fsdp2's default under PP: no resharding), one walk
    # for each of its two stages, where each stage's reserved memory needed three.
    walks.clear()
    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    stages = estimate(model, ParallelSpec(seq_len=1024, dp=4, pp=2, vpp=2), runtime="fsdp2", registry=registry).stages
    assert sorted(walks) == [0, 1] and all(stage.cached_bytes > 0 for stage in stages)


def test_a_chunk_evicted_by_the_window_of_three_is_not_held():
    """pp 2, vpp 4, 2 micro-batches, stage 0: 8 warm-up forwards (every one), then every backward: F0 F0 F1 F1 F2 F2
    F3 F3 B3 B3 B2 B2 B1 B1 B0 B0. Torch's window of three evicts chunk 0 before chunk 1's first forward (chunks 1, 2,
    3 are the next three) and gathers it again for chunk 0's backward (after chunk 2's). Chunks: 0 the embedding
    (1,000) and a layer of 2,000 elements, 1 to 3 layers of 3,000, 4,000 and 5,000: gathered 6,000 / 6,000 / 8,000 /
    10,000, accumulators 12,000 / 12,000 / 16,000 / 20,000; parameters 15,000 x 4 / 2 = 30,000, moments 60,000.

    * Forward: binds at chunk 3's first forward, waiting on its UNSHARD: chunks 1 to 3 gathered (24,000) and, at the
      copy-out, its one unit again (10,000); no accumulator; chunks 0 to 2 keep 2 micro-batches each (202 + 200 + 200).
    * Backward: chunk 3's (the first to run), at its layer's post-backward: chunk 3's accumulator (its first backward
      casts it beside its bf16 gradients), chunks 1 to 3 gathered, not chunk 0 (24,000), the same 602 kept below it,
      the layer's bf16 gradients and input gradient (10,000 + 1,000).
    """
    layers = [_layer("first", 1000, 1, 0), _layer("body", 2000, 100, 0), _layer("body", 3000, 100, 1),
              _layer("body", 4000, 100, 2), _layer("body", 5000, 100, 3)]
    points = Fsdp2Points()(_view(layers, pp=2, vpp=4, micro_batches=2))
    static = 30_000 + 60_000
    assert _parts(points["forward"]) == (0, 6000 + 8000 + 10_000 + 10_000, 202 + 200 + 200, 0)
    assert points["forward"].peak_bytes == static + 34_000 + 602
    assert _parts(points["backward"]) == (20_000, 6000 + 8000 + 10_000, 602, 10_000 + 1000)
    assert points["backward"].peak_bytes == static + 20_000 + 24_000 + 602 + 11_000 == 145_602
    # Chunk 3's REDUCE_GRAD: chunks 1 and 2 gathered beside its fp32 reduce-scatter input (14,000 + 20,000).
    assert _parts(points["reduce"]) == (20_000, 14_000 + 20_000, 602, 0)


def test_the_orders_counts_at_the_first_backward_are_the_schedules_in_flight():
    """The walk's micro-batches in flight come from the schedule's order; at the rank's first backward they are the
    schedule's own in_flight per chunk (the counts every other runtime's memory uses)."""
    for p in (2, 3, 4):
        for v in (2, 3, 4):
            for m in (p, 2 * p, 4 * p):
                layout = ScheduleLayout(p, v, m)
                for stage in range(p):
                    counts = [0] * v
                    for kind, c, _ in interleaved_order(layout, stage):
                        if kind == "B":
                            break
                        counts[c] += 1
                    assert tuple(counts) == interleaved_in_flight(layout, stage), (p, v, m, stage)


def test_at_most_three_chunks_gathered():
    for kinds in ([0, 0, 1, 1, 2, 2, 3, 3, 3, 3, 2, 2, 1, 1, 0, 0], [0, 1, 2, 3, 0, 1, 2, 3]):
        assert all(len(active) <= 3 and kinds[i] in active for i, active in enumerate(gathered_chunks(kinds)))


@settings(max_examples=40, deadline=None)
@given(pp=st.integers(2, 4), vpp=st.integers(2, 4), rounds=st.integers(1, 3),
       sizes=st.lists(st.integers(1, 5000), min_size=4, max_size=4), kept=st.integers(0, 500))
def test_more_micro_batches_never_lower_the_peak(pp, vpp, rounds, sizes, kept):
    """Every stage of every layout: with a round of pp more micro-batches a step (interleaved 1F1B needs a multiple
    of pp), no point's peak falls (the warm-up keeps at least as many, the steady state runs at least as long)."""
    layers = [_layer("first", sizes[0], 1, 0)] + [_layer("body", sizes[1 + c % 3], kept, c) for c in range(vpp)]
    for stage in range(pp):
        fewer = Fsdp2Points()(_view(layers, pp=pp, vpp=vpp, micro_batches=rounds * pp, stage=stage))
        more = Fsdp2Points()(_view(layers, pp=pp, vpp=vpp, micro_batches=(rounds + 1) * pp, stage=stage))
        for name in ("forward", "backward", "reduce"):
            assert more[name].peak_bytes >= fewer[name].peak_bytes, (stage, name)
