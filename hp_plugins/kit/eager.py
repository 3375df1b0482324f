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

Not counted (the layer then states none and the profile's figure prices it): LayerNorm, ``rmsnorm_fp32_weight``,
a softcap, attention sinks, gated attention, DeltaNet, SSM and clamped SwiGLU ops. The attention-core softmax, full
or windowed, is left out of the count (flash attention fuses it; under eager attention the layer's figure prices it).
"""

from __future__ import annotations

__all__ = ["EAGER_ACT_BYTES", "EAGER_NORM_BYTES", "GATE_PRODUCT_BYTES", "RESIDUAL_BYTES"]

EAGER_NORM_BYTES = {"rmsnorm": 36}
RESIDUAL_BYTES = 6
EAGER_ACT_BYTES = {"silu": 4, "swish": 4, "gelu": 4, "gelu_new": 4, "gelu_pytorch_tanh": 4, "relu": 4, "relu2": 8}
GATE_PRODUCT_BYTES = 6
