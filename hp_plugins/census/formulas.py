"""The ``formulas`` census source: no measured records, so every kind is priced by its formulas."""

from __future__ import annotations

from typing import Mapping

from hp_core.markers import hookimpl
from hp_core.types import CensusRecord, CensusRequest, CensusSource

__all__ = ["hp_census_sources", "provide_formulas"]


def provide_formulas(request: CensusRequest) -> Mapping[str, CensusRecord]:
    """No records: the planner then uses each kind's own analytic terms."""
    return {}


@hookimpl
def hp_census_sources():
    yield CensusSource(
        name="formulas",
        provide=provide_formulas,
        description="analytic per-op terms of each layer kind (Korthikanti et al. 2022 and the kinds' docs)",
    )
