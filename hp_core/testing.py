"""Testing kit for plugin authors: pytest fixtures and the layer-kind contract.

Installing hp-planner registers this module as a pytest plugin (the ``pytest11``
entry point ``hp_planner``), so the test suite of a package that adds plugins
gets these fixtures without importing anything:

* ``hp_plugins_under_test``: the plugin objects under test; ``()`` unless the
  author overrides it in their ``conftest.py``::

      @pytest.fixture
      def hp_plugins_under_test():
          return [my_package.plugin]

* ``hp_plugin_manager``: a fresh plugin manager holding the built-in plugins
  and ``hp_plugins_under_test``; no entry points, ``HP_BLOCK_PLUGINS`` ignored,
  so the test sees exactly these plugins whatever else is installed.
* ``hp_registry``: the frozen :class:`~hp_core.registry.Registry` built from it.
* ``hp_installed_registry``: the built-ins plus every installed ``hp`` entry
  point, as the ``hp`` command sees them: a test that the package's entry point
  is declared and loads.

and :func:`check_layer_kind`, the contract every built-in layer kind passes
(``tests/plugins/test_contract.py`` runs this same function on each of them)::

    def test_my_kind_keeps_the_contract(hp_registry):
        check_layer_kind(hp_registry.layer_kind("my_kind"), [MyConfig(...)], registry=hp_registry)

The contract raises :class:`AssertionError` naming the kind, the sample, the
layout and what broke; it does not rely on ``assert`` statements, so it also
runs outside pytest and under ``python -O``.

Known limitations: the contract exercises ``cp = 1`` only, one sequence length,
and the traits it is given; a kind's numbers are the author's to test (hand-derived
values in the kind's own tests), the contract checks only their shape.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Sequence

import attrs
import pluggy
import pytest

from hp_core.api import build_registry, with_sublayers
from hp_core.errors import ConfigError
from hp_core.manager import get_plugin_manager
from hp_core.registry import Registry
from hp_core.specs import PrecisionSpec
from hp_core.costs import ATTENTION_IMPLS, LayerContext, LayerCost
from hp_core.types import LayerKind

__all__ = [
    "CONTRACT_PRECISION",
    "CONTRACT_SEQ_LEN",
    "ContractReport",
    "check_layer_kind",
    "hp_installed_registry",
    "hp_plugin_manager",
    "hp_plugins_under_test",
    "hp_registry",
]

# The sequence length every contract layout runs at: short, so that the checks are fast,
# and a multiple of 64 (a flash-attention tile, a chunked linear-attention chunk).
CONTRACT_SEQ_LEN = 64
# Softmax in fp32, so that eager attention's cast terms (``headCast``) exist.
CONTRACT_PRECISION = PrecisionSpec(softmax_bytes=4)


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture
def hp_plugins_under_test() -> Sequence[object]:
    """The plugin objects (modules or instances) a test suite is about; override it in ``conftest.py``."""
    return ()


@pytest.fixture
def hp_plugin_manager(hp_plugins_under_test: Sequence[object]) -> pluggy.PluginManager:
    """A fresh manager: the built-ins and ``hp_plugins_under_test``, no entry points, the environment ignored."""
    return get_plugin_manager(hp_plugins_under_test, entry_points=False, use_env=False)


@pytest.fixture
def hp_registry(hp_plugin_manager: pluggy.PluginManager) -> Registry:
    """The frozen registry of ``hp_plugin_manager``."""
    return Registry.from_manager(hp_plugin_manager)


@pytest.fixture
def hp_installed_registry() -> Registry:
    """The built-ins and every installed ``hp`` entry point, as the ``hp`` command loads them."""
    return build_registry(entry_points=True, use_env=False)


# ----------------------------------------------------------------------------- the contract


@attrs.frozen
class ContractReport:
    """What :func:`check_layer_kind` exercised.

    Attributes:
        kind: The kind's name.
        samples: Sample configs checked.
        evaluations: Evaluations that returned a cost (every layout, every sample).
        refused: The layouts the kind's validator refused, as ``"sample #i: layout"``.
    """

    kind: str
    samples: int
    evaluations: int
    refused: tuple[str, ...]


@attrs.frozen
class _Layout:
    tp: int
    sp: bool
    b: int
    attention: str

    def __str__(self) -> str:
        return f"tp={self.tp} sp={'on' if self.sp else 'off'} micro_batch={self.b} attention={self.attention}"


class _Contract:
    """One run of the contract over one kind's samples."""

    def __init__(
        self,
        kind: LayerKind,
        registry: Registry,
        seq_len: int,
        precision: PrecisionSpec,
        traits: frozenset[str],
        tp_degrees: tuple[int, ...],
        attentions: tuple[str, ...],
    ) -> None:
        self.kind = kind
        self.registry = registry
        self.seq_len = seq_len
        self.precision = precision
        self.traits = traits
        self.tp_degrees = tp_degrees
        self.split_degrees = tuple(d for d in tp_degrees if d > 1)
        self.attentions = attentions
        self.evaluations = 0
        self.refused: list[str] = []

    # -- helpers

    def fail(self, where: str, what: str) -> None:
        raise AssertionError(f"layer kind {self.kind.name!r}, {where}: {what}")

    def check(self, ok: bool, where: str, what: str) -> None:
        if not ok:
            self.fail(where, what)

    def context(self, layout: _Layout) -> LayerContext:
        context = LayerContext(
            tp=layout.tp, cp=1, sp=layout.sp, ep=1, etp=1, micro_batch_size=layout.b, seq_len=self.seq_len,
            precision=self.precision, attention=layout.attention, traits=self.traits,
        )
        # A composite kind (the MTP module) evaluates its nested layer through the registry.
        return with_sublayers(context, self.registry)

    def evaluate(self, config: object, layout: _Layout, where: str) -> LayerCost | None:
        """The cost, or ``None`` where the kind's validator (or a nested layer's) refuses the layout."""
        try:
            if self.kind.validate is not None:
                self.kind.validate(config, self.context(layout))
            cost = self.kind.evaluate(config, self.context(layout))
        except ConfigError:
            self.refused.append(where)
            return None
        if not isinstance(cost, LayerCost):
            self.fail(where, f"evaluate must return a LayerCost, got {type(cost).__name__}")
        self.evaluations += 1
        return cost

    def must(self, config: object, layout: _Layout, where: str) -> LayerCost:
        cost = self.evaluate(config, layout, where)
        if cost is None:
            self.fail(where, "the validator refused a layout the sample is meant to run; size the sample so that "
                      f"every tp in {self.tp_degrees} divides its shapes")
        return cost

    def all_layouts(self) -> Iterator[_Layout]:
        for tp in self.tp_degrees:
            for sp in (False, True):
                if sp and tp == 1:
                    continue
                for b in (1, 2):
                    for attention in self.attentions:
                        yield _Layout(tp, sp, b, attention)

    # -- the checks

    def declared_switches(self) -> None:
        kind, where = self.kind, "declaration"
        # A kind owns its switch names (LayerKind checks their form); it reuses a built-in name
        # (hp_core.costs.SWITCHES) only for the same tensors.
        self.check(len(set(kind.switches)) == len(kind.switches), where, f"switches listed twice: {list(kind.switches)}")
        self.check(kind.selective <= set(kind.switches), where,
                   f"selective {sorted(kind.selective)} must be among its switches {list(kind.switches)}")

    def samples_of_kind(self, samples: Sequence[object]) -> None:
        self.check(len(samples) > 0, "samples", "give at least one sample config")
        for i, config in enumerate(samples):
            self.check(isinstance(config, self.kind.config_type), f"sample #{i}",
                       f"is a {type(config).__name__}, not the kind's {self.kind.config_type.__name__}")

    def every_layout(self, i: int, config: object) -> None:
        """Byte fields, declared switches, unique ops, determinism and full recompute keeping least."""
        every = frozenset(self.kind.switches)
        for layout in self.all_layouts():
            where = f"sample #{i}, {layout}"
            cost = self.evaluate(config, layout, where)
            if cost is None:
                continue
            # A composite kind (the MTP module) keeps its inner layers' terms under their kinds' switches.
            declared = set(self.kind.switches).union(
                *(self.registry.layer_kind(name).switches for name in cost.inner_kinds))
            for term in cost.activations:
                self.check(term.switch is None or term.switch in declared, where,
                           f"term {term.op} names switch {term.switch!r}, which the kind does not declare")
            fields = {
                "input_bytes": cost.input_bytes,
                "working_bytes": cost.working_bytes,
                "buffers_once_bytes": cost.buffers_once_bytes,
                "buffers_per_micro_batch_bytes": cost.buffers_per_micro_batch_bytes,
                "kept_bytes": cost.kept_bytes,
                **{f"term {t.op}": t.bytes for t in cost.activations},
            }
            bad = {name: value for name, value in fields.items() if not _is_byte_count(value)}
            self.check(not bad, where, f"byte quantities must be non-negative ints: {bad}")
            for p in cost.params:
                self.check(_is_byte_count(p.elements) and _is_byte_count(p.stored_elements), where,
                           f"parameter {p.name}: element counts must be non-negative ints")
                self.check(p.stored_elements >= p.elements, where, f"parameter {p.name}: stored_elements < elements")
            ops = [t.op for t in cost.activations]
            self.check(len(ops) == len(set(ops)), where, f"duplicate op names {ops}")
            again = self.evaluate(config, layout, where)
            self.check(again == cost, where, "two evaluations of the same config and layout differ (not deterministic)")
            kept_all, kept_selective = cost.kept_under(every), cost.kept_under(self.kind.selective)
            self.check(
                cost.input_bytes <= kept_all <= kept_selective <= cost.kept_bytes, where,
                "full recompute must keep least: input_bytes <= kept under every switch <= kept under selective "
                f"<= kept, got {cost.input_bytes} <= {kept_all} <= {kept_selective} <= {cost.kept_bytes}",
            )

    def linear_in_micro_batch(self, i: int, config: object) -> None:
        """Kept bytes scale with the micro-batch; the working set is affine in it; parameters do not change."""
        layouts = [(1, False)]
        if self.split_degrees:
            layouts.append((self.split_degrees[0], False))
        layouts += [(d, True) for d in self.split_degrees]
        for attention in self.attentions:
            for tp, sp in layouts:
                base = _Layout(tp, sp, 1, attention)
                where = f"sample #{i}, {base}"
                # Without SP a kind may refuse tp > 1 (a MoE layer needs sequence parallelism).
                one = self.must(config, base, where) if tp == 1 or sp else self.evaluate(config, base, where)
                if one is None:
                    continue
                self.check(one.kept_bytes > 0, where, "a layer keeps something for its backward (kept_bytes is 0)")
                two = self.must(config, attrs.evolve(base, b=2), where)
                fixed = 2 * one.working_bytes - two.working_bytes
                for b in (2, 4):
                    at = f"sample #{i}, {attrs.evolve(base, b=b)}"
                    many = two if b == 2 else self.must(config, attrs.evolve(base, b=b), at)
                    scaled = {op: b * n for op, n in _terms(one).items()}
                    self.check(_terms(many) == scaled, at,
                               f"every term must be linear in the micro-batch size: {_terms(many)} != {b} x {_terms(one)}")
                    self.check(many.kept_bytes == b * one.kept_bytes, at, "kept_bytes is not linear in the micro-batch size")
                    self.check(many.input_bytes == b * one.input_bytes, at, "input_bytes is not linear in the micro-batch size")
                    # Affine: a weight gradient materialised in backward (the embedding's
                    # dense table gradient) does not grow with the batch.
                    self.check(
                        many.working_bytes == b * (one.working_bytes - fixed) + fixed, at,
                        f"working_bytes must be affine in the micro-batch size: {one.working_bytes} (b=1), "
                        f"{two.working_bytes} (b=2), {many.working_bytes} (b={b})",
                    )
                    self.check(many.buffers_per_micro_batch_bytes == b * one.buffers_per_micro_batch_bytes, at,
                               "buffers_per_micro_batch_bytes is not linear in the micro-batch size")
                    self.check(many.params == one.params, at, "parameters must not depend on the micro-batch size")

    def tp_split_terms(self, i: int, config: object) -> None:
        """Without SP, ``tp_split`` terms shrink by ``tp`` and the others do not change; SP leaves ``tp_split`` terms alone."""
        every = frozenset(self.kind.switches)
        for attention in self.attentions:
            whole = self.must(config, _Layout(1, False, 1, attention), f"sample #{i}, {_Layout(1, False, 1, attention)}")
            for tp in self.split_degrees:
                layout = _Layout(tp, False, 1, attention)
                where = f"sample #{i}, {layout}"
                split = self.evaluate(config, layout, where)
                if split is None:
                    continue
                flags = {t.op: t.tp_split for t in split.activations}
                self.check(flags == {t.op: t.tp_split for t in whole.activations}, where,
                           "the ops and their tp_split flags must not depend on tp")
                for op, n in _terms(split).items():
                    expected = _terms(whole)[op] // tp if flags[op] else _terms(whole)[op]
                    ok = _terms(whole)[op] == tp * n if flags[op] else _terms(whole)[op] == n
                    self.check(ok, where, f"term {op} (tp_split={flags[op]}): {n} bytes, expected {expected} "
                               f"from {_terms(whole)[op]} at tp=1")
                seq_layout = attrs.evolve(layout, sp=True)
                seq = self.must(config, seq_layout, f"sample #{i}, {seq_layout}")
                self.check(
                    {t.op: t.bytes for t in seq.activations if t.tp_split}
                    == {t.op: t.bytes for t in split.activations if t.tp_split},
                    f"sample #{i}, {seq_layout}",
                    "sequence parallelism must split only what TP does not (tp_split terms unchanged by sp)",
                )
                self.check(seq.kept_under(every) <= split.kept_under(every), f"sample #{i}, {seq_layout}",
                           "sequence parallelism must never keep more than without it")

    def tp_shards(self, i: int, config: object) -> None:
        """Whole-model counts do not depend on the layout; TP-split parameters split evenly and add up."""
        whole = self.must(config, _Layout(1, False, 1, self.attentions[0]), f"sample #{i}, tp=1")
        whole_params = {p.name: p for p in whole.params}
        for tp in self.split_degrees:
            layout = _Layout(tp, True, 1, self.attentions[0])
            where = f"sample #{i}, {layout}"
            split = self.must(config, layout, where)
            described = {p.name: (p.elements, p.group, p.tp_split, p.shared_with) for p in split.params}
            self.check(described == {p.name: (p.elements, p.group, p.tp_split, p.shared_with) for p in whole.params},
                       where, "whole-model parameter counts must not depend on the layout")
            for p in split.params:
                if p.group == "routed_expert":
                    continue  # split over ep * etp, not tp
                if p.tp_split:
                    shard = -(-p.stored_elements // tp)  # what one rank allocates
                    self.check(shard * tp == p.stored_elements, where,
                               f"parameter {p.name}: {p.stored_elements} elements do not split evenly over tp={tp}")
                    self.check(sum(shard for _ in range(tp)) == whole_params[p.name].elements, where,
                               f"parameter {p.name}: the tp={tp} shards do not add up to the unsharded "
                               f"{whole_params[p.name].elements} (the sample needs padding; size it so none is)")
                else:
                    self.check(p.stored_elements == whole_params[p.name].stored_elements, where,
                               f"parameter {p.name}: a replicated parameter's storage must not depend on tp")


    def states_its_work(self, i: int, config: object) -> None:
        """The kind states its work; its TP collectives match its TP split; FLOPs and traffic scale as TP says."""
        split_params = None
        for layout in self.all_layouts():
            where = f"sample #{i}, {layout}"
            cost = self.evaluate(config, layout, where)
            if cost is None:
                continue
            self.check(cost.work is not None, where, "states no work (LayerCost.work): its step time would be refused; "
                       "state its collectives and GEMM shapes (hp_plugins.kit.work)")
            tp_collectives = [c for c in cost.work.collectives if c.group == "tp"]
            if split_params is None:
                split_params = sorted(p.name for p in cost.params if p.tp_split and p.group != "routed_expert")
            if layout.tp == 1:
                self.check(not tp_collectives, where,
                           f"states tp collectives at tp=1 ({[c.op for c in tp_collectives]}): a group of one rank exchanges nothing")
            elif split_params:
                self.check(bool(tp_collectives), where,
                           f"TP splits its parameters {split_params} but it states no tp collective: its step time "
                           "would carry no tensor-parallel traffic")
        for attention in self.attentions:
            one = self.must(config, _Layout(1, False, 1, attention), f"sample #{i}, tp=1")
            reference = None
            for tp in self.split_degrees:
                for sp in (False, True):
                    layout = _Layout(tp, sp, 1, attention)
                    where = f"sample #{i}, {layout}"
                    cost = self.evaluate(config, layout, where)
                    if cost is None or cost.work is None:
                        continue
                    f, f1 = cost.forward, one.forward
                    for name in ("matmul_flops", "attention_flops"):
                        self.check(getattr(f, name) <= getattr(f1, name), where,
                                   f"forward {name} per rank {getattr(f, name):g} exceed tp=1's {getattr(f1, name):g}: "
                                   "tensor parallelism never adds work to a rank")
                    if split_params and f1.matmul_flops:
                        self.check(f.matmul_flops < f1.matmul_flops, where,
                                   f"TP splits {split_params} but the matmul FLOPs per rank stay {f.matmul_flops:g}")
                    # A TP collective moves the whole activation, whatever the degree: the same buffers at every tp.
                    moved = sorted((c.op, c.bytes, c.forward_calls, c.backward_calls) for c in cost.work.collectives
                                   if c.group == "tp")
                    if sp and reference is not None:
                        self.check(moved == reference, where,
                                   f"tp collectives {moved} differ from those at the first tp degree {reference}: "
                                   "a TP collective's buffer is the whole activation, not a share of it")
                    if sp and reference is None:
                        reference = moved
                    twice = self.evaluate(config, attrs.evolve(layout, b=2), f"sample #{i}, {attrs.evolve(layout, b=2)}")
                    if twice is not None and twice.work is not None:
                        doubled = sorted((c.op, 2 * c.bytes, c.forward_calls, c.backward_calls)
                                         for c in cost.work.collectives)
                        again = sorted((c.op, c.bytes, c.forward_calls, c.backward_calls) for c in twice.work.collectives)
                        self.check(again == doubled, f"sample #{i}, {attrs.evolve(layout, b=2)}",
                                   "collective bytes are not linear in the micro-batch size")


def _terms(cost: LayerCost) -> dict[str, int]:
    return {term.op: term.bytes for term in cost.activations}


def _is_byte_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_layer_kind(
    kind: LayerKind | str,
    samples: Iterable[Any],
    *,
    registry: Registry | None = None,
    traits: Iterable[str] = (),
    seq_len: int = CONTRACT_SEQ_LEN,
    precision: PrecisionSpec = CONTRACT_PRECISION,
    tp_degrees: Sequence[int] = (1, 2, 4),
    attentions: Sequence[str] = ATTENTION_IMPLS,
) -> ContractReport:
    """Check a layer kind against the contract every built-in kind passes.

    Over every sample config and every layout of ``tp`` in *tp_degrees*,
    sequence parallelism on and off, micro-batch 1, 2 (and 4) and every
    attention implementation:

    1. the kind declares switches from the vocabulary, once each, and its
       selective set is among them; every sample is of its ``config_type``;
    2. byte fields and terms are non-negative ``int``; parameter counts are
       non-negative ``int`` with ``stored_elements >= elements``; op names unique;
       terms name only declared switches;
    3. evaluation is deterministic (two evaluations are equal);
    4. full recompute keeps least: ``input_bytes <= kept under every switch <=
       kept under selective <= kept``;
    5. kept terms, ``kept_bytes``, ``input_bytes`` and per-micro-batch buffers are
       linear in the micro-batch size, the working set affine in it, the
       parameters independent of it (and the plain layer keeps something);
    6. without SP, terms marked ``tp_split`` are divided by ``tp`` and the others
       unchanged; SP leaves ``tp_split`` terms alone and never keeps more;
    7. whole-model parameter counts do not depend on the layout, and TP-split
       (non-expert) parameters split evenly over ``tp`` and add up;
    8. the kind states its work (:class:`~hp_core.costs.LayerWork`): no tp
       collective at ``tp = 1``, at least one at ``tp > 1`` when TP splits its
       parameters; its forward matmul and attention FLOPs per rank never exceed
       ``tp = 1``'s and fall when TP splits its parameters; its tp collectives
       move the same whole-activation buffers at every degree (with SP), and
       every collective's bytes are linear in the micro-batch size.

    A layout the kind's ``validate`` refuses (a :class:`~hp_core.errors.ConfigError`)
    is skipped, except the plain ones the samples must run: ``tp = 1``, and any
    ``tp`` in *tp_degrees* with SP. Size the samples so that every degree divides
    their shapes without padding.

    Args:
        kind: The kind, or its name in *registry*.
        samples: Configs of the kind; several cover its options.
        registry: Resolves a name and nested layers (a composite kind such as
            ``mtp``); the built-ins when ``None``.
        traits: Runtime traits every layout carries (names from
            :data:`hp_core.costs.TRAITS`).
        seq_len: Tokens per sequence.
        precision: Byte widths.
        tp_degrees: Tensor-parallel degrees, the first 1.
        attentions: Attention implementations.

    Returns:
        What was exercised (:class:`ContractReport`).

    Raises:
        AssertionError: A check failed; the message names the kind, the sample,
            the layout and what broke.
    """
    registry = registry if registry is not None else build_registry(use_env=False)
    if isinstance(kind, str):
        kind = registry.layer_kind(kind)
    degrees = tuple(tp_degrees)
    if not degrees or degrees[0] != 1 or any(d < 1 for d in degrees):
        raise ValueError(f"tp_degrees must start at 1 and list positive degrees, got {degrees}")
    contract = _Contract(kind, registry, seq_len, precision, frozenset(traits), degrees, tuple(attentions))
    configs = list(samples)
    contract.declared_switches()
    contract.samples_of_kind(configs)
    for i, config in enumerate(configs):
        contract.every_layout(i, config)
        contract.linear_in_micro_batch(i, config)
        contract.tp_split_terms(i, config)
        contract.tp_shards(i, config)
        contract.states_its_work(i, config)
    return ContractReport(kind.name, len(configs), contract.evaluations, tuple(dict.fromkeys(contract.refused)))
