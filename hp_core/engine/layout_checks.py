"""The layout's own cross-field checks and its split of the body layers over the pipeline chunks.

:func:`~hp_core.engine.prepare.prepare` runs them before it places the layers: :func:`validate_layout` refuses a
layout whose degrees do not divide what they split (and the schedule's own checks), :func:`split_layers` gives each
pipeline chunk its body layers; :func:`check_pipeline_traits` refuses a runtime trait whose behaviour under pipeline
parallelism is not priced.
"""

from __future__ import annotations

from typing import Iterable

from hp_core.engine import schedule as schedule_lib
from hp_core.errors import ConfigError
from hp_core.schedules import Schedule, ScheduleLayout
from hp_core.specs import ParallelSpec
from hp_core.specs.overlap import OverlapSchedule

__all__ = ["PIPELINE_UNPRICED_TRAITS", "PipelineTraitError", "check_pipeline_traits", "check_userbuffers_layout", "split_layers",
           "validate_layout"]

# The traits (hp_core.traits.TRAITS) whose behaviour under pipeline parallelism (pp > 1) is not priced, each with why.
# chunked_cross_entropy: torchtitan runs its ChunkedCELoss under PP (torchtitan/trainer.py passes the loss to the
# pipelining function and sets the last stage's lm_head on it, _skip_lm_head; pytorch/torchtitan@6b9602339), and the
# loss's call, which the pipeline schedule makes in the last stage's forward, runs every chunk's backward there: the
# head's input and weight gradients (components/loss.py ChunkedCELoss.__call__) and, under FSDP, the head's gradient
# reduce-scatter on the last chunk of every micro-batch (set_requires_gradient_sync(True) on lm_head, where torch's
# pipelining defers the reduction to once per step: pipelining/stage.py backward_maybe_with_nosync,
# perform_reduce_grad). hp's schedules time the head's GEMM backward in the stage's backward (half of it in a
# zero-bubble schedule's W pass) and FSDP's reduce-scatter once per step, so the last stage's passes would be wrong.
PIPELINE_UNPRICED_TRAITS = {
    "chunked_cross_entropy": (
        "the chunked loss (loss_implementation=chunked, torchtitan's ChunkedCELoss) is not priced under pipeline "
        "parallelism: torchtitan runs the head's input and weight gradients inside the loss, in the last stage's "
        "forward, and reduce-scatters the head's FSDP gradient every micro-batch, where hp's schedules price the "
        "head's backward in the backward (a zero-bubble schedule's W pass) and one reduction a step; use pp 1, or "
        "loss_implementation upcast or fused"
    ),
}


class PipelineTraitError(ConfigError):
    """:func:`check_pipeline_traits`'s refusal (a search counts it under its own reason)."""


def check_pipeline_traits(parallel: ParallelSpec, traits: Iterable[str]) -> None:
    """Refuse ``pp > 1`` where the runtime has a trait of :data:`PIPELINE_UNPRICED_TRAITS`.

    Raises:
        PipelineTraitError: At ``$.parallel.pp``, one line saying why.
    """
    if parallel.pp == 1:
        return
    for trait in sorted(set(traits) & PIPELINE_UNPRICED_TRAITS.keys()):
        raise PipelineTraitError("$.parallel.pp", f"pp={parallel.pp}: {PIPELINE_UNPRICED_TRAITS[trait]}")


def check_userbuffers_layout(parallel: ParallelSpec, schedule: OverlapSchedule | None) -> None:
    """Refuse TP communication overlap through Transformer Engine's userbuffers (:attr:`OverlapSchedule.userbuffers
    <hp_core.specs.overlap.OverlapSchedule.userbuffers>`, Megatron-LM's ``--tp-comm-overlap``) at ``tp > 1`` without
    sequence parallelism, as Megatron-LM does: ``validate_args`` asserts ``args.sequence_parallel`` under
    ``args.tp_comm_overlap`` (``megatron/training/arguments.py`` lines 1441-1442 at NVIDIA/Megatron-LM@d98e8a6, since
    116ffddc58, 2023-10-23), and Transformer Engine runs no userbuffers overlap without it (``module/linear.py``
    lines 1629-1656 at NVIDIA/TransformerEngine@d0067d0: every ``ub_*`` flag ands ``self.sequence_parallel``).

    At ``tp == 1`` it is accepted and prices nothing (no TP collective, and TE's ``sequence_parallel`` is
    ``tp_size > 1 and ...``): Megatron-LM at d98e8a6 refuses it there too, having turned sequence parallelism off at
    TP 1 just before the assertion (lines 1433-1439; the order since e1993fa6f7, 2024-11-13), but Megatron-Core
    before that (r0.8.0 included, the Megatron-LM README's weak-scaling table, whose 1.7B row runs TP 1) asserted
    first and accepted ``--tp-comm-overlap --sequence-parallel`` at TP 1, and hp keeps pricing those runs.

    Raises:
        ConfigError: At ``$.parallel.sp``, one line naming the option and what to do.
    """
    if schedule is None or not (schedule.tp_comm_overlap and schedule.userbuffers) or parallel.tp == 1 or parallel.sp:
        return
    raise ConfigError("$.parallel.sp", f"tp_comm_overlap (--tp-comm-overlap) at tp={parallel.tp} needs sequence "
                                       "parallelism, as Megatron-LM asserts; set parallel.sp true or tp_comm_overlap false")


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
