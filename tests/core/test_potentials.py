"""Recompute potentials: the sequence, the plot groups, the CSV and the plot.

The four-layer model's layers differ only in their MLP width, so fully
recomputing one adds its forward time to every micro-batch: the cheapest
layer first, by hand, is the narrowest MLP.
"""

from __future__ import annotations

import csv
import json
import sys

import attrs
import pytest

from hp_core.errors import ConfigError
from hp_core.engine.recompute.layout import plan_layout, settings_of
from hp_core.engine.recompute.potential import DEGREES, PotentialSequence, PotentialStep, recompute_potentials
from hp_core.io.potentials_output import CSV_COLUMNS, plot_groups, plot_potentials, write_potentials_csv
from hp_core.registry import Registry
from hp_core.specs import ModelSpec, ParallelSpec, RecomputeSpec, Setting
from hp_core.api import step_time
from hp_plugins.models.hf import model_from_hf_config

# MLP widths of body layers 0-3: the order of their forward cost is 0, 2, 1, 3. At hidden 4,096 and 8,192 tokens each
# layer's kernels outlast the megatron runtime's host floor (docs/time.md, "Overlap and host time"), so the order is
# the kernels' (a narrower model would be host-bound, every layer's forward the same floor).
WIDTHS = (1024, 4096, 2048, 8192)


@pytest.fixture
def four_layers() -> ModelSpec:
    base = model_from_hf_config(
        {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 1024, "num_hidden_layers": 4,
         "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 1024},
        name="four-layers", source="made up for tests",
    )
    embedding, dense, output = base.layers
    body = tuple(attrs.evolve(dense, count=1, config=attrs.evolve(dense.config, intermediate_size=w)) for w in WIDTHS)
    return attrs.evolve(base, layers=(embedding, *body, output))


@pytest.fixture
def parallel() -> ParallelSpec:
    return ParallelSpec(seq_len=8192, global_batch_size=4)


@pytest.fixture
def h100(registry: Registry):
    return registry.hardware_preset("h100-sxm").spec


def test_four_layers_are_recomputed_cheapest_first(registry, four_layers, parallel, h100):
    sequence = recompute_potentials(four_layers, parallel, registry=registry, hardware=h100, runtime="megatron")
    assert [s.changed_layer for s in sequence.steps] == [None, 0, 2, 1, 3]
    assert [s.full_layers for s in sequence.steps] == [0, 1, 2, 3, 4]
    assert [s.step for s in sequence.steps] == [0, 1, 2, 3, 4]
    seconds = [s.step_seconds for s in sequence.steps]
    assert seconds == sorted(seconds) and len(set(seconds)) == 5
    peaks = [s.peak_bytes for s in sequence.steps]
    assert peaks == sorted(peaks, reverse=True)
    # Each step's plan fully recomputes the layers changed so far, nothing else.
    for k, step in enumerate(sequence.steps):
        done = {s.changed_layer for s in sequence.steps[1:k + 1]}
        assert [s.mode for s in settings_of(step.plan, 4)] == ["full" if i in done else "none" for i in range(4)]
    # The score is step_time's, and each step adds what the newly recomputed layer costs.
    for before, after in zip(sequence.steps, sequence.steps[1:]):
        a = step_time(four_layers, parallel, registry=registry, hardware=h100, runtime="megatron", recompute=before.plan)
        b = step_time(four_layers, parallel, registry=registry, hardware=h100, runtime="megatron", recompute=after.plan)
        assert after.step_seconds == b.step_seconds
        assert after.step_seconds - before.step_seconds == pytest.approx(b.recompute_seconds - a.recompute_seconds)
    assert sequence.steps[-1].stage_savings_bytes == (peaks[0] - peaks[-1],)
    assert dict(sequence.degrees) == {name: 1 for name in DEGREES}


def test_a_start_plan_and_a_step_limit(registry, four_layers, parallel, h100):
    start = RecomputeSpec(layers=((0, 0, Setting("full")),))
    sequence = recompute_potentials(four_layers, parallel, registry=registry, hardware=h100, start=start, steps=2)
    assert sequence.steps[0].plan == start
    assert sequence.steps[0].full_layers == 1
    assert [s.changed_layer for s in sequence.steps] == [None, 2, 1]
    assert sequence.steps[0].stage_savings_bytes == (0,)
    only = recompute_potentials(four_layers, parallel, registry=registry, hardware=h100, steps=0)
    assert len(only.steps) == 1


def test_every_layer_full_ends_the_sequence_at_once(registry, four_layers, parallel, h100):
    sequence = recompute_potentials(four_layers, parallel, registry=registry, hardware=h100, start=RecomputeSpec.uniform("full"))
    assert len(sequence.steps) == 1 and sequence.steps[0].full_layers == 4


def test_a_negative_step_count_is_refused(registry, four_layers, parallel, h100):
    with pytest.raises(ConfigError, match="--steps"):
        recompute_potentials(four_layers, parallel, registry=registry, hardware=h100, steps=-1)


# ----------------------------------------------------------------------------- plot groups


def _sequence(rank: int, scores: list[float]) -> PotentialSequence:
    steps = tuple(
        PotentialStep(step=i, plan=RecomputeSpec(), changed_layer=None if i == 0 else i - 1, full_layers=i,
                      step_seconds=score, peak_bytes=1000 - i, stage_peak_bytes=(1000 - i,), stage_savings_bytes=(i,))
        for i, score in enumerate(scores)
    )
    return PotentialSequence(degrees={"dp": rank}, steps=steps, rank=rank)


def _scores(groups) -> list[list[float]]:
    return [[plan.step_seconds for plan in plans] for _, plans in groups]


def test_plot_groups_by_hand():
    a = _sequence(1, [1.0, 1.1, 1.2, 1.5])
    b = _sequence(2, [1.15, 1.3])
    c = _sequence(3, [1.4, 1.45, 1.5, 1.6, 1.7])
    # a: below b's 1.15 are 1.0 and 1.1, plus the first at or above: 3 plans. b: below c's 1.4 are both.
    # c, the last: the mean of 3 and 2 is 2.5, rounded half up to 3.
    assert _scores(plot_groups([a, b, c])) == [[1.0, 1.1, 1.2], [1.15, 1.3], [1.4, 1.45, 1.5]]
    # top=2: b is last, the mean of [3] is 3, b has 2.
    assert _scores(plot_groups([a, b, c], top=2)) == [[1.0, 1.1, 1.2], [1.15, 1.3]]
    # Alone, up to two plans; a tie with the next score still shows two.
    assert _scores(plot_groups([c])) == [[1.4, 1.45]]
    assert _scores(plot_groups([_sequence(1, [1.0, 1.2, 1.3]), _sequence(2, [1.0, 2.0])])) == [[1.0, 1.2], [1.0, 2.0]]
    assert plot_groups([]) == [] and plot_groups([a], top=0) == []


# ----------------------------------------------------------------------------- CSV and plot


def test_csv_columns_rows_and_atomic_replace(registry, four_layers, parallel, h100, tmp_path):
    sequence = recompute_potentials(four_layers, parallel, registry=registry, hardware=h100, steps=2)
    kinds = [k.name for k in plan_layout(four_layers, parallel, registry).kinds]
    path = tmp_path / "out" / "potentials.csv"
    path.parent.mkdir()
    path.write_text("stale")
    write_potentials_csv([sequence], kinds, path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["potentials.csv"]  # no temporary left behind
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["TOP", "step", *DEGREES, *CSV_COLUMNS]
    assert [r["step"] for r in rows] == ["0", "1", "2"]
    assert [r["changed_layer"] for r in rows] == ["", "0", "2"]
    assert [r["full_layers"] for r in rows] == ["0", "1", "2"]
    assert rows[0]["TOP"] == "1" and rows[0]["dp"] == "1"
    assert float(rows[2]["score"]) == sequence.steps[2].step_seconds
    assert float(rows[1]["memory_mb"]) == round(sequence.steps[1].peak_bytes / 2**20, 3)
    assert [r["recompute_mode"] for r in rows] == ["none", "none", "none"]
    assert json.loads(rows[2]["recompute_layers"]) == {"0": "full", "2": "full"}
    assert json.loads(rows[2]["layer_recompute"]) == [
        {"layers": "0", "kind": "dense", "setting": "full"},
        {"layers": "1", "kind": "dense", "setting": "none"},
        {"layers": "2", "kind": "dense", "setting": "full"},
        {"layers": "3", "kind": "dense", "setting": "none"},
    ]
    assert json.loads(rows[0]["stage_savings"]) == [0.0]
    assert [r["plan_scope"] for r in rows] == ["whole_model", "per_layer", "per_layer"]


def test_plot_writes_a_png(registry, four_layers, parallel, h100, tmp_path):
    pytest.importorskip("matplotlib")
    sequence = recompute_potentials(four_layers, parallel, registry=registry, hardware=h100)
    path = tmp_path / "potentials.png"
    plot_potentials([sequence, attrs.evolve(sequence, rank=2)], path)
    assert path.read_bytes().startswith(b"\x89PNG")
    assert [p.name for p in tmp_path.iterdir()] == ["potentials.png"]


def test_plot_without_matplotlib_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ConfigError, match=r"pip install 'hp-planner\[plots\]'"):
        plot_potentials([_sequence(1, [1.0, 2.0])], tmp_path / "p.png")
    with pytest.raises(ConfigError, match="ending in .png"):
        plot_potentials([_sequence(1, [1.0, 2.0])], tmp_path / "p.jpg")


# ----------------------------------------------------------------------------- plan layout


def test_compact_takes_the_default_leaving_the_fewest_ranges():
    from hp_core.engine.recompute.layout import compact, describe_plan, spec_from_settings

    full, none = Setting("full"), Setting()
    # none x2, full x5, none x1: default full leaves two runs, default none one.
    settings = [none, none, full, full, full, full, full, none]
    assert compact(settings) == RecomputeSpec(default=none, layers=((2, 6, full),))
    # full, none, full: default full leaves one run.
    assert compact([full, none, full]) == RecomputeSpec(default=full, layers=((1, 1, none),))
    # A tie in runs goes to the setting covering more layers, then to none before full.
    assert compact([full, full, none]).default == full
    assert compact([full, none]).default == none
    assert spec_from_settings([full, none, full], none).layers == ((0, 0, full), (2, 2, full))
    assert describe_plan(compact(settings)) == "full on 2-6; none elsewhere"
    assert describe_plan(RecomputeSpec()) == "none on every layer"


def test_trials_priced_from_a_base_list_give_the_figures_of_the_plan_written_out(registry, h100):
    """Each candidate is priced from the step's layer list with one entry replaced (SettingsTrial), not from its plan
    written out and read back: the sequence equals the plain method's, figure for figure, on a stack of identical layers
    (where every candidate ties) over two stages."""
    from hp_core.engine.estimate import estimate_run
    from hp_core.engine.prepare import prepare
    from hp_core.engine.recompute.layout import spec_from_settings
    from hp_core.engine.timing import time_run

    model = model_from_hf_config(
        {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 12,
         "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 1024}, name="twelve", source="made up for tests")
    parallel = ParallelSpec(pp=2, seq_len=1024, global_batch_size=4)
    sequence = recompute_potentials(model, parallel, registry=registry, hardware=h100, runtime="megatron", steps=6)
    # The plain method: every candidate's plan written out and priced.
    run = prepare(model, parallel, registry=registry, runtime="megatron")
    settings = [Setting()] * 12
    expected = []
    for _ in range(6):
        trials = {}
        for i in (i for i, s in enumerate(settings) if s.mode != "full"):
            plan = spec_from_settings([*settings[:i], Setting("full"), *settings[i + 1:]], Setting())
            trials[i] = (time_run(run, h100, plan).step_seconds, plan)
        fastest = min(t for t, _ in trials.values())
        tied = [i for i in trials if trials[i][0] <= fastest + 1e-9 * abs(fastest)]
        peaks = {i: estimate_run(run, trials[i][1], h100).peak_bytes for i in tied}
        chosen = min(tied, key=lambda i: (peaks[i], trials[i][0], i))
        settings[chosen] = Setting("full")
        expected.append((chosen, trials[chosen][0], peaks[chosen]))
    assert [(s.changed_layer, s.step_seconds, s.peak_bytes) for s in sequence.steps[1:]] == expected
