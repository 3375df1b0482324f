"""The pluggy markers of the ``hp`` project.

A plugin marks its hook implementations with :data:`hookimpl`; the specs in
:mod:`hp_core.hookspecs` are marked with :data:`hookspec`.
"""

import pluggy

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "hp"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
