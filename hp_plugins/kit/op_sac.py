"""torchtitan's per-op selective activation checkpointing, priced for a dense decoder layer.

torchtitan's ``selective_ac_option = "op"`` (torchtitan/distributed/activation_checkpoint.py
``_apply_op_sac``, the save list of torchtitan/models/llama3/infra/parallelize.py
``_op_sac_save_list``) wraps each block in ``checkpoint_wrapper`` with a
``create_selective_checkpoint_contexts`` policy: the outputs of ``aten.mm``, the
SDPA kernels (flash, efficient, cuDNN), ``_c10d_functional.reduce_scatter_tensor``
and ``aten.max`` are saved, every other op is recomputed in backward, and of
the matmuls only the odd ones of each block's forward (1st, 3rd, ...) are saved
(a per-block counter; "every second mm" is recomputed). The block's input is
kept by the checkpoint itself.

For a layer with separate projections called in order q, k, v, o, then the
MLP's gate, up and down (transformers' Llama/Qwen/Mistral modules and
torchtitan's ``Attention`` / ``FeedForward`` w1, w3, w2), ``T`` tokens, TP
degree ``t`` and ``sp = t`` under sequence parallelism (else 1), it keeps::

    input 2 T h / sp; q 2 T a d / t; v 2 T g d / t; attention output 2 T a d / t and
    its fp32 log-sum-exp 4 T a / t (flash); gate 2 T I / t; down 2 T h (the
    row-parallel matmul's local output is the whole width); under SP the two
    reduce-scatter outputs 2 T h / t each.

A fused q, k, v projection (:attr:`~hp_plugins.kit.attention.GQAFields.fused_qkv`: torchtitan's
``FusedQKVLinear``, its Llama 3 flavors' default since pytorch/torchtitan@3396a4b37, 2026-06-24) is one matmul, so
the counter runs wqkv (1st, saved), wo (2nd), then the MLP as above: the layer keeps q, k and v, ``2 T (a + 2 g) d /
t``, in place of q and v (Llama-3-8B: 65,664 bytes per token, k's 2,048 more). The policy at
pytorch/torchtitan@bcc09297a (torchtitan/distributed/activation_checkpoint.py ``SelectiveAC._wrap_block``, lines
241-274) counts ``aten.mm`` and ``aten.linear`` per block forward and recomputes the even ones, as above. Its save
list there (``_get_default_save_ops``) is the partitioner's ``compute_intensive_ops``, which holds ``aten.addmm``,
``aten.bmm`` and ``aten._scaled_mm`` too: saved and not counted, where the older list above saved none of them. So
for a layer with biased projections that policy saves more than this module counts (the difference is not priced).
A recipe whose GEMM a tensor subclass runs is not such a case: torchao's MXFP8 linear (pytorch/ao@cb76f29,
``torchao/prototype/moe_training/mxfp8_linear.py``, the class torchtitan's ``MXFP8LinearConverter`` builds at
bcc09297a) calls ``torch.mm`` on two ``MXTensor`` (``mx_mm.forward``, line 139), whose ``__torch_dispatch__`` runs
``torch._scaled_mm`` (``torchao/prototype/mx_formats/mx_tensor.py`` ``mx_mm`` lines 844-850, ``_addmm_mx_dispatch``
line 801); torch's SAC mode (``torch/utils/checkpoint.py`` ``_CachingTorchDispatchMode``, torch cf30153) is asked
before the subclass and is off inside its own handler, so the policy counts and saves ``aten.mm`` (its bf16 output, as
a bf16 linear's) and never sees the ``_scaled_mm`` inside (compiled, that call's graph nodes take the ``aten.mm``
decision); ``mx_mm``'s own saved bf16 input and weight go through the checkpoint's hooks and are recomputed. Such a
layer keeps what its bf16 layer keeps (tests/plugins/test_op_sac_subclass_gemm.py runs torch's checkpoint on a toy
subclass).

A projection with a bias is ``aten.addmm`` (``F.linear`` of a contiguous 3-D input
with a bias flattens to ``addmm``, ATen ``Linear.cpp``): neither saved nor counted.
Measured against PyTorch's FSDPMemTracker running this policy
(``tests/plugins/data/fsdp2_tracker_cases.json``, ``*-acop`` cases: 63,616 bytes per
token for Llama-3-8B's layer, the sum above to the byte).
"""

from __future__ import annotations

from typing import Any

__all__ = ["OP_SAC_SWITCHES", "TORCHTITAN_MLA_OP_SAC_UNSTATED", "op_sac_kept_bytes", "torchtitan_mla_moe_op_sac_kept_bytes",
           "torchtitan_mla_moe_op_sac_unstated"]

# The recompute switches whose setting the fsdp2 runtime executes as torchtitan's per-op policy
# (its recompute_modules "op_sac"; the torchtitan importer and exporter map selective_ac_option "op" to it).
OP_SAC_SWITCHES = frozenset({"normOp", "ffAct"})


def op_sac_kept_bytes(c: Any, x: Any) -> int:
    """Bytes one micro-batch of a dense layer (config *c*, context *x*) keeps under the per-op policy."""
    t, sp, act, T = x.tp, x.sp_degree, x.precision.activation_bytes, x.tokens
    h, d, a, g = c.hidden_size, c.head_width, c.num_attention_heads, c.num_key_value_heads
    I = c.intermediate_size
    # (output bytes, a plain mm) in call order; a biased projection is an addmm; a fused q, k, v projection one mm.
    if c.fused_qkv:
        matmuls = [(T * (a + 2 * g) * d * act // t, not c.attention_bias)]
    else:
        matmuls = [(T * a * d * act // t, not c.attention_bias), (T * g * d * act // t, not c.attention_bias),
                   (T * g * d * act // t, not c.attention_bias)]
    matmuls.append((T * h * act, not c.attention_out_bias))
    if c.gated_mlp:
        matmuls += [(T * I * act // t, not c.mlp_bias), (T * I * act // t, not c.mlp_bias)]
    else:
        matmuls.append((T * I * act // t, not c.mlp_bias))
    matmuls.append((T * h * act, not c.mlp_bias))
    kept, count = T * h * act // sp, 0
    for nbytes, is_mm in matmuls:
        if is_mm:
            count += 1
            kept += nbytes if count % 2 == 1 else 0
    if x.attention != "eager":  # the SDPA kernel's output and statistics (eager attention's bmm ops are recomputed)
        kept += T * a * d * act // t + T * (a // t) * x.precision.lse_bytes
    if x.sp and t > 1:  # the attention's and the MLP's reduce-scatter outputs
        kept += 2 * T * h * act // t
    return kept


def torchtitan_mla_moe_op_sac_kept_bytes(c: Any, x: Any, routed_rows: int, processed_rows: int) -> int | None:
    """Bytes one micro-batch of an MLA MoE layer keeps under torchtitan's per-op policy with its 2025-10 MoE
    (the ``torchtitan_moe_expert_parallel`` trait); ``None`` under TP (not stated).

    pytorch/torchtitan@82a9530f6, torchtitan/models/deepseek_v3/infra/parallelize.py ``_op_sac_save_list``: the
    outputs of ``aten.mm`` (the odd ones of the block's forward), the SDPA kernels, ``flex_attention``,
    ``_c10d_functional.reduce_scatter_tensor``, ``_c10d_functional.all_to_all_single`` and ``aten.max``. In the
    block's call order (torchtitan/models/deepseek_v3/model/model.py Attention.forward, torchtitan/models/moe.py
    MoE.forward): wq (or wq_a, wq_b), wkv_a, wkv_b, wo, the router's gate, the shared experts' w1, w3, w2 (the
    routed experts' ``_grouped_mm`` is never saved); the attention kernel's output and fp32 log-sum-exp; under EP the
    two ``all_to_all_single`` outputs (ExpertParallel's dispatch of the *processed_rows* a rank's experts take, its
    combine of the rank's *routed_rows*), 2 h each; the block's input. Everything else of the routed path (indices,
    the permuted input, the SwiGLU intermediates, the fp32 routed output) is re-run in backward. The split sizes'
    all-to-all (``E`` int64 a layer, under no_grad) is left out.
    """
    if x.tp > 1:
        return None
    act, T, h, a = x.precision.activation_bytes, x.tokens, c.hidden_size, c.num_attention_heads
    qk = c.qk_nope_head_dim + c.qk_rope_head_dim
    q_path = [T * c.q_lora_rank, T * a * qk] if c.q_lora_rank is not None else [T * a * qk]
    outputs = q_path + [T * (c.kv_lora_rank + c.qk_rope_head_dim), T * a * (c.qk_nope_head_dim + c.v_head_dim), T * h,
                        T * c.num_experts]
    if c.shared_expert_intermediate_size:
        outputs += [T * c.shared_expert_intermediate_size] * 2 + [T * h]
    kept = T * h * act + sum(outputs[0::2]) * act
    if x.attention != "eager":
        kept += T * a * c.v_head_dim * act + T * a * x.precision.lse_bytes
    if x.ep > 1:
        kept += (routed_rows + processed_rows) * h * act
    return kept


# Why a dense MLA layer's (DeepSeek's first layers') op-level SAC is priced from the op_sac switches' terms: what
# torchtitan's per-op policy keeps of it is counted nowhere here.
TORCHTITAN_MLA_OP_SAC_UNSTATED = (
    "op-level SAC (normOp, ffAct) is priced as those switches drop the layer's terms, not as torchtitan's per-op "
    "policy saves: a dense MLA layer's save list is not stated (an MLA MoE layer's is, at tp 1); docs/time.md")


def torchtitan_mla_moe_op_sac_unstated(x: Any) -> str:
    """Why an MLA MoE layer's op-level SAC is priced from the ``op_sac`` switches' terms in context *x*: where
    :func:`torchtitan_mla_moe_op_sac_kept_bytes` states nothing (TP > 1, or MoE code other than 2025-10's, whose
    ``_op_sac_save_list`` it follows). 6b9602339's policy saves ``linear`` and ``topk`` too
    (torchtitan/distributed/activation_checkpoint.py ``_get_save_ops``), a list not stated here."""
    here = []
    if x.tp > 1:
        here.append(f"tp {x.tp}")
    if "torchtitan_moe_all_to_all" in x.traits:
        here.append("moe_permutation torchtitan_all_to_all, whose 2026-06 policy also saves linear and topk")
    elif "torchtitan_moe_expert_parallel" not in x.traits:
        here.append("another moe_permutation")
    return ("op-level SAC (normOp, ffAct) is priced as those switches drop the layer's terms, not as torchtitan's "
            "per-op policy saves: its deepseek_v3 save list is stated at tp 1 with moe_permutation "
            f"torchtitan_expert_parallel only (here {' and '.join(here)}); docs/time.md")
