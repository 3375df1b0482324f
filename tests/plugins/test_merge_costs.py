"""hp_plugins.kit.merge.merge_costs: what a merged module keeps under a setting one of its layers measured whole, and
the layers' assumptions and inner kinds (docs/kinds.md, ``mtp`` ``layers``)."""

from __future__ import annotations

from hp_core.costs import ActivationTerm, LayerCost
from hp_plugins.kit.merge import merge_costs

NORM, FF = frozenset({"normOp"}), frozenset({"ffAct"})


def _costs():
    # Layer one keeps 100 B under normOp and 50 B always, and measured 40 B kept under normOp alone (a census policy);
    # layer two keeps 30 B under normOp and 20 B always, measured nothing.
    one = LayerCost(params=(), activations=(ActivationTerm("norm_out", 100, "normOp"), ActivationTerm("x", 50)),
                    input_bytes=0, working_bytes=0, measured=((NORM, 40),), assumed=((FF, "policy of one"),))
    two = LayerCost(params=(), activations=(ActivationTerm("norm_out", 30, "normOp"), ActivationTerm("x", 20)),
                    input_bytes=0, working_bytes=0, assumed=((FF, "policy of one"), (NORM, "policy of two")),
                    inner_kinds={"moe"})
    return one, two


def test_a_setting_one_layer_measured_keeps_each_layer_s_bytes_under_it():
    one, two = _costs()
    merged = merge_costs([one, two], ["a.", "b."], "$.test")
    # Under normOp: layer one's measured 40 B and layer two's unswitched 20 B: 60 B (the terms' sum, 50 + 20 = 70 B,
    # dropped the measurement). Nothing recomputed: every term, 200 B.
    assert merged.kept_under(NORM) == 60
    assert merged.kept_under(frozenset()) == 200
    assert merged.measured == ((NORM, 60),)


def test_assumptions_and_inner_kinds_carry_once():
    one, two = _costs()
    merged = merge_costs([one, two], ["a.", "b."], "$.test")
    assert merged.assumed == ((FF, "policy of one"), (NORM, "policy of two"))
    assert merged.inner_kinds == frozenset({"moe"})


def test_a_module_applied_twice_measures_twice():
    one, _ = _costs()
    merged = merge_costs([one, one], ["a.", "b."], "$.test")
    assert merged.kept_under(NORM) == 2 * (40)
    assert merged.kept_under(FF) == 2 * 150


def test_an_mtp_module_keeps_its_layer_s_measurement_and_its_own_terms():
    # An MTP module whose transformer layer measured 1,000 B kept under normOp (a census policy) keeps, under normOp,
    # those 1,000 B plus its own terms (embedding norm, eh_proj input, head norm and loss: none gated by a switch),
    # what it keeps beyond its layer with nothing recomputed.
    import attrs

    from hp_plugins.kinds.mtp import MTPConfig, evaluate_mtp
    from test_mtp_depths import ATTENTION, H, VOCAB, _context, _own
    from hp_core.specs import ParallelSpec

    x = _context(ParallelSpec(seq_len=512))
    measured = attrs.evolve(x, sublayer=lambda group: attrs.evolve(_own(group, x), measured=((NORM, 1000),),
                                                                   assumed=((FF, "layer's policy"),)))
    inner = _own(ATTENTION, x)
    mtp = evaluate_mtp(MTPConfig(vocab_size=VOCAB, hidden_size=H, layer=ATTENTION), measured)
    own_bytes = mtp.kept_bytes - inner.kept_bytes
    assert own_bytes > 0 and all(t.switch is None for t in mtp.activations if not t.op.startswith("layer."))
    assert mtp.kept_under(NORM) == 1000 + own_bytes
    assert mtp.assumed == ((FF, "layer's policy"),)
