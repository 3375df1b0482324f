"""The ``accelerate-fsdp`` importer: an Accelerate config YAML (``accelerate config``) with ``fsdp_config``.

Read against Accelerate's FSDP guide (``docs/source/usage_guides/fsdp.md``, the keys
``accelerate config`` writes) and ``src/accelerate/utils/dataclasses.py``
``FullyShardedDataParallelPlugin``:

* ``num_processes`` is the device count (every process of every machine); ``num_machines`` is
  read with ``HYBRID_SHARD``, which shards within a machine only;
* ``fsdp_config.fsdp_version`` 1 (``FullyShardedDataParallel``) or 2 (``fully_shard``): the runtime
  is ``fsdp2`` for both (fp32 sharded parameters, bf16 gathered compute, fp32 gradients, AdamW);
* ``fsdp_sharding_strategy`` (version 1; a name or Accelerate's number 1-5: ``FULL_SHARD``,
  ``SHARD_GRAD_OP``, ``NO_SHARD``, ``HYBRID_SHARD``, ``HYBRID_SHARD_ZERO2``) or
  ``fsdp_reshard_after_forward`` (version 2): ``FULL_SHARD`` / ``true`` is ZeRO-3 resharding after
  forward, ``SHARD_GRAD_OP`` / ``false`` keeps the gathered parameters until backward (zero 3 with
  ``reshard_after_forward: false``), ``NO_SHARD`` is refused (DDP: not an FSDP runtime);
* ``fsdp_activation_checkpointing: true``: every transformer block checkpointed (full recompute);
* ``fsdp_offload_params: true``: the ``fsdp2`` option ``cpu_offload`` (sharded state in host memory; its time is
  not priced, a warning line);
* ``mixed_precision`` ``bf16``/``fp16`` (2-byte compute, the runtime's), ``no`` and ``fp8``
  named in a warning line.

The model, sequence length and batch are not in the file: ``--model`` is required, and
``--seq-len`` / ``--micro-batch-size`` state the batch (the config file's defaults otherwise).
"""

from __future__ import annotations

from typing import Any

from hp_core.errors import ConfigError
from hp_core.importers import ImportedJob, Importer
from hp_core.markers import hookimpl
from hp_plugins.importers._common import Fields, read_mapping

__all__ = ["QUIET", "STRATEGIES", "hp_importers", "import_accelerate_fsdp"]

# Accelerate's numbering of torch.distributed.fsdp.ShardingStrategy (utils/constants.py FSDP_SHARDING_STRATEGY).
STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")

QUIET = frozenset("""
compute_environment debug distributed_type downcast_bf16 machine_rank main_training_function rdzv_backend
same_network tpu_env tpu_use_cluster tpu_use_sudo use_cpu gpu_ids main_process_ip main_process_port enable_cpu_affinity
fsdp_config.fsdp_auto_wrap_policy fsdp_config.fsdp_transformer_layer_cls_to_wrap fsdp_config.fsdp_state_dict_type
fsdp_config.fsdp_cpu_ram_efficient_loading fsdp_config.fsdp_sync_module_states fsdp_config.fsdp_use_orig_params
fsdp_config.fsdp_backward_prefetch_policy fsdp_config.fsdp_backward_prefetch fsdp_config.fsdp_forward_prefetch
fsdp_config.fsdp_min_num_params
""".split())


def import_accelerate_fsdp(data: dict[str, Any], registry, *, file: str = "accelerate.yaml",
                           model: str | None = None) -> ImportedJob:
    """An ``hp`` config document from a parsed Accelerate config (module docstring)."""
    if model is None:
        raise ConfigError("--model", f"an Accelerate config does not name the model; state it with --model ({file})")
    f = Fields(data, file, lambda key: key in QUIET)
    if data.get("distributed_type") != "FSDP" or not isinstance(data.get("fsdp_config"), dict):
        raise f.error("distributed_type", f"expected FSDP with an fsdp_config section, got {data.get('distributed_type')!r}")
    unmapped: list[str] = []
    devices = f.degree("num_processes")
    if "num_processes" not in f.leaves:
        raise f.error("num_processes", "the device count is required; state it in the file")
    machines = f.degree("num_machines")
    version = f.get("fsdp_config.fsdp_version", 1, int, (1, 2))
    parallel: dict[str, Any] = {"zero": 3, "reshard_after_forward": True}  # dp: num_processes / (cp*tp*pp)
    if version == 2:
        parallel["reshard_after_forward"] = f.get("fsdp_config.fsdp_reshard_after_forward", True, bool)
        if "fsdp_config.fsdp_sharding_strategy" in f.leaves:
            unmapped.append("fsdp_config.fsdp_sharding_strategy: ignored under fsdp_version 2 "
                            "(fsdp_reshard_after_forward states it)")
            f.get("fsdp_config.fsdp_sharding_strategy")
    else:
        strategy = f.get("fsdp_config.fsdp_sharding_strategy", "FULL_SHARD", (str, int))
        if isinstance(strategy, int) and not isinstance(strategy, bool) and 1 <= strategy <= len(STRATEGIES):
            strategy = STRATEGIES[strategy - 1]
        if strategy not in STRATEGIES:
            raise f.error("fsdp_config.fsdp_sharding_strategy", f"expected one of {', '.join(STRATEGIES)} or 1-5, "
                          f"got {strategy!r}")
        if strategy == "NO_SHARD":
            raise f.error("fsdp_config.fsdp_sharding_strategy", "NO_SHARD is DDP, not priced by the fsdp2 runtime; "
                          "estimate it with --runtime generic --zero 0 and no --from")
        parallel["reshard_after_forward"] = strategy in ("FULL_SHARD", "HYBRID_SHARD")
        if strategy.startswith("HYBRID"):
            unmapped.append(f"fsdp_config.fsdp_sharding_strategy = {strategy}: shards within each of {machines} "
                            f"machines only; priced as sharding over all {devices} devices (memory under-estimated)")
    f.get("fsdp_config.fsdp_reshard_after_forward")
    recompute = "full" if f.get("fsdp_config.fsdp_activation_checkpointing", False, bool) else None
    # fsdp_offload_params: FullyShardedDataParallelPlugin.cpu_offload (src/accelerate/utils/dataclasses.py at
    # huggingface/accelerate@16cb6eb8: CPUOffloadPolicy() under fsdp_version 2, CPUOffload(offload_params=True) under 1),
    # the fsdp2 option cpu_offload (memory).
    offload = f.get("fsdp_config.fsdp_offload_params", False, bool)
    if offload:
        unmapped.append("fsdp_config.fsdp_offload_params = true: the fsdp2 option cpu_offload (the sharded parameters, "
                        "their gradients and the optimizer states in host memory); the step time prices neither the "
                        "copies over the host link nor the optimizer step on the host")
    if f.get("fsdp_config.fsdp_cpu_offload", False, bool):
        unmapped.append("fsdp_config.fsdp_cpu_offload = true: not a key Accelerate reads (its offload key is "
                        "fsdp_offload_params); nothing priced for it")
    mixed = str(f.get("mixed_precision", "no", (str, bool)))
    if mixed not in ("bf16", "fp16"):
        unmapped.append(f"mixed_precision = {mixed!r}: priced as bf16 compute")
    document: dict[str, Any] = {"model": model, "parallel": parallel,
                                "runtime": {"name": "fsdp2", "options": {"cpu_offload": True}} if offload else "fsdp2"}
    if recompute is not None:
        document["recompute"] = recompute
    return ImportedJob(document, tuple(unmapped + f.unread()), devices)


def _read(source: str, *, registry, model: str | None = None) -> ImportedJob:
    return import_accelerate_fsdp(read_mapping(source, "yaml"), registry, file=source, model=model)


@hookimpl
def hp_importers():
    yield Importer(name="accelerate-fsdp", read=_read, flags=("model",),
                   description="an Accelerate config YAML with fsdp_config (needs --model)")
