"""Run one FSDP2 training step of a truncated Hugging Face model under PyTorch's own memory tracker, on CPU.

Optional: needs the ``census`` extra (torch and transformers); nothing here
imports torch until a step runs. What runs (:func:`run_step`):

* the model is transformers' ``AutoModelForCausalLM.from_config`` of the model's
  ``config.json`` with ``num_hidden_layers`` cut to the layers asked (same
  widths), built in fp32 inside ``torch._subclasses.fake_tensor.FakeTensorMode``
  (tensors with shapes, dtypes and storages but no memory);
* a fake process group (``torch.testing._internal.distributed.fake_pg.FakeStore``
  and ``dist.init_process_group("fake", ...)``) of the world size asked, and a
  device mesh built *outside* the fake mode (``init_device_mesh`` reads the
  mesh's ranks as data, which a fake tensor has not); ``(dp_shard, tp)`` when
  TP is asked;
* TP (optional): ``parallelize_module`` over each decoder layer's projections
  (q/k/v and gate/up column-wise, o/down row-wise, torchtitan ``parallelize_llama``'s
  plan without sequence parallelism) and, with the ``vocab`` head plan, the
  embedding row-wise and the head column-wise with replicated logits (no loss
  parallelism); the ``replicated`` head plan leaves both whole on every TP rank;
* activation checkpointing (optional), per decoder layer: ``checkpoint_wrapper``
  (non-reentrant, torchtitan ``apply_ac`` mode ``full``; on every k-th layer only,
  its ``selective_ac_option = k``) or ``checkpoint_wrapper`` with torchtitan's
  per-op selective policy (``selective_ac_option = "op"``: :data:`_OP_SAC_SAVE`);
* ``fully_shard`` per decoder layer and on the root (which then holds the
  embedding, the final norm and the head), ``MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32)``, ``reshard_after_forward`` as asked; AdamW;
* two steps (``model(input_ids, labels).loss.backward(); opt.step();
  opt.zero_grad(set_to_none=True)``) under
  ``torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker``; the second,
  the steady state (optimizer states exist, gradients were freed), is read:
  its peak per phase (forward with the loss, backward, optimizer step) with the
  tracker's categories, and each FSDP unit's forward and backward peak.

The fake collectives produce the outputs' shapes, so a rank's bytes are exact
for its shard; nothing about the real network or kernels' workspaces is seen.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from typing import Any, Mapping

from hp_core.errors import ConfigError

__all__ = ["CATEGORIES", "run_step"]

# The tracker's categories (torch.distributed._tools.fsdp2_mem_tracker._FSDPRefType), by our names.
CATEGORIES = {
    "Sharded Param": "sharded_param",
    "Unsharded Param": "unsharded_param",
    "Buffer": "buffer",
    "Sharded Grad": "sharded_grad",
    "Unsharded Grad": "unsharded_grad",
    "Activation": "activation",
    "Temp": "temp",
    "All Gather": "all_gather",
    "Reduce Scatter": "reduce_scatter",
    "OptState": "optimizer_state",
    "Inputs": "inputs",
}
_INSTALL = "pip install 'hp-planner[census]' (torch and transformers)"


def _imports() -> tuple[Any, Any]:
    try:
        torch = importlib.import_module("torch")
        transformers = importlib.import_module("transformers")
    except ImportError as exc:
        raise ConfigError("$.measure", f"measuring a step needs torch and transformers ({exc.name} is missing): {_INSTALL}") from None
    return torch, transformers


def _snapshot(snap: Mapping[Any, Mapping[Any, int]]) -> dict[str, int]:
    """One device's snapshot as ``{category: bytes}`` (our names) plus ``total``."""
    found: dict[str, int] = dict.fromkeys(CATEGORIES.values(), 0)
    total = 0
    for device_snap in snap.values():
        for key, value in device_snap.items():
            name = getattr(key, "value", key)
            if name == "Total":
                total += int(value)
            else:
                found[CATEGORIES[name]] = found.get(CATEGORIES[name], 0) + int(value)
    found["total"] = total
    return found


def _hf_config(transformers: Any, hf: Mapping[str, Any], layers: int, attention: str) -> Any:
    fields = {k: v for k, v in hf.items() if not k.startswith("_") and k not in ("model_type", "architectures", "auto_map")}
    fields["num_hidden_layers"] = layers
    for key in ("first_k_dense_replace",):  # DeepSeek: its dense layers come first; keep them within the cut
        if key in fields:
            fields[key] = min(fields[key], layers)
    if "mlp_only_layers" in fields:
        fields["mlp_only_layers"] = [i for i in fields["mlp_only_layers"] if i < layers]
    config = transformers.AutoConfig.for_model(hf["model_type"], **fields)
    config._attn_implementation = attention
    if any(key in fields for key in ("num_experts", "num_local_experts", "n_routed_experts")):
        config._experts_implementation = "grouped_mm"  # shapes independent of the routing (hp_plugins.census.torch)
    config.use_cache = False
    return config


@contextlib.contextmanager
def _causal_mask_skipped(transformers: Any) -> Any:
    """Take the attention-mask path a real (unpadded, uncompiled) run takes.

    transformers skips the causal mask for SDPA (``is_causal=True``, GQA in the
    kernel) unless a tensor it reads is being traced; a fake tensor counts as
    traced (``masking_utils._ignore_causal_mask_sdpa``, and the packed-sequence
    detection ``find_packed_sequence_indices``, which reads the position ids), so
    under the fake mode it would materialise a ``[T, T]`` mask and repeat k and v
    to every head, which a GPU run does not. The input here is one unpadded
    sequence per row (no packing), with as many queries as keys: the skip is
    taken here as there.
    """
    masking = importlib.import_module("transformers.masking_utils")
    original, packed = masking._ignore_causal_mask_sdpa, masking.find_packed_sequence_indices

    def skip(padding_mask: Any, q_length: int, kv_length: int, q_offset: Any, kv_offset: Any,
             local_attention_size: int | None = None) -> bool:
        if padding_mask is None and q_length == kv_length and (local_attention_size is None or kv_length < local_attention_size):
            return True
        return original(padding_mask, q_length, kv_length, q_offset, kv_offset, local_attention_size)

    masking._ignore_causal_mask_sdpa = skip
    masking.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking._ignore_causal_mask_sdpa, masking.find_packed_sequence_indices = original, packed


def _tp_plan(torch: Any, model: Any, mesh: Any, head_plan: str) -> None:
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    for layer in model.model.layers:
        plan = {}
        attn = layer.self_attn
        for name in ("q_proj", "k_proj", "v_proj"):
            if hasattr(attn, name):
                plan[f"self_attn.{name}"] = ColwiseParallel()
        if hasattr(attn, "o_proj"):
            plan["self_attn.o_proj"] = RowwiseParallel()
        mlp = layer.mlp
        if hasattr(mlp, "gate_proj") and hasattr(mlp, "down_proj"):
            plan.update({"mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": RowwiseParallel()})
        parallelize_module(layer, mesh, plan)
    if head_plan == "vocab":
        parallelize_module(model, mesh, {
            "model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),
            "lm_head": ColwiseParallel(output_layouts=Replicate()),
        })


# torchtitan's op-level SAC save list (torchtitan/models/llama3/infra/parallelize.py ``_op_sac_save_list``, the
# policy of torchtitan/distributed/activation_checkpoint.py): the outputs of these ops are saved, every other
# op of the block is recomputed in backward, and of the matmuls only the odd ones (1st, 3rd, ...) of each
# block's forward are saved. On CPU, SDPA runs ``_scaled_dot_product_flash_attention_for_cpu``, the
# counterpart of the CUDA flash kernel (same output and fp32 log-sum-exp): listed as the CUDA kernels are.
_OP_SAC_SAVE = ("mm", "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
                "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu", "max")
AC_SETTINGS = ("none", "full", "op_sac")


def _op_sac_context(torch: Any) -> Any:
    """One block's selective-checkpoint contexts: torchtitan's per-op policy (``_OP_SAC_SAVE``)."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    save = {getattr(torch.ops.aten, name).default for name in _OP_SAC_SAVE}
    save.add(torch.ops._c10d_functional.reduce_scatter_tensor.default)
    mm = torch.ops.aten.mm.default
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == mm:
            counts[mode] += 1
        keep = func in save and not (func == mm and counts[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def _apply_ac(torch: Any, model: Any, activation_checkpointing: str | list[str]) -> None:
    """Wrap each decoder layer as its setting says: ``none``, ``full`` (``checkpoint_wrapper``, torchtitan
    mode ``full``; a list with ``full`` on every k-th layer is its ``selective_ac_option = k``) or ``op_sac``
    (``checkpoint_wrapper`` with torchtitan's per-op policy, ``selective_ac_option = "op"``)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    layers = model.model.layers
    settings = ([activation_checkpointing] * len(layers) if isinstance(activation_checkpointing, str)
                else list(activation_checkpointing))
    if len(settings) != len(layers) or any(s not in AC_SETTINGS for s in settings):
        raise ConfigError("$.measure.activation_checkpointing",
                          f"one of {list(AC_SETTINGS)} or one per layer ({len(layers)}), not {activation_checkpointing!r}")
    for i, setting in enumerate(settings):
        if setting == "full":
            layers[i] = checkpoint_wrapper(layers[i], preserve_rng_state=False)
        elif setting == "op_sac":
            layers[i] = checkpoint_wrapper(layers[i], preserve_rng_state=False, context_fn=lambda: _op_sac_context(torch))


def run_step(
    hf: Mapping[str, Any],
    num_layers: int,
    seq_len: int,
    world: int,
    micro_batch_size: int = 1,
    tp: int = 1,
    head_plan: str = "vocab",
    activation_checkpointing: str | list[str] = "none",
    reshard_after_forward: bool | int = True,
    optimizer: str = "foreach",
    attention: str = "sdpa",
) -> dict[str, Any]:
    """Measure one steady-state step; returns a JSON-able mapping (see the module docstring).

    Raises:
        ConfigError: torch or transformers missing, a process group already
            initialised, or a layout the model cannot be built for.
    """
    torch, transformers = _imports()
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if world % tp:
        raise ConfigError("$.measure.tp", f"tp={tp} must divide the world size {world}")
    if dist.is_initialized():
        raise ConfigError("$.measure", "a process group is already initialised in this process; measure in a fresh one")
    started = time.perf_counter()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        if tp > 1:
            mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
            dp_mesh, tp_mesh = mesh["dp"], mesh["tp"]
        else:
            dp_mesh, tp_mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",)), None
        # allow_non_fake_inputs: DeviceMesh.mesh rebuilds its (real, tiny) rank tensor when DTensor reads it.
        with FakeTensorMode(allow_non_fake_inputs=True):
            config = _hf_config(transformers, hf, num_layers, attention)
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            if tp_mesh is not None:
                _tp_plan(torch, model, tp_mesh, head_plan)
            _apply_ac(torch, model, activation_checkpointing)
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            # Under TP, fully_shard concatenates the meshes (DeviceMesh ops on real rank tensors): outside the
            # fake mode; the parameters it shards are fake tensors and stay so.
            with unset_fake_temporarily() if tp_mesh is not None else contextlib.nullcontext():
                for layer in model.model.layers:
                    fully_shard(layer, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
                fully_shard(model, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=optimizer == "foreach",
                                    fused=True if optimizer == "fused" else None)
            ids = torch.randint(0, hf["vocab_size"], (micro_batch_size, seq_len))
            tracker = FSDPMemTracker(model, opt)
            tracker.track_inputs((ids,))
            phases: dict[str, dict[str, int]] = {}

            def phase(name: str) -> None:
                phases[name] = _snapshot(tracker.get_tracker_snapshot("peak"))
                tracker._peak_mem.clear()  # the next phase's peak starts from what is held now
                tracker._peak_mem_snap.clear()

            with tracker, _causal_mask_skipped(transformers):
                for step in range(2):
                    if step == 1:
                        tracker.reset_mod_stats()
                        tracker._peak_mem.clear()
                        tracker._peak_mem_snap.clear()
                        before = _snapshot(tracker.get_tracker_snapshot("current"))
                    loss = model(input_ids=ids, labels=ids).loss
                    if step == 1:
                        phase("forward")
                    loss.backward()
                    del loss
                    if step == 1:
                        phase("backward")
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    if step == 1:
                        phase("optimizer")
                after = _snapshot(tracker.get_tracker_snapshot("current"))
            modules = _module_peaks(tracker, model)
    finally:
        dist.destroy_process_group()
    peak_phase = max(phases, key=lambda p: phases[p]["total"])
    return {
        "peak_bytes": phases[peak_phase]["total"],
        "peak_phase": peak_phase,
        "phases": phases,
        "step_start": before,
        "step_end": after,
        "modules": modules,
        "seconds": round(time.perf_counter() - started, 3),
        "versions": {"torch": str(torch.__version__), "transformers": str(transformers.__version__)},
    }


def _module_peaks(tracker: Any, model: Any) -> list[dict[str, Any]]:
    """Each FSDP unit's (and the embedding's and head's) forward and backward peak in the measured step."""
    from torch.distributed.fsdp import FSDPModule

    wanted = {id(m) for m in model.modules() if isinstance(m, FSDPModule)}
    wanted |= {id(model.model.embed_tokens), id(model.lm_head), id(model.model.norm)}
    rows = []
    for module in model.modules():
        if id(module) not in wanted or module not in tracker.memory_tracking:
            continue
        stats = tracker.memory_tracking[module]
        row: dict[str, Any] = {"module": stats.mod_fqn}
        for state, key in (("Peak Forward", "forward_peak_bytes"), ("Peak Backward", "backward_peak_bytes")):
            found = [snaps for s, snaps in stats.snapshots.items() if getattr(s, "value", s) == state]
            if found and found[0]:
                row[key] = max(_snapshot(snap)["total"] for snap in found[0])
        rows.append(row)
    return rows
