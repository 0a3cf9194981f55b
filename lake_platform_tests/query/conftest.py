"""The query tests run over the Flight tests' two-tenant catalog (see
``lake_platform_tests.flight.conftest``): the same module-scoped ``lake`` fixture, one per module.
How often an engine planned is ``engine.sessions.lent`` (one context lent per planning)."""

from __future__ import annotations

from lake_platform_tests.flight.conftest import lake

__all__ = ["lake"]
