"""Census application: choose a source, ask it for records, price a layer by its record (docs/census.md).

A census source (:class:`~hp_core.types.CensusSource`, a plugin) states what a
layer kind keeps per token at micro-batch 1. This module is the planner's side
of that contract:

* :func:`resolve_source` picks the source a run names: a registered name
  (``formulas``, ``torch``, a third party's), or the path of a census file,
  read by the ``file`` source;
* :func:`request_records` asks it for the kinds of a model and checks what it
  returns;
* :func:`apply_record` turns a record into a layer's per-op activation terms,
  its backward working set and the settings it measured whole;
* :func:`kind_provenance` says which source priced each kind.

How a record prices one rank (``T`` tokens of a micro-batch on a CP rank,
``sp`` the sequence-parallel divisor, ``t`` the TP degree): a part
``(saved, saved_tp)`` keeps ``T * (saved / sp + saved_tp / t)`` bytes, rounded
to a whole byte. The record's per-op parts (``per_op``) become terms gated by
their switch; what no switch gates is one ungated term (``census.saved``); its
policies become settings measured whole (:attr:`LayerCost.measured`). The
working set is ``T * (working / sp + working_tp / t)``. Full recompute keeps
the layer's input, as the kind's formulas state it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

import attrs

from hp_core.documents import read_document
from hp_core.errors import ConfigError, HPError, PluginError, describe
from hp_core.models import load_model_config, model_from_config, model_from_preset, preset_config
from hp_core.costs import ActivationTerm, LayerContext, LayerCost
from hp_core.types import CensusBytes, CensusRecord, CensusRequest, CensusSource, LayerKind

__all__ = [
    "CENSUS_ATTENTIONS",
    "CensusRun",
    "FILE_SOURCE",
    "FILE_SUFFIXES",
    "apply_record",
    "formulas_precision",
    "formulas_records",
    "kind_provenance",
    "looks_like_path",
    "part_bytes",
    "policy_switches",
    "request_records",
    "resolve_source",
    "run_census",
    "two_point_split",
]

# The registered name of the source that reads census files.
FILE_SOURCE = "file"
# Suffixes a census file may have.
FILE_SUFFIXES = (".yaml", ".yml", ".json")


def looks_like_path(value: str) -> bool:
    """Whether a ``--census`` value names a file rather than a source: a census-file suffix or a folder in it."""
    return value.lower().endswith(FILE_SUFFIXES) or "/" in value or "\\" in value


def resolve_source(registry: Any, census: str, path: str = "$.census") -> CensusSource:
    """The census source a run names: a registered source, or the ``file`` source bound to a path.

    Args:
        registry: The frozen :class:`~hp_core.registry.Registry`.
        census: A source's name (``formulas``, ``torch``, ...) or a census
            file's path (``.yaml``, ``.yml``, ``.json``).
        path: How errors name the setting.

    Raises:
        ConfigError: Neither a registered source nor a readable file
            (one line, naming the setting).
    """
    names = [source.name for source in registry.census_sources]
    if census in names:
        return registry.census_source(census, path)
    if not looks_like_path(census) and not Path(census).is_file():
        raise ConfigError(path, f"unknown census source {census!r}; known: {', '.join(names) or 'none'}, or a census file's path")
    if not Path(census).is_file():
        raise ConfigError(path, f"census file {census} does not exist")
    if FILE_SOURCE not in names:
        raise ConfigError(path, f"{census} is a census file, but the {FILE_SOURCE!r} census source is not loaded")
    reader = registry.census_source(FILE_SOURCE, path)
    location = str(census)

    def provide(request: CensusRequest) -> Mapping[str, CensusRecord]:
        return reader.provide(attrs.evolve(request, location=location))

    return attrs.evolve(reader, provide=provide, description=f"census file {location}")


def _hf_config(model: Any, registry: Any) -> Mapping[str, Any] | None:
    """The model's Hugging Face config, where it is known: a preset's, or the ``config.json`` it was read from."""
    found = preset_config(model.name, registry)
    if found is not None:
        return found
    source = Path(str(getattr(model, "source", "")))
    if source.suffix == ".json" and source.is_file():
        try:
            data = read_document(source)
        except ConfigError:
            return None
        return data if isinstance(data, dict) else None
    return None


def request_records(
    source: CensusSource,
    model: Any,
    kinds: Iterable[LayerKind],
    seq_len: int,
    attention: str,
    *,
    registry: Any = None,
    tp: int = 1,
) -> dict[str, CensusRecord]:
    """Ask *source* for records of the model's kinds, and check them.

    Args:
        source: The chosen source.
        model: The :class:`~hp_core.specs.ModelSpec`.
        kinds: The model's layer kinds (repeats allowed).
        seq_len: Tokens per sequence of the run.
        attention: The run's attention implementation.
        registry: The registry, to find the model's Hugging Face config for
            a source that builds the real layers (``torch``).
        tp: The run's TP degree: a measuring source measures at 1 and at it.

    Returns:
        A record per kind the source measured, only for the model's kinds;
        every other kind is priced by its formulas.

    Raises:
        PluginError: The source raised or returned something else than records.
        ConfigError: A record names a recompute switch its kind does not have.
    """
    by_name = {kind.name: kind for kind in kinds}
    request = CensusRequest(
        model_name=model.name,
        kinds=tuple(sorted(by_name)),
        seq_len=seq_len,
        attention=attention,
        hf_config=_hf_config(model, registry) if registry is not None else None,
        tp_degrees=(1, tp) if tp > 1 else (1,),
    )
    try:
        found = source.provide(request)
        records = dict(found) if found is not None else {}
    except HPError:
        raise
    except (Exception, SystemExit) as exc:  # a plugin must not end the command
        raise PluginError(source.name, f"census source raised {type(exc).__name__}: {describe(exc)}") from exc
    kept: dict[str, CensusRecord] = {}
    for name, record in records.items():
        if not isinstance(record, CensusRecord):
            raise PluginError(source.name, f"census record for {name!r} must be a CensusRecord, got {type(record).__name__}")
        if name not in by_name:
            continue
        stray = sorted(set(record.per_op) - set(by_name[name].switches))
        if stray:
            raise ConfigError(
                f"census {source.name}: kinds.{name}.per_op",
                f"layer kind {name} has no recompute switch {stray}; it has {list(by_name[name].switches)}",
            )
        for policy in record.policies:
            policy_switches(policy, by_name[name], f"census {source.name}: kinds.{name}.policies.{policy}")
        kept[name] = record
    return kept


def policy_switches(policy: str, kind: LayerKind, path: str) -> frozenset[str]:
    """The switches a named policy recomputes: ``selective`` (the kind's own set) or switches joined by ``+``.

    Raises:
        ConfigError: A switch the kind does not have.
    """
    if policy == "selective":
        return kind.selective
    switches = frozenset(part.strip() for part in policy.split("+") if part.strip())
    unknown = sorted(switches - set(kind.switches))
    if not switches or unknown:
        raise ConfigError(
            path,
            f"policy {policy!r} must be 'selective' or switches of layer kind {kind.name} joined by '+' "
            f"({'+'.join(kind.switches)}); unknown: {unknown}",
        )
    return switches


def part_bytes(part: CensusBytes | CensusRecord, context: LayerContext) -> int:
    """Bytes one rank keeps of a record's part for one micro-batch: ``T * (saved / sp + saved_tp / tp)``."""
    return round(context.tokens * (part.saved / context.sp_degree + part.saved_tp / context.tp))


def apply_record(cost: LayerCost, record: CensusRecord, kind: LayerKind, context: LayerContext) -> LayerCost:
    """A layer's cost with its activations as a census measured them.

    Args:
        cost: The layer's cost by its formulas (parameters, buffers, FLOPs
            and the input full recompute keeps are kept from it).
        record: The kind's record.
        kind: The layer kind (its switches and its selective set).
        context: The run's context.

    Returns:
        The cost with one activation term per switch the record splits
        ``saved`` by (``census.<switch>``, gated by it), one ungated term for
        the rest (``census.saved``), the working set the record states, and
        the record's policies as settings measured whole. A record without a
        per-op split prices the plain layer and full recompute; its
        selective settings keep what the plain layer keeps.
    """
    total = part_bytes(record, context)
    terms = []
    for switch in kind.switches:
        part = record.per_op.get(switch)
        if part is None:
            continue
        nbytes = min(part_bytes(part, context), total - sum(t.bytes for t in terms))
        if nbytes > 0:
            terms.append(ActivationTerm(f"census.{switch}", nbytes, switch, part.saved_tp > 0))
    rest = total - sum(t.bytes for t in terms)
    terms.insert(0, ActivationTerm("census.saved", max(0, rest), None, record.saved_tp > 0))
    held = round(context.tokens * (record.working / context.sp_degree + record.working_tp / context.tp))
    measured = tuple(
        (policy_switches(name, kind, f"census: kinds.{kind.name}.policies.{name}"), part_bytes(part, context))
        for name, part in sorted(record.policies.items())
    )
    return attrs.evolve(cost, activations=tuple(terms), working_bytes=held, measured=measured)


def kind_provenance(source: CensusSource, kinds: Iterable[LayerKind], records: Mapping[str, CensusRecord]) -> dict[str, str]:
    """Per kind, what priced it: ``census:<source>`` where a record exists, else ``formulas``."""
    return {kind.name: (f"census:{source.name}" if kind.name in records else "formulas") for kind in kinds}


def two_point_split(values: Mapping[int, float]) -> tuple[float, float]:
    """``(not split, split)`` of a per-token quantity measured at TP degrees: ``m(t) = a + b / t``
    through ``t = 1`` and the largest degree measured, ``b`` clamped to ``[0, m(1)]``.

    Shared by the formulas census and the torch census source.
    """
    if len(values) == 1:
        return float(values[1]), 0.0
    top = max(values)
    split = (values[1] - values[top]) * top / (top - 1)
    split = min(max(split, 0.0), float(values[1]))
    return float(values[1]) - split, split


def _with_plain_sublayers(context: LayerContext, registry: Any) -> LayerContext:
    """The context, evaluating a nested layer (an MTP module's) by its formulas alone.

    A census measures one rank without sequence parallelism at every TP
    degree, which a kind's own layout checks may refuse (a MoE layer with
    ``tp > 1`` needs SP in a run): the bytes are priced all the same.
    """

    def sublayer(group: Any) -> LayerCost:
        return registry.layer_kind(group.kind).evaluate(group.config, full)

    full = attrs.evolve(context, sublayer=sublayer)
    return full


def formulas_records(
    model: Any,
    registry: Any,
    seq_len: int,
    attention: str,
    precision: Any,
    tp_degrees: tuple[int, ...] = (1,),
    traits: Iterable[str] = (),
) -> dict[str, CensusRecord]:
    """The records the kinds' formulas state, in a census's terms (``hp census --source formulas``).

    Each kind's first layer group is evaluated at micro-batch 1, one sequence
    of *seq_len* tokens, without context or sequence parallelism, at every
    TP degree asked; per token, ``saved``/``saved_tp`` solve
    ``kept(t) = saved + saved_tp / t`` through ``t = 1`` and the largest
    degree, and likewise the working set and each switch's part.

    Args:
        model: The :class:`~hp_core.specs.ModelSpec`.
        registry: The registry (its layer kinds).
        seq_len: Tokens per sequence.
        attention: ``eager`` or ``flash``.
        precision: The :class:`~hp_core.specs.PrecisionSpec` the formulas use.
        tp_degrees: TP degrees to evaluate at (1 always).
        traits: Runtime traits the kinds read (:data:`hp_core.costs.TRAITS`).
    """
    degrees = tuple(sorted({1, *tp_degrees}))
    records: dict[str, CensusRecord] = {}
    for group in model.layers:
        kind = registry.layer_kind(group.kind)
        if kind.name in records:
            continue
        costs = {}
        for tp in degrees:
            context = LayerContext(
                tp=tp, cp=1, sp=False, ep=1, etp=1, micro_batch_size=1, seq_len=seq_len,
                precision=precision, attention=attention, traits=frozenset(traits),
            )
            context = _with_plain_sublayers(context, registry)
            try:
                costs[tp] = kind.evaluate(group.config, context)
            except HPError:
                raise
            except (Exception, SystemExit) as exc:  # a plugin must not end the command
                raise PluginError(kind.name, f"evaluator raised {type(exc).__name__}: {describe(exc)}") from exc
        saved = two_point_split({tp: cost.kept_bytes / seq_len for tp, cost in costs.items()})
        working = two_point_split({tp: cost.working_bytes / seq_len for tp, cost in costs.items()})
        per_op = {}
        for switch in kind.switches:
            part = two_point_split({tp: (cost.kept_bytes - cost.kept_under(frozenset({switch}))) / seq_len for tp, cost in costs.items()})
            if part[0] or part[1]:
                per_op[switch] = CensusBytes(min(part[0], saved[0]), min(part[1], saved[1]))
        provenance = {
            "source": "formulas: the layer kinds' analytic terms",
            "attention": attention,
            "seq_len": seq_len,
            "micro_batch_size": 1,
            "tp_degrees": list(degrees),
        }
        records[kind.name] = CensusRecord(saved[0], saved[1], working[0], working[1], provenance, per_op)
    return records


# ``hp census --attn``: the torch source's names; the formulas price ``sdpa`` as ``flash``.
CENSUS_ATTENTIONS = {"eager": "eager", "sdpa": "flash"}


@attrs.frozen
class CensusRun:
    """What ``hp census`` measured (or computed), beside what the formulas state.

    Attributes:
        model: The model's name.
        source: The source that produced :attr:`records`.
        seq_len: Tokens per sequence.
        attention: ``eager`` or ``sdpa`` (the formulas price ``sdpa`` as ``flash``).
        tp_degrees: The TP degrees measured at.
        records: Per kind, the source's record.
        formulas: Per kind, the formulas' record, configured as the
            measured implementation runs: Hugging Face's eager attention keeps
            its softmax in fp32 (``PrecisionSpec(softmax_bytes=4)``).
        seconds: Wall time of the source.
    """

    model: str
    source: str
    seq_len: int
    attention: str
    tp_degrees: tuple[int, ...]
    records: Mapping[str, CensusRecord]
    formulas: Mapping[str, CensusRecord]
    seconds: float


def formulas_precision(attention: str) -> Any:
    """The precision the formulas take to price an implementation as the census runs it.

    Hugging Face's ``eager_attention_forward`` computes the softmax in fp32
    (``softmax(..., dtype=torch.float32)``), keeps that output for the
    softmax's backward and casts it to bf16 for the value matmul, which keeps
    the cast: ``softmax_bytes=4`` (the cast is the ``headCast`` term).
    """
    from hp_core.specs import PrecisionSpec

    return PrecisionSpec(softmax_bytes=4) if attention == "eager" else PrecisionSpec()


def run_census(registry: Any, model_ref: Any, source: str, seq_len: int, attention: str, tp: int) -> CensusRun:
    """Measure (or compute) the records of a model's kinds, and the formulas' beside them.

    Args:
        registry: The registry.
        model_ref: A preset's name, a Hugging Face ``config.json`` (or its folder), or a
            :class:`~hp_core.specs.ModelSpec` (a config file's model; a measuring source
            needs its Hugging Face config: a preset's or the ``config.json`` it was read from).
        source: ``formulas``, ``torch`` or another registered source.
        seq_len: Tokens per sequence.
        attention: ``eager`` or ``sdpa``.
        tp: The TP degree to measure at beside 1 (1: no split).

    Raises:
        ConfigError: An unknown model, source or attention (one line).
    """
    import time

    if attention not in CENSUS_ATTENTIONS:
        raise ConfigError("--attn", f"must be one of {', '.join(CENSUS_ATTENTIONS)}, got {attention!r}")
    if not isinstance(model_ref, str):
        model, hf = model_ref, _hf_config(model_ref, registry)
    elif any(preset.name == model_ref for preset in registry.models):
        hf = registry.model(model_ref).hf_config
        model = model_from_preset(model_ref, registry)
    else:
        hf, where = load_model_config(model_ref)
        model = model_from_config(hf, registry, name=hf.get("_name_or_path") or model_ref, source=where, where=where)
    degrees = (1, tp) if tp > 1 else (1,)
    formulas_attention = CENSUS_ATTENTIONS[attention]
    formulas = formulas_records(model, registry, seq_len, formulas_attention, formulas_precision(attention), degrees)
    started = time.perf_counter()
    if source == "formulas":
        records: Mapping[str, CensusRecord] = formulas
    else:
        chosen = registry.census_source(source, "--source")
        kinds = tuple(sorted({group.kind for group in model.layers}))
        request = CensusRequest(model.name, kinds, seq_len, attention, hf_config=hf, tp_degrees=degrees)
        try:
            found = chosen.provide(request)
            records = dict(found) if found is not None else {}
        except HPError:
            raise
        except (Exception, SystemExit) as exc:  # a plugin must not end the command
            raise PluginError(chosen.name, f"census source raised {type(exc).__name__}: {describe(exc)}") from exc
        for name, record in records.items():
            if not isinstance(record, CensusRecord):
                raise PluginError(chosen.name, f"census record for {name!r} must be a CensusRecord, got {type(record).__name__}")
    return CensusRun(model.name, source, seq_len, attention, degrees, dict(records), formulas, time.perf_counter() - started)
