"""The ``events`` table most REST handler tests start from; a test module that needs more
history overrides the fixture, building on this one."""

from __future__ import annotations

import lance
import pytest

from lake_platform_tests.rest.clients import rows
from lake_platform_tests.rest.conftest import RestLake
from lake_platform_tests.rest.handlers.events import T, client


@pytest.fixture
def events(rest_lake: RestLake) -> RestLake:
    """``p.w.ns.events`` at version 1: ids 1-3 (tag ``x``), created through pylance by the writer."""
    lance.write_dataset(rows([1, 2, 3]), namespace_client=client(rest_lake), table_id=T, mode="create")
    return rest_lake
