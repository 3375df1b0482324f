"""hp's errors survive pickling (``hp search --workers N`` raises them in worker processes and re-raises them in
the parent; an error that cannot be rebuilt there broke the process pool, a traceback in place of the one line)."""

from __future__ import annotations

import pickle

import pytest

from cli_run import run
from hp_core.engine.layout_checks import PipelineTraitError
from hp_core.errors import ConfigError, HPError, PlanNotExecutable, PluginError, RunRefusal, SpecError
from hp_core.specs import RecomputeSpec
from hp_core.specs.overlap import FsdpPipelineError

_ERRORS = (
    HPError("a problem"),
    ConfigError("$.precision.recipe", "no FP8 attention here"),
    RunRefusal("$.runtime.options.attention_kernel", "sdpa runs none"),
    FsdpPipelineError("$.parallel.schedule", "schedule zb refused"),
    PipelineTraitError("$.parallel.pp", "pp=2: not priced"),
    SpecError("tp", "tp must be >= 1, got 0"),
    PlanNotExecutable("megatron", "runs only full or selective", RecomputeSpec()),
    PluginError("my-kind", "raised KeyError: 'x'"),
    PluginError("a and b", "both register dense"),
)


@pytest.mark.parametrize("error", _ERRORS, ids=lambda e: type(e).__name__)
def test_every_error_round_trips_through_pickle(error):
    error.extra = 7  # an attribute set after construction travels too
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error) and back.args == error.args
    assert vars(back) == vars(error)


def test_search_with_workers_reports_a_run_wide_refusal_on_one_line(capsys):
    # 40d60e4's Hopper MLA refusal, raised in a worker: one line and status 2, as with one worker.
    argv = ["search", "--model", "deepseek-v3", "--num-layers", "5", "--devices", "64", "--hardware", "h100-sxm",
            "--runtime", "megatron", "--precision", "fp8-current-fp8-attention"]
    for workers in ("1", "2"):
        status, out, err = run(capsys, *argv, "--workers", workers)
        assert status == 2 and out == ""
        assert len(err.strip().splitlines()) == 1, err
        assert err.startswith("hp search: error: $.precision.recipe: precision recipe fp8-current-fp8-attention runs "
                              "attention in e4m3 on NVIDIA H100 SXM 80GB")
        assert "Traceback" not in err


def test_only_run_wide_refusals_stop_a_search():
    from hp_core.engine.search.layouts import R_MODEL, R_OPTION, _reason_of
    from hp_core.errors import RunRefusal

    with pytest.raises(RunRefusal):
        _reason_of(RunRefusal("$.runtime.options.attention_kernel", "no FP8 attention"))
    with pytest.raises(ConfigError):
        _reason_of(ConfigError("$.precision.recipe", "no mxfp8 on hopper"))
    # A layout's own refusal at a runtime option rejects that layout only, counted as the option's (not the model's).
    assert _reason_of(ConfigError("$.runtime.options.reshard_after_forward_to", "4 must divide 6")) == R_OPTION
    assert _reason_of(ConfigError("$.parallel.tp", "tp 3 does not divide 32 heads")) == R_MODEL
