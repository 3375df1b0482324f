"""Pipeline time by event simulation of a schedule's published order, for schedules with no closed form.

ZB-V, DualPipe and DualPipeV are written for equal passes (``F = B = W``): their
bubble has a closed form there (docs/schedules.md), but with unequal passes the
order stalls in ways that depend on the ratios and on ``m``. So their
``pipeline_seconds`` runs the order itself: every rank's passes, in the order
the trainer issues them, each starting when its rank is free and what it reads
has finished (a forward: the micro-batch's forward on the previous chunk; an
input-gradient pass: its own forward and the next chunk's input gradient; a
weight-gradient pass: its own input gradient). Communication is in the stage
times already (exposed sends), as for every schedule in hp.

The orders (what each rank issues, per micro-batch, chunk and pass):

* ZB-V: PyTorch ``torch/distributed/pipelining/schedules.py``
  ``ScheduleZBVZeroBubble._calculate_single_rank_operations`` (the handcrafted
  V of Qi et al. 2023, arXiv:2401.10241, Section 6).
* DualPipe and DualPipeV: deepseek-ai/DualPipe ``dualpipe/dualpipe.py`` and
  ``dualpipe/dualpipev.py``, ``step``'s eight steps; a forward and a backward
  of the main step run overlapped (``_forward_backward_chunk``), priced as
  ``F + B + W`` together.

An order is compiled once per ``(schedule, p, m)`` into a flat list in
dependency order; pricing it is one pass over that list (docs/schedules.md
gives the time per call).
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

from hp_core.schedules import ScheduleLayout, StagePasses

__all__ = ["ORDERS", "chunk_passes", "order_moments", "order_seconds", "timeline_seconds"]

# A part: (pass, direction, micro-batch, position on the direction's path); pass "F", "B"
# (input gradient, its W later), "W" or "BW" (the whole backward). An op: parts run together.
Part = tuple[str, int, int, int]
Order = list[list[tuple[Part, ...]]]
_PASS_SHARES = {"F": (1, 0, 0), "B": (0, 1, 0), "W": (0, 0, 1), "BW": (0, 1, 1)}


def _v_path(p: int) -> list[int]:
    """The rank of each of the ``2p`` chunks of a V: down the ranks, then back up."""
    return [s if s < p else 2 * p - 1 - s for s in range(2 * p)]


def zb_v_order(p: int, m: int) -> tuple[Order, dict[int, list[int]]]:
    """ZB-V: rank ``r`` runs chunk ``r`` (phase 0) and ``2p - 1 - r`` (phase 1); ``m >= 2p - 1``."""
    orders: Order = []
    for r in range(p):
        chunk = (r, 2 * p - 1 - r)
        issued = {(kind, phase): 0 for kind in "FBW" for phase in (0, 1)}
        ops: list[tuple[Part, ...]] = []

        def issue(*passes: tuple[str, int]) -> None:
            for kind, phase in passes:
                ops.append(((kind, 0, issued[kind, phase], chunk[phase]),))
                issued[kind, phase] += 1

        issue(*[("F", 0)] * (2 * (p - r) - 1))  # warm-up: phase 0's forwards
        issue(*[("F", 1), ("F", 0)] * r)
        issue(*[("F", 1), ("B", 1), ("W", 1)] * (p - r))
        while issued["F", 1] < issued["F", 0] or issued["F", 0] < m:  # steady
            if issued["F", 0] < m:
                issue(("F", 0))
            issue(("B", 0), ("W", 0), ("F", 1), ("B", 1), ("W", 1))
        issue(*[("B", 0), ("B", 1)] * r)  # cool-down
        issue(*[("B", 0), ("W", 0)] * (p - r))
        issue(*[("W", 1)] * (m - issued["W", 1]))
        issue(*[("W", 0)] * (m - issued["W", 0]))
        orders.append(ops)
    return orders, {0: _v_path(p)}


class _DualRank:
    """One rank of ``DualPipe.step``: the next forward and backward micro-batch of each phase,
    and the weight-gradient passes its zero-bubble backwards queue, run oldest first."""

    def __init__(self, where: dict[int, tuple[int, int]]) -> None:
        self.where = where  # phase -> (direction, position)
        self.next = {(kind, phase): 0 for kind in "FB" for phase in (0, 1)}
        self.weights: list[Part] = []
        self.ops: list[tuple[Part, ...]] = []

    def _part(self, kind: str, phase: int, zero_bubble: bool = False) -> Part:
        d, s = self.where[phase]
        j = self.next[kind, phase]
        self.next[kind, phase] += 1
        if kind == "B" and zero_bubble:
            self.weights.append(("W", d, j, s))
            return ("B", d, j, s)
        return ("F" if kind == "F" else "BW", d, j, s)

    def run(self, kind: str, phase: int, zero_bubble: bool = False) -> None:
        self.ops.append((self._part(kind, phase, zero_bubble),))

    def weight(self) -> None:
        self.ops.append((self.weights.pop(0),))

    def overlapped(self, forward_phase: int) -> None:
        """A forward of one phase and the other phase's whole backward, as one op."""
        self.ops.append((self._part("F", forward_phase), self._part("B", 1 - forward_phase)))

    def steps(self, n: int, h: int, per_phase: int, middle: bool) -> list[tuple[Part, ...]]:
        """``step``'s eight steps: *n* ranks in the half (DualPipe) or in all (DualPipeV), *h* this
        rank's index among them, *per_phase* micro-batches each phase runs, *middle*: where the
        phases turn (the main step's first forward and backward are not overlapped there)."""
        for _ in range((n - h - 1) * 2):
            self.run("F", 0)
        for _ in range(h + 1):
            self.run("F", 0)
            self.run("F", 1)
        for _ in range(n - h - 1):
            self.run("B", 1, zero_bubble=True)
            self.weight()
            self.run("F", 1)
        for i in range(per_phase - 2 * n + h + 1):
            if i == 0 and middle:
                self.run("F", 0)
                self.run("B", 1)
            else:
                self.overlapped(0)
            self.overlapped(1)
        for _ in range(n - h - 1):
            self.run("B", 1)
            self.overlapped(1)
        zero_bubble = False  # the second half of step 6's backwards defer their W
        for i in range(h + 1):
            zero_bubble = zero_bubble or (i == (h + 1) // 2 and h % 2 == 1)
            self.run("B", 1, zero_bubble)
            zero_bubble = zero_bubble or (i == (h + 1) // 2 and h % 2 == 0)
            self.run("B", 0, zero_bubble)
        for _ in range(n - h - 1):
            self.weight()
            self.run("B", 0, zero_bubble=True)
        while self.weights:
            self.weight()
        return self.ops


def dualpipe_order(p: int, m: int) -> tuple[Order, dict[int, list[int]]]:
    """DualPipe: half the micro-batches enter at rank 0 (direction 0), half at rank ``p - 1``."""
    half = p // 2
    orders: Order = []
    for r in range(p):
        h = min(r, p - 1 - r)
        mine = {0: (0, r), 1: (1, p - 1 - r)}
        rank = _DualRank(mine if r < half else {0: mine[1], 1: mine[0]})
        orders.append(rank.steps(half, h, m // 2, r in (half - 1, half)))
    return orders, {0: list(range(p)), 1: list(range(p - 1, -1, -1))}


def dualpipev_order(p: int, m: int) -> tuple[Order, dict[int, list[int]]]:
    """DualPipeV: every micro-batch down the V, rank ``r`` runs chunks ``r`` and ``2p - 1 - r``."""
    orders = [_DualRank({0: (0, r), 1: (0, 2 * p - 1 - r)}).steps(p, r, m, r == p - 1) for r in range(p)]
    return orders, {0: _v_path(p)}


ORDERS: dict[str, Callable[[int, int], tuple[Order, dict[int, list[int]]]]] = {
    "zb_v": zb_v_order, "dualpipe": dualpipe_order, "dualpipev": dualpipev_order}


@functools.lru_cache(maxsize=256)
def _compiled(name: str, p: int, m: int) -> tuple[tuple[tuple[int, tuple[int, ...], int, int], ...],
                                                  tuple[tuple[int, int, int], ...]]:
    """The order, compiled: ``(rank, places of the other ranks' ops it waits for, cost, tail)`` per op, each
    after those it waits for, and the distinct ``(F, B, W)`` counts (``cost`` and ``tail`` index them per
    rank: ``rank * len(counts) + i``). An op that waits on nothing of another rank and that no other rank
    waits on (a run of W passes) is folded into the previous op of its rank as its *tail*: it delays
    the rank, not what that op hands on."""
    orders, paths = ORDERS[name](p, m)
    last = {d: len(path) - 1 for d, path in paths.items()}
    writer: dict[tuple[str, int, int, int], int] = {}
    shares: dict[tuple[int, int, int], int] = {(0, 0, 0): 0}
    reads_of: list[list[tuple[str, int, int, int]]] = []
    count_of: list[tuple[int, int, int]] = []
    rank_of: list[int] = []
    for r, rank_ops in enumerate(orders):
        for op in rank_ops:
            reads, count = [], (0, 0, 0)
            for kind, d, j, s in op:
                if paths[d][s] != r:
                    raise AssertionError(f"{name}: pass {(kind, d, j, s)} issued on rank {r}, runs on {paths[d][s]}")
                if kind == "F":
                    reads += [("F", d, j, s - 1)] if s else []
                elif kind == "W":
                    reads.append(("B", d, j, s))
                else:
                    reads.append(("F", d, j, s))
                    reads += [("B", d, j, s + 1)] if s < last[d] else []
                writer["F" if kind == "F" else "W" if kind == "W" else "B", d, j, s] = len(rank_of)
                count = tuple(a + b for a, b in zip(count, _PASS_SHARES[kind]))
            reads_of.append(reads)
            count_of.append(count)
            rank_of.append(r)
    n = len(rank_of)
    waits = [{writer[x] for x in reads} | ({g - 1} if g and rank_of[g - 1] == rank_of[g] else set())
             for g, reads in enumerate(reads_of)]
    # Kahn's topological order over every wait, the rank's own order included: a deadlock is an error.
    waiting = [len(w) for w in waits]
    unblocks: list[list[int]] = [[] for _ in range(n)]
    for g, w in enumerate(waits):
        for x in w:
            unblocks[x].append(g)
    ready = [g for g in range(n) if not waiting[g]]
    flat: list[int] = []
    while ready:
        g = ready.pop()
        flat.append(g)
        for h in unblocks[g]:
            waiting[h] -= 1
            if not waiting[h]:
                ready.append(h)
    if len(flat) < n:
        raise AssertionError(f"{name}: the order deadlocks at p={p}, m={m}")
    cross = [{x for x in w if rank_of[x] != rank_of[g]} for g, w in enumerate(waits)]
    awaited = {x for c in cross for x in c}
    # Fold: per rank in its order, an op with no cross wait that nobody else awaits joins the op before it.
    host = list(range(n))
    tail = [(0, 0, 0)] * n
    for g in range(n):
        if g and rank_of[g - 1] == rank_of[g] and not cross[g] and g not in awaited:
            host[g] = host[g - 1]
            tail[host[g]] = tuple(a + b for a, b in zip(tail[host[g]], count_of[g]))
    kept = [g for g in flat if host[g] == g]
    place = {g: i for i, g in enumerate(kept)}
    for c in count_of + tail:
        shares.setdefault(c, len(shares))
    width = len(shares)
    compiled = tuple((rank_of[g], tuple(sorted(place[x] for x in cross[g])), rank_of[g] * width + shares[count_of[g]],
                      rank_of[g] * width + shares[tail[g]]) for g in kept)
    return compiled, tuple(sorted(shares, key=shares.__getitem__))


def timeline_seconds(name: str, layout: ScheduleLayout, passes: Sequence[tuple[float, float, float]]) -> float:
    """From the first pass's start to the last one's end, given per rank one chunk's ``(F, B, W)`` seconds."""
    ops, shares = _compiled(name, layout.pp, layout.micro_batches)
    cost = [f * a + b * x + w * y for f, b, w in passes for a, x, y in shares]
    end: list[float] = []
    free = [0.0] * layout.pp
    for r, waits, k, t in ops:
        start = free[r]
        for x in waits:
            if end[x] > start:
                start = end[x]
        start += cost[k]
        end.append(start)
        free[r] = start + cost[t]
    return max(free)


def chunk_passes(stages: Sequence[StagePasses], chunks_per_rank: int) -> list[tuple[float, float, float]]:
    """One chunk's ``(F, B, W)`` per rank: a stage's time split evenly over the chunks it runs per
    micro-batch (``B``: the input gradient, the backward less its weight-gradient part)."""
    found = []
    for s in stages:
        f, w = s.forward_seconds / chunks_per_rank, s.weight_gradient_seconds / chunks_per_rank
        found.append((f, max(0.0, s.seconds / chunks_per_rank - f - w), w))
    return found


def order_seconds(name: str, layout: ScheduleLayout, stages: Sequence[StagePasses], chunks_per_rank: int) -> float:
    """A schedule's ``pipeline_seconds`` by its order: :func:`timeline_seconds` of :func:`chunk_passes`, at
    least the slowest stage's own work (``m t_max``, which the sum of its passes may miss by rounding)."""
    seconds = timeline_seconds(name, layout, chunk_passes(stages, chunks_per_rank))
    return max(seconds, layout.micro_batches * max(s.seconds for s in stages))


def _dominates(a: tuple[tuple[int, ...], tuple[int, ...]], b: tuple[tuple[int, ...], tuple[int, ...]]) -> bool:
    """Whether moment *a* keeps at least *b*'s whole micro-batches and at least its awaiting W, on every chunk."""
    return all(ka - wa >= kb - wb and wa >= wb for ka, wa, kb, wb in zip(*a, *b))


@functools.lru_cache(maxsize=32)
def _order(name: str, p: int, m: int) -> Order:
    return ORDERS[name](p, m)[0]


@functools.lru_cache(maxsize=1024)
def order_moments(name: str, p: int, m: int, rank: int, chunks: tuple[int, ...],
                  peak: tuple[tuple[int, ...], tuple[int, ...]]) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """The moments of *rank*'s order with micro-batches awaiting W that the stage's *peak* does not dominate.

    Each moment is, per chunk of *chunks* (a part's position on its path is its chunk), ``(kept, awaiting
    W)``, looked at after an op's forwards and after each input-gradient pass; of those, the ones no other
    keeps as many whole micro-batches and as many awaiting W on every chunk as (whatever either weighs,
    a moment so dominated keeps no more).
    """
    at = {chunk: i for i, chunk in enumerate(chunks)}
    kept, waiting = [0] * len(chunks), [0] * len(chunks)
    seen = set()
    for op in _order(name, p, m)[rank]:
        for kind, _, _, s in op:
            kept[at[s]] += kind == "F"
        seen.add((tuple(kept), tuple(waiting)))
        for kind, _, _, s in op:
            c = at[s]
            if kind == "B":
                waiting[c] += 1
                seen.add((tuple(kept), tuple(waiting)))
            elif kind in ("W", "BW"):
                kept[c] -= 1
                waiting[c] -= kind == "W"
    # Most whole and awaiting first: a moment can only be dominated by one before it.
    found = sorted((x for x in seen if any(x[1]) and not _dominates(peak, x)), key=lambda x: -sum(x[0]) - sum(x[1]))
    kept_moments: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    for x in found:
        if not any(_dominates(y, x) for y in kept_moments):
            kept_moments.append(x)
    return tuple(sorted(kept_moments))
