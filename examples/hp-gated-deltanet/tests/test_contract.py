"""Both kinds keep the contract every built-in kind keeps (hp_core.testing.check_layer_kind)."""

from __future__ import annotations

import pytest

from hp_core.testing import check_layer_kind
from hp_core.costs import TRAITS
from hp_gated_deltanet.deltanet import GatedDeltaNetConfig, GatedDeltaNetMoEConfig

# Sized so that tp 1, 2 and 4 split every head count and width evenly.
_MIXER = dict(hidden_size=256, linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=32,
              linear_value_head_dim=32)
SAMPLES = {
    "gated_deltanet": [
        GatedDeltaNetConfig(**_MIXER, intermediate_size=512),
        # one value head per key head (no repeat), a wider conv, a plain GeLU MLP
        GatedDeltaNetConfig(hidden_size=256, linear_num_key_heads=8, linear_num_value_heads=8, linear_key_head_dim=16,
                            linear_value_head_dim=64, linear_conv_kernel_dim=8, intermediate_size=512,
                            gated_mlp=False, hidden_act="gelu"),
    ],
    "gated_deltanet_moe": [
        GatedDeltaNetMoEConfig(**_MIXER, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
                               shared_expert_intermediate_size=128, shared_expert_gate=True),
        GatedDeltaNetMoEConfig(**_MIXER, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
                               capacity_factor=1.25, pad_to_capacity=True),
    ],
}


@pytest.mark.parametrize("traits", [frozenset(), frozenset(TRAITS)], ids=["plain", "every-trait"])
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_kind_keeps_the_contract(hp_registry, name, traits):
    report = check_layer_kind(hp_registry.layer_kind(name), SAMPLES[name], registry=hp_registry, traits=traits)
    assert report.samples == 2
    # Evaluations per sample: 20 layouts twice (determinism), 4 micro-batch bases x 3 sizes and
    # 5 TP-split layouts per attention implementation, 3 for the TP shards: 40 + 24 + 10 + 3 = 77;
    # its work: the 20 layouts again, tp=1 and tp 2 and 4 (SP off and on, micro-batch 1 and 2) per implementation: 38.
    if name == "gated_deltanet" or "moe_tp_without_sp" in traits:
        # (the moe_tp_without_sp trait lets a MoE layer run tp > 1 without sequence parallelism)
        assert (report.evaluations, report.refused) == (2 * 115, ())
    else:
        # A MoE layer refuses tp > 1 without sequence parallelism: 12 of the 20 layouts run
        # twice, 3 micro-batch bases, 1 TP-split layout per implementation: 24 + 18 + 2 + 3 = 47; its
        # work: the 12 layouts again, tp=1 and tp 2 and 4 with SP (micro-batch 1 and 2) per implementation: 22.
        assert report.evaluations == 2 * 69
        assert len(report.refused) == 2 * 8 and all("sp=off" in where for where in report.refused)


def test_the_kinds_are_registered_with_their_switches(hp_registry):
    for name in SAMPLES:
        kind = hp_registry.layer_kind(name)
        assert kind.placement == "body"
        assert kind.switches == ("normOp", "gather", "ffAct", "attUp")
        assert kind.selective == frozenset()  # no trainer ships a selective policy for these layers
        assert hp_registry.provider("hp_layer_kinds", name).distribution == "(registered in code)"
