"""hp-planner core: the plugin contract, the specs and the planner.

The public entry points are re-exported from :mod:`hp_core.api`.
"""

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("hp-planner")
except PackageNotFoundError:  # pragma: no cover - running from a bare source tree
    __version__ = "0+unknown"

__all__ = ["__version__"]
