"""Built-in pipeline schedules (docs/schedules.md): GPipe, 1F1B, interleaved 1F1B, zero bubble and DualPipe."""
