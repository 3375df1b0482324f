"""The plugin-author kit: the public, versioned building blocks of hp-planner's decoder layer kinds.

The built-in kinds (:mod:`hp_plugins.kinds`) are made of these blocks, and a
third-party layer kind may use them too, so that its attention or feed-forward
half is priced exactly as the built-ins price theirs. Import them from here::

    from hp_plugins.kit import LayerBuilder, MLPFields, mlp, validate_mlp

=================================  ===========================================================
module                             what it holds
=================================  ===========================================================
:mod:`~hp_plugins.kit.builder`     :class:`LayerBuilder` (``param``, ``keep``, ``pre_norm``,
                                   ``attention_core``, ``linear``, ``build``); the shared
                                   records :func:`term` and :func:`param_count`;
                                   :data:`SOFTMAX_OPS`, :data:`RESIDUAL_OPS`,
                                   :data:`DECODER_SWITCHES`, :data:`SELECTIVE_SWITCHES`,
                                   :data:`DENSE_MLP_SWITCHES`, :data:`MOE_LAYER_SWITCH`,
                                   :data:`DECODER_MOE_SWITCHES`
:mod:`~hp_plugins.kit.attention`   :class:`GQAFields`, :func:`gqa_attention`, :func:`validate_gqa`
:mod:`~hp_plugins.kit.mla`         :class:`MLAFields`, :func:`mla_attention`, :func:`validate_mla`
:mod:`~hp_plugins.kit.feedforward` :class:`MLPFields`, :func:`mlp`, :func:`swiglu`,
                                   :func:`validate_mlp`, :data:`ACT_OPS`, :data:`FC1_SWITCH`
:mod:`~hp_plugins.kit.experts`     :class:`MoEFields`, :func:`moe`, :func:`moe_tokens`,
                                   :func:`validate_moe`
:mod:`~hp_plugins.kit.norms`       :data:`NORMS`, :data:`NORM_OPS_PER_ELEMENT`, :func:`norm_params`,
                                   :func:`post_norm`, :func:`fp32_norm_bytes`,
                                   :func:`head_norm`
:mod:`~hp_plugins.kit.local_attention` sliding windows, chunks, soft-capping, sinks:
                                   :func:`causal_score_pairs`, :func:`score_share`,
                                   :func:`local_attention_core`
:mod:`~hp_plugins.kit.clamped_glu` GPT-OSS's clamped SwiGLU: :func:`clamped_swiglu`
:mod:`~hp_plugins.kit.shapes`      :func:`check_divides`, :func:`padded_vocab`
:mod:`~hp_plugins.kit.ssm`         :class:`Mamba2Fields`, :func:`mamba2_mixer`,
                                   :func:`validate_mamba2`, :func:`ssd_chunk_flops`
:mod:`~hp_plugins.kit.deltanet`    :class:`GatedDeltaNetFields`, :func:`gated_deltanet_mixer`,
                                   :func:`validate_gated_deltanet_mixer`, :func:`gdn_chunk_flops`
:mod:`~hp_plugins.kit.gated_attention` :func:`gated_gqa_attention`
:mod:`~hp_plugins.kit.work`        what the step time prices (:class:`~hp_core.costs.LayerWork`):
                                   :func:`tp_collectives`, :func:`attention_collectives`,
                                   :func:`expert_collectives`, :func:`decoder_work`,
                                   :class:`AttentionShape`, :class:`ExpertShape`
=================================  ===========================================================

Stability: the names in ``__all__`` here follow semantic versioning with
hp-planner's version number. A name and its signature change or go only with a
major version; a minor version may add names. A correction of what a block
counts may come in any release, as for the built-in kinds that share it. Pin
``hp-planner<N+1`` for the major version ``N`` you wrote against (below 1.0:
``hp-planner<1``). The promise also covers the built-in kinds' config classes
(``hp_plugins.kinds.*Config``), which a plugin's model format may stack. The
other modules of :mod:`hp_plugins` (the kinds' evaluators, the runtimes, the
model formats) are hp-planner's own implementation: this promise does not
cover their paths or names.
docs/kit.md describes each block.
"""

from __future__ import annotations

from hp_plugins.kit.norms import NORM_OPS_PER_ELEMENT, NORMS, fp32_norm_bytes, head_norm, norm_params, post_norm
from hp_plugins.kit.shapes import check_divides, padded_vocab
from hp_plugins.kit.builder import (
    DECODER_MOE_SWITCHES, DECODER_SWITCHES, DENSE_MLP_SWITCHES, MOE_LAYER_SWITCH, RESIDUAL_OPS, SELECTIVE_SWITCHES, SOFTMAX_OPS, LayerBuilder, param_count, term,
)
from hp_plugins.kit.attention import GQAFields, gqa_attention, validate_gqa
from hp_plugins.kit.mla import MLAFields, mla_attention, validate_mla
from hp_plugins.kit.feedforward import ACT_OPS, FC1_SWITCH, MLPFields, mlp, swiglu, validate_mlp
from hp_plugins.kit.experts import EXPERT_ACTIVATIONS, MoEFields, moe, moe_tokens, validate_moe
from hp_plugins.kit.clamped_glu import CLAMPED_SWIGLU_OPS, clamped_swiglu
from hp_plugins.kit.local_attention import (
    SINK_OPS_PER_ROW, SOFTCAP_OPS, causal_score_pairs, local_attention_core, score_share,
)
from hp_plugins.kit.work import (
    SOFTMAX_OPS_PER_SCORE, AttentionShape, ExpertShape, attention_collectives, decoder_work, expert_collectives,
    tp_collectives,
)
from hp_plugins.kit.ssm import MAMBA_SWITCHES, Mamba2Fields, mamba2_mixer, ssd_chunk_flops, validate_mamba2
from hp_plugins.kit.deltanet import (
    GDN_CHUNK, GDN_SWITCHES, GatedDeltaNetFields, gated_deltanet_mixer, gdn_chunk_flops, validate_gated_deltanet_mixer,
)
from hp_plugins.kit.gated_attention import gated_gqa_attention

__all__ = [
    "ACT_OPS",
    "DECODER_MOE_SWITCHES",
    "DECODER_SWITCHES",
    "DENSE_MLP_SWITCHES",
    "FC1_SWITCH",
    "MOE_LAYER_SWITCH",
    "SELECTIVE_SWITCHES",
    "CLAMPED_SWIGLU_OPS",
    "EXPERT_ACTIVATIONS",
    "SINK_OPS_PER_ROW",
    "SOFTCAP_OPS",
    "causal_score_pairs",
    "clamped_swiglu",
    "local_attention_core",
    "post_norm",
    "score_share",
    "AttentionShape",
    "ExpertShape",
    "SOFTMAX_OPS_PER_SCORE",
    "attention_collectives",
    "decoder_work",
    "expert_collectives",
    "tp_collectives",
    "GQAFields",
    "LayerBuilder",
    "MLAFields",
    "MLPFields",
    "MoEFields",
    "NORMS",
    "NORM_OPS_PER_ELEMENT",
    "RESIDUAL_OPS",
    "SOFTMAX_OPS",
    "check_divides",
    "gqa_attention",
    "mla_attention",
    "mlp",
    "moe",
    "moe_tokens",
    "norm_params",
    "fp32_norm_bytes",
    "head_norm",
    "padded_vocab",
    "param_count",
    "swiglu",
    "term",
    "validate_gqa",
    "validate_mla",
    "validate_mlp",
    "validate_moe",
    # The Mamba-2 (SSD) mixer (hp_plugins.kit.ssm).
    "MAMBA_SWITCHES",
    "Mamba2Fields",
    "mamba2_mixer",
    "ssd_chunk_flops",
    "validate_mamba2",
    # The Gated DeltaNet mixer (hp_plugins.kit.deltanet) and gated attention (hp_plugins.kit.gated_attention).
    "GDN_CHUNK",
    "GDN_SWITCHES",
    "GatedDeltaNetFields",
    "gated_deltanet_mixer",
    "gated_gqa_attention",
    "gdn_chunk_flops",
    "validate_gated_deltanet_mixer",
]
