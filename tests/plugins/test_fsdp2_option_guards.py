"""The fsdp2 runtime refuses an option stated where it changes no figure (docs/runtimes.md, fsdp2, "Options that need
zero 3"): below ``parallel.zero`` 3 the runtime prices the planner's default points and no stream pool, and the step
time reads the FSDP overlaps only at zero 3 (``hp_core/engine/timing/step.py``); under PP every unit reduce-scatters
once after the stage's last backward (``fsdp_reduce_scatter_overlap`` unread); under interleaved 1F1B the multi-stage
runtime gathers whole chunks (``fsdp_prefetch`` unread); without resharding after forward every layer is kept
gathered (``reshard_last_layer_after_forward: false`` changes nothing). A default value is never refused."""

from __future__ import annotations

import pytest

from hp_core.api import estimate, model_from_preset
from hp_core.errors import ConfigError
from hp_core.runtime_options import apply_options
from hp_core.specs import ParallelSpec

_NEEDS_ZERO_3 = "{} needs parallel.zero 3, got zero {{}}: below it {}, so it changes nothing; {}"
_DEFAULT_POINTS = "the memory is the planner's default points (no fully_shard unit), which it does not enter"
_GATHERED = "no parameter is gathered"
# option, stated value, the refusal's text (without the field path) with the zero left to fill in.
BELOW_ZERO_3 = (
    ("fsdp_prefetch", False, _NEEDS_ZERO_3.format(
        "false (each layer's parameter all-gather exposed, not prefetched during the previous layer's compute)",
        "no layer gathers its parameters before its forward", "use true")),
    ("fsdp_reduce_scatter_overlap", False, _NEEDS_ZERO_3.format(
        "false (each layer's gradient reduce-scatter exposed, not overlapped with the next layer's backward)",
        "no layer reduce-scatters its own gradients (the data-parallel reduction is priced in buckets)", "use true")),
    ("zero_grad_set_to_none", False, _NEEDS_ZERO_3.format(
        "false (the sharded gradients held through a step's forward)", _DEFAULT_POINTS, "use true")),
    ("cpu_offload", True, _NEEDS_ZERO_3.format(
        "true (sharded parameters, gradients and optimizer states in host memory)", _DEFAULT_POINTS, "use false")),
    ("reshard_after_forward_to", 2, _NEEDS_ZERO_3.format(
        "2 (each layer's parameters kept sharded over 2 ranks from its forward to its backward)", _GATHERED,
        "use 0")),
    ("reshard_last_layer_after_forward", False, _NEEDS_ZERO_3.format(
        "false (the last decoder layer kept gathered from its forward to its backward)", _GATHERED, "use true")),
    ("embedding_unit", "own", _NEEDS_ZERO_3.format(
        "own (the embedding an FSDP unit of its own, resharded after forward)", _GATHERED, "use root")),
)
DEFAULTS = {"fsdp_prefetch": True, "fsdp_reduce_scatter_overlap": True, "optimizer_implementation": "foreach",
            "zero_grad_set_to_none": True, "cpu_offload": False, "reshard_after_forward_to": 0,
            "reshard_last_layer_after_forward": True, "embedding_unit": "root"}


def _stage(registry, options=None, layers=4, **parallel):
    model = model_from_preset("llama3-8b", registry).with_body_layers(layers, registry.kinds_placed("body"))
    runtime = apply_options(registry.runtime("fsdp2"), options or {})
    return estimate(model, ParallelSpec(**dict(dict(seq_len=1024, dp=8), **parallel)), runtime=runtime,
                    registry=registry).stages


def _refusal(registry, options, **parallel) -> str:
    with pytest.raises(ConfigError) as refused:
        _stage(registry, options, **parallel)
    return str(refused.value)


@pytest.mark.parametrize(("option", "value", "text"), BELOW_ZERO_3, ids=[row[0] for row in BELOW_ZERO_3])
def test_an_fsdp_only_option_below_zero_3_is_refused(registry, option, value, text):
    for zero in (0, 2):
        assert _refusal(registry, {option: value}, zero=zero) == f"$.runtime.options.{option}: " + text.format(zero)
    # At zero 3 the same value is priced (reshard_after_forward_to 2 divides the 8 ranks' shard group).
    assert _stage(registry, {option: value}, zero=3)


def test_stated_defaults_below_zero_3_are_accepted_and_change_nothing(registry):
    """Every option above at its default, stated, below zero 3: the default points, as with none stated."""
    for zero in (0, 1, 2):
        (stated,), (plain,) = _stage(registry, DEFAULTS, zero=zero), _stage(registry, zero=zero)
        assert stated.memory == plain.memory and stated.peak_points == plain.peak_points
        assert stated.cached_bytes == plain.cached_bytes == 0


_PIPELINE = dict(zero=3, dp=2, pp=2, micro_batch_size=1, global_batch_size=16)


def test_the_reduce_scatter_overlap_under_pp_is_refused(registry):
    """Under PP torch's pipelining reduce-scatters every unit once after the stage's last backward
    (``pipelining/stage.py`` ``perform_reduce_grad``), which the step time prices exposed whole either way."""
    text = ("$.runtime.options.fsdp_reduce_scatter_overlap: false (each layer's gradient reduce-scatter exposed, not "
            "overlapped with the next layer's backward) changes nothing under pp > 1 (pp 2): torch's pipelining "
            "reduce-scatters every unit once after the stage's last backward (perform_reduce_grad), exposed whole "
            "either way; use true")
    assert _refusal(registry, {"fsdp_reduce_scatter_overlap": False}, **_PIPELINE) == text
    assert _refusal(registry, {"fsdp_reduce_scatter_overlap": False}, reshard_after_forward=True, schedule="gpipe",
                    **_PIPELINE) == text
    assert _stage(registry, {"fsdp_reduce_scatter_overlap": True}, **_PIPELINE)


def test_prefetch_under_interleaved_1f1b_is_refused(registry):
    """Under interleaved 1F1B the multi-stage runtime gathers whole chunks where its UNSHARD actions put them; a
    single-stage schedule's gathers are prefetched layer by layer, so there false is priced."""
    assert _refusal(registry, {"fsdp_prefetch": False}, layers=8, vpp=2, **_PIPELINE) == (
        "$.runtime.options.fsdp_prefetch: false (each layer's parameter all-gather exposed, not prefetched during the "
        "previous layer's compute) changes nothing under interleaved 1F1B (vpp 2): torch's multi-stage runtime "
        "gathers whole chunks where its UNSHARD actions put them, not layer by layer; use true")
    assert _stage(registry, {"fsdp_prefetch": True}, layers=8, vpp=2, **_PIPELINE)
    assert _stage(registry, {"fsdp_prefetch": False}, **_PIPELINE)


def test_the_last_layer_kept_gathered_without_resharding_is_refused(registry):
    """With parallel.reshard_after_forward false every layer keeps its gathered parameters to its backward: the last
    one kept so too changes nothing. With resharding it is priced (the last layer's gathered bf16 parameters more)."""
    assert _refusal(registry, {"reshard_last_layer_after_forward": False}, reshard_after_forward=False) == (
        "$.runtime.options.reshard_last_layer_after_forward: false (the last decoder layer kept gathered from its "
        "forward to its backward) changes nothing where no layer reshards after forward "
        "(parallel.reshard_after_forward false): every layer is kept gathered so; use true, or state "
        "parallel.reshard_after_forward: true")
    (kept,), (plain,) = _stage(registry, {"reshard_last_layer_after_forward": False}), _stage(registry)
    layer = 4096 * (4096 * 2 + 1024 * 2) + 3 * 4096 * 14336 + 2 * 4096  # one Llama 3 8B decoder layer's elements
    assert kept.peak_points["forward"] - plain.peak_points["forward"] == layer * 2


def test_torchtitan_s_own_embedding_unit_without_resharding_stays_accepted(registry):
    """torchtitan runs its embedding's own unit under ``fsdp_reshard_after_forward: never`` at pp 1 and by default
    under PP (the torchtitan importer states own there): kept gathered, priced as root, not refused."""
    for parallel in (dict(reshard_after_forward=False), _PIPELINE):
        own, root = _stage(registry, {"embedding_unit": "own"}, **parallel), _stage(registry, **parallel)
        assert [stage.memory for stage in own] == [stage.memory for stage in root]


def test_an_inert_option_is_a_one_line_cli_error(capsys):
    from cli_run import run  # tests/cli_run.py

    args = ["estimate", "--model", "llama3-8b", "--num-layers", "4", "--dp", "8", "--seq-len", "1024",
            "--runtime", "fsdp2", "--runtime-option", "reshard_last_layer_after_forward=false", "--hardware", "h100-sxm"]
    status, _, err = run(capsys, *args, "--zero", "2")
    assert status != 0
    text = dict((option, text) for option, _, text in BELOW_ZERO_3)["reshard_last_layer_after_forward"].format(2)
    assert err.strip().splitlines() == ["hp estimate: error: $.runtime.options.reshard_last_layer_after_forward: "
                                        + text]
    assert "Traceback" not in err
    status, _, err = run(capsys, *args, "--zero", "3")
    assert status == 0, err


@pytest.mark.parametrize("reshard", ["default", "always", "never"])
@pytest.mark.parametrize(("pp", "schedule"), [(1, "1F1B"), (2, "1F1B"), (2, "GPipe"), (2, "Interleaved1F1B")])
def test_a_torchtitan_import_states_no_refused_combination(registry, reshard, pp, schedule):
    """The torchtitan importer states only embedding_unit of these options (own, or root for a tied embedding), at
    the runtime's zero 3: every imported reshard policy and schedule estimates, save interleaved 1F1B resharding after
    forward, refused at $.parallel.reshard_after_forward before any option (check_fsdp_pipeline)."""
    from hp_core.io.convert import ConfigFile, structure
    from hp_core.io.job import resolve_job
    from hp_plugins.importers.torchtitan import import_torchtitan

    data = {"model": {"name": "llama3", "flavor": "8B"},
            "training": {"local_batch_size": 4, "global_batch_size": 16, "seq_len": 2048},
            "parallelism": {"data_parallel_shard_degree": 2, "pipeline_parallel_degree": pp,
                            "pipeline_parallel_schedule": schedule, "fsdp_reshard_after_forward": reshard}}
    document = import_torchtitan(data, registry).document
    assert set(document["runtime"]["options"]) & set(DEFAULTS) <= {"embedding_unit"}
    assert "zero" not in document["parallel"]
    job = resolve_job(structure(dict(document), ConfigFile, registry), registry)
    if schedule == "Interleaved1F1B" and reshard == "always":
        with pytest.raises(ConfigError) as refused:
            estimate(job.model, job.parallel, registry=registry, runtime=job.runtime, recompute=job.recompute)
        assert refused.value.path == "$.parallel.reshard_after_forward"
        return
    assert estimate(job.model, job.parallel, registry=registry, runtime=job.runtime, recompute=job.recompute).stages


def test_resharding_to_one_rank_is_refused(registry):
    """``reshard_after_forward_to: 1`` is priced as 0 (parallel.reshard_after_forward says) with or without resharding;
    torch's fully_shard takes an int 1 as ``reshard_after_forward=False`` (torch cf30153 ``_fsdp_init.py``
    ``_get_post_forward_mesh_info``): refused, pointing there."""
    text = ("$.runtime.options.reshard_after_forward_to: 1 changes nothing as priced (the same as 0: "
            "parallel.reshard_after_forward says); torch's fully_shard takes an int 1 as reshard_after_forward=False "
            "(every layer kept gathered): use 0, with parallel.reshard_after_forward: false for that")
    for reshard in (True, False):
        assert _refusal(registry, {"reshard_after_forward_to": 1}, reshard_after_forward=reshard) == text
    assert _refusal(registry, {"reshard_after_forward_to": 1}, **_PIPELINE) == text


def test_a_search_counts_the_refusals_under_their_reasons(registry):
    """A layout search rejects the pp > 1 layouts an inert overlap option refuses under R_PIPELINE_TRAIT (a
    PipelineTraitError), and says the refusal of reshard_after_forward_to 1, which no layout runs, once (a RunRefusal,
    raised again by the search rather than counted)."""
    from hp_core.engine.layout_checks import PipelineTraitError
    from hp_core.engine.search.layouts import R_PIPELINE_TRAIT, _reason_of
    from hp_core.errors import RunRefusal

    for options, extra in (({"fsdp_reduce_scatter_overlap": False}, {}), ({"fsdp_prefetch": False}, {"vpp": 2})):
        with pytest.raises(PipelineTraitError) as refused:
            _stage(registry, options, layers=8, **extra, **_PIPELINE)
        assert _reason_of(refused.value) == R_PIPELINE_TRAIT
    with pytest.raises(RunRefusal) as refused:
        _stage(registry, {"reshard_after_forward_to": 1})
    with pytest.raises(RunRefusal):
        _reason_of(refused.value)


def test_the_optimizer_implementation_below_zero_3_moves_the_step_time_alone(registry):
    """Below zero 3 the memory is the planner's default points (no optimizer step), but the step time prices foreach
    AdamW's eight passes (80 bytes an fp32 element) against the fused kernel's one (28): accepted, time alone moves."""
    from hp_core.api import step_time

    model = model_from_preset("llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body"))
    found = {}
    for value in ("foreach", "fused"):
        runtime = apply_options(registry.runtime("fsdp2"), {"optimizer_implementation": value})
        parallel = ParallelSpec(seq_len=1024, dp=8, zero=1)
        found[value] = (estimate(model, parallel, runtime=runtime, registry=registry).stages[0].memory,
                        step_time(model, parallel, runtime=runtime, hardware="h100-sxm", registry=registry))
    assert found["foreach"][0] == found["fused"][0]
    assert found["foreach"][1].optimizer_seconds > 2 * found["fused"][1].optimizer_seconds

