"""torchtitan's MoE token routing, counted op by op: the ``fsdp2`` option ``moe_permutation``.

What an MoE layer of torchtitan moves through HBM between its router and its output, besides the router's kernels
(the device's ``moe_router_*_seconds``), the two all-to-alls (collectives) and the experts' grouped GEMMs and SwiGLU
(the layer's GEMMs and counted eager ops): accesses of one element of the width ``h`` (bf16; an fp32 temporary
counts two), per routed row (a token's copy for one of its top-k experts) and per token, forward and backward
(:class:`~hp_core.specs.timing.MoePermutation`). Each op as CUDA runs it, every access counted (the routed tensors,
64 MiB and more a layer on DeepSeek-V3 16B's rows, exceed an H100's 50 MB L2 and are reached in expert order);
``benchmarks/count_torchtitan_moe_bytes.py`` measures the ATen operators of the two eager dispatchers and finds
exactly these (docs/time.md, "torchtitan's MoE token routing"). DeepSeek-V3's settings: ``score_before_experts``
false, softmax scores, no route norm, shared experts.
"""

from __future__ import annotations

import attrs

from hp_core.runtime_options import RuntimeOption
from hp_core.specs.timing import MoePermutation
from hp_core.types import Runtime

__all__ = ["KEPT_TRAITS", "MOE_PERMUTATIONS", "moe_permutation_option"]

_TT_2510 = "pytorch/torchtitan@82a9530f6"
_TT_2606 = "pytorch/torchtitan@6b9602339"

# pytorch/torchtitan@82a9530f6, torchtitan/models/moe.py MoE.forward and TokenReorderer, with
# torchtitan/distributed/expert_parallel.py ExpertParallel and its expert_parallel wrapper. Bytes per element of h:
# forward, per routed row: torch.gather of the tokens into expert order 2+2; vstack of a zero row 2+2; the gather
# x[permuted_indices] into local-expert order (generate_permute_indices, each expert's rows padded to 8) 2+2; the
# scatter back out_unpermuted[permuted_indices] = out 2+2; the score multiply after the combine, .to(float32) 2+4,
# * the scores 4+4, .to(bfloat16) 4+2; scatter_add into the shared experts' output, its atomics reading and writing
# the destination element of each source element 2+2+2 (no deterministic mode): 42 bytes, 21 accesses. Per token:
# scatter_add's copy of the shared output 2+2: 4 bytes, 2 accesses. Backward, per row: scatter_add's gather of the
# output gradient 2+2; the multiply's backward, .to(float32) 2+4, grad * scores 4+4, grad * the saved fp32 output
# 4+4+4 and its sum over h 4, .to(bfloat16) 4+2; slice_backward (a zero fill of the padded rows, the copy) 2+2+2;
# the index put's gradient grad[permuted_indices] 2+2; x[permuted_indices]'s, a zero fill and an accumulating index
# put (sorted: each destination row read and written once) 2+2+2+2; torch.gather's, scatter_add_ with atomics
# 2+2+2: 64 bytes, 32 accesses. Per token: that gradient's zero fill 2: 1 access. Left out: the padding rows
# (8 per local expert a layer), the indices and scores (about 110 and 130 bytes a routed row, not per element of h).
TORCHTITAN_EXPERT_PARALLEL = MoePermutation(
    name="torchtitan_expert_parallel", forward_accesses_per_row_element=21, forward_accesses_per_token_element=2,
    backward_accesses_per_row_element=32, backward_accesses_per_token_element=1,
    source=f"{_TT_2510} torchtitan/models/moe.py MoE.forward, TokenReorderer; torchtitan/distributed/"
           "expert_parallel.py ExpertParallel._token_dispatch/_token_combine and expert_parallel (vstack, "
           "x[permuted_indices], out_unpermuted[permuted_indices] = out): per element of h forward 42 bytes a routed "
           "row (gather, vstack, permute, unpermute 4 each, fp32 score multiply 20, atomic scatter_add 6) and 4 a "
           "token (scatter_add's copy); backward 64 a row (gather 4, the multiply's backward 36, slice_backward 6, "
           "permute gradients 4 and 8, gather's atomic scatter_add 6) and 2 a token (its zero fill); "
           "benchmarks/count_torchtitan_moe_bytes.py",
)

# pytorch/torchtitan@6b9602339, torchtitan/models/common/token_dispatcher.py AllToAllTokenDispatcher with
# torchtitan/ops/scatter_add.py deterministic_scatter_add and torchtitan/models/common/moe.py MoE.forward. Forward,
# per routed row: x_TD[token_indices] 2+2; _permute's routed_input[permuted_indices] (rank-major to expert-major, no
# padding) 2+2; _unpermute's index put 2+2; the fp32 score multiply 20; deterministic_scatter_add reading its
# source 2: 34 bytes, 17 accesses. Per token: the zero-filled output 2; scatter_add's copy of it 2+2; under
# deterministic algorithms an accumulating, sorted index put (pytorch/pytorch#156744's broadcast-index path of
# _scatter_via_index_put) reading and writing each token's row once 2+2; the routed plus shared outputs' add
# 2+2+2: 16 bytes, 8 accesses. Backward, per row: deterministic_scatter_add's torch.gather 2+2; the multiply's
# backward 36; the index put's gradient 2+2; _permute's gradient, a zero fill and a sorted accumulating index put
# 2+2+2+2; x_TD[token_indices]'s reading its source rows 2: 54 bytes, 27 accesses. Per token: that gradient's zero
# fill 2 and its rows read and written once 2+2: 6 bytes, 3 accesses.
TORCHTITAN_ALL_TO_ALL = MoePermutation(
    name="torchtitan_all_to_all", forward_accesses_per_row_element=17, forward_accesses_per_token_element=8,
    backward_accesses_per_row_element=27, backward_accesses_per_token_element=3,
    source=f"{_TT_2606} torchtitan/models/common/token_dispatcher.py AllToAllTokenDispatcher (_local_reorder, "
           "_permute, _unpermute, combine), torchtitan/ops/scatter_add.py deterministic_scatter_add, "
           "torchtitan/models/common/moe.py MoE.forward: per element of h forward 34 bytes a routed row (three "
           "gathers and index puts 4 each, fp32 score multiply 20, the scatter's source 2) and 16 a token (zero fill "
           "2, scatter_add's copy 4, its sorted accumulation 4, the shared output's add 6); backward 54 a row (gather "
           "4, the multiply's backward 36, permute gradients 4 and 8, the token gather's 2) and 6 a token; "
           "benchmarks/count_torchtitan_moe_bytes.py",
)

# pytorch/torchtitan@6b9602339, torchtitan/distributed/minimal_async_ep.py and minimal_async_ep_kernels.py (Triton),
# MinimalAsyncEPTokenDispatcher in token_dispatcher.py: the dispatch's copy_rows_to_peers kernel gathers the rows
# straight into the peers' expert-ordered receive buffers, and the combine's into the origin's: the all-to-alls, no
# separate permutation. Forward: _reduce_topk_slots_kernel reads each routed row 2 and writes each token 2,
# multiplying by the score in fp32 registers; MoE.forward's add of the shared output 2+2+2: 2 bytes a row, 8 a token.
# Backward: _expand_topk_grad_kernel reads a token's output gradient and writes each row's 2+2,
# _topk_scores_grad_kernel reads the saved routed output and the gradient 2+2, the dispatch backward's
# _reduce_topk_slots_kernel reads each row 2 and writes each token 2: 10 bytes a row, 2 a token. Counted from the
# kernels' loads and stores (not measured). Its fused active_swiglu (silu(gate) * up in one kernel) is not priced:
# the routed experts keep the eager SiLU and product.
TORCHTITAN_MINIMAL_ASYNC_EP = MoePermutation(
    name="torchtitan_minimal_async_ep", forward_accesses_per_row_element=1, forward_accesses_per_token_element=4,
    backward_accesses_per_row_element=5, backward_accesses_per_token_element=1,
    source=f"{_TT_2606} torchtitan/distributed/minimal_async_ep.py (dispatch_op, combine_op and their backward ops) "
           "and minimal_async_ep_kernels.py: the copies into the peers' expert-ordered buffers are the all-to-alls; "
           "per element of h forward _reduce_topk_slots_kernel 2 bytes a routed row and 2 a token, the shared "
           "output's add 6 a token; backward _expand_topk_grad_kernel 4 and _topk_scores_grad_kernel 4 a row, the "
           "dispatch backward's reduction 2 a row and 2 a token: counted from the kernels' loads and stores",
)

MOE_PERMUTATIONS = {p.name: p for p in (TORCHTITAN_EXPERT_PARALLEL, TORCHTITAN_ALL_TO_ALL, TORCHTITAN_MINIMAL_ASYNC_EP)}
# What the choice also selects for memory: torchtitan's eager MoE code of that date, whose kept bytes the kit states
# under these traits (hp_plugins/kit/experts.py, torchtitan_kept_bytes: the fp32 routed output of the score multiply,
# the routing indices and scores, the router's input). MinimalAsyncEP's combine keeps the routed output in bf16, as the
# kit's default does (minimal_async_ep.py combine_setup_context at 6b9602339); its receive buffers are not stated.
KEPT_TRAITS = {TORCHTITAN_EXPERT_PARALLEL.name: "torchtitan_moe_expert_parallel",
               TORCHTITAN_ALL_TO_ALL.name: "torchtitan_moe_all_to_all"}
_DEFAULT = "gather_scatter"


@attrs.frozen
class _Permutation:
    """``moe_permutation``: sets the timing profile's :attr:`~hp_core.specs.timing.TimingProfile.moe_permutation`
    (``gather_scatter``: none, the profile's ``moe_permute_passes`` price it)."""

    def __call__(self, runtime: Runtime, value: str) -> Runtime:
        counted = MOE_PERMUTATIONS.get(value)
        traits = (runtime.traits - set(KEPT_TRAITS.values())) | ({KEPT_TRAITS[value]} if value in KEPT_TRAITS else set())
        return attrs.evolve(runtime, traits=traits, timing=attrs.evolve(runtime.timing, moe_permutation=counted))


def moe_permutation_option() -> RuntimeOption:
    """``moe_permutation``: the MoE token permutation as the profile's passes prices it, or torchtitan's counted."""
    return RuntimeOption(
        "moe_permutation", "choice", _DEFAULT,
        "an MoE layer's token permutation and combine (memory-bound, at the device's memory_bandwidth): "
        "gather_scatter (the profile's moe_permute_passes, 2: a gather into expert order and a scatter back, each "
        "reading and writing the routed tokens) or torchtitan's eager kernels counted op by op, per element of the "
        "width, per routed row and per token: torchtitan_expert_parallel (ExpertParallel and its expert_parallel "
        "wrapper, as of 2025-10: forward 42 bytes a row and 4 a token, backward 64 and 2), torchtitan_all_to_all "
        "(AllToAllTokenDispatcher with deterministic_scatter_add, as of 2026-06: 34 and 16, 54 and 6) or "
        "torchtitan_minimal_async_ep (MinimalAsyncEP's fused Triton kernels: 2 and 8, 10 and 2; its all-to-alls "
        "priced as ep_all_to_all says); torchtitan's op-level SAC re-runs the forward's; the torchtitan choices need "
        "elementwise_kernels=eager in a model with MoE layers (a dense model has no permutation: the option is inert "
        "there, whatever the kernels). The two eager choices also price what that code keeps for backward: the score "
        "multiply's fp32 copy of the routed output (4 bytes an element, not 2), the routing indices and scores (32 "
        "and 36 bytes a routed row), the router's fp32 input only as of 2026-06 (fp32 autocast), and under "
        "op-level SAC (2025-10's deepseek_v3 save list) an MLA MoE layer's saved outputs",
        f"{_TT_2510} torchtitan/models/moe.py, torchtitan/distributed/expert_parallel.py; {_TT_2606} "
        "torchtitan/models/common/token_dispatcher.py, torchtitan/ops/scatter_add.py, "
        "torchtitan/distributed/minimal_async_ep.py and minimal_async_ep_kernels.py; "
        "benchmarks/count_torchtitan_moe_bytes.py",
        _Permutation(), choices=(_DEFAULT, *MOE_PERMUTATIONS),
    )
