"""The parallel layout of a training job."""

from __future__ import annotations

from typing import Any

import attrs

from hp_core.bounds import MAX_BATCH, MAX_DEVICES, MAX_SEQ_LEN, short_repr
from hp_core.errors import SpecError
from hp_core.validators import bounded_int, instance_of, one_of, optional

__all__ = ["CP_KINDS", "SCHEDULES", "ParallelSpec"]

# Context-parallel exchanges: ring (p2p) or all-to-all over heads (a2a).
CP_KINDS = ("p2p", "a2a")

# The built-in pipeline schedules (plugins of the hp_schedules hook, hp_plugins/schedules;
# docs/schedules.md). A layout may name any schedule a plugin provides: the name is
# checked against the registry where the run is prepared.
SCHEDULES = ("1f1b", "interleaved_1f1b", "gpipe", "zb_h1", "dualpipe", "dualpipev")


def _schedule_name(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise SpecError("schedule", f"schedule must be a schedule's name (see 'hp plugins'), got {short_repr(value)}")


def _rank_order(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, str) or sorted(value.split("-")) != sorted(("tp", "cp", "ep", "dp", "pp")):
        raise ValueError(f"rank_order must name tp, cp, ep, dp and pp once each, joined by '-' (e.g. 'tp-cp-ep-dp-pp'), got {value!r}")


def _layers_per_stage(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, tuple) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise SpecError("layers_per_stage", "layers_per_stage must be a list of non-negative integers, one per pipeline chunk")
    if len(value) > MAX_DEVICES:
        raise SpecError("layers_per_stage", f"layers_per_stage must list at most {MAX_DEVICES:,} chunks, got {len(value):,}")


_degree = bounded_int(MAX_DEVICES, what="the device bound MAX_DEVICES")
_batch = bounded_int(MAX_BATCH, what="the batch bound MAX_BATCH")
_boolean = instance_of(bool, "true or false")


def _world(instance: "ParallelSpec", attribute: attrs.Attribute, value: Any) -> None:
    """The degrees' product within :data:`~hp_core.bounds.MAX_DEVICES` (run on the last field)."""
    world = instance.dp * instance.cp * instance.tp * instance.pp
    if world > MAX_DEVICES:
        raise SpecError("dp", f"dp*cp*tp*pp must be at most {MAX_DEVICES:,} devices (MAX_DEVICES), got {world:,}")
    if instance.pp * instance.vpp > MAX_DEVICES:
        raise SpecError("vpp", f"pp*vpp must be at most {MAX_DEVICES:,} pipeline chunks, got {instance.pp * instance.vpp:,}")


@attrs.frozen(kw_only=True)
class ParallelSpec:
    """Degrees, batch shape and schedule.

    World size is ``dp * cp * tp * pp``. Experts are laid out over ``ep * etp``
    within it; the expert data-parallel degree is ``world / (pp * ep * etp)``.

    Attributes:
        dp: Data-parallel degree.
        tp: Tensor-parallel degree.
        pp: Pipeline-parallel degree (stages).
        vpp: Virtual pipeline chunks per stage (interleaved 1F1B when > 1).
        cp: Context-parallel degree.
        cp_kind: How context parallelism exchanges: ``p2p`` (ring attention,
            Megatron-LM's default ``--cp-comm-type p2p``) or ``a2a``
            (all-to-all over heads, DeepSpeed-Ulysses style).
        ep: Expert-parallel degree.
        etp: Expert tensor-parallel degree.
        sp: Sequence parallelism over the tensor-parallel group.
        zero: Sharding over the data-parallel (times context-parallel) group:
            0 none; 1 optimizer states and master parameters (Megatron's
            distributed optimizer); 2 also gradients; 3 also parameters (FSDP).
            ``None`` takes the runtime profile's default.
        reshard_after_forward: Under ``zero=3``, whether parameters are
            freed after forward and gathered again for backward (FSDP's
            ``reshard_after_forward``). ``None`` takes the runtime profile's
            default for the layout (:meth:`hp_core.types.Runtime.reshards_after_forward`:
            on unless the runtime states otherwise; ``fsdp2`` off under
            ``pp > 1``, as torchtitan), resolved where the run is prepared.
        micro_batch_size: Sequences per micro-batch.
        global_batch_size: Sequences per optimizer step. ``None`` means the
            fewest micro-batches per data-parallel rank with which every stage
            reaches its full in-flight count, so the memory peak is the
            steady-state one, as the schedule states it
            (``Schedule.default_micro_batches``; resolved where the run is
            prepared): ``pp`` for 1F1B, ``2 * pp`` for interleaved 1F1B
            (whose first stage keeps ``pp * vpp + pp - 1`` chunk-micro-batches
            and needs a multiple of ``pp``); times ``micro_batch_size * dp``.
        seq_len: Tokens per sequence.
        schedule: A pipeline schedule's name (the built-ins are
            :data:`SCHEDULES`; a plugin may add more); ``None`` picks ``1f1b``
            for ``vpp == 1`` and ``interleaved_1f1b`` otherwise.
        layers_per_stage: Explicit body-layer counts, one per pipeline chunk
            in chunk order (chunk ``c`` runs on stage ``c % pp``); ``None`` splits evenly.
        rank_order: How ranks are numbered over the five dimensions, fastest
            first (Megatron-Core's ``--rank-order`` default ``tp-cp-ep-dp-pp``:
            a TP group on consecutive ranks); places each group on the nodes
            for the step time (docs/time.md).
    """

    dp: int = attrs.field(default=1, validator=_degree)
    tp: int = attrs.field(default=1, validator=_degree)
    pp: int = attrs.field(default=1, validator=_degree)
    vpp: int = attrs.field(default=1, validator=_degree)
    cp: int = attrs.field(default=1, validator=_degree)
    cp_kind: str = attrs.field(default="p2p", validator=one_of(CP_KINDS))
    ep: int = attrs.field(default=1, validator=_degree)
    etp: int = attrs.field(default=1, validator=_degree)
    sp: bool = attrs.field(default=False, validator=_boolean)
    zero: int | None = attrs.field(default=None, validator=optional(one_of((0, 1, 2, 3))))
    reshard_after_forward: bool | None = attrs.field(default=None, validator=optional(_boolean))
    micro_batch_size: int = attrs.field(default=1, validator=_batch)
    global_batch_size: int | None = attrs.field(default=None, validator=optional(_batch))
    seq_len: int = attrs.field(validator=bounded_int(MAX_SEQ_LEN, what="the sequence bound MAX_SEQ_LEN"))
    schedule: str | None = attrs.field(default=None, validator=_schedule_name)
    layers_per_stage: tuple[int, ...] | None = attrs.field(
        default=None, converter=lambda v: tuple(v) if isinstance(v, list) else v, validator=[_layers_per_stage, _world]
    )

    rank_order: str = attrs.field(default="tp-cp-ep-dp-pp", validator=_rank_order)
    @property
    def world_size(self) -> int:
        return self.dp * self.cp * self.tp * self.pp

    @property
    def chunks(self) -> int:
        """Pipeline chunks in all: ``pp * vpp``."""
        return self.pp * self.vpp

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel degree, ``world / (pp * ep * etp)`` (Megatron-Core parallel_state)."""
        return self.world_size // (self.pp * self.ep * self.etp)

    @property
    def resolved_schedule(self) -> str:
        if self.schedule is not None:
            return self.schedule
        return "1f1b" if self.vpp == 1 else "interleaved_1f1b"

    @property
    def resolved_global_batch_size(self) -> int:
        """The global batch size; where none is stated, 1F1B's or interleaved 1F1B's default (``prepare`` asks the schedule)."""
        if self.global_batch_size is not None:
            return self.global_batch_size
        micro_batches = self.pp if self.vpp == 1 else 2 * self.pp
        return self.micro_batch_size * self.dp * micro_batches
