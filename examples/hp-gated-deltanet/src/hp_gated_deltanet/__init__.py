"""hp-gated-deltanet: Gated DeltaNet linear-attention layer kinds for hp-planner.

An example of a third-party hp-planner plugin (see hp-planner's docs/plugins.md):
the layer kinds live in :mod:`hp_gated_deltanet.deltanet`, the hook that yields them
in :mod:`hp_gated_deltanet.plugin` (the ``hp`` entry point), and the mapping of a
Qwen3-Next ``config.json`` to a hybrid layer stack in :mod:`hp_gated_deltanet.qwen3_next`.
"""

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("hp-gated-deltanet")
except PackageNotFoundError:  # pragma: no cover - imported from a source tree, not installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
