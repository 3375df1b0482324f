"""The layout search's first phase: every candidate enumerated, rejected on sight or bounded cheaply.

Divisibility from the layout alone or from the layers' own validation; then,
per ``(cp, tp)`` with a :class:`~hp_core.engine.search.bounds._Bounder` of
its contexts, the memory bounds and a lower bound on the step-time bound. A
bounded candidate is answered as one integer (:func:`_pack`). See
:mod:`hp_core.engine.search` for the whole method and why it is exact.
"""

from __future__ import annotations

import functools
import math
import struct
from typing import Any, Callable, Iterable, Mapping

import attrs

from hp_core.engine.search.bounds import _Bounder
from hp_core.engine.search.layouts import (
    R_BATCH,
    R_EXPERTS,
    R_FULL,
    R_HSDP,
    R_LAYERS,
    R_SEQUENCE,
    R_STATIC,
    Layout,
    _Job,
    balanced_layers,
)
from hp_core.specs import ModelSpec
from hp_core.specs.overlap import replicate_split_error


def _factorize(n: int) -> list[tuple[int, int]]:
    """*n*'s prime factors with their exponents (trial division up to the square root: at most about
    4,100 steps within the bounds of hp_core.bounds)."""
    factors = []
    p = 2
    while p * p <= n:
        if n % p == 0:
            e = 0
            while n % p == 0:
                n //= p
                e += 1
            factors.append((p, e))
        p += 1 if p == 2 else 2
    if n > 1:
        factors.append((n, 1))
    return factors


@functools.lru_cache(maxsize=4096)
def _divisor_tuple(n: int) -> tuple[int, ...]:
    divisors = [1]
    for p, e in _factorize(n):
        divisors = [d * p**k for d in divisors for k in range(e + 1)]
    return tuple(sorted(divisors))


def _divisors(n: int) -> list[int]:
    """Every divisor of *n*, ascending, from its factorization (never a walk up to *n*)."""
    return list(_divisor_tuple(n))


def count_candidates(devices: int, fixed: Mapping[str, int], body_layers: int, global_batch_size: int,
                     experts: bool, zeros: int) -> int:
    """How many candidates :func:`_first_phase` enumerates (its ``considered``), counted without evaluating any.

    Used to refuse a search past :data:`~hp_core.bounds.MAX_SEARCH_LAYOUTS` before it starts.
    """
    def allowed(name: str, values: Iterable[int]) -> list[int]:
        return _allowed(fixed, name, values)

    total = 0
    for dp, cp, tp in _families(devices, fixed):
        for pp in allowed("pp", [devices // (dp * cp * tp)]):
            vpps = len(allowed("vpp", _divisors(max(1, body_layers // pp)) if pp > 1 else [1]))
            if experts:
                pairs = sum(len(allowed("etp", _divisors(dp * cp * tp // ep))) for ep in allowed("ep", _divisors(dp * cp * tp)))
            else:
                pairs = len(allowed("ep", [1])) * len(allowed("etp", [1]))
            per_dp = global_batch_size // dp if global_batch_size % dp == 0 else None
            sizes = len(allowed("micro_batch_size", _divisors(per_dp))) if per_dp is not None else 1
            total += vpps * pairs * sizes * zeros
    return total


def _routed_experts(model: ModelSpec, registry: Any, runtime: Any, precision: Any, seq_len: int) -> int | None:
    """The routed experts every expert layer splits over ``ep`` (the gcd of what the layers state,
    ``LayerWork.routed_experts``, evaluated once at one rank), ``None`` without experts or where a layer
    cannot be evaluated there (then each layout's own evaluation refuses what does not divide)."""
    from hp_core.engine.prepare import evaluate_groups, layer_context, model_kinds, with_sublayers
    from hp_core.errors import HPError
    from hp_core.specs import ParallelSpec

    context = with_sublayers(layer_context(ParallelSpec(seq_len=seq_len), precision, runtime.attention,
                                           runtime.vocab_pad_multiple, runtime.traits), registry)
    try:
        costs = evaluate_groups(model_kinds(model, registry), model.layers, context)
    except HPError:
        return None
    counts = [cost.work.routed_experts for cost in costs if cost.work is not None and cost.work.routed_experts]
    return math.gcd(*counts) if counts else None


# ---------------------------------------------------------------------- candidates as integers
#
# The first phase answers each bounded candidate as one int: a non-negative float's IEEE 754 bits order
# as the float does, so ``bits(bound) << key bits | packed key`` sorts as ``(bound, key)``, in a fraction
# of a tuple's memory (DeepSeek-V3 on 2,048 devices bounds about 394,000 candidates).

_KEY_FIELDS = 9  # (dp, cp, tp, pp, vpp, ep, etp, mbs, zero)
_DOUBLE = struct.Struct("<d")
_BITS = struct.Struct("<Q")


def _key_bits(devices: int, global_batch_size: int, body_layers: int, zeros: Iterable[int]) -> int:
    """Bits of one field of a packed layout key: every degree, size and level is below ``2**bits``."""
    return max(devices, global_batch_size, body_layers, *zeros, 1).bit_length()


def _float_bits(value: float) -> int:
    return _BITS.unpack(_DOUBLE.pack(value))[0]


def _pack(bound: float, key: tuple[int, ...], bits: int) -> int:
    """One candidate as an int that sorts as ``(bound, key)`` (*bound* non-negative)."""
    packed = 0
    for value in key:
        packed = (packed << bits) | value
    return (_float_bits(bound) << (bits * _KEY_FIELDS)) | packed


def _unpack(entry: int, bits: int) -> tuple[float, tuple[int, ...]]:
    """The ``(bound, key)`` of :func:`_pack`."""
    mask = (1 << bits) - 1
    key = []
    for _ in range(_KEY_FIELDS):
        key.append(entry & mask)
        entry >>= bits
    return _DOUBLE.unpack(_BITS.pack(entry))[0], tuple(reversed(key))


def _allowed(fixed: Mapping[str, int], name: str, values: Iterable[int]) -> list[int]:
    """The *values* of degree *name* that *fixed* allows: all, or the one it holds."""
    return [v for v in values if name not in fixed or fixed[name] == v]


def _families(devices: int, fixed: Mapping[str, int]) -> list[tuple[int, int, int]]:
    """Every ``(dp, cp, tp)`` of *devices* that *fixed* allows, in enumeration order."""
    return [(dp, cp, tp) for dp in _allowed(fixed, "dp", _divisors(devices))
            for cp in _allowed(fixed, "cp", _divisors(devices // dp))
            for tp in _allowed(fixed, "tp", _divisors(devices // (dp * cp)))]


def _shares(families: Iterable[tuple[int, int, int]]) -> list[tuple[tuple[int, int, int], ...]]:
    """The families grouped by ``(cp, tp)``, in order of first appearance: no two groups share a layer context."""
    shared: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for dp, cp, tp in families:
        shared.setdefault((cp, tp), []).append((dp, cp, tp))
    return [tuple(group) for group in shared.values()]


@attrs.frozen
class _FirstTask:
    """Some ``(dp, cp, tp)`` families of the first phase, for a worker."""

    job: _Job
    devices: int
    experts: int | None
    zeros: tuple[int, ...]
    fixed: tuple[tuple[str, int], ...]
    families: tuple[tuple[int, int, int], ...]


def _first_work(task: _FirstTask) -> tuple[list[int], dict[str, int], int]:
    """:func:`_first_phase` over the task's families, with a bounder of its own."""
    counts: dict[str, int] = {}
    bounded, considered = _first_phase(_Bounder(task.job), task.devices, task.experts, task.zeros, dict(task.fixed),
                                       counts, None, list(task.families))
    return bounded, counts, considered


def _first_phase(
    bounder: _Bounder, devices: int, experts: int | None, zeros: tuple[int, ...], fixed: Mapping[str, int],
    counts: dict[str, int], progress: Callable[[int, int], None] | None,
    families: list[tuple[int, int, int]] | None = None,
) -> tuple[list[int], int]:
    """Enumerate every candidate; count those rejected on sight or by a memory bound; bound the rest's time from below.

    The families are bounded one ``(cp, tp)`` at a time (:func:`_shares`), the
    contexts of one dropped before the next.

    Args:
        families: The ``(dp, cp, tp)`` to enumerate; every one :func:`_families` gives when ``None``.

    Returns the bounded candidates, each packed (:func:`_pack`) with a lower
    bound on its time bound (:meth:`_Bounder.lower_bound`), and the count of
    all candidates enumerated.
    """
    job = bounder.job
    body_layers, global_batch_size, seq_len = bounder.body_count, job.global_batch_size, job.seq_len
    limit = bounder.limit
    bits = _key_bits(devices, global_batch_size, body_layers, zeros)
    bound_shift = bits * _KEY_FIELDS
    bounded: list[int] = []
    considered = 0

    def allowed(name: str, values: Iterable[int]) -> list[int]:
        return _allowed(fixed, name, values)

    def reject(reason: str, count: int) -> None:
        counts[reason] = counts.get(reason, 0) + count

    timing = bounder.rt.timing
    replicate = timing.schedule.fsdp_replicate if timing is not None else 1
    step_reduce = timing is not None and timing.schedule.fsdp_pipeline_step_reduce
    if families is None:
        families = _families(devices, fixed)
    done = 0
    for share in _shares(families):
        bounder.forget()
        for dp, cp, tp in share:
            done += 1
            if progress is not None:
                progress(done, len(families))
            for pp in allowed("pp", [devices // (dp * cp * tp)]):
                # Layers kept in the compute dtype, more than a stage holds (Megatron-Core refuses them; prepare too).
                kept_refused = bounder.prepared.kept_refusal(pp)
                vpps = allowed("vpp", _divisors(max(1, body_layers // pp)) if pp > 1 else [1])
                expert_pairs = [(ep, etp) for ep in allowed("ep", _divisors(dp * cp * tp) if experts else [1])
                                for etp in allowed("etp", _divisors(dp * cp * tp // ep) if experts else [1])]
                per_dp = global_batch_size // dp if global_batch_size % dp == 0 else None
                mbss = allowed("micro_batch_size", _divisors(per_dp)) if per_dp is not None else []
                zs = allowed("zero", zeros)
                for vpp in vpps:
                    # The micro-batch counts the schedule runs (interleaved 1F1B: a multiple of pp, Megatron-LM
                    # schedules.py); the others are refused for the schedule's reason.
                    refused = {mbs: bounder.refusal(pp, vpp, global_batch_size // (mbs * dp)) for mbs in mbss}
                    sizes = [mbs for mbs in mbss if refused[mbs] is None]
                    split = balanced_layers(body_layers, pp * vpp) if pp <= body_layers else None
                    for ep, etp in expert_pairs:
                        if per_dp is None:
                            considered += len(zs)
                            reject(R_BATCH, len(zs))
                            continue
                        n = len(mbss) * len(zs)
                        considered += n
                        if not n:
                            continue
                        if pp > body_layers:
                            reject(R_LAYERS, n)
                            continue
                        if kept_refused is not None:
                            reject(kept_refused, n)
                            continue
                        if experts is not None and experts % ep:
                            reject(R_EXPERTS, n)
                            continue
                        if seq_len % cp or (tp > 1 and (seq_len // cp) % tp):
                            reject(R_SEQUENCE, n)
                            continue
                        # HSDP (check_fsdp_replicate): pp 1 unless the profile prices FSDP's once-per-step reduction
                        # under PP, and a replicate degree that splits dp and, under expert parallelism, the expert dp
                        # (world / (pp * ep * etp)).
                        if replicate > 1 and ((pp > 1 and not step_reduce) or replicate_split_error(replicate, dp, ep, dp * cp * tp // (ep * etp))):
                            reject(R_HSDP, n)
                            continue
                        for reason in refused.values():
                            if reason is not None:
                                reject(reason, len(zs))
                        if not sizes:
                            continue
                        compositions = bounder.compositions(pp, vpp, split)
                        # The packed key of (dp, cp, tp, pp, vpp, ep, etp), room left for mbs and zero.
                        family = 0
                        for value in (dp, cp, tp, pp, vpp, ep, etp):
                            family = (family << bits) | value
                        family <<= 2 * bits
                        # The static bound from the first micro-batch size the layers accept (parameters do not
                        # depend on it): a ZeRO level it rejects is rejected at every size, unevaluated.
                        levels: tuple[int, ...] | None = None
                        # The family's layout at its smallest size stands for all (only the evaluation reads the size).
                        probe = None
                        for n_mbs, mbs in enumerate(sizes):
                            if probe is None:
                                probe = Layout(dp=dp, cp=cp, tp=tp, pp=pp, vpp=vpp, ep=ep, etp=etp, zero=zs[0],
                                               micro_batch_size=mbs, layers_per_stage=split,
                                               schedule_name=bounder.job.schedule)
                            found = bounder.context(probe, mbs)
                            if isinstance(found, str):
                                reject(found, len(levels) if levels is not None else len(zs))
                                continue
                            if levels is None:
                                static = {z: bounder.static_bytes(probe, found.costs, compositions, z) for z in zs}
                                levels = tuple(z for z in zs if static[z] <= limit)
                                if len(levels) < len(zs):
                                    reject(R_STATIC, (len(zs) - len(levels)) * (len(sizes) - n_mbs))
                                if not levels:
                                    break
                                first_static = {z: bounder.first_stage_static(probe, found.costs, z) for z in levels}
                            micro_batches = global_batch_size // (mbs * dp)
                            kept, working = bounder.first_stage_activations(probe, found, micro_batches)
                            # What the first stage keeps does not fall as mbs grows (the sequences in flight,
                            # mbs * min(in-flight, micro-batches), do not): a level it rejects is rejected at every
                            # larger size too. The working set can fall (the layers above a large one free more),
                            # so it rejects one size at a time.
                            ended = tuple(z for z in levels if first_static[z] + kept > limit)
                            if ended:
                                reject(R_FULL, len(ended) * (len(sizes) - n_mbs))
                                levels = tuple(z for z in levels if z not in ended)
                                if not levels:
                                    break
                            fits = tuple(z for z in levels if first_static[z] + kept + working <= limit)
                            reject(R_FULL, len(levels) - len(fits))
                            if fits:
                                lower = bounder.lower_bound(probe, found.priced_seconds, micro_batches)
                                head = (_float_bits(lower) << bound_shift) | family | (mbs << bits)
                                for z in fits:
                                    bounded.append(head | z)
    bounder.forget()
    return bounded, considered
