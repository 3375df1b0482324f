"""What the built-in schedules share: the pipeline time of unequal stages and the layout checks."""

from __future__ import annotations

from typing import Sequence

from hp_core.errors import ConfigError
from hp_core.schedules import ScheduleLayout, StagePasses

__all__ = ["fill_drain_seconds", "need_even_pp", "need_micro_batches", "need_pp", "need_vpp"]


def fill_drain_seconds(stages: Sequence[StagePasses], micro_batches: int, units: Sequence[float], share: float) -> float:
    """``m * max(t) + share * (sum(u) - u_slowest)``: the slowest stage runs all micro-batches back to back.

    Every other stage adds *share* of its idle unit *u* while the pipeline
    fills and drains (Narayanan et al. 2021, Section 2.2 for ``u = t``: for
    ``p`` equal stages of time ``t`` 1F1B's bubble is ``(p - 1) t``). For
    equal stages this is the closed form ``m t + share (p - 1) u``.
    """
    seconds = [s.seconds for s in stages]
    slowest = max(range(len(seconds)), key=seconds.__getitem__)
    return micro_batches * seconds[slowest] + share * (sum(units) - units[slowest])


def need_vpp(layout: ScheduleLayout, name: str, allowed: Sequence[int]) -> None:
    if layout.vpp not in allowed:
        choices = " or ".join(str(v) for v in allowed)
        raise ConfigError("$.parallel.vpp", f"the {name} schedule runs vpp={choices} chunks per stage, got vpp={layout.vpp}; "
                                            "set --vpp accordingly or choose another schedule")


def need_pp(layout: ScheduleLayout, name: str, least: int) -> None:
    if layout.pp < least:
        raise ConfigError("$.parallel.schedule", f"the {name} schedule needs pp >= {least}, got pp={layout.pp}; "
                                                 "use 1f1b without pipeline parallelism")


def need_even_pp(layout: ScheduleLayout, name: str) -> None:
    if layout.pp % 2:
        raise ConfigError("$.parallel.pp", f"the {name} schedule needs an even pp, got pp={layout.pp}")


def need_micro_batches(layout: ScheduleLayout, name: str, least: int, multiple: int = 1, source: str = "") -> None:
    m = layout.micro_batches
    if m < least or m % multiple:
        what = f"at least {least}" + (f" and a multiple of {multiple}" if multiple > 1 else "")
        raise ConfigError("$.parallel.global_batch_size",
                          f"the {name} schedule needs micro-batches per step {what}, got {m}"
                          + (f" ({source})" if source else "") + "; change the global batch size or micro-batch size")
