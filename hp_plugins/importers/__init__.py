"""Importers: model specs from other projects' formats."""
