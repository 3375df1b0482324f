"""The built-in measured-case formats (hook ``hp_case_formats``).

:mod:`~hp_plugins.cases.megatron_measured`: SimuMax's ``megatron_measured.json``
(measured Megatron-LM runs) as published; docs/validate.md.
"""
