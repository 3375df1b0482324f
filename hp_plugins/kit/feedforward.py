"""The dense feed-forward block (a gated SwiGLU-style or a plain MLP) and the activations it keeps."""

from __future__ import annotations

import attrs

from hp_core.costs import LayerContext, Rerun
from hp_core.validators import one_of, positive_int
from hp_plugins.kit.builder import FC1_SWITCH, LayerBuilder
from hp_plugins.kit.eager import EAGER_ACT_BYTES, GATE_PRODUCT_BYTES
from hp_plugins.kit.shapes import check_divides

__all__ = ["ACT_OPS", "FC1_SWITCH", "MLPFields", "mlp", "swiglu", "validate_mlp"]

# Elementwise operations per element (forward), counted from the definitions:
# SiLU x*sigmoid(x) = negate, exp, add, divide, multiply (5); the gated product 1;
# GeLU (tanh form) 8; squared ReLU (Nemotron-H ``relu2``: max, square) 2.
ACT_OPS = {"silu": 5, "swish": 5, "gelu": 8, "gelu_new": 8, "gelu_pytorch_tanh": 8, "relu": 1, "relu2": 2}


@attrs.frozen(kw_only=True, slots=False)
class MLPFields:
    """A dense feed-forward block.

    Attributes:
        intermediate_size: MLP width ``I``.
        gated_mlp: SwiGLU-style gate and up projections (else one FC1).
        hidden_act: The activation (``silu``, ``gelu``, ...).
        mlp_bias: Biases on the MLP projections.
    """

    intermediate_size: int = attrs.field(validator=positive_int)
    gated_mlp: bool = True
    hidden_act: str = attrs.field(default="silu", validator=one_of(tuple(ACT_OPS)))
    mlp_bias: bool = False


def fused_activation_input(b: LayerBuilder, elements: int, fp8_store: bool = True) -> int:
    """Bytes a fused gated activation keeps of its *elements*-element input (the FC1 output).

    The compute dtype's, or under the ``fp8_activation_input_store`` trait (Megatron-LM
    ``--activation-func-fp8-input-store``) one byte an element: the fused function saves
    ``input.to(torch.float8_e4m3fn)``, no scale, and its backward casts it back
    (``megatron/core/fusions/fused_bias_swiglu.py`` ``BiasSwiGLUFunction.forward`` and ``backward``, the weighted
    and quick-GeGLU forms alike). The two casts are eager kernels outside the fused one: forward reads the
    compute-dtype width and writes one byte, backward the reverse, ``act + 1`` bytes an element each way, counted
    as the layer's memory-bound copies (``LayerWork.copy_bytes``). *fp8_store* false: a kernel the option does
    not reach (Transformer Engine's fused grouped MLP, which calls no ``bias_swiglu_impl``).
    """
    if fp8_store and "fp8_activation_input_store" in b.x.traits:
        b.copies += elements * (b.act + 1)
        return elements
    return elements * b.act


def fc1_output_width(b: LayerBuilder, gated: bool) -> int:
    """Bytes an element of a (gated) MLP's kept FC1 output takes: one where the fused SwiGLU keeps it in FP8
    (:func:`fused_activation_input`), else the compute dtype's. What recomputing it re-runs per byte dropped is
    per element over this width (:func:`mlp`'s ``Rerun``)."""
    fused = gated and "fused_swiglu" in b.x.traits
    return 1 if fused and "fp8_activation_input_store" in b.x.traits else b.act


def swiglu(b: LayerBuilder, prefix: str, tokens: int, width: int, gated: bool, act_name: str, tp_split: bool = True,
           fc1_switch: str | None = None, fp8_store: bool = True) -> int:
    """Keep a (gated) MLP's FC1 outputs and activation outputs; return the bytes of one width-wide tensor.

    Unfused SwiGLU (Hugging Face ``act_fn(gate_proj(x)) * up_proj(x)``) keeps
    the gate and up outputs, the activation's output (the product's input) and
    the product (the FC2 input). A fused SwiGLU (the ``fused_swiglu`` trait:
    Megatron-LM ``bias_swiglu_impl``) keeps only its input, the FC1 output, and
    its product, which FC2 keeps. The product (the activation's output
    without a gate) is FC2's input (``gemm_input`` ``owned``). The FC1
    outputs are gated by *fc1_switch* (``None``: kept unless the layer is
    recomputed fully); the activation outputs by ``ffAct``. The fused kernel's input is kept as
    :func:`fused_activation_input` says (*fp8_store* as there).
    """
    wide = tokens * width * b.act
    if gated and "fused_swiglu" in b.x.traits:
        b.keep(f"{prefix}fc1_out", fused_activation_input(b, 2 * tokens * width, fp8_store), fc1_switch, tp_split)
        b.keep(f"{prefix}mul_out", wide, "ffAct", tp_split, "owned")
    elif gated:
        b.keep(f"{prefix}gate_out", wide, fc1_switch, tp_split)
        b.keep(f"{prefix}up_out", wide, fc1_switch, tp_split)
        b.keep(f"{prefix}act_out", wide, "ffAct", tp_split)
        b.keep(f"{prefix}mul_out", wide, "ffAct", tp_split, "owned")
    else:
        b.keep(f"{prefix}fc1_out", wide, fc1_switch, tp_split)
        b.keep(f"{prefix}act_out", wide, "ffAct", tp_split, "owned")
    ops = (ACT_OPS[act_name] + (1 if gated else 0)) * tokens * width
    b.elementwise += ops
    if act_name in EAGER_ACT_BYTES:
        b.count_eager(ops, (EAGER_ACT_BYTES[act_name] + (GATE_PRODUCT_BYTES if gated else 0)) / (ACT_OPS[act_name] + (1 if gated else 0)))
    return wide


def mlp(b: LayerBuilder, c: MLPFields, norm: str, hidden_dropout: float, fc1_switch: str | None = None) -> None:
    """A dense MLP (Korthikanti et al. 2022 Section 4.1: FC1 input 2sbh, GeLU input 8sbh, FC2 input 8sbh).

    SwiGLU keeps the gate and up outputs (the activation's and product's
    inputs) and the activation and product outputs (``ffAct``).

    *fc1_switch* gates the FC1 outputs: the built-in kinds pass
    :data:`~hp_plugins.kit.builder.FC1_SWITCH` (and declare it); ``None``, the default, keeps them
    unless the layer is recomputed fully, so a kind declaring no such switch
    is priced as before. Recomputing it re-runs FC1 (``LayerWork.reruns``): each
    element of its ``T x fc1 / t`` output a ``2 h`` FLOP dot product over the
    kept MLP input, so ``2 h`` GEMM FLOPs per element dropped over the width it
    is kept at (:func:`fc1_output_width`: ``activation_bytes``, one byte under the
    FP8 input store), as MLA's ``attUp`` states its up-projections' re-run (the GEMM writes
    what it rebuilds; the activation's re-run is ``ffAct``'s rewrite). Under
    the runtime trait ``dense_mlp_checkpoint`` (a trainer checkpointing the
    MLP as a unit: Megatron-Core's ``mlp`` module re-runs the MLP's whole
    forward, ``tensor_parallel.checkpoint`` in ``transformer_layer.py``) the
    re-run includes FC2's GEMM too: ``2 I h / t`` more FLOPs per token, whose
    FC1 output is ``fc1 / t`` elements, so ``2 h (fc1 + I) / fc1`` FLOPs per
    element in all (``3 h`` gated, ``4 h`` plain).
    """
    x, t = b.x, b.x.tp
    T, h, I = x.tokens, b.h, c.intermediate_size
    fc1 = (2 if c.gated_mlp else 1) * I
    b.pre_norm("mlp", norm, hidden_dropout)
    b.param("mlp_in_proj", h * fc1 + fc1 * c.mlp_bias, True, matrices=((1, fc1 // t, h),))
    b.param("mlp_out_proj", I * h, True, matrices=((1, h, I // t),))
    b.param("mlp_out_bias", h * c.mlp_bias, False)
    wide = swiglu(b, "", T, I // t, c.gated_mlp, c.hidden_act, fc1_switch=fc1_switch)
    if fc1_switch is not None:
        # FC1's re-run (and FC2's where the trainer re-runs the whole MLP) per byte of the FC1 outputs dropped.
        whole = "dense_mlp_checkpoint" in x.traits
        flops_per_element = 2 * h * (fc1 + I) / fc1 if whole else 2 * h
    # Backward: the gradients of the FC2 input and of the FC1 outputs, alive together.
    b.block_grads.append((3 if c.gated_mlp else 2) * wide)
    # Megatron-Core's linear_fc1 and linear_fc2, tp_comm_buffer_name 'fc1' and 'fc2' (transformer/mlp.py lines 228
    # and 251 at NVIDIA/Megatron-LM@d98e8a6): userbuffers GEMMs under TP communication overlap.
    fc1_index = b.linear(T, h, fc1 // t, ub="fc1")
    fc2_index = b.linear(T, I // t, h, ub="fc2")
    if fc1_switch is not None:
        # The userbuffers GEMMs it re-runs (this block's own, by index: a layer may run another fc1, a mixer's
        # in_proj), whose forward SM margin it pays again.
        b.reruns.append((fc1_switch, Rerun(matmul_flops_per_byte=flops_per_element / fc1_output_width(b, c.gated_mlp),
                                           userbuffers_linears=(("fc1", fc1_index), ("fc2", fc2_index)) if whole
                                           else (("fc1", fc1_index),))))
    # torchtitan's FeedForward.forward: w2(silu(w1(x)) * w3(x)), so w1, w3, w2; ungated fc1, fc2. Counted only
    # after a block whose matmuls are known (the GQA attention's four): elsewhere the order is not known.
    if b.matmuls_in_order:
        b.matmuls_in_order += [2 * T * h * I // t] * (fc1 // I) + [2 * T * I * h // t]
    b.tp_blocks += 1


def validate_mlp(c: MLPFields, x: LayerContext) -> None:
    check_divides(x.tp, c.intermediate_size, "$.parallel.tp", "tp", "intermediate_size")
