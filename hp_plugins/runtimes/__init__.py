"""The built-in runtimes (hook ``hp_runtimes``) and the timing profiles they state.

:mod:`~hp_plugins.runtimes.generic`, :mod:`~hp_plugins.runtimes.megatron`,
:mod:`~hp_plugins.runtimes.fsdp2` and :mod:`~hp_plugins.runtimes.hyperparallel`,
each one runtime; :mod:`~hp_plugins.runtimes.timing_profiles` holds the
measured kernel and collective efficiencies they time a step with
(docs/runtimes.md, docs/time.md).
"""
