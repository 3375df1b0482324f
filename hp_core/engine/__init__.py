"""The engine: a run prepared once, then estimated, timed, planned and searched.

The flow, every arrow one way::

    specs + registry -> prepare.prepare() -> PreparedRun
        -> estimate.estimate_run()      per-stage memory
        -> timing.step.time_run()       step time
        -> recompute.plan.plan_run()    fastest recompute plan that fits
        -> search.search()              every layout of a device count

Nothing here imports :mod:`hp_core.api` (the façade above it) or any plugin:
kinds, runtimes, census sources and model formats are reached through the
:class:`~hp_core.registry.Registry`.
"""
