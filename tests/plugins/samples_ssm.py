"""Contract samples of the state-space and hybrid kinds (``mamba2``, ``attention``, ``mlp``, ...), for test_contract.

Sized so that every degree the contract uses (``tp`` 1, 2, 4; micro-batch 1, 2, 4) divides their heads,
groups and widths.
"""

from __future__ import annotations

from hp_plugins.kinds.hybrid import AttentionLayerConfig, MLPLayerConfig, MoELayerConfig
from hp_plugins.kinds.mamba import Mamba2LayerConfig
from hp_core.specs import LayerGroup
from hp_plugins.kinds.dense import DenseConfig
from hp_plugins.kinds.embedding import EmbeddingConfig
from hp_plugins.kinds.lora import LoRAConfig
from hp_plugins.kinds.output import OutputConfig
from hp_plugins.kinds.qwen3_next import GDNConfig, GDNMoEConfig, GatedAttentionConfig, GatedAttentionMoEConfig

_GDN = dict(hidden_size=256, linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=32,
            linear_value_head_dim=32)
_GQA = dict(hidden_size=256, num_attention_heads=8, num_key_value_heads=4, head_dim=64, qk_norm=True)
_EXPERTS = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128)

SSM_SAMPLES: dict[str, list[object]] = {
    "mamba2": [
        Mamba2LayerConfig(hidden_size=256, mamba_num_heads=8, mamba_head_dim=64, ssm_state_size=16, n_groups=4,
                          chunk_size=64),
        # Bias options, a chunk that does not divide the sequence and 4 groups of 2 heads.
        Mamba2LayerConfig(hidden_size=256, mamba_num_heads=8, mamba_head_dim=32, ssm_state_size=32, n_groups=4,
                          conv_kernel=3, chunk_size=48, use_bias=True, use_conv_bias=False),
    ],
    "attention": [
        AttentionLayerConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4, head_dim=64),
        AttentionLayerConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=4, attention_dropout=0.1,
                             attention_bias=True),
    ],
    "gdn": [GDNConfig(**_GDN, intermediate_size=512)],
    "gdn_moe": [GDNMoEConfig(**_GDN, **_EXPERTS, shared_expert_intermediate_size=128, shared_expert_gate=True)],
    "gated_attention": [GatedAttentionConfig(**_GQA, intermediate_size=512),
                        GatedAttentionConfig(**_GQA, intermediate_size=512, attention_bias=True, attention_out_bias=True)],
    "gated_attention_moe": [GatedAttentionMoEConfig(**_GQA, **_EXPERTS, shared_expert_intermediate_size=128,
                                                    shared_expert_gate=True)],
    "lora": [
        LoRAConfig(layer=LayerGroup("dense", DenseConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4,
                                                         intermediate_size=512)), rank=8),
        LoRAConfig(layer=LayerGroup("dense", DenseConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4,
                                                         intermediate_size=512, attention_bias=True)),
                   rank=4, dropout=0.1, base="nf4", target_modules=("q_proj", "v_proj", "gate_proj", "down_proj")),
    ],
    "lora_first": [LoRAConfig(layer=LayerGroup("embedding", EmbeddingConfig(vocab_size=1024, hidden_size=256)),
                              target_modules=())],
    "lora_last": [LoRAConfig(layer=LayerGroup("output", OutputConfig(vocab_size=1024, hidden_size=256)),
                             target_modules=())],
    "mlp": [
        MLPLayerConfig(hidden_size=256, intermediate_size=1024, gated_mlp=False, hidden_act="relu2"),
        MLPLayerConfig(hidden_size=256, intermediate_size=512, hidden_act="silu", mlp_bias=True, hidden_dropout=0.1),
    ],
    "moe_only": [
        MoELayerConfig(hidden_size=256, **_EXPERTS, shared_expert_intermediate_size=256, hidden_act="relu2",
                       expert_activation="mlp", norm="rmsnorm_fp32_weight", router_fp32=True),
        # Nemotron-H's latent experts (moe_latent_size), and gated SwiGLU experts without a shared one.
        MoELayerConfig(hidden_size=256, **_EXPERTS, shared_expert_intermediate_size=128, hidden_act="relu2",
                       expert_activation="mlp", moe_latent_size=64),
        MoELayerConfig(hidden_size=256, **_EXPERTS),
    ],
}
