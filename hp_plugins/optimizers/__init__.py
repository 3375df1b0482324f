"""The built-in optimizers (hook ``hp_optimizers``): what each keeps per parameter and what its step costs.

:mod:`~hp_plugins.optimizers.adam` (``adamw``, ``adam``, ``adam8bit``),
:mod:`~hp_plugins.optimizers.sgd` (``sgd``, ``sgd_momentum``),
:mod:`~hp_plugins.optimizers.adafactor` and :mod:`~hp_plugins.optimizers.muon`,
registered as built-in plugins through the same hook a third party
implements; :mod:`~hp_plugins.optimizers.update` holds the memory-bound
update's traffic they share. docs/hooks/hp_optimizers.md states each one's
figures and sources.
"""
