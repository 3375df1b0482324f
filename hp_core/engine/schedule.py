"""Pipeline schedules: which chunks a stage runs and how many micro-batches each keeps.

docs/concepts.md (stage peaks). At the end of warm-up, stage ``i`` of ``p`` with ``m``
micro-batches keeps:

* 1F1B (PipeDream-Flush, Narayanan et al. 2021): ``min(p - i, m)`` micro-batches;
* interleaved 1F1B with ``v`` chunks per stage: ``min((p - i - 1) * 2 + (v - 1) * p + 1, m * v)``
  chunk-micro-batches -- Megatron-LM ``get_num_warmup_microbatches``
  (``megatron/core/pipeline_parallel/schedules.py``) plus the one forward of the
  first steady-state step -- spread over the chunks as the schedule runs its
  forwards: forward ``k`` of a stage runs chunk ``(k // p) % v``. For the first
  stage that is ``L * (1 + (p - 1) / (p * v))`` layers' worth (Korthikanti et al.
  2022, Section 4.2.3).
"""

from __future__ import annotations

__all__ = ["chunks_of_stage", "first_backward_chunk", "in_flight_per_chunk"]


def chunks_of_stage(stage: int, pp: int, vpp: int) -> tuple[int, ...]:
    """The global chunk indices stage *stage* runs: ``stage, stage + pp, ...``."""
    return tuple(stage + k * pp for k in range(vpp))


def in_flight_per_chunk(stage: int, pp: int, vpp: int, micro_batches: int, schedule: str) -> tuple[int, ...]:
    """Micro-batches each of the stage's chunks keeps at the end of warm-up, in chunk order.

    Args:
        stage: The stage index ``i`` (0-based).
        pp: Pipeline stages ``p``.
        vpp: Chunks per stage ``v``.
        micro_batches: Micro-batches per step ``m``.
        schedule: ``"1f1b"`` or ``"interleaved_1f1b"``.
    """
    if schedule == "1f1b":
        return (min(pp - stage, micro_batches),)
    forwards = min((pp - stage - 1) * 2 + (vpp - 1) * pp + 1, micro_batches * vpp)
    counts = [0] * vpp
    for k in range(forwards):
        counts[(k // pp) % vpp] += 1
    return tuple(counts)


def first_backward_chunk(vpp: int) -> int:
    """The position (within the stage's chunks) of the chunk whose backward a stage runs first: its last."""
    return vpp - 1
