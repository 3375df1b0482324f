"""An MLP-only layer kind (``mlp_block``) and a model format (``model_type: mlp_stack``) for hp-planner.

The smallest third-party plugin whose whole cost is stated through the public
contract: its memory from the kit's MLP block, its work
(:class:`hp_core.costs.LayerWork`) from the kit too, so at ``tp > 1`` its
step time carries the all-gather and reduce-scatter (or all-reduce) its
tensor-parallel MLP issues, priced on the hardware's links.

A ``config.json`` with ``model_type: mlp_stack`` (``hidden_size``,
``intermediate_size``, ``num_hidden_layers``, ``vocab_size``) becomes an
embedding, ``num_hidden_layers`` MLP blocks and an output head::

    hp estimate --model my-mlp/config.json --tp 2 --sp --hardware h100-sxm
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from hp_core.costs import LayerContext, LayerCost
from hp_core.errors import ConfigError
from hp_core.markers import hookimpl
from hp_core.specs import LayerGroup, ModelSpec
from hp_core.types import LayerKind, ModelFormat
from hp_core.validators import positive_int
from hp_plugins.kinds.embedding import EmbeddingConfig
from hp_plugins.kinds.output import OutputConfig
from hp_plugins.kit import NORMS, LayerBuilder, MLPFields, mlp, validate_mlp

__all__ = ["MLPBlockConfig", "evaluate_mlp_block", "hp_layer_kinds", "hp_model_formats", "model_from_mlp_stack"]


@attrs.frozen(kw_only=True)
class MLPBlockConfig(MLPFields):
    """A pre-norm residual MLP block: the fields of :class:`hp_plugins.kit.MLPFields` and the width."""

    hidden_size: int = attrs.field(validator=positive_int)
    norm: str = attrs.field(default="rmsnorm", validator=attrs.validators.in_(NORMS))


def evaluate_mlp_block(c: MLPBlockConfig, x: LayerContext) -> LayerCost:
    """One block on one rank: the kit's MLP (parameters, kept tensors, FLOPs and its TP collectives)."""
    b = LayerBuilder(x, c.hidden_size)
    mlp(b, c, c.norm, 0.0)
    return b.build()


def _validate(c: MLPBlockConfig, x: LayerContext) -> None:
    validate_mlp(c, x)


def model_from_mlp_stack(config: Mapping[str, Any], *, name: str, source: str, where: str = "config.json") -> ModelSpec:
    """The layer stack of an ``mlp_stack`` config: embedding, ``num_hidden_layers`` blocks, output head."""
    fields = {}
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size"):
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where} $.{key}", f"must be a positive integer, got {value!r}")
        fields[key] = value
    h, vocab = fields["hidden_size"], fields["vocab_size"]
    block = MLPBlockConfig(hidden_size=h, intermediate_size=fields["intermediate_size"])
    return ModelSpec(name=name, source=source, layers=(
        LayerGroup("embedding", EmbeddingConfig(vocab_size=vocab, hidden_size=h)),
        LayerGroup("mlp_block", block, fields["num_hidden_layers"]),
        LayerGroup("output", OutputConfig(vocab_size=vocab, hidden_size=h)),
    ))


@hookimpl
def hp_layer_kinds():
    yield LayerKind(
        name="mlp_block", config_type=MLPBlockConfig, evaluate=evaluate_mlp_block, validate=_validate,
        switches=("normOp", "gather", "ffAct"), selective=frozenset({"ffAct"}),
        description="a pre-norm residual MLP block (hp-mlp-block example)",
    )


@hookimpl
def hp_model_formats():
    yield ModelFormat(name="mlp-stack", build=model_from_mlp_stack, model_types=("mlp_stack",),
                      description="config.json of model_type mlp_stack: embedding, MLP blocks, head")
