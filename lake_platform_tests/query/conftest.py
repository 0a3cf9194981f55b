"""The query tests run over the Flight tests' two-tenant catalog (see
``lake_platform_tests.flight.conftest``): the same module-scoped ``lake`` fixture, one per module.
``plannings`` lists the SQL texts DataFusion planned during a test."""

from __future__ import annotations

from typing import Any

import pytest

from lake_platform_tests.flight.conftest import lake


@pytest.fixture
def plannings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL texts DataFusion planned (``planner.plan_in``), in order."""
    from lake_platform.query import planner

    seen: list[str] = []
    real = planner.plan_in

    def counting(session: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(sql)
        return real(session, sql, *args, **kwargs)

    monkeypatch.setattr(planner, "plan_in", counting)
    return seen


__all__ = ["lake", "plannings"]
