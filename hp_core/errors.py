"""Errors the user can act on.

Every error a user can cause derives from :class:`HPError`. The command line
prints ``str(error)`` on one line and exits with status 2; nothing else of it
(no traceback) reaches the terminal.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BLOCK_HINT", "ConfigError", "HPError", "PlanNotExecutable", "PluginError", "RunRefusal", "SpecError", "call_plugin",
           "describe"]


class HPError(Exception):
    """A problem with the user's input or environment, stated on one line.

    Every subclass pickles (``__reduce__`` rebuilds it from its own constructor's arguments, plus any attribute
    set on it afterwards): ``hp search --workers N`` raises them in worker processes and the parent re-raises them.
    """

    def __str__(self) -> str:
        return " ".join(str(self.args[0]).split()) if self.args else ""


class ConfigError(HPError):
    """An input value is wrong; ``path`` names it the way a config file does (``$.parallel.tp``).

    Args:
        path: The field path, starting at ``$`` for the root of a config file.
        message: What is wrong and what to do about it.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's own reduce calls cls(*self.args) with the one formatted string: a TypeError in the process
        # that unpickles it (a search worker's parent then sees a BrokenProcessPool).
        return (type(self), (self.path, self.message), dict(self.__dict__))


class RunRefusal(ConfigError):
    """A refusal of the run as a whole, whatever its layout (FP8 attention the runtime's kernel or the device runs
    none of, at ``$.runtime.options.<option>`` or ``$.precision.recipe``): ``hp search`` reports it on one line
    rather than rejecting every layout under it, where a plain :class:`ConfigError` at a runtime option (one that
    depends on the layout, ``reshard_after_forward_to``) rejects only the layouts it refuses."""


class SpecError(ConfigError, ValueError, TypeError):
    """A spec or config field refused by its validator (``ParallelSpec(tp=0)``).

    It is a :class:`ConfigError` (so ``except HPError`` catches a spec built
    wrongly through the API) and, for code written before it existed, a
    ``ValueError`` and a ``TypeError`` as attrs' own validators raise.
    ``path`` is the field's name (the converter extends it to the full path
    in a file, ``$.parallel.tp``); ``str()`` is the message alone, which
    starts with the field's name.

    Args:
        field: The field's name.
        message: What is wrong (starting with the field's name).
    """

    def __init__(self, field: str, message: str) -> None:
        HPError.__init__(self, message)
        self.path = field
        self.message = message


class PlanNotExecutable(ConfigError):
    """A recompute plan a trainer cannot run, with the closest plan it can.

    Args:
        trainer: The trainer (exporter name) that cannot run it.
        message: Why not, what the trainer runs, and the closest plan it runs.
        suggestion: That closest plan (a :class:`~hp_core.specs.RecomputeSpec`),
            or ``None`` where there is none.
    """

    def __init__(self, trainer: str, message: str, suggestion: object = None) -> None:
        super().__init__("$.recompute", message)
        self.trainer = trainer
        self.suggestion = suggestion

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.trainer, self.message, self.suggestion), dict(self.__dict__))


# How a message about a broken plugin tells the user to go on without it.
BLOCK_HINT = "HP_BLOCK_PLUGINS={name} (or --block-plugin {name}) runs without it"


class PluginError(HPError):
    """A plugin misbehaved: it raised, returned the wrong type, or clashes with another plugin.

    The message ends by saying how to run without it (:data:`BLOCK_HINT`):
    ``HP_BLOCK_PLUGINS`` blocks a plugin by the name the message shows.

    Args:
        plugin: The name of the plugin at fault (and of the other one, for a clash).
        message: What went wrong.
    """

    def __init__(self, plugin: str, message: str) -> None:
        hint = "" if " " in plugin or "HP_BLOCK_PLUGINS" in message else f"; {BLOCK_HINT.format(name=plugin)}"
        super().__init__(f"plugin {plugin}: {message}{hint}")
        self.plugin = plugin
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.plugin, self.message), dict(self.__dict__))


def describe(exc: BaseException) -> str:
    """An exception's message on one line.

    attrs' validators raise ``ValueError(message, attribute, ...)``; only the
    message is for the user, not the ``Attribute(...)`` repr that follows.
    """
    if isinstance(exc, HPError):
        return str(exc)
    text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    return " ".join(text.split())


def call_plugin(plugin: str, what: str, function: Any, *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)``, a plugin's code: anything it raises but an :class:`HPError`
    (``SystemExit`` included) becomes a :class:`PluginError` naming *plugin* and *what* it was doing."""
    try:
        return function(*args, **kwargs)
    except HPError:
        raise
    except (Exception, SystemExit) as exc:
        happened = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else f"raised {type(exc).__name__}: {describe(exc)}"
        raise PluginError(plugin, f"{what} {happened}") from exc
