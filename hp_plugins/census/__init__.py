"""The built-in census sources (hook ``hp_census_sources``).

:mod:`~hp_plugins.census.formulas` (``formulas``: no records, every kind priced
by its formulas), :mod:`~hp_plugins.census.file` (``file``: records read from a
YAML/JSON census file) and :mod:`~hp_plugins.census.torch` (``torch``: measured
from transformers' layers under ``FakeTensorMode``; its layers and tracker in
:mod:`~hp_plugins.census.torch_layers` and :mod:`~hp_plugins.census.torch_tracing`).
docs/census.md describes them.
"""
