"""The output head: final norm, LM head (tied or untied), logits and the loss.

Parameters: the final norm and, unless tied to the embedding, ``vocab_size *
hidden_size`` (Hugging Face ``lm_head``), vocabulary-parallel over TP. A tied
head is the embedding's weight: counted once in the model's totals; with
pipeline parallelism the last stage holds a copy (Megatron-LM
``setup_embeddings_and_output_layer``).

Kept for backward: the final norm's input and output (the LM head's input) and
the loss's softmax over this rank's vocabulary shard in ``logits_bytes``
(Megatron-LM ``_VocabParallelCrossEntropy`` saves the fp32 softmax; Hugging
Face upcasts the logits to fp32 before ``cross_entropy``). Its backward holds
the logits' gradient in the compute dtype and the gradient of its input.
"""

from __future__ import annotations

import attrs

from hp_core.markers import hookimpl
from hp_core.costs import ActivationTerm, Flops, LayerContext, LayerCost, LayerWork
from hp_core.types import LayerKind
from hp_core.bounds import MAX_VOCAB
from hp_core.validators import bounded_int, one_of, positive_int, positive_number
from hp_plugins.kit import (
    NORM_OPS_PER_ELEMENT, NORMS, SOFTCAP_OPS, fp32_norm_bytes, norm_params, padded_vocab, param_count, tp_collectives,
)

__all__ = ["CHUNKED_LOSS_CHUNKS", "OutputConfig", "evaluate_output", "hp_layer_kinds"]

# Cross-entropy over the vocabulary: max, subtract, exp, sum, divide, log (6 per
# logit), counted from the definition.
_LOSS_OPS_PER_LOGIT = 6
# torchtitan's ChunkedCELoss splits the sequence into this many chunks: ChunkedCELoss.Config.num_chunks's default
# (torchtitan/components/loss.py at pytorch/torchtitan@6b9602339), which deepseek_v3_16b's ChunkedCELoss.Config() keeps.
CHUNKED_LOSS_CHUNKS = 8



@attrs.frozen(kw_only=True)
class OutputConfig:
    """The output head.

    Attributes:
        vocab_size: Logits per token.
        hidden_size: Model width.
        tie_word_embeddings: The LM head is the embedding's weight.
        norm: The final norm (``rmsnorm`` or ``layernorm``).
        final_logit_softcapping: The logits are capped as ``c * tanh(z / c)``
            before the loss (Gemma 2 ``Gemma2ForCausalLM``): the ``tanh`` output is
            kept for backward (the divisions and multiplications by a scalar keep
            nothing), ``T * V / t`` in the compute dtype, and each logit costs
            three more elementwise operations.
    """

    vocab_size: int = attrs.field(validator=bounded_int(MAX_VOCAB, what="MAX_VOCAB"))
    hidden_size: int = attrs.field(validator=positive_int)
    tie_word_embeddings: bool = False
    norm: str = attrs.field(default="rmsnorm", validator=one_of(NORMS))
    final_logit_softcapping: float | None = attrs.field(default=None, validator=attrs.validators.optional(positive_number))


def evaluate_output(c: OutputConfig, x: LayerContext) -> LayerCost:
    """The output head's cost on one rank of the last stage."""
    p, T, h = x.precision, x.tokens, c.hidden_size
    hidden = T * h * p.activation_bytes // x.sp_degree
    # A TP plan may leave the head whole on every rank (replicated_vocab trait).
    split = x.tp if "replicated_vocab" not in x.traits else 1
    vocab_shard = padded_vocab(c.vocab_size, x.vocab_pad_multiple, split) // split
    stored = padded_vocab(c.vocab_size, x.vocab_pad_multiple, split) * h
    params = [param_count("final_norm", "dense", norm_params(c.norm, h), False)]
    params.append(
        param_count("lm_head", "dense", c.vocab_size * h, "replicated_vocab" not in x.traits, stored, "embedding" if c.tie_word_embeddings else None,
                    matrices=((1, vocab_shard, h),), embedding_or_output=True)
    )
    head_out = vocab_shard
    # The loss's tensors divide by TP only where it runs on the rank's vocabulary shard.
    loss_split = not ({"replicated_vocab", "gathered_logits"} & x.traits)
    if "gathered_logits" in x.traits and split > 1:
        # The logits all-gathered over TP: the loss runs on the whole (padded) vocabulary.
        vocab_shard = vocab_shard * split
    forward_working = 0
    # Where the logits are gathered over TP, the head's own shard of them stays alive until gathered (measured:
    # FSDPMemTracker): in the forward working set of a loss that does not already hold it (upcast, compiled).
    head_shard = T * head_out * p.activation_bytes if head_out != vocab_shard else 0
    extra: tuple[ActivationTerm, ...] = ()
    if "fused_cross_entropy" in x.traits:
        # The fused loss overwrites the logits with their gradient in forward and keeps them.
        loss = ActivationTerm("loss_logits", T * vocab_shard * p.activation_bytes, None, loss_split)
        working = T * h * p.activation_bytes
    elif "upcast_cross_entropy" in x.traits:
        # logits.float() then cross_entropy (transformers ForCausalLMLoss, torchtitan cross_entropy_loss):
        # log_softmax keeps its fp32 output and nll_loss the int64 targets; at the forward's peak the
        # logits are alive in the compute dtype and in fp32 beside it; the backward holds the fp32
        # gradients of the log-softmax output and of the fp32 logits (measured: torch census, FSDPMemTracker).
        loss = ActivationTerm("loss_softmax", T * vocab_shard * p.logits_bytes, None, loss_split)
        extra = (ActivationTerm("loss_targets", T * 8),)
        forward_working = T * vocab_shard * (p.activation_bytes + p.logits_bytes) + head_shard
        working = 2 * T * vocab_shard * p.logits_bytes
    elif "compiled_cross_entropy" in x.traits:
        # torch.compile of logits.float() then cross_entropy (torchtitan's loss with compile's 'loss' component):
        # Inductor fuses the upcast into the log-softmax, whose forward allocates only the per-row fp32 max and
        # log-sum-exp; AOTAutograd saves those, the targets and the bf16 logits themselves (no fp32 copy), and the
        # backward writes the logits' gradient in the compute dtype as a new buffer (measured:
        # benchmarks/count_compiled_loss.py, torch 2.13).
        loss = ActivationTerm("loss_logits", T * vocab_shard * p.activation_bytes, None, loss_split)
        extra = (ActivationTerm("loss_row_stats", T * 8), ActivationTerm("loss_targets", T * 8))
        forward_working = head_shard
        working = T * vocab_shard * p.activation_bytes + T * h * p.activation_bytes
    elif "chunked_cross_entropy" in x.traits:
        return _chunked(c, x, params, hidden, head_out, vocab_shard)
    else:
        loss = ActivationTerm("loss_softmax", T * vocab_shard * p.logits_bytes, None, loss_split)
        working = T * vocab_shard * p.activation_bytes + T * h * p.activation_bytes
    terms = (
        ActivationTerm("final_norm_in", hidden),
        ActivationTerm("final_norm_out", hidden),
        *_norm_fp32(c, x),
        loss,
        *extra,
    )
    capped = c.final_logit_softcapping is not None
    if capped:
        terms += (ActivationTerm("logit_softcap_tanh_out", T * vocab_shard * p.activation_bytes, None, loss_split),)
    return LayerCost(
        params=tuple(params),
        activations=terms,
        input_bytes=hidden,
        working_bytes=working,
        forward_working_bytes=forward_working,
        buffers_once_bytes=T * h * p.activation_bytes if x.sp and x.tp > 1 else 0,
        weight_shapes=((head_out, h),),
        work=_work(x, head_out, h),
        # Its deferred wgrad reads the norm's output as the forward keeps it (re-gathered under SP) and the
        # gradient of the rank's logits in the compute dtype.
        weight_gradient_bytes=hidden + T * head_out * p.activation_bytes,
        forward=_flops(c, x, head_out, vocab_shard),
    )


def _norm_fp32(c: OutputConfig, x: LayerContext) -> tuple[ActivationTerm, ...]:
    """The final norm's fp32 copy and inverse root where the runtime's norm keeps them (``fp32_norm_copy``)."""
    norm_fp32 = fp32_norm_bytes(x.tokens, c.hidden_size, c.norm, x.traits) // x.sp_degree
    return (ActivationTerm("final_norm_fp32", norm_fp32),) if norm_fp32 else ()


def _work(x: LayerContext, head_out: int, h: int, copy_bytes: float = 0.0) -> LayerWork:
    """A vocabulary-parallel head: its input gathered over TP, one GEMM to the rank's vocabulary shard (in the
    compute dtype); *copy_bytes*: memory-bound copies its forward moves besides (a chunked loss's)."""
    T, act = x.tokens, x.precision.activation_bytes
    split = x.tp if "replicated_vocab" not in x.traits else 1
    return LayerWork(collectives=tp_collectives(x, 0, T * h * act, "head") if split > 1 else (),
                     gemms=((T, head_out, h),), boundary_bytes=T * h * act,
                     high_precision_gemms=((T, head_out, h),), copy_bytes=copy_bytes,
                     backward_copy_bytes=0.0 if copy_bytes else None)  # the chunked loss's copies: forward only


def _flops(c: OutputConfig, x: LayerContext, head_out: int, vocab_shard: int) -> Flops:
    """The head's GEMM, the final norm's and the loss's elementwise operations (per logit, the softcap's too)."""
    T, h = x.tokens, c.hidden_size
    capped = c.final_logit_softcapping is not None
    return Flops(
        matmul_flops=2 * T * h * head_out,
        elementwise_flops=NORM_OPS_PER_ELEMENT[c.norm] * T * h // x.sp_degree + (_LOSS_OPS_PER_LOGIT + SOFTCAP_OPS * capped) * T * vocab_shard,
    )


def _chunked(c: OutputConfig, x: LayerContext, params: list, hidden: int, head_out: int, vocab_shard: int) -> LayerCost:
    """The head and loss as torchtitan's ``ChunkedCELoss`` runs them (``chunked_cross_entropy``; docs/kinds.md).

    torchtitan ``torchtitan/components/loss.py`` ``ChunkedCELoss.__call__`` (pytorch/torchtitan@6b9602339): the model
    stops at the final norm (``_skip_lm_head``); the norm's output, made whole over TP, is split along the sequence
    into ``num_chunks`` contiguous copies (``torch.chunk``: ``ceil(L / n)`` positions a chunk, every sequence of the
    micro-batch); for each chunk in turn, the head's GEMM, ``cross_entropy_loss`` (``.float()`` then
    ``cross_entropy``) and that chunk's backward at once, its input gradient copied into one fp32 buffer of the whole
    hidden states (``GradAccumulator``); the buffer cast to the compute dtype is all ``_DecoderOutputGradientBackProp``
    saves for the decoder's backward. So nothing of the logits survives the forward, and no GEMM is recomputed.

    Forward peak, a chunk's backward as ATen runs it (eager): its logits in the compute dtype (the loop's ``logits``
    still bound), the fp32 log-softmax ``log_softmax`` saved, and the two fp32 gradients ``nll_loss_backward`` and
    ``_log_softmax_backward_data`` allocate, beside the chunk copies, the fp32 buffer, the norm's output and the head's
    whole gradient that FSDP2 accumulates over the chunks in the reduce dtype (torchtitan turns the head's gradient sync
    off for every chunk but the last; torch ``_fully_shard/_fsdp_param.py`` ``to_accumulated_grad_if_needed``).
    """
    p, T, h = x.precision, x.tokens, c.hidden_size
    act = p.activation_bytes
    chunk_tokens = x.micro_batch_size * -(-(x.seq_len // x.cp) // CHUNKED_LOSS_CHUNKS)
    whole = T * h * act  # the hidden states whole over TP (ChunkedCELoss redistributes them to Replicate)
    # The head's unsharded gradient, held through the loop in the reduce dtype: where it differs from the compute
    # dtype, FSDP2's fp32 accumulator (the compute-dtype gradient of the running chunk beside it at another moment);
    # else the parameter's own gradient in the compute dtype, which each chunk's backward adds into in place (FSDP2
    # drops a reduce dtype equal to the compute dtype, _fsdp_param.py FSDPParam.init_dtype_attrs, and
    # to_accumulated_grad_if_needed then leaves the gradient where it is).
    head = head_out * h
    accumulated = p.reduction_bytes
    chunk_logits = chunk_tokens * vocab_shard
    capped = c.final_logit_softcapping is not None  # its tanh output, a chunk's, kept until that chunk's backward
    chunk = (chunk_logits * (act + 3 * p.logits_bytes + act * capped)
             + (chunk_tokens * head_out * act if head_out != vocab_shard else 0))  # the head's own shard, gathered
    forward_working = (whole + T * h * 4  # the chunk copies; GradAccumulator's fp32 buffer
                       + (hidden if x.sp_degree > 1 else 0)  # the norm's sequence shard beside its whole copy
                       + chunk + head * accumulated)
    # Memory-bound copies of the loop (each read and written): the chunks (h act each way), the buffer's zero fill
    # (4), each chunk gradient cast to fp32 (act + 4) and copied into the buffer (4 + 4), the buffer cast back
    # (4 + act); and the head's gradient added into its accumulator for every chunk after the first.
    copies = T * h * (4 * act + 20) + (CHUNKED_LOSS_CHUNKS - 1) * head * (2 * accumulated + act)
    terms = (
        ActivationTerm("final_norm_in", hidden),
        *_norm_fp32(c, x),
        # The hidden states' gradient in the compute dtype (_DecoderOutputGradientBackProp.forward save_for_backward).
        ActivationTerm("loss_hidden_grad", whole),
    )
    return LayerCost(
        params=tuple(params),
        activations=terms,
        input_bytes=hidden,
        working_bytes=hidden,  # the final norm's input gradient: the head's backward ran in forward
        forward_working_bytes=forward_working,
        buffers_once_bytes=T * h * act if x.sp and x.tp > 1 else 0,
        weight_shapes=((head_out, h),),
        work=_work(x, head_out, h, copies),
        weight_gradient_bytes=0,  # the head's weight gradient is made in the loop, each chunk's: none left for a W pass
        forward=_flops(c, x, head_out, vocab_shard),
    )


@hookimpl
def hp_layer_kinds():
    yield LayerKind(
        name="output",
        config_type=OutputConfig,
        evaluate=evaluate_output,
        placement="last",
        description="final norm, LM head (tied or untied) and the loss, vocabulary-parallel over TP",
    )
