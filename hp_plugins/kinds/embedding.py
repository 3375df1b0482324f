"""The token embedding: a vocabulary-parallel lookup table on the first stage.

Parameters: ``vocab_size * hidden_size`` (Hugging Face ``nn.Embedding``), split
over TP along the vocabulary (Megatron-LM ``VocabParallelEmbedding``) and padded
to a multiple of ``vocab_pad_multiple * tp`` where the runtime pads it.
Kept for backward: the token ids (int64), which the lookup's backward scatters
into the weight gradient; its output is the first layer's input, which that
layer keeps. Under sequence parallelism the output is reduce-scattered. Its
backward materialises a dense gradient of the rank's whole table shard.

Learned absolute position embeddings (``position_embeddings`` rows: GPT-2's
``wpe`` of ``n_positions`` rows, transformers ``GPT2Model``; llm-foundry MPT's
``wpe`` of ``max_seq_len`` rows when ``learned_pos_emb``, ``MPTModel`` in
``llmfoundry/models/mpt/modeling_mpt.py``) add ``position_embeddings *
hidden_size`` parameters, whole on every TP rank (Megatron-LM's
``LanguageModelEmbedding`` keeps them in a plain ``torch.nn.Embedding``, not
vocabulary-parallel), with their gradients, master copies and optimizer states
like every other parameter. A run longer than the table has no row for its last
positions (llm-foundry's ``MPTModel.forward`` asserts ``S <= max_seq_len``), so
``seq_len > position_embeddings`` is refused (:func:`validate_embedding`).

Kept for backward: the int64 position ids the lookup indexes with.
``position_ids_per_token`` says their shape: false, one sequence's ``(1, seq)``
broadcast over the batch (transformers ``GPT2Model``, Megatron-LM's GPT
position ids); true, one id per token ``(batch, seq)``: llm-foundry's
``MPTModel.forward`` (llm-foundry commit
8c8dd48f72168c5d51e2f7b151595892a8fba43d, ``modeling_mpt.py`` lines 933-951)
builds ``arange(S).unsqueeze(0)`` and, given an ``attention_mask`` (which
Composer's ``ComposerMPTCausalLM.forward``, lines 1533-1545, passes from every
batch; the text collator, transformers ``DataCollatorForLanguageModeling``
built in ``llmfoundry/data/utils.py``, returns one), replaces it by
``clamp(pos - cumsum(~attention_mask), min=0)``, a ``(batch, seq)`` int64 tensor,
before ``self.wpe(pos)``.

The forward adds the looked-up rows to the token embeddings, one elementwise op
per element of the whole ``tokens x hidden_size`` output: Megatron-LM's
``LanguageModelEmbedding`` (Megatron-LM commit
d98e8a64ddf34856e74b24714e3bedb2f5a39553,
``megatron/core/models/common/embeddings/language_model_embedding.py`` lines
51-56, 115-124 and 143-147) turns the vocabulary-parallel lookup's
reduce-scatter off when it adds positions, all-reduces the token embeddings,
adds the positions on the full sequence and only then scatters it to the
sequence-parallel region; so under sequence parallelism its TP collectives are
an all-reduce forward and the scatter's all-gather backward. The backward sums
the output gradient over the batch and writes a dense gradient of the whole
position table (``embedding_dense_backward``).
"""

from __future__ import annotations

import attrs

from hp_core.errors import ConfigError
from hp_core.markers import hookimpl
from hp_core.costs import ActivationTerm, Collective, Flops, LayerContext, LayerCost, LayerWork
from hp_core.types import LayerKind
from hp_core.bounds import MAX_INT, MAX_VOCAB
from hp_core.validators import bounded_int, positive_int
from hp_plugins.kit import padded_vocab, param_count, tp_collectives

__all__ = ["EmbeddingConfig", "evaluate_embedding", "hp_layer_kinds", "validate_embedding"]

# torch.nn.functional.embedding takes int64 indices.
TOKEN_ID_BYTES = 8



@attrs.frozen(kw_only=True)
class EmbeddingConfig:
    """The input embedding.

    Attributes:
        vocab_size: Rows of the table.
        hidden_size: Columns.
        dropout: Dropout on the embedding output (GPT-2 ``embd_pdrop``).
        position_embeddings: Rows of a learned absolute position table added to the
            token embeddings (GPT-2 ``n_positions``, MPT ``max_seq_len``); 0: none
            (rotary or ALiBi models).
        position_ids_per_token: Whether the position ids kept for the lookup's
            backward are one per token, ``(batch, seq)`` (llm-foundry MPT, which
            shifts them by the attention mask), rather than one sequence's
            ``(1, seq)`` broadcast over the batch (GPT-2, Megatron-LM).
    """

    vocab_size: int = attrs.field(validator=bounded_int(MAX_VOCAB, what="MAX_VOCAB"))
    hidden_size: int = attrs.field(validator=positive_int)
    dropout: float = attrs.field(default=0.0, validator=attrs.validators.and_(attrs.validators.ge(0), attrs.validators.lt(1)))
    position_embeddings: int = attrs.field(default=0, validator=bounded_int(MAX_INT, low=0, what="MAX_INT"))
    position_ids_per_token: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))


def validate_embedding(c: EmbeddingConfig, x: LayerContext) -> None:
    """Refuse a sequence longer than the learned position table (it has no row for the later positions)."""
    if c.position_embeddings and x.seq_len > c.position_embeddings:
        raise ConfigError("$.parallel.seq_len", f"seq_len={x.seq_len} exceeds the model's learned position table of "
                          f"position_embeddings={c.position_embeddings} rows (MPT max_seq_len, GPT-2 n_positions); "
                          f"choose seq_len <= {c.position_embeddings}")


def evaluate_embedding(c: EmbeddingConfig, x: LayerContext) -> LayerCost:
    """The embedding's cost on one rank of the first stage."""
    T, act = x.tokens, x.precision.activation_bytes
    hidden = T * c.hidden_size * act // x.sp_degree
    terms = [ActivationTerm("token_ids", T * TOKEN_ID_BYTES)]
    if c.dropout > 0:
        terms.append(ActivationTerm("embedding_dropout_mask", T * c.hidden_size * x.precision.dropout_mask_bytes // x.sp_degree))
    # A TP plan may leave the table whole on every rank (replicated_vocab trait).
    split = x.tp if "replicated_vocab" not in x.traits else 1
    stored = padded_vocab(c.vocab_size, x.vocab_pad_multiple, split) * c.hidden_size
    params = [param_count("embed_tokens", "dense", c.vocab_size * c.hidden_size, "replicated_vocab" not in x.traits, stored,
                          matrices=((1, stored // c.hidden_size // split, c.hidden_size),), embedding_or_output=True)]
    # Learned absolute positions: a table whole on every TP rank; kept for its lookup's backward, the int64
    # position ids: one sequence's (1, seq) broadcast over the batch, or one per token (MPT, shifted by the mask).
    positions = c.position_embeddings * c.hidden_size
    if positions:
        params.append(param_count("embed_positions", "dense", positions, False))
        ids = T if c.position_ids_per_token else x.seq_len // x.cp
        terms.append(ActivationTerm("position_ids", ids * TOKEN_ID_BYTES))
    full = T * c.hidden_size * act
    if split <= 1:
        collectives: tuple[Collective, ...] = ()
    elif positions and x.sp:
        # Megatron-LM LanguageModelEmbedding with positions: the lookup's output all-reduced, the positions
        # added on the full sequence, then scattered to the SP region (a split forward, all-gather backward).
        collectives = (Collective("tp", "all_reduce", full, 1, 0), Collective("tp", "all_gather", full, 0, 1))
    else:
        collectives = tp_collectives(x, 0, full, "embedding")
    return LayerCost(
        params=tuple(params),
        activations=tuple(terms),
        input_bytes=T * TOKEN_ID_BYTES,
        # Its backward holds the gradient of its output (the first layer's input
        # gradient) and a dense weight gradient of its whole vocabulary shard (and
        # position table) in the compute dtype (PyTorch embedding_dense_backward;
        # trainers then add it into their gradient buffer), as no fused accumulation
        # applies to a lookup.
        working_bytes=hidden + (stored // split + positions) * x.precision.activation_bytes,
        # The position rows' add: one elementwise op per element of the whole output, before the SP scatter.
        forward=Flops(elementwise_flops=T * c.hidden_size) if positions else Flops(),
        # A vocabulary-parallel lookup: its output reduced over TP, its backward a dense
        # gradient of the rank's table shard (hp_plugins.kit.work).
        work=LayerWork(collectives=collectives,
                       table_elements=stored / split + positions, boundary_bytes=T * c.hidden_size * act),
        # A lookup is no GEMM: its table's gradient is made in its input-gradient pass, nothing is
        # deferred (zero-bubble implementations defer the linear layers' wgrad GEMMs only).
        weight_gradient_bytes=0,
    )


@hookimpl
def hp_layer_kinds():
    yield LayerKind(
        name="embedding",
        config_type=EmbeddingConfig,
        evaluate=evaluate_embedding,
        placement="first",
        validate=validate_embedding,
        description="token embedding, vocabulary-parallel over TP",
    )
