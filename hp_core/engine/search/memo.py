"""Layer evaluations shared between layer contexts that agree on everything the evaluator read.

The search's first phase evaluates the model's groups in tens of thousands
of ``(tp, cp, ep, etp, mbs)`` contexts (DeepSeek-V3 on 2,048 devices:
59,722), but many kinds read few of the context's fields: a dense attention
layer, an embedding or an output head reads neither ``ep`` nor ``etp``. A
kind's evaluator is pure and deterministic (the ``hp_layer_kinds``
contract: its answer is a function of its config and the context), and it
can learn the context only by reading its fields and by calling its
``sublayer``. So :class:`Memo` evaluates a ``(kind, config)`` on a copy of
the context that notes each field read (:class:`_Reading`) and each nested
group evaluated through ``sublayer`` with its answer, and answers any later
context that gives every noted field the same value and every nested group
the same answer (the same object) with the same cost, or the same refusal,
without calling the evaluator: run there, the evaluator would read the same
values, take the same path and return the same cost. An evaluator that
reads the context through ``attrs.evolve``, ``attrs.asdict``, equality or a
hash reads every field, and is shared only between equal contexts.

``validate`` is not memoized: it runs in every context, as
:func:`~hp_core.engine.prepare.evaluate_layers` runs it, so what it reads
(``ep`` dividing the experts) does not split the evaluator's answers. Both
run under ``prepare``'s checks: an exception other than
:class:`~hp_core.errors.HPError` becomes a :class:`~hp_core.errors.PluginError`,
an answer that is not a :class:`~hp_core.costs.LayerCost` or names an
undeclared switch is refused (and neither is memoized). Within one context a
``(kind, config)`` is evaluated once, the nested layer of a module (the MTP
module's) sharing the body group's answer, as in ``prepare``.

A ``(kind, config)`` whose first :data:`_TRIES` evaluations found no answer
to share (it reads every field the contexts differ in, or nests such a
layer) is evaluated directly from then on, without noting its reads.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import attrs

from hp_core.costs import LayerContext, LayerCost
from hp_core.engine import census as census_lib
from hp_core.engine.inner_layers import check_switches
from hp_core.errors import ConfigError, HPError, PluginError, describe
from hp_core.registry import Registry
from hp_core.specs import LayerGroup, ModelSpec
from hp_core.types import CensusSource, LayerKind

# The context's fields an evaluator can read (``sublayer`` is a call, noted as one).
_FIELDS = tuple(field.name for field in attrs.fields(LayerContext) if field.name != "sublayer")
_READABLE = frozenset(_FIELDS)

# Evaluations of a (kind, config) without an answer shared before it is evaluated directly.
_TRIES = 16


class _Reading(LayerContext):
    """A layer context that notes the names of the fields read of it (in ``_read``)."""

    __slots__ = ("_read",)

    def __getattribute__(self, name: str) -> Any:
        if name in _READABLE:
            try:
                object.__getattribute__(self, "_read").add(name)
            except AttributeError:  # a copy (attrs.evolve) of a reading context: it read every field of this one
                pass
        return object.__getattribute__(self, name)


@attrs.define
class _Variant:
    """One path an evaluator took: the fields it read and the nested groups it evaluated, in call order.

    Attributes:
        fields: The names of the fields read.
        nested: The groups evaluated through ``sublayer``.
        answers: By the values of :attr:`fields` and the nested answers (their
            identities: the memo answers one object per answer), the cost or the
            :class:`~hp_core.errors.ConfigError` the evaluator raised.
        held: The nested answers those identities are of, held so that no other
            object takes their ids.
    """

    fields: tuple[str, ...]
    nested: tuple[LayerGroup, ...]
    answers: dict[tuple[Any, ...], LayerCost | ConfigError] = attrs.field(factory=dict)
    held: list[LayerCost] = attrs.field(factory=list)  # the nested answers keyed by identity: their ids are not reused


@attrs.define(eq=False)
class _Entry:
    """What the memo knows of one ``(kind, config)``."""

    config: Any
    variants: list[_Variant] = attrs.field(factory=list)
    shared: int = 0  # answers found in another context
    tried: int = 0  # evaluations
    memoized: bool = True


class _InContext:
    """One context's evaluations: the context (its ``sublayer`` evaluating through the memo) and its answers,
    one per ``(kind, config)``."""

    def __init__(self, memo: Memo, context: LayerContext, changes: dict[str, Any]) -> None:
        self.memo = memo
        self.answers: dict[int, LayerCost | ConfigError] = {}  # by id(entry)
        self.context = attrs.evolve(context, sublayer=self.sublayer, **changes)

    def sublayer(self, group: LayerGroup) -> LayerCost:
        return self.memo.nested(group, self)


class Memo:
    """Evaluations of ``(kind, config)`` shared between contexts (module docstring)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        # By (kind name, id(config)), each config held in _configs so that its id is not reused; equal
        # configs (a module's nested layer and the body group it repeats) share one entry, as in prepare.
        self._entries: dict[tuple[str, int], _Entry] = {}
        self._by_value: dict[tuple[str, Any], _Entry] = {}
        self._configs: list[Any] = []

    def clear(self) -> None:
        """Forget every answer (not which kinds are evaluated directly)."""
        for entry in self._entries.values():
            entry.variants.clear()

    def groups(self, kinds: list[LayerKind], groups: Iterable[LayerGroup], context: LayerContext,
               **changes: Any) -> tuple[list[LayerCost], LayerContext]:
        """Each group's cost in *context* (with *changes*), as :func:`~hp_core.engine.prepare.evaluate_groups`
        answers it, and the context, its ``sublayer`` set.

        Raises:
            ConfigError: A group refuses the context (the first that does, in model order).
            PluginError: An evaluator failed.
        """
        here = _InContext(self, context, changes)
        return [self.cost(kind, group.config, here, f"$.model.layers[{i}].config")
                for i, (kind, group) in enumerate(zip(kinds, groups))], here.context

    def nested(self, group: LayerGroup, here: _InContext) -> LayerCost:
        """A nested group's cost, as ``prepare``'s ``sublayer`` answers it."""
        path = "$.model.layers[].config.layer"
        kind = self.registry.layer_kind(group.kind, f"{path}.kind")
        if kind.placement != "body":
            raise ConfigError(f"{path}.kind", f"a nested layer must be of a body kind, not {kind.name!r}")
        return self.cost(kind, group.config, here, f"{path}.config")

    def cost(self, kind: LayerKind, config: object, here: _InContext, path: str) -> LayerCost:
        """One layer's cost in a context: checked and validated there, evaluated once per distinct reading."""
        entry = self._entries.get((kind.name, id(config)))
        if entry is None:
            entry = self._entry(kind, config)
        answer = here.answers.get(id(entry))
        if answer is None:
            if not isinstance(config, kind.config_type):
                raise ConfigError(path, f"layer kind {kind.name} needs a {kind.config_type.__name__} config, "
                                        f"got {type(config).__name__}")
            if kind.validate is not None:
                _run(kind, kind.validate, config, here.context)
            answer = here.answers[id(entry)] = self._answer(kind, config, here, entry)
        if isinstance(answer, ConfigError):
            raise answer.with_traceback(None)
        return answer

    def _entry(self, kind: LayerKind, config: object) -> _Entry:
        """The entry of a ``(kind, config)`` first seen: an equal config's, or a new one."""
        try:
            entry = self._by_value.get((kind.name, config))
            if entry is None:
                entry = self._by_value[(kind.name, config)] = _Entry(config)
        except TypeError:  # a config that does not hash: its own entry
            entry = _Entry(config)
        self._entries[(kind.name, id(config))] = entry
        self._configs.append(config)
        return entry

    def _answer(self, kind: LayerKind, config: object, here: _InContext, entry: _Entry) -> LayerCost | ConfigError:
        if not entry.memoized:
            return _checked(kind, _evaluation(kind, config, here.context), self.registry)
        context = here.context
        for variant in entry.variants:
            values = tuple([getattr(context, name) for name in variant.fields])
            if variant.nested:
                nested = self._nested_answers(variant.nested, here)
                if nested is None:
                    continue
                values += nested
            answer = variant.answers.get(values)
            if answer is not None:
                entry.shared += 1
                return answer
        entry.tried += 1
        if not entry.shared and entry.tried > _TRIES:
            entry.memoized = False
            entry.variants.clear()
            return _checked(kind, _evaluation(kind, config, here.context), self.registry)
        return self._evaluate(kind, config, here, entry)

    def _nested_answers(self, groups: tuple[LayerGroup, ...], here: _InContext) -> tuple[int, ...] | None:
        """The identities of the nested groups' answers in this context; ``None`` if one raises."""
        answers = []
        for group in groups:
            try:
                answers.append(id(self.nested(group, here)))
            except HPError:
                return None
        return tuple(answers)

    def _evaluate(self, kind: LayerKind, config: object, here: _InContext, entry: _Entry) -> LayerCost | ConfigError:
        """Evaluate on a reading copy of the context; memoize the answer under what it read."""
        nested: list[tuple[LayerGroup, LayerCost]] = []
        failed = False

        def sublayer(group: LayerGroup) -> LayerCost:
            nonlocal failed
            try:
                answer = self.nested(group, here)
            except BaseException:
                failed = True
                raise
            nested.append((group, answer))
            return answer

        context = here.context
        reading = _Reading(**{name: getattr(context, name) for name in _FIELDS}, sublayer=sublayer)
        read: set[str] = set()
        object.__setattr__(reading, "_read", read)
        answer = _checked(kind, _evaluation(kind, config, reading), self.registry)
        if failed:
            return answer  # a nested group refused: answered in this context, not memoized
        fields = tuple(sorted(read))
        groups = tuple(group for group, _ in nested)
        values = tuple([getattr(context, name) for name in fields]) + tuple(id(cost) for _, cost in nested)
        for variant in entry.variants:
            if variant.fields == fields and variant.nested == groups:
                break
        else:
            variant = _Variant(fields, groups)
            entry.variants.append(variant)
        variant.answers[values] = answer
        variant.held.extend(cost for _, cost in nested)
        return answer


def _run(kind: LayerKind, function: Callable[[Any, LayerContext], Any], config: object, context: LayerContext) -> Any:
    """A kind's function, an exception other than an HPError becoming a PluginError (as prepare's)."""
    try:
        return function(config, context)
    except HPError:
        raise
    except (Exception, SystemExit) as exc:  # a plugin must not end the command
        raise PluginError(kind.name, f"evaluator raised {type(exc).__name__}: {describe(exc)}") from exc


def _evaluation(kind: LayerKind, config: object, context: LayerContext) -> Any:
    """The evaluator's answer, or the ConfigError it raised."""
    try:
        return _run(kind, kind.evaluate, config, context)
    except ConfigError as exc:
        return exc


def _checked(kind: LayerKind, answer: Any, registry: Registry) -> LayerCost | ConfigError:
    """*answer* as ``prepare`` accepts an evaluator's: a LayerCost naming only the kind's switches, or its inner layers'
    kinds' (:func:`~hp_core.engine.inner_layers.check_switches`), or a ConfigError.

    Raises:
        PluginError: Anything else.
    """
    if isinstance(answer, ConfigError):
        return answer
    if not isinstance(answer, LayerCost):
        raise PluginError(kind.name, f"evaluator must return LayerCost, got {type(answer).__name__}")
    check_switches(kind, answer, registry)  # those of its kind, or of its inner layers' kinds (the MTP module)
    return answer


def memo_formula_costs(memo: Memo, model: ModelSpec, kinds: list[LayerKind], context: LayerContext, census: CensusSource,
                       attention: str, **changes: Any) -> tuple[tuple[LayerCost, ...], tuple[LayerCost, ...], LayerContext]:
    """``(formula, costs, context)``: each group's cost in *context* (with *changes*) as its evaluator states it,
    the same with the census applied (the formula cost itself where the census has no record) as
    :func:`~hp_core.engine.prepare.evaluate_layers` answers them before the precision recipe, and the context they
    were evaluated in.

    Raises:
        ConfigError: A group refuses the context, or a census record names a switch its kind lacks.
        PluginError: An evaluator or the census source failed.
    """
    formula, context = memo.groups(kinds, model.layers, context, **changes)
    records = census_lib.request_records(census, model, kinds, context.seq_len, attention, registry=memo.registry,
                                         tp=context.tp)
    if not records:
        return tuple(formula), tuple(formula), context
    return tuple(formula), tuple(census_lib.apply_record(cost, records[kind.name], kind, context) if kind.name in records
                                 else cost for kind, cost in zip(kinds, formula)), context
