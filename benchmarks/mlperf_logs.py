"""Read MLPerf Training result logs (``:::MLLOG`` lines) into the facts hp's measured rows keep.

Run: ``python benchmarks/mlperf_logs.py RESULT.txt [RESULT.txt ...]`` prints each log's facts as JSON (``--blocks``
first: :func:`block_facts`, for logs with one ``train_step_time`` record per training block).

An MLPerf Training result log (mlcommons/training_results_v*, ``<submitter>/results/<system>/<benchmark>/result_*.txt``)
is one JSON record per line after the ``:::MLLOG`` prefix (the mlperf-logging format,
mlcommons/logging ``mlperf_logging/mllog``). NVIDIA's NeMo implementations log every optimizer step's wall time as
a ``tracked_stats`` record whose value holds ``train_step_time`` (seconds) and whose metadata holds the ``step`` and
``samples_count`` (``custom_callbacks.py`` of each implementation; the v4.0 and v4.1 GPT-3 logs name it
``train_step_timing in s``, the v3.1 ones ``train_step_timing``, :data:`STEP_TIME_KEYS`); the run's ``global_batch_size``,
``max_sequence_length`` and ``submission_platform`` are their own records. The step time hp compares with is the
median of the logged steps after the first :data:`SKIPPED_STEPS` (the first steps run slower; the CUDA graphs are
captured in the warm-up before ``run_start``, outside the logged steps), so a few evaluation-adjacent or straggling steps do not move it. The logs are read from a
checkout of the results repository; the repository keeps only the facts this prints, with the log's path and commit.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path
from typing import Iterator

__all__ = ["LOSS_KEY", "SKIPPED_STEPS", "STEP_TIME_KEYS", "block_facts", "records", "run_facts"]

PREFIX = ":::MLLOG "
# The tracked_stats value keys holding one optimizer step's seconds: NeMo 2 implementations (v5.0, v5.1) and the
# NeMo 1 GPT-3 ones of v4.0 and v4.1 (e.g. NVIDIA/results/eos_n64_ngc24.09_nemo/gpt3/result_0.txt), and of v3.1
# (NeMo 23.09, whose TimingCallback logged the metric without the ' in s' suffix: training_results_v3.1
# NVIDIA/results/eos_n64_ngc23.09_nemo/gpt3/result_0.txt). In both GPT-3 implementations the value is NeMo's
# exp_manager TimingCallback timer from on_train_batch_start to on_train_batch_end, one optimizer step
# (custom_callbacks.py EpochTimingCallback keeps that timer; MetricsLogger._log_throughputs logs it as tracked_stats).
# A record holding more than one of them counts once (the first).
STEP_TIME_KEYS = ("train_step_time", "train_step_timing in s", "train_step_timing")
# Steps left out at the start of a run before the median: the first optimizer steps run slower (allocator growth,
# first use of NCCL connections; the CUDA graphs are captured in the warm-up before run_start); 5 is above the four
# steps that stand out in NVIDIA's v5.1 Llama 3.1 405B logs on 512 GB200s (Tyche: 18.26, 17.57, 17.51, 17.36 s
# against a 17.26 s median; Theia's 512 GB300s: 13.36 s, then 13.10-13.13 s).
SKIPPED_STEPS = 5
# The v6.0 NeMo logs carry two kinds of ``train_step_time`` record (NVIDIA's v6.0 ``callback_logging.py``, e.g.
# training_results_v6.0 NVIDIA/benchmarks/deepseekv3_671b/implementations/tyche-hsg_ngpu8192_ngc26.04_nemo):
# ``DeltaTimingCallback.on_train_step_end`` logs one step's wall time (the previous step's end to this one's, the
# timer reset after each evaluation) every ``log_every_n_steps`` steps with this key beside it, and
# ``MLPerfLoggingCallback._log_train_step_time`` logs each training block's mean step (a ``DeltaTimer`` from the last
# evaluation's end over the block's steps; ``samples_count`` the block's steps times the global batch) without it. A
# log holding both is read by :func:`run_facts` through the first kind and by :func:`block_facts` through the second;
# the v5.x logs hold one kind each (their per-step records also carry the loss).
LOSS_KEY = "reduced_train_loss"


def records(text: str) -> Iterator[dict]:
    """Every ``:::MLLOG`` record of a result log, in order (other lines are skipped)."""
    for line in text.splitlines():
        at = line.find(PREFIX)
        if at >= 0:
            yield json.loads(line[at + len(PREFIX):])


# The run's own records a row keeps, as logged (the submission's platform, benchmark and organisation, its batch).
RUN_KEYS = ("submission_platform", "global_batch_size", "max_sequence_length", "gradient_accumulation_steps",
            "submission_benchmark", "submission_org")


def _run_fact(rec: dict, facts: dict, keys: tuple[str, ...] = RUN_KEYS) -> bool:
    """Keep *rec* in *facts* where it is one of the run's own records (*keys*, and ``run_stop``'s status); whether
    it was."""
    key = rec.get("key")
    if key in keys:
        facts[key] = rec.get("value")
    elif key == "run_stop":
        facts["status"] = (rec.get("metadata") or {}).get("status")
    else:
        return False
    return True


def run_facts(text: str) -> dict:
    """The facts of one result log: platform, global batch, sequence length, the logged step times' count, median
    (after :data:`SKIPPED_STEPS`), minimum and maximum, the median spacing of the kept step records' ``time_ms``
    (seconds: the wall time from one logged step to the next, which also holds what runs outside the step timer),
    and the run's status. A v6.0 log's block records are left out (:data:`LOSS_KEY`; ``block_records_left_out``), and
    its per-step records come every ``log_every_n_steps`` steps, so their spacing spans that many steps.

    Raises:
        ValueError: the log states no ``train_step_time`` beyond the skipped steps (not a NeMo-style log).
    """
    facts: dict = {}
    found: list[tuple[float, float, bool]] = []  # each step record: seconds, time stamp, whether the loss is beside it
    for rec in records(text):
        key, value = rec.get("key"), rec.get("value")
        if _run_fact(rec, facts):
            continue
        if key == "tracked_stats" and isinstance(value, dict):
            stated = [k for k in STEP_TIME_KEYS if k in value]
            if stated:
                found.append((float(value[stated[0]]), float(rec["time_ms"]) if "time_ms" in rec else math.nan,
                              LOSS_KEY in value))
    # A v6.0 log holds both callbacks' records (:data:`LOSS_KEY`): the steps are the ones with the loss beside them.
    if any(has_loss for _, _, has_loss in found) and not all(has_loss for _, _, has_loss in found):
        found = [f for f in found if f[2]]
        facts["block_records_left_out"] = True
    steps = [seconds for seconds, _, _ in found]
    stamps_ms = [stamp for _, stamp, _ in found]
    kept = steps[SKIPPED_STEPS:]
    if not kept:
        raise ValueError(f"the log states {len(steps)} step-time records ({' or '.join(STEP_TIME_KEYS)}), none past "
                         f"the first {SKIPPED_STEPS}")
    facts.update(logged_steps=len(steps), median_step_seconds=statistics.median(kept),
                 min_step_seconds=min(kept), max_step_seconds=max(kept))
    stamps = stamps_ms[SKIPPED_STEPS:]
    # A record without its time stamp leaves the spacing unstated (absent is not zero).
    if len(stamps) > 1 and not any(math.isnan(t) for t in stamps):
        facts["median_record_spacing_seconds"] = statistics.median((b - a) / 1e3 for a, b in zip(stamps, stamps[1:]))
    return facts


def _batches(samples: int, facts: dict) -> int:
    """*samples* in global batches (the run's ``global_batch_size``, read before its block records)."""
    steps, left = divmod(samples, int(facts["global_batch_size"]))
    if left:
        raise ValueError(f"a block's samples_count {samples} is not a whole number of global batches")
    return steps


def block_facts(text: str) -> dict:
    """The facts of one result log whose ``train_step_time`` records are one per training block (the v5.0 and v5.1
    Llama 2 70B LoRA logs), not one per step: platform, global batch, sequence length, each block's record and step
    count, and the step-weighted mean of the blocks after the first (``block_mean_step_seconds``: the blocks' summed
    seconds over their summed steps).

    What a record measures (NVIDIA/mlperf-common ``mlperf_common/callbacks/logging.py``, the Dockerfile's pinned
    b86d175a read at 85516e5a, whose line numbers 163, 185, 194 and 210 are the ones the logs' records name):
    ``LoggingCallback.on_validation_start`` logs ``train_step_time = DeltaTimer.get_delta() / (global_step -
    previous_step)``, the wall time since the timer's last reset over the block's optimizer steps; the timer is
    reset by ``log_custom_timedelta`` at ``run_start`` (``init_finished``) and at each evaluation's end
    (``validation_time``), so a record is the mean seconds of one step over its block, evaluation excluded, with what
    runs between steps (data loading, the ``train_loss`` record every 10 steps) included. Its ``samples_count`` is the
    block's steps times the global batch. The first block (``skip_evals`` blocks long, and the run's first steps) is
    left out.

    The v5.0 logs (mlperf-common 09933674, the v5.0 ``requirements.txt``'s pin: ``_log_training_throughput``, line
    225) time a record alike (the timer reset at ``init_finished`` and by ``_log_validation_throughput`` at each
    evaluation's end) but state no ``samples_count``: the record's metadata ``step`` is the block's first sample
    (``train_current_block`` times the global batch) and the ``eval_start`` logged next states the block's last
    (``global_step`` times the global batch), so the block's steps are their difference over the global batch.

    Raises:
        ValueError: the log states fewer than two block records, or a v5.0 record without the ``eval_start`` after it.
    """
    facts: dict = {}
    blocks: list[tuple[float, int]] = []
    opened: tuple[float, int] | None = None  # a v5.0 record: its seconds and its block's first sample
    for rec in records(text):
        key, value = rec.get("key"), rec.get("value")
        if _run_fact(rec, facts, RUN_KEYS[:4]):  # a block log's facts as stored: no benchmark or organisation
            continue
        metadata = rec.get("metadata") or {}
        if key == "tracked_stats" and isinstance(value, dict) and "train_step_time" in value and LOSS_KEY not in value:
            if "samples_count" in metadata:
                blocks.append((float(value["train_step_time"]), _batches(int(metadata["samples_count"]), facts)))
            elif "step" in metadata:
                opened = (float(value["train_step_time"]), int(metadata["step"]))
            else:
                raise ValueError("a train_step_time record states neither samples_count (v5.1) nor step (v5.0)")
        elif key == "eval_start" and opened is not None:
            blocks.append((opened[0], _batches(int(metadata["samples_count"]) - opened[1], facts)))
            opened = None
    if opened is not None:
        raise ValueError("a v5.0 block record (metadata step, no samples_count) has no eval_start after it")
    if len(blocks) < 2:
        raise ValueError(f"the log states {len(blocks)} block train_step_time records, none past the first")
    kept = blocks[1:]
    facts.update(block_step_seconds=[t for t, _ in blocks], block_steps=[n for _, n in blocks],
                 block_mean_step_seconds=sum(t * n for t, n in kept) / sum(n for _, n in kept))
    return facts


def main(argv: list[str]) -> None:
    read = block_facts if argv[:1] == ["--blocks"] else run_facts
    for name in argv[1:] if read is block_facts else argv:
        print(json.dumps({"log": name, **read(Path(name).read_text(encoding="utf-8"))}))


if __name__ == "__main__":
    main(sys.argv[1:])
