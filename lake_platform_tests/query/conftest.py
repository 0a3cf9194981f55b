"""The query tests run over the Flight tests' two-tenant catalog (see
``lake_platform_tests.flight.conftest``): the same module-scoped ``lake`` fixture, one per module.
How often an engine planned is ``engine.work.plannings`` (``lake_query_plannings_total``)."""

from __future__ import annotations

from lake_platform_tests.flight.conftest import lake

__all__ = ["lake"]
