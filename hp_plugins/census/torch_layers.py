"""The torch census's layers: one TP rank's transformers layer built from a config, run forward and backward.

The counts the source turns into records (:mod:`hp_plugins.census.torch`) come
from :func:`run_layer`, under the tracker of :mod:`hp_plugins.census.torch_tracing`.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Mapping

from hp_core.errors import ConfigError
from hp_plugins.census.torch_tracing import SavedTensor, live_peak, switch_of

__all__ = ["hf_config_object", "hf_model_type", "layer_classes", "layer_indices", "rank_config", "run_layer"]


# ----------------------------------------------------------------------------- building layers


def hf_model_type(hf: Mapping[str, Any]) -> str:
    model_type = hf.get("model_type")
    if not isinstance(model_type, str):
        raise ConfigError("config.json $.model_type", "is missing; the torch census builds the model's transformers classes")
    return model_type


def _model_of(hf: Mapping[str, Any]) -> Any:
    """The layer stack of *hf* as hp-planner's built-in model formats read it."""
    from hp_plugins.models.hf import model_from_hf_config
    from hp_plugins.models.hf_local import MODEL_TYPES as LOCAL_TYPES, model_from_local_config
    from hp_plugins.models.qwen3_next import model_from_qwen3_next_config
    from hp_plugins.models.ssm import model_from_mamba2_config, model_from_nemotron_h_config

    build = {"mamba2": model_from_mamba2_config, "nemotron_h": model_from_nemotron_h_config,
             "qwen3_next": model_from_qwen3_next_config}.get(
        hf.get("model_type"), model_from_hf_config)
    if hf.get("model_type") in LOCAL_TYPES:
        build = model_from_local_config
    return build(hf, name="census", source="census")


def layer_indices(hf: Mapping[str, Any]) -> dict[str, int]:
    """Per body kind, the first model layer of that kind (the built-in model formats' reading of the config)."""
    model = _model_of(hf)
    found: dict[str, int] = {}
    index = 0
    for group in model.layers:
        if group.kind in ("embedding", "output", "mtp"):
            continue
        found.setdefault(group.kind, index)
        index += group.count
    return found


# Model types whose intermediate_size is the routed experts' width (not split by TP); Llama 4's is
# its experts' and shared expert's, and its dense layers' intermediate_size_mlp is split.
_EXPERT_WIDTH = ("mixtral", "gpt_oss", "llama4_text")
# Model types whose transformers classes live in another module, and the prefix of the text classes there.
_MODULES = {"gemma3_text": ("gemma3", "Gemma3"), "llama4_text": ("llama4", "Llama4Text")}


def _divide(value: int, tp: int, field: str) -> int:
    if value % tp:
        raise ConfigError("--tp", f"tp={tp} must divide {field}={value} to build one TP rank's layer")
    return value // tp


def rank_config(hf: Mapping[str, Any], tp: int) -> dict[str, Any]:
    """The config of the layer one TP rank holds: heads and TP-split widths divided by *tp*."""
    cfg = {key: value for key, value in hf.items() if not key.startswith("_")}
    if tp == 1:
        return cfg
    model_type = hf_model_type(hf)
    if model_type in ("mamba2", "nemotron_h"):
        # Megatron-Core's MambaMixer splits the SSM heads and groups over TP.
        heads_key = "num_heads" if model_type == "mamba2" else "mamba_num_heads"
        groups_key = "mamba_n_groups" if "mamba_n_groups" in cfg else "n_groups"
        cfg[heads_key] = _divide(cfg[heads_key], tp, heads_key)
        cfg[groups_key] = _divide(cfg.get(groups_key, 8), tp, groups_key)
        if model_type == "mamba2":  # Mamba2Config checks hidden_size * expand == num_heads * head_dim
            cfg["expand"] = _divide(cfg.get("expand", 2), tp, "expand")
            cfg["vocab_size"] = -(-cfg["vocab_size"] // tp)
            return cfg
    if model_type == "qwen3_next":  # Megatron-Core's GatedDeltaNet splits the key and value heads over TP
        for key in ("linear_num_key_heads", "linear_num_value_heads"):
            cfg[key] = _divide(cfg[key], tp, key)
    heads = cfg["num_attention_heads"]
    if not model_type.startswith("deepseek"):
        cfg["head_dim"] = cfg.get("head_dim") or cfg["hidden_size"] // heads
    cfg["num_key_value_heads"] = _divide(cfg.get("num_key_value_heads") or heads, tp, "num_key_value_heads")
    cfg["num_attention_heads"] = _divide(heads, tp, "num_attention_heads")
    if model_type not in _EXPERT_WIDTH and "intermediate_size" in cfg:  # Mixtral's, GPT-OSS's: the experts' width
        cfg["intermediate_size"] = _divide(cfg["intermediate_size"], tp, "intermediate_size")
    if model_type == "llama4_text" and "intermediate_size_mlp" in cfg:
        cfg["intermediate_size_mlp"] = _divide(cfg["intermediate_size_mlp"], tp, "intermediate_size_mlp")
    if cfg.get("shared_expert_intermediate_size"):
        cfg["shared_expert_intermediate_size"] = _divide(cfg["shared_expert_intermediate_size"], tp, "shared_expert_intermediate_size")
    # The vocabulary-parallel head's shard, the vocabulary padded to a multiple of tp.
    cfg["vocab_size"] = -(-cfg["vocab_size"] // tp)
    return cfg


def layer_classes(transformers: Any, model_type: str) -> tuple[Any, dict[str, Any]]:
    package, prefix = _MODULES.get(model_type, (model_type, ""))
    module = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
    found = {}
    for suffix in ("DecoderLayer", "RotaryEmbedding", "RMSNorm"):
        names = sorted(n for n in dir(module) if n.endswith(suffix) and n.startswith(prefix) and not n.startswith("_"))
        if not names and suffix == "DecoderLayer":  # Mamba2Block, NemotronHBlock
            names = sorted(n for n in dir(module) if n.endswith("Block") and not n.startswith("_"))
        if not names and suffix == "RotaryEmbedding":  # Mamba-2 and Nemotron-H have no rotary embedding
            found[suffix] = None
            continue
        if not names:
            raise ConfigError("config.json $.model_type", f"transformers has no {suffix} class for model_type {model_type!r}")
        found[suffix] = getattr(module, min(names, key=len))
    return module, found


def hf_config_object(transformers: Any, hf: Mapping[str, Any], attention: str) -> Any:
    model_type = hf_model_type(hf)
    config = transformers.AutoConfig.for_model(model_type, **{k: v for k, v in hf.items() if k != "model_type"})
    config._attn_implementation = attention
    config._experts_implementation = "grouped_mm"
    return config


def run_layer(torch: Any, transformers: Any, config: Any, cfg: Mapping[str, Any], classes: Mapping[str, Any], kind: str,
              index: int | None, seq_len: int, switches: tuple[str, ...], tracker: Any, hf: Mapping[str, Any], tp: int) -> tuple:
    """Build, run forward and backward under the tracker; returns the counts."""
    nn = torch.nn
    hidden = cfg["hidden_size"]
    shared: list[Any] = []
    with tracker:
        if kind == "embedding":
            layer = nn.Embedding(cfg["vocab_size"], hidden)
            x = torch.zeros(1, seq_len, dtype=torch.long)
            call = lambda: layer(x)  # noqa: E731
        elif kind == "output":
            layer = nn.ModuleDict({
                "norm": classes["RMSNorm"](hidden, eps=cfg.get("rms_norm_eps", 1e-6)),
                "lm_head": nn.Linear(hidden, cfg["vocab_size"], bias=False),
            })
            from transformers.loss.loss_utils import ForCausalLMLoss

            x = torch.empty(1, seq_len, hidden, requires_grad=True)
            labels = torch.zeros(1, seq_len, dtype=torch.long)

            cap = cfg.get("final_logit_softcapping")

            def call() -> Any:
                logits = layer["lm_head"](layer["norm"](x))
                if cap is not None:  # Gemma 2 (Gemma2ForCausalLM.forward)
                    logits = torch.tanh(logits / cap) * cap
                return ForCausalLMLoss(logits, labels, vocab_size=cfg["vocab_size"])
        else:
            layer = classes["DecoderLayer"](config, index)
            mlp = getattr(layer, "mlp", None)
            shared_experts = getattr(mlp, "shared_experts", None)
            if tp > 1 and shared_experts is not None and not cfg.get("shared_expert_intermediate_size"):
                # DeepSeek builds its shared experts n_shared_experts * moe_intermediate_size wide.
                width = hf["n_shared_experts"] * hf["moe_intermediate_size"]
                mlp.shared_experts = type(shared_experts)(config, intermediate_size=_divide(width, tp, "the shared experts' width"))
            x = torch.empty(1, seq_len, hidden, requires_grad=True)
            positions = torch.arange(seq_len).unsqueeze(0)
            # A Mamba-2 or Gated DeltaNet mixer reads a 2-D padding mask (none here), an MLP none.
            attends = kind not in ("mamba2", "mlp", "moe_only", "gdn", "gdn_moe")
            mask = torch.zeros(1, 1, seq_len, seq_len) if config._attn_implementation == "eager" and attends else None
            shared += [positions] + ([mask] if mask is not None else [])
            kwargs: dict[str, Any] = {"attention_mask": mask}
            if classes["RotaryEmbedding"] is not None:
                rope = classes["RotaryEmbedding"](config)
                if "layer_type" in inspect.signature(rope.forward).parameters:  # Gemma 3: a RoPE per layer type
                    embeddings = rope(x, positions, config.layer_types[index])
                else:
                    embeddings = rope(x, positions)  # (cos, sin), or Llama 4's complex frequencies
                shared += [*(embeddings if isinstance(embeddings, tuple) else (embeddings,)), *rope.buffers()]
                kwargs.update(position_ids=positions, position_embeddings=embeddings)
            elif attends:
                kwargs["position_ids"] = positions

            def call() -> Any:
                out = layer(x, **kwargs)
                return out[0] if isinstance(out, tuple) else out

        layer.train()
        norm_modules: set[str] = set()
        norm_inputs: list[Any] = []
        for path, module in layer.named_modules():
            cls = type(module).__name__
            if cls.endswith(("RMSNorm", "LayerNorm")):
                norm_modules.add(path)

            def enter(mod: Any, args: Any, path: str = path, cls: str = cls) -> None:
                tracker.modules.append((path, cls))
                if path in norm_modules and args and isinstance(args[0], torch.Tensor):
                    norm_inputs.append(tracker.entry(args[0]))

            def leave(mod: Any, args: Any, out: Any) -> None:
                tracker.modules.pop()

            module.register_forward_pre_hook(enter)
            module.register_forward_hook(leave)
        # The layer's input is the previous layer's output, kept there if at all; the token ids are the embedding's own.
        handed = [] if kind == "embedding" else [x]
        excluded = {tracker.entry(t).key for t in [*layer.parameters(), *layer.buffers(), *shared, *handed]}
        # Per storage saved: its dtype, shape and the module that saved it. No reference to the tensor is held
        # here, so a storage lives only as long as the graph keeps it.
        saved: dict[int, tuple[str, tuple[int, ...], tuple[str, str]]] = {}

        def pack(tensor: Any) -> Any:
            entry = tracker.entry(tensor)
            if entry.key not in excluded and entry.key not in saved:
                saved[entry.key] = (str(tensor.dtype), tuple(tensor.shape), tracker.modules[-1])
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            out = call()
        tracker.sweep()
        # What a branch of the graph saved whose outputs the forward dropped (DeepSeek's group-limited
        # router: the top-k over group scores and the masked scores only choose experts) was freed with
        # that branch before the backward: it is not kept.
        saved = {key: found for key, found in saved.items() if key in tracker.alive}
        excluded.add(tracker.entry(out).key)
        start = len(tracker.events)
        grad = torch.empty_like(out) if out.dim() else None
        out.backward(grad)
        tracker.sweep()
        for param in layer.parameters():
            if param.grad is not None:
                excluded.add(tracker.entry(param.grad).key)
        peak = live_peak(tracker, start, excluded)
    tensors = []
    per_op = {name: 0 for name in switches}
    unsaved_norm_inputs = sum(e.nbytes for e in {e.key: e for e in norm_inputs}.values() if e.key not in saved)
    for key, (dtype, shape, saved_by) in saved.items():
        entry = tracker.entries[key]
        switch = switch_of(entry, saved_by, switches, norm_modules)
        if switch is not None:
            per_op[switch] += entry.nbytes
        tensors.append(SavedTensor(entry.nbytes, dtype, shape, entry.op, entry.module, saved_by[0], switch))
    if "normOp" in per_op:
        # Recomputing the norms keeps their inputs, which nothing kept before.
        per_op["normOp"] = max(0, per_op["normOp"] - unsaved_norm_inputs)
    tensors.sort(key=lambda t: (-t.nbytes, t.module, t.op))
    saved_bytes = sum(t.nbytes for t in tensors)
    return saved_bytes, {k: v for k, v in per_op.items() if v}, peak, tuple(tensors), type(layer).__name__ if kind not in ("output",) else "RMSNorm+Linear+ForCausalLMLoss"
