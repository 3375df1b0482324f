"""A small discrete-event simulation of pipeline schedules, to check the built-in schedules' closed forms.

Each schedule is written here as what every rank runs, in order: a list of
*ops*, each a tuple of *parts* run together (DualPipe overlaps a forward and a
backward of two micro-batches in one op). A part is ``(pass, direction,
micro_batch, position)``: ``pass`` is ``"F"`` (forward), ``"B"`` (input
gradient only, the weight gradient deferred to a ``"W"`` part) or ``"BW"`` (the
whole backward); ``position`` is the chunk's place on the micro-batch's path
through the pipeline (``paths[direction][position] = (rank, chunk)``).

The orders follow the published schedules: GPipe (Huang et al. 2019), 1F1B
and interleaved 1F1B (Narayanan et al. 2021; Megatron-LM ``schedules.py``:
warm-up counts and the chunk of forward ``k``), ZB-H1 and ZB-H2 (Qi et al.
2023, Section 2, Figure 3: W passes of stage ``i`` delayed by ``i``; ZB-H2's
``2(p - i) - 1`` warm-up forwards), ZB-V (the same paper, Section 6: two
chunks per rank in a V, as PyTorch's ``ScheduleZBVZeroBubble`` orders them), DualPipe and DualPipeV (deepseek-ai/DualPipe
``dualpipe.py`` and ``dualpipev.py``: the steps of ``DualPipe.step``).

:func:`simulate` runs the ops: a part waits for its micro-batch's previous
forward (the previous position), a backward for its own forward and the next
position's backward, a ``W`` for its ``B``; an op starts when its rank is free
and every part's dependency has finished. Activations: a micro-batch is kept on
a chunk from its forward's start to the end of its ``BW`` or ``W``; in-flight
counts depend only on each rank's order, so they are counted by walking it.
"""

from __future__ import annotations

from typing import Sequence

import attrs

Part = tuple[str, int, int, int]  # (pass, direction, micro_batch, position)
Op = tuple[Part, ...]


@attrs.frozen
class Timeline:
    """What a simulation found.

    Attributes:
        makespan: From the first op's start to the last op's end.
        busy: Per rank, the seconds it computes.
        peaks: Per rank, the micro-batches kept on each of its chunks (in
            ``rank_chunks`` order) at the first moment its total reaches its maximum.
        awaiting: Per rank and chunk, those of :attr:`peaks` whose input-gradient
            pass B has run and whose weight-gradient pass W has not.
    """

    makespan: float
    busy: tuple[float, ...]
    peaks: tuple[tuple[int, ...], ...]
    awaiting: tuple[tuple[int, ...], ...]


def simulate(orders: Sequence[Sequence[Op]], paths: dict[int, Sequence[tuple[int, int]]],
             rank_chunks: Sequence[Sequence[int]], durations: dict[str, float] | Sequence[dict[str, float]]) -> Timeline:
    """Run every rank's ops in order (module docstring); raises ``AssertionError`` on a deadlock or a lost part.

    *durations*: one chunk's ``F``, ``B`` and ``W`` seconds, the same on every rank or one dict per rank.
    """
    per_rank = [durations] * len(orders) if isinstance(durations, dict) else list(durations)
    last = {d: len(path) - 1 for d, path in paths.items()}
    ranks = len(orders)
    # Per op: what it waits for, its seconds and what it finishes (a BW finishes its B for the stage before).
    plans: list[list[tuple[tuple, float, tuple]]] = []
    for r, order in enumerate(orders):
        seconds_of = dict(per_rank[r], BW=per_rank[r]["B"] + per_rank[r]["W"])
        plan = []
        for op in order:
            needs, finishes, seconds = [], [], 0.0
            for part in op:
                kind, d, j, s = part
                assert paths[d][s][0] == r, f"part {part} listed on rank {r}, runs on {paths[d][s][0]}"
                if kind == "F":
                    if s > 0:
                        needs.append(("F", d, j, s - 1))
                elif kind == "W":
                    needs.append(("B", d, j, s))
                else:
                    needs.append(("F", d, j, s))
                    if s < last[d]:
                        needs.append(("B", d, j, s + 1))
                seconds += seconds_of[kind]
                finishes.append(part if kind != "BW" else ("B", d, j, s))
            plan.append((tuple(needs), seconds, tuple(finishes)))
        plans.append(plan)
    done: dict[tuple, float] = {}
    cursor = [0] * ranks
    free = [0.0] * ranks
    left = sum(len(plan) for plan in plans)
    while left:
        progressed = False
        for r in range(ranks):
            plan, at, clock = plans[r], cursor[r], free[r]
            while at < len(plan):
                needs, seconds, finishes = plan[at]
                start = clock
                for need in needs:
                    t = done.get(need)
                    if t is None:
                        break
                    if t > start:
                        start = t
                else:
                    clock = start + seconds
                    for part in finishes:
                        done[part] = clock
                    at += 1
                    continue
                break
            if at != cursor[r]:
                left -= at - cursor[r]
                cursor[r], free[r] = at, clock
                progressed = True
        assert progressed, f"deadlock: ranks stuck at {[orders[r][cursor[r]] if cursor[r] < len(orders[r]) else None for r in range(ranks)]}"
    busy = tuple(sum(seconds for _, seconds, _ in plan) for plan in plans)
    peaks = [_peak(orders[r], paths, rank_chunks[r]) for r in range(ranks)]
    return Timeline(max(free), busy, tuple(k for k, _ in peaks), tuple(a for _, a in peaks))


def _peak(order: Sequence[Op], paths: dict[int, Sequence[tuple[int, int]]],
          chunks: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per chunk, the micro-batches kept and those of them awaiting their W, at the rank's peak point.

    Walks the order: an op's forwards add a micro-batch to their chunk, then the moment is
    looked at, then its B parts move a micro-batch to awaiting its W and its W and BW parts
    free one. The peak point is the first moment the rank keeps the most micro-batches; it
    must also keep the most that are whole (no B run yet), so that no other moment holds more
    whatever a micro-batch awaiting W keeps against a whole one (``AssertionError`` otherwise).
    """
    position = {c: i for i, c in enumerate(chunks)}
    kept, awaiting = [0] * len(chunks), [0] * len(chunks)
    best = (tuple(kept), tuple(awaiting))
    best_total = most_whole = 0
    for op in order:
        for kind, d, j, s in op:
            if kind == "F":
                kept[position[paths[d][s][1]]] += 1
        total, whole = sum(kept), sum(kept) - sum(awaiting)
        if total > best_total:
            best, best_total = (tuple(kept), tuple(awaiting)), total
        most_whole = max(most_whole, whole)
        for kind, d, j, s in op:
            c = position[paths[d][s][1]]
            if kind == "B":
                awaiting[c] += 1
            elif kind == "W":
                kept[c] -= 1
                awaiting[c] -= 1
            elif kind == "BW":
                kept[c] -= 1
    assert not any(kept) and not any(awaiting), f"micro-batches never freed: {kept}"
    assert best_total - sum(best[1]) == most_whole, f"the peak {best} keeps fewer whole micro-batches than {most_whole}"
    return best


# ----------------------------------------------------------------------------- the schedules' orders
# Each returns (orders, paths, rank_chunks): what simulate() takes.


def _straight(p: int, v: int = 1) -> dict[int, list[tuple[int, int]]]:
    """One direction through chunks 0..p*v-1, chunk c on rank c % p."""
    return {0: [(c % p, c) for c in range(p * v)]}


def gpipe(p: int, m: int):
    orders = [[(("F", 0, j, i),) for j in range(m)] + [(("BW", 0, j, i),) for j in range(m)] for i in range(p)]
    return orders, _straight(p), [(i,) for i in range(p)]


def one_f_one_b(p: int, m: int):
    orders = []
    for i in range(p):
        warm = min(p - i - 1, m)
        order = [(("F", 0, j, i),) for j in range(warm)]
        for k in range(m - warm):
            order += [(("F", 0, warm + k, i),), (("BW", 0, k, i),)]
        order += [(("BW", 0, j, i),) for j in range(m - warm, m)]
        orders.append(order)
    return orders, _straight(p), [(i,) for i in range(p)]


def interleaved(p: int, v: int, m: int):
    """Megatron-LM's interleaved 1F1B with the micro-batch group size ``p`` (``m`` a multiple of ``p``)."""
    total = m * v

    def micro_batch(k: int) -> int:
        return (k // (p * v)) * p + k % p

    orders = []
    for i in range(p):
        def forward(k: int) -> Op:
            return (("F", 0, micro_batch(k), i + ((k // p) % v) * p),)

        def backward(k: int) -> Op:
            return (("BW", 0, micro_batch(k), i + (v - 1 - (k // p) % v) * p),)

        warm = min((p - i - 1) * 2 + (v - 1) * p, total)
        order = [forward(k) for k in range(warm)]
        for k in range(total - warm):
            order += [forward(warm + k), backward(k)]
        order += [backward(k) for k in range(total - warm, total)]
        orders.append(order)
    return orders, _straight(p, v), [tuple(i + k * p for k in range(v)) for i in range(p)]


def _deferred_w(p: int, m: int, i: int, warm: int, delay: int, path_position: int, b_first: bool = False):
    """One stage's 1F1B-like order with the backward split: ``warm`` forwards, then per step a
    forward (while any is left), an input-gradient pass and the weight-gradient pass of the
    micro-batch ``delay`` steps back; the weight-gradient passes left run at the end. *b_first*:
    each step runs its B and W before its forward (ZB-H2's steady phase, B W F)."""
    order: list[Op] = [(("F", 0, j, path_position),) for j in range(warm)]
    pending: list[int] = []
    for j in range(m):
        forward = [(("F", 0, warm + j, path_position),)] if warm + j < m else []
        if not b_first:
            order += forward
        order.append((("B", 0, j, path_position),))
        pending.append(j)
        if len(pending) > delay:
            order.append((("W", 0, pending.pop(0), path_position),))
        if b_first:
            order += forward
    order += [(("W", 0, j, path_position),) for j in pending]
    return order


def zb_h1(p: int, m: int):
    """ZB-H1: 1F1B's warm-up; stage ``i`` delays its W passes by ``i`` micro-batches (Qi et al. 2023, Section 2.1)."""
    orders = [_deferred_w(p, m, i, min(p - i - 1, m), i, i) for i in range(p)]
    return orders, _straight(p), [(i,) for i in range(p)]


def zb_h2(p: int, m: int):
    """ZB-H2 (Qi et al. 2023, Section 2.2, Figure 3 bottom): ``2(p - i) - 1`` warm-up forwards fill
    the bubble before stage ``i``'s first B (its B reaches it after ``2(p - i) - 1`` forwards'
    time when ``F = B = W``); then per step B, the W of the micro-batch ``i`` steps back, F; the
    ``i`` W passes left close the stage (the W passes reordered to the tail, so the last stages'
    B passes reach the first stages sooner and the layout is a parallelogram)."""
    orders = [_deferred_w(p, m, i, min(2 * (p - i) - 1, m), i, i, b_first=True) for i in range(p)]
    return orders, _straight(p), [(i,) for i in range(p)]


def _v_path(p: int) -> list[tuple[int, int]]:
    """``2p`` chunks in a V: chunk ``s`` on rank ``s`` going down, on rank ``2p - 1 - s`` coming back."""
    return [(s if s < p else 2 * p - 1 - s, s) for s in range(2 * p)]


def zb_v(p: int, m: int):
    """ZB-V (Qi et al. 2023, Section 6; the handcrafted order of PyTorch
    ``torch/distributed/pipelining/schedules.py`` ``ScheduleZBVZeroBubble._calculate_single_rank_operations``):
    rank ``r`` runs chunk ``r`` (phase 0) and chunk ``2p - 1 - r`` (phase 1). Warm-up: ``2(p - r) - 1``
    forwards of phase 0, ``r`` pairs F1 F0, ``p - r`` triples F1 B1 W1; steady: F0 B0 W0 F1 B1 W1
    (F0 while any is left); cool-down: ``r`` pairs B0 B1, ``p - r`` pairs B0 W0, then the W passes
    left of phase 1 and of phase 0. Written for ``m >= 2p - 1`` (PyTorch pads fewer)."""
    orders, chunks = [], []
    for r in range(p):
        chunk = (r, 2 * p - 1 - r)
        order: list[Op] = []
        made = {(kind, phase): 0 for kind in "FBW" for phase in (0, 1)}

        def run(kind: str, phase: int) -> None:
            order.append(((kind, 0, made[kind, phase], chunk[phase]),))
            made[kind, phase] += 1

        for _ in range(2 * (p - r) - 1):
            run("F", 0)
        for _ in range(r):
            run("F", 1)
            run("F", 0)
        for _ in range(p - r):
            run("F", 1)
            run("B", 1)
            run("W", 1)
        while made["F", 1] < made["F", 0] or made["F", 0] < m:
            if made["F", 0] < m:
                run("F", 0)
            run("B", 0)
            run("W", 0)
            run("F", 1)
            run("B", 1)
            run("W", 1)
        for _ in range(r):
            run("B", 0)
            run("B", 1)
        for _ in range(p - r):
            run("B", 0)
            run("W", 0)
        while made["W", 1] < m:
            run("W", 1)
        while made["W", 0] < m:
            run("W", 0)
        orders.append(order)
        chunks.append(chunk)
    return orders, {0: _v_path(p)}, chunks


class _Rank:
    """One rank's order as DualPipe's ``step`` builds it: per phase the next forward and backward
    micro-batch, and the weight-gradient passes queued by zero-bubble backwards (run oldest first)."""

    def __init__(self, where) -> None:
        self.where = where  # phase -> (direction, position)
        self.forward = [0, 0]
        self.backward = [0, 0]
        self.queued: list[Part] = []
        self.order: list[Op] = []

    def _f(self, phase: int) -> Part:
        d, s = self.where[phase]
        self.forward[phase] += 1
        return ("F", d, self.forward[phase] - 1, s)

    def _b(self, phase: int, zero_bubble: bool) -> Part:
        d, s = self.where[phase]
        j = self.backward[phase]
        self.backward[phase] += 1
        if zero_bubble:
            self.queued.append(("W", d, j, s))
            return ("B", d, j, s)
        return ("BW", d, j, s)

    def f(self, phase: int) -> None:
        self.order.append((self._f(phase),))

    def b(self, phase: int, zero_bubble: bool = False) -> None:
        self.order.append((self._b(phase, zero_bubble),))

    def w(self) -> None:
        self.order.append((self.queued.pop(0),))

    def fb(self, f_phase: int, b_phase: int) -> None:
        """A forward and a whole backward overlapped in one op (their F&B)."""
        self.order.append((self._f(f_phase), self._b(b_phase, False)))


def _dualpipe_steps(rank: _Rank, ranks: int, position: int, per_phase: int, middle: bool) -> None:
    """The eight steps of deepseek-ai/DualPipe ``DualPipe.step`` / ``DualPipeV.step`` for one rank.

    *ranks*: ranks of one half (DualPipe) or all ranks (DualPipeV); *position*: the rank's index
    among them (``half_rank`` / ``rank``); *per_phase*: micro-batches per phase's direction;
    *middle*: the rank where the two phases turn (DualPipe's middle ranks, DualPipeV's last).
    """
    n, h = ranks, position
    for _ in range((n - h - 1) * 2):  # 1: forwards of phase 0
        rank.f(0)
    for _ in range(h + 1):  # 2: both phases' forwards
        rank.f(0)
        rank.f(1)
    for _ in range(n - h - 1):  # 3: B1 W F1, zero bubble
        rank.b(1, True)
        rank.w()
        rank.f(1)
    for i in range(per_phase - 2 * n + h + 1):  # 4: the main step, F0&B1 then F1&B0
        if i == 0 and middle:  # not overlapped at the turn
            rank.f(0)
            rank.b(1)
        else:
            rank.fb(0, 1)
        rank.fb(1, 0)
    for _ in range(n - h - 1):  # 5: B1 then F1&B0
        rank.b(1)
        rank.fb(1, 0)
    zero_bubble = False
    for i in range(h + 1):  # 6: B1 B0, the second half zero bubble
        if i == (h + 1) // 2 and h % 2 == 1:
            zero_bubble = True
        rank.b(1, zero_bubble)
        if i == (h + 1) // 2 and h % 2 == 0:
            zero_bubble = True
        rank.b(0, zero_bubble)
    for _ in range(n - h - 1):  # 7: W then B0, zero bubble
        rank.w()
        rank.b(0, True)
    for _ in range(h + 1):  # 8: the weight-gradient passes left
        rank.w()
    assert not rank.queued


def dualpipe(p: int, m: int):
    """DualPipe on ``p`` ranks (even), ``m`` micro-batches (even, ``>= 2p``): half of them from each
    end; rank ``r`` runs chunk ``r`` of the forward direction and chunk ``p - 1 - r`` of the reverse one."""
    half = p // 2
    paths = {0: [(s, s) for s in range(p)], 1: [(p - 1 - s, s) for s in range(p)]}
    orders, chunks = [], []
    for r in range(p):
        h = min(r, p - 1 - r)
        where = {0: (0, r), 1: (1, p - 1 - r)} if r < half else {0: (1, p - 1 - r), 1: (0, r)}
        rank = _Rank(where)
        _dualpipe_steps(rank, half, h, m // 2, r in (half - 1, half))
        orders.append(rank.order)
        chunks.append((h, p - 1 - h))
    return orders, paths, chunks


def dualpipev(p: int, m: int):
    """DualPipeV on ``p`` ranks, ``2p`` chunks in a V (rank ``r`` runs chunks ``r`` and ``2p - 1 - r``),
    ``m >= 2p`` micro-batches in one direction."""
    path = _v_path(p)
    orders, chunks = [], []
    for r in range(p):
        rank = _Rank({0: (0, r), 1: (0, 2 * p - 1 - r)})
        _dualpipe_steps(rank, p, r, m, r == p - 1)
        orders.append(rank.order)
        chunks.append((r, 2 * p - 1 - r))
    return orders, {0: path}, chunks
