"""One compaction rule: per-layer settings to a default and the fewest non-overlapping ranges.

:func:`hp_core.engine.recompute.layout.compact` is the only implementation (the planner,
the potentials, the exporters and the CLI all call it). Its rule
(docs/recompute.md, "Compaction"): the default is the setting leaving the fewest
maximal runs of other settings, each run one range; ties go to the setting
covering the most layers, then to the first of ``none``, ``full``,
``selective``, switch sets (by sorted names), lesser offload first.

Checked here exhaustively on every sequence up to 8 layers over three settings
(and up to 6 over five), by hypothesis on longer ones, and the minimum itself
against brute force over every non-overlapping description of short sequences.
"""

from __future__ import annotations

import itertools

import attrs
from hypothesis import given, settings as hyp_settings
from hypothesis import strategies as st

from hp_core.engine.recompute.layout import compact
from hp_core.specs import RecomputeSpec, Setting

NONE = Setting()
FULL = Setting("full")
SELECTIVE = Setting("selective")
SOFTMAX = Setting("switches", frozenset({"softmax"}))
SOFTMAX_FFACT = Setting("switches", frozenset({"softmax", "ffAct"}))
NONE_OFFLOAD = Setting(offload=0.5)

# The documented tie-break order, written out rather than computed: none, full, selective,
# switch sets by sorted names (["ffAct", "softmax"] < ["softmax"]), lesser offload first.
ORDER = [NONE, NONE_OFFLOAD, FULL, SELECTIVE, SOFTMAX_FFACT, SOFTMAX]
THREE = (NONE, FULL, SOFTMAX)
FIVE = (NONE, FULL, SELECTIVE, SOFTMAX, NONE_OFFLOAD)


def _runs(settings):
    """Maximal runs ``(first, last, setting)``, written independently of the library's."""
    runs = []
    start = 0
    for i in range(1, len(settings) + 1):
        if i == len(settings) or settings[i] != settings[start]:
            runs.append((start, i - 1, settings[start]))
            start = i
    return runs


def _ranges_for(settings, default) -> int:
    """Non-overlapping ranges needed with *default*: one per maximal run of another setting."""
    return sum(setting != default for _, _, setting in _runs(settings))


def _least_ranges(settings, alphabet) -> int:
    """The true minimum over every default (present or not) of the ranges it needs."""
    return min(_ranges_for(settings, d) for d in set(alphabet) | set(settings) | {NONE})


def _expected_default(settings):
    """The documented choice: fewest ranges, then most layers, then the fixed order."""
    least = min(_ranges_for(settings, d) for d in set(settings))
    tied = [d for d in set(settings) if _ranges_for(settings, d) == least]
    most = max(settings.count(d) for d in tied)
    return min((d for d in tied if settings.count(d) == most), key=ORDER.index)


def _check(settings, alphabet) -> RecomputeSpec:
    spec = compact(settings)
    n = len(settings)
    # (a) Round trip: every layer reads back its own setting.
    assert [spec.setting_of(i) for i in range(n)] == list(settings), (settings, spec)
    # Ranges are in layer order, inside the model, never overlap, and never restate the default.
    covered = [i for first, last, _ in spec.layers for i in range(first, last + 1)]
    assert covered == sorted(set(covered)) and all(0 <= i < n for i in covered)
    assert all(setting != spec.default for _, _, setting in spec.layers)
    # (b) Minimal: no default with non-overlapping ranges needs fewer.
    assert len(spec.layers) == _least_ranges(settings, alphabet), (settings, spec)
    # (c) The documented tie-break.
    if settings:
        assert spec.default == _expected_default(list(settings)), (settings, spec)
    else:
        assert spec == RecomputeSpec()
    return spec


def test_every_sequence_up_to_8_layers_over_three_settings():
    checked = 0
    for n in range(9):
        for settings in itertools.product(THREE, repeat=n):
            _check(settings, THREE)
            checked += 1
    assert checked == sum(3**n for n in range(9))  # 9,841, 6,561 of them 8 layers long


def test_every_sequence_up_to_6_layers_over_five_settings():
    for n in range(7):
        for settings in itertools.product(FIVE, repeat=n):
            _check(settings, FIVE)


def _descriptions(n, alphabet):
    """Every description of *n* layers: a default and non-overlapping ranges, as per-layer settings and a range count.

    Layers are cut into consecutive blocks; each block is left to the default or
    is one range of some setting.
    """
    for default in alphabet:
        for cuts in itertools.product((False, True), repeat=max(n - 1, 0)):
            blocks, start = [], 0
            for i, cut in enumerate(cuts, 1):
                if cut:
                    blocks.append((start, i))
                    start = i
            blocks.append((start, n))
            if n == 0:
                blocks = []
            for labels in itertools.product((None,) + tuple(alphabet), repeat=len(blocks)):
                layers = [default] * n
                for (lo, hi), label in zip(blocks, labels):
                    for i in range(lo, hi):
                        layers[i] = label if label is not None else default
                yield tuple(layers), sum(label is not None for label in labels)


def test_the_least_ranges_is_the_brute_force_minimum_over_all_descriptions():
    # Brute force over every (default, non-overlapping ranges) description of up to 5 layers
    # over three settings: the least count describing a sequence is the count compact gives.
    best: dict[tuple, int] = {}
    for n in range(6):
        for layers, count in _descriptions(n, THREE):
            best[layers] = min(best.get(layers, count), count)
    assert len(best) == sum(3**n for n in range(6))
    for layers, count in best.items():
        assert len(compact(layers).layers) == count == _least_ranges(layers, THREE), layers


def test_full_none_none_full_is_full_with_one_range():
    # The sequence the planner's old private rule (most common setting, ties to none)
    # compacted as none with two ranges.
    spec = compact([FULL, NONE, NONE, FULL])
    assert spec == RecomputeSpec(default=FULL, layers=((1, 2, NONE),))


def test_documented_examples():
    # Fewest ranges beats most layers: none x2, full x5, none x1 -> none with one range.
    assert compact([NONE, NONE, FULL, FULL, FULL, FULL, FULL, NONE]) == RecomputeSpec(default=NONE, layers=((2, 6, FULL),))
    # A tie in ranges goes to the setting covering more layers ...
    assert compact([FULL, FULL, NONE]) == RecomputeSpec(default=FULL, layers=((2, 2, NONE),))
    # ... then to the fixed order: none before full, full before selective, switch sets by sorted names.
    assert compact([FULL, NONE]) == RecomputeSpec(default=NONE, layers=((0, 0, FULL),))
    assert compact([SELECTIVE, FULL]).default == FULL
    assert compact([SOFTMAX, SOFTMAX_FFACT]).default == SOFTMAX_FFACT
    assert compact([NONE_OFFLOAD, NONE]).default == NONE
    assert compact([]) == RecomputeSpec()


_ALPHABET = (NONE, FULL, SELECTIVE, SOFTMAX, SOFTMAX_FFACT, NONE_OFFLOAD)


@st.composite
def _sequences(draw):
    """Long sequences built from runs, so long runs and repeats both occur."""
    alphabet = draw(st.lists(st.sampled_from(_ALPHABET), min_size=1, max_size=len(_ALPHABET), unique=True))
    runs = draw(st.lists(st.tuples(st.sampled_from(alphabet), st.integers(1, 12)), max_size=40))
    return [setting for setting, length in runs for _ in range(length)]


@given(_sequences())
@hyp_settings(max_examples=300, deadline=None)
def test_long_sequences_round_trip_with_the_fewest_ranges(settings):
    _check(settings, _ALPHABET)


def test_the_planner_compacts_with_the_one_rule():
    from hp_core.api import build_registry, model_from_preset, plan_recompute
    from hp_core.specs import ParallelSpec

    registry = build_registry()
    h100 = registry.hardware_preset("h100-sxm").spec
    model = model_from_preset("llama3-70b", registry).with_body_layers(16, registry.kinds_placed("body"))
    layout = ParallelSpec(tp=8, sp=True, pp=2, seq_len=8192, global_batch_size=16)
    plan = plan_recompute(model, layout, registry=registry, hardware=attrs.evolve(h100, memory_bytes=20 * 2**30),
                          runtime="megatron", reserve_bytes=2**30)
    settings = [s for stage in plan.stages for s in stage.settings]
    assert len(settings) == 16
    assert plan.recompute == compact(settings)
