"""Megatron-Core's ``layernorm`` recompute module: only the norms built as modules of their own.

``TransformerLayer.__init__`` (megatron/core/transformer/transformer_layer.py at NVIDIA/Megatron-LM@d98e8a6, lines
470-536) recomputes ``input_layernorm`` and ``pre_mlp_layernorm`` where they are not ``IdentityOp``, each under
``CheckpointWithoutOutput`` (its input, the residual stream, kept; its output discarded after the block and rebuilt in
backward). In the Transformer Engine specs (``gpt_layer_specs.py``, ``hybrid_layer_specs.py``,
``experimental_attention_variant_module_specs.py``) only an MoE layer's pre-MLP norm and MLA's input norm are
``TENorm`` modules; the attention's input norm is fused into ``linear_qkv``, a dense MLP's pre-norm into
``linear_fc1``, Mamba's and GDN's into ``in_proj`` (``TELayerNormColumnParallelLinear``, which keeps the norm's output
for its weight gradient), MLA's latent norms into the up projections; no module recomputes a QK-norm. The megatron
runtime states it through its trait ``megatron_layernorm_recompute`` (``LayerBuilder.norm_switch``). Figures by hand:
128 tokens (sequence 128, micro-batch 1), bf16 activations, TP 1 unless said, hidden width 64 (256 for the
Qwen3-Next and hybrid samples), so a block's norm output is ``128 x h x 2`` bytes: 16,384 (65,536 at 256).
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hp_core.api import build_registry
from hp_core.engine.precision import apply_recipe
from hp_core.engine.prepare import _evaluate, layer_context, with_sublayers
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.kinds.dense import DenseConfig
from hp_plugins.kinds.hybrid import AttentionLayerConfig, MoELayerConfig
from hp_plugins.kinds.mamba import Mamba2LayerConfig
from hp_plugins.kinds.mla import MLAConfig, MLAMoEConfig
from hp_plugins.kinds.moe import MoEConfig
from samples_ssm import SSM_SAMPLES

REGISTRY = build_registry()
MEGATRON = REGISTRY.runtime("megatron")
GENERIC = REGISTRY.runtime("generic")
LAYERNORM = MEGATRON.recompute_modules["layernorm"]
NORM = 128 * 64 * 2  # one block norm's output at h 64: 16,384 bytes

_GQA = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2)
_EXPERTS = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)
_MLA = dict(hidden_size=64, num_attention_heads=4, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
            v_head_dim=16, q_lora_rank=32)
SAMPLES = {
    "dense": DenseConfig(**_GQA, intermediate_size=128),
    "moe": MoEConfig(**_GQA, **_EXPERTS, shared_expert_intermediate_size=48),
    "mla": MLAConfig(**_MLA, intermediate_size=128),
    "mla_moe": MLAMoEConfig(**_MLA, **_EXPERTS),
    "moe_only": MoELayerConfig(hidden_size=64, **_EXPERTS, shared_expert_intermediate_size=48),
    "attention": AttentionLayerConfig(**_GQA),
    "mamba2": Mamba2LayerConfig(hidden_size=64, mamba_num_heads=4, mamba_head_dim=32, ssm_state_size=16, n_groups=2,
                                chunk_size=64),
    **{kind: SSM_SAMPLES[kind][0] for kind in ("gdn", "gdn_moe", "gated_attention", "gated_attention_moe")},
}


def _cost(kind, config=None, runtime=MEGATRON, parallel=ParallelSpec(seq_len=128, ep=2, dp=2)):
    context = with_sublayers(layer_context(parallel, PrecisionSpec(), "flash", 1, runtime.traits), REGISTRY)
    return _evaluate(REGISTRY.layer_kind(kind, "$"), config or SAMPLES[kind], context, "$")


def _dropped(cost, switches=LAYERNORM):
    return {t.op: t.bytes for t in cost.activations if t.switch in switches}


def test_the_megatron_runtime_states_the_trait_and_the_module():
    assert "megatron_layernorm_recompute" in MEGATRON.traits and LAYERNORM == frozenset({"normOp"})
    # Every other built-in runtime keeps every norm output under normOp (fsdp2's op-level SAC among them).
    for runtime in REGISTRY.runtimes:
        runtime = runtime if not isinstance(runtime, str) else REGISTRY.runtime(runtime)
        assert ("megatron_layernorm_recompute" in runtime.traits) == (runtime.name == "megatron"), runtime.name


def test_a_dense_gpt_layer_drops_nothing():
    # linear_qkv and linear_fc1 are TELayerNormColumnParallelLinear: both norm outputs (16,384 bytes each) stay.
    cost = _cost("dense")
    assert _dropped(cost) == {}
    assert cost.kept_under(LAYERNORM) == cost.kept_bytes
    terms = {t.op: (t.bytes, t.switch) for t in cost.activations}
    assert terms["attn_norm_out"] == terms["mlp_norm_out"] == (NORM, None)
    # The generic runtime drops both: 32,768 bytes.
    generic = _cost("dense", runtime=GENERIC)
    assert _dropped(generic) == {"attn_norm_out": NORM, "mlp_norm_out": NORM}
    assert generic.kept_bytes - generic.kept_under(LAYERNORM) == 32_768


def test_a_qk_norm_is_recomputed_by_no_module():
    # q and k after their norms, (a + g) d 2 = (4 + 2) x 16 x 128 x 2 = 24,576 bytes, kept by the attention kernel.
    config = DenseConfig(**_GQA, intermediate_size=128, qk_norm=True)
    assert _dropped(_cost("dense", config)) == {}
    assert _dropped(_cost("dense", config, GENERIC)) == {"attn_norm_out": NORM, "mlp_norm_out": NORM, "q_k": 24_576}


def test_an_moe_layer_drops_only_its_pre_mlp_norm_output():
    assert _dropped(_cost("moe")) == {"moe_norm_out": NORM}
    assert _dropped(_cost("moe", runtime=GENERIC)) == {"attn_norm_out": NORM, "moe_norm_out": NORM}
    # Under TP 2 with sequence parallelism the norm's output is the rank's sequence shard: 8,192 bytes.
    sharded = _cost("moe", parallel=ParallelSpec(seq_len=128, tp=2, sp=True, ep=2, dp=2))
    assert _dropped(sharded) == {"moe_norm_out": NORM // 2}


def test_mla_drops_its_input_norm_output_and_keeps_its_latent_norms():
    # input_layernorm is a TENorm (read by linear_q_down_proj and linear_kv_down_proj); the latent norms are fused into
    # the up projections: q 128 x 32 x 2 = 8,192 and kv 128 x 16 x 2 = 4,096 bytes kept.
    cost = _cost("mla")
    assert _dropped(cost) == {"attn_norm_out": NORM}
    terms = {t.op: (t.bytes, t.switch) for t in cost.activations}
    assert terms["q_latent_norm_out"] == (8_192, None) and terms["kv_latent_norm_out"] == (4_096, None)
    assert _dropped(_cost("mla", runtime=GENERIC)) == {"attn_norm_out": NORM, "q_latent_norm_out": 8_192,
                                                       "kv_latent_norm_out": 4_096, "mlp_norm_out": NORM}
    assert _dropped(_cost("mla_moe")) == {"attn_norm_out": NORM, "moe_norm_out": NORM}


def test_the_hybrid_layers():
    # 'E' (MoETransformerLayer): pre_mlp_layernorm = TENorm; '*' (linear_qkv) and 'M' (MambaMixer in_proj) fused.
    assert _dropped(_cost("moe_only")) == {"moe_norm_out": NORM}
    assert _dropped(_cost("attention")) == {}
    assert _dropped(_cost("mamba2")) == {}
    assert _dropped(_cost("mamba2", runtime=GENERIC)) == {"mamba_norm_out": NORM}


def test_the_qwen3_next_layers():
    # GatedDeltaNet's in_proj and the standard attention's linear_qkv are fused (fuse_input_layernorm), a dense MLP's
    # linear_fc1 too; an MoE layer's pre-MLP norm is a TENorm (_get_moe_module_spec: fuse False). h 256: 65,536 bytes.
    wide = 128 * 256 * 2
    assert _dropped(_cost("gdn")) == {} and _dropped(_cost("gated_attention")) == {}
    assert _dropped(_cost("gdn_moe")) == {"moe_norm_out": wide}
    assert _dropped(_cost("gated_attention_moe")) == {"moe_norm_out": wide}


def test_under_fp8_the_recomputed_norm_keeps_nothing_and_the_fused_one_its_quantized_copy():
    # fp8-current: a linear's owned input is kept as its 1-byte quantized copy. MLA's input norm output (8,192 bytes
    # quantized) is dropped whole: Megatron-Core sets the down projections to keep the discarded bf16 tensor itself
    # (set_for_recompute_input_layernorm, multi_latent_attention.py). The dense layer's fused norms keep their copies.
    recipe = REGISTRY.precision_recipe("fp8-current")
    mla = apply_recipe(_cost("mla"), recipe, 2)
    assert _dropped(mla) == {"attn_norm_out": NORM // 2}
    terms = {t.op: (t.bytes, t.switch) for t in mla.activations}
    assert terms["q_latent_norm_out"] == (4_096, None) and terms["kv_latent_norm_out"] == (2_048, None)
    dense = apply_recipe(_cost("dense"), recipe, 2)
    assert _dropped(dense) == {} and {t.op: t.bytes for t in dense.activations}["attn_norm_out"] == NORM // 2
    # The MoE block's norm output is the router's bf16 input too (no gemm_input): 16,384 bytes dropped as in bf16.
    assert _dropped(apply_recipe(_cost("moe"), recipe, 2)) == {"moe_norm_out": NORM}


def _switches(modules, kind):
    """The switches Megatron's --recompute-modules *modules* recompute on a layer of *kind* (benchmarks/fp8_runs.py
    moe_recompute; the importer's rule)."""
    found = frozenset()
    for module in modules:
        if MEGATRON.module_acts_on(module, kind):
            found |= MEGATRON.recompute_modules[module] & frozenset(REGISTRY.layer_kind(kind, "$").switches)
    return found


MODULES = sorted(MEGATRON.recompute_modules)
COSTS = {kind: _cost(kind) for kind in SAMPLES}
RECIPE_COSTS = {kind: apply_recipe(cost, REGISTRY.precision_recipe("mxfp8"), 2) for kind, cost in COSTS.items()}


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(SAMPLES)), st.sets(st.sampled_from(MODULES)), st.sets(st.sampled_from(MODULES)),
       st.booleans())
def test_more_modules_never_keep_more(kind, fewer, extra, quantized):
    more = fewer | extra
    cost = (RECIPE_COSTS if quantized else COSTS)[kind]
    assert cost.kept_under(_switches(more, kind)) <= cost.kept_under(_switches(fewer, kind))
    # And layernorm alone drops exactly the norms of their own: never more than the layer's block norm outputs.
    assert cost.kept_bytes - cost.kept_under(_switches({"layernorm"}, kind)) <= 2 * 128 * 256 * 2


def test_every_module_set_on_every_sample_is_monotone():
    # The property above over every pair of the 2^6 module sets (exhaustive, 64 x 64 x 11 kinds).
    subsets = [frozenset(c) for n in range(len(MODULES) + 1) for c in itertools.combinations(MODULES, n)]
    for kind, cost in COSTS.items():
        kept = {s: cost.kept_under(_switches(s, kind)) for s in subsets}
        for a, b in itertools.product(subsets, subsets):
            if a <= b:
                assert kept[b] <= kept[a], (kind, sorted(a), sorted(b))
