"""Input and output at the engine's edge.

In: config files structured into specs (:mod:`~hp_core.io.convert`), a config's
names resolved into a job (:mod:`~hp_core.io.job`), cases files of measured runs
read and checked (:mod:`~hp_core.io.validate`). Out: what the engine computes,
written as tables, JSON, CSV and plots (:mod:`~hp_core.io.report`,
:mod:`~hp_core.io.census_report`, :mod:`~hp_core.io.recompute_output`,
:mod:`~hp_core.io.potentials_output`, :mod:`~hp_core.io.search_output`; files
written atomically by :mod:`~hp_core.io.files`). The engine never imports this
package.
"""
