"""Local attention: sliding windows, chunks, logit soft-capping and attention sinks.

The pieces the grouped-query attention block (:func:`hp_plugins.kit.gqa_attention`)
adds when its :class:`~hp_plugins.kit.GQAFields` state them, and the functions a
plugin's own attention block may count with:

* **Sliding window** ``w`` (Mistral, Gemma 2/3, GPT-OSS, Phi-3): query ``i``
  attends the ``w`` keys ``i - w + 1 .. i`` (Hugging Face ``masking_utils``
  ``sliding_window_overlay``: ``kv_idx > q_idx - sliding_window``; the flash
  path passes ``window_size = (w - 1, 0)``), so row ``i`` scores ``min(i + 1, w)``
  keys.
* **Chunked attention** ``C`` (Llama 4 ``attention_chunk_size``): query ``i``
  attends the keys of its own chunk up to itself (``masking_utils``
  ``chunked_overlay``: ``kv_idx // C == q_idx // C``), ``i mod C + 1`` keys.
* **Logit soft-capping** ``c`` (Gemma 2 ``attn_logit_softcapping``):
  ``c * tanh(scores / c)`` before the mask and softmax (:data:`SOFTCAP_OPS`).
* **Attention sinks** (GPT-OSS): one learned logit per head joins every row's
  softmax as an extra column and is dropped after it (``GptOssAttention.sinks``).

Memory and FLOPs:

* ``flash`` keeps what it keeps for full causal attention (q, k, v, the output,
  the fp32 log-sum-exp per row: Dao 2023, Algorithm 2), whatever the window:
  a window changes which blocks the kernel visits, not what it saves. Its
  FLOPs shrink to the pairs scored. The planner's convention for attention
  FLOPs (``LayerBuilder.attention_core``) is the full ``s x s`` square, which the
  step time scales by the share a causal flash kernel computes
  (``TimingProfile.flash_causal_fraction``); a local layer states the square
  times :func:`score_share`, the share of the causal pairs its mask keeps
  (:func:`causal_score_pairs` over ``s (s + 1) / 2``), so a window ``w >= s``
  prices exactly as full attention. Those are the model's FLOPs; a kernel
  that computes whole blocks of the score matrix (FlexAttention) runs more:
  the layer states its mask (:class:`hp_core.score_masks.LocalMask`, on
  :class:`~hp_plugins.kit.work.AttentionShape`) and the step time prices the
  blocks where the runtime states the kernel's block size
  (``TimingProfile.attention_block_tokens``).
* ``eager`` (Hugging Face ``eager_attention_forward``) computes and keeps the
  whole ``s x s`` score matrix and adds the window as a mask after ``q k^T``:
  a window saves neither memory nor FLOPs there. Soft-capping keeps the
  ``tanh`` output (its backward needs it; the divisions and multiplications
  by a Python scalar keep nothing), an ``s x s`` tensor in the compute dtype
  (``Gemma2`` ``eager_attention_forward``). With sinks, Hugging Face's GPT-OSS
  eager path concatenates the sink column, subtracts the row maximum (keeping
  its int64 index per row) and runs the softmax in the compute dtype over
  ``s + 1`` columns, keeping that output (no fp32 copy and no cast:
  ``GptOss`` ``eager_attention_forward``).
"""

from __future__ import annotations

from hp_core.score_masks import causal_score_pairs
from hp_plugins.kit.builder import SOFTMAX_OPS, LayerBuilder

__all__ = ["SINK_OPS_PER_ROW", "SOFTCAP_OPS", "causal_score_pairs", "local_attention_core", "score_share"]

# Soft-capping per score: divide, tanh, multiply (counted from Gemma 2's definition c * tanh(x / c)).
SOFTCAP_OPS = 3
# A sink per softmax row: one more column through the softmax's max, subtract, exp, sum (and
# the divide it skips): counted as one more score's softmax operations.
SINK_OPS_PER_ROW = SOFTMAX_OPS
# Bytes of the int64 row-maximum index Hugging Face's GPT-OSS eager path keeps per softmax row
# (``combined_logits.max(dim=-1)`` saves its indices for backward).
_ROW_INDEX_BYTES = 8


def score_share(seq_len: int, window: int | None = None, chunk: int | None = None) -> float:
    """The share of a causal layer's (query, key) pairs a window or chunking keeps (1.0: none)."""
    return causal_score_pairs(seq_len, window, chunk) / causal_score_pairs(seq_len)


def local_attention_core(b: LayerBuilder, heads: int, qk_dim: int, v_dim: int, attention_dropout: float, *,
                         window: int | None = None, chunk: int | None = None, softcap: float | None = None,
                         sinks: bool = False, softmax_bytes: int | None = None) -> float:
    """The attention core with a window or chunks, soft-capping and sinks; returns its flash score share.

    The same tensors as :meth:`LayerBuilder.attention_core
    <hp_plugins.kit.builder.LayerBuilder.attention_core>`, with (module docstring):
    eager keeps the soft-cap's ``tanh`` output (``softmax`` switch: the core's
    recompute rebuilds it) and, with sinks, a compute-dtype softmax over
    ``s + 1`` columns and its row-maximum indices instead of the fp32 softmax
    and its cast; flash keeps its statistics and its FLOPs scale by
    :func:`score_share`. Under context parallelism the share is that of the
    whole sequence, spread evenly over the ranks (load-balanced CP).
    *softmax_bytes* as :meth:`LayerBuilder.attention_core
    <hp_plugins.kit.builder.LayerBuilder.attention_core>` takes it.
    """
    x, p, t, act = b.x, b.x.precision, b.x.tp, b.act
    softmax = p.softmax_bytes if softmax_bytes is None else softmax_bytes
    if x.cp > 1 and x.cp_kind == "a2a":
        b.keep("attn_out_a2a", x.tokens * heads * v_dim * act // t, None, True)
    rows = x.micro_batch_size * (heads // t) * (x.seq_len // x.cp)
    square = rows * x.seq_len
    share = 1.0 if x.attention == "eager" else score_share(x.seq_len, window, chunk)
    scored = square * share
    if x.attention == "eager":
        if softcap is not None:
            b.keep("softcap_tanh_out", square * act, "softmax", True)
        if sinks:
            b.keep("softmax_out", (square + rows) * act, "softmax", True)
            b.keep("sink_row_max_index", rows * _ROW_INDEX_BYTES, "softmax", True)
            probabilities = (square + rows) * act
        else:
            b.keep("softmax_out", square * softmax, "softmax", True)
            if softmax != act:
                b.keep("softmax_cast", square * act, "headCast", True)
            probabilities = square * softmax
        if attention_dropout > 0:
            b.keep("attn_dropout_mask", square * p.dropout_mask_bytes, "dropout", True)
            b.keep("attn_dropout_out", square * act, "attBMM", True)
        # Backward: the gradients of the probabilities and of the scores, in the softmax's dtype.
        b.block_grads.append(2 * probabilities)
    else:
        b.keep("attn_lse", x.tokens * (heads // t) * p.lse_bytes, None, True)
    # Scores q k^T and the weighted sum p v, 2 FLOPs per multiply-add, over the square (eager) or
    # the square times the share of causal pairs kept (flash; module docstring).
    b.attention += 2 * scored * (qk_dim + v_dim)
    b.elementwise += (SOFTMAX_OPS + (SOFTCAP_OPS if softcap is not None else 0)) * scored
    b.softmax_ops += SOFTMAX_OPS * scored  # left out of the eager count, as the full core's (hp_plugins.kit.eager)
    if sinks:
        b.elementwise += SINK_OPS_PER_ROW * rows
    return share

