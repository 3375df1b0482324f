"""Presentation: what the engine computes, written out as JSON, CSV, tables and plots."""
