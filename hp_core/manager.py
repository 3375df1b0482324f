"""Building a plugin manager: specs, built-in plugins, entry points, blocking.

There is no module-global manager: every caller builds its own with
:func:`get_plugin_manager` and turns it into a frozen
:class:`~hp_core.registry.Registry`.
"""

from __future__ import annotations

import importlib
import os
from typing import Iterable

import pluggy
import pluggy._manager

from hp_core import hookspecs
from hp_core.distributions import declares_entry_points
from hp_core.errors import PluginError, describe
from hp_core.markers import PROJECT

__all__ = ["BLOCK_ENV", "DEFAULT_PLUGINS", "ENTRY_POINT_GROUP", "blocked_from_env", "get_plugin_manager"]

# The built-in plugins, registered by dotted name through the same hooks a
# third party implements.
DEFAULT_PLUGINS = (
    "hp_plugins.kinds.embedding",
    "hp_plugins.kinds.dense",
    "hp_plugins.kinds.moe",
    "hp_plugins.kinds.mla",
    "hp_plugins.kinds.mtp",
    "hp_plugins.kinds.output",
    "hp_plugins.census.formulas",
    "hp_plugins.census.file",
    "hp_plugins.census.torch",
    "hp_plugins.runtimes.generic",
    "hp_plugins.runtimes.megatron",
    "hp_plugins.runtimes.fsdp2",
    "hp_plugins.runtimes.hyperparallel",
    "hp_plugins.exporters.megatron",
    "hp_plugins.exporters.hyperparallel",
    "hp_plugins.exporters.torchtitan",
    "hp_plugins.hardware.presets",
    "hp_plugins.models.presets",
    "hp_plugins.models.hf",
    "hp_plugins.cases.megatron_measured",
    "hp_plugins.cases.fsdp2_measured",
    "hp_plugins.optimizers.adam",
    "hp_plugins.optimizers.sgd",
    "hp_plugins.optimizers.adafactor",
    "hp_plugins.optimizers.muon",
    "hp_plugins.precision.recipes",
    "hp_plugins.schedules.classic",
    "hp_plugins.schedules.zero_bubble",
    "hp_plugins.schedules.dualpipe",
    "hp_plugins.kinds.mamba",
    "hp_plugins.kinds.hybrid",
    "hp_plugins.models.ssm",
    "hp_plugins.kinds.qwen3_next",
    "hp_plugins.models.qwen3_next",
    "hp_plugins.collectives.nccl",
    "hp_plugins.importers.megatron",
    "hp_plugins.importers.torchtitan",
    "hp_plugins.importers.accelerate",
    "hp_plugins.kinds.lora",
    "hp_plugins.collectives.deepep",
    "hp_plugins.collectives.hybridep",
)

# Third-party plugins advertise themselves under this entry-point group.
ENTRY_POINT_GROUP = "hp"

# Comma-separated plugin names to block (built-in dotted names or entry-point names).
BLOCK_ENV = "HP_BLOCK_PLUGINS"


def blocked_from_env(environ: "os._Environ[str] | dict[str, str] | None" = None) -> tuple[str, ...]:
    """The plugin names :data:`BLOCK_ENV` blocks."""
    value = (os.environ if environ is None else environ).get(BLOCK_ENV, "")
    return tuple(name.strip() for name in value.split(",") if name.strip())


def _failure(exc: BaseException) -> str:
    """What a plugin's import or hook raised, on one line (``SystemExit`` included: a plugin must not end ``hp``)."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    return f"{type(exc).__name__}: {describe(exc)}"


def _load_entry_points(manager: pluggy.PluginManager, blocked: set[str], broken: list[tuple[str, str]]) -> None:
    """Load the ``hp`` entry points one by one: a failing one is recorded in *broken*, not fatal.

    An entry point is skipped when its name or its module is blocked. One named
    like a built-in plugin (or like another plugin already loaded) is recorded
    as broken rather than skipped without a word.
    """
    import importlib.metadata

    for dist in list(importlib.metadata.distributions()):
        for ep in dist.entry_points:
            if ep.group != ENTRY_POINT_GROUP:
                continue
            module = ep.value.partition(":")[0].strip()
            if ep.name in blocked or module in blocked:
                continue
            label = f"{ep.name} (module {module}, distribution {dist.metadata['Name']})"
            if ep.name in DEFAULT_PLUGINS or manager.has_plugin(ep.name):
                what = "a built-in plugin" if ep.name in DEFAULT_PLUGINS else "a plugin already loaded"
                broken.append((ep.name, f"entry point {label} is named like {what}; rename the entry point"))
                continue
            try:
                plugin = ep.load()
                manager.register(plugin, name=ep.name)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 - a third party's import may raise anything, even SystemExit
                broken.append((ep.name, f"entry point {label} cannot be loaded: {_failure(exc)}"))
                continue
            manager._plugin_distinfo.append((plugin, pluggy._manager.DistFacade(dist)))  # as pluggy's own loader


def get_plugin_manager(
    plugins: Iterable[object] = (),
    *,
    builtins: bool = True,
    entry_points: bool = False,
    blocked: Iterable[str] = (),
    use_env: bool = True,
) -> pluggy.PluginManager:
    """A fresh plugin manager with the ``hp`` hook specs and the requested plugins.

    A plugin that cannot be imported or registered (an exception, even a
    ``sys.exit``, at its import; an entry point named like a built-in) does not
    stop the others: it is listed in the manager's ``hp_broken`` (``(name,
    message)`` pairs), which :meth:`~hp_core.registry.Registry.from_manager`
    reports. ``hp_blocked`` keeps the blocked names, which may also be a
    module's name or a record's (a layer kind's) name.

    Args:
        plugins: Extra plugin objects (modules or instances) to register, e.g.
            a one-off class defined in a test or a notebook.
        builtins: Register :data:`DEFAULT_PLUGINS`.
        entry_points: Load the ``hp`` entry-point group of installed distributions.
        blocked: Plugin names never to register: a plugin's (entry point's)
            name, its module's name, or the name of a record it provides.
        use_env: Also block the names in the :data:`BLOCK_ENV` environment variable.

    Returns:
        The manager, with every registered hook implementation checked
        against the specs (``check_pending``).

    Raises:
        PluginError: A plugin implements a hook that does not exist (a misspelling).
    """
    manager = pluggy.PluginManager(PROJECT)
    manager.add_hookspecs(hookspecs)
    names = {*blocked, *(blocked_from_env() if use_env else ())}
    for name in names:
        manager.set_blocked(name)
    broken: list[tuple[str, str]] = []
    if builtins:
        for dotted in DEFAULT_PLUGINS:
            if manager.is_blocked(dotted):
                continue
            try:
                module = importlib.import_module(dotted)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 - a broken install
                broken.append((dotted, f"cannot be imported: {_failure(exc)}"))
                continue
            manager.register(module, name=dotted)
    for plugin in plugins:
        name = getattr(plugin, "__name__", None) or type(plugin).__name__
        if manager.is_blocked(name) or getattr(plugin, "__module__", None) in names:
            continue
        try:
            manager.register(plugin, name=name)
        except ValueError as exc:
            raise PluginError(name, f"cannot be registered: {exc}") from exc
    # Loading the group imports importlib.metadata and reads every distribution's
    # metadata; skipped when a direct reading finds no distribution declaring it.
    if entry_points and declares_entry_points(ENTRY_POINT_GROUP):
        _load_entry_points(manager, names, broken)
    for _ in range(len(manager.get_plugins()) + 1):
        try:
            manager.check_pending()
            break
        except pluggy.PluginValidationError as exc:
            name = exc.plugin if isinstance(exc.plugin, str) else manager.get_name(exc.plugin) or "?"
            loaded = {id(plugin) for plugin, _ in manager.list_plugin_distinfo()}
            if manager.get_plugin(name) is None or id(manager.get_plugin(name)) not in loaded:
                raise PluginError(name, str(exc)) from exc
            manager.unregister(name=name)  # an entry point's misspelled hook: that plugin only is broken
            broken.append((name, " ".join(str(exc).split())))
    manager.hp_broken = tuple(broken)  # type: ignore[attr-defined]
    manager.hp_blocked = frozenset(names)  # type: ignore[attr-defined]
    return manager
