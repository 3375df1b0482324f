"""DeepSeek-V3 multi-token prediction (MTP) module (DeepSeek-V3 report, arXiv:2412.19437, Section 2.2).

Each of ``num_nextn_predict_layers`` modules (the group's count; or one module applied at that many depths with its
weights once, ``applications``, Megatron-Core's ``mtp_use_repeated_layer``) embeds the
next tokens with the shared embedding, normalises that embedding (``enorm``)
and the previous depth's hidden state (``hnorm``), projects their
concatenation ``2h -> h`` (``eh_proj``), runs one transformer layer of the
model's last body kind (``layer``) or several layers one after another
(``layers``), and computes its own logits and loss through a norm
(``shared_head.norm``) and the shared output head. It sits on the last stage,
which then holds the embedding's weight too when ``pp > 1``.

A depth of several layers is Megatron-Core's hybrid MTP depth: ``MultiTokenPredictionLayer`` builds its
``mtp_model_layer`` as a ``HybridStack`` of the ``--hybrid-layer-pattern``'s ``/``-part (``*E``: an attention and an
MoE layer, each its own pre-norm and residual, no norm after the stack: ``post_layer_norm=False``), between the same
``enorm``, ``hnorm``, ``eh_proj`` and ``final_layernorm`` (``megatron/core/transformer/multi_token_prediction.py`` at
NVIDIA/Megatron-LM@d98e8a6, ``MultiTokenPredictionLayer.__init__`` and ``_proj_and_transformer_layer``;
``megatron/core/models/hybrid/hybrid_layer_specs.py`` ``_hybrid_mtp_block_spec``). Its layers are evaluated each
through ``LayerContext.sublayer`` and merged as layers run one after another (:mod:`hp_plugins.kit.merge`): their
parameters, kept terms (renamed ``layers.{i}.``, as Megatron names them ``mtp_model_layer.layers.{i}``), FLOPs and
work add, the backward's transient peak is the largest layer's, and fields one kernel record holds must agree.
A one-layer depth (``layer``, or ``layers`` of one) keeps the names ``layer.``, and prices exactly as before.

Parameters of one module: ``enorm``, ``hnorm`` and ``shared_head.norm``
(``h`` each), ``eh_proj`` (``2h * h``) and the layers'. The
embedding and head it shares are counted once, with their owners; the
released checkpoint also stores copies of them with the module
(``model.layers.61.embed_tokens``, ``shared_head.head``), which is why its
total is 685B for the 671B main model.

Kept per module: the next tokens' ids, the two norms' inputs (the embedding
output; the previous hidden state is the output head's norm input, already
kept) and outputs, the concatenation, the layer's own terms, and the head's
norm input and output and its fp32 loss softmax over the vocabulary shard.

Its collectives under tensor parallelism beside its layer's and the shared head's are the module's own call of
the shared embedding (``_get_embeddings`` at core_v0.16.0 calls ``embedding(input_ids, position_ids)``, Megatron-Core's
``LanguageModelEmbedding``: under sequence parallelism a reduce-scatter of ``h T b`` forward and an all-gather
backward, ``reduce_scatter_to_sequence_parallel_region`` in ``tensor_parallel/layers.py``; without, an all-reduce
forward), as the embedding kind states its own, and ``eh_proj``'s (:func:`eh_proj_collectives`).

Under a low-precision recipe the module runs as Megatron-Core runs it
(``multi_token_prediction.py`` at NVIDIA/Megatron-LM core_v0.16.0 lines 773-803,
``_proj_and_transformer_layer``): under ``fp8`` the concatenation's projection
(``eh_proj``, a Transformer Engine column-parallel linear: ``get_mtp_layer_spec_for_backend``
lines 432-440) and the transformer layer run in the run's FP8 context, so ``eh_proj``
keeps its quantized input (``eh_proj_in`` is an ``owned`` linear input) and the layer
keeps every mark its kind states (linear inputs, attention kernel tensors, the output
projection's original input); the norms are no GEMMs, and the shared head runs after
the module in ``GPTModel`` outside any FP8 context (``output_layer``), so its GEMM
stays in the compute dtype (``LayerWork.high_precision_gemms``) as the main head's.
Under ``fp4`` Megatron-Core runs the module in bf16 ("currently ignoring FP4 in MTP
layers", line 781), which the ``megatron`` runtime states (``Runtime.compute_dtype_kinds``):
an NVFP4 recipe prices the module as a layer kept in bf16 there, as the body's elsewhere
(docs/precision.md).

Recompute: Megatron-Core's selective recompute modules act inside the module's layers as in the decoder's. The
model's one ``TransformerConfig`` reaches the MTP layers (``models/gpt/gpt_model.py`` lines 245-246,
``models/hybrid/hybrid_model.py`` 302-303, ``multi_token_prediction.py`` lines 1929-1936 and 1946-1955, then the
inner ``TransformerLayer``, lines 1220-1228, or ``HybridStack``, lines 1203-1214, at NVIDIA/Megatron-LM@d98e8a6), and
each module reads ``recompute_granularity`` / ``recompute_modules`` from it in its own ``__init__``
(``transformer_layer.py`` lines 473-539, ``attention.py`` 392-395, ``multi_latent_attention.py`` 171-174,
``moe/moe_layer.py`` 247-255, ``moe/experts.py`` 269-272); ``is_mtp_layer`` changes none of it. So the module keeps
its layers' terms under their switches, with their re-runs, and names their kinds (``LayerCost.inner_kinds``): under
a runtime stating ``Runtime.inner_recompute`` (``megatron``) it recomputes what the run's body layers of those kinds
recompute (:func:`hp_core.engine.inner_layers.placed_recompute`); under any other it keeps everything. Megatron-Core's
full recompute checkpoints the module's ``_proj_and_transformer_layer`` itself (``forward`` lines 1705-1720,
``_checkpointed_forward`` lines 1492-1653: ``uniform`` with ``recompute_num_layers`` 1, ``block`` skipped with a
warning): the cost states that part (``LayerCost.checkpoint``), and where every body layer is recomputed fully under
such a runtime (the plan Megatron runs as ``uniform``) the module keeps only what lies outside it, the next tokens'
ids, the embedding output (the checkpoint's input; the previous hidden state, its other input, is kept already), the
final norm's output (the shared head's input) and the loss softmax, and re-runs ``eh_proj``, its layers and the norms
in backward (:mod:`hp_core.engine.inner_layers`; docs/kinds.md, ``mtp``).
"""

from __future__ import annotations

import attrs

from hp_core.errors import ConfigError
from hp_core.markers import hookimpl
from hp_core.specs.model import LayerGroup, ModelSpec
from hp_core.costs import ActivationTerm, Collective, Flops, LayerContext, LayerCost
from hp_core.reruns import WholeCheckpoint
from hp_core.types import LayerKind
from hp_core.bounds import MAX_VOCAB
from hp_core.validators import bounded_int, one_of, positive_int
from hp_plugins.kit import NORMS, norm_params, padded_vocab, param_count, tp_collectives
from hp_plugins.kit.merge import merge_costs
from hp_plugins.kinds.embedding import TOKEN_ID_BYTES

__all__ = ["MTPConfig", "eh_proj_collectives", "evaluate_mtp", "hp_layer_kinds", "with_repeated_module"]



def _one_layer(instance, attribute, value):
    if value is not None and (not isinstance(value, LayerGroup) or value.count != 1):
        raise ValueError(f"{attribute.name} must be one layer group of count 1 (the module's transformer layer)")


def _depth_layers(instance, attribute, value):
    if not all(isinstance(g, LayerGroup) and g.count == 1 for g in value):
        raise ValueError(f"{attribute.name} must list layer groups of count 1 each (the depth's layers, in order)")
    if (instance.layer is None) == (not value):
        raise ValueError("state the module's layer (one layer) or its layers (a depth of several), one of the two")


@attrs.frozen(kw_only=True)
class MTPConfig:
    """One MTP module (one depth).

    Attributes:
        vocab_size: Vocabulary (of the shared embedding and head).
        hidden_size: Model width.
        norm: The module's norms (``rmsnorm`` or ``layernorm``).
        layer: Its transformer layer: a body kind and that kind's config; or ``None`` where ``layers`` is stated.
        layers: The depth's layers in order, each a body kind and its config (Megatron-Core's hybrid MTP depth,
            module docstring); empty where ``layer`` is stated.
        applications: How many depths run this module's one set of weights, one after another (1: a module of its
            own a depth). Megatron-Core's ``mtp_use_repeated_layer`` builds one MTP layer and applies it
            ``mtp_num_layers`` times (``MultiTokenPredictionBlock`` in ``multi_token_prediction.py`` at
            NVIDIA/Megatron-LM@d98e8a6: "only 1 layer is created and applied mtp_num_layers times"; its forward's
            ``layer_idx = 0 if self.mtp_use_repeated_layer``): each application embeds, projects, runs the layers
            and computes its loss again, so what is kept, computed and communicated is counted once an application,
            while the parameters (and so their gradients and optimizer states, which accumulate) are counted once.
    """

    vocab_size: int = attrs.field(validator=bounded_int(MAX_VOCAB, what="MAX_VOCAB"))
    hidden_size: int = attrs.field(validator=positive_int)
    layer: LayerGroup | None = attrs.field(default=None, validator=_one_layer)
    layers: tuple[LayerGroup, ...] = attrs.field(default=(), converter=tuple, validator=_depth_layers)
    norm: str = attrs.field(default="rmsnorm", validator=one_of(NORMS))
    applications: int = attrs.field(default=1, validator=positive_int)

    @property
    def depth(self) -> tuple[LayerGroup, ...]:
        """The depth's layers in order (``(layer,)`` for the one-layer form)."""
        return (self.layer,) if self.layer is not None else self.layers


def eh_proj_collectives(x: LayerContext, h: int) -> tuple[Collective, ...]:
    """The tensor-parallel collectives of one module's ``eh_proj``, per micro-batch (none at ``tp`` 1).

    Megatron-Core (``megatron/core/transformer/multi_token_prediction.py`` at NVIDIA/Megatron-LM core_v0.16.0,
    3bec9aa) builds ``eh_proj`` as the backend's column-parallel linear ``2h -> h/tp`` with ``gather_output=False``
    (``MultiTokenPredictionLayer.__init__``; Transformer Engine's under the TE spec) and, in ``_concat_embeddings``,
    runs it on ``torch.cat((enorm(embedding), hnorm(hidden)), -1)``, then ``gather_from_tensor_model_parallel_region``
    (forward an all-gather along the last dim, ``h/tp -> h``; backward a split, no communication) and, under
    sequence parallelism, ``scatter_to_sequence_parallel_region`` (forward a split along the sequence, no
    communication; backward an all-gather along it; ``megatron/core/tensor_parallel/mappings.py``
    ``_GatherFromModelParallelRegion``, ``_ScatterToSequenceParallelRegion``). With ``T`` tokens and ``b`` activation
    bytes, NCCL's convention (the gathered output, the reduce-scatter's input, the all-reduce's buffer):

    * sequence parallel: the column-parallel linear all-gathers its sequence-sharded input, ``2 h T b``, forward
      (re-gathered in backward for its weight gradient where ``gather`` is recomputed, as every column-parallel
      input: :func:`hp_plugins.kit.tp_collectives`), and reduce-scatters its input gradient, ``2 h T b``, backward;
      the output's last-dim all-gather, ``h T b``, forward, and the scatter's all-gather of its gradient, ``h T b``,
      backward;
    * without: the input is whole on every rank (``copy_to_tensor_model_parallel_region``: the identity forward, an
      all-reduce of the input gradient, ``2 h T b``, backward) and the output's last-dim all-gather, ``h T b``,
      forward.

    The output's gather and the scatter's are plain autograd mappings on the compute stream, which no TP overlap
    takes (Transformer Engine's userbuffers overlap only its own linear layers' collectives): they are stated
    ``overlappable=False``, exposed. ``eh_proj`` itself is built with ``tp_comm_buffer_name`` ``mtp_eh_proj``
    (``multi_token_prediction.py`` line 1184 at NVIDIA/Megatron-LM@d98e8a6), which turns the overlap off
    (:attr:`LayerWork.refused_userbuffers <hp_core.costs.LayerWork.refused_userbuffers>`).
    """
    if x.tp <= 1:
        return ()
    out_bytes = x.tokens * h * x.precision.activation_bytes  # the gathered output: T tokens x h
    if x.sp:
        return (Collective("tp", "all_gather", 2 * out_bytes, 1, 0, rerun_switch="gather", gemm_input=True),
                Collective("tp", "reduce_scatter", 2 * out_bytes, 0, 1),
                Collective("tp", "all_gather", out_bytes, 1, 1, overlappable=False))
    return (Collective("tp", "all_reduce", 2 * out_bytes, 0, 1),
            Collective("tp", "all_gather", out_bytes, 1, 0, overlappable=False))


def evaluate_mtp(c: MTPConfig, x: LayerContext) -> LayerCost:
    """One MTP module's cost on one rank of the last stage: its depth once, or for a module applied at several
    depths (``applications``) each application's activations, FLOPs and work, one after another as the layers of a
    depth are (:func:`~hp_plugins.kit.merge.merge_costs`), with its parameters once."""
    once = _one_application(c, x)
    if c.applications == 1:
        return once
    prefixes = [f"application{i}." for i in range(c.applications)]
    runs = merge_costs([once] * c.applications, prefixes, "$.model.layers[].config.applications")
    # The named modules' parameter families are the one set of weights, as the parameters are; their kept terms each
    # application's, their GEMMs' positions each application's (its GEMMs listed after the earlier applications').
    work = None if runs.work is None else attrs.evolve(runs.work, modules=tuple(
        attrs.evolve(m.renamed(prefix, i * len(once.work.gemms)), params=m.params)
        for i, prefix in enumerate(prefixes) for m in once.work.modules))
    # Each application is its own MTP layer forward, checkpointed whole on its own (module docstring, 'Recompute').
    # Its GEMMs outside by place: each application's at its own positions (listed after the earlier applications').
    per = 0 if once.work is None else len(once.work.gemms)
    whole = WholeCheckpoint(kept={p + op for p in prefixes for op in once.checkpoint.kept},
                            gemms=once.checkpoint.gemms * c.applications,
                            positions=tuple(i * per + q for i in range(c.applications) for q in once.checkpoint.positions),
                            collectives=once.checkpoint.collectives * c.applications)
    return attrs.evolve(runs, params=once.params, weight_shapes=once.weight_shapes, work=work,
                        inner_kinds=once.inner_kinds, checkpoint=whole)


def _one_application(c: MTPConfig, x: LayerContext) -> LayerCost:
    """The module's cost for one depth on one rank of the last stage."""
    if x.sublayer is None:
        raise ConfigError("$.model.layers", "the mtp kind evaluates its transformer layer through the planner (estimate)")
    depth = c.depth
    # Its layers as one (module docstring); the one-layer form's names stay ``layer.``.
    prefixes = ["layer."] if len(depth) == 1 else [f"layers.{i}." for i in range(len(depth))]
    inner = merge_costs([x.sublayer(group) for group in depth], prefixes, "$.model.layers[].config.layers")
    p, T, h = x.precision, x.tokens, c.hidden_size
    act = p.activation_bytes
    hidden = T * h * act // x.sp_degree
    vocab = padded_vocab(c.vocab_size, x.vocab_pad_multiple, x.tp)
    shard = vocab // x.tp
    own = (
        ActivationTerm("mtp_token_ids", T * TOKEN_ID_BYTES),
        ActivationTerm("enorm_in", hidden),
        ActivationTerm("enorm_out", hidden),
        ActivationTerm("hnorm_out", hidden),
        ActivationTerm("eh_proj_in", 2 * hidden, gemm_input="owned"),  # torch.cat keeps nothing; eh_proj keeps it
    )
    head = (
        ActivationTerm("head_norm_in", hidden),
        ActivationTerm("head_norm_out", hidden),
        ActivationTerm("mtp_loss_softmax", T * shard * (act if "fused_cross_entropy" in x.traits else p.logits_bytes), None, True),
    )
    # The layers' terms, renamed, each field kept: their switches, which a runtime whose recompute reaches the
    # module's layers recomputes as its body layers of their kinds (inner_kinds below; module docstring,
    # 'Recompute'), their reruns with them (inner.work); and the linear inputs, the tensors an attention kernel keeps,
    # the output projection's original input: Megatron-Core runs the module's layer in the run's FP8 context
    # (multi_token_prediction.py at NVIDIA/Megatron-LM core_v0.16.0 lines 773-803; module docstring).
    layer_terms = inner.activations
    params = (
        param_count("mtp_norms", "dense", 3 * norm_params(c.norm, h), False),
        param_count("eh_proj", "dense", 2 * h * h, True, matrices=((1, h // x.tp, 2 * h),)),
        *inner.params,
        param_count("embed_tokens", "dense", c.vocab_size * h, True, vocab * h, "embedding",
                    matrices=((1, shard, h),), embedding_or_output=True),
        param_count("lm_head", "dense", c.vocab_size * h, True, vocab * h, "output",
                    matrices=((1, shard, h),), embedding_or_output=True),
    )
    logits_grad = T * shard * act + T * h * act
    weight_shapes = tuple(dict.fromkeys((*inner.weight_shapes, (h // x.tp, 2 * h), (shard, h))))
    # Its layer's work, with the module's projection and the shared head's GEMMs, eh_proj's collectives and the
    # head's vocabulary-parallel ones added.
    # eh_proj's and the head's GEMMs are listed whatever shape its layer's linears have (each GEMM once).
    own_gemms = ((T, h // x.tp, 2 * h), (T, shard, h))
    # The shared head's GEMM (the second, by place) stays in the compute dtype under a recipe, as the main head's
    # (module docstring).
    head_gemm = own_gemms[1:]
    embedding, shared_head = tp_collectives(x, 0, T * h * act, "embedding"), tp_collectives(x, 0, T * h * act, "head")
    work = None if inner.work is None else attrs.evolve(
        inner.work, collectives=inner.work.collectives + embedding + eh_proj_collectives(x, h) + shared_head,
        gemms=inner.work.gemms + own_gemms, table_elements=0.0,
        high_precision_gemms=inner.work.high_precision_gemms + head_gemm,
        # eh_proj, a TEColumnParallelLinear in the TE spec (multi_token_prediction.py get_mtp_layer_spec_for_backend),
        # is built before the inner layers with tp_comm_buffer_name 'mtp_eh_proj' (line 1184 at
        # NVIDIA/Megatron-LM@d98e8a6), which Megatron-Core's TELinear runs no userbuffers for: it turns TP
        # communication overlap off for the module (LayerWork.refused_userbuffers).
        refused_userbuffers=inner.work.refused_userbuffers + ("mtp_eh_proj",))
    return LayerCost(
        params=params,
        activations=own + layer_terms + head,
        input_bytes=hidden,
        working_bytes=max(inner.working_bytes, logits_grad),
        buffers_once_bytes=inner.buffers_once_bytes,
        buffers_per_micro_batch_bytes=inner.buffers_per_micro_batch_bytes,
        weight_shapes=weight_shapes,
        work=work,
        # Its layer's, eh_proj's (its input as kept, its output gradient) and the head's (output.py).
        weight_gradient_bytes=None if inner.weight_gradient_bytes is None else
        inner.weight_gradient_bytes + 2 * hidden + T * h * act // x.tp + hidden + T * shard * act,
        # What a recipe restates of it: its layer's (eh_proj's input and the head's are left as stated).
        weight_gradient_quantized=None if inner.weight_gradient_bytes is None else inner.weight_gradient_quantized,
        forward=Flops(
            matmul_flops=inner.forward.matmul_flops + 2 * T * 2 * h * h // x.tp + 2 * T * h * shard,
            attention_flops=inner.forward.attention_flops,
            elementwise_flops=inner.forward.elementwise_flops,
        ),
        inner_kinds=frozenset(group.kind for group in depth),
        # A setting its layers measured whole keeps that measurement and the module's own terms (none gated).
        measured=tuple((switches, kept + sum(t.bytes for t in own + head)) for switches, kept in inner.measured),
        assumed=inner.assumed,
        # Megatron-Core's full recompute checkpoints _proj_and_transformer_layer (module docstring, 'Recompute'):
        # outside it the embedding call (its ids kept, its output the checkpoint's input, kept), the shared head (its
        # input, the final norm's output, kept) and the loss; eh_proj, the layers and the final norm inside. The head's
        # GEMM by place: the last of the work's (its layers', then eh_proj's, then the head's); no work, no GEMMs.
        checkpoint=WholeCheckpoint(kept={"mtp_token_ids", "enorm_in", "head_norm_out", "mtp_loss_softmax"},
                                   gemms=() if work is None else head_gemm,
                                   positions=() if work is None else (len(work.gemms) - 1,),
                                   collectives=embedding + shared_head),
    )



def with_repeated_module(model: ModelSpec, applications: int | None = None) -> ModelSpec:
    """*model* with its MTP module applied at *applications* depths (its group's count where ``None``) with one set of
    weights: the group of count 1 with that many ``applications`` (Megatron-Core's ``mtp_use_repeated_layer``,
    :class:`MTPConfig`)."""
    return attrs.evolve(model, layers=tuple(
        attrs.evolve(g, count=1, config=attrs.evolve(g.config, applications=applications or g.count))
        if g.kind == "mtp" else g for g in model.layers))

@hookimpl
def hp_layer_kinds():
    yield LayerKind(
        name="mtp",
        config_type=MTPConfig,
        evaluate=evaluate_mtp,
        placement="last",
        description="DeepSeek-V3 multi-token prediction module: norms, 2h->h projection, one layer (or a depth of "
                    "several, Megatron-Core's hybrid MTP), shared head",
    )
