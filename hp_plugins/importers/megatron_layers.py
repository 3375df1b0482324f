"""The model half of the ``megatron`` importer (:mod:`hp_plugins.importers.megatron`): Megatron-LM's model arguments
as a Hugging Face style config (``llama``, ``deepseek_v2`` with MLA, ``qwen2_moe`` for routed experts without MLA),
which :func:`hp_plugins.importers.megatron_options.megatron_model` then gives Megatron's norms, activation, biases,
q/k norms and position table."""

from __future__ import annotations

import re
from typing import Any

from hp_core.errors import ConfigError

__all__ = ["TOKENIZER_VOCABS", "ffn_size", "hf_config", "vocab_size"]

# The vocabularies of tokenizers Megatron-LM names by type alone (megatron/training/tokenizer/tokenizer.py):
# GPT2BPETokenizer reads GPT-2's BPE files, 50,257 tokens (Radford et al. 2019, "Language Models are Unsupervised
# Multitask Learners"); Llama2Tokenizer Llama 2's SentencePiece model, 32,000 tokens (Touvron et al. 2023,
# arXiv:2307.09288, Section 2.1: "The total vocabulary size is 32k tokens"; the model file holds 32,000).
TOKENIZER_VOCABS = {"GPT2BPETokenizer": (50257, "GPT-2's"), "Llama2Tokenizer": (32000, "Llama 2's")}


def _layer_bits(text: str) -> list[int]:
    """The per-layer pattern a ``--moe-layer-freq`` list states (``([0]*1+[1]*3)*12`` or ``[0,1,1]``; 1: MoE), as
    Megatron-LM evaluates it (arguments.py ``moe_freq_type``); empty where the text is neither form."""
    pattern: list[int] = []
    match = re.fullmatch(r"\s*\(?((?:\[[01]\]\*\d+\+?)+)\)?(?:\*(\d+))?\s*", text)
    if match:
        for bit, count in re.findall(r"\[([01])\]\*(\d+)", match.group(1)):
            pattern += [int(bit)] * int(count)
        pattern *= int(match.group(2) or 1)
    elif re.fullmatch(r"\[[01,\s]+\]", text.strip()):
        pattern = [int(b) for b in re.findall(r"[01]", text)]
    return pattern


def _layer_freq(text: str | None, unmapped: list[str]) -> int:
    """Leading dense layers of ``--moe-layer-freq`` (an int 1, or a pattern such as ``([0]*1+[1]*3)*1``): the
    deepseek format's ``first_k_dense_replace``, which states no other pattern."""
    if text is None or text.strip() == "1":
        return 0
    pattern = _layer_bits(text)
    dense = next((i for i, bit in enumerate(pattern) if bit), len(pattern))
    if not pattern or any(bit != 1 for bit in pattern[dense:]):
        unmapped.append(f"--moe-layer-freq {text}: only leading dense layers then MoE in every layer are mapped; "
                        "priced as MoE in every layer")
        return 0
    return dense


def _dense_layers(text: str | None, layers: int, unmapped: list[str]) -> list[int]:
    """The dense layers of ``--moe-layer-freq`` without MLA (the qwen2_moe layout's ``mlp_only_layers``, which takes
    any pattern): an int ``N`` makes layer ``i`` MoE where ``i % N == 0``, a list states each layer, whose length
    Megatron-Core requires to be the layer count (``megatron/core/models/gpt/gpt_layer_specs.py``
    ``get_gpt_decoder_layer_specs`` at NVIDIA/Megatron-LM@d98e8a6)."""
    if text is None:
        return []
    if text.strip().isdigit():
        every = int(text)
        if every < 1:
            raise ConfigError("--moe-layer-freq", f"expected a positive integer or a list, got {text!r}")
        return [i for i in range(layers) if i % every]
    pattern = _layer_bits(text)
    if not pattern:
        unmapped.append(f"--moe-layer-freq {text}: not read as an integer or a list; priced as MoE in every layer")
        return []
    if len(pattern) != layers:
        raise ConfigError("--moe-layer-freq", f"{len(pattern)} entries for --num-layers {layers}; Megatron-Core "
                                              "requires one per layer")
    return [i for i, bit in enumerate(pattern) if not bit]


def vocab_size(a: Any, unmapped: list[str]) -> int:
    """The vocabulary the tokenizer arguments state: ``--vocab-size``, the named tokenizers' own (:data:`TOKENIZER_VOCABS`),
    plus the NullTokenizer's EOD token."""
    vocab = a.value("vocab-size", int)
    tokenizer = a.value("tokenizer-type")
    if tokenizer is None and a.value("vocab-file") is not None and a.value("merge-file") is not None:
        # Megatron-LM's --tokenizer-type defaults to None (megatron/training/config/training_config.py TokenizerConfig
        # at NVIDIA/Megatron-LM@d98e8a6); pretrain_gpt.py fills it in as GPT2BPETokenizer (its args_defaults), the
        # tokenizer a --vocab-file / --merge-file pair is read by.
        tokenizer = "GPT2BPETokenizer"
        unmapped.append("--tokenizer-type not given: read as pretrain_gpt.py's default GPT2BPETokenizer "
                        "(--vocab-file and --merge-file given)")
    if tokenizer in TOKENIZER_VOCABS:  # tokenizer.py: these size the vocabulary from their files, not --vocab-size
        known, what = TOKENIZER_VOCABS[tokenizer]
        unmapped.append(f"--tokenizer-type {tokenizer}: read as {what} {known:,}-token vocabulary"
                        + (f", not --vocab-size {vocab:,}, which it does not read" if vocab not in (None, known) else "")
                        + "; a different tokenizer file is not priced")
        vocab = known
    if vocab is None:
        raise ConfigError("--vocab-size", "the tokenizer's vocabulary is not in the arguments; state --vocab-size")
    if tokenizer == "NullTokenizer":
        vocab += 1  # its EOD token (megatron/training/tokenizer/tokenizer.py _NullTokenizer)
    return vocab


def ffn_size(a: Any, hidden: int) -> int:
    """``--ffn-hidden-size``; unstated, arguments.py validate_args' 4h, or int(8h / 3 / 64) * 64 with --swiglu."""
    return a.value("ffn-hidden-size", int, int(4 * hidden * 2 / 3 / 64) * 64 if a.flag("swiglu") else 4 * hidden)


def hf_config(a: Any, unmapped: list[str]) -> dict[str, Any]:
    """The Hugging Face style config the ``hf`` model format builds the imported model from (the importer's module
    docstring, :mod:`hp_plugins.importers.megatron`): *a* the parsed arguments, each read once."""
    hidden, heads = a.value("hidden-size", int), a.value("num-attention-heads", int)
    layers = a.value("num-layers", int)
    for name, given in (("num-layers", layers), ("hidden-size", hidden), ("num-attention-heads", heads)):
        if given is None:
            raise ConfigError(f"--{name}", "required to build the model; state it")
    vocab = vocab_size(a, unmapped)
    bias = not a.flag("disable-bias-linear")
    config: dict[str, Any] = {
        "hidden_size": hidden, "num_attention_heads": heads, "num_hidden_layers": layers, "vocab_size": vocab,
        "intermediate_size": ffn_size(a, hidden), "hidden_act": "silu",
        "tie_word_embeddings": not a.flag("untie-embeddings-and-output-weights"),
        "rms_norm_eps": a.value("norm-epsilon", float, 1e-5),
        "max_position_embeddings": a.value("max-position-embeddings", int, a.value("seq-length", int)),
        "attention_bias": bias or a.flag("add-qkv-bias"), "mlp_bias": bias,
    }
    config["attention_dropout"] = a.value("attention-dropout", float, 0.1)  # Megatron's default 0.1
    experts = a.value("num-experts", int)
    if a.flag("multi-latent-attention"):
        a.flag("qk-layernorm")  # MLA's q and kv LoRA norms, which the deepseek format always has
        a.value("kv-channels")  # MLA's head sizes are --qk-head-dim, --qk-pos-emb-head-dim and --v-head-dim
        config.update(model_type="deepseek_v2", num_key_value_heads=heads, q_lora_rank=a.value("q-lora-rank", int),
                      kv_lora_rank=a.value("kv-lora-rank", int, 32), qk_nope_head_dim=a.value("qk-head-dim", int, 128),
                      qk_rope_head_dim=a.value("qk-pos-emb-head-dim", int, 64), v_head_dim=a.value("v-head-dim", int, 128),
                      num_nextn_predict_layers=a.value("mtp-num-layers", int, 0))
        if experts:
            width = a.value("moe-ffn-hidden-size", int, config["intermediate_size"])
            shared = a.value("moe-shared-expert-intermediate-size", int, 0)
            config.update(n_routed_experts=experts, num_experts_per_tok=a.value("moe-router-topk", int, 2),
                          moe_intermediate_size=width, n_shared_experts=shared // width if shared else 0,
                          first_k_dense_replace=_layer_freq(a.value("moe-layer-freq"), unmapped), moe_layer_freq=1)
            if shared % width:
                unmapped.append(f"--moe-shared-expert-intermediate-size {shared}: not a multiple of the expert width")
        else:
            config.update(n_routed_experts=0, first_k_dense_replace=layers)
        return config
    groups = a.value("num-query-groups", int, heads) if a.flag("group-query-attention") else heads
    config.update(model_type="llama", num_key_value_heads=groups, head_dim=a.value("kv-channels", int, hidden // heads))
    if experts:
        # Routed experts without MLA: the qwen2_moe layout (MoE layers with an optional shared expert, the dense
        # layers --moe-layer-freq states, of --ffn-hidden-size, as mlp_only_layers); its fixed q/k/v biases and shared-
        # expert gate are then set as Megatron's flags state them (megatron_options.megatron_model).
        config.update(model_type="qwen2_moe", num_experts=experts, num_experts_per_tok=a.value("moe-router-topk", int, 2),
                      moe_intermediate_size=a.value("moe-ffn-hidden-size", int, config["intermediate_size"]),
                      shared_expert_intermediate_size=a.value("moe-shared-expert-intermediate-size", int, 0),
                      decoder_sparse_step=1,
                      mlp_only_layers=_dense_layers(a.value("moe-layer-freq"), layers, unmapped))
    return config
