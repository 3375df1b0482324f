"""Errors the user can act on.

Every error a user can cause derives from :class:`HPError`. The command line
prints ``str(error)`` on one line and exits with status 2; nothing else of it
(no traceback) reaches the terminal.
"""

from __future__ import annotations

__all__ = ["ConfigError", "HPError", "PlanNotExecutable", "PluginError", "describe"]


class HPError(Exception):
    """A problem with the user's input or environment, stated on one line."""

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


class PluginError(HPError):
    """A plugin misbehaved: it raised, returned the wrong type, or clashes with another plugin.

    Args:
        plugin: The name of the plugin at fault (and of the other one, for a clash).
        message: What went wrong.
    """

    def __init__(self, plugin: str, message: str) -> None:
        super().__init__(f"plugin {plugin}: {message}")
        self.plugin = plugin
        self.message = message


def describe(exc: BaseException) -> str:
    """An exception's message on one line.

    attrs' validators raise ``ValueError(message, attribute, ...)``; only the
    message is for the user, not the ``Attribute(...)`` repr that follows.
    """
    if isinstance(exc, HPError):
        return str(exc)
    text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    return " ".join(text.split())
