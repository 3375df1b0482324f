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
  :func:`_switch_of`): the attention's fp32 softmax output ``softmax``, its
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

__all__ = ["ATTENTIONS", "KIND_SWITCHES", "Measurement", "SavedTensor", "hp_census_sources", "measure_kind", "measure_model", "provide_torch"]

# ``hp census --attn`` values; the planner's ``flash`` is measured as ``sdpa``.
ATTENTIONS = ("eager", "sdpa")
# The switches of the built-in kinds this source measures (hp_plugins.dense, moe, mla).
_DENSE = ("attBMM", "headCast", "dropout", "softmax", "normOp", "gather", "ffAct")
KIND_SWITCHES = {"dense": _DENSE, "moe": _DENSE, "mla": (*_DENSE, "attUp"), "mla_moe": (*_DENSE, "attUp"), "embedding": (), "output": ()}
_INSTALL = "pip install 'hp-planner[census]' (torch and transformers)"
_DTYPE_NAME = "bfloat16"


@attrs.frozen
class SavedTensor:
    """One storage autograd saved, as the census saw it.

    Attributes:
        nbytes: The storage's bytes (the whole storage, a view keeps it alive).
        dtype: Its dtype, e.g. ``torch.float32``.
        shape: The shape of the first tensor saved on it.
        op: The aten op that produced it.
        module: The module that produced it (dotted path in the layer).
        saved_by: The module whose forward saved it.
        switch: The recompute switch that drops it, or ``None``.
    """

    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    op: str
    module: str
    saved_by: str
    switch: str | None


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


# ----------------------------------------------------------------------------- the tracker


class _Entry:
    __slots__ = ("key", "nbytes", "op", "module", "module_class", "flags", "cdata")

    def __init__(self, key: int, nbytes: int, op: str, module: str, module_class: str, flags: frozenset[str], cdata: int) -> None:
        self.key, self.nbytes, self.op, self.module, self.module_class, self.flags, self.cdata = (
            key, nbytes, op, module, module_class, flags, cdata
        )


def _make_tracker(torch: Any) -> Any:
    """A ``TorchDispatchMode`` that sees every op's outputs and knows which storages are alive."""
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Tracker(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.entries: dict[int, _Entry] = {}
            self.alive: dict[int, Any] = {}  # key -> StorageWeakRef
            self.by_cdata: dict[int, int] = {}
            self.events: list[tuple[int, int]] = []  # (+1 allocated / -1 freed, key)
            self.modules: list[tuple[str, str]] = [("", "")]
            self._next = 0

        def sweep(self) -> None:
            for key in [key for key, ref in self.alive.items() if ref.expired()]:
                del self.alive[key]
                entry = self.entries[key]
                if self.by_cdata.get(entry.cdata) == key:
                    del self.by_cdata[entry.cdata]
                self.events.append((-1, key))

        def entry(self, tensor: Any, op: str = "", flags: frozenset[str] = frozenset()) -> _Entry:
            storage = tensor.untyped_storage()
            cdata = storage._cdata
            key = self.by_cdata.get(cdata)
            if key is not None and not self.alive[key].expired():
                return self.entries[key]
            key, self._next = self._next, self._next + 1
            module, module_class = self.modules[-1]
            self.entries[key] = _Entry(key, storage.nbytes(), op, module, module_class, flags, cdata)
            self.alive[key] = StorageWeakRef(storage)
            self.by_cdata[cdata] = key
            self.events.append((1, key))
            return self.entries[key]

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.sweep()
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            inputs = [self.entry(t) for t in tree_flatten((args, kwargs or {}))[0] if isinstance(t, torch.Tensor)]
            flags: set[str] = set()
            module, module_class = self.modules[-1]
            if name in ("_softmax", "softmax", "_safe_softmax") and module_class.endswith("Attention"):
                flags.add("softmax")
            if name == "_to_copy" and any("softmax" in e.flags for e in inputs):
                flags.add("headCast")
            if module.endswith("act_fn") or module_class.endswith("Activation"):
                flags.add("act")
            if name == "mul" and any("act" in e.flags for e in inputs):
                flags.add("act")
            outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            for index, tensor in enumerate(outputs):
                extra = set(flags)
                if name == "native_dropout" and module_class.endswith("Attention"):
                    extra.add("dropout" if index == 1 else "attBMM")
                self.entry(tensor, name, frozenset(extra))
            return out

    return Tracker()


def _switch_of(entry: _Entry, saved_by: tuple[str, str], switches: tuple[str, ...], norm_modules: set[str]) -> str | None:
    """The switch that drops a saved storage, by what produced it and which module saved it."""
    found = None
    if "headCast" in entry.flags:
        found = "headCast"
    elif "softmax" in entry.flags:
        found = "softmax"
    elif "dropout" in entry.flags:
        found = "dropout"
    elif "attBMM" in entry.flags:
        found = "attBMM"
    elif entry.module in norm_modules or saved_by[0] in norm_modules:
        found = "normOp"
    elif "act" in entry.flags:
        found = "ffAct"
    elif saved_by[1].endswith("Attention") and "attUp" in switches:
        # MLA: what the attention's own matmuls save are the up-projected heads.
        found = "attUp"
    return found if found in switches else None


# ----------------------------------------------------------------------------- building layers


def _model_type(hf: Mapping[str, Any]) -> str:
    model_type = hf.get("model_type")
    if not isinstance(model_type, str):
        raise ConfigError("config.json $.model_type", "is missing; the torch census builds the model's transformers classes")
    return model_type


def _layer_indices(hf: Mapping[str, Any]) -> dict[str, int]:
    """Per body kind, the first model layer of that kind (the HF importer's reading of the config)."""
    from hp_plugins.importers.hf import model_from_hf_config

    model = model_from_hf_config(hf, name="census", source="census")
    found: dict[str, int] = {}
    index = 0
    for group in model.layers:
        if group.kind in ("embedding", "output", "mtp"):
            continue
        found.setdefault(group.kind, index)
        index += group.count
    return found


def _divide(value: int, tp: int, field: str) -> int:
    if value % tp:
        raise ConfigError("--tp", f"tp={tp} must divide {field}={value} to build one TP rank's layer")
    return value // tp


def _rank_config(hf: Mapping[str, Any], tp: int) -> dict[str, Any]:
    """The config of the layer one TP rank holds: heads and TP-split widths divided by *tp*."""
    cfg = {key: value for key, value in hf.items() if not key.startswith("_")}
    if tp == 1:
        return cfg
    model_type = _model_type(hf)
    heads = cfg["num_attention_heads"]
    if not model_type.startswith("deepseek"):
        cfg["head_dim"] = cfg.get("head_dim") or cfg["hidden_size"] // heads
    cfg["num_key_value_heads"] = _divide(cfg.get("num_key_value_heads") or heads, tp, "num_key_value_heads")
    cfg["num_attention_heads"] = _divide(heads, tp, "num_attention_heads")
    if model_type != "mixtral" and "intermediate_size" in cfg:  # Mixtral's is its routed experts' width
        cfg["intermediate_size"] = _divide(cfg["intermediate_size"], tp, "intermediate_size")
    if cfg.get("shared_expert_intermediate_size"):
        cfg["shared_expert_intermediate_size"] = _divide(cfg["shared_expert_intermediate_size"], tp, "shared_expert_intermediate_size")
    # The vocabulary-parallel head's shard, the vocabulary padded to a multiple of tp.
    cfg["vocab_size"] = -(-cfg["vocab_size"] // tp)
    return cfg


def _classes(transformers: Any, model_type: str) -> tuple[Any, dict[str, Any]]:
    module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    found = {}
    for suffix in ("DecoderLayer", "RotaryEmbedding", "RMSNorm"):
        names = sorted(n for n in dir(module) if n.endswith(suffix) and not n.startswith("_"))
        if not names:
            raise ConfigError("config.json $.model_type", f"transformers has no {suffix} class for model_type {model_type!r}")
        found[suffix] = getattr(module, min(names, key=len))
    return module, found


def _hf_config_object(transformers: Any, hf: Mapping[str, Any], attention: str) -> Any:
    model_type = _model_type(hf)
    config = transformers.AutoConfig.for_model(model_type, **{k: v for k, v in hf.items() if k != "model_type"})
    config._attn_implementation = attention
    config._experts_implementation = "grouped_mm"
    return config


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
    model_type = _model_type(hf)
    cfg = _rank_config(hf, tp)
    config = _hf_config_object(transformers, cfg, attention)
    _, classes = _classes(transformers, model_type)
    switches = KIND_SWITCHES.get(kind, ())
    index = None
    if kind not in ("embedding", "output"):
        indices = _layer_indices(hf)
        if kind not in indices:
            raise ConfigError("$.census", f"the model has no {kind!r} layer; its body kinds: {', '.join(indices)}")
        index = indices[kind]
    started = time.perf_counter()
    default_dtype = torch.get_default_dtype()
    tracker = _make_tracker(torch)
    try:
        torch.set_default_dtype(torch.bfloat16)
        with FakeTensorMode(allow_non_fake_inputs=False):
            measured = _run(torch, transformers, config, cfg, classes, kind, index, seq_len, switches, tracker, hf, tp)
    finally:
        torch.set_default_dtype(default_dtype)
    saved_bytes, per_op, peak, tensors, layer_name = measured
    return Measurement(
        kind=kind, tp=tp, seq_len=seq_len, saved_bytes=saved_bytes, per_op_bytes=per_op, peak_bytes=peak,
        tensors=tensors, layer=layer_name, layer_index=index, seconds=time.perf_counter() - started,
    )


def _run(torch: Any, transformers: Any, config: Any, cfg: Mapping[str, Any], classes: Mapping[str, Any], kind: str,
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

            def call() -> Any:
                logits = layer["lm_head"](layer["norm"](x))
                return ForCausalLMLoss(logits, labels, vocab_size=cfg["vocab_size"])
        else:
            layer = classes["DecoderLayer"](config, index)
            mlp = getattr(layer, "mlp", None)
            shared_experts = getattr(mlp, "shared_experts", None)
            if tp > 1 and shared_experts is not None and not cfg.get("shared_expert_intermediate_size"):
                # DeepSeek builds its shared experts n_shared_experts * moe_intermediate_size wide.
                width = hf["n_shared_experts"] * hf["moe_intermediate_size"]
                mlp.shared_experts = type(shared_experts)(config, intermediate_size=_divide(width, tp, "the shared experts' width"))
            rope = classes["RotaryEmbedding"](config)
            x = torch.empty(1, seq_len, hidden, requires_grad=True)
            positions = torch.arange(seq_len).unsqueeze(0)
            cos, sin = rope(x, positions)
            mask = torch.zeros(1, 1, seq_len, seq_len) if config._attn_implementation == "eager" else None
            shared += [positions, cos, sin] + ([mask] if mask is not None else [])
            for buffer in rope.buffers():
                shared.append(buffer)

            def call() -> Any:
                out = layer(x, attention_mask=mask, position_ids=positions, position_embeddings=(cos, sin))
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
        saved: dict[int, tuple[Any, tuple[str, str]]] = {}

        def pack(tensor: Any) -> Any:
            entry = tracker.entry(tensor)
            if entry.key not in excluded and entry.key not in saved:
                saved[entry.key] = (tensor, tracker.modules[-1])
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            out = call()
        tracker.sweep()
        excluded.add(tracker.entry(out).key)
        start = len(tracker.events)
        grad = torch.empty_like(out) if out.dim() else None
        out.backward(grad)
        tracker.sweep()
        for param in layer.parameters():
            if param.grad is not None:
                excluded.add(tracker.entry(param.grad).key)
        peak = _peak(tracker, start, excluded)
    tensors = []
    per_op = {name: 0 for name in switches}
    unsaved_norm_inputs = sum(e.nbytes for e in {e.key: e for e in norm_inputs}.values() if e.key not in saved)
    for key, (tensor, saved_by) in saved.items():
        entry = tracker.entries[key]
        switch = _switch_of(entry, saved_by, switches, norm_modules)
        if switch is not None:
            per_op[switch] += entry.nbytes
        tensors.append(SavedTensor(entry.nbytes, str(tensor.dtype), tuple(tensor.shape), entry.op, entry.module, saved_by[0], switch))
    if "normOp" in per_op:
        # Recomputing the norms keeps their inputs, which nothing kept before.
        per_op["normOp"] = max(0, per_op["normOp"] - unsaved_norm_inputs)
    tensors.sort(key=lambda t: (-t.nbytes, t.module, t.op))
    saved_bytes = sum(t.nbytes for t in tensors)
    return saved_bytes, {k: v for k, v in per_op.items() if v}, peak, tuple(tensors), type(layer).__name__ if kind not in ("output",) else "RMSNorm+Linear+ForCausalLMLoss"


def _peak(tracker: Any, start: int, excluded: set[int]) -> int:
    """The most bytes alive at once from event *start* on (the backward), excluded storages aside."""
    alive: set[int] = set()
    tracker.at_peak = set()
    for sign, key in tracker.events[:start]:
        if sign > 0:
            alive.add(key)
        else:
            alive.discard(key)
    current = sum(tracker.entries[k].nbytes for k in alive if k not in excluded)
    peak = current
    tracker.at_peak = {k for k in alive if k not in excluded}
    for sign, key in tracker.events[start:]:
        if key in excluded:
            continue
        if sign > 0:
            alive.add(key)
            current += tracker.entries[key].nbytes
            if current > peak:
                peak = current
                tracker.at_peak = {k for k in alive if k not in excluded}
        elif key in alive:
            alive.discard(key)
            current -= tracker.entries[key].nbytes
    return peak


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
    body = _layer_indices(hf)
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
