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
* the layout: the degrees, ``sequence_parallel_effective``, the micro-batch
  size, the global batch the memory was measured at, the sequence length;
* ``distributed_optimizer`` -> ZeRO-1, else 0; a run with effective activation
  recompute is refused (the cases ran none).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import attrs

from hp_core.errors import ConfigError
from hp_core.markers import hookimpl
from hp_core.specs import ParallelSpec
from hp_core.types import CaseFormat
from hp_plugins.models.hf import model_from_hf_config

__all__ = ["GIB", "hp_case_formats", "is_megatron_measured", "read_megatron_cases", "read_megatron_case"]

GIB = 2**30
_FAMILIES = {"llama3": "llama", "llama": "llama", "deepseek_v2": "deepseek_v2", "deepseek_v3": "deepseek_v3"}
_STAGE = re.compile(r"^stage(\d+)_")


def is_megatron_measured(document: Any) -> bool:
    """Whether *document* is in the ``megatron_measured.json`` layout."""
    cases = document.get("cases") if isinstance(document, dict) else None
    return isinstance(cases, list) and bool(cases) and all(
        isinstance(c, dict) and "training_config" in c and "measured" in c for c in cases
    )


def _hf_config(model_hf: Mapping[str, Any], tokenizer: str | None, where: str) -> dict[str, Any]:
    family = str(model_hf.get("family", "")).split(" ")[0]
    if family not in _FAMILIES:
        raise ConfigError(f"{where}.model_hf.family", f"unsupported model family {model_hf.get('family')!r}")
    config = {key: value for key, value in model_hf.items() if not key.endswith("_note") and value is not None}
    config["model_type"] = _FAMILIES[family]
    config["hidden_act"] = "silu"
    # Megatron's NullTokenizer reports --vocab-size + 1 (its EOD token).
    if tokenizer == "NullTokenizer":
        config["vocab_size"] = model_hf["vocab_size"] + 1
    if isinstance(config.get("moe_layer_freq"), str):
        config["moe_layer_freq"] = 1  # the first_k_dense_replace dense layers, then MoE in every layer
    return config


def read_megatron_case(case: Mapping[str, Any], index: int):
    """One case of the layout as a :class:`~hp_core.io.validate.MeasuredCase`."""
    from hp_core.io.validate import MeasuredCase, MeasuredStep

    where = f"$.cases[{index}]"
    config = case["training_config"]
    par, batch = config["parallelism"], config["batch"]
    recompute = str(config.get("recompute", {}).get("activation_recompute", "none"))
    if not recompute.startswith("none"):
        raise ConfigError(f"{where}.training_config.recompute", f"activation recompute {recompute!r} is not read yet")
    tokenizer = config.get("other_flags", {}).get("tokenizer")
    model = model_from_hf_config(
        _hf_config(config["model_hf"], tokenizer, f"{where}.training_config"), name=case["case_id"],
        source=f"megatron_measured case {case['case_id']}", where=f"{where}.training_config.model_hf",
    )
    moe = config.get("moe")
    if moe:
        capacity = moe.get("expert_capacity_factor")
        pad = bool(moe.get("pad_expert_input_to_capacity")) and capacity is not None
        layers = tuple(
            attrs.evolve(g, config=attrs.evolve(g.config, capacity_factor=float(capacity) if capacity else None,
                                                pad_to_capacity=pad))
            if g.kind in ("moe", "mla_moe") else g
            for g in model.layers
        )
        model = attrs.evolve(model, layers=layers)
    tp = par["tensor_model_parallel_size"]
    parallel = ParallelSpec(
        dp=par["data_parallel_size"],
        tp=tp,
        pp=par["pipeline_model_parallel_size"],
        vpp=par.get("virtual_pipeline_size") or 1,
        cp=par.get("context_parallel_size") or 1,
        cp_kind="a2a" if par.get("cp_comm_type") == "a2a" else "p2p",
        ep=par.get("expert_model_parallel_size") or 1,
        etp=par.get("expert_tensor_parallel_size") or tp if moe else 1,
        sp=bool(par.get("sequence_parallel_effective")),
        zero=1 if config["optimizer"].get("distributed_optimizer") else 0,
        micro_batch_size=batch["micro_batch_size"],
        global_batch_size=batch["memory_measured_at_global_batch"],
        seq_len=batch["seq_length"],
    )
    measured = case["measured"]
    stages = sorted(
        (int(_STAGE.match(key).group(1)), value["max_allocated_gib"])
        for key, value in measured["per_stage_peak_derived"].items()
    )
    steps = tuple(
        MeasuredStep(micro_batches=row["micro_batch_count"], global_batch_size=row["global_batch_size"],
                     seconds=row["real_ms"] / 1000)
        for row in measured.get("timing_by_mbc", ())
    )
    return MeasuredCase(
        name=case["case_id"],
        model=model,
        parallel=parallel,
        runtime="megatron",
        stage_peak_bytes=tuple(round(gib * GIB) for _, gib in stages),
        steps=steps,
        source=f"{measured.get('definition', 'measured')} (SimuMax B200 release; case {case['case_id']})",
        hardware="b200",
        where=where,
        steps_where=f"{where}.measured.timing_by_mbc",
        hardware_where=f"{where}.training_config.software.hardware",
    )


def read_megatron_cases(document: Mapping[str, Any], registry: Any = None) -> list:
    """Every case of a ``megatron_measured.json`` document (:func:`read_megatron_case`)."""
    return [read_megatron_case(case, i) for i, case in enumerate(document["cases"])]


@hookimpl
def hp_case_formats():
    """``hp validate`` reads ``megatron_measured.json`` as published."""
    yield CaseFormat(name="megatron-measured", accepts=is_megatron_measured, read=read_megatron_cases,
                     description="SimuMax's megatron_measured.json (measured Megatron-LM B200 runs), as published")
