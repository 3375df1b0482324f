"""The built-in plugins of hp-planner, registered through the same hooks a third party uses.

By responsibility: :mod:`~hp_plugins.kit` (the public, versioned building blocks
a plugin author may import), :mod:`~hp_plugins.kinds` (layer kinds),
:mod:`~hp_plugins.census` (census sources), :mod:`~hp_plugins.runtimes`
(runtimes and their timing profiles), :mod:`~hp_plugins.hardware` (hardware
presets and GEMM tables, with their data), :mod:`~hp_plugins.models` (the
Hugging Face model format and the model presets), :mod:`~hp_plugins.exporters`
(trainer plan exporters) and :mod:`~hp_plugins.cases` (measured-case formats).
Only :mod:`hp_plugins.kit` carries a stability promise (semantic versioning: its
names change only with a major version); the rest is hp-planner's implementation.
"""
