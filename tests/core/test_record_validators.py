"""Plugin records (schedules, optimizers, runtime options, precision recipes, kinds) check their fields with
hp_core.validators: one SpecError per bad field, its path the field's name, its message starting with it."""

from __future__ import annotations

import math

import pytest

from hp_core.errors import SpecError
from hp_core.optimizer_types import Optimizer, ParamSlice
from hp_core.precision_recipes import GemmOperand, PrecisionRecipe
from hp_core.runtime_options import RuntimeOption
from hp_core.schedules import Pass, Schedule, ScheduleLayout, StagePasses
from hp_core.types import LayerKind


def _schedule(name):
    return Schedule(name, in_flight=lambda layout, stage: (1,), pipeline_seconds=lambda layout, passes: 0.0,
                    default_micro_batches=lambda pp, vpp: pp)


def _optimizer(name):
    return Optimizer(name, state_bytes=lambda s, p: 0.0, step_bytes=lambda s, p: 0.0)


@pytest.mark.parametrize("make, field, message", [
    (lambda: ScheduleLayout(0, 1, 4), "pp", "pp must be a positive integer, got 0"),
    (lambda: ScheduleLayout(2, 1, True), "micro_batches", "micro_batches must be a positive integer, got True"),
    (lambda: Pass("backwards"), "name", "name must be one of 'forward', 'backward', 'input_gradient', 'weight_gradient', "
                                        "got 'backwards'"),
    (lambda: StagePasses(-1.0), "seconds", "seconds must be a non-negative finite number, got -1.0"),
    (lambda: StagePasses(1.0, forward_seconds=math.nan), "forward_seconds",
     "forward_seconds must be a non-negative finite number, got nan"),
    (lambda: _schedule("One-F-One-B"), "name", "name must be a lower-case name (letters, digits, '_', '-', '.'), "
                                               "got 'One-F-One-B'"),
    (lambda: _optimizer("1adam"), "name", "name must be a lower-case name (letters, digits, '_', '-', '.'), got '1adam'"),
    (lambda: LayerKind(name="Dense", config_type=dict, evaluate=None), "name",
     "name must be a lower-case name (letters, digits, '_', '-', '.'), got 'Dense'"),
    (lambda: ParamSlice(None, -3), "elements", "elements must be a non-negative integer, got -3"),
    (lambda: RuntimeOption("fuse-ce", "bool", True, "d", "s", None), "name",
     "name must be lower-case letters, digits and '_', got 'fuse-ce'"),
    (lambda: RuntimeOption("fuse_ce", "boolean", True, "d", "s", None), "type",
     "type must be one of 'bool', 'int', 'float', 'choice', got 'boolean'"),
    (lambda: GemmOperand("fp6", "mx_32"), "format", "format must be one of 'bf16', 'e4m3', 'e5m2', 'mxfp8', 'nvfp4', "
                                                     "got 'fp6'"),
    (lambda: PrecisionRecipe(name=" ", description="d", source="s"), "name", "name must be a non-empty string, got ' '"),
    (lambda: PrecisionRecipe(name="x", description="d", source="s", quantize_passes=-1), "quantize_passes",
     "quantize_passes must be a non-negative integer, got -1"),
])
def test_a_bad_record_field_is_one_spec_error_naming_it(make, field, message):
    with pytest.raises(SpecError) as caught:
        make()
    assert caught.value.path == field
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)  # what plugin code written before SpecError catches


def test_schedule_names_may_start_with_a_digit_and_others_may_not():
    assert _schedule("1f1b").name == "1f1b"
    assert _optimizer("adam-8bit").name == "adam-8bit"
    with pytest.raises(SpecError):
        _optimizer("8bit-adam")
