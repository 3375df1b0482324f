"""The measured Megatron-LM runs of ``data/megatron_measured.json``, built as each case ran.

Shared by ``test_step_time_cases.py`` (step time against the runs) and
``test_search_measured.py`` (the search ranks the runs' layouts as measured).
Each case's model: Llama-3-70B truncated to the layers run (the preset
through ``ModelSpec.with_body_layers``), DeepSeek-V2 from its
``training_config``; the vocabulary is ``--vocab-size + 1`` (Megatron's
NullTokenizer adds EOD), which the ``megatron`` runtime pads to a multiple of
``128 * tp``; MoE capacity padding as the case passed it. Its layout: degrees,
micro-batch size, global batch and sequence length from the JSON (``cp_kind``
as the case ran ``--cp-comm-type``).
"""

from __future__ import annotations

from pathlib import Path

import attrs

from hp_core.specs import ModelSpec, ParallelSpec
from hp_plugins.models.hf import model_from_hf_config

CASES = Path(__file__).resolve().parent / "data"
MEGATRON_FILE = CASES / "megatron_measured.json"


def megatron_model(case: dict, registry) -> ModelSpec:
    """The model as the case ran it: truncated layers, Megatron's vocabulary (+1 EOD token)."""
    hf = case["training_config"]["model_hf"]
    if case["model"] == "llama3-70b":
        config = dict(registry.model("llama3-70b", "$.model").hf_config)
    else:
        # DeepSeek-V2 from the case's training_config.
        keys = ("hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size", "moe_intermediate_size",
                "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts",
                "num_experts_per_tok", "n_shared_experts", "first_k_dense_replace", "rms_norm_eps", "attention_bias",
                "tie_word_embeddings", "num_nextn_predict_layers")
        config = {key: hf[key] for key in keys}
        config.update(model_type="deepseek_v2", hidden_act="silu", moe_layer_freq=1, num_hidden_layers=hf["num_hidden_layers"])
    config["vocab_size"] = hf["vocab_size"] + 1  # Megatron's NullTokenizer appends EOD
    model = model_from_hf_config(config, name=case["model"], source=f"megatron_measured.json {case['case_id']}")
    model = model.with_body_layers(case["layers_as_run"], registry.kinds_placed("body"))
    moe = case["training_config"].get("moe")
    return with_megatron_capacity(model, moe)


def with_megatron_capacity(model: ModelSpec, moe: dict | None) -> ModelSpec:
    """*model* with its MoE layers padded to capacity where the run passed
    ``--moe-expert-capacity-factor F --moe-pad-expert-input-to-capacity`` (*moe*: the run's MoE flags)."""
    model = with_megatron_router_groups(model, moe)
    if not (moe and moe.get("pad_expert_input_to_capacity")):
        return model
    groups = tuple(
        attrs.evolve(g, config=attrs.evolve(g.config, capacity_factor=float(moe["expert_capacity_factor"]), pad_to_capacity=True))
        if hasattr(g.config, "capacity_factor") else g
        for g in model.layers
    )
    return attrs.evolve(model, layers=groups)


def with_megatron_router_groups(model: ModelSpec, moe: dict | None) -> ModelSpec:
    """*model* with group-limited routing where the run passed ``--moe-router-num-groups R --moe-router-group-topk g``
    (*moe*'s ``router_num_groups``, ``router_group_topk``; a number of groups stated per row is the caller's)."""
    if not (moe and moe.get("router_group_topk") and isinstance(moe.get("router_num_groups"), int)):
        return model
    changes = {"router_num_groups": moe["router_num_groups"], "router_group_topk": moe["router_group_topk"]}
    groups = tuple(attrs.evolve(g, config=attrs.evolve(g.config, **changes)) if hasattr(g.config, "router_num_groups")
                   else g for g in model.layers)
    return attrs.evolve(model, layers=groups)


def megatron_layout(case: dict, row: dict) -> ParallelSpec:
    """The case's layout at one measured row (its global batch)."""
    p = case["training_config"]["parallelism"]
    batch = case["training_config"]["batch"]
    return ParallelSpec(
        dp=p["data_parallel_size"],
        tp=p["tensor_model_parallel_size"],
        pp=p["pipeline_model_parallel_size"],
        cp=p["context_parallel_size"],
        cp_kind=p.get("cp_comm_type") or "p2p",
        ep=p["expert_model_parallel_size"] or 1,
        etp=p["expert_tensor_parallel_size"] or 1,
        sp=p["sequence_parallel_effective"],
        micro_batch_size=batch["micro_batch_size"],
        global_batch_size=row["global_batch_size"],
        seq_len=batch["seq_length"],
    )
