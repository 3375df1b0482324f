"""Trainer plan exporters: a recompute plan written as one trainer runs it (hook ``hp_exporters``).

One module per trainer: :mod:`~hp_plugins.exporters.megatron` (Megatron-LM
flags), :mod:`~hp_plugins.exporters.hyperparallel` (HyperParallel's
``activation_checkpoint`` mode with per-layer exceptions) and
:mod:`~hp_plugins.exporters.torchtitan` (torchtitan's ``[activation_checkpoint]``
TOML section). docs/trainer_plans.md states what each trainer runs.
"""
