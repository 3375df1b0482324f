"""The built-in hardware: the presets (hook ``hp_hardware``) and the B200 and H100 GEMM tables, read from package data.

:mod:`~hp_plugins.hardware.presets` turns ``data/hardware.json`` into
:class:`~hp_core.types.HardwarePreset` records; :mod:`~hp_plugins.hardware.gemm_b200`
reads ``data/gemm_b200.json`` (SimuMax's measured B200 GEMM efficiencies) and
:mod:`~hp_plugins.hardware.gemm_h100` ``data/gemm_h100_xla.json`` (OpenXLA's measured H100 bf16 GEMM
rates), which :mod:`hp_plugins.runtimes.timing_profiles` uses.
"""
