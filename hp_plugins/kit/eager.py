"""Bytes eager PyTorch moves per element of the kit's elementwise ops, each op its own kernel reading its operands
from HBM and writing its result (torchtitan without ``--compile``; docs/time.md, "Eager kernels, op-level SAC and
DeepEP"). A layer built of counted ops states its own ``LayerWork.eager_accesses_per_flop`` from them and its widths.

Counted per element, bf16 activations (2 bytes), fp32 where torch upcasts:

* RMSNorm as ``torch.rms_norm``'s composite runs it (aten/src/ATen/native/layer_norm.cpp ``rms_norm``): upcast to
  fp32 2+4, ``pow`` 4+4, ``mean`` 4, multiply by the inverse root 4+4, downcast 4+2, weight multiply 2+2: 36 bytes.
* A residual add: two reads and a write, 6 bytes.
* An activation that is one aten kernel (SiLU, GeLU, ReLU): read and write, 4 bytes; squared ReLU as Hugging Face's
  ``ReLUSquaredActivation`` runs it (``relu`` then ``torch.square``): two kernels, 8 bytes.
* A gate product (``act(gate) * up``): two reads and a write, 6 bytes.
* Rotary position embedding, per rotated element of q and k (:data:`EAGER_ROPE_BYTES`, forward and backward):
  torchtitan's complex multiply (``torchtitan/models/llama3/model/model.py`` ``apply_rotary_emb`` at 0cfbd0b3:
  ``xq.float()`` 2+4, the complex product with ``freqs_cis`` 4+4, ``type_as`` back 4+2: 20 bytes; its backward casts
  the gradient up 2+4, multiplies it by the conjugate 4+4 and casts it down 4+2: 20 bytes); transformers'
  ``rotate_half`` form (``models/llama/modeling_llama.py`` ``apply_rotary_pos_emb`` at 5.24.0: ``q * cos`` 2+2,
  ``-x2`` on half the width 1+1, ``cat((-x2, x1))`` 2+2, ``* sin`` 2+2, the add 2+2+2: 20 bytes; its backward
  multiplies the gradient by ``cos`` 2+2 and by ``sin`` 2+2, negates half 1+1, runs two ``slice_backward``, each
  a zero fill of the whole width 2 and a copy of its half 1+1, and adds the three gradients of q into one, two
  adds of 2+2+2: 30 bytes); NeMo AutoModel's chunk-and-concatenate form (``nemo_automodel/components/models/
  gpt_oss/layers.py`` ``_apply_rotary_emb`` at NVIDIA-NeMo/Automodel@8d9bfb90e, its Qwen3 MoE and GPT-OSS models':
  ``torch.chunk`` into halves ``x1``, ``x2`` launches nothing, then on half the width ``x1 * cos`` 1+1,
  ``x2 * sin`` 1+1, their difference 1+1+1, ``x2 * cos`` 1+1, ``x1 * sin`` 1+1, their sum 1+1+1, and ``cat`` of
  the two halves 1+1+2: 18 bytes; its backward negates the first half's gradient for the difference 1+1,
  multiplies the two halves' gradients by ``cos`` and ``sin`` four times 4 x (1+1), adds the two gradients of
  each half 2 x (1+1+1) and concatenates them (the chunk's backward) 1+1+2: 20 bytes). The position tables (cos
  and sin, ``freqs_cis``, and their casts) are read per token, not per q/k element, and are left out. Measured:
  ``python benchmarks/count_eager_rope_bytes.py``.

Not counted (the layer then states none and the profile's figure prices it): LayerNorm, ``rmsnorm_fp32_weight``,
a softcap, attention sinks, gated attention, DeltaNet, SSM and clamped SwiGLU ops. The attention-core softmax, full
or windowed, is left out of the count (flash attention fuses it; under eager attention the layer's figure prices it).
"""

from __future__ import annotations

__all__ = ["EAGER_ACT_BYTES", "EAGER_NORM_BYTES", "EAGER_ROPE_BYTES", "GATE_PRODUCT_BYTES", "RESIDUAL_BYTES"]

EAGER_NORM_BYTES = {"rmsnorm": 36}
RESIDUAL_BYTES = 6
EAGER_ACT_BYTES = {"silu": 4, "swish": 4, "gelu": 4, "gelu_new": 4, "gelu_pytorch_tanh": 4, "relu": 4, "relu2": 8}
GATE_PRODUCT_BYTES = 6
# (forward, backward) bytes per rotated element of q and k, by the trainer's form (the ``rope_rotate_half`` trait:
# transformers'; ``rope_chunk_cat``: NeMo AutoModel's; else torchtitan's complex multiply).
EAGER_ROPE_BYTES = {"complex": (20, 20), "rotate_half": (20, 30), "chunk_cat": (18, 20)}
