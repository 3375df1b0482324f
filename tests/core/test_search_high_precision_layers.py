"""The layout search with layers kept in the compute dtype under a recipe (PrecisionSpec.high_precision_layers_at_start /
_at_end; docs/search.md "Layers kept in the compute dtype"): held fixed, priced in every candidate as estimate prices
them, a pipeline whose stages hold fewer body layers rejected by its own reason, and no candidate lost to a bound."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import attrs
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from hp_core.api import build_registry, estimate, model_from_preset, plan_recompute, search, step_time
from hp_core.cli import main
from hp_core.engine.search import balanced_layers
from hp_core.engine.search.layouts import R_KEPT, R_LAYERS, Layout, _Job
from hp_core.errors import ConfigError
from hp_core.specs import RecomputeSpec, Setting

REGISTRY = build_registry(use_env=False)
MODEL = model_from_preset("llama3-8b", REGISTRY).with_body_layers(4, REGISTRY.kinds_placed("body"))
B200 = REGISTRY.hardware_preset("b200").spec
BASE = REGISTRY.runtime("megatron").precision
ARGS = dict(registry=REGISTRY, devices=8, hardware=B200, global_batch_size=16, seq_len=2048, runtime="megatron")


def _precision(recipe: str, start: int = 0, end: int = 0):
    return attrs.evolve(BASE, recipe=recipe, high_precision_layers_at_start=start, high_precision_layers_at_end=end)


def test_the_top_layouts_are_priced_as_estimate_prices_them():
    # Every candidate ranked is the estimate of its layout with the same precision: the planner's plan, the peak
    # of estimate under that plan and the step time of step_time under it, to the bit.
    precision = _precision("mxfp8", 1, 1)
    result = search(MODEL, top=5, precision=precision, **ARGS)
    assert len(result.top) == 5 and result.high_precision_layers == (1, 1)
    for c in result.top:
        parallel = c.layout.parallel(2048, 16)
        plan = plan_recompute(MODEL, parallel, registry=REGISTRY, hardware=B200, runtime="megatron", precision=precision)
        assert (plan.plan.step_seconds, plan.plan.peak_bytes, plan.recompute) == (c.step_seconds, c.peak_bytes, c.recompute)
        est = estimate(MODEL, parallel, registry=REGISTRY, runtime="megatron", hardware=B200, precision=precision,
                       recompute=c.recompute)
        assert est.peak_bytes == c.peak_bytes
        assert tuple(stage.peak_bytes for stage in est.stages) == c.stage_peaks_bytes
        timed = step_time(MODEL, parallel, registry=REGISTRY, hardware=B200, runtime="megatron", precision=precision,
                          recompute=c.recompute)
        assert timed.step_seconds == c.step_seconds
    # The kept layers are priced, not ignored: the fastest layout with both kept runs its two bf16 layers' GEMMs
    # at the bf16 rate, slower than with every layer in MXFP8, and holds no MXFP8 copies of their weights.
    best = result.best.layout.parallel(2048, 16)
    quantized = plan_recompute(MODEL, best, registry=REGISTRY, hardware=B200, runtime="megatron",
                               precision=_precision("mxfp8"))
    assert result.best.step_seconds > quantized.plan.step_seconds
    assert result.best.peak_bytes < quantized.plan.peak_bytes


def test_every_layer_kept_is_the_bf16_search_at_pp_1():
    # All four body layers kept in bf16 under MXFP8 is the bf16 run (tests/core/test_high_precision_layers.py): the
    # search ranks the same pp 1 layouts with the same figures, and rejects every pipelined one (a stage of pp 2
    # holds 2 < 4 body layers). Of the 222 candidates (tests/core/test_search.py counts them), 80 are at pp 1,
    # 10 at pp 8 (more stages than body layers) and 132 at pp 2 and 4.
    kept = search(MODEL, top=6, precision=_precision("mxfp8", 4, 0), **ARGS)
    bf16 = search(MODEL, top=6, precision=_precision("bf16"), fixed={"pp": 1}, **ARGS)
    assert [(c.layout, c.step_seconds, c.peak_bytes, c.recompute) for c in kept.top] == \
           [(c.layout, c.step_seconds, c.peak_bytes, c.recompute) for c in bf16.top]
    assert (kept.considered, bf16.considered) == (222, 80)
    assert kept.rejected[R_LAYERS] == 10 and kept.rejected[R_KEPT] == 132
    assert kept.planned + sum(kept.rejected.values()) == kept.considered


def test_a_pipeline_whose_stages_hold_fewer_layers_than_kept_is_rejected_by_its_reason():
    # pp 4 over 4 body layers: one a stage, fewer than the 2 kept at the start (Megatron-Core refuses it; estimate too).
    # dp * cp * tp = 2: (1, 1, 2) and (1, 2, 1) with 5 micro-batch sizes (divisors of 16), (2, 1, 1) with 4 (of 8);
    # 14 sizes at ZeRO 0 and 1: 28 candidates, each counted under R_KEPT, none planned, no error.
    precision = _precision("mxfp8", 2, 0)
    for executor in (None, ThreadPoolExecutor(max_workers=2)):
        result = search(MODEL, fixed={"pp": 4}, precision=precision, executor=executor, **ARGS)
        assert (result.considered, result.planned, result.top, dict(result.rejected)) == (28, 0, (), {R_KEPT: 28})
    layout = Layout(dp=2, cp=1, tp=1, pp=4, vpp=1, ep=1, etp=1, zero=1, micro_batch_size=1)
    with pytest.raises(ConfigError, match=r"^\$\.precision\.high_precision_layers_at_start: .* more than the 1 body layers"):
        estimate(MODEL, layout.parallel(2048, 16), registry=REGISTRY, runtime="megatron", precision=precision)
    # The second phase counts the same refusal by the same reason, were a candidate to reach it.
    from hp_core.engine.search.best_first import _refine

    job = _Job(MODEL, REGISTRY, B200, "megatron", precision, "formulas", 0, 2048, 16)
    assert _refine(job, layout).reason == R_KEPT
    # At pp 2 (2 layers a stage) the same counts fit.
    assert search(MODEL, fixed={"pp": 2, "vpp": 1}, precision=precision, top=1, **ARGS).best is not None


def test_what_no_layout_runs_is_refused_before_the_search():
    # Delayed scaling (an amax history) with layers kept in bf16, and more kept layers than the body holds: refused
    # whatever the layout, so one line naming the field, not a count.
    with pytest.raises(ConfigError, match=r"^\$\.precision\.high_precision_layers_at_start: precision recipe fp8-delayed"):
        search(MODEL, precision=_precision("fp8-delayed", 1, 1), **ARGS)
    with pytest.raises(ConfigError, match=r"^\$\.precision\.high_precision_layers_at_end: high_precision_layers_at_end is 5"):
        search(MODEL, precision=_precision("mxfp8", 0, 5), **ARGS)
    # Without a recipe the counts change nothing (docs/precision.md): the bf16 search, stating none kept.
    plain = search(MODEL, top=3, precision=_precision("bf16", 2, 2), **ARGS)
    assert plain.high_precision_layers == (0, 0)
    assert plain == search(MODEL, top=3, precision=_precision("bf16"), **ARGS)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


_BODY = 4  # MODEL's body layers


def _layouts(devices: int = 4, global_batch_size: int = 8):
    """Every candidate the search enumerates for MODEL (docs/search.md "What is enumerated"; no experts)."""
    for dp in _divisors(devices):
        for cp in _divisors(devices // dp):
            for tp in _divisors(devices // (dp * cp)):
                pp = devices // (dp * cp * tp)
                for vpp in _divisors(_BODY // pp) if pp > 1 else [1]:
                    for mbs in _divisors(global_batch_size // dp):
                        for zero in (0, 1):
                            yield Layout(dp=dp, cp=cp, tp=tp, pp=pp, vpp=vpp, ep=1, etp=1, zero=zero, micro_batch_size=mbs,
                                         layers_per_stage=balanced_layers(_BODY, pp * vpp))


def _full_peaks(precision) -> list[int]:
    """The peak of every candidate estimate accepts with every body layer fully recomputed (the least any plan
    holds), ascending: the memory limits at which a candidate just fits."""
    peaks = set()
    for layout in _layouts():
        try:
            peaks.add(estimate(MODEL, layout.parallel(2048, 8), registry=REGISTRY, runtime="megatron", precision=precision,
                               recompute=RecomputeSpec(default=Setting(mode="full"))).peak_bytes)
        except ConfigError:
            continue
    return sorted(peaks)


def _brute_force(precision, hardware):
    """Every candidate planned by plan_recompute: the fitting ones as ``(step seconds, key, peak, plan)``, sorted
    as the search ranks them, and how many the kept layers refuse."""
    fitting, kept = [], 0
    for layout in _layouts():
        try:
            plan = plan_recompute(MODEL, layout.parallel(2048, 8), registry=REGISTRY, hardware=hardware,
                                  runtime="megatron", precision=precision)
        except ConfigError as error:
            kept += error.path.startswith("$.precision.high_precision_layers_at_")
            continue
        if plan.fits:
            fitting.append((plan.plan.step_seconds, layout.key, plan.plan.peak_bytes, plan.recompute))
    return sorted(fitting, key=lambda c: (c[0], c[1])), kept


# No shrinking: an example takes about a second, and a failing one is reported as drawn.
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(st.integers(0, 4), st.integers(0, 4), st.sampled_from(["mxfp8", "fp8-current", "nvfp4"]), st.data(),
       st.sampled_from([1, 2, 3, 5, 100]))
def test_pruning_loses_nothing_against_brute_force(start, end, recipe, data, top):
    # 4 devices, 4 body layers, global batch 8: 92 candidates (dp 1: 8 layouts of cp tp pp vpp, 4 micro-batch sizes;
    # dp 2: 4 layouts, 3 sizes; dp 4: 1 layout, 2 sizes; ZeRO 0 and 1), each planned by plan_recompute. The device
    # memory is a candidate's fully recomputed peak, where that candidate just fits and the memory bounds are
    # tight, or 1 GiB below the least (nothing fits) or 4 GiB above the largest (everything does). A top of 100
    # holds every fitting candidate (the memory bounds alone prune), a small one lets the time bounds prune too.
    precision = _precision(recipe, start, end)
    peaks = _full_peaks(precision)
    memory = data.draw(st.sampled_from([peaks[0] - 2**30, *peaks, peaks[-1] + 4 * 2**30]), label="memory_bytes")
    hardware = attrs.evolve(B200, memory_bytes=memory)
    fitting, kept = _brute_force(precision, hardware)
    result = search(MODEL, registry=REGISTRY, devices=4, hardware=hardware, global_batch_size=8, seq_len=2048,
                    runtime="megatron", precision=precision, top=top)
    assert [(c.step_seconds, c.layout.key, c.peak_bytes, c.recompute) for c in result.top] == fitting[:top]
    assert result.rejected.get(R_KEPT, 0) == kept
    assert result.considered == 92 and result.planned + sum(result.rejected.values()) == 92


def test_a_layout_fits_only_with_its_layers_kept_and_the_search_finds_it():
    # What a memory bound taken with every layer quantized would lose. dp1 tp2 pp2 mbs8 zero1 under MXFP8, fully
    # recomputed (the least any plan holds): each stage keeps one layer in bf16 (layer 0 on stage 0, layer 3 on
    # stage 1), which drops its MXFP8 row- and column-wise weight copies, 2 * (1 + 1/32) bytes an element
    # (docs/precision.md), of its 218,103,808 GEMM weight elements (q, o 4096 x 4096; k, v 4096 x 1024; gate, up,
    # down 4096 x 14336), 109,051,904 on a rank at tp 2: 224,919,552 bytes off the peak. Between the two peaks only
    # the layout with its layers kept fits, and the search ranks it.
    layout = Layout(dp=1, cp=1, tp=2, pp=2, vpp=1, ep=1, etp=1, zero=1, micro_batch_size=8)
    full = RecomputeSpec(default=Setting(mode="full"))
    peaks = [estimate(MODEL, layout.parallel(2048, 8), registry=REGISTRY, runtime="megatron", hardware=B200, precision=p,
                      recompute=full).peak_bytes for p in (_precision("mxfp8"), _precision("mxfp8", 1, 1))]
    assert peaks[0] - peaks[1] == 109_051_904 * 66 // 32 == 224_919_552
    hardware = attrs.evolve(B200, memory_bytes=(peaks[0] + peaks[1]) // 2)
    quantized, kept = (plan_recompute(MODEL, layout.parallel(2048, 8), registry=REGISTRY, hardware=hardware,
                                      runtime="megatron", precision=p) for p in (_precision("mxfp8"), _precision("mxfp8", 1, 1)))
    assert kept.fits and not quantized.fits
    result = search(MODEL, registry=REGISTRY, devices=4, hardware=hardware, global_batch_size=8, seq_len=2048,
                    runtime="megatron", precision=_precision("mxfp8", 1, 1), top=100, fixed={"tp": 2, "pp": 2})
    assert layout.key in {c.layout.key for c in result.top}
    assert layout.key not in {c.layout.key for c in search(
        MODEL, registry=REGISTRY, devices=4, hardware=hardware, global_batch_size=8, seq_len=2048, runtime="megatron",
        precision=_precision("mxfp8"), top=100, fixed={"tp": 2, "pp": 2}).top}


@pytest.mark.parametrize("recipe, start, end", [("mxfp8", 0, 0), ("mxfp8", 1, 1), ("nvfp4", 2, 0), ("fp8-current", 0, 2)])
def test_the_first_phase_costs_are_estimates_costs(recipe, start, end):
    # The first phase bounds from the memo's evaluations (bounds._Bounder.context); they are the costs prepare
    # evaluates (the recipe applied, the kept groups in the compute dtype), so its memory bounds are estimate's.
    # Mistral-7B, 2 layers, 32k tokens, micro-batch 8 on one device: the full-recompute bound from compute-dtype
    # activations (the first phase before it applied the recipe) was 2.8 GiB (MXFP8) and 6.2 GiB (NVFP4) above
    # the estimate's peak fully recomputed.
    from hp_core.engine.search.bounds import _Bounder

    model = model_from_preset("mistral-7b", REGISTRY).with_body_layers(2, REGISTRY.kinds_placed("body"))
    precision = _precision(recipe, start, end)
    bounder = _Bounder(_Job(model, REGISTRY, B200, "megatron", precision, "formulas", 0, 32768, 8))
    for dp, tp, pp, mbs in [(1, 1, 1, 8), (1, 2, 1, 8), (1, 1, 2, 4), (2, 1, 1, 4)]:
        if max(start, end) > 2 // pp:
            continue
        layout = Layout(dp=dp, cp=1, tp=tp, pp=pp, vpp=1, ep=1, etp=1, zero=1, micro_batch_size=mbs)
        found = bounder.context(layout, mbs)
        assert found.costs == bounder.evaluated(layout).costs
        full = estimate(model, layout.parallel(32768, 8), registry=REGISTRY, runtime="megatron", hardware=B200,
                        precision=precision, recompute=RecomputeSpec(default=Setting(mode="full")))
        m = 8 // (mbs * dp)
        first = bounder.first_stage_static(layout, found.costs, 1) + sum(bounder.first_stage_activations(layout, found, m))
        assert first <= full.stages[0].peak_bytes


def test_hp_search_states_the_kept_layers(capsys):
    argv = ["search", "--model", "llama3-8b", "--num-layers", "4", "--devices", "8", "--hardware", "b200",
            "--global-batch-size", "16", "--seq-len", "2048", "--runtime", "megatron", "--precision", "mxfp8",
            "--reserve", "0", "--high-precision-layers-at-start", "1", "--high-precision-layers-at-end", "1", "--top", "3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Kept layers: the first 1 and the last 1 body layers in the compute dtype in every layout" in out
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["high_precision_layers"] == {"at_start": 1, "at_end": 1}
    expected = search(MODEL, top=3, precision=_precision("mxfp8", 1, 1), **ARGS)
    assert [c["step_seconds"] for c in doc["top"]] == [c.step_seconds for c in expected.top]
    # A pipeline too short for the kept layers is a counted rejection, not an error.
    assert main([*argv[:-6], "--high-precision-layers-at-start", "2", "--fix", "pp=4", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rejected"] == {R_KEPT: 28} and doc["top"] == []
    # Delayed scaling cannot keep layers in bf16 in any layout: one line naming the field, exit status 2.
    assert main([*argv[:argv.index("--precision")], "--precision", "fp8-delayed", *argv[argv.index("--reserve"):]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "$.precision.high_precision_layers_at_start: precision recipe fp8-delayed" in err
