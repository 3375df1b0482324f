"""The per-stage recompute solver: the fastest settings of one stage whose every peak point fits (docs/recompute.md).

**The problem.** A stage's body layers each take one setting from their
kind's candidates (:func:`hp_core.engine.recompute.profile.candidate_settings`). The
stage's time per micro-batch is the sum of its layers' times
(:mod:`hp_core.engine.timing`); the step is monotone in every stage's time
(``pipeline_seconds``), so planning each stage on its own for its fastest
plan gives the fastest step (:func:`hp_core.engine.recompute.plan.plan_run`
does so). The plan must fit: every peak point of the stage
(:func:`hp_core.engine.stage.plan_stage`) at most ``memory - reserve``.

**The peak as a function of the settings.** With ``k`` the bytes a layer keeps
per micro-batch and ``w`` its backward's working set under a setting,
:meth:`~hp_core.engine.stage.PlacedLayer.make` gives ``k + w = A``, the same for every
setting of a layer (what the backward rebuilds or fetches back it holds
again). So, with ``n_c`` the micro-batches chunk ``c`` keeps whole at the end of
warm-up (those awaiting their weight-gradient pass keep, for a kind that states it,
``LayerCost.weight_gradient_bytes`` whatever the setting: a part of ``C``) and ``S_j``
the bytes kept by layer ``j`` of the last chunk and every layer above it,

    warm-up peak = C + sum_c n_c sum_{j in c} k_j + max(0, max_j (A_j - S_j)),

``C`` not depending on the settings; and the last-backward point holds the
stage's first layer's ``k + w = A``, whatever its setting. Every term grows
with every ``k``. The inner max is reached at the topmost layer of each
layer group in the last chunk (a lower layer of the same group has the same
``A`` and a larger ``S``) or at a layer whose setting is fixed (embedding,
output head, MTP). So the peak fits exactly when a few linear constraints
hold, one per such *marker* and one for ``0``:

    sum_layers a_{r,j} k_j <= capacity_r,

where ``a_{r,j} = n_c`` for a layer of chunk ``c``, less one for a
last-chunk layer at or above marker ``r``.

**Exact search.** Because every constraint grows with ``k``, a setting that
keeps more and runs slower than another of the same layer is never needed:
each group searches only its **Pareto front** in (kept bytes, time) -- with
``w = A - k`` the same as the front in (kept, working, time). Layers of one
group with the same coefficients (same chunk, and in the last chunk on the
same side of every marker) are **interchangeable**, so a class of ``m`` such
layers takes a multiset of front settings, enumerated in non-decreasing
front order. **Branch and bound** over the classes, fastest settings first,
prunes a node when its time plus a lower bound on the rest is no better
than the best plan found: the bound is the largest over constraints of the
linear-programming relaxation of the multiple-choice knapsack for that
constraint alone (Sinha and Zoltners 1979: take each class's lower convex
hull steps in order of time per byte saved, the last one fractionally),
infinite when a constraint cannot be met. The relaxation never exceeds the
best completion, so no better plan is pruned: the result equals brute force
(``tests/core/test_recompute_plan.py`` checks it on hundreds of random
instances).

When nothing fits, the stage reports the plan of least peak -- every layer at
its group's least-kept setting, which minimises every constraint at once --
and the shortfall of that peak beyond the limit.
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Mapping, Sequence

import attrs

from hp_core.engine.schedule import awaiting_weight_gradient, weight_gradient_moments
from hp_core.engine.stage import PlacedLayer, StageInputs, plan_stage
from hp_core.results import StageEstimate
from hp_core.specs import Setting

__all__ = ["LayerOption", "StageSolution", "VariableLayer", "pareto_front", "solve_stage"]


# ----------------------------------------------------------------------------- the stage problem


@attrs.frozen
class LayerOption:
    """One setting a body layer may take, as the stage planner sees it.

    Attributes:
        setting: The setting.
        placed: The layer under it (kept bytes, backward working set).
        seconds: The layer's time per micro-batch under it.
    """

    setting: Setting
    placed: PlacedLayer
    seconds: float


@attrs.frozen
class VariableLayer:
    """A body layer whose setting the planner chooses.

    Attributes:
        index: Its body layer index.
        group: Layers of one group share their options (a model layer group); the solver reads them from the
            group's first layer and refuses a layer of the group given others.
        options: Its candidate settings.
    """

    index: int
    group: Any
    options: tuple[LayerOption, ...]


@attrs.frozen
class StageSolution:
    """The planner's answer for one stage.

    Attributes:
        fits: Whether a plan fits.
        choices: Per variable layer (in the order given), the option chosen:
            the fastest that fits, else the one of least peak.
        seconds: The summed time per micro-batch of the variable layers.
        estimate: :func:`~hp_core.engine.stage.plan_stage` of the stage under the choices.
        limit_bytes: The memory the stage may use.
        shortfall_bytes: When nothing fits, the least peak's excess over the limit; else 0.
        nodes: Search nodes visited (for benchmarks).
        unconstrained: Every layer runs its fastest setting: memory did not bind.
    """

    fits: bool
    choices: tuple[LayerOption, ...]
    seconds: float
    estimate: StageEstimate
    limit_bytes: int
    shortfall_bytes: int
    nodes: int
    unconstrained: bool = False


def pareto_front(options: Sequence[LayerOption]) -> tuple[LayerOption, ...]:
    """The options no other beats in kept bytes and time, most kept (fastest) first.

    A layer's backward working set is ``A - kept`` for every setting
    (:meth:`~hp_core.engine.stage.PlacedLayer.make`; module docstring), so the front
    in (kept, working, time) the stage's peak depends on is the front in
    (kept, time): an option keeping no less and running no faster than
    another is dropped. Along the front, kept falls and time rises strictly;
    of equal options the first given stays.
    """
    order = sorted(range(len(options)), key=lambda i: (options[i].placed.kept_bytes, options[i].seconds, i))
    front: list[LayerOption] = []
    for i in order:
        if not front or options[i].seconds < front[-1].seconds:
            front.append(options[i])
    return tuple(reversed(front))


def _walk(layers: Sequence[PlacedLayer]) -> int:
    """The first backward's working set over a chunk's layers (as :func:`~hp_core.engine.stage.plan_stage`)."""
    working = freed = 0
    for layer in reversed(layers):
        working = max(working, layer.backward_working_bytes - freed)
        freed += layer.kept_bytes
    return working


def _hull_steps(front: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """The lower convex hull of ``(kept, time)`` from the fastest point: steps ``(bytes saved, time added)``.

    *front* is sorted by kept descending, time ascending. The steps come out
    with non-decreasing time per byte saved.
    """
    hull = [front[0]]
    for point in front[1:]:
        while len(hull) >= 2:
            (k1, t1), (k2, t2) = hull[-2], hull[-1]
            # Drop hull[-1] when it lies on or above the segment hull[-2] -> point.
            if (t2 - t1) * (k1 - point[0]) >= (point[1] - t1) * (k1 - k2):
                hull.pop()
            else:
                break
        hull.append(point)
    return [(hull[i][0] - hull[i + 1][0], hull[i + 1][1] - hull[i][1]) for i in range(len(hull) - 1)]


def _steps_in_order(
    own: Sequence[tuple[float, int, float]],
    a: int,
    count: int,
    others: Sequence[tuple[float, int, int, float]],
    remaining: Sequence[int],
    skip: int,
) -> Iterator[tuple[int, float, float, int]]:
    """One constraint's relaxation steps by time per byte saved: ``(bytes saved, time added, unit, per)``.

    *own* are the hull steps ``(time per byte, bytes, time)`` of the *count*
    layers of class *skip* with coefficient *a*; *others* the constraint's
    steps of every class (:func:`solve_stage`), of which those of *skip* and
    of classes with no layers left are passed over. The two are merged, own
    steps first on a tie. Taking a step in part, saving ``b`` of its bytes
    adds ``b * unit / per`` seconds.
    """
    mine = [(unit / a, count * a * saved, count * added, unit, a) for unit, saved, added in own]
    j = 0
    for ratio, i, saved, added in others:
        if i == skip or not remaining[i]:
            continue
        while j < len(mine) and mine[j][0] <= ratio:
            yield mine[j][1:]
            j += 1
        yield remaining[i] * saved, remaining[i] * added, ratio, 1
    for step in mine[j:]:
        yield step[1:]


def solve_stage(
    index: int,
    chunks: Sequence[Sequence[PlacedLayer | VariableLayer]],
    chunk_body: Sequence[Sequence[int]],
    inputs: StageInputs,
    limit_bytes: int,
    model_limit_bytes: int | None = None,
) -> StageSolution:
    """The fastest choice of one option per variable layer whose every peak point fits *limit_bytes*.

    A runtime that declares its own peak points (``Runtime.peak_points``: no
    ``warmup_end``) is solved with the warm-up model's constant taken from its
    largest point at the fastest settings, and the plan is checked against its
    own points: one that does not fit is solved again with the model's limit
    lowered by the excess (*model_limit_bytes*), so the plan returned fits
    (or is reported as not fitting), though the fastest is not proven there.

    Args:
        index: The stage index.
        chunks: Per chunk of the stage (chunk order), its layers in forward
            order: fixed ones as :class:`~hp_core.engine.stage.PlacedLayer`, the
            planner's as :class:`VariableLayer`.
        chunk_body: Per chunk, the body layer indices it runs (for the estimate).
        inputs: As :func:`~hp_core.engine.stage.plan_stage` takes them.
        limit_bytes: The memory the stage may use.

    Returns:
        The solution; its estimate is :func:`~hp_core.engine.stage.plan_stage`'s own.
    """
    in_flight = inputs.stage_plan(index)[1]
    shape = inputs.layout
    awaiting = awaiting_weight_gradient(inputs.schedule, shape, index, in_flight)
    moments = weight_gradient_moments(inputs.schedule, shape, index, len(in_flight))
    variables = [layer for chunk in chunks for layer in chunk if isinstance(layer, VariableLayer)]

    def cost_of(layer: PlacedLayer | VariableLayer) -> Any:
        return (layer.options[0].placed if isinstance(layer, VariableLayer) else layer).cost

    def whole(c: int, layer: PlacedLayer | VariableLayer, counts: Sequence[int] | None = None,
              waits: Sequence[int] | None = None) -> int:
        """Micro-batches of chunk *c* that keep what *layer* keeps under its setting: all kept (the peak's
        by default) but those awaiting W where its kind states what W keeps (PlacedLayer.awaiting_bytes)."""
        counts, waits = in_flight if counts is None else counts, awaiting if waits is None else waits
        return counts[c] - (waits[c] if cost_of(layer).weight_gradient_bytes is not None else 0)
    given: dict[Any, Sequence[LayerOption]] = {}  # each group's options, as its first layer states them
    for layer in variables:
        first = given.setdefault(layer.group, layer.options)
        if first is not layer.options and tuple(first) != tuple(layer.options):
            raise ValueError(f"layer {layer.index} of group {layer.group!r}: options differ from its group's")
    fronts = {group: pareto_front(options) for group, options in given.items()}
    for layer in variables:
        sums = {o.placed.kept_bytes + o.placed.backward_working_bytes for o in layer.options}
        if len(sums) != 1:
            group = layer.group
            raise ValueError(f"layer group {group!r}: kept + working differs between settings ({sorted(sums)})")

    def estimate_with(choice: Mapping[int, LayerOption]) -> StageEstimate:
        placed = [[choice[id(layer)].placed if isinstance(layer, VariableLayer) else layer for layer in chunk]
                  for chunk in chunks]
        settings = tuple(choice[id(layer)].setting.describe() for chunk in chunks for layer in chunk
                         if isinstance(layer, VariableLayer))
        return plan_stage(index, placed, chunk_body, settings, inputs)

    # The constant part of the warm-up point, from the stage with every layer at its fastest setting.
    fastest = {id(layer): fronts[layer.group][0] for layer in variables}
    base = estimate_with(fastest)
    base_layers = [[fastest[id(layer)].placed if isinstance(layer, VariableLayer) else layer for layer in chunk]
                   for chunk in chunks]
    own_points = "warmup_end" not in base.peak_points
    if own_points:  # the runtime's own points keep every micro-batch in flight whole (hp_core.peak_points)
        awaiting, moments = (0,) * len(in_flight), ()
    base_activations = sum(whole(c, layer) * layer.kept_bytes for c, chunk in enumerate(base_layers) for layer in chunk)
    model_limit = limit_bytes if model_limit_bytes is None else model_limit_bytes
    if own_points:  # the runtime's own points: calibrated on the largest, checked below
        constant = max(base.peak_points.values()) - base_activations - _walk(base_layers[-1])
        last_backward = 0
    else:
        constant = base.peak_points["warmup_end"] - base_activations - _walk(base_layers[-1])
        # The points beside the warm-up end's that the settings do not move here (the end of the last backward; a
        # runtime's optimizer step, which holds no activation): each must fit as it is.
        last_backward = max((peak for name, peak in base.peak_points.items() if name not in ("warmup_end", "awaiting_w")),
                            default=0)
    limit_bytes, true_limit = model_limit, limit_bytes

    # Markers: fixed layers of the last chunk and the topmost layer of each group there.
    last = list(chunks[-1])
    fixed_activations = sum(whole(c, layer) * layer.kept_bytes for c, chunk in enumerate(chunks) for layer in chunk
                            if isinstance(layer, PlacedLayer))
    markers: list[tuple[int, int]] = []  # (position in the last chunk, A)
    seen: set[Any] = set()
    for position in range(len(last) - 1, -1, -1):
        layer = last[position]
        if isinstance(layer, PlacedLayer):
            markers.append((position, layer.kept_bytes + layer.backward_working_bytes))
        elif layer.group not in seen:
            seen.add(layer.group)
            option = fronts[layer.group][0].placed
            markers.append((position, option.kept_bytes + option.backward_working_bytes))
    # Constraint 0: no working set; constraint r: marker r's term of the walk.
    capacities = [limit_bytes - constant - fixed_activations]
    for position, held in markers:
        fixed_above = sum(layer.kept_bytes for layer in last[position:] if isinstance(layer, PlacedLayer))
        capacities.append(limit_bytes - constant - fixed_activations - held + fixed_above)
    # One constraint per awaiting_w moment (plan_stage): no working set; its micro-batches'
    # buffers and the W tensors of those awaiting W in place of the peak's.
    for counts, waits in moments:
        shift = fixed = 0
        for c, chunk in enumerate(chunks):
            for layer in chunk:
                cost = cost_of(layer)
                shift += (counts[c] - in_flight[c]) * cost.buffers_per_micro_batch_bytes
                if cost.weight_gradient_bytes is not None:
                    shift += (waits[c] - awaiting[c]) * cost.weight_gradient_bytes
                if isinstance(layer, PlacedLayer):
                    fixed += whole(c, layer, counts, waits) * layer.kept_bytes
        capacities.append(limit_bytes - constant - shift - fixed)

    # Classes of interchangeable layers: same group, same coefficients.
    classes: dict[tuple[Any, tuple[int, ...]], list[VariableLayer]] = {}
    for c, chunk in enumerate(chunks):
        for position, layer in enumerate(chunk):
            if not isinstance(layer, VariableLayer):
                continue
            in_last = c == len(chunks) - 1
            n = whole(c, layer)
            coefficients = [n] + [n - (in_last and position >= marker) for marker, _ in markers]
            coefficients += [whole(c, layer, counts, waits) for counts, waits in moments]
            classes.setdefault((layer.group, tuple(coefficients)), []).append(layer)

    keys = list(classes)
    kept = [[o.placed.kept_bytes for o in fronts[g]] for g, _ in keys]
    times = [[o.seconds for o in fronts[g]] for g, _ in keys]
    coef = [list(a) for _, a in keys]
    counts = [len(classes[k]) for k in keys]
    # Biggest possible saving first: branching there decides most.
    order = sorted(range(len(keys)), key=lambda i: -counts[i] * max(coef[i]) * (kept[i][0] - kept[i][-1]))
    kept = [kept[i] for i in order]
    times = [times[i] for i in order]
    coef = [coef[i] for i in order]
    counts = [counts[i] for i in order]
    keys = [keys[i] for i in order]
    n_classes, n_constraints = len(keys), len(capacities)

    least_fits = last_backward <= limit_bytes and all(
        sum(coef[i][r] * kept[i][-1] * counts[i] for i in range(n_classes)) <= capacities[r] for r in range(n_constraints))

    # Per class and least option index lo, the lower convex hull of its front from lo: steps
    # (time per byte saved, bytes saved, time added), in order (the LP bound).
    hull_from = []
    for i in range(n_classes):
        points = list(zip(kept[i], times[i]))
        hull_from.append([[(added / saved, saved, added) for saved, added in _hull_steps(points[lo:])]
                          for lo in range(len(points))])
    # Per constraint, every class's hull steps (from its fastest option) by time per byte saved.
    steps: list[list[tuple[float, int, int, float]]] = []
    for r in range(n_constraints):
        row = [(unit / coef[i][r], i, coef[i][r] * saved, added)
               for i in range(n_classes) if coef[i][r] > 0 for unit, saved, added in hull_from[i][0]]
        row.sort()
        steps.append(row)

    remaining = counts[:]
    used = [0] * n_constraints
    # Running sums over the remaining layers at their fastest options.
    rest_kept = [sum(counts[i] * coef[i][r] * kept[i][0] for i in range(n_classes)) for r in range(n_constraints)]
    rest_time = [sum(counts[i] * times[i][0] for i in range(n_classes))]
    picks: list[list[int]] = [[] for _ in range(n_classes)]
    nodes = 0

    def bound(ci: int, lo: int) -> float:
        """A lower bound on the time of the remaining layers, class *ci*'s at options *lo* on.

        The LP relaxation of each constraint alone; ``inf`` when one cannot be met.
        """
        rc = remaining[ci] if ci < n_classes else 0
        fastest_time = rest_time[0] + (rc * (times[ci][lo] - times[ci][0]) if rc else 0.0)
        extra = 0.0
        for r in range(n_constraints):
            need = used[r] - capacities[r] + rest_kept[r]
            a = coef[ci][r] if rc else 0
            if rc:
                need += rc * a * (kept[ci][lo] - kept[ci][0])
            if need <= 0:
                continue
            own = hull_from[ci][lo] if rc and a > 0 else ()
            added = 0.0
            for total, step_added, unit, per in _steps_in_order(own, a, rc, steps[r], remaining, ci):
                if total >= need:
                    added += need * unit / per
                    need = 0
                    break
                added += step_added
                need -= total
            if need > 0:
                return math.inf
            extra = max(extra, added)
        return fastest_time + extra

    def greedy() -> tuple[float, list[list[int]]]:
        """A plan that fits, to start from: from the fastest, move one layer at a time one hull step
        further, the step adding least time per byte saved over the unmet constraints."""
        hull_index = []
        for i in range(n_classes):
            on_hull, point = [0], 0
            for _, saved, _ in hull_from[i][0]:
                target = kept[i][point] - saved
                point = next(p for p in range(point + 1, len(kept[i])) if kept[i][p] == target)
                on_hull.append(point)
            hull_index.append(on_hull)
        position = [[0] * counts[i] for i in range(n_classes)]
        load = [sum(counts[i] * coef[i][r] * kept[i][0] for i in range(n_classes)) for r in range(n_constraints)]
        while True:
            unmet = [r for r in range(n_constraints) if load[r] > capacities[r]]
            if not unmet:
                break
            choice, rate = None, math.inf
            for i in range(n_classes):
                at = min(position[i], default=len(hull_index[i]) - 1)
                if at + 1 >= len(hull_index[i]):
                    continue
                here, there = hull_index[i][at], hull_index[i][at + 1]
                saved = sum(coef[i][r] * (kept[i][here] - kept[i][there]) for r in unmet)
                if saved > 0 and (times[i][there] - times[i][here]) / saved < rate:
                    choice, rate = i, (times[i][there] - times[i][here]) / saved
            if choice is None:
                return math.inf, []
            k = position[choice].index(min(position[choice]))
            here, there = hull_index[choice][position[choice][k]], hull_index[choice][position[choice][k] + 1]
            position[choice][k] += 1
            for r in range(n_constraints):
                load[r] -= coef[choice][r] * (kept[choice][here] - kept[choice][there])
        plan = [sorted(hull_index[i][p] for p in position[i]) for i in range(n_classes)]
        return sum(times[i][s] for i in range(n_classes) for s in plan[i]), plan

    best_time, best = greedy() if least_fits else (math.inf, [])

    def search(ci: int, lo: int, elapsed: float) -> None:
        nonlocal best_time, best, nodes
        nodes += 1
        while ci < n_classes and remaining[ci] == 0:
            ci, lo = ci + 1, 0
        if ci == n_classes:
            if elapsed < best_time and all(u <= cap for u, cap in zip(used, capacities)):
                best_time = elapsed
                best = [p[:] for p in picks]
            return
        a, ks, ts = coef[ci], kept[ci], times[ci]
        remaining[ci] -= 1
        rest_time[0] -= ts[0]
        for r in range(n_constraints):
            rest_kept[r] -= a[r] * ks[0]
        for s in range(lo, len(ks)):
            total = elapsed + ts[s]
            if total + rest_time[0] + remaining[ci] * (ts[s] - ts[0]) >= best_time:
                break  # every later option is slower still
            for r in range(n_constraints):
                used[r] += a[r] * ks[s]
            if total + bound(ci, s) < best_time:
                picks[ci].append(s)
                search(ci, s, total)
                picks[ci].pop()
            for r in range(n_constraints):
                used[r] -= a[r] * ks[s]
        remaining[ci] += 1
        rest_time[0] += ts[0]
        for r in range(n_constraints):
            rest_kept[r] += a[r] * ks[0]

    if least_fits and best_time < math.inf:
        search(0, 0, 0.0)
    fits = best_time < math.inf
    if not fits:
        best = [[len(kept[i]) - 1] * counts[i] for i in range(n_classes)]
    choice: dict[int, LayerOption] = {}
    for i, key in enumerate(keys):
        members = sorted(classes[key], key=lambda layer: layer.index)
        for layer, s in zip(members, sorted(best[i])):
            choice[id(layer)] = fronts[key[0]][s]
    result = estimate_with(choice)
    chosen = tuple(choice[id(layer)] for layer in variables)
    seconds = sum(o.seconds for o in chosen)
    if fits and result.peak_bytes > true_limit:
        if not own_points:
            raise AssertionError(f"stage {index}: the plan's peak {result.peak_bytes} exceeds {true_limit}")
        # The runtime's points hold more than the model said: ask the model for less, by the excess.
        return solve_stage(index, chunks, chunk_body, inputs, true_limit, model_limit - (result.peak_bytes - true_limit))
    return StageSolution(
        fits=fits, choices=chosen, seconds=seconds, estimate=result, limit_bytes=true_limit,
        shortfall_bytes=0 if fits else max(0, result.peak_bytes - true_limit), nodes=nodes,
        unconstrained=all(choice[id(layer)] is fronts[layer.group][0] for layer in variables),
    )
