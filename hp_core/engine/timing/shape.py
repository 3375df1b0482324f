"""What a layer's communication and GEMMs need, read from its config once per layer group.

:func:`_shape` reads a layer config's Hugging Face field names
(``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``,
``head_dim``, MLA and MoE fields); a third-party kind without them is
priced without TP/CP/EP traffic (:mod:`hp_core.engine.timing`, known
limitations).
"""

from __future__ import annotations

from typing import Any

import attrs

from hp_core.costs import LayerContext, LayerCost
from hp_core.types import LayerKind

__all__ = ["SOFTMAX_OPS_PER_SCORE"]

# Elementwise ops the kinds count per attention score for the softmax (max, subtract,
# exp, sum, divide: hp_plugins/kit/builder.py). A fused (flash) kernel runs them on chip,
# so they move no HBM traffic there (Dao 2023, Section 3.1).
SOFTMAX_OPS_PER_SCORE = 5


@attrs.frozen
class _Shape:
    """What a layer's communication and grouped GEMMs need, read once per layer group.

    Attributes (per micro-batch on one rank):
        blocks: TP collectives per direction (2 for a decoder layer: attention and FFN).
        vocab: ``"embedding"``, ``"head"`` or ``""`` (vocabulary-parallel op pattern).
        tp_bytes: Bytes of one TP collective (the full ``T x h`` activation).
        kv_bytes: K and V of the rank's chunk (a CP ring step).
        qkvo_bytes: q, k, v and the output heads (a CP all-to-all each way).
        attention_calls: Whether the layer has an attention core.
        ep_bytes: Routed tokens' bytes one all-to-all sends (EP dispatch or combine).
        grouped_flops: Forward FLOPs of the routed experts (part of the matmul FLOPs).
        expert_rows: Tokens per local expert.
        permute_bytes: Bytes of the dispatched tokens (MoE permutation passes).
        permute_input_bytes: Bytes of the tokens entering the MoE layer on the
            rank (the first permutation reads them, the last writes them back).
        mla: Whether the attention core's query/key head dim exceeds its value
            head dim (MLA), priced with the device's MLA attention figures.
        router_elements: Routed tokens times experts of an MoE layer's router
            (its top-k and auxiliary-loss kernels scale with them).
        mla_copy_bytes: HBM bytes MLA's query/key assembly moves each way
            (rotary part rotated, query and key concatenated, value made
            contiguous; backward the split gradients concatenated back).
        latent_rank: MLA's KV latent rank (``attUp`` recompute), 0 if none.
        score_flops: The softmax's elementwise FLOPs over the score matrix.
        table_elements: Elements of a lookup table's shard (a layer with
            parameters and no matmul: the embedding).
        gemms: The dense GEMMs whose shapes are known, ``(rows, fan_out,
            fan_in)``: each linear weight the kind records
            (``LayerCost.weight_shapes``) over the micro-batch's tokens, the
            routed experts' excluded, and an MoE router's gating GEMM.
        expert_gemms: The routed experts' grouped GEMMs, ``(experts on the
            rank, rows per expert, fan_out, fan_in)``: SwiGLU's gate and up
            projection, then the down projection.
    """

    blocks: int = 0
    vocab: str = ""
    tp_bytes: float = 0.0
    kv_bytes: float = 0.0
    qkvo_bytes: float = 0.0
    attention_calls: int = 0
    ep_bytes: float = 0.0
    grouped_flops: float = 0.0
    expert_rows: float = 0.0
    permute_bytes: float = 0.0
    permute_input_bytes: float = 0.0
    mla: bool = False
    mla_copy_bytes: float = 0.0
    router_elements: float = 0.0
    latent_rank: int = 0
    score_flops: float = 0.0
    table_elements: float = 0.0
    gemms: tuple[tuple[int, int, int], ...] = ()
    expert_gemms: tuple[tuple[int, float, int, int], ...] = ()


def _shape(config: Any, kind: LayerKind, x: LayerContext, cost: LayerCost) -> _Shape:
    """Read a layer config's Hugging Face fields (:mod:`hp_core.engine.timing`: known limitations)."""
    inner = getattr(config, "layer", None)
    if inner is not None and hasattr(inner, "config"):
        # A module wrapping another kind's layer (the MTP module): its layer's traffic and its own head.
        base = _shape(inner.config, kind, x, cost)
        return attrs.evolve(base, vocab="head", table_elements=0.0)
    table = 0.0
    if cost.params and not cost.forward.matmul_flops:
        table = sum(p.stored_elements / x.tp if p.tp_split else p.stored_elements for p in cost.params if p.shared_with is None)
    h = getattr(config, "hidden_size", None)
    if not isinstance(h, int):
        return _Shape(table_elements=table)
    act = x.precision.activation_bytes
    T = x.tokens
    tp = x.tp
    vocab = ""
    if getattr(config, "vocab_size", None) is not None:
        vocab = "embedding" if kind.placement == "first" else "head"
    heads = getattr(config, "num_attention_heads", None)
    blocks = 2 if heads is not None else 0
    kv_bytes = qkvo_bytes = scores = 0.0
    latent = 0
    mla = False
    mla_copy = 0.0
    if heads is not None:
        scores = SOFTMAX_OPS_PER_SCORE * x.micro_batch_size * (heads // tp) * (x.seq_len // x.cp) * x.seq_len
        if getattr(config, "kv_lora_rank", None) is not None:
            # MLA: the up-projected per-head keys (nope + rope) and values are exchanged.
            qk = config.qk_nope_head_dim + config.qk_rope_head_dim
            kv_bytes = T * heads / tp * (qk + config.v_head_dim) * act
            qkvo_bytes = T * heads / tp * (2 * qk + 2 * config.v_head_dim) * act
            latent = config.kv_lora_rank
            mla = qk > config.v_head_dim
            # Megatron-Core MLASelfAttention.get_query_key_value_tensors (and HF
            # DeepseekV2Attention likewise): q_pos_emb rotated (read + write), query =
            # cat(q_no_pe, q_pos_emb) (read + write), key = cat(k_no_pe, expanded
            # k_pos_emb) (read the no-rope part, write the key), value.contiguous()
            # where the runtime copies it (read + write). Backward moves the same: the
            # split backwards concatenate q's and kv's gradients, the rotary backward,
            # the expand backward's sum over heads.
            per_head = 2 * config.qk_rope_head_dim + 2 * qk + config.qk_nope_head_dim + qk
            if "mla_contiguous_qkv" in x.traits:
                per_head += 2 * config.v_head_dim
            mla_copy = T * heads / tp * per_head * act
        else:
            groups = getattr(config, "num_key_value_heads", None) or heads
            d = getattr(config, "head_dim", None) or h // heads
            kv_heads = max(groups / tp, 1)  # KV heads are replicated when tp > groups
            kv_bytes = T * kv_heads * 2 * d * act
            qkvo_bytes = T * (2 * heads / tp + 2 * kv_heads) * d * act
    ep_bytes = grouped = rows = permute = permute_input = router = 0.0
    routed_shapes: set[tuple[int, int]] = set()
    gemms: list[tuple[int, int, int]] = []
    expert_gemms: tuple[tuple[int, float, int, int], ...] = ()
    experts = getattr(config, "num_experts", None)
    if experts is not None and getattr(config, "num_experts_per_tok", None) is not None:
        # Tokens a rank's experts process (hp_plugins.kit.moe_tokens): k * T / sp,
        # gathered over etp, padded to capacity when stated.
        routed = T / x.sp_degree * config.num_experts_per_tok
        if getattr(config, "pad_to_capacity", False) and getattr(config, "capacity_factor", None):
            routed *= config.capacity_factor
        processed = routed * x.etp
        ep_bytes = routed * h * act
        width = config.moe_intermediate_size // x.etp
        grouped = 2 * processed * h * 3 * width  # gate, up and down projections of SwiGLU experts
        rows = processed / max(experts // x.ep, 1)
        permute = processed * h * act
        permute_input = T / x.sp_degree * h * act
        router = T / x.sp_degree * experts
        local = max(experts // x.ep, 1)
        expert_gemms = ((local, rows, 2 * width, h), (local, rows, h, width))
        routed_shapes = {(2 * width, h), (h, width)}
        gemms.append((T // x.sp_degree, experts, h))  # the router's gating GEMM (not a recorded weight)
    # Every other linear runs over the micro-batch's tokens (SP-gathered under TP).
    gemms += [(T, fan_out, fan_in) for fan_out, fan_in in cost.weight_shapes if (fan_out, fan_in) not in routed_shapes]
    return _Shape(
        blocks=blocks, vocab=vocab, tp_bytes=T * h * act, kv_bytes=kv_bytes, qkvo_bytes=qkvo_bytes,
        attention_calls=1 if heads is not None else 0, ep_bytes=ep_bytes, grouped_flops=grouped, expert_rows=rows,
        permute_bytes=permute, permute_input_bytes=permute_input, mla=mla, mla_copy_bytes=mla_copy, router_elements=router, latent_rank=latent, score_flops=scores, table_elements=table,
        gemms=tuple(gemms), expert_gemms=expert_gemms,
    )
