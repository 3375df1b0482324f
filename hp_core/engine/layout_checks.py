"""The layout's own cross-field checks and its split of the body layers over the pipeline chunks.

:func:`~hp_core.engine.prepare.prepare` runs them before it places the layers: :func:`validate_layout` refuses a
layout whose degrees do not divide what they split (and the schedule's own checks), :func:`split_layers` gives each
pipeline chunk its body layers.
"""

from __future__ import annotations

from hp_core.engine import schedule as schedule_lib
from hp_core.errors import ConfigError
from hp_core.schedules import Schedule, ScheduleLayout
from hp_core.specs import ParallelSpec

__all__ = ["split_layers", "validate_layout"]


def validate_layout(parallel: ParallelSpec, body_layers: int, schedule: Schedule | None = None) -> int:
    """Cross-field checks of the layout, the schedule's own included; returns micro-batches per step.

    Args:
        schedule: The run's schedule; without one the schedule checks are left out
            and the default global batch size is the layout's own
            (:attr:`ParallelSpec.resolved_global_batch_size`).
    """
    p = parallel
    if p.seq_len % p.cp:
        raise ConfigError("$.parallel.cp", f"cp={p.cp} must divide seq_len={p.seq_len}")
    if p.sp and (p.seq_len // p.cp) % p.tp:
        raise ConfigError("$.parallel.sp", f"sequence parallelism needs tp={p.tp} to divide seq_len/cp={p.seq_len // p.cp}")
    if (p.dp * p.cp * p.tp) % (p.ep * p.etp):
        raise ConfigError("$.parallel.ep", f"ep*etp={p.ep * p.etp} must divide dp*cp*tp={p.dp * p.cp * p.tp}")
    if p.pp > body_layers:
        raise ConfigError("$.parallel.pp", f"pp={p.pp} is larger than the model's {body_layers} layers; use pp <= {body_layers}")
    per_step = p.micro_batch_size * p.dp
    gbs = schedule_lib.default_global_batch_size(p, schedule)
    if gbs % per_step:
        raise ConfigError(
            "$.parallel.global_batch_size",
            f"global_batch_size={gbs} must be a multiple of micro_batch_size*dp={per_step}",
        )
    m = gbs // per_step
    if schedule is not None:
        schedule_lib.run_check(schedule, ScheduleLayout(p.pp, p.vpp, m))
    return m


def split_layers(body_layers: int, parallel: ParallelSpec) -> list[int]:
    """Body layers per pipeline chunk: the layout's ``layers_per_stage``, or an even split."""
    chunks = parallel.chunks
    if parallel.layers_per_stage is not None:
        counts = list(parallel.layers_per_stage)
        if len(counts) != chunks:
            raise ConfigError(
                "$.parallel.layers_per_stage", f"needs one count per pipeline chunk (pp*vpp={chunks}), got {len(counts)}"
            )
        if sum(counts) != body_layers:
            raise ConfigError(
                "$.parallel.layers_per_stage", f"counts add up to {sum(counts)}, the model has {body_layers} layers"
            )
        return counts
    if body_layers % chunks:
        raise ConfigError(
            "$.parallel.pp",
            f"{body_layers} layers do not split evenly over pp*vpp={chunks} chunks; "
            "choose pp*vpp dividing the layer count or set parallel.layers_per_stage",
        )
    return [body_layers // chunks] * chunks
