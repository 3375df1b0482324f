"""Frozen attrs specs of a training job: model, parallel layout, precision, hardware, run."""

from hp_core.specs.hardware import HardwareSpec
from hp_core.specs.model import LayerGroup, ModelSpec
from hp_core.specs.parallel import SCHEDULES, ParallelSpec
from hp_core.specs.precision import PrecisionSpec
from hp_core.specs.run import RecomputeSpec, Setting

__all__ = [
    "HardwareSpec",
    "LayerGroup",
    "ModelSpec",
    "ParallelSpec",
    "PrecisionSpec",
    "RecomputeSpec",
    "SCHEDULES",
    "Setting",
]
