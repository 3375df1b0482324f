"""What torchtitan's per-op SAC policy sees of a GEMM that a tensor subclass runs (hp_plugins/kit/op_sac.py): torchao's
MXFP8 linear (``torchao/prototype/moe_training/mxfp8_linear.py`` at pytorch/ao@cb76f29, the GB200 MXFP8 row's build:
``mx_mm.forward`` calls ``torch.mm`` on two ``MXTensor``, line 139) runs ``torch._scaled_mm`` inside
``MXTensor.__torch_dispatch__`` (``torchao/prototype/mx_formats/mx_tensor.py`` ``mx_mm``, lines 844-850, and
``_addmm_mx_dispatch``, line 801). A dispatch mode runs before a subclass's ``__torch_dispatch__`` and is off while its
own handler runs, so torch's ``_CachingTorchDispatchMode`` (``torch/utils/checkpoint.py``) asks the policy about
``aten.mm`` on the subclass, which torchtitan's counter counts (``SelectiveAC._wrap_block`` at pytorch/torchtitan
bcc09297a, ``mm_ops``), and never about the ``_scaled_mm`` inside it, which its save list also names. Checked here with
torch's own checkpoint on a toy subclass that runs ``aten.mm`` as ``aten.bmm`` (another op of that save list)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_the_policy_sees_the_subclass_s_mm_not_the_gemm_inside():
    from torch.utils._pytree import tree_map
    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

    aten = torch.ops.aten

    class Wrapped(torch.Tensor):
        @staticmethod
        def __new__(cls, data):
            return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=data.dtype, device=data.device)

        def __init__(self, data):
            self.inner = data

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            if func is aten.mm.default:  # as MXTensor's mm runs torch._scaled_mm on its data
                a, b = args
                return aten.bmm.default(a.inner.unsqueeze(0), b.inner.unsqueeze(0)).squeeze(0)
            if func is aten.t.default:
                return Wrapped(args[0].inner.t())
            unwrap = lambda x: x.inner if isinstance(x, Wrapped) else x  # noqa: E731
            return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))

    class Linear(torch.autograd.Function):  # as torchao's mx_mm: casts, then torch.mm on the two subclass tensors
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return torch.mm(Wrapped(x * 1.0), Wrapped(w * 1.0).t())

        @staticmethod
        def backward(ctx, grad):
            x, w = ctx.saved_tensors
            return grad @ w, grad.t() @ x

    seen = []

    def policy(ctx, func, *args, **kwargs):
        if not ctx.is_recompute:
            seen.append(func)
        saved = (aten.mm.default, aten.bmm.default)
        return CheckpointPolicy.MUST_SAVE if func in saved else CheckpointPolicy.PREFER_RECOMPUTE

    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(3, 8, requires_grad=True)
    out = checkpoint(Linear.apply, x, w, use_reentrant=False,
                     context_fn=lambda: create_selective_checkpoint_contexts(policy))
    out.sum().backward()
    assert seen == [aten.mul.Tensor, aten.mul.Tensor, aten.t.default, aten.mm.default]
    assert torch.allclose(x.grad, torch.ones(4, 3) @ w.detach())
