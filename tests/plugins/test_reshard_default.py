"""``parallel.reshard_after_forward`` left out takes the runtime's default for the layout
(``Runtime.reshards_after_forward``), resolved once where the run is prepared, the same road for every runtime:
``fsdp2`` (torchtitan's ``fsdp_reshard_after_forward: default``, ``not pp_enabled``) reshards at pp 1 and not under
PP; a runtime that states nothing reshards (FSDP's own default); a stated true or false is kept as stated."""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import estimate, model_from_preset, search, step_time
from hp_core.engine.search.layouts import R_FSDP_PP
from hp_core.specs import ParallelSpec
from hp_core.types import Runtime


def _model(registry, layers: int = 4):
    return model_from_preset("llama3-8b", registry).with_body_layers(layers, registry.kinds_placed("body"))


def test_each_runtime_states_its_default_and_a_stated_value_is_kept(registry):
    defaults = {name: (registry.runtime(name).reshards_after_forward(None, 1),
                       registry.runtime(name).reshards_after_forward(None, 2))
                for name in ("fsdp2", "generic", "megatron", "hyperparallel")}
    assert defaults == {"fsdp2": (True, False), "generic": (True, True), "megatron": (True, True),
                        "hyperparallel": (True, True)}
    for name in defaults:
        for pp in (1, 2):
            assert [registry.runtime(name).reshards_after_forward(stated, pp) for stated in (True, False)] == [True, False]
    # A runtime that states nothing keeps FSDP's default, resharding, with or without PP.
    plain = Runtime(name="plain", precision=registry.runtime("generic").precision, attention="flash")
    assert (plain.reshards_after_forward(None, 1), plain.reshards_after_forward(None, 4)) == (True, True)
    with pytest.raises(TypeError):
        attrs.evolve(plain, pipeline_reshard_after_forward="no")


@pytest.mark.parametrize("pp, default", [(1, True), (2, False)])
def test_fsdp2_left_out_is_torchtitans_default(registry, pp, default):
    """llama3-8b, 4 layers, dp 8 (x pp 2: 1F1B, 4 micro-batches): the estimate and the step time left out are those of
    the stated default, the estimate's layout echoes it, and the other value prices differently."""
    hardware = registry.hardware_preset("h100-sxm").spec
    priced = {}
    for stated in (None, True, False):
        parallel = ParallelSpec(seq_len=1024, dp=8, pp=pp, micro_batch_size=1, global_batch_size=32,
                                reshard_after_forward=stated)
        found = estimate(_model(registry), parallel, runtime="fsdp2", registry=registry, hardware=hardware)
        priced[stated] = (found, step_time(_model(registry), parallel, runtime="fsdp2", registry=registry,
                                           hardware=hardware))
        assert found.layout["reshard_after_forward"] is (default if stated is None else stated)
    assert priced[None][0].stages == priced[default][0].stages and priced[None][1] == priced[default][1]
    assert priced[None][0].stages != priced[not default][0].stages


def test_a_runtime_s_pipeline_default_takes_the_same_road(registry):
    """generic at zero 3 under pp 2 (the planner's own points: two layers' gathered parameters with resharding, every
    gathered parameter of the stage without): left out it reshards, as stated true; a runtime derived from it that
    states pipeline_reshard_after_forward false prices a left-out layout as stated false."""
    generic = registry.runtime("generic")
    keeping = attrs.evolve(generic, pipeline_reshard_after_forward=False)

    def peaks(runtime, stated):
        parallel = ParallelSpec(seq_len=1024, dp=8, pp=2, zero=3, reshard_after_forward=stated)
        return [s.memory for s in estimate(_model(registry, 8), parallel, runtime=runtime, registry=registry).stages]

    assert peaks(generic, None) == peaks(generic, True) != peaks(generic, False)
    assert peaks(keeping, None) == peaks(keeping, False) == peaks(generic, False)
    # At pp 1 the derived runtime's default is its reshard_after_forward, true.
    flat = ParallelSpec(seq_len=1024, dp=8, zero=3)
    assert (estimate(_model(registry), flat, runtime=keeping, registry=registry).stages
            == estimate(_model(registry), attrs.evolve(flat, reshard_after_forward=True), runtime=generic,
                        registry=registry).stages)


def test_the_search_prices_fsdp2_interleaved_layouts(registry):
    """hp search leaves reshard_after_forward to the runtime: fsdp2's interleaved FSDP layouts (vpp 2 here) are
    priced, not refused as they were when every searched layout resharded; a runtime whose default reshards under PP
    still has them counted under the FSDP refusal."""
    args = dict(registry=registry, devices=8, hardware=registry.hardware_preset("h100-sxm").spec, global_batch_size=16,
                seq_len=1024, fixed={"pp": 2, "vpp": 2}, top=3)
    found = search(_model(registry), runtime="fsdp2", **args)
    assert R_FSDP_PP not in found.rejected and found.top and all(c.layout.vpp == 2 for c in found.top)
    best = found.top[0]
    layout = best.layout.parallel(1024, 16)
    assert layout.reshard_after_forward is None
    again = estimate(_model(registry), layout, runtime="fsdp2", registry=registry, recompute=best.recompute)
    assert again.layout["reshard_after_forward"] is False and max(s.peak_bytes for s in again.stages) == best.peak_bytes
    resharding = attrs.evolve(registry.runtime("fsdp2"), pipeline_reshard_after_forward=True)
    refused = search(_model(registry), runtime=resharding, **args)
    assert refused.rejected.get(R_FSDP_PP, 0) > 0 and not any(c.layout.dp > 1 for c in refused.top)


def test_a_peak_points_view_holds_the_resolved_layout(registry):
    """A runtime's peak points see the layout as the run resolves it: a StageView of a layout whose
    reshard_after_forward is still None (which a runtime would read as false) is refused where it is made."""
    from hp_core.peak_points import StageView
    from hp_core.specs import PrecisionSpec

    args = (0, (), (0, 0, 0, 0), {})
    rest = (PrecisionSpec(), 3, 1, 0)
    with pytest.raises(ValueError, match="reshard_after_forward"):
        StageView(*args, ParallelSpec(seq_len=16, dp=2), *rest)
    assert StageView(*args, ParallelSpec(seq_len=16, dp=2, reshard_after_forward=False), *rest).memo == {}
