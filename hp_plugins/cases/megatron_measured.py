"""Measured Megatron-LM runs in the layout of ``megatron_measured.json`` (SimuMax's B200 release, v1.2).

Each case states the model (``training_config.model_hf``), the layout
(``parallelism``, ``batch``), the optimizer, the recompute flags and the
measured per-stage ``torch.cuda.max_memory_allocated`` and step times. This
reader turns one into a :class:`~hp_core.io.validate.MeasuredCase` priced by the
``megatron`` runtime, mapping every field by name:

* the model: an HF-style config from ``model_hf`` (``family`` ``llama3`` ->
  ``llama``, ``deepseek_v2`` -> ``deepseek_v2``), ``num_hidden_layers`` as run,
  and the vocabulary the run's tokenizer reports: Megatron's NullTokenizer adds
  one EOD token to ``--vocab-size`` (``megatron/training/tokenizer/tokenizer.py``),
  before the runtime pads to ``128 * tp``;
* MoE: ``moe.expert_capacity_factor`` and ``moe.pad_expert_input_to_capacity``;
  group-limited routing from ``moe.router_num_groups`` and ``moe.router_group_topk``
  (``--moe-router-num-groups``, ``--moe-router-group-topk``; limited only where the
  latter is stated, as Megatron-Core);
* the layout: the degrees, ``sequence_parallel_effective``, the micro-batch
  size, the global batch the memory was measured at, the sequence length;
* ``distributed_optimizer`` -> ZeRO-1, else 0; a run with effective activation
  recompute is refused (the cases ran none).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import attrs

from hp_core.bounds import MAX_DEVICES, MAX_MEMORY_BYTES, short_repr
from hp_core.errors import ConfigError, SpecError
from hp_core.markers import hookimpl
from hp_core.specs import ParallelSpec
from hp_core.types import CaseFormat
from hp_core.validators import bounded_int, optional, positive_int, positive_number
from hp_plugins.models.hf import model_from_hf_config

__all__ = ["GIB", "hp_case_formats", "is_megatron_measured", "read_megatron_cases", "read_megatron_case"]

GIB = 2**30
_FAMILIES = {"llama3": "llama", "llama": "llama", "deepseek_v2": "deepseek_v2", "deepseek_v3": "deepseek_v3"}
_STAGE = re.compile(r"^stage(\d+)_")
_degree = bounded_int(MAX_DEVICES, what="MAX_DEVICES")


def is_megatron_measured(document: Any) -> bool:
    """Whether *document* is in the ``megatron_measured.json`` layout."""
    cases = document.get("cases") if isinstance(document, dict) else None
    return isinstance(cases, list) and bool(cases) and all(
        isinstance(c, dict) and "training_config" in c and "measured" in c for c in cases
    )


# The part of a case the reader reads, as a schema: every field structured through the
# converter (hp_core.io.convert.structure), so a missing key or a wrong type is refused
# with its path ($.cases[3].training_config.batch.seq_length). Keys the reader does not
# read (notes, per-rank figures) are allowed: the file is read as published.


@attrs.frozen(kw_only=True)
class _Parallelism:
    tensor_model_parallel_size: int = attrs.field(validator=_degree)
    pipeline_model_parallel_size: int = attrs.field(validator=_degree)
    data_parallel_size: int = attrs.field(validator=_degree)
    virtual_pipeline_size: int | None = attrs.field(default=None, validator=optional(_degree))
    context_parallel_size: int | None = attrs.field(default=None, validator=optional(_degree))
    cp_comm_type: str | None = None
    expert_model_parallel_size: int | None = attrs.field(default=None, validator=optional(_degree))
    expert_tensor_parallel_size: int | None = attrs.field(default=None, validator=optional(_degree))
    sequence_parallel_effective: bool = False


@attrs.frozen(kw_only=True)
class _Batch:
    micro_batch_size: int = attrs.field(validator=positive_int)
    memory_measured_at_global_batch: int = attrs.field(validator=positive_int)
    seq_length: int = attrs.field(validator=positive_int)


@attrs.frozen(kw_only=True)
class _Optimizer:
    distributed_optimizer: bool  # stated by every case: ZeRO-1 or none (absent is not "none")


@attrs.frozen(kw_only=True)
class _Recompute:
    activation_recompute: str = "none"


@attrs.frozen(kw_only=True)
class _OtherFlags:
    tokenizer: str | None = None


@attrs.frozen(kw_only=True)
class _Moe:
    expert_capacity_factor: float | None = attrs.field(default=None, validator=optional(positive_number))
    pad_expert_input_to_capacity: bool = False
    router_num_groups: int | None = attrs.field(default=None, validator=optional(positive_int))
    router_group_topk: int | None = attrs.field(default=None, validator=optional(positive_int))


@attrs.frozen(kw_only=True)
class _TrainingConfig:
    model_hf: dict[str, Any]
    parallelism: _Parallelism
    batch: _Batch
    optimizer: _Optimizer
    recompute: _Recompute | None = None
    other_flags: _OtherFlags | None = None
    moe: _Moe | None = None


@attrs.frozen(kw_only=True)
class _StagePeak:
    max_allocated_gib: float = attrs.field(validator=positive_number)


@attrs.frozen(kw_only=True)
class _TimingRow:
    micro_batch_count: int = attrs.field(validator=positive_int)
    global_batch_size: int = attrs.field(validator=positive_int)
    real_ms: float = attrs.field(validator=positive_number)


@attrs.frozen(kw_only=True)
class _MeasuredRecord:
    per_stage_peak_derived: dict[str, _StagePeak]
    timing_by_mbc: tuple[_TimingRow, ...] = ()
    definition: str = "measured"


@attrs.frozen(kw_only=True)
class _Case:
    case_id: str
    training_config: _TrainingConfig
    measured: _MeasuredRecord


def _hf_config(model_hf: Mapping[str, Any], tokenizer: str | None, where: str) -> dict[str, Any]:
    family = str(model_hf.get("family", "")).split(" ")[0]
    if family not in _FAMILIES:
        raise ConfigError(f"{where}.model_hf.family", f"unsupported model family {short_repr(model_hf.get('family'))}")
    config = {key: value for key, value in model_hf.items() if not key.endswith("_note") and value is not None}
    config["model_type"] = _FAMILIES[family]
    config["hidden_act"] = "silu"
    # Megatron's NullTokenizer reports --vocab-size + 1 (its EOD token).
    if tokenizer == "NullTokenizer":
        vocab = model_hf.get("vocab_size")
        if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1:
            raise ConfigError(f"{where}.model_hf.vocab_size", f"expected a positive integer, got {short_repr(vocab)}")
        config["vocab_size"] = vocab + 1
    if isinstance(config.get("moe_layer_freq"), str):
        config["moe_layer_freq"] = 1  # the first_k_dense_replace dense layers, then MoE in every layer
    return config


def _stage_peaks(peaks: Mapping[str, _StagePeak], where: str) -> tuple[int, ...]:
    """The peaks by stage number (keys ``stage<N>_...``): every stage from 0, each once, within the bounds."""
    stages: dict[int, float] = {}
    for key, value in peaks.items():
        match = _STAGE.match(key)
        if match is None or len(match.group(1)) > 7:
            raise ConfigError(f"{where}.{key}", "a stage's key reads stage<N>_... (stage0_ranks_0-3)")
        stages[int(match.group(1))] = value.max_allocated_gib
    if sorted(stages) != list(range(len(stages))) or not stages:
        raise ConfigError(where, f"states stages {sorted(stages)}; state every stage from 0 once")
    for number, gib in stages.items():
        if gib * GIB > MAX_MEMORY_BYTES:
            raise ConfigError(f"{where}.stage{number}.max_allocated_gib",
                              f"must be at most {MAX_MEMORY_BYTES // GIB:,} GiB, got {short_repr(gib)}")
    return tuple(round(stages[n] * GIB) for n in range(len(stages)))


def read_megatron_case(case: Mapping[str, Any], index: int, registry: Any = None):
    """One case of the layout as a :class:`~hp_core.io.validate.MeasuredCase`.

    Raises:
        ConfigError: A key the reader needs is missing or of the wrong type (named with its path).
    """
    from hp_core.io.convert import structure
    from hp_core.io.validate import MeasuredCase, MeasuredStep

    where = f"$.cases[{index}]"
    record = structure(case, _Case, registry, root=where, forbid_extra_keys=False)
    config = record.training_config
    par, batch = config.parallelism, config.batch
    recompute = config.recompute.activation_recompute if config.recompute is not None else "none"
    if not recompute.startswith("none"):
        raise ConfigError(f"{where}.training_config.recompute", f"activation recompute {short_repr(recompute)} is not read yet")
    # The layout states no precision recipe and the reader prices the bf16 runs it was written for: a case whose
    # launch line or flags state FP8 or FP4 is refused, not priced as bf16 (hp-cases/2 states a recipe).
    argv = case.get("megatron_argv") if isinstance(case.get("megatron_argv"), list) else []
    stated = [(f"{where}.megatron_argv", str(w)) for w in argv
              if str(w).split("=")[0] in ("--fp8-format", "--fp4-format", "--fp8-hybrid", "--fp8-e4m3")]
    for block in ("precision", "other_flags"):  # the layout's own precision record, and the launch's other flags
        fields = case["training_config"].get(block)
        stated += [(f"{where}.training_config.{block}.{k}", f"{k}: {fields[k]}") for k in ("fp8", "fp4", "fp8_format",
                   "fp4_format") if isinstance(fields, dict) and fields.get(k)]
    if stated:
        raise ConfigError(stated[0][0], f"states a low-precision run ({', '.join(w for _, w in stated)}), which this "
                          "layout's reader prices as bf16; state the case as hp-cases/2 with its precision.recipe")
    tokenizer = config.other_flags.tokenizer if config.other_flags is not None else None
    name = record.case_id
    model = model_from_hf_config(
        _hf_config(config.model_hf, tokenizer, f"{where}.training_config"), name=name,
        source=f"megatron_measured case {name}", where=f"{where}.training_config.model_hf",
    )
    moe = config.moe
    if moe is not None:
        capacity = moe.expert_capacity_factor
        pad = moe.pad_expert_input_to_capacity and capacity is not None
        changes: dict[str, Any] = {"capacity_factor": float(capacity) if capacity else None, "pad_to_capacity": pad}
        if moe.router_group_topk:
            # Megatron-Core limits the groups only when --moe-router-group-topk is set, and then requires the number.
            if moe.router_num_groups is None:
                raise ConfigError(f"{where}.training_config.moe.router_num_groups", "router_group_topk needs it; state it")
            changes.update(router_num_groups=moe.router_num_groups, router_group_topk=moe.router_group_topk)
        try:
            layers = tuple(
                attrs.evolve(g, config=attrs.evolve(g.config, **changes)) if g.kind in ("moe", "mla_moe") else g
                for g in model.layers
            )
        except ValueError as exc:
            raise ConfigError(f"{where}.training_config.moe", str(exc)) from None
        model = attrs.evolve(model, layers=layers)
    tp = par.tensor_model_parallel_size
    try:
        parallel = ParallelSpec(
            dp=par.data_parallel_size,
            tp=tp,
            pp=par.pipeline_model_parallel_size,
            vpp=par.virtual_pipeline_size or 1,
            cp=par.context_parallel_size or 1,
            cp_kind="a2a" if par.cp_comm_type == "a2a" else "p2p",
            ep=par.expert_model_parallel_size or 1,
            etp=par.expert_tensor_parallel_size or tp if moe is not None else 1,
            sp=par.sequence_parallel_effective,
            zero=1 if config.optimizer.distributed_optimizer else 0,
            micro_batch_size=batch.micro_batch_size,
            global_batch_size=batch.memory_measured_at_global_batch,
            seq_len=batch.seq_length,
        )
    except SpecError as exc:
        raise ConfigError(f"{where}.training_config", exc.message) from None
    measured = record.measured
    stage_peaks = _stage_peaks(measured.per_stage_peak_derived, f"{where}.measured.per_stage_peak_derived")
    steps = tuple(
        MeasuredStep(micro_batches=row.micro_batch_count, global_batch_size=row.global_batch_size, seconds=row.real_ms / 1000)
        for row in measured.timing_by_mbc
    )
    return MeasuredCase(
        name=name,
        model=model,
        parallel=parallel,
        runtime="megatron",
        stage_peak_bytes=stage_peaks,
        steps=steps,
        source=f"{measured.definition} (SimuMax B200 release; case {name})",
        hardware="b200-simumax",
        where=where,
        steps_where=f"{where}.measured.timing_by_mbc",
        hardware_where=f"{where}.training_config.software.hardware",
    )


def read_megatron_cases(document: Mapping[str, Any], registry: Any = None) -> list:
    """Every case of a ``megatron_measured.json`` document (:func:`read_megatron_case`)."""
    return [read_megatron_case(case, i, registry) for i, case in enumerate(document["cases"])]


@hookimpl
def hp_case_formats():
    """``hp validate`` reads ``megatron_measured.json`` as published."""
    yield CaseFormat(name="megatron-measured", accepts=is_megatron_measured, read=read_megatron_cases,
                     description="SimuMax's megatron_measured.json (measured Megatron-LM B200 runs), as published")
