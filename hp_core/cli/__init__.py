"""The ``hp`` command line.

Every user error prints one line (``hp: error: <path>: <what to do>``) to
standard error and exits with status 2; no traceback.

The grammar, every command's flags and their argument types, is
:mod:`hp_core.cli.parser`; what the job commands share (a config from the
flags, a plan as a trainer runs it) is :mod:`hp_core.cli.jobs`. Each command
runs from its own module (:mod:`~hp_core.cli.estimate`,
:mod:`~hp_core.cli.listings` for ``plugins`` and ``models``,
:mod:`~hp_core.cli.validate`, :mod:`~hp_core.cli.census`,
:mod:`~hp_core.cli.recompute`, :mod:`~hp_core.cli.potentials`,
:mod:`~hp_core.cli.search`), imported only when that command runs, so
``import hp_core.cli`` and ``hp --help`` load no engine (docs/performance.md).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Sequence

from hp_core.cli.parser import DEFAULT_CONFIG, build_parser
from hp_core.errors import HPError

__all__ = ["DEFAULT_CONFIG", "build_parser", "main"]

# Each command: its module under hp_core.cli and the function there that runs it
# with (args, registry, console) and returns the exit status.
_COMMANDS = {
    "estimate": ("estimate", "estimate_command"),
    "plugins": ("listings", "plugins_command"),
    "models": ("listings", "models_command"),
    "validate": ("validate", "validate_command"),
    "census": ("census", "census_command"),
    "potentials": ("potentials", "potentials_command"),
    "recompute": ("recompute", "recompute_command"),
    "search": ("search", "search_command"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``hp``; returns the exit status (0 ok, 2 user error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from rich.console import Console

    from hp_core.api import build_registry

    module, function = _COMMANDS[args.command]
    command = getattr(importlib.import_module(f"{__name__}.{module}"), function)
    console = Console() if sys.stdout.isatty() else Console(width=132)
    try:
        registry = build_registry(entry_points=not args.no_entry_points, blocked=args.block_plugin,
                                  broken_ok=args.command == "plugins")
        return command(args, registry, console)
    except HPError as exc:
        sys.stderr.write(f"hp {args.command}: error: {exc}\n")
        return 2
    except SystemExit as exc:  # only a plugin's code calls sys.exit once the command runs
        sys.stderr.write(f"hp {args.command}: error: a plugin called sys.exit({exc.code!r}) while the command ran; "
                         "hp plugins lists the plugins, HP_BLOCK_PLUGINS=NAME runs without one\n")
        return 2
    except BrokenPipeError:
        # The reader went away (``hp ... --json | head``): stop quietly, as Python's docs advise.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
