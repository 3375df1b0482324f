"""Recompute: plans, their layer layout, potentials and (elsewhere) the planner (DESIGN section 5)."""
