"""Switch profiles: what each recompute setting of one layer costs (docs/recompute.md).

A layer kind's evaluator states what the plain layer keeps **per op**, each
:class:`~hp_core.costs.ActivationTerm` gated by at most one recompute switch
(``attBMM``, ``headCast``, ``dropout``, ``softmax``, ``normOp``, ``gather``,
``ffAct`` and, for MLA, ``attUp``). A :class:`SwitchProfile` measures the
layer a few ways -- plain, each switch alone, full, and the settings a census
measured whole (:attr:`~hp_core.costs.LayerCost.measured`) -- and prices every
setting from them:

* **Memory adds up over switches, by construction.** Each term is gated by one
  switch, so the bytes a setting keeps are the plain layer's less, for each of
  its switches, what that switch alone drops: ``kept(S) = kept(none) -
  sum_{s in S} (kept(none) - kept({s}))`` (additivity over switches, as HyperParallel's
  ``sapp_nd`` recompute profile sums them). A setting measured whole keeps what was measured.
  The backward working set follows from :meth:`hp_core.engine.stage.PlacedLayer.make`:
  ``working = working_bytes + kept(none) - kept``, so ``kept + working`` is the
  same for every setting of a layer (what the backward rebuilds it holds again).
* **Time does not add up, so it is priced per setting.** One re-run of the
  attention core rebuilds every attention-core switch's tensors at once
  (Megatron-LM checkpoints ``core_attention`` as a unit; Korthikanti et al.
  2022, Section 4.2), so recomputing ``softmax`` and ``attBMM`` costs less
  than the two alone. Each setting's time comes from the step-time model
  (:meth:`hp_core.engine.timing.LayerPricer.price`) evaluated with that setting.
* **Offload** moves a share of what a setting keeps to the host in forward and
  back for the backward (:func:`hp_core.engine.stage.offloaded_bytes`): it keeps that
  much less per micro-batch in flight, holds it again in its backward's
  working set, and costs the copy time its forward and backward cannot hide
  (:func:`hp_core.engine.timing.offload_seconds`).

Every setting's cost states the bytes per micro-batch in flight, the bytes held
once, the backward time with recompute, and the working set at the two peak
points of a stage (:mod:`hp_core.engine.stage`): the end of warm-up and the stage's
last backward (where the same layer's backward runs, so the same bytes).
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Mapping

import attrs

from hp_core.specs.run import Setting
from hp_core.engine.stage import offloaded_bytes
from hp_core.engine.timing import LayerPricer, LayerSeconds
from hp_core.costs import SWITCHES, LayerContext, LayerCost
from hp_core.types import LayerKind, Runtime

__all__ = ["SettingCost", "SwitchProfile", "candidate_settings", "switch_profile"]


@attrs.frozen
class SettingCost:
    """What one layer costs one rank under one setting.

    Attributes:
        setting: The setting as the plan states it.
        full: Whether the layer is fully recomputed.
        recomputed: The switches recomputed, those the runtime always
            recomputes included (empty under full).
        kept_bytes: Activation bytes kept per micro-batch in flight (after offload).
        per_micro_batch_bytes: ``kept_bytes`` plus the communication buffers
            held per micro-batch in flight.
        once_bytes: Communication buffers held once, however many micro-batches are in flight.
        offloaded_bytes: Bytes moved to the host and back per micro-batch.
        warmup_working_bytes: What the layer's backward holds beyond what it
            keeps, recomputed and fetched tensors included, when it runs the
            first backward at the end of warm-up.
        last_backward_working_bytes: The same for the stage's last backward.
        seconds: Its time per micro-batch (forward, backward, recompute,
            communication, exposed offload copies).
    """

    setting: Setting
    full: bool
    recomputed: frozenset[str]
    kept_bytes: int
    per_micro_batch_bytes: int
    once_bytes: int
    offloaded_bytes: int
    warmup_working_bytes: int
    last_backward_working_bytes: int
    seconds: LayerSeconds

    @property
    def backward_seconds(self) -> float:
        """Backward time with recompute and exposed offload copies."""
        return self.seconds.backward_with_recompute_seconds + self.seconds.offload_seconds

    @property
    def micro_batch_seconds(self) -> float:
        """The layer's whole time per micro-batch."""
        return self.seconds.micro_batch_seconds


@attrs.frozen
class SwitchProfile:
    """One layer kind's costs under one config and context, from which every setting is priced.

    Build with :func:`switch_profile`.

    Attributes:
        kind: The layer kind's name.
        switches: The switches the kind has.
        implicit: Switches the runtime recomputes whatever the plan says.
        plain: Nothing recomputed (beyond ``implicit``).
        alone: Per switch, that switch alone recomputed (with ``implicit``).
        full: The layer fully recomputed.
        measured: The settings a census measured whole, by recomputed switches.
    """

    kind: str
    switches: tuple[str, ...]
    implicit: frozenset[str]
    plain: SettingCost
    alone: Mapping[str, SettingCost]
    full: SettingCost
    measured: Mapping[frozenset[str], SettingCost]
    _cost: LayerCost = attrs.field(alias="cost", repr=False, eq=False)
    _selective: frozenset[str] = attrs.field(alias="selective", repr=False, eq=False)
    _price_seconds: Any = attrs.field(alias="price_seconds", repr=False, eq=False)
    _times: dict = attrs.field(alias="times", factory=dict, repr=False, eq=False)
    _alone_terms: Mapping[str, int] = attrs.field(alias="alone_terms", factory=dict, repr=False, eq=False)
    _plain_bytes: int = attrs.field(alias="plain_bytes", default=0, repr=False, eq=False)

    def recomputed(self, setting: Setting) -> tuple[bool, frozenset[str]]:
        """``(full, switches)`` the layer runs under *setting*, the runtime's implicit ones included.

        Raises:
            ValueError: The setting names a switch the kind does not have.
        """
        if setting.mode == "full":
            return True, frozenset()
        chosen = self._selective if setting.mode == "selective" else setting.switches
        unknown = sorted(chosen - set(self.switches))
        if unknown:
            raise ValueError(f"layer kind {self.kind} has no recompute switch {unknown}; it has {list(self.switches)}")
        return False, frozenset(chosen) | self.implicit

    def kept_before_offload_bytes(self, full: bool, recomputed: frozenset[str]) -> int:
        """Bytes kept per micro-batch by additivity: the plain layer's less what each switch alone drops.

        A setting measured whole keeps what was measured; full keeps the layer input.
        """
        if full:
            return self.full.kept_bytes + self.full.offloaded_bytes
        if recomputed in self.measured:
            return self.measured[recomputed].kept_bytes
        base = self._plain_bytes
        return base - sum(base - self._alone_terms[s] for s in recomputed)

    def price(self, setting: Setting) -> SettingCost:
        """Every cost of the layer under *setting*: memory by additivity, time priced directly."""
        full, recomputed = self.recomputed(setting)
        kept = self.kept_before_offload_bytes(full, recomputed)
        return _setting_cost(self._cost, self._plain_bytes, setting, full, recomputed, kept, self._times, self._price_seconds)


def _terms_kept(cost: LayerCost, recomputed: frozenset[str]) -> int:
    """The bytes of the activation terms no switch in *recomputed* gates (no measured override)."""
    return sum(t.bytes for t in cost.activations if t.switch is None or t.switch not in recomputed)


def _setting_cost(
    cost: LayerCost, plain_bytes: int, setting: Setting, full: bool, recomputed: frozenset[str], kept: int, times: dict,
    seconds: Any,
) -> SettingCost:
    """A setting's costs from the bytes it keeps before offload; its time priced once per distinct run."""
    moved = offloaded_bytes(kept, setting.offload)
    # hp_core.engine.stage.PlacedLayer.make: working = working_bytes + kept(none) - kept; offloaded bytes come back.
    working = cost.working_bytes + plain_bytes - kept + moved
    recomputed = frozenset() if full else recomputed
    key = (full, recomputed, moved)
    if key not in times:
        times[key] = seconds(full, recomputed, moved)
    return SettingCost(
        setting=setting, full=full, recomputed=recomputed, kept_bytes=kept - moved,
        per_micro_batch_bytes=kept - moved + cost.buffers_per_micro_batch_bytes, once_bytes=cost.buffers_once_bytes,
        offloaded_bytes=moved, warmup_working_bytes=working, last_backward_working_bytes=working, seconds=times[key],
    )


def switch_profile(
    kind: LayerKind,
    cost: LayerCost,
    config: Any,
    context: LayerContext,
    pricer: LayerPricer,
    *,
    implicit: frozenset[str] = frozenset(),
) -> SwitchProfile:
    """Measure one layer of *kind*: plain, each switch alone, full and the census's whole settings.

    Args:
        kind: The layer kind.
        cost: The layer's cost (a census applied where one prices it).
        config: The layer's config (its shapes for the timing model).
        context: The context it was evaluated in.
        pricer: Prices its time under a setting (:func:`hp_core.engine.timing.layer_pricer`).
        implicit: Switches the runtime always recomputes (``Runtime.implicit_recompute``).
    """
    implicit = frozenset(implicit) & frozenset(kind.switches)
    times: dict = {}
    seconds = pricer.layer(cost, config, kind, context)
    base = _terms_kept(cost, frozenset())  # = cost.kept_bytes: the plain layer, no measured override

    def make(setting: Setting, full: bool, recomputed: frozenset[str], kept: int) -> SettingCost:
        return _setting_cost(cost, base, setting, full, recomputed, kept, times, seconds)

    measured = {
        frozenset(switches): make(_setting_of(frozenset(switches)), False, frozenset(switches), kept)
        for switches, kept in cost.measured
    }
    alone_terms = {s: _terms_kept(cost, frozenset({s})) for s in kind.switches}

    def additive(recomputed: frozenset[str]) -> int:
        if recomputed in measured:
            return measured[recomputed].kept_bytes
        return base - sum(base - alone_terms[s] for s in recomputed)

    plain = make(Setting(), False, implicit, additive(implicit))
    alone = {s: make(_setting_of(frozenset({s})), False, frozenset({s}) | implicit, additive(frozenset({s}) | implicit))
             for s in kind.switches}
    full = make(Setting(mode="full"), True, frozenset(), cost.input_bytes)
    return SwitchProfile(
        kind=kind.name, switches=tuple(kind.switches), implicit=implicit, plain=plain, alone=alone, full=full,
        measured=measured, cost=cost, selective=kind.selective, price_seconds=seconds, times=times,
        alone_terms=alone_terms, plain_bytes=base,
    )


def _setting_of(switches: frozenset[str]) -> Setting:
    """The plan setting recomputing *switches*: ``none`` for the empty set."""
    return Setting(mode="switches", switches=switches) if switches else Setting()


def candidate_settings(
    kind: LayerKind, runtime: Runtime, *, unrestricted: bool = False, offload: Iterable[float] = ()
) -> tuple[Setting, ...]:
    """Every setting of *kind* a plan may give a layer.

    Every subset of the kind's switches (256 for eight switches, 512 for
    nine: ``mla`` and ``mla_moe``) and full recompute; unless *unrestricted*, only those the
    runtime's trainer executes (:meth:`hp_core.types.Runtime.executes`,
    ``Runtime.full_recompute``). Each again with each offload share in
    *offload* (shares above 0).
    """
    # The built-in names in their fixed order, then the kind's own in its order.
    order = [s for s in SWITCHES if s in kind.switches] + [s for s in kind.switches if s not in SWITCHES]
    base: list[Setting] = []
    for size in range(len(order) + 1):
        for combo in itertools.combinations(order, size):
            chosen = frozenset(combo)
            if unrestricted or runtime.executes(chosen, kind.name):
                base.append(_setting_of(chosen))
    if unrestricted or runtime.full_recompute:
        base.append(Setting(mode="full"))
    shares = sorted({float(share) for share in offload if share > 0})
    return tuple(base) + tuple(attrs.evolve(setting, offload=share) for share in shares for setting in base)
