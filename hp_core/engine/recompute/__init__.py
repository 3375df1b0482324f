"""Recompute: plans, their layer layout, potentials and (elsewhere) the planner (docs/recompute.md)."""
