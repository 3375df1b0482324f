"""fsdp2 ``reshard_after_forward_to`` equal to the FSDP shard group: torch's ``fully_shard`` takes an int equal to the
shard mesh size as ``True`` (torch cf30153, 2.13, ``_fully_shard/_fsdp_init.py`` ``_get_post_forward_mesh_info``
lines 181-182), so no post-forward copy is kept and hp prices it as 0 with resharding; the values torch refuses
(lines 165-173: not a factor of the shard mesh size) are refused in one line."""

from __future__ import annotations

import pytest

from hp_core.api import estimate, model_from_preset
from hp_core.errors import ConfigError
from hp_core.runtime_options import apply_options
from hp_core.specs import ParallelSpec, PrecisionSpec

T = 4096
PATH = "$.runtime.options.reshard_after_forward_to"
# One Llama-3-8B decoder layer's elements: q, o (4096 x 4096), k, v (1024 x 4096), gate, up, down (4096 x 14336) and
# the two norms.
LAYER = 4096 * (4096 * 2 + 1024 * 2) + 3 * 4096 * 14336 + 2 * 4096


def _stage(registry, options=None, precision=None, model="llama3-8b", **parallel):
    model = model_from_preset(model, registry).with_body_layers(4, registry.kinds_placed("body"))
    runtime = apply_options(registry.runtime("fsdp2"), options or {})
    (stage,) = estimate(model, ParallelSpec(seq_len=T, **{"dp": 8, **parallel}), runtime=runtime, registry=registry,
                        precision=precision).stages[:1]
    return stage


def _same(a, b) -> None:
    assert a.peak_points == b.peak_points and a.peak_bytes == b.peak_bytes and a.cached_bytes == b.cached_bytes


def test_the_whole_shard_group_keeps_no_post_forward_shard(registry):
    """Llama-3-8B, 4 layers: resharding to 8 ranks keeps an 8th of each layer's bf16 parameters from its forward on
    where the shard group is 16 ranks (4 * LAYER * 2 / 8 = LAYER = 218,112,000 bytes at the loss); where it is 8 ranks,
    the regular shard, so nothing beyond it: priced as 0 (hp priced those 218,112,000 bytes before)."""
    assert LAYER == 218_112_000
    plain16, to_eight16 = _stage(registry, dp=16), _stage(registry, {"reshard_after_forward_to": 8}, dp=16)
    assert to_eight16.peak_points["forward"] - plain16.peak_points["forward"] == 4 * LAYER * 2 // 8 == LAYER
    # The backward binds at the loss's (above every layer: all four shares still kept).
    assert to_eight16.peak_points["backward"] - plain16.peak_points["backward"] == LAYER
    plain8, to_eight8 = _stage(registry), _stage(registry, {"reshard_after_forward_to": 8})
    _same(to_eight8, plain8)
    # The stream pool too: a backward's all-gather input is the regular shard (not an 8th copied from a post-forward
    # one), as with 0.
    assert to_eight8.cached_bytes == plain8.cached_bytes
    # A factor below the group still keeps its share: 4 of 8 ranks, a 4th.
    to_four8 = _stage(registry, {"reshard_after_forward_to": 4})
    assert to_four8.peak_points["forward"] - plain8.peak_points["forward"] == 4 * LAYER * 2 // 4


def test_the_whole_group_under_hsdp_cp_pp_tp_and_a_cast_gather(registry):
    """The shard group is dp * cp / hsdp_replicate; at it, what torch refuses below it (a DTensor parameter under TP,
    a float8-cast all-gather) runs, resharded fully: each priced as 0."""
    hsdp = {"hsdp_replicate": 2}
    _same(_stage(registry, {**hsdp, "reshard_after_forward_to": 4}), _stage(registry, hsdp))
    _same(_stage(registry, {"reshard_after_forward_to": 8}, dp=4, cp=2), _stage(registry, dp=4, cp=2))
    pp = dict(dp=4, pp=2, micro_batch_size=1, global_batch_size=8, reshard_after_forward=True)
    _same(_stage(registry, {"reshard_after_forward_to": 4}, **pp), _stage(registry, **pp))
    _same(_stage(registry, {"reshard_after_forward_to": 4}, dp=4, tp=2), _stage(registry, dp=4, tp=2))
    cast = PrecisionSpec(recipe="torchao-float8-tensorwise")
    _same(_stage(registry, {"reshard_after_forward_to": 8}, precision=cast), _stage(registry, precision=cast))


def test_what_torch_refuses_is_refused_in_one_line(registry):
    """Not a factor of the shard group (above it, or not dividing it): torch raises ValueError; hp one line naming the
    group and its factors."""
    for options, parallel, group, use in (
            ({"reshard_after_forward_to": 16}, {}, 8, "2, 4, 8 or 0 (8,"),
            ({"reshard_after_forward_to": 3}, {}, 8, "2, 4, 8 or 0 (8,"),
            ({"reshard_after_forward_to": 8, "hsdp_replicate": 2}, {}, 4, "2, 4 or 0 (4,"),
            ({"reshard_after_forward_to": 2}, {"dp": 1}, 1, "0")):
        with pytest.raises(ConfigError) as err:
            _stage(registry, options, **parallel)
        n = options["reshard_after_forward_to"]
        assert err.value.path == PATH and "\n" not in str(err.value)
        assert str(err.value).startswith(
            f"{PATH}: {n} must be a factor of the FSDP shard group of {group} ranks (dp * cp / hsdp_replicate), as "
            f"torch's fully_shard requires of an int reshard_after_forward; use {use}"), str(err.value)
    assert str(err.value).endswith("use 0")
    # 1 stays refused whatever the layout (priced as 0 where torch keeps every layer gathered).
    with pytest.raises(ConfigError, match="1 changes nothing as priced"):
        _stage(registry, {"reshard_after_forward_to": 1})


def test_the_whole_dense_group_under_ep_needs_the_experts_group_too(registry):
    """Under EP the routed experts are sharded over their own expert data-parallel ranks (world / (pp * ep * etp)),
    which torch checks the same int against: the dense group of 8 at dp 8, ep 2 is not a factor of the experts' 4
    (refused); at dp 4, tp 2, ep 2 both groups are 4 ranks, so both reshard fully: priced as 0."""
    moe = "qwen3-30b-a3b"
    with pytest.raises(ConfigError) as err:
        _stage(registry, {"reshard_after_forward_to": 8}, model=moe, ep=2)
    assert str(err.value) == (
        f"{PATH}: 8 is the dense layers' whole shard group, but under ep 2 the routed experts are sharded over their "
        "own 4 ranks, where torch's fully_shard takes it as a factor of that mesh (or refuses it) and cannot reshard "
        "their DTensor parameters to a smaller mesh; use 0")
    layout = dict(model=moe, dp=4, tp=2, ep=2)
    _same(_stage(registry, {"reshard_after_forward_to": 4}, **layout), _stage(registry, **layout))


def test_embedding_unit_own_beside_the_whole_group(registry):
    """torchtitan's own embedding unit resharded as a bool: the whole group is that bool (accepted, priced as without
    it); below the group still refused."""
    own = {"embedding_unit": "own"}
    _same(_stage(registry, {**own, "reshard_after_forward_to": 8}), _stage(registry, own))
    with pytest.raises(ConfigError, match="embedding_unit own") as err:
        _stage(registry, {**own, "reshard_after_forward_to": 4})
    assert err.value.path == PATH
