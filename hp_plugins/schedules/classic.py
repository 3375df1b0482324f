"""GPipe, 1F1B and interleaved 1F1B: forward and whole backward per micro-batch and chunk.

Per stage ``i`` of ``p`` with ``m`` micro-batches (docs/schedules.md):

* GPipe (Huang et al. 2019, "GPipe", Section 2.2): every forward first, then
  every backward; a stage keeps all ``m`` micro-batches at the end of its
  forwards; bubble ``(p - 1)(F + B)``.
* 1F1B (PipeDream-Flush, Narayanan et al. 2021, "Efficient Large-Scale
  Language Model Training on GPU Clusters Using Megatron-LM", Section 2.2.1):
  ``min(p - i, m)`` micro-batches at the end of warm-up; bubble ``(p - 1)(F + B)``.
* interleaved 1F1B with ``v`` chunks per stage (same paper, Section 2.2.2;
  Megatron-LM ``megatron/core/pipeline_parallel/schedules.py``
  ``forward_backward_pipelining_with_interleaving``): the stage runs
  ``(p - i - 1) * 2 + (v - 1) * p`` warm-up forwards
  (``get_num_warmup_microbatches`` with the default micro-batch group size
  ``p``), plus the one forward of the first steady-state step, capped at
  ``m * v``; forward ``k`` of a stage runs chunk ``(k // p) % v``. For the
  first stage that is ``L * (1 + (p - 1) / (p * v))`` layers' worth
  (Korthikanti et al. 2022, Section 4.2.3). Bubble ``(p - 1)(F + B) / v``.

The interleaved order each rank issues (``interleaved_order``, the
``order`` field): ``w = min((p - i - 1) * 2 + (v - 1) * p, m v)`` warm-up
forwards, then ``m v - w`` steps of one forward and one backward, then ``w``
backwards; forward ``k`` runs chunk ``(k // p) % v`` and backward ``k`` chunk
``v - 1 - (k // p) % v``, each chunk's micro-batches in order. It is
Megatron-LM's ``forward_backward_pipelining_with_interleaving`` and torch 2.13's
``ScheduleInterleaved1F1B._calculate_single_rank_operations``
(``torch/distributed/pipelining/schedules.py``, ``_get_1f1b_rank_ops`` with
``microbatches_per_round = p`` where ``m`` is a multiple of ``p``, as this
schedule requires); a test builds torch's and compares them.

Uneven first and last stages (Megatron-LM ``--decoder-first-pipeline-num-layers``
/ ``--decoder-last-pipeline-num-layers``) are the layout's ``layers_per_stage``:
the schedule is the same, each stage priced with its own layers.
"""

from __future__ import annotations

from hp_core.errors import ConfigError
from hp_core.markers import hookimpl
from hp_core.schedules import Schedule, ScheduleLayout, StagePasses
from hp_plugins.schedules._common import fill_drain_seconds, need_micro_batches, need_pp, need_vpp

__all__ = ["GPIPE", "INTERLEAVED_1F1B", "ONE_F_ONE_B", "hp_schedules"]

_NARAYANAN = ("Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM' "
              "(arXiv:2104.04473), Section 2.2")


def pp_micro_batches(pp: int, vpp: int) -> int:
    """``p`` micro-batches: the first stage of 1F1B reaches its ``p`` in flight."""
    return pp


def twice_pp_micro_batches(pp: int, vpp: int) -> int:
    """``2 p``: interleaved 1F1B's first stage reaches its full warm-up, a multiple of ``p``."""
    return 2 * pp


def gpipe_in_flight(layout: ScheduleLayout, stage: int) -> tuple[int, ...]:
    return (layout.micro_batches,)


def one_f_one_b_in_flight(layout: ScheduleLayout, stage: int) -> tuple[int, ...]:
    return (min(layout.pp - stage, layout.micro_batches),)


def interleaved_in_flight(layout: ScheduleLayout, stage: int) -> tuple[int, ...]:
    p, v, m = layout.pp, layout.vpp, layout.micro_batches
    forwards = min((p - stage - 1) * 2 + (v - 1) * p + 1, m * v)
    counts = [0] * v
    for k in range(forwards):
        counts[(k // p) % v] += 1
    return tuple(counts)


def interleaved_order(layout: ScheduleLayout, stage: int) -> tuple[tuple[str, int, int], ...]:
    """The compute actions of *stage*'s rank, in order (module docstring): ``(pass, chunk position, micro-batch)``."""
    p, v, m = layout.pp, layout.vpp, layout.micro_batches
    total = m * v
    warmup = min((p - stage - 1) * 2 + (v - 1) * p, total)
    done = {"F": [0] * v, "B": [0] * v}
    order: list[tuple[str, int, int]] = []

    def issue(kind: str, k: int) -> None:
        c = (k // p) % v if kind == "F" else v - 1 - (k // p) % v
        order.append((kind, c, done[kind][c]))
        done[kind][c] += 1

    for k in range(warmup):
        issue("F", k)
    for k in range(total - warmup):
        issue("F", warmup + k)
        issue("B", k)
    for k in range(total - warmup, total):
        issue("B", k)
    return tuple(order)


def one_f_one_b_seconds(layout: ScheduleLayout, stages: tuple[StagePasses, ...]) -> float:
    """``m t_max + (sum t - t_max)``: ``(m + p - 1) t`` for equal stages (GPipe's too)."""
    return fill_drain_seconds(stages, layout.micro_batches, [s.seconds for s in stages], 1.0)


def interleaved_seconds(layout: ScheduleLayout, stages: tuple[StagePasses, ...]) -> float:
    """``m t_max + (sum t - t_max) / v``: ``(m + (p - 1) / v) t`` for equal stages."""
    return fill_drain_seconds(stages, layout.micro_batches, [s.seconds for s in stages], 1.0 / layout.vpp)


def whole_fill(layout: ScheduleLayout) -> float:
    """Every other stage's time once: 1F1B's and GPipe's ``sum t - t_max``."""
    return 1.0


def interleaved_fill(layout: ScheduleLayout) -> float:
    return 1.0 / layout.vpp


def check_one_chunk(layout: ScheduleLayout) -> None:
    if layout.vpp > 1:
        raise ConfigError("$.parallel.schedule", f"vpp={layout.vpp} needs the interleaved_1f1b schedule")


def check_gpipe(layout: ScheduleLayout) -> None:
    need_vpp(layout, "gpipe", (1,))


def check_interleaved(layout: ScheduleLayout) -> None:
    need_pp(layout, "interleaved_1f1b", 2)
    if layout.vpp < 2:
        raise ConfigError("$.parallel.vpp", f"the interleaved_1f1b schedule needs vpp >= 2 chunks per stage, got vpp={layout.vpp}; "
                                            "use 1f1b for one chunk per stage")
    if layout.micro_batches % layout.pp:
        raise ConfigError(
            "$.parallel.global_batch_size",
            f"interleaved 1F1B needs micro-batches per step ({layout.micro_batches}) to be a multiple of pp={layout.pp} "
            "(Megatron-LM schedules.py)",
        )


GPIPE = Schedule(
    name="gpipe", in_flight=gpipe_in_flight, pipeline_seconds=one_f_one_b_seconds,
    default_micro_batches=pp_micro_batches, check=check_gpipe, fill_share=whole_fill,
    trainer_names={"torchtitan": "GPipe"},
    source="Huang et al. 2019, 'GPipe' (arXiv:1811.06965), Section 2.2; bubble as " + _NARAYANAN,
    description="all forwards, then all backwards: every micro-batch kept, bubble (p-1)(F+B)",
)
ONE_F_ONE_B = Schedule(
    name="1f1b", in_flight=one_f_one_b_in_flight, pipeline_seconds=one_f_one_b_seconds,
    default_micro_batches=pp_micro_batches, check=check_one_chunk, fill_share=whole_fill,
    trainer_names={"megatron": "1f1b", "torchtitan": "1F1B", "hyperparallel": "1f1b"},
    source=_NARAYANAN + " (PipeDream-Flush); Megatron-LM forward_backward_pipelining_without_interleaving",
    description="one forward one backward: stage i keeps min(p-i, m) micro-batches, bubble (p-1)(F+B)",
)
INTERLEAVED_1F1B = Schedule(
    name="interleaved_1f1b", in_flight=interleaved_in_flight, pipeline_seconds=interleaved_seconds,
    default_micro_batches=twice_pp_micro_batches, check=check_interleaved, fill_share=interleaved_fill,
    order=interleaved_order, trainer_names={"megatron": "interleaved_1f1b", "torchtitan": "Interleaved1F1B", "hyperparallel": "interleaved_1f1b"},
    source=_NARAYANAN + "; Megatron-LM schedules.py get_num_warmup_microbatches",
    description="virtual pipeline stages (vpp chunks per stage): bubble (p-1)(F+B)/v",
)


@hookimpl
def hp_schedules():
    yield GPIPE
    yield ONE_F_ONE_B
    yield INTERLEAVED_1F1B
