"""What torch.compile's cross-entropy keeps and allocates: the evidence for the ``compiled`` loss (docs/kinds.md, Output).

torchtitan compiles its loss, ``cross_entropy_loss`` (``logits.float()`` then ``F.cross_entropy``), when
``compile.enable`` and ``"loss" in compile.components`` (``torchtitan/components/loss.py`` at 08b8b244f; from
bbb1b616e to then, ``training.compile``). This script runs that function eagerly and compiled (Inductor, on the CPU
here: the saved set is AOTAutograd's partition, the same on every device) on bf16 logits of ``rows x vocab`` and
prints, for each, the tensors autograd saves for backward (shape, dtype, whether it is the logits' own storage) and
the gradient's dtype. With torch 2.13 the compiled loss saves the bf16 logits themselves, the int64 targets, two fp32
per-row statistics and a scalar, and its backward returns a bf16 gradient; the eager one saves two fp32 ``rows x
vocab`` tensors (the upcast and the log-softmax). Run: ``python benchmarks/count_compiled_loss.py`` (needs torch).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["saved_tensors"]


def _loss(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def saved_tensors(compiled: bool, batch: int = 2, seq: int = 64, vocab: int = 1000) -> tuple[list, torch.dtype]:
    """``([(shape, dtype, is_the_logits), ...], gradient dtype)`` of one forward and backward of the loss."""
    torch.manual_seed(0)
    pred = torch.randn(batch, seq, vocab, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (batch, seq))
    fn = torch.compile(_loss) if compiled else _loss
    saved: list = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append((tuple(t.shape), t.dtype, t.untyped_storage().data_ptr() == pred.untyped_storage().data_ptr()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(pred, labels)
    out.backward()
    return saved, pred.grad.dtype


def main() -> None:
    for compiled in (False, True):
        saved, grad = saved_tensors(compiled)
        print(f"{'compiled' if compiled else 'eager'}: saves {saved}; gradient {grad}")


if __name__ == "__main__":
    main()
