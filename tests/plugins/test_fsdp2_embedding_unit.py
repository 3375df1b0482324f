"""The fsdp2 runtime's ``embedding_unit`` (docs/runtimes.md, fsdp2): ``own`` is torchtitan's wrapping from
pytorch/torchtitan@83e6941 (``torchtitan/distributed/fsdp.py`` ``apply_fsdp_to_decoder`` lines 191-204 at bcc09297a:
``fully_shard(model.tok_embeddings, reshard_after_forward=...)``, then ``fully_shard([model.norm, model.lm_head],
reshard_after_forward=False)`` by default), where ``root`` keeps the embedding gathered in the root unit. Figures by
hand from the layers' sizes."""

from __future__ import annotations

import pytest

from hp_core.api import estimate, model_from_preset
from hp_core.errors import ConfigError
from hp_core.peak_points import StageLayer, StageView
from hp_core.runtime_options import apply_options
from hp_core.specs import ParallelSpec
from hp_plugins.runtimes.fsdp2_points import Fsdp2Points

T, V, H = 4096, 128256, 4096
LAYER = 4096 * (4096 * 2 + 1024 * 2) + 3 * 4096 * 14336 + 2 * 4096  # one Llama 3 8B decoder layer's elements
EMBEDDING = V * H
HEAD = V * H + H  # the head and the final norm
TOTAL = EMBEDDING + HEAD + 4 * LAYER


def _stage(registry, options=None, **parallel):
    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    runtime = apply_options(registry.runtime("fsdp2"), options or {})
    (stage,) = estimate(model, ParallelSpec(seq_len=T, dp=8, **parallel), runtime=runtime, registry=registry).stages
    return stage


def test_the_embedding_s_own_unit_frees_its_copy_after_forward(registry):
    """Llama 3 8B, 4 layers, 8 ranks, the upcast loss: it binds at the loss's backward, which holds the root's gathered
    parameters and one layer's all-gather output; with the embedding's own unit, resharded after its forward, the head
    and norm's only: 2 V H bytes less, at every point above the layers."""
    root, own = _stage(registry), _stage(registry, {"embedding_unit": "own"})
    assert root.binding_point == own.binding_point == "backward"
    assert root.memory.communication_buffers_bytes == (EMBEDDING + HEAD) * 2 + LAYER * 2
    assert own.memory.communication_buffers_bytes == HEAD * 2 + LAYER * 2
    assert root.peak_bytes - own.peak_bytes == EMBEDDING * 2 == 1_050_673_152
    assert root.peak_points["forward"] - own.peak_points["forward"] == EMBEDDING * 2


def test_the_all_gather_pool_in_torchtitan_s_order(registry):
    """The all-gather stream's pool (docs/runtimes.md, Cached), best fit over two steps, 8 ranks (inputs an 8th of the
    outputs). torchtitan's order: the embedding (input e in segment A, output E in B), the layers (each input in A; the
    first layer's output Y no longer fits A's rest, e - y, nor B, still held: segment C; then B and C in turn), then the
    head and norm (input r = e + 1,024 bytes: no longer fits A, takes C's freed block; output R = E + 8,192 fits no free
    block: segment D); backward re-gathers the layers and the embedding in those blocks, the head's unit not at all. So
    e + E + Y + R, where the root's unit (embedding, head and norm gathered first, as one) reserved its input and output
    and a layer's output. Cached beside the loss's backward: the reduce-scatter pool (every sharded fp32 gradient), the
    all-gather pool less the layer output the point holds, and the upcast loss's bf16 logits block."""
    E, R, Y = EMBEDDING * 2, HEAD * 2, LAYER * 2
    e, r, y = E // 8, R // 8, Y // 8
    assert r == e + 1024 and R == E + 8192 and Y > e - y and r > e and r < Y
    own_pool = e + E + Y + R
    root_pool = (E + R) // 8 + (E + R) + Y
    assert (own_pool, root_pool) == (2_668_912_640, 2_800_247_808)
    reduce_pool, hole = TOTAL * 4 // 8, T * V * 2
    root, own = _stage(registry), _stage(registry, {"embedding_unit": "own"})
    assert root.cached_bytes == reduce_pool + root_pool - Y + hole
    assert own.cached_bytes == reduce_pool + own_pool - Y + hole == 4_244_924_416


def _view(first_working=0, lowest_working=0, lowest_input=0, **parallel):
    """A synthetic stage: an embedding of 8,000 elements, two body layers of 800 keeping 10,000 bytes each, a head of
    8,008; 8 ranks; the lowest layer's or the embedding's backward made to bind by its working set."""
    from hp_core.api import build_registry

    precision = build_registry().runtime("fsdp2").precision
    layers = (StageLayer("embedding", "first", 0, first_working, 0, {"dense": 8000}, 1),
              StageLayer("dense", "body", 10_000, lowest_working, 0, {"dense": 800}, 1, input_bytes=lowest_input),
              StageLayer("dense", "body", 10_000, 10, 0, {"dense": 800}, 1),
              StageLayer("output", "last", 0, 0, 0, {"dense": 8008}, 1))
    params = 17_608 * 4 // 8
    layout = dict(dict(seq_len=16, dp=8, reshard_after_forward=True), **parallel)
    return StageView(0, layers, (params, params, 0, 2 * params), {}, ParallelSpec(**layout), precision, 3, 1, 0)


def test_the_backward_walk_by_hand():
    """The buffers each point holds (bf16 gathered: the embedding 16,000 bytes, a layer 1,600, the head 16,016; the
    reduce-scatter input of the layer above, 800 x 4 = 3,200)."""
    root, own = Fsdp2Points(), Fsdp2Points(embedding_unit="own")
    # At the loss: the root's parameters and one layer's all-gather output; the head's with the embedding's own unit.
    assert root(_view())["forward"].communication_buffers_bytes == 16_000 + 16_016 + 1_600
    assert own(_view())["forward"].communication_buffers_bytes == 16_016 + 1_600
    # The lowest layer's backward: its own parameters, the layer above's reduce-scatter input and the all-gather output
    # in flight, which is the embedding's (prefetched: FSDP2's _backward_prefetch, the unit before it in forward order).
    lowest = _view(lowest_working=1_000_000)
    assert root(lowest)["backward"].communication_buffers_bytes == 16_000 + 16_016 + 1_600 + 1_600 + 3_200
    assert own(lowest)["backward"].communication_buffers_bytes == 16_016 + 1_600 + 16_000 + 3_200
    # Its post-backward moment (its whole bf16 gradients and its input's gradient): the root's embedding, or the
    # embedding's all-gather output in flight: the same bytes either way.
    moment = _view(lowest_input=5_000_000)
    assert root(moment)["backward"].communication_buffers_bytes == 16_000 + 16_016 + 1_600 + 3_200
    assert own(moment)["backward"].communication_buffers_bytes == 16_016 + 1_600 + 16_000 + 3_200
    # The embedding's own backward: its gathered parameters again and the lowest layer's reduce-scatter input; nothing
    # is left to prefetch (the root's walk counts a layer's all-gather output there).
    first = _view(first_working=1_000_000)
    assert root(first)["backward"].communication_buffers_bytes == 16_000 + 16_016 + 1_600 + 3_200
    assert own(first)["backward"].communication_buffers_bytes == 16_016 + 16_000 + 3_200


def test_without_resharding_the_own_unit_is_the_root_s_bytes():
    """torchtitan gives the embedding the layers' reshard rule: not resharded (a stated false, or its default under
    PP), it stays gathered as in the root unit."""
    root, own = Fsdp2Points(), Fsdp2Points(embedding_unit="own")
    kept = _view(reshard_after_forward=False)
    assert own(kept) == root(kept)


def test_what_is_refused():
    own = Fsdp2Points(embedding_unit="own")
    with pytest.raises(ConfigError, match="reshard_after_forward_to"):
        Fsdp2Points(embedding_unit="own", reshard_to=2)(_view())
    with pytest.raises(ConfigError, match="reshard_last_layer_after_forward"):
        Fsdp2Points(embedding_unit="own", reshard_last_layer=False)(_view())
    with pytest.raises(ConfigError, match="embedding_unit"):
        own(_view(pp=2))
    assert own(_view(pp=2, reshard_after_forward=False)) == Fsdp2Points()(_view(pp=2, reshard_after_forward=False))


def test_cached_bytes_beside_the_walk_s_points():
    """The synthetic stage's all-gather pool in torchtitan's order (every request at most 1 MiB: the small pool, split
    down to 512 bytes), two steps: the embedding's input (2,000) and output (16,000) take segments A and B; the first
    layer's input (200) and output (1,600) split A (its rest, 200, stays whole); the second layer's output splits B;
    the head's input (2,002) no longer fits A's 2,000 and splits B's rest, and its output (16,016) fits nothing free:
    segment C. Every later request fits those blocks: 2,000 + 16,000 + 16,016. The reduce-scatter pool holds every
    sharded fp32 gradient (4,000 + 2 x 400 + 4,004) less those the point holds (the layers above it). Beside the lowest
    layer's backward the all-gather output in flight is the embedding's (16,000), beside the embedding's own backward
    none."""
    own = Fsdp2Points(embedding_unit="own")
    pool, reduce_pool = 2_000 + 16_000 + 16_016, 4_000 + 2 * 400 + 4_004
    lowest = _view(lowest_working=1_000_000)
    point = own(lowest)["backward"]
    assert own.cached_bytes(lowest, "backward", point) == (reduce_pool - 400) + (pool - 16_000)
    first = _view(first_working=1_000_000)
    point = own(first)["backward"]
    assert own.cached_bytes(first, "backward", point) == (reduce_pool - 800) + pool
    # Above the layers, one layer's output (1,600) is in flight, as beside the root's walk.
    top = _view()
    assert own.cached_bytes(top, "forward", own(top)["forward"]) == reduce_pool + pool - 1_600


_BELOW_ZERO_3 = ("$.runtime.options.embedding_unit: own (the embedding an FSDP unit of its own, resharded after "
                 "forward) needs parallel.zero 3, got zero {}: below it no parameter is gathered, so it changes "
                 "nothing; use root")


def test_own_below_zero_3_is_refused(registry):
    """Below zero 3 the runtime prices the default points and no stream pool (no unit gathers or reshards): own would
    change no figure, so it is refused naming the field, where root gives the default points unchanged."""
    import attrs

    for zero in (0, 1, 2):
        view = attrs.evolve(_view(), zero=zero)
        with pytest.raises(ConfigError) as refused:
            Fsdp2Points(embedding_unit="own")(view)
        assert str(refused.value) == _BELOW_ZERO_3.format(zero)
        assert Fsdp2Points()(view) == {}  # _view's default points
        assert Fsdp2Points().cached_bytes(view, "forward", None) == 0
    # Through the API: the layout's zero 2 with the stated option.
    with pytest.raises(ConfigError) as refused:
        _stage(registry, {"embedding_unit": "own"}, zero=2)
    assert str(refused.value) == _BELOW_ZERO_3.format(2)
    assert _stage(registry, {"embedding_unit": "root"}, zero=2).memory == _stage(registry, zero=2).memory


def test_own_below_zero_3_is_a_one_line_cli_error(capsys):
    from cli_run import run  # tests/cli_run.py

    args = ["estimate", "--model", "llama3-8b", "--num-layers", "4", "--dp", "8", "--seq-len", "1024",
            "--runtime", "fsdp2", "--runtime-option", "embedding_unit=own", "--hardware", "h100-sxm"]
    status, _, err = run(capsys, *args, "--zero", "2")
    assert status != 0
    assert err.strip().splitlines() == ["hp estimate: error: " + _BELOW_ZERO_3.format(2)]
    assert "Traceback" not in err
    status, _, err = run(capsys, *args, "--zero", "3")
    assert status == 0, err
