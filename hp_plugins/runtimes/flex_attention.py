"""PyTorch FlexAttention's rates and block size: the ``fsdp2`` option ``attention_kernel=flex``.

FlexAttention (``torch.nn.attention.flex_attention``, compiled by
``torch.compile`` into Triton kernels) is priced from PyTorch's own published
measurements of it against FlashAttention-2, as a ratio of throughput applied
to each device's FlashAttention-2 rates (the ``sdpa`` kernel's):

* **Ampere** (A100): the PyTorch blog of 2024-08-07 (:data:`BLOG_2024`),
  section "Performance": causal attention against FlashAttention-2 on A100,
  FlexAttention at 90% of FlashAttention-2's throughput forward and 85%
  backward (the two charts after that sentence).
* **Hopper** (H100): the PyTorch blog of 2025-03-16 (:data:`GTC_2025`), the
  abstract of the GTC 2025 session on FlexAttention (Driss Guessous, Meta):
  on H100 its forward averages about 25% faster than FlashAttention-2 (85%
  of FlashAttention-3) and its backward about 3% faster (76% of
  FlashAttention-3). The FlashAttention-2 rates it multiplies are Shah et
  al.'s at head dim 128, sequence 8k (``HOPPER_SDPA``); the ratio is an
  average over shapes the abstract does not list, taken as shape-independent.

No other device has a published FlexAttention figure here (PyTorch's later
post on FlexAttention's FlashAttention-4 backend, https://pytorch.org/?p=46919,
reports that backend's speedups over the Triton kernels on Hopper and
Blackwell, 1.2x to 3.2x on compute-bound work, not the Triton kernels' own
rates): ``attention_kernel=flex`` is refused on them.

**Block size.** FlexAttention's block mask cuts the score matrix into blocks
of 128 x 128 by default (``torch/nn/attention/flex_attention.py``
``_DEFAULT_SPARSE_BLOCK_SIZE = 128``, ``create_block_mask``'s ``BLOCK_SIZE``
default, torch 2.13.0; the 2024 blog's FAQ gives the same default),
skips the blocks its mask leaves wholly empty and computes the others whole
(:mod:`hp_core.score_masks`). The trainers priced with it call
``create_block_mask`` without a block size: NeMo AutoModel
``nemo_automodel/components/attention/flex_attention.py`` (NVIDIA-NeMo/Automodel@89e3a9f),
torchtitan ``torchtitan/models/attention.py`` (@82a9530f6) and
``torchtitan/models/common/attention.py`` (@6b9602339, ``block_size`` defaulting to
``_DEFAULT_SPARSE_BLOCK_SIZE``).
"""

from __future__ import annotations

from hp_core.specs.timing import DeviceEfficiency, Sourced
from hp_plugins.runtimes.timing_profiles import AMPERE, HOPPER_SDPA

__all__ = ["BLOG_2024", "FLEX", "FLEX_BLOCK_TOKENS", "FLEX_THROUGHPUT_RATIOS", "GTC_2025"]

BLOG_2024 = ("PyTorch blog 'FlexAttention: The Flexibility of PyTorch with the Performance of FlashAttention' "
             "(Team PyTorch: He, Guessous, Liang, Dong; 2024-08-07; https://pytorch.org/blog/flexattention/, "
             "pytorch/pytorch.github.io@027eceef _posts/2024-08-07-flexattention.md)")
GTC_2025 = ("PyTorch blog 'PyTorch at GTC 2025' (Team PyTorch at NVIDIA, 2025-03-16; https://pytorch.org/blog/pytorch-at-gtc/, "
            "pytorch/pytorch.github.io@5b5db1e8 _posts/2025-03-16-pytorch-at-gtc.md), abstract of the GTC 2025 session "
            "'FlexAttention: The Flexibility of PyTorch With the Performance of FlashAttention' (Driss Guessous, Meta)")

# FlexAttention's throughput over FlashAttention-2's on the same work, (forward, backward) per architecture.
FLEX_THROUGHPUT_RATIOS = {
    "hopper": (
        Sourced(1.25, f"{GTC_2025}: on H100 FlexAttention's forward averages about 25% faster than FlashAttention-2 "
                      "(85% of FlashAttention-3)"),
        Sourced(1.03, f"{GTC_2025}: on H100 its backward averages about 3% faster than FlashAttention-2 "
                      "(76% of FlashAttention-3)"),
    ),
    "ampere": (
        Sourced(0.90, f"{BLOG_2024}, section Performance: causal attention on A100, FlexAttention at 90% of "
                      "FlashAttention-2's forward throughput"),
        Sourced(0.85, f"{BLOG_2024}, section Performance: the same case, 85% of FlashAttention-2's backward throughput"),
    ),
}

FLEX_BLOCK_TOKENS = Sourced(
    128,
    "torch/nn/attention/flex_attention.py _DEFAULT_SPARSE_BLOCK_SIZE = 128, create_block_mask's BLOCK_SIZE default "
    f"(torch 2.13.0; {BLOG_2024}, FAQ on the BlockMask's memory: a default block size of 128); the Triton templates run every sub-tile of each "
    "block the mask lists and skip only the blocks it leaves empty (torch/_inductor/kernel/flex/templates/"
    "flex_attention.py.jinja kv_num_blocks * SPARSE_KV_MULTIPLE, flex_backwards.py.jinja likewise); NeMo AutoModel "
    "(components/attention/flex_attention.py @89e3a9f) and torchtitan (models/attention.py @82a9530f6, "
    "models/common/attention.py @6b9602339) build their block masks at that default",
)


def _rate(entry: DeviceEfficiency, field: str, ratio: Sourced) -> Sourced:
    figure = getattr(entry, field)
    return Sourced(figure.value * ratio.value,
                   f"FlashAttention-2's {figure.value:.4g} ({figure.source}) x {ratio.value:g}, FlexAttention's "
                   f"throughput over FlashAttention-2's: {ratio.source}")


# attention_kernel=flex: (forward, backward) per architecture; a device without a published figure has none and is refused.
FLEX = {
    entry.architecture: tuple(_rate(entry, field, ratio) for field, ratio in
                              zip(("attention_forward", "attention_backward"), FLEX_THROUGHPUT_RATIOS[entry.architecture]))
    for entry in (HOPPER_SDPA, AMPERE)
}
