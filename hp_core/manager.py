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

from hp_core import hookspecs
from hp_core.distributions import declares_entry_points
from hp_core.errors import PluginError
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
    "hp_plugins.schedules.classic",
    "hp_plugins.schedules.zero_bubble",
    "hp_plugins.schedules.dualpipe",
    "hp_plugins.kinds.mamba",
    "hp_plugins.kinds.hybrid",
    "hp_plugins.models.ssm",
)

# Third-party plugins advertise themselves under this entry-point group.
ENTRY_POINT_GROUP = "hp"

# Comma-separated plugin names to block (built-in dotted names or entry-point names).
BLOCK_ENV = "HP_BLOCK_PLUGINS"


def blocked_from_env(environ: "os._Environ[str] | dict[str, str] | None" = None) -> tuple[str, ...]:
    """The plugin names :data:`BLOCK_ENV` blocks."""
    value = (os.environ if environ is None else environ).get(BLOCK_ENV, "")
    return tuple(name.strip() for name in value.split(",") if name.strip())


def get_plugin_manager(
    plugins: Iterable[object] = (),
    *,
    builtins: bool = True,
    entry_points: bool = False,
    blocked: Iterable[str] = (),
    use_env: bool = True,
) -> pluggy.PluginManager:
    """A fresh plugin manager with the ``hp`` hook specs and the requested plugins.

    Args:
        plugins: Extra plugin objects (modules or instances) to register, e.g.
            a one-off class defined in a test or a notebook.
        builtins: Register :data:`DEFAULT_PLUGINS`.
        entry_points: Load the ``hp`` entry-point group of installed distributions.
        blocked: Plugin names never to register.
        use_env: Also block the names in the :data:`BLOCK_ENV` environment variable.

    Returns:
        The manager, with every registered hook implementation checked
        against the specs (``check_pending``).

    Raises:
        PluginError: A plugin cannot be imported, or implements a hook that
            does not exist (a misspelling).
    """
    manager = pluggy.PluginManager(PROJECT)
    manager.add_hookspecs(hookspecs)
    for name in (*blocked, *(blocked_from_env() if use_env else ())):
        manager.set_blocked(name)
    if builtins:
        for dotted in DEFAULT_PLUGINS:
            if manager.is_blocked(dotted):
                continue
            try:
                module = importlib.import_module(dotted)
            except Exception as exc:  # pragma: no cover - a broken install
                raise PluginError(dotted, f"cannot be imported: {exc}") from exc
            manager.register(module, name=dotted)
    for plugin in plugins:
        name = getattr(plugin, "__name__", None) or type(plugin).__name__
        if manager.is_blocked(name):
            continue
        try:
            manager.register(plugin, name=name)
        except ValueError as exc:
            raise PluginError(name, f"cannot be registered: {exc}") from exc
    # Loading the group imports importlib.metadata and reads every distribution's
    # metadata; skipped when a direct reading finds no distribution declaring it.
    if entry_points and declares_entry_points(ENTRY_POINT_GROUP):
        try:
            manager.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        except Exception as exc:
            raise PluginError("entry point", f"a plugin of group {ENTRY_POINT_GROUP!r} failed to load: {exc}") from exc
    try:
        manager.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(exc.plugin if isinstance(exc.plugin, str) else manager.get_name(exc.plugin) or "?", str(exc)) from exc
    return manager
