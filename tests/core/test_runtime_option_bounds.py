"""Runtime options' numbers are bounded as every other integer of a spec (hp_core.bounds.MAX_INT) and finite."""

from __future__ import annotations

import pytest

from hp_core.api import apply_options
from hp_core.bounds import MAX_INT
from hp_core.errors import ConfigError
from hp_core.runtime_options import field_option

from cli_run import run


def test_an_integer_option_past_max_int_is_refused_at_its_path(registry):
    megatron = registry.runtime("megatron")
    name = "make_vocab_size_divisible_by"
    assert apply_options(megatron, {name: MAX_INT}).option_values == {name: MAX_INT}
    with pytest.raises(ConfigError, match=rf"^\$\.runtime\.options\.{name}: expected at most 9,007,199,254,740,992 "):
        apply_options(megatron, {name: MAX_INT + 1})
    with pytest.raises(ConfigError, match=rf"^\$\.runtime\.options\.{name}: expected at most .*got an integer of about 401 digits$"):
        apply_options(megatron, {name: 10**400})


@pytest.mark.parametrize("text", ["10" * 20, "1" + "0" * 400])
def test_a_huge_vocab_multiple_on_the_command_line_is_one_line_exit_2(capsys, text):
    # 10**32 used to run (a vocabulary padded to 10**32 rows); 10**400 ended in a plugin's OverflowError.
    status, out, err = run(capsys, "estimate", "--runtime-option", f"vocab_pad_multiple={text}")
    assert status == 2 and out == ""
    assert err.startswith("hp estimate: error: $.runtime.options.vocab_pad_multiple: expected at most 9,007,199,254,740,992")
    assert err.count("\n") == 1 and len(err) < 200


def _float_option():
    return field_option("scale", "precision.grad_bytes", "float", default=1.0, description="a test option",
                        source="this test", minimum=0.5)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", float("nan"), float("inf"), 10**400])
def test_a_float_option_refuses_what_is_not_finite(value):
    with pytest.raises(ConfigError, match=r"^\$\.runtime\.options\.scale: expected a finite number, got "):
        _float_option().parse(value)


def test_a_float_option_keeps_its_minimum_and_reads_text():
    option = _float_option()
    assert option.parse("0.75") == 0.75
    with pytest.raises(ConfigError, match=r"expected at least 0.5, got 0.25"):
        option.parse(0.25)
