"""The layer builder: what a layer kind's evaluator appends its parameters, kept tensors and FLOPs to.

A decoder layer is an attention block (grouped-query, :mod:`hp_plugins.kit.attention`,
or multi-head latent, :mod:`hp_plugins.kit.mla`) followed by a feed-forward block
(a dense MLP, :mod:`hp_plugins.kit.feedforward`, or a mixture of experts,
:mod:`hp_plugins.kit.experts`), each with its pre-norm and residual. Each block
function appends its parameters, its kept activations per op, its backward's
transient gradients and its forward FLOPs to a :class:`LayerBuilder`, which
turns them into a :class:`~hp_core.costs.LayerCost`.

Notation in the docstrings: ``T`` tokens of a micro-batch on a context-parallel
rank, ``h`` the width, ``t`` tensor parallel, ``sp = t`` under sequence
parallelism (else 1), 2-byte activations (``activation_bytes``).
"""

from __future__ import annotations

import functools

import attrs

from hp_core.costs import ActivationTerm, Flops, LayerContext, LayerCost, ParamCount, Rerun
from hp_core.reruns import USERBUFFERS_PASSES
from hp_core.linear_modules import LinearModule
from hp_plugins.kit.eager import EAGER_NORM_BYTES, EAGER_ROPE_BYTES, RESIDUAL_BYTES
from hp_plugins.kit.norms import NORM_OPS_PER_ELEMENT, fp32_norm_bytes, norm_params
from hp_plugins.kit.work import AttentionShape, ExpertShape, decoder_work

__all__ = ["DECODER_MOE_SWITCHES", "DECODER_SWITCHES", "DENSE_MLP_SWITCHES", "FC1_SWITCH", "LayerBuilder", "MOE_LAYER_SWITCH", "RESIDUAL_OPS", "ROPE_OPS", "SELECTIVE_SWITCHES", "SOFTMAX_OPS", "USERBUFFERS_NAMES",
           "param_count", "term"]

# Elementwise operations per element (forward), counted from the definitions:
# softmax max, subtract, exp, sum, divide (5); residual add 1; a rotary position embedding's
# x cos + rotate_half(x) sin (Su et al. 2021, RoFormer, Section 3.4.2): two multiplies, the add and
# rotate_half's sign flip, 4 per rotated element of q and k.
SOFTMAX_OPS = 5
# The tp_comm_buffer_names Megatron-Core's Transformer Engine linears run userbuffers for: TELinear.__init__ turns
# config.tp_comm_overlap off (on the config every module shares) when built with any other name
# (megatron/core/extensions/transformer_engine.py lines 1176-1186 at NVIDIA/Megatron-LM@d98e8a6).
USERBUFFERS_NAMES = ("qkv", "proj", "fc1", "fc2")
RESIDUAL_OPS = 1
ROPE_OPS = 4
# The recompute switches of a layer built of an attention block and an MLP or experts (the terms the
# blocks record them under), and the selective set among them: the attention core (score, softmax,
# dropout and the casts between them), as Megatron-LM's ``--recompute-granularity selective``
# (core_attn) and Korthikanti et al. 2022 Section 4.2 recompute it.
DECODER_SWITCHES = ("attBMM", "headCast", "dropout", "softmax", "normOp", "gather", "ffAct")
SELECTIVE_SWITCHES = ("attBMM", "headCast", "dropout", "softmax")
# The switch of a dense MLP's FC1 outputs (the gate and up projections' outputs, the activation's input):
# recomputing it re-runs FC1 from the kept MLP input. With ``ffAct`` it drops every tensor the MLP keeps
# inside itself, what checkpointing the MLP as a unit keeps no more of (Megatron-Core's ``mlp`` recompute
# module: hp_plugins/runtimes/megatron.py). Only the dense MLP (hp_plugins.kit.feedforward.mlp) states it,
# where a kind asks; routed and shared experts keep their FC1 outputs under no switch.
FC1_SWITCH = "ffFc1"
# The switches of a layer whose feed-forward block is a dense MLP with FC1_SWITCH.
DENSE_MLP_SWITCHES = (*DECODER_SWITCHES, FC1_SWITCH)
# The switch of what a mixture-of-experts block keeps inside itself besides its activation (ffAct) and its
# input (the pre-norm's output): the router's probabilities, the dispatched tokens, the routed and shared
# experts' FC1 outputs, the combine's kept inputs, the permutation's row map, a latent projection's input.
# Recomputing it re-runs the whole block from its kept input, the dispatch and combine included
# (hp_plugins.kit.experts.moe; LayerWork.reruns): with ffAct it drops every tensor the block keeps inside
# itself, what Megatron-Core's ``moe`` recompute module keeps no more of (hp_plugins/runtimes/megatron.py).
MOE_LAYER_SWITCH = "moeLayer"
# The switches of a layer of an attention block and a mixture of experts with MOE_LAYER_SWITCH.
DECODER_MOE_SWITCHES = (*DECODER_SWITCHES, MOE_LAYER_SWITCH)


# Evaluators build the same terms and parameter counts again for every layout a search tries; the
# records are frozen, so equal ones are shared instead of built (and validated) again.
@functools.lru_cache(maxsize=1 << 16)
def term(op: str, nbytes: int, switch: str | None = None, tp_split: bool = False,
         gemm_input: str | None = None, sp_gathered: bool = False, attention_saved: str | None = None,
         attention_view_bytes: int = 0, original_input: bool = False) -> ActivationTerm:
    """An :class:`~hp_core.costs.ActivationTerm`, shared with every equal one asked for before."""
    return ActivationTerm(op, nbytes, switch, tp_split, gemm_input, sp_gathered, attention_saved, attention_view_bytes,
                          original_input)


@functools.lru_cache(maxsize=1 << 16)
def param_count(name: str, group: str, elements: int, tp_split: bool, stored_elements: int | None = None,
                shared_with: str | None = None, matrices: tuple[tuple[int, int, int], ...] = (),
                embedding_or_output: bool = False, high_precision: bool = False) -> ParamCount:
    """A :class:`~hp_core.costs.ParamCount`, shared with every equal one asked for before.

    *matrices* (``(count, rows, columns)`` on one rank) drop any with a zero
    count or side (more ranks than heads or experts: a layout the kind's
    validation refuses).
    """
    matrices = tuple(m for m in matrices if all(m))
    return ParamCount(name, group, elements, tp_split, stored_elements, shared_with, matrices, embedding_or_output,
                      high_precision)


class LayerBuilder:
    """Collects one layer's parameters, kept tensors, transient gradients and FLOPs."""

    def __init__(self, x: LayerContext, hidden_size: int) -> None:
        self.x = x
        self.act = x.precision.activation_bytes
        self.h = hidden_size
        # A hidden-state tensor outside the TP region, and the part an SP all-gather adds.
        self.hidden = x.tokens * hidden_size * self.act // x.sp_degree
        self.gathered = x.tokens * hidden_size * self.act - self.hidden if x.sp and x.tp > 1 else 0
        self.params: list[ParamCount] = []
        self.terms: list[ActivationTerm] = []
        self.block_grads: list[int] = []
        self.matmul = 0
        self.attention = 0
        self.ssd_scan = False  # the attention FLOPs are a Mamba-2 SSD scan (LayerWork.ssd_scan)
        self.elementwise = 0
        # Elementwise ops whose eager bytes are counted (hp_plugins.kit.eager), their bytes, and the attention softmax's.
        self.eager_ops, self.eager_bytes, self.softmax_ops = 0, 0.0, 0
        # A rotary embedding's elementwise ops, its eager (forward, backward) bytes, and the bytes copied each way
        # past it (a partially rotated head's other channels): LayerWork.rotary_flops, rotary_eager_bytes, copy_bytes.
        self.rotary_ops, self.rotary_eager, self.copies = 0, (0.0, 0.0), 0.0
        self.buffers_once = 0
        self.shapes: list[tuple[int, int]] = []
        # Every linear but the routed experts', one entry per linear (two of one shape both listed): the layer's
        # listed GEMMs (LayerWork.gemms), which the step-time model prices shape by shape. A linear is known by its
        # index here, never by its shape (two linears may share one).
        self.gemm_shapes: list[tuple[int, int]] = []
        # The indices (in gemm_shapes) of the linears whose trainer keeps their compute-dtype input
        # (LayerWork.original_input_gemms), and of those that run over the rank's own sequence shard (linear shard).
        self.original_input_linears: list[int] = []
        self.shard_linears: list[int] = []
        # What the deferred weight-gradient passes read (LayerCost.weight_gradient_bytes): per linear, its input and
        # its output gradient (sail-sg/zero-bubble-pipeline-parallelism WeightGradStore.put(total_input, grad_output, ...)).
        self.weight_gradient = 0
        # Of it, what a recipe quantizes (LayerCost.weight_gradient_quantized): the inputs' compute-dtype bytes as counted
        # there (a shared input once) and elements once per linear (each holds its own copy), the output gradients' elements.
        self.weight_gradient_input_bytes, self.weight_gradient_input_elements, self.weight_gradient_dy_elements = 0, 0, 0
        # Forward FLOPs of each unfused matmul in forward order (q, k, v, o, w1, w3, w2): torchtitan's op-level
        # SAC re-runs every second one (LayerWork.alternate_matmul_flops).
        self.matmuls_in_order: list[float] = []
        # Forward FLOPs of matmuls that policy re-runs wherever they fall: torchtitan's save lists hold no
        # aten._grouped_mm (torchtitan/models/*/infra/parallelize.py _op_sac_save_list), so the routed experts'
        # grouped GEMMs are all re-run.
        self.rerun_always = 0.0
        # What the step time prices (hp_plugins.kit.work): the blocks whose GEMMs TP splits (each
        # gathers its input and reduces its output over TP), the attention core and the routed experts.
        self.tp_blocks = 0
        self.attention_shape: AttentionShape | None = None
        self.expert_shape: ExpertShape | None = None
        # What recomputing a switch re-runs, as the blocks state it (LayerWork.reruns): the dense MLP's FC1 (the
        # MoE block's moeLayer decoder_work states from expert_shape, its GEMMs and collectives being known there).
        self.reruns: list[tuple[str, Rerun]] = []
        # The named linear modules (LayerWork.modules): (name, parameter families, kept input terms, SP all-gather
        # calls forward and backward), and each name's linears (their indices in gemm_shapes, as linear records them).
        self.modules: list[tuple[str, tuple[str, ...], tuple[str, ...], tuple[int, int]]] = []
        self.module_linears: dict[str, list[int]] = {}
        # (Megatron-Core tp_comm_buffer_name, index in gemm_shapes) of the linears Transformer Engine runs through its
        # userbuffers under TP communication overlap (LayerWork.userbuffers_gemms).
        self.ub_linears: list[tuple[str, int, tuple[str, ...]]] = []
        # The tp_comm_buffer_names of its Transformer Engine linears that Megatron-Core's TE extension does not support
        # (LayerWork.refused_userbuffers): building one turns TP communication overlap off.
        self.refused_buffers: list[str] = []

    def linear_module(self, name: str, params: tuple[str, ...], terms: tuple[str, ...] = (),
                      gathers: tuple[int, int] = (0, 0)) -> None:
        """Name a linear module of the layer (:class:`~hp_core.linear_modules.LinearModule`): its parameter families,
        the kept terms that are its input and the calls of the block's sequence-parallel all-gather that move its input
        and output gradient. Its GEMMs are the linears recorded with its name (:meth:`linear` ``module``), each its own
        entry of the layer's listed GEMMs whatever other linear has its shape. A name already recorded gains these
        families and terms (a projection Megatron-Core fuses into the module)."""
        for i, (known, *entry) in enumerate(self.modules):
            if known == name:
                self.modules[i] = (name, entry[0] + tuple(params), entry[1] + tuple(terms), entry[2])
                return
        self.modules.append((name, tuple(params), tuple(terms), tuple(gathers)))

    def _linear_modules(self, gemms: tuple[tuple[int, int, int], ...]) -> tuple[LinearModule, ...]:
        """The named modules, each with its own linears' entries of *gemms* (the layer's LayerWork.gemms, whose last
        ``len(gemm_shapes)`` entries are the listed linears in order: :func:`~hp_plugins.kit.work.decoder_work`)."""
        unnamed = sorted(set(self.module_linears) - {name for name, *_ in self.modules})
        if unnamed:
            raise ValueError(f"LayerBuilder: linears recorded for modules {unnamed} that linear_module never named")
        at = len(gemms) - len(self.gemm_shapes)
        listed = gemms[at:]
        ops = {t.op for t in self.terms}
        found = []
        for name, params, terms, gathers in self.modules:
            own = self.module_linears.get(name, [])
            found.append(LinearModule(name, tuple(listed[i] for i in own), params, tuple(t for t in terms if t in ops),
                                      gathers if self.x.tp > 1 and self.x.sp else (0, 0),
                                      tuple(listed[i] for i in own if i in self.original_input_linears),
                                      positions=tuple(at + i for i in own)))
        return tuple(found)

    def keep(self, op: str, nbytes: int, switch: str | None = None, tp_split: bool = False,
             gemm_input: str | None = None, sp_gathered: bool = False, attention_saved: str | None = None,
             attention_view_bytes: int = 0, original_input: bool = False) -> None:
        """Record *nbytes* kept for backward by *op*, dropped by *switch*.

        Args:
            gemm_input: ``"owned"`` or ``"shared"`` where the tensor is a
                linear layer's input kept for its weight gradient
                (:attr:`ActivationTerm.gemm_input <hp_core.costs.ActivationTerm.gemm_input>`).
            sp_gathered: It is a sequence-parallel-gathered linear input or its shard
                (:attr:`ActivationTerm.sp_gathered <hp_core.costs.ActivationTerm.sp_gathered>`).
            attention_saved: ``"qkv"``, ``"out"`` or ``"qkv_view"`` where a fused attention kernel keeps it
                (:attr:`ActivationTerm.attention_saved <hp_core.costs.ActivationTerm.attention_saved>`).
            attention_view_bytes: Of a ``"qkv_view"`` tensor, the bytes of the view the kernel reads
                (:attr:`ActivationTerm.attention_view_bytes <hp_core.costs.ActivationTerm.attention_view_bytes>`).
            original_input: Its linear layer keeps it in the compute dtype where the recipe can quantize it
                again in backward (:attr:`ActivationTerm.original_input <hp_core.costs.ActivationTerm.original_input>`).
        """
        if nbytes:
            self.terms.append(term(op, nbytes, switch, tp_split, gemm_input, sp_gathered, attention_saved,
                                   attention_view_bytes, original_input))

    def param(self, name: str, elements: int, tp_split: bool, group: str = "dense",
              matrices: tuple[tuple[int, int, int], ...] = (), high_precision: bool = False) -> None:
        """Record a parameter family of *elements* (whole model).

        Args:
            matrices: Its 2-D weights as one rank holds them, each ``(count,
                rows, columns)`` (a linear weight's per-rank ``(fan_out,
                fan_in)``); its other elements are 1-D (biases, norm scales).
            high_precision: Its matrices stay in the compute dtype under a
                low-precision recipe (a router's gate).
        """
        if elements:
            self.params.append(param_count(name, group, elements, tp_split, matrices=tuple(matrices),
                                           high_precision=high_precision))

    def norm_switch(self, own_module: bool = False) -> str | None:
        """The switch that drops a norm's output: ``normOp``, or ``None`` under the runtime trait
        ``megatron_layernorm_recompute`` for a norm that is not a block pre-norm built as a module of its own
        (*own_module*): there the trainer's norm recompute (Megatron-Core's ``layernorm`` module) re-runs only
        ``input_layernorm`` and ``pre_mlp_layernorm`` where they are not ``IdentityOp`` (``transformer_layer.py``
        at NVIDIA/Megatron-LM@d98e8a6, ``TransformerLayer.__init__``), and a norm fused into the next linear
        (``TELayerNormColumnParallelLinear``) keeps its output as that linear's saved input."""
        return "normOp" if own_module or "megatron_layernorm_recompute" not in self.x.traits else None

    def pre_norm(self, prefix: str, norm: str, hidden_dropout: float, gemm_input: str | None = "owned",
                 own_module: bool = False) -> None:
        """A block's pre-norm: its input (the residual stream) and output, the SP gathered copy, the dropout mask.

        Korthikanti et al. 2022 Section 4.1: each LayerNorm keeps its input
        (2sbh) and the following linear layer its input (2sbh), the norm's output.
        The norm's output (and its SP-gathered copy) is the next linear
        layer's input (*gemm_input*; ``None`` where a compute-dtype op, a
        router's gate, keeps it too).

        Args:
            own_module: Megatron-Core's Transformer Engine specs build this norm as a module of its own
                (``TENorm``: an MoE block's ``pre_mlp_layernorm``, MLA's ``input_layernorm``), not fused into the
                one linear that reads it (``TELayerNormColumnParallelLinear``: attention's ``linear_qkv``, a dense
                MLP's ``linear_fc1``, Mamba's and GDN's ``in_proj``; ``gpt_layer_specs.py``,
                ``hybrid_layer_specs.py``, ``experimental_attention_variant_module_specs.py`` at d98e8a6). Read only
                under the runtime trait ``megatron_layernorm_recompute`` (:meth:`norm_switch`): elsewhere the
                output is kept under ``normOp`` either way.
        """
        self.keep(f"{prefix}_norm_in", self.hidden)
        gathered = gemm_input is not None  # the input the block's all-gather (Collective.gemm_input) gathers under SP
        switch = self.norm_switch(own_module)
        self.keep(f"{prefix}_norm_out", self.hidden, switch, gemm_input=gemm_input, sp_gathered=gathered)
        # An unfused RMSNorm's fp32 copy and inverse root (fp32_norm_copy trait, kit.norms.fp32_norm_bytes).
        self.keep(f"{prefix}_norm_fp32", fp32_norm_bytes(self.x.tokens, self.h, norm, self.x.traits) // self.x.sp_degree, switch)
        self.keep(f"{prefix}_gathered", self.gathered, "gather", gemm_input=gemm_input, sp_gathered=gathered)
        if hidden_dropout > 0:
            self.keep(f"{prefix}_hidden_dropout_mask", self.x.tokens * self.h * self.x.precision.dropout_mask_bytes // self.x.sp_degree)
        self.param(f"{prefix}_norm", norm_params(norm, self.h), False)
        ops = (NORM_OPS_PER_ELEMENT[norm] + RESIDUAL_OPS) * self.x.tokens * self.h // self.x.sp_degree
        self.elementwise += ops
        if norm in EAGER_NORM_BYTES:
            self.count_eager(ops, (EAGER_NORM_BYTES[norm] + RESIDUAL_BYTES) / (NORM_OPS_PER_ELEMENT[norm] + RESIDUAL_OPS))

    def attention_core(self, heads: int, qk_dim: int, v_dim: int, attention_dropout: float,
                       softmax_bytes: int | None = None) -> None:
        """The score/softmax/dropout/value core (eager) or the flash kernel's statistics.

        Under all-to-all context parallelism the kernel runs on ``heads / cp``
        heads of the whole sequence and keeps its output in that layout, while
        the output projection keeps the output exchanged back to the local
        sequence: two copies of the attention output (DeepSpeed-Ulysses;
        Transformer Engine's CP A2A keeps the kernel's output so its backward
        exchanges only the output gradient).

        Args:
            softmax_bytes: The eager softmax's element size where the module
                fixes it (Llama 4's runs in the compute dtype); ``None``: the
                precision's ``softmax_bytes``.
        """
        x, p, t = self.x, self.x.precision, self.x.tp
        softmax = p.softmax_bytes if softmax_bytes is None else softmax_bytes
        if x.cp > 1 and x.cp_kind == "a2a":
            self.keep("attn_out_a2a", x.tokens * heads * v_dim * self.act // t, None, True)
        score_elements = x.micro_batch_size * (heads // t) * (x.seq_len // x.cp) * x.seq_len
        if x.attention == "eager":
            self.keep("softmax_out", score_elements * softmax, "softmax", True)
            if softmax != self.act:
                self.keep("softmax_cast", score_elements * self.act, "headCast", True)
            if attention_dropout > 0:
                self.keep("attn_dropout_mask", score_elements * p.dropout_mask_bytes, "dropout", True)
                self.keep("attn_dropout_out", score_elements * self.act, "attBMM", True)
            # Backward: the gradients of the probabilities and of the scores, in the
            # softmax's dtype (fp32 where it runs in fp32: Hugging Face eager, measured
            # by the torch census, docs/accuracy.md).
            self.block_grads.append(2 * score_elements * softmax)
        else:
            # FlashAttention-2 (Dao 2023, Algorithm 2) keeps the fp32 log-sum-exp per row.
            self.keep("attn_lse", x.tokens * (heads // t) * p.lse_bytes, None, True)
        # Scores q k^T and the weighted sum p v, 2 FLOPs per multiply-add.
        self.attention += 2 * x.micro_batch_size * (heads // t) * (x.seq_len // x.cp) * x.seq_len * (qk_dim + v_dim)
        self.elementwise += SOFTMAX_OPS * score_elements
        self.softmax_ops += SOFTMAX_OPS * score_elements

    def linear(self, tokens: int, fan_in: int, fan_out: int, weight: bool = True, shares_input: bool = False,
               original_input: bool = False, routed: bool = False, module: str | None = None,
               shard: bool = False, ub: str | None = None, ub_passes: tuple[str, ...] = USERBUFFERS_PASSES) -> int | None:
        """A matmul's forward FLOPs on this rank (fan_out already per rank).

        A linear layer's weight gradient ``dY^T X`` reads its input ``X``
        (``tokens x fan_in``) and its output gradient ``dY`` (``tokens x
        fan_out``), in the compute dtype: what a micro-batch keeps for it
        between its input-gradient and its weight-gradient pass
        (:attr:`LayerCost.weight_gradient_bytes <hp_core.costs.LayerCost.weight_gradient_bytes>`).

        Args:
            weight: It is a linear layer's weight (recorded as a per-rank
                ``(fan_out, fan_in)`` shape); a router's gate is not a TE
                linear, and its gradient is computed in the input-gradient pass.
            shares_input: Its input is an earlier linear's (MLA's ``q_a`` and
                ``kv_a`` read the same norm output): counted once.
            original_input: Its trainer keeps its input in the compute dtype and quantizes it again in
                backward where the recipe can (:attr:`LayerWork.original_input_gemms
                <hp_core.costs.LayerWork.original_input_gemms>`; the term marked ``original_input``).
            routed: It is the routed experts' grouped GEMM (priced from their
                :class:`~hp_plugins.kit.work.ExpertShape`): a weight shape, not among the layer's listed GEMMs
                (:attr:`LayerWork.gemms <hp_core.costs.LayerWork.gemms>`), whatever other linear has its shape.
            module: The named linear module it belongs to (:meth:`linear_module`), ``None``: none.
            shard: It runs over the rank's own sequence shard under TP with SP, not the gathered micro-batch (a latent
                projection duplicated on every TP rank): its listed GEMM's rows are ``T / sp``.
            ub: Its Megatron-Core module's ``tp_comm_buffer_name`` where Transformer Engine runs it through its
                userbuffers under TP communication overlap (``qkv``, ``proj``, ``fc1``, ``fc2``:
                :attr:`LayerWork.userbuffers_gemms <hp_core.costs.LayerWork.userbuffers_gemms>`) or, any other name,
                where the module is one of Megatron-Core's ``TELinear`` family, whose constructor turns the overlap off
                for such a name (:data:`USERBUFFERS_NAMES`; :attr:`LayerWork.refused_userbuffers
                <hp_core.costs.LayerWork.refused_userbuffers>`); ``None``: not.
            ub_passes: Of ``fprop``, ``dgrad``, ``wgrad``, the passes Transformer Engine runs through *ub*'s
                userbuffers: all three for a layernorm-fused column-parallel linear (``TELayerNormColumnParallelLinear``)
                and a row-parallel one (whose wgrad no config names); ``("fprop",)`` for a ``TEColumnParallelLinear``,
                to which Megatron-Core passes no bulk overlap (``transformer_engine.py`` lines 1189-1221 at
                NVIDIA/Megatron-LM@d98e8a6, against 1457-1487 for the layernorm-fused one).

        Returns:
            Its index among the layer's listed linears (:attr:`gemm_shapes`), ``None`` for one not listed (a
            router's gate, the routed experts'), which :class:`~hp_plugins.kit.work.ExpertShape` ``block_linears``
            names; every other record of a linear (its module, its shard, its compute-dtype input) is by that index.
        """
        if (module is not None or shard or original_input or ub is not None) and (routed or not weight):
            raise ValueError("LayerBuilder.linear: only a listed linear (a weight, not routed) has a module, a shard "
                             "or an original input")
        self.matmul += 2 * tokens * fan_in * fan_out
        if not weight:
            return None
        self.shapes.append((fan_out, fan_in))
        self.weight_gradient += tokens * (fan_out + (0 if shares_input else fan_in)) * self.act
        self.weight_gradient_input_bytes += 0 if shares_input else tokens * fan_in * self.act
        self.weight_gradient_input_elements += tokens * fan_in
        self.weight_gradient_dy_elements += tokens * fan_out
        if routed:
            return None
        index = len(self.gemm_shapes)
        self.gemm_shapes.append((fan_out, fan_in))
        if original_input:
            self.original_input_linears.append(index)
        if shard:
            self.shard_linears.append(index)
        if module is not None:
            self.module_linears.setdefault(module, []).append(index)
        if ub in USERBUFFERS_NAMES:
            self.ub_linears.append((ub, index, tuple(ub_passes)))
        elif ub is not None:
            self.refused_buffers.append(ub)
        return index

    def rotary_embedding(self, heads: int, rotated: int, width: int) -> None:
        """A rotary position embedding of *heads* query and key heads per token on this rank, *rotated* channels of
        each head of *width* (docs/time.md, "Rotary position embedding").

        Elementwise work: :data:`ROPE_OPS` per rotated element, which eager kernels move as
        :data:`~hp_plugins.kit.eager.EAGER_ROPE_BYTES` counts (transformers' ``rotate_half`` form under the
        ``rope_rotate_half`` trait, NeMo AutoModel's ``chunk_cat`` under ``rope_chunk_cat``, else torchtitan's
        complex multiply) and fused ones at the profile's figure
        (read and write: 2 accesses an element). A head rotated in part has its other channels copied into
        the output, read and written each way (Transformer Engine's fused kernel "copies the rest",
        ``fused_rope.cu`` at v2.11; transformers and Megatron-Core concatenate them back).
        """
        elements = self.x.tokens * heads * rotated
        ops = ROPE_OPS * elements
        form = next((f for f in ("rotate_half", "chunk_cat") if f"rope_{f}" in self.x.traits), "complex")
        forward, backward = EAGER_ROPE_BYTES[form]
        self.elementwise += ops
        self.count_eager(ops, forward / ROPE_OPS)
        self.rotary_ops += ops
        self.rotary_eager = (self.rotary_eager[0] + forward * elements, self.rotary_eager[1] + backward * elements)
        self.copies += 2 * self.x.tokens * heads * (width - rotated) * self.act

    def count_eager(self, ops: int, bytes_per_op: float) -> None:
        """Record *ops* elementwise ops (already added to :attr:`elementwise`) moving *bytes_per_op* eager."""
        self.eager_ops += ops
        self.eager_bytes += ops * bytes_per_op

    def _eager_accesses(self) -> float | None:
        """bf16 accesses per elementwise op run eager, ``None`` when an op other than the softmax is not counted."""
        if not self.eager_ops or self.eager_ops != self.elementwise - self.softmax_ops:
            return None
        return self.eager_bytes / self.eager_ops / 2

    def _alternate(self) -> float | None:
        """Every second matmul's forward FLOPs, ``None`` when some matmul's place in the order is not recorded."""
        placed = sum(self.matmuls_in_order) + self.rerun_always
        if abs(placed - self.matmul) > 1e-9 * self.matmul:  # some matmul not placed (or one placed twice): not stated
            return None
        return float(sum(self.matmuls_in_order[1::2]) + self.rerun_always)

    def _userbuffers_reruns(self, reruns: tuple[tuple[str, Rerun], ...], at: int) -> tuple[tuple[str, Rerun], ...]:
        """*reruns* with their userbuffers GEMMs by position (:attr:`Rerun.userbuffers_linears
        <hp_core.costs.Rerun.userbuffers_linears>`; the listed linears start at *at* in the layer's GEMMs): a block
        states those of its per-byte re-run by the linear's index (:attr:`reruns`, the first of *reruns*), a block's
        forward re-run (an MoE layer's, which :func:`~hp_plugins.kit.work.decoder_work` adds) runs those of its own
        positions."""
        named = {at + i: name for name, i, _ in self.ub_linears}
        out = []
        for k, (switch, rerun) in enumerate(reruns):
            if k < len(self.reruns) and rerun.userbuffers_linears:
                rerun = attrs.evolve(rerun, userbuffers_linears=tuple((n, at + i) for n, i in rerun.userbuffers_linears))
            elif k >= len(self.reruns) and rerun.forward:
                rerun = attrs.evolve(rerun, userbuffers_linears=tuple((named[p], p) for p in rerun.positions if p in named))
            out.append((switch, rerun))
        return tuple(out)

    def build(self) -> LayerCost:
        """The layer: working set = the output gradient + the SP re-gather + the larger block's transients.

        Its work (:attr:`LayerCost.work <hp_core.costs.LayerCost.work>`) is
        :func:`~hp_plugins.kit.work.decoder_work` of the blocks added: each TP
        block's collectives, the attention core's and the experts'.
        """
        shapes = tuple(dict.fromkeys(self.shapes))
        work = decoder_work(self.x, tuple(self.gemm_shapes), self.h, self.tp_blocks, self.attention_shape, self.expert_shape,
                            alternate_matmul_flops=self._alternate(), eager_accesses_per_flop=self._eager_accesses(),
                            reruns=tuple(self.reruns), rotary_flops=self.rotary_ops, rotary_eager_bytes=self.rotary_eager,
                            copy_bytes=self.copies, original_input_linears=tuple(self.original_input_linears),
                            shard_linears=tuple(self.shard_linears), ssd_scan=self.ssd_scan)
        if self.modules or self.module_linears:
            work = attrs.evolve(work, modules=self._linear_modules(work.gemms))
        if self.ub_linears:  # the listed linears are the last len(gemm_shapes) of the layer's GEMMs
            at = len(work.gemms) - len(self.gemm_shapes)
            work = attrs.evolve(work, userbuffers_gemms=tuple((name, work.gemms[at + i], passes)
                                                               for name, i, passes in self.ub_linears),
                                reruns=self._userbuffers_reruns(work.reruns, at))
        if self.refused_buffers:
            work = attrs.evolve(work, refused_userbuffers=tuple(dict.fromkeys(self.refused_buffers)))
        return LayerCost(
            params=tuple(self.params),
            activations=tuple(self.terms),
            input_bytes=self.hidden,
            working_bytes=self.hidden + self.gathered + max(self.block_grads, default=0),
            buffers_once_bytes=self.buffers_once,
            forward=Flops(matmul_flops=self.matmul, attention_flops=self.attention, elementwise_flops=self.elementwise),
            weight_shapes=shapes,
            work=work,
            weight_gradient_bytes=self.weight_gradient,
            weight_gradient_quantized=(self.weight_gradient_input_bytes, self.weight_gradient_input_elements,
                                       self.weight_gradient_dy_elements),
        )
