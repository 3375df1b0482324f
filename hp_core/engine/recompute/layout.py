"""A recompute plan laid over a model's body layers: per-layer settings, chunks and stages.

A :class:`~hp_core.specs.RecomputeSpec` states a default setting and inclusive
ranges of 0-based body layer indices. Trainers state plans differently (a
count of layers per pipeline chunk, every N-th layer of a rank, a mode with
per-layer exceptions), so the exporters (:mod:`hp_plugins.exporters`) and the
potentials (:mod:`hp_core.engine.recompute.potential`) read a plan here, one
:class:`~hp_core.specs.Setting` per body layer, with the pipeline chunk and
stage each layer runs on, split as :func:`hp_core.engine.prepare.prepare` splits them.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import attrs

from hp_core.engine.prepare import resolve_setting, split_layers
from hp_core.errors import ConfigError
from hp_core.registry import Registry
from hp_core.specs import ModelSpec, ParallelSpec, RecomputeSpec, Setting
from hp_core.types import LayerKind

__all__ = [
    "PlanLayout",
    "compact",
    "describe_plan",
    "describe_ranges",
    "plan_layout",
    "range_key",
    "setting_value",
    "settings_of",
    "spec_from_settings",
]


@attrs.frozen
class PlanLayout:
    """The body layers of a model on a layout.

    Attributes:
        kinds: The layer kind of each body layer, in order.
        chunk_bounds: Per pipeline chunk (``pp * vpp`` of them, in chunk
            order), the body layers it runs as ``(first, end)``, end excluded.
        pp: Pipeline stages; stage ``s`` runs chunks ``s, s + pp, ...``
            (Megatron-Core's interleaved assignment).
    """

    kinds: tuple[LayerKind, ...]
    chunk_bounds: tuple[tuple[int, int], ...]
    pp: int

    @property
    def count(self) -> int:
        """Body layers in all."""
        return len(self.kinds)

    def stage_chunks(self, stage: int) -> list[tuple[int, int]]:
        """The chunks stage *stage* runs, in the order it builds them."""
        return [self.chunk_bounds[c] for c in range(stage, len(self.chunk_bounds), self.pp)]

    def stage_layers(self, stage: int) -> list[int]:
        """The body layers stage *stage* runs, chunk by chunk."""
        return [i for lo, hi in self.stage_chunks(stage) for i in range(lo, hi)]

    def switches(self, setting: Setting, index: int) -> tuple[bool, frozenset[str]]:
        """``(full, recomputed switches)`` of *setting* on body layer *index* (its kind's selective set for ``selective``)."""
        return resolve_setting(setting, self.kinds[index], "$.recompute")


def plan_layout(model: ModelSpec, parallel: ParallelSpec, registry: Registry) -> PlanLayout:
    """The body layers of *model* and their chunks on *parallel*.

    Raises:
        ConfigError: An unknown kind, no body layers, or layers that do not
            split over the chunks (as :func:`hp_core.engine.prepare.prepare` says).
    """
    kinds: list[LayerKind] = []
    for i, group in enumerate(model.layers):
        kind = registry.layer_kind(group.kind, f"$.model.layers[{i}].kind")
        if kind.placement == "body":
            kinds += [kind] * group.count
    if not kinds:
        raise ConfigError("$.model.layers", "the model has no body layers (no kind placed 'body')")
    bounds, start = [], 0
    for count in split_layers(len(kinds), parallel):
        bounds.append((start, start + count))
        start += count
    return PlanLayout(kinds=tuple(kinds), chunk_bounds=tuple(bounds), pp=parallel.pp)


def settings_of(plan: RecomputeSpec, count: int) -> tuple[Setting, ...]:
    """The setting of each of *count* body layers.

    Raises:
        ConfigError: A range names a layer beyond the model's.
    """
    if plan.layers and max(last for _, last, _ in plan.layers) >= count:
        raise ConfigError("$.recompute.layers", f"a range names a layer beyond the model's {count} layers (0-{count - 1})")
    return tuple(plan.setting_of(i) for i in range(count))


def _runs(settings: Sequence[Setting]) -> list[tuple[int, int, Setting]]:
    """Maximal runs of consecutive layers with one setting, ``(first, last, setting)`` inclusive."""
    runs: list[tuple[int, int, Setting]] = []
    for index, setting in enumerate(settings):
        if runs and runs[-1][2] == setting and runs[-1][1] == index - 1:
            runs[-1] = (runs[-1][0], index, setting)
        else:
            runs.append((index, index, setting))
    return runs


def spec_from_settings(settings: Sequence[Setting], default: Setting | None = None) -> RecomputeSpec:
    """The plan that gives each body layer its setting: *default* plus one range per run differing from it.

    Args:
        settings: One setting per body layer.
        default: The plan's default; :func:`compact`'s choice when ``None``.
    """
    if default is None:
        return compact(settings)
    return RecomputeSpec(default=default, layers=tuple(run for run in _runs(settings) if run[2] != default))


def _order(setting: Setting) -> tuple:
    """The fixed order of settings: ``none``, ``full``, ``selective``, switch sets (by sorted names), then by offload."""
    return (("none", "full", "selective", "switches").index(setting.mode), sorted(setting.switches),
            getattr(setting, "offload", 0.0))


def compact(settings: Sequence[Setting]) -> RecomputeSpec:
    """The plan with the fewest ranges that gives each body layer its setting (the one compaction rule).

    The ranges never overlap, so a default ``d`` costs exactly the maximal
    runs of consecutive layers whose setting is not ``d`` (each such run
    needs a range of its own). The default is the setting present in
    *settings* that leaves the fewest such runs; ties go to the one covering
    the most layers, then to the first in the fixed order ``none``, ``full``,
    ``selective``, switch sets (by their sorted names), lesser offload first.
    The ranges are those runs in layer order, so ``setting_of(i)`` of the
    result is ``settings[i]`` for every layer. No layers give ``RecomputeSpec()``.

    ``[full, none, none, full]`` is ``full`` with one range ``1-2: none``;
    ``[full, full, none]`` is ``full`` with ``2: none`` (one range either way,
    ``full`` covers more layers); ``[full, none]`` is ``none`` with ``0: full``.
    """
    runs = _runs(settings)
    if not runs:
        return RecomputeSpec()

    def key(default: Setting) -> tuple:
        return (sum(run[2] != default for run in runs), -sum(s == default for s in settings), _order(default))

    best = min(set(settings), key=key)
    return RecomputeSpec(default=best, layers=tuple(run for run in runs if run[2] != best))


def range_key(first: int, last: int) -> str:
    """A range as the config format writes it: ``"3-7"``, or ``"5"`` for one layer."""
    return str(first) if first == last else f"{first}-{last}"


def setting_value(setting: Setting) -> Any:
    """A setting as the config format writes it (:meth:`Setting.parse` reads it back)."""
    value: Any = sorted(setting.switches) if setting.mode == "switches" else setting.mode
    offload = getattr(setting, "offload", 0.0)
    return {"mode": value, "offload": offload} if offload else value


def describe_plan(plan: RecomputeSpec) -> str:
    """A plan in words: ``full on 0-1, 8-9; none elsewhere``."""
    by_setting: dict[Setting, list[str]] = {}
    for first, last, setting in plan.layers:
        by_setting.setdefault(setting, []).append(range_key(first, last))
    parts = [f"{setting.describe()} on {', '.join(keys)}" for setting, keys in by_setting.items()]
    if not parts:
        return f"{plan.default.describe()} on every layer"
    return "; ".join(parts) + f"; {plan.default.describe()} elsewhere"


def describe_ranges(ranges: Iterable[tuple[int, int, Setting]], default: Setting | None = None) -> str:
    """Ranges as one line: ``0-15 none, 16 ffAct, 17-18 ffAct+normOp``; a default first when given."""
    parts = [f"{first}-{last}" if last > first else f"{first}" for first, last, _ in ranges]
    text = ", ".join(f"{where} {setting.describe()}" for where, (_, _, setting) in zip(parts, ranges))
    if default is None:
        return text
    return f"default {default.describe()}" + (f"; {text}" if text else "")
