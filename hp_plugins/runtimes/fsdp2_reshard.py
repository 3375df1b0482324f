"""``fully_shard(reshard_after_forward=n)`` in the ``fsdp2`` runtime (its ``reshard_after_forward_to`` option,
``Fsdp2Points.reshard_to``): what each layer keeps gathered after forward (:func:`keep_share`) and the values refused
(:func:`check_reshard_to`), as torch cf30153 (2.13) takes an int ``reshard_after_forward``:
``torch/distributed/fsdp/_fully_shard/_fsdp_init.py`` ``_get_post_forward_mesh_info`` lines 165-182 (a factor of the
shard mesh size, else ``ValueError``; 1 as ``False``, with a warning; the shard mesh size as ``True``)."""

from __future__ import annotations

from hp_core.errors import ConfigError, RunRefusal
from hp_core.peak_points import StageView
from hp_plugins.runtimes.fsdp2_pools import shard_ranks

__all__ = ["check_reshard_to", "keep_share", "shard_group"]

_PATH = "$.runtime.options.reshard_after_forward_to"


def shard_group(view: StageView, replicate: int) -> int:
    """The ranks ``fully_shard``'s shard mesh dimension spans (torch's ``FSDPMeshInfo.shard_mesh_size``) for the
    dense layers: dp * cp, divided by *replicate* under HSDP (:func:`~hp_plugins.runtimes.fsdp2_pools.shard_ranks`)."""
    return shard_ranks(view, "dense", replicate)


def keep_share(view: StageView, reshard_to: int, replicate: int) -> int:
    """What a layer keeps gathered after forward: 0 none, 1 all, ``n`` an n-th (``Fsdp2Points``' ``keep_share``).

    *reshard_to* equal to the shard group is 0: torch takes an int equal to the shard mesh size as ``True``
    (``_get_post_forward_mesh_info`` lines 181-182; the post-forward mesh is then the shard mesh itself, lines 184-185,
    so ``_fsdp_param_group.py`` ``FSDPParamGroup._use_post_forward_mesh`` is False, lines 939-943, and ``reshard``
    frees to the regular shard, keeping no post-forward copy: lines 499-509)."""
    if not view.parallel.reshard_after_forward:
        return 1
    return reshard_to if 1 < reshard_to != shard_group(view, replicate) else 0


def check_reshard_to(view: StageView, reshard_to: int, replicate: int) -> None:
    """Refuse, in one line at ``$.runtime.options.reshard_after_forward_to``, a *reshard_to* torch does not run or
    that hp would price otherwise than torch runs it (0, the default, is always accepted)."""
    p = view.parallel
    if reshard_to == 1:
        # Priced as 0 (keep_share: parallel.reshard_after_forward says), so it changes no figure; torch's fully_shard
        # turns an int 1 into reshard_after_forward=False (lines 174-180, with a warning).
        raise RunRefusal(_PATH,  # whatever the layout: a search says it once
                         "1 changes nothing as priced (the same as 0: parallel.reshard_after_forward says); "
                         "torch's fully_shard takes an int 1 as reshard_after_forward=False (every layer kept "
                         "gathered): use 0, with parallel.reshard_after_forward: false for that")
    if reshard_to < 2:
        return
    if not p.reshard_after_forward:  # fully_shard(reshard_after_forward=n) reshards
        raise ConfigError(_PATH, f"{reshard_to} reshards each layer after forward, which the layout does not "
                                 "(parallel.reshard_after_forward false: stated, or the runtime's default under "
                                 "pp > 1); state parallel.reshard_after_forward: true, or use 0")
    group = shard_group(view, replicate)
    if group % reshard_to:
        # Lines 165-173: an int below 1, above the shard mesh size or not dividing it raises ValueError.
        factors = [str(n) for n in range(2, group + 1) if group % n == 0]
        choices = f"{', '.join(factors)} or 0 ({group}, the whole group, reshards fully as 0 does)" if factors else "0"
        raise ConfigError(_PATH, f"{reshard_to} must be a factor of the FSDP shard group of {group} ranks "
                                 f"(dp * cp / hsdp_replicate), as torch's fully_shard requires of an int "
                                 f"reshard_after_forward; use {choices}")
    # What torch 2.13 refuses to reshard to a smaller mesh (_fully_shard/_fsdp_param.py): a DTensor parameter (FSDP
    # over TP or EP: to_sharded_post_forward raises NotImplementedError), and a parameter whose all-gather a recipe
    # casts (fsdp_pre_all_gather: all_gather_inputs raises NotImplementedError when SHARDED_POST_FORWARD). The whole
    # shard group never reshards to a smaller mesh: accepted under TP; under EP the routed experts' fully_shard runs
    # over their own expert data-parallel mesh (fsdp2_pools.shard_ranks), which torch checks the same int against: resharded
    # fully only where it is that mesh's size too.
    smaller = reshard_to != group
    if smaller and (p.tp > 1 or p.ep > 1):
        raise ConfigError(_PATH, "torch's FSDP2 cannot reshard TP- or EP-sharded (DTensor) parameters to a smaller "
                                 "mesh after forward (_fsdp_param.py to_sharded_post_forward); use 0, or tp = ep = 1")
    experts = shard_ranks(view, "routed_expert", replicate)
    if p.ep > 1 and reshard_to != experts:
        raise ConfigError(_PATH, f"{reshard_to} is the dense layers' whole shard group, but under ep {p.ep} the routed "
                                 f"experts are sharded over their own {experts} ranks, where torch's fully_shard takes "
                                 f"it as a factor of that mesh (or refuses it) and cannot reshard their DTensor "
                                 f"parameters to a smaller mesh; use 0")
    cast = [layer for layer in view.layers if layer.gathered_bytes is not None
            and layer.gathered_bytes != sum(layer.elements.values()) * view.precision.activation_bytes]
    if smaller and cast:
        raise ConfigError(_PATH, f"torch's FSDP2 cannot gather a {view.precision.recipe}-cast parameter from its "
                                 "post-forward shard (_fsdp_param.py all_gather_inputs with fsdp_pre_all_gather); "
                                 "use 0, or a recipe that gathers in the compute dtype")
