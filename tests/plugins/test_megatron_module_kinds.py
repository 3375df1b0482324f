"""The megatron runtime's one statement of which layer kinds a recompute module acts on (``module_kinds``),
checked against the layer configs of every model preset: Megatron-Core's ``moe_act`` acts on every layer with
routed experts (``moe/experts.py``), ``mlp`` on every layer with a dense MLP and no experts
(``transformer_layer.py``: ``recompute_mlp`` where ``not self.is_moe_layer``). The importer, the exporter and
``Runtime.executes`` all read it through ``Runtime.module_acts_on``."""

from __future__ import annotations

import pytest

from hp_core.api import build_registry, model_from_preset
from hp_plugins.kit.builder import FC1_SWITCH


@pytest.fixture(scope="module")
def registry():
    return build_registry()


def _body_groups(registry):
    for name in registry.models:
        name = name if isinstance(name, str) else name.name
        for group in model_from_preset(name, registry=registry).layers:
            kind = registry.layer_kind(group.kind)
            if kind.placement == "body":
                yield name, kind, group.config


def test_module_kinds_follow_the_presets_layer_configs(registry):
    runtime = registry.runtime("megatron")
    checked = set()
    for name, kind, config in _body_groups(registry):
        experts = (getattr(config, "num_experts", 0) or 0) > 0
        assert runtime.module_acts_on("moe_act", kind.name) == experts, (name, kind.name)
        assert runtime.module_acts_on("mlp", kind.name) == (not experts and FC1_SWITCH in kind.switches), (name, kind.name)
        checked.add(kind.name)
    # Every body kind of the presets with experts or a dense MLP was seen (Qwen3-Next's and Nemotron-H's included).
    assert {"moe", "mla_moe", "gdn_moe", "gated_attention_moe", "moe_only", "dense", "mla", "mlp"} <= checked


def test_moe_act_runs_on_every_kind_with_routed_experts(registry):
    runtime = registry.runtime("megatron")
    for kind in ("moe", "mla_moe", "gdn_moe", "gated_attention_moe", "moe_only"):
        assert runtime.executes(frozenset({"ffAct"}), kind), kind
    # A dense layer's activation alone has no module: mlp takes its FC1 outputs with it.
    assert not runtime.executes(frozenset({"ffAct"}), "dense")
    assert runtime.executes(frozenset({"ffFc1", "ffAct"}), "dense")
    assert not runtime.executes(frozenset({"ffFc1", "ffAct"}), "moe")
