"""LoRA and QLoRA fine-tuning: a frozen base layer with low-rank adapters.

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models",
arXiv:2106.09685) freezes the pretrained weights and trains, for each target
linear ``W`` (``out x in``), two matrices ``A`` (``r x in``) and ``B``
(``out x r``): ``y = W x + (alpha / r) B A dropout(x)`` (PEFT ``lora.Linear``:
``lora_A = nn.Linear(in, r, bias=False)``, ``lora_B = nn.Linear(r, out,
bias=False)``, ``lora_dropout`` an ``nn.Dropout`` or ``nn.Identity``). QLoRA
(Dettmers et al. 2023, "QLoRA: Efficient Finetuning of Quantized LLMs",
arXiv:2305.14314, Section 3) stores the frozen linear weights in 4-bit NormalFloat
with bitsandbytes' blockwise quantization: blocksize 64 with one absmax per block,
and double quantization of the absmax values to 8 bits in blocks of 256 with an
fp32 absmax each (bitsandbytes ``quantize_4bit(..., blocksize=64,
compress_statistics=True)``): ``1/2 + 1/64 + 4/(64 * 256)`` bytes per weight
(the paper's ``8/64 + 32/(64 * 256) = 0.127`` bits of constants per parameter).
GPT-OSS ships its routed experts' weights in MXFP4 (OCP Microscaling: blocks of 32
FP4 E2M1 values, two per byte, sharing one E8M0 scale byte; transformers
``integrations/mxfp4.py``: a checkpoint's ``*_blocks`` are uint8 of 16 bytes per
block and its ``*_scales`` one uint8 per block, ``_convert_moe_packed_tensors``
checks ``blocks.shape[:-1] == scales.shape`` and unbiases the scale by 127):
``1/2 + 1/32`` bytes per weight; ``Mxfp4GptOssExperts`` holds the experts' biases in
fp32, and everything else (attention, router, norms, embeddings) stays in the
compute dtype (the quantization config's ``modules_to_not_convert``).

Three kinds wrap another kind's layer (evaluated through
``LayerContext.sublayer``, as ``mtp`` evaluates its transformer layer): ``lora``
(a body layer: frozen, with adapters on ``target_modules``), and ``lora_first``
/ ``lora_last`` (the embedding and the output head: frozen, no adapters; a head
tied to the embedding is shared with ``lora_first``). Per layer:

* **parameters**: every family of the base layer is frozen (``ParamCount.trainable``
  false: held, no gradient, master copy or optimizer state); under
  ``base: nf4`` its linear weights (the family's stated matrices) are held in
  NF4 and the rest (norms, biases) in the run's ``param_bytes``. The adapters,
  ``r (in + out)`` per target, are trained in the run's precision with its
  optimizer (their gradients, master copy and states). Under ``base: mxfp4``
  the routed experts' weight matrices are held in MXFP4 and their biases in
  fp32; the rest of the layer in ``param_bytes``.
* **activations**: the base layer's, plus per target ``A``'s output (``r`` wide,
  which ``B`` keeps) and, with ``dropout > 0``, the dropout's mask and output
  (``in`` wide, which ``A`` keeps; without dropout ``A`` keeps the base's own input).
* **FLOPs**: the base's forward, whose backward computes input gradients only
  (``LayerWork.frozen_matmul_flops``, its GEMMs ``LayerWork.frozen_gemms``: the
  step time drops their weight-gradient GEMMs at the time it priced them), and
  the adapters' ``2 T r (in + out)`` per target, trained in full.

Targets are PEFT's module names of a Llama-style layer: ``q_proj``, ``k_proj``,
``v_proj``, ``o_proj`` (a layer with grouped-query attention fields) and
``gate_proj``, ``up_proj``, ``down_proj`` (a layer with MLP fields; ``gate_proj``
only in a gated MLP); a target the wrapped layer lacks (an MLP-only layer's
``q_proj``, a Mamba layer's) is not adapted there. Known limitations: tensor
parallelism is refused (adapters under TP are not priced; PEFT and QLoRA runs
shard with data parallelism or FSDP); routed experts are never targets.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import attrs

from hp_core.costs import SWITCHES, Flops, LayerContext, LayerCost, ParamCount
from hp_core.errors import ConfigError
from hp_core.markers import hookimpl
from hp_core.specs.model import LayerGroup
from hp_core.types import LayerKind
from hp_core.validators import positive_int, probability
from hp_plugins.kinds.embedding import EmbeddingConfig, evaluate_embedding
from hp_plugins.kinds.output import OutputConfig, evaluate_output
from hp_plugins.kit.experts import MoEFields
from hp_plugins.kit import term

__all__ = ["LORA_TARGETS", "LoRAConfig", "MXFP4_BYTES", "NF4_BYTES", "adapter_shapes", "evaluate_lora", "hp_layer_kinds",
           "with_lora"]

# bitsandbytes NF4 with double quantization, bytes per weight (module docstring).
NF4_BYTES = Fraction(1, 2) + Fraction(1, 64) + Fraction(4, 64 * 256)
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# MXFP4 (OCP Microscaling), bytes per weight: a 4-bit E2M1 value and an E8M0 scale byte per 32 (module docstring).
MXFP4_BYTES = Fraction(1, 2) + Fraction(1, 32)
_EXPERT_BIAS_BYTES = 4  # Mxfp4GptOssExperts: gate_up_proj_bias, down_proj_bias in float32
BASES = ("bf16", "nf4", "mxfp4")
# The built-in first and last kinds, evaluated directly (a nested layer through the planner is a body kind).
_ENDS = {"embedding": evaluate_embedding, "output": evaluate_output}


def _one_layer(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, LayerGroup) or value.count != 1:
        raise ValueError(f"{attribute.name} must be one layer group of count 1 (the frozen base layer)")


def _targets(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    unknown = [t for t in value if t not in LORA_TARGETS]
    if unknown or len(set(value)) != len(value):
        raise ValueError(f"target_modules must be distinct names from {list(LORA_TARGETS)}, got {list(value)!r}")


@attrs.frozen(kw_only=True)
class LoRAConfig:
    """A frozen base layer with LoRA adapters.

    Attributes:
        layer: The base layer (one layer group of count 1 of any kind).
        rank: The adapters' rank ``r`` (PEFT ``r``).
        target_modules: The adapted linears (PEFT ``target_modules``).
        dropout: ``lora_dropout``.
        base: How the frozen linear weights are held: ``bf16`` (the run's
            ``param_bytes``), ``nf4`` (QLoRA) or ``mxfp4`` (the routed experts'
            weights as GPT-OSS ships them; the rest in ``param_bytes``).
    """

    layer: LayerGroup = attrs.field(validator=_one_layer)
    rank: int = attrs.field(default=16, validator=positive_int)
    target_modules: tuple[str, ...] = attrs.field(default=("q_proj", "k_proj", "v_proj", "o_proj"),
                                                  converter=tuple, validator=_targets)
    dropout: float = attrs.field(default=0.0, validator=probability)
    base: str = attrs.field(default="bf16", validator=attrs.validators.in_(BASES))


def adapter_shapes(config: Any, targets: tuple[str, ...]) -> list[tuple[str, int, int]]:
    """``(target, in, out)`` of each target the base layer's config has (module docstring)."""
    shapes: dict[str, tuple[int, int]] = {}
    if hasattr(config, "num_key_value_heads") and hasattr(config, "head_width"):
        h, d = config.hidden_size, config.head_width
        a, g = config.num_attention_heads, config.num_key_value_heads
        shapes.update(q_proj=(h, a * d), k_proj=(h, g * d), v_proj=(h, g * d), o_proj=(a * d, h))
    if hasattr(config, "intermediate_size") and hasattr(config, "gated_mlp"):
        h, width = config.hidden_size, config.intermediate_size
        shapes.update(up_proj=(h, width), down_proj=(width, h))
        if config.gated_mlp:
            shapes["gate_proj"] = (h, width)
    return [(t, *shapes[t]) for t in targets if t in shapes]


def _frozen(p: ParamCount, base: str) -> list[ParamCount]:
    if p.shared_with is not None:
        # A tied head's owner, the embedding, is wrapped by lora_first.
        p = attrs.evolve(p, shared_with="lora_first")
    if base == "mxfp4" and p.group == "routed_expert":
        # The routed experts' weight family is matrices only (whole under expert parallelism's split
        # too); their biases are separate families, in fp32.
        held = MXFP4_BYTES if p.matrices else _EXPERT_BIAS_BYTES
        return [attrs.evolve(p, trainable=False, element_bytes=held)]
    if base != "nf4" or not p.matrices:
        return [attrs.evolve(p, trainable=False)]
    weights = p.matrix_elements  # a frozen linear's weight, held in NF4 (tp = 1: the whole family)
    found = [attrs.evolve(p, elements=weights, stored_elements=weights, trainable=False, element_bytes=NF4_BYTES)]
    if p.stored_elements > weights:
        rest = p.stored_elements - weights
        found.append(attrs.evolve(p, name=f"{p.name}_vectors", elements=p.elements - weights, stored_elements=rest,
                                  matrices=(), trainable=False))
    return found


def evaluate_lora(c: LoRAConfig, x: LayerContext) -> LayerCost:
    """The frozen base layer and its adapters on one rank (module docstring)."""
    if c.layer.kind in _ENDS:
        base = _ENDS[c.layer.kind](c.layer.config, x)
    elif x.sublayer is None:
        raise ConfigError("$.model.layers", "the lora kind evaluates its base layer through the planner (estimate)")
    else:
        base = x.sublayer(c.layer)
    act, T, r = x.precision.activation_bytes, x.tokens, c.rank
    params = [q for p in base.params for q in _frozen(p, c.base)]
    terms = list(base.activations)
    gemms = []
    flops = 0
    for target, fan_in, fan_out in adapter_shapes(c.layer.config, c.target_modules):
        params.append(ParamCount(f"lora_A_{target}", "dense", r * fan_in, False, matrices=((1, r, fan_in),)))
        params.append(ParamCount(f"lora_B_{target}", "dense", fan_out * r, False, matrices=((1, fan_out, r),)))
        terms.append(term(f"lora_{target}_a_out", T * r * act))
        if c.dropout > 0:
            terms.append(term(f"lora_{target}_dropout_mask", T * fan_in * x.precision.dropout_mask_bytes))
            terms.append(term(f"lora_{target}_dropout_out", T * fan_in * act))
        flops += 2 * T * r * (fan_in + fan_out)
        gemms += [(T, r, fan_in), (T, fan_out, r)]
    forward = base.forward
    work = base.work
    if work is not None:
        work = attrs.evolve(work, gemms=(*work.gemms, *gemms), frozen_matmul_flops=forward.matmul_flops,
                            frozen_gemms=work.gemms)
    return attrs.evolve(
        base, params=tuple(params), activations=tuple(terms),
        forward=Flops(forward.matmul_flops + flops, forward.attention_flops, forward.elementwise_flops),
        work=work, weight_shapes=(*base.weight_shapes, *((rows, cols) for _, rows, cols in gemms)),
        weight_gradient_bytes=None,  # not stated: the frozen base defers no wgrad, the adapters' are not derived
        weight_gradient_quantized=None,
    )


def validate_lora(c: LoRAConfig, x: LayerContext) -> None:
    """Refuse tensor parallelism (module docstring: adapters under TP are not priced)."""
    ends = {"embedding": EmbeddingConfig, "output": OutputConfig}
    if (c.layer.kind in ends) != isinstance(c.layer.config, tuple(ends.values())):
        raise ConfigError("$.model.layers[].config.layer", f"a {c.layer.kind!r} layer's config does not fit it")
    if c.base == "mxfp4" and not isinstance(c.layer.config, MoEFields):
        raise ConfigError("$.model.layers[].config.base", f"base: mxfp4 holds routed experts only and this "
                                                          f"{c.layer.kind!r} layer has none; use base: bf16 or nf4")
    if x.tp > 1:
        raise ConfigError("$.parallel.tp", f"tp={x.tp}: LoRA adapters under tensor parallelism are not priced; "
                                           "use tp=1 with data parallelism or FSDP (zero 3), as PEFT and QLoRA run")


def _kind(name: str, placement: str, what: str) -> LayerKind:
    # Every built-in switch: which of them a layer has is its wrapped kind's.
    return LayerKind(name=name, config_type=LoRAConfig, evaluate=evaluate_lora, placement=placement, switches=SWITCHES,
                     validate=validate_lora, description=what)


@hookimpl
def hp_layer_kinds():
    yield _kind("lora", "body", "LoRA/QLoRA: a frozen base layer (bf16, NF4 or MXFP4 experts) with trained low-rank adapters")
    yield _kind("lora_first", "first", "a frozen first layer (the embedding) of a LoRA fine-tuning run")
    yield _kind("lora_last", "last", "a frozen last layer (the output head) of a LoRA fine-tuning run")


def with_lora(model: Any, registry: Any, **options: Any) -> Any:
    """*model* fine-tuned with LoRA: its first and last layers frozen, every body layer frozen with adapters.

    Args:
        model: A :class:`~hp_core.specs.ModelSpec` (a preset's, a ``config.json``'s, an inline one).
        registry: The registry whose kinds' placements say which layers are first, body and last.
        options: :class:`LoRAConfig`'s fields but ``layer`` (``rank``, ``target_modules``, ``dropout``, ``base``).
    """
    from hp_core.specs.model import ModelSpec

    groups = []
    placements = [registry.layer_kind(group.kind).placement for group in model.layers]
    experts = [p == "body" and isinstance(g.config, MoEFields) for g, p in zip(model.layers, placements)]
    if options.get("base") == "mxfp4" and not any(experts):
        raise ConfigError("base", f"base: mxfp4 holds routed experts only and {model.name!r} has no routed-expert layer; "
                                  "use base: bf16 or nf4")
    for group, placement, moe in zip(model.layers, placements, experts):
        one = LayerGroup(group.kind, group.config, 1)
        if placement == "body":
            # mxfp4 changes only routed experts: a model's dense body layers (DeepSeek's first) are held in bf16.
            held = options if moe or options.get("base") != "mxfp4" else {**options, "base": "bf16"}
            groups.append(LayerGroup("lora", LoRAConfig(layer=one, **held), group.count))
        else:
            wrapper = "lora_first" if placement == "first" else "lora_last"
            groups.append(LayerGroup(wrapper, LoRAConfig(layer=one, target_modules=()), group.count))
    return ModelSpec(name=f"{model.name} (LoRA)", layers=tuple(groups), source=model.source)
