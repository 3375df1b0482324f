"""The ``torch`` census source: measure real Hugging Face layers under ``FakeTensorMode``.

Optional: needs the ``census`` extra (``pip install 'hp-planner[census]'``:
torch and transformers). Nothing here imports torch until a census runs, so
the rest of hp-planner never does.

For each layer kind of a model it builds one real layer from the model's
Hugging Face config with transformers' own classes (``LlamaDecoderLayer``,
``MixtralDecoderLayer``, ``DeepseekV3DecoderLayer``, ...; the embedding is
``nn.Embedding``, the output head the model's final RMSNorm, an ``nn.Linear``
LM head and transformers' ``ForCausalLMLoss``), in bf16, under
``torch._subclasses.fake_tensor.FakeTensorMode``: tensors have shapes, dtypes
and storages but no memory, so a full-size DeepSeek-V3 layer runs on a laptop.
It runs forward on one micro-batch of one sequence and backward, and counts:

* **saved**: what autograd saves for backward
  (``torch.autograd.graph.saved_tensors_hooks``), deduplicated by storage
  (a view keeps its whole storage alive; the key is the storage's
  ``untyped_storage()._cdata`` while a ``StorageWeakRef`` says it lives, which
  works under fake mode where ``data_ptr`` is 0), without the parameters and
  without what every layer shares (the RoPE cos/sin tables, the causal mask,
  the position ids) or what the layer is handed (its input);
* **working**: the most the backward holds at once beyond what was saved: a
  ``TorchDispatchMode`` sees every op's outputs, a ``StorageWeakRef`` per
  storage says when it is freed, and the peak of the live bytes during
  backward (parameters, shared tensors, the layer's input and output and the
  parameters' gradients excluded: a trainer accumulates those in its gradient
  buffer, counted as static memory) less the saved bytes;
* **per op**: each saved storage is attributed to the recompute switch that
  would drop it, by the op that produced it and the module that saved it (see
  :func:`~hp_plugins.census.torch_tracing.switch_of`): the attention's fp32 softmax output ``softmax``, its
  cast to bf16 ``headCast``, a dropout's mask ``dropout`` and output
  ``attBMM``, whatever a norm module saves or produces ``normOp`` (less the
  norm inputs a recompute would have to keep and nothing else keeps), the
  activation's output and the gated product ``ffAct``, and for MLA the
  up-projected heads the attention matmuls save ``attUp``.

Tensor parallelism is measured, not assumed: at each degree asked the layer
is built as one TP rank holds it (attention heads, KV heads, the dense MLP's
and the shared experts' width and the LM head's vocabulary divided by the
degree; routed experts whole, as expert TP is separate), and the record's
``saved``/``saved_tp`` split solves ``m(t) = saved + saved_tp / t`` from the
measurements at ``t = 1`` and at the degree asked. No collective runs, so a
TP/SP all-gather's output (``gather``) is never seen.

Mixture of experts: the experts run transformers' ``grouped_mm``
implementation (its default where the device supports it), which processes all
``k`` token-expert pairs of every token in one grouped GEMM: shapes, and so
bytes, do not depend on the routing, and every routing, a balanced one
included, gives the same record on one rank. (The ``eager`` loop over experts
needs the routing's data, which fake tensors do not have.)

Attention: ``eager`` is transformers' ``eager_attention_forward`` (scores in
bf16, softmax in fp32, cast back to bf16, key and value repeated to every
query head); ``sdpa`` is ``torch.nn.functional.scaled_dot_product_attention``
on CPU, whose flash kernel saves q, k, v, the output and fp32 log-sum-exp
statistics. The DeepSeek-V3 MTP module has no transformers class, so it has
no record (its formulas price it).

This module is the source and its records; building one TP rank's layer and
running it is :mod:`hp_plugins.census.torch_layers`, the tracker that watches
it :mod:`hp_plugins.census.torch_tracing`.
"""

from __future__ import annotations

import importlib
import time
from typing import Any, Mapping

import attrs

from hp_core.engine.census import two_point_split
from hp_core.errors import ConfigError
from hp_core.markers import hookimpl
from hp_core.types import CensusBytes, CensusRecord, CensusRequest, CensusSource
from hp_plugins.census.torch_layers import (
    hf_config_object,
    hf_model_type,
    layer_classes,
    layer_indices,
    rank_config,
    run_layer,
)
from hp_plugins.census.torch_tracing import SavedTensor, make_tracker

__all__ = ["ATTENTIONS", "KIND_SWITCHES", "Measurement", "SavedTensor", "hp_census_sources", "measure_kind", "measure_model", "provide_torch"]

# ``hp census --attn`` values; the planner's ``flash`` is measured as ``sdpa``.
ATTENTIONS = ("eager", "sdpa")
# The switches of the built-in kinds this source measures (hp_plugins.kinds.dense, moe, mla).
_DENSE = ("attBMM", "headCast", "dropout", "softmax", "normOp", "gather", "ffAct")
KIND_SWITCHES = {"dense": _DENSE, "moe": _DENSE, "mla": (*_DENSE, "attUp"), "mla_moe": (*_DENSE, "attUp"), "embedding": (), "output": (),
                 "mamba2": ("normOp", "gather"), "attention": _DENSE[:-1], "mlp": ("normOp", "gather", "ffAct"),
                 "moe_only": ("normOp", "gather", "ffAct"),
                 "gdn": ("normOp", "gather", "ffAct", "attUp"), "gdn_moe": ("normOp", "gather", "ffAct", "attUp"),
                 "gated_attention": _DENSE, "gated_attention_moe": _DENSE}
_INSTALL = "pip install 'hp-planner[census]' (torch and transformers)"
_DTYPE_NAME = "bfloat16"


@attrs.frozen
class Measurement:
    """One layer kind measured at one TP degree, for one sequence.

    Attributes:
        kind: The layer kind.
        tp: The TP degree the layer was built for.
        seq_len: Tokens of the sequence.
        saved_bytes: Bytes autograd saved (deduplicated by storage).
        per_op_bytes: Per switch, the part of ``saved_bytes`` it drops.
        peak_bytes: The most the backward held at once.
        tensors: Every saved storage, largest first.
        layer: The transformers class measured.
        layer_index: The model layer it was built as.
        seconds: Wall time of the build, forward and backward.
    """

    kind: str
    tp: int
    seq_len: int
    saved_bytes: int
    per_op_bytes: Mapping[str, int]
    peak_bytes: int
    tensors: tuple[SavedTensor, ...]
    layer: str
    layer_index: int | None
    seconds: float

    @property
    def working_bytes(self) -> int:
        """What the backward holds at its peak beyond what was saved."""
        return max(0, self.peak_bytes - self.saved_bytes)


def _imports() -> tuple[Any, Any]:
    try:
        torch = importlib.import_module("torch")
        transformers = importlib.import_module("transformers")
    except ImportError as exc:
        raise ConfigError("$.census", f"the torch census needs torch and transformers ({exc.name} is missing): {_INSTALL}") from None
    return torch, transformers


def _versions(torch: Any, transformers: Any) -> dict[str, str]:
    return {"torch": str(torch.__version__), "transformers": str(transformers.__version__)}


def measure_kind(hf: Mapping[str, Any], kind: str, seq_len: int, attention: str = "eager", tp: int = 1) -> Measurement:
    """Measure one layer of *kind* of the model *hf* at one TP degree.

    Args:
        hf: The model's Hugging Face ``config.json`` mapping.
        kind: ``embedding``, ``output`` or a body kind the config has
            (``dense``, ``moe``, ``mla``, ``mla_moe``).
        seq_len: Tokens of the one sequence of the micro-batch.
        attention: ``eager`` or ``sdpa``.
        tp: Build the layer as one rank of this TP degree holds it.

    Raises:
        ConfigError: torch or transformers is missing, the config has no such
            kind, or *tp* does not divide what it splits.
    """
    torch, transformers = _imports()
    from torch._subclasses.fake_tensor import FakeTensorMode

    if attention not in ATTENTIONS:
        raise ConfigError("--attn", f"the torch census runs attention {' or '.join(ATTENTIONS)}, not {attention!r}")
    model_type = hf_model_type(hf)
    cfg = rank_config(hf, tp)
    config = hf_config_object(transformers, cfg, attention)
    _, classes = layer_classes(transformers, model_type)
    switches = KIND_SWITCHES.get(kind, ())
    index = None
    if kind not in ("embedding", "output"):
        indices = layer_indices(hf)
        if kind not in indices:
            raise ConfigError("$.census", f"the model has no {kind!r} layer; its body kinds: {', '.join(indices)}")
        index = indices[kind]
    started = time.perf_counter()
    default_dtype = torch.get_default_dtype()
    tracker = make_tracker(torch)
    try:
        torch.set_default_dtype(torch.bfloat16)
        with FakeTensorMode(allow_non_fake_inputs=False):
            measured = run_layer(torch, transformers, config, cfg, classes, kind, index, seq_len, switches, tracker, hf, tp)
    finally:
        torch.set_default_dtype(default_dtype)
    saved_bytes, per_op, peak, tensors, layer_name = measured
    return Measurement(
        kind=kind, tp=tp, seq_len=seq_len, saved_bytes=saved_bytes, per_op_bytes=per_op, peak_bytes=peak,
        tensors=tensors, layer=layer_name, layer_index=index, seconds=time.perf_counter() - started,
    )


# ----------------------------------------------------------------------------- records


def _record(measurements: Mapping[int, Measurement], attention: str, versions: Mapping[str, str]) -> CensusRecord:
    first = measurements[1]
    tokens = first.seq_len
    saved, saved_tp = two_point_split({tp: m.saved_bytes / tokens for tp, m in measurements.items()})
    working, working_tp = two_point_split({tp: m.working_bytes / tokens for tp, m in measurements.items()})
    per_op = {}
    for switch in first.per_op_bytes:
        a, b = two_point_split({tp: m.per_op_bytes.get(switch, 0) / tokens for tp, m in measurements.items()})
        per_op[switch] = CensusBytes(min(a, saved), min(b, saved_tp))
    provenance = {
        "source": "torch census: transformers layer under FakeTensorMode, forward and backward",
        **versions,
        "layer": first.layer,
        "layer_index": first.layer_index,
        "attention": attention,
        "seq_len": first.seq_len,
        "micro_batch_size": 1,
        "dtype": _DTYPE_NAME,
        "tp_degrees": sorted(measurements),
        "experts_implementation": "grouped_mm",
    }
    return CensusRecord(saved, saved_tp, working, working_tp, provenance, per_op)


def measure_model(
    hf: Mapping[str, Any], kinds: tuple[str, ...] | list[str], seq_len: int, attention: str = "eager", tp_degrees: tuple[int, ...] = (1, 2)
) -> dict[str, CensusRecord]:
    """Records for the kinds of *hf* this source can build (others are left to the formulas).

    Args:
        hf: The model's Hugging Face ``config.json`` mapping.
        kinds: The layer kinds wanted.
        seq_len: Tokens per sequence.
        attention: ``eager`` or ``sdpa``.
        tp_degrees: The TP degrees to measure at; 1 is always measured.
    """
    torch, transformers = _imports()
    degrees = tuple(sorted({1, *tp_degrees}))
    versions = _versions(torch, transformers)
    body = layer_indices(hf)
    records = {}
    for kind in kinds:
        if kind not in ("embedding", "output") and kind not in body:
            continue
        if kind not in KIND_SWITCHES:
            continue
        measurements = {tp: measure_kind(hf, kind, seq_len, attention, tp) for tp in degrees}
        records[kind] = _record(measurements, attention, versions)
    return records


def provide_torch(request: CensusRequest) -> Mapping[str, CensusRecord]:
    """The records of the request's kinds, measured (``flash`` runs as ``sdpa``)."""
    if request.hf_config is None:
        raise ConfigError(
            "$.census",
            f"the torch census builds {request.model_name}'s transformers layers from its config.json; "
            "use a preset or --model CONFIG.json",
        )
    attention = "eager" if request.attention == "eager" else "sdpa"
    return measure_model(request.hf_config, request.kinds, request.seq_len, attention, request.tp_degrees)


@hookimpl
def hp_census_sources():
    yield CensusSource(
        name="torch",
        provide=provide_torch,
        description="measures the transformers layers under FakeTensorMode (optional extra 'census': torch, transformers)",
    )