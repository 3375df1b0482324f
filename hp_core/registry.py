"""A frozen snapshot of what the plugins provide, sorted by name."""

from __future__ import annotations

import difflib
from typing import Any, Iterable, Mapping

import attrs
import pluggy

from hp_core.distributions import planner_version
from hp_core.errors import ConfigError, PluginError, describe
from hp_core.collectives import CollectiveModel
from hp_core.hookspecs import HOOKS
from hp_core.precision_recipes import PrecisionRecipe
from hp_core.types import (
    CaseFormat, CensusSource, Exporter, HardwarePreset, LayerAspect, LayerKind, ModelFormat, ModelPreset, Optimizer,
    Runtime,
)
from hp_core.schedules import Schedule
from hp_core.importers import Importer

__all__ = ["BrokenPlugin", "Provider", "Registry", "device_families", "misspelt_families"]

_BUILTIN_DIST = "hp-planner"


@attrs.frozen
class Provider:
    """Who provides a record: the plugin and the distribution that ships it."""

    plugin: str
    distribution: str
    version: str


def _providers_by_plugin(manager: pluggy.PluginManager) -> dict[str, Provider]:
    """Each registered plugin's name with its distribution."""
    found: dict[str, Provider] = {}
    from_dists = {id(plugin): dist for plugin, dist in manager.list_plugin_distinfo()}
    for name, plugin in manager.list_name_plugin():
        if plugin is None:
            continue  # a blocked name: registered as blocked, never loaded
        dist = from_dists.get(id(plugin))
        if dist is not None:
            found[name] = Provider(name, dist.project_name, dist.version)
        elif name.startswith("hp_plugins."):
            found[name] = Provider(name, _BUILTIN_DIST, planner_version())
        else:
            found[name] = Provider(name, "(registered in code)", "")
    return found


@attrs.frozen
class BrokenPlugin:
    """A plugin left out because it failed: its name and what went wrong, on one line."""

    plugin: str
    error: str


def _collect(
    manager: pluggy.PluginManager, hook_name: str, record_type: type, providers: Mapping[str, Provider],
    broken: dict[str, str], blocked: frozenset[str],
) -> tuple[list[Any], dict[str, Provider]]:
    """The records every plugin yields for *hook_name*; a plugin that fails is entered in *broken* and left out."""
    records: dict[str, Any] = {}
    owner: dict[str, Provider] = {}
    for impl in getattr(manager.hook, hook_name).get_hookimpls():
        plugin = impl.plugin_name
        if plugin in broken:
            continue
        try:
            result = impl.function()
            items = list(result) if result is not None else []
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - a plugin's hook may raise anything, even SystemExit
            what = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else f"raised {type(exc).__name__}: {describe(exc)}"
            broken[plugin] = f"hook {hook_name} {what}"
            continue
        wrong = next((item for item in items if not isinstance(item, record_type)), None)
        if wrong is not None:
            broken[plugin] = f"hook {hook_name} must yield {record_type.__name__} records, got {type(wrong).__name__}"
            continue
        for item in items:
            if item.name in blocked:
                continue
            if item.name in records:
                raise PluginError(
                    f"{owner[item.name].plugin} and {plugin}",
                    f"both provide {record_type.__name__} {item.name!r} "
                    f"(distributions {owner[item.name].distribution} and {providers[plugin].distribution}); "
                    "block one with --block-plugin or HP_BLOCK_PLUGINS",
                )
            records[item.name] = item
            owner[item.name] = providers[plugin]
    ordered = [records[name] for name in sorted(records)]
    return ordered, owner


def _lookup(items: tuple[Any, ...], name: str, what: str, path: str) -> Any:
    for item in items:
        if item.name == name:
            return item
    known = ", ".join(i.name for i in items) or "none"
    raise ConfigError(path, f"unknown {what} {name!r}; known: {known}")


@attrs.frozen
class _Composed:
    """A kind's evaluator followed by the aspects other plugins state for it (picklable, unlike a closure)."""

    evaluate: Any
    aspects: tuple[LayerAspect, ...]

    def __call__(self, config: Any, context: Any) -> Any:
        cost = self.evaluate(config, context)
        for aspect in self.aspects:
            try:
                value = aspect.evaluate(config, context, cost)
                cost = attrs.evolve(cost, **{aspect.aspect: value})
            except (TypeError, ValueError) as exc:
                raise PluginError(aspect.name, f"aspect {aspect.aspect} of kind {aspect.kind} is not a valid "
                                               f"{aspect.aspect}: {describe(exc)}") from exc
        return cost


def _with_aspects(kinds: tuple[LayerKind, ...], aspects: tuple[LayerAspect, ...]) -> tuple[LayerKind, ...]:
    """The kinds, each evaluator composed with the aspects stated for it (in aspect name order).

    Raises:
        PluginError: An aspect names a kind no plugin provides, or two state one field of a kind.
    """
    names = {kind.name for kind in kinds}
    seen: dict[tuple[str, str], str] = {}
    for aspect in aspects:
        if aspect.kind not in names:
            raise PluginError(aspect.name, f"states the {aspect.aspect} of layer kind {aspect.kind!r}, which no plugin provides")
        other = seen.setdefault((aspect.kind, aspect.aspect), aspect.name)
        if other != aspect.name:
            raise PluginError(aspect.name, f"states the {aspect.aspect} of layer kind {aspect.kind!r}, as aspect {other!r} "
                                           "does; block one of them")
    if not aspects:
        return kinds
    return tuple(
        attrs.evolve(kind, evaluate=_Composed(kind.evaluate, tuple(a for a in aspects if a.kind == kind.name)))
        if any(a.kind == kind.name for a in aspects) else kind
        for kind in kinds
    )


def _flag_words(words: tuple[str, ...]) -> frozenset[tuple[str, ...]]:
    """A trainer's flags as ``(flag, its values...)`` groups, in any order (``--a x --b`` is ``--b --a x``)."""
    groups: list[list[str]] = []
    for word in words:
        if word.startswith("--") or not groups:
            groups.append([word])
        else:
            groups[-1].append(word)
    return frozenset(tuple(g) for g in groups)


def device_families(hardware: tuple[HardwarePreset, ...], runtimes: tuple[Runtime, ...]) -> frozenset[str]:
    """The device families the hardware presets and the runtimes' timing profiles name (``*`` left out)."""
    found = {h.spec.architecture for h in hardware} | {
        d.architecture for r in runtimes if r.timing is not None for d in r.timing.devices}
    return frozenset(found - {None, "*"})


def misspelt_families(stated: Iterable[str], known: frozenset[str]) -> dict[str, str]:
    """Of *stated*, each family no preset or profile names that is a near miss of one that is (``hoper``: ``hopper``),
    with it. A family nothing names and nothing resembles (``ada``, a plugin's device) is taken as stated: priced
    with the profiles' fallback efficiencies, as any family without figures of its own."""
    return {name: close[0] for name in stated if name not in known
            for close in [difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)] if close}


def _recipe_failures(fields: dict[str, tuple[Any, ...]], providers: Mapping[tuple[str, str], Provider],
                     blocked: frozenset[str]) -> dict[str, str]:
    """The plugins whose precision recipes the rest of the registry contradicts, each with its first reason: a
    ``bf16_attention_recipe`` that is no registered recipe running attention in bf16, a device
    family (``architectures``, ``one_copy_architectures``) that is a near miss of one a hardware preset or timing
    profile names, flags for a trainer no exporter is (and no blocked one), or a trainer's flags another recipe states
    already (an importer could not tell them apart; a plugin's recipe, not the built-in one, or the later by name, is
    at fault). The built-in recipes are checked against each other only: blocking an exporter leaves them."""
    families = device_families(fields["hardware"], fields["runtimes"])
    exporters = {e.name for e in fields["exporters"]} | set(blocked)
    stated: dict[tuple[str, frozenset], str] = {}
    found: dict[str, str] = {}
    owners = {r.name: providers.get(("hp_precision_recipes", r.name)) for r in fields["precision_recipes"]}
    recipes = {r.name: r for r in fields["precision_recipes"]}
    # The built-in recipes first: where a plugin's flags repeat one of theirs, the plugin is at fault.
    for recipe in sorted(fields["precision_recipes"], key=lambda r: (getattr(owners[r.name], "distribution", None)
                                                                      != _BUILTIN_DIST, r.name)):
        who = owners[recipe.name]
        owner = who.plugin if who is not None else recipe.name
        builtin = who is not None and who.distribution == _BUILTIN_DIST
        reasons = [] if builtin else [
            f"{field} names {name!r}, which no hardware preset or timing profile names; did you mean {near!r}?"
            for field in ("architectures", "one_copy_architectures")
            for name, near in misspelt_families(getattr(recipe, field), families).items()]
        plain = recipe.bf16_attention_recipe
        if plain is not None and (plain not in recipes or recipes[plain].attention_format != "bf16"):
            reasons.append(f"bf16_attention_recipe {plain!r} is not a registered precision recipe running attention in "
                           "bf16")
        for trainer, words in recipe.flags.items():
            if trainer not in exporters and not builtin:
                reasons.append(f"flags for {trainer!r}, no registered exporter (known: {', '.join(sorted(exporters))})")
            other = stated.setdefault((trainer, _flag_words(words)), recipe.name)
            if other != recipe.name:
                reasons.append(f"its {trainer} flags ({' '.join(words)}) are precision recipe {other}'s: an importer "
                               "could not tell the two apart; state flags of its own")
        if reasons:
            found.setdefault(owner, f"precision recipe {recipe.name}: {reasons[0]}")
    return found


@attrs.frozen
class Registry:
    """Every record the plugins yield, by hook, sorted by name; immutable.

    Build one with :meth:`from_manager`; the planner reads only this.
    """

    layer_kinds: tuple[LayerKind, ...] = ()
    census_sources: tuple[CensusSource, ...] = ()
    runtimes: tuple[Runtime, ...] = ()
    hardware: tuple[HardwarePreset, ...] = ()
    models: tuple[ModelPreset, ...] = ()
    exporters: tuple[Exporter, ...] = ()
    model_formats: tuple[ModelFormat, ...] = ()
    case_formats: tuple[CaseFormat, ...] = ()
    optimizers: tuple[Optimizer, ...] = ()
    layer_aspects: tuple[LayerAspect, ...] = ()
    precision_recipes: tuple[PrecisionRecipe, ...] = ()
    schedules: tuple[Schedule, ...] = ()
    collective_models: tuple[CollectiveModel, ...] = ()
    importers: tuple[Importer, ...] = ()
    providers: Mapping[tuple[str, str], Provider] = attrs.field(factory=dict, eq=False)
    plugins: tuple[Provider, ...] = ()
    broken: tuple[BrokenPlugin, ...] = ()

    @classmethod
    def from_manager(cls, manager: pluggy.PluginManager, *, broken_ok: bool = False) -> "Registry":
        """Call every registration hook once and freeze the result.

        A plugin that failed to load (the manager's ``hp_broken``), raised in a
        registration hook (``SystemExit`` included) or yielded the wrong type is
        left out and listed in :attr:`broken`. Records whose name is blocked
        (the manager's ``hp_blocked``: ``HP_BLOCK_PLUGINS=gdn`` blocks the layer
        kind ``gdn``) are left out.

        Args:
            broken_ok: Return the registry with the broken plugins listed
                (``hp plugins``); otherwise the first one is raised.

        Raises:
            PluginError: A plugin is broken (unless *broken_ok*), or two yield one name.
        """
        by_plugin = _providers_by_plugin(manager)
        fields: dict[str, tuple[Any, ...]] = {}
        providers: dict[tuple[str, str], Provider] = {}
        failed: dict[str, str] = dict(getattr(manager, "hp_broken", ()))
        blocked = frozenset(getattr(manager, "hp_blocked", ()))
        # Again while a plugin fails in a later hook, so that none of its records stays.
        for _ in range(len(by_plugin) + 1):
            before = len(failed)
            for hook_name, record_type in HOOKS.items():
                items, owners = _collect(manager, hook_name, record_type, by_plugin, failed, blocked)
                fields[hook_name.removeprefix("hp_")] = tuple(items)
                providers.update({(hook_name, name): who for name, who in owners.items()})
            # A recipe naming a blocked one as its bf16-attention twin goes with it (--block-plugin fp8-current takes
            # fp8-current-fp8-attention along), rather than stopping every command.
            fields["precision_recipes"] = tuple(r for r in fields["precision_recipes"]
                                                if r.bf16_attention_recipe not in blocked)
            for plugin, message in _recipe_failures(fields, providers, blocked).items():
                failed.setdefault(plugin, message)
            if len(failed) == before:
                break
        if failed and not broken_ok:
            name, message = next(iter(failed.items()))
            raise PluginError(name, message)
        plugins = tuple(sorted((p for p in by_plugin.values() if p.plugin not in failed), key=lambda p: p.plugin))
        claimed: dict[str, str] = {}
        for fmt in fields["model_formats"]:
            for model_type in fmt.model_types:
                if model_type in claimed:
                    raise PluginError(fmt.name, f"model_type {model_type!r} is also read by model format {claimed[model_type]!r}")
                claimed[model_type] = fmt.name
        return cls(
            layer_kinds=_with_aspects(fields["layer_kinds"], fields["layer_aspects"]),
            census_sources=fields["census_sources"],
            runtimes=fields["runtimes"],
            hardware=fields["hardware"],
            models=fields["models"],
            exporters=fields["exporters"],
            model_formats=fields["model_formats"],
            case_formats=fields["case_formats"],
            optimizers=fields["optimizers"],
            layer_aspects=fields["layer_aspects"],
            precision_recipes=fields["precision_recipes"],
            schedules=fields["schedules"],
            collective_models=fields["collective_models"],
            importers=fields["importers"],
            providers=providers,
            plugins=plugins,
            broken=tuple(BrokenPlugin(name, message) for name, message in sorted(failed.items())),
        )

    def layer_kind(self, name: str, path: str = "$.model.layers[].kind") -> LayerKind:
        return _lookup(self.layer_kinds, name, "layer kind", path)

    def census_source(self, name: str, path: str = "$.census") -> CensusSource:
        return _lookup(self.census_sources, name, "census source", path)

    def runtime(self, name: str | Runtime, path: str = "$.runtime") -> Runtime:
        """The runtime named *name*; a :class:`Runtime` given itself (one with per-run options set) is returned as is."""
        return name if isinstance(name, Runtime) else _lookup(self.runtimes, name, "runtime", path)

    def hardware_preset(self, name: str, path: str = "$.hardware") -> HardwarePreset:
        return _lookup(self.hardware, name, "hardware preset", path)

    def model(self, name: str, path: str = "$.model") -> ModelPreset:
        return _lookup(self.models, name, "model preset", path)

    def exporter(self, name: str, path: str = "--export") -> Exporter:
        return _lookup(self.exporters, name, "trainer plan exporter", path)

    def model_format(self, name: str, path: str = "$.model") -> ModelFormat:
        return _lookup(self.model_formats, name, "model format", path)

    def layer_aspect(self, name: str, path: str = "$.aspects") -> LayerAspect:
        return _lookup(self.layer_aspects, name, "layer aspect", path)

    def case_format(self, name: str, path: str = "$.format") -> CaseFormat:
        return _lookup(self.case_formats, name, "case format", path)

    def optimizer(self, name: str, path: str = "$.precision.optimizer") -> Optimizer:
        return _lookup(self.optimizers, name, "optimizer", path)

    def precision_recipe(self, name: str, path: str = "$.precision.recipe") -> PrecisionRecipe:
        return _lookup(self.precision_recipes, name, "precision recipe", path)
    def schedule(self, name: str, path: str = "$.parallel.schedule") -> Schedule:
        return _lookup(self.schedules, name, "pipeline schedule", path)
    def collective_model(self, name: str, path: str = "$.runtime.timing.collective_model") -> CollectiveModel:
        return _lookup(self.collective_models, name, "collective model", path)

    def importer(self, name: str, path: str = "--from") -> Importer:
        return _lookup(self.importers, name, "importer", path)

    def format_for(self, config: Mapping[str, Any], where: str = "config.json") -> ModelFormat:
        """The model format that reads *config*, by its ``model_type``.

        Raises:
            ConfigError: No format reads that ``model_type``.
        """
        model_type = config.get("model_type")
        for fmt in self.model_formats:
            if model_type in fmt.model_types:
                return fmt
        known = sorted(t for fmt in self.model_formats for t in fmt.model_types)
        raise ConfigError(f"{where} $.model_type",
                          f"model_type {model_type!r} is not supported; supported: {', '.join(known) or 'none'} "
                          "(a plugin adds one through the hp_model_formats hook)")

    def provider(self, hook_name: str, name: str) -> Provider:
        return self.providers[(hook_name, name)]

    def kinds_placed(self, placement: str) -> frozenset[str]:
        return frozenset(k.name for k in self.layer_kinds if k.placement == placement)

