"""hp_core.testing: its fixtures (loaded through the ``pytest11`` entry point) and the contract catching each breach.

A toy kind keeps the contract; each flawed variant breaks one rule and must be
caught with a message naming the rule. The toy: a norm over ``h`` and a
projection to ``4h`` split over TP, keeping the norm's input and output (``normOp``)
and the projection's output.
"""

from __future__ import annotations

import itertools

import attrs
import pytest

from hp_core.errors import ConfigError
from hp_core.markers import hookimpl
from hp_core.registry import Registry
from hp_core.testing import CONTRACT_SEQ_LEN, ContractReport, check_layer_kind
from hp_core.costs import ActivationTerm, Flops, LayerContext, LayerCost, LayerWork, ParamCount
from hp_core.types import LayerKind
from hp_plugins.kinds.dense import DenseConfig
from hp_plugins.kit import tp_collectives


@attrs.frozen(kw_only=True)
class ToyConfig:
    hidden_size: int


def _toy(flaw: str = ""):
    """The toy kind's evaluator, with one *flaw*."""
    calls = itertools.count()

    def evaluate(c: ToyConfig, x: LayerContext) -> LayerCost:
        act, h = x.precision.activation_bytes, c.hidden_size
        hidden = x.tokens * h * act // x.sp_degree
        wide = x.tokens * 4 * h * act // x.tp
        terms = [ActivationTerm("norm_in", hidden), ActivationTerm("norm_out", hidden, "normOp"),
                 ActivationTerm("proj_out", wide, None, True)]
        params = [ParamCount("norm", "dense", h, False), ParamCount("proj", "dense", 4 * h * h, True)]
        working = hidden + wide
        # One TP block: its projection split over TP, its input gathered and output reduced (hp_plugins.kit.work).
        flops = Flops(matmul_flops=2 * x.tokens * h * 4 * h / x.tp)
        work = LayerWork(collectives=tp_collectives(x, 1, x.tokens * h * act))
        if flaw == "states no work":
            work = None
        elif flaw == "no tp collective":
            work = LayerWork()
        elif flaw == "collective split by tp":
            work = LayerWork(collectives=tp_collectives(x, 1, x.tokens * h * act / x.tp))
        elif flaw == "flops grow with tp":
            flops = Flops(matmul_flops=2 * x.tokens * h * 4 * h * x.tp)
        elif flaw == "constant term":
            terms.append(ActivationTerm("table", 4096))
        elif flaw == "tp_split not divided":
            terms[2] = ActivationTerm("proj_out", x.tokens * 4 * h * act, None, True)
        elif flaw == "undeclared switch":
            terms[2] = ActivationTerm("proj_out", wide, "softmax", True)
        elif flaw == "nondeterministic":
            working += next(calls) * 2
        elif flaw == "input above kept":
            return LayerCost(params=tuple(params), activations=tuple(terms[1:]), input_bytes=4 * hidden,
                             working_bytes=working, forward=flops, work=work)
        elif flaw == "working not affine":
            working = x.micro_batch_size * working
        elif flaw == "duplicate op":
            terms.append(ActivationTerm("norm_in", hidden))
        elif flaw == "uneven shards":
            params[1] = ParamCount("proj", "dense", 4 * h * h + 1, True)
        elif flaw == "params depend on tp":
            params[0] = ParamCount("norm", "dense", h * x.tp, False)
        elif flaw == "sp keeps more":
            terms.append(ActivationTerm("sp_copy", x.tokens * h * act * (2 if x.sp else 1)))
        elif flaw == "keeps nothing":
            terms, hidden = [], 0
        return LayerCost(params=tuple(params), activations=tuple(terms), input_bytes=hidden, working_bytes=working,
                         forward=flops, work=work)

    return evaluate


def _kind(flaw: str = "", **fields) -> LayerKind:
    return LayerKind(name="toy", config_type=ToyConfig, evaluate=_toy(flaw), switches=("normOp",),
                     description="a toy kind", **fields)


SAMPLE = [ToyConfig(hidden_size=64)]


def test_a_kind_keeping_the_contract_passes_and_reports_what_ran():
    report = check_layer_kind(_kind(), SAMPLE)
    # Per sample: 20 layouts (tp 1; tp 2 and 4 with SP off and on; micro-batch 1 and 2; two attention
    # implementations) evaluated twice; 4 micro-batch bases x 3 sizes and 5 TP-split layouts per
    # implementation; 3 for the TP shards: 40 + 24 + 10 + 3 = 77. The work: the 20 layouts again, and
    # per implementation tp=1 and, at tp 2 and 4 with SP off and on, micro-batch 1 and 2: 20 + 2 x 9 = 38.
    assert report == ContractReport(kind="toy", samples=1, evaluations=115, refused=())
    assert check_layer_kind(_kind(), SAMPLE * 2).evaluations == 230
    assert CONTRACT_SEQ_LEN == 64


@pytest.mark.parametrize(
    ("flaw", "message"),
    [
        ("constant term", "every term must be linear in the micro-batch size"),
        ("tp_split not divided", r"term proj_out \(tp_split=True\): 32768 bytes, expected 16384"),
        ("undeclared switch", "names switch 'softmax', which the kind does not declare"),
        ("nondeterministic", "not deterministic"),
        ("input above kept", "full recompute must keep least"),
        ("working not affine", "working_bytes must be affine in the micro-batch size"),
        ("duplicate op", "duplicate op names"),
        ("uneven shards", "do not split evenly over tp=2"),
        ("params depend on tp", "must not depend on the layout"),
        ("sp keeps more", "sequence parallelism must never keep more"),
        ("keeps nothing", "kept_bytes is 0"),
        ("states no work", r"states no work \(LayerCost.work\)"),
        ("no tp collective", r"TP splits its parameters \['proj'\] but it states no tp collective"),
        ("collective split by tp", "a TP collective's buffer is the whole activation"),
        ("flops grow with tp", "tensor parallelism never adds work to a rank"),
    ],
)
def test_each_breach_is_caught_and_named(flaw, message):
    with pytest.raises(AssertionError, match=message) as caught:
        check_layer_kind(_kind(flaw), SAMPLE)
    assert str(caught.value).startswith("layer kind 'toy', ")


def test_declarations_and_samples_are_checked():
    with pytest.raises(AssertionError, match="switches listed twice"):
        check_layer_kind(LayerKind(name="toy", config_type=ToyConfig, evaluate=_toy(), switches=("normOp", "normOp")),
                         SAMPLE)
    with pytest.raises(AssertionError, match="sample #0: is a dict, not the kind's ToyConfig"):
        check_layer_kind(_kind(), [{"hidden_size": 64}])
    with pytest.raises(AssertionError, match="give at least one sample config"):
        check_layer_kind(_kind(), [])
    with pytest.raises(ValueError, match="tp_degrees must start at 1"):
        check_layer_kind(_kind(), SAMPLE, tp_degrees=(2, 4))


def test_a_sample_its_validator_refuses_at_tp1_fails():
    def refuse(config, context):
        raise ConfigError("$.parallel.tp", "never")

    with pytest.raises(AssertionError, match="the validator refused a layout the sample is meant to run"):
        check_layer_kind(_kind(validate=refuse), SAMPLE)


def test_refused_layouts_are_skipped_and_reported():
    def needs_sp(config, context):
        if context.tp > 1 and not context.sp:
            raise ConfigError("$.parallel.sp", "needs sequence parallelism")

    report = check_layer_kind(_kind(validate=needs_sp), SAMPLE)
    # 12 of the 20 layouts twice, 3 micro-batch bases x 3, 1 TP-split layout per implementation, 3: 47;
    # the work: the 12 layouts again, and per implementation tp=1 and tp 2 and 4 with SP: 12 + 2 x 5 = 22.
    assert report.evaluations == 69
    assert len(report.refused) == 8 and all("sp=off" in where for where in report.refused)


def test_a_kind_by_name_through_a_registry(hp_registry):
    dense = DenseConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4, intermediate_size=512)
    assert check_layer_kind("dense", [dense], registry=hp_registry).evaluations == 115
    with pytest.raises(ConfigError, match="unknown layer kind 'toy'"):
        check_layer_kind("toy", SAMPLE, registry=hp_registry)


# ----------------------------------------------------------------------------- the fixtures


def test_the_plugin_is_loaded_through_its_entry_point(request):
    assert request.config.pluginmanager.hasplugin("hp_planner")


def test_hp_registry_defaults_to_the_builtins(hp_registry, hp_plugins_under_test):
    assert hp_plugins_under_test == ()
    assert isinstance(hp_registry, Registry)
    assert {k.name for k in hp_registry.layer_kinds} >= {"dense", "embedding", "output"}
    assert {p.distribution for p in hp_registry.plugins} == {"hp-planner"}


def test_hp_installed_registry_holds_the_builtins(hp_installed_registry):
    assert hp_installed_registry.provider("hp_layer_kinds", "dense").distribution == "hp-planner"


class ToyPlugin:
    """A one-off plugin class, as an author registers in code."""

    @hookimpl
    def hp_layer_kinds(self):
        yield _kind()


class TestAnAuthorsPlugin:
    @pytest.fixture
    def hp_plugins_under_test(self):
        return [ToyPlugin()]

    def test_hp_registry_holds_the_plugin_under_test(self, hp_registry):
        kind = hp_registry.layer_kind("toy")
        assert hp_registry.provider("hp_layer_kinds", "toy").distribution == "(registered in code)"
        assert check_layer_kind(kind, SAMPLE, registry=hp_registry).evaluations == 115

    def test_each_test_gets_a_fresh_manager(self, hp_plugin_manager):
        assert hp_plugin_manager.get_plugin("ToyPlugin") is not None
        assert not hp_plugin_manager.is_blocked("ToyPlugin")
